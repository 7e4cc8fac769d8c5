/* jmap.c: uint64 -> entry hash map for the journal's in-memory indexes. */
#include "jmap.h"

#include <stdlib.h>
#include <string.h>

static size_t jmap_slot(uint64_t key, size_t mask)
{
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdULL;
	key ^= key >> 33;
	return (size_t)key & mask;
}

struct jent *jmap_get(const struct jmap *m, uint64_t key)
{
	size_t i;

	if (!m->t)
		return NULL;
	for (i = jmap_slot(key, m->mask);; i = (i + 1) & m->mask) {
		if (m->t[i].key == key)
			return &m->t[i];
		if (m->t[i].key == 0)
			return NULL;
	}
}

static int jmap_grow(struct jmap *m)
{
	size_t cap = m->t ? (m->mask + 1) * 2 : 64, i;
	struct jent *t = calloc(cap, sizeof(*t));

	if (!t)
		return -1;
	for (i = 0; m->t && i <= m->mask; i++) {
		size_t j;

		if (!m->t[i].key)
			continue;
		for (j = jmap_slot(m->t[i].key, cap - 1); t[j].key; j = (j + 1) & (cap - 1))
			;
		t[j] = m->t[i];
	}
	free(m->t);
	m->t = t;
	m->mask = cap - 1;
	return 0;
}

struct jent *jmap_put(struct jmap *m, uint64_t key)
{
	struct jent *e = jmap_get(m, key);
	size_t i;

	if (e)
		return e;
	if (!m->t || (m->n + 1) * 4 > (m->mask + 1) * 3) {
		if (jmap_grow(m) < 0)
			return NULL;
	}
	for (i = jmap_slot(key, m->mask); m->t[i].key; i = (i + 1) & m->mask)
		;
	memset(&m->t[i], 0, sizeof(m->t[i]));
	m->t[i].key = key;
	m->n++;
	return &m->t[i];
}

void jmap_del(struct jmap *m, uint64_t key)
{
	struct jent *e = jmap_get(m, key);
	size_t i, j;

	if (!e)
		return;
	i = (size_t)(e - m->t);
	m->t[i].key = 0;
	m->n--;
	/* backward shift: move later entries of the cluster into the hole */
	for (j = (i + 1) & m->mask; m->t[j].key; j = (j + 1) & m->mask) {
		size_t home = jmap_slot(m->t[j].key, m->mask);

		/* entry j may move to i when home is not in (i, j] cyclically */
		if ((j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j))) {
			m->t[i] = m->t[j];
			m->t[j].key = 0;
			i = j;
		}
	}
}

int jmap_prune_below(struct jmap *m, uint64_t min)
{
	size_t ns = 0, k = 0, cap = 64, i;
	uint64_t *keep = NULL;
	struct jent *t = NULL;

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
			keep[k++] = m->t[i].key;
		m->t[i].key = 0;
	}
	if (t) {
		free(m->t);
		m->t = t;
		m->mask = cap - 1;
	}
	m->n = 0;
	for (k = 0; k < ns; k++)
		jmap_put(m, keep[k]); /* fits: ns <= n, the table holds n */
	free(keep);
	return 0;
}

void jmap_clear(struct jmap *m)
{
	if (m->t)
		memset(m->t, 0, (m->mask + 1) * sizeof(*m->t));
	m->n = 0;
}

void jmap_free(struct jmap *m)
{
	free(m->t);
	memset(m, 0, sizeof(*m));
}
