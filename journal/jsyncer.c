/* jsyncer.c: the syncer thread (moved from journal.c). */
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

static void wake_syncer_unlock(struct jenv *env)
{
	__atomic_store_n(&env->s_busy, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&env->mu);
	pthread_cond_signal(&env->s_cv);
}


static const char *const sj_what[] = { "fdatasync", "sync directory", "sync spare segment" };

/* Queues s for the syncer.  Takes mu. */
void s_post(struct jenv *env, struct sjob *s)
{
	s->next = NULL;
	pthread_mutex_lock(&env->mu);
	*env->s_tail = s;
	env->s_tail = &s->next;
	env->s_posted++;
	wake_syncer_unlock(env);
}

/* Waits until the syncer has finished every job posted so far. */
void s_barrier(struct jenv *env)
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
void s_writeback_steps(int fd, uint64_t lo, uint64_t hi)
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
void sync_range_take(struct journal *j, struct sjob *s)
{
	s->lo = j->w_sync_lo;
	s->hi = j->w_hi;
	j->w_sync_lo = j->w_hi;
}

/* Hands fd (of kind SJ_*) to the syncer to fdatasync and close; dirty and
 * interval as in struct sjob (an interval sync: the caller set s_pending).
 * When no job can be allocated the sync is done here.  Returns -1 only if
 * that sync failed. */
int s_post_sync(struct journal *j, int fd, int kind, uint64_t dirty, int interval)
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
void s_stop(struct jenv *env)
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

void *s_main(void *arg)
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
