/* jmap.c: uint64 -> entry hash map for the journal's in-memory indexes. */
#include "jmap.h"

#include <stdlib.h>
#include <string.h>

static size_t jmap_slot(const struct jmap *m, uint64_t key, size_t mask)
{
	if (m->seq)
		return (size_t)key & mask;
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdULL;
	key ^= key >> 33;
	return (size_t)key & mask;
}

size_t jmap_home(const struct jmap *m, uint64_t key)
{
	return jmap_slot(m, key, m->mask);
}

/* JMAP_STEP: old slots drained per jmap_put and jmap_del.  A table is
 * drained before the new one fills: it grows at 3/4 of its n slots into
 * 2n, which takes 3n/4 more puts to fill, and n / JMAP_STEP drain it. */
#ifndef JMAP_STEP
#define JMAP_STEP 8
#endif

/* The old table's entry for key, or NULL.  Its runs hold no new empty
 * slots (deleted and drained ones are tombstones), and no entry sits
 * further than omaxdisp from home. */
static struct jent *old_get(const struct jmap *m, uint64_t key)
{
	size_t i = jmap_slot(m, key, m->omask);

	for (size_t d = 0; d <= m->omaxdisp; d++, i = (i + 1) & m->omask) {
		if (m->old[i].key == key)
			return &m->old[i];
		if (m->old[i].key == 0)
			return NULL;
	}
	return NULL;
}

struct jent *jmap_get(const struct jmap *m, uint64_t key)
{
	size_t i;

	if (!m->t)
		return NULL;
	for (i = jmap_slot(m, key, m->mask);; i = (i + 1) & m->mask) {
		if (m->t[i].key == key)
			return &m->t[i];
		if (m->t[i].key == 0)
			return m->old ? old_get(m, key) : NULL;
	}
}

/* Stores e at empty slot i, whose probe started at home h: one more
 * entry in t, displaced by (i - h) & mask. */
static struct jent *fill(struct jmap *m, size_t i, size_t h, const struct jent *e)
{
	size_t d = (i - h) & m->mask;

	m->t[i] = *e;
	m->nt++;
	if (d) {
		m->ndisp++;
		if (d > m->maxdisp)
			m->maxdisp = d;
	}
	return &m->t[i];
}

/* Stores e, whose key is not in t, in t, which has room for it. */
static void insert_absent(struct jmap *m, const struct jent *e)
{
	size_t h = jmap_slot(m, e->key, m->mask), i = h;

	while (m->t[i].key)
		i = (i + 1) & m->mask;
	fill(m, i, h, e);
}

/* Moves up to k of the old table's slots into t; frees it once drained. */
static void drain(struct jmap *m, size_t k)
{
	while (m->old && k--) {
		struct jent *e = &m->old[m->ocur];

		if (e->key && e->key != JMAP_TOMB)
			insert_absent(m, e);
		e->key = JMAP_TOMB;
		if (++m->ocur > m->omask || m->nt == m->n) {
			free(m->old);
			m->old = NULL;
		}
	}
}

static int jmap_grow(struct jmap *m)
{
	size_t cap = m->t ? (m->mask + 1) * 2 : 64;
	struct jent *t;

	drain(m, SIZE_MAX); /* (one growth at a time: see JMAP_STEP) */
	t = calloc(cap, sizeof(*t));
	if (!t)
		return -1;
	m->old = m->t;
	m->omask = m->mask;
	m->omaxdisp = m->maxdisp;
	m->ocur = 0;
	m->t = t;
	m->mask = cap - 1;
	m->nt = m->maxdisp = m->ndisp = 0;
	if (!m->n) {
		free(m->old);
		m->old = NULL;
	}
	return 0;
}

struct jent *jmap_put(struct jmap *m, uint64_t key)
{
	size_t h, i;

	drain(m, JMAP_STEP);
	if (!m->t || (m->nt + 1) * 4 > (m->mask + 1) * 3) {
		struct jent *e = jmap_get(m, key);

		if (e)
			return e;
		if (jmap_grow(m) < 0)
			return NULL;
	} else if (m->old) {
		struct jent *e = old_get(m, key);

		if (e)
			return e;
	}
	/* one pass: the key, or the first empty slot (no tombstones, so the
	 * key cannot sit beyond it) */
	h = jmap_slot(m, key, m->mask);
	for (i = h; m->t[i].key; i = (i + 1) & m->mask)
		if (m->t[i].key == key)
			return &m->t[i];
	m->n++;
	return fill(m, i, h, &(struct jent){ .key = key });
}

void jmap_del(struct jmap *m, uint64_t key)
{
	struct jent *e;
	size_t i, j;

	drain(m, JMAP_STEP);
	e = jmap_get(m, key);
	if (!e)
		return;
	m->n--;
	if (m->old && e >= m->old && e <= m->old + m->omask) {
		e->key = JMAP_TOMB;
		return;
	}
	i = (size_t)(e - m->t);
	if (jmap_slot(m, key, m->mask) != i)
		m->ndisp--;
	m->t[i].key = 0;
	m->nt--;
	/* Backward shift: move later entries of the run into the hole.  An
	 * entry at j can move to the hole at i only if its home is at or
	 * before i, i.e. it sits at least j - i from home: past maxdisp
	 * slots from the hole, none can. */
	for (j = (i + 1) & m->mask; m->t[j].key && ((j - i) & m->mask) <= m->maxdisp;
	     j = (j + 1) & m->mask) {
		size_t home = jmap_slot(m, m->t[j].key, m->mask);

		/* entry j may move to i when home is not in (i, j] cyclically */
		if ((j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j))) {
			m->t[i] = m->t[j];
			m->t[j].key = 0;
			if (home == i)
				m->ndisp--; /* home at last */
			i = j;
		}
	}
	if (!m->ndisp)
		m->maxdisp = 0;
}

struct jent *jmap_next(const struct jmap *m, size_t *i)
{
	size_t on = m->old ? m->omask + 1 : 0, tn = m->t ? m->mask + 1 : 0;

	for (; *i < on; (*i)++)
		if (m->old[*i].key && m->old[*i].key != JMAP_TOMB)
			return &m->old[(*i)++];
	for (; *i < on + tn; (*i)++)
		if (m->t[*i - on].key)
			return &m->t[(*i)++ - on];
	return NULL;
}

int jmap_prune_below(struct jmap *m, uint64_t min)
{
	size_t ns = 0, k = 0, cap = 64, i;
	struct jent *keep = NULL, *t = NULL;

	if (!m->t)
		return 0;
	drain(m, SIZE_MAX); /* (it rehashes the survivors anyway) */
	for (i = 0; i <= m->mask; i++)
		if (m->t[i].key >= min && m->t[i].key)
			ns++;
	/* the size the count before pruning grew the table to (jmap_put) */
	while (m->n * 4 > cap * 3)
		cap *= 2;
	if ((ns && !(keep = malloc(ns * sizeof(*keep)))) ||
	    (m->mask + 1 > 2 * cap && !(t = calloc(cap, sizeof(*t))))) {
		free(keep);
		return -1; /* unchanged */
	}
	/* take the survivors out, emptying every slot */
	for (i = 0; i <= m->mask; i++) {
		if (m->t[i].key >= min && m->t[i].key)
			keep[k++] = m->t[i];
		m->t[i].key = 0;
	}
	if (t) {
		free(m->t);
		m->t = t;
		m->mask = cap - 1;
	}
	m->nt = m->maxdisp = m->ndisp = 0;
	for (i = 0; i < ns; i++) /* fits: ns <= n, the table holds n */
		insert_absent(m, &keep[i]);
	m->n = ns;
	free(keep);
	return 0;
}

void jmap_clear(struct jmap *m)
{
	free(m->old);
	m->old = NULL;
	if (m->t)
		memset(m->t, 0, (m->mask + 1) * sizeof(*m->t));
	m->n = m->nt = 0;
	m->maxdisp = m->ndisp = 0;
}

void jmap_free(struct jmap *m)
{
	int seq = m->seq;

	free(m->old);
	free(m->t);
	memset(m, 0, sizeof(*m));
	m->seq = seq;
}
