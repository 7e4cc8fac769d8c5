/*
 * jpriv.h: what the files of journal/ share: the threads and who owns what,
 * the sync policy table, the state of a journal and of the environment;
 * jcalls.h, included at its end, declares the functions one file calls in
 * another.  Private to journal/.
 *
 * THREADS AND OWNERSHIP (docs/JOURNAL.md has the same as a table)
 *
 * Event-loop thread (the server's).  Every public verb (journal.h) runs
 * here.  It encodes each mutation as a record header into the journal's
 * batch for this loop pass and assigns the record its position (segment,
 * offset), so it always knows where an item lives.  At the end of the pass
 * (pass_ev, or jenv_end_early) it hands every dirty journal's batch over
 * at once: jbatch.c.  It owns `j->loop` and `env->loop`, and touches the
 * rest only through the locks and atomics below.  A mutation never waits
 * for the disk or the writer; the exceptions are stated where they are:
 * loop_write_inline (it writes a batch to the page cache itself when the
 * writer is idle), wait_closed (journal_close/delete wait for the writer to
 * let go), and the rare verbs that read or commit to the catalog or read
 * segments (open, set_opts, delete, read-behind).
 *
 * Writer thread (w_main, jwriter.c).  Takes every queued list of batches
 * (a group: group commit, jgroup.c), writes them with one pwritev per
 * journal, syncs as the mode requires, reports the tickets back through
 * done_ev, and hands checkpoints to the syncer or the reclaimer.  Between
 * groups it prepares spare segments (jspare.c) and schedules interval
 * syncs, taking both from its lists (jwork.c).  It owns `j->sp`, and `j->w`
 * (and env->fdc, the segment descriptor cache) while it holds env->wlock.
 *
 * Loop, writing inline.  loop_write_inline runs the writer's group code
 * (w_group) on the loop thread, under env->wlock, for batches that only
 * write to the page cache and touch neither the spare, nor a checkpoint,
 * nor a new segment (inline_ok).  So `j->w` is "under wlock", whichever
 * thread holds it; `j->sp` is the writer thread's alone.
 *
 * Syncer and reclaimer threads (s_main, jsyncer.c).  Run, in order, the
 * jobs no reply waits for (enum sjob_kind): the syncer background
 * fdatasyncs and the checkpoints that must follow them (a checkpoint
 * commits only after every sync posted before it succeeded); the reclaimer
 * the checkpoints that wait for no sync, and unlinks of dead segments.
 * They touch only their jobs, the atomics, the catalog (LMDB serialises
 * writers) and, under mu_lock, the hand-offs.
 * A failed sync fails the journal from here (jfail: any thread).
 *
 * Fsync helpers (psync_main, jgroup.c).  In a group that must sync several
 * journals, each journal but the first gets a short-lived thread that runs
 * one fdatasync of its segment and exits; the writer joins them.  They read
 * only the descriptor they were given.
 *
 * Hand-offs.  Between the loop and the writer, all in handoff.c: loop ->
 * writer: env->mu.q_head (a list of batches), then a signal on env->cv.
 * Writer -> loop: env->mu.d_head (finished batches) and env->mu.compl
 * (ticket reports), then handoff_wake: from the writer thread a write to
 * an eventfd the loop watches (wake_ev; one write until the loop reads
 * it), from the loop itself (inline) event_active(done_ev); env_done()
 * runs on the loop.  Only the loop thread touches the event base, so the
 * base runs without libevent's locks.  Writer -> syncer or reclaimer:
 * s_post (their queues, env->syncer and env->reclaimer, and their cv).  Syncer or reclaimer ->
 * writer: env->mu.f_head (a segment a committed checkpoint freed, which the
 * writer may reuse as its spare).
 * Every hand-off is under env->mu_lock, which guards every `mu` part;
 * signals come after the unlock (writer_wake_unlock).  Lock order: wlock
 * before mu_lock, never the reverse.
 *
 * Copies of a journal's options: j->loop.opts (the loop's; journal_set_opts
 * changes it), j->mu.opts (the writer's copy, under mu_lock: a reload must not
 * change them under a running group), b->sync (the mode a batch's records
 * were appended under: a reload between the append and the write does not
 * change what their tickets were promised) and j->w.dsync (whether the
 * open segment's records are written with RWF_DSYNC: one per segment, since
 * one pwritev may gather batches appended under two modes around a reload;
 * only a new segment changes it).
 *
 * Prefixes of the functions below: w_ runs on the writer thread (or under
 * wlock, see above); s_ on the syncer; jb_, env_, jckpt_, jrecover,
 * jbehind_ on the loop; handoff_ on the side each one names (jcalls.h);
 * jseg_, jfail and *_wake_unlock on any thread.
 *
 * CALLS BETWEEN THE FILES run one way: each file calls only files listed
 * after it here, and a lower file reaches up only through a callback (the
 * loop's events; journal.h's durable and lost callbacks).
 *   The loop's: journal.c (the public verbs), jrecover.c (recovery at
 *   open), jckpt.c (checkpoints and compaction), jbatch.c (the pass's
 *   batches), jbehind.c (read-behind).
 *   The writer's: jwriter.c (its thread), jgroup.c (a group; also run
 *   inline by jbatch.c), jspare.c (its segment files), jsyncer.c (the
 *   syncer and the reclaimer).
 *   What both sides use: handoff.c (the hand-off between them), catalog.c,
 *   jwork.c, jseg.c, jstats.c, jpolicy.c, record.c, ckblob.c, jdead.c,
 *   jmap.c, jio.c.
 * jcalls.h declares the calls in that order.
 */
#ifndef TERN_JOURNAL_JPRIV_H
#define TERN_JOURNAL_JPRIV_H

#include <event2/event.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/uio.h>

#include "ckblob.h"
#include "journal.h"
#include "jdead.h"
#include "jmap.h"
#include "record.h"

#define SPARE_NAME "spare.seg"
/* Zero-fill step: small enough that a step between two group commits
 * delays the next one by well under a millisecond. */
#define ZERO_CHUNK (256u << 10)
/*
 * Zeros ahead (jsync_policy.zero_ahead): a segment whose spare was
 * reserved by fallocate() (preallocate = auto; or, with preallocate =
 * zero, the records outran the spare's zero-fill, w_spare_now) has
 * unwritten extents, and each synced write that first writes into one
 * (always's group sync, odsync's RWF_DSYNC write) also writes the
 * extent's conversion.  The writer then writes zeros into that segment ahead of its
 * records, ZERO_CHUNK at a step with its writeback started at once,
 * keeping ZERO_AHEAD bytes zeroed past the end of what is written: one
 * sync per chunk writes a conversion, not nearly every one.  Unlike a
 * zero-filled spare, no sync of a whole segment's zeros stands between
 * two groups.  The zeros start only at or past the
 * end of what is written (w.hi, rounded up to a block) and are written
 * under wlock, as every record is, so no zero lands on a record.
 */
#define ZERO_AHEAD (1u << 20)
#define JNO_UNWRITTEN UINT64_MAX
/*
 * page_cache = drop: the pages of a segment the syncer has synced, and
 * those read-behind has read, are dropped from the page cache
 * (POSIX_FADV_DONTNEED) DROP_STEP at a time, keeping the newest DROP_LAG:
 * the kernel puts new pages on its LRU lists in per-CPU batches, and
 * dropping a page still in a batch drains every CPU's batch first (an IPI
 * to each).  Dropped in larger steps and further behind the newest page,
 * the pages have left those batches, and a read back costs a small part
 * of the system time it costs when each step drains them.
 */
#define DROP_STEP (4u << 20)
#define DROP_LAG (4u << 20)
#define JDROP_ALL UINT64_MAX
#define SEGEND_SIZE JREC_HDR_SIZE /* jrec_size(0) */
#define SMALL_REC JREC_HDR_SIZE   /* REMOVE/OPEN/CONFIRM/ABORT/FLUSH */
/*
 * Segment sizes grow: a queue's first segment is FIRST_SEG_SIZE, each next
 * one twice the previous, up to segment_size.  A server with thousands of
 * mostly idle queues would otherwise reserve two full segments (128 MiB by
 * default) of zero-filled disk per queue; a busy queue reaches full-size
 * segments after a few megabytes.  The writer prepares the spare at this
 * size; the loop thread advances it when it starts a segment, before the
 * batch that activates the segment is handed over, so the writer always
 * prepares the size the loop will ask for next.
 *
 * A spare is prepared ahead of need only for queues that have shown they
 * need one: after a segment of SPARE_AHEAD_MIN or more is started, or once
 * half of a smaller one is written.  A queue holding a few messages so
 * keeps one small segment and no spare; should it roll before its spare is
 * ready, the writer reserves the next segment on the spot (fallocate), which
 * for a small segment costs about as much as a rename.
 *
 * A queue that fills its segments fast skips part of the doubling: the
 * size planned is at least what it would write in SEG_FILL_US at the rate
 * it is writing (a power of two, up to segment_size).  So that a burst does
 * not read as a stream, that rate is taken over SEG_RATE_MIN_US at least,
 * and not in a queue's first segment (since it was opened): a burst must
 * fill that one and half of the next within SEG_RATE_MIN_US to count; and
 * the size planned is at most SEG_SEEN_X times (rounded up to a power of
 * two) what the queue has written since it was opened, so that what a
 * burst into an idle queue leaves reserved is in proportion to it.  The
 * loop measures it where the writer is about to prepare the spare: halfway
 * through a small segment, and when it starts a segment (for the segment
 * after it, whose spare is prepared at once when the new one is large).  So
 * a busy new queue reaches full-size segments after seven segments rather
 * than a dozen, each of whose starts is the writer's work on a CPU the loop
 * may share.
 *
 * The rate never costs a set that doubling would have stored: the loop
 * starts a segment larger than doubling gives only on a spare the writer
 * has reserved at that size (a burst that fills a segment before the writer
 * has seen its plan takes the doubled size), and a spare that finds no room
 * at the rate's size is planned at half of it and tried again, down to the
 * doubled size (w_spare_planned).
 */
#define FIRST_SEG_SIZE (16ull << 10)
#define SEG_FILL_US 1000000
#define SEG_RATE_MIN_US 10000
#define SEG_SEEN_X 8
#define SPARE_AHEAD_MIN (1ull << 20)

/* Where in a segment of size bytes the writer starts preparing the next
 * spare: half-way through a small one; 0 for a large one, whose spare it
 * prepares as soon as the segment starts.  The loop measures the fill rate
 * at the same point (SEG_FILL_US). */
static inline uint64_t jseg_spare_at(uint64_t size)
{
	return size < SPARE_AHEAD_MIN ? size / 2 : 0;
}

/* A planned size (atom.next_size) as a segment gets it: up to
 * segment_size, which 0 (no plan) also means (jseg_target). */
static inline uint64_t jseg_capped(uint64_t v, const struct journal_opts *o)
{
	return v == 0 || v > o->segment_size ? o->segment_size : v;
}

/* Zeros for PAD bodies and for zero-filling spare segments. */
extern const unsigned char jzeros[ZERO_CHUNK];

/* ---------------------------------------------------------- sync policy */

/* Which batches the loop may write itself (loop_write_inline). */
/* The most sets of a hand-over the loop syncs itself for a lone client
 * (jbatch.c, env_handoff): a client pipelining a few sets waits for all
 * of them before it sends more, but one streaming hundreds would have its
 * next sets read only after the loop's sync, where the writer syncs while
 * the loop reads them. */
#define LONE_MAX_SETS 16

enum jinline {
	JINLINE_ANY,        /* every batch: its write goes to the page cache */
	JINLINE_LONE,       /* batches nobody waits for (removes, opens) where
			     * a write is not a sync, and a hand-over of a few
			     * sets one client alone waits for: the loop syncs
			     * it */
};

/*
 * What a sync mode does at each point where the journal acts.  This table
 * (jsync_policies, jpolicy.c) is the only place where the modes differ:
 * the code asks its mode's row, never which mode it is.
 */
struct jsync_policy {
	const char *name;      /* the configuration word */
	/* on add (loop): when the add's ticket, and so its STORED, resolves:
	 * 1 once the record is on stable storage, 0 once the writer has
	 * handed it to the kernel (a process crash loses nothing either way) */
	uint8_t ack_stable;
	/* on hand-off (loop) */
	uint8_t inline_write;  /* enum jinline */
	uint8_t pad_ticketed;  /* pad a batch with tickets to a 4 KiB boundary:
				* it is one synchronous write, and one that
				* ended inside a block would make the next
				* synchronous write rewrite that block */
	/* on write (writer) */
	uint8_t write_dsync;   /* write the records with RWF_DSYNC (pwritev2:
				* the call returns once they are stable, as
				* O_DSYNC would; the zeros ahead are written
				* without it) */
	/* on group (writer) */
	uint8_t group_sync;    /* fdatasync each journal whose batches hold
				* tickets, unless its records are written
				* with RWF_DSYNC */
	uint8_t syncs_later;   /* the syncs no reply waits for (a segment left
				* at a roll, the directory after a rename, a new
				* spare, the records a checkpoint covers) go to
				* the syncer; 0: done in the group, before any
				* ticket after them */
	/* on timer (writer) */
	uint8_t timer_sync;    /* fdatasync every sync_interval_ms (by the syncer) */
	/* on segment start (writer) */
	uint8_t zero_ahead;    /* a segment reserved by fallocate() is
				* zero-filled ahead of its records (ZERO_AHEAD),
				* unless preallocate = fallocate or none
				* (journal_opts.zero_ahead) */
};

extern const struct jsync_policy jsync_policies[];

/* The row of mode s (a valid mode: journal_sync_parse or the default). */
static inline const struct jsync_policy *jpolicy(enum journal_sync s)
{
	return &jsync_policies[s];
}

/* ------------------------------------------------------ batches (loop) */

/* What a batch asks the writer to do with the journal after its records. */
enum jclose {
	JCLOSE_NONE = 0, /* nothing: the journal stays open */
	JCLOSE_KEEP,     /* sync and close its files, which stay (journal_close) */
	JCLOSE_DELETE,   /* close its files unsynced, no checkpoint (journal_delete) */
};

struct jseg {
	uint32_t num;
	uint64_t size;
	uint64_t end;  /* where its records end (after its SEGEND) once the loop
			  has left it; 0 while it is the current one, or when
			  it was found on disk at open */
	int lost;      /* given up by the writer (w_abandon): no file, or a torn one */
	/* The ids of the ADD records written here, for a checkpoint without a
	 * walk of the index (noted by jseg_note_add and jseg_note_index, read
	 * by jckpt.c's idx_scan): while they increase with their positions,
	 * the index entry here with the lowest id is the one with the lowest
	 * position. */
	uint64_t kcur;  /* no index entry with a lower id has its ADD here */
	uint64_t klast; /* the highest id of an ADD here; 0: none */
	int unordered;  /* ids not increasing here (compaction's copies): the
			   index is walked */
	int learn;      /* found at open: its ids are learned as the index
			   takes its items, which must come in file order */
	uint64_t plast; /* learn: the position of the last one taken */
};

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

/*
 * One journal's records of one loop pass.  Built on the loop; from the
 * hand-off until env_done gives it back, the writer's (or the loop's
 * inline write's) alone.
 */
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
	enum journal_sync sync; /* the mode its records were appended under */
	uint64_t end_pos;
	unsigned char *ckpt; /* checkpoint blob to commit after the writes */
	size_t ckpt_len;
	struct jseg *free_segs; /* dead segments to reuse or unlink after ckpt */
	size_t nfree, freecap;
	enum jclose close;
	int err;
	size_t err_run;  /* with err: the first of its runs that failed, the
			  * runs before it written (a segment start that
			  * found no room); 0: every run failed */
	int ckpt_here; /* writer: its checkpoint is committed in the group */
	int relocated; /* it holds compaction's MOVED copies (jckpt.c) */
};

struct bpend { /* read-behind item whose record is not known written yet */
	struct item *it;
	uint64_t pos;
};



/* SP_NONE: no spare file is being prepared (none needed yet, or
 * preallocate = none); SP_PENDING: the writer prepares one; SP_READY; and
 * SP_NOSPC: preparing it failed, retried later. */
enum spare_state { SP_NONE = 0, SP_PENDING, SP_READY, SP_NOSPC };

/* ------------------------------------------------------------ journal */

/* A doubly linked list of journals (the writer's work lists, jwork.c). */
struct jlink {
	struct journal *prev, *next;
};

struct jlist {
	struct journal *head, *tail;
};

struct journal {
	/* fixed at journal_open: read by every thread.  No descriptor is
	 * kept for the directory: files are named by path (jpath), so an idle
	 * queue holds no descriptor at all. */
	struct jenv *env;
	char *name;
	char *dir;

	/* the event-loop thread's alone */
	struct {
		struct journal_opts opts;
		journal_lost_fn lost_fn; /* journal_set_lost_fn */
		void *lost_arg;
		struct journal *lnext, *lprev; /* env->loop.open */
		struct journal *dnext;         /* env->loop.dirty */
		int dirty;
		/* write position */
		struct jbatch *cur, *pool;
		struct jbatch *last_b; /* kept for the close when no batch can be allocated */
		uint32_t last_seg; /* highest segment number used so far */
		uint32_t prev_seg; /* the last segment started that exists (the
				    * next one's header names it) */
		uint32_t cur_prev; /* the current segment's prev_seg */
		uint32_t wseg;     /* current segment; 0 = none yet */
		uint64_t wseg_size;
		uint64_t woff;
		int64_t wseg_start_us; /* jio.mono_us when wseg was started */
		uint64_t grow_at;  /* woff at which next_size is reconsidered (0:
				    * not in this segment; SEG_FILL_US) */
		uint64_t seen_bytes; /* written into the segments left since open
				      * (0: wseg is the first, whose fill rate
				      * does not count) */
		uint64_t reserve;  /* bytes kept free in wseg for future REMOVE/CONFIRM */
		uint64_t written_pos; /* the writer reported everything before it written */
		struct jseg *segs;
		size_t nseg, segcap;
		/* what is live */
		struct jmap idx;   /* id -> ADD position, for in-memory live items */
		struct jmap flagged; /* the ids of its entries with either flag,
				      * which a checkpoint lists (jckpt.c) */
		int flagged_lost;    /* an insert into flagged failed (no
				      * memory): the next checkpoint walks */
		uint64_t index_walks; /* checkpoints and compactions that
				       * walked the index (jckpt.c) */
		struct jdead dead; /* positions of dead ADD records at or after H */
		uint64_t live_items, live_bytes, max_id;
		/* read-behind */
		uint64_t behind_items, behind_bytes, rb_pos;
		struct bpend *bp;  /* ring of behind items not yet written */
		size_t bp_head, bp_n, bp_cap;
		struct jreader rb;
		int rb_open, rb_clipped;
		uint64_t rb_dropped; /* page_cache = drop: rb's pages before this
				      * offset are dropped (jbehind.c) */
		/* checkpoints */
		struct event *ckpt_ev;     /* the periodic checkpoint */
		struct event *ckpt_now_ev; /* one at the end of this pass: a
					    * segment was left (its own event:
					    * activating the periodic one would
					    * push its next run an interval
					    * later each time) */
		int ckpt_dirty;
		int ckpt_soon;     /* ckpt_now_ev is active */
		int64_t last_kick;
		uint64_t dropped_records, corrupt_seen;
	} loop;

	/* the writer's, under env->wlock (the writer thread, or the loop in
	 * loop_write_inline) */
	struct {
		int fd;            /* current segment file; -1 when there is none
				    * or the descriptor cache closed it (jseg_wfd
				    * opens it again) */
		uint32_t seg;      /* current segment; 0 none */
		int dsync;         /* its records are written with RWF_DSYNC */
		struct journal *lru_prev, *lru_next; /* env->fdc, while fd >= 0 */
		uint64_t seg_size; /* the current segment's size */
		uint32_t lost;     /* the last segment given up (w_abandon) */
		int lost_logged;
		uint64_t spare_at; /* ask for the next spare once hi reaches it
				    * (0: asked, or not to be asked) */
		uint64_t gen;      /* bumped by every write */
		uint64_t hi;       /* end of what is written in seg */
		uint64_t sync_lo;  /* where the next sync job's range starts */
		/* zeros ahead (ZERO_AHEAD): the segment's bytes before zero_to
		 * are written (records or zeros); zero_end: the end of the
		 * zeros to write (the segment's size), 0 when the segment gets
		 * none; zero_at: ask for the next step once hi reaches it (0:
		 * asked, or none) */
		uint64_t zero_to, zero_end, zero_at;
	} w;

	/* the writer thread's alone (the inline write never touches them) */
	struct {
		int fd;            /* spare.seg being prepared; -1 none */
		uint64_t done;     /* its bytes prepared so far */
		int reused;        /* the spare is a dead segment (see w_free_segs) */
		uint64_t hdr_gen;  /* reused spares so far: the one now has its
				    * header block zeroed, durable once
				    * atom.spare_hdr_synced reaches this */
		uint64_t unwritten_from; /* its blocks from here on are
				    * fallocate()d (JNO_UNWRITTEN: none, all
				    * written): a dead segment may replace it,
				    * and the segment it becomes gets zeros
				    * ahead */
		int shrink_logged; /* a planned size found no room (logged once
				    * until a spare is ready at its plan) */
	} sp;

	/* shared, under env->mu_lock */
	struct {
		struct journal_opts opts; /* the writer's copy */
		int64_t sp_retry_at;   /* retry a failed spare then (ms) */
		int closed;            /* the writer let go of the journal */
		/* the writer's work lists (jwork.c) */
		struct jlink sp_link;  /* env->mu.w_spare or w_nospc */
		int sp_list;           /* which: SP_PENDING, SP_NOSPC, or SP_NONE */
		struct jlink z_link;   /* env->mu.w_zero */
		int z_listed;          /* on it: a step of zeros ahead is due */
		long heap_i;           /* its index in env->mu.w_timer; -1 none */
		int64_t due;           /* when its interval sync is due (ms) */
		int ckpt_syncing;      /* checkpoints queued on the syncer: the
				        * reclaimer takes none of its until they
				        * are done (they commit in order) */
	} mu;

	/* shared, atomic (__atomic builtins only) */
	struct {
		uint64_t dirty;      /* 0 = synced, else the w.gen of the last
				      * write not yet synced (the syncer clears
				      * it only if no write came since it looked) */
		int64_t last_sync;   /* when the segment was last synced or found
				      * clean: the next interval sync is due
				      * sync_interval_ms later */
		int s_pending;       /* an interval sync is with the syncer */
		int spare_state;     /* enum spare_state */
		int failed;          /* 0 or TERN_EIO, for good */
		uint32_t lost_seg;   /* w.lost, for the loop (jb_check_lost) */
		uint64_t next_size;  /* size of the next segment (jseg_target) */
		uint64_t plain_size; /* what doubling alone gives the next
				      * segment, planned when the loop started
				      * the current one (0: none started since
				      * open); next_size is never below it */
		/* what the journal holds on disk besides the loop's list of
		 * segments (journal_get_stats): segments dead since a
		 * checkpoint and not reclaimed yet (the loop adds them, the
		 * writer and the syncer subtract them), and the spare file */
		uint64_t dead_bytes, dead_files, spare_bytes;
		/* the syncer synced the zeroed header of reused spare number
		 * this (sp.hdr_gen) */
		uint64_t spare_hdr_synced;
		uint64_t st_records, st_syncs, st_errors;
	} atom;

	/* the syncer thread's alone: page_cache = drop (jsyncer.c) */
	struct {
		uint32_t drop_seg;   /* the segment dropped up to drop_off */
		uint64_t drop_off;
	} syncer;
};

struct jcompl {
	uint64_t upto;
	int err;
};

/* ------------------------------------------------------------- syncer */

/*
 * The syncer's job kinds.  Its jobs are the work no reply waits for: on the
 * writer, a set that needed the writer meanwhile (a new segment, a
 * checkpoint, a missed try-lock) would wait for all of them.
 */
enum sjob_kind {
	SJOB_SYNC_SEG,      /* fdatasync a segment left behind at a roll */
	SJOB_SYNC_INTERVAL, /* the interval mode's periodic fdatasync */
	SJOB_SYNC_DIR,      /* fsync the directory after a rename */
	SJOB_SYNC_SPARE,    /* fdatasync a freshly prepared spare */
	SJOB_CHECKPOINT,    /* (sync the segment, then) commit a checkpoint,
			     * then hand the segments it freed to the writer */
	SJOB_UNLINK,        /* unlink dead segments, gently */
};

/* Which file a syncer job syncs: it opens it by name when the job runs,
 * so queued jobs hold no descriptors (thousands of queues may each have one
 * queued). */
enum sfile {
	SFILE_NONE = 0,
	SFILE_SEG,   /* segment seg of the journal */
	SFILE_SPARE, /* its spare.seg (gone by then: renamed, nothing to do) */
	SFILE_DIR,   /* its directory */
};

struct sjob {
	struct sjob *next;
	enum sjob_kind kind;
	struct journal *j;
	enum sfile file;     /* fdatasync this file first (SFILE_NONE: nothing) */
	int counted;         /* a checkpoint counted in its journal's
			      * mu.ckpt_syncing (s_post) */
	uint32_t seg;        /* SFILE_SEG: which segment */
	uint64_t dirty;      /* atom.dirty when fd was taken: cleared if unchanged */
	uint64_t lo, hi;     /* segment syncs: the bytes written since the last job */
	uint64_t spare_gen;  /* SJOB_SYNC_SPARE of a reused spare: its sp.hdr_gen */
	int drop;            /* page_cache = drop: drop the synced pages (set by
			      * s_post from the writer's options; a sync run in
			      * place drops nothing) */
	unsigned char *ckpt; /* SJOB_CHECKPOINT: the blob (owned) */
	size_t ckpt_len;
	struct jseg *free_segs; /* SJOB_CHECKPOINT: segments it frees, for the
			      * writer; SJOB_UNLINK: segments to unlink */
	size_t nfree;
};

/*
 * A thread that runs jobs (struct sjob) in the order they were posted, a
 * batch at a time: the syncer (syncs, and the checkpoints that must follow
 * them) and the reclaimer (checkpoints that wait for no sync, and unlinks:
 * under a fast stream a sync can take most of a second, and the segments
 * a checkpoint frees would wait for it on the syncer).  The queue parts
 * are under env->mu_lock.
 */
struct sthread {
	pthread_t thr;
	int started;
	pthread_cond_t cv;           /* wakes it */
	struct sjob *head, **tail;
	uint64_t posted, done;
	int stop;
	int busy;                    /* atomic: off its cv */
};

/* --------------------------------------------------------- environment */

struct jenv {
	/* fixed at jenv_open: read by every thread */
	char *dir;
	struct jcat *cat;      /* LMDB (MDB_NOTLS): loop, writer and syncer */
	struct event_base *base;
	struct event *pass_ev; /* loop: end of the pass's batch */
	/* env_done on the loop: done_ev activated by the loop itself (a group
	 * written inline), wake_ev by the writer through wake_fd (an eventfd
	 * the loop reads), so that no other thread touches the event base and
	 * the base needs no locks */
	struct event *done_ev;
	struct event *wake_ev;
	int wake_fd;
	pthread_t loop_thr;    /* the event loop's thread */
	jenv_durable_fn durable;
	void *arg;
	int lock_fd;           /* DATA_DIR/lock, flock()ed exclusively */
	int queues_fd;         /* DATA_DIR/queues, synced after a queue's
				* directory is made or removed (open for good:
				* no descriptor to find then) */

	/* the event-loop thread's alone */
	struct {
		int pass_active;
		unsigned pass_acks;  /* adds this pass acknowledged without a sync */
		unsigned pass_early; /* early ends of this pass (jenv_end_early) */
		uint64_t last_ticket;
		uint64_t waiters;    /* jenv_note_waiter calls so far */
		uint64_t waiters_handed; /* waiters at the last hand-over */
		uint64_t ticket_handed;  /* last_ticket at the last hand-over */
		int solo;            /* one client alone sends (jenv_set_solo) */
		struct journal *open;  /* every open journal */
		struct journal *dirty; /* journals with a batch this pass */
		struct jcompl *spare_compl; /* the other of two report arrays */
		size_t spare_complcap;
		pthread_t thr;         /* the writer's */
		int thr_started;
	} loop;

	/* the writer's alone (under wlock): the wait for the next group
	 * (w_linger, jwriter.c), planned when a synced group is answered
	 * (w_linger_plan, jgroup.c); after a wait that ran to its end, the
	 * next LINGER_SKIP synced groups are taken without one */
	struct {
		uint64_t hi;       /* the last synced group's waiters count */
		uint64_t target;   /* wait until q_waiters reaches it; 0 = no wait */
		int64_t until_us;  /* but not past this (tern_mono_us) */
		unsigned skip;     /* synced groups still to take without a wait */
	} lg;

	pthread_mutex_t wlock;   /* held by whoever writes (journal.w) */
	/* Under wlock: the journals whose segment descriptor is open, most
	 * recently used first.  At most cap are open; the least recently used
	 * one is closed to open another (jseg_wfd), so ten thousand queues do
	 * not hold ten thousand descriptors. */
	struct {
		struct journal *head, *tail;
		unsigned n, cap;
	} fdc;
	pthread_mutex_t mu_lock; /* guards env->mu and every journal's j->mu */
	pthread_cond_t cv;       /* wakes the writer */
	pthread_cond_t cv_done;  /* wakes a loop thread waiting for the writer */
	pthread_cond_t s_idle;   /* a syncer's or reclaimer's batch finished */
	struct sthread syncer, reclaimer;

	/* shared, under mu_lock */
	struct {
		struct jbatch *q_head, **q_tail; /* loop -> writer */
		struct jbatch *d_head, **d_tail; /* writer -> loop: finished */
		struct jcompl *compl;            /* writer -> loop: ticket reports */
		size_t ncompl, complcap;
		uint64_t w_upto;        /* highest ticket reported */
		/* the writer's background work (jwork.c) */
		struct jlist w_spare, w_nospc, w_zero;
		struct journal **w_timer;  /* a heap by due time */
		size_t w_ntimer, w_timercap;
		int stop;               /* the writer ends once its queue is empty */
		int64_t w_wake_at;      /* when the sleeping writer wakes; 0 = running */
		uint64_t w_wakes;       /* signals that woke a waiting writer */
		uint64_t q_waiters;     /* loop.waiters as of the last hand-over */
		uint64_t lg_waiters;    /* the writer waits for q_waiters to reach
					 * it (w_linger); 0 = not waiting */
		struct sjob *f_head;    /* syncer -> writer: committed checkpoints' segments */
	} mu;

	/* shared, atomic: 1 while the writer / the syncer is off its condition
	 * variable (read by jenv_background_busy without a lock) */
	struct {
		int w_busy;
		int wake_sent; /* wake_fd written, not yet read by the loop */
		uint32_t group_wait_us; /* jenv_set_group_wait */
	} atom;

	struct jenv_stats stats; /* atomic adds by any thread (jstats.c) */
};

/* ------------------------------------------------------------- helpers */

static inline int64_t mono_ms(void)
{
	return tern_mono_ms();
}

static inline int spare_get(struct journal *j)
{
	return __atomic_load_n(&j->atom.spare_state, __ATOMIC_ACQUIRE);
}

static inline void spare_set(struct journal *j, int s)
{
	__atomic_store_n(&j->atom.spare_state, s, __ATOMIC_RELEASE);
}

/* Sets an index entry's flags, keeping the set of flagged ids; set 0
 * before an entry is deleted. */
static inline void jent_flags_set(struct journal *j, struct jent *e, unsigned flags)
{
	if (flags && !e->flags) {
		if (!jmap_put(&j->loop.flagged, e->key))
			j->loop.flagged_lost = 1;
	} else if (!flags && e->flags) {
		jmap_del(&j->loop.flagged, e->key);
	}
	e->flags = (uint16_t)flags;
}

static inline int failed_get(struct journal *j)
{
	return __atomic_load_n(&j->atom.failed, __ATOMIC_ACQUIRE);
}

static inline uint64_t dirty_get(struct journal *j)
{
	return __atomic_load_n(&j->atom.dirty, __ATOMIC_RELAXED);
}

static inline void stat_add(uint64_t *p, uint64_t v)
{
	__atomic_add_fetch(p, v, __ATOMIC_RELAXED);
}

/*
 * Called with mu_lock held, which they release: wake the writer / the
 * syncer (any thread).  The woken thread counts as busy from now (not only
 * once it runs), so the loop stops polling and the woken thread gets the
 * core as soon as the loop runs out of work (jenv_background_busy); a loop
 * that kept polling would keep a shared core from it.  The signal comes
 * after the unlock: a thread signalled while mu_lock is held wakes only to
 * block on it, and is woken a second time when it is released (two
 * context switches, and two futex calls for the signaller, where one of
 * each does).
 */
static inline void writer_wake_unlock(struct jenv *env)
{
	/* w_busy is 0 (under mu_lock) only while the writer waits on cv: only
	 * then does the signal wake it (a context switch) */
	if (!__atomic_load_n(&env->atom.w_busy, __ATOMIC_RELAXED))
		env->mu.w_wakes++;
	__atomic_store_n(&env->atom.w_busy, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&env->mu_lock);
	pthread_cond_signal(&env->cv);
}

static inline void sthread_wake_unlock(struct jenv *env, struct sthread *t)
{
	__atomic_store_n(&t->busy, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&env->mu_lock);
	pthread_cond_signal(&t->cv);
}

/* The writer's copy of j's options (journal_set_opts changes it). */
static inline void w_opts_get(struct journal *j, struct journal_opts *o)
{
	pthread_mutex_lock(&j->env->mu_lock);
	*o = j->mu.opts;
	pthread_mutex_unlock(&j->env->mu_lock);
}

/* Grows array *p of elem-byte elements to hold need (doubling); 0 or
 * TERN_ENOMEM (the array is unchanged then). */
static inline int jgrow(void **p, size_t *cap, size_t need, size_t elem)
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

/* Paths of a journal's files (its directory holds names of at most 16
 * bytes: journal_new refuses a directory path that leaves no room). */
#define JPATH_MAX 4096
static inline void jpath(const struct journal *j, const char *name, char *buf)
{
	snprintf(buf, JPATH_MAX, "%s/%s", j->dir, name);
}

static inline void jpath_seg(const struct journal *j, uint32_t seg, char *buf)
{
	snprintf(buf, JPATH_MAX, "%s/%08u.seg", j->dir, seg);
}

/* The functions one file of journal/ calls in another, file by file. */
#include "jcalls.h"

#endif
