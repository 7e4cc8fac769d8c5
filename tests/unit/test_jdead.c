/* test_jdead.c: the journal's set of dead ADD positions (a sorted run plus
 * a map for positions that arrive out of order), against a plain model. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../journal/jdead.h"

struct collect {
	uint64_t *v;
	size_t n;
};

static void collect_cb(void *arg, uint64_t pos)
{
	struct collect *c = arg;

	c->v[c->n++] = pos;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The run is strictly increasing, and every stored position is reported
 * once by jdead_each and counted by jdead_count. */
static void check_invariants(const struct jdead *d)
{
	struct collect c;
	size_t cnt = jdead_count(d);

	for (size_t i = 1; i < d->n; i++)
		ck_assert_uint_lt(d->a[d->head + i - 1], d->a[d->head + i]);
	ck_assert_uint_le(d->head + d->n, d->cap);
	c.v = malloc((cnt + 1) * sizeof(*c.v));
	c.n = 0;
	jdead_each(d, collect_cb, &c);
	ck_assert_uint_eq(c.n, cnt);
	qsort(c.v, c.n, sizeof(*c.v), cmp_u64);
	for (size_t i = 1; i < c.n; i++)
		ck_assert_uint_ne(c.v[i - 1], c.v[i]);
	free(c.v);
}

/* A position far ahead of the others (a compaction copy's) put aside
 * leaves the run to the lower ones that follow it. */
START_TEST(aside)
{
	struct jdead d = { 0 };

	for (uint64_t p = 1; p <= 100; p++)
		ck_assert_int_eq(jdead_put(&d, p * 568), 0);
	ck_assert_int_eq(jdead_put_aside(&d, 50 * 568), 0); /* in the run: nothing */
	ck_assert_uint_eq(d.side.n, 0);
	ck_assert_int_eq(jdead_put_aside(&d, 9000 * 568), 0);
	ck_assert_uint_eq(d.side.n, 1);
	for (uint64_t p = 101; p <= 200; p++)
		ck_assert_int_eq(jdead_put(&d, p * 568), 0);
	ck_assert_uint_eq(d.n, 200);
	ck_assert_uint_eq(d.side.n, 1);
	ck_assert(jdead_has(&d, 9000 * 568));
	/* put again through the run: found aside, not stored twice */
	ck_assert_int_eq(jdead_put(&d, 9000 * 568), 0);
	ck_assert_uint_eq(jdead_count(&d), 201);
	check_invariants(&d);
	ck_assert_int_eq(jdead_prune_below(&d, 9000 * 568 + 1), 0);
	ck_assert_uint_eq(jdead_count(&d), 0);
	jdead_free(&d);
}
END_TEST

START_TEST(in_order_and_stragglers)
{
	struct jdead d = { 0 };

	for (uint64_t p = 1; p <= 3000; p++)
		ck_assert_int_eq(jdead_put(&d, p * 568), 0);
	ck_assert_uint_eq(d.n, 3000);
	ck_assert_uint_eq(d.side.n, 0);
	/* below the run's end: to the side map, unless already in the run */
	ck_assert_int_eq(jdead_put(&d, 100 * 568), 0);
	ck_assert_uint_eq(jdead_count(&d), 3000);
	ck_assert_int_eq(jdead_put(&d, 100 * 568 + 8), 0);
	ck_assert_uint_eq(d.side.n, 1);
	ck_assert_uint_eq(jdead_count(&d), 3001);
	ck_assert(jdead_has(&d, 100 * 568 + 8));
	ck_assert(jdead_has(&d, 3000 * 568));
	ck_assert(!jdead_has(&d, 3000 * 568 + 1));
	ck_assert(!jdead_has(&d, 1));
	/* delete from the middle of the run, from its end, from the side */
	jdead_del(&d, 1500 * 568);
	jdead_del(&d, 3000 * 568);
	jdead_del(&d, 100 * 568 + 8);
	ck_assert(!jdead_has(&d, 1500 * 568));
	ck_assert(!jdead_has(&d, 3000 * 568));
	ck_assert(!jdead_has(&d, 100 * 568 + 8));
	ck_assert_uint_eq(jdead_count(&d), 2998);
	check_invariants(&d);
	/* prune: everything below 2000*568 goes, from both parts */
	ck_assert_int_eq(jdead_put(&d, 10), 0);
	ck_assert_int_eq(jdead_put(&d, 2500 * 568 + 8), 0);
	ck_assert_int_eq(jdead_prune_below(&d, 2000 * 568), 0);
	ck_assert(!jdead_has(&d, 10));
	ck_assert(!jdead_has(&d, 1999 * 568));
	ck_assert(jdead_has(&d, 2000 * 568));
	ck_assert(jdead_has(&d, 2500 * 568 + 8));
	ck_assert_uint_eq(jdead_count(&d), 1000 + 1);
	check_invariants(&d);
	jdead_clear(&d);
	ck_assert_uint_eq(jdead_count(&d), 0);
	ck_assert(!jdead_has(&d, 2000 * 568));
	jdead_free(&d);
}
END_TEST

/* A steady queue: each interval adds ~50k positions and the prune drops
 * all but the last few.  The array keeps its size (no regrowth every
 * interval), slides its run to the front instead. */
START_TEST(prune_keeps_array)
{
	struct jdead d = { 0 };
	uint64_t p = 1;
	size_t cap = 0;

	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < 50000; i++)
			ck_assert_int_eq(jdead_put(&d, p++ * 512), 0);
		ck_assert_int_eq(jdead_prune_below(&d, (p - 10) * 512), 0);
		ck_assert_uint_eq(jdead_count(&d), 10);
		if (round == 2)
			cap = d.cap;
		if (round > 2)
			ck_assert_uint_eq(d.cap, cap);
		check_invariants(&d);
	}
	jdead_free(&d);
}
END_TEST

/* A burst (H held back, a million positions) then quiet: the prune gives
 * the memory back. */
START_TEST(prune_shrinks_after_burst)
{
	struct jdead d = { 0 };

	for (uint64_t p = 1; p <= 1000000; p++)
		ck_assert_int_eq(jdead_put(&d, p), 0);
	ck_assert_uint_ge(d.cap, 1000000);
	ck_assert_int_eq(jdead_prune_below(&d, 999990), 0);
	ck_assert_uint_eq(jdead_count(&d), 11);
	/* sized for the count before the prune, not shrunk yet */
	ck_assert_uint_ge(d.cap, 1000000);
	for (uint64_t p = 1000001; p <= 1000100; p++)
		ck_assert_int_eq(jdead_put(&d, p), 0);
	ck_assert_int_eq(jdead_prune_below(&d, 1000050), 0);
	ck_assert_uint_le(d.cap, 1024);
	for (uint64_t p = 1000050; p <= 1000100; p++)
		ck_assert(jdead_has(&d, p));
	check_invariants(&d);
	jdead_free(&d);
}
END_TEST

/* Random puts (mostly increasing, some stragglers, repeats), deletes,
 * lookups and prunes against a byte array indexed by position. */
START_TEST(model_random)
{
	enum { RANGE = 100000 };
	unsigned char *in = calloc(RANGE, 1);
	struct jdead d = { 0 };
	uint64_t next = 1, floor_ = 0;
	size_t count = 0, prunes = 0;

	srandom(7 + (unsigned)_i);
	for (int op = 0; op < 200000; op++) {
		int r = (int)(random() % 100);
		uint64_t p;

		if (r < 55 && next < RANGE) {
			p = next;
			next += 1 + (uint64_t)(random() % 3);
		} else if (r < 70) {
			p = floor_ + 1 + (uint64_t)random() % (next - floor_ + 1);
		} else if (r < 72) {
			p = floor_ + 1 + (uint64_t)random() % (next - floor_ + 1);
			if (p < RANGE && in[p]) {
				in[p] = 0;
				count--;
			}
			jdead_del(&d, p);
			continue;
		} else if (r < 99) {
			p = floor_ + 1 + (uint64_t)random() % (next - floor_ + 1);
			ck_assert_int_eq(jdead_has(&d, p), p < RANGE && in[p]);
			continue;
		} else {
			uint64_t m = floor_ + (uint64_t)random() % (next - floor_ + 1);

			ck_assert_int_eq(jdead_prune_below(&d, m), 0);
			for (uint64_t q = floor_; q < m && q < RANGE; q++) {
				if (in[q]) {
					in[q] = 0;
					count--;
				}
			}
			if (m > floor_)
				floor_ = m;
			ck_assert_uint_eq(jdead_count(&d), count);
			if (++prunes % 16 == 0)
				check_invariants(&d);
			continue;
		}
		if (p >= RANGE || p < floor_ || p == 0)
			continue;
		ck_assert_int_eq(jdead_put(&d, p), 0);
		if (!in[p]) {
			in[p] = 1;
			count++;
		}
		ck_assert_uint_eq(jdead_count(&d), count);
	}
	for (uint64_t p = 0; p < RANGE; p++)
		if (p)
			ck_assert_int_eq(jdead_has(&d, p), in[p]);
	check_invariants(&d);
	jdead_free(&d);
	free(in);
}
END_TEST

Suite *jdead_suite(void)
{
	Suite *s = suite_create("jdead");
	TCase *tc = tcase_create("jdead");

	tcase_add_test(tc, aside);
	tcase_add_test(tc, in_order_and_stragglers);
	tcase_add_test(tc, prune_keeps_array);
	tcase_add_test(tc, prune_shrinks_after_burst);
	tcase_add_loop_test(tc, model_random, 0, 3);
	suite_add_tcase(s, tc);
	return s;
}
