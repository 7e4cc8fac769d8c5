/*
 * jbatch.c: the event loop's side of writing: each journal's batch for the
 * loop pass (record headers encoded in place, bodies referenced), the
 * write position and segment rolls, and the end of a pass: its batches
 * handed to the writer (handoff.c), or written inline when the writer is
 * idle (w_group, jgroup.c); then taking back what the writer finished
 * (env_done), from the loop's events.  Loop thread only.
 */
#include "jio.h"
#include "jpriv.h"

#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "../lib/log.h"

/*
 * jenv_end_early: at most this many early batch ends per loop pass.  Ending
 * the batch after a connection's turn lets that client's reply go out
 * before the other connections of the pass are parsed, but costs a write
 * per connection where many clients share one journal; past the first
 * few, the rest of the pass shares one write.
 */
#ifndef EARLY_ENDS_MAX
#define EARLY_ENDS_MAX 4
#endif

static void jb_reset(struct jbatch *b)
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
	b->close = JCLOSE_NONE;
	b->err = 0;
	b->err_run = 0;
	b->relocated = 0;
	b->next = NULL;
}

void jb_free(struct jbatch *b)
{
	if (!b)
		return;
	jb_reset(b);
	free(b->buf);
	free(b->ents);
	free(b->runs);
	free(b->free_segs);
	free(b);
}

struct jbatch *jb_alloc(void)
{
	struct jbatch *b = tern_malloc(sizeof(*b));

	if (b)
		memset(b, 0, sizeof(*b));
	return b;
}

/* Makes b the journal's batch for this pass and registers it for the
 * hand-off at the end of the pass. */
static struct jbatch *jb_start(struct journal *j, struct jbatch *b)
{
	struct jenv *env = j->env;

	b->j = j;
	j->loop.cur = b;
	if (!j->loop.dirty) {
		j->loop.dirty = 1;
		j->loop.dnext = env->loop.dirty;
		env->loop.dirty = j;
	}
	if (!env->loop.pass_active) {
		env->loop.pass_active = 1;
		event_active(env->pass_ev, EV_WRITE, 0);
	}
	return b;
}

struct jbatch *jb_get(struct journal *j)
{
	struct jbatch *b = j->loop.cur;

	if (b)
		return b;
	if (j->loop.pool) {
		b = j->loop.pool;
		j->loop.pool = b->next;
		b->next = NULL;
	} else {
		b = jb_alloc();
		if (!b)
			return NULL;
	}
	return jb_start(j, b);
}

struct jbatch *jb_get_for_close(struct journal *j)
{
	struct jbatch *b = jb_get(j);

	if (!b && j->loop.last_b) {
		b = jb_start(j, j->loop.last_b);
		j->loop.last_b = NULL;
	}
	return b;
}

/* Reserves n bytes in the batch buffer; returns their offset or -1. */
static long jb_bytes(struct jbatch *b, size_t n)
{
	size_t off = b->len;

	if (jgrow((void **)&b->buf, &b->cap, b->len + n, 1) < 0)
		return -1;
	b->len += n;
	return (long)off;
}

/* Appends an entry to the batch, in the run of (seg, off). */
static struct bent *jb_ent(struct jbatch *b, struct journal *j, int is_new)
{
	struct brun *r = b->nrun ? &b->runs[b->nrun - 1] : NULL;

	if (jgrow((void **)&b->ents, &b->entcap, b->nent + 1, sizeof(*b->ents)) < 0)
		return NULL;
	if (is_new || !r || r->seg != j->loop.wseg) {
		if (jgrow((void **)&b->runs, &b->runcap, b->nrun + 1, sizeof(*b->runs)) < 0)
			return NULL;
		r = &b->runs[b->nrun++];
		r->seg = j->loop.wseg;
		r->off = (uint32_t)j->loop.woff;
		r->seg_size = j->loop.wseg_size;
		r->first = b->nent;
		r->n = 0;
		r->is_new = is_new;
	}
	r->n++;
	memset(&b->ents[b->nent], 0, sizeof(b->ents[0]));
	return &b->ents[b->nent++];
}

/* The size the current segment's fill rate asks of a segment (jpriv.h,
 * SEG_FILL_US): what the queue writes in SEG_FILL_US at the rate it has
 * written this segment so far, but no more than SEG_SEEN_X times what it
 * has written since it was opened, up to segment_size; 0 without a
 * segment, or in the first one the queue has started since it was opened. */
static uint64_t jseg_rate_size(struct journal *j, int64_t now)
{
	uint64_t took, want, seen, size = FIRST_SEG_SIZE, max = j->loop.opts.segment_size;

	if (!j->loop.wseg || !j->loop.seen_bytes)
		return 0;
	took = now > j->loop.wseg_start_us ? (uint64_t)(now - j->loop.wseg_start_us) : 0;
	if (took < SEG_RATE_MIN_US)
		took = SEG_RATE_MIN_US;
	want = j->loop.woff / took * SEG_FILL_US + j->loop.woff % took * SEG_FILL_US / took;
	seen = (j->loop.seen_bytes + j->loop.woff) * SEG_SEEN_X;
	if (want > seen)
		want = seen;
	while (size < want && size < max)
		size *= 2;
	return size < max ? size : max;
}

/* next_size becomes size if that is larger (jseg_target caps it). */
static void next_size_raise(struct journal *j, uint64_t size)
{
	if (size > __atomic_load_n(&j->atom.next_size, __ATOMIC_RELAXED))
		__atomic_store_n(&j->atom.next_size, size, __ATOMIC_RELEASE);
}

int jb_append(struct journal *j, struct jrec *r, struct item *it, uint64_t *pos)
{
	struct jbatch *b = jb_get(j);
	struct bent *e;
	long hoff;
	uint64_t size = jrec_size(r->len);

	if (!b)
		return TERN_ENOMEM;
	hoff = jb_bytes(b, JREC_HDR_SIZE);
	if (hoff < 0)
		return TERN_ENOMEM;
	e = jb_ent(b, j, 0);
	if (!e) {
		b->len -= JREC_HDR_SIZE;
		return TERN_ENOMEM;
	}
	r->seg = j->loop.wseg;
	jrec_encode(r, b->buf + hoff);
	e->hoff = (uint32_t)hoff;
	e->blen = r->len;
	e->pad = (uint8_t)(size - JREC_HDR_SIZE - r->len);
	e->it = it ? item_ref(it) : NULL;
	if (pos)
		*pos = JPOS(j->loop.wseg, j->loop.woff);
	j->loop.woff += size;
	if (j->loop.grow_at && j->loop.woff >= j->loop.grow_at) {
		/* before this batch reaches the writer, which prepares the
		 * next spare once it has written past the same point.  No
		 * spare for it is there yet: a dead segment becomes the spare
		 * only at the size planned, and a growing queue's earlier
		 * segments are smaller (were one there, w_take_spare would
		 * extend it to the size asked). */
		j->loop.grow_at = 0;
		next_size_raise(j, jseg_rate_size(j, jio.mono_us()));
	}
	if (r->type != JREC_PAD && r->type != JREC_SEGEND)
		j->loop.ckpt_dirty = 1;
	return 0;
}

/* The spare could not be prepared (full disk) and an add was refused: ask
 * the writer to retry now rather than at its next timed retry (at most
 * every 100 ms, so a stream of refused adds does not keep waking it). */
static void writer_kick(struct journal *j)
{
	struct jenv *env = j->env;
	int64_t now = mono_ms();

	if (now - j->loop.last_kick < 100)
		return;
	j->loop.last_kick = now;
	pthread_mutex_lock(&env->mu_lock);
	jwork_retry_now(j);
	writer_wake_unlock(env);
}

void jb_check_lost(struct journal *j)
{
	uint32_t lost = __atomic_load_n(&j->atom.lost_seg, __ATOMIC_ACQUIRE);

	if (!j->loop.wseg || lost != j->loop.wseg)
		return;
	for (size_t i = j->loop.nseg; i-- > 0;) {
		if (j->loop.segs[i].num == lost) {
			j->loop.segs[i].lost = 1;
			j->loop.segs[i].size = 0; /* (no file, or a torn one) */
			break;
		}
	}
	j->loop.wseg = 0;
	j->loop.prev_seg = j->loop.cur_prev; /* (the next one follows that one) */
}

/* Every segment keeps SEGEND_SIZE at its end for its SEGEND record. */
int jb_make_room(struct journal *j, uint64_t rsize, uint64_t keep)
{
	const struct journal_opts *o = &j->loop.opts;
	struct jbatch *b;
	struct bent *e;
	uint64_t nsize = jseg_target(j, o), rate_size, next, plain;
	uint32_t seg;
	int64_t now;
	long hoff;
	int rc;

	jb_check_lost(j);
	if (j->loop.wseg && j->loop.woff + rsize + keep + SEGEND_SIZE <= j->loop.wseg_size)
		return 0;
	now = jio.mono_us();
	rate_size = jseg_rate_size(j, now); /* (of the segment being left) */
	if (JSEG_HDR_SIZE + rsize + keep + SEGEND_SIZE > o->segment_size)
		return TERN_ETOOBIG;
	/* Larger than doubling gives (the rate's plan): only on a spare the
	 * writer has reserved, at the size it has (jpriv.h, FIRST_SEG_SIZE) */
	plain = __atomic_load_n(&j->atom.plain_size, __ATOMIC_RELAXED);
	if (o->prealloc != JOURNAL_PREALLOC_NONE && plain && nsize > plain) {
		uint64_t have = spare_get(j) == SP_READY
					? __atomic_load_n(&j->atom.spare_bytes, __ATOMIC_RELAXED)
					: 0;

		if (have < nsize)
			nsize = have > plain ? have : plain;
	}
	/* A record larger than a small early segment: take a full-size one
	 * (the smaller spare file simply grows as it is written). */
	if (JSEG_HDR_SIZE + rsize + keep + SEGEND_SIZE > nsize)
		nsize = o->segment_size;
	if (o->prealloc != JOURNAL_PREALLOC_NONE && spare_get(j) == SP_NOSPC) {
		writer_kick(j);
		return TERN_ENOSPC;
	}
	b = jb_get(j);
	if (!b)
		return TERN_ENOMEM;
	if (j->loop.wseg) {
		struct jrec end = { .type = JREC_SEGEND };
		struct jseg *left;

		rc = jb_append(j, &end, NULL, NULL);
		if (rc < 0)
			return rc;
		left = jseg_find(j, j->loop.wseg);
		if (left)
			left->end = j->loop.woff; /* read-behind reads no further */
		/* A segment left behind is often dead already (a queue with a
		 * small backlog): a checkpoint now frees it, rather than at the
		 * next interval, when a fast stream would have filled
		 * segments for a whole interval (disk use would be the write
		 * rate times checkpoint_interval_ms).  At the end of this pass,
		 * after its records are handed over. */
		if (j->loop.ckpt_now_ev && !j->loop.ckpt_soon) {
			j->loop.ckpt_soon = 1;
			event_active(j->loop.ckpt_now_ev, EV_WRITE, 0);
		}
	}
	seg = j->loop.last_seg + 1;
	rc = jseg_add(j, seg, nsize);
	if (rc < 0)
		return rc;
	hoff = jb_bytes(b, JSEG_HDR_SIZE);
	if (hoff < 0) {
		j->loop.nseg--;
		return TERN_ENOMEM;
	}
	if (j->loop.wseg) /* (a segment given up wrote nothing) */
		j->loop.seen_bytes += j->loop.woff;
	j->loop.last_seg = seg;
	j->loop.wseg = seg;
	j->loop.wseg_size = nsize;
	j->loop.wseg_start_us = now;
	/* (the rate counts from the second segment since open) */
	j->loop.grow_at = j->loop.seen_bytes ? jseg_spare_at(nsize) : 0;
	next = nsize * 2 < o->segment_size ? nsize * 2 : o->segment_size;
	__atomic_store_n(&j->atom.plain_size, next, __ATOMIC_RELAXED);
	__atomic_store_n(&j->atom.next_size, rate_size > next ? rate_size : next,
			 __ATOMIC_RELEASE);
	j->loop.woff = 0;
	e = jb_ent(b, j, 1);
	if (!e)
		return TERN_ENOMEM; /* leaves an empty run: harmless */
	jseg_header_encode(b->buf + hoff, seg, nsize, tern_now_ms(), j->loop.prev_seg,
			   o->prealloc == JOURNAL_PREALLOC_NONE ? 0 : JSEG_F_PREALLOC);
	j->loop.cur_prev = j->loop.prev_seg;
	j->loop.prev_seg = seg;
	e->hoff = (uint32_t)hoff;
	e->rawlen = JSEG_HDR_SIZE;
	j->loop.woff = JSEG_HDR_SIZE;
	/* the writer marks the spare PENDING when it consumes it */
	return 0;
}

uint64_t jb_reserve_cap(const struct journal *j)
{
	return j->loop.opts.segment_size / 4;
}

uint64_t jb_tail_pos(const struct journal *j)
{
	if (j->loop.wseg)
		return JPOS(j->loop.wseg, j->loop.woff);
	return JPOS(j->loop.last_seg + 1, JSEG_HDR_SIZE);
}

/* Pads the batch with a PAD record to a 4 KiB boundary (see pad_ticketed
 * in struct jsync_policy).  Skipped when the segment has no room. */
static void jb_align(struct journal *j)
{
	uint64_t gap;
	struct jrec pad = { .type = JREC_PAD };

	if (!j->loop.wseg || (j->loop.woff & (JALIGN_BLOCK - 1)) == 0)
		return;
	gap = JALIGN_BLOCK - (j->loop.woff & (JALIGN_BLOCK - 1));
	if (gap < JREC_HDR_SIZE)
		gap += JALIGN_BLOCK;
	if (j->loop.woff + gap + j->loop.reserve + SEGEND_SIZE > j->loop.wseg_size)
		return;
	pad.len = (uint32_t)(gap - JREC_HDR_SIZE);
	jb_append(j, &pad, NULL, NULL);
}

/*
 * Whether list may be written on the loop thread (loop_write_inline): its
 * mode's policy allows it (inline_write: page-cache writes, and in always
 * and odsync the one synced write of a lone client's set), and no batch
 * carries a checkpoint (an LMDB commit syncs), a close, a new segment
 * (activating one renames the spare and syncs the directory, and the
 * spare is the writer thread's), or a journal whose segment descriptor the
 * cache closed.  Called under wlock: w.dsync and
 * w.fd are read under it.
 */
static int inline_ok(struct jbatch *list, int lone)
{
	struct jbatch *b;
	int nsynced = 0;

	for (b = list; b; b = b->next) {
		enum jinline how = (enum jinline)jpolicy(b->sync)->inline_write;
		int synced = b->ticket || b->j->w.dsync;

		nsynced += synced;
		/* (one sync at most: odsync's batches without tickets are
		 * synchronous writes too) */
		if (how == JINLINE_LONE && synced && (!lone || nsynced > 1))
			return 0;
		/* nor an open(2): one that finds no descriptor free waits for
		 * one (jseg_open), which the loop must never do */
		if (b->ckpt || b->close || failed_get(b->j) || b->j->w.fd < 0)
			return 0;
		for (size_t i = 0; i < b->nrun; i++)
			if (b->runs[i].is_new)
				return 0;
	}
	return 1;
}

/*
 * THE LOOP'S INLINE WRITE.  Rule: the loop thread may run the writer's
 * group code (w_group) itself only when (1) it gets wlock with a try-lock,
 * so it never waits for the writer; (2) nothing is queued for the writer,
 * so records and tickets stay in order (the writer takes wlock before it
 * takes a list from its queue); and (3) inline_ok: page-cache writes only,
 * or (always, odsync) the synced write of a few sets that one client
 * alone waits for (lone: one client alone sends, jenv_set_solo, and one
 * jenv_note_waiter and at most LONE_MAX_SETS tickets since the last
 * hand-over; nobody else waits behind the loop's sync), and no
 * checkpoint, close or new segment.
 * Then it writes the pass's
 * batches and resolves their tickets at once, as redis writes its AOF
 * buffer before replies go out, saving two thread hand-offs per batch.
 * Returns 1 when list was written (and its tickets resolved), 0 when it
 * must go to the writer.
 */
static int loop_write_inline(struct jenv *env, struct jbatch *list, int lone)
{
	if (pthread_mutex_trylock(&env->wlock) != 0)
		return 0;
	if (!inline_ok(list, lone)) {
		pthread_mutex_unlock(&env->wlock);
		return 0;
	}
	if (!handoff_idle(env)) {
		pthread_mutex_unlock(&env->wlock);
		return 0;
	}
	/* (the writer is woken, from w_group, only when a journal's first
	 * unsynced write makes an interval sync due before it planned to
	 * wake: jwork_dirty) */
	w_group(env, list, 0); /* (nothing synced: no wait to plan) */
	pthread_mutex_unlock(&env->wlock);
	env_done(env);
	return 1;
}

/* Hands every dirty journal's batch over (all at once, so tickets reach
 * the writer in order). */
void env_handoff(struct jenv *env)
{
	struct journal *j, *next;
	struct jbatch *list = NULL, **tail = &list;
	/* one client waits, for a few sets: nobody else would wait behind the
	 * loop's sync, nor would its own next requests, which it sends once
	 * these are answered (a client streaming more sets keeps the writer,
	 * so that they are read while it syncs) */
	uint64_t nsets = env->loop.last_ticket - env->loop.ticket_handed;
	int lone = env->loop.solo && env->loop.waiters - env->loop.waiters_handed == 1 &&
		   nsets >= 1 && nsets <= LONE_MAX_SETS;

	env->loop.waiters_handed = env->loop.waiters;
	env->loop.ticket_handed = env->loop.last_ticket;
	for (j = env->loop.dirty; j; j = next) {
		struct jbatch *b = j->loop.cur;

		next = j->loop.dnext;
		/* pad before clearing j->loop.dirty: the PAD goes into this
		 * batch.  Only batches someone waits for are synchronous
		 * writes. */
		if (b && b->ticket && jpolicy(b->sync)->pad_ticketed)
			jb_align(j);
		j->loop.dirty = 0;
		j->loop.dnext = NULL;
		if (!b)
			continue;
		b->end_pos = jb_tail_pos(j);
		j->loop.cur = NULL;
		*tail = b;
		tail = &b->next;
	}
	env->loop.dirty = NULL;
	if (!list)
		return;
	if (loop_write_inline(env, list, lone))
		return;
	handoff_queue(env, list, tail);
}

void jenv_note_waiter(struct jenv *env)
{
	env->loop.waiters++;
}

void jenv_set_solo(struct jenv *env, int solo)
{
	env->loop.solo = solo != 0;
}

void jenv_set_group_wait(struct jenv *env, uint32_t max_us)
{
	__atomic_store_n(&env->atom.group_wait_us, max_us, __ATOMIC_RELAXED);
}

void env_pass_cb(evutil_socket_t fd, short what, void *arg)
{
	struct jenv *env = arg;

	env->loop.pass_active = 0;
	env->loop.pass_acks = 0;
	env->loop.pass_early = 0;
	env_handoff(env);
}

void jenv_end_early(struct jenv *env)
{
	if (!env->loop.pass_acks || env->loop.pass_early >= EARLY_ENDS_MAX)
		return;
	/* pass_ev stays active: it hands over whatever follows */
	env->loop.pass_early++;
	env->loop.pass_acks = 0;
	env_handoff(env);
}

/* Puts segments a failed batch's checkpoint was to free (it was not
 * committed) back at the front of j's list, where they came from. */
static void jb_segs_back(struct journal *j, struct jbatch *b)
{
	if (!b->nfree || jgrow((void **)&j->loop.segs, &j->loop.segcap, j->loop.nseg + b->nfree,
			       sizeof(*j->loop.segs)) < 0)
		return; /* (without memory they stay on disk until a restart) */
	memmove(j->loop.segs + b->nfree, j->loop.segs, j->loop.nseg * sizeof(*j->loop.segs));
	for (size_t i = 0; i < b->nfree; i++) {
		j->loop.segs[i] = b->free_segs[i];
		if (!b->free_segs[i].lost)
			jseg_reclaimed(j, &b->free_segs[i]); /* (counted as live again) */
	}
	j->loop.nseg += b->nfree;
	b->nfree = 0;
}

/*
 * Batch b came back failed (b->err): the records of its runs from
 * b->err_run on may not be on disk, and the sets they carried are
 * answered SERVER_ERROR.  Their items leave the queue (the lost callback;
 * journal.h), so no reader gets one; an item a reader already holds open
 * stays with it.  The runs before b->err_run were written (the segment
 * after them found no room): their sets succeed, and the write position
 * passes them.  Its checkpoint was not committed: the segments it was to
 * free are the journal's again.  (Its other records, removes and opens,
 * are lost: after a restart those items may be delivered again, at least
 * once.)
 */
static void jb_undo(struct journal *j, struct jbatch *b)
{
	for (size_t ri = 0; ri < b->nrun; ri++) {
		const struct brun *r = &b->runs[ri];
		uint64_t pos = JPOS(r->seg, r->off);

		for (size_t i = r->first; i < r->first + r->n; i++) {
			const struct bent *e = &b->ents[i];
			struct jrec rec;
			struct jent *x;
			int in_memory = 0;

			if (e->rawlen) {
				pos += e->rawlen;
				continue;
			}
			if (e->ticket && ri >= b->err_run) /* an add or a flush (compaction's
							      * copies have none) */
				jrec_decode(b->buf + e->hoff, &rec);
			if (e->ticket && ri >= b->err_run && rec.type == JREC_ADD) {
				x = jmap_get(&j->loop.idx, rec.id);
				if (x && x->pos == pos && !(x->flags & JENT_OPEN)) {
					jent_flags_set(j, x, 0);
					jmap_del(&j->loop.idx, rec.id);
					in_memory = 1;
				}
				if (in_memory || jbehind_drop(j, pos)) {
					if (j->loop.live_items)
						j->loop.live_items--;
					j->loop.live_bytes -= rec.ilen <= j->loop.live_bytes
								      ? rec.ilen : j->loop.live_bytes;
					j->loop.ckpt_dirty = 1;
					if (j->loop.lost_fn)
						j->loop.lost_fn(j->loop.lost_arg, rec.id, rec.ilen,
								in_memory);
				}
			}
			pos += JREC_HDR_SIZE + e->blen + e->pad;
		}
		if (ri < b->err_run && r->n && pos > j->loop.written_pos)
			j->loop.written_pos = pos;
	}
	if (b->ckpt && !b->close)
		jb_segs_back(j, b);
}

void env_done(struct jenv *env)
{
	struct jbatch *list, *b, *next;
	struct jcompl *c;
	size_t n, cap;

	list = handoff_take_done(env, &c, &n, &cap);
	for (b = list; b; b = next) {
		struct journal *j = b->j;

		next = b->next;
		if (b->err)
			jb_undo(j, b);
		else if (b->end_pos > j->loop.written_pos)
			j->loop.written_pos = b->end_pos;
		jbehind_pop_written(j);
		jb_reset(b);
		b->next = j->loop.pool;
		j->loop.pool = b;
	}
	for (size_t i = 0; i < n; i++)
		if (env->durable)
			env->durable(env->arg, c[i].upto, c[i].err);
	handoff_keep_compl(env, c, cap);
}

void env_done_cb(evutil_socket_t fd, short what, void *arg)
{
	env_done(arg);
}

int env_events_open(struct jenv *env)
{
	env->loop_thr = pthread_self();
	env->pass_ev = event_new(env->base, -1, 0, env_pass_cb, env);
	env->done_ev = event_new(env->base, -1, 0, env_done_cb, env);
	if (!env->pass_ev || !env->done_ev)
		return TERN_ENOMEM;
	env->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (env->wake_fd < 0)
		return TERN_ESYS;
	env->wake_ev = event_new(env->base, env->wake_fd, EV_READ | EV_PERSIST, env_wake_cb, env);
	if (!env->wake_ev)
		return TERN_ENOMEM;
	if (event_add(env->wake_ev, NULL) < 0)
		return TERN_ESYS;
	return 0;
}

void env_events_close(struct jenv *env)
{
	if (env->pass_ev)
		event_free(env->pass_ev);
	if (env->done_ev)
		event_free(env->done_ev);
	if (env->wake_ev)
		event_free(env->wake_ev);
	if (env->wake_fd >= 0)
		close(env->wake_fd);
	env->pass_ev = env->done_ev = env->wake_ev = NULL;
	env->wake_fd = -1;
}

void env_wake_cb(evutil_socket_t fd, short what, void *arg)
{
	struct jenv *env = arg;

	handoff_woken(env);
	env_done(env);
}
