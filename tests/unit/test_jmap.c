/* test_jmap.c: the journal's uint64 hash map, and pruning it in place
 * (the dead set at every checkpoint). */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* Every entry within maxdisp of its home slot, and the counts right; in
 * a table being drained, the drained slots are tombstones and every entry
 * within omaxdisp of its home. */
static void check_invariants(const struct jmap *m)
{
	size_t n = 0, nd = 0, no = 0;

	for (size_t i = 0; m->old && i <= m->omask; i++) {
		uint64_t k = m->old[i].key;
		size_t home;

		if (i < m->ocur)
			ck_assert_uint_eq(k, JMAP_TOMB);
		if (!k || k == JMAP_TOMB)
			continue;
		no++;
		home = m->seq ? (size_t)k & m->omask : i;
		ck_assert_uint_le((i - home) & m->omask, m->omaxdisp);
		ck_assert_ptr_eq(jmap_get(m, k), &m->old[i]);
	}

	for (size_t i = 0; m->t && i <= m->mask; i++) {
		uint64_t k = m->t[i].key;
		size_t home;

		if (!k)
			continue;
		n++;
		home = jmap_home(m, k);
		if (m->seq)
			ck_assert_uint_eq(home, (size_t)k & m->mask);
		ck_assert_uint_le((i - home) & m->mask, m->maxdisp);
		nd += home != i;
	}
	ck_assert_uint_eq(n, m->nt);
	ck_assert_uint_eq(n + no, m->n);
	ck_assert_uint_eq(nd, m->ndisp);
	if (!nd)
		ck_assert_uint_eq(m->maxdisp, 0);
}

/* Random puts, deletes, lookups and prunes against a plain array, in both
 * placements: FIFO-like runs of consecutive keys, keys a table size apart
 * (they collide under seq), and random keys; a few keys stay put for long
 * (an open item) while the rest move on. */
static void model_run(int seq)
{
	enum { KEYS = 1u << 14 };
	static uint64_t val[KEYS];
	static unsigned char in[KEYS];
	struct jmap m = { 0 };
	uint32_t r = 2463534242u;
	uint64_t next = 1, low = 1;

	m.seq = seq;
	memset(in, 0, sizeof(in));
	for (int op = 0; op < 300000; op++) {
		uint64_t k;
		int what;

		r ^= r << 13;
		r ^= r >> 17;
		r ^= r << 5;
		what = (int)(r % 100);
		if (what < 40) { /* the next consecutive key */
			k = next++ % (KEYS - 1) + 1;
		} else if (what < 50) { /* a key 64 or 1024 apart from the last */
			k = (next + (r & 1 ? 64 : 1024)) % (KEYS - 1) + 1;
		} else if (what < 55) {
			k = r % (KEYS - 1) + 1;
		} else { /* remove the oldest, mostly */
			k = (what < 95 ? low++ : r) % (KEYS - 1) + 1;
			if (k == 7)
				continue; /* key 7 stays (the open item) */
			jmap_del(&m, k);
			in[k] = 0;
			ck_assert_ptr_null(jmap_get(&m, k));
			continue;
		}
		{
			struct jent *e = jmap_put(&m, k);

			ck_assert_ptr_nonnull(e);
			if (in[k])
				ck_assert_uint_eq(e->pos, val[k]);
			e->pos = val[k] = (uint64_t)op * 3 + 1;
			in[k] = 1;
		}
		if (op % 50000 == 49999) {
			check_invariants(&m);
			for (k = 1; k < KEYS; k++) {
				struct jent *e = jmap_get(&m, k);

				if (in[k]) {
					ck_assert_ptr_nonnull(e);
					ck_assert_uint_eq(e->pos, val[k]);
				} else {
					ck_assert_ptr_null(e);
				}
			}
		}
	}
	/* prune keeps exactly the keys at or above the bound */
	ck_assert_int_eq(jmap_prune_below(&m, KEYS / 2), 0);
	check_invariants(&m);
	for (uint64_t k = 1; k < KEYS; k++) {
		if (in[k] && k >= KEYS / 2)
			ck_assert_ptr_nonnull(jmap_get(&m, k));
		else
			ck_assert_ptr_null(jmap_get(&m, k));
	}
	jmap_free(&m);
	ck_assert_int_eq(m.seq, seq); /* kept for reuse */
}

START_TEST(model_mixed_placement)
{
	model_run(0);
}
END_TEST

START_TEST(model_seq_placement)
{
	model_run(1);
}
END_TEST

/* seq: keys a table size apart collide and are displaced; once the
 * displaced ones are gone, maxdisp is back to 0 (deletions shift nothing). */
START_TEST(seq_displacement_heals)
{
	struct jmap m = { 0 };
	size_t cap;

	m.seq = 1;
	for (uint64_t k = 1; k <= 30; k++)
		ck_assert_ptr_nonnull(jmap_put(&m, k));
	cap = m.mask + 1;
	for (uint64_t k = 1; k <= 10; k++) /* the same home slots as 1..10 */
		ck_assert_ptr_nonnull(jmap_put(&m, k + cap));
	ck_assert_uint_eq(m.mask + 1, cap);
	ck_assert_uint_gt(m.maxdisp, 0);
	ck_assert_uint_gt(m.ndisp, 0);
	check_invariants(&m);
	for (uint64_t k = 1; k <= 5; k++) {
		jmap_del(&m, k);
		check_invariants(&m);
	}
	for (uint64_t k = 1; k <= 10; k++) {
		jmap_del(&m, k + cap);
		check_invariants(&m);
	}
	ck_assert_uint_eq(m.ndisp, 0);
	ck_assert_uint_eq(m.maxdisp, 0);
	for (uint64_t k = 6; k <= 30; k++)
		ck_assert_ptr_nonnull(jmap_get(&m, k));
	jmap_free(&m);
}
END_TEST

/* seq: consecutive keys need no probing, and deleting one shifts nothing
 * (maxdisp stays 0), however many are live. */
START_TEST(seq_consecutive_keys)
{
	struct jmap m = { 0 };

	m.seq = 1;
	for (uint64_t k = 1000; k < 101000; k++)
		ck_assert_ptr_nonnull(jmap_put(&m, k));
	ck_assert_uint_eq(m.maxdisp, 0);
	for (uint64_t k = 1000; k < 51000; k++)
		jmap_del(&m, k);
	ck_assert_uint_eq(m.n, 50000);
	for (uint64_t k = 1000; k < 101000; k++)
		ck_assert(!jmap_get(&m, k) == (k < 51000));
	check_invariants(&m);
	jmap_free(&m);
}
END_TEST

/* Growth drains the full table into the new one a few slots per put and
 * delete: after the put that grows it, the old table is still there; every
 * key stays findable with its value while it drains, whether it is
 * looked up, put again (the same entry), deleted or iterated; the old
 * table goes once drained, and a prune or a clear meanwhile loses
 * nothing. */
static void drain_run(int seq)
{
	struct jmap m = { 0 };
	uint64_t k, top = 0, top0;
	size_t cap, seen;
	struct jent *e;

	m.seq = seq;
	/* fill up to the growth */
	do {
		e = jmap_put(&m, ++top);
		ck_assert_ptr_nonnull(e);
		e->pos = top * 7;
	} while (!m.old || top < 3000);
	cap = m.mask + 1;
	ck_assert_ptr_nonnull(m.old);
	ck_assert_uint_lt(m.nt, m.n); /* not rehashed at once */
	check_invariants(&m);
	/* a key still in the old table: put again gives its entry */
	k = 0;
	for (size_t i = m.ocur; i <= m.omask; i++) /* (the last one found) */
		if (m.old[i].key != 0 && m.old[i].key != JMAP_TOMB)
			k = m.old[i].key;
	ck_assert_uint_ge(k, 1);
	e = jmap_put(&m, k);
	ck_assert_uint_eq(e->pos, k * 7);
	/* deletes of every third key while it drains */
	top0 = top;
	for (k = 1; k <= top0; k += 3) {
		jmap_del(&m, k);
		ck_assert_ptr_null(jmap_get(&m, k));
		if (m.old && k % 64 == 1)
			check_invariants(&m);
	}
	seen = 0;
	for (size_t i = 0; (e = jmap_next(&m, &i));) {
		ck_assert_uint_eq(e->pos, e->key * 7);
		ck_assert_uint_ne(e->key % 3, 1);
		seen++;
	}
	ck_assert_uint_eq(seen, m.n);
	while (m.old) {
		e = jmap_put(&m, ++top);
		e->pos = top * 7;
	}
	ck_assert_uint_eq(m.mask + 1, cap);
	check_invariants(&m);
	for (k = 1; k <= top; k++) {
		e = jmap_get(&m, k);
		if (k % 3 == 1 && k <= top0) {
			ck_assert_ptr_null(e);
		} else {
			ck_assert_ptr_nonnull(e);
			ck_assert_uint_eq(e->pos, k * 7);
		}
	}
	/* grow again, then prune and clear while draining */
	while (!m.old) {
		e = jmap_put(&m, ++top);
		e->pos = top * 7;
	}
	ck_assert_int_eq(jmap_prune_below(&m, top - 100), 0);
	ck_assert_ptr_null(m.old);
	ck_assert_uint_eq(m.n, 101);
	for (k = top - 100; k <= top; k++)
		ck_assert_uint_eq(jmap_get(&m, k)->pos, k * 7);
	check_invariants(&m);
	while (!m.old)
		jmap_put(&m, ++top);
	jmap_clear(&m);
	ck_assert_uint_eq(m.n, 0);
	ck_assert_ptr_null(jmap_get(&m, top));
	ck_assert_ptr_nonnull(jmap_put(&m, top));
	ck_assert_uint_eq(m.n, 1);
	jmap_free(&m);
}

START_TEST(drain_seq)
{
	drain_run(1);
}
END_TEST

START_TEST(drain_mixed)
{
	drain_run(0);
}
END_TEST

Suite *jmap_suite(void)
{
	Suite *s = suite_create("jmap");
	TCase *tc = tcase_create("jmap");

	tcase_add_test(tc, put_get_del);
	tcase_add_test(tc, prune_below_keeps_size);
	tcase_add_test(tc, prune_below_shrinks_after_burst);
	tcase_add_test(tc, model_mixed_placement);
	tcase_add_test(tc, model_seq_placement);
	tcase_add_test(tc, seq_consecutive_keys);
	tcase_add_test(tc, seq_displacement_heals);
	tcase_add_test(tc, drain_seq);
	tcase_add_test(tc, drain_mixed);
	suite_add_tcase(s, tc);
	return s;
}
