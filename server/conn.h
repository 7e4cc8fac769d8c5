/*
 * conn.h: what the files of server/ share, and nothing outside server/
 * includes: the server's state, one connection's state machine, and the
 * interface between the queue-operation layer and the wire formats.
 *
 * DESIGN: three layers, each wire format a thin front end over one set of
 * queue operations.
 *   conn.c         the connection: reading into its input buffer, the
 *                  state machine (request, body, swallow, get, wait,
 *                  closing), output, replies held behind sets that wait
 *                  for the journal, and items held until their reply is
 *                  written;
 *   ops.c          the queue operations every format maps onto: enqueue
 *                  with its deferred durable reply, dequeue (open, close,
 *                  abort, peek, waits), delete, flush, stats;
 *   front_text.c   memcached's text protocol;
 *   front_meta.c   the meta protocol (mg, ms, md, mn), on text's framing;
 *   front_binary.c the binary protocol (a connection whose first byte is
 *                  0x80);
 *   guard.c        what keeps clients from tying the server up: the
 *                  deadline for finishing a started request, and pausing
 *                  accept when descriptors run out.
 *   front_auth.c   logging in (memcached's text handshake, binary SASL
 *                  PLAIN) before a connection's first request, with the
 *                  users of auth.c; ops check each request's rights.
 * A front end parses a request with its pure codec (protocol/), fills
 * c->rq and calls ops; ops answer through the front's struct front, which
 * turns outcomes into that format's bytes.  server.c owns the listeners
 * (TCP, the Unix socket, TLS: tls.c; metrics: metrics.c), the timers,
 * signals, the switch to another user (privs.c) and the lifecycle.
 */
#ifndef TERN_CONN_H
#define TERN_CONN_H

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "../protocol/binary.h"
#include "../protocol/meta.h"
#include "../protocol/proto.h"
#include "auth.h"
#include "config.h"
#include "counters.h"
#include "privs.h"
#include "queue.h"
#include "server.h"
#include "tls.h"

struct conn;
struct front;

/*
 * Outcomes of the queue operations that a front end turns into bytes
 * (besides a get's values and misses): enum suffix, meaning.
 */
#define OP_RESULTS(X)                                                     \
	X(STORED, "set: enqueued (cas: the item id)")                     \
	X(NOT_STORED, "set: the queue is full")                           \
	X(EXISTS, "add: the queue has a message waiting")                 \
	X(TOO_LARGE, "set: the body is over max_item_size")               \
	X(DELETED, "delete: the queue is gone")                           \
	X(NOT_FOUND, "delete, stats: no such queue")                      \
	X(FLUSHED, "flush of one queue: done")                            \
	X(OK, "flush_all, verbosity, reload: done")                       \
	X(NO_MEMORY, "out of memory")                                     \
	X(CLIENT_ERROR, "a malformed request (with a reason)")            \
	X(SERVER_ERROR, "a server-side failure (with a reason)")          \
	X(REFUSED, "a command tern does not implement (with its reason)") \
	X(DENIED, "the connection's user may not (with the reason)")      \
	X(UNAVAILABLE, "the server's or queue's status refuses it (reason)") \
	X(UNKNOWN, "an unknown command")

enum op_result {
#define OP_RESULT_ENUM(e, what) OP_##e,
	OP_RESULTS(OP_RESULT_ENUM)
#undef OP_RESULT_ENUM
	OP__COUNT
};

/*
 * How a request is to be answered: enough of it to answer after the
 * connection has moved on (a set whose reply waits for the journal).
 */
struct rctx {
	const struct front *fe;
	uint8_t noreply;     /* text noreply: nothing at all is answered */
	uint8_t quiet;       /* success is not answered (meta q, binary quiet
				opcodes); errors are */
	uint8_t opcode;      /* binary: the request's opcode */
	uint32_t opaque;     /* binary: the request's opaque */
	const void *req;     /* the front's parsed request while it is current
				(meta: its return flags); NULL afterwards */
};

/* The wire formats (struct front's id). */
enum front_id { FRONT_TEXT, FRONT_META, FRONT_BINARY, FRONT__COUNT };

/* The interface each wire format gives the operations. */
struct front {
	const char *name;
	enum front_id id;
	/* A get's item for key k (the reference stays the caller's). */
	void (*value)(struct conn *c, const struct proto_key *k, struct item *it);
	/* A get's key k found nothing (empty queue, or its wait timed out). */
	void (*miss)(struct conn *c, const struct proto_key *k);
	/* Every key of the get is done. */
	void (*get_end)(struct conn *c);
	/* Any other outcome, appended to `to`; reason for the error results;
	 * cas: the item id for STORED. */
	void (*reply)(struct conn *c, struct evbuffer *to, const struct rctx *x,
		      enum op_result r, const char *reason, uint64_t cas);
	/* The STORED reply of x's set (cas: the item id) written into buf
	 * (META_REPLY_MAX bytes); returns its length, 0 when x wants none.
	 * For a reply held until the journal reports the set durable. */
	size_t (*stored)(struct conn *c, const struct rctx *x, uint64_t cas, char *buf);
	/* One statistic, and the end of them. */
	void (*stat)(struct conn *c, const char *name, size_t nlen,
		     const char *val, size_t vlen);
	void (*stats_end)(struct conn *c);
};

extern const struct front front_text;
extern const struct front front_meta;
extern const struct front front_binary;

/*
 * Connection states.  Input is parsed only in REQUEST, BODY, SWALLOW and
 * SKIP_LINE; the other states wait for an event and then resume parsing.
 */
enum conn_state {
	CONN_REQUEST,   /* expecting a request: a line, or a binary header */
	CONN_BODY,      /* reading a set's body straight into its item */
	CONN_SWALLOW,   /* discarding the body of a rejected request */
	CONN_SKIP_LINE, /* discarding up to the next newline (bad trailer) */
	CONN_GET,       /* a get or monitor is between keys: continue it */
	CONN_WAIT,      /* a get/t= or monitor waits for an item or its timer */
	CONN_CLOSING,   /* no more requests: send what is due, settle what
			   was handed out, then close */
};

/* The current request in wire-neutral terms: what the operations read. */
struct request {
	struct rctx x;
	enum proto_cmd cmd;       /* GET, GETS (cas in replies), MONITOR, SET */
	uint8_t add;              /* set: only into an empty queue (add) */
	unsigned nkeys, key_idx;  /* get: its keys and the next to serve */
	struct proto_key *keys;   /* get: c->keys; set: &key */
	struct proto_key key;     /* set, and single-key gets */
	uint32_t flags;           /* set */
	int64_t exptime;          /* set: memcached's rules, >= 0 */
	uint64_t bytes;           /* set */
	uint8_t trailer;          /* set: CRLF after the body (2) or not (0) */
	uint8_t auth;             /* set: the body is the authentication
				     handshake's credentials (front_auth.c) */
	uint32_t count;           /* monitor: max items (0 = no limit) */
	int64_t mon_deadline_ms;  /* monitor: when it ends (mono) */
	uint32_t hits;            /* monitor: items sent */
};

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

/* Where a connection came from: named in the log, and the key of the
 * login throttle (guard.c). */
struct conn_peer {
	uint8_t family;     /* AF_INET (an IPv4-mapped IPv6 address too),
			       AF_INET6, AF_UNIX; 0: unknown */
	uint8_t addr[16];   /* AF_INET: the first 4 bytes */
	uint32_t uid;       /* AF_UNIX: the peer process's user */
};

struct conn {
	struct server *srv;
	struct conn *next, *prev;           /* all connections */
	struct conn *pnext, *pprev;         /* connections with pending sets */
	int in_pending_list;
	evutil_socket_t fd;
	struct tls *tls;                    /* TLS session (TLS listener), or NULL */
	int unix_peer;                      /* accepted on the Unix socket */
	char *ibuf;                         /* input: unparsed bytes are ibuf[ihead..itail) */
	size_t ihead, itail, icap;
	unsigned ibuf_reads;                /* reads in this window (see IBUF_WINDOW) */
	size_t ibuf_peak;                   /* the largest of them */
	int ibuf_halve;                     /* the last window used under a quarter */
	struct evbuffer *out;               /* replies not yet sent: out's bytes, */
	char *stage;                        /* then stage[0..stage_len) (conn.c, */
	uint32_t stage_len;                 /* "output") */
	uint8_t out_ev;                     /* out may hold bytes (stage is empty) */
	struct event *rev, *wev;            /* readable (with idle timeout), writable */
	uint32_t id;
	enum conn_state state;
	int binary;                         /* speaks the binary protocol */
	int framed;                         /* the first byte chose the protocol */
	int read_paused;                    /* parsing stopped for backpressure */
	unsigned turn;                      /* requests parsed in this turn (conn_run) */
	uint64_t turn_from;                 /* server_moved() when this turn began, plus
					       what sets waiting for a sync gave back */
	int yielded;                        /* turn ended with input left: resume_ev */
	int reading;                        /* rev is added */
	int writing;                        /* wev is added */
	int eof;                            /* the peer closed its side */
	int dead;                           /* socket error: free at the next chance */
	struct queue *last_q;               /* the queue of the last request ... */
	uint64_t last_q_gen;                /* ... valid while no queue was deleted */
	const char *last_q_name;            /* its name (queue_name, queue_name_len) */
	size_t last_q_len;
	int opened;                         /* ever held an open item */
	int authed;                         /* may make requests: authentication
					       is off, or it authenticated */
	const struct auth_user *user;       /* whom it authenticated as */
	const struct auth_user *acl;        /* user, when its rights are
					       restricted (checked per request);
					       else NULL */
	char *auth_key;                     /* the key of its text handshake */
	uint16_t auth_key_len;
	struct conn_peer peer;
	uint32_t auth_failures;             /* failed logins (auth_max_failures) */
	int auth_held;                      /* the answer to a failed login is
					       held back: nothing is parsed or
					       sent (guard.c) */
	struct event *auth_timer;           /* ends the hold (made when needed) */
	/* the handshake (guard.c): from its accept until it may make requests
	 * and has made one */
	struct conn *hs_next, *hs_prev;     /* s->hs_head's list, oldest first */
	int in_hs;
	int64_t hs_since_ms;                /* monotonic: when it began */

	/* the current request: its bytes (keys point in), parsed forms */
	char *line;                         /* a text line, or a binary header+extras+key */
	size_t line_cap;
	struct request rq;
	struct proto_key *keys;             /* a get's keys (grown on demand) */
	unsigned keys_cap;
	struct meta_req meta;
	struct bin_req bin;

	struct item *body;                  /* set in progress */
	uint32_t body_got;                  /* bytes of body (+ trailer) read so far */
	int read_full;                      /* the last read filled its buffers */
	int large_bodies;                   /* the last request was a large set */
	uint64_t swallow;                   /* CONN_SWALLOW: bytes left */

	struct qwaiter waiter;
	struct event *wait_timer;
	struct event *resume_ev;            /* resumes parsing from the loop */
	struct event *settle_ev;            /* CLOSING: checks delivery (conn_settle) */
	int64_t settle_deadline_ms;

	struct pend *pend;                  /* ring of pending sets */
	unsigned pend_head, npend, pend_cap;
	uint64_t pend_seq, pend_done;       /* pends pushed, and resolved, so far */

	struct held *held;                  /* ring of held items, oldest first */
	unsigned held_head, nheld, held_cap;

	/* the request deadline (guard.c) */
	uint64_t reqs;                      /* request lines and frames parsed */
	uint64_t req_id;                    /* the request its timer is for */
	struct event *req_timer;            /* made when first needed */
	uint32_t req_timeout_s;             /* request_timeout when armed */
	int req_armed;                      /* req_timer is pending */
};

struct accept_guard;
struct guard_peers;

struct server {
	struct event_base *base;
	struct config cfg;
	struct qreg *reg;
	struct jenv *env;
	struct evconnlistener *listener;    /* TCP; NULL with port = off */
	struct accept_guard *accept_guard;  /* listeners' pauses (guard.c) */
	struct evconnlistener *unix_listener, *tls_listener;
	struct tls_ctx *tls_ctx;            /* the TLS listener's certificate */
	struct privs_reader *reader;        /* reads the auth and TLS files as
					       root for reloads after -u, or NULL */
	int reload_ok;                      /* the last one was applied (1 before
					       any) */
	char status_line[256];              /* the service manager's status */
	struct metrics *metrics;            /* the /metrics listener */
	int tls_port;                       /* ports bound (tls_listen, */
	int metrics_port;                   /* metrics_listen) */
	int unix_made;                      /* the Unix socket file is ours */
	struct event *tick_ev, *sig_term, *sig_int, *sig_hup, *stop_ev;
	struct conn *conns, *pending_conns;
	uint32_t nconns, next_id;
	int port;
	int shutting_down;
	int64_t shutdown_deadline;
	int64_t started_ms;                 /* monotonic: uptime survives clock steps */
	int64_t started_wall_ms;            /* the same on the wall clock (metrics) */
	struct evbuffer **spare_bufs;       /* recycled pend buffers */
	unsigned nspare, spare_cap;
	struct proto_req text_req;          /* parse scratch for text lines */
	char hdr_scratch[PROTO_LINE_MAX + PROTO_VALUE_HEADER_EXTRA]; /* a VALUE
					       line for the longest keys */
	struct server_counters stats;       /* what it counts (counters.h) */
	struct auth *auth;                  /* users and rights; NULL: no
					       authentication */
	struct guard_peers *peers;          /* recent failed logins per peer */
	struct conn *hs_head, *hs_tail;     /* connections in their handshake,
					       oldest first (guard.c) */
	uint32_t nhs, nhs_net;              /* how many; of them TCP and TLS */
	enum queue_status status;           /* the server's (status.c) */
	int status_by_op;                   /* ... set by the status command */
	uint64_t reads;                     /* sockets read so far (server_run's
					       polling) */
	/* the heap's idle trim (server.c): bytes moved at the last tick, when
	 * they last changed, and whether anything ran since the last trim */
	uint64_t heap_moved;
	int64_t heap_busy_ms;
	int heap_used;
};

/* Bytes read from and written to clients so far: the measure of a turn
 * (conn_run) and of idleness (the heap's trim, server.c). */
static inline uint64_t server_moved(const struct server *s)
{
	return s->stats.bytes_read + s->stats.bytes_written;
}

/* ---- conn.c ---- */

/* Where a connection came from. */
enum conn_kind { CONN_TCP, CONN_UNIX, CONN_TLS };
/* Accepts fd, from a listener of kind, as a new connection of s from sa
 * (salen bytes; the socket is closed on failure). */
void conn_accept(struct server *s, evutil_socket_t fd, const struct sockaddr *sa, int salen,
		 enum conn_kind kind);
/* c's peer as text: an address ("192.0.2.7", "2001:db8::1") or "the unix
 * socket (uid N)", into buf (len bytes, at least 64). */
const char *conn_peer_name(const struct conn *c, char *buf, size_t len);
/* Frees c: open items go back to their queues, held items too unless
 * their replies were delivered. */
void conn_free(struct conn *c);
/* Runs c from the event loop's next pass (never from inside a queue). */
void conn_resume(struct conn *c);
/* Adds or removes the read event to match what c can take. */
void conn_update_read(struct conn *c);
/* Whether c has anything still to send or to hear back from the journal. */
int conn_busy(const struct conn *c);
/* Bytes of replies c has not sent yet (not counting pending sets'). */
size_t conn_out_len(const struct conn *c);

/* Where the next reply goes: behind the last pending set, or the socket's
 * buffer. */
struct evbuffer *conn_out(struct conn *c);
/* Appends len bytes to c's output (conn_out). */
void conn_add(struct conn *c, const void *data, size_t len);
/*
 * Appends a header of hlen bytes and then the first body_len bytes of
 * it->data (the body, and with the text formats its CRLF) to c's output:
 * copied when small, else by reference (the buffer holds a reference on
 * it until the bytes are written).
 */
void conn_add_item(struct conn *c, const void *hdr, size_t hlen, struct item *it,
		   size_t body_len);
/* Remembers that it (taken with QUEUE_POP_HOLD; c's reference passes to
 * c) is on its way to the client: settled delivered once its reply is
 * written, returned to the head if c dies first. */
void conn_hold(struct conn *c, struct item *it);
/* Holds the reply of the current set until the journal reports ticket
 * durable: its success reply (STORED with cas, written now by c->rq's
 * front) goes out then, or a failure replaces it.  lo: the lowest of the
 * set's tickets (its copies in several queues), each of which must have
 * succeeded too.  0 or TERN_ENOMEM (the caller answers at once). */
int conn_defer(struct conn *c, uint64_t lo, uint64_t ticket, uint64_t cas);
/* The same for another reply r of the current request (a flush's). */
int conn_defer_reply(struct conn *c, uint64_t ticket, enum op_result r);
/* The journal reports tickets up to upto durable (err 0) or failed. */
void conn_durable(struct server *s, uint64_t upto, int err);
/* Makes c read the next body->len + trailer bytes of input into body
 * (c takes the reference), then finish the set (ops_set_finish). */
void conn_read_body(struct conn *c, struct item *body, uint8_t trailer);
/* Makes c discard the next n bytes of input (n may be 0). */
void conn_swallow(struct conn *c, uint64_t n);
/* Zeroes the bytes of c's input buffer already parsed (and what earlier
 * moves left beyond the unparsed ones): a login's block is not left there.
 * The unparsed bytes stay. */
void conn_wipe_input(struct conn *c);
/* Grows c->keys to n keys; 0 or TERN_ENOMEM. */
int conn_keys_reserve(struct conn *c, unsigned n);
/* Whether c's peer has given up on the answers it still waits for: a
 * binary-protocol peer that shut down its sending side.  Batch scripts
 * that send requests, shut down their side and then read every answer
 * speak the text protocol; a binary client shuts its side down when it
 * abandons the connection (memjs on a timeout) and drops what still
 * comes, so its waits end as misses instead of taking an item. */
int conn_gave_up(const struct conn *c);
/* Makes c wait on q for an item (open or held) for at most ms; the wait
 * ends in ops_wait_end. */
void conn_wait(struct conn *c, struct queue *q, enum queue_pop_mode mode, int64_t ms);
/* Counts len bytes of replies (STAT bytes_written) and appends them to to. */
void conn_put(struct conn *c, struct evbuffer *to, const void *data, size_t len);

/* ---- front ends: parse one request from in[0..avail) (c->state is
 * CONN_REQUEST) and start it; return the bytes used, 0 when more input is
 * needed (the caller closes a connection that will get none) ---- */
size_t front_text_parse(struct conn *c, const char *in, size_t avail);
size_t front_binary_parse(struct conn *c, const char *in, size_t avail);
/* The current set's body arrived with a bad trailer (text formats). */
void front_text_bad_chunk(struct conn *c);
/* Writes r into to when it is a failure (CLIENT_ERROR <reason>,
 * SERVER_ERROR <reason>, ERROR) and returns 1; returns 0 for the other
 * results.  The text formats' error lines: text and meta share them. */
int front_text_failure(struct conn *c, struct evbuffer *to, enum op_result r,
		       const char *reason);
/* The text formats' statistics lines (text and meta share them). */
void front_text_stat(struct conn *c, const char *name, size_t nlen,
		     const char *val, size_t vlen);
void front_text_stats_end(struct conn *c);
/* A meta request line (front_text_parse hands meta lines over). */
void front_meta_request(struct conn *c, const char *line, size_t len);

/* ---- ops.c ---- */

/* Starts (and, unless it waits, finishes) the get in c->rq. */
void ops_get(struct conn *c);
/* Continues the get in c->rq from key_idx (after a wait). */
void ops_get_continue(struct conn *c);
/* Ends c's wait: with the item its waiter was served (reference passed),
 * or NULL on timeout or shutdown.  The get continues in CONN_GET. */
void ops_wait_end(struct conn *c, struct item *it);
/* After a reload changed the users' rights (front_auth_rebind): every
 * get or monitor waiting on a queue its user may no longer read ends
 * now, as if its time were up; the keys of a get not yet served are
 * misses. */
void ops_rights_changed(struct server *s);
/* Starts a monitor of c->rq.keys[0] for seconds. */
void ops_monitor(struct conn *c, uint32_t seconds);
/* Starts the set in c->rq: reads its body, or answers and swallows it. */
void ops_set(struct conn *c);
/* The set's body is in c->body: enqueue and answer (now or when durable). */
void ops_set_finish(struct conn *c);
/* Answers the current request's failure rc: SERVER_ERROR "<what>: <why>"
 * (out of memory for TERN_ENOMEM), in its front's words. */
void ops_fail(struct conn *c, const char *what, int rc);
/* Deletes queue k; *existed says whether it was there.  0 or a journal
 * error.  With PROTO_OPT_CLOSE_ID (delete q/<id>) it confirms the item
 * opened by id instead, and *existed says whether one was open. */
int ops_delete(struct conn *c, const struct proto_key *k, int *existed);
/* Empties queue k (nothing when absent) and answers r (OP_FLUSHED) once
 * the flush is as durable as a set's STORED would be (or a failure). */
void ops_flush(struct conn *c, const struct proto_key *k, enum op_result r);
/* Empties every queue, and answers r (OP_OK) likewise. */
void ops_flush_all(struct conn *c, enum op_result r);
/* Drops expired items of queue k, or of every queue (k NULL); returns how
 * many. */
uint64_t ops_flush_expired(struct conn *c, const struct proto_key *k);
/* Confirms up to n of c's open items on queue k. */
void ops_confirm(struct conn *c, const struct proto_key *k, uint32_t n);
/* Sends what `what` asks for through c's front (proto.h, struct
 * proto_stats: everything, one queue's counters, those of the queues
 * matching a pattern, sorted by name, or the settings ("verbosity", then
 * "<section>.<key>" for each of config_each's settings), then the end;
 * kind GROUP is the front's to refuse).  0, TERN_ENOTFOUND when a queue asked for by name
 * does not exist, TERN_ENOMEM (nothing was sent then). */
int ops_stats(struct conn *c, const struct proto_stats *what);

/*
 * The log level.  memcached's verbosity levels map onto tern's: 0 warn
 * (memcached without -v reports errors and warnings only), 1 info (-v;
 * tern's default), 2 and above debug (-vv, -vvv).  ops_log_verbosity
 * gives the verbosity a log level reads as (error: 0).
 */
enum log_level ops_verbosity_level(uint64_t v);
int ops_log_verbosity(enum log_level level);
/* Sets the log level now (s->cfg.log_level too) and, when it changes,
 * says so in the log, unfolded, with why ("verbosity 2", "reload"). */
void ops_set_log_level(struct server *s, enum log_level level, const char *why);
/* The verbosity command (text or binary) with level v: ops_set_log_level. */
void ops_verbosity(struct conn *c, uint64_t v);

/* Answers the current request OP_DENIED: c's user lacks right r (on queue
 * q of qlen bytes, for AUTH_READ and AUTH_WRITE).  Returns 0. */
int ops_deny(struct conn *c, enum auth_right r, const char *q, size_t qlen);
/* 1 when c's user has right r (on queue q for AUTH_READ and AUTH_WRITE);
 * else answers the current request OP_DENIED and returns 0.  Without
 * authentication, or for a user with every right, one test of c->acl. */
static inline int ops_allowed(struct conn *c, enum auth_right r, const char *q, size_t qlen)
{
	return !c->acl || auth_may(c->acl, r, q, qlen) || ops_deny(c, r, q, qlen);
}

/* ---- front_auth.c: authentication (server/auth.h has the users) ---- */

/* A text or meta line of a connection that has not authenticated:
 * memcached's handshake, "set <any> <flags> <exptime> <bytes>" with the
 * body "<user> <password>"; anything else is answered
 * CLIENT_ERROR unauthenticated. */
void front_auth_line(struct conn *c, const char *line, size_t len);
/* The handshake's body is in c->body (with its trailer). */
void front_auth_body(struct conn *c);
/* The text set in c->rq (its line parsed, its block not read) of a
 * logged-in connection: 1 when it is the handshake again (a set to the
 * key c logged in with), whose block is then read and answered as the
 * handshake's; else 0. */
int front_auth_set(struct conn *c);
/* The block it (whole, c's reference) of a set of a logged-in connection:
 * 1 when it is the credentials of a user (c is then that user, the set is
 * answered as a login and it is wiped and released), else 0 (a message). */
int front_auth_set_body(struct conn *c, struct item *it);
/* A binary request (c->bin) of a SASL opcode, or of a connection that has
 * not authenticated: answered here (SASL PLAIN, or a refusal) when it
 * returns 1. */
int front_auth_binary(struct conn *c);
/* After a reload: every connection's user is looked up in the new
 * s->auth; connections whose user is gone, or that never authenticated
 * while authentication is now on, are closed. */
void front_auth_rebind(struct server *s);

/* ---- guard.c ---- */

/*
 * Arms, keeps or cancels c's request deadline after c has run: a request
 * it has started (request_partial in guard.c) must be whole within
 * request_timeout of when it was first seen partial, else the connection
 * closes.  Called by conn.c at the end of every run of c.
 */
void guard_request_check(struct conn *c);
/* Frees c's timers (conn_free). */
void guard_conn_free(struct conn *c);
/*
 * A login of c failed, its answer already queued: counts the failure for
 * c and for its peer, closes c once it has made auth_max_failures (after
 * the answer), and holds its answer back for the peer's delay: the
 * peer's first failure in AUTH_PEER_FORGET_MS waits auth_failure_delay_ms,
 * each next one twice as long as the one before, up to
 * AUTH_FAILURE_DELAY_MS_MAX.  While held (c->auth_held) nothing of c is
 * parsed or sent.
 */
void guard_auth_failed(struct conn *c);
/* Frees the peers' failure counts (server_free). */
void guard_peers_free(struct server *s);

/*
 * The handshake: from its accept until it may make requests (it logged
 * in, with an auth file) and has made one, a connection is in its
 * handshake (a TLS connection's TLS handshake comes first).  It must
 * finish within handshake_timeout, and the TCP and TLS listeners'
 * connections in theirs hold at most max_handshakes slots, so that
 * strangers who connect and say nothing cannot take the slots of users
 * who log in, or of the Unix socket's.
 */
/* Whether a new connection of kind may be taken: 1, or 0 to refuse it.
 * When max_connections, or max_handshakes for a TCP or TLS connection,
 * is reached, the TCP or TLS connection longest in its handshake is
 * closed to make room, if it has been in it HANDSHAKE_EVICT_MS. */
int guard_admit(struct server *s, enum conn_kind kind);
/* c (accepted, or logged out by a failed login) begins its handshake. */
void guard_handshake_begin(struct conn *c);
/* c has finished its handshake (or is being freed). */
void guard_handshake_end(struct conn *c);
/* Closes the connections whose handshake outlived handshake_timeout
 * (now_ms: the monotonic clock; the server's tick calls it). */
void guard_handshake_tick(struct server *s, int64_t now_ms);
/*
 * Makes listener l of s pause, instead of spinning, when accept fails
 * (out of descriptors), and report the failures in the log at a bounded
 * rate.  l's callback argument must be s (its error callback gets it).
 * 0 or TERN_ENOMEM.
 */
int guard_listener_add(struct server *s, struct evconnlistener *l);
/* l accepted a connection: its next pause starts from the shortest. */
void guard_accepted(struct server *s, struct evconnlistener *l);
/* Frees what guard_listener_add made, for every listener of s. */
void guard_listeners_free(struct server *s);
/* Raises the process's soft open-file limit to its hard limit, and warns
 * when max_connections still does not fit under it. */
void guard_check_fd_limit(const struct server *s);

/* ---- status.c: server and queue status, the status command ---- */

/* The status that applies to queue q, or (q NULL) to a queue named name
 * (len bytes) were it made now: the stricter of the server's and the
 * queue's. */
enum queue_status status_of(struct server *s, struct queue *q, const char *name, size_t len);
/* NULL when the status of q (or name, as for status_of) lets a request
 * through (write: it enqueues; else it takes or shows an item); else the
 * reason it is refused ("server is READONLY", "queue NAME is QUIESCENT"),
 * written into buf. */
const char *status_refusal(struct server *s, struct queue *q, const char *name, size_t len,
			   int write, char *buf, size_t buflen);
/* Sets the server's status (by_operator: the status command); QUIESCENT
 * answers every waiter as a timeout would. */
void status_set_server(struct server *s, enum queue_status st, int by_operator);
/* Writes what operators set to DATA_DIR/status (atomically); 0 or
 * TERN_ESYS with a message in err. */
int status_save(struct server *s, char *err, size_t errlen);
/* Reads DATA_DIR/status, once the queues are open (start).  0, or
 * TERN_ESYS / TERN_EINVAL with a message in err. */
int status_load(struct server *s, char *err, size_t errlen);
/* After a reload installed s->cfg (old_cfg: the server status configured
 * before): applies a changed [server] status and saves the file.  0 or
 * status_save's error. */
int status_reload(struct server *s, enum queue_status old_cfg, char *err, size_t errlen);
/* The text protocol's status command (proto.h) of c. */
void status_command(struct conn *c, const struct proto_req *req);
/* 0 when no alias of cfg is named like a queue of s; else TERN_EINVAL
 * with a message in err. */
int status_aliases_check(struct server *s, const struct config *cfg, char *err,
			 size_t errlen);

/* ---- server.c ---- */

/* Rereads the queue settings; 0 or an error with a message in err. */
int server_reload(struct server *s, char *err, size_t errlen);
/* Stops accepting, answers what was received, then stops the loop. */
void server_begin_shutdown(struct server *s);

#endif
