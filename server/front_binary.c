/*
 * front_binary.c: memcached's binary protocol (protocol/binary.h) over the
 * queue operations, for a connection whose first byte was 0x80.  Every
 * reply echoes the request's opcode and opaque; quiet opcodes answer only
 * failures (and a GETQ/GETKQ only a hit), so a NOOP after them marks the
 * end; the cas of a value or a stored item is its id.
 */
#include "conn.h"
#include "front.h"
#include "ops.h"
#include "state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Header, extras and key of a response without a value. */
static void put_response(struct conn *c, struct evbuffer *to, const struct rctx *x,
			 uint16_t status, const char *key, size_t klen,
			 const char *body, size_t blen, uint64_t cas)
{
	unsigned char hdr[BIN_HEADER_LEN];

	bin_header_encode(hdr, x->opcode, status, (uint16_t)klen, 0,
			  (uint32_t)(klen + blen), x->opaque, cas);
	conn_put(c, to, hdr, sizeof(hdr));
	if (klen)
		conn_put(c, to, key, klen);
	if (blen)
		conn_put(c, to, body, blen);
}

/* An error status with its text (the reason, or memcached's wording). */
static void put_status(struct conn *c, struct evbuffer *to, const struct rctx *x,
		       uint16_t status, const char *reason)
{
	const char *text = reason ? reason : bin_status_text(status);

	put_response(c, to, x, status, NULL, 0, text, strlen(text), 0);
}

static void bin_reply(struct conn *c, struct evbuffer *to, const struct rctx *x,
		      enum op_result r, const char *reason, uint64_t cas)
{
	switch (r) {
	case OP_STORED:
	case OP_DELETED:
	case OP_FLUSHED:
	case OP_OK:
		if (!x->quiet)
			put_response(c, to, x, BIN_STATUS_SUCCESS, NULL, 0, NULL, 0, cas);
		break;
	case OP_NOT_FOUND:
		put_status(c, to, x, BIN_STATUS_KEY_ENOENT, NULL);
		break;
	case OP_NOT_STORED:
		put_status(c, to, x, BIN_STATUS_NOT_STORED, reason);
		break;
	case OP_EXISTS:
		put_status(c, to, x, BIN_STATUS_KEY_EEXISTS, NULL);
		break;
	case OP_TOO_LARGE:
		put_status(c, to, x, BIN_STATUS_E2BIG, NULL);
		break;
	case OP_NO_MEMORY:
		put_status(c, to, x, BIN_STATUS_ENOMEM, NULL);
		break;
	case OP_CLIENT_ERROR:
		put_status(c, to, x, BIN_STATUS_EINVAL, reason);
		break;
	case OP_SERVER_ERROR:
		put_status(c, to, x, BIN_STATUS_EINTERNAL, reason);
		break;
	case OP_REFUSED:
		put_status(c, to, x, BIN_STATUS_NOT_SUPPORTED, reason);
		break;
	case OP_UNAVAILABLE:
		put_status(c, to, x, BIN_STATUS_ETMPFAIL, reason);
		break;
	case OP_DENIED:
		put_status(c, to, x, BIN_STATUS_AUTH_ERROR, reason);
		break;
	case OP_UNKNOWN:
	default:
		put_status(c, to, x, BIN_STATUS_UNKNOWN_COMMAND, NULL);
		break;
	}
}

static size_t bin_stored(struct conn *c, const struct rctx *x, uint64_t cas, char *buf)
{
	if (x->quiet)
		return 0;
	bin_header_encode((unsigned char *)buf, x->opcode, BIN_STATUS_SUCCESS, 0, 0, 0,
			  x->opaque, cas);
	return BIN_HEADER_LEN;
}

static int with_key(const struct conn *c)
{
	const struct bin_opinfo *op = bin_op(c->rq.x.opcode);

	return op && op->withkey;
}

static void bin_value(struct conn *c, const struct proto_key *k, struct item *it)
{
	unsigned char hdr[BIN_HEADER_LEN + 4 + PROTO_KEY_MAX];
	size_t klen = with_key(c) ? k->raw_len : 0;

	bin_header_encode(hdr, c->rq.x.opcode, BIN_STATUS_SUCCESS, (uint16_t)klen, 4,
			  (uint32_t)(4 + klen + it->len), c->rq.x.opaque, it->id);
	hdr[24] = (unsigned char)(it->flags >> 24);
	hdr[25] = (unsigned char)(it->flags >> 16);
	hdr[26] = (unsigned char)(it->flags >> 8);
	hdr[27] = (unsigned char)it->flags;
	memcpy(hdr + 28, k->raw, klen);
	/* the body without the CRLF the text formats send after it */
	conn_add_item(c, hdr, 28 + klen, it, it->len);
}

static void bin_miss(struct conn *c, const struct proto_key *k)
{
	if (c->rq.x.quiet)
		return;
	if (with_key(c)) /* GETK: the key, no text (memcached's form) */
		put_response(c, conn_out(c), &c->rq.x, BIN_STATUS_KEY_ENOENT,
			     k->raw, k->raw_len, NULL, 0, 0);
	else
		put_status(c, conn_out(c), &c->rq.x, BIN_STATUS_KEY_ENOENT, NULL);
}

static void bin_get_end(struct conn *c)
{
	/* one key per request: its value or miss was the whole answer */
}

static void bin_stat(struct conn *c, const char *name, size_t nlen, const char *val,
		     size_t vlen)
{
	put_response(c, conn_out(c), &c->rq.x, BIN_STATUS_SUCCESS, name, nlen, val, vlen, 0);
}

static void bin_stats_end(struct conn *c)
{
	put_response(c, conn_out(c), &c->rq.x, BIN_STATUS_SUCCESS, NULL, 0, NULL, 0, 0);
}

/* Parses the request key; a reason when it is not a queue name (with get
 * options when opts). */
static const char *parse_key(struct conn *c, int opts)
{
	const char *why = proto_key_parse(c->bin.key, c->bin.keylen, &c->rq.key);

	if (!why && !opts && c->rq.key.len != c->rq.key.raw_len)
		why = "bad queue name"; /* options only make sense on a get */
	c->rq.keys = &c->rq.key;
	c->rq.nkeys = 1;
	return why;
}

/* Starts the set in c->rq (ops_set), then reads its value, or swallows
 * it when the set was refused. */
static void set_start(struct conn *c)
{
	struct item *body = ops_set(c);

	if (body)
		conn_read_body(c, body, 0);
	else
		conn_swallow(c, c->rq.bytes);
}

/* Runs one request whose extras and key are in c->bin. */
static void bin_run(struct conn *c)
{
	struct bin_req *b = &c->bin;
	struct request *r = &c->rq;
	const char *why;
	int rc, existed;

	if ((!c->authed || b->op->kind == BIN_K_SASL_LIST || b->op->kind == BIN_K_SASL_AUTH ||
	     b->op->kind == BIN_K_SASL_STEP) && front_auth_binary(c))
		return;
	switch (b->op->kind) {
	case BIN_K_GET:
		if ((why = parse_key(c, 1)) != NULL) {
			bin_reply(c, conn_out(c), &r->x, OP_CLIENT_ERROR, why, 0);
			return;
		}
		r->cmd = PROTO_CMD_GET;
		ops_get(c);
		return;
	case BIN_K_SET:
	case BIN_K_ADD:
		/* a set's only option: /delay=<n> (binary set's extras are
		 * fixed, so the delay rides on the key) */
		why = proto_set_key_parse(c->bin.key, c->bin.keylen, &c->rq.key);
		c->rq.keys = &c->rq.key;
		c->rq.nkeys = 1;
		if (!why && b->h.cas) {
			/* a compare-and-swap: nothing in a queue can be swapped */
			bin_reply(c, conn_out(c), &r->x, OP_REFUSED, proto_refusal(PROTO_CMD_CAS), 0);
			conn_swallow(c, b->vlen);
			return;
		}
		if (why) {
			bin_reply(c, conn_out(c), &r->x, OP_CLIENT_ERROR, why, 0);
			conn_swallow(c, b->vlen);
			return;
		}
		r->cmd = PROTO_CMD_SET;
		r->add = b->op->kind == BIN_K_ADD;
		r->flags = b->flags;
		r->exptime = b->exptime;
		r->bytes = b->vlen;
		set_start(c);
		return;
	case BIN_K_DELETE:
		if ((why = parse_key(c, 0)) != NULL) {
			bin_reply(c, conn_out(c), &r->x, OP_CLIENT_ERROR, why, 0);
			return;
		}
		rc = ops_delete(c, &r->key, &existed);
		if (rc == TERN_EACCES)
			return;
		if (rc)
			ops_fail(c, "delete failed", rc);
		else
			bin_reply(c, conn_out(c), &r->x, existed ? OP_DELETED : OP_NOT_FOUND, NULL, 0);
		return;
	case BIN_K_QUIT:
		bin_reply(c, conn_out(c), &r->x, OP_OK, NULL, 0);
		c->state = CONN_CLOSING;
		return;
	case BIN_K_FLUSH:
		ops_flush_all(c, OP_OK);
		return;
	case BIN_K_VERBOSITY:
		if (ops_verbosity(c, b->verbosity) == 0)
			bin_reply(c, conn_out(c), &r->x, OP_OK, NULL, 0);
		return;
	case BIN_K_NOOP:
		bin_reply(c, conn_out(c), &r->x, OP_OK, NULL, 0);
		return;
	case BIN_K_VERSION:
		put_response(c, conn_out(c), &r->x, BIN_STATUS_SUCCESS, NULL, 0, PROTO_VERSION,
			     sizeof(PROTO_VERSION) - 1, 0);
		return;
	case BIN_K_STAT: {
		struct proto_stats st;

		/* the key reads as the text protocol's stats arguments */
		why = proto_stats_parse(b->key, b->keylen, &st);
		if (why) {
			bin_reply(c, conn_out(c), &r->x,
				  st.kind == PROTO_STATS_GROUP ? OP_REFUSED : OP_CLIENT_ERROR, why, 0);
			return;
		}
		rc = ops_stats(c, &st);
		if (rc && rc != TERN_EACCES)
			bin_reply(c, conn_out(c), &r->x,
				  rc == TERN_ENOTFOUND ? OP_NOT_FOUND : OP_NO_MEMORY, NULL, 0);
		return;
	}
	case BIN_K_REFUSED:
	default:
		bin_reply(c, conn_out(c), &r->x, OP_REFUSED, bin_refusal(b->op), 0);
		conn_swallow(c, b->vlen);
		return;
	}
}

/* Reads one frame from in[0..avail) and runs it (struct front's parse). */
static size_t bin_parse(struct conn *c, const char *in, size_t avail)
{
	struct bin_req *b = &c->bin;
	struct request *r = &c->rq;
	uint16_t status;
	const char *reason;
	enum bin_verdict v;
	size_t need;

	if (avail < BIN_HEADER_LEN)
		return 0;
	v = bin_parse_header((const unsigned char *)in, b, &status, &reason);
	c->srv->stats.requests_binary++;
	memset(&r->x, 0, sizeof(r->x));
	r->x.fe = &front_binary;
	r->x.opcode = b->h.opcode;
	r->x.opaque = b->h.opaque;
	r->x.quiet = b->op ? b->op->quiet : 0;
	if (v == BIN_CLOSE) {
		/* the end of this frame is unknown: answer, then close */
		put_status(c, conn_out(c), &r->x, BIN_STATUS_EINVAL, reason);
		c->state = CONN_CLOSING;
		return 0;
	}
	if (v == BIN_REJECT) {
		put_status(c, conn_out(c), &r->x, status, reason);
		conn_swallow(c, b->h.bodylen);
		return BIN_HEADER_LEN;
	}
	need = BIN_HEADER_LEN + b->need;
	if (avail < need)
		return 0;
	/* Copied out, as a text line is: the key must outlive the input
	 * buffer's moves while a GET waits. */
	if (need > c->line_cap) {
		char *p = realloc(c->line, need);

		if (!p) {
			bin_reply(c, conn_out(c), &r->x, OP_NO_MEMORY, NULL, 0);
			conn_swallow(c, b->h.bodylen - b->need);
			return need;
		}
		c->line = p;
		c->line_cap = need;
	}
	memcpy(c->line, in, need);
	bin_parse_body(b, (const unsigned char *)c->line + BIN_HEADER_LEN);
	bin_run(c);
	if (b->op && (b->op->kind == BIN_K_SASL_AUTH || b->op->kind == BIN_K_SASL_STEP)) {
		/* the frame held a password: not left in the input buffer */
		explicit_bzero((char *)in, need);
		conn_wipe_input(c);
	}
	return need;
}

const struct front front_binary = {
	.name = "binary",
	.id = FRONT_BINARY,
	.parse = bin_parse,
	.body_done = ops_set_finish,
	.resume = ops_get_continue,
	/* a binary client shuts its side down when it abandons the connection
	 * (memjs on a timeout) and drops what still comes */
	.eof_gives_up = 1,
	.value = bin_value,
	.miss = bin_miss,
	.get_end = bin_get_end,
	.reply = bin_reply,
	.stored = bin_stored,
	.stat = bin_stat,
	.stats_end = bin_stats_end,
};
