/*
 * statuspage.h: what the metrics listener (metrics.h) serves besides
 * /metrics, for people and for probes:
 *   /         a read-only HTML page of the server and its queues: depth,
 *             rates, open items, the oldest item's age, status, the
 *             history of the last minutes drawn as SVG (qhist.h), journal
 *             disk use and the fsync latency histogram, sync mode and
 *             version.  No message body ever appears on it.  It needs no
 *             JavaScript; /status.js only refreshes it in place.
 *   /healthz  200 "ok" while the event loop answers (liveness).
 *   /readyz   200 "ready", or 503 with one reason a line (readiness: see
 *             statuspage_ready).
 * Everything is rendered on the event loop from the queues as the loop
 * sees them.  The page lists at most STATUSPAGE_MAX_ROWS queues (pages
 * of them, sorted and filtered by its query), so its size and cost stay
 * bounded with tens of thousands of queues.
 */
#ifndef TERN_STATUSPAGE_H
#define TERN_STATUSPAGE_H

#include <stddef.h>

struct evhttp;
struct server;
struct evbuffer;

/* Queues listed per page by default, and at most (the n= argument). */
#define STATUSPAGE_ROWS 100
#define STATUSPAGE_MAX_ROWS 500

/* Adds the page, its script and the probes to http.  0 or TERN_ENOMEM. */
int statuspage_attach(struct evhttp *http, struct server *s);

/*
 * Whether s should be sent traffic: 1 when ready, else 0 with the reasons
 * written into why (one a line, each ending in "\n"; truncated to len).
 * Not ready: shutting down; the server's status is READONLY or QUIESCENT;
 * a queue's journal has failed (it refuses sets until a restart); the
 * data directory is not writable, or its file system has less room than
 * one journal segment.  While ternd recovers its queues at start it
 * answers no request at all, so a probe then times out.
 */
int statuspage_ready(struct server *s, char *why, size_t len);

/*
 * Appends the page to out for the query string query (the part of the
 * URI after '?', or NULL): page=N (from 1), n=ROWS, sort=name|items|bytes|
 * open|age|in|out, q=TEXT (names that contain TEXT), refresh=SECONDS (how
 * often the script reloads it; 0: never).  Arguments that do not parse
 * take their defaults.  0 or TERN_ENOMEM.
 */
int statuspage_render(struct server *s, const char *query, struct evbuffer *out);

#endif
