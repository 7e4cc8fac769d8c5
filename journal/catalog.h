/*
 * catalog.h: the LMDB catalog (private to journal/).
 *
 * One LMDB environment in <data_dir>/catalog/ with two databases:
 *   "queues": queue name -> its settings and state (u64 words, catalog.c)
 *   "ckpt":   queue name -> checkpoint blob (see jpriv.h, docs/JOURNAL.md)
 * Opened with MDB_NOTLS: the loop thread, the writer and the syncer all use
 * it (LMDB serialises write transactions itself).
 */
#ifndef TERN_JOURNAL_CATALOG_H
#define TERN_JOURNAL_CATALOG_H

#include <stddef.h>
#include <stdint.h>

/* The settings it stores (journal.h); only pointed to here. */
struct journal_opts;

enum jcat_state {
	JCAT_ACTIVE = 0,
	JCAT_DELETING = 1, /* delete started: finish it at the next startup */
};

struct jcat;

/* Opens (creating) the environment in dir.  0, TERN_ESYS, TERN_ELMDB. */
int jcat_open(const char *dir, int readonly, struct jcat **out);
void jcat_close(struct jcat *c);
/* Writes the queue's entry.  0 or TERN_ELMDB. */
int jcat_queue_put(struct jcat *c, const char *name, const struct journal_opts *o,
		   int state);
/* Reads the entry's state: 0, TERN_ENOTFOUND, TERN_ELMDB. */
int jcat_queue_get(struct jcat *c, const char *name, int *state);
/* Removes the queue's entry and checkpoint.  0 or TERN_ELMDB. */
int jcat_queue_del(struct jcat *c, const char *name);
/* Calls fn for every queue.  0 or TERN_ELMDB. */
int jcat_list(struct jcat *c, void (*fn)(void *arg, const char *name, int state),
	      void *arg);
/* Stores / loads a checkpoint blob (get: malloc'd copy, caller frees).
 * 0, TERN_ENOTFOUND, TERN_ENOMEM, TERN_ELMDB. */
int jcat_ckpt_put(struct jcat *c, const char *name, const void *blob, size_t len);
int jcat_ckpt_get(struct jcat *c, const char *name, void **blob, size_t *len);

#endif
