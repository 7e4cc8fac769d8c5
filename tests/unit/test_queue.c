/* test_queue.c: queue semantics in memory (no journal): FIFO, waiters,
 * reliable reads, limits, expiry, fanout. */
#include <check.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "../../server/queue.h"

/* queue_flush's ticket (unused: these queues have no journal, or the
 * tests do not wait for it) */
static uint64_t flush_ticket;

static struct qreg *reg;
static struct queue_conf conf;

static void setup(void)
{
	tern_malloc = malloc;
	queue_conf_default(&conf);
	ck_assert_int_eq(qreg_new(NULL, &reg), 0);
}

static void teardown(void)
{
	tern_malloc = malloc;
	qreg_free(reg);
	reg = NULL;
}

static struct queue *mkq(const char *name)
{
	struct queue *q = NULL;

	ck_assert_int_eq(qreg_get(reg, name, strlen(name), &conf, &q), 0);
	return q;
}

static struct item *mk(const char *body)
{
	struct item *it = item_new((uint32_t)strlen(body));

	memcpy(it->data, body, strlen(body));
	return it;
}

static int push(struct queue *q, const char *body)
{
	uint64_t t;

	return queue_push(q, mk(body), &t, NULL);
}

/* Pops and checks the body; NULL expects empty. */
static void expect(struct queue *q, int open, uint32_t conn, const char *body)
{
	struct item *it = NULL;

	ck_assert_int_eq(queue_pop(q, open ? QUEUE_POP_OPEN : QUEUE_POP_REMOVE, conn, &it), 0);
	if (!body) {
		ck_assert_ptr_null(it);
		return;
	}
	ck_assert_ptr_nonnull(it);
	ck_assert_uint_eq(it->len, strlen(body));
	ck_assert(memcmp(it->data, body, it->len) == 0);
	ck_assert(memcmp(it->data + it->len, "\r\n", 2) == 0);
	item_unref(it);
}

START_TEST(fifo_order)
{
	struct queue *q = mkq("jobs");
	struct queue_stats st;
	char buf[16];
	int i;

	for (i = 0; i < 100; i++) {
		snprintf(buf, sizeof(buf), "m%d", i);
		ck_assert_int_eq(push(q, buf), 0);
	}
	queue_get_stats(q, &st);
	ck_assert_uint_eq(st.items, 100);
	for (i = 0; i < 100; i++) {
		snprintf(buf, sizeof(buf), "m%d", i);
		expect(q, 0, 1, buf);
	}
	expect(q, 0, 1, NULL);
	queue_get_stats(q, &st);
	ck_assert_uint_eq(st.items, 0);
	ck_assert_uint_eq(st.total_items, 100);
	ck_assert_uint_eq(st.bytes, 0);
}
END_TEST

START_TEST(peek_does_not_remove)
{
	struct queue *q = mkq("p");
	struct item *it = NULL;

	push(q, "a");
	ck_assert_int_eq(queue_pop(q, QUEUE_POP_PEEK, 1, &it), 0);
	ck_assert_ptr_nonnull(it);
	item_unref(it);
	expect(q, 0, 1, "a");
	expect(q, 0, 1, NULL);
}
END_TEST

/* queue_peek's callback: the bodies shown, joined by ','. */
static void peek_collect(void *arg, struct item *it)
{
	char *out = arg;

	if (*out)
		strcat(out, ",");
	strncat(out, it->data, it->len);
}

START_TEST(peek_shows_the_first_items)
{
	struct queue *q = mkq("pn");
	struct queue_stats st;
	struct item *it;
	char got[64] = "";
	uint64_t t;

	ck_assert_uint_eq(queue_peek(q, 5, peek_collect, got), 0);
	push(q, "a");
	/* an expired item behind the head is passed over, not shown */
	it = mk("x");
	it->expiry_ms = tern_now_ms() + 60000;
	item_ref(it);
	ck_assert_int_eq(queue_push(q, it, &t, NULL), 0);
	it->expiry_ms = tern_now_ms() - 1;
	item_unref(it);
	push(q, "b");
	push(q, "c");
	ck_assert_uint_eq(queue_peek(q, 2, peek_collect, got), 2);
	ck_assert_str_eq(got, "a,b");
	got[0] = '\0';
	ck_assert_uint_eq(queue_peek(q, 10, peek_collect, got), 3);
	ck_assert_str_eq(got, "a,b,c");
	queue_get_stats(q, &st);
	ck_assert_uint_eq(st.get_misses, 1);
	ck_assert_uint_eq(st.get_hits, 2);
	ck_assert_uint_eq(st.dequeued, 0);
	/* nothing was taken */
	expect(q, 0, 1, "a");
	expect(q, 0, 1, "b");
}
END_TEST

struct wctx {
	struct qwaiter w;
	struct item *got;
	int called;
};

static void served(struct qwaiter *w, struct item *it)
{
	struct wctx *x = (struct wctx *)w;

	x->called++;
	x->got = it;
}

START_TEST(waiters_fifo)
{
	struct queue *q = mkq("w");
	struct wctx a, b;
	struct queue_stats st;

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	a.w.serve = b.w.serve = served;
	a.w.conn_id = 1;
	b.w.conn_id = 2;
	queue_wait(q, &a.w);
	queue_wait(q, &b.w);
	queue_get_stats(q, &st);
	ck_assert_uint_eq(st.waiters, 2);
	push(q, "first");
	ck_assert_int_eq(a.called, 1);
	ck_assert_int_eq(b.called, 0);
	ck_assert(memcmp(a.got->data, "first", 5) == 0);
	push(q, "second");
	ck_assert_int_eq(b.called, 1);
	ck_assert(memcmp(b.got->data, "second", 6) == 0);
	item_unref(a.got);
	item_unref(b.got);
	queue_get_stats(q, &st);
	ck_assert_uint_eq(st.waiters, 0);
	ck_assert_uint_eq(st.items, 0);
}
END_TEST

START_TEST(unwait_removes)
{
	struct queue *q = mkq("w2");
	struct wctx a;

	memset(&a, 0, sizeof(a));
	a.w.serve = served;
	queue_wait(q, &a.w);
	queue_unwait(&a.w);
	push(q, "x");
	ck_assert_int_eq(a.called, 0);
	expect(q, 0, 1, "x");
}
END_TEST

START_TEST(open_close_abort)
{
	struct queue *q = mkq("rel");
	struct queue_stats st;

	push(q, "a");
	push(q, "b");
	expect(q, 1, 7, "a");
	queue_get_stats(q, &st);
	ck_assert_uint_eq(st.open_transactions, 1);
	ck_assert_uint_eq(st.items, 1);
	/* abort puts it back at the head */
	ck_assert_uint_eq(queue_abort(q, 7), 1);
	expect(q, 1, 7, "a");
	expect(q, 1, 7, "b");
	ck_assert_uint_eq(queue_open_count(q, 7), 2);
	/* abort of two keeps their order */
	ck_assert_uint_eq(queue_abort(q, 7), 2);
	expect(q, 1, 7, "a");
	ck_assert_uint_eq(queue_confirm(q, 7, 1), 1);
	expect(q, 0, 7, "b");
	expect(q, 0, 7, NULL);
	queue_get_stats(q, &st);
	ck_assert_uint_eq(st.open_transactions, 0);
}
END_TEST

START_TEST(abort_only_own_items)
{
	struct queue *q = mkq("own");

	push(q, "a");
	push(q, "b");
	expect(q, 1, 1, "a");
	expect(q, 1, 2, "b");
	ck_assert_uint_eq(queue_abort(q, 1), 1);
	ck_assert_uint_eq(queue_confirm(q, 1, 5), 0);
	expect(q, 0, 3, "a");
	ck_assert_uint_eq(queue_confirm(q, 2, 5), 1);
}
END_TEST

START_TEST(disconnect_returns_open)
{
	struct queue *q = mkq("dc");

	push(q, "a");
	push(q, "b");
	expect(q, 1, 9, "a");
	qreg_abort_conn(reg, 9);
	expect(q, 0, 1, "a");
	expect(q, 0, 1, "b");
}
END_TEST

START_TEST(max_open_enforced)
{
	struct queue *q;
	struct item *it = NULL;

	conf.max_open = 2;
	q = mkq("mo");
	push(q, "a");
	push(q, "b");
	push(q, "c");
	expect(q, 1, 1, "a");
	expect(q, 1, 1, "b");
	ck_assert_int_eq(queue_pop(q, QUEUE_POP_OPEN, 1, &it), TERN_EFULL);
	ck_assert_ptr_null(it);
	expect(q, 1, 2, "c"); /* another connection is not limited */
}
END_TEST

START_TEST(open_timeout_returns)
{
	struct queue *q;

	conf.open_timeout_ms = 100;
	q = mkq("ot");
	push(q, "a");
	expect(q, 1, 1, "a");
	/* the deadline is on the monotonic clock, whatever the wall says */
	qreg_tick(reg, tern_now_ms() + 3600000, tern_mono_ms() + 50);
	expect(q, 0, 1, NULL);
	qreg_tick(reg, tern_now_ms() - 3600000, tern_mono_ms() + 200);
	expect(q, 0, 1, "a");
}
END_TEST

/* Opens the head by id; returns its id (0 when empty). */
static uint64_t open_id(struct queue *q, const char *body)
{
	struct item *it = NULL;
	uint64_t id;

	ck_assert_int_eq(queue_pop(q, QUEUE_POP_OPEN_ID, 5, &it), 0);
	if (!body) {
		ck_assert_ptr_null(it);
		return 0;
	}
	ck_assert_ptr_nonnull(it);
	ck_assert(it->len == strlen(body) && memcmp(it->data, body, it->len) == 0);
	ck_assert_uint_eq(it->open_conn, QUEUE_NO_CONN);
	id = it->id;
	item_unref(it);
	return id;
}

START_TEST(open_by_id)
{
	struct queue *q = mkq("{byid}");
	struct queue_stats st;
	uint64_t a, b, c;

	push(q, "a");
	push(q, "b");
	push(q, "c");
	a = open_id(q, "a");
	b = open_id(q, "b");
	c = open_id(q, "c");
	ck_assert(a && b && c && a != b && b != c);
	queue_get_stats(q, &st);
	ck_assert_uint_eq(st.open_transactions, 3);
	/* by id, in any order; not by connection */
	ck_assert_uint_eq(queue_confirm(q, 5, 5), 0);
	ck_assert_uint_eq(queue_abort(q, 5), 0);
	ck_assert_int_eq(queue_confirm_id(q, b), 1);
	ck_assert_int_eq(queue_confirm_id(q, b), 0);
	ck_assert_int_eq(queue_abort_id(q, b), 0);
	ck_assert_int_eq(queue_abort_id(q, c), 1);
	ck_assert_int_eq(queue_abort_id(q, a), 1);
	ck_assert_int_eq(queue_confirm_id(q, a), 0); /* back in the queue */
	/* aborted newest first: the oldest is at the head again */
	expect(q, 0, 1, "a");
	expect(q, 0, 1, "c");
	expect(q, 0, 1, NULL);
	queue_get_stats(q, &st);
	ck_assert_uint_eq(st.open_transactions, 0);
}
END_TEST

/* A connection's items are not confirmable by id, and the end of a
 * connection does not return items opened by id. */
START_TEST(open_by_id_not_connections)
{
	struct queue *q = mkq("mixed");
	uint64_t id;
	struct item *it = NULL;

	push(q, "conn");
	push(q, "byid");
	ck_assert_int_eq(queue_pop(q, QUEUE_POP_OPEN, 3, &it), 0);
	ck_assert_int_eq(queue_confirm_id(q, it->id), 0);
	item_unref(it);
	id = open_id(q, "byid");
	qreg_abort_conn(reg, 3);
	qreg_abort_conn(reg, QUEUE_NO_CONN); /* not a connection: nothing */
	expect(q, 0, 1, "conn");
	expect(q, 0, 1, NULL);
	ck_assert_int_eq(queue_confirm_id(q, id), 1);
}
END_TEST

/* max_open limits one connection; items opened by id have no connection. */
START_TEST(open_by_id_no_max_open)
{
	struct queue *q;

	conf.max_open = 1;
	q = mkq("many");
	for (int i = 0; i < 5; i++)
		push(q, "x");
	for (int i = 0; i < 5; i++)
		ck_assert_uint_ne(open_id(q, "x"), 0);
	open_id(q, NULL);
}
END_TEST

/* With open_timeout = 0 an item opened by id goes back after
 * QUEUE_OPEN_ID_TIMEOUT_MS; with open_timeout set, after that. */
START_TEST(open_by_id_deadlines)
{
	struct queue *q = mkq("never"), *t;
	uint64_t id;

	push(q, "a");
	expect(q, 1, 1, "a"); /* by connection, open_timeout 0: no deadline */
	push(q, "b");
	id = open_id(q, "b");
	qreg_tick(reg, tern_now_ms(), tern_mono_ms() + QUEUE_OPEN_ID_TIMEOUT_MS - 1000);
	expect(q, 0, 1, NULL);
	qreg_tick(reg, tern_now_ms(), tern_mono_ms() + QUEUE_OPEN_ID_TIMEOUT_MS + 1000);
	ck_assert_int_eq(queue_confirm_id(q, id), 0);
	expect(q, 0, 1, "b");
	expect(q, 0, 1, NULL); /* "a" is still its connection's */
	ck_assert_uint_eq(queue_confirm(q, 1, 1), 1);

	conf.open_timeout_ms = 200;
	t = mkq("short");
	push(t, "c");
	open_id(t, "c");
	qreg_tick(reg, tern_now_ms(), tern_mono_ms() + 100);
	expect(t, 0, 1, NULL);
	qreg_tick(reg, tern_now_ms(), tern_mono_ms() + 400);
	expect(t, 0, 1, "c");
}
END_TEST

/* A waiter that opens by id gets its item opened by id. */
START_TEST(open_by_id_waiter)
{
	struct queue *q = mkq("wid");
	struct wctx a;

	memset(&a, 0, sizeof(a));
	a.w.serve = served;
	a.w.mode = QUEUE_POP_OPEN_ID;
	a.w.conn_id = 4;
	queue_wait(q, &a.w);
	push(q, "v");
	ck_assert_int_eq(a.called, 1);
	ck_assert_uint_eq(a.got->open_conn, QUEUE_NO_CONN);
	qreg_abort_conn(reg, 4);
	expect(q, 0, 1, NULL);
	ck_assert_int_eq(queue_abort_id(q, a.got->id), 1);
	item_unref(a.got);
	expect(q, 0, 1, "v");
}
END_TEST

START_TEST(max_items_refuses)
{
	struct queue *q;

	conf.max_items = 2;
	q = mkq("mi");
	ck_assert_int_eq(push(q, "a"), 0);
	ck_assert_int_eq(push(q, "b"), 0);
	ck_assert_int_eq(push(q, "c"), TERN_EFULL);
	expect(q, 0, 1, "a");
	ck_assert_int_eq(push(q, "d"), 0);
}
END_TEST

START_TEST(max_size_discards_old)
{
	struct queue *q;
	struct queue_stats st;

	conf.max_size = 10;
	conf.discard_old_when_full = 1;
	q = mkq("ms");
	push(q, "aaaa");
	push(q, "bbbb");
	ck_assert_int_eq(push(q, "cccc"), 0); /* drops aaaa */
	queue_get_stats(q, &st);
	ck_assert_uint_eq(st.discarded, 1);
	ck_assert_uint_eq(st.bytes, 8);
	expect(q, 0, 1, "bbbb");
	expect(q, 0, 1, "cccc");
}
END_TEST

START_TEST(max_item_size)
{
	struct queue *q;

	conf.max_item_size = 3;
	q = mkq("big");
	ck_assert_int_eq(push(q, "abcd"), TERN_ETOOBIG);
	ck_assert_int_eq(push(q, "abc"), 0);
}
END_TEST

START_TEST(expired_never_handed_out)
{
	struct queue *q = mkq("exp");
	struct item *it = mk("old");
	struct queue_stats st;
	uint64_t t;

	it->expiry_ms = tern_now_ms() - 1;
	ck_assert_int_eq(queue_push(q, it, &t, NULL), 0);
	push(q, "new");
	expect(q, 0, 1, "new");
	queue_get_stats(q, &st);
	ck_assert_uint_eq(st.expired_items, 1);
	ck_assert_uint_eq(st.items, 0);
}
END_TEST

START_TEST(flush_expired_counts)
{
	struct queue *q = mkq("fe");
	struct item *it;
	uint64_t t;
	int i;

	for (i = 0; i < 3; i++) {
		it = mk("x");
		it->expiry_ms = tern_now_ms() + 60000;
		item_ref(it);
		ck_assert_int_eq(queue_push(q, it, &t, NULL), 0);
		it->expiry_ms = tern_now_ms() - 1; /* as if a minute had passed */
		item_unref(it);
	}
	push(q, "live");
	ck_assert_uint_eq(queue_flush_expired(q), 3);
	expect(q, 0, 1, "live");
}
END_TEST

START_TEST(expired_on_arrival_not_queued)
{
	struct queue *q = mkq("ea");
	struct item *it = mk("old");
	struct queue_stats st;
	uint64_t t = 99, id = 99;

	it->expiry_ms = tern_now_ms() - 1000;
	ck_assert_int_eq(queue_push(q, it, &t, &id), 0);
	ck_assert_uint_eq(t, 0);
	ck_assert_uint_eq(id, 0);
	queue_get_stats(q, &st);
	ck_assert_uint_eq(st.items, 0);
	ck_assert_uint_eq(st.total_items, 1);
	ck_assert_uint_eq(st.expired_items, 1);
	ck_assert(!queue_has_items(q));
	it = mk("new");
	ck_assert_int_eq(queue_push(q, it, &t, &id), 0);
	ck_assert_uint_eq(id, 1); /* the dropped one took no id */
	ck_assert(queue_has_items(q));
	expect(q, 0, 1, "new");
}
END_TEST

START_TEST(max_age)
{
	struct queue *q;

	conf.max_age_ms = 1; /* anything older than 1 ms */
	q = mkq("age");
	push(q, "a");
	{
		struct timespec ts = { 0, 5 * 1000 * 1000 };

		nanosleep(&ts, NULL);
	}
	expect(q, 0, 1, NULL);
}
END_TEST

START_TEST(fanout_to_children)
{
	struct queue *p = mkq("events");
	struct queue *c1 = mkq("events+audit");
	struct queue *c2, *other = mkq("eventsx");

	push(p, "e1");
	c2 = mkq("events+mail"); /* created later: gets only later items */
	push(p, "e2");
	expect(p, 0, 1, "e1");
	expect(p, 0, 1, "e2");
	expect(c1, 0, 1, "e1");
	expect(c1, 0, 1, "e2");
	expect(c2, 0, 1, "e2");
	expect(c2, 0, 1, NULL);
	expect(other, 0, 1, NULL);
	/* a set to a child does not fan out further or back */
	push(c1, "direct");
	expect(p, 0, 1, NULL);
	expect(c1, 0, 1, "direct");
}
END_TEST

/* The allocation seam's failure (see lib/tern.h): item_new fails. */
static void *malloc_nomem(size_t n)
{
	(void)n;
	return NULL;
}

/* A fanout copy that cannot be allocated fails the set, and the item the
 * caller handed over is dropped, not leaked. */
START_TEST(fanout_copy_nomem)
{
	struct queue *q = mkq("events");
	struct queue *c = mkq("events+audit");
	struct item *it = mk("payload");
	uint64_t t;

	item_ref(it); /* the test's own reference, to see the push drop its one */
	tern_malloc = malloc_nomem;
	ck_assert_int_eq(queue_push(q, it, &t, NULL), TERN_ENOMEM);
	tern_malloc = malloc;
	ck_assert_uint_eq(it->refcount, 1);
	item_unref(it);
	expect(q, 0, 1, NULL);
	expect(c, 0, 1, NULL);
	ck_assert_int_eq(push(q, "later"), 0);
	expect(c, 0, 1, "later");
	expect(q, 0, 1, "later");
}
END_TEST

START_TEST(fanout_child_before_parent)
{
	struct queue *c = mkq("a+b");
	struct queue *p = mkq("a");

	push(p, "x");
	expect(c, 0, 1, "x");
}
END_TEST

START_TEST(delete_serves_waiters_null)
{
	struct queue *q = mkq("del");
	struct wctx a;

	memset(&a, 0, sizeof(a));
	a.w.serve = served;
	queue_wait(q, &a.w);
	ck_assert_int_eq(qreg_delete(reg, q), 0);
	ck_assert_int_eq(a.called, 1);
	ck_assert_ptr_null(a.got);
	ck_assert_ptr_null(qreg_find(reg, "del", 3));
}
END_TEST

/* Status words parse in any case; a queue starts with its configured
 * status; QUIESCENT answers its waiters; a reload applies a configured
 * status only when it changed, and then over an operator's. */
START_TEST(status_rules)
{
	struct queue *q;
	struct queue_conf c2;
	struct wctx a, b;
	enum queue_status st;

	ck_assert_int_eq(queue_status_parse("readonly", 8, &st), 0);
	ck_assert_int_eq(st, QUEUE_READONLY);
	ck_assert_int_eq(queue_status_parse("QUIESCENT", 9, &st), 0);
	ck_assert_int_eq(st, QUEUE_QUIESCENT);
	ck_assert_int_eq(queue_status_parse("UPX", 2, &st), 0); /* len bounds it */
	ck_assert_int_eq(st, QUEUE_UP);
	ck_assert_int_eq(queue_status_parse("UPX", 3, &st), TERN_EINVAL);
	ck_assert_int_eq(queue_status_parse("", 0, &st), TERN_EINVAL);
	ck_assert_str_eq(queue_status_name(QUEUE_READONLY), "READONLY");
	conf.status = QUEUE_READONLY;
	q = mkq("st");
	ck_assert_int_eq(queue_get_status(q), QUEUE_READONLY);
	ck_assert_int_eq(queue_status_by_operator(q), 0);
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	a.w.serve = b.w.serve = served;
	queue_wait(q, &a.w);
	queue_wait(q, &b.w);
	queue_set_status(q, QUEUE_UP, 1);
	ck_assert_int_eq(a.called + b.called, 0);
	queue_set_status(q, QUEUE_QUIESCENT, 1);
	ck_assert_int_eq(a.called, 1);
	ck_assert_int_eq(b.called, 1);
	ck_assert_ptr_null(a.got);
	ck_assert_int_eq(queue_status_by_operator(q), 1);
	/* the same configured status: the operator's stays */
	c2 = conf;
	queue_set_conf(q, &c2);
	ck_assert_int_eq(queue_get_status(q), QUEUE_QUIESCENT);
	ck_assert_int_eq(queue_status_by_operator(q), 1);
	/* a changed one replaces it */
	c2.status = QUEUE_UP;
	queue_set_conf(q, &c2);
	ck_assert_int_eq(queue_get_status(q), QUEUE_UP);
	ck_assert_int_eq(queue_status_by_operator(q), 0);
	conf.status = QUEUE_UP;
}
END_TEST

/* queue_item_copy: the same bytes, flags and times, its own body. */
START_TEST(item_copy_exact)
{
	struct item *it = mk("abc\r\n\0z"), *cp;

	it->flags = 77;
	it->expiry_ms = 123;
	it->add_ms = 45;
	cp = queue_item_copy(it);
	ck_assert_ptr_nonnull(cp);
	ck_assert_ptr_ne(cp, it);
	ck_assert_uint_eq(cp->len, it->len);
	ck_assert(memcmp(cp->data, it->data, it->len) == 0);
	ck_assert_uint_eq(cp->flags, 77);
	ck_assert_int_eq(cp->expiry_ms, 123);
	ck_assert_int_eq(cp->add_ms, 45);
	item_unref(it);
	item_unref(cp);
}
END_TEST

START_TEST(flush_empties)
{
	struct queue *q = mkq("fl");

	push(q, "a");
	push(q, "b");
	ck_assert_int_eq(queue_flush(q, &flush_ticket), 0);
	expect(q, 0, 1, NULL);
}
END_TEST

/* Pops with QUEUE_POP_HOLD and checks the body; returns the item (the
 * caller's reference). */
static struct item *hold(struct queue *q, const char *body)
{
	struct item *it = NULL;

	ck_assert_int_eq(queue_pop(q, QUEUE_POP_HOLD, 7, &it), 0);
	ck_assert_ptr_nonnull(it);
	ck_assert_uint_eq(it->len, strlen(body));
	ck_assert(memcmp(it->data, body, it->len) == 0);
	return it;
}

START_TEST(held_delivered_is_gone)
{
	struct queue *q = mkq("h1");
	struct queue_stats st;
	struct item *a;

	push(q, "a");
	push(q, "b");
	a = hold(q, "a");
	queue_get_stats(q, &st);
	ck_assert_uint_eq(st.items, 1);
	queue_settle(a, 1);
	queue_settle(a, 0); /* settled already: nothing happens */
	item_unref(a);
	expect(q, 0, 1, "b");
	expect(q, 0, 1, NULL);
}
END_TEST

START_TEST(held_undelivered_returns_in_order)
{
	struct queue *q = mkq("h2");
	struct queue_stats st;
	struct item *a, *b;

	push(q, "a");
	push(q, "b");
	push(q, "c");
	a = hold(q, "a");
	b = hold(q, "b");
	/* newest first, each to the head */
	queue_settle(b, 0);
	queue_settle(a, 0);
	item_unref(a);
	item_unref(b);
	queue_get_stats(q, &st);
	ck_assert_uint_eq(st.items, 3);
	ck_assert_uint_eq(st.bytes, 3);
	expect(q, 0, 1, "a");
	expect(q, 0, 1, "b");
	expect(q, 0, 1, "c");
	expect(q, 0, 1, NULL);
}
END_TEST

START_TEST(held_return_serves_next_waiter)
{
	struct queue *q = mkq("h3");
	struct wctx a, b;

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	a.w.serve = b.w.serve = served;
	a.w.mode = b.w.mode = QUEUE_POP_HOLD;
	a.w.conn_id = 1;
	b.w.conn_id = 2;
	queue_wait(q, &a.w);
	queue_wait(q, &b.w);
	push(q, "x");
	ck_assert_int_eq(a.called, 1);
	ck_assert_ptr_nonnull(a.got);
	ck_assert_int_eq(b.called, 0);
	/* a's connection could not take it: b gets it */
	queue_settle(a.got, 0);
	ck_assert_int_eq(b.called, 1);
	ck_assert_ptr_eq(b.got, a.got);
	item_unref(a.got);
	queue_settle(b.got, 1);
	item_unref(b.got);
	expect(q, 0, 1, NULL);
}
END_TEST

START_TEST(held_forgotten_by_flush_and_delete)
{
	struct queue *q = mkq("h4");
	struct item *a, *b;

	push(q, "a");
	push(q, "b");
	a = hold(q, "a");
	ck_assert_int_eq(queue_flush(q, &flush_ticket), 0);
	queue_settle(a, 0); /* flushed: does not come back */
	item_unref(a);
	expect(q, 0, 1, NULL);
	push(q, "b");
	b = hold(q, "b");
	ck_assert_int_eq(qreg_delete(reg, q), 0);
	queue_settle(b, 0); /* its queue is gone: nothing to do */
	ck_assert_uint_eq(b->len, 1);
	item_unref(b);
}
END_TEST

START_TEST(bad_names_rejected)
{
	struct queue *q = NULL;
	static const char *bad[] = { "", "..", "a/b", "../x", "a..b", ".hidden",
				     "+x", "sp ace", "nul\001" };
	char longname[300];
	unsigned i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_int_eq(qreg_get(reg, bad[i], strlen(bad[i]), &conf, &q),
				 TERN_EBADNAME);
	memset(longname, 'a', sizeof(longname));
	ck_assert_int_eq(qreg_get(reg, longname, 251, &conf, &q), TERN_EBADNAME);
	ck_assert_int_eq(qreg_get(reg, longname, 250, &conf, &q), 0);
}
END_TEST

START_TEST(many_queues_hash_grows)
{
	char name[32];
	int i;

	for (i = 0; i < 2000; i++) {
		snprintf(name, sizeof(name), "q%d", i);
		push(mkq(name), name);
	}
	ck_assert_uint_eq(qreg_count(reg), 2000);
	for (i = 0; i < 2000; i += 97) {
		struct queue *q;

		snprintf(name, sizeof(name), "q%d", i);
		q = qreg_find(reg, name, strlen(name));
		ck_assert_ptr_nonnull(q);
		expect(q, 0, 1, name);
	}
}
END_TEST

/* ---- delivery counts, dead letters, expire_to, delayed delivery ---- */

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static int push_delayed(struct queue *q, const char *body, uint64_t delay_ms)
{
	uint64_t t;

	return queue_push_delayed(q, mk(body), delay_ms, &t, NULL, NULL);
}

/* Opens the head for conn and checks its body and delivery count. */
static void expect_open(struct queue *q, uint32_t conn, const char *body, uint32_t deliveries)
{
	struct item *it = NULL;

	ck_assert_int_eq(queue_pop(q, QUEUE_POP_OPEN, conn, &it), 0);
	ck_assert_ptr_nonnull(it);
	ck_assert(it->len == strlen(body) && memcmp(it->data, body, it->len) == 0);
	ck_assert_uint_eq(it->deliveries, deliveries);
	item_unref(it);
}

START_TEST(poison_goes_to_dead_letter)
{
	struct queue *q, *dlq;
	struct queue_stats st;

	conf.max_deliveries = 3;
	strcpy(conf.dead_letter, "dlq");
	q = mkq("work");
	push(q, "poison");
	push(q, "fine");
	expect_open(q, 1, "poison", 1);
	ck_assert_uint_eq(queue_abort(q, 1), 1);
	expect_open(q, 1, "poison", 2);
	ck_assert_uint_eq(queue_abort(q, 1), 1);
	expect_open(q, 1, "poison", 3);
	/* the third failed delivery: moved, not back at the head */
	ck_assert_uint_eq(queue_abort(q, 1), 1);
	expect_open(q, 1, "fine", 1);
	ck_assert_uint_eq(queue_confirm(q, 1, 1), 1);
	expect(q, 0, 1, NULL);
	queue_get_stats(q, &st);
	ck_assert_uint_eq(st.dead_lettered, 1);
	ck_assert_uint_eq(st.redeliveries, 2);
	ck_assert_uint_eq(st.items, 0);
	ck_assert_uint_eq(st.open_transactions, 0);
	dlq = qreg_find(reg, "dlq", 3);
	ck_assert_ptr_nonnull(dlq);
	/* a fresh item there: count 0, so it is handed out afresh */
	expect_open(dlq, 2, "poison", 1);
	ck_assert_uint_eq(queue_confirm(dlq, 2, 1), 1);
	expect(dlq, 0, 2, NULL);
}
END_TEST

START_TEST(dead_letter_by_timeout_and_disconnect)
{
	struct queue *q, *dlq;
	uint64_t id;
	struct item *it = NULL;

	conf.max_deliveries = 1;
	conf.open_timeout_ms = 100;
	strcpy(conf.dead_letter, "dlq");
	q = mkq("t");
	push(q, "a");
	push(q, "b");
	push(q, "c");
	expect_open(q, 1, "a", 1);
	qreg_tick(reg, tern_now_ms(), tern_mono_ms() + 200); /* timed out */
	expect_open(q, 2, "b", 1);
	qreg_abort_conn(reg, 2); /* connection closed */
	ck_assert_int_eq(queue_pop(q, QUEUE_POP_OPEN_ID, 3, &it), 0);
	id = it->id;
	item_unref(it);
	ck_assert_int_eq(queue_abort_id(q, id), 1); /* aborted by id */
	expect(q, 0, 1, NULL);
	dlq = qreg_find(reg, "dlq", 3);
	ck_assert_ptr_nonnull(dlq);
	expect(dlq, 0, 1, "a");
	expect(dlq, 0, 1, "b");
	expect(dlq, 0, 1, "c");
	expect(dlq, 0, 1, NULL);
}
END_TEST

START_TEST(dead_letter_none_drops)
{
	struct queue *q;
	struct queue_stats st;

	conf.max_deliveries = 1;
	q = mkq("nd");
	push(q, "x");
	expect_open(q, 1, "x", 1);
	ck_assert_uint_eq(queue_abort(q, 1), 1);
	expect(q, 0, 1, NULL);
	queue_get_stats(q, &st);
	ck_assert_uint_eq(st.dead_dropped, 1);
	ck_assert_uint_eq(st.dead_lettered, 0);
	/* a queue that is its own dead letter has none */
	strcpy(conf.dead_letter, "self");
	q = mkq("self");
	push(q, "y");
	expect_open(q, 1, "y", 1);
	ck_assert_uint_eq(queue_abort(q, 1), 1);
	expect(q, 0, 1, NULL);
	queue_get_stats(q, &st);
	ck_assert_uint_eq(st.dead_dropped, 1);
}
END_TEST

START_TEST(expire_to_moves)
{
	struct queue *q, *ex;
	struct queue_stats st;
	struct item *it = mk("late");
	uint64_t t;

	conf.max_age_ms = 1;
	strcpy(conf.expire_to, "ex");
	q = mkq("src");
	conf.max_age_ms = 0;
	conf.expire_to[0] = '\0';
	ex = mkq("ex");
	push(q, "old");
	it->expiry_ms = tern_now_ms() + 3;
	ck_assert_int_eq(queue_push(q, it, &t, NULL), 0);
	sleep_ms(10);
	expect(q, 0, 1, NULL);
	queue_get_stats(q, &st);
	ck_assert_uint_eq(st.expired_items, 2);
	ck_assert_uint_eq(st.expired_to, 2);
	/* moved in order, without their expiry */
	ck_assert_int_eq(queue_pop(ex, QUEUE_POP_REMOVE, 1, &it), 0);
	ck_assert(it && it->len == 3 && memcmp(it->data, "old", 3) == 0);
	item_unref(it);
	ck_assert_int_eq(queue_pop(ex, QUEUE_POP_REMOVE, 1, &it), 0);
	ck_assert(it && it->len == 4 && memcmp(it->data, "late", 4) == 0);
	ck_assert_int_eq(it->expiry_ms, 0);
	item_unref(it);
	/* flush_expired moves too */
	push(q, "third");
	sleep_ms(5);
	ck_assert_uint_eq(queue_flush_expired(q), 1);
	expect(ex, 0, 1, "third");
}
END_TEST

START_TEST(expire_to_each_other)
{
	struct queue *a, *b;
	struct wctx w;

	conf.max_age_ms = 1;
	strcpy(conf.expire_to, "qb");
	a = mkq("qa");
	strcpy(conf.expire_to, "qa");
	b = mkq("qb");
	memset(&w, 0, sizeof(w));
	w.w.serve = served;
	w.w.conn_id = 3;
	push(a, "1");
	push(a, "2");
	push(a, "3");
	sleep_ms(5);
	queue_wait(b, &w.w); /* takes the first one to arrive in qb */
	/* In one loop pass, as the server runs it: the move stamps the copy's
	 * add time and qb checks its age against the same clock reading.
	 * Outside a pass the two readings can fall on either side of a
	 * millisecond boundary, and the copy, 1 ms old, would move on. */
	tern_pass_begin(-1);
	ck_assert_uint_eq(queue_flush_expired(a), 3);
	tern_pass_end();
	ck_assert_int_eq(w.called, 1);
	ck_assert(w.got && memcmp(w.got->data, "1", 1) == 0);
	item_unref(w.got);
	sleep_ms(5);
	/* and back: each move is a new item, aged from its move */
	ck_assert_uint_eq(queue_flush_expired(b), 2);
	expect(b, 0, 1, NULL);
	sleep_ms(5);
	ck_assert_uint_eq(queue_flush_expired(a), 2);
	expect(a, 0, 1, NULL);
}
END_TEST

START_TEST(delayed_invisible_until_due)
{
	struct queue *q = mkq("d");
	struct queue_stats st;
	int64_t mono = tern_mono_ms();

	ck_assert_int_eq(push_delayed(q, "later", 1000), 0);
	push(q, "now");
	queue_get_stats(q, &st);
	ck_assert_uint_eq(st.items, 2);
	ck_assert_uint_eq(st.delayed_items, 1);
	/* a delayed head blocks nothing behind it */
	expect(q, 0, 1, "now");
	expect(q, 0, 1, NULL);
	ck_assert(!queue_has_items(q));
	/* the wait is on the monotonic clock: a wall-clock jump changes nothing */
	qreg_tick(reg, tern_now_ms() + 86400000, mono + 500);
	expect(q, 0, 1, NULL);
	qreg_tick(reg, tern_now_ms(), mono + 1100);
	expect(q, 0, 1, "later");
	queue_get_stats(q, &st);
	ck_assert_uint_eq(st.items, 0);
	ck_assert_uint_eq(st.delayed_items, 0);
	ck_assert_uint_eq(st.mem_bytes, 0);
}
END_TEST

START_TEST(delayed_fifo_by_visibility)
{
	struct queue *q = mkq("f");
	int64_t mono = tern_mono_ms();

	/* due in 20 ms; then an item set after it is due, then one set
	 * before: the delayed one takes its place by the time it became
	 * visible, even though the tick that shows it runs later */
	push(q, "before");
	ck_assert_int_eq(push_delayed(q, "d20", 20), 0);
	ck_assert_int_eq(push_delayed(q, "d10", 10), 0);
	sleep_ms(40);
	push(q, "after");
	qreg_tick(reg, tern_now_ms(), mono + 1000);
	expect(q, 0, 1, "before");
	expect(q, 0, 1, "d10");
	expect(q, 0, 1, "d20");
	expect(q, 0, 1, "after");
	expect(q, 0, 1, NULL);
}
END_TEST

START_TEST(delayed_wakes_waiter)
{
	struct queue *q = mkq("wd");
	struct wctx a;

	memset(&a, 0, sizeof(a));
	a.w.serve = served;
	a.w.conn_id = 1;
	ck_assert_int_eq(push_delayed(q, "hi", 50), 0);
	queue_wait(q, &a.w);
	ck_assert_int_eq(a.called, 0);
	qreg_tick(reg, tern_now_ms(), tern_mono_ms() + 100);
	ck_assert_int_eq(a.called, 1);
	ck_assert(a.got && memcmp(a.got->data, "hi", 2) == 0);
	item_unref(a.got);
}
END_TEST

START_TEST(delayed_bounded)
{
	struct queue *q;
	char big[3001];
	struct queue_stats st;

	conf.jopts.max_memory_size = 4096;
	conf.max_items = 3;
	q = mkq("b");
	memset(big, 'x', 3000);
	big[3000] = '\0';
	ck_assert_int_eq(push_delayed(q, big, 60000), 0);
	/* delayed bodies are bounded by max_memory_size */
	ck_assert_int_eq(push_delayed(q, big, 60000), TERN_EFULL);
	ck_assert_int_eq(push_delayed(q, "s", 60000), 0);
	/* and counted in max_items like any item */
	push(q, "v");
	ck_assert_int_eq(push(q, "w"), TERN_EFULL);
	queue_get_stats(q, &st);
	ck_assert_uint_eq(st.items, 3);
	ck_assert_uint_eq(st.delayed_items, 2);
	ck_assert_int_eq(queue_flush(q, &flush_ticket), 0);
	queue_get_stats(q, &st);
	ck_assert_uint_eq(st.items, 0);
	ck_assert_uint_eq(st.delayed_items, 0);
	ck_assert_uint_eq(st.mem_bytes, 0);
}
END_TEST

/* max_queue_age: a queue empty and unused that long is dropped (qreg_find
 * no longer finds it); items, an open item, a waiting reader or a status
 * an operator set keep it; a set or a get starts its time again; 0 never
 * drops. */
START_TEST(idle_queue_dropped)
{
	struct queue *q, *open, *waited, *held;
	struct wctx a;
	int64_t t0;

	conf.max_queue_age_ms = 1000;
	q = mkq("idle");
	push(q, "x");
	expect(q, 0, 1, "x");
	push(mkq("busy"), "y");
	open = mkq("open");
	push(open, "z");
	expect(open, 1, 7, "z");
	waited = mkq("waited");
	memset(&a, 0, sizeof(a));
	a.w.serve = served;
	queue_wait(waited, &a.w);
	held = mkq("held");
	queue_set_status(held, QUEUE_READONLY, 1);
	conf.max_queue_age_ms = 0;
	mkq("never");
	t0 = tern_mono_ms();
	ck_assert_uint_eq(qreg_drop_idle(reg, t0 + 500), 0);
	ck_assert_ptr_nonnull(qreg_find(reg, "idle", 4));
	/* used again: its time starts over */
	expect(q, 0, 1, NULL);
	ck_assert_uint_eq(qreg_drop_idle(reg, t0 + 900), 0);
	ck_assert_uint_eq(qreg_drop_idle(reg, tern_mono_ms() + 1000), 1);
	ck_assert_ptr_null(qreg_find(reg, "idle", 4));
	ck_assert_ptr_nonnull(qreg_find(reg, "busy", 4));
	ck_assert_ptr_nonnull(qreg_find(reg, "open", 4));
	ck_assert_ptr_nonnull(qreg_find(reg, "waited", 6));
	ck_assert_ptr_nonnull(qreg_find(reg, "never", 5));
	ck_assert_ptr_nonnull(qreg_find(reg, "held", 4));
	ck_assert_uint_eq(qreg_count(reg), 5);
	/* once the reader leaves, the item is confirmed and the status is
	 * the configuration's again: dropped too */
	queue_unwait(&a.w);
	ck_assert_uint_eq(queue_confirm(open, 7, 1), 1);
	queue_set_status(held, QUEUE_UP, 0);
	ck_assert_uint_eq(qreg_drop_idle(reg, tern_mono_ms() + 1000), 3);
	ck_assert_ptr_null(qreg_find(reg, "waited", 6));
	ck_assert_ptr_null(qreg_find(reg, "open", 4));
	ck_assert_ptr_null(qreg_find(reg, "held", 4));
	ck_assert_uint_eq(qreg_count(reg), 2);
}
END_TEST

/* At most QREG_DROP_MAX queues go per call (each delete may wait for the
 * journal's writer: a crowd of idle queues must not stall the loop). */
START_TEST(idle_drop_bounded)
{
	char name[16];

	conf.max_queue_age_ms = 1;
	for (int i = 0; i < 40; i++) {
		snprintf(name, sizeof(name), "idle%d", i);
		mkq(name);
	}
	ck_assert_uint_eq(qreg_drop_idle(reg, tern_mono_ms() + 10), QREG_DROP_MAX);
	ck_assert_uint_eq(qreg_count(reg), 40 - QREG_DROP_MAX);
	while (qreg_drop_idle(reg, tern_mono_ms() + 10))
		;
	ck_assert_uint_eq(qreg_count(reg), 0);
}
END_TEST

Suite *queue_suite(void)
{
	Suite *s = suite_create("queue");
	TCase *tc = tcase_create("semantics");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, fifo_order);
	tcase_add_test(tc, peek_does_not_remove);
	tcase_add_test(tc, peek_shows_the_first_items);
	tcase_add_test(tc, waiters_fifo);
	tcase_add_test(tc, unwait_removes);
	tcase_add_test(tc, open_close_abort);
	tcase_add_test(tc, abort_only_own_items);
	tcase_add_test(tc, disconnect_returns_open);
	tcase_add_test(tc, max_open_enforced);
	tcase_add_test(tc, open_timeout_returns);
	tcase_add_test(tc, open_by_id);
	tcase_add_test(tc, open_by_id_not_connections);
	tcase_add_test(tc, open_by_id_no_max_open);
	tcase_add_test(tc, open_by_id_deadlines);
	tcase_add_test(tc, open_by_id_waiter);
	tcase_add_test(tc, max_items_refuses);
	tcase_add_test(tc, max_size_discards_old);
	tcase_add_test(tc, max_item_size);
	tcase_add_test(tc, expired_never_handed_out);
	tcase_add_test(tc, flush_expired_counts);
	tcase_add_test(tc, expired_on_arrival_not_queued);
	tcase_add_test(tc, max_age);
	tcase_add_test(tc, fanout_to_children);
	tcase_add_test(tc, fanout_child_before_parent);
	tcase_add_test(tc, fanout_copy_nomem);
	tcase_add_test(tc, delete_serves_waiters_null);
	tcase_add_test(tc, status_rules);
	tcase_add_test(tc, item_copy_exact);
	tcase_add_test(tc, flush_empties);
	tcase_add_test(tc, held_delivered_is_gone);
	tcase_add_test(tc, held_undelivered_returns_in_order);
	tcase_add_test(tc, held_return_serves_next_waiter);
	tcase_add_test(tc, held_forgotten_by_flush_and_delete);
	tcase_add_test(tc, bad_names_rejected);
	tcase_add_test(tc, many_queues_hash_grows);
	tcase_add_test(tc, poison_goes_to_dead_letter);
	tcase_add_test(tc, dead_letter_by_timeout_and_disconnect);
	tcase_add_test(tc, dead_letter_none_drops);
	tcase_add_test(tc, expire_to_moves);
	tcase_add_test(tc, expire_to_each_other);
	tcase_add_test(tc, delayed_invisible_until_due);
	tcase_add_test(tc, delayed_fifo_by_visibility);
	tcase_add_test(tc, delayed_wakes_waiter);
	tcase_add_test(tc, delayed_bounded);
	tcase_add_test(tc, idle_queue_dropped);
	tcase_add_test(tc, idle_drop_bounded);
	suite_add_tcase(s, tc);
	return s;
}
