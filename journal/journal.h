/*
 * journal.h: persistence for tern's queues.
 *
 * One jenv per server: the data directory, the LMDB catalog/checkpoints and
 * the journal writer thread.  One journal per queue: a directory of
 * preallocated segment files under the data directory.
 *
 * Threading: every function here is called on the event-loop thread only.
 * The writer thread is internal.  Records appended during one event-loop
 * pass are handed to the writer together (an internal event activated on
 * the first append of a pass), so one write (+ one sync in always/odsync)
 * covers them all: group commit.
 *
 * Durability tickets: mutations that the caller may have to wait for
 * return a ticket.  0 means "nothing to wait for".  Otherwise the server
 * defers its reply until the durable callback reports a value >= the
 * ticket.  Tickets come from one sequence per jenv, increasing, and are
 * resolved in order.  journal_add always returns a ticket: in always/odsync
 * it is resolved when the record is on stable storage; in none/interval when
 * the record has been written to the kernel (no sync; one hand-off to the
 * writer thread), so no STORED can precede the write and a process crash
 * loses nothing in any mode.  Other mutations never return tickets.
 */
#ifndef TERN_JOURNAL_H
#define TERN_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "../lib/tern.h"

struct event_base;
struct jenv;
struct journal;

enum journal_sync {
	JOURNAL_SYNC_NONE = 0, /* page cache only; the OS flushes */
	JOURNAL_SYNC_INTERVAL, /* fdatasync every sync_interval_ms, replies at once */
	JOURNAL_SYNC_ALWAYS,   /* reply after write + fdatasync (group commit) */
	JOURNAL_SYNC_ODSYNC,   /* reply after an O_DSYNC write (group commit) */
};

/* Whether a set in mode s is answered only once its record is on stable
 * storage (always, odsync); none and interval answer once it is written to
 * the kernel and sync later, or never. */
int journal_sync_waits(enum journal_sync s);

enum journal_prealloc {
	JOURNAL_PREALLOC_ZERO = 0, /* write zeros ahead of need */
	JOURNAL_PREALLOC_FALLOCATE, /* fallocate() only (unwritten extents) */
	JOURNAL_PREALLOC_NONE,      /* grow the file as records arrive */
	JOURNAL_PREALLOC_AUTO,      /* default: fallocate (zeros ahead: zero_ahead) */
};

/* What the journal leaves in the page cache once a range is synced. */
enum journal_cache {
	JOURNAL_CACHE_KEEP = 0, /* default: the kernel's to reclaim */
	JOURNAL_CACHE_DROP,     /* drop synced and read-back ranges at once */
};

struct journal_opts {
	enum journal_sync sync;
	uint32_t sync_interval_ms;  /* interval mode; default 100 */
	enum journal_prealloc prealloc;
	/* set by the journal from the settings above (jopts_fix): segments
	 * reserved by fallocate() get zeros ahead of their records
	 * (jsync_policy.zero_ahead; preallocate auto or zero) */
	uint8_t zero_ahead;
	uint64_t segment_size;      /* default 64 MiB */
	uint64_t max_memory_size;   /* bodies kept in memory per queue; default 64 MiB */
	uint32_t checkpoint_interval_ms; /* default 1000 */
	enum journal_cache cache;   /* page_cache; default keep */
};

/* Fills o with the defaults above. */
void journal_opts_default(struct journal_opts *o);
/* Parses "none"|"interval"|"always"|"odsync"; 0 or TERN_EINVAL. */
int journal_sync_parse(const char *s, enum journal_sync *out);
/* Parses "zero"|"fallocate"|"none"|"auto"; 0 or TERN_EINVAL. */
int journal_prealloc_parse(const char *s, enum journal_prealloc *out);
const char *journal_sync_name(enum journal_sync s);
const char *journal_prealloc_name(enum journal_prealloc p);
/* Parses "keep"|"drop"; 0 or TERN_EINVAL. */
int journal_cache_parse(const char *s, enum journal_cache *out);
const char *journal_cache_name(enum journal_cache c);

/*
 * Called on the event-loop thread when records are durable (or failed).
 * Every ticket <= upto that was not resolved before is resolved with err:
 * 0 = durable; a negative TERN_E* code = the write or sync failed, and the
 * sets it covered must be answered SERVER_ERROR.
 */
typedef void (*jenv_durable_fn)(void *arg, uint64_t upto, int err);

/*
 * The data directory's lock file (DATA_DIR/lock).  jenv_open holds an
 * exclusive flock(2) on it for the jenv's life, with the server's pid
 * written in it; readers of the directory (tern-journal) take a shared
 * lock, which fails while a server runs.  jenv_lock_holder reads the pid
 * from an open lock file (0 if it holds none).
 */
#define JENV_LOCK_NAME "lock"
long jenv_lock_holder(int fd);

/*
 * Opens (creating if needed) the data directory: its lock (taken before
 * anything in it is read), LMDB environment, writer thread, and the
 * completion events registered on base.  Called on the thread that runs
 * base's loop: every journal verb runs there, and the journal's own
 * threads wake it through an eventfd, never through base, so base needs
 * no locking (libevent's evthread).
 * Returns 0, TERN_ELOCKED (another process holds the directory: logged
 * with its pid), TERN_ESYS (errno), TERN_ELMDB, TERN_ENOMEM.
 */
int jenv_open(const char *data_dir, struct event_base *base,
	      jenv_durable_fn durable, void *arg, struct jenv **out);
/* Ends the loop pass's batch now when it holds adds acknowledged without a
 * sync (none/interval), at most a few times per pass: written now, their
 * replies can go out before the rest of the pass is parsed.  For the
 * server, after each connection's turn. */
void jenv_end_early(struct jenv *env);
/* A client begins to wait for a sync: the first of its replies that waits
 * for its ticket to be synced (always, odsync).  The writer counts the
 * clients each synced group answers, and before it takes the next group
 * waits for those clients to send their next adds, for as long as that
 * group's write and sync took and at most jenv_set_group_wait's max_us
 * (group commit, jwriter.c).  Loop thread. */
void jenv_note_waiter(struct jenv *env);
/* Whether one client alone has been sending (set by the server at each
 * pass and whenever a second connection sends; 0 until set).  Only then
 * may the loop sync a set that one client alone waits for itself (always,
 * odsync; jbatch.c, loop_write_inline): the other clients' requests would
 * otherwise wait behind that sync.  Loop thread. */
void jenv_set_solo(struct jenv *env, int solo);
/* The longest such a wait may last, in microseconds; 0 (the default) = the
 * writer never waits.  Any thread. */
void jenv_set_group_wait(struct jenv *env, uint32_t max_us);
/* Nonzero while the writer or the syncer thread has work in hand (not
 * waiting for any): the server's loop does not poll then, so the threads
 * get the core (see poll_us in conf/ternd.conf). */
int jenv_background_busy(const struct jenv *env);
/* How many times a signal woke the writer thread while it waited for work
 * (not its timed wake-ups, nor signals to a writer already awake): each
 * costs context switches on the core the loop may share
 * (STAT journal_writer_wakeups). */
uint64_t jenv_writer_wakeups(struct jenv *env);
/* Writes and syncs everything pending, checkpoints every journal still
 * open, closes them, stops the thread, closes LMDB. */
void jenv_close(struct jenv *env);
/* Calls fn for every queue in the catalog (to reopen them at startup).
 * Returns 0 or TERN_ELMDB. */
int jenv_catalog_list(struct jenv *env,
		      void (*fn)(void *arg, const char *name), void *arg);

/* What recovery found, for the log and stats. */
struct journal_recovery {
	uint64_t next_id;       /* first id to give a new item */
	uint64_t behind_items;  /* live items left on disk (read with journal_read_behind) */
	uint64_t behind_bytes;
	uint64_t records_replayed;
	uint64_t corrupt_records; /* damaged records skipped/truncated */
	uint64_t corrupt_bytes;
};

/*
 * Called for each live item recovered into memory, in queue order (items
 * that were open at the crash first).  The callee takes over the reference.
 */
typedef void (*journal_item_fn)(void *arg, struct item *it);

/*
 * Opens the journal of queue name (creating its directory and catalog
 * entry if new) and recovers it: on_item gets the first items up to
 * opts->max_memory_size of bodies; the rest is counted in rec->behind_*.
 * Returns 0, TERN_EBADNAME, TERN_ESYS, TERN_ELMDB, TERN_EVERSION, TERN_ENOMEM.
 */
int journal_open(struct jenv *env, const char *name,
		 const struct journal_opts *opts, journal_item_fn on_item,
		 void *arg, struct journal_recovery *rec, struct journal **out);
/*
 * Called (on the loop) for each item whose ADD record could not be written
 * after journal_add accepted it (its set is answered SERVER_ERROR): the
 * queue drops it, so no reader gets an item whose set failed.  in_memory:
 * 1 if journal_add was told the queue keeps it, 0 if it was behind.  Items
 * handed out with /open meanwhile stay with their reader.
 */
typedef void (*journal_lost_fn)(void *arg, uint64_t id, uint32_t len, int in_memory);
void journal_set_lost_fn(struct journal *j, journal_lost_fn fn, void *arg);

/* Applies new options (reload).  segment_size applies to new segments. */
int journal_set_opts(struct journal *j, const struct journal_opts *opts);
/* Checkpoints and closes the journal (its files stay). */
void journal_close(struct journal *j);
/* The same for n journals of one jenv at once: their checkpoints are
 * committed together and the loop waits for the writer once (closing ten
 * thousand queues one by one takes seconds).  Every js[i] is freed. */
void journal_close_many(struct journal **js, size_t n);
/* Removes the queue's files and catalog entry, crash-safely, and frees j. */
int journal_delete(struct journal *j);

/*
 * Appends an ADD record for it (id, flags, expiry, add time, delivery
 * count, ITEM_DELAYED as the record's DELAYED flag, body).  The
 * journal takes its own reference while the record is in flight.
 * in_memory = 0 when the queue does not keep the body (read-behind): the
 * item will come back later from journal_read_behind(), in order.
 * *ticket: the ticket to wait for before replying STORED (see above).
 * Returns 0; TERN_ENOSPC when the journal has no room (the set must be
 * answered SERVER_ERROR, nothing was recorded); TERN_EIO after an
 * unrecoverable write error; TERN_ENOMEM.
 */
int journal_add(struct journal *j, struct item *it, int in_memory,
		uint64_t *ticket);
/* Item id left the queue for good (plain get, expiry, discard, /close).
 * These never need to wait; room for them is reserved by journal_add, so
 * they do not fail for lack of space.  Return 0 or TERN_EIO. */
int journal_remove(struct journal *j, uint64_t id);
/* Item id was handed out with /open (reliable read); deliveries: its
 * delivery count including this handout, carried by the OPEN record (and
 * the next ABORT) so that a restart keeps it. */
int journal_open_item(struct journal *j, uint64_t id, uint32_t deliveries);
/* Opened item id was confirmed (/close, confirm): gone for good. */
int journal_confirm(struct journal *j, uint64_t id);
/* Opened item id went back to the head of the queue. */
int journal_abort(struct journal *j, uint64_t id);
/* Every item of the queue was removed (flush).  *ticket: as journal_add's,
 * resolved as the queue's sync mode resolves an add's, so that the flush
 * is answered only once it is as durable as an answered set would be. */
int journal_flush(struct journal *j, uint64_t *ticket);

/*
 * Reads the next read-behind item (the oldest one not in memory) into a new
 * item (refcount 1, caller owns).  *out = NULL when none is left.  The item
 * is counted as in memory from now on.
 * Returns 0, TERN_ECORRUPT, TERN_ESYS, TERN_ENOMEM.
 */
int journal_read_behind(struct journal *j, struct item **out);

/*
 * The environment's figures, for monitoring (ternd's /metrics): every
 * fdatasync the journal ran (segments, spares, directories; on the
 * writer, its fsync helpers and the syncer) with its latency, and the
 * size of every group commit (records and batches the writer took at
 * once).  Histograms count observations per bucket (not cumulative); a
 * bucket holds the values up to its bound and above the one before; the
 * last one (index JENV_*_BUCKETS) every value above the last bound.
 * Cheap to keep: relaxed atomic additions by the threads that do the
 * work; read with jenv_get_stats from the loop, without a lock (a reading
 * taken while a thread adds may be one observation behind in a figure).
 */
#define JENV_FSYNC_BOUNDS_US                                              \
	{ 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000,   \
	  250000, 500000, 1000000, 2500000 }
#define JENV_FSYNC_BUCKETS 14
#define JENV_GROUP_BOUNDS { 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096 }
#define JENV_GROUP_BUCKETS 12

struct jenv_stats {
	uint64_t fsync_count[JENV_FSYNC_BUCKETS + 1]; /* per latency bucket */
	uint64_t fsync_us;                 /* sum of the latencies (us) */
	uint64_t fsync_errors;             /* fdatasyncs that failed */
	uint64_t group_count[JENV_GROUP_BUCKETS + 1]; /* per records bucket */
	uint64_t group_records;            /* sum: records in groups */
	uint64_t group_batches;            /* sum: batches in groups */
	uint64_t group_waits;     /* waits for the clients a sync answered */
	uint64_t group_waits_cut; /* of them, ended by their deadline */
};
/* The upper bounds of the histograms' buckets: fsync latency in
 * microseconds, group size in records. */
extern const uint64_t jenv_fsync_bounds_us[JENV_FSYNC_BUCKETS];
extern const uint64_t jenv_group_bounds[JENV_GROUP_BUCKETS];
/* Copies env's figures into st. */
void jenv_get_stats(struct jenv *env, struct jenv_stats *st);

struct journal_stats {
	/* every file the journal holds: live segments, dead ones not yet
	 * reclaimed, the spare (sizes as allocated; a segment growing
	 * with preallocate = none counts at its full size) */
	uint64_t segments;       /* files on disk */
	uint64_t disk_bytes;     /* bytes allocated to them */
	uint64_t behind_items;
	uint64_t behind_bytes;
	uint64_t records_written;
	uint64_t syncs;
	uint64_t write_errors;
	/* checkpoints and compactions that walked the queue's whole index
	 * (loop time that grows with the items held): while a segment
	 * found at open holds items out of file order */
	uint64_t index_walks;
};
void journal_get_stats(struct journal *j, struct journal_stats *st);

#endif
