/* jgroup.c: the writer's group commit (moved from journal.c). */
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

/*
 * The writer's gather of a group's records.  The loop hands over one batch
 * per pass (and per early end), so a group in always held ~3 batches of
 * one queue, each written with its own pwritev (2.6 per fdatasync at 64
 * connections, measured).  Records that continue the previous ones in
 * the same file go out together: one pwritev per journal and group.
 */
struct wgather {
	struct journal *j; /* whose records iov holds; NULL when empty */
	uint64_t off, end; /* the file range iov covers */
	int n;
	struct iovec iov[IOV_MAX];
};

/* Writes what g holds.  The journal's write state (w_hi, w_dirty) moves
 * only here, once the bytes are in the file. */
static int w_gather_flush(struct wgather *g)
{
	struct journal *j = g->j;
	int n = g->n;

	g->j = NULL;
	g->n = 0;
	if (!j)
		return 0;
	if (n && wrv_all(j->w_fd, g->iov, n, g->off) < 0) {
		w_fail(j, "write", errno);
		return -1;
	}
	if (g->end > j->w_hi)
		j->w_hi = g->end;
	j->w_gen++;
	__atomic_store_n(&j->w_dirty, j->w_gen, __ATOMIC_RELAXED);
	return 0;
}

/* Adds b's records to g (writing what g held first when they do not
 * continue it).  A new segment is activated only after g is written: its
 * records belong to the segment before. */
static int w_write_batch(struct journal *j, struct jbatch *b, struct wgather *g)
{
	size_t ri;

	for (ri = 0; ri < b->nrun; ri++) {
		struct brun *r = &b->runs[ri];
		uint64_t pos = r->off;

		if (r->n == 0)
			continue;
		if (r->is_new) {
			struct journal_opts o;

			if (w_gather_flush(g) < 0 && failed_get(j))
				return -1;
			w_opts_get(j, &o);
			if (w_activate(j, r->seg, r->seg_size, b->sync, &o) < 0)
				return -1;
		} else if (j->w_fd < 0 || j->w_seg != r->seg) {
			errno = EINVAL;
			w_fail(j, "write (no segment)", errno);
			return -1;
		}
		for (size_t i = r->first; i < r->first + r->n; i++) {
			struct bent *e = &b->ents[i];
			unsigned char *h = b->buf + e->hoff;
			const void *body = e->it ? (const void *)e->it->data : (const void *)zeros;
			size_t add = e->rawlen ? e->rawlen : JREC_HDR_SIZE;

			if (g->j != j || g->end != pos || g->n + 3 > IOV_MAX) {
				/* (another journal's failure is that journal's) */
				if (w_gather_flush(g) < 0 && failed_get(j))
					return -1;
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
				g->iov[g->n++] = (struct iovec){ (void *)zeros, e->pad };
			stat_add(&j->st_records, e->rawlen ? 0 : 1);
			pos += add + e->blen + e->pad;
			g->end = pos;
		}
	}
	return 0;
}

static void w_compl(struct jenv *env, uint64_t upto, int err)
{
	if (env->ncompl && env->compl[env->ncompl - 1].err == err) {
		if (upto > env->compl[env->ncompl - 1].upto)
			env->compl[env->ncompl - 1].upto = upto;
		return;
	}
	if (grow((void **)&env->compl, &env->complcap, env->ncompl + 1,
		 sizeof(*env->compl)) < 0) {
		/* cannot queue a separate entry: fold into the last one,
		 * erring on the side of reporting failure */
		if (env->ncompl) {
			env->compl[env->ncompl - 1].upto = upto;
			if (err)
				env->compl[env->ncompl - 1].err = err;
		}
		return;
	}
	env->compl[env->ncompl++] = (struct jcompl){ upto, err };
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Reports a group's tickets, up to upto (under env->mu).  Only the tickets
 * of failed batches (their journals are failed for good) get TERN_EIO: the
 * other journals' records in the group were written and synced like any
 * others, and tickets interleave across journals (one loop pass serves
 * many queues), so after a failure the report alternates between ranges of
 * durable tickets and failed ones.  If the failed tickets cannot be listed
 * (no memory), the whole group gets TERN_EIO: a set reported failed that
 * was durable is redelivered, never lost.
 */
static void w_report(struct jenv *env, struct jbatch *list, uint64_t upto)
{
	uint64_t *f = NULL;
	size_t n = 0, cap = 0;
	int all_failed = 0;
	struct jbatch *b;

	for (b = list; b && !all_failed; b = b->next) {
		if (!b->err || !b->ticket)
			continue;
		for (size_t i = 0; i < b->nent && !all_failed; i++) {
			if (!b->ents[i].ticket)
				continue;
			if (grow((void **)&f, &cap, n + 1, sizeof(*f)) < 0)
				all_failed = 1;
			else
				f[n++] = b->ents[i].ticket;
		}
	}
	if (!all_failed && n) {
		qsort(f, n, sizeof(*f), cmp_u64);
		for (size_t i = 0; i < n; i++) {
			if (f[i] <= env->w_upto)
				continue;
			if (f[i] - 1 > env->w_upto)
				w_compl(env, f[i] - 1, 0);
			w_compl(env, f[i], TERN_EIO);
			env->w_upto = f[i];
		}
	}
	if (upto > env->w_upto) {
		w_compl(env, upto, all_failed ? TERN_EIO : 0);
		env->w_upto = upto;
	}
	free(f);
}

/* fdatasync of one journal's file, for a helper thread. */
struct psync {
	pthread_t thr;
	int fd, err, started;
};

static void *psync_main(void *arg)
{
	struct psync *p = arg;

	p->err = jio.fdatasync(p->fd) < 0 ? errno : 0;
	return NULL;
}

#define PSYNC_MAX 8

/*
 * Syncs the current segment of every journal in js (each dirty, w_fd open).
 * Files are synced in parallel, up to PSYNC_MAX at once: one after another,
 * four queues in sync=always took four device flushes per group (measured:
 * 2.8k sets/s for 4 queues, 1 client each); issued together the device (and
 * ext4's journal) can serve them with fewer flushes.  A helper thread per
 * file and group costs tens of microseconds against a flush's hundreds.
 */
static void w_sync_all(struct journal **js, size_t n)
{
	size_t i = 0;

	while (i < n) {
		struct psync ps[PSYNC_MAX];
		size_t m = n - i < PSYNC_MAX ? n - i : PSYNC_MAX, k;

		for (k = 1; k < m; k++) {
			ps[k].fd = js[i + k]->w_fd;
			ps[k].err = 0;
			ps[k].started = pthread_create(&ps[k].thr, NULL, psync_main, &ps[k]) == 0;
		}
		ps[0].fd = js[i]->w_fd;
		psync_main(&ps[0]);
		for (k = 1; k < m; k++) {
			if (ps[k].started)
				pthread_join(ps[k].thr, NULL);
			else
				psync_main(&ps[k]); /* no thread: sync it here */
		}
		for (k = 0; k < m; k++) {
			struct journal *j = js[i + k];

			if (ps[k].err) {
				w_fail(j, "fdatasync", ps[k].err);
				continue;
			}
			stat_add(&j->st_syncs, 1);
			__atomic_store_n(&j->w_dirty, 0, __ATOMIC_RELAXED);
			__atomic_store_n(&j->w_last_sync, mono_ms(), __ATOMIC_RELAXED);
		}
		i += m;
	}
}

/*
 * Whether the sync that must precede b's checkpoint commit is left to the
 * syncer.  In none/interval a set is acknowledged once its record is in
 * the kernel, so the checkpoint's fdatasync (up to a second of records in
 * none, up to sync_interval_ms in interval) need not hold those sets back:
 * done in the group it stalled every set for its length once per
 * checkpoint_interval_ms (measured: open-loop set p99 8 ms interval, 36 ms
 * none at half of peak rate).  always/odsync sync before tickets anyway; a
 * closing journal's last checkpoint is synced and committed in the group.
 */
static int ckpt_sync_later(const struct jbatch *b)
{
	return b->close == 0 && !journal_sync_waits(b->sync);
}

/* Posts b's checkpoint to the syncer (after a sync of the current segment
 * where ckpt_sync_later): the blob and the segments it frees move to the
 * job.  Returns -1 when no job could be made (b is untouched). */
static int ckpt_post(struct journal *j, struct jbatch *b)
{
	struct sjob *s = calloc(1, sizeof(*s));

	if (!s)
		return -1;
	s->j = j;
	s->fd = -1;
	if (ckpt_sync_later(b) && dirty_get(j) && j->w_fd >= 0 && !j->w_fd_dsync) {
		s->dirty = dirty_get(j);
		s->fd = dup(j->w_fd);
		if (s->fd < 0) {
			free(s);
			return -1;
		}
		s->kind = SJ_SEG;
		sync_range_take(j, s); /* under wlock (w_group) */
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

/* Writes, syncs and checkpoints one group of batches. */
void w_group(struct jenv *env, struct jbatch *list)
{
	struct jbatch *b;
	uint64_t upto = 0;

	{
		struct wgather g; /* (no initializer: it would zero 16 KiB of iov) */

		g.j = NULL;
		g.n = 0;

		for (b = list; b; b = b->next) {
			struct journal *j = b->j;

			if (failed_get(j) || w_write_batch(j, b, &g) < 0)
				b->err = TERN_EIO;
		}
		/* a failure fails the journal: its tickets get EIO below */
		w_gather_flush(&g);
	}
	/* One fdatasync per journal covers every batch of the group; the
	 * journals of a group are synced in parallel (see w_sync_all). */
	{
		struct journal *one[16], **js = one;
		size_t n = 0, cap = 16;

		for (b = list; b; b = b->next) {
			struct journal *j = b->j;
			size_t k;

			if (b->err || failed_get(j))
				continue;
			/* batches without tickets (removes, opens: gets never
			 * wait) are made durable by the next synced batch or
			 * checkpoint */
			if (!(((b->ticket && (b->sync == JOURNAL_SYNC_ALWAYS ||
					      (b->sync == JOURNAL_SYNC_ODSYNC && !j->w_fd_dsync))) ||
			       (b->ckpt && !ckpt_sync_later(b)) || b->close == 1) &&
			      dirty_get(j) && j->w_fd >= 0))
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
	/* Tickets first: the records are written (and synced where needed),
	 * so their clients can be answered before the checkpoint commits. */
	for (b = list; b; b = b->next) {
		struct journal *j = b->j;

		if (failed_get(j) && !b->err && b->ticket)
			b->err = TERN_EIO; /* its sync failed */
		if (b->ticket > upto)
			upto = b->ticket;
		/* drop body references now, from the thread that wrote them */
		for (size_t i = 0; i < b->nent; i++) {
			item_unref(b->ents[i].it);
			b->ents[i].it = NULL;
		}
	}
	pthread_mutex_lock(&env->mu);
	w_report(env, list, upto);
	pthread_mutex_unlock(&env->mu);
	event_active(env->done_ev, EV_READ, 0);
	for (b = list; b; b = b->next) {
		struct journal *j = b->j;

		/* The checkpoint is committed only after the records it
		 * covers are on disk, and segments are freed only after it.
		 * The syncer does both (see struct sjob), so the writer is free
		 * for the next group meanwhile.  A closing journal first waits
		 * for the syncer's jobs (its earlier checkpoints, whose segment
		 * frees come back here), then commits its last checkpoint. */
		if (b->close) {
			s_barrier(env);
			w_take_frees(env);
		}
		if (b->ckpt && !failed_get(j) && (b->close || ckpt_post(j, b) < 0)) {
			int ok = 1;

			/* (no job memory: as a close, after the syncer) */
			if (!b->close)
				s_barrier(env);
			if (ckpt_sync_later(b) && dirty_get(j) && j->w_fd >= 0 &&
			    !j->w_fd_dsync)
				ok = w_sync(j, j->w_fd) == 0;
			if (ok)
				ok = jcat_ckpt_put(env->cat, j->name, b->ckpt, b->ckpt_len) == 0;
			if (ok) {
				struct journal_opts o;

				w_opts_get(j, &o);
				w_free_segs(j, b->free_segs, b->nfree, &o);
			}
		}
		if (b->close) {
			s_barrier(env); /* the unlinks w_free_segs posted */
			w_close_files(j, b->close == 1);
		}
	}
	pthread_mutex_lock(&env->mu);
	for (b = list; b; b = b->next) {
		if (b->close) {
			struct journal **pp;

			for (pp = &env->journals; *pp; pp = &(*pp)->wnext) {
				if (*pp == b->j) {
					*pp = b->j->wnext;
					break;
				}
			}
			b->j->w_closed = 1;
		}
	}
	*env->d_tail = list;
	for (b = list; b->next; b = b->next)
		;
	env->d_tail = &b->next;
	pthread_cond_broadcast(&env->cv_done);
	pthread_mutex_unlock(&env->mu);
	event_active(env->done_ev, EV_READ, 0);
}
