/*
 * status.h: the server's and the queues' status (UP, READONLY,
 * QUIESCENT), and the file that keeps what operators set across restarts
 * (status.c).  ops.c calls it (a refused request, the status command);
 * it calls no connection.
 */
#ifndef TERN_STATUS_H
#define TERN_STATUS_H

#include <stddef.h>

#include "../protocol/proto.h"
#include "queue.h"

struct config;
struct server;

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
/* 0 when no alias of cfg is named like a queue of s; else TERN_EINVAL
 * with a message in err. */
int status_aliases_check(struct server *s, const struct config *cfg, char *err,
			 size_t errlen);

#endif
