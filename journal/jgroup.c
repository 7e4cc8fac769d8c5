/*
 * jgroup.c: group commit.  w_group takes a list of batches (every batch
 * queued while the writer was busy: one group) through five steps:
 *
 *   1. write   every journal's records, one pwritev per run of records
 *              that continue each other (w_write_group);
 *   2. sync    each journal whose batches need it, in parallel
 *              (w_sync_group);
 *   3. report  the group's tickets to the loop: durable, or TERN_EIO for
 *              a failed journal's (w_resolve; a group with a failed
 *              batch is reported in step 5, with its batches);
 *   4. commit  checkpoints, through the syncer, and closes (w_commit);
 *   5. retire  closed journals, and the batches back to the loop.
 *
 * Runs under env->wlock: on the writer thread, or on the loop thread in
 * loop_write_inline (jbatch.c), which sends only batches that need no
 * checkpoint, close or new segment, and no sync but that of a set one
 * client alone waits for, so step 4 does nothing then.
 */
#include "jpriv.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "catalog.h"

/*
 * The gather of a group's records.  The loop hands over one batch per pass
 * (and per early end), so a group often holds several batches of one
 * queue; records that continue the previous ones in the same file go out
 * together: one pwritev per journal and group, not one per batch.
 */
struct wgather {
	struct journal *j; /* whose records iov holds; NULL when empty */
	uint64_t off, end; /* the file range iov covers */
	int n;
	struct iovec iov[IOV_MAX];
};

/* Writes what g holds.  The journal's write state (w.hi, atom.dirty)
 * moves only here, once the bytes are in the file. */
static int w_gather_flush(struct wgather *g)
{
	struct journal *j = g->j;
	int n = g->n;

	g->j = NULL;
	g->n = 0;
	if (!j)
		return 0;
	if (n) {
		int fd = jseg_wfd(j);

		if (fd < 0) {
			jfail(j, "open segment", errno);
			return -1;
		}
		if (jseg_writev_all(fd, g->iov, n, g->off, j->w.dsync ? RWF_DSYNC : 0) < 0) {
			int e = errno;

			/* The first write into a segment growing on a full disk
			 * (preallocate = none) gives the segment up, like a
			 * spare that cannot be had; one that held records fails
			 * the journal (failure policy, docs/JOURNAL.md). */
			if ((e == ENOSPC || e == EDQUOT) && j->w.hi == 0) {
				uint32_t seg = j->w.seg;

				jseg_wfd_close(j);
				j->w.seg = 0;
				w_abandon(j, seg, e);
				return -2;
			}
			jfail(j, "write", e);
			return -1;
		}
	}
	if (g->end > j->w.hi)
		j->w.hi = g->end;
	j->w.gen++;
	if (__atomic_exchange_n(&j->atom.dirty, j->w.gen, __ATOMIC_RELAXED) == 0) {
		/* clean until now: its interval sync (if its mode has one) is
		 * due an interval after the last one */
		pthread_mutex_lock(&j->env->mu_lock);
		if (jwork_dirty(j))
			writer_wake_unlock(j->env);
		else
			pthread_mutex_unlock(&j->env->mu_lock);
	}
	if (j->w.zero_at && j->w.hi >= j->w.zero_at) {
		/* the records near the zeros ahead: their next step is due */
		j->w.zero_at = 0;
		pthread_mutex_lock(&j->env->mu_lock);
		if (jwork_zero(j, 1))
			writer_wake_unlock(j->env);
		else
			pthread_mutex_unlock(&j->env->mu_lock);
	}
	if (j->w.spare_at && j->w.hi >= j->w.spare_at) {
		/* half of a small segment is used: the next spare is due (the
		 * writer may be asleep if the loop wrote this inline) */
		j->w.spare_at = 0;
		pthread_mutex_lock(&j->env->mu_lock);
		if (spare_get(j) == SP_NONE) {
			jwork_spare(j, SP_PENDING);
			writer_wake_unlock(j->env);
		} else {
			pthread_mutex_unlock(&j->env->mu_lock);
		}
	}
	return 0;
}

/* Adds b's records to g (writing what g held first when they do not
 * continue it).  A new segment is activated only after g is written: its
 * records belong to the segment before. */
static int w_write_batch(struct journal *j, struct jbatch *b, struct wgather *g)
{
	for (size_t ri = 0; ri < b->nrun; ri++) {
		struct brun *r = &b->runs[ri];
		uint64_t pos = r->off;

		if (r->n == 0)
			continue;
		if (r->is_new) {
			struct journal_opts o;
			int rc, flushed = w_gather_flush(g) == 0;

			if (!flushed && failed_get(j))
				return -1;
			w_opts_get(j, &o);
			rc = w_activate(j, r->seg, r->seg_size, b->sync, &o);
			if (rc == -1)
				return -1;
			if (rc == -2) {
				/* its records are not written; those of the
				 * runs before it are, when the write just
				 * before succeeded (and the activation synced
				 * them where the mode waits for syncs) */
				if (!b->err) {
					b->err = TERN_ENOSPC;
					b->err_run = flushed ? ri : 0;
				}
				continue;
			}
		} else if (j->w.lost && r->seg == j->w.lost) {
			b->err = TERN_ENOSPC; /* (appended before the loop knew) */
			continue;
		} else if (j->w.seg != r->seg) {
			errno = EINVAL;
			jfail(j, "write (no segment)", errno);
			return -1;
		}
		for (size_t i = r->first; i < r->first + r->n; i++) {
			struct bent *e = &b->ents[i];
			unsigned char *h = b->buf + e->hoff;
			const void *body = e->it ? (const void *)e->it->data : (const void *)jzeros;
			size_t add = e->rawlen ? e->rawlen : JREC_HDR_SIZE;

			if (g->j != j || g->end != pos || g->n + 3 > IOV_MAX) {
				/* (another journal's failure is that journal's) */
				if (w_gather_flush(g) < 0 && failed_get(j))
					return -1;
				if (j->w.lost == r->seg) {
					b->err = TERN_ENOSPC; /* given up by that flush */
					break;
				}
				g->j = j;
				g->off = g->end = pos;
			}
			if (!e->rawlen)
				jrec_seal(h, body, e->blen);
			/* coalesce with the previous iovec when contiguous */
			if (g->n && (unsigned char *)g->iov[g->n - 1].iov_base +
						    g->iov[g->n - 1].iov_len == h)
				g->iov[g->n - 1].iov_len += add;
			else
				g->iov[g->n++] = (struct iovec){ h, add };
			if (e->blen)
				g->iov[g->n++] = (struct iovec){ (void *)body, e->blen };
			if (e->pad)
				g->iov[g->n++] = (struct iovec){ (void *)jzeros, e->pad };
			stat_add(&j->atom.st_records, e->rawlen ? 0 : 1);
			pos += add + e->blen + e->pad;
			g->end = pos;
		}
	}
	return 0;
}

/* Step 1.  A failure fails the journal: its tickets get TERN_EIO in step 3. */
static void w_write_group(struct jbatch *list)
{
	struct wgather g; /* (no initializer: it would zero 16 KiB of iov) */

	g.j = NULL;
	g.n = 0;
	for (struct jbatch *b = list; b; b = b->next)
		if (failed_get(b->j) || w_write_batch(b->j, b, &g) < 0)
			b->err = TERN_EIO;
	w_gather_flush(&g);
}

/* fdatasync of one journal's file, on a helper thread. */
struct psync {
	struct jenv *env;
	pthread_t thr;
	int fd, err, started;
};

static void *psync_main(void *arg)
{
	struct psync *p = arg;

	p->err = jstat_fdatasync(p->env, p->fd) < 0 ? errno : 0;
	return NULL;
}

#define PSYNC_MAX 8
/* (the descriptor cache keeps the most recent ones open when short of
 * descriptors: jseg_wfd) */
_Static_assert(PSYNC_MAX <= JSEG_WFD_KEEP, "a group's syncs hold descriptors the cache keeps");

/*
 * Syncs the current segment of every journal in js (each dirty, with a
 * segment), in parallel, up to PSYNC_MAX at once: one after another, n
 * queues in always would cost n device flushes per group; issued together
 * the device (and ext4's journal) can serve them with fewer.  A helper
 * thread per file and group costs tens of microseconds against a flush's
 * hundreds.
 */
static void w_sync_all(struct journal **js, size_t n)
{
	size_t i = 0;

	while (i < n) {
		struct psync ps[PSYNC_MAX];
		size_t m = n - i < PSYNC_MAX ? n - i : PSYNC_MAX, k;

		/* every descriptor first: opening one may close another's
		 * (the cache holds more than PSYNC_MAX, and closes the least
		 * recently used, so never one of these) */
		for (k = 0; k < m; k++) {
			ps[k].env = js[i + k]->env;
			ps[k].fd = jseg_wfd(js[i + k]);
			ps[k].err = ps[k].fd < 0 ? errno : 0;
			ps[k].started = 0;
		}
		for (k = 1; k < m; k++)
			if (ps[k].fd >= 0)
				ps[k].started = pthread_create(&ps[k].thr, NULL, psync_main,
							       &ps[k]) == 0;
		if (ps[0].fd >= 0)
			psync_main(&ps[0]);
		for (k = 1; k < m; k++) {
			if (ps[k].started)
				pthread_join(ps[k].thr, NULL);
			else if (ps[k].fd >= 0)
				psync_main(&ps[k]); /* no thread: sync it here */
		}
		for (k = 0; k < m; k++) {
			struct journal *j = js[i + k];

			if (ps[k].err) {
				jfail(j, "fdatasync", ps[k].err);
				continue;
			}
			stat_add(&j->atom.st_syncs, 1);
			__atomic_store_n(&j->atom.dirty, 0, __ATOMIC_RELAXED);
			__atomic_store_n(&j->atom.last_sync, mono_ms(), __ATOMIC_RELAXED);
		}
		i += m;
	}
}

/*
 * Whether the sync that must precede b's checkpoint commit is left to the
 * syncer (the mode's syncs_later): where a set is acknowledged once its
 * record is in the kernel, the checkpoint's fdatasync (up to a checkpoint
 * interval of records) need not hold the group's other sets back, as it
 * would once per checkpoint_interval_ms if done here.  A closing journal's
 * last checkpoint is synced and committed in the group.
 */
static int ckpt_sync_later(const struct jbatch *b)
{
	return b->close == JCLOSE_NONE && jpolicy(b->sync)->syncs_later;
}

/*
 * Whether such a checkpoint (ckpt_sync_later) must wait for the sync of
 * the records it covers at all.  Only if it carries compaction's copies:
 * it marks their originals dead, and were the copies lost (a power cut)
 * with the originals' segment freed, the items would be gone.  Any other
 * record it covers may be lost by a power cut in these modes without
 * making it wrong: an add it counts that is not on disk is not found (the
 * files win, recovery settles the counts), a remove it applied that is not
 * on disk stays applied.  Not waiting matters under a fast stream: the
 * segments a checkpoint frees would otherwise stay on disk until the
 * device has written back everything before it.
 */
static int ckpt_needs_sync(const struct jbatch *b)
{
	return b->relocated;
}

/* Whether step 2 must fdatasync b's journal: its tickets wait for stable
 * storage (group_sync; records written with RWF_DSYNC are stable already), or a
 * checkpoint synced in the group or a close follows.  Batches without
 * tickets (removes, opens: gets never wait) are made durable by the next
 * synced batch or checkpoint. */
static int w_needs_sync(const struct jbatch *b)
{
	struct journal *j = b->j;

	if (b->err || failed_get(j) || !dirty_get(j) || !j->w.seg)
		return 0;
	return (b->ticket && jpolicy(b->sync)->group_sync && !j->w.dsync) ||
	       (b->ckpt && !ckpt_sync_later(b)) || b->close == JCLOSE_KEEP;
}

/* Step 2: one fdatasync per journal covers every batch of the group; the
 * journals are synced in parallel (w_sync_all). */
static void w_sync_group(struct jbatch *list)
{
	struct journal *one[16], **js = one;
	size_t n = 0, cap = 16;

	for (struct jbatch *b = list; b; b = b->next) {
		struct journal *j = b->j;
		size_t k;

		if (!w_needs_sync(b))
			continue;
		for (k = 0; k < n && js[k] != j; k++)
			;
		if (k < n)
			continue;
		if (n == cap) {
			struct journal **nj = malloc(cap * 2 * sizeof(*nj));

			if (!nj) {
				w_sync_all(js, n);
				n = 0;
			} else {
				memcpy(nj, js, n * sizeof(*nj));
				if (js != one)
					free(js);
				js = nj;
				cap *= 2;
			}
		}
		js[n++] = j;
	}
	w_sync_all(js, n);
	if (js != one)
		free(js);
}

/*
 * The writer's wait for the next group (w_linger, jwriter.c), planned here
 * as a synced group is answered (under mu_lock).  Clients that each keep
 * one add in flight form cohorts: while one group syncs, the clients the sync before it
 * answered send their next adds and queue up as the next group, so each
 * group holds about half of the clients, two syncs per round of them.
 * After a synced group is answered, the writer therefore waits, before it
 * takes the next group, until as many clients as that group answered have
 * begun to wait again (jenv_note_waiter, counted by the loop as it hands
 * batches over), but no longer than the group's write and sync took, and
 * at most jenv_set_group_wait's limit: the cohorts merge into one group
 * and one sync, and a client that does not come back costs the next group
 * at most one sync's time more.  Clients that do not come back soon (sets
 * at a fixed rate, a client that leaves) would make every wait run to its
 * end, so after a wait that did, the next LINGER_SKIP synced groups are
 * taken at once.  One client pipelining its adds is one waiter: its next
 * batch ends the wait at once, whatever its size.
 */
static void w_linger_plan(struct jenv *env, uint64_t hi, int64_t t0)
{
	int64_t now = tern_mono_us(), took = now - t0;
	int64_t max = __atomic_load_n(&env->atom.group_wait_us, __ATOMIC_RELAXED);
	uint64_t n = hi > env->lg.hi ? hi - env->lg.hi : 0;

	env->lg.hi = hi;
	env->lg.target = 0;
	if (env->lg.skip) {
		env->lg.skip--;
		return;
	}
	if (n && max) {
		env->lg.target = env->mu.q_waiters + n;
		env->lg.until_us = now + (took < max ? took : max);
	}
}

/* Step 3: tickets first: the records are written (and synced where
 * needed), so their clients can be answered before any checkpoint
 * commits.  Body references are dropped here, by the thread that wrote
 * them.  A synced group (waiters nonzero, w_group; begun at t0) plans the
 * writer's wait for the clients it answers before they can send more.
 * A group with a failed batch is reported in step 5 instead, together
 * with its batches: the loop takes a failed set's item out of its queue
 * (jb_undo) in the same pass that answers the set, so no reader can be
 * handed an item whose set was answered SERVER_ERROR.  Returns the
 * highest ticket when the report is left to step 5, else 0. */
static uint64_t w_resolve(struct jenv *env, struct jbatch *list, uint64_t waiters, int64_t t0)
{
	uint64_t upto = 0;
	int failed = 0;

	for (struct jbatch *b = list; b; b = b->next) {
		if (failed_get(b->j) && b->ticket) {
			if (!b->err)
				b->err = TERN_EIO; /* its sync failed */
			b->err_run = 0; /* (nothing of it counts as written) */
		}
		if (!b->err && b->j->w.lost)
			for (size_t i = 0; i < b->nrun; i++)
				if (b->runs[i].n && b->runs[i].seg == b->j->w.lost)
					b->err = TERN_ENOSPC; /* given up after it was gathered */
		if (b->ticket > upto)
			upto = b->ticket;
		if (b->err && b->ticket)
			failed = 1;
		for (size_t i = 0; i < b->nent; i++) {
			item_unref(b->ents[i].it);
			b->ents[i].it = NULL;
		}
	}
	pthread_mutex_lock(&env->mu_lock);
	if (waiters)
		w_linger_plan(env, waiters, t0);
	if (!failed)
		handoff_report(env, list, upto);
	pthread_mutex_unlock(&env->mu_lock);
	if (failed)
		return upto;
	handoff_wake(env);
	return 0;
}

/* Posts b's checkpoint to the syncer as an SJOB_CHECKPOINT (with a sync
 * of the current segment first where ckpt_sync_later): the blob and the
 * segments it frees move to the job.  Returns -1 when no job could be
 * made (b is untouched). */
static int ckpt_post(struct journal *j, struct jbatch *b)
{
	struct sjob *s = calloc(1, sizeof(*s));

	if (!s)
		return -1;
	s->kind = SJOB_CHECKPOINT;
	s->j = j;
	if (ckpt_sync_later(b) && ckpt_needs_sync(b) && dirty_get(j) && j->w.seg &&
	    !j->w.dsync) {
		s->dirty = dirty_get(j);
		s->file = SFILE_SEG;
		s->seg = j->w.seg;
		s_take_range(j, s);
	}
	s->ckpt = b->ckpt;
	s->ckpt_len = b->ckpt_len;
	s->free_segs = b->free_segs;
	s->nfree = b->nfree;
	b->ckpt = NULL;
	b->ckpt_len = 0;
	b->free_segs = NULL;
	b->nfree = b->freecap = 0;
	s_post(j->env, s);
	return 0;
}

/* w_commit's step: the checkpoints committed here, after every syncer
 * job (those of closing journals, and any no job could be allocated for):
 * each is synced first where step 2 did not, then all are committed in one
 * transaction (a server closing ten thousand queues makes one commit, not
 * ten thousand), then the segments they made dead are freed. */
static void w_ckpt_here(struct jenv *env, struct jbatch *list, size_t n)
{
	const char **names = malloc(n * sizeof(*names));
	const void **blobs = malloc(n * sizeof(*blobs));
	size_t *lens = malloc(n * sizeof(*lens)), k = 0;
	struct jbatch *b;
	int one = !names || !blobs || !lens, committed = 0;

	for (b = list; b; b = b->next) {
		struct journal *j = b->j;

		if (!b->ckpt_here)
			continue;
		if (ckpt_sync_later(b) && ckpt_needs_sync(b) && dirty_get(j) && j->w.seg &&
		    !j->w.dsync) {
			int fd = jseg_wfd(j);

			if (fd < 0)
				jfail(j, "open segment", errno);
			if (fd < 0 || jseg_sync(j, fd) < 0)
				b->ckpt_here = 0;
		}
		if (!b->ckpt_here)
			continue;
		if (one) {
			/* (without memory for the lists: one commit each) */
			if (jcat_ckpt_put(env->cat, j->name, b->ckpt, b->ckpt_len) < 0)
				b->ckpt_here = 0;
			continue;
		}
		names[k] = j->name;
		blobs[k] = b->ckpt;
		lens[k++] = b->ckpt_len;
	}
	if (!one && k)
		committed = jcat_ckpt_put_many(env->cat, k, names, blobs, lens) == 0;
	for (b = list; b; b = b->next) {
		struct journal_opts o;

		if (!b->ckpt_here || (!one && !committed))
			continue;
		w_opts_get(b->j, &o);
		w_free_segs(b->j, b->free_segs, b->nfree, &o);
	}
	free(names);
	free(blobs);
	free(lens);
}

/*
 * Step 4.  A checkpoint is committed only after the records it covers are
 * on disk, and segments are freed only after it.  The syncer does both
 * (SJOB_CHECKPOINT), so the writer is free for the next group meanwhile.
 * Closing journals first wait for the syncer's jobs (their earlier
 * checkpoints, whose segment frees come back here), then their last
 * checkpoints are committed here, together, and their files closed.
 */
static void w_commit(struct jenv *env, struct jbatch *list)
{
	struct jbatch *b;
	size_t here = 0;
	int closes = 0;

	for (b = list; b; b = b->next) {
		b->ckpt_here = 0;
		closes |= b->close != JCLOSE_NONE;
		/* (a failed batch's checkpoint describes records that may not
		 * be on disk: never committed; the loop takes its segments
		 * back, jb_undo) */
		if (!b->ckpt || b->err || failed_get(b->j))
			continue;
		if (b->close || ckpt_post(b->j, b) < 0) {
			b->ckpt_here = 1;
			here++;
		}
	}
	if (!closes && !here)
		return;
	s_barrier(env);
	w_take_frees(env);
	if (here)
		w_ckpt_here(env, list, here);
	if (!closes)
		return;
	s_barrier(env); /* the unlinks w_free_segs posted */
	for (b = list; b; b = b->next)
		if (b->close)
			w_close_files(b->j, b->close == JCLOSE_KEEP);
}

/* Step 5: the writer forgets closed journals (wait_closed sees them
 * closed), and the batches go back to the loop (env_done), with the
 * tickets up to upto when step 3 left their report here. */
static void w_retire(struct jenv *env, struct jbatch *list, uint64_t upto)
{
	struct jbatch *b;

	pthread_mutex_lock(&env->mu_lock);
	if (upto)
		handoff_report(env, list, upto);
	for (b = list; b; b = b->next) {
		if (!b->close)
			continue;
		jwork_forget(b->j);
		b->j->mu.closed = 1;
	}
	handoff_return(env, list);
	pthread_mutex_unlock(&env->mu_lock);
	handoff_wake(env);
}

/* Counts the group's batches and records (jstat_group). */
static void w_count_group(struct jenv *env, const struct jbatch *list)
{
	uint64_t nb = 0, nr = 0;

	for (const struct jbatch *b = list; b; b = b->next, nb++)
		for (size_t i = 0; i < b->nent; i++)
			nr += b->ents[i].rawlen == 0;
	jstat_group(env, nb, nr);
}

/* Whether some batch of list holds adds that wait for a sync. */
static int w_has_synced_adds(const struct jbatch *list)
{
	for (const struct jbatch *b = list; b; b = b->next)
		if (b->ticket && jpolicy(b->sync)->group_sync)
			return 1;
	return 0;
}

void w_group(struct jenv *env, struct jbatch *list, uint64_t waiters)
{
	uint64_t upto;
	int64_t t0;

	if (waiters && !w_has_synced_adds(list))
		waiters = 0; /* no sync answers anyone: no wait to plan */
	t0 = waiters ? tern_mono_us() : 0;

	w_count_group(env, list);
	w_write_group(list);
	w_sync_group(list);
	upto = w_resolve(env, list, waiters, t0);
	w_commit(env, list);
	w_retire(env, list, upto);
}
