/*
 * jpriv.h: what the files of journal/ share (moved from journal.c).
 */
#ifndef TERN_JOURNAL_JPRIV_H
#define TERN_JOURNAL_JPRIV_H

#include <event2/event.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/uio.h>

#include "journal.h"
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

extern const unsigned char zeros[ZERO_CHUNK];

enum { SJ_SEG = 0, SJ_DIR, SJ_SPARE };

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

static inline int64_t mono_ms(void)
{
	return tern_mono_ms();
}

static inline int spare_get(struct journal *j)
{
	return __atomic_load_n(&j->spare_state, __ATOMIC_ACQUIRE);
}

static inline void spare_set(struct journal *j, int s)
{
	__atomic_store_n(&j->spare_state, s, __ATOMIC_RELEASE);
}

static inline int failed_get(struct journal *j)
{
	return __atomic_load_n(&j->failed, __ATOMIC_ACQUIRE);
}

static inline uint64_t dirty_get(struct journal *j)
{
	return __atomic_load_n(&j->w_dirty, __ATOMIC_RELAXED);
}

static inline void stat_add(uint64_t *p, uint64_t v)
{
	__atomic_add_fetch(p, v, __ATOMIC_RELAXED);
}

static inline int grow(void **p, size_t *cap, size_t need, size_t elem)
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

/* Checkpoint blob (little-endian u64 words):
 *   magic, version, P (journal position covered), H (oldest position that
 *   may hold a live record), max_id, live_items, live_bytes, nD, nO,
 *   D[nD] (dead ADD positions >= H), O[nO] (positions of open items). */
enum { CK_MAGIC, CK_VERSION, CK_P, CK_H, CK_MAXID, CK_LIVE, CK_BYTES, CK_ND,
       CK_NO, CK_WORDS };

static inline uint64_t rd64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static inline void wr64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

struct rec_item {
	struct item *it;
	uint64_t pos;
	int open;
};

struct recover_state {
	struct jmap open; /* positions of open items */
	uint64_t H;
};

/* jbatch.c */
void batch_free(struct jbatch *b);
struct jbatch *batch_get(struct journal *j);
int rec_append(struct journal *j, struct jrec *r, struct item *it,
		      uint64_t *pos);
int make_room(struct journal *j, uint64_t rsize, uint64_t keep);
uint64_t reserve_cap(const struct journal *j);
uint64_t tail_pos(const struct journal *j);
int env_write_inline(struct jenv *env, struct jbatch *list);
void env_handoff(struct jenv *env);
void pass_cb(evutil_socket_t fd, short what, void *arg);
void env_done(struct jenv *env);
void done_cb(evutil_socket_t fd, short what, void *arg);

/* jbehind.c */
void bp_pop_written(struct journal *j);
int bp_reserve(struct journal *j);

/* jckpt.c */
int checkpoint(struct journal *j, int close_mode);
void ckpt_cb(evutil_socket_t fd, short what, void *arg);

/* jgroup.c */
void w_group(struct jenv *env, struct jbatch *list);

/* jpolicy.c */
void opts_fix(struct journal_opts *o);

/* jrecover.c */
int cmp_rec_item(const void *a, const void *b);
int replay(struct journal *j, uint64_t P, struct recover_state *rs,
		  struct journal_recovery *rec);
int load(struct journal *j, struct recover_state *rs, uint64_t P,
		struct journal_recovery *rec, struct rec_item **outv, size_t *outn);
int load_ckpt(struct journal *j, uint64_t *P, struct recover_state *rs);

/* jseg.c */
void seg_name(char *buf, size_t n, uint32_t seg);
int wr_all(int fd, const void *buf, size_t n, uint64_t off);
int wrv_all(int fd, struct iovec *iov, int cnt, uint64_t off);
int segs_add(struct journal *j, uint32_t num, uint64_t size);
uint64_t seg_target(struct journal *j);
void seg_target_init(struct journal *j);
void seg_unlink_gently(int dirfd, const char *name);
char *seg_path(const struct journal *j, uint32_t seg);
int open_seg_reader(struct journal *j, uint32_t seg, struct jreader *rd);
void log_damage(struct journal *j, struct jreader *rd,
		       struct journal_recovery *rec);
int list_segments(struct journal *j);
int rm_dir(const char *dir);
uint32_t next_seg_after(struct journal *j, uint32_t seg);

/* jspare.c */
int w_spare_step(struct journal *j, const struct journal_opts *o, int all,
			uint64_t target);
void w_spare_now(struct journal *j, const struct journal_opts *o, uint64_t size);
void w_free_segs(struct journal *j, const uint32_t *segs, size_t nfree,
			const struct journal_opts *o);

/* jsyncer.c */
void s_post(struct jenv *env, struct sjob *s);
void s_barrier(struct jenv *env);
void s_writeback_steps(int fd, uint64_t lo, uint64_t hi);
void sync_range_take(struct journal *j, struct sjob *s);
int s_post_sync(struct journal *j, int fd, int kind, uint64_t dirty, int interval);
void s_stop(struct jenv *env);
void *s_main(void *arg);

/* jwriter.c */
void wake_writer_unlock(struct jenv *env);
void w_opts_get(struct journal *j, struct journal_opts *o);
void w_fail(struct journal *j, const char *what, int e);
int w_sync(struct journal *j, int fd);
int w_activate(struct journal *j, uint32_t seg, uint64_t size,
		      enum journal_sync sync, const struct journal_opts *o);
void w_close_files(struct journal *j, int sync);
void w_take_frees(struct jenv *env);
void *w_main(void *arg);

#endif
