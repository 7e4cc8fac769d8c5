/* test_client_hist.c: the log-bucketed latency histogram (client/lathist.h). */
#include <check.h>
#include <stdlib.h>

#include "../../client/lathist.h"

START_TEST(test_buckets_monotonic)
{
	/* Every value lies within its bucket, and buckets are ordered. */
	uint64_t prev_high = 0;

	for (unsigned i = 0; i < LATHIST_BUCKETS; i++) {
		uint64_t hi = lathist_bucket_high(i);

		ck_assert(i == 0 || hi > prev_high);
		ck_assert_uint_eq(lathist_index(hi), i);
		ck_assert_uint_eq(lathist_index(prev_high + (i ? 1 : 0)), i);
		prev_high = hi;
	}
	ck_assert_uint_eq(prev_high, UINT64_MAX);
	ck_assert_uint_eq(lathist_index(UINT64_MAX), LATHIST_BUCKETS - 1);
}
END_TEST

START_TEST(test_precision)
{
	/* The reported bucket bound is within 1/32 of the value. */
	for (uint64_t v = 1; v < (1ull << 40); v = v * 3 + 1) {
		uint64_t hi = lathist_bucket_high(lathist_index(v));

		ck_assert(hi >= v);
		ck_assert((double)(hi - v) <= (double)v / LATHIST_SUB + 1);
	}
}
END_TEST

START_TEST(test_percentiles)
{
	struct lathist *h = malloc(sizeof *h);

	lathist_init(h);
	ck_assert_uint_eq(lathist_percentile(h, 50), 0);
	for (uint64_t v = 1; v <= 1000; v++)
		lathist_add(h, v * 1000); /* 1 us .. 1 ms in ns */
	ck_assert_uint_eq(h->count, 1000);
	ck_assert_uint_eq(h->min, 1000);
	ck_assert_uint_eq(h->max, 1000000);
	uint64_t p50 = lathist_percentile(h, 50), p99 = lathist_percentile(h, 99);

	ck_assert(p50 >= 500000 && p50 <= 500000 + 500000 / 32);
	ck_assert(p99 >= 990000 && p99 <= 1000000);
	ck_assert_uint_eq(lathist_percentile(h, 100), 1000000);
	ck_assert_uint_eq(lathist_percentile(h, 0), 1000);
	ck_assert(lathist_percentile(h, 99.9) <= 1000000);
	free(h);
}
END_TEST

START_TEST(test_merge)
{
	struct lathist *a = malloc(sizeof *a), *b = malloc(sizeof *b);

	lathist_init(a);
	lathist_init(b);
	for (int i = 0; i < 90; i++)
		lathist_add(a, 10);
	for (int i = 0; i < 10; i++)
		lathist_add(b, 5000);
	lathist_merge(a, b);
	ck_assert_uint_eq(a->count, 100);
	ck_assert_uint_eq(a->sum, 90 * 10 + 10 * 5000);
	ck_assert_uint_eq(lathist_percentile(a, 50), 10);
	ck_assert_uint_eq(lathist_percentile(a, 90), 10);
	ck_assert_uint_ge(lathist_percentile(a, 91), 5000);
	ck_assert_uint_eq(a->max, 5000);
	ck_assert_uint_eq(a->min, 10);
	free(a);
	free(b);
}
END_TEST

Suite *lathist_suite(void)
{
	Suite *s = suite_create("lathist");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_buckets_monotonic);
	tcase_add_test(tc, test_precision);
	tcase_add_test(tc, test_percentiles);
	tcase_add_test(tc, test_merge);
	suite_add_tcase(s, tc);
	return s;
}
