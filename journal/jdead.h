/*
 * jdead.h: the journal's set of dead ADD positions (private to journal/).
 *
 * A queue's items are removed mostly in the order they were added, so the
 * positions of their ADD records arrive mostly in increasing order.  Those
 * are appended to a sorted array: no hashing, one sequential store per
 * removed item, a binary search to look one up, and pruning below a
 * position (each checkpoint) moves a start index instead of walking a
 * table.  Positions that arrive out of order (an item returned by an abort
 * and removed later, the old position of a relocated record) go to a small
 * hash map beside it.  A hash map alone would make every removal a random
 * store into a table sized for a checkpoint interval of removals, and each
 * checkpoint's prune a walk of all of it on the loop.
 */
#ifndef TERN_JOURNAL_JDEAD_H
#define TERN_JOURNAL_JDEAD_H

#include <stddef.h>
#include <stdint.h>

#include "jmap.h"

struct jdead {
	uint64_t *a;      /* a[head .. head+n): sorted, strictly increasing */
	size_t head, n, cap;
	struct jmap side; /* positions below a's last when they arrived */
};

/* Adds pos (nonzero); adding one already there does nothing.  Returns 0,
 * or -1 when out of memory (the set is unchanged). */
int jdead_put(struct jdead *d, uint64_t pos);
/* Adds pos (nonzero) to the side map: for a position far above the ones
 * still to come (a compaction copy's, at the tail), which at the end of
 * the sorted run would send every later, lower one to the side map.
 * Returns 0, or -1 when out of memory (the set is unchanged). */
int jdead_put_aside(struct jdead *d, uint64_t pos);
/* Nonzero when pos is in the set. */
int jdead_has(const struct jdead *d, uint64_t pos);
/* Removes pos if present (from the sorted run: a move of the entries
 * after it; only a failed relocation undoes a put). */
void jdead_del(struct jdead *d, uint64_t pos);
/* Removes every position below min.  Returns 0, or -1 when out of memory
 * (the set is unchanged). */
int jdead_prune_below(struct jdead *d, uint64_t min);
/* How many positions the set holds. */
size_t jdead_count(const struct jdead *d);
/* Calls fn for every position (the sorted run first, then the others in
 * no order). */
void jdead_each(const struct jdead *d, void (*fn)(void *arg, uint64_t pos), void *arg);
void jdead_clear(struct jdead *d);
void jdead_free(struct jdead *d);

#endif
