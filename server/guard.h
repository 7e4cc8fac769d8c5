/*
 * guard.h: what keeps clients from tying the server up (guard.c): the
 * handshake's deadline and share of the slots, the price of guessing
 * passwords, and the pause in accepting connections when descriptors run
 * out.  guard.c calls conn.c (it closes and resumes connections), never
 * the other way: the request deadline, each connection's own timer, and
 * the list of connections in their handshake live in conn.c.
 */
#ifndef TERN_GUARD_H
#define TERN_GUARD_H

#include <event2/listener.h>

#include "conn.h"

struct server;

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

#endif
