/* jwriter.c: the writer thread (moved from journal.c). */
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

/* Called with mu held, which they release: wake the writer / the syncer.
 * Each counts as busy from now (not only once it runs), so the loop stops
 * polling and the woken thread gets the core as soon as the loop runs out
 * of work (jenv_background_busy; a scheduler trace showed a woken writer
 * waiting up to 3.5 ms for a loop that kept polling).  The signal comes
 * after the unlock: a thread signalled while mu is held wakes only to
 * block on mu, and is woken a second time when it is released (two
 * context switches, and two futex calls for the signaller, where one of
 * each does). */
void wake_writer_unlock(struct jenv *env)
{
	/* w_busy is 0 (under mu) only while the writer waits on cv: only
	 * then does the signal wake it (a context switch) */
	if (!__atomic_load_n(&env->w_busy, __ATOMIC_RELAXED))
		env->w_wakes++;
	__atomic_store_n(&env->w_busy, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&env->mu);
	pthread_cond_signal(&env->cv);
}

/* The writer's copy of j's options (journal_set_opts changes it under mu). */
void w_opts_get(struct journal *j, struct journal_opts *o)
{
	pthread_mutex_lock(&j->env->mu);
	*o = j->w_opts;
	pthread_mutex_unlock(&j->env->mu);
}

void w_fail(struct journal *j, const char *what, int e)
{
	if (!failed_get(j))
		fprintf(stderr, "journal: queue %s: %s failed: %s; journal is now failed\n",
			j->name, what, strerror(e));
	__atomic_store_n(&j->failed, TERN_EIO, __ATOMIC_RELEASE);
	stat_add(&j->st_errors, 1);
}

int w_sync(struct journal *j, int fd)
{
	if (jio.fdatasync(fd) < 0) {
		w_fail(j, "fdatasync", errno);
		return -1;
	}
	stat_add(&j->st_syncs, 1);
	return 0;
}

/* Makes segment seg, of size bytes (its header's size), the write segment.
 * A spare not ready yet is reserved here at that size, not at seg_target:
 * the loop advanced next_size when it started this segment. */
int w_activate(struct journal *j, uint32_t seg, uint64_t size,
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

void w_close_files(struct journal *j, int sync)
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

/* Frees the segments of checkpoints the syncer committed.  Under wlock. */
void w_take_frees(struct jenv *env)
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

void *w_main(void *arg)
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
