/*
 * catalog.h: the LMDB catalog (private to journal/).
 *
 * One LMDB environment in <data_dir>/catalog/ with two databases:
 *   "queues": queue name -> its settings and state (u64 words, catalog.c)
 *   "ckpt":   queue name -> checkpoint blob (ckblob.h, docs/JOURNAL.md)
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

/* Opens (creating) the environment in dir.  readonly: for a reader that
 * holds the data directory's lock (journal.h), so no server writes it:
 * LMDB's own lock file is not used (a copy on read-only media reads too).
 * 0, TERN_ESYS, TERN_ELMDB. */
int jcat_open(const char *dir, int readonly, struct jcat **out);
void jcat_close(struct jcat *c);
/* Writes the queue's entry.  0 or TERN_ELMDB. */
int jcat_queue_put(struct jcat *c, const char *name, const struct journal_opts *o,
		   int state);
/* 1 when the queue's entry holds exactly settings o and state (so a
 * put would change nothing, and a commit can be saved), else 0. */
int jcat_queue_same(struct jcat *c, const char *name, const struct journal_opts *o,
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
/* Stores n checkpoints in one transaction (one commit, with its syncs,
 * for all: thousands of queues checkpoint at the same interval, and all
 * close at once).  0 or TERN_ELMDB (none stored). */
int jcat_ckpt_put_many(struct jcat *c, size_t n, const char *const *names,
		       const void *const *blobs, const size_t *lens);

#endif
