/*
 * front_lines.c: what memcached's text protocol and the meta protocol
 * share besides the line framing (front_text.c): a set's data block, and
 * the lines both answer alike: the errors (ERROR, CLIENT_ERROR <reason>,
 * SERVER_ERROR <reason>, memcached's three classes) and the statistics
 * (STAT <name> <value> ... END).
 */
#include "conn.h"
#include "front.h"
#include "ops.h"

#include <stdio.h>
#include <string.h>

void front_lines_reply(struct conn *c, struct evbuffer *to, enum proto_reply r)
{
	size_t len;
	const char *s = proto_reply(r, &len);

	conn_put(c, to, s, len);
}

void front_lines_error(struct conn *c, struct evbuffer *to, const char *cls,
		       const char *reason)
{
	char buf[512];
	int n = snprintf(buf, sizeof(buf), "%s %s\r\n", cls, reason);

	if (n >= (int)sizeof(buf))
		n = (int)sizeof(buf) - 1; /* reasons are short; keep the line whole */
	if (n > 0) {
		buf[n - 2] = '\r';
		buf[n - 1] = '\n';
		conn_put(c, to, buf, (size_t)n);
	}
}

int front_lines_failure(struct conn *c, struct evbuffer *to, enum op_result r,
			const char *reason)
{
	switch (r) {
	case OP_NO_MEMORY:
		front_lines_error(c, to, "SERVER_ERROR", "out of memory");
		return 1;
	case OP_CLIENT_ERROR:
	case OP_REFUSED:
	case OP_DENIED:
		front_lines_error(c, to, "CLIENT_ERROR", reason);
		return 1;
	case OP_SERVER_ERROR:
	case OP_UNAVAILABLE:
		front_lines_error(c, to, "SERVER_ERROR", reason);
		return 1;
	case OP_UNKNOWN:
		front_lines_reply(c, to, PROTO_REPLY_ERROR);
		return 1;
	default:
		return 0;
	}
}

void front_lines_stat(struct conn *c, const char *name, size_t nlen, const char *val,
		      size_t vlen)
{
	char buf[PROTO_NAME_MAX + 128];

	if (nlen + vlen + 8 > sizeof(buf)) {
		/* a setting with a long value (a path): in pieces */
		conn_add(c, "STAT ", 5);
		conn_add(c, name, nlen);
		conn_add(c, " ", 1);
		conn_add(c, val, vlen);
		conn_add(c, "\r\n", 2);
		return;
	}
	memcpy(buf, "STAT ", 5);
	memcpy(buf + 5, name, nlen);
	buf[5 + nlen] = ' ';
	memcpy(buf + 6 + nlen, val, vlen);
	memcpy(buf + 6 + nlen + vlen, "\r\n", 2);
	conn_add(c, buf, nlen + vlen + 8);
}

void front_lines_stats_end(struct conn *c)
{
	front_lines_reply(c, conn_out(c), PROTO_REPLY_END);
}

void front_lines_set(struct conn *c)
{
	struct item *body = ops_set(c);

	if (body)
		conn_read_body(c, body, 2);
	else
		conn_swallow(c, c->rq.bytes + 2);
}
