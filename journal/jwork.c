/*
 * jwork.c: the writer's lists of background work, so that finding the next
 * job costs the same with ten queues as with ten thousand (a walk over
 * every journal at each turn of the writer's loop made creating twenty
 * thousand queues quadratic).  Three lists, each under env->mu_lock:
 *
 *   spare      journals whose spare the writer prepares (SP_PENDING), in
 *              the order they asked;
 *   nospc      journals whose spare could not be prepared (SP_NOSPC), by
 *              the time of their next try (a refused add moves one first);
 *   timer      journals of a mode with timed syncs that hold unsynced
 *              writes, by the time their interval sync is due.
 *
 * A journal enters the timer list when a write makes it dirty (it was
 * clean before) and leaves it when its interval sync is posted; the syncer
 * lists it again if it was written during the sync.  A journal found clean
 * (a roll's or a checkpoint's sync covered it), failed or with its sync
 * still running is dropped from the head.  Nothing here does I/O.
 */
#include "jpriv.h"

/* The list of journals, linked through l (an offset in struct journal). */
#define LINK(j, off) ((struct jlink *)((char *)(j) + (off)))

static void list_del(struct jlist *l, struct journal *j, size_t off)
{
	struct jlink *k = LINK(j, off);

	if (k->prev)
		LINK(k->prev, off)->next = k->next;
	else
		l->head = k->next;
	if (k->next)
		LINK(k->next, off)->prev = k->prev;
	else
		l->tail = k->prev;
	k->prev = k->next = NULL;
}

static void list_add_tail(struct jlist *l, struct journal *j, size_t off)
{
	struct jlink *k = LINK(j, off);

	k->next = NULL;
	k->prev = l->tail;
	if (l->tail)
		LINK(l->tail, off)->next = j;
	else
		l->head = j;
	l->tail = j;
}

static void list_add_head(struct jlist *l, struct journal *j, size_t off)
{
	struct jlink *k = LINK(j, off);

	k->prev = NULL;
	k->next = l->head;
	if (l->head)
		LINK(l->head, off)->prev = j;
	else
		l->tail = j;
	l->head = j;
}

#define SP_OFF offsetof(struct journal, mu.sp_link)
#define TM_OFF offsetof(struct journal, mu.tm_link)

static void sp_unlist(struct journal *j)
{
	struct jenv *env = j->env;

	if (j->mu.sp_list == SP_PENDING)
		list_del(&env->mu.w_spare, j, SP_OFF);
	else if (j->mu.sp_list == SP_NOSPC)
		list_del(&env->mu.w_nospc, j, SP_OFF);
	j->mu.sp_list = SP_NONE;
}

void jwork_spare(struct journal *j, int state)
{
	struct jenv *env = j->env;

	spare_set(j, state);
	if (j->mu.sp_list == state && state != SP_NOSPC)
		return;
	sp_unlist(j);
	if (state == SP_PENDING)
		list_add_tail(&env->mu.w_spare, j, SP_OFF);
	else if (state == SP_NOSPC)
		list_add_tail(&env->mu.w_nospc, j, SP_OFF); /* (retry times only grow) */
	else
		return;
	j->mu.sp_list = state;
}

void jwork_retry_now(struct journal *j)
{
	if (j->mu.sp_list != SP_NOSPC)
		return;
	j->mu.sp_retry_at = 0;
	list_del(&j->env->mu.w_nospc, j, SP_OFF);
	list_add_head(&j->env->mu.w_nospc, j, SP_OFF);
}

int jwork_dirty(struct journal *j)
{
	struct jenv *env = j->env;
	struct journal *p;
	int64_t due;

	if (j->mu.in_timer || !jpolicy(j->mu.opts.sync)->timer_sync)
		return 0;
	due = __atomic_load_n(&j->atom.last_sync, __ATOMIC_RELAXED) + j->mu.opts.sync_interval_ms;
	j->mu.due = due;
	j->mu.in_timer = 1;
	/* by due time: a new one is almost always due last */
	for (p = env->mu.w_timer.tail; p && p->mu.due > due; p = p->mu.tm_link.prev)
		;
	if (!p) {
		list_add_head(&env->mu.w_timer, j, TM_OFF);
	} else if (p == env->mu.w_timer.tail) {
		list_add_tail(&env->mu.w_timer, j, TM_OFF);
	} else {
		struct journal *n = p->mu.tm_link.next;

		j->mu.tm_link.prev = p;
		j->mu.tm_link.next = n;
		p->mu.tm_link.next = j;
		n->mu.tm_link.prev = j;
	}
	/* a sleeping writer that would wake later must wake sooner */
	return env->mu.w_wake_at && due < env->mu.w_wake_at;
}

static void tm_unlist(struct journal *j)
{
	if (!j->mu.in_timer)
		return;
	list_del(&j->env->mu.w_timer, j, TM_OFF);
	j->mu.in_timer = 0;
}

void jwork_forget(struct journal *j)
{
	sp_unlist(j);
	tm_unlist(j);
}

struct journal *jwork_next(struct jenv *env, int64_t now, enum wjob *what, int64_t *wait_ms)
{
	struct journal *j;

	while ((j = env->mu.w_spare.head)) {
		if (failed_get(j) || j->mu.opts.prealloc == JOURNAL_PREALLOC_NONE) {
			sp_unlist(j);
			continue;
		}
		*what = WJOB_SPARE;
		return j;
	}
	while ((j = env->mu.w_timer.head)) {
		if (failed_get(j) || !dirty_get(j) || !jpolicy(j->mu.opts.sync)->timer_sync ||
		    __atomic_load_n(&j->atom.s_pending, __ATOMIC_ACQUIRE)) {
			tm_unlist(j); /* (the syncer lists it again if need be) */
			continue;
		}
		if (j->mu.due <= now) {
			tm_unlist(j);
			*what = WJOB_INTERVAL_SYNC;
			return j;
		}
		if (j->mu.due - now < *wait_ms)
			*wait_ms = j->mu.due - now;
		break;
	}
	while ((j = env->mu.w_nospc.head)) {
		if (failed_get(j) || j->mu.opts.prealloc == JOURNAL_PREALLOC_NONE) {
			sp_unlist(j);
			continue;
		}
		if (j->mu.sp_retry_at <= now) {
			*what = WJOB_SPARE;
			return j;
		}
		if (j->mu.sp_retry_at - now < *wait_ms)
			*wait_ms = j->mu.sp_retry_at - now;
		break;
	}
	*what = WJOB_NONE;
	return NULL;
}
