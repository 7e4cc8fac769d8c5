/*
 * jsyncer.c: the syncer and the reclaimer (s_main, struct sthread), two
 * threads with named job kinds (enum sjob_kind), in the manner of redis's
 * bio.c.  They run the work no reply waits for, so the writer is free for
 * the next group meanwhile.
 *
 * The syncer: background fdatasyncs, and the checkpoints that must wait
 * for a sync (compaction's; jgroup.c, ckpt_needs_sync).  Its jobs run in
 * the order they were posted: such a checkpoint commits only after every
 * sync posted before it (a segment left behind at a roll, the directory
 * after a rename) succeeded, and a failed sync fails the journal and so
 * skips the commit.  The reclaimer: the checkpoints that wait for no sync,
 * and unlinks, so that freeing a dead segment never waits behind a long
 * sync; a journal's checkpoint goes to it only while none of that
 * journal's waits on the syncer (mu.ckpt_syncing), so each journal's
 * checkpoints commit in order.  Each thread takes every queued job at once
 * (up to S_BATCH): one sync per file, one LMDB commit for all checkpoints.
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
	struct sthread *t = &env->syncer;

	s->next = NULL;
	pthread_mutex_lock(&env->mu_lock);
	s->drop = s->j->mu.opts.cache == JOURNAL_CACHE_DROP;
	if (s->kind == SJOB_UNLINK ||
	    (s->kind == SJOB_CHECKPOINT && s->file == SFILE_NONE && !s->j->mu.ckpt_syncing))
		t = &env->reclaimer;
	else if (s->kind == SJOB_CHECKPOINT)
		s->counted = ++s->j->mu.ckpt_syncing > 0;
	*t->tail = s;
	t->tail = &s->next;
	t->posted++;
	sthread_wake_unlock(env, t);
}

void s_barrier(struct jenv *env)
{
	uint64_t s_upto, r_upto;

	pthread_mutex_lock(&env->mu_lock);
	s_upto = env->syncer.posted;
	r_upto = env->reclaimer.posted;
	while (env->syncer.done < s_upto || env->reclaimer.done < r_upto)
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
 * to sync. */
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
		return jseg_open(s->j->env, s->j->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
	default:
		return -2;
	}
	fd = jseg_open(s->j->env, path, O_RDONLY | O_CLOEXEC, 0);
	/* gone: a spare renamed into place since (the segment's own syncs
	 * cover it), or a segment a committed checkpoint freed (it holds
	 * nothing anyone needs: the checkpoints of a batch that wait for no
	 * sync commit first, s_run_batch) */
	if (fd < 0 && errno == ENOENT)
		return -2;
	return fd;
}

/* page_cache = drop, on the syncer, after a segment's sync: its synced
 * pages leave the page cache, the whole file once the writer has left it
 * (SJOB_SYNC_SEG: that includes zeros preallocated past its last record),
 * else all but the newest DROP_LAG. */
static void s_drop_synced(struct sjob *s, int fd)
{
	struct journal *j = s->j;

	if (s->file != SFILE_SEG || !s->drop)
		return;
	if (j->syncer.drop_seg != s->seg) {
		j->syncer.drop_seg = s->seg;
		j->syncer.drop_off = 0;
	}
	if (s->kind == SJOB_SYNC_SEG)
		jseg_drop_cached(fd, &j->syncer.drop_off, JDROP_ALL, 0);
	else
		jseg_drop_cached(fd, &j->syncer.drop_off, s->hi, DROP_LAG);
}

/* The sync of job s's file (on the syncer, or in place when no job could
 * be allocated): opens it, starts the writeback of [lo, s->hi)
 * in steps, fdatasyncs and closes it.  A descriptor opened now covers what
 * was written through another one (the page cache is the file's), and
 * reports a writeback error nobody has seen.  Returns 0 when the sync
 * failed (the journal is failed then). */
static int s_sync_file(struct sjob *s, uint64_t lo)
{
	struct journal *j = s->j;
	int ok = 1, fd = s_open(s);

	if (fd == -1) {
		jfail(j, s->file == SFILE_DIR ? "open directory to sync" : "open file to sync",
		      errno);
		return 0;
	}
	if (fd < 0)
		return 1; /* nothing to sync */
	if (sjob_kinds[s->kind].segment)
		s_writeback_steps(fd, lo, s->hi);
	if (jstat_fdatasync(j->env, fd) < 0) {
		jfail(j, sjob_kinds[s->kind].what, errno);
		ok = 0;
	} else if (sjob_kinds[s->kind].segment) {
		s_drop_synced(s, fd);
	}
	close(fd);
	return ok;
}

/* Job s's bookkeeping once its file is synced (ok) or not. */
static void s_sync_done(struct jenv *env, struct sjob *s, int ok)
{
	struct journal *j = s->j;

	if (ok && s->spare_gen)
		__atomic_store_n(&j->atom.spare_hdr_synced, s->spare_gen, __ATOMIC_RELEASE);
	if (ok && s->file != SFILE_NONE && sjob_kinds[s->kind].segment) {
		uint64_t exp = s->dirty;

		stat_add(&j->atom.st_syncs, 1);
		/* clean only if nothing was written since the job was posted */
		if (exp)
			__atomic_compare_exchange_n(&j->atom.dirty, &exp, 0, 0,
						    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
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
}

static int s_sync(struct jenv *env, struct sjob *s)
{
	int ok = s_sync_file(s, s->lo);

	s_sync_done(env, s, ok);
	return ok;
}

void s_take_range(struct journal *j, struct sjob *s)
{
	s->lo = j->w.sync_lo;
	s->hi = j->w.hi;
	j->w.sync_lo = j->w.hi;
}

static int s_post_gen(struct journal *j, enum sfile file, uint32_t seg, enum sjob_kind kind,
		      uint64_t dirty, uint64_t spare_gen)
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
	s->spare_gen = spare_gen;
	if (sjob_kinds[kind].segment)
		s_take_range(j, s);
	if (inplace)
		return s_sync(j->env, s) ? 0 : -1;
	s_post(j->env, s);
	return 0;
}

int s_post_sync(struct journal *j, enum sfile file, uint32_t seg, enum sjob_kind kind,
		uint64_t dirty)
{
	return s_post_gen(j, file, seg, kind, dirty, 0);
}

int s_post_spare_header(struct journal *j, uint64_t gen)
{
	return s_post_gen(j, SFILE_SPARE, 0, SJOB_SYNC_SPARE, 0, gen);
}

/* SJOB_CHECKPOINT after its commit (committed: whether it was): unlinks
 * the segments it freed but the newest, and hands that one to the writer,
 * which owns the spare and may reuse it.  Returns 1 when s went to the
 * writer. */
static int s_hand_frees(struct jenv *env, struct sjob *s, int committed)
{
	free(s->ckpt);
	s->ckpt = NULL;
	if (!committed || !s->nfree)
		return 0;
	/* Only the newest may become the spare (the writer's to decide): the
	 * others are unlinked here and now, without a round trip through the
	 * writer and back to this thread, which under a fast stream left
	 * dead segments on disk for longer. */
	for (size_t i = 0; i + 1 < s->nfree; i++) {
		jseg_unlink_gently(s->j, s->free_segs[i].num);
		jseg_reclaimed(s->j, &s->free_segs[i]);
	}
	s->free_segs[0] = s->free_segs[s->nfree - 1];
	s->nfree = 1;
	pthread_mutex_lock(&env->mu_lock);
	s->next = env->mu.f_head;
	env->mu.f_head = s;
	writer_wake_unlock(env);
	return 1;
}

static void s_unlink(struct sjob *s)
{
	for (size_t i = 0; i < s->nfree; i++) {
		jseg_unlink_gently(s->j, s->free_segs[i].num);
		jseg_reclaimed(s->j, &s->free_segs[i]);
	}
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
/* Whether jobs a and b sync the same file. */
static int same_file(const struct sjob *a, const struct sjob *b)
{
	return a && b && a->j == b->j && a->file == b->file && a->file != SFILE_NONE &&
	       (a->file != SFILE_SEG || a->seg == b->seg);
}

/*
 * The syncs of a batch: each file once, by the last job of the batch that
 * syncs it (one sync covers every write made before it, so the jobs before
 * it need none of their own), and every job's bookkeeping after its file's
 * sync.  A fast stream through small segments posts, per segment, the sync
 * of the segment it leaves, of the directory after the rename, and of the
 * current segment before each checkpoint: one by one, the syncer fell far
 * behind, and dead segments waited on disk for their checkpoints.
 */
static void s_sync_batch(struct jenv *env, struct sjob **jobs, size_t n, int *ok)
{
	size_t last[S_BATCH];

	for (size_t i = 0; i < n; i++) {
		last[i] = i;
		for (size_t k = n; k-- > i + 1;) {
			if (same_file(jobs[i], jobs[k])) {
				last[i] = k;
				break;
			}
		}
	}
	for (size_t k = 0; k < n; k++) {
		uint64_t lo;
		int r;

		if (!jobs[k] || last[k] != k)
			continue; /* (NULL: committed and gone to the writer) */
		lo = jobs[k]->lo;
		for (size_t i = 0; i < k; i++)
			if (last[i] == k && jobs[i]->lo < lo)
				lo = jobs[i]->lo;
		r = s_sync_file(jobs[k], lo);
		for (size_t i = 0; i <= k; i++) {
			if (last[i] != k)
				continue;
			ok[i] = r;
			s_sync_done(env, jobs[i], r);
		}
	}
}

/* Commits the checkpoints of jobs[i] with pick[i] set (ok[i]: their syncs
 * succeeded) in one transaction, then frees their segments; every job it
 * took is marked done (pick[i] = 2). */
static void s_commit_some(struct jenv *env, struct sjob **jobs, size_t n, int *pick,
			  const int *ok)
{
	const char *names[S_BATCH];
	const void *blobs[S_BATCH];
	size_t lens[S_BATCH], nc = 0;
	int committed = 0;

	for (size_t i = 0; i < n; i++) {
		if (pick[i] != 1 || !ok[i] || failed_get(jobs[i]->j))
			continue;
		names[nc] = jobs[i]->j->name;
		blobs[nc] = jobs[i]->ckpt;
		lens[nc++] = jobs[i]->ckpt_len;
	}
	if (nc)
		committed = jcat_ckpt_put_many(env->cat, nc, names, blobs, lens) == 0;
	for (size_t i = 0; i < n; i++) {
		if (pick[i] != 1)
			continue;
		pick[i] = 2;
		if (jobs[i]->counted) {
			/* done: the reclaimer may take its journal's next ones */
			pthread_mutex_lock(&env->mu_lock);
			jobs[i]->j->mu.ckpt_syncing--;
			pthread_mutex_unlock(&env->mu_lock);
			jobs[i]->counted = 0;
		}
		if (s_hand_frees(env, jobs[i],
				 committed && ok[i] && !failed_get(jobs[i]->j)))
			jobs[i] = NULL; /* (the writer has it now) */
	}
}

/*
 * A batch's checkpoints that wait for no sync (ckpt_needs_sync, jgroup.c)
 * are committed first, and their segments freed: the batch's syncs (of
 * everything written since the last ones) can take long under a fast
 * stream, and the dead segments would wait for them.  The others are
 * committed after every sync of the batch.  Per journal the order of its
 * checkpoints is kept: once one of them waits, every later one waits too.
 */
static void s_run_batch(struct jenv *env, struct sjob **jobs, size_t n)
{
	int ok[S_BATCH], pick[S_BATCH];
	struct journal *waits[S_BATCH];
	size_t nw = 0;

	for (size_t i = 0; i < n; i++) {
		struct sjob *s = jobs[i];
		size_t k;

		pick[i] = 0;
		ok[i] = 1;
		if (s->kind != SJOB_CHECKPOINT)
			continue;
		for (k = 0; k < nw && waits[k] != s->j; k++)
			;
		if (k == nw && s->file == SFILE_NONE)
			pick[i] = 1;
		else if (k == nw)
			waits[nw++] = s->j;
	}
	s_commit_some(env, jobs, n, pick, ok);
	s_sync_batch(env, jobs, n, ok);
	for (size_t i = 0; i < n; i++)
		if (jobs[i] && jobs[i]->kind == SJOB_CHECKPOINT && !pick[i])
			pick[i] = 1;
	s_commit_some(env, jobs, n, pick, ok);
	for (size_t i = 0; i < n; i++) {
		struct sjob *s = jobs[i];

		if (!s)
			continue;
		if (s->kind == SJOB_UNLINK)
			s_unlink(s);
		free(s->ckpt);
		free(s->free_segs);
		free(s);
	}
}

struct sthread_arg {
	struct jenv *env;
	struct sthread *t;
};

static void *s_main(void *arg)
{
	struct sthread_arg a = *(struct sthread_arg *)arg;
	struct jenv *env = a.env;
	struct sthread *t = a.t;
	struct sjob *jobs[S_BATCH];

	free(arg);
	pthread_mutex_lock(&env->mu_lock);
	for (;;) {
		size_t n = 0;

		if (!t->head) {
			if (t->stop)
				break;
			__atomic_store_n(&t->busy, 0, __ATOMIC_RELAXED);
			pthread_cond_wait(&t->cv, &env->mu_lock);
			__atomic_store_n(&t->busy, 1, __ATOMIC_RELAXED);
			continue;
		}
		while (n < S_BATCH && t->head) {
			jobs[n++] = t->head;
			t->head = t->head->next;
		}
		if (!t->head)
			t->tail = &t->head;
		pthread_mutex_unlock(&env->mu_lock);
		s_run_batch(env, jobs, n);
		pthread_mutex_lock(&env->mu_lock);
		t->done += n;
		pthread_cond_broadcast(&env->s_idle);
	}
	pthread_mutex_unlock(&env->mu_lock);
	return NULL;
}

static int sthread_start(struct jenv *env, struct sthread *t)
{
	struct sthread_arg *a = malloc(sizeof(*a));

	if (!a)
		return -1;
	a->env = env;
	a->t = t;
	if (pthread_create(&t->thr, NULL, s_main, a) != 0) {
		free(a);
		return -1;
	}
	t->started = 1;
	return 0;
}

static void sthread_stop(struct jenv *env, struct sthread *t)
{
	if (!t->started)
		return;
	pthread_mutex_lock(&env->mu_lock);
	t->stop = 1;
	sthread_wake_unlock(env, t);
	pthread_join(t->thr, NULL);
	t->started = 0;
}

int syncer_start(struct jenv *env)
{
	return sthread_start(env, &env->syncer) < 0 || sthread_start(env, &env->reclaimer) < 0
		       ? -1 : 0;
}

/* Also drops what came back for a writer that is gone (every journal was
 * closed, so nothing is left to free but memory). */
void syncer_stop(struct jenv *env)
{
	struct sjob *s, *next;

	sthread_stop(env, &env->syncer);
	sthread_stop(env, &env->reclaimer);
	for (s = env->mu.f_head; s; s = next) {
		next = s->next;
		free(s->free_segs);
		free(s);
	}
	env->mu.f_head = NULL;
}
