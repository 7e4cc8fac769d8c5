/* test_qhist.c: a queue's history ring (server/qhist.h), alone and as the
 * registry samples it (qreg_tick, queue_history, qreg_history). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "../../server/queue.h"

static void *no_memory(size_t n)
{
	(void)n;
	return NULL;
}

/* Samples h at position pos from totals in/out and depth; checks the
 * deltas it reports. */
static void sample(struct qhist *h, unsigned pos, uint64_t in, uint64_t out, uint64_t depth,
		   uint64_t want_in, uint64_t want_out)
{
	uint64_t din, dout;

	ck_assert_int_eq(qhist_sample(h, pos, in, out, depth, &din, &dout), 0);
	ck_assert_uint_eq(din, want_in);
	ck_assert_uint_eq(dout, want_out);
}

/* Quiet samples keep no ring; the first change makes one whose earlier
 * slots read quiet at the depth before; reads come oldest first. */
START_TEST(lazy_ring_and_order)
{
	struct qhist h;
	struct qhist_slot s[QHIST_SLOTS];

	qhist_init(&h, 100, 40, 60);
	sample(&h, 0, 100, 40, 60, 0, 0);
	sample(&h, 1, 100, 40, 60, 0, 0);
	ck_assert_ptr_null(h.ring);
	qhist_read(&h, 1, s);
	for (unsigned i = 0; i < QHIST_SLOTS; i++) {
		ck_assert_uint_eq(s[i].in, 0);
		ck_assert_uint_eq(s[i].out, 0);
		ck_assert_uint_eq(s[i].depth, 60);
	}
	sample(&h, 2, 130, 45, 85, 30, 5);
	ck_assert_ptr_nonnull(h.ring);
	sample(&h, 3, 131, 85, 46, 1, 40);
	qhist_read(&h, 3, s);
	ck_assert_uint_eq(s[QHIST_SLOTS - 1].in, 1);
	ck_assert_uint_eq(s[QHIST_SLOTS - 1].out, 40);
	ck_assert_uint_eq(s[QHIST_SLOTS - 1].depth, 46);
	ck_assert_uint_eq(s[QHIST_SLOTS - 2].in, 30);
	ck_assert_uint_eq(s[QHIST_SLOTS - 2].out, 5);
	ck_assert_uint_eq(s[QHIST_SLOTS - 2].depth, 85);
	for (unsigned i = 0; i < QHIST_SLOTS - 2; i++) {
		ck_assert_uint_eq(s[i].in + s[i].out, 0);
		ck_assert_uint_eq(s[i].depth, 60);
	}
	qhist_free(&h);
}
END_TEST

/* The ring wraps: after more than a window the oldest slots are gone; a
 * whole window without change frees it, and it reads the same after. */
START_TEST(wraps_and_frees_when_quiet)
{
	struct qhist h;
	struct qhist_slot s[QHIST_SLOTS], t[QHIST_SLOTS];
	unsigned pos;
	uint64_t in = 0;

	qhist_init(&h, 0, 0, 0);
	for (pos = 0; pos < QHIST_SLOTS + 10; pos++) {
		in += pos + 1;
		sample(&h, pos, in, 0, in, pos + 1, 0);
	}
	qhist_read(&h, pos - 1, s);
	for (unsigned i = 0; i < QHIST_SLOTS; i++)
		ck_assert_uint_eq(s[i].in, 11 + i); /* slots 11 .. 70 */
	/* a depth change alone (expiry, flush) is a change */
	sample(&h, pos++, in, 0, 5, 0, 0);
	for (unsigned i = 0; i < QHIST_SLOTS - 1; i++, pos++)
		sample(&h, pos, in, 0, 5, 0, 0);
	ck_assert_ptr_nonnull(h.ring);
	qhist_read(&h, pos - 1, s);
	sample(&h, pos, in, 0, 5, 0, 0);
	ck_assert_ptr_null(h.ring);
	qhist_read(&h, pos, t);
	for (unsigned i = 0; i < QHIST_SLOTS; i++) {
		ck_assert_uint_eq(t[i].in + t[i].out, 0);
		ck_assert_uint_eq(t[i].depth, 5);
	}
	/* the window before the last sample still held the change */
	ck_assert_uint_eq(s[0].depth, 5);
	ck_assert_uint_eq(s[0].in, 0);
	qhist_free(&h);
}
END_TEST

/* Counts above 32 bits saturate; totals that go back (never, but) give
 * no negative slot. */
START_TEST(saturates)
{
	struct qhist h;
	struct qhist_slot s[QHIST_SLOTS];

	qhist_init(&h, 10, 10, 0);
	sample(&h, 0, 10 + (1ull << 33), 5, 1ull << 40, 1ull << 33, 0);
	qhist_read(&h, 0, s);
	ck_assert_uint_eq(s[QHIST_SLOTS - 1].in, UINT32_MAX);
	ck_assert_uint_eq(s[QHIST_SLOTS - 1].out, 0);
	ck_assert_uint_eq(s[QHIST_SLOTS - 1].depth, UINT32_MAX);
	qhist_free(&h);
}
END_TEST

/* Without memory for the ring the slot reads quiet and the loss is
 * counted until it leaves the window; the next change tries again. */
START_TEST(out_of_memory)
{
	struct qhist h;
	uint64_t din, dout;

	qhist_init(&h, 0, 0, 0);
	tern_malloc = no_memory;
	ck_assert_int_eq(qhist_sample(&h, 0, 7, 0, 7, &din, &dout), TERN_ENOMEM);
	tern_malloc = malloc;
	ck_assert_uint_eq(din, 7);
	ck_assert_ptr_null(h.ring);
	ck_assert_uint_eq(h.lost, QHIST_SLOTS);
	sample(&h, 1, 9, 0, 9, 2, 0);
	ck_assert_ptr_nonnull(h.ring);
	ck_assert_uint_eq(h.lost, QHIST_SLOTS - 1);
	qhist_free(&h);
}
END_TEST

static struct item *mk(const char *body)
{
	struct item *it = item_new((uint32_t)strlen(body));

	memcpy(it->data, body, strlen(body));
	return it;
}

/* The registry samples each queue every QHIST_SLOT_MS of its tick; a
 * queue's history and the server's sum show what went in and out. */
START_TEST(registry_samples)
{
	struct qreg *r;
	struct queue_conf conf;
	struct queue *a, *b;
	struct queue_history h;
	struct item *it;
	uint64_t t;
	int64_t mono;

	queue_conf_default(&conf);
	ck_assert_int_eq(qreg_new(NULL, &r), 0);
	mono = tern_mono_ms(); /* not before the registry's start */
	ck_assert_int_eq(qreg_get(r, "a", 1, &conf, &a), 0);
	ck_assert_int_eq(qreg_get(r, "b", 1, &conf, &b), 0);
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(queue_push(a, mk("x"), &t, NULL), 0);
	ck_assert_int_eq(queue_push(b, mk("y"), &t, NULL), 0);
	queue_history(a, &h);
	ck_assert_uint_eq(h.filled, 0);
	ck_assert_uint_eq(h.in_now, 5);
	ck_assert_uint_eq(h.depth_now, 5);
	qreg_tick(r, tern_now_ms(), mono + QHIST_SLOT_MS / 2); /* not yet */
	queue_history(a, &h);
	ck_assert_uint_eq(h.filled, 0);
	qreg_tick(r, tern_now_ms(), mono + QHIST_SLOT_MS + 1);
	ck_assert_int_eq(queue_pop(a, QUEUE_POP_REMOVE, 1, &it), 0);
	item_unref(it);
	queue_history(a, &h);
	ck_assert_uint_eq(h.filled, 1);
	ck_assert_uint_eq(h.slot[QHIST_SLOTS - 1].in, 5);
	ck_assert_uint_eq(h.slot[QHIST_SLOTS - 1].out, 0);
	ck_assert_uint_eq(h.slot[QHIST_SLOTS - 1].depth, 5);
	ck_assert_uint_eq(h.in_now, 0);
	ck_assert_uint_eq(h.out_now, 1);
	ck_assert_uint_eq(h.depth_now, 4);
	qreg_history(r, &h);
	ck_assert_uint_eq(h.filled, 1);
	ck_assert_uint_eq(h.slot[QHIST_SLOTS - 1].in, 6);
	ck_assert_uint_eq(h.slot[QHIST_SLOTS - 1].depth, 6);
	ck_assert_uint_eq(h.out_now, 1);
	ck_assert_uint_eq(h.depth_now, 5);
	qreg_tick(r, tern_now_ms(), mono + 2 * QHIST_SLOT_MS + 2);
	queue_history(a, &h);
	ck_assert_uint_eq(h.filled, 2);
	ck_assert_uint_eq(h.slot[QHIST_SLOTS - 1].out, 1);
	ck_assert_uint_eq(h.slot[QHIST_SLOTS - 1].depth, 4);
	ck_assert_uint_eq(h.slot[QHIST_SLOTS - 2].in, 5);
	qreg_free(r);
}
END_TEST

Suite *qhist_suite(void)
{
	Suite *s = suite_create("qhist");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, lazy_ring_and_order);
	tcase_add_test(tc, wraps_and_frees_when_quiet);
	tcase_add_test(tc, saturates);
	tcase_add_test(tc, out_of_memory);
	tcase_add_test(tc, registry_samples);
	suite_add_tcase(s, tc);
	return s;
}
