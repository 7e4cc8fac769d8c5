/* catalog.c: the LMDB catalog of queues and their checkpoints. */
#include "catalog.h"

#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../lib/log.h"
#include "../lib/tern.h"
#include "journal.h" /* (struct journal_opts) */

#define JCAT_QVERSION 1

struct jcat {
	MDB_env *env;
	MDB_dbi dbq, dbc;
};

/* The catalog entry of a queue, stored as little-endian u64 fields. */
enum { QF_VERSION, QF_STATE, QF_SYNC, QF_SYNC_MS, QF_PREALLOC, QF_SEGSIZE,
       QF_MAXMEM, QF_CKPT_MS, QF_COUNT };

static int lmdb_err(const char *what, int rc)
{
	log_error("journal: catalog: %s: %s", what, mdb_strerror(rc));
	return TERN_ELMDB;
}

/* Commits (checkpoints, deletes) must work on a full disk: they are what
 * frees journal segments.  LMDB grows data.mdb as it writes pages, so
 * blocks are allocated for it ahead of need (beyond the file size, which
 * LMDB reads as its own).  Best effort: a failure only loses the reserve. */
#define JCAT_RESERVE ((off_t)1 << 20)
static void jcat_reserve(const char *dir)
{
	char path[4096];
	int fd;

	snprintf(path, sizeof(path), "%s/data.mdb", dir);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	if (fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, JCAT_RESERVE) < 0 && errno != EOPNOTSUPP)
		log_warn("journal: catalog: cannot reserve %lld bytes: %s",
			(long long)JCAT_RESERVE, strerror(errno));
	close(fd);
}

int jcat_open(const char *dir, int readonly, struct jcat **out)
{
	struct jcat *c = calloc(1, sizeof(*c));
	MDB_txn *txn = NULL;
	int rc;

	if (!c)
		return TERN_ENOMEM;
	if (!readonly && mkdir(dir, TERN_DIR_MODE) < 0 && errno != EEXIST) {
		free(c);
		return TERN_ESYS;
	}
	rc = mdb_env_create(&c->env);
	if (rc)
		goto fail_lmdb;
	mdb_env_set_maxdbs(c->env, 4);
	/* sparse; grows only with what is stored */
	mdb_env_set_mapsize(c->env, (size_t)1 << 30);
	rc = mdb_env_open(c->env, dir, MDB_NOTLS | (readonly ? MDB_RDONLY | MDB_NOLOCK : 0),
			   TERN_FILE_MODE);
	if (rc)
		goto fail_lmdb;
	rc = mdb_txn_begin(c->env, NULL, readonly ? MDB_RDONLY : 0, &txn);
	if (rc)
		goto fail_lmdb;
	rc = mdb_dbi_open(txn, "queues", readonly ? 0 : MDB_CREATE, &c->dbq);
	if (!rc)
		rc = mdb_dbi_open(txn, "ckpt", readonly ? 0 : MDB_CREATE, &c->dbc);
	if (rc)
		goto fail_lmdb;
	rc = mdb_txn_commit(txn);
	txn = NULL;
	if (rc)
		goto fail_lmdb;
	if (!readonly)
		jcat_reserve(dir);
	*out = c;
	return 0;
fail_lmdb:
	if (txn)
		mdb_txn_abort(txn);
	lmdb_err(dir, rc);
	if (c->env)
		mdb_env_close(c->env);
	free(c);
	return TERN_ELMDB;
}

void jcat_close(struct jcat *c)
{
	if (!c)
		return;
	mdb_env_close(c->env);
	free(c);
}

static void put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Puts n values into dbi in one transaction (one commit).  0 or
 * TERN_ELMDB (none stored). */
static int jcat_put_many(struct jcat *c, MDB_dbi dbi, size_t n, const char *const *names,
			 const void *const *vals, const size_t *lens)
{
	MDB_txn *txn;
	int rc = mdb_txn_begin(c->env, NULL, 0, &txn);

	if (rc)
		return lmdb_err("begin", rc);
	for (size_t i = 0; i < n; i++) {
		MDB_val k = { strlen(names[i]), (void *)names[i] };
		MDB_val v = { lens[i], (void *)vals[i] };

		rc = mdb_put(txn, dbi, &k, &v, 0);
		if (rc) {
			mdb_txn_abort(txn);
			return lmdb_err("put", rc);
		}
	}
	rc = mdb_txn_commit(txn);
	if (rc)
		return lmdb_err("commit", rc);
	return 0;
}

static int jcat_put(struct jcat *c, MDB_dbi dbi, const char *name,
		    const void *val, size_t len)
{
	return jcat_put_many(c, dbi, 1, &name, &val, &len);
}

/* The entry of a queue with settings o in state. */
static void queue_entry(unsigned char buf[QF_COUNT * 8], const struct journal_opts *o,
			int state)
{
	put64(buf + 8 * QF_VERSION, JCAT_QVERSION);
	put64(buf + 8 * QF_STATE, (uint64_t)state);
	put64(buf + 8 * QF_SYNC, o->sync);
	put64(buf + 8 * QF_SYNC_MS, o->sync_interval_ms);
	put64(buf + 8 * QF_PREALLOC, o->prealloc);
	put64(buf + 8 * QF_SEGSIZE, o->segment_size);
	put64(buf + 8 * QF_MAXMEM, o->max_memory_size);
	put64(buf + 8 * QF_CKPT_MS, o->checkpoint_interval_ms);
}

int jcat_queue_put(struct jcat *c, const char *name, const struct journal_opts *o,
		   int state)
{
	unsigned char buf[QF_COUNT * 8];

	queue_entry(buf, o, state);
	return jcat_put(c, c->dbq, name, buf, sizeof(buf));
}

int jcat_queue_same(struct jcat *c, const char *name, const struct journal_opts *o,
		    int state)
{
	unsigned char buf[QF_COUNT * 8];
	MDB_txn *txn;
	MDB_val k = { strlen(name), (void *)name }, v;
	int same;

	queue_entry(buf, o, state);
	if (mdb_txn_begin(c->env, NULL, MDB_RDONLY, &txn))
		return 0;
	same = mdb_get(txn, c->dbq, &k, &v) == 0 && v.mv_size == sizeof(buf) &&
	       memcmp(v.mv_data, buf, sizeof(buf)) == 0;
	mdb_txn_abort(txn);
	return same;
}

int jcat_queue_get(struct jcat *c, const char *name, int *state)
{
	MDB_txn *txn;
	MDB_val k = { strlen(name), (void *)name }, v;
	int rc = mdb_txn_begin(c->env, NULL, MDB_RDONLY, &txn);

	if (rc)
		return lmdb_err("begin", rc);
	rc = mdb_get(txn, c->dbq, &k, &v);
	if (rc == MDB_NOTFOUND) {
		mdb_txn_abort(txn);
		return TERN_ENOTFOUND;
	}
	if (rc) {
		mdb_txn_abort(txn);
		return lmdb_err("get", rc);
	}
	*state = v.mv_size >= 16 ? (int)get64((unsigned char *)v.mv_data + 8 * QF_STATE)
				 : JCAT_ACTIVE;
	mdb_txn_abort(txn);
	return 0;
}

int jcat_queue_del(struct jcat *c, const char *name)
{
	MDB_txn *txn;
	MDB_val k = { strlen(name), (void *)name };
	int rc = mdb_txn_begin(c->env, NULL, 0, &txn);

	if (rc)
		return lmdb_err("begin", rc);
	rc = mdb_del(txn, c->dbc, &k, NULL);
	if (rc && rc != MDB_NOTFOUND)
		goto fail;
	rc = mdb_del(txn, c->dbq, &k, NULL);
	if (rc && rc != MDB_NOTFOUND)
		goto fail;
	rc = mdb_txn_commit(txn);
	if (rc)
		return lmdb_err("commit", rc);
	return 0;
fail:
	mdb_txn_abort(txn);
	return lmdb_err("del", rc);
}

int jcat_list(struct jcat *c, void (*fn)(void *arg, const char *name, int state),
	      void *arg)
{
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_val k, v;
	char name[TERN_NAME_MAX + 1];
	int rc = mdb_txn_begin(c->env, NULL, MDB_RDONLY, &txn);

	if (rc)
		return lmdb_err("begin", rc);
	rc = mdb_cursor_open(txn, c->dbq, &cur);
	if (rc) {
		mdb_txn_abort(txn);
		return lmdb_err("cursor", rc);
	}
	/* Collect first: fn may write to the catalog. */
	char **names = NULL;
	int *states = NULL;
	size_t n = 0, cap = 0;

	while ((rc = mdb_cursor_get(cur, &k, &v, n ? MDB_NEXT : MDB_FIRST)) == 0) {
		if (k.mv_size == 0 || k.mv_size > TERN_NAME_MAX)
			continue;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 16;
			char **nn = realloc(names, nc * sizeof(*nn));
			int *ns = nn ? realloc(states, nc * sizeof(*ns)) : NULL;

			if (nn)
				names = nn;
			if (!ns) {
				rc = ENOMEM;
				break;
			}
			states = ns;
			cap = nc;
		}
		memcpy(name, k.mv_data, k.mv_size);
		name[k.mv_size] = 0;
		names[n] = strdup(name);
		states[n] = v.mv_size >= 16 ? (int)get64((unsigned char *)v.mv_data + 8 * QF_STATE)
					    : JCAT_ACTIVE;
		if (!names[n]) {
			rc = ENOMEM;
			break;
		}
		n++;
	}
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	for (size_t i = 0; i < n; i++) {
		if (rc == MDB_NOTFOUND)
			fn(arg, names[i], states[i]);
		free(names[i]);
	}
	free(names);
	free(states);
	if (rc == ENOMEM)
		return TERN_ENOMEM;
	if (rc != MDB_NOTFOUND)
		return lmdb_err("list", rc);
	return 0;
}

int jcat_ckpt_put(struct jcat *c, const char *name, const void *blob, size_t len)
{
	return jcat_put(c, c->dbc, name, blob, len);
}

int jcat_ckpt_put_many(struct jcat *c, size_t n, const char *const *names,
		       const void *const *blobs, const size_t *lens)
{
	return jcat_put_many(c, c->dbc, n, names, blobs, lens);
}

int jcat_ckpt_get(struct jcat *c, const char *name, void **blob, size_t *len)
{
	MDB_txn *txn;
	MDB_val k = { strlen(name), (void *)name }, v;
	int rc = mdb_txn_begin(c->env, NULL, MDB_RDONLY, &txn);

	if (rc)
		return lmdb_err("begin", rc);
	rc = mdb_get(txn, c->dbc, &k, &v);
	if (rc) {
		mdb_txn_abort(txn);
		if (rc == MDB_NOTFOUND)
			return TERN_ENOTFOUND;
		return lmdb_err("get", rc);
	}
	*blob = malloc(v.mv_size ? v.mv_size : 1);
	if (!*blob) {
		mdb_txn_abort(txn);
		return TERN_ENOMEM;
	}
	memcpy(*blob, v.mv_data, v.mv_size);
	*len = v.mv_size;
	mdb_txn_abort(txn);
	return 0;
}
