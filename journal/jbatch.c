/* jbatch.c: the loop's batches and their hand-off to the writer (moved from journal.c). */
#include "jpriv.h"

#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "catalog.h"
#include "jio.h"

static void batch_reset(struct jbatch *b)
{
	for (size_t i = 0; i < b->nent; i++) {
		item_unref(b->ents[i].it);
		b->ents[i].it = NULL;
	}
	b->len = b->nent = b->nrun = b->nfree = 0;
	b->ticket = 0;
	b->end_pos = 0;
	free(b->ckpt);
	b->ckpt = NULL;
	b->ckpt_len = 0;
	b->close = 0;
	b->err = 0;
	b->next = NULL;
}

void batch_free(struct jbatch *b)
{
	if (!b)
		return;
	batch_reset(b);
	free(b->buf);
	free(b->ents);
	free(b->runs);
	free(b->free_segs);
	free(b);
}

/* The journal's batch for this pass; registers it for the hand-off. */
struct jbatch *batch_get(struct journal *j)
{
	struct jenv *env = j->env;
	struct jbatch *b = j->cur;

	if (b)
		return b;
	if (j->pool) {
		b = j->pool;
		j->pool = b->next;
		b->next = NULL;
	} else {
		b = calloc(1, sizeof(*b));
		if (!b)
			return NULL;
	}
	b->j = j;
	j->cur = b;
	if (!j->dirty) {
		j->dirty = 1;
		j->dnext = env->dirty;
		env->dirty = j;
	}
	if (!env->pass_active) {
		env->pass_active = 1;
		event_active(env->pass_ev, EV_WRITE, 0);
	}
	return b;
}

/* Reserves n bytes in the batch buffer; returns their offset or -1. */
static long batch_bytes(struct jbatch *b, size_t n)
{
	size_t off = b->len;

	if (grow((void **)&b->buf, &b->cap, b->len + n, 1) < 0)
		return -1;
	b->len += n;
	return (long)off;
}

/* Appends an entry to the batch, in the run of (seg, off). */
static struct bent *batch_ent(struct jbatch *b, struct journal *j, int is_new)
{
	struct brun *r = b->nrun ? &b->runs[b->nrun - 1] : NULL;

	if (grow((void **)&b->ents, &b->entcap, b->nent + 1, sizeof(*b->ents)) < 0)
		return NULL;
	if (is_new || !r || r->seg != j->wseg) {
		if (grow((void **)&b->runs, &b->runcap, b->nrun + 1, sizeof(*b->runs)) < 0)
			return NULL;
		r = &b->runs[b->nrun++];
		r->seg = j->wseg;
		r->off = (uint32_t)j->woff;
		r->seg_size = j->wseg_size;
		r->first = b->nent;
		r->n = 0;
		r->is_new = is_new;
	}
	r->n++;
	memset(&b->ents[b->nent], 0, sizeof(b->ents[0]));
	return &b->ents[b->nent++];
}

/* Appends record r (body from it, or zeros for PAD) at the write position.
 * The caller made room.  Takes a reference on it.  *pos gets its position. */
int rec_append(struct journal *j, struct jrec *r, struct item *it,
		      uint64_t *pos)
{
	struct jbatch *b = batch_get(j);
	struct bent *e;
	long hoff;
	uint64_t size = jrec_size(r->len);

	if (!b)
		return TERN_ENOMEM;
	hoff = batch_bytes(b, JREC_HDR_SIZE);
	if (hoff < 0)
		return TERN_ENOMEM;
	e = batch_ent(b, j, 0);
	if (!e) {
		b->len -= JREC_HDR_SIZE;
		return TERN_ENOMEM;
	}
	r->seg = j->wseg;
	jrec_encode(r, b->buf + hoff);
	e->hoff = (uint32_t)hoff;
	e->blen = r->len;
	e->pad = (uint8_t)(size - JREC_HDR_SIZE - r->len);
	e->it = it ? item_ref(it) : NULL;
	if (pos)
		*pos = JPOS(j->wseg, j->woff);
	j->woff += size;
	if (r->type != JREC_PAD && r->type != JREC_SEGEND)
		j->ckpt_dirty = 1;
	return 0;
}

static void writer_kick(struct journal *j)
{
	struct jenv *env = j->env;
	int64_t now = mono_ms();

	if (now - j->last_kick < 100)
		return;
	j->last_kick = now;
	pthread_mutex_lock(&env->mu);
	j->sp_retry_at = 0;
	wake_writer_unlock(env);
}

/*
 * Makes room for rsize bytes followed by keep free bytes (the reserve) in
 * the current segment, rolling to the next one when needed.  Every segment
 * also keeps SEGEND_SIZE at its end for the SEGEND record.  Returns 0,
 * TERN_ENOSPC (no next segment available), TERN_ETOOBIG, TERN_ENOMEM.
 */

int make_room(struct journal *j, uint64_t rsize, uint64_t keep)
{
	struct jbatch *b;
	struct bent *e;
	uint64_t nsize = seg_target(j);
	uint32_t seg;
	long hoff;
	int rc;

	if (j->wseg && j->woff + rsize + keep + SEGEND_SIZE <= j->wseg_size)
		return 0;
	if (JSEG_HDR_SIZE + rsize + keep + SEGEND_SIZE > j->opts.segment_size)
		return TERN_ETOOBIG;
	/* A record larger than a small early segment: take a full-size one
	 * (the smaller spare file simply grows as it is written). */
	if (JSEG_HDR_SIZE + rsize + keep + SEGEND_SIZE > nsize)
		nsize = j->opts.segment_size;
	if (j->opts.prealloc != JOURNAL_PREALLOC_NONE && spare_get(j) == SP_NOSPC) {
		writer_kick(j);
		return TERN_ENOSPC;
	}
	b = batch_get(j);
	if (!b)
		return TERN_ENOMEM;
	if (j->wseg) {
		struct jrec end = { .type = JREC_SEGEND };

		rc = rec_append(j, &end, NULL, NULL);
		if (rc < 0)
			return rc;
	}
	seg = j->last_seg + 1;
	rc = segs_add(j, seg, nsize);
	if (rc < 0)
		return rc;
	hoff = batch_bytes(b, JSEG_HDR_SIZE);
	if (hoff < 0) {
		j->nseg--;
		return TERN_ENOMEM;
	}
	j->last_seg = seg;
	j->wseg = seg;
	j->wseg_size = nsize;
	__atomic_store_n(&j->next_size,
			 nsize * 2 < j->opts.segment_size ? nsize * 2 : j->opts.segment_size,
			 __ATOMIC_RELEASE);
	j->woff = 0;
	e = batch_ent(b, j, 1);
	if (!e)
		return TERN_ENOMEM; /* leaves an empty run: harmless */
	jseg_header_encode(b->buf + hoff, seg, nsize, tern_now_ms());
	e->hoff = (uint32_t)hoff;
	e->rawlen = JSEG_HDR_SIZE;
	j->woff = JSEG_HDR_SIZE;
	/* the writer marks the spare PENDING when it consumes it */
	return 0;
}

uint64_t reserve_cap(const struct journal *j)
{
	return j->opts.segment_size / 4;
}

uint64_t tail_pos(const struct journal *j)
{
	if (j->wseg)
		return JPOS(j->wseg, j->woff);
	return JPOS(j->last_seg + 1, JSEG_HDR_SIZE);
}

/* Pads the batch to a 4 KiB boundary (always/odsync: each batch is one
 * synchronous write, and aligned 4 KiB-multiple writes measured up to 4x
 * faster than unaligned ones).  Skipped when the segment has no room. */
static void batch_align(struct journal *j)
{
	uint64_t gap;
	struct jrec pad = { .type = JREC_PAD };

	if (!j->wseg || (j->woff & (JALIGN_BLOCK - 1)) == 0)
		return;
	gap = JALIGN_BLOCK - (j->woff & (JALIGN_BLOCK - 1));
	if (gap < JREC_HDR_SIZE)
		gap += JALIGN_BLOCK;
	if (j->woff + gap + j->reserve + SEGEND_SIZE > j->wseg_size)
		return;
	pad.len = (uint32_t)(gap - JREC_HDR_SIZE);
	rec_append(j, &pad, NULL, NULL);
}

/* Whether list may be written on the loop thread: only page-cache writes
 * (sync none/interval, or in always a batch nobody waits for: removes and
 * opens, which the next synced batch covers), no checkpoint (an LMDB commit
 * syncs), no close, and no new segment (activating one renames the spare
 * and syncs the directory).  Under wlock (w_fd_dsync is the writer's). */
static int inline_ok(struct jbatch *list)
{
	struct jbatch *b;

	for (b = list; b; b = b->next) {
		if (journal_sync_waits(b->sync) &&
		    (b->sync != JOURNAL_SYNC_ALWAYS || b->ticket || b->j->w_fd_dsync))
			return 0;
		if (b->ckpt || b->close || failed_get(b->j))
			return 0;
		/* opening a segment syncs the directory (the new name must
		 * survive a crash): that is the writer's job */
		for (size_t i = 0; i < b->nrun; i++)
			if (b->runs[i].is_new)
				return 0;
	}
	return 1;
}

/*
 * The fast path for sync none/interval (as redis writes its AOF buffer
 * before replies go out): when the writer thread is idle, the loop thread
 * does the page-cache write itself and resolves the tickets at once,
 * saving two thread hand-offs per batch (measured: a pipelined client went
 * from ~65k to ~150k sets/s).  The loop never waits for the writer: it
 * only try-locks wlock, which the writer holds for every write, sync and
 * spare step, and it writes only when nothing is queued for the writer,
 * so records and tickets stay in order (the writer takes wlock before it
 * takes a list from the queue).  Syncs and preallocation stay on the
 * writer.  Returns 1 when list was written (and its tickets resolved).
 */
int env_write_inline(struct jenv *env, struct jbatch *list)
{
	int idle;

	if (pthread_mutex_trylock(&env->wlock) != 0)
		return 0;
	if (!inline_ok(list)) {
		pthread_mutex_unlock(&env->wlock);
		return 0;
	}
	pthread_mutex_lock(&env->mu);
	idle = env->q_head == NULL && !env->stop;
	pthread_mutex_unlock(&env->mu);
	if (!idle) {
		pthread_mutex_unlock(&env->wlock);
		return 0;
	}
	w_group(env, list);
	pthread_mutex_unlock(&env->wlock);
	/* Wake the writer only when it must sync (interval) sooner than it
	 * planned to wake (segment rolls never come this way: see
	 * inline_ok).  Waking it every pass would cost a context switch per
	 * pass. */
	{
		int64_t now = mono_ms(), due = 0;
		struct jbatch *b;

		for (b = list; b; b = b->next) {
			if (b->sync == JOURNAL_SYNC_INTERVAL) {
				int64_t d = now + b->j->opts.sync_interval_ms;

				if (!due || d < due)
					due = d;
			}
		}
		pthread_mutex_lock(&env->mu);
		if (env->w_wake_at && due && env->w_wake_at > due)
			wake_writer_unlock(env);
		else
			pthread_mutex_unlock(&env->mu);
	}
	env_done(env);
	return 1;
}

/* Hands every dirty journal's batch to the writer (all at once, so tickets
 * reach the writer in order). */
void env_handoff(struct jenv *env)
{
	struct journal *j, *next;
	struct jbatch *list = NULL, **tail = &list;

	for (j = env->dirty; j; j = next) {
		struct jbatch *b = j->cur;

		next = j->dnext;
		/* pad before clearing j->dirty: the PAD goes into this batch.
		 * Only batches someone waits for are synchronous writes. */
		if (b && b->ticket && journal_sync_waits(b->sync))
			batch_align(j);
		j->dirty = 0;
		j->dnext = NULL;
		if (!b)
			continue;
		b->end_pos = tail_pos(j);
		j->cur = NULL;
		*tail = b;
		tail = &b->next;
	}
	env->dirty = NULL;
	if (!list)
		return;
	if (env_write_inline(env, list))
		return;
	pthread_mutex_lock(&env->mu);
	*env->q_tail = list;
	env->q_tail = tail;
	wake_writer_unlock(env);
}

void pass_cb(evutil_socket_t fd, short what, void *arg)
{
	struct jenv *env = arg;

	env->pass_active = 0;
	env->pass_acks = 0;
	env->pass_early = 0;
	env_handoff(env);
}

void jenv_end_early(struct jenv *env)
{
	if (!env->pass_acks || env->pass_early >= EARLY_ENDS_MAX)
		return;
	/* pass_ev stays active: it hands over whatever follows */
	env->pass_early++;
	env->pass_acks = 0;
	env_handoff(env);
}

/* Processes what the writer finished: on the loop thread. */
void env_done(struct jenv *env)
{
	struct jbatch *list, *b, *next;
	struct jcompl *c;
	size_t n, cap;

	/* The completions array is swapped with a spare one, not handed
	 * over and freed: no allocation per group.  (A nested call, from a
	 * durable callback, finds no spare and the writer allocates anew.) */
	pthread_mutex_lock(&env->mu);
	list = env->d_head;
	env->d_head = NULL;
	env->d_tail = &env->d_head;
	c = env->compl;
	n = env->ncompl;
	cap = env->complcap;
	env->compl = env->spare_compl;
	env->complcap = env->spare_complcap;
	env->ncompl = 0;
	env->spare_compl = NULL;
	env->spare_complcap = 0;
	pthread_mutex_unlock(&env->mu);
	for (b = list; b; b = next) {
		struct journal *j = b->j;

		next = b->next;
		if (b->end_pos > j->written_pos)
			j->written_pos = b->end_pos;
		bp_pop_written(j);
		batch_reset(b);
		b->next = j->pool;
		j->pool = b;
	}
	for (size_t i = 0; i < n; i++)
		if (env->durable)
			env->durable(env->arg, c[i].upto, c[i].err);
	if (!env->spare_compl) { /* the spare is the loop's alone */
		env->spare_compl = c;
		env->spare_complcap = cap;
		c = NULL;
	}
	free(c);
}

void done_cb(evutil_socket_t fd, short what, void *arg)
{
	env_done(arg);
}
