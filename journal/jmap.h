/*
 * jmap.h: an open-addressing hash map from a nonzero uint64 key to a small
 * entry (private to journal/).  Linear probing with backward-shift deletion,
 * so lookups in the current table never walk tombstones.  Key 0 marks an
 * empty slot.
 *
 * A map with seq set places key k at slot k & mask: consecutive keys (a
 * queue's item ids) then sit side by side, each operation touches the slot
 * next to the last one's, and they collide only when live keys span more
 * than the table.  Other maps mix the key's bits first.  maxdisp bounds how
 * far any entry sits from its home slot, so a deletion's backward shift
 * stops after maxdisp slots instead of walking the whole run of occupied
 * slots (with seq, a run is every live item); once no entry is displaced it
 * drops back to 0.
 *
 * Growth is incremental: a full table becomes the old one, drained into a
 * table twice its size a few slots per jmap_put and jmap_del (JMAP_STEP),
 * so no single call rehashes a large map on the event loop.  Until it is
 * drained a key is in one of the two; the old table takes no inserts, and
 * its deleted and drained slots become tombstones (key JMAP_TOMB), so its
 * runs stay whole.  Keys 0 and JMAP_TOMB are not keys.  jmap_next visits
 * both tables.
 */
#ifndef TERN_JOURNAL_JMAP_H
#define TERN_JOURNAL_JMAP_H

#include <stddef.h>
#include <stdint.h>

struct jent {
	uint64_t key;
	uint64_t pos;   /* journal position of the item's ADD record */
	uint32_t len;   /* item body length */
	uint16_t flags; /* JENT_OPEN, JENT_MOVED */
	uint16_t deliveries; /* the item's delivery count (for a MOVED copy) */
};
#define JENT_OPEN 1u  /* handed out with /open */
#define JENT_MOVED 2u /* its ADD record is a MOVED copy (compaction) */

#define JMAP_TOMB UINT64_MAX

struct jmap {
	struct jent *t;
	size_t mask;    /* capacity - 1; 0 when t == NULL */
	size_t n;       /* entries, in both tables */
	size_t nt;      /* entries in t */
	size_t maxdisp; /* no entry of t sits further than this from its home slot */
	size_t ndisp;   /* entries of t not in their home slot (0: maxdisp back to 0) */
	int seq;        /* keys mostly consecutive (item ids): home = key & mask */
	/* the table being drained into t; NULL when none */
	struct jent *old;
	size_t omask, omaxdisp;
	size_t ocur;    /* old's slots below this are drained */
};

/* The home slot of key (where a lookup starts). */
size_t jmap_home(const struct jmap *m, uint64_t key);
/* Returns the entry for key or NULL. */
struct jent *jmap_get(const struct jmap *m, uint64_t key);
/* Returns the entry for key, inserting a zeroed one if absent; NULL when
 * out of memory.  Invalidates earlier entry pointers. */
struct jent *jmap_put(struct jmap *m, uint64_t key);
/* Removes key if present.  Invalidates earlier entry pointers. */
void jmap_del(struct jmap *m, uint64_t key);
/* The next entry from cursor *i (start at 0), or NULL after the last:
 * every entry once, while the map is not changed. */
struct jent *jmap_next(const struct jmap *m, size_t *i);
/* Removes every entry whose key is below min (the rest keep their
 * values).  The table keeps its size unless that is
 * more than twice what the count before pruning needed: a map refilled at
 * the same pace after each prune then never grows again (growing rehashes
 * every entry).
 * Returns -1 when out of memory (the map is unchanged). */
int jmap_prune_below(struct jmap *m, uint64_t min);
void jmap_clear(struct jmap *m);
void jmap_free(struct jmap *m);

#endif
