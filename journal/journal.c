/*
 * journal.c: per-queue journals, the writer thread, recovery, checkpoints.
 *
 * DESIGN (details and the on-disk format: docs/JOURNAL.md)
 *
 * Loop thread: journal_add() and friends encode a record header into the
 * journal's current batch (a growing buffer reused from pass to pass) and
 * reference the item body instead of copying it.  The loop assigns every
 * record its position (segment number, offset), so it knows where each
 * item lives without asking the writer.  The first append of a pass
 * activates env->pass_ev; its callback (which runs after the callbacks of
 * that pass) hands every dirty journal's batch to the writer at once.
 *
 * Writer thread: takes every batch queued so far (the ones that arrived
 * while it was writing or syncing: group commit), writes each journal's
 * records with one pwritev per segment run, then fdatasyncs the segments of
 * `always` journals (`odsync` segments are opened O_DSYNC), commits attached
 * checkpoints to LMDB, frees dead segments, and reports back through
 * env->done_ev: the highest ticket covered and an error, and the finished
 * batches (which advance each journal's `written_pos` for read-behind).
 * When idle it prepares the next segment of each journal ahead of need
 * (zero-fill in 256 KiB steps, or fallocate) and does `interval` syncs.
 *
 * Failure policy: a failed write or sync marks the journal failed for good
 * (every later call returns TERN_EIO) and its tickets in that group are
 * resolved with TERN_EIO; the other journals of the group are answered as
 * usual (w_report).  Nothing is retried as if it had succeeded.
 * A spare segment that cannot be prepared (ENOSPC) makes journal_add return
 * TERN_ENOSPC once the current segment is full; removes keep working from
 * the room reserved by every add (beanstalkd's trick).  The writer retries
 * the preparation every second and whenever an add is refused.
 */
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
#include "jdead.h"
#include "jmap.h"
#include "record.h"

uint64_t jenv_writer_wakeups(struct jenv *env)
{
	uint64_t n;

	pthread_mutex_lock(&env->mu);
	n = env->w_wakes;
	pthread_mutex_unlock(&env->mu);
	return n;
}

int jenv_background_busy(const struct jenv *env)
{
	return __atomic_load_n(&env->w_busy, __ATOMIC_RELAXED) ||
	       __atomic_load_n(&env->s_busy, __ATOMIC_RELAXED);
}

/* Waits (on the loop thread) until the writer has closed j. */
static void wait_closed(struct journal *j)
{
	struct jenv *env = j->env;

	pthread_mutex_lock(&env->mu);
	while (!j->w_closed)
		pthread_cond_wait(&env->cv_done, &env->mu);
	pthread_mutex_unlock(&env->mu);
	env_done(env);
}

static void finish_delete(struct jenv *env, const char *name);

struct list_ctx {
	struct jenv *env;
	void (*fn)(void *arg, const char *name);
	void *arg;
	int pass; /* 0 = finish deletes, 1 = list active */
};

static void list_cb(void *arg, const char *name, int state)
{
	struct list_ctx *lc = arg;

	if (lc->pass == 0 && state == JCAT_DELETING)
		finish_delete(lc->env, name);
	else if (lc->pass == 1 && state == JCAT_ACTIVE && lc->fn)
		lc->fn(lc->arg, name);
}

int jenv_open(const char *data_dir, struct event_base *base,
	      jenv_durable_fn durable, void *arg, struct jenv **out)
{
	struct jenv *env = calloc(1, sizeof(*env));
	char *path = NULL;
	int rc = TERN_ENOMEM;

	if (!env)
		return TERN_ENOMEM;
	env->base = base;
	env->durable = durable;
	env->arg = arg;
	env->q_tail = &env->q_head;
	env->d_tail = &env->d_head;
	env->s_tail = &env->s_head;
	pthread_cond_init(&env->s_cv, NULL);
	pthread_cond_init(&env->s_idle, NULL);
	pthread_mutex_init(&env->mu, NULL);
	pthread_mutex_init(&env->wlock, NULL);
	pthread_cond_init(&env->cv, NULL);
	pthread_cond_init(&env->cv_done, NULL);
	env->dir = strdup(data_dir);
	if (!env->dir)
		goto fail;
	if (mkdir(data_dir, 0755) < 0 && errno != EEXIST) {
		rc = TERN_ESYS;
		goto fail;
	}
	if (asprintf(&path, "%s/queues", data_dir) < 0) {
		path = NULL;
		goto fail;
	}
	if (mkdir(path, 0755) < 0 && errno != EEXIST) {
		rc = TERN_ESYS;
		goto fail;
	}
	free(path);
	if (asprintf(&path, "%s/catalog", data_dir) < 0) {
		path = NULL;
		goto fail;
	}
	rc = jcat_open(path, 0, &env->cat);
	if (rc < 0)
		goto fail;
	env->pass_ev = event_new(base, -1, 0, pass_cb, env);
	env->done_ev = event_new(base, -1, 0, done_cb, env);
	if (!env->pass_ev || !env->done_ev) {
		rc = TERN_ENOMEM;
		goto fail;
	}
	{
		struct list_ctx lc = { env, NULL, NULL, 0 };

		jcat_list(env->cat, list_cb, &lc); /* finish interrupted deletes */
	}
	env->w_busy = env->s_busy = 1; /* until each thread first waits */
	if (pthread_create(&env->s_thr, NULL, s_main, env) != 0) {
		rc = TERN_ESYS;
		goto fail;
	}
	env->s_started = 1;
	if (pthread_create(&env->thr, NULL, w_main, env) != 0) {
		rc = TERN_ESYS;
		goto fail;
	}
	env->thr_started = 1;
	free(path);
	*out = env;
	return 0;
fail:
	{
		int e = errno;

		free(path);
		s_stop(env);
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
	while (env->open)
		journal_close(env->open);
	env_handoff(env);
	pthread_mutex_lock(&env->mu);
	env->stop = 1;
	wake_writer_unlock(env);
	if (env->thr_started)
		pthread_join(env->thr, NULL);
	s_stop(env);
	env_done(env);
	event_free(env->pass_ev);
	event_free(env->done_ev);
	jcat_close(env->cat);
	pthread_mutex_destroy(&env->mu);
	pthread_mutex_destroy(&env->wlock);
	pthread_cond_destroy(&env->cv);
	pthread_cond_destroy(&env->cv_done);
	pthread_cond_destroy(&env->s_cv);
	pthread_cond_destroy(&env->s_idle);
	free(env->compl);
	free(env->spare_compl);
	free(env->dir);
	free(env);
}

int jenv_catalog_list(struct jenv *env, void (*fn)(void *arg, const char *name),
		      void *arg)
{
	struct list_ctx lc = { env, fn, arg, 1 };

	return jcat_list(env->cat, list_cb, &lc);
}

static void journal_free(struct journal *j)
{
	struct jbatch *b;

	if (!j)
		return;
	batch_free(j->cur);
	while ((b = j->pool)) {
		j->pool = b->next;
		batch_free(b);
	}
	while (j->bp_n) {
		item_unref(j->bp[j->bp_head].it);
		j->bp_head = (j->bp_head + 1) % j->bp_cap;
		j->bp_n--;
	}
	free(j->bp);
	if (j->rb_open)
		jreader_close(&j->rb);
	if (j->ckpt_ev)
		event_free(j->ckpt_ev);
	jmap_free(&j->idx);
	jdead_free(&j->dead);
	free(j->segs);
	if (j->dirfd >= 0)
		close(j->dirfd);
	free(j->dir);
	free(j->name);
	free(j);
}

int journal_open(struct jenv *env, const char *name,
		 const struct journal_opts *opts, journal_item_fn on_item,
		 void *arg, struct journal_recovery *recp, struct journal **out)
{
	struct journal *j;
	struct journal_recovery rec = { 0 };
	struct recover_state rs = { .H = 0 };
	struct rec_item *items = NULL;
	size_t nitems = 0, keep;
	uint64_t P = 0, loaded_bytes = 0;
	int rc, state;
	struct timeval tv;

	if (!tern_name_valid(name, strlen(name)))
		return TERN_EBADNAME;
	j = calloc(1, sizeof(*j));
	if (!j)
		return TERN_ENOMEM;
	j->env = env;
	j->idx.seq = 1; /* item ids: consecutive (see jmap.h) */
	j->dirfd = j->w_fd = j->sp_fd = -1;
	j->rb.fd = -1;
	j->opts = *opts;
	opts_fix(&j->opts);
	j->w_opts = j->opts;
	seg_target_init(j);
	j->name = strdup(name);
	if (!j->name || asprintf(&j->dir, "%s/queues/%s", env->dir, name) < 0) {
		j->dir = NULL;
		rc = TERN_ENOMEM;
		goto fail;
	}
	rc = jcat_queue_get(env->cat, name, &state);
	if (rc == 0 && state == JCAT_DELETING)
		finish_delete(env, name);
	else if (rc < 0 && rc != TERN_ENOTFOUND)
		goto fail;
	/* catalog first: a directory without an entry is never trusted.  An
	 * existing queue only refreshes its settings here: on a full disk
	 * that may fail, and the queue must still open so it can be read. */
	{
		int existed = rc == 0 && state == JCAT_ACTIVE;

		rc = jcat_queue_put(env->cat, name, &j->opts, JCAT_ACTIVE);
		if (rc < 0 && !existed)
			goto fail;
		if (rc < 0)
			fprintf(stderr, "journal: queue %s: catalog entry not updated (%s);"
				" keeping the previous one\n", name, tern_strerror(rc));
	}
	if (mkdir(j->dir, 0755) < 0 && errno != EEXIST) {
		rc = TERN_ESYS;
		goto fail;
	}
	j->dirfd = open(j->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (j->dirfd < 0) {
		rc = TERN_ESYS;
		goto fail;
	}
	rc = list_segments(j);
	if (rc < 0)
		goto fail;
	if (j->nseg) {
		/* carry on growing from the newest segment's size */
		uint64_t last = j->segs[j->nseg - 1].size * 2;

		if (last > FIRST_SEG_SIZE)
			__atomic_store_n(&j->next_size, last, __ATOMIC_RELEASE);
	}
	rc = load_ckpt(j, &P, &rs);
	if (rc < 0)
		goto fail;
	if (!P) {
		/* no checkpoint: replay everything */
		P = rs.H = j->nseg ? JPOS(j->segs[0].num, JSEG_HDR_SIZE) : 0;
	} else if (JPOS_SEG(P) > j->last_seg + 1) {
		j->last_seg = JPOS_SEG(P) - 1;
	}
	/* segments before H's are dead (freed after a checkpoint that a
	 * crash interrupted) */
	for (keep = 0; keep < j->nseg && j->segs[keep].num < JPOS_SEG(rs.H); keep++) {
		char sname[32];

		seg_name(sname, sizeof(sname), j->segs[keep].num);
		unlinkat(j->dirfd, sname, 0);
	}
	if (keep)
		memmove(j->segs, j->segs + keep, (j->nseg - keep) * sizeof(*j->segs));
	j->nseg -= keep;

	rc = replay(j, P, &rs, &rec);
	if (rc < 0)
		goto fail;
	rc = load(j, &rs, P, &rec, &items, &nitems);
	if (rc < 0)
		goto fail;
	for (size_t i = 0; i < nitems; i++) {
		struct jent *e = jmap_put(&j->idx, items[i].it->id);

		if (!e) {
			rc = TERN_ENOMEM;
			goto fail;
		}
		e->pos = items[i].pos;
		e->len = items[i].it->len;
		loaded_bytes += items[i].it->len;
	}
	if (j->live_items < nitems || (j->live_items > nitems && !j->rb_pos)) {
		if (j->live_items != nitems)
			fprintf(stderr,
				"journal: queue %s: expected %" PRIu64 " live items, found %zu\n",
				j->name, j->live_items, nitems);
		j->live_items = nitems;
		j->live_bytes = loaded_bytes;
	}
	j->behind_items = j->live_items - nitems;
	j->behind_bytes = j->live_bytes > loaded_bytes ? j->live_bytes - loaded_bytes : 0;
	if (!j->behind_items)
		j->rb_pos = 0;
	j->written_pos = JPOS(j->last_seg + 1, 0);
	j->reserve = j->live_items * SMALL_REC;
	if (j->reserve > reserve_cap(j))
		j->reserve = reserve_cap(j);

	j->ckpt_ev = event_new(env->base, -1, EV_PERSIST, ckpt_cb, j);
	if (!j->ckpt_ev) {
		rc = TERN_ENOMEM;
		goto fail;
	}
	tv.tv_sec = j->opts.checkpoint_interval_ms / 1000;
	tv.tv_usec = (j->opts.checkpoint_interval_ms % 1000) * 1000;
	event_add(j->ckpt_ev, &tv);

	/* A queue that has never been written (a get creates queues, as in
	 * Kestrel) gets no disk until its first record: its first segment is
	 * reserved on the spot when it is needed, and from then on a spare is
	 * kept ready ahead of need. */
	spare_set(j, j->opts.prealloc == JOURNAL_PREALLOC_NONE || j->nseg == 0
			     ? SP_NONE : SP_PENDING);
	pthread_mutex_lock(&env->mu);
	j->wnext = env->journals;
	env->journals = j;
	wake_writer_unlock(env);
	j->lnext = env->open;
	if (env->open)
		env->open->lprev = j;
	env->open = j;

	/* open items first, then queue order */
	if (nitems)
		qsort(items, nitems, sizeof(*items), cmp_rec_item);
	for (size_t i = 0; i < nitems; i++)
		on_item(arg, items[i].it);
	free(items);
	jmap_free(&rs.open);

	rec.next_id = j->max_id + 1;
	rec.behind_items = j->behind_items;
	rec.behind_bytes = j->behind_bytes;
	if (rec.corrupt_records)
		fprintf(stderr,
			"journal: queue %s: recovered %zu items in memory, %" PRIu64
			" behind; %" PRIu64 " damaged regions (%" PRIu64 " bytes)\n",
			j->name, nitems, j->behind_items, rec.corrupt_records, rec.corrupt_bytes);
	if (recp)
		*recp = rec;
	/* a fresh checkpoint, so the next restart does not replay this again */
	j->ckpt_dirty = 1;
	checkpoint(j, 0);
	*out = j;
	return 0;
fail:
	for (size_t i = 0; i < nitems; i++)
		item_unref(items[i].it);
	free(items);
	jmap_free(&rs.open);
	journal_free(j);
	return rc;
}

int journal_set_opts(struct journal *j, const struct journal_opts *opts)
{
	struct journal_opts o = *opts;

	opts_fix(&o);
	j->opts = o;
	pthread_mutex_lock(&j->env->mu);
	j->w_opts = o;
	if (o.prealloc == JOURNAL_PREALLOC_NONE)
		spare_set(j, SP_NONE);
	else if (spare_get(j) == SP_NONE && j->nseg)
		spare_set(j, SP_PENDING);
	pthread_cond_signal(&j->env->cv);
	pthread_mutex_unlock(&j->env->mu);
	if (j->ckpt_ev) {
		struct timeval tv = { o.checkpoint_interval_ms / 1000,
				      (o.checkpoint_interval_ms % 1000) * 1000 };

		event_add(j->ckpt_ev, &tv);
	}
	jcat_queue_put(j->env->cat, j->name, &o, JCAT_ACTIVE);
	return 0;
}

void journal_close(struct journal *j)
{
	struct jenv *env;

	if (!j)
		return;
	env = j->env;
	checkpoint(j, 1);
	wait_closed(j);
	if (j->lprev)
		j->lprev->lnext = j->lnext;
	else
		env->open = j->lnext;
	if (j->lnext)
		j->lnext->lprev = j->lprev;
	journal_free(j);
}

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

int journal_delete(struct journal *j)
{
	struct jenv *env = j->env;
	char *name = strdup(j->name);
	int rc;

	if (!name)
		return TERN_ENOMEM;
	/* 1. mark: if we crash from here on, jenv_open finishes the delete */
	rc = jcat_queue_put(env->cat, j->name, &j->opts, JCAT_DELETING);
	if (rc < 0) {
		free(name);
		return rc;
	}
	/* 2. stop the writer's use of the files */
	checkpoint(j, 2);
	wait_closed(j);
	if (j->lprev)
		j->lprev->lnext = j->lnext;
	else
		env->open = j->lnext;
	if (j->lnext)
		j->lnext->lprev = j->lprev;
	journal_free(j);
	/* 3. remove files, then the catalog entry and checkpoint */
	finish_delete(env, name);
	free(name);
	return 0;
}

int journal_add(struct journal *j, struct item *it, int in_memory, uint64_t *ticket)
{
	struct jrec r = { .type = JREC_ADD };
	uint64_t keep = j->reserve + SMALL_REC, pos;
	int rc;

	*ticket = 0;
	if (failed_get(j))
		return TERN_EIO;
	if (keep > reserve_cap(j))
		keep = reserve_cap(j);
	rc = make_room(j, jrec_size(it->len), keep);
	if (rc < 0)
		return rc;
	if (!in_memory && bp_reserve(j) < 0)
		return TERN_ENOMEM;
	if (in_memory && !jmap_put(&j->idx, it->id))
		return TERN_ENOMEM;
	r.len = it->len;
	r.id = it->id;
	r.expiry_ms = it->expiry_ms;
	r.add_ms = it->add_ms;
	r.iflags = it->flags;
	r.ilen = it->len;
	rc = rec_append(j, &r, it, &pos);
	if (rc < 0) {
		if (in_memory)
			jmap_del(&j->idx, it->id);
		return rc;
	}
	j->reserve = keep;
	j->live_items++;
	j->live_bytes += it->len;
	if (it->id > j->max_id)
		j->max_id = it->id;
	if (in_memory) {
		struct jent *e = jmap_get(&j->idx, it->id);

		e->pos = pos;
		e->len = it->len;
		e->flags = 0;
	} else {
		j->bp[(j->bp_head + j->bp_n) % j->bp_cap] = (struct bpend){ item_ref(it), pos };
		j->bp_n++;
		if (!j->behind_items)
			j->rb_pos = pos;
		j->behind_items++;
		j->behind_bytes += it->len;
	}
	/* Every add gets a ticket.  always/odsync: resolved once the record
	 * is on stable storage.  none/interval: once it is written to the
	 * kernel (no sync), so a reply never precedes the write() and a
	 * process crash (SIGKILL) loses no acknowledged set in any mode. */
	*ticket = ++j->env->last_ticket;
	j->cur->ticket = *ticket;
	j->cur->ents[j->cur->nent - 1].ticket = *ticket; /* rec_append's */
	j->cur->sync = j->opts.sync;
	if (!journal_sync_waits(j->opts.sync))
		j->env->pass_acks++;
	return 0;
}

/* Appends a small record about the item at e (REMOVE, OPEN, ...).  Uses
 * the reserve for REMOVE/CONFIRM; OPEN/ABORT are written only when there is
 * room beyond it (they only order items after a crash). */
static int small_rec(struct journal *j, int type, uint64_t id, struct jent *e)
{
	struct jrec r = { .type = (uint8_t)type, .id = id };
	int uses_reserve = type == JREC_REMOVE || type == JREC_CONFIRM || type == JREC_FLUSH;
	uint64_t keep = j->reserve;
	int rc;

	if (uses_reserve)
		keep = j->reserve >= SMALL_REC ? j->reserve - SMALL_REC : 0;
	rc = make_room(j, SMALL_REC, keep);
	if (rc < 0) {
		j->dropped_records++;
		if (j->dropped_records == 1 || (j->dropped_records & 1023) == 0)
			fprintf(stderr, "journal: queue %s: no room for %s record (%" PRIu64
					" dropped so far)\n",
				j->name, jrec_type_name(type), j->dropped_records);
		/* the caller still updates the in-memory state: the next
		 * checkpoint records it (and frees what it made dead), which on
		 * a full disk is the only way space comes back */
		j->ckpt_dirty = 1;
		return type == JREC_FLUSH ? rc : 0;
	}
	if (e) {
		r.aux = e->pos;
		r.ilen = e->len;
	}
	rc = rec_append(j, &r, NULL, NULL);
	if (rc < 0)
		return rc;
	if (uses_reserve)
		j->reserve = keep;
	if (j->cur)
		j->cur->sync = j->opts.sync;
	return 0;
}

static int kill_item(struct journal *j, uint64_t id, int type)
{
	struct jent *e;
	struct jent copy;
	int rc;

	if (failed_get(j))
		return TERN_EIO;
	e = jmap_get(&j->idx, id);
	if (!e)
		return 0; /* not known as live: nothing to record */
	copy = *e;
	rc = small_rec(j, type, id, &copy);
	if (rc < 0)
		return rc;
	jdead_put(&j->dead, copy.pos); /* on ENOMEM the checkpoint is only less tight */
	jmap_del(&j->idx, id);
	if (j->live_items)
		j->live_items--;
	j->live_bytes -= copy.len <= j->live_bytes ? copy.len : j->live_bytes;
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

static int mark_item(struct journal *j, uint64_t id, int type)
{
	struct jent *e;
	struct jent copy;

	if (failed_get(j))
		return TERN_EIO;
	e = jmap_get(&j->idx, id);
	if (!e)
		return 0;
	if (type == JREC_OPEN)
		e->flags |= JENT_OPEN;
	else
		e->flags &= ~JENT_OPEN;
	copy = *e;
	return small_rec(j, type, id, &copy);
}

int journal_open_item(struct journal *j, uint64_t id)
{
	return mark_item(j, id, JREC_OPEN);
}

int journal_abort(struct journal *j, uint64_t id)
{
	return mark_item(j, id, JREC_ABORT);
}

int journal_flush(struct journal *j)
{
	int rc;

	if (failed_get(j))
		return TERN_EIO;
	rc = small_rec(j, JREC_FLUSH, 0, NULL);
	if (rc < 0)
		return rc;
	jmap_clear(&j->idx);
	jdead_clear(&j->dead);
	while (j->bp_n) {
		item_unref(j->bp[j->bp_head].it);
		j->bp[j->bp_head].it = NULL;
		j->bp_head = (j->bp_head + 1) % j->bp_cap;
		j->bp_n--;
	}
	j->live_items = j->live_bytes = 0;
	j->behind_items = j->behind_bytes = 0;
	j->rb_pos = 0;
	j->reserve = 0;
	return 0;
}

void journal_get_stats(struct journal *j, struct journal_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->segments = j->nseg + (spare_get(j) == SP_READY ? 1 : 0);
	for (size_t i = 0; i < j->nseg; i++)
		st->disk_bytes += j->segs[i].size;
	if (spare_get(j) == SP_READY)
		st->disk_bytes += seg_target(j);
	st->behind_items = j->behind_items;
	st->behind_bytes = j->behind_bytes;
	st->records_written = __atomic_load_n(&j->st_records, __ATOMIC_RELAXED);
	st->syncs = __atomic_load_n(&j->st_syncs, __ATOMIC_RELAXED);
	st->write_errors = __atomic_load_n(&j->st_errors, __ATOMIC_RELAXED);
}
