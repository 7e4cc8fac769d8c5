/*
 * front_meta.c: memcached's meta protocol (protocol/meta.h) over the
 * queue operations, on the text protocol's line framing.  mg dequeues,
 * ms enqueues (mode S; E as add), md deletes a queue, mn answers MN; q
 * hides the answers that say all went well (HD) and a miss (EN, and NF
 * from md), never an error.
 */
#include "conn.h"
#include "front.h"
#include "ops.h"
#include "state.h"

#include <stdio.h>
#include <string.h>

static void put_code(struct conn *c, struct evbuffer *to, const struct rctx *x,
		     enum meta_code code, const struct meta_item *mi)
{
	char buf[META_REPLY_MAX];
	size_t n = meta_reply(buf, code, x->req, mi);

	conn_put(c, to, buf, n);
}

static void meta_reply_fn(struct conn *c, struct evbuffer *to, const struct rctx *x,
			  enum op_result r, const char *reason, uint64_t cas)
{
	struct meta_item mi = { 0, 0, cas, -1, 0 };

	if (front_lines_failure(c, to, r, reason))
		return; /* errors are answered, even with q */
	switch (r) {
	case OP_NOT_FOUND:
		if (!x->quiet)
			put_code(c, to, x, META_CODE_NF, NULL);
		break;
	case OP_NOT_STORED:
	case OP_EXISTS:
	case OP_TOO_LARGE:
		put_code(c, to, x, META_CODE_NS, &mi);
		break;
	case OP_STORED:
	case OP_DELETED:
	default:
		if (!x->quiet)
			put_code(c, to, x, META_CODE_HD, &mi);
		break;
	}
}

static size_t meta_stored(struct conn *c, const struct rctx *x, uint64_t cas, char *buf)
{
	struct meta_item mi = { 0, 0, cas, -1, 0 };

	return x->quiet ? 0 : meta_reply(buf, META_CODE_HD, x->req, &mi);
}

/* Seconds left before it expires (rounded up), or -1 when it never does. */
static int64_t ttl_left(const struct item *it)
{
	int64_t left;

	if (!it->expiry_ms)
		return -1;
	left = it->expiry_ms - tern_now_ms();
	return left > 0 ? (left + 999) / 1000 : 0;
}

static void meta_value(struct conn *c, const struct proto_key *k, struct item *it)
{
	const struct meta_req *m = c->rq.x.req;
	struct meta_item mi = { it->flags, it->len, it->id, -1, it->deliveries };
	char hdr[META_REPLY_MAX];
	size_t n;

	if (m && (m->seen & META_F_TTL))
		mi.ttl = ttl_left(it);
	if (m && (m->seen & META_F_VALUE)) {
		n = meta_reply(hdr, META_CODE_VA, m, &mi);
		conn_add_item(c, hdr, n, it, (size_t)it->len + 2);
	} else {
		/* no v: the item is taken all the same, as mg without v would
		 * touch it in memcached; only the flags go back */
		n = meta_reply(hdr, META_CODE_HD, m, &mi);
		conn_add(c, hdr, n);
	}
}

static void meta_miss(struct conn *c, const struct proto_key *k)
{
	if (!c->rq.x.quiet)
		put_code(c, conn_out(c), &c->rq.x, META_CODE_EN, NULL);
}

static void meta_get_end(struct conn *c)
{
	/* one key per mg: its VA, HD or EN was the whole answer */
}

const struct front front_meta = {
	.name = "meta",
	.id = FRONT_META,
	.value = meta_value,
	.miss = meta_miss,
	.get_end = meta_get_end,
	.reply = meta_reply_fn,
	.stored = meta_stored,
	.stat = front_lines_stat,
	.stats_end = front_lines_stats_end,
};

void front_meta_request(struct conn *c, const char *line, size_t len)
{
	struct meta_req *m = &c->meta;
	struct request *r = &c->rq;
	const char *reason = NULL;
	uint64_t swallow = 0;
	enum proto_status st = meta_parse(line, len, m, &reason, &swallow);
	int rc, existed;

	c->srv->stats.requests_meta++;
	memset(&r->x, 0, sizeof(r->x));
	r->x.fe = &front_meta;
	if (st == PROTO_ERROR) {
		meta_reply_fn(c, conn_out(c), &r->x, OP_UNKNOWN, NULL, 0);
		return;
	}
	if (st == PROTO_CLIENT_ERROR) {
		meta_reply_fn(c, conn_out(c), &r->x, OP_CLIENT_ERROR, reason, 0);
		conn_swallow(c, swallow);
		return;
	}
	r->x.quiet = (m->seen & META_F_QUIET) != 0;
	r->x.req = m;
	switch (m->cmd) {
	case META_MN:
		put_code(c, conn_out(c), &r->x, META_CODE_MN, NULL);
		return;
	case META_MG:
		r->cmd = (m->seen & META_F_CAS) ? PROTO_CMD_GETS : PROTO_CMD_GET;
		r->key = m->key;
		r->keys = &r->key;
		r->nkeys = 1;
		ops_get(c);
		return;
	case META_MS:
		r->cmd = PROTO_CMD_SET;
		r->add = m->add;
		r->key = m->key;
		r->keys = &r->key;
		r->nkeys = 1;
		r->flags = m->client_flags;
		r->exptime = m->exptime;
		r->key.delay_ms = m->delay_ms;
		r->bytes = m->bytes;
		front_lines_set(c);
		return;
	case META_MD:
		rc = ops_delete(c, &m->key, &existed);
		if (rc == TERN_EACCES)
			return;
		if (rc)
			ops_fail(c, "delete failed", rc);
		else
			meta_reply_fn(c, conn_out(c), &r->x, existed ? OP_DELETED : OP_NOT_FOUND,
				      NULL, 0);
		return;
	default:
		meta_reply_fn(c, conn_out(c), &r->x, OP_REFUSED, meta_refusal(m->cmd), 0);
		return;
	}
}
