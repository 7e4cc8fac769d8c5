/* test_proto.c: unit tests for protocol/proto.c (request parsing, replies,
 * VALUE headers).  Table-driven where the cases are just "line -> status,
 * reason, swallow"; one test per behaviour otherwise. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/log.h"
#include "../../protocol/proto.h"
#include "../../lib/tern.h"

static struct proto_req req;
static const char *why;
static uint64_t swallow;

/* Parses a NUL-terminated line (without CRLF). */
static enum proto_status parse(const char *line)
{
	why = "unset";
	swallow = 12345;
	return proto_parse(line, strlen(line), &req, &why, &swallow);
}

/* Parses len bytes copied into an exact-size heap buffer, so AddressSanitizer
 * catches any read past the line.  The copy lives until the next call, since
 * req's key names point into it. */
static enum proto_status parse_exact(const char *line, size_t len)
{
	static char *copy;

	free(copy);
	copy = malloc(len ? len : 1);
	ck_assert_ptr_nonnull(copy);
	memcpy(copy, line, len);
	why = "unset";
	swallow = 12345;
	return proto_parse(copy, len, &req, &why, &swallow);
}

static void assert_key(unsigned i, const char *name, uint8_t opts, int32_t t)
{
	ck_assert_uint_lt(i, req.nkeys);
	ck_assert_uint_eq(req.keys[i].len, strlen(name));
	ck_assert(memcmp(req.keys[i].name, name, strlen(name)) == 0);
	ck_assert_uint_eq(req.keys[i].opts, opts);
	ck_assert_int_eq(req.keys[i].timeout_ms, t);
}

#define ASSERT_OK(line)                                                   \
	do {                                                              \
		ck_assert_int_eq(parse(line), PROTO_OK);                  \
		ck_assert_ptr_null(why);                                  \
		ck_assert_uint_eq(swallow, 0);                            \
	} while (0)

/* ------------------------------------------------------------------ set */

START_TEST(set_basic)
{
	ASSERT_OK("set jobs 7 0 5");
	ck_assert_int_eq(req.cmd, PROTO_CMD_SET);
	ck_assert_uint_eq(req.nkeys, 1);
	assert_key(0, "jobs", 0, -1);
	ck_assert_uint_eq(req.flags, 7);
	ck_assert_int_eq(req.exptime, 0);
	ck_assert_uint_eq(req.bytes, 5);
	ck_assert_int_eq(req.noreply, 0);
}
END_TEST

START_TEST(set_noreply)
{
	ASSERT_OK("set jobs 0 60 10 noreply");
	ck_assert_int_eq(req.noreply, 1);
	ck_assert_int_eq(req.exptime, 60);
	ck_assert_uint_eq(req.bytes, 10);
}
END_TEST

START_TEST(set_limits)
{
	ASSERT_OK("set q 4294967295 9223372036854775807 0");
	ck_assert_uint_eq(req.flags, UINT32_MAX);
	ck_assert_int_eq(req.exptime, INT64_MAX);
	ck_assert_uint_eq(req.bytes, 0);
	ASSERT_OK("set q 0 0 4611686018427387904"); /* 2^62: the largest */
	ck_assert_uint_eq(req.bytes, UINT64_C(1) << 62);
	ASSERT_OK("set q 00 000 0005"); /* leading zeros are digits */
	ck_assert_uint_eq(req.bytes, 5);
}
END_TEST

START_TEST(set_blanks)
{
	/* python-memcache sends a trailing space */
	ASSERT_OK("set k 16 0 2 ");
	assert_key(0, "k", 0, -1);
	ck_assert_uint_eq(req.flags, 16);
	ck_assert_uint_eq(req.bytes, 2);
	ASSERT_OK("  set\tk \t 16\t\t0  2\t ");
	ck_assert_uint_eq(req.bytes, 2);
	ASSERT_OK("set\tk\t1\t2\t3\tnoreply");
	ck_assert_int_eq(req.noreply, 1);
	ck_assert_int_eq(req.exptime, 2);
}
END_TEST

START_TEST(set_fanout_name)
{
	ASSERT_OK("set orders+audit 0 0 1");
	assert_key(0, "orders+audit", 0, -1);
	ASSERT_OK("set a.b_c-D9 0 0 1");
	assert_key(0, "a.b_c-D9", 0, -1);
}
END_TEST

START_TEST(set_name_limits)
{
	char line[400];
	char name[PROTO_NAME_MAX + 2];

	memset(name, 'n', sizeof(name));
	name[PROTO_NAME_MAX] = '\0';
	snprintf(line, sizeof(line), "set %s 0 0 3", name);
	ASSERT_OK(line);
	ck_assert_uint_eq(req.keys[0].len, PROTO_NAME_MAX);

	name[PROTO_NAME_MAX] = 'n';
	name[PROTO_NAME_MAX + 1] = '\0';
	snprintf(line, sizeof(line), "set %s 0 0 3", name);
	ck_assert_int_eq(parse(line), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "queue name too long");
	ck_assert_uint_eq(swallow, 5);
}
END_TEST

/* Error rows: line -> status, reason, swallow. */
struct err_case {
	const char *line;
	enum proto_status st;
	const char *reason;
	uint64_t swallow;
};

#define CE PROTO_CLIENT_ERROR
#define FMT "bad command line format"
static const struct err_case set_errors[] = {
	/* too few tokens: <bytes> unknown, nothing to swallow */
	{ "set", CE, FMT, 0 },
	{ "set q", CE, FMT, 0 },
	{ "set q 0", CE, FMT, 0 },
	{ "set q 0 0", CE, FMT, 0 },
	/* negative length: memcached's "bad data chunk", no swallow */
	{ "set q 0 0 -1", CE, "bad data chunk", 0 },
	{ "set q 0 0 -5 noreply", CE, "bad data chunk", 0 },
	{ "set q 0 0 -", CE, "bad data chunk", 0 },
	{ "set q 0 0 -0", CE, "bad data chunk", 0 },
	{ "set bad/name 0 0 -3", CE, "bad data chunk", 0 },
	/* length token is not a number: no swallow */
	{ "set q 0 0 x", CE, FMT, 0 },
	{ "set q 0 0 5x", CE, FMT, 0 },
	{ "set q 0 0 +5", CE, FMT, 0 },
	{ "set q 0 0 0x10", CE, FMT, 0 },
	{ "set q 0 0 18446744073709551616", CE, FMT, 0 }, /* 2^64 */
	{ "set q 0 0 99999999999999999999999", CE, FMT, 0 },
	/* length parses but is above 2^62: swallowing is meaningless */
	{ "set q 0 0 4611686018427387905", CE, FMT, 0 },
	{ "set q 0 0 18446744073709551615", CE, FMT, 0 },
	{ "set q x 0 18446744073709551615", CE, FMT, 0 },
	/* length parses: everything else swallows bytes + 2 */
	{ "set q 0 0 5 noreply extra", CE, FMT, 7 },
	{ "set q 0 0 5 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35",
	  CE, FMT, 7 },
	{ "set q 0 0 5 norepl", CE, FMT, 7 },
	{ "set q 0 0 5 NOREPLY", CE, FMT, 7 },
	{ "set q x 0 5", CE, FMT, 7 },
	{ "set q -1 0 5", CE, FMT, 7 },
	{ "set q 4294967296 0 5", CE, FMT, 7 },
	{ "set q 1.5 0 5", CE, FMT, 7 },
	{ "set q 0 -1 5", CE, FMT, 7 },
	{ "set q 0 9223372036854775808 5", CE, FMT, 7 },
	{ "set q 0 1e3 5", CE, FMT, 7 },
	{ "set q 0 0 0 x", CE, FMT, 2 },
	{ "set bad/name 0 0 10", CE, "bad queue name", 12 },
	{ "set a/t=1 0 0 10", CE, "bad queue name", 12 },
	{ "set a..b 0 0 10", CE, "bad queue name", 12 },
	{ "set .. 0 0 10", CE, "bad queue name", 12 },
	{ "set . 0 0 10", CE, "bad queue name", 12 },
	{ "set .hidden 0 0 10", CE, "bad queue name", 12 },
	{ "set +child 0 0 10", CE, "bad queue name", 12 },
	{ "set q:1 0 0 10", CE, "bad queue name", 12 },
	{ "set q\r 0 0 10", CE, "bad queue name", 12 },
	{ "set \xc3\xa9 0 0 10", CE, "bad queue name", 12 },
	{ "set q 0 0 4611686018427387904 x", CE, FMT, (UINT64_C(1) << 62) + 2 },
	/* case-sensitive like memcached */
	{ "SET q 0 0 5", PROTO_ERROR, NULL, 0 },
	{ "Set q 0 0 5", PROTO_ERROR, NULL, 0 },
};

static void check_err(const struct err_case *c)
{
	enum proto_status st = parse(c->line);

	ck_assert_msg(st == c->st, "'%s': status %d, want %d", c->line, st, c->st);
	if (c->reason)
		ck_assert_msg(why && strcmp(why, c->reason) == 0, "'%s': reason '%s', want '%s'",
			      c->line, why ? why : "(null)", c->reason);
	else
		ck_assert_ptr_null(why);
	ck_assert_msg(swallow == c->swallow, "'%s': swallow %llu, want %llu", c->line,
		      (unsigned long long)swallow, (unsigned long long)c->swallow);
	if (st != PROTO_OK)
		ck_assert_uint_eq(req.nkeys, 0);
}

START_TEST(set_error_rows)
{
	check_err(&set_errors[_i]);
}
END_TEST

/* ------------------------------------------------------------------ get */

START_TEST(get_plain)
{
	ASSERT_OK("get jobs");
	ck_assert_int_eq(req.cmd, PROTO_CMD_GET);
	ck_assert_uint_eq(req.nkeys, 1);
	assert_key(0, "jobs", 0, -1);
	ASSERT_OK("gets jobs");
	ck_assert_int_eq(req.cmd, PROTO_CMD_GETS);
	assert_key(0, "jobs", 0, -1);
}
END_TEST

START_TEST(get_each_option)
{
	ASSERT_OK("get q/open");
	assert_key(0, "q", PROTO_OPT_OPEN, -1);
	ASSERT_OK("get q/close");
	assert_key(0, "q", PROTO_OPT_CLOSE, -1);
	ASSERT_OK("get q/abort");
	assert_key(0, "q", PROTO_OPT_ABORT, -1);
	ASSERT_OK("get q/peek");
	assert_key(0, "q", PROTO_OPT_PEEK, -1);
	ck_assert_uint_eq(req.keys[0].peek, 1);
	ASSERT_OK("get q/peek=7");
	assert_key(0, "q", PROTO_OPT_PEEK, -1);
	ck_assert_uint_eq(req.keys[0].peek, 7);
	ASSERT_OK("get q/t=10/peek=1000");
	assert_key(0, "q", PROTO_OPT_PEEK, 10);
	ck_assert_uint_eq(req.keys[0].peek, PROTO_PEEK_MAX);
	ASSERT_OK("get q");
	ck_assert_uint_eq(req.keys[0].peek, 0);
	ASSERT_OK("get q/t=1000");
	assert_key(0, "q", 0, 1000);
	ASSERT_OK("get q/t=0");
	assert_key(0, "q", 0, 0);
	ASSERT_OK("get q/t=86400000");
	assert_key(0, "q", 0, PROTO_TIMEOUT_MAX);
	ASSERT_OK("get q/t=007");
	assert_key(0, "q", 0, 7);
}
END_TEST

START_TEST(get_combinations)
{
	ASSERT_OK("get q/t=100/open");
	assert_key(0, "q", PROTO_OPT_OPEN, 100);
	ASSERT_OK("get q/open/t=100");
	assert_key(0, "q", PROTO_OPT_OPEN, 100);
	ASSERT_OK("get q/close/open");
	assert_key(0, "q", PROTO_OPT_CLOSE | PROTO_OPT_OPEN, -1);
	ASSERT_OK("get q/open/close");
	assert_key(0, "q", PROTO_OPT_CLOSE | PROTO_OPT_OPEN, -1);
	/* Kestrel's "confirm previous, wait for and open the next" */
	ASSERT_OK("get q/t=100/close/open");
	assert_key(0, "q", PROTO_OPT_CLOSE | PROTO_OPT_OPEN, 100);
	ASSERT_OK("get q/close/t=5/open");
	assert_key(0, "q", PROTO_OPT_CLOSE | PROTO_OPT_OPEN, 5);
	ASSERT_OK("get q/peek/t=50");
	assert_key(0, "q", PROTO_OPT_PEEK, 50);
	ASSERT_OK("get q/t=50/abort");
	assert_key(0, "q", PROTO_OPT_ABORT, 50);
	/* accepted as Kestrel does; the server decides */
	ASSERT_OK("get q/peek/abort");
	assert_key(0, "q", PROTO_OPT_PEEK | PROTO_OPT_ABORT, -1);
}
END_TEST

/* Reliable reads by id: reserve, close=<id> (with reserve or open:
 * confirm, take the next), abort=<id>, and delete <q>/<id>. */
START_TEST(get_by_id)
{
	ASSERT_OK("gets {q}/reserve");
	assert_key(0, "{q}", PROTO_OPT_RESERVE, -1);
	ck_assert_uint_eq(req.keys[0].item_id, 0);
	ASSERT_OK("gets {q}/t=500/close=3/reserve");
	assert_key(0, "{q}", PROTO_OPT_RESERVE | PROTO_OPT_CLOSE_ID, 500);
	ck_assert_uint_eq(req.keys[0].item_id, 3);
	ASSERT_OK("gets {q}/close=42");
	assert_key(0, "{q}", PROTO_OPT_CLOSE_ID, -1);
	ck_assert_uint_eq(req.keys[0].item_id, 42);
	ASSERT_OK("gets {q}/close=7/open/t=100");
	assert_key(0, "{q}", PROTO_OPT_CLOSE_ID | PROTO_OPT_OPEN, 100);
	ck_assert_uint_eq(req.keys[0].item_id, 7);
	ck_assert_uint_eq(req.keys[0].raw_len, strlen("{q}/close=7/open/t=100"));
	ASSERT_OK("get q/abort=9223372036854775807");
	assert_key(0, "q", PROTO_OPT_ABORT_ID, -1);
	ck_assert_uint_eq(req.keys[0].item_id, 9223372036854775807ull);
	ASSERT_OK("get q/t=5/abort=3");
	assert_key(0, "q", PROTO_OPT_ABORT_ID, 5);
	ASSERT_OK("get q/open");
	ck_assert_uint_eq(req.keys[0].item_id, 0);
	ASSERT_OK("delete {q}/12 noreply");
	ck_assert_int_eq(req.cmd, PROTO_CMD_DELETE);
	assert_key(0, "{q}", PROTO_OPT_CLOSE_ID, -1);
	ck_assert_uint_eq(req.keys[0].item_id, 12);
	ck_assert_uint_eq(req.keys[0].raw_len, 6);
	ck_assert_int_eq(req.noreply, 1);
	ASSERT_OK("delete q");
	assert_key(0, "q", 0, -1);
	ck_assert_uint_eq(req.keys[0].item_id, 0);
}
END_TEST

START_TEST(get_several_keys)
{
	ASSERT_OK("get a b/open c/t=5/peek  d/close/open\t e");
	ck_assert_uint_eq(req.nkeys, 5);
	assert_key(0, "a", 0, -1);
	assert_key(1, "b", PROTO_OPT_OPEN, -1);
	assert_key(2, "c", PROTO_OPT_PEEK, 5);
	assert_key(3, "d", PROTO_OPT_OPEN | PROTO_OPT_CLOSE, -1);
	assert_key(4, "e", 0, -1);
	ASSERT_OK("gets a a a"); /* repeats are the server's business */
	ck_assert_uint_eq(req.nkeys, 3);
}
END_TEST

START_TEST(get_raw_keys)
{
	/* replies echo the key as requested: raw keeps the options */
	ASSERT_OK("get q/open/t=500 r q/peek");
	ck_assert_uint_eq(req.keys[0].raw_len, strlen("q/open/t=500"));
	ck_assert(memcmp(req.keys[0].raw, "q/open/t=500", req.keys[0].raw_len) == 0);
	ck_assert_ptr_eq(req.keys[0].raw, req.keys[0].name);
	ck_assert_uint_eq(req.keys[1].raw_len, 1);
	ck_assert_uint_eq(req.keys[2].raw_len, 6);
	ASSERT_OK("set q 0 0 1");
	ck_assert_uint_eq(req.keys[0].raw_len, 1);
	ck_assert_ptr_eq(req.keys[0].raw, req.keys[0].name);
}
END_TEST

START_TEST(key_parse_direct)
{
	struct proto_key k;

	ck_assert_ptr_null(proto_key_parse("q/close/open/t=9", 16, &k));
	ck_assert_uint_eq(k.len, 1);
	ck_assert_uint_eq(k.raw_len, 16);
	ck_assert_uint_eq(k.opts, PROTO_OPT_OPEN | PROTO_OPT_CLOSE);
	ck_assert_int_eq(k.timeout_ms, 9);
	/* binary keys may hold any byte: only queue names pass */
	ck_assert_str_eq(proto_key_parse("q\0x", 3, &k), "bad queue name");
	ck_assert_str_eq(proto_key_parse("a b", 3, &k), "bad queue name");
	ck_assert_str_eq(proto_key_parse("", 0, &k), "bad queue name");
	ck_assert_str_eq(proto_key_parse("q/", 2, &k), "bad get option");
	ck_assert_str_eq(proto_key_parse("q/t=86400001", 12, &k), "bad timeout");
	ck_assert_str_eq(proto_key_parse("q/abort/open", 12, &k), "bad get option combination");
	/* delay is a set option: a get refuses it */
	ck_assert_str_eq(proto_key_parse("q/delay=5", 9, &k), "bad get option");
}
END_TEST

START_TEST(set_key_delay)
{
	struct proto_key k;

	ck_assert_ptr_null(proto_set_key_parse("q", 1, &k));
	ck_assert_uint_eq(k.delay_ms, 0);
	ck_assert_ptr_null(proto_set_key_parse("q/delay=1500", 12, &k));
	ck_assert_uint_eq(k.len, 1);
	ck_assert_uint_eq(k.raw_len, 12);
	ck_assert_uint_eq(k.delay_ms, 1500);
	ck_assert_ptr_null(proto_set_key_parse("q/delay=2s", 10, &k));
	ck_assert_uint_eq(k.delay_ms, 2000);
	ck_assert_ptr_null(proto_set_key_parse("q/delay=7ms", 11, &k));
	ck_assert_uint_eq(k.delay_ms, 7);
	ck_assert_ptr_null(proto_set_key_parse("q/delay=2592000s", 16, &k));
	ck_assert_uint_eq(k.delay_ms, 2592000000u);
	ck_assert_str_eq(proto_set_key_parse("q/delay=2592001s", 16, &k), "bad delay");
	ck_assert_str_eq(proto_set_key_parse("q/delay=", 8, &k), "bad delay");
	ck_assert_str_eq(proto_set_key_parse("q/delay=-1", 10, &k), "bad delay");
	ck_assert_str_eq(proto_set_key_parse("q/delay=1s/open", 15, &k), "bad queue name");
	ck_assert_str_eq(proto_set_key_parse("q/open", 6, &k), "bad queue name");
	ck_assert_str_eq(proto_set_key_parse("q/", 2, &k), "bad queue name");
	ASSERT_OK("set q/delay=250 1 0 3");
	assert_key(0, "q", 0, -1);
	ck_assert_uint_eq(req.keys[0].delay_ms, 250);
	ck_assert_int_eq(parse("set q/delay=x 0 0 3"), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "bad delay");
	ck_assert_uint_eq(swallow, 5);
}
END_TEST

START_TEST(add_parses_as_set)
{
	ASSERT_OK("add lock 3 60 1 noreply");
	ck_assert_int_eq(req.cmd, PROTO_CMD_ADD);
	assert_key(0, "lock", 0, -1);
	ck_assert_uint_eq(req.flags, 3);
	ck_assert_int_eq(req.exptime, 60);
	ck_assert_uint_eq(req.bytes, 1);
	ck_assert_int_eq(req.noreply, 1);
	ck_assert_int_eq(parse("add a/b 0 0 4"), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "bad queue name");
	ck_assert_uint_eq(swallow, 6);
	ck_assert_int_eq(parse("add q 0 0 -1"), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "bad data chunk");
	ck_assert_uint_eq(swallow, 0);
	ck_assert(proto_cmd_takes_body(PROTO_CMD_ADD));
	ck_assert_ptr_null(proto_refusal(PROTO_CMD_ADD));
}
END_TEST

/* The storage commands tern refuses parse far enough to be swallowed. */
static const struct err_case refused_store[] = {
	{ "replace q 0 0 5", PROTO_OK, NULL, 0 },
	{ "append q 0 0 0", PROTO_OK, NULL, 0 },
	{ "prepend q 0 0 5 noreply", PROTO_OK, NULL, 0 },
	{ "cas q 0 0 5 123", PROTO_OK, NULL, 0 },
	{ "cas q 0 0 5 123 noreply", PROTO_OK, NULL, 0 },
	{ "replace a*b x y 5", PROTO_OK, NULL, 0 }, /* only the length matters */
	{ "replace q 0 0", CE, FMT, 0 },
	{ "replace q 0 0 x", CE, FMT, 0 },
	{ "append q 0 0 -1", CE, "bad data chunk", 0 },
	{ "prepend q 0 0 4611686018427387905", CE, FMT, 0 },
	{ "cas q 0 0 5", CE, FMT, 7 },               /* no cas unique */
	{ "cas q 0 0 5 1 noreply x", CE, FMT, 7 },
	{ "replace q 0 0 5 noreply extra", CE, FMT, 7 },
	{ "append q 0 0 5 norepl", CE, FMT, 7 },
};

/* status [WORD] | status queue NAME [WORD]: the word is the server's to
 * check. */
START_TEST(status_forms)
{
	ASSERT_OK("status");
	ck_assert_int_eq(req.cmd, PROTO_CMD_STATUS);
	ck_assert_uint_eq(req.nkeys, 0);
	ck_assert_ptr_null(req.word);
	ASSERT_OK("status  READONLY ");
	ck_assert_uint_eq(req.nkeys, 0);
	ck_assert_uint_eq(req.word_len, 8);
	ck_assert(memcmp(req.word, "READONLY", 8) == 0);
	ASSERT_OK("status queue jobs");
	assert_key(0, "jobs", 0, -1);
	ck_assert_uint_eq(req.nkeys, 1);
	ck_assert_ptr_null(req.word);
	ASSERT_OK("status queue jobs whatever");
	assert_key(0, "jobs", 0, -1);
	ck_assert_uint_eq(req.word_len, 8);
	ck_assert(memcmp(req.word, "whatever", 8) == 0);
	/* "queue" alone is a word (the server refuses it) */
	ASSERT_OK("status queue");
	ck_assert_uint_eq(req.nkeys, 0);
	ck_assert_uint_eq(req.word_len, 5);
	ck_assert_int_eq(parse("status a b"), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "bad command line format");
	ck_assert_int_eq(parse("status queue a b c"), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "bad command line format");
	ck_assert_uint_eq(req.nkeys, 0);
	ck_assert_int_eq(parse("status queue ../a UP"), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "bad queue name");
	ck_assert_uint_eq(swallow, 0);
}
END_TEST

START_TEST(refused_store_rows)
{
	check_err(&refused_store[_i]);
	if (refused_store[_i].st == PROTO_OK) {
		ck_assert_uint_eq(req.nkeys, 0);
		ck_assert_ptr_nonnull(proto_refusal(req.cmd));
		ck_assert(proto_cmd_takes_body(req.cmd));
	}
}
END_TEST

START_TEST(refused_lines)
{
	ASSERT_OK("incr q 1");
	ck_assert_int_eq(req.cmd, PROTO_CMD_INCR);
	ck_assert_int_eq(req.noreply, 0);
	ASSERT_OK("decr q 1 noreply");
	ck_assert_int_eq(req.noreply, 1);
	ASSERT_OK("touch q 10 noreply");
	ck_assert_int_eq(req.noreply, 1);
	ASSERT_OK("touch");
	ASSERT_OK("gat 10 q noreply"); /* gat takes no noreply: a key */
	ck_assert_int_eq(req.noreply, 0);
	ASSERT_OK("gats 10 a b");
	ck_assert_uint_eq(req.nkeys, 0);
	ck_assert(!proto_cmd_takes_body(PROTO_CMD_INCR));
	ck_assert(!proto_cmd_takes_body(PROTO_CMD_GAT));
	ck_assert(!proto_cmd_takes_body(PROTO_CMD_GET));
	ck_assert(proto_cmd_takes_body(PROTO_CMD_SET));
	ck_assert(!proto_cmd_takes_body(PROTO_CMD__COUNT));
}
END_TEST

START_TEST(refusal_table)
{
	int c;

	for (c = 0; c < PROTO_CMD__COUNT; c++) {
		const char *why_c = proto_refusal((enum proto_cmd)c);
		const char *name = proto_cmd_name((enum proto_cmd)c);

		if (!why_c)
			continue;
		/* each reason names its command first, and is one clean line */
		ck_assert_msg(strncmp(why_c, name, strlen(name)) == 0 &&
			      strncmp(why_c + strlen(name), " not supported: ", 16) == 0, "%s", why_c);
		ck_assert_ptr_null(strpbrk(why_c, "\r\n"));
	}
	ck_assert_ptr_null(proto_refusal(PROTO_CMD_GET));
	ck_assert_ptr_null(proto_refusal(PROTO_CMD_SET));
	ck_assert_ptr_null(proto_refusal(PROTO_CMD__COUNT));
	ck_assert_str_eq(proto_refusal(PROTO_CMD_INCR), "incr not supported: queues hold no counters");
}
END_TEST

START_TEST(get_max_keys)
{
	char line[PROTO_MAX_KEYS * 8 + 16];
	size_t off;
	int i;

	off = (size_t)sprintf(line, "get");
	for (i = 0; i < PROTO_MAX_KEYS; i++)
		off += (size_t)sprintf(line + off, " k%d", i);
	ASSERT_OK(line);
	ck_assert_uint_eq(req.nkeys, PROTO_MAX_KEYS);
	assert_key(0, "k0", 0, -1);
	{
		char last[16];
		int n = sprintf(last, "k%d", PROTO_MAX_KEYS - 1);

		assert_key(PROTO_MAX_KEYS - 1, last, 0, -1);
		ck_assert(req.keys[PROTO_MAX_KEYS - 1].name + n == line + off);
	}

	sprintf(line + off, " k%d", PROTO_MAX_KEYS);
	ck_assert_int_eq(parse(line), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "too many keys");
	ck_assert_uint_eq(swallow, 0);
	ck_assert_uint_eq(req.nkeys, 0);
}
END_TEST

START_TEST(get_name_limits)
{
	char line[400];
	char name[PROTO_NAME_MAX + 2];

	memset(name, 'g', sizeof(name));
	name[PROTO_NAME_MAX] = '\0';
	snprintf(line, sizeof(line), "get %s/t=10/open", name);
	ASSERT_OK(line);
	ck_assert_uint_eq(req.keys[0].len, PROTO_NAME_MAX);
	ck_assert_int_eq(req.keys[0].timeout_ms, 10);

	name[PROTO_NAME_MAX] = 'g';
	name[PROTO_NAME_MAX + 1] = '\0';
	snprintf(line, sizeof(line), "get %s/open", name);
	ck_assert_int_eq(parse(line), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "queue name too long");
	snprintf(line, sizeof(line), "get a %s", name);
	ck_assert_int_eq(parse(line), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "queue name too long");
}
END_TEST

static const struct err_case get_errors[] = {
	{ "get", CE, FMT, 0 },
	{ "gets", CE, FMT, 0 },
	{ "get  \t ", CE, FMT, 0 },
	{ "GET q", PROTO_ERROR, NULL, 0 },
	{ "get /open", CE, "bad queue name", 0 },
	{ "get /", CE, "bad queue name", 0 },
	{ "get ../x", CE, "bad queue name", 0 },
	{ "get a..b/open", CE, "bad queue name", 0 },
	{ "get q* ", CE, "bad queue name", 0 },
	{ "get ok bad! ", CE, "bad queue name", 0 },
	{ "get q/", CE, "bad get option", 0 },
	{ "get q//open", CE, "bad get option", 0 },
	{ "get q/open/", CE, "bad get option", 0 },
	{ "get q/opem", CE, "bad get option", 0 },
	{ "get q/OPEN", CE, "bad get option", 0 },
	{ "get q/open2", CE, "bad get option", 0 },
	{ "get q/ope", CE, "bad get option", 0 },
	{ "get q/t", CE, "bad get option", 0 },
	{ "get q/timeout=5", CE, "bad get option", 0 },
	{ "get q/open/open", CE, "bad get option", 0 },
	{ "get q/close/close", CE, "bad get option", 0 },
	{ "get q/abort/abort", CE, "bad get option", 0 },
	{ "get q/peek/peek", CE, "bad get option", 0 },
	{ "get q/peek/peek=2", CE, "bad get option", 0 },
	{ "get q/peek=2/peek", CE, "bad get option", 0 },
	{ "get q/peek=0", CE, "bad peek count", 0 },
	{ "get q/peek=1001", CE, "bad peek count", 0 },
	{ "get q/peek=", CE, "bad peek count", 0 },
	{ "get q/peek=x", CE, "bad peek count", 0 },
	{ "get q/peek=2/open", CE, "bad get option combination", 0 },
	{ "get q/t=1/t=2", CE, "bad get option", 0 },
	{ "get q/t=", CE, "bad timeout", 0 },
	{ "get q/t=-1", CE, "bad timeout", 0 },
	{ "get q/t=+1", CE, "bad timeout", 0 },
	{ "get q/t=1s", CE, "bad timeout", 0 },
	{ "get q/t=0x10", CE, "bad timeout", 0 },
	{ "get q/t=86400001", CE, "bad timeout", 0 },
	{ "get q/t=99999999999999999999", CE, "bad timeout", 0 },
	{ "get q/peek/open", CE, "bad get option combination", 0 },
	{ "get q/peek/close", CE, "bad get option combination", 0 },
	{ "get q/abort/open", CE, "bad get option combination", 0 },
	{ "get q/close/abort", CE, "bad get option combination", 0 },
	{ "get q/open/peek/t=5", CE, "bad get option combination", 0 },
	{ "get good q/open/abort", CE, "bad get option combination", 0 },
	/* reliable reads by id */
	{ "get q/close=", CE, "bad item id", 0 },
	{ "get q/close=x", CE, "bad item id", 0 },
	{ "get q/close=0", CE, "bad item id", 0 },
	{ "get q/abort=-1", CE, "bad item id", 0 },
	{ "get q/close=9223372036854775808", CE, "bad item id", 0 },
	{ "get q/close=99999999999999999999999", CE, "bad item id", 0 },
	{ "get q/close=1/close=2", CE, "bad get option", 0 },
	{ "get q/close=1/abort=2", CE, "bad get option", 0 },
	{ "get q/close=1/close", CE, "bad get option combination", 0 },
	{ "get q/close=1/abort", CE, "bad get option combination", 0 },
	{ "get q/peek/close=1", CE, "bad get option combination", 0 },
	{ "get q/abort=1/open", CE, "bad get option combination", 0 },
	{ "get q/abort=1/close", CE, "bad get option combination", 0 },
	{ "get q/abort=1/peek", CE, "bad get option combination", 0 },
	{ "get q/Close=1", CE, "bad get option", 0 },
	{ "gets q/reserve/open", CE, "bad get option combination", 0 },
	{ "gets q/reserve/close", CE, "bad get option combination", 0 },
	{ "gets q/reserve/peek", CE, "bad get option combination", 0 },
	{ "gets q/reserve/abort", CE, "bad get option combination", 0 },
	{ "gets q/reserve/abort=1", CE, "bad get option combination", 0 },
	{ "gets q/reserve/reserve", CE, "bad get option", 0 },
	{ "get q/reserve", CE, "reserve needs gets (the item id is the cas)", 0 },
	{ "get a q/t=5/reserve", CE, "reserve needs gets (the item id is the cas)", 0 },
};

START_TEST(get_error_rows)
{
	check_err(&get_errors[_i]);
}
END_TEST

/* --------------------------------------------------------- other commands */

START_TEST(delete_flush)
{
	ASSERT_OK("delete q");
	ck_assert_int_eq(req.cmd, PROTO_CMD_DELETE);
	assert_key(0, "q", 0, -1);
	ck_assert_int_eq(req.noreply, 0);
	ASSERT_OK("delete q noreply");
	ck_assert_int_eq(req.noreply, 1);
	ASSERT_OK("delete q 0"); /* memcached's legacy time argument */
	ck_assert_int_eq(req.noreply, 0);
	ASSERT_OK("delete q 0 noreply");
	ck_assert_int_eq(req.noreply, 1);
	ASSERT_OK("flush q");
	ck_assert_int_eq(req.cmd, PROTO_CMD_FLUSH);
	assert_key(0, "q", 0, -1);
	ASSERT_OK("flush q noreply ");
	ck_assert_int_eq(req.noreply, 1);
	ASSERT_OK("flush_expired q");
	ck_assert_int_eq(req.cmd, PROTO_CMD_FLUSH_EXPIRED);
	ck_assert_uint_eq(req.nkeys, 1);
	ASSERT_OK("flush_expired q noreply");
	ck_assert_int_eq(req.noreply, 1);
}
END_TEST

START_TEST(flush_all_forms)
{
	ASSERT_OK("flush_all");
	ck_assert_int_eq(req.cmd, PROTO_CMD_FLUSH_ALL);
	ck_assert_uint_eq(req.nkeys, 0);
	ck_assert_int_eq(req.delay, 0);
	ck_assert_int_eq(req.noreply, 0);
	ASSERT_OK("flush_all 30");
	ck_assert_int_eq(req.delay, 30);
	ASSERT_OK("flush_all noreply");
	ck_assert_int_eq(req.delay, 0);
	ck_assert_int_eq(req.noreply, 1);
	ASSERT_OK("flush_all 2147483647 noreply");
	ck_assert_int_eq(req.delay, INT32_MAX);
	ck_assert_int_eq(req.noreply, 1);
	ASSERT_OK("flush_all_expired");
	ck_assert_int_eq(req.cmd, PROTO_CMD_FLUSH_ALL_EXPIRED);
	ck_assert_uint_eq(req.nkeys, 0);
}
END_TEST

START_TEST(simple_commands)
{
	ASSERT_OK("stats");
	ck_assert_int_eq(req.cmd, PROTO_CMD_STATS);
	ck_assert_uint_eq(req.nkeys, 0);
	ck_assert_int_eq(req.stats.kind, PROTO_STATS_ALL);
	ASSERT_OK("stats  jobs.a ");
	ck_assert_int_eq(req.stats.kind, PROTO_STATS_QUEUE);
	ck_assert_uint_eq(req.stats.len, 6);
	ck_assert(memcmp(req.stats.arg, "jobs.a", 6) == 0);
	ASSERT_OK("stats queue");
	ck_assert_int_eq(req.stats.kind, PROTO_STATS_QUEUE);
	ck_assert_uint_eq(req.stats.len, 5);
	ASSERT_OK("stats queue jobs.*");
	ck_assert_int_eq(req.stats.kind, PROTO_STATS_MATCH);
	ck_assert_uint_eq(req.stats.len, 6);
	ck_assert(memcmp(req.stats.arg, "jobs.*", 6) == 0);
	ASSERT_OK("stats queue [!a]?x+*");
	ck_assert_int_eq(req.stats.kind, PROTO_STATS_MATCH);
	ASSERT_OK("stats queue items");
	ck_assert_int_eq(req.stats.kind, PROTO_STATS_MATCH);
	ASSERT_OK("version");
	ck_assert_int_eq(req.cmd, PROTO_CMD_VERSION);
	ASSERT_OK("quit");
	ck_assert_int_eq(req.cmd, PROTO_CMD_QUIT);
	ASSERT_OK("shutdown");
	ck_assert_int_eq(req.cmd, PROTO_CMD_SHUTDOWN);
	ASSERT_OK("reload");
	ck_assert_int_eq(req.cmd, PROTO_CMD_RELOAD);
	ASSERT_OK(" \tversion\t ");
	ck_assert_int_eq(req.cmd, PROTO_CMD_VERSION);
}
END_TEST

/* memcached 1.6's readings: a second argument is ignored unless it is
 * noreply; a level that is not a number is -1 (answered CLIENT_ERROR
 * unless noreply); tern's own form names a log level. */
static const struct {
	const char *line;
	int64_t verbosity;
	int log_level, noreply;
} verbosity_cases[] = {
	{ "verbosity 1", 1, -1, 0 },
	{ "verbosity 0 noreply", 0, -1, 1 },
	{ "verbosity 1 2", 1, -1, 0 },
	{ "verbosity +2", 2, -1, 0 },
	{ "verbosity 4294967296", 4294967296LL, -1, 0 },
	{ "verbosity noreply", -1, -1, 1 },
	{ "verbosity x", -1, -1, 0 },
	{ "verbosity -1", -1, -1, 0 },
	{ "verbosity 99999999999999999999", -1, -1, 0 },
	{ "verbosity error", 0, LOG_LEVEL_ERROR, 0 },
	{ "verbosity debug noreply", 0, LOG_LEVEL_DEBUG, 1 },
};

START_TEST(verbosity_forms)
{
	for (size_t i = 0; i < sizeof(verbosity_cases) / sizeof(verbosity_cases[0]); i++) {
		ASSERT_OK(verbosity_cases[i].line);
		ck_assert_int_eq(req.cmd, PROTO_CMD_VERBOSITY);
		ck_assert_int_eq(req.verbosity, verbosity_cases[i].verbosity);
		ck_assert_int_eq(req.log_level, verbosity_cases[i].log_level);
		ck_assert_int_eq(req.noreply, verbosity_cases[i].noreply);
	}
	/* version answers whatever follows, noreply included */
	ASSERT_OK("version foo bar");
	ck_assert_int_eq(req.cmd, PROTO_CMD_VERSION);
	ASSERT_OK("version noreply");
	ck_assert_int_eq(req.noreply, 0);
	ASSERT_OK("stats settings");
	ck_assert_int_eq(req.stats.kind, PROTO_STATS_SETTINGS);
	/* a queue named settings or noreply: by pattern */
	ASSERT_OK("stats queue settings");
	ck_assert_int_eq(req.stats.kind, PROTO_STATS_MATCH);
	ASSERT_OK("stats queue noreply");
	ck_assert_int_eq(req.stats.kind, PROTO_STATS_MATCH);
}
END_TEST

START_TEST(monitor_forms)
{
	ASSERT_OK("monitor q 10");
	ck_assert_int_eq(req.cmd, PROTO_CMD_MONITOR);
	assert_key(0, "q", 0, -1);
	ck_assert_uint_eq(req.seconds, 10);
	ck_assert_uint_eq(req.count, 0);
	ASSERT_OK("monitor q 1 100");
	ck_assert_uint_eq(req.seconds, 1);
	ck_assert_uint_eq(req.count, 100);
	ASSERT_OK("monitor q 86400 4294967295");
	ck_assert_uint_eq(req.seconds, 86400);
	ck_assert_uint_eq(req.count, UINT32_MAX);
}
END_TEST

START_TEST(confirm_forms)
{
	ASSERT_OK("confirm q 3");
	ck_assert_int_eq(req.cmd, PROTO_CMD_CONFIRM);
	assert_key(0, "q", 0, -1);
	ck_assert_uint_eq(req.count, 3);
	ck_assert_int_eq(req.noreply, 0);
	ASSERT_OK("confirm q 0 noreply");
	ck_assert_uint_eq(req.count, 0);
	ck_assert_int_eq(req.noreply, 1);
}
END_TEST

static const struct err_case other_errors[] = {
	/* unknown command or empty line: ERROR */
	{ "", PROTO_ERROR, NULL, 0 },
	{ " ", PROTO_ERROR, NULL, 0 },
	{ "\t \t", PROTO_ERROR, NULL, 0 },
	{ "bogus", PROTO_ERROR, NULL, 0 },
	{ "bogus q 0 0 5", PROTO_ERROR, NULL, 0 },
	{ "adds q 0 0 5", PROTO_ERROR, NULL, 0 },
	{ "mg q v", PROTO_ERROR, NULL, 0 }, /* meta lines go to meta_parse */
	{ "ge q", PROTO_ERROR, NULL, 0 },
	{ "gett q", PROTO_ERROR, NULL, 0 },
	{ "getq", PROTO_ERROR, NULL, 0 },
	{ "STATS", PROTO_ERROR, NULL, 0 },
	{ "flush_all_expiredx", PROTO_ERROR, NULL, 0 },
	{ "\r", PROTO_ERROR, NULL, 0 },
	/* delete / flush / flush_expired */
	{ "delete", CE, FMT, 0 },
	{ "delete q 1", CE, FMT, 0 },
	{ "delete q 0 0", CE, FMT, 0 },
	{ "delete q x", CE, FMT, 0 },
	{ "delete q noreply noreply", CE, FMT, 0 },
	{ "delete a b", CE, FMT, 0 },
	{ "delete q/open", CE, "bad item id", 0 },
	{ "delete q/", CE, "bad item id", 0 },
	{ "delete q/0", CE, "bad item id", 0 },
	{ "delete q/1/2", CE, "bad item id", 0 },
	{ "delete q/-1", CE, "bad item id", 0 },
	{ "delete q/9223372036854775808", CE, "bad item id", 0 },
	{ "delete a..b/1", CE, "bad queue name", 0 },
	{ "delete ..", CE, "bad queue name", 0 },
	{ "delete noreply", CE, FMT, 0 },
	{ "flush", CE, FMT, 0 },
	{ "flush a b", CE, FMT, 0 },
	{ "flush q 0", CE, FMT, 0 },
	{ "flush x/y", CE, "bad queue name", 0 },
	{ "flush_expired", CE, FMT, 0 },
	{ "flush_expired a b", CE, FMT, 0 },
	{ "flush_expired a%", CE, "bad queue name", 0 },
	/* flush_all */
	{ "flush_all x", CE, FMT, 0 },
	{ "flush_all -1", CE, FMT, 0 },
	{ "flush_all 2147483648", CE, FMT, 0 },
	{ "flush_all 1 2", CE, FMT, 0 },
	{ "flush_all 1 noreply x", CE, FMT, 0 },
	{ "flush_all noreply 1", CE, FMT, 0 },
	{ "flush_all_expired q", CE, FMT, 0 },
	/* argument-less commands */
	{ "stats items", CE, "stats groups not supported (stats queue <pattern>)", 0 },
	{ "stats settings x", CE, FMT, 0 },
	{ "stats noreply", PROTO_ERROR, NULL, 0 },
	{ "stats a b", CE, FMT, 0 },
	{ "stats queue a b", CE, FMT, 0 },
	{ "stats q/open", CE, "bad queue name", 0 },
	{ "stats ..", CE, "bad queue name", 0 },
	{ "stats queue a/b*", CE, "bad stats pattern", 0 },
	{ "stats queue a%", CE, "bad stats pattern", 0 },
	{ "quit now", CE, FMT, 0 },
	{ "shutdown now", CE, FMT, 0 },
	{ "reload all", CE, FMT, 0 },
	/* verbosity: one or two arguments, else ERROR (memcached's answer) */
	{ "verbosity", PROTO_ERROR, NULL, 0 },
	{ "verbosity foo bar my", PROTO_ERROR, NULL, 0 },
	{ "verbosity 1 noreply x", PROTO_ERROR, NULL, 0 },
	/* monitor */
	{ "monitor", CE, FMT, 0 },
	{ "monitor q", CE, FMT, 0 },
	{ "monitor q 0", CE, "bad monitor seconds", 0 },
	{ "monitor q 86401", CE, "bad monitor seconds", 0 },
	{ "monitor q 99999999999999999999999", CE, FMT, 0 },
	{ "monitor q -1", CE, FMT, 0 },
	{ "monitor q x", CE, FMT, 0 },
	{ "monitor q 1 x", CE, FMT, 0 },
	{ "monitor q 1 4294967296", CE, FMT, 0 },
	{ "monitor q 1 2 3", CE, FMT, 0 },
	{ "monitor q 1 noreply", CE, FMT, 0 },
	{ "monitor q/t=1 1", CE, "bad queue name", 0 },
	/* confirm */
	{ "confirm", CE, FMT, 0 },
	{ "confirm q", CE, FMT, 0 },
	{ "confirm q noreply", CE, FMT, 0 },
	{ "confirm q x", CE, FMT, 0 },
	{ "confirm q -1", CE, FMT, 0 },
	{ "confirm q 4294967296", CE, FMT, 0 },
	{ "confirm q 1 2", CE, FMT, 0 },
	{ "confirm q 1 noreply x", CE, FMT, 0 },
	{ "confirm bad..name 1", CE, "bad queue name", 0 },
};

START_TEST(other_error_rows)
{
	check_err(&other_errors[_i]);
}
END_TEST

/* ------------------------------------------------------- whole-line cases */

START_TEST(line_not_nul_terminated)
{
	/* The parser must honour len, not look for a NUL. */
	static const char buf[] = "get q/open extra-garbage-after-len";

	ck_assert_int_eq(parse_exact(buf, 10), PROTO_OK);
	ck_assert_uint_eq(req.nkeys, 1);
	assert_key(0, "q", PROTO_OPT_OPEN, -1);
	ck_assert_int_eq(parse_exact("set q 0 0 12", 12), PROTO_OK);
	ck_assert_uint_eq(req.bytes, 12);
	ck_assert_int_eq(parse_exact("set q 0 0 12", 11), PROTO_OK);
	ck_assert_uint_eq(req.bytes, 1);
	ck_assert_int_eq(parse_exact("", 0), PROTO_ERROR);
	ck_assert_int_eq(parse_exact("get q/t=5", 8), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "bad timeout");
}
END_TEST

START_TEST(line_embedded_nul)
{
	ck_assert_int_eq(parse_exact("get q\0x", 7), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "bad queue name");
	ck_assert_int_eq(parse_exact("get\0 q", 6), PROTO_ERROR);
	ck_assert_int_eq(parse_exact("set q 0 0 5\0", 12), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "bad command line format");
	ck_assert_uint_eq(swallow, 0);
}
END_TEST

START_TEST(line_too_long)
{
	char *line = malloc(PROTO_LINE_MAX + 1);

	ck_assert_ptr_nonnull(line);
	memset(line, ' ', PROTO_LINE_MAX + 1);
	memcpy(line, "version", 7);
	ck_assert_int_eq(parse_exact(line, PROTO_LINE_MAX), PROTO_OK);
	ck_assert_int_eq(req.cmd, PROTO_CMD_VERSION);
	ck_assert_int_eq(parse_exact(line, PROTO_LINE_MAX + 1), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "line too long");
	ck_assert_uint_eq(swallow, 0);
	free(line);
}
END_TEST

START_TEST(error_clears_previous)
{
	/* A failure after a success must not leave the old keys visible. */
	ASSERT_OK("get a b c");
	ck_assert_uint_eq(req.nkeys, 3);
	ck_assert_int_eq(parse("get a b/bad"), PROTO_CLIENT_ERROR);
	ck_assert_uint_eq(req.nkeys, 0);
	ASSERT_OK("set q 5 6 7 noreply");
	ASSERT_OK("get q");
	ck_assert_uint_eq(req.flags, 0);
	ck_assert_uint_eq(req.bytes, 0);
	ck_assert_int_eq(req.noreply, 0);
	ck_assert_int_eq(parse("bogus"), PROTO_ERROR);
	ck_assert_uint_eq(req.nkeys, 0);
	ck_assert_ptr_null(why);
	ck_assert_uint_eq(swallow, 0);
}
END_TEST

START_TEST(reasons_are_clean)
{
	/* Every reason is short, static and free of CR/LF (it is written
	 * straight after "CLIENT_ERROR "). */
	size_t i;
	const struct err_case *tabs[] = { set_errors, get_errors, other_errors };
	size_t lens[] = { sizeof(set_errors) / sizeof(set_errors[0]),
			  sizeof(get_errors) / sizeof(get_errors[0]),
			  sizeof(other_errors) / sizeof(other_errors[0]) };
	size_t ti;

	for (ti = 0; ti < 3; ti++) {
		for (i = 0; i < lens[ti]; i++) {
			if (parse(tabs[ti][i].line) != PROTO_CLIENT_ERROR)
				continue;
			ck_assert_ptr_nonnull(why);
			ck_assert_uint_gt(strlen(why), 0);
			ck_assert_uint_lt(strlen(why), 64);
			ck_assert_ptr_null(strpbrk(why, "\r\n"));
		}
	}
}
END_TEST

/* ------------------------------------------------------ replies, headers */

START_TEST(reply_strings)
{
	size_t len;
	const char *s;

	s = proto_reply(PROTO_REPLY_STORED, &len);
	ck_assert_str_eq(s, "STORED\r\n");
	ck_assert_uint_eq(len, 8);
	s = proto_reply(PROTO_REPLY_NOT_STORED, &len);
	ck_assert_str_eq(s, "NOT_STORED\r\n");
	ck_assert_uint_eq(len, 12);
	s = proto_reply(PROTO_REPLY_END, &len);
	ck_assert_str_eq(s, "END\r\n");
	ck_assert_uint_eq(len, 5);
	s = proto_reply(PROTO_REPLY_DELETED, &len);
	ck_assert_str_eq(s, "DELETED\r\n");
	ck_assert_uint_eq(len, 9);
	s = proto_reply(PROTO_REPLY_OK, &len);
	ck_assert_str_eq(s, "OK\r\n");
	ck_assert_uint_eq(len, 4);
	s = proto_reply(PROTO_REPLY_ERROR, &len);
	ck_assert_str_eq(s, "ERROR\r\n");
	ck_assert_uint_eq(len, 7);
	for (int r = 0; r < PROTO_REPLY__COUNT; r++) {
		s = proto_reply((enum proto_reply)r, &len);
		ck_assert_uint_eq(len, strlen(s));
		ck_assert(len >= 2 && s[len - 2] == '\r' && s[len - 1] == '\n');
	}
	/* out of range: a caller bug, but still a well-formed reply */
	s = proto_reply(PROTO_REPLY__COUNT, &len);
	ck_assert_str_eq(s, "ERROR\r\n");
}
END_TEST

START_TEST(value_header)
{
	char buf[300];
	size_t n;

	n = proto_value_header(buf, "jobs", 4, 0, 5, 0, 0);
	ck_assert_uint_eq(n, strlen("VALUE jobs 0 5\r\n"));
	ck_assert(memcmp(buf, "VALUE jobs 0 5\r\n", n) == 0);
	n = proto_value_header(buf, "q+fan", 5, 16, 1234567, 0, 99);
	ck_assert(memcmp(buf, "VALUE q+fan 16 1234567\r\n", n) == 0);
	ck_assert_uint_eq(n, strlen("VALUE q+fan 16 1234567\r\n"));
	n = proto_value_header(buf, "q", 1, UINT32_MAX, UINT32_MAX, 0, 0);
	ck_assert(memcmp(buf, "VALUE q 4294967295 4294967295\r\n", n) == 0);
	ck_assert_uint_eq(n, strlen("VALUE q 4294967295 4294967295\r\n"));
	/* key_len is honoured: no NUL needed */
	n = proto_value_header(buf, "abcdef", 3, 10, 100, 0, 0);
	ck_assert(memcmp(buf, "VALUE abc 10 100\r\n", n) == 0);
	ck_assert_uint_eq(n, strlen("VALUE abc 10 100\r\n"));
	/* the key as requested, options included */
	n = proto_value_header(buf, "q/open/t=500", 12, 3, 5, 0, 0);
	ck_assert(memcmp(buf, "VALUE q/open/t=500 3 5\r\n", n) == 0);
	ck_assert_uint_eq(n, strlen("VALUE q/open/t=500 3 5\r\n"));
}
END_TEST

START_TEST(value_header_cas)
{
	char buf[300];
	size_t n;

	n = proto_value_header(buf, "q", 1, 7, 2, 1, 42);
	ck_assert_uint_eq(n, strlen("VALUE q 7 2 42\r\n"));
	ck_assert(memcmp(buf, "VALUE q 7 2 42\r\n", n) == 0);
	n = proto_value_header(buf, "q", 1, 0, 0, 1, 0);
	ck_assert(memcmp(buf, "VALUE q 0 0 0\r\n", n) == 0);
	ck_assert_uint_eq(n, strlen("VALUE q 0 0 0\r\n"));
}
END_TEST

START_TEST(value_header_longest)
{
	/* the longest key a line can carry, and every number at its widest:
	 * exactly the documented room, checked by AddressSanitizer */
	size_t klen = PROTO_LINE_MAX - 4, n;
	char *key = malloc(klen);
	char *buf = malloc(klen + PROTO_VALUE_HEADER_EXTRA);
	char *want = malloc(klen + PROTO_VALUE_HEADER_EXTRA + 1);

	ck_assert_ptr_nonnull(key);
	ck_assert_ptr_nonnull(buf);
	ck_assert_ptr_nonnull(want);
	memset(key, 'z', klen);
	n = proto_value_header(buf, key, klen, UINT32_MAX, UINT32_MAX, 1, UINT64_MAX);
	snprintf(want, klen + PROTO_VALUE_HEADER_EXTRA + 1,
		 "VALUE %.*s 4294967295 4294967295 18446744073709551615\r\n", (int)klen, key);
	ck_assert_uint_eq(n, strlen(want));
	ck_assert_uint_le(n, klen + PROTO_VALUE_HEADER_EXTRA);
	ck_assert(memcmp(buf, want, n) == 0);
	free(key);
	free(buf);
	free(want);
}
END_TEST

START_TEST(cmd_names)
{
	ck_assert_str_eq(proto_cmd_name(PROTO_CMD_GET), "get");
	ck_assert_str_eq(proto_cmd_name(PROTO_CMD_GETS), "gets");
	ck_assert_str_eq(proto_cmd_name(PROTO_CMD_SET), "set");
	ck_assert_str_eq(proto_cmd_name(PROTO_CMD_FLUSH_ALL_EXPIRED), "flush_all_expired");
	ck_assert_str_eq(proto_cmd_name(PROTO_CMD_CONFIRM), "confirm");
	ck_assert_str_eq(proto_cmd_name(PROTO_CMD__COUNT), "unknown");
}
END_TEST

START_TEST(cmd_table_roundtrip)
{
	/* Each command word parses back to its own enum (with arguments that
	 * suit it), so the table and the dispatcher cannot drift apart. */
	static const char *args[PROTO_CMD__COUNT] = {
		[PROTO_CMD_GET] = " q",	      [PROTO_CMD_GETS] = " q",
		[PROTO_CMD_SET] = " q 0 0 1", [PROTO_CMD_DELETE] = " q",
		[PROTO_CMD_FLUSH] = " q",     [PROTO_CMD_FLUSH_EXPIRED] = " q",
		[PROTO_CMD_VERBOSITY] = " 1", [PROTO_CMD_MONITOR] = " q 1",
		[PROTO_CMD_CONFIRM] = " q 1",
		[PROTO_CMD_ADD] = " q 0 0 1", [PROTO_CMD_REPLACE] = " q 0 0 1",
		[PROTO_CMD_APPEND] = " q 0 0 1", [PROTO_CMD_PREPEND] = " q 0 0 1",
		[PROTO_CMD_CAS] = " q 0 0 1 5", [PROTO_CMD_INCR] = " q 1",
		[PROTO_CMD_DECR] = " q 1", [PROTO_CMD_TOUCH] = " q 1",
		[PROTO_CMD_GAT] = " 0 q", [PROTO_CMD_GATS] = " 0 q",
	};
	char line[64];
	int c;

	for (c = 0; c < PROTO_CMD__COUNT; c++) {
		snprintf(line, sizeof(line), "%s%s", proto_cmd_name((enum proto_cmd)c),
			 args[c] ? args[c] : "");
		ck_assert_msg(parse(line) == PROTO_OK, "'%s' did not parse", line);
		ck_assert_int_eq(req.cmd, c);
	}
}
END_TEST

/* ---------------------------------------------------------- splitting */

/* A small deterministic generator (xorshift), so a failure repeats. */
static uint32_t split_rand(uint32_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 17;
	*x ^= *x << 5;
	return *x;
}

/* Where the tokens of line are, split byte by byte (the rule of
 * proto.h: runs of spaces and tabs separate, leading and trailing ones
 * are ignored); returns their count. */
static size_t split_reference(const char *line, size_t len, size_t *off, size_t *tlen,
			      size_t max)
{
	size_t i = 0, n = 0;

	while (i < len) {
		size_t start;

		while (i < len && (line[i] == ' ' || line[i] == '\t'))
			i++;
		if (i == len)
			break;
		start = i;
		while (i < len && line[i] != ' ' && line[i] != '\t')
			i++;
		if (n < max) {
			off[n] = start;
			tlen[n] = i - start;
		}
		n++;
	}
	return n;
}

/* Appends a run of 1..3 blanks (spaces and tabs mixed) at p. */
static size_t put_blanks(char *p, uint32_t *x)
{
	size_t k, n = 1 + split_rand(x) % 3;

	for (k = 0; k < n; k++)
		p[k] = split_rand(x) % 2 ? ' ' : '\t';
	return n;
}

START_TEST(split_keys_match_reference)
{
	/* get lines of every length from a few bytes to past the line
	 * lengths the splitter handles word-at-a-time, with names of
	 * 1..20 bytes and blank runs anywhere (leading, trailing, between):
	 * each key is where the byte-by-byte split puts it. */
	static const char name_bytes[] = "abcxyzABZ0189_-.{}";
	char line[512];
	size_t off[PROTO_MAX_KEYS + 2], tlen[PROTO_MAX_KEYS + 2];
	uint32_t x = 2463534242u;
	int round;

	for (round = 0; round < 20000; round++) {
		size_t len = 0, n, i, nk = 1 + split_rand(&x) % 12;

		if (split_rand(&x) % 2)
			len += put_blanks(line + len, &x);
		memcpy(line + len, "get", 3);
		len += 3;
		for (i = 0; i < nk; i++) {
			size_t k, w = 1 + split_rand(&x) % 20;

			len += put_blanks(line + len, &x);
			for (k = 0; k < w; k++)
				line[len + k] = name_bytes[split_rand(&x) % (sizeof(name_bytes) - 1)];
			line[len] = 'q'; /* no name starts with '.' */
			for (k = 1; k < w; k++)
				if (line[len + k] == '.' && line[len + k - 1] == '.')
					line[len + k] = 'd'; /* nor holds ".." */
			len += w;
		}
		if (split_rand(&x) % 2)
			len += put_blanks(line + len, &x);
		n = split_reference(line, len, off, tlen, PROTO_MAX_KEYS + 2);
		ck_assert_uint_eq(n, nk + 1);
		ck_assert_msg(parse_exact(line, len) == PROTO_OK, "round %d: %.*s", round,
			      (int)len, line);
		ck_assert_uint_eq(req.nkeys, nk);
		for (i = 0; i < nk; i++) {
			const char *base = req.keys[i].raw - off[i + 1];

			ck_assert_uint_eq(req.keys[i].raw_len, tlen[i + 1]);
			ck_assert(memcmp(base + off[i + 1], line + off[i + 1], tlen[i + 1]) == 0);
			ck_assert_uint_eq(req.keys[i].len, tlen[i + 1]);
		}
	}
}
END_TEST

START_TEST(split_any_byte)
{
	/* status <word> keeps its word unchecked: words of any bytes but
	 * blanks, including those next to a blank in value ('!' is ' ' + 1,
	 * backspace is '\t' - 1), NUL and bytes above 0x7f, end exactly at
	 * the next blank, at every length and position. */
	static const unsigned char word_bytes[] = { '!', '\b', '\n', '\r', 0, 0x7f, 0x80, 0xa0,
						    0xff, 0x21, 0x1f, 'a', 'Z', 0x0b };
	char line[300];
	uint32_t x = 88172645u;
	int round;

	for (round = 0; round < 20000; round++) {
		size_t len = 0, start, w = 1 + split_rand(&x) % 150, k;

		if (split_rand(&x) % 2)
			len += put_blanks(line + len, &x);
		memcpy(line + len, "status", 6);
		len += 6;
		len += put_blanks(line + len, &x);
		start = len;
		for (k = 0; k < w; k++)
			line[len + k] = (char)word_bytes[split_rand(&x) % sizeof(word_bytes)];
		len += w;
		if (split_rand(&x) % 2)
			len += put_blanks(line + len, &x);
		ck_assert_int_eq(parse_exact(line, len), PROTO_OK);
		ck_assert_int_eq(req.cmd, PROTO_CMD_STATUS);
		ck_assert_uint_eq(req.word_len, w);
		ck_assert(memcmp(req.word, line + start, w) == 0);
	}
}
END_TEST

START_TEST(split_line_lengths)
{
	/* "set <name> 16 0 2 " (python-memcache's trailing space) and the
	 * same with tabs, for names that put the line's end on each side of
	 * every 8-byte boundary and of 64 bytes, up to the longest name. */
	char line[PROTO_NAME_MAX + 64], name[PROTO_NAME_MAX + 1];
	size_t nl;

	for (nl = 1; nl <= PROTO_NAME_MAX; nl++) {
		int len;

		memset(name, 'n', nl);
		name[nl] = '\0';
		len = snprintf(line, sizeof(line), "set %s 16 0 2 ", name);
		ck_assert_int_eq(parse_exact(line, (size_t)len), PROTO_OK);
		assert_key(0, name, 0, -1);
		ck_assert_uint_eq(req.flags, 16);
		ck_assert_uint_eq(req.bytes, 2);
		len = snprintf(line, sizeof(line), "set\t%s\t16 \t0\t2\t", name);
		ck_assert_int_eq(parse_exact(line, (size_t)len), PROTO_OK);
		assert_key(0, name, 0, -1);
		ck_assert_uint_eq(req.bytes, 2);
		len = snprintf(line, sizeof(line), "get %s", name);
		ck_assert_int_eq(parse_exact(line, (size_t)len), PROTO_OK);
		assert_key(0, name, 0, -1);
		len = snprintf(line, sizeof(line), "get %s/t=5  ", name);
		ck_assert_int_eq(parse_exact(line, (size_t)len), PROTO_OK);
		assert_key(0, name, 0, 5);
	}
	/* one byte more than a name may have, at the end of the line */
	memset(name, 'n', PROTO_NAME_MAX);
	name[PROTO_NAME_MAX] = '\0';
	snprintf(line, sizeof(line), "get x%s", name);
	ck_assert_int_eq(parse(line), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "queue name too long");
}
END_TEST

START_TEST(split_command_words)
{
	/* Every command word, alone or with blanks around it, is itself;
	 * a word one byte short or long, or in capitals, is none. */
	char line[64];
	int c;

	for (c = 0; c < PROTO_CMD__COUNT; c++) {
		const char *w = proto_cmd_name((enum proto_cmd)c);
		size_t wl = strlen(w), k;

		snprintf(line, sizeof(line), "\t %s\t", w);
		parse(line); /* the status may be an error: no arguments */
		ck_assert_int_eq(req.cmd, c);
		snprintf(line, sizeof(line), "%.*s", (int)(wl - 1), w);
		if (strcmp(line, "get") != 0 && strcmp(line, "gat") != 0) /* gets, gats */
			ck_assert_msg(parse(line) == PROTO_ERROR, "'%s' is a command", line);
		snprintf(line, sizeof(line), "%sx", w);
		ck_assert_msg(parse(line) == PROTO_ERROR, "'%s' is a command", line);
		snprintf(line, sizeof(line), "%s", w);
		for (k = 0; k < wl; k++)
			line[k] = (char)(line[k] >= 'a' && line[k] <= 'z' ? line[k] - 32 : line[k]);
		ck_assert_msg(parse(line) == PROTO_ERROR, "'%s' is a command", line);
	}
	/* words that begin other words */
	ck_assert_int_eq(parse("gets q"), PROTO_OK);
	ck_assert_int_eq(req.cmd, PROTO_CMD_GETS);
	ck_assert_int_eq(parse("flush_all"), PROTO_OK);
	ck_assert_int_eq(req.cmd, PROTO_CMD_FLUSH_ALL);
	ck_assert_int_eq(parse("flush_all_expired"), PROTO_OK);
	ck_assert_int_eq(req.cmd, PROTO_CMD_FLUSH_ALL_EXPIRED);
	ck_assert_int_eq(parse("gats 0 q"), PROTO_OK);
	ck_assert_int_eq(req.cmd, PROTO_CMD_GATS);
	ck_assert_int_eq(parse("g"), PROTO_ERROR);
	ck_assert_int_eq(parse("mg q v"), PROTO_ERROR); /* meta: not a text word */
	ck_assert_int_eq(parse("get\x01 q"), PROTO_ERROR);
}
END_TEST

START_TEST(names_in_a_row)
{
	/* each request's name is checked whatever came before it on the same
	 * req: a valid name, then one like it that is not */
	memset(&req, 0, sizeof(req));
	ck_assert_int_eq(parse("get /open"), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "bad queue name");
	ASSERT_OK("get jobs");
	ASSERT_OK("set jobs 0 0 1");
	assert_key(0, "jobs", 0, -1);
	ASSERT_OK("get jobs/open");
	assert_key(0, "jobs", PROTO_OPT_OPEN, -1);
	ck_assert_int_eq(parse("get /open"), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "bad queue name");
	ck_assert_int_eq(parse("get jobs/"), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "bad get option");
	ck_assert_int_eq(parse("get .jobs"), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "bad queue name");
	ck_assert_int_eq(parse("set jobs. 0 0 1"), PROTO_OK);
	ck_assert_int_eq(parse("set job..s 0 0 1"), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "bad queue name");
	ck_assert_int_eq(parse("get jobs.."), PROTO_CLIENT_ERROR);
	ck_assert_int_eq(parse("delete jobs."), PROTO_OK);
	ck_assert_int_eq(parse("flush jobs.."), PROTO_CLIENT_ERROR);
	/* the public key parsers, between lines */
	ck_assert_ptr_null(proto_key_parse("other", 5, &req.keys[0]));
	ck_assert_ptr_null(proto_set_key_parse("other", 5, &req.keys[0]));
	/* a name of the last one's length differing in any one byte is
	 * checked: with a byte outside the set it is refused */
	{
		static const size_t lens[] = { 1, 2, 7, 8, 9, 11, 15, 16, 17, 24, 63, PROTO_NAME_MAX };
		char line[PROTO_NAME_MAX + 16], name[PROTO_NAME_MAX + 1];

		for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
			size_t nl = lens[li];

			for (size_t at = 0; at < nl; at++) {
				memset(name, 'n', nl);
				name[nl] = '\0';
				snprintf(line, sizeof(line), "get %s", name);
				ASSERT_OK(line);
				name[at] = '*';
				snprintf(line, sizeof(line), "get %s", name);
				ck_assert_msg(parse(line) == PROTO_CLIENT_ERROR, "len %zu at %zu", nl, at);
				ck_assert_str_eq(why, "bad queue name");
			}
		}
	}
}
END_TEST

START_TEST(put_u64_digits)
{
	/* every power of ten, one below it, and the ends of the range */
	char buf[32], want[32];
	uint64_t v = 1;
	int i;

	for (i = 0; i < 20; i++, v *= 10) {
		uint64_t cases[3] = { v, v - 1, v + 1 };

		for (int k = 0; k < 3; k++) {
			size_t n;

			memset(buf, 'x', sizeof(buf));
			n = proto_put_u64(buf, cases[k]);
			snprintf(want, sizeof(want), "%llu", (unsigned long long)cases[k]);
			ck_assert_uint_eq(n, strlen(want));
			ck_assert(memcmp(buf, want, n) == 0);
			ck_assert_int_eq(buf[n], 'x'); /* nothing past the digits */
		}
	}
	ck_assert_uint_eq(proto_put_u64(buf, UINT64_MAX), 20);
	ck_assert(memcmp(buf, "18446744073709551615", 20) == 0);
	ck_assert_uint_eq(proto_put_u64(buf, 0), 1);
	ck_assert_int_eq(buf[0], '0');
}
END_TEST

Suite *proto_suite(void)
{
	Suite *s = suite_create("proto");
	TCase *tc;

	tc = tcase_create("set");
	tcase_add_test(tc, set_basic);
	tcase_add_test(tc, set_noreply);
	tcase_add_test(tc, set_limits);
	tcase_add_test(tc, set_blanks);
	tcase_add_test(tc, set_fanout_name);
	tcase_add_test(tc, set_name_limits);
	tcase_add_loop_test(tc, set_error_rows, 0, (int)(sizeof(set_errors) / sizeof(set_errors[0])));
	suite_add_tcase(s, tc);

	tc = tcase_create("get");
	tcase_add_test(tc, get_plain);
	tcase_add_test(tc, get_each_option);
	tcase_add_test(tc, get_combinations);
	tcase_add_test(tc, get_by_id);
	tcase_add_test(tc, get_several_keys);
	tcase_add_test(tc, get_raw_keys);
	tcase_add_test(tc, key_parse_direct);
	tcase_add_test(tc, set_key_delay);
	tcase_add_test(tc, get_max_keys);
	tcase_add_test(tc, get_name_limits);
	tcase_add_loop_test(tc, get_error_rows, 0, (int)(sizeof(get_errors) / sizeof(get_errors[0])));
	suite_add_tcase(s, tc);

	tc = tcase_create("commands");
	tcase_add_test(tc, delete_flush);
	tcase_add_test(tc, flush_all_forms);
	tcase_add_test(tc, simple_commands);
	tcase_add_test(tc, verbosity_forms);
	tcase_add_test(tc, monitor_forms);
	tcase_add_test(tc, confirm_forms);
	tcase_add_test(tc, add_parses_as_set);
	tcase_add_loop_test(tc, refused_store_rows, 0,
			    (int)(sizeof(refused_store) / sizeof(refused_store[0])));
	tcase_add_test(tc, refused_lines);
	tcase_add_test(tc, refusal_table);
	tcase_add_loop_test(tc, other_error_rows, 0,
			    (int)(sizeof(other_errors) / sizeof(other_errors[0])));
	suite_add_tcase(s, tc);

	tc = tcase_create("lines");
	tcase_add_test(tc, line_not_nul_terminated);
	tcase_add_test(tc, line_embedded_nul);
	tcase_add_test(tc, line_too_long);
	tcase_add_test(tc, error_clears_previous);
	tcase_add_test(tc, reasons_are_clean);
	suite_add_tcase(s, tc);

	tc = tcase_create("replies");
	tcase_add_test(tc, reply_strings);
	tcase_add_test(tc, value_header);
	tcase_add_test(tc, value_header_cas);
	tcase_add_test(tc, value_header_longest);
	tcase_add_test(tc, cmd_names);
	tcase_add_test(tc, status_forms);
	tcase_add_test(tc, cmd_table_roundtrip);
	tcase_add_test(tc, put_u64_digits);
	suite_add_tcase(s, tc);

	tc = tcase_create("split");
	tcase_add_test(tc, split_keys_match_reference);
	tcase_add_test(tc, split_any_byte);
	tcase_add_test(tc, split_line_lengths);
	tcase_add_test(tc, split_command_words);
	tcase_add_test(tc, names_in_a_row);
	suite_add_tcase(s, tc);

	return s;
}
