/*
 * conn.c: one client connection: input, the state machine, output, and
 * the bookkeeping that keeps replies in order and items from being lost
 * (front.h shows how conn.c, the wire formats and ops.c fit).
 *
 * Replies behind a set that waits for the journal go into that set's pend
 * buffer and follow its STORED out, so replies stay in request order while
 * parsing goes on (group commit).  An item a plain get hands out is held
 * (QUEUE_POP_HOLD) until its reply has left: written to a live socket, it
 * is settled as delivered; if the connection dies first it goes back to
 * the head of its queue.  After the peer has closed its side, written is
 * not enough (a peer that closed completely answers data with a reset):
 * such items are settled when the peer has acknowledged every byte, or
 * returned when it reset the connection (conn_settle).
 */
#include "conn.h"
#include "front.h"
#include "ops.h"
#include "state.h"
#include "tls.h"
#include "../lib/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

/* A set whose reply waits for the journal, and the replies queued behind
 * it.  The success reply is encoded when the set is queued: into ok when it
 * fits (most do: a buffer chain per set would cost an allocation), else at
 * the front of `after`; a failure replaces it. */
struct pend {
	uint64_t ticket;
	uint64_t lo;         /* the set's lowest ticket (a fanout's or an
				alias's copies each have one) */
	int err;             /* a ticket in [lo, ticket) failed: the reply
				is an error, whatever ticket's report says */
	uint64_t seq;        /* c->pend_seq when pushed */
	struct rctx x;       /* x.req is NULL */
	uint16_t ok_len;     /* the success reply's length */
	uint8_t ok_in_after; /* ... which is at the front of after, not in ok */
	char ok[32];
	struct evbuffer *after;
};

/* An item taken with QUEUE_POP_HOLD whose reply is on its way. */
struct held {
	struct item *it;
	uint64_t pend_seq;   /* its reply sits behind this pend (0: none) */
};

/*
 * Requests parsed from one connection before its turn ends and the loop
 * pass completes (journal write, replies sent), the rest of its input
 * following in the next pass.  A turn costs a journal write and a reply
 * write, and on loopback the reply write, which also runs the peer's
 * receive path and wakes it, is the dearest system call of a request: so
 * a turn takes a whole read burst of a client pipelining 16 deep (one
 * write for all its replies, as memcached's reqs_per_event), and the limit
 * only keeps one client's backlog from holding the loop while others
 * wait.  A turn also ends after TURN_BYTES of requests and replies: a client
 * pipelining large values then has the first replies while the loop
 * copies and writes the rest, and sends more meanwhile, so the loop finds
 * the next requests waiting more often where it would sleep through the
 * client's turnaround (each sleep a halted vCPU to kick, in a VM).  Sets
 * that wait for a sync count towards neither limit (conn_defer).
 */
#ifndef REQS_PER_TURN
#define REQS_PER_TURN 16
#endif
#define TURN_BYTES (32u << 10)
#define TURN_BYTES_REQS 4 /* ... once it has taken this many requests */

/* Most sets one connection may have waiting for the journal before the
 * server stops parsing its input (bounds held reply buffers). */
#define MAX_PENDING 4096
/* Stop reading a socket once this much unparsed input is buffered. */
#define INPUT_HIGH_WATER (256 * 1024)
/*
 * The input buffer starts at IBUF_MIN and doubles whenever a read fills it
 * (the client had more to send), up to IBUF_MAX.  It halves again when a
 * whole window of IBUF_WINDOW reads never used a quarter of it (the
 * client's bursts have become small).  So a connection holds about what
 * its bursts need, a pipelining client room for its pipeline and a quiet
 * one IBUF_MIN, and a client whose bursts vary within a window does not
 * make the buffer shrink and grow back and forth.  The request-line buffer
 * starts at LINE_MIN and grows to the longest line seen; it goes back to
 * LINE_MIN with the input buffer.
 */
#define IBUF_MIN 2048u
#define IBUF_MAX (INPUT_HIGH_WATER + 16384u)
#define IBUF_WINDOW 256u
/* The rest of a set's body of at least BODY_DIRECT bytes is read straight
 * into its item once nothing else is buffered (read_body_direct), with at
 * most BODY_DIRECT_NEXT of what follows it into the input buffer. */
#define BODY_DIRECT (16u << 10)
#define BODY_DIRECT_NEXT 4096u
#define LINE_MIN 256u
/* Bodies up to this size are copied into the reply; larger ones are sent
 * by reference.  A reference costs two buffer-chain allocations (one for
 * the reference, one for whatever follows it, since a reference chain
 * cannot be appended to), more than copying a small body. */
#define COPY_BODY_MAX 2048
/* conn_settle: how often and how long to wait for a half-closed peer to
 * acknowledge (or reset) the replies that carried held items. */
#define SETTLE_POLL_MS 2
#define SETTLE_MAX_MS 10000

static void conn_process(struct conn *c);
static int conn_flush(struct conn *c);

/* ---- output ----
 *
 * A connection's replies go out in the order they were made: first the
 * bytes in c->out (an evbuffer), then c->stage[0..stage_len).  While c->out
 * is empty (out_ev clear), replies of a plain TCP or Unix connection (TLS
 * encrypts from c->out) are copied into the stage, a flat
 * STAGE_SIZE block taken with the first reply and given back once it is
 * sent or moved, and conn_flush sends it with one send(2).  A reply that
 * does not fit, a body sent by reference, what queued behind a pending set
 * and what the socket did not take move the stage to the end of c->out
 * first (out_spill), and c->out then takes every byte until it is written
 * out.  In the common pass (a turn's replies, all taken by the socket) a
 * reply costs a memcpy and the turn one send(2), without libevent's chain
 * adds, reservations, writes and drains (docs/DESIGN.md, "Why the server
 * is shaped so": replies are staged).  out_ev records that c->out may
 * hold bytes, so that a reply does not ask libevent for its length.
 */
/* A turn's replies (TURN_BYTES, and the reply of the request that ends the
 * turn, whose body is at most COPY_BODY_MAX when it is copied) */
#define STAGE_SIZE (TURN_BYTES + COPY_BODY_MAX + 2048u)

struct evbuffer *conn_out(struct conn *c)
{
	if (c->npend)
		return c->pend[(c->pend_head + c->npend - 1) % c->pend_cap].after;
	return c->out;
}

size_t conn_out_len(const struct conn *c)
{
	return c->stage_len + (c->out_ev ? evbuffer_get_length(c->out) : 0);
}

/* Gives the (empty) stage back: a connection holds one only while its
 * replies are being made and sent, not while it waits for its peer. */
static void stage_free(struct conn *c)
{
	if (c->stage) {
		tern_block_free(c->stage, STAGE_SIZE);
		c->stage = NULL;
	}
}

/* Moves the staged bytes from the stage's byte off to the end of c->out,
 * which takes the next ones. */
static void out_spill(struct conn *c, size_t off)
{
	if (c->stage_len > off)
		evbuffer_add(c->out, c->stage + off, c->stage_len - off);
	c->stage_len = 0;
	c->out_ev = 1;
	stage_free(c);
}

/* Stages a (alen bytes) then b (blen) behind what c sends; 0 when they
 * go to c->out instead: it holds bytes, they do not fit, no stage, or a
 * TLS connection (tls_write encrypts from c->out, so a stage would only
 * add a copy). */
static int stage_put(struct conn *c, const void *a, size_t alen, const void *b, size_t blen)
{
	if (c->out_ev || c->tls || alen + blen > STAGE_SIZE - c->stage_len ||
	    (!c->stage && !(c->stage = tern_block_alloc(STAGE_SIZE))))
		return 0;
	memcpy(c->stage + c->stage_len, a, alen);
	if (blen)
		memcpy(c->stage + c->stage_len + alen, b, blen);
	c->stage_len += (uint32_t)(alen + blen);
	return 1;
}

/* Appends len bytes to what c sends (not behind a pending set). */
static void out_add(struct conn *c, const void *data, size_t len)
{
	if (stage_put(c, data, len, NULL, 0))
		return;
	out_spill(c, 0);
	evbuffer_add(c->out, data, len);
}

void conn_put(struct conn *c, struct evbuffer *to, const void *data, size_t len)
{
	if (to == c->out)
		out_add(c, data, len);
	else
		evbuffer_add(to, data, len);
	c->srv->stats.bytes_written += len;
}

void conn_add(struct conn *c, const void *data, size_t len)
{
	conn_put(c, conn_out(c), data, len);
}

static void unref_cleanup(const void *data, size_t len, void *arg)
{
	item_unref(arg);
}

void conn_add_item(struct conn *c, const void *hdr, size_t hlen, struct item *it,
		   size_t body_len)
{
	struct evbuffer *out = conn_out(c);

	c->srv->stats.bytes_written += hlen + body_len;
	if (out == c->out) {
		if (body_len <= COPY_BODY_MAX && stage_put(c, hdr, hlen, it->data, body_len))
			return;
		out_spill(c, 0);
	}
	if (body_len <= COPY_BODY_MAX) {
		struct evbuffer_iovec v;
		size_t total = hlen + body_len;

		/* header and body in one reservation: one callback run */
		if (evbuffer_reserve_space(out, (ev_ssize_t)total, &v, 1) == 1 &&
		    v.iov_len >= total) {
			memcpy(v.iov_base, hdr, hlen);
			memcpy((char *)v.iov_base + hlen, it->data, body_len);
			v.iov_len = total;
			evbuffer_commit_space(out, &v, 1);
		} else {
			evbuffer_add(out, hdr, hlen);
			evbuffer_add(out, it->data, body_len);
		}
	} else {
		evbuffer_add(out, hdr, hlen);
		evbuffer_add_reference(out, it->data, body_len, unref_cleanup, item_ref(it));
	}
}

/*
 * Doubles a ring of n elements of size elem that starts at *head in ring
 * (cap *cap; 16 when empty), unwrapping it: returns the new array (the old
 * one is freed, *head is 0, *cap doubled), or NULL with nothing changed.
 * The rings grow to what a connection's pipeline needs, then stay.
 */
static void *ring_grow(void *ring, unsigned *head, unsigned n, unsigned *cap, size_t elem)
{
	unsigned ncap = *cap ? *cap * 2 : 16, i;
	char *nb = malloc((size_t)ncap * elem);

	if (!nb)
		return NULL;
	for (i = 0; i < n; i++)
		memcpy(nb + (size_t)i * elem, (char *)ring + (size_t)((*head + i) % *cap) * elem, elem);
	free(ring);
	*head = 0;
	*cap = ncap;
	return nb;
}

/* ---- held items ---- */

void conn_hold(struct conn *c, struct item *it)
{
	struct held *h;

	if (c->nheld == c->held_cap) {
		struct held *n = ring_grow(c->held, &c->held_head, c->nheld, &c->held_cap,
					   sizeof(*n));

		if (!n) {
			/* Cannot track it: count it delivered now, as a plain
			 * get did before items were held. */
			queue_settle(it, 1);
			item_unref(it);
			return;
		}
		c->held = n;
	}
	h = &c->held[(c->held_head + c->nheld) % c->held_cap];
	h->it = it;
	h->pend_seq = c->npend ? c->pend_seq : 0;
	c->nheld++;
}

/* Settles as delivered every held item whose reply is in c->out (not
 * behind a pending set); called once c->out has been written out. */
static void held_delivered(struct conn *c)
{
	while (c->nheld) {
		struct held *h = &c->held[c->held_head];

		if (h->pend_seq > c->pend_done)
			break;
		queue_settle(h->it, 1);
		item_unref(h->it);
		c->held_head = (c->held_head + 1) % c->held_cap;
		c->nheld--;
	}
}

/* Returns every held item to its queue, newest first so that each queue
 * gets them back in their order. */
static void held_return(struct conn *c)
{
	while (c->nheld) {
		struct held *h = &c->held[(c->held_head + c->nheld - 1) % c->held_cap];

		c->nheld--;
		queue_settle(h->it, 0);
		item_unref(h->it);
	}
}

/* ---- pending sets (sync before reply) ---- */

static struct evbuffer *spare_buf(struct server *s)
{
	if (s->nspare)
		return s->spare_bufs[--s->nspare];
	return evbuffer_new();
}

static void release_buf(struct server *s, struct evbuffer *b)
{
	struct evbuffer **a;

	evbuffer_drain(b, evbuffer_get_length(b));
	/* the array only grows (doubling, to 1024): no allocation per set */
	if (s->nspare == s->spare_cap && s->spare_cap < 1024) {
		unsigned cap = s->spare_cap ? s->spare_cap * 2 : 16;

		a = realloc(s->spare_bufs, cap * sizeof(*a));
		if (a) {
			s->spare_bufs = a;
			s->spare_cap = cap;
		}
	}
	if (s->nspare < s->spare_cap) {
		s->spare_bufs[s->nspare++] = b;
		return;
	}
	evbuffer_free(b);
}

/* conn_defer and conn_defer_reply: r's reply (OP_STORED: with cas) is
 * encoded now and held until ticket resolves. */
static int defer(struct conn *c, uint64_t lo, uint64_t ticket, enum op_result r,
		 uint64_t cas, int waits)
{
	struct server *s = c->srv;
	struct pend *p;

	if (waits) {
		/* A set whose reply waits for a sync does not use up the turn:
		 * ending the pass early would not send it sooner, only split
		 * the sync group. */
		if (c->turn) {
			uint64_t moved = server_moved(s);

			c->turn--;
			c->turn_from = moved - c->turn_from > c->rq.bytes ? c->turn_from + c->rq.bytes
									  : moved;
		}
		if (!c->npend)
			jenv_note_waiter(s->env);
	}

	if (c->npend == c->pend_cap) {
		struct pend *n = ring_grow(c->pend, &c->pend_head, c->npend, &c->pend_cap,
					   sizeof(*n));

		if (!n)
			return TERN_ENOMEM;
		c->pend = n;
	}
	p = &c->pend[(c->pend_head + c->npend) % c->pend_cap];
	p->after = spare_buf(s);
	if (!p->after)
		return TERN_ENOMEM;
	p->ticket = ticket;
	p->lo = lo && lo < ticket ? lo : ticket;
	p->err = 0;
	p->seq = ++c->pend_seq;
	p->x = c->rq.x;
	p->x.req = NULL;
	if (r != OP_STORED) {
		size_t n0 = evbuffer_get_length(p->after), n;

		/* (conn_put counts the bytes) */
		c->rq.x.fe->reply(c, p->after, &c->rq.x, r, NULL, cas);
		n = evbuffer_get_length(p->after) - n0;
		p->ok_len = (uint16_t)n;
		p->ok_in_after = 1;
	} else {
		char ok[META_REPLY_MAX];
		size_t n = c->rq.x.fe->stored(c, &c->rq.x, cas, ok);

		p->ok_len = (uint16_t)n;
		p->ok_in_after = n > sizeof(p->ok);
		if (p->ok_in_after)
			evbuffer_add(p->after, ok, n);
		else
			memcpy(p->ok, ok, n);
		s->stats.bytes_written += n;
	}
	c->npend++;
	if (!c->in_pending_list) {
		c->pnext = s->pending_conns;
		c->pprev = NULL;
		if (s->pending_conns)
			s->pending_conns->pprev = c;
		s->pending_conns = c;
		c->in_pending_list = 1;
	}
	return 0;
}

int conn_defer(struct conn *c, uint64_t lo, uint64_t ticket, uint64_t cas, int waits)
{
	return defer(c, lo, ticket, OP_STORED, cas, waits);
}

int conn_defer_reply(struct conn *c, uint64_t ticket, enum op_result r)
{
	return defer(c, ticket, ticket, r, 0, 0);
}

static void pending_unlink(struct conn *c)
{
	struct server *s = c->srv;

	if (!c->in_pending_list)
		return;
	if (c->pprev)
		c->pprev->pnext = c->pnext;
	else
		s->pending_conns = c->pnext;
	if (c->pnext)
		c->pnext->pprev = c->pprev;
	c->in_pending_list = 0;
}

/* Resolves c's pending sets with ticket <= upto: their replies go out, in
 * order, followed by whatever was queued behind each. */
static void conn_resolve(struct conn *c, uint64_t upto, int err)
{
	struct server *s = c->srv;

	while (c->npend && c->pend[c->pend_head].ticket <= upto) {
		struct pend *p = &c->pend[c->pend_head];
		int e = err ? err : p->err;

		if (e) {
			char why[160];

			/* the success reply encoded ahead is replaced */
			if (p->ok_in_after)
				evbuffer_drain(p->after, p->ok_len);
			s->stats.bytes_written -= p->ok_len;
			snprintf(why, sizeof(why), "journal write failed: %s", tern_strerror(e));
			p->x.fe->reply(c, c->out, &p->x, OP_SERVER_ERROR, why, 0);
		} else if (!p->ok_in_after && p->ok_len) {
			out_add(c, p->ok, p->ok_len);
		}
		if (evbuffer_get_length(p->after)) {
			out_spill(c, 0);
			evbuffer_add_buffer(c->out, p->after);
		}
		release_buf(s, p->after);
		p->after = NULL;
		c->pend_done = p->seq;
		c->pend_head = (c->pend_head + 1) % c->pend_cap;
		c->npend--;
	}
	/* A failed ticket may be one of a later set's copies (a fanout
	 * child's, an alias destination's): that set fails too, though its
	 * highest ticket may succeed.  (It may also be another set's that
	 * only falls in its range: answered an error while durable, its
	 * client's retry can duplicate it, never lose it.) */
	for (unsigned i = 0; err && i < c->npend; i++) {
		struct pend *p = &c->pend[(c->pend_head + i) % c->pend_cap];

		if (p->lo <= upto && !p->err)
			p->err = err;
	}
	if (!c->npend)
		pending_unlink(c);
	/* Send now: the client can work on these replies while the rest of
	 * its input (a turn ended early, see REQS_PER_TURN) is parsed.  Run
	 * the connection from the loop when more may follow: parsing may
	 * resume (backpressure, a turn), or it may close. */
	if (!c->read_paused && !c->auth_held && c->state != CONN_CLOSING && !c->dead &&
	    conn_flush(c) == 0 && c->itail == c->ihead)
		return;
	event_active(c->resume_ev, EV_WRITE, 0);
}

void conn_durable(struct server *s, uint64_t upto, int err)
{
	struct conn *c, *next;

	for (c = s->pending_conns; c; c = next) {
		next = c->pnext;
		conn_resolve(c, upto, err);
	}
}

/* ---- input ---- */

void conn_update_read(struct conn *c)
{
	int want = !c->dead && !c->eof && c->state != CONN_CLOSING &&
		   !c->srv->shutting_down && !c->read_paused && !c->auth_held &&
		   c->itail - c->ihead < INPUT_HIGH_WATER;

	if (c->tls && !c->dead) {
		/* a write waiting for the peer's record reads the socket
		 * whatever the input's state */
		want = want || tls_wants_read(c->tls);
		/* decrypted input no socket event will announce */
		if (want && tls_pending(c->tls))
			event_active(c->rev, EV_READ, 0);
	}
	if (want && !c->reading) {
		struct timeval tv = { (time_t)c->srv->cfg.idle_timeout_s, 0 };

		event_add(c->rev, c->srv->cfg.idle_timeout_s ? &tv : NULL);
		c->reading = 1;
	} else if (!want && c->reading) {
		event_del(c->rev);
		c->reading = 0;
	}
}

/* Bytes of the body being read that are still to come (its trailer too). */
static size_t body_left(const struct conn *c)
{
	return (size_t)c->body->len + c->rq.trailer - c->body_got;
}

/* A read that returned n <= 0: the peer closed its side (what it sent is
 * answered, waits run to their end, then the connection closes; a binary
 * peer's wait ends now: conn_gave_up), an error, or nothing yet. */
static void read_nothing(struct conn *c, ssize_t n)
{
	if (n == 0) {
		c->eof = 1;
		if (conn_gave_up(c))
			conn_wait_cancel(c);
	} else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
		c->dead = 1;
	}
}

/* Whether the rest of the body being read goes straight into its item:
 * a large one, with nothing else buffered (not through TLS). */
static int body_direct(const struct conn *c)
{
	return c->state == CONN_BODY && c->body->len >= BODY_DIRECT && !c->tls &&
	       c->ihead == c->itail;
}

/*
 * Reads the rest of a large body straight into its item and what the
 * socket has after it (the next request's start, at most BODY_DIRECT_NEXT)
 * into the empty input buffer, in one readv(2): the body is not copied
 * through the input buffer, as memcached reads a large value into its item.
 * With only the next request's start behind it, a client sending large
 * sets back to back has most of every body read this way (on_readable
 * reads no more than the next request's start after a large set either).
 * Sets c->read_full when the read filled both, so the socket may hold more
 * (conn_run reads on).
 */
static void read_body_direct(struct conn *c)
{
	size_t want = body_left(c), into;
	struct iovec iov[2];
	ssize_t n;

	c->ihead = c->itail = 0;
	iov[0].iov_base = c->body->data + c->body_got;
	iov[0].iov_len = want;
	iov[1].iov_base = c->ibuf;
	iov[1].iov_len = c->icap < BODY_DIRECT_NEXT ? c->icap : BODY_DIRECT_NEXT;
	n = readv(c->fd, iov, 2);
	c->read_full = n > 0 && (size_t)n == want + iov[1].iov_len;
	if (n <= 0) {
		read_nothing(c, n);
		return;
	}
	into = (size_t)n < want ? (size_t)n : want;
	c->body_got += (uint32_t)into;
	c->srv->stats.bytes_read += into;
	c->srv->stats.body_direct_bytes += into;
	c->itail = (size_t)n - into;
}

void conn_read_body(struct conn *c, struct item *body, uint8_t trailer)
{
	c->body = body;
	c->body_got = 0;
	c->large_bodies = body->len >= BODY_DIRECT;
	c->rq.trailer = trailer;
	c->state = CONN_BODY;
}

void conn_swallow(struct conn *c, uint64_t n)
{
	c->swallow = n;
	c->state = n ? CONN_SWALLOW : CONN_REQUEST;
}

void conn_wipe_input(struct conn *c)
{
	explicit_bzero(c->ibuf, c->ihead);
	explicit_bzero(c->ibuf + c->itail, c->icap - c->itail);
}

int conn_keys_reserve(struct conn *c, unsigned n)
{
	struct proto_key *k;

	if (n <= c->keys_cap)
		return 0;
	k = realloc(c->keys, n * sizeof(*k));
	if (!k)
		return TERN_ENOMEM;
	c->keys = k;
	c->keys_cap = n;
	return 0;
}

/* The whole body (and trailer) of the current set is in: its wire format
 * takes it. */
static void body_done(struct conn *c)
{
	struct item *it = c->body;

	c->body = NULL;
	c->state = CONN_REQUEST;
	c->fe->body_done(c, it);
}

/* ---- waits ---- */

static void on_wait_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	queue_unwait(&c->waiter);
	c->wait_end(c, NULL);
	conn_process(c);
}

static void waiter_served(struct qwaiter *w, struct item *it)
{
	struct conn *c = (struct conn *)((char *)w - offsetof(struct conn, waiter));

	evtimer_del(c->wait_timer);
	c->wait_end(c, it);
	/* Not re-entered from inside the queue: resume from the loop. */
	conn_resume(c);
}

void conn_wait_cancel(struct conn *c)
{
	if (c->state != CONN_WAIT)
		return;
	queue_unwait(&c->waiter);
	evtimer_del(c->wait_timer);
	c->wait_end(c, NULL);
}

int conn_gave_up(const struct conn *c)
{
	return c->eof && c->rq.x.fe && c->rq.x.fe->eof_gives_up;
}

void conn_wait(struct conn *c, struct queue *q, enum queue_pop_mode mode, int64_t ms,
	       void (*end)(struct conn *c, struct item *it))
{
	struct timeval tv;

	c->wait_end = end;
	c->waiter.mode = mode;
	c->waiter.conn_id = c->id;
	c->waiter.serve = waiter_served;
	queue_wait(q, &c->waiter);
	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	evtimer_add(c->wait_timer, &tv);
	c->state = CONN_WAIT;
}

/* ---- the state machine ---- */

static int output_full(struct conn *c)
{
	return conn_out_len(c) > c->srv->cfg.output_high_water ||
	       c->npend >= MAX_PENDING;
}

/*
 * Writes what is queued, straight away (as memcached does): the write
 * event is registered only when the socket cannot take it all, so a
 * request/reply pass costs one read and one write system call.  Once
 * everything is sent, the items whose replies were in it are delivered
 * (for a peer that has not closed its side; conn_settle handles the
 * others).  Returns -1 when the socket failed (the connection is marked
 * dead).
 */
static int conn_flush(struct conn *c)
{
	if (c->stage_len) { /* (so c->out is empty, and c is not TLS) */
		ssize_t n;

		do
			n = send(c->fd, c->stage, c->stage_len, MSG_NOSIGNAL);
		while (n < 0 && errno == EINTR);
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
			c->dead = 1;
			return -1;
		}
		if (n < (ssize_t)c->stage_len) {
			/* the rest waits in c->out for the socket */
			out_spill(c, n > 0 ? (size_t)n : 0);
			goto wait_writable;
		}
		c->stage_len = 0;
	}
	while (c->out_ev && evbuffer_get_length(c->out)) {
		ssize_t n = c->tls ? tls_write(c->tls, c->out) : evbuffer_write(c->out, c->fd);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				goto wait_writable;
			c->dead = 1;
			return -1;
		}
	}
	c->out_ev = 0;
	stage_free(c);
	/* (kept for a TLS read that waits for the socket to drain) */
	if (c->writing && !(c->tls && tls_wants_write(c->tls))) {
		event_del(c->wev);
		c->writing = 0;
	}
	if (c->nheld && !c->eof)
		held_delivered(c);
	return 0;

wait_writable:
	/* (a TLS write may wait for a read: the read event, kept by
	 * conn_update_read, resumes it) */
	if (!c->writing && !(c->tls && tls_wants_read(c->tls))) {
		event_add(c->wev, NULL);
		c->writing = 1;
	}
	return 0;
}

enum delivery { DELIVERED, LOST, UNKNOWN };

/* Whether the peer has taken every byte written to it (it acknowledged
 * them all), will not (it reset the connection), or has not said yet. */
static enum delivery peer_delivery(struct conn *c)
{
	struct tcp_info ti;
	socklen_t tl = sizeof(ti);
	int unacked = 0, soerr = 0;
	socklen_t sl = sizeof(soerr);

	if (c->unix_peer) {
		/* A Unix socket's send queue holds what the peer has not read
		 * yet; a peer that closed completely (POLLHUP) threw away what
		 * it had not read, so it tells nothing then. */
		struct pollfd pf = { c->fd, POLLOUT, 0 };

		if (ioctl(c->fd, SIOCOUTQ, &unacked) < 0 || poll(&pf, 1, 0) < 0 ||
		    (pf.revents & (POLLHUP | POLLERR)))
			return LOST;
		return unacked == 0 ? DELIVERED : UNKNOWN;
	}
	/* The send queue first: a reset empties it too, so the state read
	 * after it tells an acknowledged queue from a discarded one. */
	if (ioctl(c->fd, SIOCOUTQ, &unacked) < 0 ||
	    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr ||
	    getsockopt(c->fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) < 0 ||
	    ti.tcpi_state == TCP_CLOSE)
		return LOST;
	return unacked == 0 ? DELIVERED : UNKNOWN;
}

/*
 * A closing connection whose peer had closed its side still holds items:
 * decides them, or polls again in SETTLE_POLL_MS.  Returns 1 when c can be
 * freed (conn_free returns what is left to the queues).
 */
static int conn_settle(struct conn *c)
{
	struct timeval tv = { 0, SETTLE_POLL_MS * 1000 };
	enum delivery d;

	if (!c->nheld)
		return 1;
	d = peer_delivery(c);
	if (d == DELIVERED) {
		held_delivered(c);
		return 1;
	}
	if (d == LOST)
		return 1;
	if (!c->settle_deadline_ms)
		c->settle_deadline_ms = tern_mono_ms() + SETTLE_MAX_MS;
	else if (tern_mono_ms() >= c->settle_deadline_ms)
		return 1; /* never acknowledged: treated as not delivered */
	evtimer_add(c->settle_ev, &tv);
	return 0;
}

static void on_settle(evutil_socket_t fd, short what, void *arg)
{
	conn_process(arg);
}

/*
 * Parses and runs requests from the input buffer until it runs dry, the
 * connection must wait, or its output is above the high mark.  When the
 * input runs dry in the middle of a request and the peer has closed its
 * side, the rest will never come: the request is dropped and the
 * connection closes once everything due is sent.
 */
static void conn_run(struct conn *c)
{
	c->turn = 0;
	c->turn_from = server_moved(c->srv);
	for (;;) {
		size_t avail;
		char *in;

		if (c->ihead == c->itail)
			c->ihead = c->itail = 0; /* drained: start over at the front */
		avail = c->itail - c->ihead;
		in = c->ibuf + c->ihead;

		if (c->state == CONN_CLOSING || c->state == CONN_WAIT || c->auth_held)
			return;
		/* End the turn after REQS_PER_TURN requests or TURN_BYTES (see there) */
		if ((c->turn >= REQS_PER_TURN ||
		     (server_moved(c->srv) - c->turn_from >= TURN_BYTES &&
		      c->turn >= TURN_BYTES_REQS)) &&
		    c->state == CONN_REQUEST && avail) {
			c->yielded = 1;
			c->srv->stats.conn_yields++;
			return;
		}
		if (c->state == CONN_GET) {
			c->fe->resume(c);
			continue;
		}
		if (c->state == CONN_BODY && body_left(c) == 0) {
			/* read straight into the item, or an empty binary
			 * value: nothing to read */
			body_done(c);
			continue;
		}
		if (output_full(c)) {
			c->read_paused = 1; /* conn_process resumes below the mark */
			return;
		}
		if (avail == 0 && c->read_full && body_direct(c)) {
			/* the last read took all it could: the socket may
			 * have the rest of this body */
			read_body_direct(c);
			if (c->dead)
				return;
			continue;
		}
		if (avail == 0)
			goto need_more;
		switch (c->state) {
		case CONN_REQUEST: {
			size_t used;

			if (!c->fe) /* memcached's rule: the first byte decides */
				c->fe = (unsigned char)in[0] == BIN_MAGIC_REQ ? c->srv->binary_fe
									      : c->srv->text_fe;
			used = c->fe->parse(c, in, avail);
			if (c->state != CONN_BODY)
				c->large_bodies = 0;
			if (!used) {
				if (c->state == CONN_CLOSING)
					return;
				goto need_more;
			}
			c->ihead += used;
			c->srv->stats.bytes_read += used;
			c->turn++;
			c->reqs++;
			break;
		}
		case CONN_BODY: {
			size_t want = body_left(c);
			size_t n = avail < want ? avail : want;

			memcpy(c->body->data + c->body_got, in, n);
			c->ihead += n;
			c->body_got += (uint32_t)n;
			c->srv->stats.bytes_read += n;
			if (body_left(c) == 0)
				body_done(c);
			break;
		}
		case CONN_SWALLOW: {
			size_t n = avail < c->swallow ? avail : (size_t)c->swallow;

			c->ihead += n;
			c->srv->stats.bytes_read += n;
			c->swallow -= n;
			if (c->swallow == 0)
				c->state = CONN_REQUEST;
			break;
		}
		case CONN_SKIP_LINE: {
			const char *eol = memchr(in, '\n', avail);
			size_t n = eol ? (size_t)(eol - in) + 1 : avail;

			c->ihead += n;
			c->srv->stats.bytes_read += n;
			if (eol)
				c->state = CONN_REQUEST;
			break;
		}
		default:
			return;
		}
	}
need_more:
	if (c->eof)
		c->state = CONN_CLOSING;
}

/* ---- the request deadline ----
 *
 * A request a connection has started must be whole within
 * request_timeout of when it was first seen partial, else the connection
 * closes (guard.c has the other limits on clients).  The timer is
 * libevent's, on the monotonic clock.
 */

/*
 * Whether c is waiting for the rest of a request it has started: part of a
 * line or of a binary frame is buffered, or a body (a set's, or one being
 * discarded) or the rest of a bad line is still to come.  A get waiting
 * for an item (/t=), parsing stopped for backpressure, and input left for
 * the next turn are not partial requests.
 */
static int request_partial(const struct conn *c)
{
	if (c->read_paused)
		return 0; /* the server stopped reading, not the client */
	switch (c->state) {
	case CONN_BODY:
	case CONN_SWALLOW:
	case CONN_SKIP_LINE:
		return 1;
	case CONN_REQUEST:
		return c->itail != c->ihead;
	default:
		return 0;
	}
}

/* The request's deadline has passed: whatever was answered before it goes
 * out (unless the client is not reading either), and the connection
 * closes. */
static void on_request_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	c->req_armed = 0;
	if (!request_partial(c))
		return;
	/* one wording for every connection, so repeats fold in the log */
	log_info("closed a connection whose request was not finished within %u s",
		 c->req_timeout_s);
	log_debug("connection %u: request %llu unfinished (state %d, %zu bytes buffered)",
		  c->id, (unsigned long long)c->req_id, (int)c->state, c->itail - c->ihead);
	c->srv->stats.request_timeouts++;
	c->state = CONN_CLOSING;
	if (conn_out_len(c))
		c->dead = 1; /* replies it has not taken: closing would wait on them */
	conn_resume(c);
}

/* Arms, keeps or cancels c's request deadline after c has run (conn_process). */
static void request_check(struct conn *c)
{
	struct server *s = c->srv;
	struct timeval tv;
	uint64_t id;

	if (c->yielded)
		return; /* its input is parsed in the next loop pass */
	if (!s->cfg.request_timeout_s || !request_partial(c)) {
		if (c->req_armed) {
			evtimer_del(c->req_timer);
			c->req_armed = 0;
		}
		return;
	}
	/* A request is numbered by the lines (or frames) parsed before it:
	 * its body, read after its line, has its line's number. */
	id = c->state == CONN_REQUEST ? c->reqs : c->reqs - 1;
	if (c->req_armed && c->req_id == id)
		return;
	if (!c->req_timer) {
		/* once per connection: most connections never need it */
		c->req_timer = evtimer_new(s->base, on_request_timeout, c);
		if (!c->req_timer)
			return; /* tried again at the next check */
	}
	c->req_id = id;
	c->req_timeout_s = s->cfg.request_timeout_s;
	tv.tv_sec = (time_t)c->req_timeout_s;
	tv.tv_usec = 0;
	evtimer_add(c->req_timer, &tv);
	c->req_armed = 1;
}

/* ---- the handshake list (guard.c closes from it) ---- */

void conn_handshake_begin(struct conn *c)
{
	struct server *s = c->srv;

	if (c->in_hs)
		return;
	c->in_hs = 1;
	c->hs_since_ms = tern_mono_ms();
	c->hs_next = NULL;
	c->hs_prev = s->hs_tail;
	if (s->hs_tail)
		s->hs_tail->hs_next = c;
	else
		s->hs_head = c;
	s->hs_tail = c;
	s->nhs++;
	s->nhs_net += !c->unix_peer;
}

void conn_handshake_end(struct conn *c)
{
	struct server *s = c->srv;

	if (!c->in_hs)
		return;
	if (c->hs_prev)
		c->hs_prev->hs_next = c->hs_next;
	else
		s->hs_head = c->hs_next;
	if (c->hs_next)
		c->hs_next->hs_prev = c->hs_prev;
	else
		s->hs_tail = c->hs_prev;
	c->in_hs = 0;
	s->nhs--;
	s->nhs_net -= !c->unix_peer;
}

/* Runs the connection: parses what it can, sends what it has, and frees
 * it when it is finished.  The single entry point of every event. */
static void conn_process(struct conn *c)
{
	c->yielded = 0;
	if (!c->dead)
		conn_run(c);
	/* This connection's sets need not wait for the rest of the pass (the
	 * other connections) to be written and answered: their replies go
	 * out from conn_durable, with what the flush below would send. */
	jenv_end_early(c->srv->env);
	if (c->auth_held && !c->dead) {
		/* the answer to a failed login waits (guard_auth_failed):
		 * nothing is read, parsed or sent until its timer */
		if (c->writing) {
			event_del(c->wev);
			c->writing = 0;
		}
		conn_update_read(c);
		return;
	}
	if (!c->dead)
		conn_flush(c);
	/* output drained below the high mark: parse again */
	if (!c->dead && c->read_paused && !output_full(c)) {
		c->read_paused = 0;
		conn_run(c);
		if (!c->dead)
			conn_flush(c);
	}
	if (c->dead || (c->state == CONN_CLOSING && !c->npend &&
			conn_out_len(c) == 0 && conn_settle(c))) {
		conn_free(c);
		return;
	}
	/* The rest of the input after this loop pass's journal write (the
	 * pass event was activated first, so it runs first). */
	if (c->yielded && !c->read_paused)
		event_active(c->resume_ev, EV_WRITE, 0);
	if (c->in_hs && c->authed && c->reqs)
		conn_handshake_end(c);
	request_check(c);
	conn_update_read(c);
}

void conn_resume(struct conn *c)
{
	event_active(c->resume_ev, EV_WRITE, 0);
}

int conn_busy(const struct conn *c)
{
	return c->npend || conn_out_len(c);
}

/* Halves the (empty) input buffer, and once it is back at IBUF_MIN gives
 * back what the longest line and the largest get needed, when no request
 * holds their bytes. */
static void conn_shrink(struct conn *c)
{
	size_t ncap = c->icap / 2 > IBUF_MIN ? c->icap / 2 : IBUF_MIN;
	char *p;

	if (c->ihead != c->itail)
		return;
	if (ncap < c->icap && (p = realloc(c->ibuf, ncap)) != NULL) {
		c->ibuf = p;
		c->icap = ncap;
		c->ihead = c->itail = 0;
	}
	if (c->icap > IBUF_MIN || c->state != CONN_REQUEST)
		return;
	if (c->line_cap > LINE_MIN && (p = realloc(c->line, LINE_MIN)) != NULL) {
		c->line = p;
		c->line_cap = LINE_MIN;
	}
	if (c->keys_cap) {
		free(c->keys);
		c->keys = NULL;
		c->keys_cap = 0;
	}
}

/* The input buffer at twice its size (NULL when out of memory).  With
 * authentication on it may hold a login's block, so the old one is wiped
 * before it is freed rather than left to realloc. */
static char *grow_input(struct conn *c)
{
	char *nb;

	if (!c->srv->auth)
		return realloc(c->ibuf, c->icap * 2);
	nb = malloc(c->icap * 2);
	if (nb) {
		memcpy(nb, c->ibuf, c->itail);
		explicit_bzero(c->ibuf, c->icap);
		free(c->ibuf);
	}
	return nb;
}

/* Reads what the socket has into the connection's own input buffer: one
 * read(2), no FIONREAD, no allocation while the buffer has the size the
 * client's bursts need (an evbuffer allocated and freed a chain for every
 * read); a large body's rest goes straight into its item
 * (read_body_direct). */
static void on_readable(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	if (what & EV_TIMEOUT) {
		/* Idle timeout: only a connection with nothing in progress is
		 * idle; a waiting get or a held reply keeps it alive. */
		if (c->state == CONN_WAIT || c->npend || c->state == CONN_BODY ||
		    conn_out_len(c)) {
			event_del(c->rev);
			c->reading = 0; /* re-added with a fresh timeout */
			conn_update_read(c);
			return;
		}
		c->srv->stats.idle_timeouts++;
		conn_free(c);
		return;
	}
	if (what & EV_READ) {
		ssize_t n;
		size_t room;
		int capped;

		c->srv->reads++;
		if (c->srv->last_reader != c) {
			/* a second client: no set of the pass is synced on
			 * the loop (jenv_set_solo) */
			c->srv->last_reader = c;
			c->srv->reader_switched = 1;
			jenv_set_solo(c->srv->env, 0);
		}
		if (c->ibuf_halve) {
			c->ibuf_halve = 0;
			conn_shrink(c);
		}
		/* Unparsed bytes move to the front when the room behind them
		 * runs short. */
		if (c->ihead && c->icap - c->itail < c->icap / 4) {
			memmove(c->ibuf, c->ibuf + c->ihead, c->itail - c->ihead);
			c->itail -= c->ihead;
			c->ihead = 0;
		}
		if (body_direct(c)) {
			read_body_direct(c);
			conn_process(c);
			return;
		}
		room = c->icap - c->itail;
		/* after a large set, only the next request's start: its body
		 * (if large too) then comes straight into its item */
		capped = c->large_bodies && c->state == CONN_REQUEST &&
			 !c->tls && room > BODY_DIRECT_NEXT;
		if (capped)
			room = BODY_DIRECT_NEXT;
		if (room == 0) {
			n = -1;
			errno = EAGAIN; /* full: parsing must make room first */
		} else if (c->tls) {
			n = tls_read(c->tls, c->ibuf + c->itail, room);
			/* a handshake's read may wait for the socket to drain */
			if (n < 0 && errno == EAGAIN && tls_wants_write(c->tls) && !c->writing) {
				event_add(c->wev, NULL);
				c->writing = 1;
			}
		} else {
			n = read(c->fd, c->ibuf + c->itail, room);
		}
		c->read_full = n > 0 && (size_t)n == room;
		if (n > 0) {
			c->itail += (size_t)n;
			if ((size_t)n > c->ibuf_peak)
				c->ibuf_peak = (size_t)n;
			/* (a capped read that filled its room asks for no more
			 * buffer: the cap, not the buffer, was short) */
			if (!capped && (size_t)n == room && c->icap < IBUF_MAX) {
				/* The read filled the buffer and may have left more
				 * in the socket: double it for the next one (nothing
				 * points into it; conn_update_read stops reading
				 * before IBUF_MAX). */
				char *nb = grow_input(c);

				if (nb) {
					c->ibuf = nb;
					c->icap *= 2;
				}
				c->ibuf_reads = 0;
				c->ibuf_peak = 0;
			} else if (++c->ibuf_reads >= IBUF_WINDOW) {
				c->ibuf_halve = c->icap > IBUF_MIN && c->ibuf_peak < c->icap / 4;
				c->ibuf_reads = 0;
				c->ibuf_peak = 0;
			}
		} else {
			read_nothing(c, n);
		}
	}
	conn_process(c);
}

static void on_writable(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	if (c->tls && tls_wants_write(c->tls) && conn_out_len(c) == 0) {
		/* the socket drained for a TLS read (a handshake's reply) */
		on_readable(fd, EV_READ, c);
		return;
	}
	conn_process(c);
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
	conn_process(arg);
}

void conn_free(struct conn *c)
{
	struct server *s = c->srv;

	queue_unwait(&c->waiter);
	/* Held items first: an open item taken before them is aborted after,
	 * so it ends up ahead of them at the head. */
	held_return(c);
	if (c->opened)
		qreg_abort_conn(s->reg, c->id);
	while (c->npend) {
		release_buf(s, c->pend[c->pend_head].after);
		c->pend_head = (c->pend_head + 1) % c->pend_cap;
		c->npend--;
	}
	free(c->pend);
	free(c->held);
	pending_unlink(c);
	if (c->body && c->rq.auth) /* a login cut short: its password goes */
		memset(c->body->data, 0, c->body_got);
	item_unref(c->body);
	event_free(c->wait_timer);
	event_free(c->resume_ev);
	event_free(c->settle_ev);
	conn_handshake_end(c);
	if (c->req_timer)
		event_free(c->req_timer);
	if (c->auth_timer)
		event_free(c->auth_timer);
	event_free(c->rev);
	event_free(c->wev);
	free(c->ibuf);
	free(c->line);
	free(c->keys);
	free(c->auth_key);
	evbuffer_free(c->out);
	stage_free(c);
	tls_free(c->tls);
	evutil_closesocket(c->fd);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	s->nconns--;
	free(c);
}

/* Fills c->peer from the accepted address sa (salen bytes), or for a
 * Unix socket from the peer's credentials. */
static void peer_set(struct conn *c, const struct sockaddr *sa, int salen)
{
	struct conn_peer *p = &c->peer;

	if (c->unix_peer) {
		struct ucred cr;
		socklen_t len = sizeof(cr);

		if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0) {
			p->family = AF_UNIX;
			p->uid = (uint32_t)cr.uid;
		}
	} else if (sa && sa->sa_family == AF_INET && salen >= (int)sizeof(struct sockaddr_in)) {
		p->family = AF_INET;
		memcpy(p->addr, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else if (sa && sa->sa_family == AF_INET6 && salen >= (int)sizeof(struct sockaddr_in6)) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;

		if (IN6_IS_ADDR_V4MAPPED(a)) {
			p->family = AF_INET;
			memcpy(p->addr, a->s6_addr + 12, 4);
		} else {
			p->family = AF_INET6;
			memcpy(p->addr, a->s6_addr, 16);
		}
	}
}

const char *conn_peer_name(const struct conn *c, char *buf, size_t len)
{
	const struct conn_peer *p = &c->peer;

	if (p->family == AF_UNIX)
		snprintf(buf, len, "the unix socket (uid %u)", (unsigned)p->uid);
	else if ((p->family != AF_INET && p->family != AF_INET6) ||
		 !inet_ntop(p->family, p->addr, buf, (socklen_t)len))
		snprintf(buf, len, "%s", c->unix_peer ? "the unix socket" : "an unknown address");
	return buf;
}

void conn_accept(struct server *s, evutil_socket_t fd, const struct sockaddr *sa, int salen,
		 enum conn_kind kind)
{
	struct conn *c = calloc(1, sizeof(*c));
	int one = 1;

	if (!c) {
		evutil_closesocket(fd);
		return;
	}
	if (kind != CONN_UNIX)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	evutil_make_socket_nonblocking(fd);
	c->srv = s;
	c->fd = fd;
	c->unix_peer = kind == CONN_UNIX;
	peer_set(c, sa, salen);
	if (kind == CONN_TLS && !(c->tls = tls_new(s->tls_ctx, fd))) {
		evutil_closesocket(fd);
		free(c);
		return;
	}
	/* 0 means "not open" and QUEUE_NO_CONN "opened by id": never an id. */
	do
		c->id = ++s->next_id;
	while (c->id == 0 || c->id == QUEUE_NO_CONN);
	c->state = CONN_REQUEST;
	c->authed = s->auth == NULL;
	c->icap = IBUF_MIN;
	c->ibuf = malloc(c->icap);
	c->line_cap = LINE_MIN;
	c->line = malloc(c->line_cap);
	c->out = evbuffer_new();
	c->rev = event_new(s->base, fd, EV_READ | EV_PERSIST, on_readable, c);
	c->wev = event_new(s->base, fd, EV_WRITE | EV_PERSIST, on_writable, c);
	c->wait_timer = evtimer_new(s->base, on_wait_timeout, c);
	c->resume_ev = event_new(s->base, -1, 0, on_resume, c);
	c->settle_ev = evtimer_new(s->base, on_settle, c);
	if (!c->ibuf || !c->line || !c->out || !c->rev || !c->wev || !c->wait_timer ||
	    !c->resume_ev || !c->settle_ev) {
		free(c->ibuf);
		free(c->line);
		if (c->out)
			evbuffer_free(c->out);
		if (c->rev)
			event_free(c->rev);
		if (c->wev)
			event_free(c->wev);
		if (c->wait_timer)
			event_free(c->wait_timer);
		if (c->resume_ev)
			event_free(c->resume_ev);
		if (c->settle_ev)
			event_free(c->settle_ev);
		tls_free(c->tls);
		evutil_closesocket(fd);
		free(c);
		return;
	}
	conn_update_read(c);
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	s->nconns++;
	s->stats.total_connections++;
	conn_handshake_begin(c);
}
