/* test_client_ketama.c: ketama hashing (client/ketama.h).  The expected
 * values were computed by an independent implementation (Python's hashlib
 * with twemproxy's formulas) that was checked against nutcracker's and
 * libmemcached's placement of the same keys; tests/cluster checks this code
 * against a running nutcracker as well. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../client/ketama.h"
#include "../../client/tclient.h"

START_TEST(test_hash_names)
{
	ck_assert_int_eq(ketama_hash_parse("md5"), KETAMA_MD5);
	ck_assert_int_eq(ketama_hash_parse("fnv1a_64"), KETAMA_FNV1A_64);
	ck_assert_int_eq(ketama_hash_parse("one_at_a_time"), KETAMA_ONE_AT_A_TIME);
	ck_assert_int_eq(ketama_hash_parse("murmur"), -1);
	ck_assert_int_eq(ketama_hash_parse(""), -1);
	for (int h = 0; h < KETAMA_HASH_COUNT; h++)
		ck_assert_int_eq(ketama_hash_parse(ketama_hash_name((enum ketama_hash)h)), h);
}
END_TEST

START_TEST(test_key_hashes)
{
	static const struct {
		enum ketama_hash h;
		uint32_t empty, a, name, high;
	} v[] = {
		{ KETAMA_MD5, 0xd98c1dd4, 0xb975c10c, 0x16a7d244, 0xdad3755d },
		{ KETAMA_FNV1A_64, 0x84222325, 0x8601ec8c, 0x19920588, 0x72004ae1 },
		{ KETAMA_FNV1_64, 0x84222325, 0x8601b7be, 0x24aa0e5e, 0x6c127fd1 },
		{ KETAMA_FNV1A_32, 0x811c9dc5, 0xe40c292c, 0xbe8560c8, 0xa2dcf6e1 },
		{ KETAMA_FNV1_32, 0x811c9dc5, 0x050c5d7e, 0xa481d27e, 0x30b30d11 },
		{ KETAMA_ONE_AT_A_TIME, 0x0, 0xca2e9442, 0x5810133a, 0x6bc442aa },
	};

	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
		ck_assert_uint_eq(ketama_hash_key(v[i].h, "", 0), v[i].empty);
		ck_assert_uint_eq(ketama_hash_key(v[i].h, "a", 1), v[i].a);
		ck_assert_uint_eq(ketama_hash_key(v[i].h, "tern_load_0", 11), v[i].name);
		/* Bytes above 0x7f are widened as signed chars, as the proxy
		 * does. */
		ck_assert_uint_eq(ketama_hash_key(v[i].h, "\xff\x80q", 3), v[i].high);
	}
}
END_TEST

static void check_tag(const char *key, const char *want)
{
	const char *part;
	size_t plen;

	ketama_tag(key, strlen(key), &part, &plen);
	ck_assert_msg(plen == strlen(want) && memcmp(part, want, plen) == 0,
		      "tag of %s: got %.*s, want %s", key, (int)plen, part, want);
}

START_TEST(test_tag)
{
	check_tag("jobs", "jobs");
	check_tag("{jobs}", "jobs");
	check_tag("{jobs}/open", "jobs");
	check_tag("{jobs}/t=100/close/open", "jobs");
	check_tag("x{jobs}y", "jobs");
	check_tag("{}jobs", "{}jobs");       /* empty tag: the whole key */
	check_tag("{jobs", "{jobs");         /* unclosed */
	check_tag("jobs}{a}", "a");
	check_tag("{{a}}", "{a");            /* first '{', next '}' */
	check_tag("{a}{b}", "a");
}
END_TEST

START_TEST(test_server_parse)
{
	struct ketama_server s;

	ck_assert_int_eq(ketama_server_parse(&s, "127.0.0.1:22133", 15), 0);
	ck_assert_str_eq(s.host, "127.0.0.1");
	ck_assert_int_eq(s.port, 22133);
	ck_assert_uint_eq(s.weight, 1);
	ck_assert_str_eq(s.name, "127.0.0.1:22133");
	ck_assert_int_eq(ketama_server_parse(&s, "cache1:11211:3", 14), 0);
	ck_assert_str_eq(s.name, "cache1"); /* the default port is left out */
	ck_assert_uint_eq(s.weight, 3);
	ck_assert_int_eq(ketama_server_parse(&s, "h:5:2 server one", 16), 0);
	ck_assert_str_eq(s.host, "h");
	ck_assert_int_eq(s.port, 5);
	ck_assert_str_eq(s.name, "server one");
	ck_assert_int_eq(ketama_server_parse(&s, "[::1]:22133", 11), 0);
	ck_assert_str_eq(s.host, "::1");
	ck_assert_str_eq(s.name, "::1:22133");
	ck_assert_int_eq(ketama_server_parse(&s, "[::1]:22133:4 n", 15), 0);
	ck_assert_uint_eq(s.weight, 4);
	ck_assert_str_eq(s.name, "n");
	/* Only the given length is read. */
	ck_assert_int_eq(ketama_server_parse(&s, "a:1,b:2", 3), 0);
	ck_assert_str_eq(s.name, "a:1");
	{
		static const char *const bad[] = {
			"", "h", "h:", ":1", "h:0", "h:65536", "h:1:0", "h:1:x", "h:x",
			"h:1:2:3", "h:1 ", "[::1]", "[::1]22133", "[::1:1", "h:1:1000001",
			"h:-1",
		};

		for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
			ck_assert_msg(ketama_server_parse(&s, bad[i], strlen(bad[i])) == TC_EINVAL,
				      "accepted %s", bad[i]);
	}
}
END_TEST

START_TEST(test_servers_parse)
{
	struct ketama_server *v;
	unsigned n;

	ck_assert_int_eq(ketama_servers_parse("a:1,b:2:3,c:4 x", &v, &n), 0);
	ck_assert_uint_eq(n, 3);
	ck_assert_str_eq(v[0].name, "a:1");
	ck_assert_uint_eq(v[1].weight, 3);
	ck_assert_str_eq(v[2].name, "x");
	free(v);
	ck_assert_int_eq(ketama_servers_parse("", &v, &n), TC_EINVAL);
	ck_assert_int_eq(ketama_servers_parse("a:1,", &v, &n), TC_EINVAL);
	ck_assert_int_eq(ketama_servers_parse(",a:1", &v, &n), TC_EINVAL);
	ck_assert_ptr_null(v);
}
END_TEST

/* picks[i] is the expected server of key prefix + i. */
static void check_picks(const char *list, enum ketama_hash h, const char *prefix,
			const char *picks)
{
	struct ketama_server *v;
	struct ketama *k;
	unsigned n;

	ck_assert_int_eq(ketama_servers_parse(list, &v, &n), 0);
	ck_assert_int_eq(ketama_new(&k, v, n, h), 0);
	free(v);
	for (unsigned i = 0; picks[i]; i++) {
		char key[64];
		int len = snprintf(key, sizeof key, "%s%u", prefix, i);

		ck_assert_msg(ketama_pick(k, key, (size_t)len) == (unsigned)(picks[i] - '0'),
			      "%s with %s: key %s on %u, want %c", list, ketama_hash_name(h), key,
			      ketama_pick(k, key, (size_t)len), picks[i]);
	}
	ketama_free(k);
}

START_TEST(test_picks)
{
	check_picks("127.0.0.1:22133,127.0.0.1:22134,127.0.0.1:22135", KETAMA_MD5, "q",
		    "0101020000210002002220102000220101222022");
	check_picks("127.0.0.1:22133,127.0.0.1:22134,127.0.0.1:22135", KETAMA_ONE_AT_A_TIME,
		    "q", "1211122001201002110022020100022101012211");
	/* Weights, the default port left out of the name, and a name. */
	check_picks("10.0.0.1:11211,10.0.0.2:22133:2,10.0.0.3:22133 third", KETAMA_MD5, "q",
		    "1200110020201020221201200101010012102010");
	check_picks("10.0.0.1:11211,10.0.0.2:22133:2,10.0.0.3:22133 third", KETAMA_FNV1A_32,
		    "jobs.", "2101102202112122122111001000111110111222");
	/* One server takes every key. */
	check_picks("10.0.0.1:1", KETAMA_MD5, "q", "0000000000");
}
END_TEST

START_TEST(test_tag_routes_together)
{
	struct ketama_server *v;
	struct ketama *k;
	unsigned n;

	ck_assert_int_eq(ketama_servers_parse("h:1,h:2,h:3,h:4,h:5", &v, &n), 0);
	ck_assert_int_eq(ketama_new(&k, v, n, KETAMA_MD5), 0);
	free(v);
	for (unsigned i = 0; i < 200; i++) {
		char q[32], form[64];
		int ql = snprintf(q, sizeof q, "jobs%u", i);
		unsigned want = ketama_pick(k, q, (size_t)ql);
		/* Before and after the tagged name. */
		static const char *const forms[][2] = {
			{ "{", "}" }, { "{", "}/open" }, { "{", "}/t=100/close/open" },
			{ "x{", "}y" }, { "{", "}/close=12345" },
		};

		for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
			int fl = snprintf(form, sizeof form, "%s%s%s", forms[f][0], q, forms[f][1]);

			ck_assert_uint_eq(ketama_pick(k, form, (size_t)fl), want);
		}
	}
	ketama_free(k);
}
END_TEST

/* Consistency: taking a server out moves only the keys it had. */
START_TEST(test_remove_server)
{
	struct ketama_server *v;
	struct ketama *k4, *k3;
	unsigned n, moved = 0, kept = 0;

	ck_assert_int_eq(ketama_servers_parse("h:1,h:2,h:3,h:4", &v, &n), 0);
	ck_assert_int_eq(ketama_new(&k4, v, 4, KETAMA_MD5), 0);
	ck_assert_int_eq(ketama_new(&k3, v, 3, KETAMA_MD5), 0);
	free(v);
	for (unsigned i = 0; i < 4000; i++) {
		char key[32];
		int len = snprintf(key, sizeof key, "queue-%u", i);
		unsigned a = ketama_pick(k4, key, (size_t)len), b = ketama_pick(k3, key, (size_t)len);

		if (a == 3) {
			moved++;
			ck_assert_uint_lt(b, 3);
		} else {
			kept++;
			ck_assert_uint_eq(a, b);
		}
	}
	/* About a quarter moved (not asserted tightly: it is a hash). */
	ck_assert_uint_gt(moved, 600);
	ck_assert_uint_gt(kept, 2400);
	ketama_free(k4);
	ketama_free(k3);
}
END_TEST

START_TEST(test_new_errors)
{
	struct ketama_server s[2];
	struct ketama *k;

	ck_assert_int_eq(ketama_server_parse(&s[0], "a:1", 3), 0);
	ck_assert_int_eq(ketama_new(&k, s, 0, KETAMA_MD5), TC_EINVAL);
	ck_assert_ptr_null(k);
	ck_assert_int_eq(ketama_new(&k, s, 1, KETAMA_HASH_COUNT), TC_EINVAL);
	s[1] = s[0];
	s[1].weight = 0;
	ck_assert_int_eq(ketama_new(&k, s, 2, KETAMA_MD5), TC_EINVAL);
	ck_assert_int_eq(ketama_new(&k, s, 1, KETAMA_MD5), 0);
	ck_assert_uint_eq(ketama_count(k), 1);
	ck_assert_str_eq(ketama_server(k, 0)->name, "a:1");
	ck_assert_ptr_null(ketama_server(k, 1));
	ketama_free(k);
}
END_TEST

Suite *client_ketama_suite(void)
{
	Suite *s = suite_create("client_ketama");
	TCase *tc = tcase_create("ketama");

	tcase_add_test(tc, test_hash_names);
	tcase_add_test(tc, test_key_hashes);
	tcase_add_test(tc, test_tag);
	tcase_add_test(tc, test_server_parse);
	tcase_add_test(tc, test_servers_parse);
	tcase_add_test(tc, test_picks);
	tcase_add_test(tc, test_tag_routes_together);
	tcase_add_test(tc, test_remove_server);
	tcase_add_test(tc, test_new_errors);
	suite_add_tcase(s, tc);
	return s;
}
