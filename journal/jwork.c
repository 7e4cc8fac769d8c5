/*
 * jwork.c: the writer's lists of background work, so that finding the next
 * job costs the same with ten queues as with ten thousand (a walk over
 * every journal at each turn of the writer's loop made creating twenty
 * thousand queues quadratic).  Four lists, each under env->mu_lock:
 *
 *   zero       journals whose segment gets zeros ahead of its records
 *              (ZERO_AHEAD, jpriv.h) and needs the next step of them, in
 *              the order they asked: first, as the records are close
 *              behind;
 *   spare      journals whose spare the writer prepares (SP_PENDING), in
 *              the order they asked;
 *   nospc      journals whose spare could not be prepared (SP_NOSPC), by
 *              the time of their next try (a refused add moves one first);
 *   timer      journals of a mode with timed syncs that hold unsynced
 *              writes, by the time their interval sync is due (a binary
 *              heap: journals become dirty in any order of due times, as
 *              when ten thousand close at once).
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

#define Z_OFF offsetof(struct journal, mu.z_link)

int jwork_zero(struct journal *j, int on)
{
	if (!on == !j->mu.z_listed)
		return 0;
	if (on)
		list_add_tail(&j->env->mu.w_zero, j, Z_OFF);
	else
		list_del(&j->env->mu.w_zero, j, Z_OFF);
	j->mu.z_listed = on;
	return on;
}

void jwork_retry_now(struct journal *j)
{
	if (j->mu.sp_list != SP_NOSPC)
		return;
	j->mu.sp_retry_at = 0;
	list_del(&j->env->mu.w_nospc, j, SP_OFF);
	list_add_head(&j->env->mu.w_nospc, j, SP_OFF);
}

/* ---- the timer heap: env->mu.w_timer[0 .. n), the soonest due first;
 * j->mu.heap_i is a journal's index, -1 when it is not in the heap */

static int due_before(const struct journal *a, const struct journal *b)
{
	return a->mu.due < b->mu.due;
}

static void heap_place(struct jenv *env, struct journal *j, size_t i)
{
	env->mu.w_timer[i] = j;
	j->mu.heap_i = (long)i;
}

static void heap_up(struct jenv *env, size_t i)
{
	struct journal *j = env->mu.w_timer[i];

	while (i > 0 && due_before(j, env->mu.w_timer[(i - 1) / 2])) {
		heap_place(env, env->mu.w_timer[(i - 1) / 2], i);
		i = (i - 1) / 2;
	}
	heap_place(env, j, i);
}

static void heap_down(struct jenv *env, size_t i)
{
	struct journal *j = env->mu.w_timer[i];
	size_t n = env->mu.w_ntimer;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= n)
			break;
		if (c + 1 < n && due_before(env->mu.w_timer[c + 1], env->mu.w_timer[c]))
			c++;
		if (!due_before(env->mu.w_timer[c], j))
			break;
		heap_place(env, env->mu.w_timer[c], i);
		i = c;
	}
	heap_place(env, j, i);
}

static void tm_unlist(struct journal *j)
{
	struct jenv *env = j->env;
	size_t i, last;

	if (j->mu.heap_i < 0)
		return;
	i = (size_t)j->mu.heap_i;
	last = --env->mu.w_ntimer;
	j->mu.heap_i = -1;
	if (i == last)
		return;
	heap_place(env, env->mu.w_timer[last], i);
	heap_down(env, i);
	heap_up(env, (size_t)env->mu.w_timer[i]->mu.heap_i);
}

int jwork_dirty(struct journal *j)
{
	struct jenv *env = j->env;

	if (j->mu.heap_i >= 0 || !jpolicy(j->mu.opts.sync)->timer_sync)
		return 0;
	if (env->mu.w_ntimer == env->mu.w_timercap) {
		size_t nc = env->mu.w_timercap ? env->mu.w_timercap * 2 : 64;
		struct journal **nt = realloc(env->mu.w_timer, nc * sizeof(*nt));

		/* without memory the journal waits for its next write, or for
		 * the sync of a roll or a checkpoint */
		if (!nt)
			return 0;
		env->mu.w_timer = nt;
		env->mu.w_timercap = nc;
	}
	j->mu.due = __atomic_load_n(&j->atom.last_sync, __ATOMIC_RELAXED) +
		    j->mu.opts.sync_interval_ms;
	env->mu.w_timer[env->mu.w_ntimer] = j;
	heap_up(env, env->mu.w_ntimer++);
	/* a sleeping writer that would wake later must wake sooner */
	return env->mu.w_wake_at && j->mu.due < env->mu.w_wake_at;
}

void jwork_forget(struct journal *j)
{
	sp_unlist(j);
	tm_unlist(j);
	jwork_zero(j, 0);
}

struct journal *jwork_next(struct jenv *env, int64_t now, enum wjob *what, int64_t *wait_ms)
{
	struct journal *j;

	while ((j = env->mu.w_zero.head)) {
		if (failed_get(j)) {
			jwork_zero(j, 0);
			continue;
		}
		*what = WJOB_ZERO;
		return j;
	}
	while ((j = env->mu.w_spare.head)) {
		if (failed_get(j) || j->mu.opts.prealloc == JOURNAL_PREALLOC_NONE) {
			sp_unlist(j);
			continue;
		}
		*what = WJOB_SPARE;
		return j;
	}
	while (env->mu.w_ntimer) {
		j = env->mu.w_timer[0];
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
