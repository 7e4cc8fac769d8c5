/*
 * metrics.h: the server's figures for Prometheus: the text exposition
 * format (version 0.0.4) at GET /metrics on an HTTP listener of its own
 * (libevent's evhttp, on the event loop: a scrape reads the queues as the
 * loop sees them, without a lock).  Off unless metrics_listen is set.
 *
 * The families of the server's and the queues' figures come from the
 * tables of counters.h, which `stats` shares; metrics.c adds the
 * histograms and the process_* families.  docs/OPERATIONS.md documents
 * them all.
 */
#ifndef TERN_METRICS_H
#define TERN_METRICS_H

#include <stddef.h>

struct server;
struct metrics;
struct evbuffer;

/*
 * Starts the HTTP listener of s on host:port (port 0: any free port).
 * Returns 0, or TERN_ESYS / TERN_ENOMEM with a message in err.
 */
int metrics_start(struct server *s, const char *host, int port, struct metrics **out,
		  char *err, size_t errlen);
/* The port bound. */
int metrics_port(const struct metrics *m);
/* Stops the listener and closes its connections. */
void metrics_free(struct metrics *m);
/* Appends the whole exposition of s to out.  0 or TERN_ENOMEM. */
int metrics_render(struct server *s, struct evbuffer *out);

#endif
