/*
 * ops.h: the operations every wire format maps onto (ops.c): enqueue
 * with its reply held until the journal has the item, dequeue with its
 * options and waits, delete, flush, confirm, monitor, stats, the log
 * level, status, reload and shutdown.
 *
 * Each operation checks the right its connection's user needs for it
 * (auth.h): a front names the operation and never a right.  A refused
 * operation is answered OP_DENIED through the request's front; an entry
 * point that returns a code returns TERN_EACCES then, and the front
 * answers nothing more.
 */
#ifndef TERN_OPS_H
#define TERN_OPS_H

#include "../lib/log.h"
#include "../protocol/proto.h"
#include "conn.h"

struct server;

/* Starts (and, unless it waits, finishes) the get in c->rq. */
void ops_get(struct conn *c);
/* Continues the get in c->rq from key_idx (the fronts' resume: between
 * its keys, or after a wait). */
void ops_get_continue(struct conn *c);
/* After a reload changed the users' rights (front_auth_rebind): every
 * get or monitor waiting on a queue its user may no longer read ends
 * now, as if its time were up; the keys of a get not yet served are
 * misses. */
void ops_rights_changed(struct server *s);
/* Starts a monitor of c->rq.keys[0] for seconds. */
void ops_monitor(struct conn *c, uint32_t seconds);
/* Starts the set in c->rq (its body still to come): counts it, checks
 * c's right to write the queue, the queue (or alias), its status and the
 * body's size; returns the item the body is to be read into, or NULL when
 * the set was refused, and answered (its body is to be swallowed). */
struct item *ops_set(struct conn *c);
/* The set's body it, with its trailer, is whole (c's reference passes):
 * enqueues it and answers, now or once the journal has it. */
void ops_set_finish(struct conn *c, struct item *it);
/* Answers the current request's failure rc: SERVER_ERROR "<what>: <why>"
 * (out of memory for TERN_ENOMEM), in its front's words. */
void ops_fail(struct conn *c, const char *what, int rc);
/* Deletes queue k (an administrator's right); *existed says whether it
 * was there.  0, a journal error, or TERN_EACCES.  With PROTO_OPT_CLOSE_ID
 * (delete q/<id>) it confirms the item opened by id instead (a reader's
 * right), and *existed says whether one was open. */
int ops_delete(struct conn *c, const struct proto_key *k, int *existed);
/* Empties queue k (nothing when absent) and answers r (OP_FLUSHED) once
 * the flush is as durable as a set's STORED would be (or a failure).  An
 * administrator's right. */
void ops_flush(struct conn *c, const struct proto_key *k, enum op_result r);
/* Empties every queue, and answers r (OP_OK) likewise. */
void ops_flush_all(struct conn *c, enum op_result r);
/* Drops expired items of queue k, or of every queue (k NULL), and sets *n
 * to how many.  An administrator's right: 0 or TERN_EACCES. */
int ops_flush_expired(struct conn *c, const struct proto_key *k, uint64_t *n);
/* Confirms up to n of c's open items on queue k (a reader's right): 0 or
 * TERN_EACCES. */
int ops_confirm(struct conn *c, const struct proto_key *k, uint32_t n);
/* Sends what `what` asks for through c's front (proto.h, struct
 * proto_stats: everything, one queue's counters, those of the queues
 * matching a pattern, sorted by name, or the settings ("verbosity", then
 * "<section>.<key>" for each of config_each's settings), then the end;
 * kind GROUP is the front's to refuse).  The stats right.  0,
 * TERN_ENOTFOUND when a queue asked for by name does not exist,
 * TERN_ENOMEM (nothing was sent then), TERN_EACCES. */
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
/* The verbosity command (text or binary) with level v, or the text
 * verbosity command with a level's name: ops_set_log_level.  An
 * administrator's right: 0 or TERN_EACCES (the front answers OK). */
int ops_verbosity(struct conn *c, uint64_t v);
int ops_log_level(struct conn *c, enum log_level level);

/* The shutdown command: with enable_shutdown, c closes and the server
 * shuts down (s->hooks.shutdown); answered CLIENT_ERROR without.  An
 * administrator's right. */
void ops_shutdown(struct conn *c);
/* The reload command: rereads the configuration (s->hooks.reload) and
 * answers OK, or SERVER_ERROR with why.  An administrator's right. */
void ops_reload(struct conn *c);
/*
 * The status command: shows (word NULL: the stats right) or sets (word,
 * wlen bytes: an administrator's right) the status of queue k, or of the
 * server (k NULL), and saves what operators set (status.c).  0 with *st
 * the status shown or set; TERN_ENOTFOUND (no queue k), TERN_EINVAL (word
 * names no status), TERN_ESYS (set but not saved: why in err, errlen
 * bytes), TERN_EACCES.
 */
int ops_status(struct conn *c, const struct proto_key *k, const char *word, size_t wlen,
	       enum queue_status *st, char *err, size_t errlen);

#endif
