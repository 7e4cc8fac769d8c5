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
#include <sys/stat.h>
#include <unistd.h>

#include "catalog.h"

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
	       __atomic_load_n(&env->atom.s_busy, __ATOMIC_RELAXED);
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

/* Removes a deleted queue's files, then its catalog entry (steps 3 and 4
 * of journal_delete; also run for a delete a crash interrupted). */
static void finish_delete(struct jenv *env, const char *name)
{
	char *dir;

	if (!tern_name_valid(name, strlen(name)))
		return;
	if (asprintf(&dir, "%s/queues/%s", env->dir, name) < 0)
		return;
	if (rm_dir(dir) == 0)
		jcat_queue_del(env->cat, name);
	else
		fprintf(stderr, "journal: queue %s: cannot remove %s: %s\n", name, dir,
			strerror(errno));
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

/* jenv_open's step: the data directory, its queues/ and the catalog. */
static int env_open_dirs(struct jenv *env, const char *data_dir)
{
	char *path = NULL;
	int rc;

	if (mkdir(data_dir, 0755) < 0 && errno != EEXIST)
		return TERN_ESYS;
	if (asprintf(&path, "%s/queues", data_dir) < 0)
		return TERN_ENOMEM;
	rc = mkdir(path, 0755) < 0 && errno != EEXIST ? TERN_ESYS : 0;
	free(path);
	if (rc < 0)
		return rc;
	if (asprintf(&path, "%s/catalog", data_dir) < 0)
		return TERN_ENOMEM;
	rc = jcat_open(path, 0, &env->cat);
	free(path);
	return rc;
}

/* jenv_open's step: the syncer, then the writer (which posts to it). */
static int env_start_threads(struct jenv *env)
{
	env->atom.w_busy = env->atom.s_busy = 1; /* until each thread first waits */
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
	env->base = base;
	env->durable = durable;
	env->arg = arg;
	env->mu.q_tail = &env->mu.q_head;
	env->mu.d_tail = &env->mu.d_head;
	env->mu.s_tail = &env->mu.s_head;
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
	pthread_cond_init(&env->s_cv, NULL);
	pthread_cond_init(&env->s_idle, NULL);
	env->dir = strdup(data_dir);
	if (!env->dir)
		goto fail;
	rc = env_open_dirs(env, data_dir);
	if (rc < 0)
		goto fail;
	env->pass_ev = event_new(base, -1, 0, env_pass_cb, env);
	env->done_ev = event_new(base, -1, 0, env_done_cb, env);
	if (!env->pass_ev || !env->done_ev) {
		rc = TERN_ENOMEM;
		goto fail;
	}
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
		if (env->pass_ev)
			event_free(env->pass_ev);
		if (env->done_ev)
			event_free(env->done_ev);
		jcat_close(env->cat);
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
	while (env->loop.open)
		journal_close(env->loop.open);
	env_handoff(env);
	pthread_mutex_lock(&env->mu_lock);
	env->mu.stop = 1;
	writer_wake_unlock(env);
	if (env->loop.thr_started)
		pthread_join(env->loop.thr, NULL);
	syncer_stop(env);
	env_done(env);
	event_free(env->pass_ev);
	event_free(env->done_ev);
	jcat_close(env->cat);
	pthread_mutex_destroy(&env->mu_lock);
	pthread_mutex_destroy(&env->wlock);
	pthread_cond_destroy(&env->cv);
	pthread_cond_destroy(&env->cv_done);
	pthread_cond_destroy(&env->s_cv);
	pthread_cond_destroy(&env->s_idle);
	free(env->mu.compl);
	free(env->loop.spare_compl);
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
	jmap_free(&j->loop.idx);
	jdead_free(&j->loop.dead);
	free(j->loop.segs);
	if (j->dirfd >= 0)
		close(j->dirfd);
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
	j->dirfd = j->w.fd = j->sp.fd = -1;
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
	rc = jcat_queue_put(env->cat, j->name, &j->loop.opts, JCAT_ACTIVE);
	if (rc < 0 && !existed)
		return rc;
	if (rc < 0)
		fprintf(stderr, "journal: queue %s: catalog entry not updated (%s);"
			" keeping the previous one\n", j->name, tern_strerror(rc));
	if (mkdir(j->dir, 0755) < 0 && errno != EEXIST)
		return TERN_ESYS;
	j->dirfd = open(j->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return j->dirfd < 0 ? TERN_ESYS : 0;
}

/* journal_open's step: the writer starts serving j, the loop lists it. */
static void journal_register(struct journal *j)
{
	struct jenv *env = j->env;

	/* A queue that has never been written (a get creates queues, as in
	 * Kestrel) gets no disk until its first record: its first segment is
	 * reserved on the spot when it is needed, and from then on a spare is
	 * kept ready ahead of need. */
	spare_set(j, j->loop.opts.prealloc == JOURNAL_PREALLOC_NONE || j->loop.nseg == 0
			     ? SP_NONE : SP_PENDING);
	pthread_mutex_lock(&env->mu_lock);
	j->mu.wnext = env->mu.journals;
	env->mu.journals = j;
	writer_wake_unlock(env);
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
	/* a fresh checkpoint, so the next restart does not replay this again
	 * (without memory for it now, the timer takes it later) */
	j->loop.ckpt_dirty = 1;
	if (jckpt_take(j) < 0)
		fprintf(stderr, "journal: queue %s: no memory for a checkpoint;"
			" the timer takes it later\n", j->name);
	*out = j;
	return 0;
}

int journal_set_opts(struct journal *j, const struct journal_opts *opts)
{
	struct journal_opts o = *opts;

	jopts_fix(&o);
	j->loop.opts = o;
	pthread_mutex_lock(&j->env->mu_lock);
	j->mu.opts = o;
	if (o.prealloc == JOURNAL_PREALLOC_NONE)
		spare_set(j, SP_NONE);
	else if (spare_get(j) == SP_NONE && j->loop.nseg)
		spare_set(j, SP_PENDING);
	writer_wake_unlock(j->env);
	jckpt_timer_start(j);
	jcat_queue_put(j->env->cat, j->name, &o, JCAT_ACTIVE);
	return 0;
}

/*
 * Waits until the writer has let go of j.  The one place the loop waits
 * for the writer: closing or deleting a queue must not return while the
 * writer may still use its files.  jckpt_close never fails to hand the
 * close over, so this always returns.
 */
static void wait_closed(struct journal *j)
{
	struct jenv *env = j->env;

	pthread_mutex_lock(&env->mu_lock);
	while (!j->mu.closed)
		pthread_cond_wait(&env->cv_done, &env->mu_lock);
	pthread_mutex_unlock(&env->mu_lock);
	env_done(env);
}

void journal_close(struct journal *j)
{
	if (!j)
		return;
	jckpt_close(j, JCLOSE_KEEP);
	wait_closed(j);
	journal_unregister(j);
	journal_free(j);
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
	wait_closed(j);
	journal_unregister(j);
	journal_free(j);
	/* 3. remove files, then the catalog entry and checkpoint */
	finish_delete(env, name);
	free(name);
	return 0;
}

/* ----------------------------------------------------------- mutations */

int journal_add(struct journal *j, struct item *it, int in_memory, uint64_t *ticket)
{
	struct jrec r = { .type = JREC_ADD };
	uint64_t keep = j->loop.reserve + SMALL_REC, pos;
	struct jbatch *b;
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
	if (in_memory) {
		struct jent *e = jmap_get(&j->loop.idx, it->id);

		e->pos = pos;
		e->len = it->len;
		e->flags = 0;
		e->deliveries = r.deliveries;
	} else {
		jbehind_push(j, it, pos);
	}
	/* Every add gets a ticket, resolved as its mode's policy says
	 * (ack_stable), never before the record is written to the kernel. */
	b = j->loop.cur;
	*ticket = ++j->env->loop.last_ticket;
	b->ticket = *ticket;
	b->ents[b->nent - 1].ticket = *ticket; /* jb_append's */
	b->sync = j->loop.opts.sync;
	if (!jpolicy(j->loop.opts.sync)->ack_stable)
		j->env->loop.pass_acks++;
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
			fprintf(stderr, "journal: queue %s: no room for %s record (%" PRIu64
					" dropped so far)\n",
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
	jdead_put(&j->loop.dead, copy.pos); /* on ENOMEM the checkpoint is only less tight */
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
		e->flags |= JENT_OPEN;
		e->deliveries = jrec_deliveries(deliveries);
	} else {
		e->flags &= (uint16_t)~JENT_OPEN;
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

int journal_flush(struct journal *j)
{
	int rc;

	if (failed_get(j))
		return TERN_EIO;
	rc = small_rec(j, JREC_FLUSH, 0, NULL);
	if (rc < 0)
		return rc;
	jmap_clear(&j->loop.idx);
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
	memset(st, 0, sizeof(*st));
	st->segments = j->loop.nseg + (spare_get(j) == SP_READY ? 1 : 0);
	for (size_t i = 0; i < j->loop.nseg; i++)
		st->disk_bytes += j->loop.segs[i].size;
	if (spare_get(j) == SP_READY)
		st->disk_bytes += jseg_target(j, &j->loop.opts);
	st->behind_items = j->loop.behind_items;
	st->behind_bytes = j->loop.behind_bytes;
	st->records_written = __atomic_load_n(&j->atom.st_records, __ATOMIC_RELAXED);
	st->syncs = __atomic_load_n(&j->atom.st_syncs, __ATOMIC_RELAXED);
	st->write_errors = __atomic_load_n(&j->atom.st_errors, __ATOMIC_RELAXED);
}
