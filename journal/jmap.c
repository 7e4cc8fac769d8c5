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

struct jent *jmap_get(const struct jmap *m, uint64_t key)
{
	size_t i;

	if (!m->t)
		return NULL;
	for (i = jmap_slot(m, key, m->mask);; i = (i + 1) & m->mask) {
		if (m->t[i].key == key)
			return &m->t[i];
		if (m->t[i].key == 0)
			return NULL;
	}
}

/* Stores e at empty slot i, whose probe started at home h: one more
 * entry, displaced by (i - h) & mask. */
static struct jent *fill(struct jmap *m, size_t i, size_t h, const struct jent *e)
{
	size_t d = (i - h) & m->mask;

	m->t[i] = *e;
	m->n++;
	if (d) {
		m->ndisp++;
		if (d > m->maxdisp)
			m->maxdisp = d;
	}
	return &m->t[i];
}

/* Stores e, whose key is not in the map, in a table with room for it. */
static void insert_absent(struct jmap *m, const struct jent *e)
{
	size_t h = jmap_slot(m, e->key, m->mask), i = h;

	while (m->t[i].key)
		i = (i + 1) & m->mask;
	fill(m, i, h, e);
}

/* Moves every entry of old (capacity mask + 1) into m's empty table. */
static void reinsert(struct jmap *m, const struct jent *old, size_t mask)
{
	for (size_t i = 0; old && i <= mask; i++)
		if (old[i].key)
			insert_absent(m, &old[i]);
}

static int jmap_grow(struct jmap *m)
{
	size_t cap = m->t ? (m->mask + 1) * 2 : 64, omask = m->mask;
	struct jent *t = calloc(cap, sizeof(*t)), *old = m->t;

	if (!t)
		return -1;
	m->t = t;
	m->mask = cap - 1;
	m->n = m->maxdisp = m->ndisp = 0;
	reinsert(m, old, omask);
	free(old);
	return 0;
}

struct jent *jmap_put(struct jmap *m, uint64_t key)
{
	size_t h, i;

	if (!m->t || (m->n + 1) * 4 > (m->mask + 1) * 3) {
		struct jent *e = jmap_get(m, key);

		if (e)
			return e;
		if (jmap_grow(m) < 0)
			return NULL;
	}
	/* one pass: the key, or the first empty slot (no tombstones, so the
	 * key cannot sit beyond it) */
	h = jmap_slot(m, key, m->mask);
	for (i = h; m->t[i].key; i = (i + 1) & m->mask)
		if (m->t[i].key == key)
			return &m->t[i];
	return fill(m, i, h, &(struct jent){ .key = key });
}

void jmap_del(struct jmap *m, uint64_t key)
{
	struct jent *e = jmap_get(m, key);
	size_t i, j;

	if (!e)
		return;
	i = (size_t)(e - m->t);
	if (jmap_slot(m, key, m->mask) != i)
		m->ndisp--;
	m->t[i].key = 0;
	m->n--;
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

int jmap_prune_below(struct jmap *m, uint64_t min)
{
	size_t ns = 0, k = 0, cap = 64, i;
	struct jent *keep = NULL, *t = NULL;

	if (!m->t)
		return 0;
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
	m->n = m->maxdisp = m->ndisp = 0;
	reinsert(m, keep, ns - 1); /* fits: ns <= n, the table holds n */
	free(keep);
	return 0;
}

void jmap_clear(struct jmap *m)
{
	if (m->t)
		memset(m->t, 0, (m->mask + 1) * sizeof(*m->t));
	m->n = 0;
	m->maxdisp = m->ndisp = 0;
}

void jmap_free(struct jmap *m)
{
	int seq = m->seq;

	free(m->t);
	memset(m, 0, sizeof(*m));
	m->seq = seq;
}
