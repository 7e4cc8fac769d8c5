/* test_client_codec.c: tern-load's self-verifying bodies and the checker
 * (client/loadcodec.h). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "../../client/loadcodec.h"

START_TEST(test_roundtrip)
{
	char buf[4096];
	struct loadcodec_hdr h;

	for (size_t len = LOADCODEC_HDR; len < sizeof buf; len += 97) {
		loadcodec_encode(buf, len, 3, 7, 123456789012ull + len);
		ck_assert_int_eq(loadcodec_decode(buf, len, &h), LOADCODEC_OK);
		ck_assert_uint_eq(h.queue, 3);
		ck_assert_uint_eq(h.producer, 7);
		ck_assert_uint_eq(h.seq, 123456789012ull + len);
	}
}
END_TEST

START_TEST(test_deterministic)
{
	char a[600], b[600];

	loadcodec_encode(a, sizeof a, 1, 2, 3);
	loadcodec_encode(b, sizeof b, 1, 2, 3);
	ck_assert(memcmp(a, b, sizeof a) == 0);
	loadcodec_encode(b, sizeof b, 1, 2, 4);
	ck_assert(memcmp(a, b, sizeof a) != 0);
}
END_TEST

START_TEST(test_detects_damage)
{
	char buf[512];
	struct loadcodec_hdr h;

	/* Every single-byte change anywhere is caught. */
	for (size_t i = 0; i < sizeof buf; i++) {
		loadcodec_encode(buf, sizeof buf, 0, 0, 42);
		buf[i] ^= 0x20;
		ck_assert_int_lt(loadcodec_decode(buf, sizeof buf, &h), 0);
	}
	loadcodec_encode(buf, sizeof buf, 0, 0, 42);
	ck_assert_int_eq(loadcodec_decode(buf, sizeof buf - 1, &h), LOADCODEC_ECRC);
	ck_assert_int_eq(loadcodec_decode(buf, 10, &h), LOADCODEC_ESHORT);
	memset(buf, 'x', sizeof buf);
	ck_assert_int_eq(loadcodec_decode(buf, sizeof buf, &h), LOADCODEC_EMAGIC);
}
END_TEST

START_TEST(test_size_range)
{
	size_t lo = 100, hi = 0;

	for (uint64_t s = 0; s < 10000; s++) {
		size_t n = loadcodec_size(0, 1, s, 100, 200);

		ck_assert(n >= 100 && n <= 200);
		ck_assert_uint_eq(n, loadcodec_size(0, 1, s, 100, 200));
		if (n > hi)
			hi = n;
		if (n < lo)
			lo = n;
	}
	ck_assert_uint_eq(lo, 100);
	ck_assert_uint_eq(hi, 200);
	ck_assert_uint_eq(loadcodec_size(5, 5, 5, 512, 512), 512);
}
END_TEST

/* Feeds seq through the checker as producer p of queue 0. */
static enum lcheck_outcome feed(struct lcheck *c, struct lcheck_stream *s, unsigned q,
				unsigned p, uint64_t seq)
{
	char buf[64];

	loadcodec_encode(buf, sizeof buf, q, p, seq);
	return lcheck_read(c, s, q, buf, sizeof buf, 64, 64);
}

START_TEST(test_checker_kinds)
{
	struct lcheck *c = lcheck_new(2, 2);
	struct lcheck_stream *s = lcheck_stream_new(2);
	struct lcheck_counts k;
	char buf[64];

	ck_assert_ptr_nonnull(c);
	ck_assert_ptr_nonnull(s);
	for (uint64_t i = 0; i < 10; i++)
		ck_assert_int_eq(lcheck_stored(c, 0, 0, i), 0);
	/* read 0 1 2 2(dup) 4 3(reordered) 6 7 8 9; 5 lost */
	ck_assert_int_eq(feed(c, s, 0, 0, 0), LCHECK_OK);
	ck_assert_int_eq(feed(c, s, 0, 0, 1), LCHECK_OK);
	ck_assert_int_eq(feed(c, s, 0, 0, 2), LCHECK_OK);
	ck_assert_int_eq(feed(c, s, 0, 0, 2), LCHECK_DUPLICATE);
	ck_assert_int_eq(feed(c, s, 0, 0, 4), LCHECK_OK);
	ck_assert_int_eq(feed(c, s, 0, 0, 3), LCHECK_REORDERED);
	for (uint64_t i = 6; i < 10; i++)
		ck_assert_int_eq(feed(c, s, 0, 0, i), LCHECK_OK);
	/* a body of queue 1 read from queue 0 is corrupt */
	ck_assert_int_eq(feed(c, s, 0, 1, 0) == LCHECK_OK, 1); /* producer 1 fine */
	loadcodec_encode(buf, sizeof buf, 1, 0, 0);
	ck_assert_int_eq(lcheck_read(c, s, 0, buf, sizeof buf, 64, 64), LCHECK_CORRUPT);
	/* wrong size for the range */
	loadcodec_encode(buf, 40, 0, 0, 11);
	ck_assert_int_eq(lcheck_read(c, s, 0, buf, 40, 64, 64), LCHECK_CORRUPT);
	/* unknown producer */
	loadcodec_encode(buf, sizeof buf, 0, 9, 0);
	ck_assert_int_eq(lcheck_read(c, s, 0, buf, sizeof buf, 64, 64), LCHECK_CORRUPT);
	lcheck_finish(c, 0, NULL, &k);
	ck_assert_uint_eq(k.read, 14);
	ck_assert_uint_eq(k.duplicate, 1);
	ck_assert_uint_eq(k.reordered, 1);
	ck_assert_uint_eq(k.corrupt, 3);
	ck_assert_uint_eq(k.lost, 1);
	lcheck_finish(c, 1, NULL, &k);
	ck_assert_uint_eq(k.read + k.lost + k.corrupt, 0);
	lcheck_stream_free(s);
	lcheck_free(c);
}
END_TEST

START_TEST(test_checker_streams)
{
	/* Two consumers sharing a queue: each sees an increasing subsequence,
	 * interleaved differently; that is not reordering. */
	struct lcheck *c = lcheck_new(1, 1);
	struct lcheck_stream *a = lcheck_stream_new(1), *b = lcheck_stream_new(1);
	struct lcheck_counts k;

	for (uint64_t i = 0; i < 6; i++)
		lcheck_stored(c, 0, 0, i);
	ck_assert_int_eq(feed(c, a, 0, 0, 1), LCHECK_OK);
	ck_assert_int_eq(feed(c, b, 0, 0, 0), LCHECK_OK);
	ck_assert_int_eq(feed(c, b, 0, 0, 3), LCHECK_OK);
	ck_assert_int_eq(feed(c, a, 0, 0, 2), LCHECK_OK);
	ck_assert_int_eq(feed(c, a, 0, 0, 5), LCHECK_OK);
	ck_assert_int_eq(feed(c, b, 0, 0, 4), LCHECK_OK);
	lcheck_finish(c, 0, NULL, &k);
	ck_assert_uint_eq(k.reordered + k.duplicate + k.lost + k.corrupt, 0);
	lcheck_stream_free(a);
	lcheck_stream_free(b);
	lcheck_free(c);
}
END_TEST

START_TEST(test_checker_large_and_expected)
{
	/* Crosses bitmap chunks; a consume-only run judges loss against the
	 * expected counts instead of the stored bitmap. */
	struct lcheck *c = lcheck_new(1, 2);
	struct lcheck_counts k;
	uint64_t expected[2] = { 600000, 3 };

	for (uint64_t i = 0; i < 600000; i++)
		if (i != 300000)
			feed(c, NULL, 0, 0, i);
	lcheck_finish(c, 0, expected, &k);
	ck_assert_uint_eq(k.lost, 1 + 3);
	ck_assert_uint_eq(k.duplicate, 0);
	lcheck_free(c);
}
END_TEST

Suite *loadcodec_suite(void)
{
	Suite *s = suite_create("loadcodec");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_roundtrip);
	tcase_add_test(tc, test_deterministic);
	tcase_add_test(tc, test_detects_damage);
	tcase_add_test(tc, test_size_range);
	tcase_add_test(tc, test_checker_kinds);
	tcase_add_test(tc, test_checker_streams);
	tcase_add_test(tc, test_checker_large_and_expected);
	tcase_set_timeout(tc, 30);
	suite_add_tcase(s, tc);
	return s;
}
