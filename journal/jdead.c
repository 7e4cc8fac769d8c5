/* jdead.c: dead ADD positions, a sorted run plus a map for stragglers. */
#include "jdead.h"

#include <stdlib.h>
#include <string.h>

/* Index in a[head .. head+n) of the first position >= pos (n if none). */
static size_t lower_bound(const struct jdead *d, uint64_t pos)
{
	size_t lo = 0, hi = d->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (d->a[d->head + mid] < pos)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Room for one more at the end: slide the run to the front when half the
 * array is pruned space, otherwise double it. */
static int room(struct jdead *d)
{
	size_t cap;
	uint64_t *a;

	if (d->head + d->n < d->cap)
		return 0;
	if (d->head && d->head >= d->cap / 2) {
		memmove(d->a, d->a + d->head, d->n * sizeof(*d->a));
		d->head = 0;
		return 0;
	}
	cap = d->cap ? d->cap * 2 : 1024;
	a = realloc(d->a, cap * sizeof(*a));
	if (!a)
		return -1;
	d->a = a;
	d->cap = cap;
	return 0;
}

int jdead_put(struct jdead *d, uint64_t pos)
{
	if (d->n == 0 || pos > d->a[d->head + d->n - 1]) {
		/* above the run, but maybe a straggler from when the run
		 * reached further (before a jdead_del of its end) */
		if (d->side.n && jmap_get(&d->side, pos))
			return 0;
		if (room(d) < 0)
			return -1;
		d->a[d->head + d->n++] = pos;
		return 0;
	}
	/* below the run's end: in the run already, or the side map's (whose
	 * put finds it there already) */
	return jdead_put_aside(d, pos);
}

int jdead_put_aside(struct jdead *d, uint64_t pos)
{
	size_t i = lower_bound(d, pos);

	if (i < d->n && d->a[d->head + i] == pos)
		return 0;
	return jmap_put(&d->side, pos) ? 0 : -1;
}

int jdead_has(const struct jdead *d, uint64_t pos)
{
	size_t i = lower_bound(d, pos);

	if (i < d->n && d->a[d->head + i] == pos)
		return 1;
	return d->side.n && jmap_get(&d->side, pos) != NULL;
}

void jdead_del(struct jdead *d, uint64_t pos)
{
	size_t i = lower_bound(d, pos);

	if (i < d->n && d->a[d->head + i] == pos) {
		memmove(d->a + d->head + i, d->a + d->head + i + 1,
			(d->n - i - 1) * sizeof(*d->a));
		d->n--;
		return;
	}
	jmap_del(&d->side, pos);
}

int jdead_prune_below(struct jdead *d, uint64_t min)
{
	size_t i, need = 1024;

	if (d->side.n && jmap_prune_below(&d->side, min) < 0)
		return -1;
	/* the size the count before pruning needed: a set refilled at the
	 * same pace after each prune keeps its array; one that held far more
	 * once (a long-open item held H back) gives the memory back */
	while (need < d->n)
		need *= 2;
	i = lower_bound(d, min);
	d->head += i;
	d->n -= i;
	if (d->cap > 2 * need) {
		uint64_t *a;

		memmove(d->a, d->a + d->head, d->n * sizeof(*d->a));
		d->head = 0;
		a = realloc(d->a, need * sizeof(*a));
		if (a) {
			d->a = a;
			d->cap = need;
		}
	}
	if (!d->n)
		d->head = 0;
	return 0;
}

size_t jdead_count(const struct jdead *d)
{
	return d->n + d->side.n;
}

void jdead_each(const struct jdead *d, void (*fn)(void *arg, uint64_t pos), void *arg)
{
	const struct jent *e;

	for (size_t i = 0; i < d->n; i++)
		fn(arg, d->a[d->head + i]);
	for (size_t i = 0; (e = jmap_next(&d->side, &i));)
		fn(arg, e->key);
}

void jdead_clear(struct jdead *d)
{
	d->head = d->n = 0;
	jmap_clear(&d->side);
}

void jdead_free(struct jdead *d)
{
	free(d->a);
	d->a = NULL;
	d->head = d->n = d->cap = 0;
	jmap_free(&d->side);
}
