/* test_jmap.c: the journal's uint64 hash map, and pruning it in place
 * (the dead set at every checkpoint). */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "../../journal/jmap.h"

START_TEST(put_get_del)
{
	struct jmap m = { 0 };

	for (uint64_t k = 1; k <= 5000; k++) {
		struct jent *e = jmap_put(&m, k * 568);

		ck_assert_ptr_nonnull(e);
		e->pos = k;
	}
	ck_assert_uint_eq(m.n, 5000);
	for (uint64_t k = 1; k <= 5000; k += 2)
		jmap_del(&m, k * 568);
	ck_assert_uint_eq(m.n, 2500);
	for (uint64_t k = 1; k <= 5000; k++) {
		struct jent *e = jmap_get(&m, k * 568);

		if (k % 2) {
			ck_assert_ptr_null(e);
		} else {
			ck_assert_ptr_nonnull(e);
			ck_assert_uint_eq(e->pos, k);
		}
	}
	jmap_free(&m);
}
END_TEST

/* Keys below the bound go, the rest stay findable, and a table refilled at
 * the same pace keeps its size (no growth, no rehash, after a prune). */
START_TEST(prune_below_keeps_size)
{
	struct jmap m = { 0 };
	size_t cap;

	for (uint64_t k = 1; k <= 40000; k++)
		ck_assert_ptr_nonnull(jmap_put(&m, k));
	cap = m.mask + 1;
	ck_assert_int_eq(jmap_prune_below(&m, 39001), 0);
	ck_assert_uint_eq(m.n, 1000);
	ck_assert_uint_eq(m.mask + 1, cap);
	for (uint64_t k = 1; k <= 40000; k++) {
		if (k < 39001)
			ck_assert_ptr_null(jmap_get(&m, k));
		else
			ck_assert_ptr_nonnull(jmap_get(&m, k));
	}
	for (uint64_t k = 40001; k <= 79000; k++)
		ck_assert_ptr_nonnull(jmap_put(&m, k));
	ck_assert_uint_eq(m.n, 40000);
	ck_assert_uint_eq(m.mask + 1, cap);
	/* everything below: empty, same size */
	ck_assert_int_eq(jmap_prune_below(&m, 100000), 0);
	ck_assert_uint_eq(m.n, 0);
	ck_assert_uint_eq(m.mask + 1, cap);
	ck_assert_ptr_null(jmap_get(&m, 79000));
	jmap_free(&m);
}
END_TEST

/* After a burst, a table much larger than the last count needs shrinks. */
START_TEST(prune_below_shrinks_after_burst)
{
	struct jmap m = { 0 };

	for (uint64_t k = 1; k <= 100000; k++)
		ck_assert_ptr_nonnull(jmap_put(&m, k));
	ck_assert_int_eq(jmap_prune_below(&m, 100001), 0);
	ck_assert_uint_ge(m.mask + 1, 131072); /* the burst's count still needs it */
	for (uint64_t k = 200001; k <= 200100; k++)
		ck_assert_ptr_nonnull(jmap_put(&m, k));
	ck_assert_int_eq(jmap_prune_below(&m, 200051), 0);
	ck_assert_uint_le(m.mask + 1, 256);
	ck_assert_uint_eq(m.n, 50);
	for (uint64_t k = 200001; k <= 200100; k++) {
		if (k < 200051)
			ck_assert_ptr_null(jmap_get(&m, k));
		else
			ck_assert_ptr_nonnull(jmap_get(&m, k));
	}
	jmap_free(&m);
}
END_TEST

Suite *jmap_suite(void)
{
	Suite *s = suite_create("jmap");
	TCase *tc = tcase_create("jmap");

	tcase_add_test(tc, put_get_del);
	tcase_add_test(tc, prune_below_keeps_size);
	tcase_add_test(tc, prune_below_shrinks_after_burst);
	suite_add_tcase(s, tc);
	return s;
}
