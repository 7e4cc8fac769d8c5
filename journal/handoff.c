/*
 * handoff.c: the hand-off between the event loop and the writer.  The loop
 * queues each pass's batches for the writer (env->mu.q_head); the writer
 * hands back the batches it finished (env->mu.d_head) and the ticket
 * reports of each group (env->mu.compl, the completion queue), then wakes
 * the loop, which takes both back in env_done (jbatch.c).  Every list here
 * is under env->mu_lock.  Both sides call down into this file, and it
 * calls neither: the events that run env_done are the loop's (jbatch.c).
 */
#include "jpriv.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "../lib/log.h"

void handoff_queue(struct jenv *env, struct jbatch *list, struct jbatch **tail)
{
	pthread_mutex_lock(&env->mu_lock);
	*env->mu.q_tail = list;
	env->mu.q_tail = tail;
	env->mu.q_waiters = env->loop.waiters;
	if (env->mu.lg_waiters && env->mu.q_waiters < env->mu.lg_waiters) {
		/* the writer waits for more (w_linger), until its deadline */
		pthread_mutex_unlock(&env->mu_lock);
		return;
	}
	writer_wake_unlock(env);
}

int handoff_idle(struct jenv *env)
{
	int idle;

	pthread_mutex_lock(&env->mu_lock);
	idle = env->mu.q_head == NULL && !env->mu.stop;
	pthread_mutex_unlock(&env->mu_lock);
	return idle;
}

struct jbatch *handoff_take(struct jenv *env, uint64_t *waiters)
{
	struct jbatch *list = env->mu.q_head;

	*waiters = env->mu.q_waiters; /* as of the list's last batch */
	env->mu.q_head = NULL;
	env->mu.q_tail = &env->mu.q_head;
	return list;
}

/* Adds a report (tickets up to upto resolved with err), merging it into
 * the last one when the error is the same.  Under mu. */
static void compl_add(struct jenv *env, uint64_t upto, int err)
{
	struct jcompl *last = env->mu.ncompl ? &env->mu.compl[env->mu.ncompl - 1] : NULL;

	if (last && last->err == err) {
		if (upto > last->upto)
			last->upto = upto;
		return;
	}
	if (jgrow((void **)&env->mu.compl, &env->mu.complcap, env->mu.ncompl + 1,
		  sizeof(*env->mu.compl)) < 0) {
		/* cannot queue a separate entry: fold into the last one,
		 * erring on the side of reporting failure */
		if (last) {
			last->upto = upto;
			if (err)
				last->err = err;
		}
		return;
	}
	env->mu.compl[env->mu.ncompl++] = (struct jcompl){ upto, err };
}

/* A failed ticket and its error. */
struct fticket {
	uint64_t t;
	int err;
};

static int cmp_fticket(const void *a, const void *b)
{
	uint64_t x = ((const struct fticket *)a)->t, y = ((const struct fticket *)b)->t;

	return x < y ? -1 : x > y;
}

/*
 * Only the tickets of failed batches get their batch's error (TERN_EIO:
 * the journal is failed for good; TERN_ENOSPC: their segment was given up
 * for want of room): the other journals' records in the group were
 * written and synced like any others, and tickets interleave across
 * journals (one loop pass serves many queues), so after a failure the
 * report alternates between ranges of durable tickets and failed ones.  If
 * the failed tickets cannot be listed (no memory), the whole group gets
 * TERN_EIO: a set reported failed that was durable is redelivered, never
 * lost.
 */
void handoff_report(struct jenv *env, struct jbatch *list, uint64_t upto)
{
	struct fticket *f = NULL;
	size_t n = 0, cap = 0;
	int all_failed = 0;
	struct jbatch *b;

	for (b = list; b && !all_failed; b = b->next) {
		size_t from;

		if (!b->err || !b->ticket)
			continue;
		/* (the entries of the runs written before a failed one keep
		 * their tickets' success) */
		from = b->err_run < b->nrun ? b->runs[b->err_run].first : 0;
		for (size_t i = from; i < b->nent && !all_failed; i++) {
			if (!b->ents[i].ticket)
				continue;
			if (jgrow((void **)&f, &cap, n + 1, sizeof(*f)) < 0)
				all_failed = 1;
			else
				f[n++] = (struct fticket){ b->ents[i].ticket, b->err };
		}
	}
	if (!all_failed && n) {
		qsort(f, n, sizeof(*f), cmp_fticket);
		for (size_t i = 0; i < n; i++) {
			if (f[i].t <= env->mu.w_upto)
				continue;
			if (f[i].t - 1 > env->mu.w_upto)
				compl_add(env, f[i].t - 1, 0);
			compl_add(env, f[i].t, f[i].err);
			env->mu.w_upto = f[i].t;
		}
	}
	if (upto > env->mu.w_upto) {
		compl_add(env, upto, all_failed ? TERN_EIO : 0);
		env->mu.w_upto = upto;
	}
	free(f);
}

void handoff_return(struct jenv *env, struct jbatch *list)
{
	struct jbatch *b;

	*env->mu.d_tail = list;
	for (b = list; b->next; b = b->next)
		;
	env->mu.d_tail = &b->next;
	pthread_cond_broadcast(&env->cv_done);
}

void handoff_wake(struct jenv *env)
{
	uint64_t one = 1;

	if (pthread_equal(pthread_self(), env->loop_thr)) {
		event_active(env->done_ev, EV_READ, 0);
		return;
	}
	if (__atomic_exchange_n(&env->atom.wake_sent, 1, __ATOMIC_SEQ_CST))
		return; /* the loop has yet to read the last one */
	/* An eventfd's write fails only on overflow (2^64 - 2 unread). */
	while (write(env->wake_fd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}

void handoff_woken(struct jenv *env)
{
	uint64_t v;

	/* Read, then cleared, then the lists taken (by the caller): a report
	 * made after the clear writes the eventfd again, one made before it
	 * is in the lists.  (Cleared before the read, a write made in
	 * between would be read here while the flag stays set, and the next
	 * report would wake nobody.) */
	if (read(env->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		log_warn("journal: reading the writer's wake-up: %s", strerror(errno));
	__atomic_store_n(&env->atom.wake_sent, 0, __ATOMIC_SEQ_CST);
}

struct jbatch *handoff_take_done(struct jenv *env, struct jcompl **c, size_t *n, size_t *cap)
{
	struct jbatch *list;

	/* The report array is swapped with a spare one, not handed over and
	 * freed: no allocation per group.  (A nested call, from a durable
	 * callback, finds no spare and the writer allocates anew.) */
	pthread_mutex_lock(&env->mu_lock);
	list = env->mu.d_head;
	env->mu.d_head = NULL;
	env->mu.d_tail = &env->mu.d_head;
	*c = env->mu.compl;
	*n = env->mu.ncompl;
	*cap = env->mu.complcap;
	env->mu.compl = env->loop.spare_compl;
	env->mu.complcap = env->loop.spare_complcap;
	env->mu.ncompl = 0;
	env->loop.spare_compl = NULL;
	env->loop.spare_complcap = 0;
	pthread_mutex_unlock(&env->mu_lock);
	return list;
}

void handoff_keep_compl(struct jenv *env, struct jcompl *c, size_t cap)
{
	if (!env->loop.spare_compl) {
		env->loop.spare_compl = c;
		env->loop.spare_complcap = cap;
		return;
	}
	free(c);
}
