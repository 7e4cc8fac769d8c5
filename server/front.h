/*
 * front.h: the interface between a connection (conn.c), the wire formats
 * and the queue operations (ops.c): what a request is in wire-neutral
 * terms (struct request), the outcomes an operation has (enum op_result),
 * and what each format gives the others (struct front).  One file per
 * format: front_text.c (memcached's text protocol), front_meta.c (the
 * meta protocol, on text's framing), front_binary.c (the binary
 * protocol); front_auth.c logs connections in.
 */
#ifndef TERN_FRONT_H
#define TERN_FRONT_H

#include <event2/buffer.h>

#include "../lib/tern.h"
#include "../protocol/proto.h"

struct conn;
struct server;

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

/*
 * What a wire format gives the connection and the operations: requests
 * in and replies out.  conn.c hands every request to the format its
 * connection speaks (c->fe, which the first byte chooses: binary for
 * 0x80, else text, whose lines include meta's) through parse, body_done
 * and resume, and never calls a format's file by name.  The operations
 * answer through the format of the current request (c->rq.x.fe: text,
 * meta or binary) and never know its bytes.  A format checks no right:
 * it names the operation (ops.h), which decides the right it needs.
 */
struct front {
	const char *name;
	enum front_id id;

	/* ---- requests in (NULL for meta: its lines come through text's) */
	/* Parses one request from in[0..avail) (c->state is CONN_REQUEST)
	 * and starts it; returns the bytes used, 0 when more input is needed
	 * (the caller closes a connection that will get none). */
	size_t (*parse)(struct conn *c, const char *in, size_t avail);
	/* The body of the current set, with its trailer, is whole in it (c's
	 * reference passes; c->state is CONN_REQUEST again). */
	void (*body_done)(struct conn *c, struct item *it);
	/* Goes on with the current request (c->state is CONN_GET: a get
	 * between its keys, or after its wait). */
	void (*resume)(struct conn *c);
	/* A peer of this format that shuts down its sending side has given
	 * up on the answers it waits for (conn_gave_up). */
	uint8_t eof_gives_up;

	/* ---- replies out */
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

/* ---- front_lines.c: what the text and meta protocols share ---- */

/* Starts the text or meta set in c->rq (ops_set), then reads its data
 * block and CRLF, or swallows them when the set was refused. */
void front_lines_set(struct conn *c);

/* Appends reply r ("STORED\r\n", ...: proto.h) to `to`. */
void front_lines_reply(struct conn *c, struct evbuffer *to, enum proto_reply r);
/* Appends "<cls> <reason>\r\n" to `to`. */
void front_lines_error(struct conn *c, struct evbuffer *to, const char *cls,
		       const char *reason);
/* Appends outcome r's line to `to` when r is a failure (CLIENT_ERROR
 * <reason>, SERVER_ERROR <reason>, ERROR) and returns 1; returns 0 for
 * the other outcomes, which each protocol words its own way. */
int front_lines_failure(struct conn *c, struct evbuffer *to, enum op_result r,
			const char *reason);
/* One statistic ("STAT <name> <value>"), and the end of them ("END"). */
void front_lines_stat(struct conn *c, const char *name, size_t nlen,
		      const char *val, size_t vlen);
void front_lines_stats_end(struct conn *c);

/* ---- front_meta.c ---- */

/* Runs a meta request line (text's parse hands meta lines over). */
void front_meta_request(struct conn *c, const char *line, size_t len);

/* ---- front_auth.c: authentication (server/auth.h has the users) ---- */

/* A text or meta line of a connection that has not authenticated:
 * memcached's handshake, "set <any> <flags> <exptime> <bytes>" with the
 * body "<user> <password>"; anything else is answered
 * CLIENT_ERROR unauthenticated. */
void front_auth_line(struct conn *c, const char *line, size_t len);
/* The handshake's body, with its trailer, is whole in it (c's
 * reference passes). */
void front_auth_body(struct conn *c, struct item *it);
/* The text set in c->rq (its line parsed, its block not read) of a
 * logged-in connection: 1 when it is the handshake again (a set to the
 * key c logged in with), whose block is then read and answered as the
 * handshake's; else 0. */
int front_auth_set(struct conn *c);
/* The block it (whole, c's reference) of a text or meta set of a
 * logged-in connection: 1 when it is the credentials of a user (c is then
 * that user, the set is answered as a login and it is wiped and
 * released), else 0 (a message). */
int front_auth_set_body(struct conn *c, struct item *it);
/* A binary request (c->bin) of a SASL opcode, or of a connection that has
 * not authenticated: answered here (SASL PLAIN, or a refusal) when it
 * returns 1. */
int front_auth_binary(struct conn *c);
/* After a reload: every connection's user is looked up in the new
 * s->auth; connections whose user is gone, or that never authenticated
 * while authentication is now on, are closed. */
void front_auth_rebind(struct server *s);

#endif
