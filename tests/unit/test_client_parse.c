/* test_client_parse.c: the client library's request formatting and
 * incremental reply parsing (client/tclient.h), all three protocols, and a
 * pipelined round trip through tc_conn against a tiny in-process listener. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../client/tclient.h"

/* Parses every prefix of a complete reply: each must say "need more", and
 * the whole must parse to exactly its length. */
static void parse_all_prefixes(enum tc_proto p, const char *s, struct tc_reply *r)
{
	size_t len = strlen(s);

	for (size_t i = 0; i < len; i++) {
		size_t need = 0;

		ck_assert_int_eq(tc_parse_reply(p, s, i, r, &need), 0);
		ck_assert_uint_gt(need, i);
	}
	ck_assert_int_eq(tc_parse_reply(p, s, len, r, NULL), (ssize_t)len);
}

START_TEST(test_memcache_replies)
{
	struct tc_reply r;
	const char *v = "VALUE jobs 7 5\r\nhello\r\nEND\r\n";

	parse_all_prefixes(TC_MEMCACHE, v, &r);
	ck_assert_int_eq(r.type, TC_R_VALUE);
	ck_assert_uint_eq(r.len, 5);
	ck_assert(memcmp(r.data, "hello", 5) == 0);
	ck_assert_uint_eq(r.flags, 7);
	ck_assert(r.key_len == 4 && memcmp(r.key, "jobs", 4) == 0);
	ck_assert_uint_eq(r.id, 0);
	/* gets: the cas field (tern: the item's id) */
	parse_all_prefixes(TC_MEMCACHE, "VALUE {q}/open 0 2 1234567890123456789\r\nhi\r\nEND\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_VALUE);
	ck_assert_uint_eq(r.id, 1234567890123456789ull);
	ck_assert_uint_eq(r.len, 2);
	/* a body containing CRLF and END is taken by length */
	parse_all_prefixes(TC_MEMCACHE, "VALUE q 0 7\r\nEND\r\nxy\r\nEND\r\n", &r);
	ck_assert_uint_eq(r.len, 7);

	parse_all_prefixes(TC_MEMCACHE, "STORED\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_STORED);
	parse_all_prefixes(TC_MEMCACHE, "END\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_END);
	parse_all_prefixes(TC_MEMCACHE, "NOT_STORED\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_NOT_STORED);
	parse_all_prefixes(TC_MEMCACHE, "SERVER_ERROR disk full\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_SERVER_ERROR);
	ck_assert_uint_eq(r.line_len, 22);
	parse_all_prefixes(TC_MEMCACHE, "CLIENT_ERROR bad\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_CLIENT_ERROR);
	parse_all_prefixes(TC_MEMCACHE, "ERROR\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_ERROR);
	parse_all_prefixes(TC_MEMCACHE, "DELETED\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_DELETED);
	parse_all_prefixes(TC_MEMCACHE, "STAT pid 1\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_OTHER);
	/* two replies back to back: the first is taken alone */
	ck_assert_int_eq(tc_parse_reply(TC_MEMCACHE, "STORED\r\nEND\r\n", 13, &r, NULL), 8);
}
END_TEST

START_TEST(test_memcache_malformed)
{
	struct tc_reply r;
	char big[TC_LINE_MAX + 10];

	ck_assert_int_eq(tc_parse_reply(TC_MEMCACHE, "VALUE q 0 x\r\n", 13, &r, NULL), TC_EPROTO);
	ck_assert_int_eq(tc_parse_reply(TC_MEMCACHE, "VALUE q 0\r\n", 11, &r, NULL), TC_EPROTO);
	ck_assert_int_eq(tc_parse_reply(TC_MEMCACHE, "VALUE q 0 1 x\r\n", 15, &r, NULL), TC_EPROTO);
	ck_assert_int_eq(tc_parse_reply(TC_MEMCACHE, "VALUE q 0 1 2 3\r\n", 17, &r, NULL),
			 TC_EPROTO);
	ck_assert_int_eq(tc_parse_reply(TC_MEMCACHE, "VALUE q 0 2\r\nabXXEND\r\n", 22, &r, NULL),
			 TC_EPROTO);
	memset(big, 'a', sizeof big);
	ck_assert_int_eq(tc_parse_reply(TC_MEMCACHE, big, sizeof big, &r, NULL), TC_EPROTO);
}
END_TEST

START_TEST(test_redis_replies)
{
	struct tc_reply r;

	parse_all_prefixes(TC_REDIS, ":42\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_STORED);
	ck_assert_uint_eq(r.id, 42);
	parse_all_prefixes(TC_REDIS, "$5\r\nhello\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_VALUE);
	ck_assert(r.len == 5 && memcmp(r.data, "hello", 5) == 0);
	parse_all_prefixes(TC_REDIS, "$-1\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_END);
	parse_all_prefixes(TC_REDIS, "*-1\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_END);
	parse_all_prefixes(TC_REDIS, "*2\r\n$1\r\nq\r\n$3\r\nabc\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_VALUE);
	ck_assert(r.len == 3 && memcmp(r.data, "abc", 3) == 0);
	ck_assert(r.key_len == 1 && r.key[0] == 'q');
	parse_all_prefixes(TC_REDIS, "-ERR wrong type\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_ERROR);
	parse_all_prefixes(TC_REDIS, "+OK\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_OK);
	ck_assert_int_eq(tc_parse_reply(TC_REDIS, "?x\r\n", 4, &r, NULL), TC_EPROTO);
	ck_assert_int_eq(tc_parse_reply(TC_REDIS, "$2\r\nabc\r\n", 9, &r, NULL), TC_EPROTO);
}
END_TEST

START_TEST(test_beanstalk_replies)
{
	struct tc_reply r;

	parse_all_prefixes(TC_BEANSTALK, "INSERTED 17\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_STORED);
	ck_assert_uint_eq(r.id, 17);
	parse_all_prefixes(TC_BEANSTALK, "RESERVED 9 4\r\nab\r\n\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_VALUE);
	ck_assert_uint_eq(r.id, 9);
	ck_assert(r.len == 4 && memcmp(r.data, "ab\r\n", 4) == 0);
	parse_all_prefixes(TC_BEANSTALK, "TIMED_OUT\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_END);
	parse_all_prefixes(TC_BEANSTALK, "DELETED\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_DELETED);
	parse_all_prefixes(TC_BEANSTALK, "USING q\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_OK);
	parse_all_prefixes(TC_BEANSTALK, "WATCHING 2\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_OK);
	parse_all_prefixes(TC_BEANSTALK, "JOB_TOO_BIG\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_NOT_STORED);
	parse_all_prefixes(TC_BEANSTALK, "NOT_FOUND\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_NOT_FOUND);
	parse_all_prefixes(TC_BEANSTALK, "OUT_OF_MEMORY\r\n", &r);
	ck_assert_int_eq(r.type, TC_R_SERVER_ERROR);
}
END_TEST

START_TEST(test_format)
{
	char buf[512];
	size_t n;

	n = tc_fmt_put_head(TC_MEMCACHE, buf, "jobs", 4, 3, 512);
	buf[n] = 0;
	ck_assert_str_eq(buf, "set jobs 3 0 512\r\n");
	n = tc_fmt_get(TC_MEMCACHE, buf, "jobs", 4, "/t=100/open", 0);
	ck_assert(n == 21 && memcmp(buf, "get jobs/t=100/open\r\n", n) == 0);
	n = tc_fmt_put_head(TC_REDIS, buf, "q", 1, 0, 10);
	buf[n] = 0;
	ck_assert_str_eq(buf, "*3\r\n$5\r\nLPUSH\r\n$1\r\nq\r\n$10\r\n");
	n = tc_fmt_get(TC_REDIS, buf, "q", 1, NULL, 0);
	ck_assert(n == 21 && memcmp(buf, "*2\r\n$4\r\nRPOP\r\n$1\r\nq\r\n", n) == 0);
	n = tc_fmt_get(TC_REDIS, buf, "q", 1, NULL, 1500);
	buf[n] = 0;
	ck_assert_str_eq(buf, "*3\r\n$5\r\nBRPOP\r\n$1\r\nq\r\n$5\r\n1.500\r\n");
	n = tc_fmt_put_head(TC_BEANSTALK, buf, "q", 1, 0, 7);
	buf[n] = 0;
	ck_assert_str_eq(buf, "put 1024 0 120 7\r\n");
	n = tc_fmt_get(TC_BEANSTALK, buf, "q", 1, NULL, 100);
	buf[n] = 0;
	ck_assert_str_eq(buf, "reserve-with-timeout 1\r\n");
	n = tc_fmt_delete_job(buf, 12345);
	buf[n] = 0;
	ck_assert_str_eq(buf, "delete 12345\r\n");
	n = tc_fmt_u64(buf, UINT64_MAX);
	buf[n] = 0;
	ck_assert_str_eq(buf, "18446744073709551615");
	ck_assert_int_eq(tc_proto_parse("redis"), TC_REDIS);
	ck_assert_int_eq(tc_proto_parse("nope"), -1);
}
END_TEST

/* A one-connection fake queue server: answers every "set" with STORED and
 * every "get" with the stored values in order, END when empty.  Enough to
 * drive tc_conn pipelined. */
struct fake {
	int lfd, port;
};

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	int fd = accept(f->lfd, NULL, NULL);
	static char in[1 << 16], store[64][64];
	size_t len = 0, nstore = 0, head = 0;

	if (fd < 0)
		return NULL;
	for (;;) {
		ssize_t n = read(fd, in + len, sizeof in - len);
		char *nl;

		if (n <= 0)
			break;
		len += (size_t)n;
		while ((nl = memchr(in, '\n', len)) != NULL) {
			size_t used = (size_t)(nl - in) + 1;
			unsigned bytes;
			char q[64], reply[256];

			if (sscanf(in, "set %63s 0 0 %u", q, &bytes) == 2) {
				if (len < used + bytes + 2)
					break;
				memcpy(store[nstore % 64], in + used, bytes);
				store[nstore % 64][bytes] = 0;
				nstore++;
				used += bytes + 2;
				(void)!write(fd, "STORED\r\n", 8);
			} else if (head < nstore) {
				int m = snprintf(reply, sizeof reply, "VALUE q 0 %zu\r\n%s\r\nEND\r\n",
						 strlen(store[head % 64]), store[head % 64]);
				head++;
				(void)!write(fd, reply, (size_t)m);
			} else {
				(void)!write(fd, "END\r\n", 5);
			}
			memmove(in, in + used, len - used);
			len -= used;
		}
	}
	close(fd);
	return NULL;
}

START_TEST(test_conn_pipelined)
{
	struct fake f;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof sa;
	pthread_t tid;
	struct tc_conn *c;
	struct tc_reply r;
	char body[16];

	f.lfd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(f.lfd, 0);
	ck_assert_int_eq(bind(f.lfd, (struct sockaddr *)&sa, sizeof sa), 0);
	ck_assert_int_eq(listen(f.lfd, 4), 0);
	getsockname(f.lfd, (struct sockaddr *)&sa, &sl);
	f.port = ntohs(sa.sin_port);
	pthread_create(&tid, NULL, fake_main, &f);

	ck_assert_int_eq(tc_conn_open(&c, "127.0.0.1", f.port, TC_MEMCACHE, 5000), 0);
	for (int i = 0; i < 10; i++) {
		int n = snprintf(body, sizeof body, "msg%d", i);

		ck_assert_int_eq(tc_conn_put(c, "q", body, (size_t)n), 0);
	}
	for (int i = 0; i < 11; i++)
		ck_assert_int_eq(tc_conn_get(c, "q", "/t=10", 0), 0);
	for (int i = 0; i < 10; i++) {
		ck_assert_int_eq(tc_conn_reply(c, &r), 0);
		ck_assert_int_eq(r.type, TC_R_STORED);
	}
	for (int i = 0; i < 10; i++) {
		int n = snprintf(body, sizeof body, "msg%d", i);

		ck_assert_int_eq(tc_conn_reply(c, &r), 0);
		ck_assert_int_eq(r.type, TC_R_VALUE);
		ck_assert(r.len == (size_t)n && memcmp(r.data, body, r.len) == 0);
	}
	ck_assert_int_eq(tc_conn_reply(c, &r), 0);
	ck_assert_int_eq(r.type, TC_R_END);
	tc_conn_close(c);
	pthread_join(tid, NULL);
	close(f.lfd);
	/* nobody listening any more: refused, not a hang */
	ck_assert_int_lt(tc_conn_open(&c, "127.0.0.1", f.port, TC_MEMCACHE, 2000), 0);
}
END_TEST

Suite *tclient_suite(void)
{
	Suite *s = suite_create("tclient");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_memcache_replies);
	tcase_add_test(tc, test_memcache_malformed);
	tcase_add_test(tc, test_redis_replies);
	tcase_add_test(tc, test_beanstalk_replies);
	tcase_add_test(tc, test_format);
	tcase_add_test(tc, test_conn_pipelined);
	tcase_set_timeout(tc, 30);
	suite_add_tcase(s, tc);
	return s;
}
