/* test_block.c: the blocks kept for reuse (lib/tern.h tern_block_*): the
 * keeping thread gets back what it freed, of the right size, other threads
 * never take or keep a block, and what is kept is bounded. */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/tern.h"

#define CAP_BYTES ((size_t)4 << 20)
#define BIG ((size_t)64 << 10) /* the largest class */

static void setup(void)
{
	tern_block_keep();
}

/* Class sizes: an eighth of a power of two wide, none at or below 64
 * bytes nor above 64 KiB. */
START_TEST(test_sizes)
{
	ck_assert_uint_eq(tern_block_size(64), 64);
	ck_assert_uint_eq(tern_block_size(65), 72);
	ck_assert_uint_eq(tern_block_size(602), 640);
	ck_assert_uint_eq(tern_block_size(1024), 1024);
	ck_assert_uint_eq(tern_block_size(1025), 1152);
	ck_assert_uint_eq(tern_block_size(4186), 4608);
	ck_assert_uint_eq(tern_block_size(BIG), BIG);
	ck_assert_uint_eq(tern_block_size(BIG + 1), BIG + 1);
	for (size_t n = 65; n <= BIG; n += 37) {
		size_t s = tern_block_size(n);

		ck_assert_uint_ge(s, n);
		ck_assert_uint_le(s - n, n / 8);
	}
}
END_TEST

/* A freed block comes back for any request of its class, whole. */
START_TEST(test_reuse)
{
	unsigned char *p = tern_block_alloc(1000), *q;

	ck_assert_ptr_nonnull(p);
	memset(p, 0xa5, tern_block_size(1000));
	tern_block_free(p, 1000);
	q = tern_block_alloc(1001);
	ck_assert_ptr_eq(q, p);
	memset(q, 0x5a, tern_block_size(1001));
	tern_block_free(q, 1001);
	/* another class does not take it */
	q = tern_block_alloc(2000);
	ck_assert_ptr_ne(q, p);
	tern_block_free(q, 2000);
	tern_block_free(NULL, 10);
}
END_TEST

/* An item reused from a kept block starts afresh. */
START_TEST(test_item_reuse)
{
	struct item *a = item_new(500), *b;

	ck_assert_ptr_nonnull(a);
	a->id = 7;
	a->flags = 3;
	a->state = ITEM_DELAYED;
	memset(a->data, 'x', 500);
	item_ref(a);
	item_unref(a);
	item_unref(a);
	b = item_new(510);
	ck_assert_ptr_eq(b, a);
	ck_assert_uint_eq(b->refcount, 1);
	ck_assert_uint_eq(b->len, 510);
	ck_assert_uint_eq(b->id, 0);
	ck_assert_uint_eq(b->flags, 0);
	ck_assert_uint_eq(b->state, 0);
	ck_assert_int_eq(memcmp(b->data + 510, "\r\n", 2), 0);
	item_unref(b);
}
END_TEST

static void *alloc_elsewhere(void *arg)
{
	return tern_block_alloc(*(size_t *)arg);
}

static void *free_elsewhere(void *arg)
{
	tern_block_free(arg, 3000);
	return NULL;
}

/* Another thread neither takes a kept block nor keeps the one it frees. */
START_TEST(test_other_thread)
{
	size_t n = 3000;
	void *p = tern_block_alloc(n), *q, *r;
	pthread_t t;

	tern_block_free(p, n); /* kept */
	ck_assert_int_eq(pthread_create(&t, NULL, alloc_elsewhere, &n), 0);
	ck_assert_int_eq(pthread_join(t, &q), 0);
	ck_assert_ptr_nonnull(q);
	ck_assert_ptr_ne(q, p); /* p is still kept: malloc cannot return it */
	r = tern_block_alloc(n);
	ck_assert_ptr_eq(r, p);
	/* q, freed on the other thread, goes back to malloc */
	ck_assert_int_eq(pthread_create(&t, NULL, free_elsewhere, q), 0);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	tern_block_free(r, n);
	ck_assert_ptr_eq(tern_block_alloc(n), p);
	tern_block_free(p, n);
}
END_TEST

/* At most 4 MiB is kept: of 80 blocks of 64 KiB freed, the first K are
 * kept, K at most 64 (earlier tests may have left a few small blocks kept,
 * less than four of these), and come back last freed first. */
START_TEST(test_cap)
{
	enum { N = 80 };
	void *p[N], *q[N];
	int k = 0;

	for (int i = 0; i < N; i++) {
		p[i] = tern_block_alloc(BIG);
		ck_assert_ptr_nonnull(p[i]);
	}
	for (int i = 0; i < N; i++)
		tern_block_free(p[i], BIG);
	for (int i = 0; i < N; i++) {
		q[i] = tern_block_alloc(BIG);
		ck_assert_ptr_nonnull(q[i]);
	}
	while (k < N && q[0] != p[k])
		k++;
	k++; /* q[0] is the last one kept, p[k - 1] */
	ck_assert_int_le(k, (int)(CAP_BYTES / BIG));
	ck_assert_int_ge(k, (int)(CAP_BYTES / BIG) - 4);
	for (int i = 0; i < k; i++)
		ck_assert_ptr_eq(q[i], p[k - 1 - i]);
	for (int i = 0; i < N; i++)
		tern_block_free(q[i], BIG);
}
END_TEST

Suite *block_suite(void)
{
	Suite *s = suite_create("block");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, test_sizes);
	tcase_add_test(tc, test_reuse);
	tcase_add_test(tc, test_item_reuse);
	tcase_add_test(tc, test_other_thread);
	tcase_add_test(tc, test_cap);
	suite_add_tcase(s, tc);
	return s;
}
