/*
 * conn.h: one client connection: its socket and buffers, the state
 * machine that reads requests and hands them to its wire format
 * (front.h), its output, and the bookkeeping that keeps replies in order
 * and items from being lost.  conn.c has the design.
 */
#ifndef TERN_CONN_H
#define TERN_CONN_H

#include <event2/event.h>

#include "../protocol/binary.h"
#include "../protocol/meta.h"
#include "../protocol/proto.h"
#include "front.h"
#include "queue.h"

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
	const struct front *fe;             /* the wire format it speaks, which its
					       first byte chose (NULL before) */
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
					       restricted (ops.c checks them
					       per operation); else NULL */
	char *auth_key;                     /* the key of its text handshake */
	uint16_t auth_key_len;
	struct conn_peer peer;
	uint32_t auth_failures;             /* failed logins (auth_max_failures) */
	int auth_held;                      /* the answer to a failed login is
					       held back: nothing is parsed or
					       sent (guard.c) */
	struct event *auth_timer;           /* ends the hold (made when needed) */
	/* the handshake (conn_handshake_begin): from its accept until it may make requests
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
	void (*wait_end)(struct conn *c, struct item *it); /* conn_wait's end */
	struct event *wait_timer;
	struct event *resume_ev;            /* resumes parsing from the loop */
	struct event *settle_ev;            /* CLOSING: checks delivery (conn_settle) */
	int64_t settle_deadline_ms;

	struct pend *pend;                  /* ring of pending sets */
	unsigned pend_head, npend, pend_cap;
	uint64_t pend_seq, pend_done;       /* pends pushed, and resolved, so far */

	struct held *held;                  /* ring of held items, oldest first */
	unsigned held_head, nheld, held_cap;

	/* the request deadline (conn.c, request_check) */
	uint64_t reqs;                      /* request lines and frames parsed */
	uint64_t req_id;                    /* the request its timer is for */
	struct event *req_timer;            /* made when first needed */
	uint32_t req_timeout_s;             /* request_timeout when armed */
	int req_armed;                      /* req_timer is pending */
};

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
/*
 * The handshake: from its accept until it may make requests (it logged
 * in, with an auth file) and has made one, a connection is in its
 * handshake, on s->hs_head's list, oldest first (guard.c closes from it
 * the connections that outlive handshake_timeout or must make room).
 * conn_handshake_begin puts c on the list (conn_accept, and a failed
 * login that logs c out); conn_handshake_end takes it off (c made its
 * first request, or is freed).
 */
void conn_handshake_begin(struct conn *c);
void conn_handshake_end(struct conn *c);

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
 * succeeded too.  waits: the reply waits for a sync, so the set does not
 * use up c's turn (REQS_PER_TURN) and the journal learns that a client
 * waits.  0 or TERN_ENOMEM (the caller answers at once). */
int conn_defer(struct conn *c, uint64_t lo, uint64_t ticket, uint64_t cas, int waits);
/* The same for another reply r of the current request (a flush's). */
int conn_defer_reply(struct conn *c, uint64_t ticket, enum op_result r);
/* The journal reports tickets up to upto durable (err 0) or failed. */
void conn_durable(struct server *s, uint64_t upto, int err);
/* Makes c read the next body->len + trailer bytes of input into body
 * (c takes the reference), then hand it to its wire format (struct
 * front's body_done). */
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
/* Makes c wait on q for an item taken with mode for at most ms: end gets
 * the item (c's reference) or, when the time is up, NULL; c runs again
 * from the loop then.  c->state is CONN_WAIT until end. */
void conn_wait(struct conn *c, struct queue *q, enum queue_pop_mode mode, int64_t ms,
	       void (*end)(struct conn *c, struct item *it));
/* Ends c's wait now, as its time running out would (nothing when c does
 * not wait). */
void conn_wait_cancel(struct conn *c);
/* Counts len bytes of replies (STAT bytes_written) and appends them to to. */
void conn_put(struct conn *c, struct evbuffer *to, const void *data, size_t len);

#endif
