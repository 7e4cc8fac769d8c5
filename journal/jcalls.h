/*
 * jcalls.h: the functions one file of journal/ calls in another, grouped
 * by the file that defines them, with the thread each runs on, top-down:
 * each file calls only the files after it (jpriv.h, CALLS BETWEEN THE
 * FILES).  Included by jpriv.h only (after the state it uses); private
 * to journal/.
 */
#ifndef TERN_JOURNAL_JCALLS_H
#define TERN_JOURNAL_JCALLS_H

#ifndef TERN_JOURNAL_JPRIV_H
#error "include jpriv.h, not jcalls.h"
#endif

/* --------------------------------------------- jrecover.c (loop thread) */

struct rec_item {
	struct item *it;
	uint64_t pos;
	int open;
};

/* Recovers j from its checkpoint and segments: counts, dead set, and the
 * items that fit in max_memory_size (*items, queue order: open first). */
int jrecover(struct journal *j, struct journal_recovery *rec,
	     struct rec_item **items, size_t *nitems);

/* ----------------------------------------------- jckpt.c (loop thread) */

/* Takes a checkpoint if anything changed since the last one, and hands
 * it to the writer.  0 or TERN_ENOMEM (nothing handed over; the journal
 * stays dirty, so the next interval tries again). */
int jckpt_take(struct journal *j);
/* Takes the last checkpoint (JCLOSE_KEEP; none for JCLOSE_DELETE) and
 * attaches the close of the journal's files to its batch, which the next
 * env_handoff gives the writer (so that closing many journals makes one
 * group).  Never fails: without memory for the checkpoint the files are
 * still synced and closed (the next open replays from the previous
 * checkpoint), so wait_closed always returns. */
void jckpt_close(struct journal *j, enum jclose how);
/* Starts (or restarts, after a reload) the periodic checkpoint timer. */
int jckpt_timer_start(struct journal *j);

/* ---------------------------------------------- jbatch.c (loop thread) */

/* A new, empty batch (through tern_malloc); NULL without memory. */
struct jbatch *jb_alloc(void);
void jb_free(struct jbatch *b);
/* The journal's batch for this pass (registered for the hand-off); NULL
 * without memory. */
struct jbatch *jb_get(struct journal *j);
/* The same for the close: falls back on the batch journal_open kept
 * (loop.last_b), so it never returns NULL for a journal's one close. */
struct jbatch *jb_get_for_close(struct journal *j);
/* Appends record r (body from it, or zeros for PAD) at the write position;
 * the caller made room.  *pos (if given) gets its position.  0 or
 * TERN_ENOMEM. */
int jb_append(struct journal *j, struct jrec *r, struct item *it, uint64_t *pos);
/* Makes room for rsize bytes plus keep free bytes in the current segment,
 * rolling to the next one when needed.  0, TERN_ENOSPC, TERN_ETOOBIG,
 * TERN_ENOMEM. */
int jb_make_room(struct journal *j, uint64_t rsize, uint64_t keep);
/* The most room an add may keep reserved for later small records. */
uint64_t jb_reserve_cap(const struct journal *j);
/* If the writer gave up the current segment (w_abandon), the loop leaves
 * it: its next record starts a new one. */
void jb_check_lost(struct journal *j);
/* The position the next record will get. */
uint64_t jb_tail_pos(const struct journal *j);
/* Hands every dirty journal's batch to the writer (or writes it inline). */
void env_handoff(struct jenv *env);
/* Takes what the writer finished: positions, batches, ticket reports. */
void env_done(struct jenv *env);
void env_pass_cb(evutil_socket_t fd, short what, void *arg);
void env_done_cb(evutil_socket_t fd, short what, void *arg);
void env_wake_cb(evutil_socket_t fd, short what, void *arg);
/* On the loop's thread (env->base set, env->wake_fd -1): the loop's
 * events, pass_ev, done_ev and wake_ev with its eventfd.  0, TERN_ESYS
 * (errno) or TERN_ENOMEM. */
int env_events_open(struct jenv *env);
/* Frees what env_events_open made (any part of it). */
void env_events_close(struct jenv *env);

/* -------------------------------------------- jbehind.c (loop thread) */

/* Drops the pending read-behind items whose records are now written. */
void jbehind_pop_written(struct journal *j);
/* Makes room for one more pending read-behind item.  0 or TERN_ENOMEM. */
int jbehind_reserve(struct journal *j);
/* Drops every pending read-behind item (flush, close). */
void jbehind_clear(struct journal *j);
/* Drops the pending read-behind item whose record is at pos (its write
 * failed); returns 1 if there was one. */
int jbehind_drop(struct journal *j, uint64_t pos);
/* Item it, whose ADD record is at pos, is not kept in memory: it is
 * pending until written, and counted behind.  jbehind_reserve made room. */
void jbehind_push(struct journal *j, struct item *it, uint64_t pos);
/* A new item from an ADD record and its body; NULL without memory. */
struct item *jitem_from_rec(const struct jrec *r, const unsigned char *body);

/* ------------------------------------------------ jwriter.c (writer) */

void *w_main(void *arg);

/* ------------------------------------------------- jgroup.c (writer) */

/* Writes, syncs, reports and checkpoints one group of batches.  Under
 * wlock: on the writer thread, or inline on the loop (inline_ok).
 * waiters: the waiters count (jenv_note_waiter) as of list's last batch,
 * for the writer's wait after a synced group (w_linger_plan). */
void w_group(struct jenv *env, struct jbatch *list, uint64_t waiters);

/* ------------------------------------------ jspare.c (writer thread) */

/* Makes segment seg (size bytes) the write segment: renames the spare,
 * syncs what the mode requires.  Under wlock.  0, -1 (j failed), or -2
 * when there is no room for it (a full disk): it is given up (w_abandon)
 * and j goes on. */
int w_activate(struct journal *j, uint32_t seg, uint64_t size,
	       enum journal_sync sync, const struct journal_opts *o);
/*
 * Under wlock: segment seg, which could not be made or first written for
 * want of room (errno e), is given up: none of its records is written, the
 * batches holding them fail with TERN_ENOSPC (their sets are answered
 * SERVER_ERROR, their items leave the queue: jb_undo), and the loop, told
 * through atom.lost_seg, starts its next record in a new segment.  So a
 * full disk is not the end of a queue, as a failed write is: once there is
 * room, the next set works.  Logged once per episode.
 */
void w_abandon(struct journal *j, uint32_t seg, int e);
/* Closes j's files (sync: fdatasync the segment first if dirty). */
void w_close_files(struct journal *j, int sync);
/* Frees the segments of checkpoints the syncer committed.  Under wlock. */
void w_take_frees(struct jenv *env);

/* The writer's job for a spare due: one step of it at the planned size
 * (jseg_target); a plan above what doubling gives that finds no room is
 * halved and tried again, down to that size, before the spare is given up
 * (SP_NOSPC). */
void w_spare_planned(struct journal *j, const struct journal_opts *o);
/* The writer's job for zeros ahead (ZERO_AHEAD, jpriv.h): one step of
 * them in j's segment, taking wlock. */
void w_zero_step(struct journal *j);
/* The spare is needed now: reserve it at once (fallocate). */
void w_spare_now(struct journal *j, const struct journal_opts *o, uint64_t size);
/* Reuses a dead segment as the spare, or has the syncer unlink it. */
void w_free_segs(struct journal *j, const struct jseg *segs, size_t nfree,
		 const struct journal_opts *o);

/* ------------------------------------------------- jsyncer.c (syncer) */

/* Starts the syncer and the reclaimer. */
int syncer_start(struct jenv *env);
/* Stops them once they have run every job. */
void syncer_stop(struct jenv *env);
/* Queues job s, for the reclaimer (unlinks, and a checkpoint that waits
 * for no sync when none of its journal's waits on the syncer) or the
 * syncer (the rest).  Takes mu_lock. */
void s_post(struct jenv *env, struct sjob *s);
/* Waits until both have finished every job posted so far. */
void s_barrier(struct jenv *env);
/* Writer, under wlock: has the syncer fdatasync file (seg: which
 * segment), as job kind (a SJOB_SYNC_*); dirty as in struct sjob.
 * Without memory for a job the sync is done here.  Returns -1 only if that
 * sync failed. */
int s_post_sync(struct journal *j, enum sfile file, uint32_t seg, enum sjob_kind kind,
		uint64_t dirty);
/* Writer: has the syncer fdatasync the spare, a reused dead segment whose
 * header block was just zeroed (number gen of j's reused spares:
 * atom.spare_hdr_synced gets gen once it is durable).  As s_post_sync. */
int s_post_spare_header(struct journal *j, uint64_t gen);
/* Writer, under wlock: gives segment sync job s the bytes written since
 * the last such job. */
void s_take_range(struct journal *j, struct sjob *s);

/* ----------------------------- handoff.c (between the loop and the writer) */

/* Loop: queues list (tail: its last batch's next) for the writer and
 * wakes it, unless it waits for more waiters (w_linger). */
void handoff_queue(struct jenv *env, struct jbatch *list, struct jbatch **tail);
/* Loop: whether nothing is queued for the writer and it is not stopping
 * (takes mu_lock). */
int handoff_idle(struct jenv *env);
/* Writer, under mu_lock: takes every queued batch; *waiters gets the
 * waiters count (jenv_note_waiter) as of the last one. */
struct jbatch *handoff_take(struct jenv *env, uint64_t *waiters);
/* Writer (or inline), under mu_lock: reports list's tickets up to upto:
 * durable, or the error of a failed batch for its own tickets. */
void handoff_report(struct jenv *env, struct jbatch *list, uint64_t upto);
/* Writer (or inline), under mu_lock: hands finished list back to the loop
 * and wakes a wait_closed (cv_done). */
void handoff_return(struct jenv *env, struct jbatch *list);
/* Writer (or inline), after a report or a return, without mu_lock: has
 * env_done run on the loop (done_ev from the loop itself, else a write to
 * wake_fd, once until the loop reads it). */
void handoff_wake(struct jenv *env);
/* Loop, from wake_ev: reads wake_fd, before the lists are taken. */
void handoff_woken(struct jenv *env);
/* Loop: takes the finished batches and the ticket reports (*c, *n of
 * *cap), leaving the loop's spare report array in their place. */
struct jbatch *handoff_take_done(struct jenv *env, struct jcompl **c, size_t *n,
				 size_t *cap);
/* Loop: keeps report array c (cap entries, read) as the spare, or frees it. */
void handoff_keep_compl(struct jenv *env, struct jcompl *c, size_t cap);

/* ------------------------------------------ jwork.c (under mu_lock) */

/* What jwork_next picked. */
enum wjob {
	WJOB_NONE,
	WJOB_SPARE,         /* a step of preparing the journal's spare */
	WJOB_INTERVAL_SYNC, /* its interval sync is due */
	WJOB_ZERO,          /* a step of zeros ahead in its segment */
};

/* Sets j's spare state and lists it for the writer (SP_PENDING: to
 * prepare; SP_NOSPC: to retry at mu.sp_retry_at, set first). */
void jwork_spare(struct journal *j, int state);
/* Lists j for a step of zeros ahead in its segment (on), or takes it off
 * that list.  Returns 1 when j was not listed and is now (the writer may
 * need waking: writer_wake_unlock). */
int jwork_zero(struct journal *j, int on);
/* An add was refused for want of a spare: j's retry comes first, now. */
void jwork_retry_now(struct journal *j);
/* j (a timed-sync mode) has unsynced writes: lists it by the time its
 * interval sync is due.  Returns 1 when the sleeping writer must be woken
 * for it (writer_wake_unlock). */
int jwork_dirty(struct journal *j);
/* j is closing: out of every list. */
void jwork_forget(struct journal *j);
/* The next background job, or NULL; *wait_ms is lowered to when the next
 * one is due. */
struct journal *jwork_next(struct jenv *env, int64_t now, enum wjob *what, int64_t *wait_ms);

/* -------------------------------------------- jseg.c (segment files) */

void jseg_name(char *buf, size_t n, uint32_t seg);
/* DIR/NNNNNNNN.seg, malloc'd; NULL without memory. */
char *jseg_path(const struct journal *j, uint32_t seg);
/* Whether name is a segment file's; *seg gets its number. */
int jseg_parse(const char *name, uint32_t *seg);
/* Loop: appends (num, size) to j's list of segments.  0 or TERN_ENOMEM. */
int jseg_add(struct journal *j, uint32_t num, uint64_t size);
/* Loop: fills j's list from its directory (sorted); 0 or TERN_E*. */
int jseg_list(struct journal *j);
/* Any thread: dead segment seg no longer counts as on disk (unlinked, or
 * reused as the spare, or back in the loop's list).  Lost segments were
 * never counted. */
static inline void jseg_reclaimed(struct journal *j, const struct jseg *seg)
{
	if (seg->lost)
		return;
	__atomic_sub_fetch(&j->atom.dead_bytes, seg->size, __ATOMIC_RELAXED);
	__atomic_sub_fetch(&j->atom.dead_files, 1, __ATOMIC_RELAXED);
}
/* Writer (or recovery): the spare file's size on disk now. */
static inline void spare_bytes_set(struct journal *j, uint64_t n)
{
	__atomic_store_n(&j->atom.spare_bytes, n, __ATOMIC_RELAXED);
}
/* Loop: seg's entry in j's list, NULL if it is not there. */
struct jseg *jseg_find(struct journal *j, uint32_t seg);
/* Loop: whether seg is in j's list as given up (w_abandon). */
int jseg_lost(struct journal *j, uint32_t seg);
/* Loop: an ADD record of item id was written at pos (jb_append's): keeps the
 * segment's ids (struct jseg), which let a checkpoint find the oldest
 * live position without walking the index. */
void jseg_note_add(struct journal *j, uint64_t pos, uint64_t id);
/* Loop: item id, whose ADD is at pos, entered the index after its ADD was
 * written (loaded by recovery, or read back from the journal). */
void jseg_note_index(struct journal *j, uint64_t pos, uint64_t id);
/* Loop: the first segment after seg in j's list, 0 if none. */
uint32_t jseg_next_after(struct journal *j, uint32_t seg);
/* Any thread: the size of the next segment (and of the spare being
 * prepared), o being the caller's copy of the options. */
uint64_t jseg_target(struct journal *j, const struct journal_opts *o);
void jseg_target_init(struct journal *j);
/* Loop: opens segment seg of j for reading (jreader_open_as: a damaged
 * header is logged and counted, in rec if given, and its records read).
 * Every failure is logged with the file and the cause: 0, TERN_ESYS
 * (errno), TERN_ECORRUPT (a valid header of another segment),
 * TERN_EVERSION, TERN_ENOMEM.  A segment that cannot be read is never
 * skipped: its items would be lost, and the file with them once a
 * checkpoint found it holding none. */
int jseg_reader_open(struct journal *j, uint32_t seg, struct jreader *rd,
		     struct journal_recovery *rec);
/* Loop: logs that segment seg of j could not be read (rc, errno). */
void jseg_log_read_error(struct journal *j, uint32_t seg, int rc);
/* Loop: logs what jreader_next returned as rc (JREAD_DAMAGE: counted in
 * rec if given, and in the log; JREAD_TORN: a torn write, the benign end
 * of the segment's records after a power cut, logged only). */
void jseg_log_damage(struct journal *j, struct jreader *rd,
		     struct journal_recovery *rec, int rc);
/* Syncer: truncates a dead segment in steps, then unlinks it. */
void jseg_unlink_gently(struct journal *j, uint32_t seg);
/*
 * Writer, syncer (never the loop): openat(AT_FDCWD, path, ...) through the
 * jio seam, waiting out a shortage of descriptors: on EMFILE or ENFILE it
 * tries again after a pause (1 ms, doubling up to 100 ms), for up to
 * JSEG_FD_WAIT_MS, logging when the wait starts and ends.  A process out
 * of descriptors gets them back as connections close (the server pauses
 * accepting meanwhile, and closes every connection before the journal at
 * shutdown); failing at once would fail the journal for good over a
 * passing shortage.  The wait is bounded because the loop may be waiting
 * for this thread (a queue closed or deleted) while only the loop can
 * close connections.  Other errors return at once: -1 with errno.
 */
#define JSEG_FD_WAIT_MS 10000
int jseg_open(struct jenv *env, const char *path, int flags, mode_t mode);
/* Any thread but the loop: fsyncs the journal's directory (opened for the
 * call, jseg_open); 0 or -1 with errno. */
int jseg_sync_dir(struct journal *j);
/* Writer, under wlock: the descriptor of j's current segment, opened again
 * (through the descriptor cache, env->fdc) if the cache closed it; -1 with
 * errno when there is no segment or it cannot be opened.  Out of
 * descriptors, it first closes the cache's least recently used ones (never
 * the JSEG_WFD_KEEP most recent: a group's parallel syncs hold those),
 * then waits (jseg_open). */
#define JSEG_WFD_KEEP 8
int jseg_wfd(struct journal *j);
/* Writer, under wlock: fd (just opened) is j's segment descriptor now. */
void jseg_wfd_set(struct journal *j, int fd);
/* Writer, under wlock: closes j's segment descriptor, if open. */
void jseg_wfd_close(struct journal *j);
/* jenv_open: sizes the descriptor cache from RLIMIT_NOFILE. */
void jseg_wfd_init(struct jenv *env);
/* Writer: pwrite/pwritev through the jio seam until done (EINTR, short
 * writes); 0 or -1 with errno.  flags: pwritev2's (RWF_DSYNC: each call
 * returns once its data is stable). */
int jseg_write_all(int fd, const void *buf, size_t n, uint64_t off);
int jseg_writev_all(int fd, struct iovec *iov, int cnt, uint64_t off, int flags);
/* Any thread: marks j failed for good (logs once, counts the error). */
void jfail(struct journal *j, const char *what, int e);
/* Writer: fdatasync of one of j's files, counted; fails j on error.  0 or
 * -1. */
int jseg_sync(struct journal *j, int fd);
/* page_cache = drop: drops fd's pages from *mark up to upto less lag
 * (whole pages), once that is DROP_STEP or more, or whatever there is
 * when lag is 0; advances *mark.  upto JDROP_ALL (lag 0): up to the end
 * of the file, for a segment nothing will be written into again. */
void jseg_drop_cached(int fd, uint64_t *mark, uint64_t upto, uint64_t lag);

/* ------------------------------------------------ jstats.c (any thread) */

/* jio.fdatasync(fd), its latency counted in env's histogram. */
int jstat_fdatasync(struct jenv *env, int fd);
/* Counts one group commit of nbatch batches holding nrec records. */
void jstat_group(struct jenv *env, uint64_t nbatch, uint64_t nrec);

/* ------------------------------------------- jpolicy.c (options; any) */

/* Fills in auto values and the derived zero_ahead, and clamps o to what
 * the journal supports (o as the caller gave it: preallocate not yet
 * resolved). */
void jopts_fix(struct journal_opts *o);

#endif
