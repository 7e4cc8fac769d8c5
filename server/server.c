/*
 * server.c: listener, connection state machine, commands, stats, signals.
 * See server.h for the design.
 */
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <unistd.h>

#include "../protocol/proto.h"

/*
 * Requests parsed from one connection before its turn ends and the loop
 * pass completes (journal write, replies sent), the rest of its input
 * following in the next pass.  A client that pipelines gets its first
 * replies while the server is still on the rest, so the two overlap
 * instead of taking turns: one pipelined client (tern-load -P 16) went from
 * ~120k to ~190k sets/s with 2 (measured: before, one read of 16 sets, one
 * journal write, one reply write, then idle while the client worked; 1
 * per turn was slower again, 3 about the same as 2).  Sets that wait for
 * a sync do not count (cmd_set_finish).
 */
#ifndef REQS_PER_TURN
#define REQS_PER_TURN 2
#endif
/*
 * A turn whose requests moved at least TURN_BIG_BYTES of bodies (sets
 * read, gets sent) goes on to REQS_PER_BIG_TURN requests: with 4 KiB
 * bodies the fixed cost of a pass (one journal write per batch, which on
 * ext4 costs 2.9 us per 4 KiB record written alone and 1.2 us in a batch
 * of 16; one reply write) outweighs the earlier replies.  Measured with
 * tern-load -s 4096 -P 16, interval, 3 runs each: 2 per turn 74-103k sets
 * / 106-117k gets per second, 4: 118-133k / 135-144k, 8: 100-120k /
 * 92-99k, 16: 115-133k / 70-74k.  512-byte bodies stay at 2 (4 per turn
 * cost them 20%).
 */
#ifndef REQS_PER_BIG_TURN
#define REQS_PER_BIG_TURN 4
#endif
#define TURN_BIG_BYTES 8192u
/*
 * Short turns buy overlap with a lone pipelining client at the price of a
 * journal write and a reply write per turn.  When another connection was
 * pipelining too (it used up a turn within the last SHARED_TURN_WINDOW
 * turns), the server is the busy side and the clients overlap with it
 * anyway, one connection's replies going out while the next is parsed: a
 * turn then runs to REQS_PER_SHARED_TURN.  Measured with one producer and
 * one consumer pipelining 16 deep (tern-load --mode mixed -P 16, interval):
 * closed-loop 134-147k msg/s with 2 per turn at 134-145 CPU ticks, 132-161k
 * at 85-98 ticks with this rule; open loop at 70k msg/s, 20% less server
 * CPU, set p99 1.3-1.8 ms against 1.5-2.4 (one run of each 47 ms).  Four
 * queues with a client pipelining 16 deep each (-q 4 -P 16): 229-242k sets
 * and 266-295k gets a second with 2 per turn, 377-422k and 616-677k.
 */
#ifndef REQS_PER_SHARED_TURN
#define REQS_PER_SHARED_TURN 16
#endif
#define SHARED_TURN_WINDOW 16u

/* Most sets one connection may have waiting for the journal before the
 * server stops parsing its input (bounds held reply buffers). */
#define MAX_PENDING 4096
/* Stop reading a socket once this much unparsed input is buffered. */
#define INPUT_HIGH_WATER (256 * 1024)
#define TICK_MS 50
#define SHUTDOWN_GRACE_MS 5000
/* exptime values below this are relative seconds (memcached's rule). */
#define EXPTIME_RELATIVE_MAX 2592000

/*
 * Connection states.  Input is parsed only in LINE, BODY, SWALLOW and
 * SKIP_LINE; the other states wait for an event and then resume parsing.
 */
enum conn_state {
	CONN_LINE,      /* expecting a request line */
	CONN_BODY,      /* reading a set body straight into its item */
	CONN_SWALLOW,   /* discarding the body of a rejected set */
	CONN_SKIP_LINE, /* discarding up to the next newline (bad trailer) */
	CONN_GET,       /* a get/monitor is between keys: continue it */
	CONN_WAIT,      /* a get/t= or monitor waits for an item or its timer */
	CONN_CLOSING,   /* flush what is queued, then close */
};

/* A set whose STORED waits for the journal, and the replies queued behind it. */
struct pend {
	uint64_t ticket;
	int noreply;
	struct evbuffer *after;
};

struct conn {
	struct server *srv;
	struct conn *next, *prev;           /* all connections */
	struct conn *pnext, *pprev;         /* connections with pending sets */
	int in_pending_list;
	evutil_socket_t fd;
	char *ibuf;                         /* input: unparsed bytes are ibuf[ihead..itail) */
	size_t ihead, itail, icap;
	struct evbuffer *out;               /* replies not yet sent */
	struct event *rev, *wev;            /* readable (with idle timeout), writable */
	uint32_t id;
	enum conn_state state;
	int read_paused;                    /* parsing stopped for backpressure */
	unsigned turn;                      /* requests parsed in this turn (conn_run) */
	size_t turn_bytes;                  /* body bytes read or sent in this turn */
	int yielded;                        /* turn ended with input left: resume_ev */
	int reading;                        /* rev is added */
	int writing;                        /* wev is added */
	int eof;                            /* the peer closed its side */
	int dead;                           /* socket error: free at the next chance */
	struct queue *last_q;               /* the queue of the last request ... */
	uint64_t last_q_gen;                /* ... valid while no queue was deleted */
	int opened;                         /* ever held an open item */

	char line[PROTO_LINE_MAX + 2];      /* current request line (req points in) */
	struct proto_req req;
	unsigned key_idx;                   /* get: next key to serve */
	int get_hits;                       /* monitor: items sent */
	int64_t mon_deadline_ms;            /* monitor: when it ends (mono) */

	struct item *body;                  /* set in progress */
	uint32_t body_got;                  /* bytes of body+CRLF read so far */
	uint64_t swallow;                   /* CONN_SWALLOW: bytes left */

	struct qwaiter waiter;
	struct event *wait_timer;
	struct event *resume_ev;            /* resumes parsing from the loop */

	struct pend *pend;                  /* ring of pending sets */
	unsigned pend_head, npend, pend_cap;
};

struct server {
	struct event_base *base;
	struct config cfg;
	struct qreg *reg;
	struct jenv *env;
	struct evconnlistener *listener;
	struct event *tick_ev, *sig_term, *sig_int, *sig_hup, *stop_ev;
	struct conn *conns, *pending_conns;
	uint32_t nconns, next_id;
	int port;
	int shutting_down;
	int64_t shutdown_deadline;
	int64_t started_ms;
	struct evbuffer **spare_bufs;       /* recycled pend buffers */
	unsigned nspare, spare_cap;
	/* general stats */
	uint64_t total_connections, cmd_get, cmd_set, get_hits, get_misses;
	uint64_t bytes_read, bytes_written, rejected_connections;
	/* turns (conn_run): a counter, and the last two connections that
	 * used one up, with the counter then (see REQS_PER_SHARED_TURN) */
	uint64_t turn_gen;
	const struct conn *busy[2];
	uint64_t busy_gen[2];
	/* polling (server_run): reads so far, and loop passes that polled */
	uint64_t reads, loop_polls;
};

static void conn_process(struct conn *c);
static int conn_flush(struct conn *c);
static void conn_free(struct conn *c);
static void begin_shutdown(struct server *s);

/* ---- output ---- */

/* Where the next reply goes: behind the last pending set, or the socket. */
static struct evbuffer *conn_out(struct conn *c)
{
	if (c->npend)
		return c->pend[(c->pend_head + c->npend - 1) % c->pend_cap].after;
	return c->out;
}

static void out_add(struct conn *c, const void *data, size_t len)
{
	evbuffer_add(conn_out(c), data, len);
	c->srv->bytes_written += len;
}

static void out_reply(struct conn *c, enum proto_reply r)
{
	size_t len;
	const char *s = proto_reply(r, &len);

	out_add(c, s, len);
}

static void out_client_error(struct conn *c, const char *reason)
{
	char buf[300];
	int n = snprintf(buf, sizeof(buf), "CLIENT_ERROR %s\r\n", reason);

	out_add(c, buf, (size_t)n);
}

static void out_server_error(struct conn *c, const char *reason)
{
	char buf[300];
	int n = snprintf(buf, sizeof(buf), "SERVER_ERROR %s\r\n", reason);

	out_add(c, buf, (size_t)n);
}

/* "SERVER_ERROR <what>: <tern_strerror(rc)>" */
static void out_error_rc(struct conn *c, const char *what, int rc)
{
	char buf[300];

	snprintf(buf, sizeof(buf), "%s: %s", what, tern_strerror(rc));
	out_server_error(c, buf);
}

static void unref_cleanup(const void *data, size_t len, void *arg)
{
	item_unref(arg);
}

/* Bodies up to this size are copied into the reply; larger ones are sent
 * by reference.  A reference costs two buffer-chain allocations (one for
 * the reference, one for whatever follows it, since a reference chain
 * cannot be appended to): profiled, that was most of the allocations of a
 * 512-byte get workload, while copying 512 bytes costs less than one. */
#define COPY_BODY_MAX 2048

/* VALUE header, then the body: copied when small, else by reference (the
 * evbuffer holds a reference on the item until the bytes are written). */
static void out_value(struct conn *c, const char *name, size_t name_len,
		      struct item *it)
{
	char hdr[PROTO_NAME_MAX + 64];
	size_t n = proto_value_header(hdr, name, name_len, it->flags, it->len);
	struct evbuffer *out = conn_out(c);

	if (it->len <= COPY_BODY_MAX) {
		struct evbuffer_iovec v;
		size_t total = n + it->len + 2;

		/* header and body in one reservation: one callback run */
		if (evbuffer_reserve_space(out, (ev_ssize_t)total, &v, 1) == 1 &&
		    v.iov_len >= total) {
			memcpy(v.iov_base, hdr, n);
			memcpy((char *)v.iov_base + n, it->data, (size_t)it->len + 2);
			v.iov_len = total;
			evbuffer_commit_space(out, &v, 1);
		} else {
			evbuffer_add(out, hdr, n);
			evbuffer_add(out, it->data, (size_t)it->len + 2);
		}
	} else {
		evbuffer_add(out, hdr, n);
		evbuffer_add_reference(out, it->data, (size_t)it->len + 2,
				       unref_cleanup, item_ref(it));
	}
	c->srv->bytes_written += n + it->len + 2;
	c->turn_bytes += it->len;
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

static int pend_push(struct conn *c, uint64_t ticket, int noreply)
{
	struct server *s = c->srv;
	struct pend *p;

	if (c->npend == c->pend_cap) {
		unsigned cap = c->pend_cap ? c->pend_cap * 2 : 16, i;
		struct pend *n = malloc(cap * sizeof(*n));

		if (!n)
			return TERN_ENOMEM;
		for (i = 0; i < c->npend; i++)
			n[i] = c->pend[(c->pend_head + i) % c->pend_cap];
		free(c->pend);
		c->pend = n;
		c->pend_head = 0;
		c->pend_cap = cap;
	}
	p = &c->pend[(c->pend_head + c->npend) % c->pend_cap];
	p->ticket = ticket;
	p->noreply = noreply;
	p->after = spare_buf(s);
	if (!p->after)
		return TERN_ENOMEM;
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
	struct evbuffer *out = c->out;

	while (c->npend && c->pend[c->pend_head].ticket <= upto) {
		struct pend *p = &c->pend[c->pend_head];

		if (!p->noreply) {
			if (err) {
				char buf[200];
				int n = snprintf(buf, sizeof(buf),
					"SERVER_ERROR journal write failed: %s\r\n",
					tern_strerror(err));

				evbuffer_add(out, buf, (size_t)n);
				s->bytes_written += (size_t)n;
			} else {
				size_t len;
				const char *r = proto_reply(PROTO_REPLY_STORED, &len);

				evbuffer_add(out, r, len);
				s->bytes_written += len;
			}
		}
		evbuffer_add_buffer(out, p->after);
		release_buf(s, p->after);
		p->after = NULL;
		c->pend_head = (c->pend_head + 1) % c->pend_cap;
		c->npend--;
	}
	if (!c->npend)
		pending_unlink(c);
	/* Send now: the client can work on these replies while the rest of
	 * its input (a turn ended early, see REQS_PER_TURN) is parsed.  Run
	 * the connection from the loop when more may follow: parsing may
	 * resume (backpressure, a turn), or it may close. */
	if (!c->read_paused && c->state != CONN_CLOSING && !c->dead &&
	    conn_flush(c) == 0 && c->itail == c->ihead)
		return;
	event_active(c->resume_ev, EV_WRITE, 0);
}

static void on_durable(void *arg, uint64_t upto, int err)
{
	struct server *s = arg;
	struct conn *c, *next;

	for (c = s->pending_conns; c; c = next) {
		next = c->pnext;
		conn_resolve(c, upto, err);
	}
}

/* ---- helpers ---- */

/* Finds queue name (NULL when it does not exist).  Clients mostly talk to
 * one queue, so the connection remembers the last one and skips the hash
 * lookup while no queue has been deleted since. */
static struct queue *find_queue(struct conn *c, const char *name, size_t len)
{
	struct server *s = c->srv;
	struct queue *q = c->last_q;

	if (q && c->last_q_gen == qreg_generation(s->reg) &&
	    queue_name_len(q) == len && memcmp(queue_name(q), name, len) == 0)
		return q;
	q = qreg_find(s->reg, name, len);
	if (q) {
		c->last_q = q;
		c->last_q_gen = qreg_generation(s->reg);
	}
	return q;
}

/* Finds or creates the queue of key k; NULL with *rc set on failure. */
static struct queue *get_queue(struct conn *c, const struct proto_key *k,
			       int *rc)
{
	struct server *s = c->srv;
	char name[PROTO_NAME_MAX + 1];
	struct queue_conf qc;
	struct queue *q = find_queue(c, k->name, k->len);

	*rc = 0;
	if (q)
		return q;
	memcpy(name, k->name, k->len);
	name[k->len] = '\0';
	config_queue_conf(&s->cfg, name, &qc);
	*rc = qreg_get(s->reg, k->name, k->len, &qc, &q);
	if (*rc)
		return NULL;
	c->last_q = q;
	c->last_q_gen = qreg_generation(s->reg);
	return q;
}

/* Adds or removes the read event to match what the connection can take:
 * no reading while closing, shutting down, above the output high mark, or
 * with a full input buffer. */
static void conn_update_read(struct conn *c)
{
	int want = !c->dead && !c->eof && c->state != CONN_CLOSING &&
		   !c->srv->shutting_down && !c->read_paused &&
		   c->itail - c->ihead < INPUT_HIGH_WATER;

	if (want && !c->reading) {
		struct timeval tv = { (time_t)c->srv->cfg.idle_timeout_s, 0 };

		event_add(c->rev, c->srv->cfg.idle_timeout_s ? &tv : NULL);
		c->reading = 1;
	} else if (!want && c->reading) {
		event_del(c->rev);
		c->reading = 0;
	}
}



/* ---- set ---- */

static void cmd_set_start(struct conn *c)
{
	struct server *s = c->srv;
	struct proto_req *r = &c->req;
	struct queue *q;
	uint64_t limit;

	s->cmd_set++;
	q = find_queue(c, r->keys[0].name, r->keys[0].len);
	limit = q ? queue_get_conf(q)->max_item_size : s->cfg.max_item_size;
	if (r->bytes > limit || r->bytes > s->cfg.max_item_size) {
		/* Too large: swallow the body so the stream stays in sync. */
		if (!r->noreply)
			out_reply(c, PROTO_REPLY_NOT_STORED);
		c->swallow = r->bytes + 2;
		c->state = CONN_SWALLOW;
		return;
	}
	c->body = item_new((uint32_t)r->bytes);
	if (!c->body) {
		out_server_error(c, "out of memory");
		c->swallow = r->bytes + 2;
		c->state = CONN_SWALLOW;
		return;
	}
	c->body->flags = r->flags;
	c->body_got = 0;
	c->state = CONN_BODY;
}

static void cmd_set_finish(struct conn *c)
{
	struct proto_req *r = &c->req;
	struct item *it = c->body;
	struct queue *q;
	uint64_t ticket = 0;
	int rc;
	int64_t now;

	c->body = NULL;
	c->state = CONN_LINE;
	if (it->data[it->len] != '\r' || it->data[it->len + 1] != '\n') {
		int synced = it->data[it->len + 1] == '\n';

		item_unref(it);
		out_client_error(c, "bad data chunk");
		if (!synced)
			c->state = CONN_SKIP_LINE;
		return;
	}
	now = tern_now_ms();
	if (r->exptime == 0)
		it->expiry_ms = 0;
	else if (r->exptime < EXPTIME_RELATIVE_MAX)
		it->expiry_ms = now + r->exptime * 1000;
	else if (r->exptime > INT64_MAX / 1000)
		it->expiry_ms = 0;
	else
		it->expiry_ms = r->exptime * 1000;
	/* Looked up again now: the queue may have been deleted while the body
	 * was arriving. */
	q = get_queue(c, &r->keys[0], &rc);
	if (!q) {
		item_unref(it);
		if (!r->noreply)
			out_error_rc(c, "cannot open queue", rc);
		return;
	}
	rc = queue_push(q, it, &ticket);
	if (rc == 0 && ticket) {
		enum journal_sync sync = queue_get_conf(q)->jopts.sync;

		/* A set whose reply waits for a sync does not use up the turn:
		 * ending the pass early would not send it sooner, only split
		 * the group (measured: -18% pipelined sets in sync=always). */
		if (journal_sync_waits(sync) && c->turn)
			c->turn--;
		if (pend_push(c, ticket, r->noreply) == 0)
			return;
		/* Could not hold the reply: answer now rather than lose it. */
		rc = 0;
	}
	if (r->noreply)
		return;
	if (rc == 0)
		out_reply(c, PROTO_REPLY_STORED);
	else if (rc == TERN_EFULL || rc == TERN_ETOOBIG)
		out_reply(c, PROTO_REPLY_NOT_STORED);
	else
		out_error_rc(c, "journal", rc);
}

/* ---- get / monitor ---- */

static void wait_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	queue_unwait(&c->waiter);
	c->key_idx++;
	c->state = CONN_GET;
	conn_process(c);
}

/* Sends one item of a get or monitor (the caller's reference is used up). */
static void send_item(struct conn *c, const struct proto_key *k, struct item *it,
		      int open)
{
	out_value(c, k->name, k->len, it);
	item_unref(it);
	c->srv->get_hits++;
	c->get_hits++;
	if (open)
		c->opened = 1;
}

static void waiter_served(struct qwaiter *w, struct item *it)
{
	struct conn *c = (struct conn *)((char *)w - offsetof(struct conn, waiter));
	const struct proto_key *k = &c->req.keys[c->key_idx];

	evtimer_del(c->wait_timer);
	if (it)
		send_item(c, k, it, w->open);
	if (c->req.cmd != PROTO_CMD_MONITOR || !it)
		c->key_idx++;
	c->state = CONN_GET;
	/* Not re-entered from inside the queue: resume from the loop. */
	event_active(c->resume_ev, EV_WRITE, 0);
}

static void start_wait(struct conn *c, struct queue *q, int open, int64_t ms)
{
	struct timeval tv;

	c->waiter.open = open;
	c->waiter.conn_id = c->id;
	c->waiter.serve = waiter_served;
	queue_wait(q, &c->waiter);
	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	evtimer_add(c->wait_timer, &tv);
	c->state = CONN_WAIT;
}

/* Serves the keys of the current get from key_idx on.  Returns when the
 * get is complete (END written) or waits. */
static void get_continue(struct conn *c)
{
	struct server *s = c->srv;
	struct proto_req *r = &c->req;
	int monitor = r->cmd == PROTO_CMD_MONITOR;

	while (c->key_idx < r->nkeys) {
		const struct proto_key *k = &r->keys[c->key_idx];
		struct queue *q;
		struct item *it = NULL;
		int rc, open = (k->opts & PROTO_OPT_OPEN) != 0;

		q = get_queue(c, k, &rc);
		if (!q) {
			out_error_rc(c, "cannot open queue", rc);
			c->state = CONN_LINE;
			return;
		}
		if (monitor) {
			int64_t left = c->mon_deadline_ms - tern_mono_ms();

			if (left <= 0 || (r->count && (uint32_t)c->get_hits >= r->count))
				break;
			rc = queue_pop(q, 1, 0, c->id, &it);
			if (rc == TERN_EFULL)
				break; /* holds max_open items: confirm first */
			if (!it) {
				if (s->shutting_down)
					break;
				start_wait(c, q, 1, left);
				return;
			}
			send_item(c, k, it, 1);
			continue;
		}
		if (k->opts & PROTO_OPT_CLOSE)
			queue_confirm(q, c->id, 1);
		if (k->opts & PROTO_OPT_ABORT) {
			queue_abort(q, c->id);
			c->key_idx++;
			continue;
		}
		if ((k->opts & PROTO_OPT_CLOSE) && !open) {
			c->key_idx++;
			continue;
		}
		rc = queue_pop(q, open, (k->opts & PROTO_OPT_PEEK) != 0, c->id, &it);
		if (rc == TERN_EFULL) {
			out_client_error(c, "too many open transactions");
			c->state = CONN_LINE;
			return;
		}
		if (rc != 0) {
			out_error_rc(c, "journal", rc);
			c->state = CONN_LINE;
			return;
		}
		if (it) {
			send_item(c, k, it, open);
		} else if (k->timeout_ms > 0 && !(k->opts & PROTO_OPT_PEEK) &&
			   !s->shutting_down) {
			start_wait(c, q, open, k->timeout_ms);
			return;
		} else {
			s->get_misses++;
		}
		c->key_idx++;
	}
	out_reply(c, PROTO_REPLY_END);
	c->state = CONN_LINE;
}

/* ---- stats ---- */

struct stats_ctx {
	struct conn *c;
	uint64_t items, bytes, total_items;
};

static void stat_line(struct conn *c, const char *name, const char *qname,
		      uint64_t v)
{
	char buf[PROTO_NAME_MAX + 128];
	int n;

	if (qname)
		n = snprintf(buf, sizeof(buf), "STAT queue_%s_%s %" PRIu64 "\r\n",
			     qname, name, v);
	else
		n = snprintf(buf, sizeof(buf), "STAT %s %" PRIu64 "\r\n", name, v);
	out_add(c, buf, (size_t)n);
}

static void sum_queue(struct queue *q, void *arg)
{
	struct stats_ctx *x = arg;
	struct queue_stats st;

	queue_get_stats(q, &st);
	x->items += st.items;
	x->bytes += st.bytes;
	x->total_items += st.total_items;
}

static void stats_queue(struct queue *q, void *arg)
{
	struct stats_ctx *x = arg;
	struct queue_stats st;
	const char *n = queue_name(q);

	queue_get_stats(q, &st);
	stat_line(x->c, "items", n, st.items);
	stat_line(x->c, "bytes", n, st.bytes);
	stat_line(x->c, "total_items", n, st.total_items);
	stat_line(x->c, "expired_items", n, st.expired_items);
	stat_line(x->c, "discarded", n, st.discarded);
	stat_line(x->c, "waiters", n, st.waiters);
	stat_line(x->c, "open_transactions", n, st.open_transactions);
	stat_line(x->c, "age", n, st.age_ms);
	stat_line(x->c, "mem_bytes", n, st.mem_bytes);
	if (queue_journal(q)) {
		struct journal_stats js;

		journal_get_stats(queue_journal(q), &js);
		stat_line(x->c, "journal_segments", n, js.segments);
		stat_line(x->c, "journal_disk_bytes", n, js.disk_bytes);
		stat_line(x->c, "journal_behind_items", n, js.behind_items);
		stat_line(x->c, "journal_records", n, js.records_written);
		stat_line(x->c, "journal_syncs", n, js.syncs);
		stat_line(x->c, "journal_write_errors", n, js.write_errors);
	}
}

static void cmd_stats(struct conn *c)
{
	struct server *s = c->srv;
	struct stats_ctx x = { c, 0, 0, 0 };
	struct rusage ru;
	char buf[256];
	int n;
	int64_t now = tern_now_ms();

	qreg_each(s->reg, sum_queue, &x);
	stat_line(c, "pid", NULL, (uint64_t)getpid());
	stat_line(c, "uptime", NULL, (uint64_t)((now - s->started_ms) / 1000));
	stat_line(c, "time", NULL, (uint64_t)(now / 1000));
	n = snprintf(buf, sizeof(buf), "STAT version %s\r\n", TERN_VERSION);
	out_add(c, buf, (size_t)n);
	stat_line(c, "pointer_size", NULL, sizeof(void *) * 8);
	getrusage(RUSAGE_SELF, &ru);
	n = snprintf(buf, sizeof(buf), "STAT rusage_user %ld.%06ld\r\nSTAT rusage_system %ld.%06ld\r\n",
		     (long)ru.ru_utime.tv_sec, (long)ru.ru_utime.tv_usec,
		     (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec);
	out_add(c, buf, (size_t)n);
	stat_line(c, "curr_connections", NULL, s->nconns);
	stat_line(c, "total_connections", NULL, s->total_connections);
	stat_line(c, "rejected_connections", NULL, s->rejected_connections);
	stat_line(c, "cmd_get", NULL, s->cmd_get);
	stat_line(c, "cmd_set", NULL, s->cmd_set);
	stat_line(c, "get_hits", NULL, s->get_hits);
	stat_line(c, "get_misses", NULL, s->get_misses);
	stat_line(c, "bytes_read", NULL, s->bytes_read);
	stat_line(c, "bytes_written", NULL, s->bytes_written);
	stat_line(c, "curr_items", NULL, x.items);
	stat_line(c, "total_items", NULL, x.total_items);
	stat_line(c, "bytes", NULL, x.bytes);
	stat_line(c, "queues", NULL, qreg_count(s->reg));
	stat_line(c, "poll_us", NULL, s->cfg.poll_us);
	stat_line(c, "loop_polls", NULL, s->loop_polls);
	stat_line(c, "journal_writer_wakeups", NULL, jenv_writer_wakeups(s->env));
	qreg_each(s->reg, stats_queue, &x);
	out_reply(c, PROTO_REPLY_END);
}

/* ---- other commands ---- */

static void flush_one(struct queue *q, void *arg)
{
	int rc = queue_flush(q);

	if (rc)
		*(int *)arg = rc;
}

struct expired_ctx {
	uint64_t n;
};

static void expire_one(struct queue *q, void *arg)
{
	((struct expired_ctx *)arg)->n += queue_flush_expired(q);
}

struct reload_ctx {
	struct server *s;
};

static void reload_one(struct queue *q, void *arg)
{
	struct server *s = ((struct reload_ctx *)arg)->s;
	struct queue_conf qc;

	config_queue_conf(&s->cfg, queue_name(q), &qc);
	queue_set_conf(q, &qc);
}

/* Rereads queue settings from the config file.  Returns 0 or an error with
 * "FILE:LINE: message" in err.  Server-level settings (listen, port,
 * data_dir) need a restart and are kept. */
static int server_reload(struct server *s, char *err, size_t errlen)
{
	struct reload_ctx x = { s };
	struct config n;
	int rc;

	if (s->cfg.path[0]) {
		n = s->cfg;
		rc = config_load(&n, s->cfg.path, err, errlen);
		if (rc)
			return rc;
		/* Only queue settings change on reload. */
		s->cfg.qdefault = n.qdefault;
		s->cfg.overrides = n.overrides;
		s->cfg.enable_shutdown = n.enable_shutdown;
		s->cfg.verbose = n.verbose;
	}
	qreg_each(s->reg, reload_one, &x);
	fprintf(stderr, "ternd: configuration reloaded\n");
	return 0;
}

static void dispatch(struct conn *c)
{
	struct server *s = c->srv;
	struct proto_req *r = &c->req;
	struct queue *q;
	char buf[512];
	int n, rc;

	switch (r->cmd) {
	case PROTO_CMD_GET:
	case PROTO_CMD_GETS:
		s->cmd_get++;
		c->key_idx = 0;
		c->state = CONN_GET;
		get_continue(c);
		return;
	case PROTO_CMD_MONITOR:
		s->cmd_get++;
		c->key_idx = 0;
		c->get_hits = 0;
		c->mon_deadline_ms = tern_mono_ms() + (int64_t)r->seconds * 1000;
		c->state = CONN_GET;
		get_continue(c);
		return;
	case PROTO_CMD_SET:
		cmd_set_start(c);
		return;
	case PROTO_CMD_DELETE:
		q = find_queue(c, r->keys[0].name, r->keys[0].len);
		rc = q ? qreg_delete(s->reg, q) : 0;
		if (r->noreply)
			return;
		if (rc)
			out_error_rc(c, "delete failed", rc);
		else
			out_reply(c, PROTO_REPLY_DELETED);
		return;
	case PROTO_CMD_FLUSH:
		q = find_queue(c, r->keys[0].name, r->keys[0].len);
		rc = q ? queue_flush(q) : 0;
		if (r->noreply)
			return;
		/* Emptied in memory but not recorded: say so, a restart would
		 * bring the items back. */
		if (rc)
			out_error_rc(c, "flush not journaled", rc);
		else
			out_reply(c, PROTO_REPLY_END);
		return;
	case PROTO_CMD_FLUSH_ALL:
		rc = 0;
		qreg_each(s->reg, flush_one, &rc);
		if (r->noreply)
			return;
		if (rc)
			out_error_rc(c, "flush not journaled", rc);
		else
			out_reply(c, PROTO_REPLY_OK);
		return;
	case PROTO_CMD_FLUSH_EXPIRED: {
		uint64_t cnt = 0;

		q = find_queue(c, r->keys[0].name, r->keys[0].len);
		if (q)
			cnt = queue_flush_expired(q);
		if (!r->noreply) {
			n = snprintf(buf, sizeof(buf), "%" PRIu64 "\r\n", cnt);
			out_add(c, buf, (size_t)n);
		}
		return;
	}
	case PROTO_CMD_FLUSH_ALL_EXPIRED: {
		struct expired_ctx x = { 0 };

		qreg_each(s->reg, expire_one, &x);
		n = snprintf(buf, sizeof(buf), "%" PRIu64 "\r\n", x.n);
		out_add(c, buf, (size_t)n);
		return;
	}
	case PROTO_CMD_STATS:
		cmd_stats(c);
		return;
	case PROTO_CMD_VERSION:
		n = snprintf(buf, sizeof(buf), "VERSION %s\r\n", TERN_VERSION);
		out_add(c, buf, (size_t)n);
		return;
	case PROTO_CMD_VERBOSITY:
		if (!r->noreply)
			out_reply(c, PROTO_REPLY_OK);
		return;
	case PROTO_CMD_QUIT:
		c->state = CONN_CLOSING;
		return;
	case PROTO_CMD_SHUTDOWN:
		if (!s->cfg.enable_shutdown) {
			out_client_error(c, "shutdown not enabled");
			return;
		}
		fprintf(stderr, "ternd: shutdown requested by a client\n");
		c->state = CONN_CLOSING;
		begin_shutdown(s);
		return;
	case PROTO_CMD_RELOAD: {
		char err[600];

		if (server_reload(s, err, sizeof(err)) == 0) {
			out_reply(c, PROTO_REPLY_OK);
		} else {
			fprintf(stderr, "ternd: reload failed: %s\n", err);
			snprintf(buf, sizeof(buf), "reload failed: %.400s", err);
			out_server_error(c, buf);
		}
		return;
	}
	case PROTO_CMD_CONFIRM:
		q = find_queue(c, r->keys[0].name, r->keys[0].len);
		if (q)
			queue_confirm(q, c->id, r->count);
		if (!r->noreply)
			out_reply(c, PROTO_REPLY_END);
		return;
	case PROTO_CMD__COUNT:
		break;
	}
	out_reply(c, PROTO_REPLY_ERROR);
}

/* ---- the state machine ---- */

static int output_full(struct conn *c)
{
	return evbuffer_get_length(c->out) > c->srv->cfg.output_high_water ||
	       c->npend >= MAX_PENDING;
}

/*
 * Writes what is queued, straight away (as memcached does): the write
 * event is registered only when the socket cannot take it all, so a
 * request/reply pass costs one read and one write system call.
 * Returns -1 when the socket failed (the connection is marked dead).
 */
static int conn_flush(struct conn *c)
{
	while (evbuffer_get_length(c->out)) {
		int n = evbuffer_write(c->out, c->fd);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				if (!c->writing) {
					event_add(c->wev, NULL);
					c->writing = 1;
				}
				return 0;
			}
			c->dead = 1;
			return -1;
		}
	}
	if (c->writing) {
		event_del(c->wev);
		c->writing = 0;
	}
	return 0;
}

static void conn_run(struct conn *c);

/* Runs the connection: parses what it can, sends what it has, and frees
 * it when it is finished.  The single entry point of every event. */
static void conn_process(struct conn *c)
{
	c->yielded = 0;
	if (!c->dead)
		conn_run(c);
	/* This connection's sets need not wait for the rest of the pass (the
	 * other connections) to be written and answered: their replies go
	 * out from on_durable, with what the flush below would send. */
	jenv_end_early(c->srv->env);
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
			evbuffer_get_length(c->out) == 0)) {
		conn_free(c);
		return;
	}
	/* The rest of the input after this loop pass's journal write (the
	 * pass event was activated first, so it runs first). */
	if (c->yielded && !c->read_paused)
		event_active(c->resume_ev, EV_WRITE, 0);
	conn_update_read(c);
}

/* Whether c's turn ends here (c->turn >= REQS_PER_TURN): see there. */
static int turn_over(struct conn *c)
{
	struct server *s = c->srv;
	unsigned limit = REQS_PER_TURN;

	if (s->busy[0] != c) {
		/* first time this turn: c is pipelining */
		s->busy[1] = s->busy[0];
		s->busy_gen[1] = s->busy_gen[0];
		s->busy[0] = c;
	}
	s->busy_gen[0] = s->turn_gen;
	if (s->busy[1] && s->busy[1] != c && s->turn_gen - s->busy_gen[1] <= SHARED_TURN_WINDOW)
		limit = REQS_PER_SHARED_TURN;
	else if (c->turn_bytes >= TURN_BIG_BYTES)
		limit = REQS_PER_BIG_TURN;
	return c->turn >= limit;
}

/* Parses and runs requests from the input buffer until it runs dry, the
 * connection must wait, or its output is above the high mark. */
static void conn_run(struct conn *c)
{
	c->turn = 0;
	c->turn_bytes = 0;
	c->srv->turn_gen++;
	for (;;) {
		size_t avail;
		char *in;

		if (c->ihead == c->itail)
			c->ihead = c->itail = 0; /* drained: start over at the front */
		avail = c->itail - c->ihead;
		in = c->ibuf + c->ihead;

		if (c->state == CONN_CLOSING || c->state == CONN_WAIT)
			return;
		/* End the turn after REQS_PER_TURN requests, more when bodies
		 * are large or another connection pipelines too (see there) */
		if (c->turn >= REQS_PER_TURN && c->state == CONN_LINE && avail && turn_over(c)) {
			c->yielded = 1;
			return;
		}
		if (c->state == CONN_GET) {
			get_continue(c);
			continue;
		}
		if (output_full(c)) {
			c->read_paused = 1; /* conn_process resumes below the mark */
			return;
		}
		if (avail == 0) {
			/* the peer is gone and everything it sent is done (a
			 * request cut short is dropped) */
			if (c->eof)
				c->state = CONN_CLOSING;
			return;
		}
		switch (c->state) {
		case CONN_LINE: {
			const char *eol = memchr(in, '\n', avail);
			size_t len;
			enum proto_status st;
			const char *reason = NULL;
			uint64_t swallow = 0;

			if (!eol) {
				if (avail > PROTO_LINE_MAX) {
					out_client_error(c, "line too long");
					c->state = CONN_CLOSING;
					continue;
				}
				return; /* wait for the rest of the line */
			}
			len = (size_t)(eol - in);
			if (len > PROTO_LINE_MAX) {
				out_client_error(c, "line too long");
				c->state = CONN_CLOSING;
				continue;
			}
			/* copied out: the request's key names point into it
			 * while the input buffer moves on (waiting gets) */
			memcpy(c->line, in, len);
			c->ihead += len + 1;
			c->srv->bytes_read += len + 1;
			c->turn++;
			if (len && c->line[len - 1] == '\r')
				len--;
			c->line[len] = '\0';
			st = proto_parse(c->line, len, &c->req, &reason, &swallow);
			if (st == PROTO_ERROR) {
				out_reply(c, PROTO_REPLY_ERROR);
			} else if (st == PROTO_CLIENT_ERROR) {
				out_client_error(c, reason ? reason : "bad command line format");
				if (swallow) {
					c->swallow = swallow;
					c->state = CONN_SWALLOW;
				}
			} else {
				dispatch(c);
			}
			break;
		}
		case CONN_BODY: {
			struct item *it = c->body;
			size_t want = (size_t)it->len + 2 - c->body_got;
			size_t n = avail < want ? avail : want;

			memcpy(it->data + c->body_got, in, n);
			c->ihead += n;
			c->body_got += (uint32_t)n;
			c->srv->bytes_read += n;
			c->turn_bytes += n;
			if (c->body_got == it->len + 2)
				cmd_set_finish(c);
			break;
		}
		case CONN_SWALLOW: {
			size_t n = avail < c->swallow ? avail : (size_t)c->swallow;

			c->ihead += n;
			c->srv->bytes_read += n;
			c->swallow -= n;
			if (c->swallow == 0)
				c->state = CONN_LINE;
			break;
		}
		case CONN_SKIP_LINE: {
			const char *eol = memchr(in, '\n', avail);

			if (!eol) {
				c->ihead += avail;
				c->srv->bytes_read += avail;
				return;
			}
			c->ihead += (size_t)(eol - in) + 1;
			c->srv->bytes_read += (size_t)(eol - in) + 1;
			c->state = CONN_LINE;
			break;
		}
		default:
			return;
		}
	}
}

/* Reads what the socket has into the connection's own input buffer: one
 * read(2), no FIONREAD, no allocation once the buffer has its size (an
 * evbuffer allocated and freed a chain for every read). */
static void on_readable(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	if (what & EV_TIMEOUT) {
		/* Idle timeout: only a connection with nothing in progress is
		 * idle; a waiting get or a held reply keeps it alive. */
		if (c->state == CONN_WAIT || c->npend || c->state == CONN_BODY ||
		    evbuffer_get_length(c->out)) {
			event_del(c->rev);
			c->reading = 0; /* re-added with a fresh timeout */
			conn_update_read(c);
			return;
		}
		conn_free(c);
		return;
	}
	if (what & EV_READ) {
		ssize_t n;

		c->srv->reads++;

		/* Room for at least 4 KiB: move unparsed bytes to the front,
		 * then grow up to INPUT_HIGH_WATER (conn_update_read stops
		 * reading before the buffer is full). */
		if (c->icap - c->itail < 4096 && c->ihead) {
			memmove(c->ibuf, c->ibuf + c->ihead, c->itail - c->ihead);
			c->itail -= c->ihead;
			c->ihead = 0;
		}
		if (c->icap - c->itail < 4096 && c->icap < INPUT_HIGH_WATER + 16384) {
			size_t ncap = c->icap * 2;
			char *nb = realloc(c->ibuf, ncap);

			if (nb) {
				c->ibuf = nb;
				c->icap = ncap;
			}
		}
		if (c->icap == c->itail) {
			n = -1;
			errno = EAGAIN; /* full: parsing must make room first */
		} else {
			n = read(c->fd, c->ibuf + c->itail, c->icap - c->itail);
		}
		if (n > 0) {
			c->itail += (size_t)n;
		} else if (n == 0) {
			c->eof = 1;
			/* A waiting get must not take an item for a
			 * client that is gone: it would be lost. */
			if (c->state == CONN_WAIT) {
				conn_free(c);
				return;
			}
		} else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
			c->dead = 1;
		}
	}
	conn_process(c);
}

static void on_writable(evutil_socket_t fd, short what, void *arg)
{
	conn_process(arg);
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
	conn_process(arg);
}

static void conn_free(struct conn *c)
{
	struct server *s = c->srv;

	queue_unwait(&c->waiter);
	if (c->opened)
		qreg_abort_conn(s->reg, c->id);
	while (c->npend) {
		release_buf(s, c->pend[c->pend_head].after);
		c->pend_head = (c->pend_head + 1) % c->pend_cap;
		c->npend--;
	}
	free(c->pend);
	pending_unlink(c);
	item_unref(c->body);
	event_free(c->wait_timer);
	event_free(c->resume_ev);
	event_free(c->rev);
	event_free(c->wev);
	free(c->ibuf);
	evbuffer_free(c->out);
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

static void on_accept(struct evconnlistener *l, evutil_socket_t fd,
		      struct sockaddr *sa, int salen, void *arg)
{
	struct server *s = arg;
	struct conn *c;
	int one = 1;

	if (s->nconns >= s->cfg.max_connections || s->shutting_down) {
		static const char msg[] = "SERVER_ERROR too many connections\r\n";

		/* Best effort: the socket is fresh, the reply fits its buffer. */
		if (write(fd, msg, sizeof(msg) - 1) < 0) {
			/* nothing more to do: the connection is refused anyway */
		}
		s->rejected_connections++;
		evutil_closesocket(fd);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		evutil_closesocket(fd);
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	evutil_make_socket_nonblocking(fd);
	c->srv = s;
	c->fd = fd;
	c->id = ++s->next_id ? s->next_id : ++s->next_id;
	c->icap = 16384;
	c->ibuf = malloc(c->icap);
	c->out = evbuffer_new();
	c->rev = event_new(s->base, fd, EV_READ | EV_PERSIST, on_readable, c);
	c->wev = event_new(s->base, fd, EV_WRITE | EV_PERSIST, on_writable, c);
	c->wait_timer = evtimer_new(s->base, wait_timeout, c);
	c->resume_ev = event_new(s->base, -1, 0, on_resume, c);
	if (!c->ibuf || !c->out || !c->rev || !c->wev || !c->wait_timer || !c->resume_ev) {
		free(c->ibuf);
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
	s->total_connections++;
}

/* ---- timers, signals, shutdown ---- */

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
	struct server *s = arg;

	qreg_tick(s->reg, tern_now_ms());
}

static int all_flushed(struct server *s)
{
	struct conn *c;

	for (c = s->conns; c; c = c->next)
		if (c->npend || evbuffer_get_length(c->out))
			return 0;
	return 1;
}

static void on_stop_check(evutil_socket_t fd, short what, void *arg)
{
	struct server *s = arg;
	struct timeval tv = { 0, 20 * 1000 };

	if (!all_flushed(s) && tern_mono_ms() < s->shutdown_deadline) {
		evtimer_add(s->stop_ev, &tv);
		return;
	}
	while (s->conns)
		conn_free(s->conns);
	event_base_loopbreak(s->base);
}

static void begin_shutdown(struct server *s)
{
	struct conn *c;
	struct timeval tv = { 0, 0 };

	if (s->shutting_down)
		return;
	s->shutting_down = 1;
	s->shutdown_deadline = tern_mono_ms() + SHUTDOWN_GRACE_MS;
	if (s->listener)
		evconnlistener_disable(s->listener);
	/* Requests already received are answered; waiting gets end now (END)
	 * and nothing new is read. */
	for (c = s->conns; c; c = c->next) {
		conn_update_read(c);
		if (c->state == CONN_WAIT) {
			evtimer_del(c->wait_timer);
			queue_unwait(&c->waiter);
			c->key_idx++;
			c->state = CONN_GET;
		}
		event_active(c->resume_ev, EV_WRITE, 0);
	}
	evtimer_add(s->stop_ev, &tv);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	struct server *s = arg;

	if (sig == SIGHUP) {
		char err[600];

		if (server_reload(s, err, sizeof(err)))
			fprintf(stderr, "ternd: reload failed: %s\n", err);
		return;
	}
	fprintf(stderr, "ternd: signal %d, shutting down\n", (int)sig);
	begin_shutdown(s);
}

/* ---- lifecycle ---- */

struct reopen_ctx {
	struct server *s;
	int rc;
	char name[PROTO_NAME_MAX + 1];
};

static void reopen_queue(void *arg, const char *name)
{
	struct reopen_ctx *x = arg;
	struct queue_conf qc;
	struct queue *q;
	int rc;

	if (x->rc)
		return;
	config_queue_conf(&x->s->cfg, name, &qc);
	rc = qreg_get(x->s->reg, name, strlen(name), &qc, &q);
	if (rc) {
		x->rc = rc;
		snprintf(x->name, sizeof(x->name), "%s", name);
	}
}

static int bind_listener(struct server *s, char *err, size_t errlen)
{
	struct addrinfo hints, *res = NULL;
	char port[16];
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int rc;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	snprintf(port, sizeof(port), "%d", s->cfg.port);
	rc = getaddrinfo(s->cfg.listen, port, &hints, &res);
	if (rc != 0 || !res) {
		snprintf(err, errlen, "cannot resolve listen address %s: %s",
			 s->cfg.listen, gai_strerror(rc));
		return TERN_EINVAL;
	}
	s->listener = evconnlistener_new_bind(s->base, on_accept, s,
		LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
		1024, res->ai_addr, (int)res->ai_addrlen);
	freeaddrinfo(res);
	if (!s->listener) {
		snprintf(err, errlen, "cannot listen on %s:%d: %s", s->cfg.listen,
			 s->cfg.port, strerror(errno));
		return TERN_ESYS;
	}
	if (getsockname(evconnlistener_get_fd(s->listener), (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET)
			s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		else
			s->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	}
	return 0;
}

int server_new(const struct config *cfg, struct server **out, char *err, size_t errlen)
{
	struct server *s = calloc(1, sizeof(*s));
	struct reopen_ctx x;
	struct timeval tick = { 0, TICK_MS * 1000 };
	int rc;

	if (!s) {
		snprintf(err, errlen, "out of memory");
		return TERN_ENOMEM;
	}
	s->cfg = *cfg;
	s->started_ms = tern_now_ms();
	s->base = event_base_new();
	if (!s->base) {
		snprintf(err, errlen, "cannot create the event loop");
		rc = TERN_ENOMEM;
		goto fail;
	}
	rc = jenv_open(cfg->data_dir, s->base, on_durable, s, &s->env);
	if (rc) {
		snprintf(err, errlen, "cannot open data directory %s: %s",
			 cfg->data_dir, tern_strerror(rc));
		goto fail;
	}
	rc = qreg_new(s->env, &s->reg);
	if (rc) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	memset(&x, 0, sizeof(x));
	x.s = s;
	rc = jenv_catalog_list(s->env, reopen_queue, &x);
	if (rc || x.rc) {
		rc = rc ? rc : x.rc;
		snprintf(err, errlen, "cannot recover queue %s: %s", x.name,
			 tern_strerror(rc));
		goto fail;
	}
	rc = bind_listener(s, err, errlen);
	if (rc)
		goto fail;
	s->tick_ev = event_new(s->base, -1, EV_PERSIST, on_tick, s);
	s->stop_ev = evtimer_new(s->base, on_stop_check, s);
	s->sig_term = evsignal_new(s->base, SIGTERM, on_signal, s);
	s->sig_int = evsignal_new(s->base, SIGINT, on_signal, s);
	s->sig_hup = evsignal_new(s->base, SIGHUP, on_signal, s);
	if (!s->tick_ev || !s->stop_ev || !s->sig_term || !s->sig_int || !s->sig_hup) {
		snprintf(err, errlen, "out of memory");
		rc = TERN_ENOMEM;
		goto fail;
	}
	event_add(s->tick_ev, &tick);
	event_add(s->sig_term, NULL);
	event_add(s->sig_int, NULL);
	event_add(s->sig_hup, NULL);
	*out = s;
	return 0;
fail:
	server_free(s);
	return rc;
}

int server_port(struct server *s)
{
	return s->port;
}

/*
 * The event loop.  With poll_us > 0 it polls (epoll_wait with no timeout)
 * instead of sleeping for poll_us after the last read, as long as the
 * journal's threads have nothing to do: a request that arrives meanwhile
 * is picked up without waking a sleeping thread.  In a VM that wake-up is
 * a kick of a halted vCPU and costs tens of microseconds, more than the
 * request's own work (docs/PERFORMANCE.md, row 24).  The price is a busy
 * core while clients keep coming within poll_us; an idle server sleeps.
 */
int server_run(struct server *s)
{
	int64_t poll_us = s->cfg.poll_us, last = INT64_MIN / 2;
	uint64_t seen = s->reads;
	int rc = 0;

	if (!poll_us) {
		event_base_dispatch(s->base);
		return 0;
	}
	while (!rc && !event_base_got_break(s->base) && !event_base_got_exit(s->base)) {
		int64_t now = tern_mono_us();

		if (s->reads != seen) { /* the last pass read something */
			seen = s->reads;
			last = now;
		}
		if (now - last < poll_us && !jenv_background_busy(s->env)) {
			s->loop_polls++;
			rc = event_base_loop(s->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
		} else {
			rc = event_base_loop(s->base, EVLOOP_ONCE);
		}
	}
	return rc < 0 ? TERN_ESYS : 0;
}

void server_free(struct server *s)
{
	unsigned i;

	if (!s)
		return;
	while (s->conns)
		conn_free(s->conns);
	if (s->listener)
		evconnlistener_free(s->listener);
	/* Queues first (each journal checkpoints and closes), then the
	 * environment (syncs, stops the writer, closes LMDB). */
	qreg_free(s->reg);
	if (s->env)
		jenv_close(s->env);
	if (s->tick_ev)
		event_free(s->tick_ev);
	if (s->stop_ev)
		event_free(s->stop_ev);
	if (s->sig_term)
		event_free(s->sig_term);
	if (s->sig_int)
		event_free(s->sig_int);
	if (s->sig_hup)
		event_free(s->sig_hup);
	for (i = 0; i < s->nspare; i++)
		evbuffer_free(s->spare_bufs[i]);
	free(s->spare_bufs);
	if (s->base)
		event_base_free(s->base);
	config_free(&s->cfg);
	free(s);
}
