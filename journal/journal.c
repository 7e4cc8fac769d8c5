/*
 * journal.c: per-queue journals, the writer thread, recovery, checkpoints.
 *
 * DESIGN (details and the on-disk format: docs/JOURNAL.md)
 *
 * Loop thread: journal_add() and friends encode a record header into the
 * journal's current batch (a growing buffer reused from pass to pass) and
 * reference the item body instead of copying it.  The loop assigns every
 * record its position (segment number, offset), so it knows where each
 * item lives without asking the writer.  The first append of a pass
 * activates env->pass_ev; its callback (which runs after the callbacks of
 * that pass) hands every dirty journal's batch to the writer at once.
 *
 * Writer thread: takes every batch queued so far (the ones that arrived
 * while it was writing or syncing: group commit), writes each journal's
 * records with one pwritev per segment run, then fdatasyncs the segments of
 * `always` journals (`odsync` segments are opened O_DSYNC), commits attached
 * checkpoints to LMDB, frees dead segments, and reports back through
 * env->done_ev: the highest ticket covered and an error, and the finished
 * batches (which advance each journal's `written_pos` for read-behind).
 * When idle it prepares the next segment of each journal ahead of need
 * (zero-fill in 256 KiB steps, or fallocate) and does `interval` syncs.
 *
 * Failure policy: a failed write or sync marks the journal failed for good
 * (every later call returns TERN_EIO) and its tickets in that group are
 * resolved with TERN_EIO; the other journals of the group are answered as
 * usual (w_report).  Nothing is retried as if it had succeeded.
 * A spare segment that cannot be prepared (ENOSPC) makes journal_add return
 * TERN_ENOSPC once the current segment is full; removes keep working from
 * the room reserved by every add (beanstalkd's trick).  The writer retries
 * the preparation every second and whenever an add is refused.
 */
#include "journal.h"

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
#include "jdead.h"
#include "jmap.h"
#include "record.h"

#define SPARE_NAME "spare.seg"
/* Zero-fill step: small enough that a step between two group commits
 * delays the next one by well under a millisecond. */
#define ZERO_CHUNK (256u << 10)
#define SEGEND_SIZE JREC_HDR_SIZE /* jrec_size(0) */
#define SMALL_REC JREC_HDR_SIZE   /* REMOVE/OPEN/CONFIRM/ABORT/FLUSH */
#define RELOC_MAX_ITEMS 64        /* move at most this many items to free a segment */
#define NOSPC_RETRY_MS 1000
/*
 * jenv_end_early: at most this many early batch ends per loop pass.  Ending
 * the batch after each connection lets a client's reply go out before the
 * other connections of the pass are parsed (4 queues, 1 client each, 1 set
 * in flight: 43k -> 68k sets/s), but costs a write per connection where
 * many clients share one journal (64 connections: -10% sets/s when every
 * connection ended it); past the first few, the rest share one write.
 */
#ifndef EARLY_ENDS_MAX
#define EARLY_ENDS_MAX 4
#endif
#define FALLOC_CHUNK (8u << 20) /* fallocate step of a spare segment */
#define UNLINK_STEP (2u << 20)  /* truncation step of a dead segment */
#define SYNC_STEP (256u << 10)  /* writeback step of a sync (s_writeback_steps) */
#define CKPT_MAGIC 0x504b4354u /* "TCKP" */
#define CKPT_VERSION 1u

static const unsigned char zeros[ZERO_CHUNK];

enum spare_state { SP_NONE = 0, SP_PENDING, SP_READY, SP_NOSPC };

/* One record (or raw header block) in a batch. */
struct bent {
	uint32_t hoff;    /* offset of the header bytes in batch->buf */
	uint32_t blen;    /* body bytes (item data, or zeros for PAD) */
	uint32_t rawlen;  /* raw bytes (segment header block) instead of a record */
	uint8_t pad;      /* zero bytes after the body up to 8-byte alignment */
	struct item *it;  /* body reference held until written, or NULL */
	uint64_t ticket;  /* an ADD's ticket (0 for other records) */
};

/* Consecutive records of one segment, written with one pwritev. */
struct brun {
	uint32_t seg;
	uint32_t off;
	uint64_t seg_size;
	size_t first, n;
	int is_new; /* activate segment seg (spare -> %08u.seg) first */
};

struct jbatch {
	struct jbatch *next;
	struct journal *j;
	unsigned char *buf;
	size_t len, cap;
	struct bent *ents;
	size_t nent, entcap;
	struct brun *runs;
	size_t nrun, runcap;
	uint64_t ticket; /* highest ticket covered, 0 = none */
	enum journal_sync sync;
	uint64_t end_pos;
	unsigned char *ckpt; /* checkpoint blob to commit after the writes */
	size_t ckpt_len;
	uint32_t *free_segs; /* dead segments to reuse or unlink after ckpt */
	size_t nfree, freecap;
	int close;  /* 1 close the journal's files; 2 also: deleting (no ckpt) */
	int err;
};

struct bpend { /* read-behind item whose record is not known written yet */
	struct item *it;
	uint64_t pos;
};

struct jseg {
	uint32_t num;
	uint64_t size;
};

struct journal {
	struct jenv *env;
	char *name;
	char *dir;
	int dirfd;
	struct journal_opts opts;
	struct journal *lnext, *lprev; /* env->open list (loop) */
	struct journal *dnext;         /* env->dirty list (loop) */
	int dirty;

	/* loop side: write position */
	struct jbatch *cur, *pool;
	uint32_t last_seg; /* highest segment number used so far */
	uint32_t wseg;     /* current segment; 0 = none yet */
	uint64_t wseg_size;
	uint64_t woff;
	uint64_t reserve;  /* bytes kept free in wseg for future REMOVE/CONFIRM */
	uint64_t written_pos;
	struct jseg *segs;
	size_t nseg, segcap;

	/* loop side: what is live */
	struct jmap idx;   /* id -> ADD position, for in-memory live items */
	struct jdead dead; /* positions of dead ADD records at or after H */
	uint64_t live_items, live_bytes, max_id;
	uint64_t behind_items, behind_bytes, rb_pos;
	struct bpend *bp;
	size_t bp_head, bp_n, bp_cap;
	struct jreader rb;
	int rb_open, rb_clipped;
	struct event *ckpt_ev;
	int ckpt_dirty;
	int64_t last_kick;
	uint64_t dropped_records, corrupt_seen;

	/* writer side (w_* touched only by the writer thread, except under mu) */
	struct journal *wnext;  /* env->journals (under mu) */
	struct journal_opts w_opts; /* under mu */
	int w_fd;
	uint32_t w_seg;
	int w_fd_dsync;
	uint64_t w_dirty;    /* atomic: 0 = synced, else the w_gen of the last
			      * write not yet synced (the syncer clears it
			      * only if no write came since it looked) */
	uint64_t w_gen;      /* bumped by every write (under wlock) */
	uint64_t w_hi;       /* under wlock: end of what is written in w_seg */
	uint64_t w_sync_lo;  /* under wlock: where the next sync job's range starts */
	int64_t w_last_sync; /* atomic (the syncer sets it too) */
	int s_pending;       /* atomic: an interval sync is with the syncer */
	int sp_fd;
	uint64_t sp_done;
	int sp_reused;       /* the spare is a dead segment (see w_free_segs) */
	int64_t sp_retry_at; /* under mu */
	int w_closed;        /* under mu */
	int spare_state;     /* atomic */
	int failed;          /* atomic: 0 or TERN_EIO */
	uint64_t next_size;  /* atomic: size of the next segment (see seg_target) */

	/* stats, atomic */
	uint64_t st_records, st_syncs, st_errors;
};

struct jcompl {
	uint64_t upto;
	int err;
};

/*
 * A job for the syncer thread (s_main): the syncs whose results nobody
 * waits for (interval syncs, the sync of a segment left behind at a roll,
 * a directory sync in none/interval, the sync before a checkpoint) and
 * checkpoint commits.  They ran on the writer thread, and a set that
 * needed the writer meanwhile (a new segment, a checkpoint, a missed
 * try-lock) waited for them all: 4-30 ms stalls, open-loop set p99 8 ms.
 * Jobs run in order, so a checkpoint commits only after every sync posted
 * before it (the records it covers) succeeded.
 */
struct sjob {
	struct sjob *next;
	struct journal *j;
	int fd;              /* fdatasync this descriptor, then close it; -1 none */
	int kind;            /* what fd is: SJ_SEG, SJ_DIR, SJ_SPARE */
	int interval;        /* the writer's interval sync (clears s_pending) */
	uint64_t dirty;      /* w_dirty when fd was taken: cleared if unchanged */
	uint64_t lo, hi;     /* SJ_SEG: the bytes written since the last job */
	unsigned char *ckpt; /* then commit this checkpoint (owned) */
	size_t ckpt_len;
	uint32_t *free_segs; /* and hand these back to the writer to free, */
	size_t nfree;
	int unlink;          /* or (from the writer) unlink them */
};

struct jenv {
	char *dir;
	struct jcat *cat;
	struct event_base *base;
	struct event *pass_ev, *done_ev;
	jenv_durable_fn durable;
	void *arg;
	int pass_active;
	unsigned pass_acks;     /* adds this pass acknowledged without a sync */
	unsigned pass_early;    /* early ends of this pass (jenv_end_early) */
	uint64_t last_ticket;
	struct journal *open;  /* loop: every open journal */
	struct journal *dirty; /* loop: journals with a batch this pass */

	pthread_t thr;
	int thr_started;
	pthread_mutex_t wlock;  /* held by whoever writes: see env_write_inline */
	pthread_mutex_t mu;
	pthread_cond_t cv;      /* wakes the writer */
	pthread_cond_t cv_done; /* wakes a loop thread waiting for the writer */
	struct jbatch *q_head, **q_tail;
	struct jbatch *d_head, **d_tail;
	struct jcompl *compl;
	size_t ncompl, complcap;
	struct jcompl *spare_compl; /* the loop's: the other of two arrays */
	size_t spare_complcap;
	uint64_t w_upto;
	struct journal *journals;
	int stop;
	int64_t w_wake_at;      /* under mu: when the sleeping writer wakes; 0 = running */
	/* 1 while the writer / the syncer is off its condition variable
	 * (atomic; read by jenv_background_busy without a lock) */
	int w_busy, s_busy;
	uint64_t w_wakes;       /* under mu: signals that woke a waiting writer */

	/* the syncer thread (s_main); its queue and counters under mu */
	pthread_t s_thr;
	int s_started, s_stop;
	pthread_cond_t s_cv;    /* wakes the syncer */
	pthread_cond_t s_idle;  /* a job finished */
	struct sjob *s_head, **s_tail;
	uint64_t s_posted, s_done;
	struct sjob *f_head;    /* committed checkpoints' segments, for the writer */
};

/* Called with mu held, which they release: wake the writer / the syncer.
 * Each counts as busy from now (not only once it runs), so the loop stops
 * polling and the woken thread gets the core as soon as the loop runs out
 * of work (jenv_background_busy; a scheduler trace showed a woken writer
 * waiting up to 3.5 ms for a loop that kept polling).  The signal comes
 * after the unlock: a thread signalled while mu is held wakes only to
 * block on mu, and is woken a second time when it is released (two
 * context switches, and two futex calls for the signaller, where one of
 * each does). */
static void wake_writer_unlock(struct jenv *env)
{
	/* w_busy is 0 (under mu) only while the writer waits on cv: only
	 * then does the signal wake it (a context switch) */
	if (!__atomic_load_n(&env->w_busy, __ATOMIC_RELAXED))
		env->w_wakes++;
	__atomic_store_n(&env->w_busy, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&env->mu);
	pthread_cond_signal(&env->cv);
}

static void wake_syncer_unlock(struct jenv *env)
{
	__atomic_store_n(&env->s_busy, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&env->mu);
	pthread_cond_signal(&env->s_cv);
}

/* ---------------------------------------------------------------- options */

void journal_opts_default(struct journal_opts *o)
{
	o->sync = JOURNAL_SYNC_INTERVAL;
	o->sync_interval_ms = 100;
	o->prealloc = JOURNAL_PREALLOC_AUTO;
	o->segment_size = 64ull << 20;
	o->max_memory_size = 64ull << 20;
	o->checkpoint_interval_ms = 1000;
}

static const char *const sync_names[] = { "none", "interval", "always", "odsync" };
static const char *const prealloc_names[] = { "zero", "fallocate", "none", "auto" };

int journal_sync_parse(const char *s, enum journal_sync *out)
{
	for (int i = 0; i < 4; i++) {
		if (strcmp(s, sync_names[i]) == 0) {
			*out = (enum journal_sync)i;
			return 0;
		}
	}
	return TERN_EINVAL;
}

int journal_prealloc_parse(const char *s, enum journal_prealloc *out)
{
	for (int i = 0; i < 4; i++) {
		if (strcmp(s, prealloc_names[i]) == 0) {
			*out = (enum journal_prealloc)i;
			return 0;
		}
	}
	return TERN_EINVAL;
}

const char *journal_sync_name(enum journal_sync s)
{
	return (unsigned)s < 4 ? sync_names[s] : "?";
}

const char *journal_prealloc_name(enum journal_prealloc p)
{
	return (unsigned)p < 4 ? prealloc_names[p] : "?";
}

/* Segment sizes: records are addressed with 32-bit offsets, and a segment
 * must hold its header block plus a useful amount of records. */
static uint64_t seg_size_clamp(uint64_t s)
{
	if (s < 64 * 1024)
		s = 64 * 1024;
	if (s > (1ull << 31))
		s = 1ull << 31;
	return (s + JALIGN_BLOCK - 1) & ~(uint64_t)(JALIGN_BLOCK - 1);
}

static void opts_fix(struct journal_opts *o)
{
	/* auto: zero-filled segments pay off only where records are synced
	 * one group at a time; in none/interval they double the bytes written
	 * (measured: 4 KiB sets, sync=none, 330 MB/s with zero against 477
	 * with fallocate, and far less once the kernel throttles dirty pages) */
	if (o->prealloc == JOURNAL_PREALLOC_AUTO)
		o->prealloc = journal_sync_waits(o->sync) ? JOURNAL_PREALLOC_ZERO
							   : JOURNAL_PREALLOC_FALLOCATE;
	o->segment_size = seg_size_clamp(o->segment_size);
	if (o->sync_interval_ms == 0)
		o->sync_interval_ms = 1;
	if (o->checkpoint_interval_ms == 0)
		o->checkpoint_interval_ms = 1000;
}

/* ---------------------------------------------------------------- helpers */

static int64_t mono_ms(void)
{
	return tern_mono_ms();
}

static void seg_name(char *buf, size_t n, uint32_t seg)
{
	snprintf(buf, n, "%08" PRIu32 ".seg", seg);
}

static int seg_parse(const char *name, uint32_t *seg)
{
	char *end;
	unsigned long v;

	if (name[0] < '0' || name[0] > '9')
		return 0;
	errno = 0;
	v = strtoul(name, &end, 10);
	if (errno || strcmp(end, ".seg") != 0 || v == 0 || v > UINT32_MAX)
		return 0;
	*seg = (uint32_t)v;
	return 1;
}

static int spare_get(struct journal *j)
{
	return __atomic_load_n(&j->spare_state, __ATOMIC_ACQUIRE);
}

static void spare_set(struct journal *j, int s)
{
	__atomic_store_n(&j->spare_state, s, __ATOMIC_RELEASE);
}

static int failed_get(struct journal *j)
{
	return __atomic_load_n(&j->failed, __ATOMIC_ACQUIRE);
}

static uint64_t dirty_get(struct journal *j)
{
	return __atomic_load_n(&j->w_dirty, __ATOMIC_RELAXED);
}

static void stat_add(uint64_t *p, uint64_t v)
{
	__atomic_add_fetch(p, v, __ATOMIC_RELAXED);
}

static int wr_all(int fd, const void *buf, size_t n, uint64_t off)
{
	const char *p = buf;

	while (n) {
		ssize_t r = jio.pwrite(fd, p, n, (off_t)off);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (r == 0) {
			errno = EIO;
			return -1;
		}
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

static int wrv_all(int fd, struct iovec *iov, int cnt, uint64_t off)
{
	while (cnt > 0) {
		ssize_t r = jio.pwritev(fd, iov, cnt, (off_t)off);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (r == 0) {
			errno = EIO;
			return -1;
		}
		off += (uint64_t)r;
		while (cnt > 0 && (size_t)r >= iov->iov_len) {
			r -= (ssize_t)iov->iov_len;
			iov++;
			cnt--;
		}
		if (cnt > 0) {
			iov->iov_base = (char *)iov->iov_base + r;
			iov->iov_len -= (size_t)r;
		}
	}
	return 0;
}

/* ---------------------------------------------------------------- batches */

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

static void batch_free(struct jbatch *b)
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

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	size_t nc;
	void *np;

	if (need <= *cap)
		return 0;
	nc = *cap ? *cap : 16;
	while (nc < need)
		nc *= 2;
	np = realloc(*p, nc * elem);
	if (!np)
		return TERN_ENOMEM;
	*p = np;
	*cap = nc;
	return 0;
}

static void pass_cb(evutil_socket_t fd, short what, void *arg);

/* The journal's batch for this pass; registers it for the hand-off. */
static struct jbatch *batch_get(struct journal *j)
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
static int rec_append(struct journal *j, struct jrec *r, struct item *it,
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

static int segs_add(struct journal *j, uint32_t num, uint64_t size)
{
	if (grow((void **)&j->segs, &j->segcap, j->nseg + 1, sizeof(*j->segs)) < 0)
		return TERN_ENOMEM;
	j->segs[j->nseg].num = num;
	j->segs[j->nseg].size = size;
	j->nseg++;
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
/*
 * Segment sizes grow: a queue's first segment is FIRST_SEG_SIZE, each next
 * one twice the previous, up to segment_size.  A server with thousands of
 * mostly idle queues would otherwise reserve two full segments (128 MiB by
 * default) of zero-filled disk per queue; a busy queue reaches full-size
 * segments after a few megabytes.  The writer prepares the spare at this
 * size; the loop thread advances it when it starts a segment, before the
 * batch that activates the segment is handed over, so the writer always
 * prepares the size the loop will ask for next.
 */
#define FIRST_SEG_SIZE (1ull << 20)

static uint64_t seg_target(struct journal *j)
{
	uint64_t v = __atomic_load_n(&j->next_size, __ATOMIC_ACQUIRE);

	if (v == 0 || v > j->opts.segment_size)
		v = j->opts.segment_size;
	return v;
}

static void seg_target_init(struct journal *j)
{
	uint64_t v = j->opts.segment_size < FIRST_SEG_SIZE ? j->opts.segment_size
							     : FIRST_SEG_SIZE;

	__atomic_store_n(&j->next_size, v, __ATOMIC_RELEASE);
}

static int make_room(struct journal *j, uint64_t rsize, uint64_t keep)
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

static uint64_t reserve_cap(const struct journal *j)
{
	return j->opts.segment_size / 4;
}

static uint64_t tail_pos(const struct journal *j)
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

static void w_group(struct jenv *env, struct jbatch *list);
static void env_done(struct jenv *env);

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
static int env_write_inline(struct jenv *env, struct jbatch *list)
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
static void env_handoff(struct jenv *env)
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

static void pass_cb(evutil_socket_t fd, short what, void *arg)
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

uint64_t jenv_writer_wakeups(struct jenv *env)
{
	uint64_t n;

	pthread_mutex_lock(&env->mu);
	n = env->w_wakes;
	pthread_mutex_unlock(&env->mu);
	return n;
}

int jenv_background_busy(const struct jenv *env)
{
	return __atomic_load_n(&env->w_busy, __ATOMIC_RELAXED) ||
	       __atomic_load_n(&env->s_busy, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------- writer */

/* The writer's copy of j's options (journal_set_opts changes it under mu). */
static void w_opts_get(struct journal *j, struct journal_opts *o)
{
	pthread_mutex_lock(&j->env->mu);
	*o = j->w_opts;
	pthread_mutex_unlock(&j->env->mu);
}

static void w_fail(struct journal *j, const char *what, int e)
{
	if (!failed_get(j))
		fprintf(stderr, "journal: queue %s: %s failed: %s; journal is now failed\n",
			j->name, what, strerror(e));
	__atomic_store_n(&j->failed, TERN_EIO, __ATOMIC_RELEASE);
	stat_add(&j->st_errors, 1);
}

static int w_sync(struct journal *j, int fd)
{
	if (jio.fdatasync(fd) < 0) {
		w_fail(j, "fdatasync", errno);
		return -1;
	}
	stat_add(&j->st_syncs, 1);
	return 0;
}

/* ---------------------------------------------------------------- syncer */

enum { SJ_SEG = 0, SJ_DIR, SJ_SPARE };

static const char *const sj_what[] = { "fdatasync", "sync directory", "sync spare segment" };

/* Queues s for the syncer.  Takes mu. */
static void s_post(struct jenv *env, struct sjob *s)
{
	s->next = NULL;
	pthread_mutex_lock(&env->mu);
	*env->s_tail = s;
	env->s_tail = &s->next;
	env->s_posted++;
	wake_syncer_unlock(env);
}

/* Waits until the syncer has finished every job posted so far. */
static void s_barrier(struct jenv *env)
{
	uint64_t upto;

	pthread_mutex_lock(&env->mu);
	upto = env->s_posted;
	while (env->s_done < upto)
		pthread_cond_wait(&env->s_idle, &env->mu);
	pthread_mutex_unlock(&env->mu);
}

/*
 * Starts the writeback of [lo, hi) of fd SYNC_STEP at a time, yielding
 * between steps, before the fdatasync that waits for it.  One fdatasync of
 * an interval's records (~5 MB at the latency step's 160k msg/s) submitted
 * them in one ~1 ms stretch every 100 ms that this kernel (PREEMPT_NONE)
 * does not preempt, on the core the loop shares in the benchmarks
 * (`perf sched timehist`: the loop runnable and waiting 0.5-1.7 ms).  The
 * fdatasync still covers everything and reports any error.
 */
static void s_writeback_steps(int fd, uint64_t lo, uint64_t hi)
{
	for (uint64_t off = lo; off < hi; off += SYNC_STEP) {
		uint64_t n = hi - off < SYNC_STEP ? hi - off : SYNC_STEP;

		if (jio.sync_file_range(fd, (off_t)off, (off_t)n, SYNC_FILE_RANGE_WRITE) < 0)
			return;
		if (off + n < hi)
			sched_yield();
	}
}

/* The sync part of job s (on the syncer, or in place when no job could be
 * allocated): fdatasync and close s->fd, then the journal's bookkeeping.
 * Returns 0 when the sync failed (the journal is failed then). */
static int s_sync(struct jenv *env, struct sjob *s)
{
	struct journal *j = s->j;
	int ok = 1;

	if (s->fd >= 0) {
		if (s->kind == SJ_SEG)
			s_writeback_steps(s->fd, s->lo, s->hi);
		if (jio.fdatasync(s->fd) < 0) {
			w_fail(j, sj_what[s->kind], errno);
			ok = 0;
		} else if (s->kind == SJ_SEG) {
			uint64_t exp = s->dirty;

			stat_add(&j->st_syncs, 1);
			/* clean only if nothing was written since fd was taken */
			if (exp)
				__atomic_compare_exchange_n(&j->w_dirty, &exp, 0, 0,
							    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
		}
		close(s->fd);
	}
	if (s->interval) {
		__atomic_store_n(&j->w_last_sync, mono_ms(), __ATOMIC_RELAXED);
		__atomic_store_n(&j->s_pending, 0, __ATOMIC_RELEASE);
		/* the writer plans the next interval sync from w_last_sync */
		pthread_mutex_lock(&env->mu);
		wake_writer_unlock(env);
	}
	return ok;
}

/* Gives segment sync job s the bytes written since the last such job
 * (s_writeback_steps starts their writeback).  Under wlock. */
static void sync_range_take(struct journal *j, struct sjob *s)
{
	s->lo = j->w_sync_lo;
	s->hi = j->w_hi;
	j->w_sync_lo = j->w_hi;
}

/* Hands fd (of kind SJ_*) to the syncer to fdatasync and close; dirty and
 * interval as in struct sjob (an interval sync: the caller set s_pending).
 * When no job can be allocated the sync is done here.  Returns -1 only if
 * that sync failed. */
static int s_post_sync(struct journal *j, int fd, int kind, uint64_t dirty, int interval)
{
	struct sjob *s = calloc(1, sizeof(*s)), here = { 0 };
	int inplace = s == NULL;

	if (inplace)
		s = &here;
	s->j = j;
	s->fd = fd;
	s->kind = kind;
	s->dirty = dirty;
	s->interval = interval;
	if (kind == SJ_SEG)
		sync_range_take(j, s);
	if (inplace)
		return s_sync(j->env, s) ? 0 : -1;
	s_post(j->env, s);
	return 0;
}

/*
 * Unlinks a dead segment in steps.  Unlinking a file frees every page of
 * it still in the page cache in one go: ~30 ms of CPU for 64 MiB here
 * (strace of the syncer during bench-peers' latency step), and this
 * kernel (PREEMPT_NONE, HZ 250) does not preempt that work, so the loop
 * and the writer, sharing the core, waited that long (set p99 1.2-2.9 ms
 * at 160k msg/s).  Truncating the file UNLINK_STEP at a
 * time and yielding between steps bounds each stretch to ~1 ms.  A crash
 * halfway leaves a shortened dead segment, which opening the journal
 * deletes like any segment older than the checkpoint's oldest live one.
 */
static void seg_unlink_gently(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd >= 0) {
		struct stat st;

		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
			off_t size = st.st_size;

			while (size > (off_t)UNLINK_STEP) {
				size -= (off_t)UNLINK_STEP;
				if (ftruncate(fd, size) < 0)
					break;
				sched_yield();
			}
		}
		close(fd);
	}
	unlinkat(dirfd, name, 0);
}

static void s_run(struct jenv *env, struct sjob *s)
{
	struct journal *j = s->j;
	int ok = s_sync(env, s);

	if (s->ckpt) {
		/* a failed sync means records the checkpoint covers may be
		 * lost: never commit past them */
		if (ok && !failed_get(j))
			ok = jcat_ckpt_put(env->cat, j->name, s->ckpt, s->ckpt_len) == 0;
		else
			ok = 0;
		free(s->ckpt);
		s->ckpt = NULL;
		if (ok && s->nfree) {
			/* segments are renamed or unlinked by the writer,
			 * which owns the spare */
			pthread_mutex_lock(&env->mu);
			s->next = env->f_head;
			env->f_head = s;
			wake_writer_unlock(env);
			return;
		}
	}
	if (s->unlink) {
		char name[32];

		for (size_t i = 0; i < s->nfree; i++) {
			seg_name(name, sizeof(name), s->free_segs[i]);
			seg_unlink_gently(j->dirfd, name);
		}
	}
	free(s->free_segs);
	free(s);
}

/* Stops the syncer once it has run every job; drops what came back for a
 * writer that is gone (every journal was closed, so nothing is left to
 * free but memory). */
static void s_stop(struct jenv *env)
{
	struct sjob *s, *next;

	if (env->s_started) {
		pthread_mutex_lock(&env->mu);
		env->s_stop = 1;
		wake_syncer_unlock(env);
		pthread_join(env->s_thr, NULL);
		env->s_started = 0;
	}
	for (s = env->f_head; s; s = next) {
		next = s->next;
		free(s->free_segs);
		free(s);
	}
	env->f_head = NULL;
}

static void *s_main(void *arg)
{
	struct jenv *env = arg;

	pthread_mutex_lock(&env->mu);
	for (;;) {
		struct sjob *s = env->s_head;

		if (!s) {
			if (env->s_stop)
				break;
			__atomic_store_n(&env->s_busy, 0, __ATOMIC_RELAXED);
			pthread_cond_wait(&env->s_cv, &env->mu);
			__atomic_store_n(&env->s_busy, 1, __ATOMIC_RELAXED);
			continue;
		}
		env->s_head = s->next;
		if (!env->s_head)
			env->s_tail = &env->s_head;
		pthread_mutex_unlock(&env->mu);
		s_run(env, s);
		pthread_mutex_lock(&env->mu);
		env->s_done++;
		pthread_cond_broadcast(&env->s_idle);
	}
	pthread_mutex_unlock(&env->mu);
	return NULL;
}

/* One step of preparing spare.seg at target bytes (all: until done).
 * Returns 1 when more work remains, 0 when done or failed (state tells). */
static int w_spare_step(struct journal *j, const struct journal_opts *o, int all,
			uint64_t target)
{
	struct stat st;

	if (j->sp_fd < 0) {
		j->sp_fd = jio.openat(j->dirfd, SPARE_NAME, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		if (j->sp_fd < 0)
			goto fail;
		if (fstat(j->sp_fd, &st) < 0)
			goto fail;
		j->sp_done = (uint64_t)st.st_size;
		if (j->sp_done > target) {
			if (ftruncate(j->sp_fd, (off_t)target) < 0)
				goto fail;
			j->sp_done = target;
		}
	}
	/* fallocate in steps too: the writer serves queued groups between
	 * steps, and one call for a whole 64 MiB segment took milliseconds */
	while (o->prealloc == JOURNAL_PREALLOC_FALLOCATE && j->sp_done < target) {
		uint64_t n = target - j->sp_done > FALLOC_CHUNK ? FALLOC_CHUNK
								: target - j->sp_done;

		if (jio.fallocate(j->sp_fd, 0, (off_t)j->sp_done, (off_t)n) < 0)
			goto fail;
		j->sp_done += n;
		if (!all && j->sp_done < target)
			return 1;
	}
	while (j->sp_done < target) {
		size_t n = target - j->sp_done > ZERO_CHUNK ? ZERO_CHUNK
							    : (size_t)(target - j->sp_done);

		if (wr_all(j->sp_fd, zeros, n, j->sp_done) < 0)
			goto fail;
		/* start writeback of this step now, asynchronously, so the
		 * final fdatasync has little left to do: a sync of a whole
		 * freshly written segment would stall group commits */
		jio.sync_file_range(j->sp_fd, (off_t)j->sp_done, (off_t)n, SYNC_FILE_RANGE_WRITE);
		j->sp_done += n;
		if (!all && j->sp_done < target)
			return 1;
	}
	/* Sync now, in the background: the zeros (and the extent metadata)
	 * must not be written back by the first synced record (always,
	 * odsync).  none/interval acknowledge without a sync: the syncer
	 * does it, and the segment's own syncs would cover it anyway. */
	{
		int fd = journal_sync_waits(o->sync) ? -1 : dup(j->sp_fd);

		if (fd >= 0)
			s_post_sync(j, fd, SJ_SPARE, 0, 0); /* a failure fails the journal */
		else if (jio.fdatasync(j->sp_fd) < 0)
			goto fail;
	}
	if (spare_get(j) != SP_READY && spare_get(j) == SP_NOSPC)
		fprintf(stderr, "journal: queue %s: next segment ready again\n", j->name);
	spare_set(j, SP_READY);
	return 0;
fail:
	{
		int e = errno;

		if (spare_get(j) != SP_NOSPC)
			fprintf(stderr, "journal: queue %s: cannot prepare next segment: %s\n",
				j->name, strerror(e));
		if (j->sp_fd >= 0)
			close(j->sp_fd);
		j->sp_fd = -1;
		pthread_mutex_lock(&j->env->mu);
		j->sp_retry_at = mono_ms() + NOSPC_RETRY_MS;
		pthread_mutex_unlock(&j->env->mu);
		spare_set(j, SP_NOSPC);
	}
	return 0;
}

/* The spare is needed now but is not ready (a new queue, or segments
 * filling faster than zeroing).  Zero-filling the rest here would stall
 * every waiting set for a whole segment's worth of writes and a sync, so
 * reserve it with fallocate() instead: fast, and a full disk is still
 * detected before any record is written.  Only this segment pays the
 * unwritten-extent cost; the next spare is zero-filled in the background. */
static void w_spare_now(struct journal *j, const struct journal_opts *o, uint64_t size)
{
	if (j->sp_fd < 0) {
		struct stat st;

		j->sp_fd = jio.openat(j->dirfd, SPARE_NAME, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		if (j->sp_fd >= 0 && fstat(j->sp_fd, &st) == 0)
			j->sp_done = (uint64_t)st.st_size;
	}
	if (j->sp_fd >= 0 && j->sp_done >= size) {
		w_spare_step(j, o, 1, size); /* complete already: just sync it */
		return;
	}
	if (j->sp_fd >= 0 && jio.fallocate(j->sp_fd, 0, 0, (off_t)size) == 0) {
		j->sp_done = size;
		spare_set(j, SP_READY);
		return;
	}
	if (j->sp_fd >= 0 && (errno == EOPNOTSUPP || errno == ENOSYS)) {
		w_spare_step(j, o, 1, size); /* no fallocate here: zero-fill */
		return;
	}
	w_spare_step(j, o, 1, size); /* records the failure (NOSPC) and logs it */
}

/* Makes segment seg, of size bytes (its header's size), the write segment.
 * A spare not ready yet is reserved here at that size, not at seg_target:
 * the loop advanced next_size when it started this segment. */
static int w_activate(struct journal *j, uint32_t seg, uint64_t size,
		      enum journal_sync sync, const struct journal_opts *o)
{
	char name[32];
	int flags = O_RDWR | O_CREAT | O_CLOEXEC;
	int later = !journal_sync_waits(sync);

	if (j->w_fd >= 0) {
		/* the old segment's last records must be as durable as the
		 * mode promises before we move on: always/odsync here, before
		 * any ticket in the new segment; none/interval promise no
		 * sync with the reply, so the syncer does it (a checkpoint
		 * covering them commits only after it, see struct sjob) */
		if (dirty_get(j) && !j->w_fd_dsync && later) {
			int fd = j->w_fd;

			/* the job owns fd now (a sync in place closed it) */
			j->w_fd = -1;
			if (s_post_sync(j, fd, SJ_SEG, 0, 0) < 0)
				return -1;
		} else {
			if (dirty_get(j) && !j->w_fd_dsync && w_sync(j, j->w_fd) < 0)
				return -1;
			close(j->w_fd);
			j->w_fd = -1;
		}
	}
	seg_name(name, sizeof(name), seg);
	if (o->prealloc != JOURNAL_PREALLOC_NONE) {
		if (spare_get(j) != SP_READY)
			w_spare_now(j, o, size);
		if (spare_get(j) == SP_READY) {
			close(j->sp_fd);
			j->sp_fd = -1;
			if (renameat(j->dirfd, SPARE_NAME, j->dirfd, name) < 0) {
				w_fail(j, "rename spare", errno);
				return -1;
			}
			spare_set(j, SP_PENDING);
			j->sp_reused = 0; /* the next spare is a new file until w_free_segs */
		}
		/* else: no spare (disk full); the file grows, and a write
		 * that hits ENOSPC fails the journal */
	}
	if (sync == JOURNAL_SYNC_ODSYNC)
		flags |= O_DSYNC;
	j->w_fd = jio.openat(j->dirfd, name, flags, 0644);
	if (j->w_fd < 0) {
		w_fail(j, "open segment", errno);
		return -1;
	}
	j->w_fd_dsync = sync == JOURNAL_SYNC_ODSYNC;
	j->w_seg = seg;
	j->w_hi = 0;
	j->w_sync_lo = 0;
	__atomic_store_n(&j->w_dirty, 0, __ATOMIC_RELAXED);
	/* the new name must survive a crash before records in it are acked
	 * as durable (always/odsync); for none/interval the syncer does it */
	if (later) {
		int dfd = dup(j->dirfd);

		if (dfd >= 0)
			return s_post_sync(j, dfd, SJ_DIR, 0, 0);
	}
	if (jio.fdatasync(j->dirfd) < 0) {
		w_fail(j, "sync directory", errno);
		return -1;
	}
	return 0;
}

/*
 * The writer's gather of a group's records.  The loop hands over one batch
 * per pass (and per early end), so a group in always held ~3 batches of
 * one queue, each written with its own pwritev (2.6 per fdatasync at 64
 * connections, measured).  Records that continue the previous ones in
 * the same file go out together: one pwritev per journal and group.
 */
struct wgather {
	struct journal *j; /* whose records iov holds; NULL when empty */
	uint64_t off, end; /* the file range iov covers */
	int n;
	struct iovec iov[IOV_MAX];
};

/* Writes what g holds.  The journal's write state (w_hi, w_dirty) moves
 * only here, once the bytes are in the file. */
static int w_gather_flush(struct wgather *g)
{
	struct journal *j = g->j;
	int n = g->n;

	g->j = NULL;
	g->n = 0;
	if (!j)
		return 0;
	if (n && wrv_all(j->w_fd, g->iov, n, g->off) < 0) {
		w_fail(j, "write", errno);
		return -1;
	}
	if (g->end > j->w_hi)
		j->w_hi = g->end;
	j->w_gen++;
	__atomic_store_n(&j->w_dirty, j->w_gen, __ATOMIC_RELAXED);
	return 0;
}

/* Adds b's records to g (writing what g held first when they do not
 * continue it).  A new segment is activated only after g is written: its
 * records belong to the segment before. */
static int w_write_batch(struct journal *j, struct jbatch *b, struct wgather *g)
{
	size_t ri;

	for (ri = 0; ri < b->nrun; ri++) {
		struct brun *r = &b->runs[ri];
		uint64_t pos = r->off;

		if (r->n == 0)
			continue;
		if (r->is_new) {
			struct journal_opts o;

			if (w_gather_flush(g) < 0 && failed_get(j))
				return -1;
			w_opts_get(j, &o);
			if (w_activate(j, r->seg, r->seg_size, b->sync, &o) < 0)
				return -1;
		} else if (j->w_fd < 0 || j->w_seg != r->seg) {
			errno = EINVAL;
			w_fail(j, "write (no segment)", errno);
			return -1;
		}
		for (size_t i = r->first; i < r->first + r->n; i++) {
			struct bent *e = &b->ents[i];
			unsigned char *h = b->buf + e->hoff;
			const void *body = e->it ? (const void *)e->it->data : (const void *)zeros;
			size_t add = e->rawlen ? e->rawlen : JREC_HDR_SIZE;

			if (g->j != j || g->end != pos || g->n + 3 > IOV_MAX) {
				/* (another journal's failure is that journal's) */
				if (w_gather_flush(g) < 0 && failed_get(j))
					return -1;
				g->j = j;
				g->off = g->end = pos;
			}
			if (!e->rawlen)
				jrec_seal(h, body, e->blen);
			/* coalesce with the previous iovec when contiguous */
			if (g->n && (unsigned char *)g->iov[g->n - 1].iov_base +
						    g->iov[g->n - 1].iov_len == h)
				g->iov[g->n - 1].iov_len += add;
			else
				g->iov[g->n++] = (struct iovec){ h, add };
			if (e->blen)
				g->iov[g->n++] = (struct iovec){ (void *)body, e->blen };
			if (e->pad)
				g->iov[g->n++] = (struct iovec){ (void *)zeros, e->pad };
			stat_add(&j->st_records, e->rawlen ? 0 : 1);
			pos += add + e->blen + e->pad;
			g->end = pos;
		}
	}
	return 0;
}

static void w_free_segs(struct journal *j, const uint32_t *segs, size_t nfree,
			const struct journal_opts *o)
{
	char name[32];
	struct sjob *un = NULL;

	for (size_t i = 0; i < nfree; i++) {
		seg_name(name, sizeof(name), segs[i]);
		if (segs[i] == j->w_seg && j->w_fd >= 0) {
			close(j->w_fd);
			j->w_fd = -1;
			j->w_seg = 0;
		}
		/* keep one spare: a dead full-size segment is already
		 * allocated and written, so reusing it costs nothing.  It
		 * also replaces a ready spare that fallocate() reserved:
		 * dropping that file frees a few extents, while unlinking the
		 * dead segment would free every page of it still cached
		 * (~30 ms of CPU for 64 MiB, measured, on the core the loop
		 * may share), and the reused file's blocks are written
		 * already, so its writeback converts no unwritten extents. */
		if (o->prealloc != JOURNAL_PREALLOC_NONE &&
		    (spare_get(j) != SP_READY ||
		     (o->prealloc == JOURNAL_PREALLOC_FALLOCATE && !j->sp_reused))) {
			struct stat st;

			if (fstatat(j->dirfd, name, &st, 0) == 0 &&
			    (uint64_t)st.st_size == seg_target(j)) {
				if (j->sp_fd >= 0) {
					close(j->sp_fd);
					j->sp_fd = -1;
				}
				if (renameat(j->dirfd, name, j->dirfd, SPARE_NAME) == 0) {
					j->sp_reused = 1;
					spare_set(j, SP_READY);
					j->sp_fd = jio.openat(j->dirfd, SPARE_NAME, O_RDWR | O_CLOEXEC, 0);
					if (j->sp_fd < 0)
						spare_set(j, SP_PENDING);
					j->sp_done = seg_target(j);
					continue;
				}
			}
		}
		/* Unlinking drops the file's pages, waiting for any writeback
		 * of them: 10-15 ms for a few written-out segments, which held
		 * wlock and the writer (measured).  The syncer does it. */
		if (!un && (un = calloc(1, sizeof(*un))) != NULL) {
			un->j = j;
			un->fd = -1;
			un->unlink = 1;
			un->free_segs = malloc(nfree * sizeof(*un->free_segs));
			if (!un->free_segs) {
				free(un);
				un = NULL;
			}
		}
		if (un)
			un->free_segs[un->nfree++] = segs[i];
		else
			unlinkat(j->dirfd, name, 0);
	}
	if (un)
		s_post(j->env, un);
}

static void w_close_files(struct journal *j, int sync)
{
	if (j->w_fd >= 0) {
		if (sync && dirty_get(j) && !j->w_fd_dsync)
			w_sync(j, j->w_fd);
		close(j->w_fd);
		j->w_fd = -1;
	}
	if (j->sp_fd >= 0) {
		close(j->sp_fd);
		j->sp_fd = -1;
	}
}

static void w_compl(struct jenv *env, uint64_t upto, int err)
{
	if (env->ncompl && env->compl[env->ncompl - 1].err == err) {
		if (upto > env->compl[env->ncompl - 1].upto)
			env->compl[env->ncompl - 1].upto = upto;
		return;
	}
	if (grow((void **)&env->compl, &env->complcap, env->ncompl + 1,
		 sizeof(*env->compl)) < 0) {
		/* cannot queue a separate entry: fold into the last one,
		 * erring on the side of reporting failure */
		if (env->ncompl) {
			env->compl[env->ncompl - 1].upto = upto;
			if (err)
				env->compl[env->ncompl - 1].err = err;
		}
		return;
	}
	env->compl[env->ncompl++] = (struct jcompl){ upto, err };
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Reports a group's tickets, up to upto (under env->mu).  Only the tickets
 * of failed batches (their journals are failed for good) get TERN_EIO: the
 * other journals' records in the group were written and synced like any
 * others, and tickets interleave across journals (one loop pass serves
 * many queues), so after a failure the report alternates between ranges of
 * durable tickets and failed ones.  If the failed tickets cannot be listed
 * (no memory), the whole group gets TERN_EIO: a set reported failed that
 * was durable is redelivered, never lost.
 */
static void w_report(struct jenv *env, struct jbatch *list, uint64_t upto)
{
	uint64_t *f = NULL;
	size_t n = 0, cap = 0;
	int all_failed = 0;
	struct jbatch *b;

	for (b = list; b && !all_failed; b = b->next) {
		if (!b->err || !b->ticket)
			continue;
		for (size_t i = 0; i < b->nent && !all_failed; i++) {
			if (!b->ents[i].ticket)
				continue;
			if (grow((void **)&f, &cap, n + 1, sizeof(*f)) < 0)
				all_failed = 1;
			else
				f[n++] = b->ents[i].ticket;
		}
	}
	if (!all_failed && n) {
		qsort(f, n, sizeof(*f), cmp_u64);
		for (size_t i = 0; i < n; i++) {
			if (f[i] <= env->w_upto)
				continue;
			if (f[i] - 1 > env->w_upto)
				w_compl(env, f[i] - 1, 0);
			w_compl(env, f[i], TERN_EIO);
			env->w_upto = f[i];
		}
	}
	if (upto > env->w_upto) {
		w_compl(env, upto, all_failed ? TERN_EIO : 0);
		env->w_upto = upto;
	}
	free(f);
}

/* fdatasync of one journal's file, for a helper thread. */
struct psync {
	pthread_t thr;
	int fd, err, started;
};

static void *psync_main(void *arg)
{
	struct psync *p = arg;

	p->err = jio.fdatasync(p->fd) < 0 ? errno : 0;
	return NULL;
}

#define PSYNC_MAX 8

/*
 * Syncs the current segment of every journal in js (each dirty, w_fd open).
 * Files are synced in parallel, up to PSYNC_MAX at once: one after another,
 * four queues in sync=always took four device flushes per group (measured:
 * 2.8k sets/s for 4 queues, 1 client each); issued together the device (and
 * ext4's journal) can serve them with fewer flushes.  A helper thread per
 * file and group costs tens of microseconds against a flush's hundreds.
 */
static void w_sync_all(struct journal **js, size_t n)
{
	size_t i = 0;

	while (i < n) {
		struct psync ps[PSYNC_MAX];
		size_t m = n - i < PSYNC_MAX ? n - i : PSYNC_MAX, k;

		for (k = 1; k < m; k++) {
			ps[k].fd = js[i + k]->w_fd;
			ps[k].err = 0;
			ps[k].started = pthread_create(&ps[k].thr, NULL, psync_main, &ps[k]) == 0;
		}
		ps[0].fd = js[i]->w_fd;
		psync_main(&ps[0]);
		for (k = 1; k < m; k++) {
			if (ps[k].started)
				pthread_join(ps[k].thr, NULL);
			else
				psync_main(&ps[k]); /* no thread: sync it here */
		}
		for (k = 0; k < m; k++) {
			struct journal *j = js[i + k];

			if (ps[k].err) {
				w_fail(j, "fdatasync", ps[k].err);
				continue;
			}
			stat_add(&j->st_syncs, 1);
			__atomic_store_n(&j->w_dirty, 0, __ATOMIC_RELAXED);
			__atomic_store_n(&j->w_last_sync, mono_ms(), __ATOMIC_RELAXED);
		}
		i += m;
	}
}

/*
 * Whether the sync that must precede b's checkpoint commit is left to the
 * syncer.  In none/interval a set is acknowledged once its record is in
 * the kernel, so the checkpoint's fdatasync (up to a second of records in
 * none, up to sync_interval_ms in interval) need not hold those sets back:
 * done in the group it stalled every set for its length once per
 * checkpoint_interval_ms (measured: open-loop set p99 8 ms interval, 36 ms
 * none at half of peak rate).  always/odsync sync before tickets anyway; a
 * closing journal's last checkpoint is synced and committed in the group.
 */
static int ckpt_sync_later(const struct jbatch *b)
{
	return b->close == 0 && !journal_sync_waits(b->sync);
}

/* Posts b's checkpoint to the syncer (after a sync of the current segment
 * where ckpt_sync_later): the blob and the segments it frees move to the
 * job.  Returns -1 when no job could be made (b is untouched). */
static int ckpt_post(struct journal *j, struct jbatch *b)
{
	struct sjob *s = calloc(1, sizeof(*s));

	if (!s)
		return -1;
	s->j = j;
	s->fd = -1;
	if (ckpt_sync_later(b) && dirty_get(j) && j->w_fd >= 0 && !j->w_fd_dsync) {
		s->dirty = dirty_get(j);
		s->fd = dup(j->w_fd);
		if (s->fd < 0) {
			free(s);
			return -1;
		}
		s->kind = SJ_SEG;
		sync_range_take(j, s); /* under wlock (w_group) */
	}
	s->ckpt = b->ckpt;
	s->ckpt_len = b->ckpt_len;
	s->free_segs = b->free_segs;
	s->nfree = b->nfree;
	b->ckpt = NULL;
	b->ckpt_len = 0;
	b->free_segs = NULL;
	b->nfree = b->freecap = 0;
	s_post(j->env, s);
	return 0;
}

/* Frees the segments of checkpoints the syncer committed.  Under wlock. */
static void w_take_frees(struct jenv *env)
{
	struct sjob *s, *next;

	pthread_mutex_lock(&env->mu);
	s = env->f_head;
	env->f_head = NULL;
	pthread_mutex_unlock(&env->mu);
	for (; s; s = next) {
		struct journal_opts o;

		next = s->next;
		w_opts_get(s->j, &o);
		w_free_segs(s->j, s->free_segs, s->nfree, &o);
		free(s->free_segs);
		free(s);
	}
}

/* Writes, syncs and checkpoints one group of batches. */
static void w_group(struct jenv *env, struct jbatch *list)
{
	struct jbatch *b;
	uint64_t upto = 0;

	{
		struct wgather g; /* (no initializer: it would zero 16 KiB of iov) */

		g.j = NULL;
		g.n = 0;

		for (b = list; b; b = b->next) {
			struct journal *j = b->j;

			if (failed_get(j) || w_write_batch(j, b, &g) < 0)
				b->err = TERN_EIO;
		}
		/* a failure fails the journal: its tickets get EIO below */
		w_gather_flush(&g);
	}
	/* One fdatasync per journal covers every batch of the group; the
	 * journals of a group are synced in parallel (see w_sync_all). */
	{
		struct journal *one[16], **js = one;
		size_t n = 0, cap = 16;

		for (b = list; b; b = b->next) {
			struct journal *j = b->j;
			size_t k;

			if (b->err || failed_get(j))
				continue;
			/* batches without tickets (removes, opens: gets never
			 * wait) are made durable by the next synced batch or
			 * checkpoint */
			if (!(((b->ticket && (b->sync == JOURNAL_SYNC_ALWAYS ||
					      (b->sync == JOURNAL_SYNC_ODSYNC && !j->w_fd_dsync))) ||
			       (b->ckpt && !ckpt_sync_later(b)) || b->close == 1) &&
			      dirty_get(j) && j->w_fd >= 0))
				continue;
			for (k = 0; k < n && js[k] != j; k++)
				;
			if (k < n)
				continue;
			if (n == cap) {
				struct journal **nj = malloc(cap * 2 * sizeof(*nj));

				if (!nj) {
					w_sync_all(js, n);
					n = 0;
				} else {
					memcpy(nj, js, n * sizeof(*nj));
					if (js != one)
						free(js);
					js = nj;
					cap *= 2;
				}
			}
			js[n++] = j;
		}
		w_sync_all(js, n);
		if (js != one)
			free(js);
	}
	/* Tickets first: the records are written (and synced where needed),
	 * so their clients can be answered before the checkpoint commits. */
	for (b = list; b; b = b->next) {
		struct journal *j = b->j;

		if (failed_get(j) && !b->err && b->ticket)
			b->err = TERN_EIO; /* its sync failed */
		if (b->ticket > upto)
			upto = b->ticket;
		/* drop body references now, from the thread that wrote them */
		for (size_t i = 0; i < b->nent; i++) {
			item_unref(b->ents[i].it);
			b->ents[i].it = NULL;
		}
	}
	pthread_mutex_lock(&env->mu);
	w_report(env, list, upto);
	pthread_mutex_unlock(&env->mu);
	event_active(env->done_ev, EV_READ, 0);
	for (b = list; b; b = b->next) {
		struct journal *j = b->j;

		/* The checkpoint is committed only after the records it
		 * covers are on disk, and segments are freed only after it.
		 * The syncer does both (see struct sjob), so the writer is free
		 * for the next group meanwhile.  A closing journal first waits
		 * for the syncer's jobs (its earlier checkpoints, whose segment
		 * frees come back here), then commits its last checkpoint. */
		if (b->close) {
			s_barrier(env);
			w_take_frees(env);
		}
		if (b->ckpt && !failed_get(j) && (b->close || ckpt_post(j, b) < 0)) {
			int ok = 1;

			/* (no job memory: as a close, after the syncer) */
			if (!b->close)
				s_barrier(env);
			if (ckpt_sync_later(b) && dirty_get(j) && j->w_fd >= 0 &&
			    !j->w_fd_dsync)
				ok = w_sync(j, j->w_fd) == 0;
			if (ok)
				ok = jcat_ckpt_put(env->cat, j->name, b->ckpt, b->ckpt_len) == 0;
			if (ok) {
				struct journal_opts o;

				w_opts_get(j, &o);
				w_free_segs(j, b->free_segs, b->nfree, &o);
			}
		}
		if (b->close) {
			s_barrier(env); /* the unlinks w_free_segs posted */
			w_close_files(j, b->close == 1);
		}
	}
	pthread_mutex_lock(&env->mu);
	for (b = list; b; b = b->next) {
		if (b->close) {
			struct journal **pp;

			for (pp = &env->journals; *pp; pp = &(*pp)->wnext) {
				if (*pp == b->j) {
					*pp = b->j->wnext;
					break;
				}
			}
			b->j->w_closed = 1;
		}
	}
	*env->d_tail = list;
	for (b = list; b->next; b = b->next)
		;
	env->d_tail = &b->next;
	pthread_cond_broadcast(&env->cv_done);
	pthread_mutex_unlock(&env->mu);
	event_active(env->done_ev, EV_READ, 0);
}

static void *w_main(void *arg)
{
	struct jenv *env = arg;

	pthread_mutex_lock(&env->mu);
	for (;;) {
		struct journal *j, *job = NULL;
		int what = 0;
		int64_t now, wait_ms = 1000;
		struct journal_opts o;

		if (env->q_head) {
			struct jbatch *list;

			/* wlock before the list: see env_write_inline */
			pthread_mutex_unlock(&env->mu);
			pthread_mutex_lock(&env->wlock);
			pthread_mutex_lock(&env->mu);
			list = env->q_head;
			env->q_head = NULL;
			env->q_tail = &env->q_head;
			pthread_mutex_unlock(&env->mu);
			if (list)
				w_group(env, list);
			pthread_mutex_unlock(&env->wlock);
			pthread_mutex_lock(&env->mu);
			/* fall through: under sustained load, interval syncs
			 * and spare preparation still get their turn between
			 * groups */
		}
		if (env->f_head) {
			pthread_mutex_unlock(&env->mu);
			pthread_mutex_lock(&env->wlock);
			w_take_frees(env);
			pthread_mutex_unlock(&env->wlock);
			pthread_mutex_lock(&env->mu);
		}
		if (env->stop && !env->q_head)
			break;
		now = mono_ms();
		for (j = env->journals; j && !job; j = j->wnext) {
			int sp = spare_get(j);

			if (failed_get(j))
				continue;
			if (j->w_opts.prealloc != JOURNAL_PREALLOC_NONE &&
			    (sp == SP_PENDING || (sp == SP_NOSPC && now >= j->sp_retry_at))) {
				job = j;
				what = 1;
			} else if (__atomic_load_n(&j->w_dirty, __ATOMIC_RELAXED) &&
				   j->w_opts.sync == JOURNAL_SYNC_INTERVAL &&
				   !__atomic_load_n(&j->s_pending, __ATOMIC_ACQUIRE)) {
				/* w_fd is checked again under wlock before the sync */
				int64_t due = __atomic_load_n(&j->w_last_sync, __ATOMIC_RELAXED) +
					      j->w_opts.sync_interval_ms;

				if (due <= now) {
					job = j;
					what = 2;
				} else if (due - now < wait_ms) {
					wait_ms = due - now;
				}
			} else if (j->w_opts.sync == JOURNAL_SYNC_INTERVAL &&
				   __atomic_load_n(&j->s_pending, __ATOMIC_ACQUIRE) &&
				   (int64_t)j->w_opts.sync_interval_ms < wait_ms) {
				/* The syncer wakes us when its sync is done.  Plan
				 * to wake within an interval anyway: env_write_inline
				 * wakes a writer that plans to sleep longer than
				 * that, and during a long sync (the writeback of
				 * tens of MB when sets come at hundreds of MB/s) it
				 * woke this one at every loop pass for nothing:
				 * 2.6k wake-ups/s at 350 MB/s of 4 KiB sets, each
				 * two context switches and a contended mutex. */
				wait_ms = j->w_opts.sync_interval_ms;
			}
			if (!job && sp == SP_NOSPC && j->sp_retry_at - now < wait_ms)
				wait_ms = j->sp_retry_at > now ? j->sp_retry_at - now : 1;
		}
		if (job) {
			o = job->w_opts;
			pthread_mutex_unlock(&env->mu);
			if (what == 1) {
				/* Without wlock: the loop's inline writes never
				 * touch a spare that is not READY, and only this
				 * thread prepares spares. */
				w_spare_step(job, &o, 0, seg_target(job));
			} else {
				/* Interval sync by the syncer, so the loop keeps
				 * writing inline and queued groups are served
				 * meanwhile (a multi-millisecond fdatasync here
				 * stalled sets).  A dup keeps the file open should
				 * a roll close it; the journal is clean afterwards
				 * only if nothing was written during the sync. */
				pthread_mutex_lock(&env->wlock);
				if (job->w_fd >= 0 && dirty_get(job)) {
					int fd = dup(job->w_fd);

					if (fd >= 0) {
						__atomic_store_n(&job->s_pending, 1, __ATOMIC_RELEASE);
						s_post_sync(job, fd, SJ_SEG, dirty_get(job), 1);
					} else {
						/* no descriptor to spare: sync here */
						if (w_sync(job, job->w_fd) == 0)
							__atomic_store_n(&job->w_dirty, 0, __ATOMIC_RELAXED);
						__atomic_store_n(&job->w_last_sync, mono_ms(),
								 __ATOMIC_RELAXED);
					}
				} else {
					__atomic_store_n(&job->w_last_sync, mono_ms(), __ATOMIC_RELAXED);
				}
				pthread_mutex_unlock(&env->wlock);
			}
			pthread_mutex_lock(&env->mu);
			continue;
		}
		if (!env->q_head) {
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += wait_ms / 1000;
			ts.tv_nsec += (wait_ms % 1000) * 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			env->w_wake_at = now + wait_ms;
			__atomic_store_n(&env->w_busy, 0, __ATOMIC_RELAXED);
			pthread_cond_timedwait(&env->cv, &env->mu, &ts);
			__atomic_store_n(&env->w_busy, 1, __ATOMIC_RELAXED);
			env->w_wake_at = 0;
		}
	}
	pthread_mutex_unlock(&env->mu);
	return NULL;
}

/* ---------------------------------------------------------- completions */

static void bp_pop_written(struct journal *j)
{
	while (j->bp_n && j->bp[j->bp_head].pos < j->written_pos) {
		/* the record is in the file now: read-behind reads it there */
		item_unref(j->bp[j->bp_head].it);
		j->bp[j->bp_head].it = NULL;
		j->bp_head = (j->bp_head + 1) % j->bp_cap;
		j->bp_n--;
	}
}

/* Processes what the writer finished: on the loop thread. */
static void env_done(struct jenv *env)
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

static void done_cb(evutil_socket_t fd, short what, void *arg)
{
	env_done(arg);
}

/* Waits (on the loop thread) until the writer has closed j. */
static void wait_closed(struct journal *j)
{
	struct jenv *env = j->env;

	pthread_mutex_lock(&env->mu);
	while (!j->w_closed)
		pthread_cond_wait(&env->cv_done, &env->mu);
	pthread_mutex_unlock(&env->mu);
	env_done(env);
}

/* ---------------------------------------------------------------- jenv */

static void finish_delete(struct jenv *env, const char *name);

struct list_ctx {
	struct jenv *env;
	void (*fn)(void *arg, const char *name);
	void *arg;
	int pass; /* 0 = finish deletes, 1 = list active */
};

static void list_cb(void *arg, const char *name, int state)
{
	struct list_ctx *lc = arg;

	if (lc->pass == 0 && state == JCAT_DELETING)
		finish_delete(lc->env, name);
	else if (lc->pass == 1 && state == JCAT_ACTIVE && lc->fn)
		lc->fn(lc->arg, name);
}

int jenv_open(const char *data_dir, struct event_base *base,
	      jenv_durable_fn durable, void *arg, struct jenv **out)
{
	struct jenv *env = calloc(1, sizeof(*env));
	char *path = NULL;
	int rc = TERN_ENOMEM;

	if (!env)
		return TERN_ENOMEM;
	env->base = base;
	env->durable = durable;
	env->arg = arg;
	env->q_tail = &env->q_head;
	env->d_tail = &env->d_head;
	env->s_tail = &env->s_head;
	pthread_cond_init(&env->s_cv, NULL);
	pthread_cond_init(&env->s_idle, NULL);
	pthread_mutex_init(&env->mu, NULL);
	pthread_mutex_init(&env->wlock, NULL);
	pthread_cond_init(&env->cv, NULL);
	pthread_cond_init(&env->cv_done, NULL);
	env->dir = strdup(data_dir);
	if (!env->dir)
		goto fail;
	if (mkdir(data_dir, 0755) < 0 && errno != EEXIST) {
		rc = TERN_ESYS;
		goto fail;
	}
	if (asprintf(&path, "%s/queues", data_dir) < 0) {
		path = NULL;
		goto fail;
	}
	if (mkdir(path, 0755) < 0 && errno != EEXIST) {
		rc = TERN_ESYS;
		goto fail;
	}
	free(path);
	if (asprintf(&path, "%s/catalog", data_dir) < 0) {
		path = NULL;
		goto fail;
	}
	rc = jcat_open(path, 0, &env->cat);
	if (rc < 0)
		goto fail;
	env->pass_ev = event_new(base, -1, 0, pass_cb, env);
	env->done_ev = event_new(base, -1, 0, done_cb, env);
	if (!env->pass_ev || !env->done_ev) {
		rc = TERN_ENOMEM;
		goto fail;
	}
	{
		struct list_ctx lc = { env, NULL, NULL, 0 };

		jcat_list(env->cat, list_cb, &lc); /* finish interrupted deletes */
	}
	env->w_busy = env->s_busy = 1; /* until each thread first waits */
	if (pthread_create(&env->s_thr, NULL, s_main, env) != 0) {
		rc = TERN_ESYS;
		goto fail;
	}
	env->s_started = 1;
	if (pthread_create(&env->thr, NULL, w_main, env) != 0) {
		rc = TERN_ESYS;
		goto fail;
	}
	env->thr_started = 1;
	free(path);
	*out = env;
	return 0;
fail:
	{
		int e = errno;

		free(path);
		s_stop(env);
		if (env->pass_ev)
			event_free(env->pass_ev);
		if (env->done_ev)
			event_free(env->done_ev);
		jcat_close(env->cat);
		free(env->dir);
		free(env);
		errno = e;
	}
	return rc;
}

void jenv_close(struct jenv *env)
{
	if (!env)
		return;
	while (env->open)
		journal_close(env->open);
	env_handoff(env);
	pthread_mutex_lock(&env->mu);
	env->stop = 1;
	wake_writer_unlock(env);
	if (env->thr_started)
		pthread_join(env->thr, NULL);
	s_stop(env);
	env_done(env);
	event_free(env->pass_ev);
	event_free(env->done_ev);
	jcat_close(env->cat);
	pthread_mutex_destroy(&env->mu);
	pthread_mutex_destroy(&env->wlock);
	pthread_cond_destroy(&env->cv);
	pthread_cond_destroy(&env->cv_done);
	pthread_cond_destroy(&env->s_cv);
	pthread_cond_destroy(&env->s_idle);
	free(env->compl);
	free(env->spare_compl);
	free(env->dir);
	free(env);
}

int jenv_catalog_list(struct jenv *env, void (*fn)(void *arg, const char *name),
		      void *arg)
{
	struct list_ctx lc = { env, fn, arg, 1 };

	return jcat_list(env->cat, list_cb, &lc);
}

/* ------------------------------------------------------------ recovery */

/* Checkpoint blob (little-endian u64 words):
 *   magic, version, P (journal position covered), H (oldest position that
 *   may hold a live record), max_id, live_items, live_bytes, nD, nO,
 *   D[nD] (dead ADD positions >= H), O[nO] (positions of open items). */
enum { CK_MAGIC, CK_VERSION, CK_P, CK_H, CK_MAXID, CK_LIVE, CK_BYTES, CK_ND,
       CK_NO, CK_WORDS };

static uint64_t rd64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void wr64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

struct rec_item {
	struct item *it;
	uint64_t pos;
	int open;
};

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static int cmp_rec_item(const void *a, const void *b)
{
	const struct rec_item *x = a, *y = b;

	if (x->open != y->open)
		return y->open - x->open;
	return x->it->id < y->it->id ? -1 : x->it->id > y->it->id;
}

static char *seg_path(const struct journal *j, uint32_t seg)
{
	char *p;

	if (asprintf(&p, "%s/%08" PRIu32 ".seg", j->dir, seg) < 0)
		return NULL;
	return p;
}

static int open_seg_reader(struct journal *j, uint32_t seg, struct jreader *rd)
{
	char *p = seg_path(j, seg);
	int rc;

	if (!p)
		return TERN_ENOMEM;
	rc = jreader_open(rd, p);
	if (rc == 0 && rd->seg != seg) {
		fprintf(stderr, "journal: queue %s: segment %s has number %u in its header\n",
			j->name, p, rd->seg);
		jreader_close(rd);
		rc = TERN_ECORRUPT;
	}
	free(p);
	return rc;
}

static void log_damage(struct journal *j, struct jreader *rd,
		       struct journal_recovery *rec)
{
	fprintf(stderr,
		"journal: queue %s: segment %08u: damaged data at offset %" PRIu64
		" (%" PRIu64 " bytes skipped)\n",
		j->name, rd->seg, rd->dmg_off, rd->dmg_len);
	if (rec) {
		rec->corrupt_records++;
		rec->corrupt_bytes += rd->dmg_len;
	}
}

struct recover_state {
	struct jmap open; /* positions of open items */
	uint64_t H;
};

/* Phase 1: applies every record at or after P. */
static int replay(struct journal *j, uint64_t P, struct recover_state *rs,
		  struct journal_recovery *rec)
{
	for (size_t s = 0; s < j->nseg; s++) {
		struct jreader rd;
		struct jrec r;
		const unsigned char *body;
		uint64_t off;
		int rc;

		if (j->segs[s].num < JPOS_SEG(P))
			continue;
		rc = open_seg_reader(j, j->segs[s].num, &rd);
		if (rc < 0) {
			fprintf(stderr, "journal: queue %s: segment %08u unreadable: %s\n",
				j->name, j->segs[s].num, tern_strerror(rc));
			if (rc == TERN_EVERSION)
				return rc;
			rec->corrupt_records++;
			continue;
		}
		if (j->segs[s].num == JPOS_SEG(P) && JPOS_OFF(P) > JSEG_HDR_SIZE)
			jreader_seek(&rd, JPOS_OFF(P));
		while ((rc = jreader_next(&rd, &off, &r, &body)) != JREAD_END) {
			uint64_t pos = JPOS(rd.seg, off);

			if (rc < 0) {
				jreader_close(&rd);
				return rc;
			}
			if (rc == JREAD_DAMAGE) {
				log_damage(j, &rd, rec);
				continue;
			}
			rec->records_replayed++;
			switch (r.type) {
			case JREC_ADD:
				if (r.id > j->max_id)
					j->max_id = r.id;
				if (r.rflags & JREC_F_MOVED) {
					if (jdead_put(&j->dead, r.aux) < 0)
						goto nomem;
					if (jmap_get(&rs->open, r.aux)) {
						jmap_del(&rs->open, r.aux);
						if (!jmap_put(&rs->open, pos))
							goto nomem;
					}
				} else {
					j->live_items++;
					j->live_bytes += r.ilen;
				}
				break;
			case JREC_REMOVE:
			case JREC_CONFIRM:
				if (r.aux >= rs->H && !jdead_has(&j->dead, r.aux)) {
					if (jdead_put(&j->dead, r.aux) < 0)
						goto nomem;
					if (j->live_items)
						j->live_items--;
					j->live_bytes -= r.ilen <= j->live_bytes ? r.ilen : j->live_bytes;
				}
				jmap_del(&rs->open, r.aux);
				break;
			case JREC_OPEN:
				if (!jmap_put(&rs->open, r.aux))
					goto nomem;
				break;
			case JREC_ABORT:
				jmap_del(&rs->open, r.aux);
				break;
			case JREC_FLUSH:
				jdead_clear(&j->dead);
				jmap_clear(&rs->open);
				j->live_items = j->live_bytes = 0;
				rs->H = pos + jrec_size(0);
				break;
			default:
				break;
			}
		}
		jreader_close(&rd);
		continue;
nomem:
		jreader_close(&rd);
		return TERN_ENOMEM;
	}
	return 0;
}

/* Phase 2: reads live items from H on into memory, up to max_memory_size. */
static int load(struct journal *j, struct recover_state *rs, uint64_t P,
		struct journal_recovery *rec, struct rec_item **outv, size_t *outn)
{
	struct rec_item *v = NULL;
	size_t n = 0, cap = 0;
	uint64_t bytes = 0;
	int stop = 0, rc = 0;

	for (size_t s = 0; s < j->nseg && !stop; s++) {
		struct jreader rd;
		struct jrec r;
		const unsigned char *body;
		uint64_t off;

		if (j->segs[s].num < JPOS_SEG(rs->H))
			continue;
		if (open_seg_reader(j, j->segs[s].num, &rd) < 0)
			continue; /* reported by replay or before */
		if (j->segs[s].num == JPOS_SEG(rs->H) && JPOS_OFF(rs->H) > JSEG_HDR_SIZE)
			jreader_seek(&rd, JPOS_OFF(rs->H));
		while (!stop && (rc = jreader_next(&rd, &off, &r, &body)) != JREAD_END) {
			uint64_t pos = JPOS(rd.seg, off);
			struct item *it;

			if (rc < 0)
				break;
			if (rc == JREAD_DAMAGE) {
				/* damage at or after P was reported by replay() */
				if (JPOS(rd.seg, rd.dmg_off) < P)
					log_damage(j, &rd, rec);
				continue;
			}
			if (r.type != JREC_ADD || jdead_has(&j->dead, pos))
				continue;
			rc = 0;
			if (bytes + r.len > j->opts.max_memory_size) {
				j->rb_pos = pos;
				stop = 1;
				break;
			}
			it = item_new(r.len);
			if (!it || grow((void **)&v, &cap, n + 1, sizeof(*v)) < 0) {
				item_unref(it);
				rc = TERN_ENOMEM;
				break;
			}
			memcpy(it->data, body, r.len);
			it->id = r.id;
			it->flags = r.iflags;
			it->expiry_ms = r.expiry_ms;
			it->add_ms = r.add_ms;
			v[n].it = it;
			v[n].pos = pos;
			v[n].open = jmap_get(&rs->open, pos) != NULL;
			n++;
			bytes += r.len;
		}
		jreader_close(&rd);
		if (rc < 0)
			break;
	}
	if (rc < 0) {
		for (size_t i = 0; i < n; i++)
			item_unref(v[i].it);
		free(v);
		return rc;
	}
	*outv = v;
	*outn = n;
	return 0;
}

static int list_segments(struct journal *j)
{
	DIR *d = fdopendir(dup(j->dirfd));
	struct dirent *de;
	uint32_t *nums = NULL, seg;
	size_t n = 0, cap = 0;
	int rc = 0;

	if (!d)
		return TERN_ESYS;
	while ((de = readdir(d))) {
		if (!seg_parse(de->d_name, &seg))
			continue;
		if (grow((void **)&nums, &cap, n + 1, sizeof(*nums)) < 0) {
			rc = TERN_ENOMEM;
			break;
		}
		nums[n++] = seg;
	}
	closedir(d);
	if (rc == 0) {
		if (n)
			qsort(nums, n, sizeof(*nums), cmp_u32);
		for (size_t i = 0; i < n && rc == 0; i++) {
			struct stat st;
			char name[32];

			seg_name(name, sizeof(name), nums[i]);
			if (fstatat(j->dirfd, name, &st, 0) < 0)
				continue;
			rc = segs_add(j, nums[i], (uint64_t)st.st_size);
			if (nums[i] > j->last_seg)
				j->last_seg = nums[i];
		}
	}
	free(nums);
	return rc;
}

static void ckpt_cb(evutil_socket_t fd, short what, void *arg);
static int checkpoint(struct journal *j, int close_mode);

static void journal_free(struct journal *j)
{
	struct jbatch *b;

	if (!j)
		return;
	batch_free(j->cur);
	while ((b = j->pool)) {
		j->pool = b->next;
		batch_free(b);
	}
	while (j->bp_n) {
		item_unref(j->bp[j->bp_head].it);
		j->bp_head = (j->bp_head + 1) % j->bp_cap;
		j->bp_n--;
	}
	free(j->bp);
	if (j->rb_open)
		jreader_close(&j->rb);
	if (j->ckpt_ev)
		event_free(j->ckpt_ev);
	jmap_free(&j->idx);
	jdead_free(&j->dead);
	free(j->segs);
	if (j->dirfd >= 0)
		close(j->dirfd);
	free(j->dir);
	free(j->name);
	free(j);
}

static int load_ckpt(struct journal *j, uint64_t *P, struct recover_state *rs)
{
	void *blob = NULL;
	size_t len = 0;
	const unsigned char *p;
	uint64_t nd, no;
	int rc = jcat_ckpt_get(j->env->cat, j->name, &blob, &len);

	if (rc == TERN_ENOTFOUND)
		return 0;
	if (rc < 0)
		return rc;
	p = blob;
	rc = 0;
	if (len < CK_WORDS * 8 || rd64(p + 8 * CK_MAGIC) != CKPT_MAGIC) {
		fprintf(stderr, "journal: queue %s: checkpoint unreadable; replaying the journal\n",
			j->name);
		goto out;
	}
	if (rd64(p + 8 * CK_VERSION) > CKPT_VERSION) {
		rc = TERN_EVERSION;
		goto out;
	}
	nd = rd64(p + 8 * CK_ND);
	no = rd64(p + 8 * CK_NO);
	if (len != (CK_WORDS + nd + no) * 8) {
		fprintf(stderr, "journal: queue %s: checkpoint truncated; replaying the journal\n",
			j->name);
		goto out;
	}
	*P = rd64(p + 8 * CK_P);
	rs->H = rd64(p + 8 * CK_H);
	j->max_id = rd64(p + 8 * CK_MAXID);
	j->live_items = rd64(p + 8 * CK_LIVE);
	j->live_bytes = rd64(p + 8 * CK_BYTES);
	for (uint64_t i = 0; i < nd; i++)
		if (jdead_put(&j->dead, rd64(p + 8 * (CK_WORDS + i))) < 0)
			rc = TERN_ENOMEM;
	for (uint64_t i = 0; i < no; i++)
		if (!jmap_put(&rs->open, rd64(p + 8 * (CK_WORDS + nd + i))))
			rc = TERN_ENOMEM;
out:
	free(blob);
	return rc;
}

int journal_open(struct jenv *env, const char *name,
		 const struct journal_opts *opts, journal_item_fn on_item,
		 void *arg, struct journal_recovery *recp, struct journal **out)
{
	struct journal *j;
	struct journal_recovery rec = { 0 };
	struct recover_state rs = { .H = 0 };
	struct rec_item *items = NULL;
	size_t nitems = 0, keep;
	uint64_t P = 0, loaded_bytes = 0;
	int rc, state;
	struct timeval tv;

	if (!tern_name_valid(name, strlen(name)))
		return TERN_EBADNAME;
	j = calloc(1, sizeof(*j));
	if (!j)
		return TERN_ENOMEM;
	j->env = env;
	j->idx.seq = 1; /* item ids: consecutive (see jmap.h) */
	j->dirfd = j->w_fd = j->sp_fd = -1;
	j->rb.fd = -1;
	j->opts = *opts;
	opts_fix(&j->opts);
	j->w_opts = j->opts;
	seg_target_init(j);
	j->name = strdup(name);
	if (!j->name || asprintf(&j->dir, "%s/queues/%s", env->dir, name) < 0) {
		j->dir = NULL;
		rc = TERN_ENOMEM;
		goto fail;
	}
	rc = jcat_queue_get(env->cat, name, &state);
	if (rc == 0 && state == JCAT_DELETING)
		finish_delete(env, name);
	else if (rc < 0 && rc != TERN_ENOTFOUND)
		goto fail;
	/* catalog first: a directory without an entry is never trusted.  An
	 * existing queue only refreshes its settings here: on a full disk
	 * that may fail, and the queue must still open so it can be read. */
	{
		int existed = rc == 0 && state == JCAT_ACTIVE;

		rc = jcat_queue_put(env->cat, name, &j->opts, JCAT_ACTIVE);
		if (rc < 0 && !existed)
			goto fail;
		if (rc < 0)
			fprintf(stderr, "journal: queue %s: catalog entry not updated (%s);"
				" keeping the previous one\n", name, tern_strerror(rc));
	}
	if (mkdir(j->dir, 0755) < 0 && errno != EEXIST) {
		rc = TERN_ESYS;
		goto fail;
	}
	j->dirfd = open(j->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (j->dirfd < 0) {
		rc = TERN_ESYS;
		goto fail;
	}
	rc = list_segments(j);
	if (rc < 0)
		goto fail;
	if (j->nseg) {
		/* carry on growing from the newest segment's size */
		uint64_t last = j->segs[j->nseg - 1].size * 2;

		if (last > FIRST_SEG_SIZE)
			__atomic_store_n(&j->next_size, last, __ATOMIC_RELEASE);
	}
	rc = load_ckpt(j, &P, &rs);
	if (rc < 0)
		goto fail;
	if (!P) {
		/* no checkpoint: replay everything */
		P = rs.H = j->nseg ? JPOS(j->segs[0].num, JSEG_HDR_SIZE) : 0;
	} else if (JPOS_SEG(P) > j->last_seg + 1) {
		j->last_seg = JPOS_SEG(P) - 1;
	}
	/* segments before H's are dead (freed after a checkpoint that a
	 * crash interrupted) */
	for (keep = 0; keep < j->nseg && j->segs[keep].num < JPOS_SEG(rs.H); keep++) {
		char sname[32];

		seg_name(sname, sizeof(sname), j->segs[keep].num);
		unlinkat(j->dirfd, sname, 0);
	}
	if (keep)
		memmove(j->segs, j->segs + keep, (j->nseg - keep) * sizeof(*j->segs));
	j->nseg -= keep;

	rc = replay(j, P, &rs, &rec);
	if (rc < 0)
		goto fail;
	rc = load(j, &rs, P, &rec, &items, &nitems);
	if (rc < 0)
		goto fail;
	for (size_t i = 0; i < nitems; i++) {
		struct jent *e = jmap_put(&j->idx, items[i].it->id);

		if (!e) {
			rc = TERN_ENOMEM;
			goto fail;
		}
		e->pos = items[i].pos;
		e->len = items[i].it->len;
		loaded_bytes += items[i].it->len;
	}
	if (j->live_items < nitems || (j->live_items > nitems && !j->rb_pos)) {
		if (j->live_items != nitems)
			fprintf(stderr,
				"journal: queue %s: expected %" PRIu64 " live items, found %zu\n",
				j->name, j->live_items, nitems);
		j->live_items = nitems;
		j->live_bytes = loaded_bytes;
	}
	j->behind_items = j->live_items - nitems;
	j->behind_bytes = j->live_bytes > loaded_bytes ? j->live_bytes - loaded_bytes : 0;
	if (!j->behind_items)
		j->rb_pos = 0;
	j->written_pos = JPOS(j->last_seg + 1, 0);
	j->reserve = j->live_items * SMALL_REC;
	if (j->reserve > reserve_cap(j))
		j->reserve = reserve_cap(j);

	j->ckpt_ev = event_new(env->base, -1, EV_PERSIST, ckpt_cb, j);
	if (!j->ckpt_ev) {
		rc = TERN_ENOMEM;
		goto fail;
	}
	tv.tv_sec = j->opts.checkpoint_interval_ms / 1000;
	tv.tv_usec = (j->opts.checkpoint_interval_ms % 1000) * 1000;
	event_add(j->ckpt_ev, &tv);

	/* A queue that has never been written (a get creates queues, as in
	 * Kestrel) gets no disk until its first record: its first segment is
	 * reserved on the spot when it is needed, and from then on a spare is
	 * kept ready ahead of need. */
	spare_set(j, j->opts.prealloc == JOURNAL_PREALLOC_NONE || j->nseg == 0
			     ? SP_NONE : SP_PENDING);
	pthread_mutex_lock(&env->mu);
	j->wnext = env->journals;
	env->journals = j;
	wake_writer_unlock(env);
	j->lnext = env->open;
	if (env->open)
		env->open->lprev = j;
	env->open = j;

	/* open items first, then queue order */
	if (nitems)
		qsort(items, nitems, sizeof(*items), cmp_rec_item);
	for (size_t i = 0; i < nitems; i++)
		on_item(arg, items[i].it);
	free(items);
	jmap_free(&rs.open);

	rec.next_id = j->max_id + 1;
	rec.behind_items = j->behind_items;
	rec.behind_bytes = j->behind_bytes;
	if (rec.corrupt_records)
		fprintf(stderr,
			"journal: queue %s: recovered %zu items in memory, %" PRIu64
			" behind; %" PRIu64 " damaged regions (%" PRIu64 " bytes)\n",
			j->name, nitems, j->behind_items, rec.corrupt_records, rec.corrupt_bytes);
	if (recp)
		*recp = rec;
	/* a fresh checkpoint, so the next restart does not replay this again */
	j->ckpt_dirty = 1;
	checkpoint(j, 0);
	*out = j;
	return 0;
fail:
	for (size_t i = 0; i < nitems; i++)
		item_unref(items[i].it);
	free(items);
	jmap_free(&rs.open);
	journal_free(j);
	return rc;
}

int journal_set_opts(struct journal *j, const struct journal_opts *opts)
{
	struct journal_opts o = *opts;

	opts_fix(&o);
	j->opts = o;
	pthread_mutex_lock(&j->env->mu);
	j->w_opts = o;
	if (o.prealloc == JOURNAL_PREALLOC_NONE)
		spare_set(j, SP_NONE);
	else if (spare_get(j) == SP_NONE && j->nseg)
		spare_set(j, SP_PENDING);
	pthread_cond_signal(&j->env->cv);
	pthread_mutex_unlock(&j->env->mu);
	if (j->ckpt_ev) {
		struct timeval tv = { o.checkpoint_interval_ms / 1000,
				      (o.checkpoint_interval_ms % 1000) * 1000 };

		event_add(j->ckpt_ev, &tv);
	}
	jcat_queue_put(j->env->cat, j->name, &o, JCAT_ACTIVE);
	return 0;
}

/* ---------------------------------------------------- checkpoints & GC */

/* Moves the few live items that pin the oldest segment to the tail, so the
 * segment can be freed (Kestrel's and beanstalkd's journals grew without
 * bound when one long-open item pinned an old file). */
/* Returns 1 when it moved items (their positions changed). */
static int relocate(struct journal *j, uint32_t oldest)
{
	uint64_t cand[RELOC_MAX_ITEMS], ids[RELOC_MAX_ITEMS];
	size_t n = 0;
	int fd = -1;
	char *p;

	if (oldest + 1 >= j->wseg)
		return 0; /* only segments that are two or more behind the tail */
	if (j->behind_items && JPOS_SEG(j->rb_pos) <= oldest)
		return 0; /* the backlog itself lives there */
	for (size_t i = 0; i <= j->idx.mask && j->idx.t; i++) {
		struct jent *e = &j->idx.t[i];

		if (!e->key || JPOS_SEG(e->pos) != oldest)
			continue;
		if (n == RELOC_MAX_ITEMS || e->pos >= j->written_pos)
			return 0; /* too many to be worth it, or not yet written */
		cand[n] = e->pos;
		ids[n++] = e->key;
	}
	if (!n)
		return 0;
	p = seg_path(j, oldest);
	if (p)
		fd = open(p, O_RDONLY | O_CLOEXEC);
	free(p);
	if (fd < 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char h[JREC_HDR_SIZE];
		struct jrec r;
		struct item *it;
		struct jent *e;
		uint64_t npos;

		if (pread(fd, h, sizeof(h), JPOS_OFF(cand[i])) != (ssize_t)sizeof(h))
			break;
		jrec_decode(h, &r);
		if (r.type != JREC_ADD || r.id != ids[i])
			break;
		it = item_new(r.len);
		if (!it)
			break;
		if (pread(fd, it->data, r.len, JPOS_OFF(cand[i]) + JREC_HDR_SIZE) != (ssize_t)r.len ||
		    !jrec_crc_ok(h, it->data, r.len) ||
		    make_room(j, jrec_size(r.len), j->reserve) < 0 ||
		    jdead_put(&j->dead, cand[i]) < 0) {
			item_unref(it);
			break;
		}
		r.rflags |= JREC_F_MOVED;
		r.aux = cand[i];
		if (rec_append(j, &r, it, &npos) < 0) {
			jdead_del(&j->dead, cand[i]);
			item_unref(it);
			break;
		}
		item_unref(it);
		e = jmap_get(&j->idx, ids[i]);
		if (e)
			e->pos = npos;
	}
	close(fd);
	return 1;
}

/* One pass over the index of in-memory live items: the lowest ADD
 * position and the number of open items.  Checkpoints used to take four
 * passes; with a 100k-item backlog each pass cost the loop ~0.5 ms. */
static void idx_scan(struct journal *j, uint64_t *minpos, uint64_t *nopen)
{
	uint64_t m = UINT64_MAX, no = 0;

	for (size_t i = 0; j->idx.t && i <= j->idx.mask; i++) {
		const struct jent *e = &j->idx.t[i];

		if (!e->key)
			continue;
		if (e->pos < m)
			m = e->pos;
		if (e->flags & JENT_OPEN)
			no++;
	}
	*minpos = m;
	*nopen = no;
}

/* H from the index's lowest position (see idx_scan). */
static uint64_t h_from(struct journal *j, uint64_t minpos)
{
	uint64_t H = tail_pos(j);

	if (minpos < H)
		H = minpos;
	if (j->behind_items && j->rb_pos && j->rb_pos < H)
		H = j->rb_pos;
	if (j->bp_n && j->bp[j->bp_head].pos < H)
		H = j->bp[j->bp_head].pos;
	return H;
}


struct blob_ctx {
	unsigned char *blob;
	size_t w;
};

static void blob_put(void *arg, uint64_t pos)
{
	struct blob_ctx *bc = arg;

	wr64(bc->blob + 8 * bc->w++, pos);
}

/* close_mode: 0 periodic, 1 close, 2 delete (no checkpoint, just close). */
static int checkpoint(struct journal *j, int close_mode)
{
	struct jbatch *b;
	uint64_t H, P, nd = 0, no = 0, minpos;
	unsigned char *blob;
	size_t w = CK_WORDS;

	if (close_mode == 0 && (!j->ckpt_dirty || failed_get(j)))
		return 0;
	idx_scan(j, &minpos, &no);
	if (close_mode != 2 && !failed_get(j)) {
		if (j->nseg >= 3 && relocate(j, JPOS_SEG(h_from(j, minpos))))
			idx_scan(j, &minpos, &no);
		if (close_mode == 1 && j->wseg) {
			struct jrec end = { .type = JREC_SEGEND };

			/* room is always kept for it */
			rec_append(j, &end, NULL, NULL);
			j->wseg = 0;
		}
	}
	H = h_from(j, minpos);
	P = tail_pos(j);
	/* prune the dead set to [H, P): its sorted run keeps its array (a
	 * set rebuilt each interval grew through every size again, each
	 * growth a rehash on the loop: 0.4-3.8 ms stalls every second at 76k
	 * removes a second), and the prune moves a start index instead of
	 * walking a table (jdead.h) */
	if (jdead_prune_below(&j->dead, H) < 0)
		return TERN_ENOMEM;
	b = batch_get(j);
	if (!b)
		return TERN_ENOMEM;
	b->sync = j->opts.sync;
	if (close_mode)
		b->close = close_mode;
	if (close_mode == 2)
		goto handoff;
	nd = jdead_count(&j->dead);
	blob = malloc((CK_WORDS + nd + no) * 8);
	if (!blob)
		return TERN_ENOMEM;
	wr64(blob + 8 * CK_MAGIC, CKPT_MAGIC);
	wr64(blob + 8 * CK_VERSION, CKPT_VERSION);
	wr64(blob + 8 * CK_P, P);
	wr64(blob + 8 * CK_H, H);
	wr64(blob + 8 * CK_MAXID, j->max_id);
	wr64(blob + 8 * CK_LIVE, j->live_items);
	wr64(blob + 8 * CK_BYTES, j->live_bytes);
	wr64(blob + 8 * CK_ND, nd);
	wr64(blob + 8 * CK_NO, no);
	{
		struct blob_ctx bc = { blob, w };

		jdead_each(&j->dead, blob_put, &bc);
		w = bc.w;
	}
	for (size_t i = 0; no && j->idx.t && i <= j->idx.mask; i++)
		if (j->idx.t[i].key && (j->idx.t[i].flags & JENT_OPEN))
			wr64(blob + 8 * w++, j->idx.t[i].pos);
	free(b->ckpt);
	b->ckpt = blob;
	b->ckpt_len = w * 8;
	/* segments wholly before H are dead once this checkpoint is durable */
	{
		size_t k = 0;

		while (k < j->nseg && j->segs[k].num < JPOS_SEG(H) && j->segs[k].num != j->wseg) {
			if (grow((void **)&b->free_segs, &b->freecap, b->nfree + 1,
				 sizeof(*b->free_segs)) < 0)
				break;
			b->free_segs[b->nfree++] = j->segs[k].num;
			k++;
		}
		if (k)
			memmove(j->segs, j->segs + k, (j->nseg - k) * sizeof(*j->segs));
		j->nseg -= k;
		if (j->rb_open && JPOS_SEG(j->rb_pos) != j->rb.seg) {
			jreader_close(&j->rb);
			j->rb_open = 0;
		}
	}
handoff:
	j->ckpt_dirty = 0;
	env_handoff(j->env);
	return 0;
}

static void ckpt_cb(evutil_socket_t fd, short what, void *arg)
{
	checkpoint(arg, 0);
}

/* ---------------------------------------------------------------- verbs */

void journal_close(struct journal *j)
{
	struct jenv *env;

	if (!j)
		return;
	env = j->env;
	checkpoint(j, 1);
	wait_closed(j);
	if (j->lprev)
		j->lprev->lnext = j->lnext;
	else
		env->open = j->lnext;
	if (j->lnext)
		j->lnext->lprev = j->lprev;
	journal_free(j);
}

static int rm_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int rc = 0;

	if (!d)
		return errno == ENOENT ? 0 : TERN_ESYS;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT)
			rc = TERN_ESYS;
	}
	closedir(d);
	if (rmdir(dir) < 0 && errno != ENOENT)
		rc = TERN_ESYS;
	return rc;
}

static void finish_delete(struct jenv *env, const char *name)
{
	char *dir;

	if (!tern_name_valid(name, strlen(name)))
		return;
	if (asprintf(&dir, "%s/queues/%s", env->dir, name) < 0)
		return;
	if (rm_dir(dir) == 0)
		jcat_queue_del(env->cat, name);
	else
		fprintf(stderr, "journal: queue %s: cannot remove %s: %s\n", name, dir,
			strerror(errno));
	free(dir);
}

int journal_delete(struct journal *j)
{
	struct jenv *env = j->env;
	char *name = strdup(j->name);
	int rc;

	if (!name)
		return TERN_ENOMEM;
	/* 1. mark: if we crash from here on, jenv_open finishes the delete */
	rc = jcat_queue_put(env->cat, j->name, &j->opts, JCAT_DELETING);
	if (rc < 0) {
		free(name);
		return rc;
	}
	/* 2. stop the writer's use of the files */
	checkpoint(j, 2);
	wait_closed(j);
	if (j->lprev)
		j->lprev->lnext = j->lnext;
	else
		env->open = j->lnext;
	if (j->lnext)
		j->lnext->lprev = j->lprev;
	journal_free(j);
	/* 3. remove files, then the catalog entry and checkpoint */
	finish_delete(env, name);
	free(name);
	return 0;
}

/* Makes room for one more entry in the read-behind pending ring. */
static int bp_reserve(struct journal *j)
{
	size_t nc;
	struct bpend *nb;

	if (j->bp_n < j->bp_cap)
		return 0;
	nc = j->bp_cap ? j->bp_cap * 2 : 64;
	nb = malloc(nc * sizeof(*nb));
	if (!nb)
		return TERN_ENOMEM;
	for (size_t i = 0; i < j->bp_n; i++)
		nb[i] = j->bp[(j->bp_head + i) % j->bp_cap];
	free(j->bp);
	j->bp = nb;
	j->bp_cap = nc;
	j->bp_head = 0;
	return 0;
}

int journal_add(struct journal *j, struct item *it, int in_memory, uint64_t *ticket)
{
	struct jrec r = { .type = JREC_ADD };
	uint64_t keep = j->reserve + SMALL_REC, pos;
	int rc;

	*ticket = 0;
	if (failed_get(j))
		return TERN_EIO;
	if (keep > reserve_cap(j))
		keep = reserve_cap(j);
	rc = make_room(j, jrec_size(it->len), keep);
	if (rc < 0)
		return rc;
	if (!in_memory && bp_reserve(j) < 0)
		return TERN_ENOMEM;
	if (in_memory && !jmap_put(&j->idx, it->id))
		return TERN_ENOMEM;
	r.len = it->len;
	r.id = it->id;
	r.expiry_ms = it->expiry_ms;
	r.add_ms = it->add_ms;
	r.iflags = it->flags;
	r.ilen = it->len;
	rc = rec_append(j, &r, it, &pos);
	if (rc < 0) {
		if (in_memory)
			jmap_del(&j->idx, it->id);
		return rc;
	}
	j->reserve = keep;
	j->live_items++;
	j->live_bytes += it->len;
	if (it->id > j->max_id)
		j->max_id = it->id;
	if (in_memory) {
		struct jent *e = jmap_get(&j->idx, it->id);

		e->pos = pos;
		e->len = it->len;
		e->flags = 0;
	} else {
		j->bp[(j->bp_head + j->bp_n) % j->bp_cap] = (struct bpend){ item_ref(it), pos };
		j->bp_n++;
		if (!j->behind_items)
			j->rb_pos = pos;
		j->behind_items++;
		j->behind_bytes += it->len;
	}
	/* Every add gets a ticket.  always/odsync: resolved once the record
	 * is on stable storage.  none/interval: once it is written to the
	 * kernel (no sync), so a reply never precedes the write() and a
	 * process crash (SIGKILL) loses no acknowledged set in any mode. */
	*ticket = ++j->env->last_ticket;
	j->cur->ticket = *ticket;
	j->cur->ents[j->cur->nent - 1].ticket = *ticket; /* rec_append's */
	j->cur->sync = j->opts.sync;
	if (!journal_sync_waits(j->opts.sync))
		j->env->pass_acks++;
	return 0;
}

/* Appends a small record about the item at e (REMOVE, OPEN, ...).  Uses
 * the reserve for REMOVE/CONFIRM; OPEN/ABORT are written only when there is
 * room beyond it (they only order items after a crash). */
static int small_rec(struct journal *j, int type, uint64_t id, struct jent *e)
{
	struct jrec r = { .type = (uint8_t)type, .id = id };
	int uses_reserve = type == JREC_REMOVE || type == JREC_CONFIRM || type == JREC_FLUSH;
	uint64_t keep = j->reserve;
	int rc;

	if (uses_reserve)
		keep = j->reserve >= SMALL_REC ? j->reserve - SMALL_REC : 0;
	rc = make_room(j, SMALL_REC, keep);
	if (rc < 0) {
		j->dropped_records++;
		if (j->dropped_records == 1 || (j->dropped_records & 1023) == 0)
			fprintf(stderr, "journal: queue %s: no room for %s record (%" PRIu64
					" dropped so far)\n",
				j->name, jrec_type_name(type), j->dropped_records);
		/* the caller still updates the in-memory state: the next
		 * checkpoint records it (and frees what it made dead), which on
		 * a full disk is the only way space comes back */
		j->ckpt_dirty = 1;
		return type == JREC_FLUSH ? rc : 0;
	}
	if (e) {
		r.aux = e->pos;
		r.ilen = e->len;
	}
	rc = rec_append(j, &r, NULL, NULL);
	if (rc < 0)
		return rc;
	if (uses_reserve)
		j->reserve = keep;
	if (j->cur)
		j->cur->sync = j->opts.sync;
	return 0;
}

static int kill_item(struct journal *j, uint64_t id, int type)
{
	struct jent *e;
	struct jent copy;
	int rc;

	if (failed_get(j))
		return TERN_EIO;
	e = jmap_get(&j->idx, id);
	if (!e)
		return 0; /* not known as live: nothing to record */
	copy = *e;
	rc = small_rec(j, type, id, &copy);
	if (rc < 0)
		return rc;
	jdead_put(&j->dead, copy.pos); /* on ENOMEM the checkpoint is only less tight */
	jmap_del(&j->idx, id);
	if (j->live_items)
		j->live_items--;
	j->live_bytes -= copy.len <= j->live_bytes ? copy.len : j->live_bytes;
	return 0;
}

int journal_remove(struct journal *j, uint64_t id)
{
	return kill_item(j, id, JREC_REMOVE);
}

int journal_confirm(struct journal *j, uint64_t id)
{
	return kill_item(j, id, JREC_CONFIRM);
}

static int mark_item(struct journal *j, uint64_t id, int type)
{
	struct jent *e;
	struct jent copy;

	if (failed_get(j))
		return TERN_EIO;
	e = jmap_get(&j->idx, id);
	if (!e)
		return 0;
	if (type == JREC_OPEN)
		e->flags |= JENT_OPEN;
	else
		e->flags &= ~JENT_OPEN;
	copy = *e;
	return small_rec(j, type, id, &copy);
}

int journal_open_item(struct journal *j, uint64_t id)
{
	return mark_item(j, id, JREC_OPEN);
}

int journal_abort(struct journal *j, uint64_t id)
{
	return mark_item(j, id, JREC_ABORT);
}

int journal_flush(struct journal *j)
{
	int rc;

	if (failed_get(j))
		return TERN_EIO;
	rc = small_rec(j, JREC_FLUSH, 0, NULL);
	if (rc < 0)
		return rc;
	jmap_clear(&j->idx);
	jdead_clear(&j->dead);
	while (j->bp_n) {
		item_unref(j->bp[j->bp_head].it);
		j->bp[j->bp_head].it = NULL;
		j->bp_head = (j->bp_head + 1) % j->bp_cap;
		j->bp_n--;
	}
	j->live_items = j->live_bytes = 0;
	j->behind_items = j->behind_bytes = 0;
	j->rb_pos = 0;
	j->reserve = 0;
	return 0;
}

/* ---------------------------------------------------------- read-behind */

static uint32_t next_seg_after(struct journal *j, uint32_t seg)
{
	for (size_t i = 0; i < j->nseg; i++)
		if (j->segs[i].num > seg)
			return j->segs[i].num;
	return 0;
}

static void behind_took(struct journal *j, struct item *it, uint64_t pos)
{
	struct jent *e = jmap_put(&j->idx, it->id);

	if (e) {
		e->pos = pos;
		e->len = it->len;
		e->flags = 0;
	}
	j->behind_items--;
	j->behind_bytes -= it->len <= j->behind_bytes ? it->len : j->behind_bytes;
}

int journal_read_behind(struct journal *j, struct item **out)
{
	*out = NULL;
	while (j->behind_items) {
		struct jrec r;
		const unsigned char *body;
		uint64_t off;
		uint32_t seg = JPOS_SEG(j->rb_pos);
		int rc;

		if (j->rb_pos >= j->written_pos) {
			struct bpend *p;

			/* not in the file yet: the pending batch holds it */
			if (!j->bp_n) {
				fprintf(stderr, "journal: queue %s: %" PRIu64
						" behind items missing from the journal\n",
					j->name, j->behind_items);
				j->behind_items = j->behind_bytes = 0;
				break;
			}
			p = &j->bp[j->bp_head];
			*out = p->it;
			p->it = NULL;
			j->rb_pos = p->pos + jrec_size((*out)->len);
			behind_took(j, *out, p->pos);
			j->bp_head = (j->bp_head + 1) % j->bp_cap;
			j->bp_n--;
			return 0;
		}
		if (!j->rb_open || j->rb.seg != seg) {
			if (j->rb_open)
				jreader_close(&j->rb);
			j->rb_open = 0;
			rc = open_seg_reader(j, seg, &j->rb);
			if (rc < 0) {
				uint32_t nx = next_seg_after(j, seg);

				fprintf(stderr, "journal: queue %s: read-behind: segment %08u: %s\n",
					j->name, seg, tern_strerror(rc));
				j->corrupt_seen++;
				j->rb_pos = nx ? JPOS(nx, JSEG_HDR_SIZE) : j->written_pos;
				continue;
			}
			j->rb_open = 1;
			j->rb_clipped = 0;
		}
		if (seg == JPOS_SEG(j->written_pos)) {
			j->rb.fsize = JPOS_OFF(j->written_pos); /* only what is written */
			j->rb_clipped = 1;
		} else if (j->rb_clipped) {
			if (jreader_refresh(&j->rb) < 0)
				return TERN_ESYS;
			j->rb_clipped = 0;
		}
		if (j->rb.off != JPOS_OFF(j->rb_pos) || j->rb.done)
			jreader_seek(&j->rb, JPOS_OFF(j->rb_pos));
		rc = jreader_next(&j->rb, &off, &r, &body);
		if (rc < 0)
			return rc;
		if (rc == JREAD_END) {
			uint32_t nx = next_seg_after(j, seg);

			if (seg < JPOS_SEG(j->written_pos) && nx)
				j->rb_pos = JPOS(nx, JSEG_HDR_SIZE);
			else
				j->rb_pos = j->written_pos;
			continue;
		}
		if (rc == JREAD_DAMAGE) {
			log_damage(j, &j->rb, NULL);
			j->corrupt_seen++;
			j->rb_pos = JPOS(seg, j->rb.off);
			if (j->rb.done) {
				uint32_t nx = next_seg_after(j, seg);

				j->rb_pos = nx ? JPOS(nx, JSEG_HDR_SIZE) : j->written_pos;
			}
			continue;
		}
		j->rb_pos = JPOS(seg, j->rb.off);
		if (r.type == JREC_ADD && !jdead_has(&j->dead, JPOS(seg, off)) &&
		    !jmap_get(&j->idx, r.id)) {
			struct item *it = item_new(r.len);

			if (!it)
				return TERN_ENOMEM;
			memcpy(it->data, body, r.len);
			it->id = r.id;
			it->flags = r.iflags;
			it->expiry_ms = r.expiry_ms;
			it->add_ms = r.add_ms;
			behind_took(j, it, JPOS(seg, off));
			*out = it;
			return 0;
		}
	}
	if (!j->behind_items && j->rb_open) {
		jreader_close(&j->rb);
		j->rb_open = 0;
	}
	return 0;
}

void journal_get_stats(struct journal *j, struct journal_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->segments = j->nseg + (spare_get(j) == SP_READY ? 1 : 0);
	for (size_t i = 0; i < j->nseg; i++)
		st->disk_bytes += j->segs[i].size;
	if (spare_get(j) == SP_READY)
		st->disk_bytes += seg_target(j);
	st->behind_items = j->behind_items;
	st->behind_bytes = j->behind_bytes;
	st->records_written = __atomic_load_n(&j->st_records, __ATOMIC_RELAXED);
	st->syncs = __atomic_load_n(&j->st_syncs, __ATOMIC_RELAXED);
	st->write_errors = __atomic_load_n(&j->st_errors, __ATOMIC_RELAXED);
}
