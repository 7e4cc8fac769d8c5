/*
 * jwriter.c: the writer thread (w_main).  Its loop, in order of priority:
 *
 *   1. serve the queued groups (w_group, jgroup.c), under wlock;
 *   2. free the segments of checkpoints the syncer committed;
 *   3. one background job (the lists of jwork.c): a step of zeros ahead
 *      of the records in a segment, a step of spare preparation (both
 *      jspare.c), or posting a due interval sync to the syncer;
 *   4. sleep until the next job is due or the loop or the syncer signals.
 *
 * Before it takes a group that follows a synced one, it may wait for the
 * clients that sync answered (w_linger, below).
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

#define LINGER_SKIP 8 /* (jpriv.h, env->lg) */

/* ts: CLOCK_MONOTONIC (env->cv's clock, jenv_open) us from now. */
static void cv_deadline(struct timespec *ts, int64_t us)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += us / 1000000;
	ts->tv_nsec += (us % 1000000) * 1000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

/* Under wlock and mu_lock, before the next group is taken: the wait
 * planned by w_linger_plan (jgroup.c), if any.  The loop signals cv only once
 * q_waiters reaches mu.lg_waiters (env_handoff). */
static void w_linger(struct jenv *env)
{
	int64_t left;

	if (!env->lg.target)
		return;
	stat_add(&env->stats.group_waits, 1);
	while (env->mu.q_waiters < env->lg.target && !env->mu.stop) {
		struct timespec ts;

		left = env->lg.until_us - tern_mono_us();
		if (left <= 0) {
			stat_add(&env->stats.group_waits_cut, 1);
			env->lg.skip = LINGER_SKIP;
			break;
		}
		cv_deadline(&ts, left);
		env->mu.lg_waiters = env->lg.target;
		__atomic_store_n(&env->atom.w_busy, 0, __ATOMIC_RELAXED);
		pthread_cond_timedwait(&env->cv, &env->mu_lock, &ts);
		__atomic_store_n(&env->atom.w_busy, 1, __ATOMIC_RELAXED);
		env->mu.lg_waiters = 0;
	}
	env->lg.target = 0;
}

/* Step 1 (mu_lock held on entry and exit): serves every queued group.  wlock is
 * taken before the list, so the loop's inline write, which checks the
 * queue under wlock, never overtakes a queued group. */
static void w_serve_queue(struct jenv *env)
{
	struct jbatch *list;
	uint64_t waiters;

	pthread_mutex_unlock(&env->mu_lock);
	pthread_mutex_lock(&env->wlock);
	pthread_mutex_lock(&env->mu_lock);
	w_linger(env);
	list = handoff_take(env, &waiters);
	pthread_mutex_unlock(&env->mu_lock);
	if (list)
		w_group(env, list, waiters);
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

/* Step 3, an interval sync: posted to the syncer, so the loop keeps
 * writing inline and queued groups are served meanwhile.  The syncer opens
 * the segment by name (a roll may close the writer's descriptor
 * meanwhile); the journal is clean afterwards only if nothing was written
 * during the sync. */
static void w_interval_sync(struct journal *j)
{
	pthread_mutex_lock(&j->env->wlock);
	if (j->w.seg && dirty_get(j)) {
		__atomic_store_n(&j->atom.s_pending, 1, __ATOMIC_RELEASE);
		s_post_sync(j, SFILE_SEG, j->w.seg, SJOB_SYNC_INTERVAL, dirty_get(j));
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
		w_spare_planned(j, o);
	else if (what == WJOB_ZERO)
		w_zero_step(j);
	else
		w_interval_sync(j);
}

/* Step 4 (under mu_lock): sleeps until wait_ms from now, or a signal. */
static void w_sleep(struct jenv *env, int64_t now, int64_t wait_ms)
{
	struct timespec ts;

	cv_deadline(&ts, wait_ms * 1000);
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
		job = jwork_next(env, now, &what, &wait_ms);
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
