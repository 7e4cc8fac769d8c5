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

/* The sync part of job s (on the syncer, or in place when no job could be
 * allocated): fdatasync and close s->fd, then the journal's bookkeeping.
 * Returns 0 when the sync failed (the journal is failed then). */
static int s_sync(struct jenv *env, struct sjob *s)
{
	struct journal *j = s->j;
	int seg = sjob_kinds[s->kind].segment, ok = 1;

	if (s->fd >= 0) {
		if (seg)
			s_writeback_steps(s->fd, s->lo, s->hi);
		if (jstat_fdatasync(env, s->fd) < 0) {
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
		close(s->fd);
	}
	if (s->kind == SJOB_SYNC_INTERVAL) {
		__atomic_store_n(&j->atom.last_sync, mono_ms(), __ATOMIC_RELAXED);
		__atomic_store_n(&j->atom.s_pending, 0, __ATOMIC_RELEASE);
		/* the writer plans the next interval sync from last_sync */
		pthread_mutex_lock(&env->mu_lock);
		writer_wake_unlock(env);
	}
	return ok;
}

void s_take_range(struct journal *j, struct sjob *s)
{
	s->lo = j->w.sync_lo;
	s->hi = j->w.hi;
	j->w.sync_lo = j->w.hi;
}

int s_post_sync(struct journal *j, int fd, enum sjob_kind kind, uint64_t dirty)
{
	struct sjob *s = calloc(1, sizeof(*s)), here = { 0 };
	int inplace = s == NULL;

	if (inplace)
		s = &here;
	s->kind = kind;
	s->j = j;
	s->fd = fd;
	s->dirty = dirty;
	if (sjob_kinds[kind].segment)
		s_take_range(j, s);
	if (inplace)
		return s_sync(j->env, s) ? 0 : -1;
	s_post(j->env, s);
	return 0;
}

/* SJOB_CHECKPOINT after its sync: commits the blob unless the sync (or an
 * earlier one: the journal is failed then) failed, since the records it
 * covers may be lost; then hands the segments it freed to the writer,
 * which owns the spare and may reuse one.  Returns 1 when s went to the
 * writer. */
static int s_commit(struct jenv *env, struct sjob *s, int ok)
{
	struct journal *j = s->j;

	if (ok && !failed_get(j))
		ok = jcat_ckpt_put(env->cat, j->name, s->ckpt, s->ckpt_len) == 0;
	else
		ok = 0;
	free(s->ckpt);
	s->ckpt = NULL;
	if (!ok || !s->nfree)
		return 0;
	pthread_mutex_lock(&env->mu_lock);
	s->next = env->mu.f_head;
	env->mu.f_head = s;
	writer_wake_unlock(env);
	return 1;
}

static void s_unlink(struct sjob *s)
{
	char name[32];

	for (size_t i = 0; i < s->nfree; i++) {
		jseg_name(name, sizeof(name), s->free_segs[i]);
		jseg_unlink_gently(s->j->dirfd, name);
	}
}

static void s_run(struct jenv *env, struct sjob *s)
{
	int ok = s_sync(env, s);

	if (s->kind == SJOB_CHECKPOINT && s_commit(env, s, ok))
		return;
	if (s->kind == SJOB_UNLINK)
		s_unlink(s);
	free(s->free_segs);
	free(s);
}

static void *s_main(void *arg)
{
	struct jenv *env = arg;

	pthread_mutex_lock(&env->mu_lock);
	for (;;) {
		struct sjob *s = env->mu.s_head;

		if (!s) {
			if (env->mu.s_stop)
				break;
			__atomic_store_n(&env->atom.s_busy, 0, __ATOMIC_RELAXED);
			pthread_cond_wait(&env->s_cv, &env->mu_lock);
			__atomic_store_n(&env->atom.s_busy, 1, __ATOMIC_RELAXED);
			continue;
		}
		env->mu.s_head = s->next;
		if (!env->mu.s_head)
			env->mu.s_tail = &env->mu.s_head;
		pthread_mutex_unlock(&env->mu_lock);
		s_run(env, s);
		pthread_mutex_lock(&env->mu_lock);
		env->mu.s_done++;
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
