/* test_meta.c: unit tests for protocol/meta.c (meta request parsing and
 * reply lines).  Table-driven where the cases are "line -> status,
 * reason, swallow"; the flag table is checked row by row against every
 * command, so table and parser cannot drift apart. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../protocol/meta.h"

static struct meta_req req;
static const char *why;
static uint64_t swallow;

/* Parses a copy of line in an exact-size heap buffer (AddressSanitizer
 * sees any read past it); the copy lives until the next call. */
static enum proto_status parse(const char *line)
{
	static char *copy;
	size_t len = strlen(line);

	free(copy);
	copy = malloc(len ? len : 1);
	ck_assert_ptr_nonnull(copy);
	memcpy(copy, line, len);
	why = "unset";
	swallow = 12345;
	return meta_parse(copy, len, &req, &why, &swallow);
}

#define ASSERT_OK(line)                                                   \
	do {                                                              \
		ck_assert_msg(parse(line) == PROTO_OK, "'%s': %s", line,  \
			      why ? why : "(null)");                      \
		ck_assert_ptr_null(why);                                  \
		ck_assert_uint_eq(swallow, 0);                            \
	} while (0)

static void assert_key(const char *raw, const char *name, uint8_t opts, int32_t t)
{
	ck_assert_uint_eq(req.key.raw_len, strlen(raw));
	ck_assert(memcmp(req.key.raw, raw, strlen(raw)) == 0);
	ck_assert_uint_eq(req.key.len, strlen(name));
	ck_assert(memcmp(req.key.name, name, strlen(name)) == 0);
	ck_assert_uint_eq(req.key.opts, opts);
	ck_assert_int_eq(req.key.timeout_ms, t);
}

START_TEST(match)
{
	ck_assert(meta_match("mg q v", 6));
	ck_assert(meta_match("  mn", 4));
	ck_assert(meta_match("ms\tq 1", 6));
	ck_assert(meta_match("md q", 4));
	ck_assert(meta_match("me q", 4));
	ck_assert(meta_match("ma q", 4));
	ck_assert(!meta_match("mx q", 4));
	ck_assert(!meta_match("mgg q", 5));
	ck_assert(!meta_match("monitor q 1", 11));
	ck_assert(!meta_match("m", 1));
	ck_assert(!meta_match("", 0));
	ck_assert(!meta_match("get q", 5));
	/* the word ends at a blank or at the line's end, never further */
	ck_assert(meta_match("mn", 2));
	ck_assert(meta_match("mn\t", 3));
	ck_assert(meta_match(" \tmg\t q", 7));
	ck_assert(!meta_match("mgmg", 2 + 2));
	ck_assert(!meta_match("mg\x01q", 4));
	ck_assert(!meta_match(" m g", 4));
	ck_assert(!meta_match("   ", 3));
	ck_assert(!meta_match(" m", 2));
	ck_assert(meta_match("mnX", 2)); /* only len bytes count */
}
END_TEST

START_TEST(mg_basic)
{
	ASSERT_OK("mg q v");
	ck_assert_int_eq(req.cmd, META_MG);
	assert_key("q", "q", 0, -1);
	ck_assert_uint_eq(req.seen, META_F_VALUE);
	ck_assert_uint_eq(req.nret, 0);
	ck_assert_ptr_eq(req.key_tok, req.key.raw);
	ASSERT_OK("mg q");
	ck_assert_uint_eq(req.seen, 0);
	ASSERT_OK("  mg \t q   v  ");
	assert_key("q", "q", 0, -1);
}
END_TEST

START_TEST(mg_options_in_key)
{
	ASSERT_OK("mg jobs/open/t=500 v k");
	assert_key("jobs/open/t=500", "jobs", PROTO_OPT_OPEN, 500);
	ck_assert_uint_eq(req.nret, 1);
	ck_assert_int_eq(req.ret[0], 'k');
	ASSERT_OK("mg jobs/close/open v");
	assert_key("jobs/close/open", "jobs", PROTO_OPT_OPEN | PROTO_OPT_CLOSE, -1);
	ASSERT_OK("mg jobs/peek");
	assert_key("jobs/peek", "jobs", PROTO_OPT_PEEK, -1);
}
END_TEST

START_TEST(mg_return_order)
{
	ASSERT_OK("mg q O1 k c f s t v q u");
	ck_assert_uint_eq(req.nret, 6);
	ck_assert(memcmp(req.ret, "Okcfst", 6) == 0);
	ck_assert_uint_eq(req.opaque_len, 1);
	ck_assert(memcmp(req.opaque, "1", 1) == 0);
	ck_assert(req.seen & META_F_QUIET);
	ck_assert(req.seen & META_F_NOBUMP);
	ASSERT_OK("mg q t s f c k O22");
	ck_assert(memcmp(req.ret, "tsfckO", 6) == 0);
}
END_TEST

START_TEST(opaque_limits)
{
	char line[128];

	snprintf(line, sizeof(line), "mg q O%s", "0123456789abcdef0123456789abcdef");
	ASSERT_OK(line);
	ck_assert_uint_eq(req.opaque_len, META_OPAQUE_MAX);
	snprintf(line, sizeof(line), "mg q O%sx", "0123456789abcdef0123456789abcdef");
	ck_assert_int_eq(parse(line), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "opaque token too long");
}
END_TEST

START_TEST(ms_basic)
{
	ASSERT_OK("ms q 5");
	ck_assert_int_eq(req.cmd, META_MS);
	assert_key("q", "q", 0, -1);
	ck_assert_uint_eq(req.bytes, 5);
	ck_assert_uint_eq(req.client_flags, 0);
	ck_assert_int_eq(req.exptime, 0);
	ck_assert_uint_eq(req.add, 0);
	ASSERT_OK("ms q 0 F4294967295 T2592001 c k O9 q MS");
	ck_assert_uint_eq(req.bytes, 0);
	ck_assert_uint_eq(req.client_flags, UINT32_MAX);
	ck_assert_int_eq(req.exptime, 2592001);
	ck_assert(memcmp(req.ret, "ckO", 3) == 0);
	ASSERT_OK("ms q 7 ME");
	ck_assert_uint_eq(req.add, 1);
	ASSERT_OK("ms q 4611686018427387904"); /* 2^62: the largest */
	ck_assert_uint_eq(req.bytes, UINT64_C(1) << 62);
	/* D: delayed delivery, ms by default, s or ms suffix */
	ck_assert_uint_eq(req.delay_ms, 0);
	ASSERT_OK("ms q 1 D2500");
	ck_assert_uint_eq(req.delay_ms, 2500);
	ASSERT_OK("ms q 1 D3s");
	ck_assert_uint_eq(req.delay_ms, 3000);
	ASSERT_OK("ms q 1 D40ms");
	ck_assert_uint_eq(req.delay_ms, 40);
	ASSERT_OK("ms q 1 D2592000000");
	ck_assert_int_eq(parse("ms q 1 D2592000001"), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "bad delay");
	ck_assert_int_eq(parse("ms q 1 Dx"), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "bad delay");
	ck_assert_int_eq(parse("ms q 1 D"), PROTO_CLIENT_ERROR);
	ck_assert_int_eq(parse("mg q D5"), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "invalid flag");
	/* d: the delivery count, an mg return flag */
	ASSERT_OK("mg q d v");
	ck_assert(memcmp(req.ret, "d", 1) == 0);
	ck_assert_int_eq(parse("ms q 1 d"), PROTO_CLIENT_ERROR);
}
END_TEST

START_TEST(md_mn_me_ma)
{
	ASSERT_OK("md q");
	ck_assert_int_eq(req.cmd, META_MD);
	assert_key("q", "q", 0, -1);
	ASSERT_OK("md q q k O1");
	ck_assert_int_eq(parse("md cQ== b k"), PROTO_OK);
	assert_key("q", "q", 0, -1);
	ASSERT_OK("mn");
	ck_assert_int_eq(req.cmd, META_MN);
	ASSERT_OK("mn anything at all"); /* as memcached: ignored */
	ASSERT_OK("me q");
	ck_assert_int_eq(req.cmd, META_ME);
	ck_assert_ptr_nonnull(meta_refusal(META_ME));
	ASSERT_OK("ma q D5 MI");
	ck_assert_int_eq(req.cmd, META_MA);
	ck_assert_ptr_nonnull(meta_refusal(META_MA));
	ck_assert_ptr_null(meta_refusal(META_MG));
	ck_assert_ptr_null(meta_refusal(META_MS));
	ck_assert_ptr_null(meta_refusal(META_MD));
	ck_assert_ptr_null(meta_refusal(META_MN));
	ck_assert_ptr_null(meta_refusal(META__COUNT));
	ck_assert_str_eq(meta_cmd_name(META_MG), "mg");
	ck_assert_str_eq(meta_cmd_name(META_MA), "ma");
	ck_assert_str_eq(meta_cmd_name(META__COUNT), "unknown");
}
END_TEST

START_TEST(base64_keys)
{
	ASSERT_OK("mg cQ== b v k"); /* "q" */
	assert_key("q", "q", 0, -1);
	ck_assert_uint_eq(req.key_tok_len, 4);
	ck_assert(memcmp(req.key_tok, "cQ==", 4) == 0);
	ASSERT_OK("mg cS9vcGVu b"); /* "q/open" */
	assert_key("q/open", "q", PROTO_OPT_OPEN, -1);
	ASSERT_OK("ms am9icw== 3 b"); /* "jobs" */
	assert_key("jobs", "jobs", 0, -1);
	ASSERT_OK("mg YWI= b"); /* "ab": one '=' */
	assert_key("ab", "ab", 0, -1);
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
static const struct err_case errors[] = {
	{ "mx q", PROTO_ERROR, NULL, 0 },
	{ "mgg q", PROTO_ERROR, NULL, 0 },
	{ "MG q", PROTO_ERROR, NULL, 0 },
	{ "mg", CE, FMT, 0 },
	{ "mg   ", CE, FMT, 0 },
	{ "md", CE, FMT, 0 },
	{ "ms", CE, FMT, 0 },
	{ "ms q", CE, FMT, 0 },
	{ "ms q x", CE, FMT, 0 },
	{ "ms q 5x", CE, FMT, 0 },
	{ "ms q -1", CE, "bad data chunk", 0 },
	{ "ms q 4611686018427387905", CE, FMT, 0 },
	{ "ms q 18446744073709551616", CE, FMT, 0 },
	/* datalen parsed: everything else swallows it and its CRLF */
	{ "ms q 5 F-1", CE, FMT, 7 },
	{ "ms q 5 Fx", CE, FMT, 7 },
	{ "ms q 5 F4294967296", CE, FMT, 7 },
	{ "ms q 5 T-1", CE, FMT, 7 },
	{ "ms q 5 Tx", CE, FMT, 7 },
	{ "ms q 5 MZ", CE, "invalid mode for ms M token", 7 },
	{ "ms q 5 Ms", CE, "invalid mode for ms M token", 7 },
	{ "ms q 5 MSS", CE, "invalid mode for ms M token", 7 },
	{ "ms q 5 MA", CE, "append not supported: queued messages cannot be changed", 7 },
	{ "ms q 5 MP", CE, "prepend not supported: queued messages cannot be changed", 7 },
	{ "ms q 5 MR", CE, "replace not supported: a queue is appended to (set enqueues)", 7 },
	{ "ms q 5 v", CE, "invalid flag", 7 },
	{ "ms q 5 F", CE, "invalid flag", 7 },
	{ "ms q 5 c c", CE, "duplicate flag", 7 },
	{ "ms q/open 5", CE, "bad queue name", 7 },
	{ "ms a*b 5", CE, "bad queue name", 7 },
	{ "ms .. 0", CE, "bad queue name", 2 },
	{ "ms q 0 C5", CE, "flag C not supported: queued messages cannot be changed", 2 },
	{ "ms q 0 I", CE, "flag I not supported: queued messages cannot be changed", 2 },
	{ "ms q 0 E5", CE, "flag E not supported: a message's cas is its id", 2 },
	/* mg */
	{ "mg q Z", CE, "invalid flag", 0 },
	{ "mg q kq", CE, "invalid flag", 0 },
	{ "mg q O", CE, "invalid flag", 0 },
	{ "mg q F5", CE, "invalid flag", 0 },
	{ "mg q M", CE, "invalid flag", 0 },
	{ "mg q v v", CE, "duplicate flag", 0 },
	{ "mg q O1 O2", CE, "duplicate flag", 0 },
	{ "mg q N30", CE, "flag N not supported: a queue creates nothing on a miss", 0 },
	{ "mg q T30", CE, "flag T not supported: a queued message keeps its exptime", 0 },
	{ "mg q R30", CE, "flag R not supported: queued messages are not recached", 0 },
	{ "mg q h", CE, "flag h not supported: every queued message is unread", 0 },
	{ "mg q l", CE, "flag l not supported: every queued message is unread", 0 },
	{ "mg q E1", CE, "flag E not supported: a message's cas is its id", 0 },
	{ "mg a..b v", CE, "bad queue name", 0 },
	{ "mg q/bogus v", CE, "bad get option", 0 },
	{ "mg q/peek/open v", CE, "bad get option combination", 0 },
	{ "mg q/t=x v", CE, "bad timeout", 0 },
	{ "mg cQ b=", CE, "invalid flag", 0 },
	{ "mg cQ b", CE, FMT, 0 },        /* not a multiple of 4 */
	{ "mg c!== b", CE, FMT, 0 },      /* outside the alphabet */
	{ "mg ==== b", CE, FMT, 0 },      /* padding only */
	{ "mg cQ=a b", CE, FMT, 0 },      /* a digit after '=' */
	{ "mg Lg== b", CE, "bad queue name", 0 }, /* "." */
	/* md */
	{ "md q C5", CE, "flag C not supported: queued messages cannot be changed", 0 },
	{ "md q I", CE, "flag I not supported: queued messages cannot be changed", 0 },
	{ "md q x", CE, "flag x not supported: queued messages cannot be changed", 0 },
	{ "md q T5", CE, "flag T not supported: a queued message keeps its exptime", 0 },
	{ "md q v", CE, "invalid flag", 0 },
	{ "md q/open", CE, "bad queue name", 0 },
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
}

START_TEST(error_rows)
{
	check_err(&errors[_i]);
}
END_TEST

START_TEST(key_limits)
{
	char line[600];
	char key[PROTO_KEY_MAX + 2];

	memset(key, 'k', sizeof(key));
	key[PROTO_KEY_MAX] = '\0';
	snprintf(line, sizeof(line), "mg %s v", key);
	ASSERT_OK(line);
	ck_assert_uint_eq(req.key.len, PROTO_KEY_MAX);
	key[PROTO_KEY_MAX] = 'k';
	key[PROTO_KEY_MAX + 1] = '\0';
	snprintf(line, sizeof(line), "mg %s v", key);
	ck_assert_int_eq(parse(line), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, FMT);
	snprintf(line, sizeof(line), "ms %s 3", key);
	ck_assert_int_eq(parse(line), PROTO_CLIENT_ERROR);
	ck_assert_uint_eq(swallow, 5);
}
END_TEST

START_TEST(every_flag_at_once)
{
	/* each flag mg takes, once: the most a line can return */
	ASSERT_OK("mg q v k c f s t O1 q u P Lx");
	ck_assert_int_eq(parse("mg q v k c f s t O1 q u P Lx L"), PROTO_CLIENT_ERROR);
	ck_assert_str_eq(why, "duplicate flag");
	ASSERT_OK("mg cQ== b v k c f s t O1 q u P L");
	ck_assert_uint_eq(req.nret, 6);
}
END_TEST

/*
 * Every row of META_FLAGS against every keyed command: taken, refused
 * with its own reason, or memcached's "invalid flag".
 */
START_TEST(flag_table_rows)
{
	static const struct {
		char letter;
		int token;
		uint32_t in, refused;
		const char *why;
	} rows[] = {
#define ROW(ch, e, tok, inm, ref, w) { ch, tok, inm, ref, w },
		META_FLAGS(ROW)
#undef ROW
	};
	static const char *const pre[3] = { "mg q", "ms q 0", "md q" };
	size_t i;
	int cmd;

	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		for (cmd = 0; cmd < 3; cmd++) {
			char line[64];
			const char *arg = rows[i].letter == 'M' ? "S" : rows[i].token ? "1" : "";
			enum proto_status st;

			snprintf(line, sizeof(line), "%s %c%s", pre[cmd], rows[i].letter, arg);
			st = parse(line);
			if (rows[i].letter == 'b' && (rows[i].in & (1u << cmd))) {
				/* "q" is not base64: the flag is taken, the key refused */
				ck_assert_int_eq(st, PROTO_CLIENT_ERROR);
				ck_assert_str_eq(why, FMT);
			} else if (rows[i].in & (1u << cmd)) {
				ck_assert_msg(st == PROTO_OK, "'%s': %s", line, why);
			} else if (rows[i].refused & (1u << cmd)) {
				ck_assert_msg(st == PROTO_CLIENT_ERROR && strcmp(why, rows[i].why) == 0,
					      "'%s': %s", line, why ? why : "(null)");
			} else {
				ck_assert_msg(st == PROTO_CLIENT_ERROR && strcmp(why, "invalid flag") == 0,
					      "'%s': %s", line, why ? why : "(null)");
			}
		}
	}
}
END_TEST

START_TEST(reply_lines)
{
	char buf[META_REPLY_MAX];
	struct meta_item it = { 5, 2, 77, -1, 3 };
	size_t n;

	ASSERT_OK("mg q v f s c t k O42");
	n = meta_reply(buf, META_CODE_VA, &req, &it);
	ck_assert_uint_eq(n, strlen("VA 2 f5 s2 c77 t-1 kq O42\r\n"));
	ck_assert(memcmp(buf, "VA 2 f5 s2 c77 t-1 kq O42\r\n", n) == 0);
	ASSERT_OK("mg q v d c");
	n = meta_reply(buf, META_CODE_VA, &req, &it);
	ck_assert_uint_eq(n, strlen("VA 2 d3 c77\r\n"));
	ck_assert(memcmp(buf, "VA 2 d3 c77\r\n", n) == 0);
	ASSERT_OK("mg q v f s c t k O42");
	/* a miss: only k and O */
	n = meta_reply(buf, META_CODE_EN, &req, NULL);
	ck_assert(memcmp(buf, "EN kq O42\r\n", n) == 0);
	ck_assert_uint_eq(n, strlen("EN kq O42\r\n"));
	/* base64 key: b follows k */
	ASSERT_OK("ms cQ== 2 b c k Oq");
	it.cas = 8;
	n = meta_reply(buf, META_CODE_HD, &req, &it);
	ck_assert(memcmp(buf, "HD c8 kcQ== b Oq\r\n", n) == 0);
	ck_assert_uint_eq(n, strlen("HD c8 kcQ== b Oq\r\n"));
	it.cas = 0;
	n = meta_reply(buf, META_CODE_NS, &req, &it);
	ck_assert(memcmp(buf, "NS c0 kcQ== b Oq\r\n", n) == 0);
	/* no request (a deferred reply): the bare code */
	n = meta_reply(buf, META_CODE_HD, NULL, NULL);
	ck_assert(memcmp(buf, "HD\r\n", n) == 0 && n == 4);
	n = meta_reply(buf, META_CODE_MN, NULL, NULL);
	ck_assert(memcmp(buf, "MN\r\n", n) == 0 && n == 4);
	n = meta_reply(buf, META_CODE_NF, NULL, NULL);
	ck_assert(memcmp(buf, "NF\r\n", n) == 0 && n == 4);
	/* positive ttl, no value */
	ASSERT_OK("mg q t");
	it.ttl = 3600;
	n = meta_reply(buf, META_CODE_HD, &req, &it);
	ck_assert(memcmp(buf, "HD t3600\r\n", n) == 0);
}
END_TEST

START_TEST(reply_longest)
{
	/* The longest line: a 250-byte key, a 32-byte opaque, every number at
	 * its widest, written into exactly META_REPLY_MAX bytes. */
	char line[600], key[PROTO_KEY_MAX + 1];
	char *buf = malloc(META_REPLY_MAX);
	struct meta_item it = { UINT32_MAX, UINT32_MAX, UINT64_MAX, INT64_MIN, UINT32_MAX };
	size_t n;

	ck_assert_ptr_nonnull(buf);
	memset(key, 'k', PROTO_KEY_MAX);
	key[PROTO_KEY_MAX] = '\0';
	snprintf(line, sizeof(line), "mg %s v f s c t d k O0123456789abcdef0123456789abcdef", key);
	ASSERT_OK(line);
	n = meta_reply(buf, META_CODE_VA, &req, &it);
	ck_assert_uint_le(n, META_REPLY_MAX);
	ck_assert(memcmp(buf + n - 2, "\r\n", 2) == 0);
	free(buf);
}
END_TEST

Suite *meta_suite(void)
{
	Suite *s = suite_create("meta");
	TCase *tc = tcase_create("parse");

	tcase_add_test(tc, match);
	tcase_add_test(tc, mg_basic);
	tcase_add_test(tc, mg_options_in_key);
	tcase_add_test(tc, mg_return_order);
	tcase_add_test(tc, opaque_limits);
	tcase_add_test(tc, ms_basic);
	tcase_add_test(tc, md_mn_me_ma);
	tcase_add_test(tc, base64_keys);
	tcase_add_loop_test(tc, error_rows, 0, (int)(sizeof(errors) / sizeof(errors[0])));
	tcase_add_test(tc, key_limits);
	tcase_add_test(tc, every_flag_at_once);
	tcase_add_test(tc, flag_table_rows);
	suite_add_tcase(s, tc);

	tc = tcase_create("replies");
	tcase_add_test(tc, reply_lines);
	tcase_add_test(tc, reply_longest);
	suite_add_tcase(s, tc);
	return s;
}
