/*
 * jsyncer.c: the syncer thread (s_main), a fixed pool of one thread with
 * named job kinds (enum sjob_kind), in the manner of redis's bio.c.  It
 * runs the work no reply waits for, so the writer is free for the next
 * group meanwhile: background fdatasyncs, checkpoint commits, unlinks.
 *
 * One thread, and its jobs run in the order they were posted: a
 * checkpoint commits only after every sync posted before it (a segment
 * left behind at a roll, the directory after a rename) succeeded, and a
 * failed sync fails the journal and so skips the commit.  A second thread
 * would have to keep that order per journal.
 *
 * Its long calls are split up, with a sched_yield() between the pieces:
 * when it shares a core with the loop, a kernel without preemption
 * (PREEMPT_NONE) does not interrupt work inside a system call, and the
 * loop would wait for the whole call.  The price: when the loop keeps a
 * shared core saturated, each yield lets it run first, so a sync takes
 * longer to finish and `interval` may leave more than sync_interval_ms of
 * records unsynced.  With a core of its own the syncer yields to nobody.
 */
#include "jpriv.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include "catalog.h"
#include "jio.h"

#define SYNC_STEP (256u << 10) /* writeback step of a segment sync */

/* What each job kind's descriptor is. */
static const struct {
	const char *what;  /* in the failure message */
	uint8_t segment;   /* a segment: its writeback goes in steps, the sync
			    * is counted, and it cleans atom.dirty */
} sjob_kinds[] = {
	[SJOB_SYNC_SEG] = { "fdatasync", 1 },
	[SJOB_SYNC_INTERVAL] = { "fdatasync", 1 },
	[SJOB_SYNC_DIR] = { "sync directory", 0 },
	[SJOB_SYNC_SPARE] = { "sync spare segment", 0 },
	[SJOB_CHECKPOINT] = { "fdatasync", 1 },
	[SJOB_UNLINK] = { "unlink", 0 },
};

void s_post(struct jenv *env, struct sjob *s)
{
	s->next = NULL;
	pthread_mutex_lock(&env->mu_lock);
	*env->mu.s_tail = s;
	env->mu.s_tail = &s->next;
	env->mu.s_posted++;
	syncer_wake_unlock(env);
}

void s_barrier(struct jenv *env)
{
	uint64_t upto;

	pthread_mutex_lock(&env->mu_lock);
	upto = env->mu.s_posted;
	while (env->mu.s_done < upto)
		pthread_cond_wait(&env->s_idle, &env->mu_lock);
	pthread_mutex_unlock(&env->mu_lock);
}

/* Starts the writeback of [lo, hi) of fd SYNC_STEP at a time, yielding
 * between steps, before the fdatasync that waits for it (see the top of
 * the file).  The fdatasync still covers everything and reports any
 * error. */
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

/* Opens the file job s syncs: -1 with errno, or -2 when there is nothing
 * to sync (a spare renamed into place since: the segment's own syncs
 * cover it). */
static int s_open(struct sjob *s)
{
	char path[JPATH_MAX];
	int fd;

	switch (s->file) {
	case SFILE_SEG:
		jpath_seg(s->j, s->seg, path);
		break;
	case SFILE_SPARE:
		jpath(s->j, SPARE_NAME, path);
		break;
	case SFILE_DIR:
		return jio.openat(AT_FDCWD, s->j->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
	default:
		return -2;
	}
	fd = jio.openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0 && errno == ENOENT && s->file == SFILE_SPARE)
		return -2;
	return fd;
}

/* The sync part of job s (on the syncer, or in place when no job could be
 * allocated): opens its file, fdatasyncs and closes it, then the
 * journal's bookkeeping.  A descriptor opened now covers what was written
 * through another one (the page cache is the file's), and reports a
 * writeback error nobody has seen.  Returns 0 when the sync failed (the
 * journal is failed then). */
static int s_sync(struct jenv *env, struct sjob *s)
{
	struct journal *j = s->j;
	int seg = sjob_kinds[s->kind].segment, ok = 1;
	int fd = s_open(s);

	if (fd == -1) {
		jfail(j, s->file == SFILE_DIR ? "open directory to sync" : "open file to sync",
		      errno);
		ok = 0;
	} else if (fd >= 0) {
		if (seg)
			s_writeback_steps(fd, s->lo, s->hi);
		if (jio.fdatasync(fd) < 0) {
			jfail(j, sjob_kinds[s->kind].what, errno);
			ok = 0;
		} else if (seg) {
			uint64_t exp = s->dirty;

			stat_add(&j->atom.st_syncs, 1);
			/* clean only if nothing was written since fd was taken */
			if (exp)
				__atomic_compare_exchange_n(&j->atom.dirty, &exp, 0, 0,
							    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
		}
		close(fd);
	}
	if (s->kind == SJOB_SYNC_INTERVAL) {
		__atomic_store_n(&j->atom.last_sync, mono_ms(), __ATOMIC_RELAXED);
		__atomic_store_n(&j->atom.s_pending, 0, __ATOMIC_RELEASE);
		/* written during the sync: its next one is due an interval
		 * after this one */
		pthread_mutex_lock(&env->mu_lock);
		if (dirty_get(j) && jwork_dirty(j))
			writer_wake_unlock(env);
		else
			pthread_mutex_unlock(&env->mu_lock);
	}
	return ok;
}

void s_take_range(struct journal *j, struct sjob *s)
{
	s->lo = j->w.sync_lo;
	s->hi = j->w.hi;
	j->w.sync_lo = j->w.hi;
}

int s_post_sync(struct journal *j, enum sfile file, uint32_t seg, enum sjob_kind kind,
		uint64_t dirty)
{
	struct sjob *s = calloc(1, sizeof(*s)), here = { 0 };
	int inplace = s == NULL;

	if (inplace)
		s = &here;
	s->kind = kind;
	s->j = j;
	s->file = file;
	s->seg = seg;
	s->dirty = dirty;
	if (sjob_kinds[kind].segment)
		s_take_range(j, s);
	if (inplace)
		return s_sync(j->env, s) ? 0 : -1;
	s_post(j->env, s);
	return 0;
}

/* SJOB_CHECKPOINT after its commit (committed: whether it was): hands
 * the segments it freed to the writer, which owns the spare and may reuse
 * one.  Returns 1 when s went to the writer. */
static int s_hand_frees(struct jenv *env, struct sjob *s, int committed)
{
	free(s->ckpt);
	s->ckpt = NULL;
	if (!committed || !s->nfree)
		return 0;
	pthread_mutex_lock(&env->mu_lock);
	s->next = env->mu.f_head;
	env->mu.f_head = s;
	writer_wake_unlock(env);
	return 1;
}

static void s_unlink(struct sjob *s)
{
	for (size_t i = 0; i < s->nfree; i++)
		jseg_unlink_gently(s->j, s->free_segs[i]);
}

/* At most this many jobs are run together: their checkpoints share one
 * LMDB commit. */
#define S_BATCH 256

/*
 * Runs a batch of jobs, in the order they were posted: every sync first,
 * then one commit of every checkpoint whose sync (and every earlier one of
 * its journal: the journal is failed otherwise) succeeded, since the
 * records it covers may be lost otherwise; then the frees and unlinks.  A
 * checkpoint still commits only after every sync posted before it.  One
 * commit for many checkpoints: thousands of queues written in one second
 * all checkpoint in the next, and a commit costs two device flushes.
 */
static void s_run_batch(struct jenv *env, struct sjob **jobs, size_t n)
{
	const char *names[S_BATCH];
	const void *blobs[S_BATCH];
	size_t lens[S_BATCH], nc = 0;
	int ok[S_BATCH], committed = 0;

	for (size_t i = 0; i < n; i++) {
		struct sjob *s = jobs[i];

		ok[i] = s_sync(env, s);
		if (s->kind == SJOB_CHECKPOINT && ok[i] && !failed_get(s->j)) {
			names[nc] = s->j->name;
			blobs[nc] = s->ckpt;
			lens[nc++] = s->ckpt_len;
		} else {
			ok[i] = 0;
		}
	}
	if (nc)
		committed = jcat_ckpt_put_many(env->cat, nc, names, blobs, lens) == 0;
	for (size_t i = 0; i < n; i++) {
		struct sjob *s = jobs[i];

		if (s->kind == SJOB_CHECKPOINT && s_hand_frees(env, s, committed && ok[i]))
			continue;
		if (s->kind == SJOB_UNLINK)
			s_unlink(s);
		free(s->ckpt);
		free(s->free_segs);
		free(s);
	}
}

static void *s_main(void *arg)
{
	struct jenv *env = arg;
	struct sjob *jobs[S_BATCH];

	pthread_mutex_lock(&env->mu_lock);
	for (;;) {
		size_t n = 0;

		if (!env->mu.s_head) {
			if (env->mu.s_stop)
				break;
			__atomic_store_n(&env->atom.s_busy, 0, __ATOMIC_RELAXED);
			pthread_cond_wait(&env->s_cv, &env->mu_lock);
			__atomic_store_n(&env->atom.s_busy, 1, __ATOMIC_RELAXED);
			continue;
		}
		while (n < S_BATCH && env->mu.s_head) {
			jobs[n++] = env->mu.s_head;
			env->mu.s_head = env->mu.s_head->next;
		}
		if (!env->mu.s_head)
			env->mu.s_tail = &env->mu.s_head;
		pthread_mutex_unlock(&env->mu_lock);
		s_run_batch(env, jobs, n);
		pthread_mutex_lock(&env->mu_lock);
		env->mu.s_done += n;
		pthread_cond_broadcast(&env->s_idle);
	}
	pthread_mutex_unlock(&env->mu_lock);
	return NULL;
}

int syncer_start(struct jenv *env)
{
	if (pthread_create(&env->loop.s_thr, NULL, s_main, env) != 0)
		return -1;
	env->loop.s_started = 1;
	return 0;
}

/* Also drops what came back for a writer that is gone (every journal was
 * closed, so nothing is left to free but memory). */
void syncer_stop(struct jenv *env)
{
	struct sjob *s, *next;

	if (env->loop.s_started) {
		pthread_mutex_lock(&env->mu_lock);
		env->mu.s_stop = 1;
		syncer_wake_unlock(env);
		pthread_join(env->loop.s_thr, NULL);
		env->loop.s_started = 0;
	}
	for (s = env->mu.f_head; s; s = next) {
		next = s->next;
		free(s->free_segs);
		free(s);
	}
	env->mu.f_head = NULL;
}
