/*
 * journal.c: the public verbs of journal.h: the environment (data
 * directory, catalog, threads) and each queue's journal: open, close,
 * delete, and the mutations the queue records.  Every function here runs
 * on the event-loop thread.
 *
 * DESIGN (the threads and who owns what: jpriv.h; the format and the
 * policies: docs/JOURNAL.md)
 *
 * A mutation encodes a record into the journal's batch for this loop pass
 * (jbatch.c) and updates what the loop knows: which items are live and
 * where their ADD records are (idx), which records are dead (dead), the
 * counts.  journal_add returns a ticket that the writer resolves once the
 * record is written (and synced, where the mode's replies wait for it).
 * Checkpoints (jckpt.c) let recovery (jrecover.c) replay only what
 * followed them; items beyond max_memory_size come back through
 * read-behind (jbehind.c).
 *
 * Failure policy: a failed write or sync marks the journal failed for good
 * (every later mutation returns TERN_EIO) and its tickets in that group are
 * resolved with TERN_EIO; other journals of the group are answered as usual
 * (jgroup.c).  Nothing is retried as if it had succeeded.  A spare segment
 * that cannot be prepared (full disk) makes journal_add return TERN_ENOSPC
 * once the current segment is full; removes keep working from the room
 * every add reserves (beanstalkd's trick).
 */
#include "jpriv.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../lib/log.h"
#include "catalog.h"
#include "jio.h"

/* ------------------------------------------------------------ the env */

uint64_t jenv_writer_wakeups(struct jenv *env)
{
	uint64_t n;

	pthread_mutex_lock(&env->mu_lock);
	n = env->mu.w_wakes;
	pthread_mutex_unlock(&env->mu_lock);
	return n;
}

int jenv_background_busy(const struct jenv *env)
{
	return __atomic_load_n(&env->atom.w_busy, __ATOMIC_RELAXED) ||
	       __atomic_load_n(&env->syncer.busy, __ATOMIC_RELAXED) ||
	       __atomic_load_n(&env->reclaimer.busy, __ATOMIC_RELAXED);
}

static int rm_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int rc = 0;

	if (!d)
		return errno == ENOENT ? 0 : TERN_ESYS;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT)
			rc = TERN_ESYS;
	}
	closedir(d);
	if (rmdir(dir) < 0 && errno != ENOENT)
		rc = TERN_ESYS;
	return rc;
}

/* Makes the names in queues/ durable (a queue's directory made or
 * removed).  0, or -1 with errno. */
static int sync_queues(struct jenv *env)
{
	return jio.fdatasync(env->queues_fd);
}

/* Removes a deleted queue's files, then its catalog entry (steps 3 and 4
 * of journal_delete; also run for a delete a crash interrupted).  The
 * removal is made durable (queues/ synced) before the entry goes: a power
 * cut could otherwise bring the directory back, with its items, and no
 * entry marking it deleted (a set to the name would adopt it).  Until
 * then the entry says "deleting", and the next start finishes the job. */
static void finish_delete(struct jenv *env, const char *name)
{
	char *dir;

	if (!tern_name_valid(name, strlen(name)))
		return;
	if (asprintf(&dir, "%s/queues/%s", env->dir, name) < 0)
		return;
	if (rm_dir(dir) < 0)
		log_warn("journal: queue %s: cannot remove %s: %s", name, dir,
			strerror(errno));
	else if (sync_queues(env) < 0)
		log_warn("journal: queue %s: cannot sync %s/queues after removing it: %s"
			 " (the next start finishes the delete)", name, env->dir, strerror(errno));
	else
		jcat_queue_del(env->cat, name);
	free(dir);
}

/* What a walk of the catalog does with each queue. */
enum list_pass {
	LIST_FINISH_DELETES, /* finish the deletes a crash interrupted */
	LIST_ACTIVE,         /* report every active queue */
};

struct list_ctx {
	struct jenv *env;
	void (*fn)(void *arg, const char *name);
	void *arg;
	enum list_pass pass;
};

static void list_cb(void *arg, const char *name, int state)
{
	struct list_ctx *lc = arg;

	if (lc->pass == LIST_FINISH_DELETES && state == JCAT_DELETING)
		finish_delete(lc->env, name);
	else if (lc->pass == LIST_ACTIVE && state == JCAT_ACTIVE && lc->fn)
		lc->fn(lc->arg, name);
}

/*
 * jenv_open's step: the data directory's lock, taken before anything in it
 * is read.  Two servers on one directory would each recover the queues,
 * then write into the same segments and overwrite each other's
 * checkpoints: acknowledged messages would be lost.  flock(2) on DATA_DIR/
 * JENV_LOCK_NAME, exclusive for ternd (shared for tern-journal, see
 * journal.h); the kernel drops it when the process ends, however it ends,
 * so a crash never leaves the directory locked.  The holder writes its pid
 * into the file for the message a second server prints.
 */
static int env_lock(struct jenv *env, const char *data_dir)
{
	char *path = NULL, pid[32];
	int fd, n;

	if (asprintf(&path, "%s/%s", data_dir, JENV_LOCK_NAME) < 0)
		return TERN_ENOMEM;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, TERN_FILE_MODE);
	if (fd < 0) {
		int e = errno;

		log_error("journal: cannot open lock file %s: %s", path, strerror(e));
		free(path);
		errno = e;
		return TERN_ESYS;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int e = errno;

		if (e == EWOULDBLOCK)
			log_error("journal: data directory %s is in use by another process"
				" (pid %ld, lock file %s)", data_dir, jenv_lock_holder(fd), path);
		else
			log_error("journal: cannot lock %s: %s", path, strerror(e));
		close(fd);
		free(path);
		errno = e;
		return e == EWOULDBLOCK ? TERN_ELOCKED : TERN_ESYS;
	}
	free(path);
	n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
	if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n)
		log_warn("journal: cannot write the pid into %s/%s: %s", data_dir,
			JENV_LOCK_NAME, strerror(errno));
	env->lock_fd = fd;
	return 0;
}

long jenv_lock_holder(int fd)
{
	char buf[32];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

	if (n <= 0)
		return 0;
	buf[n] = 0;
	return strtol(buf, NULL, 10);
}

/* Makes the names in directory path durable (jio_sync_dir), or says why
 * not: 0 or TERN_ESYS. */
static int sync_dir_logged(const char *path)
{
	if (jio_sync_dir(path) == 0)
		return 0;
	log_error("journal: cannot sync directory %s: %s", path, strerror(errno));
	return TERN_ESYS;
}

/* jenv_open's step: the data directory, its lock, its queues/ and the
 * catalog.  The directories' names are made durable before anything in
 * them counts on them: a name is durable only once its directory is
 * synced, so after a power cut queues/ and the catalog, with every
 * queue in them, could otherwise be gone.  (Every start syncs catalog/,
 * where LMDB makes its files without syncing it, and the data directory:
 * two syncs of directories.) */
static int env_open_dirs(struct jenv *env, const char *data_dir)
{
	char *path = NULL;
	int rc;

	if (mkdir(data_dir, TERN_DIR_MODE) == 0) {
		if (jio_sync_parent(data_dir) < 0) {
			log_error("journal: cannot sync the directory holding %s: %s", data_dir,
				  strerror(errno));
			return TERN_ESYS;
		}
	} else if (errno != EEXIST) {
		return TERN_ESYS;
	}
	rc = env_lock(env, data_dir);
	if (rc < 0)
		return rc;
	if (asprintf(&path, "%s/queues", data_dir) < 0)
		return TERN_ENOMEM;
	rc = mkdir(path, TERN_DIR_MODE) < 0 && errno != EEXIST ? TERN_ESYS : 0;
	if (rc == 0) {
		env->queues_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (env->queues_fd < 0)
			rc = TERN_ESYS;
	}
	free(path);
	if (rc < 0)
		return rc;
	if (asprintf(&path, "%s/catalog", data_dir) < 0)
		return TERN_ENOMEM;
	rc = jcat_open(path, 0, &env->cat);
	if (rc == 0)
		rc = sync_dir_logged(path);
	free(path);
	if (rc == 0)
		rc = sync_dir_logged(data_dir);
	return rc;
}

/* jenv_open's step: the syncer, then the writer (which posts to it). */
static int env_start_threads(struct jenv *env)
{
	/* (busy until each thread first waits) */
	env->atom.w_busy = env->syncer.busy = env->reclaimer.busy = 1;
	if (syncer_start(env) < 0)
		return TERN_ESYS;
	if (pthread_create(&env->loop.thr, NULL, w_main, env) != 0)
		return TERN_ESYS;
	env->loop.thr_started = 1;
	return 0;
}

int jenv_open(const char *data_dir, struct event_base *base,
	      jenv_durable_fn durable, void *arg, struct jenv **out)
{
	struct jenv *env = calloc(1, sizeof(*env));
	struct list_ctx lc = { env, NULL, NULL, LIST_FINISH_DELETES };
	int rc = TERN_ENOMEM;

	if (!env)
		return TERN_ENOMEM;
	env->lock_fd = -1;
	env->queues_fd = -1;
	env->wake_fd = -1;
	env->base = base;
	env->durable = durable;
	env->arg = arg;
	env->mu.q_tail = &env->mu.q_head;
	env->mu.d_tail = &env->mu.d_head;
	env->syncer.tail = &env->syncer.head;
	env->reclaimer.tail = &env->reclaimer.head;
	pthread_mutex_init(&env->mu_lock, NULL);
	pthread_mutex_init(&env->wlock, NULL);
	{
		/* The writer's timed sleeps (w_sleep) count on the monotonic
		 * clock: on the wall clock a step back would stall interval
		 * syncs and checkpoints for as long as the step. */
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&env->cv, &ca);
		pthread_condattr_destroy(&ca);
	}
	pthread_cond_init(&env->cv_done, NULL);
	pthread_cond_init(&env->syncer.cv, NULL);
	pthread_cond_init(&env->reclaimer.cv, NULL);
	pthread_cond_init(&env->s_idle, NULL);
	env->dir = strdup(data_dir);
	if (!env->dir)
		goto fail;
	jseg_wfd_init(env);
	rc = env_open_dirs(env, data_dir);
	if (rc < 0)
		goto fail;
	rc = env_events_open(env);
	if (rc < 0)
		goto fail;
	jcat_list(env->cat, list_cb, &lc);
	rc = env_start_threads(env);
	if (rc < 0)
		goto fail;
	*out = env;
	return 0;
fail:
	{
		int e = errno;

		syncer_stop(env);
		env_events_close(env);
		jcat_close(env->cat);
		if (env->queues_fd >= 0)
			close(env->queues_fd);
		if (env->lock_fd >= 0)
			close(env->lock_fd);
		free(env->dir);
		free(env);
		errno = e;
	}
	return rc;
}

void jenv_close(struct jenv *env)
{
	if (!env)
		return;
	while (env->loop.open) {
		struct journal *js[256];
		size_t n = 0;

		/* (a few hundred at a time: each group then commits their
		 * checkpoints together) */
		for (struct journal *j = env->loop.open; j && n < 256; j = j->loop.lnext)
			js[n++] = j;
		journal_close_many(js, n);
	}
	env_handoff(env);
	pthread_mutex_lock(&env->mu_lock);
	env->mu.stop = 1;
	writer_wake_unlock(env);
	if (env->loop.thr_started)
		pthread_join(env->loop.thr, NULL);
	syncer_stop(env);
	env_done(env);
	env_events_close(env);
	jcat_close(env->cat);
	pthread_mutex_destroy(&env->mu_lock);
	pthread_mutex_destroy(&env->wlock);
	pthread_cond_destroy(&env->cv);
	pthread_cond_destroy(&env->cv_done);
	pthread_cond_destroy(&env->syncer.cv);
	pthread_cond_destroy(&env->reclaimer.cv);
	pthread_cond_destroy(&env->s_idle);
	free(env->mu.compl);
	free(env->mu.w_timer);
	free(env->loop.spare_compl);
	if (env->queues_fd >= 0)
		close(env->queues_fd);
	/* last: the directory is free for another server once all is closed */
	if (env->lock_fd >= 0)
		close(env->lock_fd);
	free(env->dir);
	free(env);
}

int jenv_catalog_list(struct jenv *env, void (*fn)(void *arg, const char *name),
		      void *arg)
{
	struct list_ctx lc = { env, fn, arg, LIST_ACTIVE };

	return jcat_list(env->cat, list_cb, &lc);
}

/* -------------------------------------------------------- open, close */

static void journal_free(struct journal *j)
{
	struct jbatch *b;

	if (!j)
		return;
	jb_free(j->loop.cur);
	jb_free(j->loop.last_b);
	while ((b = j->loop.pool)) {
		j->loop.pool = b->next;
		jb_free(b);
	}
	jbehind_clear(j);
	free(j->loop.bp);
	if (j->loop.rb_open)
		jreader_close(&j->loop.rb);
	if (j->loop.ckpt_ev)
		event_free(j->loop.ckpt_ev);
	if (j->loop.ckpt_now_ev)
		event_free(j->loop.ckpt_now_ev);
	jmap_free(&j->loop.idx);
	jmap_free(&j->loop.flagged);
	jdead_free(&j->loop.dead);
	free(j->loop.segs);
	free(j->dir);
	free(j->name);
	free(j);
}

/* journal_open's step: the journal, closed, with its options fixed and the
 * batch its close will need should memory run out by then. */
static struct journal *journal_new(struct jenv *env, const char *name,
				   const struct journal_opts *opts)
{
	struct journal *j = calloc(1, sizeof(*j));

	if (!j)
		return NULL;
	j->env = env;
	j->loop.idx.seq = 1; /* item ids: consecutive (see jmap.h) */
	j->w.fd = j->sp.fd = -1;
	j->sp.unwritten_from = JNO_UNWRITTEN;
	j->mu.heap_i = -1;
	j->loop.rb.fd = -1;
	j->loop.opts = *opts;
	jopts_fix(&j->loop.opts);
	j->mu.opts = j->loop.opts;
	jseg_target_init(j);
	j->name = strdup(name);
	j->loop.last_b = jb_alloc();
	if (!j->name || !j->loop.last_b ||
	    asprintf(&j->dir, "%s/queues/%s", env->dir, name) < 0) {
		j->dir = NULL;
		journal_free(j);
		return NULL;
	}
	return j;
}

/*
 * journal_open_files' step: queue j is in the catalog, and its directory
 * is missing.  A queue made and never written has none yet (a crash
 * between the catalog entry and the mkdir): 0, it is made.  But one whose
 * checkpoint counts items, or that cannot be read, lost its files: it is
 * refused, as a queue with an unreadable segment is, and nothing is
 * written on its word (a new checkpoint would say the queue is empty, and
 * the evidence would be gone): TERN_ESYS with errno ENOENT.
 */
static int dir_missing(struct journal *j)
{
	void *blob = NULL;
	size_t len = 0;
	struct ckpt_view v;
	int rc = jcat_ckpt_get(j->env->cat, j->name, &blob, &len);
	enum ckpt_check ck;

	if (rc == TERN_ENOTFOUND)
		return 0;
	if (rc < 0)
		return rc;
	ck = ckblob_check(blob, len, &v, NULL);
	free(blob);
	if (ck == CKPT_OK && v.live_items == 0)
		return 0;
	if (ck == CKPT_OK)
		log_error("journal: queue %s: its directory %s is missing, and its checkpoint"
			  " counts %llu items: not opened (restore the directory, or delete the"
			  " queue to drop them)", j->name, j->dir,
			  (unsigned long long)v.live_items);
	else
		log_error("journal: queue %s: its directory %s is missing, and its checkpoint"
			  " cannot be read: not opened (restore the directory, or delete the"
			  " queue)", j->name, j->dir);
	errno = ENOENT;
	return TERN_ESYS;
}

/* journal_open's step: the catalog entry first (a directory without one is
 * never trusted), then the directory.  An existing queue only refreshes
 * its settings: on a full disk that may fail, and the queue must still
 * open so it can be read. */
static int journal_open_files(struct journal *j)
{
	struct jenv *env = j->env;
	int state, existed, rc = jcat_queue_get(env->cat, j->name, &state);

	if (rc == 0 && state == JCAT_DELETING)
		finish_delete(env, j->name);
	else if (rc < 0 && rc != TERN_ENOTFOUND)
		return rc;
	existed = rc == 0 && state == JCAT_ACTIVE;
	/* (a restart reopens every queue: a commit, with its syncs, for each
	 * one whose settings did not change would cost seconds) */
	rc = existed && jcat_queue_same(env->cat, j->name, &j->loop.opts, JCAT_ACTIVE)
		     ? 0 : jcat_queue_put(env->cat, j->name, &j->loop.opts, JCAT_ACTIVE);
	if (rc < 0 && !existed)
		return rc;
	if (rc < 0)
		log_warn("journal: queue %s: catalog entry not updated (%s);"
			" keeping the previous one", j->name, tern_strerror(rc));
	if (existed && access(j->dir, F_OK) < 0 && errno == ENOENT &&
	    (rc = dir_missing(j)) < 0)
		return rc;
	if (mkdir(j->dir, TERN_DIR_MODE) == 0) {
		/* durable before any record in it is acknowledged */
		if (sync_queues(env) < 0) {
			log_error("journal: queue %s: cannot sync %s/queues: %s", j->name,
				  env->dir, strerror(errno));
			return TERN_ESYS;
		}
	} else if (errno != EEXIST) {
		return TERN_ESYS;
	}
	return 0;
}

/* journal_open's step: the writer starts serving j, the loop lists it. */
static void journal_register(struct journal *j)
{
	struct jenv *env = j->env;

	/* A queue that has never been written (a get creates queues, as in
	 * Kestrel) gets no disk until its first record, and a queue gets no
	 * spare until it needs one: its next segment is reserved on the spot
	 * when it is needed (or taken from a spare.seg already on disk), and
	 * from then on a spare is prepared as its segments fill (see
	 * SPARE_AHEAD_MIN). */
	spare_set(j, SP_NONE);
	j->loop.lnext = env->loop.open;
	if (env->loop.open)
		env->loop.open->loop.lprev = j;
	env->loop.open = j;
}

/* The loop forgets j (journal_close, journal_delete). */
static void journal_unregister(struct journal *j)
{
	if (j->loop.lprev)
		j->loop.lprev->loop.lnext = j->loop.lnext;
	else
		j->env->loop.open = j->loop.lnext;
	if (j->loop.lnext)
		j->loop.lnext->loop.lprev = j->loop.lprev;
}

int journal_open(struct jenv *env, const char *name,
		 const struct journal_opts *opts, journal_item_fn on_item,
		 void *arg, struct journal_recovery *recp, struct journal **out)
{
	struct journal *j;
	struct journal_recovery rec = { 0 };
	struct rec_item *items = NULL;
	size_t nitems = 0;
	int rc;

	if (!tern_name_valid(name, strlen(name)))
		return TERN_EBADNAME;
	/* room for DIR/queues/NAME/NNNNNNNN.seg in every path (jpath) */
	if (strlen(env->dir) + strlen("/queues/") + strlen(name) + 20 >= JPATH_MAX)
		return TERN_EINVAL;
	j = journal_new(env, name, opts);
	if (!j)
		return TERN_ENOMEM;
	rc = journal_open_files(j);
	if (rc == 0)
		rc = jrecover(j, &rec, &items, &nitems);
	if (rc == 0)
		rc = jckpt_timer_start(j);
	if (rc < 0) {
		for (size_t i = 0; i < nitems; i++)
			item_unref(items[i].it);
		free(items);
		journal_free(j);
		return rc;
	}
	journal_register(j);
	for (size_t i = 0; i < nitems; i++)
		on_item(arg, items[i].it);
	free(items);
	if (recp)
		*recp = rec;
	/* a fresh checkpoint when recovery found anything the stored one does
	 * not say (jrecover sets ckpt_dirty), so the next restart does not
	 * replay it again (without memory for it now, the timer takes it
	 * later) */
	if (jckpt_take(j) < 0)
		log_warn("journal: queue %s: no memory for a checkpoint;"
			" the timer takes it later", j->name);
	*out = j;
	return 0;
}

void journal_set_lost_fn(struct journal *j, journal_lost_fn fn, void *arg)
{
	j->loop.lost_fn = fn;
	j->loop.lost_arg = arg;
}

int journal_set_opts(struct journal *j, const struct journal_opts *opts)
{
	struct journal_opts o = *opts;

	jopts_fix(&o);
	j->loop.opts = o;
	pthread_mutex_lock(&j->env->mu_lock);
	j->mu.opts = o;
	if (o.prealloc == JOURNAL_PREALLOC_NONE)
		jwork_spare(j, SP_NONE);
	if (dirty_get(j))
		jwork_dirty(j); /* (a mode with timed syncs now, perhaps) */
	writer_wake_unlock(j->env);
	jckpt_timer_start(j);
	jcat_queue_put(j->env->cat, j->name, &o, JCAT_ACTIVE);
	return 0;
}

/*
 * Waits until the writer has let go of the n journals js.  The one place
 * the loop waits for the writer: closing or deleting a queue must not
 * return while the writer may still use its files.  jckpt_close never
 * fails to hand the close over, so this always returns.
 */
static void wait_closed(struct jenv *env, struct journal **js, size_t n)
{
	pthread_mutex_lock(&env->mu_lock);
	for (size_t i = 0; i < n; i++)
		while (!js[i]->mu.closed)
			pthread_cond_wait(&env->cv_done, &env->mu_lock);
	pthread_mutex_unlock(&env->mu_lock);
	env_done(env);
}

void journal_close_many(struct journal **js, size_t n)
{
	struct jenv *env;

	if (!n)
		return;
	env = js[0]->env;
	for (size_t i = 0; i < n; i++)
		jckpt_close(js[i], JCLOSE_KEEP);
	env_handoff(env);
	wait_closed(env, js, n);
	for (size_t i = 0; i < n; i++) {
		journal_unregister(js[i]);
		journal_free(js[i]);
	}
}

void journal_close(struct journal *j)
{
	if (j)
		journal_close_many(&j, 1);
}

int journal_delete(struct journal *j)
{
	struct jenv *env = j->env;
	char *name = strdup(j->name);
	int rc;

	if (!name)
		return TERN_ENOMEM;
	/* 1. mark: if we crash from here on, jenv_open finishes the delete */
	rc = jcat_queue_put(env->cat, j->name, &j->loop.opts, JCAT_DELETING);
	if (rc < 0) {
		free(name);
		return rc;
	}
	/* 2. stop the writer's use of the files */
	jckpt_close(j, JCLOSE_DELETE);
	env_handoff(env);
	wait_closed(env, &j, 1);
	journal_unregister(j);
	journal_free(j);
	/* 3. remove files, then the catalog entry and checkpoint */
	finish_delete(env, name);
	free(name);
	return 0;
}

/* ----------------------------------------------------------- mutations */

/* Gives the record jb_append appended last (to j's current batch) the
 * next ticket, resolved as the batch's mode says (ack_stable). */
static uint64_t ticket_last(struct journal *j)
{
	struct jbatch *b = j->loop.cur;
	uint64_t t = ++j->env->loop.last_ticket;

	b->ticket = t;
	b->ents[b->nent - 1].ticket = t;
	b->sync = j->loop.opts.sync;
	if (!jpolicy(j->loop.opts.sync)->ack_stable)
		j->env->loop.pass_acks++;
	return t;
}

int journal_add(struct journal *j, struct item *it, int in_memory, uint64_t *ticket)
{
	struct jrec r = { .type = JREC_ADD };
	uint64_t keep = j->loop.reserve + SMALL_REC, pos;
	int rc;

	*ticket = 0;
	if (failed_get(j))
		return TERN_EIO;
	if (keep > jb_reserve_cap(j))
		keep = jb_reserve_cap(j);
	rc = jb_make_room(j, jrec_size(it->len), keep);
	if (rc < 0)
		return rc;
	if (!in_memory && jbehind_reserve(j) < 0)
		return TERN_ENOMEM;
	if (in_memory && !jmap_put(&j->loop.idx, it->id))
		return TERN_ENOMEM;
	r.len = it->len;
	r.id = it->id;
	r.expiry_ms = it->expiry_ms;
	r.add_ms = it->add_ms;
	r.iflags = it->flags;
	r.ilen = it->len;
	r.deliveries = jrec_deliveries(it->deliveries);
	if (it->state & ITEM_DELAYED)
		r.rflags |= JREC_F_DELAYED;
	rc = jb_append(j, &r, it, &pos);
	if (rc < 0) {
		if (in_memory)
			jmap_del(&j->loop.idx, it->id);
		return rc;
	}
	j->loop.reserve = keep;
	j->loop.live_items++;
	j->loop.live_bytes += it->len;
	if (it->id > j->loop.max_id)
		j->loop.max_id = it->id;
	jseg_note_add(j, pos, it->id);
	if (in_memory) {
		struct jent *e = jmap_get(&j->loop.idx, it->id);

		jent_flags_set(j, e, 0);
		e->pos = pos;
		e->len = it->len;
		e->deliveries = r.deliveries;
	} else {
		jbehind_push(j, it, pos);
	}
	/* Every add gets a ticket, resolved as its mode's policy says
	 * (ack_stable), never before the record is written to the kernel. */
	*ticket = ticket_last(j);
	return 0;
}

/* Appends a small record about the item at e (REMOVE, OPEN, ...).  Uses
 * the reserve for REMOVE/CONFIRM; OPEN/ABORT are written only when there is
 * room beyond it (they only order items after a crash). */
static int small_rec(struct journal *j, int type, uint64_t id, struct jent *e)
{
	struct jrec r = { .type = (uint8_t)type, .id = id };
	int uses_reserve = type == JREC_REMOVE || type == JREC_CONFIRM || type == JREC_FLUSH;
	uint64_t keep = j->loop.reserve;
	int rc;

	if (uses_reserve)
		keep = j->loop.reserve >= SMALL_REC ? j->loop.reserve - SMALL_REC : 0;
	rc = jb_make_room(j, SMALL_REC, keep);
	if (rc < 0) {
		j->loop.dropped_records++;
		if (j->loop.dropped_records == 1 || (j->loop.dropped_records & 1023) == 0)
			log_error("journal: queue %s: no room for %s record (%" PRIu64
					" dropped so far)",
				j->name, jrec_type_name(type), j->loop.dropped_records);
		/* the caller still updates the in-memory state: the next
		 * checkpoint records it (and frees what it made dead), which on
		 * a full disk is the only way space comes back */
		j->loop.ckpt_dirty = 1;
		return type == JREC_FLUSH ? rc : 0;
	}
	if (e) {
		r.aux = e->pos;
		r.ilen = e->len;
		if (type == JREC_OPEN || type == JREC_ABORT)
			r.deliveries = e->deliveries;
	}
	rc = jb_append(j, &r, NULL, NULL);
	if (rc < 0)
		return rc;
	if (uses_reserve)
		j->loop.reserve = keep;
	if (j->loop.cur)
		j->loop.cur->sync = j->loop.opts.sync;
	return 0;
}

/* Item id is gone for good (REMOVE, CONFIRM). */
static int kill_item(struct journal *j, uint64_t id, int type)
{
	struct jent *e;
	struct jent copy;
	int rc;

	if (failed_get(j))
		return TERN_EIO;
	e = jmap_get(&j->loop.idx, id);
	if (!e)
		return 0; /* not known as live: nothing to record */
	copy = *e;
	rc = small_rec(j, type, id, &copy);
	if (rc < 0)
		return rc;
	jent_flags_set(j, e, 0); /* (small_rec leaves the index be: e is still the entry) */
	/* (on ENOMEM the checkpoint is only less tight) */
	if (copy.flags & JENT_MOVED)
		jdead_put_aside(&j->loop.dead, copy.pos); /* (a copy at the tail) */
	else
		jdead_put(&j->loop.dead, copy.pos);
	jmap_del(&j->loop.idx, id);
	if (j->loop.live_items)
		j->loop.live_items--;
	j->loop.live_bytes -= copy.len <= j->loop.live_bytes ? copy.len : j->loop.live_bytes;
	return 0;
}

int journal_remove(struct journal *j, uint64_t id)
{
	return kill_item(j, id, JREC_REMOVE);
}

int journal_confirm(struct journal *j, uint64_t id)
{
	return kill_item(j, id, JREC_CONFIRM);
}

/* Item id was opened (its delivery count now deliveries) or went back
 * (OPEN, ABORT). */
static int mark_item(struct journal *j, uint64_t id, int type, uint32_t deliveries)
{
	struct jent *e;
	struct jent copy;

	if (failed_get(j))
		return TERN_EIO;
	e = jmap_get(&j->loop.idx, id);
	if (!e)
		return 0;
	if (type == JREC_OPEN) {
		jent_flags_set(j, e, e->flags | JENT_OPEN);
		e->deliveries = jrec_deliveries(deliveries);
	} else {
		jent_flags_set(j, e, e->flags & (uint16_t)~JENT_OPEN);
	}
	copy = *e;
	return small_rec(j, type, id, &copy);
}

int journal_open_item(struct journal *j, uint64_t id, uint32_t deliveries)
{
	return mark_item(j, id, JREC_OPEN, deliveries);
}

int journal_abort(struct journal *j, uint64_t id)
{
	return mark_item(j, id, JREC_ABORT, 0);
}

int journal_flush(struct journal *j, uint64_t *ticket)
{
	int rc;

	*ticket = 0;
	if (failed_get(j))
		return TERN_EIO;
	rc = small_rec(j, JREC_FLUSH, 0, NULL);
	if (rc < 0)
		return rc;
	/* Answered only once it is as durable as an answered add: in always
	 * or odsync, a flush no set followed would wait for the next synced
	 * group or checkpoint, and a power cut before it brought every item
	 * back. */
	*ticket = ticket_last(j);
	jmap_clear(&j->loop.idx);
	jmap_clear(&j->loop.flagged);
	j->loop.flagged_lost = 0;
	jdead_clear(&j->loop.dead);
	jbehind_clear(j);
	j->loop.live_items = j->loop.live_bytes = 0;
	j->loop.behind_items = j->loop.behind_bytes = 0;
	j->loop.rb_pos = 0;
	j->loop.reserve = 0;
	return 0;
}

void journal_get_stats(struct journal *j, struct journal_stats *st)
{
	uint64_t spare = __atomic_load_n(&j->atom.spare_bytes, __ATOMIC_RELAXED);

	memset(st, 0, sizeof(*st));
	/* every file: the live segments, the dead ones not reclaimed yet,
	 * the spare (whatever its state) */
	for (size_t i = 0; i < j->loop.nseg; i++) {
		if (j->loop.segs[i].lost)
			continue;
		st->segments++;
		st->disk_bytes += j->loop.segs[i].size;
	}
	st->segments += __atomic_load_n(&j->atom.dead_files, __ATOMIC_RELAXED);
	st->disk_bytes += __atomic_load_n(&j->atom.dead_bytes, __ATOMIC_RELAXED);
	if (spare) {
		st->segments++;
		st->disk_bytes += spare;
	}
	st->behind_items = j->loop.behind_items;
	st->behind_bytes = j->loop.behind_bytes;
	st->records_written = __atomic_load_n(&j->atom.st_records, __ATOMIC_RELAXED);
	st->syncs = __atomic_load_n(&j->atom.st_syncs, __ATOMIC_RELAXED);
	st->write_errors = __atomic_load_n(&j->atom.st_errors, __ATOMIC_RELAXED);
	st->index_walks = j->loop.index_walks;
}
