/*
 * front_text.c: memcached's text protocol (protocol/proto.h) over the
 * queue operations.  It also owns the line framing that the meta protocol
 * shares: a line whose command word is a meta one goes to front_meta.c.
 */
#include "conn.h"
#include "front.h"
#include "ops.h"
#include "state.h"
#include "../lib/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_reply(struct conn *c, struct evbuffer *to, enum proto_reply r)
{
	front_lines_reply(c, to, r);
}

static void text_reply(struct conn *c, struct evbuffer *to, const struct rctx *x,
		       enum op_result r, const char *reason, uint64_t cas)
{
	if (x->noreply || front_lines_failure(c, to, r, reason))
		return;
	switch (r) {
	case OP_STORED:
		put_reply(c, to, PROTO_REPLY_STORED);
		break;
	case OP_NOT_STORED:
	case OP_EXISTS:
	case OP_TOO_LARGE:
		put_reply(c, to, PROTO_REPLY_NOT_STORED);
		break;
	case OP_DELETED:
		put_reply(c, to, PROTO_REPLY_DELETED);
		break;
	case OP_NOT_FOUND:
	case OP_FLUSHED:
		put_reply(c, to, PROTO_REPLY_END);
		break;
	case OP_OK:
	default:
		put_reply(c, to, PROTO_REPLY_OK);
		break;
	}
}

static size_t text_stored(struct conn *c, const struct rctx *x, uint64_t cas, char *buf)
{
	size_t len;
	const char *s = proto_reply(PROTO_REPLY_STORED, &len);

	if (x->noreply)
		return 0;
	memcpy(buf, s, len);
	return len;
}

static void text_value(struct conn *c, const struct proto_key *k, struct item *it)
{
	/* a key with its options fits the small buffer but for the longest
	 * lines, which use the server's scratch */
	char small[PROTO_NAME_MAX + 16 + PROTO_VALUE_HEADER_EXTRA];
	char *hdr = (size_t)k->raw_len + PROTO_VALUE_HEADER_EXTRA <= sizeof(small) ? small
		    : c->srv->hdr_scratch;
	size_t n = proto_value_header(hdr, k->raw, k->raw_len, it->flags, it->len,
				      c->rq.cmd == PROTO_CMD_GETS, it->id);

	conn_add_item(c, hdr, n, it, (size_t)it->len + 2);
}

static void text_miss(struct conn *c, const struct proto_key *k)
{
	/* a key that found nothing has no line: END follows the last key */
}

static void text_get_end(struct conn *c)
{
	put_reply(c, conn_out(c), PROTO_REPLY_END);
}

/* The set's body it arrived with a bad trailer. */
static void bad_chunk(struct conn *c, struct item *it)
{
	/* Only the CR is wrong ("...X\n"): the stream is at a line start. */
	int synced = it->data[it->len + 1] == '\n';
	struct rctx x = c->rq.x;

	item_unref(it);
	c->state = synced ? CONN_REQUEST : CONN_SKIP_LINE;
	/* the data block was not what its line announced: answered even
	 * under noreply, since the client's framing is in doubt */
	x.noreply = 0;
	x.fe->reply(c, conn_out(c), &x, OP_CLIENT_ERROR, "bad data chunk", 0);
}

/* A count line ("<n>\r\n"): flush_expired's answer. */
static void put_count(struct conn *c, uint64_t n)
{
	char buf[24];
	size_t len = proto_put_u64(buf, n);

	buf[len++] = '\r';
	buf[len++] = '\n';
	conn_add(c, buf, len);
}

/* The status command: shows ("<STATUS>") or sets ("END") the status of
 * the queue named or of the server; "NOT_FOUND" for no such queue. */
static void status_run(struct conn *c, const struct proto_req *req)
{
	const struct rctx *x = &c->rq.x;
	enum queue_status st;
	char err[600], buf[700];
	int rc = ops_status(c, req->nkeys ? &req->keys[0] : NULL, req->word, req->word_len, &st,
			    err, sizeof(err));

	switch (rc) {
	case 0:
		if (req->word) {
			conn_add(c, "END\r\n", 5);
		} else {
			snprintf(buf, sizeof(buf), "%s\r\n", queue_status_name(st));
			conn_add(c, buf, strlen(buf));
		}
		return;
	case TERN_ENOTFOUND:
		conn_add(c, "NOT_FOUND\r\n", 11);
		return;
	case TERN_EINVAL:
		text_reply(c, conn_out(c), x, OP_CLIENT_ERROR,
			   "bad status (expected UP, READONLY or QUIESCENT)", 0);
		return;
	case TERN_ESYS:
		snprintf(buf, sizeof(buf), "status set but not saved (lost at a restart): %.500s",
			 err);
		text_reply(c, conn_out(c), x, OP_SERVER_ERROR, buf, 0);
		return;
	default: /* TERN_EACCES: answered */
		return;
	}
}

/* Runs one parsed text request (c->srv->text_req). */
static void text_run(struct conn *c, const struct proto_req *req)
{
	struct server *s = c->srv;
	struct request *r = &c->rq;
	const char *why;
	int rc, existed;

	switch (req->cmd) {
	case PROTO_CMD_GET:
	case PROTO_CMD_GETS:
	case PROTO_CMD_MONITOR:
		r->cmd = req->cmd;
		r->nkeys = req->nkeys;
		if (req->nkeys == 1) {
			r->key = req->keys[0];
			r->keys = &r->key;
		} else {
			if (conn_keys_reserve(c, req->nkeys)) {
				text_reply(c, conn_out(c), &r->x, OP_NO_MEMORY, NULL, 0);
				return;
			}
			memcpy(c->keys, req->keys, req->nkeys * sizeof(*c->keys));
			r->keys = c->keys;
		}
		if (req->cmd == PROTO_CMD_MONITOR) {
			r->count = req->count;
			ops_monitor(c, req->seconds);
		} else {
			ops_get(c);
		}
		return;
	case PROTO_CMD_SET:
	case PROTO_CMD_ADD:
		r->cmd = PROTO_CMD_SET;
		r->add = req->cmd == PROTO_CMD_ADD;
		r->key = req->keys[0];
		r->keys = &r->key;
		r->nkeys = 1;
		r->flags = req->flags;
		r->exptime = req->exptime;
		r->bytes = req->bytes;
		/* (never stored: the handshake again) */
		if (s->auth && front_auth_set(c))
			return;
		front_lines_set(c);
		return;
	case PROTO_CMD_DELETE:
		rc = ops_delete(c, &req->keys[0], &existed);
		if (rc == TERN_EACCES)
			return;
		if (rc)
			ops_fail(c, "delete failed", rc);
		else if (req->keys[0].opts & PROTO_OPT_CLOSE_ID) { /* q/<id> */
			if (!r->x.noreply)
				put_reply(c, conn_out(c), existed ? PROTO_REPLY_DELETED
								  : PROTO_REPLY_NOT_FOUND);
		} else /* Kestrel's answer, whether or not the queue was there */
			text_reply(c, conn_out(c), &r->x, OP_DELETED, NULL, 0);
		return;
	case PROTO_CMD_FLUSH:
	case PROTO_CMD_FLUSH_ALL:
		if (req->cmd == PROTO_CMD_FLUSH)
			ops_flush(c, &req->keys[0], OP_FLUSHED);
		else
			ops_flush_all(c, OP_OK);
		return;
	case PROTO_CMD_FLUSH_EXPIRED:
	case PROTO_CMD_FLUSH_ALL_EXPIRED: {
		uint64_t n;

		if (ops_flush_expired(c, req->cmd == PROTO_CMD_FLUSH_EXPIRED ? &req->keys[0] : NULL,
				      &n))
			return;
		if (req->cmd == PROTO_CMD_FLUSH_ALL_EXPIRED || !req->noreply)
			put_count(c, n);
		return;
	}
	case PROTO_CMD_STATS:
		rc = ops_stats(c, &req->stats);
		if (rc == TERN_EACCES)
			return;
		if (rc == TERN_ENOTFOUND) /* no such queue: an empty list */
			text_reply(c, conn_out(c), &r->x, OP_NOT_FOUND, NULL, 0);
		else if (rc)
			text_reply(c, conn_out(c), &r->x, OP_NO_MEMORY, NULL, 0);
		return;
	case PROTO_CMD_VERSION:
		conn_add(c, "VERSION " PROTO_VERSION "\r\n", sizeof("VERSION " PROTO_VERSION "\r\n") - 1);
		return;
	case PROTO_CMD_VERBOSITY:
		if (req->log_level < 0 && req->verbosity < 0) { /* memcached's answer */
			text_reply(c, conn_out(c), &r->x, OP_CLIENT_ERROR, "bad command line format", 0);
			return;
		}
		if (req->log_level >= 0)
			rc = ops_log_level(c, (enum log_level)req->log_level);
		else
			rc = ops_verbosity(c, (uint64_t)req->verbosity);
		if (rc == 0)
			text_reply(c, conn_out(c), &r->x, OP_OK, NULL, 0);
		return;
	case PROTO_CMD_QUIT:
		c->state = CONN_CLOSING;
		return;
	case PROTO_CMD_SHUTDOWN:
		ops_shutdown(c);
		return;
	case PROTO_CMD_RELOAD:
		ops_reload(c);
		return;
	case PROTO_CMD_STATUS:
		status_run(c, req);
		return;
	case PROTO_CMD_CONFIRM:
		if (ops_confirm(c, &req->keys[0], req->count))
			return;
		if (!req->noreply)
			put_reply(c, conn_out(c), PROTO_REPLY_END);
		return;
	default:
		break;
	}
	/* a command tern answers but does not implement */
	why = proto_refusal(req->cmd);
	text_reply(c, conn_out(c), &r->x, why ? OP_REFUSED : OP_UNKNOWN, why, 0);
	if (proto_cmd_takes_body(req->cmd))
		conn_swallow(c, req->bytes + 2);
}

/* Parses and starts one request line (line/len without "\r\n"). */
static void text_request(struct conn *c, const char *line, size_t len)
{
	struct proto_req *req = &c->srv->text_req;
	const char *reason = NULL;
	uint64_t swallow = 0;
	enum proto_status st = proto_parse(line, len, req, &reason, &swallow);

	c->srv->stats.requests_text++;
	memset(&c->rq.x, 0, sizeof(c->rq.x));
	c->rq.x.fe = &front_text;
	if (st == PROTO_ERROR) {
		text_reply(c, conn_out(c), &c->rq.x, OP_UNKNOWN, NULL, 0);
		return;
	}
	if (st == PROTO_CLIENT_ERROR) {
		/* answered even after noreply: the line did not parse */
		text_reply(c, conn_out(c), &c->rq.x, OP_CLIENT_ERROR,
			   reason ? reason : "bad command line format", 0);
		conn_swallow(c, swallow);
		return;
	}
	c->rq.x.noreply = (uint8_t)req->noreply;
	text_run(c, req);
}

/* Finds the line in in[0..avail), copies it out and runs it: a login
 * before the connection may make requests, a meta request, or a text
 * one (struct front's parse). */
static size_t text_parse(struct conn *c, const char *in, size_t avail)
{
	const char *eol = memchr(in, '\n', avail);
	size_t len;

	if (!eol || (size_t)(eol - in) > PROTO_LINE_MAX) {
		if (eol || avail > PROTO_LINE_MAX) {
			struct rctx x = { .fe = &front_text };

			text_reply(c, conn_out(c), &x, OP_CLIENT_ERROR, "line too long", 0);
			c->state = CONN_CLOSING;
		}
		return 0; /* wait for the rest of the line */
	}
	len = (size_t)(eol - in);
	/* Copied out: the request's keys point into it while the input
	 * buffer moves on (a waiting get reads on behind it). */
	if (len + 1 > c->line_cap) {
		char *p = realloc(c->line, len + 1);

		if (!p) {
			struct rctx x = { .fe = &front_text };

			text_reply(c, conn_out(c), &x, OP_NO_MEMORY, NULL, 0);
			c->state = CONN_CLOSING;
			return 0;
		}
		c->line = p;
		c->line_cap = len + 1;
	}
	memcpy(c->line, in, len);
	if (len && c->line[len - 1] == '\r')
		len--;
	c->line[len] = '\0';
	if (!c->authed)
		front_auth_line(c, c->line, len);
	else if (meta_match(c->line, len))
		front_meta_request(c, c->line, len);
	else
		text_request(c, c->line, len);
	return (size_t)(eol - in) + 1;
}

/* The body of a text or meta set (struct front's body_done): the
 * handshake's credentials, a bad trailer, a login as a set, or a
 * message. */
static void text_body_done(struct conn *c, struct item *it)
{
	if (c->rq.auth) {
		front_auth_body(c, it);
		return;
	}
	if (it->data[it->len] != '\r' || it->data[it->len + 1] != '\n') {
		bad_chunk(c, it);
		return;
	}
	/* a user's credentials are a login, never a message */
	if (c->srv->auth && front_auth_set_body(c, it))
		return;
	ops_set_finish(c, it);
}

const struct front front_text = {
	.name = "text",
	.id = FRONT_TEXT,
	.parse = text_parse,
	.body_done = text_body_done,
	.resume = ops_get_continue,
	.value = text_value,
	.miss = text_miss,
	.get_end = text_get_end,
	.reply = text_reply,
	.stored = text_stored,
	.stat = front_lines_stat,
	.stats_end = front_lines_stats_end,
};
