/* test_journal.c: journal unit tests (record codec, writer, sync modes,
 * recovery, damage, ENOSPC/EIO through the jio seam, read-behind, segment
 * reuse and relocation).  Each test gets a fresh data directory. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../journal/catalog.h"
#include "../../journal/jio.h"
#include "../../journal/journal.h"
#include "../../journal/record.h"
#include "../../lib/crc32c.h"

#define MAXI 20000

static char tdir[40];
static struct event_base *base;
static struct jenv *env;
static uint64_t dur_upto;
static int dur_err;

static struct item *got[MAXI];
static size_t ngot;

/* The durable callback's reports, in order, while there is room (only a
 * test that reads them, through ticket_err, needs them all). */
static uint64_t res_upto[256];
static int res_err[256];
static size_t nres;

static void on_durable(void *arg, uint64_t upto, int err)
{
	if (upto > dur_upto)
		dur_upto = upto;
	if (err)
		dur_err = err;
	if (nres < sizeof(res_upto) / sizeof(res_upto[0])) {
		res_upto[nres] = upto;
		res_err[nres++] = err;
	}
}

/* What ticket t was resolved with: the first report that covers it. */
static int ticket_err(uint64_t t)
{
	for (size_t i = 0; i < nres; i++)
		if (res_upto[i] >= t)
			return res_err[i];
	ck_abort_msg("ticket %llu not resolved (or past the log)", (unsigned long long)t);
	return 0;
}

static void collect(void *arg, struct item *it)
{
	ck_assert_uint_lt(ngot, MAXI);
	got[ngot++] = it;
}

static void got_clear(void)
{
	for (size_t i = 0; i < ngot; i++)
		item_unref(got[i]);
	ngot = 0;
}

static struct journal *bj; /* barrier journal, see barrier() */
static uint64_t bj_id;

static void env_up(void)
{
	bj = NULL;
	dur_upto = 0;
	dur_err = 0;
	nres = 0;
	base = event_base_new();
	ck_assert_ptr_nonnull(base);
	ck_assert_int_eq(jenv_open(tdir, base, on_durable, NULL, &env), 0);
}

static void env_down(void)
{
	if (env)
		jenv_close(env);
	env = NULL;
	if (base)
		event_base_free(base);
	base = NULL;
}

static void setup(void)
{
	jio_reset();
	tern_malloc = malloc;
	strcpy(tdir, "/tmp/tj-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tdir));
	ngot = 0;
	env_up();
}

static void teardown(void)
{
	char cmd[256];

	jio_reset();
	tern_malloc = malloc;
	env_down();
	got_clear();
	snprintf(cmd, sizeof(cmd), "rm -rf %s %s-copy", tdir, tdir);
	if (system(cmd) != 0)
		fprintf(stderr, "cleanup failed\n");
}

/* Runs the event loop for about ms milliseconds. */
static void pump(int ms)
{
	for (int i = 0; i <= ms; i++) {
		event_base_loop(base, EVLOOP_NONBLOCK);
		if (ms)
			usleep(1000);
	}
}

/* Runs the loop until the journal's threads have nothing left to do (a
 * segment's activation and sync, a checkpoint, a reclaimed segment), as
 * seen twice in a row with a loop pass between (bounded: 4 s).  A fixed
 * wait is not enough on a loaded machine. */
static void pump_quiet(void)
{
	for (int i = 0, quiet = 0; i < 4000 && quiet < 2; i++) {
		pump(1);
		quiet = jenv_background_busy(env) ? 0 : quiet + 1;
	}
}

/* Runs the loop until the durable callback covered t (bounded). */
static void wait_ticket(uint64_t t)
{
	for (int i = 0; i < 10000 && dur_upto < t; i++) {
		event_base_loop(base, EVLOOP_NONBLOCK);
		usleep(500);
	}
	ck_assert_uint_ge(dur_upto, t);
}

static struct item *mk(uint64_t id, uint32_t len);

static void drop(void *arg, struct item *it)
{
	item_unref(it);
}

/* Returns once everything handed to the writer so far is written: the
 * writer processes batches in order and reports an `always` ticket only
 * after its whole group is written and synced. */
static void barrier(void)
{
	struct journal_opts o;
	struct journal_recovery rec;
	struct item *it;
	uint64_t t;

	if (!bj) {
		journal_opts_default(&o);
		o.sync = JOURNAL_SYNC_ALWAYS;
		o.prealloc = JOURNAL_PREALLOC_NONE;
		o.segment_size = 64 * 1024;
		ck_assert_int_eq(journal_open(env, "zz-barrier", &o, drop, NULL, &rec, &bj), 0);
		bj_id = rec.next_id;
	}
	it = mk(bj_id, 1);
	ck_assert_int_eq(journal_add(bj, it, 1, &t), 0);
	item_unref(it);
	wait_ticket(t);
	ck_assert_int_eq(journal_remove(bj, bj_id), 0);
	bj_id++;
}

/* Runs the loop until j has made at least n syncs (bounded: ~2-4 s);
 * returns its count. */
static uint64_t wait_syncs(struct journal *j, uint64_t n)
{
	struct journal_stats st;

	for (int i = 0; i < 400; i++) {
		pump(5);
		journal_get_stats(j, &st);
		if (st.syncs >= n)
			break;
	}
	return st.syncs;
}

/* mk's bodies: the alphabet over and over, so that the body of item id is
 * mk_body + id % 26 (up to sizeof(mk_body) - 26 bytes). */
static char mk_body[(64 << 10) + 26];

/* The body of item id, or NULL for one longer than mk_body holds. */
static const char *mk_body_of(uint64_t id, uint32_t len)
{
	if (!mk_body[0])
		for (size_t i = 0; i < sizeof(mk_body); i++)
			mk_body[i] = (char)('a' + i % 26);
	return len <= sizeof(mk_body) - 26 ? mk_body + id % 26 : NULL;
}

static struct item *mk(uint64_t id, uint32_t len)
{
	const char *body = mk_body_of(id, len);

	struct item *it = item_new(len);

	ck_assert_ptr_nonnull(it);
	it->id = id;
	it->flags = (uint32_t)id * 3;
	it->add_ms = 1000 + (int64_t)id;
	if (body)
		memcpy(it->data, body, len);
	else
		for (uint32_t i = 0; i < len; i++)
			it->data[i] = (char)('a' + (id + i) % 26);
	return it;
}

static void check_item(const struct item *it, uint64_t id, uint32_t len)
{
	const char *body;

	ck_assert_uint_eq(it->id, id);
	ck_assert_uint_eq(it->len, len);
	ck_assert_uint_eq(it->flags, (uint32_t)id * 3);
	ck_assert_int_eq(it->add_ms, 1000 + (int64_t)id);
	body = mk_body_of(id, len);
	/* (one compare; byte by byte only to name the first difference) */
	if (body && memcmp(it->data, body, len) == 0)
		return;
	for (uint32_t i = 0; i < len; i++)
		ck_assert_int_eq(it->data[i], (char)('a' + (id + i) % 26));
}

static void opts_small(struct journal_opts *o, enum journal_sync s)
{
	journal_opts_default(o);
	o->sync = s;
	o->segment_size = 64 * 1024;
	o->checkpoint_interval_ms = 20;
}

static struct journal *qopen(const char *name, const struct journal_opts *o,
			     struct journal_recovery *rec)
{
	struct journal *j = NULL;
	struct journal_recovery r;

	ck_assert_int_eq(journal_open(env, name, o, collect, NULL, rec ? rec : &r, &j), 0);
	return j;
}

/* Restarts the environment (a clean close) and opens queue name again. */
static struct journal *reopen(const char *name, const struct journal_opts *o,
			      struct journal_recovery *rec)
{
	env_down();
	env_up();
	return qopen(name, o, rec);
}

/* Reopens queue q and expects exactly items 1..n, len bytes each, in
 * order. */
static void reopen_expect(const struct journal_opts *o, uint64_t n, uint32_t len)
{
	reopen("q", o, NULL);
	ck_assert_uint_eq(ngot, n);
	for (uint64_t id = 1; id <= n; id++)
		check_item(got[id - 1], id, len);
}

/* Adds item id (len bytes, see mk); returns its ticket. */
static uint64_t add(struct journal *j, uint64_t id, uint32_t len, int in_memory)
{
	struct item *it = mk(id, len);
	uint64_t t;

	ck_assert_int_eq(journal_add(j, it, in_memory, &t), 0);
	item_unref(it);
	return t;
}

/* Adds items from..to (len bytes each), running the loop every 100. */
static void add_range(struct journal *j, uint64_t from, uint64_t to, uint32_t len, int in_memory)
{
	for (uint64_t id = from; id <= to; id++) {
		add(j, id, len, in_memory);
		if (id % 100 == 0)
			pump(1);
	}
}

/* Reads back every item behind, expecting items next, next + 1, ... of len
 * bytes, running the loop every 50; returns the id after the last. */
static uint64_t read_behind_all(struct journal *j, uint64_t next, uint32_t len)
{
	struct item *it;

	for (;;) {
		ck_assert_int_eq(journal_read_behind(j, &it), 0);
		if (!it)
			return next;
		check_item(it, next++, len);
		item_unref(it);
		if (next % 50 == 0)
			pump(1);
	}
}

static int count_segs(const char *q)
{
	char path[256];
	DIR *d;
	struct dirent *de;
	int n = 0;

	snprintf(path, sizeof(path), "%s/queues/%s", tdir, q);
	d = opendir(path);
	if (!d)
		return -1;
	while ((de = readdir(d)))
		if (strstr(de->d_name, ".seg") && strcmp(de->d_name, "spare.seg"))
			n++;
	closedir(d);
	return n;
}

/* Copies the data directory while the journal is running: what a crash at
 * this instant leaves on disk (no SEGEND, no final checkpoint). */
static void crash_copy(void)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf %s-copy && cp -a %s %s-copy", tdir, tdir, tdir);
	ck_assert_int_eq(system(cmd), 0);
}

/* Restarts on the crash copy, as if the process had died at crash_copy(). */
static void crash_restart(void)
{
	char cmd[256];

	env_down();
	got_clear();
	snprintf(cmd, sizeof(cmd), "rm -rf %s && mv %s-copy %s", tdir, tdir, tdir);
	ck_assert_int_eq(system(cmd), 0);
	env_up();
}

static char *seg_file(const char *q, uint32_t seg)
{
	static char path[256];

	snprintf(path, sizeof(path), "%s/queues/%s/%08u.seg", tdir, q, seg);
	return path;
}

/* ------------------------------------------------------------- tests */

START_TEST(test_codec)
{
	unsigned char h[JREC_HDR_SIZE], sh[JSEG_HDR_SIZE];
	struct jrec r = { .type = JREC_ADD, .rflags = 1, .seg = 7, .len = 5, .id = 42,
			  .aux = JPOS(3, 4096), .expiry_ms = -5, .add_ms = 123456789,
			  .iflags = 0xdeadbeef, .ilen = 5 }, d;
	uint32_t seg;
	uint64_t ssz;

	jrec_encode(&r, h);
	jrec_seal(h, "hello", 5);
	ck_assert(jrec_crc_ok(h, "hello", 5));
	ck_assert(!jrec_crc_ok(h, "hellp", 5));
	jrec_decode(h, &d);
	ck_assert_uint_eq(d.type, JREC_ADD);
	ck_assert_uint_eq(d.rflags, 1);
	ck_assert_uint_eq(d.seg, 7);
	ck_assert_uint_eq(d.len, 5);
	ck_assert_uint_eq(d.id, 42);
	ck_assert_uint_eq(d.aux, JPOS(3, 4096));
	ck_assert_int_eq(d.expiry_ms, -5);
	ck_assert_int_eq(d.add_ms, 123456789);
	ck_assert_uint_eq(d.iflags, 0xdeadbeef);
	ck_assert_uint_eq(jrec_size(0), 56);
	ck_assert_uint_eq(jrec_size(5), 64);
	h[20] ^= 1;
	ck_assert(!jrec_crc_ok(h, "hello", 5));

	jseg_header_encode(sh, 9, 65536, 1, 7, JSEG_F_PREALLOC);
	ck_assert_int_eq(jseg_header_decode(sh, &seg, &ssz), 0);
	ck_assert_uint_eq(seg, 9);
	ck_assert_uint_eq(ssz, 65536);
	sh[8] = 2; /* a newer version: refused, not misread */
	ck_assert_int_ne(jseg_header_decode(sh, &seg, &ssz), 0);

	{
		enum journal_sync s;
		enum journal_prealloc p;

		ck_assert_int_eq(journal_sync_parse("odsync", &s), 0);
		ck_assert_int_eq(s, JOURNAL_SYNC_ODSYNC);
		ck_assert_int_eq(journal_sync_parse("sometimes", &s), TERN_EINVAL);
		ck_assert_int_eq(journal_prealloc_parse("fallocate", &p), 0);
		ck_assert_str_eq(journal_prealloc_name(p), "fallocate");
		ck_assert_str_eq(journal_sync_name(JOURNAL_SYNC_INTERVAL), "interval");
	}
}
END_TEST

START_TEST(test_bad_name)
{
	struct journal_opts o;
	struct journal *j = NULL;
	struct journal_recovery rec;

	journal_opts_default(&o);
	ck_assert_int_eq(journal_open(env, "../x", &o, collect, NULL, &rec, &j), TERN_EBADNAME);
	ck_assert_int_eq(journal_open(env, "a/b", &o, collect, NULL, &rec, &j), TERN_EBADNAME);
	ck_assert_int_eq(journal_open(env, "..", &o, collect, NULL, &rec, &j), TERN_EBADNAME);
}
END_TEST

static const enum journal_prealloc pre_modes[] = {
	JOURNAL_PREALLOC_ZERO, JOURNAL_PREALLOC_FALLOCATE, JOURNAL_PREALLOC_NONE,
};

/* append / close / reopen, in every preallocation mode (loop index) */
START_TEST(test_reopen_order)
{
	struct journal_opts o;
	struct journal *j;
	struct journal_recovery rec;

	opts_small(&o, JOURNAL_SYNC_NONE);
	o.prealloc = pre_modes[_i];
	j = qopen("q", &o, &rec);
	ck_assert_uint_eq(ngot, 0);
	ck_assert_uint_eq(rec.next_id, 1);
	for (uint64_t id = 1; id <= 300; id++)
		add(j, id, (uint32_t)(id * 7 % 500), 1);
	pump(0);
	for (uint64_t id = 1; id <= 10; id++)
		ck_assert_int_eq(journal_remove(j, id), 0);
	j = reopen("q", &o, &rec);
	ck_assert_uint_eq(ngot, 290);
	for (size_t i = 0; i < ngot; i++)
		check_item(got[i], 11 + i, (uint32_t)((11 + i) * 7 % 500));
	ck_assert_uint_eq(rec.next_id, 301);
	ck_assert_uint_eq(rec.behind_items, 0);
	/* the segments spilled over 64 KiB and more than one file exists */
	ck_assert_int_ge(count_segs("q"), 1);
	{
		char cmd[200];
		snprintf(cmd, sizeof(cmd), "ls %s/catalog/data.mdb >/dev/null", tdir);
		ck_assert_int_eq(system(cmd), 0);
	}
}
END_TEST

START_TEST(test_open_items_head)
{
	struct journal_opts o;
	struct journal *j;

	opts_small(&o, JOURNAL_SYNC_NONE);
	j = qopen("q", &o, NULL);
	for (uint64_t id = 1; id <= 6; id++)
		add(j, id, 10, 1);
	ck_assert_int_eq(journal_open_item(j, 1, 1), 0);
	ck_assert_int_eq(journal_open_item(j, 2, 1), 0);
	ck_assert_int_eq(journal_open_item(j, 4, 1), 0);
	ck_assert_int_eq(journal_confirm(j, 1), 0);
	ck_assert_int_eq(journal_abort(j, 2), 0);
	ck_assert_int_eq(journal_remove(j, 3), 0);
	barrier();
	crash_copy(); /* open state is only in the journal records here */
	crash_restart();
	j = qopen("q", &o, NULL);
	/* 4 was open: first; then 2, 5, 6 in order; 1 and 3 are gone */
	ck_assert_uint_eq(ngot, 4);
	ck_assert_uint_eq(got[0]->id, 4);
	ck_assert_uint_eq(got[1]->id, 2);
	ck_assert_uint_eq(got[2]->id, 5);
	ck_assert_uint_eq(got[3]->id, 6);
	got_clear();
	/* and through a clean close (checkpoint path) as well */
	ck_assert_int_eq(journal_open_item(j, 6, 1), 0);
	reopen("q", &o, NULL);
	ck_assert_uint_eq(ngot, 4);
	ck_assert_uint_eq(got[0]->id, 6);
	ck_assert_uint_eq(got[1]->id, 2);
}
END_TEST

/* Delivery counts ride in OPEN/ABORT records (bytes 6..7) and a delayed
 * item's ADD carries the DELAYED flag: both survive a crash (records
 * replayed) and a clean close (records before the checkpoint, read by the
 * load), and a MOVED copy made by compaction keeps the count. */
static uint32_t got_deliveries(uint64_t id)
{
	for (size_t i = 0; i < ngot; i++)
		if (got[i]->id == id)
			return got[i]->deliveries;
	ck_abort_msg("item %llu not recovered", (unsigned long long)id);
	return 0;
}

START_TEST(test_deliveries_and_delay_survive)
{
	struct journal_opts o;
	struct journal *j;
	struct item *it;
	uint64_t t;
	unsigned char h[JREC_HDR_SIZE];
	struct jrec r = { .type = JREC_OPEN, .deliveries = 513 }, d;

	jrec_encode(&r, h);
	jrec_decode(h, &d);
	ck_assert_uint_eq(d.deliveries, 513);
	ck_assert_uint_eq(jrec_deliveries(70000), JREC_DELIVERIES_MAX);

	opts_small(&o, JOURNAL_SYNC_NONE);
	j = qopen("q", &o, NULL);
	add(j, 1, 10, 1);
	it = mk(2, 10);
	it->state |= ITEM_DELAYED; /* add_ms is then the due time */
	ck_assert_int_eq(journal_add(j, it, 1, &t), 0);
	item_unref(it);
	add(j, 3, 10, 1);
	ck_assert_int_eq(journal_open_item(j, 1, 1), 0);
	ck_assert_int_eq(journal_abort(j, 1), 0);
	ck_assert_int_eq(journal_open_item(j, 1, 2), 0);
	ck_assert_int_eq(journal_abort(j, 1), 0);
	ck_assert_int_eq(journal_open_item(j, 3, 7), 0); /* open at the crash */
	barrier();
	crash_copy();
	crash_restart();
	j = qopen("q", &o, NULL);
	ck_assert_uint_eq(ngot, 3);
	ck_assert_uint_eq(got_deliveries(1), 2);
	ck_assert_uint_eq(got_deliveries(2), 0);
	ck_assert_uint_eq(got_deliveries(3), 7);
	for (size_t i = 0; i < ngot; i++)
		ck_assert_uint_eq(got[i]->state & ITEM_DELAYED, got[i]->id == 2 ? ITEM_DELAYED : 0);
	got_clear();
	/* a clean close: the checkpoint covers the records, the load reads them */
	ck_assert_int_eq(journal_open_item(j, 1, 3), 0);
	reopen("q", &o, NULL);
	ck_assert_uint_eq(ngot, 3);
	ck_assert_uint_eq(got_deliveries(1), 3);
	ck_assert_uint_eq(got_deliveries(3), 7);
	got_clear();
}
END_TEST

START_TEST(test_flush)
{
	struct journal_opts o;
	struct journal *j;
	struct journal_recovery rec;

	uint64_t t = 0, ft;

	opts_small(&o, JOURNAL_SYNC_NONE);
	j = qopen("q", &o, NULL);
	for (uint64_t id = 1; id <= 10; id++)
		t = add(j, id, 20, 1);
	/* a flush has a ticket of its own, after the adds before it */
	ck_assert_int_eq(journal_flush(j, &ft), 0);
	ck_assert_uint_gt(ft, t);
	wait_ticket(ft);
	ck_assert_int_eq(dur_err, 0);
	add(j, 11, 20, 1);
	add(j, 12, 20, 1);
	barrier();
	crash_copy();
	reopen("q", &o, &rec);
	ck_assert_uint_eq(ngot, 2);
	check_item(got[0], 11, 20);
	check_item(got[1], 12, 20);
	ck_assert_uint_eq(rec.next_id, 13);
	got_clear();
	crash_restart(); /* replay path: FLUSH record applied */
	qopen("q", &o, &rec);
	ck_assert_uint_eq(ngot, 2);
	ck_assert_uint_eq(got[0]->id, 11);
}
END_TEST

static void list_fn(void *arg, const char *name)
{
	int *n = arg;

	if (!strcmp(name, "gone"))
		n[0]++;
	if (!strcmp(name, "kept"))
		n[1]++;
}

/* Queue "gone" has no directory and no catalog entry; "kept" is listed
 * kept times. */
static void check_gone(int kept)
{
	int seen[2] = { 0, 0 };
	char path[256];
	struct stat st;

	snprintf(path, sizeof(path), "%s/queues/gone", tdir);
	ck_assert_int_ne(stat(path, &st), 0);
	ck_assert_int_eq(jenv_catalog_list(env, list_fn, seen), 0);
	ck_assert_int_eq(seen[0], 0);
	ck_assert_int_eq(seen[1], kept);
}

START_TEST(test_delete)
{
	struct journal_opts o;
	struct journal *j;

	opts_small(&o, JOURNAL_SYNC_NONE);
	j = qopen("gone", &o, NULL);
	qopen("kept", &o, NULL);
	for (uint64_t id = 1; id <= 10; id++)
		add(j, id, 20, 1);
	pump(0);
	ck_assert_int_eq(journal_delete(j), 0);
	check_gone(1);
	reopen("gone", &o, NULL);
	ck_assert_uint_eq(ngot, 0);
}
END_TEST

/* A delete interrupted after it was marked in the catalog is finished at
 * the next start. */
START_TEST(test_delete_interrupted)
{
	struct journal_opts o;
	struct journal *j;
	struct jcat *cat;
	char path[256];

	opts_small(&o, JOURNAL_SYNC_NONE);
	j = qopen("gone", &o, NULL);
	qopen("kept", &o, NULL);
	add(j, 1, 20, 1);
	env_down();
	/* the crash happened right after step 1 of journal_delete */
	snprintf(path, sizeof(path), "%s/catalog", tdir);
	ck_assert_int_eq(jcat_open(path, 0, &cat), 0);
	ck_assert_int_eq(jcat_queue_put(cat, "gone", &o, JCAT_DELETING), 0);
	jcat_close(cat);
	env_up();
	check_gone(1);
	qopen("gone", &o, NULL);
	ck_assert_uint_eq(ngot, 0);
}
END_TEST

/* The allocation seam's failure: every allocation through tern_malloc
 * fails (and is counted) while it is installed. */
static unsigned nomem_calls;

static void *malloc_nomem(size_t n)
{
	(void)n;
	nomem_calls++;
	errno = ENOMEM;
	return NULL;
}

/*
 * Closing a journal when its last checkpoint cannot be allocated still
 * closes it (before, journal_close waited for the writer forever: the
 * checkpoint returned ENOMEM before handing the close over), and what it
 * held survives: the next open replays from the previous checkpoint.
 * Loop 0: the pass's batch holds records (only the checkpoint blob fails);
 * 1: nothing is pending and no batch is free, so the close batch itself
 * cannot be allocated either.
 */
START_TEST(test_close_without_memory)
{
	struct journal_opts o;
	struct journal *j;
	struct journal_recovery rec;
	uint64_t n = _i == 0 ? 50 : 0;

	opts_small(&o, JOURNAL_SYNC_NONE);
	o.checkpoint_interval_ms = 100000;
	j = qopen("q", &o, NULL);
	for (uint64_t id = 1; id <= n; id++)
		add(j, id, 30, 1);
	nomem_calls = 0;
	tern_malloc = malloc_nomem;
	journal_close(j);
	tern_malloc = malloc;
	ck_assert_uint_gt(nomem_calls, 0);
	reopen("q", &o, &rec);
	ck_assert_uint_eq(ngot, n);
	for (size_t i = 0; i < ngot; i++)
		check_item(got[i], 1 + i, 30);
	ck_assert_uint_eq(rec.next_id, n + 1);
	ck_assert_uint_eq(rec.records_replayed, n);
}
END_TEST

/* The same for a delete: its close batch cannot be allocated, the delete
 * completes and the queue's files and catalog entry are gone. */
START_TEST(test_delete_without_memory)
{
	struct journal_opts o;
	struct journal *j;

	opts_small(&o, JOURNAL_SYNC_NONE);
	j = qopen("gone", &o, NULL);
	nomem_calls = 0;
	tern_malloc = malloc_nomem;
	ck_assert_int_eq(journal_delete(j), 0);
	tern_malloc = malloc;
	ck_assert_uint_gt(nomem_calls, 0);
	check_gone(0);
}
END_TEST

START_TEST(test_tickets)
{
	struct journal_opts o;
	struct journal *ja, *jn, *jo;
	struct item *it = mk(1, 100);
	uint64_t t1, t2, t3, t4;

	opts_small(&o, JOURNAL_SYNC_ALWAYS);
	ja = qopen("a", &o, NULL);
	o.sync = JOURNAL_SYNC_NONE;
	jn = qopen("n", &o, NULL);
	o.sync = JOURNAL_SYNC_ODSYNC;
	jo = qopen("o", &o, NULL);
	ck_assert_int_eq(journal_add(ja, it, 1, &t1), 0);
	ck_assert_uint_gt(t1, 0);
	ck_assert_int_eq(journal_add(jn, it, 1, &t2), 0);
	ck_assert_uint_gt(t2, t1); /* none: resolved once written, not synced */
	ck_assert_int_eq(journal_add(jo, it, 1, &t3), 0);
	ck_assert_uint_gt(t3, t1);
	it->id = 2;
	ck_assert_int_eq(journal_add(ja, it, 1, &t4), 0);
	ck_assert_uint_gt(t4, t3);
	item_unref(it);
	wait_ticket(t4);
	ck_assert_int_eq(dur_err, 0);
	/* many passes with group commit */
	for (uint64_t id = 3; id < 500; id++) {
		it = mk(id, 300);
		ck_assert_int_eq(journal_add(ja, it, 1, &t1), 0);
		item_unref(it);
		if (id % 50 == 0)
			pump(0);
	}
	wait_ticket(t1);
	ck_assert_int_eq(dur_err, 0);
	{
		struct journal_stats st;

		journal_get_stats(ja, &st);
		ck_assert_uint_ge(st.records_written, 499);
		ck_assert_uint_ge(st.syncs, 1);
		ck_assert_uint_eq(st.write_errors, 0);
	}
	env_down();
	env_up();
	o.sync = JOURNAL_SYNC_ALWAYS;
	qopen("a", &o, NULL);
	ck_assert_uint_eq(ngot, 499);
	for (size_t i = 2; i < ngot; i++)
		check_item(got[i], i + 1, 300);
}
END_TEST

START_TEST(test_interval)
{
	struct journal_opts o;
	struct journal *j;

	opts_small(&o, JOURNAL_SYNC_INTERVAL);
	o.sync_interval_ms = 10;
	j = qopen("q", &o, NULL);
	add(j, 1, 10, 1);
	ck_assert_uint_ge(wait_syncs(j, 1), 1);
}
END_TEST

/* Damage: a torn tail, a flipped bit and a zeroed record in the middle. */
START_TEST(test_damage)
{
	struct journal_opts o;
	struct journal *j;
	struct journal_recovery rec;
	int fd;
	unsigned char b;

	opts_small(&o, JOURNAL_SYNC_NONE);
	j = qopen("q", &o, NULL);
	for (uint64_t id = 1; id <= 40; id++)
		add(j, id, 100, 1);
	pump(20);
	barrier();
	crash_copy();
	crash_restart();
	/* records are 160 bytes from offset 4096: record k at 4096+160*(k-1) */
	fd = open(seg_file("q", 1), O_RDWR);
	ck_assert_int_ge(fd, 0);
	/* flip a bit in the body of item 5 */
	ck_assert_int_eq(pread(fd, &b, 1, 4096 + 160 * 4 + 70), 1);
	b ^= 0x10;
	ck_assert_int_eq(pwrite(fd, &b, 1, 4096 + 160 * 4 + 70), 1);
	/* zero item 10 entirely */
	{
		char z[160] = { 0 };

		ck_assert_int_eq(pwrite(fd, z, 160, 4096 + 160 * 9), 160);
	}
	/* tear item 40: keep only half of it */
	{
		char z[80] = { 0 };

		ck_assert_int_eq(pwrite(fd, z, 80, 4096 + 160 * 39 + 80), 80);
	}
	close(fd);
	/* recovery replays from the checkpoint taken at open (nothing was
	 * checkpointed since), so it reads the damaged segment */
	j = qopen("q", &o, &rec);
	ck_assert_uint_eq(ngot, 37);
	{
		size_t k = 0;

		for (uint64_t id = 1; id <= 39; id++) {
			if (id == 5 || id == 10)
				continue;
			check_item(got[k++], id, 100);
		}
	}
	ck_assert_uint_ge(rec.corrupt_records, 3);
	ck_assert_uint_ge(rec.corrupt_bytes, 160 * 2 + 80);
	ck_assert_uint_ge(rec.next_id, 40); /* the checkpoint saw id 40 */
	/* the journal stays usable */
	add(j, 100, 10, 1);
	env_down();
	env_up();
	got_clear();
	qopen("q", &o, &rec);
	ck_assert_uint_eq(ngot, 38);
	ck_assert_uint_eq(got[37]->id, 100);
}
END_TEST

/* Truncating a segment at many offsets never crashes recovery and always
 * keeps a prefix. */
START_TEST(test_truncate_random)
{
	struct journal_opts o;
	struct journal *j;
	struct journal_recovery rec;
	size_t prev = 1000;

	opts_small(&o, JOURNAL_SYNC_NONE);
	o.prealloc = JOURNAL_PREALLOC_NONE; /* so the file ends at the data */
	j = qopen("q", &o, NULL);
	for (uint64_t id = 1; id <= 30; id++)
		add(j, id, 50 + (uint32_t)id, 1);
	barrier();
	crash_copy();
	crash_restart();
	for (off_t cut = 4096 + 30 * 120; cut >= 4000; cut -= 333) {
		char path[256];

		env_down();
		snprintf(path, sizeof(path), "%s", seg_file("q", 1));
		ck_assert_int_eq(truncate(path, cut), 0);
		env_up();
		got_clear();
		/* open without writing a new checkpoint beyond the cut: the
		 * first open's checkpoint covers nothing (P at segment 2) */
		j = qopen("q", &o, &rec);
		for (size_t i = 0; i < ngot; i++)
			check_item(got[i], i + 1, 50 + (uint32_t)(i + 1));
		ck_assert_uint_le(ngot, prev);
		prev = ngot;
		journal_close(j);
	}
}
END_TEST

static int enospc_hits;

static ssize_t pwrite_enospc(int fd, const void *buf, size_t n, off_t off)
{
	__atomic_add_fetch(&enospc_hits, 1, __ATOMIC_SEQ_CST);
	errno = ENOSPC;
	return -1;
}

static int fallocate_enospc(int fd, int mode, off_t off, off_t len)
{
	__atomic_add_fetch(&enospc_hits, 1, __ATOMIC_SEQ_CST);
	errno = ENOSPC;
	return -1;
}

/* Full disk: adds fail with ENOSPC, removes keep working, adds come back. */
START_TEST(test_enospc)
{
	struct journal_opts o;
	struct journal *j;
	struct journal_stats st;
	uint64_t id, accepted = 0, t;
	int rc = 0;

	opts_small(&o, JOURNAL_SYNC_NONE);
	o.prealloc = pre_modes[_i];
	j = qopen("q", &o, NULL);
	/* a new queue has no disk until its first record, and no spare until
	 * half of its first (small) segment is written: add until the writer
	 * has the next spare ready */
	for (id = 1; id < 200; id++) {
		add(j, id, 500, 1);
		accepted++;
		pump(1);
		journal_get_stats(j, &st);
		if (st.segments >= 2)
			break;
	}
	ck_assert_uint_ge(st.segments, 2);
	id++;
	enospc_hits = 0;
	jio.pwrite = pwrite_enospc;
	jio.fallocate = fallocate_enospc;
	/* the adds fill segment 1 and roll into the spare prepared before
	 * the disk filled; wait (one add at a time) until the writer has
	 * failed to prepare the next one, so the rest must fit in segment 2
	 * (a roll while the spare is still being prepared is allowed by
	 * design) */
	for (; id < 100000 && !__atomic_load_n(&enospc_hits, __ATOMIC_SEQ_CST); id++) {
		add(j, id, 500, 1);
		accepted++;
		pump(1);
	}
	ck_assert_int_gt(enospc_hits, 0);
	pump(2);
	for (; id < 100000; id++) {
		struct item *it = mk(id, 500);

		rc = journal_add(j, it, 1, &t);
		item_unref(it);
		if (rc)
			break;
		accepted++;
		if (id % 16 == 0)
			pump(1);
	}
	ck_assert_int_eq(rc, TERN_ENOSPC);
	ck_assert_uint_gt(accepted, 10);
	ck_assert_uint_lt(accepted, 400); /* a few small segments */
	/* removes still work: room was reserved */
	for (uint64_t k = 1; k <= accepted / 2; k++)
		ck_assert_int_eq(journal_remove(j, k), 0);
	pump(10);
	/* space comes back: adds work again (after the writer's retry) */
	jio_reset();
	for (int i = 0; i < 400; i++) {
		struct item *it = mk(id, 500);

		rc = journal_add(j, it, 1, &t);
		item_unref(it);
		if (rc == 0)
			break;
		pump(10);
	}
	ck_assert_int_eq(rc, 0);
	for (int k = 1; k <= 200; k++)
		add(j, id + (uint64_t)k, 500, 1);
	reopen("q", &o, NULL);
	ck_assert_uint_eq(ngot, accepted - accepted / 2 + 201);
	ck_assert_uint_eq(got[0]->id, accepted / 2 + 1);
	ck_assert_uint_eq(got[ngot - 1]->id, id + 200);
}
END_TEST

static int fdatasync_eio(int fd)
{
	errno = EIO;
	return -1;
}

START_TEST(test_eio)
{
	struct journal_opts o;
	struct journal *j;
	struct item *it = mk(1, 100);
	uint64_t t;

	opts_small(&o, JOURNAL_SYNC_ALWAYS);
	j = qopen("q", &o, NULL);
	ck_assert_int_eq(journal_add(j, it, 1, &t), 0);
	wait_ticket(t);
	ck_assert_int_eq(dur_err, 0);
	jio.fdatasync = fdatasync_eio;
	it->id = 2;
	ck_assert_int_eq(journal_add(j, it, 1, &t), 0);
	wait_ticket(t);
	ck_assert_int_eq(dur_err, TERN_EIO);
	/* failed for good: later mutations report EIO */
	it->id = 3;
	ck_assert_int_eq(journal_add(j, it, 1, &t), TERN_EIO);
	ck_assert_int_eq(journal_remove(j, 1), TERN_EIO);
	{
		struct journal_stats st;

		journal_get_stats(j, &st);
		ck_assert_uint_ge(st.write_errors, 1);
	}
	item_unref(it);
	jio_reset();
}
END_TEST

static int fdatasync_3ms(int fd)
{
	usleep(3000);
	return fdatasync(fd);
}

static uint64_t sum_counts(const uint64_t *a, size_t n)
{
	uint64_t t = 0;

	for (size_t i = 0; i < n; i++)
		t += a[i];
	return t;
}

/* The environment's figures: every fdatasync is timed into its bucket,
 * every group commit counted with its records and batches, and a failed
 * sync counted as an error. */
START_TEST(test_env_stats)
{
	struct journal_opts o;
	struct journal *j;
	struct jenv_stats st;
	struct item *it;
	uint64_t t = 0, slow = 0;

	jenv_get_stats(env, &st);
	ck_assert_uint_eq(sum_counts(st.fsync_count, JENV_FSYNC_BUCKETS + 1), 0);
	ck_assert_uint_eq(sum_counts(st.group_count, JENV_GROUP_BUCKETS + 1), 0);
	opts_small(&o, JOURNAL_SYNC_ALWAYS);
	j = qopen("q", &o, NULL);
	jio.fdatasync = fdatasync_3ms;
	/* ten adds in one loop pass: one group of ten records */
	for (uint64_t id = 1; id <= 10; id++) {
		it = mk(id, 100);
		ck_assert_int_eq(journal_add(j, it, 1, &t), 0);
		item_unref(it);
	}
	wait_ticket(t);
	ck_assert_int_eq(dur_err, 0);
	jenv_get_stats(env, &st);
	ck_assert_uint_ge(sum_counts(st.fsync_count, JENV_FSYNC_BUCKETS + 1), 1);
	for (size_t i = 0; i <= JENV_FSYNC_BUCKETS; i++)
		if (i == JENV_FSYNC_BUCKETS || jenv_fsync_bounds_us[i] >= 3000)
			slow += st.fsync_count[i];
	ck_assert_uint_ge(slow, 1); /* the 3 ms syncs are in the buckets above 3 ms */
	ck_assert_uint_ge(st.fsync_us, 3000);
	ck_assert_uint_eq(st.fsync_errors, 0);
	ck_assert_uint_ge(st.group_records, 10);
	ck_assert_uint_ge(st.group_batches, 1);
	ck_assert_uint_ge(sum_counts(st.group_count, JENV_GROUP_BUCKETS + 1), 1);
	ck_assert_uint_ge(st.group_count[4], 1); /* 10 records: the bucket up to 16 */
	jio.fdatasync = fdatasync_eio;
	it = mk(11, 100);
	ck_assert_int_eq(journal_add(j, it, 1, &t), 0);
	item_unref(it);
	wait_ticket(t);
	ck_assert_int_eq(dur_err, TERN_EIO);
	jenv_get_stats(env, &st);
	ck_assert_uint_ge(st.fsync_errors, 1);
	jio_reset();
}
END_TEST

/* fdatasync that records which files it synced (by inode). */
static pthread_mutex_t synced_mu = PTHREAD_MUTEX_INITIALIZER;
static ino_t synced[4096];
static size_t nsynced;

static int fdatasync_record(int fd)
{
	struct stat st;

	if (fstat(fd, &st) == 0) {
		pthread_mutex_lock(&synced_mu);
		if (nsynced < sizeof(synced) / sizeof(synced[0]))
			synced[nsynced++] = st.st_ino;
		pthread_mutex_unlock(&synced_mu);
	}
	return fdatasync(fd);
}

static int was_synced(ino_t ino)
{
	int found = 0;

	pthread_mutex_lock(&synced_mu);
	for (size_t i = 0; i < nsynced && !found; i++)
		found = synced[i] == ino;
	pthread_mutex_unlock(&synced_mu);
	return found;
}

/* Every segment a none/interval journal rolls past is synced (by the
 * syncer thread, after the roll), and so is the directory holding the new
 * names: by the time the journal is closed, no file of it is left
 * unsynced.  (Loop: 0 = none, 1 = interval.) */
START_TEST(test_roll_syncs)
{
	struct journal_opts o;
	struct journal *j;
	char path[256];
	DIR *d;
	struct dirent *de;
	struct stat st;
	int nseg = 0;

	nsynced = 0;
	jio.fdatasync = fdatasync_record;
	opts_small(&o, _i == 0 ? JOURNAL_SYNC_NONE : JOURNAL_SYNC_INTERVAL);
	o.sync_interval_ms = 100000;	/* no timed syncs: only rolls */
	o.checkpoint_interval_ms = 100000;
	j = qopen("q", &o, NULL);
	for (uint64_t id = 1; id <= 1500; id++) /* ~380 KB: 6 segments */
		add(j, id, 200, 1);
	env_down(); /* closing waits for the syncer's jobs */
	snprintf(path, sizeof(path), "%s/queues/q", tdir);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert(was_synced(st.st_ino));
	d = opendir(path);
	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d))) {
		char f[512];

		if (!strstr(de->d_name, ".seg") || !strcmp(de->d_name, "spare.seg"))
			continue;
		snprintf(f, sizeof(f), "%s/%s", path, de->d_name);
		ck_assert_int_eq(stat(f, &st), 0);
		if (!was_synced(st.st_ino))
			ck_abort_msg("segment %s was never synced", de->d_name);
		nseg++;
	}
	closedir(d);
	ck_assert_int_ge(nseg, 5);
	jio_reset();
}
END_TEST

/* An interval sync starts the writeback of what was written since the
 * previous sync job in pieces of at most 256 KiB (s_writeback_steps),
 * before its fdatasync: per file the pieces start at 0 and follow each
 * other without gap or overlap, and the segments rolled past are covered
 * whole (the rest by the writer's fdatasync as it left them). */
static pthread_mutex_t sfr_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sfr_call {
	ino_t ino;
	off_t off, len;
} sfr[8192];
static size_t nsfr;

static int sfr_record(int fd, off_t off, off_t len, unsigned int flags)
{
	struct stat st;

	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
		pthread_mutex_lock(&sfr_mu);
		if (nsfr < sizeof(sfr) / sizeof(sfr[0]))
			sfr[nsfr++] = (struct sfr_call){ st.st_ino, off, len };
		pthread_mutex_unlock(&sfr_mu);
	}
	return sync_file_range(fd, off, len, flags);
}

static struct {
	ino_t ino;
	off_t end;
	off_t synced; /* end at its last fdatasync */
} wend[64];
static size_t nwend;

static int fdatasync_end_record(int fd)
{
	struct stat st;

	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
		pthread_mutex_lock(&sfr_mu);
		for (size_t i = 0; i < nwend; i++)
			if (wend[i].ino == st.st_ino)
				wend[i].synced = wend[i].end;
		pthread_mutex_unlock(&sfr_mu);
	}
	return fdatasync(fd);
}

static ssize_t pwritev_record(int fd, const struct iovec *iov, int cnt, off_t off,
			     int flags)
{
	ssize_t n = pwritev2(fd, iov, cnt, off, flags);
	struct stat st;

	if (n > 0 && fstat(fd, &st) == 0) {
		size_t i;

		pthread_mutex_lock(&sfr_mu);
		for (i = 0; i < nwend && wend[i].ino != st.st_ino; i++)
			;
		if (i == nwend && nwend < sizeof(wend) / sizeof(wend[0]))
			wend[nwend++] = (typeof(wend[0])){ st.st_ino, 0, 0 };
		if (i < nwend && off + n > wend[i].end)
			wend[i].end = off + n;
		pthread_mutex_unlock(&sfr_mu);
	}
	return n;
}

static off_t written_end(ino_t ino)
{
	for (size_t i = 0; i < nwend; i++)
		if (wend[i].ino == ino)
			return wend[i].end;
	return -1;
}

static int sfr_cmp(const void *a, const void *b)
{
	const struct sfr_call *x = a, *y = b;

	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

START_TEST(test_sync_in_steps)
{
	struct journal_opts o;
	struct journal *j;
	off_t end = 0;
	int files = 0, whole = 0;

	nsfr = 0;
	nwend = 0;
	jio.sync_file_range = sfr_record;
	jio.pwritev = pwritev_record;
	jio.fdatasync = fdatasync_end_record;
	opts_small(&o, JOURNAL_SYNC_INTERVAL);
	o.segment_size = 4u << 20;
	o.sync_interval_ms = 20;
	o.checkpoint_interval_ms = 100000;
	j = qopen("q", &o, NULL);
	/* ~6 MB: segments of 1 and 2 MiB rolled past, then part of a 4 MiB one */
	for (uint64_t id = 1; id <= 2000; id++) {
		add(j, id, 3000, 1);
		if (id % 100 == 0)
			pump(5);
	}
	env_down(); /* waits for the syncer's jobs */
	jio_reset();
	ck_assert_uint_ge(nsfr, 8);
	qsort(sfr, nsfr, sizeof(sfr[0]), sfr_cmp);
	for (size_t i = 0; i < nsfr; i++) {
		ck_assert_int_gt(sfr[i].len, 0);
		ck_assert_int_le(sfr[i].len, 256 << 10);
		if (i == 0 || sfr[i].ino != sfr[i - 1].ino) {
			ck_assert_int_eq(sfr[i].off, 0);
			files++;
		} else {
			ck_assert_int_eq(sfr[i].off, end);
		}
		end = sfr[i].off + sfr[i].len;
		if (i + 1 == nsfr || sfr[i + 1].ino != sfr[i].ino) {
			/* never past what was written */
			ck_assert_int_le(end, written_end(sfr[i].ino));
			for (size_t k = 0; k < nwend; k++)
				if (wend[k].ino == sfr[i].ino && end == wend[k].end)
					wend[k].synced = end;
		}
	}
	/* the segments rolled past are synced whole: by the syncer's steps,
	 * or, for the rest, by the writer as it left them */
	for (size_t k = 0; k < nwend; k++)
		whole += wend[k].end > 0 && wend[k].synced == wend[k].end;
	ck_assert_int_ge(files, 1);
	ck_assert_int_ge(whole, 2);
}
END_TEST

/* The order of the record writes and syncs of the segment files, for
 * test_segment_synced_before_the_next. */
static struct ord_ev {
	ino_t ino;
	int sync; /* 0: a record write, 1: an fdatasync */
} ord[16384];
static size_t nord;

static void ord_note(int fd, int sync)
{
	struct stat st;

	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
		pthread_mutex_lock(&sfr_mu);
		if (nord < sizeof(ord) / sizeof(ord[0]))
			ord[nord++] = (struct ord_ev){ st.st_ino, sync };
		pthread_mutex_unlock(&sfr_mu);
	}
}

static ssize_t ord_pwritev(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	ssize_t n = pwritev2(fd, iov, cnt, off, flags);

	if (n > 0)
		ord_note(fd, 0);
	return n;
}

static int ord_fdatasync(int fd)
{
	int rc = fdatasync(fd);

	if (rc == 0)
		ord_note(fd, 1);
	return rc;
}

/* In none (0) and interval (1) as in the durable modes, a segment the
 * writer leaves is synced after its last record write and before the
 * first record write into the next: a power cut can then keep a queue's
 * prefix only, never a later segment's records without the earlier
 * one's last ones (docs/JOURNAL.md, "What counts as the end"). */
START_TEST(test_segment_synced_before_the_next)
{
	struct journal_opts o;
	struct journal *j;
	size_t nfiles = 0;

	nord = 0;
	jio.pwritev = ord_pwritev;
	jio.fdatasync = ord_fdatasync;
	opts_small(&o, _i == 0 ? JOURNAL_SYNC_NONE : JOURNAL_SYNC_INTERVAL);
	o.prealloc = JOURNAL_PREALLOC_FALLOCATE;
	o.sync_interval_ms = 60000; /* (no interval sync in between) */
	o.checkpoint_interval_ms = 60000;
	j = qopen("q", &o, NULL);
	for (uint64_t id = 1; id <= 400; id++) {
		add(j, id, 1000, 1);
		if (id % 50 == 0)
			pump(2);
	}
	pump_quiet();
	pthread_mutex_lock(&sfr_mu);
	for (size_t i = 0; i < nord; i++) {
		size_t k;
		int was_synced_after = 0;

		if (ord[i].sync)
			continue;
		/* the first record write into a file: every other file written
		 * before it must have been synced after its last write */
		for (k = 0; k < i && ord[k].ino != ord[i].ino; k++)
			;
		if (k < i)
			continue;
		nfiles++;
		/* back from it: the last record write into another file must
		 * be followed by a sync of that file */
		for (size_t m = i; m-- > 0;) {
			if (ord[m].ino == ord[i].ino)
				continue;
			if (ord[m].sync)
				continue;
			for (size_t x = m + 1; x < i; x++)
				was_synced_after |= ord[x].sync && ord[x].ino == ord[m].ino;
			if (!was_synced_after)
				ck_abort_msg("a record went into a new segment before the segment "
					     "before it was synced (event %zu)", i);
			break;
		}
	}
	pthread_mutex_unlock(&sfr_mu);
	jio_reset();
	ck_assert_uint_ge(nfiles, 3);
}
END_TEST

/* An interval sync that fails on the syncer thread fails the journal:
 * later adds report EIO, no checkpoint is committed past the failure, and
 * a restart still finds, in order, every record that was written. */
START_TEST(test_interval_sync_eio)
{
	struct journal_opts o;
	struct journal *j;
	struct journal_stats st;
	struct item *it;
	uint64_t t = 0, id;
	int rc = 0;

	opts_small(&o, JOURNAL_SYNC_INTERVAL);
	o.sync_interval_ms = 5;
	j = qopen("q", &o, NULL);
	for (id = 1; id <= 100; id++)
		add(j, id, 100, 1);
	ck_assert_uint_ge(wait_syncs(j, 1), 1);
	jio.fdatasync = fdatasync_eio;
	for (int i = 0; i < 2000 && rc == 0; i++, id++) {
		it = mk(id, 100);
		rc = journal_add(j, it, 1, &t);
		item_unref(it);
		pump(1);
	}
	ck_assert_int_eq(rc, TERN_EIO);
	journal_get_stats(j, &st);
	ck_assert_uint_ge(st.write_errors, 1);
	jio_reset();
	reopen("q", &o, NULL);
	/* the first 100 were synced; of the later ones, those written
	 * before the failure was seen (the rest got EIO with their tickets) */
	ck_assert_uint_ge(ngot, 100);
	ck_assert_uint_le(ngot, id - 2);
	for (size_t i = 0; i < ngot; i++)
		check_item(got[i], i + 1, 100);
}
END_TEST

static ssize_t pwritev_eio(int fd, const struct iovec *iov, int cnt, off_t off,
			     int flags)
{
	errno = EIO;
	return -1;
}

START_TEST(test_write_eio)
{
	struct journal_opts o;
	struct journal *j;
	struct item *it = mk(1, 100);
	uint64_t t;

	opts_small(&o, JOURNAL_SYNC_ODSYNC);
	j = qopen("q", &o, NULL);
	jio.pwritev = pwritev_eio;
	ck_assert_int_eq(journal_add(j, it, 1, &t), 0);
	wait_ticket(t);
	ck_assert_int_eq(dur_err, TERN_EIO);
	ck_assert_int_eq(journal_add(j, it, 1, &t), TERN_EIO);
	item_unref(it);
	jio_reset();
}
END_TEST

/* Read-behind at run time: items added with in_memory = 0 come back in
 * order, whether already written or still in the pending batch. */
START_TEST(test_read_behind_runtime)
{
	struct journal_opts o;
	struct journal *j;
	struct item *it;
	uint64_t next = 11;

	opts_small(&o, JOURNAL_SYNC_NONE);
	j = qopen("q", &o, NULL);
	add_range(j, 1, 10, 100, 1);
	for (uint64_t id = 11; id <= 600; id++) {
		add(j, id, 100, 0);
		if (id % 100 == 0)
			pump(2);
		if (id % 7 == 0) { /* read some back while adding */
			ck_assert_int_eq(journal_read_behind(j, &it), 0);
			ck_assert_ptr_nonnull(it);
			check_item(it, next++, 100);
			ck_assert_int_eq(journal_remove(j, it->id), 0);
			item_unref(it);
		}
	}
	next = read_behind_all(j, next, 100);
	ck_assert_uint_eq(next, 601);
	{
		struct journal_stats st;

		journal_get_stats(j, &st);
		ck_assert_uint_eq(st.behind_items, 0);
	}
}
END_TEST

/* Item id's ADD record in queue q's segments: its segment file and offset. */
static void find_add(const char *q, uint64_t id, uint32_t *seg, uint64_t *off)
{
	for (uint32_t n = 1; n < 64; n++) {
		struct jreader rd;
		const unsigned char *body;
		struct jrec r;

		if (access(seg_file(q, n), F_OK) != 0 || jreader_open(&rd, seg_file(q, n)) != 0)
			continue;
		while (jreader_next(&rd, off, &r, &body) == JREAD_REC)
			if (r.type == JREC_ADD && r.id == id) {
				jreader_close(&rd);
				*seg = n;
				return;
			}
		jreader_close(&rd);
	}
	ck_abort_msg("no ADD record of item %llu", (unsigned long long)id);
}

/* Read-behind of large bodies (read straight into their items, from
 * JREADER_DIRECT on) among small ones: every item comes back whole and in
 * order, whether its body was in the reader's buffer, partly or not at
 * all; a large record whose body was damaged on disk is skipped, and the
 * items after it still come back. */
START_TEST(test_read_behind_large)
{
	static const uint32_t lens[] = { 100, 20000, 70000, JREADER_DIRECT, 300,
					 JREADER_DIRECT - 1, 40000, 70000, 8 };
	const uint64_t n = 150, bad = 101;
	struct journal_opts o;
	struct journal *j;
	struct item *it;
	uint64_t next = 3, off;
	uint32_t seg;
	unsigned char b;
	int fd;

	opts_small(&o, JOURNAL_SYNC_NONE);
	o.segment_size = 4 << 20;
	j = qopen("q", &o, NULL);
	add(j, 1, 10, 1);
	add(j, 2, 10, 1);
	for (uint64_t id = 3; id <= n; id++) {
		add(j, id, lens[id % 9], 0);
		if (id % 10 == 0)
			pump(1);
	}
	pump(20);
	barrier();
	ck_assert_uint_ge(lens[bad % 9], JREADER_DIRECT);
	find_add("q", bad, &seg, &off);
	fd = open(seg_file("q", seg), O_RDWR);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &b, 1, (off_t)(off + JREC_HDR_SIZE + 5000)), 1);
	b ^= 0x10;
	ck_assert_int_eq(pwrite(fd, &b, 1, (off_t)(off + JREC_HDR_SIZE + 5000)), 1);
	close(fd);
	for (;;) {
		ck_assert_int_eq(journal_read_behind(j, &it), 0);
		if (!it)
			break;
		if (next == bad)
			next++;
		check_item(it, next, lens[next % 9]);
		ck_assert_int_eq(journal_remove(j, it->id), 0);
		item_unref(it);
		next++;
		if (next % 20 == 0)
			pump(1);
	}
	ck_assert_uint_eq(next, n + 1);
}
END_TEST

/* The furthest byte read from each segment file (by number) through
 * jio.pread and jio.preadv. */
static uint64_t seg_read_to[64];

static void note_read(int fd, off_t off, ssize_t n)
{
	char link[64], path[512];
	ssize_t k;
	uint32_t seg;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	k = readlink(link, path, sizeof(path) - 1);
	if (n <= 0 || k <= 0)
		return;
	path[k] = 0;
	if (k > 12 && sscanf(path + k - 12, "%8u.seg", &seg) == 1 && seg < 64 &&
	    (uint64_t)off + (uint64_t)n > seg_read_to[seg])
		seg_read_to[seg] = (uint64_t)off + (uint64_t)n;
}

static ssize_t pread_noted(int fd, void *buf, size_t n, off_t off)
{
	ssize_t r = pread(fd, buf, n, off);

	note_read(fd, off, r);
	return r;
}

static ssize_t preadv_noted(int fd, const struct iovec *iov, int cnt, off_t off)
{
	ssize_t r = preadv(fd, iov, cnt, off);

	note_read(fd, off, r);
	return r;
}

/* Where segment seg's records end (after its SEGEND), 0 without one. */
static uint64_t segend_end(const char *q, uint32_t seg)
{
	struct jreader rd;
	const unsigned char *body;
	struct jrec r;
	uint64_t off, end = 0;

	if (jreader_open(&rd, seg_file(q, seg)) != 0)
		return 0;
	while (jreader_next(&rd, &off, &r, &body) == JREAD_REC)
		;
	/* jreader_next stops at a SEGEND, past it */
	if (rd.done && rd.off < rd.fsize)
		end = rd.off;
	jreader_close(&rd);
	return end;
}

/* Read-behind reads a segment the loop has left only up to its SEGEND:
 * the tail after it (kept for the removes of the items then live, and
 * preallocated) is never read, which would make the kernel fill it with
 * zeros and read ahead more of it. */
START_TEST(test_read_behind_stops_at_segend)
{
	struct journal_opts o;
	struct journal *j;
	int checked = 0;

	opts_small(&o, JOURNAL_SYNC_NONE);
	o.prealloc = JOURNAL_PREALLOC_FALLOCATE;
	j = qopen("q", &o, NULL);
	add_range(j, 1, 10, 100, 1);
	add_range(j, 11, 2000, 100, 0);
	pump(20);
	barrier();
	memset(seg_read_to, 0, sizeof(seg_read_to));
	jio.pread = pread_noted;
	jio.preadv = preadv_noted;
	ck_assert_uint_eq(read_behind_all(j, 11, 100), 2001);
	jio_reset();
	for (uint32_t seg = 1; seg < 64; seg++) {
		struct stat st;
		uint64_t end;

		if (stat(seg_file("q", seg), &st) != 0 || !(end = segend_end("q", seg)))
			continue;
		ck_assert_uint_gt(seg_read_to[seg], 0);
		ck_assert_msg(seg_read_to[seg] <= end,
			      "segment %u: read to %llu, its records end at %llu (file %lld)",
			      seg, (unsigned long long)seg_read_to[seg],
			      (unsigned long long)end, (long long)st.st_size);
		if ((uint64_t)st.st_size > end)
			checked++; /* one with a tail */
	}
	ck_assert_int_gt(checked, 2);
}
END_TEST

/* Recovery keeps at most max_memory_size of bodies in memory; the rest is
 * read back in order. */
START_TEST(test_read_behind_restart)
{
	struct journal_opts o;
	struct journal *j;
	struct journal_recovery rec;
	struct item *it;
	uint64_t next;

	opts_small(&o, JOURNAL_SYNC_NONE);
	j = qopen("q", &o, NULL);
	for (uint64_t id = 1; id <= 2000; id++)
		add(j, id, 100, 1);
	for (uint64_t id = 1; id <= 5; id++)
		journal_remove(j, id);
	env_down();
	env_up();
	o.max_memory_size = 1000;
	j = qopen("q", &o, &rec);
	ck_assert_uint_eq(ngot, 10);
	ck_assert_uint_eq(got[0]->id, 6);
	ck_assert_uint_eq(rec.behind_items, 1985);
	ck_assert_uint_eq(rec.behind_bytes, 198500);
	next = 16;
	for (;;) {
		ck_assert_int_eq(journal_read_behind(j, &it), 0);
		if (!it)
			break;
		check_item(it, next++, 100);
		ck_assert_int_eq(journal_remove(j, it->id), 0);
		item_unref(it);
	}
	ck_assert_uint_eq(next, 2001);
	/* drained: after a restart only the 10 in-memory ones remain */
	env_down();
	env_up();
	got_clear();
	qopen("q", &o, &rec);
	ck_assert_uint_eq(ngot, 10);
	ck_assert_uint_eq(rec.behind_items, 0);
}
END_TEST

/* Once armed, the first call of a hooked function (the writer's or the
 * syncer's) is held until the test releases it (bounded: 5 s). */
static int slow_armed, slow_in, slow_release;

static void hold_if_armed(void)
{
	if (__atomic_exchange_n(&slow_armed, 0, __ATOMIC_ACQ_REL)) {
		__atomic_store_n(&slow_in, 1, __ATOMIC_RELEASE);
		for (int i = 0; i < 5000 && !__atomic_load_n(&slow_release, __ATOMIC_ACQUIRE); i++)
			usleep(1000);
		__atomic_store_n(&slow_in, 0, __ATOMIC_RELEASE);
	}
}

static int fdatasync_slow(int fd)
{
	hold_if_armed();
	return fdatasync(fd);
}

/* Pumps the loop until a call is held in fdatasync_slow (bounded). */
static void wait_slow_in(void)
{
	for (int i = 0; i < 2000 && !__atomic_load_n(&slow_in, __ATOMIC_ACQUIRE); i++)
		pump(1);
	ck_assert(__atomic_load_n(&slow_in, __ATOMIC_ACQUIRE));
}

/* While the syncer is busy with an interval sync, sets written by the loop
 * do not wake the writer: it has planned to wake within an interval, and
 * the syncer wakes it when the sync is done.  (Otherwise it would be woken
 * at every loop pass, each time two context switches on the core the loop
 * may share.)  The records still become durable once the sync is let go. */
START_TEST(test_no_wakeups_during_sync)
{
	struct journal_opts o;
	struct journal *j;
	struct journal_stats st;
	uint64_t id = 1, w0, w1, syncs0;
	int n = 0;

	opts_small(&o, JOURNAL_SYNC_INTERVAL);
	o.segment_size = 4 << 20;	/* no roll: a roll needs the writer */
	o.checkpoint_interval_ms = 100000; /* nor a checkpoint */
	o.sync_interval_ms = 5;
	jio.fdatasync = fdatasync_slow;
	slow_armed = slow_in = slow_release = 0;
	j = qopen("q", &o, NULL);
	add(j, id++, 100, 1);
	ck_assert_uint_ge(wait_syncs(j, 1), 1);
	/* the next interval sync blocks in the syncer */
	__atomic_store_n(&slow_armed, 1, __ATOMIC_RELEASE);
	add(j, id++, 100, 1);
	wait_slow_in();
	pump(20); /* the writer plans its next wake-up */
	journal_get_stats(j, &st);
	syncs0 = st.syncs;
	w0 = jenv_writer_wakeups(env);
	for (; n < 100 && __atomic_load_n(&slow_in, __ATOMIC_ACQUIRE); n++) {
		add(j, id++, 100, 1);
		pump(1); /* a loop pass: written inline */
	}
	w1 = jenv_writer_wakeups(env);
	ck_assert(__atomic_load_n(&slow_in, __ATOMIC_ACQUIRE)); /* all during the sync */
	ck_assert_int_eq(n, 100);
	ck_assert_uint_le(w1 - w0, 3);
	/* let it go: a later interval sync covers the 100 */
	__atomic_store_n(&slow_release, 1, __ATOMIC_RELEASE);
	ck_assert_uint_ge(wait_syncs(j, syncs0 + 2), syncs0 + 2);
	jio_reset();
	reopen("q", &o, NULL);
	ck_assert_uint_eq(ngot, id - 1);
	for (size_t i = 0; i < ngot; i++)
		check_item(got[i], i + 1, 100);
}
END_TEST

static int npwritev;

static ssize_t pwritev_count(int fd, const struct iovec *iov, int cnt, off_t off,
			     int flags)
{
	__atomic_add_fetch(&npwritev, 1, __ATOMIC_RELAXED);
	return pwritev2(fd, iov, cnt, off, flags);
}

/* Batches that queue up for the writer while it syncs (always: one per
 * loop pass) are written with one pwritev when they continue each other,
 * not one each; the records are all there after a restart. */
START_TEST(test_group_one_write)
{
	struct journal_opts o;
	struct journal *j;
	uint64_t t = 0;

	opts_small(&o, JOURNAL_SYNC_ALWAYS);
	o.prealloc = JOURNAL_PREALLOC_NONE; /* no spare writes to count */
	o.segment_size = 4u << 20;
	o.checkpoint_interval_ms = 100000;
	jio.fdatasync = fdatasync_slow;
	jio.pwritev = pwritev_count;
	slow_armed = slow_in = slow_release = 0;
	j = qopen("q", &o, NULL);
	wait_ticket(add(j, 1, 100, 1));
	pump_quiet(); /* the segment is activated and synced */
	/* the next group's sync holds the writer */
	__atomic_store_n(&slow_armed, 1, __ATOMIC_RELEASE);
	add(j, 2, 100, 1);
	wait_slow_in();
	for (uint64_t id = 3; id <= 6; id++) {
		t = add(j, id, 100 + (uint32_t)id, 1);
		pump(0); /* one loop pass: one batch, queued behind the sync */
	}
	ck_assert(__atomic_load_n(&slow_in, __ATOMIC_ACQUIRE));
	__atomic_store_n(&npwritev, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&slow_release, 1, __ATOMIC_RELEASE);
	wait_ticket(t);
	ck_assert_int_eq(__atomic_load_n(&npwritev, __ATOMIC_RELAXED), 1);
	jio_reset();
	reopen("q", &o, NULL);
	ck_assert_uint_eq(ngot, 6);
	for (size_t i = 0; i < ngot; i++)
		check_item(got[i], i + 1, i < 2 ? 100 : 100 + (uint32_t)(i + 1));
}
END_TEST

/* In always and odsync, a hand-over of a few sets that one client alone
 * waits for is written and synced by the loop itself when the server says
 * one client alone is sending (jenv_set_solo) and the writer is idle: its
 * tickets are resolved within the pass, without a wake-up of the writer
 * (always: with one fdatasync).  More sets, two waiters, or one while
 * other clients send, go to the writer as before.  All of them are on
 * disk. */
static const enum journal_sync lone_modes[] = { JOURNAL_SYNC_ALWAYS, JOURNAL_SYNC_ODSYNC };

/* One client (solo set) waits for n sets of j, numbered from *id: tries
 * until the loop syncs them itself (the writer may still hold wlock for a
 * moment) and checks that it did so without the writer, with one
 * fdatasync in always.  Returns 1 when it did, 0 after 20 tries. */
static int lone_sets_synced_by_loop(struct journal *j, enum journal_sync mode, uint64_t *id, int n)
{
	for (int k = 0; k < 20; k++) {
		struct journal_stats js;
		uint64_t t = 0, syncs0, w0;

		pump_quiet();
		journal_get_stats(j, &js);
		syncs0 = js.syncs;
		w0 = jenv_writer_wakeups(env);
		jenv_note_waiter(env);
		for (int i = 0; i < n; i++)
			t = add(j, (*id)++, 100, 1);
		pump(0);
		if (dur_upto >= t) {
			journal_get_stats(j, &js);
			ck_assert_uint_eq(js.syncs - syncs0, mode == JOURNAL_SYNC_ALWAYS ? 1 : 0);
			ck_assert_uint_eq(jenv_writer_wakeups(env), w0);
			wait_ticket(t);
			return 1;
		}
		wait_ticket(t);
		ck_assert_int_eq(dur_err, 0);
	}
	return 0;
}

/* n sets of j from *id, waited for by `waiters` clients: the writer
 * syncs them (it is woken), without error. */
static void sets_synced_by_writer(struct journal *j, uint64_t *id, int n, int waiters)
{
	uint64_t t = 0, w0;

	pump_quiet();
	w0 = jenv_writer_wakeups(env);
	for (int i = 0; i < waiters; i++)
		jenv_note_waiter(env);
	for (int i = 0; i < n; i++)
		t = add(j, (*id)++, 100, 1);
	pump(0);
	wait_ticket(t);
	ck_assert_int_eq(dur_err, 0);
	ck_assert_uint_gt(jenv_writer_wakeups(env), w0);
}

START_TEST(test_lone_waiter_synced_by_loop)
{
	struct journal_opts o;
	struct journal *j;
	uint64_t id = 2;

	opts_small(&o, lone_modes[_i]);
	o.prealloc = JOURNAL_PREALLOC_NONE; /* no spare work for the writer */
	o.checkpoint_interval_ms = 100000;
	j = qopen("q", &o, NULL);
	wait_ticket(add(j, 1, 100, 1));
	jenv_set_solo(env, 1);
	ck_assert(lone_sets_synced_by_loop(j, lone_modes[_i], &id, 1));
	/* one client's four sets: the loop syncs them, all in one sync */
	ck_assert(lone_sets_synced_by_loop(j, lone_modes[_i], &id, 4));
	/* one client's 17 sets, more than the loop syncs itself
	 * (LONE_MAX_SETS): the writer syncs */
	sets_synced_by_writer(j, &id, 17, 1);
	/* two clients wait: the writer syncs */
	sets_synced_by_writer(j, &id, 1, 2);
	/* one waits, but other clients send: the writer syncs */
	jenv_set_solo(env, 0);
	sets_synced_by_writer(j, &id, 1, 1);
	reopen("q", &o, NULL);
	ck_assert_uint_eq(ngot, (size_t)id - 1);
	for (size_t i = 0; i < ngot; i++)
		check_item(got[i], i + 1, 100);
}
END_TEST

/* A lone client's set whose sync fails on the loop (always: the
 * fdatasync; odsync: the RWF_DSYNC write): its ticket is reported failed
 * within the pass, without the writer, and the journal is failed for
 * good, as on the writer (test_eio). */
static ssize_t pwritev_dsync_eio(int fd, const struct iovec *iov, int cnt, off_t off,
				 int flags)
{
	if (flags & RWF_DSYNC) {
		errno = EIO;
		return -1;
	}
	return pwritev2(fd, iov, cnt, off, flags);
}

START_TEST(test_lone_sync_eio)
{
	struct journal_opts o;
	struct journal *j;
	uint64_t t, w0, id = 2;

	opts_small(&o, lone_modes[_i]);
	o.prealloc = JOURNAL_PREALLOC_NONE; /* no spare work for the writer */
	o.checkpoint_interval_ms = 100000;
	j = qopen("q", &o, NULL);
	wait_ticket(add(j, 1, 100, 1));
	jenv_set_solo(env, 1);
	/* first a set the loop syncs */
	ck_assert(lone_sets_synced_by_loop(j, lone_modes[_i], &id, 1));
	pump_quiet();
	if (lone_modes[_i] == JOURNAL_SYNC_ALWAYS)
		jio.fdatasync = fdatasync_eio;
	else
		jio.pwritev = pwritev_dsync_eio;
	w0 = jenv_writer_wakeups(env);
	jenv_note_waiter(env);
	t = add(j, id, 100, 1);
	pump(0);
	ck_assert_uint_ge(dur_upto, t); /* answered in the pass */
	ck_assert_int_eq(dur_err, TERN_EIO);
	ck_assert_uint_eq(jenv_writer_wakeups(env), w0);
	{
		struct item *it = mk(id + 1, 100);

		ck_assert_int_eq(journal_add(j, it, 1, &t), TERN_EIO);
		item_unref(it);
	}
	jio_reset();
}
END_TEST

/*
 * The wait for the clients a sync answered (jwriter.c, w_linger).  Client
 * A's add is synced (held about 300 ms) while client B's queues up; once
 * A is answered, the writer waits for A's next add before it syncs B, and
 * writes and syncs the two as one group.  Loop index: 0 A comes back; 1
 * A does not, and the wait ends at its deadline (as long as A's group
 * took); 2 the wait is off (jenv_set_group_wait 0), so B is synced at
 * once.  Either way every add is durable and survives a restart.
 */
START_TEST(test_group_waits_for_answered_clients)
{
	struct journal_opts o;
	struct journal *j;
	struct journal_stats js;
	struct jenv_stats st0, st;
	uint64_t ta, tb, ta2, syncs0;

	opts_small(&o, JOURNAL_SYNC_ALWAYS);
	o.prealloc = JOURNAL_PREALLOC_NONE; /* no spare syncs to count */
	o.segment_size = 4u << 20;
	o.checkpoint_interval_ms = 100000;
	jio.fdatasync = fdatasync_slow;
	slow_armed = slow_in = slow_release = 0;
	jenv_set_group_wait(env, _i == 2 ? 0 : 5000000);
	j = qopen("q", &o, NULL);
	wait_ticket(add(j, 1, 100, 1));
	pump_quiet(); /* the segment is activated and synced */
	journal_get_stats(j, &js);
	syncs0 = js.syncs;
	jenv_get_stats(env, &st0);
	/* A's group: its sync is held.  (A hand-over one client alone waits
	 * for, the loop would sync itself: A stands for two clients.) */
	__atomic_store_n(&slow_armed, 1, __ATOMIC_RELEASE);
	jenv_note_waiter(env);
	jenv_note_waiter(env);
	ta = add(j, 2, 100, 1);
	pump(0);
	wait_slow_in();
	/* B queues up behind it */
	jenv_note_waiter(env);
	tb = add(j, 3, 100, 1);
	pump(0);
	usleep(300000);
	__atomic_store_n(&slow_release, 1, __ATOMIC_RELEASE);
	wait_ticket(ta);
	if (_i == 2) {
		wait_ticket(tb);
	} else {
		pump(50);
		ck_assert_uint_lt(dur_upto, tb); /* the writer waits for A */
	}
	if (_i == 1)
		wait_ticket(tb); /* at the deadline, without A */
	jenv_note_waiter(env);
	jenv_note_waiter(env);
	ta2 = add(j, 4, 100, 1);
	pump(0);
	wait_ticket(ta2);
	ck_assert_int_eq(dur_err, 0);
	journal_get_stats(j, &js);
	jenv_get_stats(env, &st);
	/* A; then B with A's next add, or each alone */
	ck_assert_uint_eq(js.syncs - syncs0, _i == 0 ? 2 : 3);
	ck_assert_uint_eq(st.group_waits - st0.group_waits, _i == 2 ? 0 : 1);
	ck_assert_uint_eq(st.group_waits_cut - st0.group_waits_cut, _i == 1 ? 1 : 0);
	if (_i == 0)
		ck_assert_uint_ge(st.group_count[1] - st0.group_count[1], 1); /* 2 records */
	jio_reset();
	reopen("q", &o, NULL);
	ck_assert_uint_eq(ngot, 4);
	for (size_t i = 0; i < ngot; i++)
		check_item(got[i], i + 1, 100);
}
END_TEST

/* A pwritev that, once armed, holds the first caller (the writer) like
 * fdatasync_slow; counts the calls. */
static ssize_t pwritev_slow(int fd, const struct iovec *iov, int cnt, off_t off,
			     int flags)
{
	hold_if_armed();
	return pwritev_count(fd, iov, cnt, off, flags);
}

/* always and odsync: batches that queue up behind the writer and run past
 * the end of a segment are gathered per segment (the next one is activated
 * only after the old one's records are written); every set is durable
 * without error and comes back, in order and byte for byte, on restart. */
START_TEST(test_group_across_roll)
{
	struct journal_opts o;
	struct journal *j;
	uint64_t t = 0;
	const uint64_t last = 2 + 40;
	int calls;

	opts_small(&o, _i == 0 ? JOURNAL_SYNC_ALWAYS : JOURNAL_SYNC_ODSYNC);
	o.checkpoint_interval_ms = 100000;
	j = qopen("q", &o, NULL);
	add(j, 1, 100, 1);
	pump(20);
	barrier(); /* segment 1 and the barrier journal are in place */
	jio.pwritev = pwritev_slow;
	slow_in = slow_release = 0;
	__atomic_store_n(&slow_armed, 1, __ATOMIC_RELEASE);
	add(j, 2, 100, 1);
	wait_slow_in(); /* the writer is held in the write of item 2 */
	__atomic_store_n(&npwritev, 0, __ATOMIC_RELAXED);
	for (uint64_t id = 3; id <= last; id++) { /* ~120 KB: past segment ends */
		t = add(j, id, 3000, 1);
		pump(0); /* one batch each, queued behind the held write */
	}
	ck_assert(__atomic_load_n(&slow_in, __ATOMIC_ACQUIRE));
	__atomic_store_n(&slow_release, 1, __ATOMIC_RELEASE);
	wait_ticket(t);
	ck_assert_int_eq(dur_err, 0);
	calls = __atomic_load_n(&npwritev, __ATOMIC_RELAXED);
	/* 40 batches in 3 segments: one gather per segment run, a few calls
	 * (40 if each batch were written alone) */
	ck_assert_msg(calls <= 8, "%d pwritev calls for 40 batches", calls);
	ck_assert_int_ge(count_segs("q"), 3);
	jio_reset();
	reopen("q", &o, NULL);
	ck_assert_uint_eq(ngot, last);
	for (size_t i = 0; i < ngot; i++)
		check_item(got[i], i + 1, i < 2 ? 100 : 3000);
}
END_TEST

/* Fails the writes of queue "a" with EIO (its files are under queues/a/). */
static ssize_t pwritev_eio_a(int fd, const struct iovec *iov, int cnt, off_t off,
			     int flags)
{
	char link[64], target[512];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, target, sizeof(target) - 1);
	if (n > 0) {
		target[n] = '\0';
		if (strstr(target, "/queues/a/")) {
			errno = EIO;
			return -1;
		}
	}
	return pwritev2(fd, iov, cnt, off, flags);
}

/* A group holds batches of two journals, interleaved, so each write of a
 * gather is flushed by the other journal's next batch.  When queue a's
 * writes fail, a fails (its sets get EIO, later adds too), and b's sets in
 * the same group are still written, synced and reported durable: the
 * failure of the gather flushed on b's behalf is a's alone. */
START_TEST(test_group_other_journal_fails)
{
	struct journal_opts o;
	struct journal *a, *b;
	struct item *it;
	uint64_t t, ta[2], tb[2];

	opts_small(&o, JOURNAL_SYNC_ALWAYS);
	o.prealloc = JOURNAL_PREALLOC_NONE;
	o.segment_size = 4u << 20;
	o.checkpoint_interval_ms = 100000;
	a = qopen("a", &o, NULL);
	b = qopen("b", &o, NULL);
	add(a, 1, 100, 1);
	wait_ticket(add(b, 1, 100, 1)); /* both segments activated and synced */
	pump(20);
	jio.fdatasync = fdatasync_slow;
	slow_armed = slow_in = slow_release = 0;
	__atomic_store_n(&slow_armed, 1, __ATOMIC_RELEASE);
	t = add(a, 2, 100, 1);
	wait_slow_in(); /* a2's group is written; its sync holds the writer */
	for (int i = 0; i < 2; i++) {
		tb[i] = add(b, 3 + (uint64_t)i, 200, 1);
		pump(0); /* one batch of b */
		ta[i] = add(a, 3 + (uint64_t)i, 200, 1);
		pump(0); /* one batch of a */
	}
	ck_assert(__atomic_load_n(&slow_in, __ATOMIC_ACQUIRE));
	jio.pwritev = pwritev_eio_a;
	__atomic_store_n(&slow_release, 1, __ATOMIC_RELEASE);
	wait_ticket(ta[1] > tb[1] ? ta[1] : tb[1]);
	ck_assert_int_eq(ticket_err(t), 0); /* written and synced before */
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(ticket_err(tb[i]), 0);
		ck_assert_int_eq(ticket_err(ta[i]), TERN_EIO);
	}
	it = mk(5, 100);
	ck_assert_int_eq(journal_add(a, it, 1, &t), TERN_EIO);
	ck_assert_int_eq(journal_add(b, it, 1, &t), 0);
	item_unref(it);
	wait_ticket(t);
	ck_assert_int_eq(ticket_err(t), 0);
	jio_reset();
	reopen("b", &o, NULL);
	ck_assert_uint_eq(ngot, 4);
	check_item(got[0], 1, 100);
	check_item(got[1], 3, 200);
	check_item(got[2], 4, 200);
	check_item(got[3], 5, 100);
	got_clear();
	qopen("a", &o, NULL); /* what was synced before the failure */
	ck_assert_uint_eq(ngot, 2);
	check_item(got[0], 1, 100);
	check_item(got[1], 2, 100);
}
END_TEST

/* A steady flow through a queue with a small backlog reuses segments. */
START_TEST(test_segment_reuse)
{
	struct journal_opts o;
	struct journal *j;
	uint64_t id, head = 1;
	int maxsegs = 0;

	opts_small(&o, JOURNAL_SYNC_NONE);
	j = qopen("q", &o, NULL);
	for (id = 1; id <= 6000; id++) {
		add(j, id, 200, 1);
		if (id > 20)
			ck_assert_int_eq(journal_remove(j, head++), 0);
		if (id % 100 == 0) {
			int n;

			pump(25); /* checkpoints run, dead segments go */
			pump_quiet();
			n = count_segs("q");
			if (id > 1000 && n > maxsegs)
				maxsegs = n;
		}
	}
	/* 6000 * 256 bytes = ~1.5 MB through 64 KiB segments */
	ck_assert_int_le(maxsegs, 4);
	reopen("q", &o, NULL);
	ck_assert_uint_eq(ngot, 20);
	check_item(got[0], 5981, 200);
}
END_TEST

/* preallocate = auto reserves the spares of always and odsync with
 * fallocate() whatever the size of their groups (the zeros come ahead of
 * the records instead, test_zeros_ahead); an explicit preallocate = zero
 * writes zeros.  Counted: the spare's zeros (not the segment's zeros
 * ahead) and the fallocate() calls.  Loop index: always with 0 auto and
 * groups of 64 KiB, 1 auto and groups of 3 KiB, 2 zero and groups of 64
 * KiB; 3 odsync, auto and groups of 3 KiB. */
static pthread_mutex_t zf_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t zf_bytes, zf_fallocs;
static const unsigned char zf_zero[256 << 10];

/* Whether fd is a segment file (not the spare). */
static int za_is_segment(int fd)
{
	char link[64], path[512];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof(path) - 1);
	if (n <= 0)
		return 0;
	path[n] = 0;
	return strstr(path, ".seg") && !strstr(path, "spare.seg");
}

static ssize_t pwrite_zf(int fd, const void *buf, size_t n, off_t off)
{
	if (n <= sizeof(zf_zero) && memcmp(buf, zf_zero, n) == 0 && !za_is_segment(fd)) {
		pthread_mutex_lock(&zf_mu);
		zf_bytes += n;
		pthread_mutex_unlock(&zf_mu);
	}
	return pwrite(fd, buf, n, off);
}

static int fallocate_zf(int fd, int mode, off_t off, off_t len)
{
	pthread_mutex_lock(&zf_mu);
	zf_fallocs++;
	pthread_mutex_unlock(&zf_mu);
	return fallocate(fd, mode, off, len);
}

/* The clock segment growth reads (jio.mono_us): a second passes at every
 * reading, so every segment fills slowly; or time stands still, so every
 * segment fills in no time. */
static int64_t fake_us;

static int64_t clock_slow(void)
{
	return fake_us += 1000000;
}

static int64_t clock_still(void)
{
	return fake_us;
}

START_TEST(test_auto_spare_by_mode)
{
	struct journal_opts o;
	struct journal *j;
	int small = _i == 1 || _i == 3;
	uint32_t len = small ? 200 : 4096, per = 16;
	uint64_t id = 1, t = 0, rounds = small ? 1500 : 96;

	zf_bytes = zf_fallocs = 0;
	jio.mono_us = clock_slow;
	jio.pwrite = pwrite_zf;
	jio.fallocate = fallocate_zf;
	opts_small(&o, _i == 3 ? JOURNAL_SYNC_ODSYNC : JOURNAL_SYNC_ALWAYS);
	o.segment_size = 1 << 20;
	if (_i == 2)
		o.prealloc = JOURNAL_PREALLOC_ZERO;
	j = qopen("q", &o, NULL);
	/* each round one group: its sets, then the wait for their sync
	 * (about 6 MiB through segments of 16 KiB doubling up to 1 MiB) */
	for (uint64_t r = 0; r < rounds; r++) {
		for (uint32_t k = 0; k < per; k++)
			t = add(j, id++, len, 0);
		wait_ticket(t);
	}
	pump_quiet();
	env_down();
	jio_reset();
	if (_i != 2) {
		ck_assert_uint_eq(zf_bytes, 0);
		ck_assert_uint_ge(zf_fallocs, 4);
	} else {
		ck_assert_uint_ge(zf_bytes, 2 << 20);
	}
}
END_TEST

/*
 * Zeros ahead (jpriv.h, ZERO_AHEAD): in always, a segment whose blocks
 * were reserved by fallocate() (preallocate = auto reserves every spare
 * that way) is zero-filled by the writer ahead of its records, step after
 * step as its records near the zeros.  Every write
 * of zeros into a segment file is checked to land where the file still
 * reads as zeros, never on a record, and every record reads back byte for
 * byte after a reopen.  Loop index: 0 always, 4 odsync (its records
 * written with RWF_DSYNC, the zeros without); then no zeros ahead in 1
 * interval, 2 always with page_cache = drop, 3 always with preallocate =
 * fallocate.
 */
static uint64_t za_seg_bytes, za_on_records, za_max_end, za_dsync, za_plain;

/* Counts the records' writes with and without RWF_DSYNC. */
static ssize_t pwritev_za(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	__atomic_add_fetch(flags & RWF_DSYNC ? &za_dsync : &za_plain, 1, __ATOMIC_RELAXED);
	return pwritev2(fd, iov, cnt, off, flags);
}

static ssize_t pwrite_za(int fd, const void *buf, size_t n, off_t off)
{
	static unsigned char old[sizeof(zf_zero)];

	if (n <= sizeof(zf_zero) && memcmp(buf, zf_zero, n) == 0 && za_is_segment(fd)) {
		/* (the writer's thread, under wlock: old is its own) */
		ssize_t rd = pread(fd, old, n, off);

		pthread_mutex_lock(&zf_mu);
		za_seg_bytes += n;
		if ((uint64_t)off + n > za_max_end)
			za_max_end = (uint64_t)off + n;
		if (rd < 0 || memcmp(old, zf_zero, (size_t)rd) != 0)
			za_on_records++;
		pthread_mutex_unlock(&zf_mu);
	}
	return pwrite(fd, buf, n, off);
}

/* Adds rounds groups of 16 items of len bytes from *id on, each group
 * synced before the next where the mode (sync) waits for syncs. */
static void za_groups(struct journal *j, enum journal_sync sync, uint64_t *id, uint64_t rounds,
		      uint32_t len)
{
	uint64_t t = 0;

	for (uint64_t r = 0; r < rounds; r++) {
		for (int k = 0; k < 16; k++)
			t = add(j, (*id)++, len, 0);
		if (journal_sync_waits(sync))
			wait_ticket(t);
		else
			pump(0);
	}
}

START_TEST(test_zeros_ahead)
{
	struct journal_opts o;
	struct journal *j;
	uint64_t id = 1;

	za_seg_bytes = za_on_records = za_max_end = za_dsync = za_plain = 0;
	jio.mono_us = clock_still; /* (segments grow fast) */
	jio.pwrite = pwrite_za;
	jio.pwritev = pwritev_za;
	opts_small(&o, _i == 1 ? JOURNAL_SYNC_INTERVAL
		       : _i == 4 ? JOURNAL_SYNC_ODSYNC : JOURNAL_SYNC_ALWAYS);
	o.segment_size = 4u << 20;
	if (_i == 2)
		o.cache = JOURNAL_CACHE_DROP;
	if (_i == 3)
		o.prealloc = JOURNAL_PREALLOC_FALLOCATE;
	j = qopen("q", &o, NULL);
	/* 11.5 MB in groups of 64 KB, through segments up to 4 MiB */
	za_groups(j, o.sync, &id, 180, 4000);
	pump_quiet();
	env_down();
	jio_reset();
	ck_assert_uint_eq(za_on_records, 0);
	if (_i == 0 || _i == 4) {
		ck_assert_uint_ge(za_seg_bytes, 4u << 20);
		/* zeros further in than the first steps of a segment reach
		 * (ZERO_AHEAD past its first records): its records asked again */
		ck_assert_uint_ge(za_max_end, 2u << 20);
	} else
		ck_assert_uint_eq(za_seg_bytes, 0);
	/* odsync's records, and only odsync's, are written with RWF_DSYNC */
	ck_assert_uint_gt(_i == 4 ? za_dsync : za_plain, 0);
	ck_assert_uint_eq(_i == 4 ? za_plain : za_dsync, 0);
	reopen_expect(&o, id - 1, 4000);
}
END_TEST

/* A dead full-size segment becomes the next spare even when a spare that
 * fallocate() reserved is ready (none/interval), and dead segments that
 * are not reused are removed whole (in steps, see jseg_unlink_gently).
 * The test holds the first full-size segment open, so its inode number
 * cannot be handed to a new file: finding it again under another name
 * means the file itself was reused. */
START_TEST(test_dead_segment_beats_fresh_spare)
{
	struct journal_opts o;
	struct journal *j;
	char path[256], f[512];
	struct stat st;
	uint64_t id, head = 1;
	int fd = -1, found = 0, maxsegs = 0;
	ino_t ino = 0;
	DIR *d;
	struct dirent *de;

	jio.mono_us = clock_slow; /* (segments double) */
	opts_small(&o, JOURNAL_SYNC_NONE); /* preallocate auto: fallocate */
	o.segment_size = 4u << 20;
	snprintf(path, sizeof(path), "%s/queues/q", tdir);
	j = qopen("q", &o, NULL);
	for (id = 1; id <= 14000; id++) {
		add(j, id, 3000, 1);
		if (id > 20)
			ck_assert_int_eq(journal_remove(j, head++), 0);
		if (id % 200)
			continue;
		pump(10); /* checkpoints run; the writer readies each spare */
		if (fd < 0) {
			/* segments of 16 KiB, 32 KiB ... 2 MiB, then 4 MiB: the
			 * ninth is full size */
			snprintf(f, sizeof(f), "%s/%08u.seg", path, 9u);
			fd = open(f, O_RDONLY | O_CLOEXEC);
			if (fd >= 0) {
				ck_assert_int_eq(fstat(fd, &st), 0);
				ck_assert_uint_eq(st.st_size, 4u << 20);
				ino = st.st_ino;
			}
		}
		if (id > 4000) {
			int n = count_segs("q");

			if (n > maxsegs)
				maxsegs = n;
		}
	}
	ck_assert_int_ge(fd, 0);
	/* ~42 MB through 4 MiB segments: a handful of files at any time */
	ck_assert_int_le(maxsegs, 4);
	d = opendir(path);
	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d))) {
		snprintf(f, sizeof(f), "%s/%s", path, de->d_name);
		if (strstr(de->d_name, ".seg") && stat(f, &st) == 0 && st.st_ino == ino)
			found = 1;
	}
	closedir(d);
	ck_assert_msg(found, "segment 9's file was not reused");
	close(fd);
	reopen("q", &o, NULL);
	ck_assert_uint_eq(ngot, 20);
	check_item(got[0], 13981, 3000);
}
END_TEST

/* A new queue's first segment file is the first segment's size (16 KiB),
 * and, while it fills slowly, the next one twice that: the writer reserves
 * the first when it is needed, after the loop has already moved next_size
 * on to the second. */
START_TEST(test_first_segment_size)
{
	struct journal_opts o;
	struct journal *j;
	struct stat st;
	uint64_t id;

	jio.mono_us = clock_slow;
	opts_small(&o, JOURNAL_SYNC_NONE); /* preallocate auto: fallocate */
	o.segment_size = 4u << 20;
	o.checkpoint_interval_ms = 100000; /* no compaction of segment 1 */
	j = qopen("q", &o, NULL);
	add(j, 1, 100, 1);
	pump(10);
	ck_assert_int_eq(stat(seg_file("q", 1), &st), 0);
	ck_assert_uint_eq(st.st_size, 16u << 10);
	/* past the first segment: the second is the spare readied meanwhile */
	for (id = 2; id <= 400; id++)
		add(j, id, 3000, 1);
	pump(10);
	ck_assert_int_eq(stat(seg_file("q", 2), &st), 0);
	ck_assert_uint_eq(st.st_size, 32u << 10);
	ck_assert_int_eq(stat(seg_file("q", 3), &st), 0);
	ck_assert_uint_eq(st.st_size, 64u << 10);
	ck_assert_int_eq(stat(seg_file("q", 1), &st), 0);
	ck_assert_uint_eq(st.st_size, 16u << 10);
}
END_TEST

/* A queue that fills its segments fast skips most of the doubling
 * (jpriv.h, SEG_FILL_US), and each segment still starts at the size the
 * writer prepared for it (the loop is run after every few adds, so that the
 * writer keeps up as it does with a real stream).  With the clock standing
 * still the rate asks for every size; what bounds it is SEG_SEEN_X times
 * what the queue has written: segment 1 (16 KiB) counts for nothing, so
 * segment 2 is 32 KiB; half of it (30 KB written in all) plans 256 KiB for
 * segment 3; half of that (174 KB) plans 2 MiB for segment 4; the start of
 * segment 4 (302 KB) plans the full 4 MiB for segment 5.  Every record
 * reads back after a reopen. */
START_TEST(test_fast_queue_segments_grow_sooner)
{
	static const uint64_t want[] = { 16u << 10, 32u << 10, 256u << 10, 2u << 20, 4u << 20 };
	struct journal_opts o;
	struct journal *j;
	struct stat st;
	uint64_t id, n = 3000;

	jio.mono_us = clock_still;
	opts_small(&o, _i ? JOURNAL_SYNC_INTERVAL : JOURNAL_SYNC_NONE);
	o.segment_size = 4u << 20;
	o.checkpoint_interval_ms = 100000; /* no compaction of the segments */
	j = qopen("q", &o, NULL);
	for (id = 1; id <= n; id++) { /* about 9 MB */
		add(j, id, 3000, 1);
		if (id < 40 || id % 10 == 0)
			pump_quiet();
	}
	pump(10);
	for (uint32_t k = 0; k < sizeof(want) / sizeof(want[0]); k++) {
		ck_assert_int_eq(stat(seg_file("q", k + 1), &st), 0);
		ck_assert_msg((uint64_t)st.st_size == want[k], "segment %u: %llu bytes, not %llu",
			      k + 1, (unsigned long long)st.st_size, (unsigned long long)want[k]);
	}
	reopen_expect(&o, n, 3000);
}
END_TEST

/* A burst into a new queue, all in one loop pass (the writer sees none of
 * it before the segments fill): the segment after the 32 KiB one is the
 * doubled 64 KiB, not the rate's size, which no spare was reserved at; the
 * spare the writer then prepares is planned at most SEG_SEEN_X times what
 * the queue has written (80 KB: 1 MiB), not the full 4 MiB the rate asks
 * for.  Every record reads back. */
START_TEST(test_burst_takes_doubled_segments)
{
	struct journal_opts o;
	struct journal *j;
	struct stat st;
	char spare[300];
	uint64_t id, n = 20;

	jio.mono_us = clock_still;
	opts_small(&o, JOURNAL_SYNC_NONE);
	o.prealloc = JOURNAL_PREALLOC_FALLOCATE;
	o.segment_size = 4u << 20;
	o.checkpoint_interval_ms = 100000;
	j = qopen("q", &o, NULL);
	for (id = 1; id <= n; id++)
		add(j, id, 4000, 1);
	pump_quiet();
	ck_assert_int_eq(stat(seg_file("q", 2), &st), 0);
	ck_assert_uint_eq(st.st_size, 32u << 10);
	ck_assert_int_eq(stat(seg_file("q", 3), &st), 0);
	ck_assert_uint_eq(st.st_size, 64u << 10);
	ck_assert_int_ne(stat(seg_file("q", 4), &st), 0);
	snprintf(spare, sizeof(spare), "%s/queues/q/spare.seg", tdir);
	ck_assert_int_eq(stat(spare, &st), 0);
	ck_assert_uint_eq(st.st_size, 1u << 20);
	reopen_expect(&o, n, 4000);
}
END_TEST

/* fallocate() finds room for at most room_max bytes of a file. */
static uint64_t room_max;
static int room_refusals;

static int fallocate_room(int fd, int mode, off_t off, off_t len)
{
	if ((uint64_t)off + (uint64_t)len > room_max) {
		__atomic_add_fetch(&room_refusals, 1, __ATOMIC_SEQ_CST);
		errno = ENOSPC;
		return -1;
	}
	return fallocate(fd, mode, off, len);
}

/* A fast queue whose rate plans a segment there is no room for takes a
 * smaller one, down to the doubled size, rather than refusing adds: with
 * room for 1 MiB, the 2 MiB the rate plans for segment 4 (as in
 * test_fast_queue_segments_grow_sooner) becomes 1 MiB, where doubling
 * would give 512 KiB; every add is accepted and reads back. */
START_TEST(test_fast_queue_short_of_room)
{
	struct journal_opts o;
	struct journal *j;
	struct stat st;
	uint64_t id, n = 300;

	jio.mono_us = clock_still;
	jio.fallocate = fallocate_room;
	room_max = 1u << 20;
	room_refusals = 0;
	opts_small(&o, _i ? JOURNAL_SYNC_INTERVAL : JOURNAL_SYNC_NONE);
	o.prealloc = JOURNAL_PREALLOC_FALLOCATE;
	o.segment_size = 4u << 20;
	o.checkpoint_interval_ms = 100000;
	j = qopen("q", &o, NULL);
	for (id = 1; id <= n; id++) { /* about 900 KB: into segment 4 */
		add(j, id, 3000, 1);
		if (id < 40 || id % 10 == 0)
			pump_quiet();
	}
	pump_quiet();
	ck_assert_int_gt(__atomic_load_n(&room_refusals, __ATOMIC_SEQ_CST), 0);
	ck_assert_int_eq(stat(seg_file("q", 3), &st), 0);
	ck_assert_uint_eq(st.st_size, 256u << 10);
	ck_assert_int_eq(stat(seg_file("q", 4), &st), 0);
	ck_assert_uint_eq(st.st_size, room_max);
	jio_reset();
	reopen_expect(&o, n, 3000);
}
END_TEST

/* The adds of one loop pass fill segment 1 and go on into segment 2, for
 * which there is no room: the adds written into segment 1 succeed (in
 * `always` after segment 1 is synced), those for segment 2 fail with
 * TERN_ENOSPC, and after a reopen the journal holds exactly the adds that
 * succeeded, none that were answered failed. */
START_TEST(test_roll_without_room_keeps_written)
{
	struct journal_opts o;
	struct journal *j;
	uint64_t t[11], id, k = 0;

	jio.fallocate = fallocate_room;
	room_max = 16u << 10; /* segment 1 only */
	opts_small(&o, _i ? JOURNAL_SYNC_ALWAYS : JOURNAL_SYNC_NONE);
	o.prealloc = JOURNAL_PREALLOC_FALLOCATE;
	j = qopen("q", &o, NULL);
	for (id = 1; id <= 10; id++) /* 30 KB in one batch */
		t[id] = add(j, id, 3000, 1);
	wait_ticket(t[10]);
	while (k < 10 && ticket_err(t[k + 1]) == 0)
		k++;
	ck_assert_uint_ge(k, 1); /* segment 1 holds 5 of them */
	ck_assert_uint_lt(k, 10);
	for (id = k + 1; id <= 10; id++)
		ck_assert_int_eq(ticket_err(t[id]), TERN_ENOSPC);
	jio_reset();
	reopen_expect(&o, k, 3000);
}
END_TEST

/* One long-open item does not pin old segments: it is moved forward. */
START_TEST(test_relocate)
{
	struct journal_opts o;
	struct journal *j;
	uint64_t id, head = 3;
	int n = 0;

	opts_small(&o, JOURNAL_SYNC_NONE);
	j = qopen("q", &o, NULL);
	add(j, 1, 100, 1);
	add(j, 2, 100, 1);
	ck_assert_int_eq(journal_open_item(j, 1, 1), 0);
	for (id = 3; id <= 6000; id++) {
		add(j, id, 200, 1);
		if (id > 10)
			ck_assert_int_eq(journal_remove(j, head++), 0);
		if (id % 100 == 0)
			pump(25);
	}
	pump(50);
	barrier();
	n = count_segs("q");
	ck_assert_int_le(n, 4);
	crash_copy();
	crash_restart();
	qopen("q", &o, NULL);
	ck_assert_uint_eq(ngot, 10);
	check_item(got[0], 1, 100); /* open: first */
	check_item(got[1], 2, 100);
	check_item(got[2], 5993, 200);
}
END_TEST

/* After a clean close, a restart replays nothing: the checkpoint covers it. */
START_TEST(test_checkpoint_bounded)
{
	struct journal_opts o;
	struct journal *j;
	struct journal_recovery rec;

	opts_small(&o, JOURNAL_SYNC_NONE);
	o.checkpoint_interval_ms = 100000;
	j = qopen("q", &o, NULL);
	for (uint64_t id = 1; id <= 3000; id++)
		add(j, id, 100, 1);
	env_down();
	env_up();
	o.max_memory_size = 500;
	qopen("q", &o, &rec);
	ck_assert_uint_eq(rec.records_replayed, 0);
	ck_assert_uint_eq(ngot, 5);
	ck_assert_uint_eq(rec.behind_items, 2995);
	ck_assert_uint_eq(rec.next_id, 3001);
}
END_TEST

/* The segment files of queue q, as one string of names in order. */
static void seg_names(const char *q, char *out, size_t n)
{
	char path[256];
	struct dirent **list;
	int k;

	snprintf(path, sizeof(path), "%s/queues/%s", tdir, q);
	k = scandir(path, &list, NULL, alphasort);
	ck_assert_int_ge(k, 0);
	out[0] = 0;
	for (int i = 0; i < k; i++) {
		if (strstr(list[i]->d_name, ".seg") && strcmp(list[i]->d_name, "spare.seg")) {
			strncat(out, list[i]->d_name, n - strlen(out) - 1);
			strncat(out, " ", n - strlen(out) - 1);
		}
		free(list[i]);
	}
	free(list);
}

static void ckpt_get(const char *q, unsigned char **blob, size_t *len)
{
	struct jcat *cat;
	char path[256];

	snprintf(path, sizeof(path), "%s/catalog", tdir);
	ck_assert_int_eq(jcat_open(path, 0, &cat), 0);
	ck_assert_int_eq(jcat_ckpt_get(cat, q, (void **)blob, len), 0);
	jcat_close(cat);
}

static void ckpt_put(const char *q, const unsigned char *blob, size_t len)
{
	struct jcat *cat;
	char path[256];

	snprintf(path, sizeof(path), "%s/catalog", tdir);
	ck_assert_int_eq(jcat_open(path, 0, &cat), 0);
	ck_assert_int_eq(jcat_ckpt_put(cat, q, blob, len), 0);
	jcat_close(cat);
}

static void put_le64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* Queue "q" of ckpt_fixture: items 1..1000 removed, 1001 open, 1002..3000
 * queued, over several 64 KiB segments; checks what a reopen delivers. */
static void ckpt_expect(void)
{
	size_t bad = 0;

	ck_assert_uint_eq(ngot, 2000);
	check_item(got[0], 1001, 200); /* open at the close: first */
	/* (one assertion for the rest: check's per-assertion cost, times
	 * every byte of 2000 items, times every case, would be seconds) */
	for (size_t i = 1; i < ngot && !bad; i++) {
		const struct item *it = got[i];
		uint64_t id = 1001 + i;

		if (it->id != id || it->len != 200 || it->flags != (uint32_t)id * 3 ||
		    it->add_ms != 1000 + (int64_t)id)
			bad = i;
		for (uint32_t k = 0; k < it->len && !bad; k++)
			if (it->data[k] != (char)('a' + (id + k) % 26))
				bad = i;
	}
	ck_assert_msg(!bad, "item #%zu is not item %zu", bad, 1001 + bad);
}

static void ckpt_fixture(char *segs, size_t n)
{
	struct journal_opts o;
	struct journal *j;

	opts_small(&o, JOURNAL_SYNC_NONE);
	o.checkpoint_interval_ms = 100000;
	j = qopen("q", &o, NULL);
	for (uint64_t id = 1; id <= 3000; id++)
		add(j, id, 200, 1);
	for (uint64_t id = 1; id <= 1000; id++)
		ck_assert_int_eq(journal_remove(j, id), 0);
	ck_assert_int_eq(journal_open_item(j, 1001, 1), 0);
	env_down(); /* the last checkpoint frees the segments before item 1001's */
	seg_names("q", segs, n);
	ck_assert_msg(strncmp(segs, "00000001.seg", 12) != 0,
		      "no segment was freed: %s", segs);
}

/* Reopens queue q (default options but small segments) into got[]. */
static struct journal_recovery ckpt_reopen(void)
{
	struct journal_opts o;
	struct journal_recovery rec;

	opts_small(&o, JOURNAL_SYNC_NONE);
	o.checkpoint_interval_ms = 100000;
	env_up();
	qopen("q", &o, &rec);
	return rec;
}

/* The checkpoint carries a CRC-32C: a bit flipped anywhere in it, at every
 * byte of the blob, makes recovery ignore it and replay every segment.
 * No item is lost or duplicated, the open one still comes first, and no
 * segment is deleted on the damaged checkpoint's word. */
START_TEST(test_ckpt_bitflip)
{
	char segs[4096], after[4096], cmd[256];
	unsigned char *blob, *bad;
	size_t len;

	ckpt_fixture(segs, sizeof(segs));
	ckpt_get("q", &blob, &len);
	ck_assert_uint_ge(len, 80); /* the words, the open item, the checksum */
	snprintf(cmd, sizeof(cmd), "cp -a %s %s-pristine", tdir, tdir);
	ck_assert_int_eq(system(cmd), 0);
	bad = malloc(len);
	ck_assert_ptr_nonnull(bad);
	for (size_t off = 0; off < len; off++) {
		struct journal_recovery rec;

		snprintf(cmd, sizeof(cmd), "rm -rf %s && cp -a %s-pristine %s", tdir, tdir, tdir);
		ck_assert_int_eq(system(cmd), 0);
		memcpy(bad, blob, len);
		bad[off] ^= (unsigned char)(1u << (off % 8));
		ckpt_put("q", bad, len);
		rec = ckpt_reopen();
		ckpt_expect();
		/* a full replay: every record on disk was read again */
		ck_assert_uint_gt(rec.records_replayed, 1000);
		seg_names("q", after, sizeof(after));
		ck_assert_str_eq(after, segs);
		env_down();
		got_clear();
	}
	free(bad);
	free(blob);
	snprintf(cmd, sizeof(cmd), "rm -rf %s-pristine", tdir);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* Checkpoints of version 1 (no checksum) are still read: recovery starts
 * from them and replays nothing after a clean close.  A valid checkpoint of
 * a newer version is refused. */
START_TEST(test_ckpt_versions)
{
	char segs[4096];
	unsigned char *blob;
	size_t len;
	struct journal_recovery rec;
	struct journal_opts o;
	struct journal *j = NULL;

	ckpt_fixture(segs, sizeof(segs));
	ckpt_get("q", &blob, &len);
	/* this version: the last word is the checksum, nothing is replayed */
	rec = ckpt_reopen();
	ckpt_expect();
	ck_assert_uint_eq(rec.records_replayed, 0);
	env_down();
	got_clear();
	/* version 1: the same words without nM (word 9, 0 here: nothing was
	 * moved) and the checksum */
	put_le64(blob + 8, 1);
	for (size_t k = 0; k < 8; k++)
		ck_assert_int_eq(blob[72 + k], 0);
	memmove(blob + 72, blob + 80, len - 80);
	ckpt_put("q", blob, len - 16);
	rec = ckpt_reopen();
	ckpt_expect();
	ck_assert_uint_eq(rec.records_replayed, 0);
	env_down();
	got_clear();
	/* version 3, checksum correct: refused, not misread */
	free(blob);
	ckpt_get("q", &blob, &len); /* (rewritten as version 2 at the close) */
	put_le64(blob + 8, 3);
	put_le64(blob + len - 8, crc32c(0, blob, len - 8));
	ckpt_put("q", blob, len);
	free(blob);
	env_up();
	opts_small(&o, JOURNAL_SYNC_NONE);
	ck_assert_int_eq(journal_open(env, "q", &o, collect, NULL, &rec, &j), TERN_EVERSION);
	ck_assert_uint_eq(ngot, 0);
}
END_TEST

/* Reads of one segment file fail: its opens for reading with fail_errno,
 * or (0) every read of it (found by inode), with EIO. */
static char fail_name[32];
static int fail_errno;
static ino_t fail_ino;

static int openat_fail(int dirfd, const char *path, int flags, mode_t mode)
{
	size_t n = strlen(path), k = strlen(fail_name);

	if (fail_errno && (flags & O_ACCMODE) == O_RDONLY && n >= k &&
	    !strcmp(path + n - k, fail_name)) {
		errno = fail_errno;
		return -1;
	}
	return openat(dirfd, path, flags, mode);
}

static ssize_t pread_fail(int fd, void *buf, size_t n, off_t off)
{
	struct stat st;

	if (!fail_errno && fstat(fd, &st) == 0 && st.st_ino == fail_ino) {
		errno = EIO;
		return -1;
	}
	return pread(fd, buf, n, off);
}

static ssize_t preadv_fail(int fd, const struct iovec *iov, int cnt, off_t off)
{
	struct stat st;

	if (!fail_errno && fstat(fd, &st) == 0 && st.st_ino == fail_ino) {
		errno = EIO;
		return -1;
	}
	return preadv(fd, iov, cnt, off);
}

static void fail_reads(uint32_t seg, int e)
{
	struct stat st;

	ck_assert_int_eq(stat(seg_file("q", seg), &st), 0);
	fail_ino = st.st_ino;
	snprintf(fail_name, sizeof(fail_name), "/%08u.seg", seg);
	fail_errno = e;
	jio.openat = openat_fail;
	jio.pread = pread_fail;
	jio.preadv = preadv_fail;
}

static void reads_ok(void)
{
	jio_reset();
}

/* Queue "q": items 1..3000 of 200 bytes over about ten 64 KiB segments,
 * closed cleanly. */
static void many_segments(char *segs, size_t n)
{
	struct journal_opts o;
	struct journal *j;

	opts_small(&o, JOURNAL_SYNC_NONE);
	j = qopen("q", &o, NULL);
	for (uint64_t id = 1; id <= 3000; id++)
		add(j, id, 200, 1);
	env_down();
	seg_names("q", segs, n);
}

/* A segment that cannot be opened or read (loop 0: EACCES at open, 1: EIO
 * at every read; 2: its header only is damaged) is never skipped: the
 * queue refuses to open (with the file and the cause in the log), every
 * file stays, and once it reads again every item is there.  A damaged
 * header alone does not hide the records behind it. */
START_TEST(test_unreadable_segment)
{
	char segs[4096], after[4096];
	struct journal_opts o;
	struct journal_recovery rec;
	struct journal *j = NULL;

	many_segments(segs, sizeof(segs));
	ck_assert_msg(strstr(segs, "00000004.seg"), "%s", segs);
	env_up();
	opts_small(&o, JOURNAL_SYNC_NONE);
	if (_i < 2) {
		/* with and without its checkpoint (a full replay reads it too) */
		for (int pass = 0; pass < 2; pass++) {
			fail_reads(3, _i == 0 ? EACCES : 0);
			errno = 0;
			ck_assert_int_eq(journal_open(env, "q", &o, collect, NULL, &rec, &j),
					 TERN_ESYS);
			ck_assert_int_eq(errno, _i == 0 ? EACCES : EIO);
			ck_assert_uint_eq(ngot, 0);
			reads_ok();
			seg_names("q", after, sizeof(after));
			ck_assert_str_eq(after, segs);
			if (pass == 0) {
				unsigned char *blob;
				size_t len;

				env_down();
				ckpt_get("q", &blob, &len);
				blob[len - 1] ^= 1; /* its checksum fails: full replay */
				ckpt_put("q", blob, len);
				free(blob);
				env_up();
			}
		}
	} else {
		int fd = open(seg_file("q", 3), O_WRONLY);

		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(pwrite(fd, "garbage!", 8, 0), 8);
		close(fd);
	}
	qopen("q", &o, &rec);
	ck_assert_uint_eq(ngot, 3000);
	for (size_t i = 0; i < ngot; i++)
		ck_assert_uint_eq(got[i]->id, i + 1);
	if (_i == 2)
		ck_assert_uint_ge(rec.corrupt_records, 1);
	seg_names("q", after, sizeof(after));
	ck_assert_str_eq(after, segs);
}
END_TEST

/* Read-behind meets a segment it cannot read: journal_read_behind fails
 * and the cursor stays, so checkpoints keep the segment; once it reads
 * again, the next item is the one that failed. */
START_TEST(test_unreadable_behind)
{
	char segs[4096], after[4096];
	struct journal_opts o;
	struct journal_recovery rec;
	struct journal *j;
	struct item *it = NULL;
	uint64_t next;

	many_segments(segs, sizeof(segs));
	env_up();
	opts_small(&o, JOURNAL_SYNC_NONE);
	o.max_memory_size = 2000; /* ten items in memory, the rest behind */
	j = qopen("q", &o, &rec);
	ck_assert_uint_eq(rec.behind_items, 3000 - ngot);
	next = ngot + 1;
	got_clear();
	fail_reads(4, EACCES);
	for (;;) {
		int rc = journal_read_behind(j, &it);

		if (rc < 0) {
			ck_assert_int_eq(rc, TERN_ESYS);
			break;
		}
		ck_assert_ptr_nonnull(it);
		ck_assert_uint_eq(it->id, next);
		ck_assert_int_eq(journal_remove(j, it->id), 0);
		item_unref(it);
		next++;
		ck_assert_uint_lt(next, 3000);
	}
	ck_assert_uint_gt(next, 100); /* segments 1..3 were read */
	pump(20);
	barrier();
	reads_ok();
	seg_names("q", after, sizeof(after));
	ck_assert_msg(strstr(after, "00000004.seg"), "segment 4 was freed: %s", after);
	ck_assert_int_eq(journal_read_behind(j, &it), 0);
	ck_assert_ptr_nonnull(it);
	ck_assert_uint_eq(it->id, next);
	item_unref(it);
}
END_TEST

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* (the one opendir holds) */
}

/* Segment descriptors go through a cache sized from RLIMIT_NOFILE (a
 * quarter, at least 16): forty queues written in turn in `always` (every
 * group syncs each of them) hold at most that many, the rest are opened
 * again when written, and nothing is lost.  An idle queue holds no
 * descriptor at all. */
START_TEST(test_fd_cache)
{
	struct journal_opts o;
	struct journal *js[40];
	struct rlimit old, small;
	char name[16];
	int fd0, most = 0;

	env_down();
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
	small = old;
	small.rlim_cur = 64; /* a cache of 16 */
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &small), 0);
	fd0 = count_fds();
	env_up();
	opts_small(&o, JOURNAL_SYNC_ALWAYS);
	for (int q = 0; q < 40; q++) {
		snprintf(name, sizeof(name), "q%02d", q);
		js[q] = qopen(name, &o, NULL);
	}
	for (uint64_t id = 1; id <= 20; id++) {
		uint64_t t = 0;

		for (int q = 0; q < 40; q++)
			t = add(js[q], id, 100 + (uint32_t)q, 1);
		wait_ticket(t);
		ck_assert_int_eq(dur_err, 0);
		if (count_fds() > most)
			most = count_fds();
	}
	/* the cache, the lock file, LMDB's files, the event base's
	 * descriptors; not one per queue */
	ck_assert_int_le(most - fd0, 16 + 12);
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
	env_down();
	env_up();
	for (int q = 0; q < 40; q++) {
		snprintf(name, sizeof(name), "q%02d", q);
		qopen(name, &o, NULL);
		ck_assert_uint_eq(ngot, 20);
		for (size_t i = 0; i < ngot; i++)
			check_item(got[i], i + 1, 100 + (uint32_t)q);
		got_clear();
	}
	/* forty idle queues: no descriptor each */
	ck_assert_int_le(count_fds() - fd0, 12);
}
END_TEST

/* A passing shortage of descriptors (EMFILE from every open, as when
 * connections took them all) does not fail a journal: the writer and the
 * syncer wait for one (jseg_open) and go on.  Loop 0: interval (the
 * syncer opens the segment by name), 1: always (the writer makes the first
 * segment, its spare and the directory sync). */
static int emfile_left;

static int openat_emfile(int dirfd, const char *path, int flags, mode_t mode)
{
	if (__atomic_load_n(&emfile_left, __ATOMIC_SEQ_CST) > 0 &&
	    __atomic_sub_fetch(&emfile_left, 1, __ATOMIC_SEQ_CST) >= 0) {
		errno = EMFILE;
		return -1;
	}
	return openat(dirfd, path, flags, mode);
}

START_TEST(test_fd_shortage)
{
	enum journal_sync mode = _i ? JOURNAL_SYNC_ALWAYS : JOURNAL_SYNC_INTERVAL;
	struct journal_opts o;
	struct journal_stats st;
	struct journal *j;
	uint64_t t = 0, id;

	opts_small(&o, mode);
	o.sync_interval_ms = 10;
	jio.openat = openat_emfile;
	__atomic_store_n(&emfile_left, 6, __ATOMIC_SEQ_CST);
	j = qopen("q", &o, NULL);
	for (id = 1; id <= 50; id++)
		t = add(j, id, 1000, 1);
	wait_ticket(t);
	ck_assert_int_eq(dur_err, 0);
	/* again, once it is writing: its next files and syncs */
	__atomic_store_n(&emfile_left, 6, __ATOMIC_SEQ_CST);
	for (; id <= 200; id++) {
		t = add(j, id, 1000, 1);
		if (id % 10 == 0)
			pump(mode == JOURNAL_SYNC_INTERVAL ? 20 : 1);
	}
	wait_ticket(t);
	ck_assert_int_eq(dur_err, 0);
	for (int i = 0; i < 2000 && __atomic_load_n(&emfile_left, __ATOMIC_SEQ_CST) > 0; i++)
		pump(1);
	ck_assert_int_le(__atomic_load_n(&emfile_left, __ATOMIC_SEQ_CST), 0);
	jio_reset();
	t = add(j, id, 1000, 1);
	wait_ticket(t);
	ck_assert_int_eq(dur_err, 0);
	journal_get_stats(j, &st);
	ck_assert_uint_eq(st.write_errors, 0);
	reopen("q", &o, NULL);
	ck_assert_uint_eq(ngot, id);
	for (size_t i = 0; i < ngot; i++)
		check_item(got[i], i + 1, 1000);
}
END_TEST

/* Compaction moves the few items left in a young queue's small first
 * segment to the tail (the segment is freed), and those MOVED copies sit
 * after newer items in the files.  A restart that loads only part of the
 * queue into memory (max_memory_size) must still deliver every item in
 * queue order: the checkpoint lists the moved items and recovery loads
 * them whatever the cap. */
START_TEST(test_moved_order)
{
	struct journal_opts o;
	struct journal *j;
	struct journal_recovery rec;
	struct item *it;
	char segs[4096];
	uint64_t id;

	opts_small(&o, JOURNAL_SYNC_NONE);
	o.max_memory_size = 60000;
	j = qopen("q", &o, NULL);
	for (id = 1; id <= 600; id++) {
		/* the first 120 in memory, past segments 1 (16 KiB, 19 of
		 * these) and 2 */
		add(j, id, 500, id <= 120);
		if (id == 40) /* segment 1 keeps 5 live items: 1/4 of it */
			for (uint64_t k = 1; k <= 14; k++)
				ck_assert_int_eq(journal_remove(j, k), 0);
		if (id % 20 == 0)
			pump(25); /* checkpoints, and their compaction */
	}
	pump(50);
	env_down();
	seg_names("q", segs, sizeof(segs));
	ck_assert_msg(strncmp(segs, "00000001.seg", 12) != 0,
		      "segment 1 was not compacted away: %s", segs);
	env_up();
	j = qopen("q", &o, &rec);
	ck_assert_uint_gt(rec.behind_items, 0);
	for (id = 15; id < 15 + ngot; id++)
		check_item(got[id - 15], id, 500);
	for (; id <= 600; id++) {
		ck_assert_int_eq(journal_read_behind(j, &it), 0);
		ck_assert_ptr_nonnull(it);
		ck_assert_msg(it->id == id, "item %llu read back where %llu was due",
			      (unsigned long long)it->id, (unsigned long long)id);
		item_unref(it);
	}
	ck_assert_int_eq(journal_read_behind(j, &it), 0);
	ck_assert_ptr_null(it);
}
END_TEST

/* A segment mostly live is backlog, not stragglers: a young queue whose
 * producer runs ahead of its consumer keeps its small first segments as
 * they are (copying them would write as many bytes as it frees). */
START_TEST(test_live_segment_not_moved)
{
	struct journal_opts o;
	struct journal *j;
	char segs[4096];
	uint64_t id;

	opts_small(&o, JOURNAL_SYNC_NONE);
	j = qopen("q", &o, NULL);
	for (id = 1; id <= 600; id++) {
		add(j, id, 500, 1);
		if (id % 20 == 0)
			pump(25);
	}
	pump(50);
	seg_names("q", segs, sizeof(segs));
	ck_assert_msg(strncmp(segs, "00000001.seg", 12) == 0,
		      "segment 1, all live, was compacted: %s", segs);
	for (id = 1; id <= 600; id++)
		ck_assert_int_eq(journal_remove(j, id), 0);
	env_down();
	env_up();
	qopen("q", &o, NULL);
	ck_assert_uint_eq(ngot, 0);
}
END_TEST

/* Adds items 1..n of 200 bytes, the first in_memory of them in memory,
 * marking each in want[]. */
static void add_backlog(struct journal *j, uint64_t n, uint64_t in_memory, char *want)
{
	for (uint64_t id = 1; id <= n; id++) {
		add(j, id, 200, id <= in_memory);
		want[id] = 1;
		if (id % 50 == 0)
			pump(2);
	}
}

/* Reads the next item back from the journal: item id, of 200 bytes. */
static void behind_expect(struct journal *j, uint64_t id)
{
	struct item *it;

	ck_assert_int_eq(journal_read_behind(j, &it), 0);
	ck_assert_ptr_nonnull(it);
	check_item(it, id, 200);
	item_unref(it);
}

/* Checkpoints and compactions that walked j's index. */
static uint64_t index_walks(struct journal *j)
{
	struct journal_stats st;

	journal_get_stats(j, &st);
	return st.index_walks;
}

/* After the checkpoints so far walked j's index none of the time: a
 * crash, and q opened again from the copy (rec: what recovery found, or
 * NULL). */
static struct journal *crash_unwalked(struct journal *j, struct journal_opts *o,
				      struct journal_recovery *rec)
{
	ck_assert_uint_eq(index_walks(j), 0);
	crash_copy();
	crash_restart();
	return qopen("q", o, rec);
}

/* A checkpoint finds the oldest live position from the segments' ids and
 * the set of compaction's copies, without walking the index (the ASan
 * build checks each against a walk, TERN_INDEX_CHECK).  A queue with a
 * backlog read back from the journal, items held open for good (which
 * compaction moves, again as the copies' segment becomes the oldest),
 * aborts and new adds while it drains: no walk, and a crash then finds
 * exactly the live items, so no checkpoint freed a segment that still
 * held one. */
START_TEST(test_ckpt_oldest_without_walk)
{
	static char want[4001];
	struct journal_opts o;
	struct journal *j;
	uint64_t id, nwant = 0;

	opts_small(&o, JOURNAL_SYNC_NONE);
	j = qopen("q", &o, NULL);
	add_backlog(j, 3000, 600, want); /* the rest behind */
	for (id = 1; id <= 3000; id++) {
		if (id > 600)
			behind_expect(j, id);
		if (id % 97 == 0) { /* open for good */
			ck_assert_int_eq(journal_open_item(j, id, 1), 0);
		} else {
			if (id % 11 == 3) {
				ck_assert_int_eq(journal_open_item(j, id, 1), 0);
				ck_assert_int_eq(journal_abort(j, id), 0);
			}
			ck_assert_int_eq(journal_remove(j, id), 0);
			want[id] = 0;
		}
		if (id % 3 == 0 && 3000 + id / 3 <= 4000) { /* new adds meanwhile */
			add(j, 3000 + id / 3, 150, 1);
			want[3000 + id / 3] = 1;
		}
		/* (20 ms: the checkpoint, every 20 ms, runs in most of
		 * these, and each compacts as the drain goes on) */
		if (id % 40 == 0)
			pump(20);
	}
	pump(50);
	barrier();
	ck_assert_int_le(count_segs("q"), 8);
	crash_unwalked(j, &o, NULL);
	for (id = 1; id <= 4000; id++)
		nwant += want[id];
	ck_assert_uint_eq(ngot, nwant);
	for (size_t i = 0; i < ngot; i++) {
		ck_assert_uint_le(got[i]->id, 4000);
		ck_assert_msg(want[got[i]->id], "item %llu came back",
			      (unsigned long long)got[i]->id);
		check_item(got[i], got[i]->id, got[i]->id > 3000 ? 150 : 200);
		want[got[i]->id] = 0;
	}
}
END_TEST

/* After a restart the segments found on disk learn their ids as recovery
 * and then read-behind take their items, in file order, so checkpoints
 * find the oldest live position without a walk there too (the ASan build
 * checks each against a walk, TERN_INDEX_CHECK).  Compaction's copies,
 * which recovery loads whatever the memory cap, sit after newer items
 * that read-behind takes later: they are found through the set of
 * flagged ids instead.  A backlog mostly behind the memory cap, an item
 * held open (moved by compaction to the tail, before items 4001-4100) at
 * the first crash; after it all is drained but the copy and items
 * 3950-4000, which share the copy's segment or precede it, with adds
 * meanwhile; no walk; then a second crash: exactly the live items come
 * back. */
START_TEST(test_ckpt_after_restart)
{
	static char want[5101];
	struct journal_opts o;
	struct journal_recovery rec;
	struct journal *j;
	struct item *it;
	uint64_t id, next = 4101, nwant = 0, n = 0;

	opts_small(&o, JOURNAL_SYNC_NONE);
	o.max_memory_size = 40000; /* 200 of these in memory */
	j = qopen("q", &o, NULL);
	add_backlog(j, 4000, 200, want);
	/* the first 1000 go but 500, held open: compaction moves it when
	 * its segment is left almost empty */
	for (id = 1; id <= 1000; id++) {
		if (id > 200)
			behind_expect(j, id);
		if (id == 500) {
			ck_assert_int_eq(journal_open_item(j, id, 1), 0);
		} else {
			ck_assert_int_eq(journal_remove(j, id), 0);
			want[id] = 0;
		}
		if (id % 40 == 0)
			pump(3);
	}
	pump(50);
	for (id = 4001; id <= 4100; id++) {
		add(j, id, 200, 0);
		want[id] = 1;
	}
	pump(50);
	barrier();
	j = crash_unwalked(j, &o, &rec);
	ck_assert_uint_gt(rec.behind_items, 1000);
#define KEEP(id) ((id) == 500 || ((id) >= 3950 && (id) <= 4000))
	for (size_t i = 0; i < ngot; i++) {
		id = got[i]->id;
		if (!KEEP(id)) {
			ck_assert_int_eq(journal_remove(j, id), 0);
			want[id] = 0;
		}
	}
	for (;;) {
		ck_assert_int_eq(journal_read_behind(j, &it), 0);
		if (!it)
			break;
		id = it->id;
		item_unref(it);
		if (!KEEP(id)) {
			ck_assert_int_eq(journal_remove(j, id), 0);
			want[id] = 0;
		}
		if (++n % 3 == 0 && next <= 5100) {
			add(j, next, 150, 1);
			want[next++] = 1;
		}
		if (n % 40 == 0)
			pump(3);
	}
#undef KEEP
	pump(50);
	barrier();
	j = crash_unwalked(j, &o, &rec);
	for (id = 1; id <= 5100; id++)
		nwant += want[id];
	n = 0;
	for (size_t i = 0;; i++) {
		if (i < ngot) {
			it = got[i];
		} else {
			ck_assert_int_eq(journal_read_behind(j, &it), 0);
			if (!it)
				break;
		}
		id = it->id;
		ck_assert_uint_le(id, 5100);
		ck_assert_msg(want[id], "item %llu came back", (unsigned long long)id);
		check_item(it, id, id > 4100 ? 150 : 200);
		want[id] = 0;
		n++;
		if (i >= ngot)
			item_unref(it);
	}
	ck_assert_uint_eq(n, nwant);
}
END_TEST

/* The lost callback's calls. */
static uint64_t lost_ids[64];
static int lost_mem[64];
static size_t nlost;

static void on_lost(void *arg, uint64_t id, uint32_t len, int in_memory)
{
	ck_assert_uint_lt(nlost, 64);
	lost_ids[nlost] = id;
	lost_mem[nlost++] = in_memory;
}

static ssize_t pwritev_enospc(int fd, const struct iovec *iov, int cnt, off_t off,
			     int flags)
{
	__atomic_add_fetch(&enospc_hits, 1, __ATOMIC_SEQ_CST);
	errno = ENOSPC;
	return -1;
}

/* A queue whose first segment cannot be had (a full disk: loop 0, 1: the
 * spare's fallocate or zero-fill fails; 2: preallocate = none, its first
 * write fails) is not failed for good: the add is answered ENOSPC and its
 * item leaves the queue (the lost callback), later adds are refused while
 * there is no room (0, 1) or fail the same way (2), and once there is room
 * again the next add works.  A restart finds exactly the adds that were
 * answered. */
START_TEST(test_no_room_then_room)
{
	struct journal_opts o;
	struct journal *j;
	uint64_t t, id = 1;
	int rc = 0;
	struct item *it;

	opts_small(&o, JOURNAL_SYNC_ALWAYS);
	o.prealloc = _i == 0 ? JOURNAL_PREALLOC_FALLOCATE
		: _i == 1 ? JOURNAL_PREALLOC_ZERO : JOURNAL_PREALLOC_NONE;
	nlost = 0;
	enospc_hits = 0;
	jio.fallocate = fallocate_enospc;
	jio.pwrite = pwrite_enospc;
	if (_i == 2)
		jio.pwritev = pwritev_enospc;
	j = qopen("q", &o, NULL);
	journal_set_lost_fn(j, on_lost, NULL);
	t = add(j, id, 100, 1);
	wait_ticket(t);
	ck_assert_int_eq(ticket_err(t), TERN_ENOSPC);
	ck_assert_uint_eq(nlost, 1);
	ck_assert_uint_eq(lost_ids[0], id);
	ck_assert_int_eq(lost_mem[0], 1);
	id++;
	/* still no room: refused at once (0, 1), or given up again (2) */
	for (int k = 0; k < 3; k++, id++) {
		it = mk(id, 100);
		rc = journal_add(j, it, 1, &t);
		item_unref(it);
		if (_i < 2) {
			ck_assert_int_eq(rc, TERN_ENOSPC);
		} else {
			ck_assert_int_eq(rc, 0);
			wait_ticket(t);
			ck_assert_int_eq(ticket_err(t), TERN_ENOSPC);
		}
		pump(2);
	}
	/* room again: adds work after the writer's retry (bounded) */
	jio_reset();
	for (int k = 0; k < 400; k++) {
		it = mk(id, 100);
		rc = journal_add(j, it, 1, &t);
		item_unref(it);
		if (rc == 0)
			break;
		ck_assert_int_eq(rc, TERN_ENOSPC);
		pump(10);
	}
	ck_assert_int_eq(rc, 0);
	wait_ticket(t);
	ck_assert_int_eq(ticket_err(t), 0);
	for (uint64_t k = 1; k <= 20; k++) {
		t = add(j, id + k, 100, 1);
		wait_ticket(t);
		ck_assert_int_eq(ticket_err(t), 0);
	}
	reopen("q", &o, NULL);
	ck_assert_uint_eq(ngot, 21);
	for (size_t i = 0; i < ngot; i++)
		check_item(got[i], id + i, 100);
}
END_TEST

Suite *journal_suite(void)
{
	Suite *s = suite_create("journal");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_codec);
	tcase_add_test(tc, test_bad_name);
	tcase_add_loop_test(tc, test_reopen_order, 0, 3);
	tcase_add_test(tc, test_open_items_head);
	tcase_add_test(tc, test_deliveries_and_delay_survive);
	tcase_add_test(tc, test_flush);
	tcase_add_test(tc, test_delete);
	tcase_add_test(tc, test_delete_interrupted);
	tcase_add_loop_test(tc, test_close_without_memory, 0, 2);
	tcase_add_test(tc, test_delete_without_memory);
	tcase_add_test(tc, test_tickets);
	tcase_add_test(tc, test_interval);
	tcase_add_test(tc, test_damage);
	tcase_add_test(tc, test_truncate_random);
	tcase_add_loop_test(tc, test_enospc, 0, 2);
	tcase_add_test(tc, test_eio);
	tcase_add_loop_test(tc, test_roll_syncs, 0, 2);
	tcase_add_test(tc, test_sync_in_steps);
	tcase_add_loop_test(tc, test_segment_synced_before_the_next, 0, 2);
	tcase_add_test(tc, test_interval_sync_eio);
	tcase_add_test(tc, test_write_eio);
	tcase_add_test(tc, test_read_behind_runtime);
	tcase_add_test(tc, test_read_behind_restart);
	tcase_add_test(tc, test_read_behind_large);
	tcase_add_test(tc, test_read_behind_stops_at_segend);
	tcase_add_test(tc, test_no_wakeups_during_sync);
	tcase_add_test(tc, test_segment_reuse);
	tcase_add_test(tc, test_dead_segment_beats_fresh_spare);
	tcase_add_loop_test(tc, test_auto_spare_by_mode, 0, 4);
	tcase_add_loop_test(tc, test_zeros_ahead, 0, 5);
	tcase_add_test(tc, test_first_segment_size);
	tcase_add_loop_test(tc, test_fast_queue_segments_grow_sooner, 0, 2);
	tcase_add_test(tc, test_burst_takes_doubled_segments);
	tcase_add_loop_test(tc, test_fast_queue_short_of_room, 0, 2);
	tcase_add_loop_test(tc, test_roll_without_room_keeps_written, 0, 2);
	tcase_add_test(tc, test_group_one_write);
	tcase_add_loop_test(tc, test_group_waits_for_answered_clients, 0, 3);
	tcase_add_loop_test(tc, test_lone_waiter_synced_by_loop, 0, 2);
	tcase_add_loop_test(tc, test_lone_sync_eio, 0, 2);
	tcase_add_test(tc, test_group_other_journal_fails);
	tcase_add_loop_test(tc, test_group_across_roll, 0, 2);
	tcase_add_test(tc, test_relocate);
	tcase_add_test(tc, test_checkpoint_bounded);
	tcase_add_test(tc, test_ckpt_bitflip);
	tcase_add_test(tc, test_ckpt_versions);
	tcase_add_loop_test(tc, test_unreadable_segment, 0, 3);
	tcase_add_test(tc, test_unreadable_behind);
	tcase_add_test(tc, test_fd_cache);
	tcase_add_test(tc, test_moved_order);
	tcase_add_test(tc, test_live_segment_not_moved);
	tcase_add_test(tc, test_ckpt_oldest_without_walk);
	tcase_add_test(tc, test_ckpt_after_restart);
	tcase_add_loop_test(tc, test_fd_shortage, 0, 2);
	tcase_add_loop_test(tc, test_no_room_then_room, 0, 3);
	tcase_add_test(tc, test_env_stats);
	suite_add_tcase(s, tc);
	return s;
}
