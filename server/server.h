/*
 * server.h: ternd's event loop: listener, connections, the memcached text,
 * meta and binary protocols on one port, stats, signals and orderly
 * shutdown (how the files of server/ divide the work: front.h).
 *
 * DESIGN: one event-loop thread owns every connection and every queue, so
 * the hot path takes no locks.  Disk work happens on the journal's writer
 * thread (journal/journal.h); when a queue syncs before replying (always,
 * odsync) the STORED reply of a set is held, in order, until the journal
 * reports its ticket durable, while the connection goes on parsing the
 * requests behind it: pipelined sets from one client and sets from many
 * clients share one sync (group commit).
 */
#ifndef TERN_SERVER_H
#define TERN_SERVER_H

#include "config.h"

struct server;

/* After this long with no byte read or written, the heap kept for reuse
 * goes back to the kernel (lib/tern.h, tern_heap_keep). */
#define SERVER_HEAP_IDLE_MS 5000

/*
 * Creates the server: opens the data directory and its journals (recovering
 * every queue in the catalog), binds the listening socket.  cfg is copied.
 * Returns 0 or a TERN_E* code with a message in err.
 */
int server_new(const struct config *cfg, struct server **out, char *err, size_t errlen);
/* The ports actually bound (useful with port 0): TCP, TLS, metrics; -1
 * for a listener that is off. */
int server_port(struct server *s);
int server_tls_port(struct server *s);
int server_metrics_port(struct server *s);
/* The status line the service manager shows while s runs (after a
 * failed reload, the failure replaces it until a reload succeeds). */
void server_set_status_line(struct server *s, const char *line);
/* Runs the event loop until shutdown (SIGTERM/SIGINT or `shutdown`).
 * Returns 0 after an orderly stop. */
int server_run(struct server *s);
/* Frees everything (journals were closed by server_run's shutdown). */
void server_free(struct server *s);

#endif
