/*
 * jwriter.c: the writer thread (w_main).  Its loop, in order of priority:
 *
 *   1. serve the queued groups (w_group, jgroup.c), under wlock;
 *   2. free the segments of checkpoints the syncer committed;
 *   3. one background job: a step of spare preparation (jspare.c), or
 *      posting a due interval sync to the syncer;
 *   4. sleep until the next job is due or the loop or the syncer signals.
 *
 * Between groups it does one background job at a time, so under sustained
 * load syncs and spare preparation still get their turn, and a queued
 * group never waits behind more than one step.
 */
#include "jpriv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "jio.h"

/* What w_next_job picked. */
enum wjob {
	WJOB_NONE,
	WJOB_SPARE,         /* a step of preparing the journal's spare */
	WJOB_INTERVAL_SYNC, /* its interval sync is due */
};

/* Step 1 (mu_lock held on entry and exit): serves every queued group.  wlock is
 * taken before the list, so the loop's inline write, which checks the
 * queue under wlock, never overtakes a queued group. */
static void w_serve_queue(struct jenv *env)
{
	struct jbatch *list;

	pthread_mutex_unlock(&env->mu_lock);
	pthread_mutex_lock(&env->wlock);
	pthread_mutex_lock(&env->mu_lock);
	list = env->mu.q_head;
	env->mu.q_head = NULL;
	env->mu.q_tail = &env->mu.q_head;
	pthread_mutex_unlock(&env->mu_lock);
	if (list)
		w_group(env, list);
	pthread_mutex_unlock(&env->wlock);
	pthread_mutex_lock(&env->mu_lock);
}

/* Step 2 (mu_lock held on entry and exit). */
static void w_serve_frees(struct jenv *env)
{
	pthread_mutex_unlock(&env->mu_lock);
	pthread_mutex_lock(&env->wlock);
	w_take_frees(env);
	pthread_mutex_unlock(&env->wlock);
	pthread_mutex_lock(&env->mu_lock);
}

/* Step 3, the choice (under mu_lock): the first journal with a spare to prepare
 * or an interval sync due, and in *wait_ms how long the writer may sleep
 * before the next one is due. */
static struct journal *w_next_job(struct jenv *env, int64_t now, enum wjob *what,
				  int64_t *wait_ms)
{
	for (struct journal *j = env->mu.journals; j; j = j->mu.wnext) {
		const struct journal_opts *o = &j->mu.opts;
		int timer = jpolicy(o->sync)->timer_sync;
		int pending = __atomic_load_n(&j->atom.s_pending, __ATOMIC_ACQUIRE);
		int sp = spare_get(j);

		if (failed_get(j))
			continue;
		if (o->prealloc != JOURNAL_PREALLOC_NONE &&
		    (sp == SP_PENDING || (sp == SP_NOSPC && now >= j->mu.sp_retry_at))) {
			*what = WJOB_SPARE;
			return j;
		}
		if (timer && dirty_get(j) && !pending) {
			/* w.fd is checked again under wlock before the sync */
			int64_t due = __atomic_load_n(&j->atom.last_sync, __ATOMIC_RELAXED) +
				      o->sync_interval_ms;

			if (due <= now) {
				*what = WJOB_INTERVAL_SYNC;
				return j;
			}
			if (due - now < *wait_ms)
				*wait_ms = due - now;
		} else if (timer && pending && (int64_t)o->sync_interval_ms < *wait_ms) {
			/* The syncer wakes us when its sync is done.  Plan to
			 * wake within an interval anyway: the loop's inline
			 * write wakes a writer that plans to sleep longer than
			 * that (wake_writer_if_due), and during a long sync
			 * (the writeback of a fast stream of large sets) it
			 * would wake this one at every loop pass for nothing,
			 * each time two context switches and a contended
			 * mutex. */
			*wait_ms = o->sync_interval_ms;
		}
		if (sp == SP_NOSPC && j->mu.sp_retry_at - now < *wait_ms)
			*wait_ms = j->mu.sp_retry_at > now ? j->mu.sp_retry_at - now : 1;
	}
	*what = WJOB_NONE;
	return NULL;
}

/* Step 3, an interval sync: posted to the syncer, so the loop keeps
 * writing inline and queued groups are served meanwhile.  A dup keeps the
 * file open should a roll close it; the journal is clean afterwards only
 * if nothing was written during the sync. */
static void w_interval_sync(struct journal *j)
{
	pthread_mutex_lock(&j->env->wlock);
	if (j->w.fd >= 0 && dirty_get(j)) {
		int fd = dup(j->w.fd);

		if (fd >= 0) {
			__atomic_store_n(&j->atom.s_pending, 1, __ATOMIC_RELEASE);
			s_post_sync(j, fd, SJOB_SYNC_INTERVAL, dirty_get(j));
		} else {
			/* no descriptor to spare: sync here */
			if (jseg_sync(j, j->w.fd) == 0)
				__atomic_store_n(&j->atom.dirty, 0, __ATOMIC_RELAXED);
			__atomic_store_n(&j->atom.last_sync, mono_ms(), __ATOMIC_RELAXED);
		}
	} else {
		__atomic_store_n(&j->atom.last_sync, mono_ms(), __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&j->env->wlock);
}

/* Step 3, the job (without mu). */
static void w_run_job(struct journal *j, enum wjob what, const struct journal_opts *o)
{
	if (what == WJOB_SPARE)
		/* Without wlock: the loop's inline writes never touch a
		 * spare, and only this thread prepares spares. */
		w_spare_step(j, o, 0, jseg_target(j, o));
	else
		w_interval_sync(j);
}

/* Step 4 (under mu_lock): sleeps until wait_ms from now, or a signal. */
static void w_sleep(struct jenv *env, int64_t now, int64_t wait_ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts); /* env->cv's clock (jenv_open) */
	ts.tv_sec += wait_ms / 1000;
	ts.tv_nsec += (wait_ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	env->mu.w_wake_at = now + wait_ms;
	__atomic_store_n(&env->atom.w_busy, 0, __ATOMIC_RELAXED);
	pthread_cond_timedwait(&env->cv, &env->mu_lock, &ts);
	__atomic_store_n(&env->atom.w_busy, 1, __ATOMIC_RELAXED);
	env->mu.w_wake_at = 0;
}

void *w_main(void *arg)
{
	struct jenv *env = arg;

	pthread_mutex_lock(&env->mu_lock);
	for (;;) {
		int64_t now, wait_ms = 1000;
		enum wjob what;
		struct journal *job;

		if (env->mu.q_head)
			w_serve_queue(env);
		if (env->mu.f_head)
			w_serve_frees(env);
		if (env->mu.stop && !env->mu.q_head)
			break;
		now = mono_ms();
		job = w_next_job(env, now, &what, &wait_ms);
		if (job) {
			struct journal_opts o = job->mu.opts;

			pthread_mutex_unlock(&env->mu_lock);
			w_run_job(job, what, &o);
			pthread_mutex_lock(&env->mu_lock);
			continue;
		}
		if (!env->mu.q_head)
			w_sleep(env, now, wait_ms);
	}
	pthread_mutex_unlock(&env->mu_lock);
	return NULL;
}
