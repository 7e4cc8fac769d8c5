/*
 * state.h: the server's state, shared by the files of server/ (server.h
 * is what main.c sees): the event loop, the configuration, the queues,
 * the connections, the users, and what the server counts (counters.h).
 */
#ifndef TERN_STATE_H
#define TERN_STATE_H

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "../protocol/proto.h"
#include "config.h"
#include "counters.h"
#include "queue.h"

struct auth;
struct conn;
struct metrics;
struct privs_reader;
struct tls_ctx;
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
	const struct front *text_fe;        /* what a connection speaks: text */
	const struct front *binary_fe;      /* unless its first byte is 0x80 */
	/* What the operations reach of server.c, above them (server_new
	 * sets them): the shutdown and reload commands (ops_shutdown,
	 * ops_reload). */
	struct server_hooks {
		/* Stops accepting, answers what was received, then stops
		 * the loop. */
		void (*shutdown)(struct server *s);
		/* Rereads the configuration; 0 or an error with a message in
		 * err. */
		int (*reload)(struct server *s, char *err, size_t errlen);
	} hooks;
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
					       oldest first (conn.c keeps it,
					       guard.c closes from it) */
	uint32_t nhs, nhs_net;              /* how many; of them TCP and TLS */
	enum queue_status status;           /* the server's (status.c) */
	int status_by_op;                   /* ... set by the status command */
	uint64_t reads;                     /* sockets read so far (server_run's
					       polling) */
	const struct conn *last_reader;     /* the connection read last (only
					       compared, never followed) */
	int reader_switched;                /* this pass read a connection
					       other than the one before
					       (server_run clears it) */
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

#endif
