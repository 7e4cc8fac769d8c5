/*
 * ops.c: the operations every wire format maps onto (see ops.h):
 * enqueue with its deferred durable reply, dequeue with open, close,
 * abort, peek and waits, delete, flush, confirm, monitor, statistics,
 * status, reload and shutdown, and the check of each one's right.  The
 * front end of the current request (c->rq.x.fe) turns each outcome into
 * its format's bytes; nothing here knows a format.
 */
#include "auth.h"
#include "conn.h"
#include "config.h"
#include "front.h"
#include "ops.h"
#include "state.h"
#include "status.h"
#include "../lib/log.h"

#include <fnmatch.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* exptime values below this are relative seconds (memcached's rule). */
#define EXPTIME_RELATIVE_MAX 2592000

static void reply(struct conn *c, enum op_result r, const char *reason)
{
	c->rq.x.fe->reply(c, conn_out(c), &c->rq.x, r, reason, 0);
}

/* ---- rights ----
 *
 * Every rights check of a request is made here, from the operation: the
 * get and the confirm read the queue, the set writes it, delete q/<id>
 * confirms (a reader's right), deleting or flushing a queue, the
 * verbosity, reload, shutdown and setting a status are an administrator's,
 * and the statistics and showing a status need the stats right.  A front
 * names the operation and never a right; a refused operation is answered
 * OP_DENIED here, and its entry point returns TERN_EACCES when it returns
 * a code.
 */

/* Answers the current request OP_DENIED: c's user lacks right r (on queue
 * q of qlen bytes, for AUTH_READ and AUTH_WRITE).  Returns 0. */
static __attribute__((noinline)) int deny(struct conn *c, enum auth_right r, const char *q,
					  size_t qlen)
{
	char why[64 + PROTO_NAME_MAX];
	const char *right = r == AUTH_READ ? "read" : r == AUTH_WRITE ? "write"
			    : r == AUTH_STATS ? "stats" : "admin";

	if (q)
		snprintf(why, sizeof(why), "access denied: %s %.*s", right, (int)qlen, q);
	else
		snprintf(why, sizeof(why), "access denied: %s", right);
	reply(c, OP_DENIED, why);
	return 0;
}

/* 1 when c's user has right r (on queue q for AUTH_READ and AUTH_WRITE);
 * else answers the current request OP_DENIED and returns 0.  Without
 * authentication, or for a user with every right, one test of c->acl. */
static inline int allowed(struct conn *c, enum auth_right r, const char *q, size_t qlen)
{
	return !c->acl || auth_may(c->acl, r, q, qlen) || deny(c, r, q, qlen);
}

void ops_fail(struct conn *c, const char *what, int rc)
{
	char buf[300];

	snprintf(buf, sizeof(buf), "%s: %s", what, tern_strerror(rc));
	reply(c, rc == TERN_ENOMEM ? OP_NO_MEMORY : OP_SERVER_ERROR, buf);
}

/* Makes q the connection's last queue (find_queue). */
static void remember_queue(struct conn *c, struct queue *q)
{
	c->last_q = q;
	c->last_q_gen = qreg_generation(c->srv->reg);
	c->last_q_name = queue_name(q);
	c->last_q_len = queue_name_len(q);
}

/* find_queue past the connection's last queue. */
static __attribute__((noinline)) struct queue *find_queue_slow(struct conn *c, const char *name,
								size_t len)
{
	struct queue *q = qreg_find(c->srv->reg, name, len);

	if (q)
		remember_queue(c, q);
	return q;
}

/* Finds queue name (NULL when it does not exist).  Clients mostly talk to
 * one queue, so the connection remembers the last one (with its name, so
 * that the comparison makes no call) and skips the hash lookup while no
 * queue has been deleted since. */
static inline struct queue *find_queue(struct conn *c, const char *name, size_t len)
{
	if (c->last_q && c->last_q_len == len && c->last_q_gen == qreg_generation(c->srv->reg) &&
	    tern_same_bytes(c->last_q_name, name, len))
		return c->last_q;
	return find_queue_slow(c, name, len);
}

/*
 * queue_for for a key find_queue did not find: the same contract.
 */
static __attribute__((noinline)) struct queue *queue_make(struct conn *c,
							   const struct proto_key *k,
							   int create, int *rc)
{
	struct server *s = c->srv;
	char name[PROTO_NAME_MAX + 1];
	struct queue_conf qc;
	struct queue *q;

	*rc = 0;
	/* an alias's name is never a queue's (its requests are answered
	 * before they get here; one a reload made meanwhile finds nothing) */
	if (s->cfg.aliases && config_alias_find(&s->cfg, k->name, k->len))
		return NULL;
	memcpy(name, k->name, k->len);
	name[k->len] = '\0';
	if (!s->cfg.auto_create && !config_queue_known(&s->cfg, name)) {
		log_debug("refused queue %s: auto_create is off and no section names it", name);
		s->stats.rejected_queues++;
		*rc = TERN_ENOTFOUND;
		return NULL;
	}
	if (!create)
		return NULL;
	if (s->cfg.max_queues && qreg_count(s->reg) >= s->cfg.max_queues) {
		/* the same words each time, so that repeats fold in the log */
		log_warn("max_queues (%u) reached: a new queue was refused", s->cfg.max_queues);
		s->stats.rejected_queues++;
		*rc = TERN_EFULL;
		return NULL;
	}
	config_queue_conf(&s->cfg, name, &qc);
	*rc = qreg_get(s->reg, k->name, k->len, &qc, &q);
	if (*rc)
		return NULL;
	remember_queue(c, q);
	return q;
}

/*
 * The queue of key k.  One that does not exist is created only when create
 * is set and the policy allows it: auto_create, or a [queue NAME] or
 * [queue PATTERN] section naming it, and fewer than max_queues queues.
 * Returns the queue, or NULL with *rc: 0 when it does not exist and was not
 * to be created; TERN_ENOTFOUND when auto_create = no and no section names
 * it (clients may not use it at all); TERN_EFULL at max_queues; or
 * qreg_get's error.
 */
static inline struct queue *queue_for(struct conn *c, const struct proto_key *k, int create,
				      int *rc)
{
	struct queue *q = find_queue(c, k->name, k->len);

	*rc = 0;
	return q ? q : queue_make(c, k, create, rc);
}

/* Answers the current request for a queue that queue_for would not give
 * (rc is its error), in the front's words. */
static void refuse_queue(struct conn *c, int rc)
{
	char buf[80];

	if (rc == TERN_ENOTFOUND) {
		reply(c, OP_CLIENT_ERROR, "no such queue and auto_create is off");
	} else if (rc == TERN_EFULL) {
		snprintf(buf, sizeof(buf), "too many queues (max_queues is %u)",
			 c->srv->cfg.max_queues);
		reply(c, OP_SERVER_ERROR, buf);
	} else {
		ops_fail(c, "cannot open queue", rc);
	}
}

/* ---- status, aliases ---- */

/* status_refuses past its common answer (both statuses UP). */
static __attribute__((noinline)) int status_refuses_slow(struct conn *c, struct queue *q,
							  const char *name, size_t len, int write)
{
	char buf[64 + PROTO_NAME_MAX];
	const char *why = status_refusal(c->srv, q, name, len, write, buf, sizeof(buf));

	if (!why)
		return 0;
	c->srv->stats.status_refused++;
	reply(c, OP_UNAVAILABLE, why);
	return 1;
}

/* Answers the current request OP_UNAVAILABLE and returns 1 when the
 * status of q (or, q NULL, of queue name of len bytes) refuses it (write:
 * it enqueues; else it takes or shows an item). */
static inline int status_refuses(struct conn *c, struct queue *q, const char *name, size_t len,
				 int write)
{
	if (q && c->srv->status == QUEUE_UP && queue_get_status(q) == QUEUE_UP)
		return 0;
	return status_refuses_slow(c, q, name, len, write);
}

/* The alias key k names, or NULL (a queue of that name exists, or no
 * alias has it). */
static const struct config_alias *alias_of(struct conn *c, const struct proto_key *k)
{
	if (!c->srv->cfg.aliases || find_queue(c, k->name, k->len))
		return NULL;
	return config_alias_find(&c->srv->cfg, k->name, k->len);
}

/* Whether the status of a destination of alias a refuses a set (answered
 * then). */
static int alias_refuses(struct conn *c, const struct config_alias *a)
{
	for (unsigned i = 0; i < a->ndest; i++) {
		const char *d = a->dest[i];
		size_t len = strlen(d);

		if (status_refuses(c, find_queue(c, d, len), d, len, 1))
			return 1;
	}
	return 0;
}

/* ---- set ---- */

struct item *ops_set(struct conn *c)
{
	struct server *s = c->srv;
	struct request *r = &c->rq;
	const struct config_alias *a;
	struct queue *q = NULL;
	uint64_t limit;
	struct item *body;
	int rc;

	s->stats.cmd_set++;
	if (!allowed(c, AUTH_WRITE, r->key.name, r->key.len))
		return NULL;
	/* Refused before its body is read (checked again at the end: others
	 * may create or delete queues, or change statuses, meanwhile). */
	if ((a = alias_of(c, &r->key)) != NULL) {
		if (alias_refuses(c, a))
			return NULL;
	} else {
		q = queue_for(c, &r->key, 0, &rc);
		if (!q && rc) {
			refuse_queue(c, rc);
			return NULL;
		}
		if (status_refuses(c, q, r->key.name, r->key.len, 1))
			return NULL;
	}
	limit = q ? queue_get_conf(q)->max_item_size : s->cfg.max_item_size;
	if (r->bytes > limit || r->bytes > s->cfg.max_item_size) {
		/* too large: its body is swallowed, so the stream stays in step */
		reply(c, OP_TOO_LARGE, "item too large");
		return NULL;
	}
	body = item_new((uint32_t)r->bytes);
	if (!body) {
		reply(c, OP_NO_MEMORY, "out of memory");
		return NULL;
	}
	body->flags = r->flags;
	return body;
}

/* Answers a set whose push gave rc (ticket, id: queue_push's; lo: the
 * lowest ticket of its copies); waits: its reply waits for a sync. */
static void set_reply(struct conn *c, int rc, uint64_t lo, uint64_t ticket, uint64_t id,
		      int waits)
{
	if (rc == 0 && ticket) {
		if (conn_defer(c, lo, ticket, id, waits) == 0)
			return;
		/* Could not hold the reply: answer now rather than lose it. */
	}
	if (rc == 0)
		c->rq.x.fe->reply(c, conn_out(c), &c->rq.x, OP_STORED, NULL, id);
	else if (rc == TERN_EFULL)
		reply(c, OP_NOT_STORED, "queue is full");
	else if (rc == TERN_ETOOBIG)
		reply(c, OP_TOO_LARGE, "item too large");
	else
		ops_fail(c, "journal", rc);
}

/*
 * A set to alias a: a copy of it (the caller's reference, used up) into
 * each destination, made as needed under the same policy as any queue.
 * Like a fanout, a destination that is full or takes smaller items skips
 * its copy: the set is STORED when one copy was stored, answered once the
 * highest ticket among them (each queue's sync mode) is resolved, which
 * resolves every lower one too, and only if none of them failed.  An add is stored only when every
 * destination is empty.
 */
static void alias_set_finish(struct conn *c, const struct config_alias *a, struct item *it)
{
	struct queue *qs[CONFIG_ALIAS_DEST_MAX];
	uint64_t ticket = 0, id = 0, t, tlo, lo = 0;
	unsigned i, stored = 0;
	int rc, err = 0, waits = 0;

	for (i = 0; i < a->ndest; i++) {
		struct proto_key k = { .name = a->dest[i], .len = (uint16_t)strlen(a->dest[i]) };

		qs[i] = queue_for(c, &k, 1, &rc);
		if (!qs[i]) {
			item_unref(it);
			refuse_queue(c, rc ? rc : TERN_ENOTFOUND);
			return;
		}
		if (status_refuses(c, qs[i], k.name, k.len, 1)) {
			item_unref(it);
			return;
		}
		if (c->rq.add && queue_has_items(qs[i])) {
			item_unref(it);
			reply(c, OP_EXISTS, "queue is not empty");
			return;
		}
	}
	/* the last destination takes the caller's reference: the copies are
	 * made from it before */
	for (i = 0; i < a->ndest; i++) {
		struct item *copy = i + 1 < a->ndest ? queue_item_copy(it) : it;

		if (!copy) {
			item_unref(it);
			err = TERN_ENOMEM;
			break;
		}
		rc = queue_push_delayed(qs[i], copy, c->rq.key.delay_ms, &t, i == 0 ? &id : NULL,
					&tlo);
		if (rc == 0) {
			stored++;
			if (t > ticket)
				ticket = t;
			if (tlo && (!lo || tlo < lo))
				lo = tlo;
			if (t && journal_sync_waits(queue_get_conf(qs[i])->jopts.sync))
				waits = 1;
		} else if (!err || err == TERN_EFULL || err == TERN_ETOOBIG) {
			err = rc; /* a failure to write wins over a full queue */
		}
	}
	if (err && (stored == 0 || (err != TERN_EFULL && err != TERN_ETOOBIG))) {
		set_reply(c, err, 0, 0, 0, 0);
		return;
	}
	set_reply(c, 0, lo, ticket, id, waits);
}

void ops_set_finish(struct conn *c, struct item *it)
{
	struct request *r = &c->rq;
	const struct config_alias *a;
	struct queue *q;
	uint64_t ticket = 0, id = 0, lo = 0;
	int rc;
	int64_t now;

	now = tern_pass_now_ms(); /* the add time queue_push gives it too */
	if (r->exptime == 0)
		it->expiry_ms = 0;
	else if (r->exptime < EXPTIME_RELATIVE_MAX)
		it->expiry_ms = now + r->exptime * 1000;
	else if (r->exptime > INT64_MAX / 1000)
		it->expiry_ms = 0;
	else
		it->expiry_ms = r->exptime * 1000;
	/* Looked up again now: the queue may have been deleted, or a status
	 * changed, while the body was arriving. */
	if ((a = alias_of(c, &r->key)) != NULL) {
		alias_set_finish(c, a, it);
		return;
	}
	q = queue_for(c, &r->key, 1, &rc);
	if (!q) {
		item_unref(it);
		refuse_queue(c, rc ? rc : TERN_ENOTFOUND);
		return;
	}
	if (status_refuses(c, q, r->key.name, r->key.len, 1)) {
		item_unref(it);
		return;
	}
	if (r->add && queue_has_items(q)) {
		/* memcached's add on a key that holds a value */
		item_unref(it);
		reply(c, OP_EXISTS, "queue is not empty");
		return;
	}
	rc = queue_push_delayed(q, it, r->key.delay_ms, &ticket, &id, &lo);
	set_reply(c, rc, lo, ticket, id, journal_sync_waits(queue_get_conf(q)->jopts.sync));
}

/* ---- get / monitor ---- */

/* Sends one item for key k (the caller's reference is used up: a plain
 * get's item is held until its reply is written). */
static void send_item(struct conn *c, const struct proto_key *k, struct item *it,
		      enum queue_pop_mode mode)
{
	c->rq.x.fe->value(c, k, it);
	c->srv->stats.get_hits++;
	if (mode == QUEUE_POP_HOLD) {
		conn_hold(c, it);
		return;
	}
	item_unref(it);
	if (mode == QUEUE_POP_OPEN)
		c->opened = 1; /* (an item opened by id is not the connection's) */
}

/* Ends c's wait (conn_wait's end): with the item its waiter was served
 * (reference passed), or NULL on timeout or shutdown.  The get goes on in
 * CONN_GET. */
static void wait_end(struct conn *c, struct item *it)
{
	struct request *r = &c->rq;
	const struct proto_key *k = &r->keys[r->key_idx];

	if (it) {
		send_item(c, k, it, c->waiter.mode);
		if (r->cmd == PROTO_CMD_MONITOR)
			r->hits++;
	} else if (r->cmd != PROTO_CMD_MONITOR) {
		c->srv->stats.get_misses++;
		r->x.fe->miss(c, k);
	}
	/* a monitor goes on collecting until its time or count is up */
	if (r->cmd != PROTO_CMD_MONITOR || !it)
		r->key_idx++;
	c->state = CONN_GET;
}

/* queue_peek's callback for a /peek=<n> get: one VALUE (the reply takes
 * its own reference). */
struct peek_ctx {
	struct conn *c;
	const struct proto_key *k;
};

static void peek_one(void *arg, struct item *it)
{
	struct peek_ctx *px = arg;

	px->c->rq.x.fe->value(px->c, px->k, it);
}

/* One monitor step on q; returns 1 when it must stop or wait. */
static int monitor_step(struct conn *c, struct queue *q, const struct proto_key *k)
{
	struct request *r = &c->rq;
	int64_t left = r->mon_deadline_ms - tern_mono_ms();
	struct item *it = NULL;
	int rc;

	if (left <= 0 || (r->count && r->hits >= r->count))
		return 1;
	rc = queue_pop(q, QUEUE_POP_OPEN, c->id, &it);
	if (rc == TERN_EFULL)
		return 1; /* holds max_open items: confirm first */
	if (!it) {
		if (c->srv->shutting_down)
			return 1;
		conn_wait(c, q, QUEUE_POP_OPEN, left, wait_end);
		return 1;
	}
	send_item(c, k, it, QUEUE_POP_OPEN);
	r->hits++;
	return 0;
}

/* Whether the get of key k waits when its queue is empty (a monitor, or a
 * /t= get that takes an item). */
static int get_waits(const struct conn *c, const struct proto_key *k)
{
	if (c->rq.cmd == PROTO_CMD_MONITOR)
		return 1;
	if (k->timeout_ms <= 0 || c->srv->shutting_down || conn_gave_up(c) ||
	    (k->opts & (PROTO_OPT_PEEK | PROTO_OPT_ABORT)))
		return 0;
	/* /close alone confirms and takes nothing */
	return !(k->opts & PROTO_OPT_CLOSE) || (k->opts & PROTO_OPT_OPEN);
}

/* Whether the get of key k takes or shows an item (what QUIESCENT
 * refuses), not only confirms or aborts open ones. */
static int key_takes(const struct conn *c, const struct proto_key *k)
{
	if (c->rq.cmd == PROTO_CMD_MONITOR)
		return 1;
	if (k->opts & (PROTO_OPT_ABORT | PROTO_OPT_ABORT_ID))
		return 0;
	return !(k->opts & (PROTO_OPT_CLOSE | PROTO_OPT_CLOSE_ID)) ||
	       (k->opts & (PROTO_OPT_OPEN | PROTO_OPT_RESERVE));
}

void ops_get_continue(struct conn *c)
{
	struct server *s = c->srv;
	struct request *r = &c->rq;
	const struct front *fe = r->x.fe;

	while (r->key_idx < r->nkeys) {
		const struct proto_key *k = &r->keys[r->key_idx];
		struct queue *q;
		struct item *it = NULL;
		int rc, open = (k->opts & (PROTO_OPT_OPEN | PROTO_OPT_RESERVE)) != 0;
		enum queue_pop_mode mode;

		/* Its right is read again: a reload may have taken it away
		 * while the get waited (ops_rights_changed). */
		if (c->acl && !auth_may(c->acl, AUTH_READ, k->name, k->len)) {
			fe->miss(c, k);
			r->key_idx++;
			continue;
		}
		/* A queue that does not exist is created only for a wait,
		 * which needs one to wait on, and for a fanout child, which a
		 * get subscribes to its parent's sets (Kestrel's way). */
		/* (whether to create it is asked only when it is not there) */
		rc = 0;
		q = find_queue(c, k->name, k->len);
		if (!q)
			q = queue_make(c, k, get_waits(c, k) || memchr(k->name, '+', k->len), &rc);
		if (!q && rc) {
			refuse_queue(c, rc);
			c->state = CONN_REQUEST;
			return;
		}
		if (!q || ((s->status == QUEUE_QUIESCENT || queue_get_status(q) == QUEUE_QUIESCENT) &&
			   key_takes(c, k))) {
			/* (a queue that went QUIESCENT after the get began
			 * serves no more: a miss, as a wait's end would be) */
			s->stats.get_misses++;
			fe->miss(c, k);
			r->key_idx++;
			continue;
		}
		if (r->cmd == PROTO_CMD_MONITOR) {
			if (monitor_step(c, q, k)) {
				if (c->state == CONN_WAIT)
					return;
				break;
			}
			continue;
		}
		if (k->opts & PROTO_OPT_CLOSE)
			queue_confirm(q, c->id, 1);
		if (k->opts & PROTO_OPT_CLOSE_ID)
			queue_confirm_id(q, k->item_id);
		if ((k->opts & (PROTO_OPT_ABORT | PROTO_OPT_ABORT_ID)) ||
		    ((k->opts & (PROTO_OPT_CLOSE | PROTO_OPT_CLOSE_ID)) && !open)) {
			if (k->opts & PROTO_OPT_ABORT)
				queue_abort(q, c->id);
			if (k->opts & PROTO_OPT_ABORT_ID)
				queue_abort_id(q, k->item_id);
			fe->miss(c, k);
			r->key_idx++;
			continue;
		}
		if (k->peek > 1) {
			struct peek_ctx px = { c, k };

			if (queue_peek(q, k->peek, peek_one, &px))
				s->stats.get_hits++;
			else {
				s->stats.get_misses++;
				fe->miss(c, k);
			}
			r->key_idx++;
			continue;
		}
		/* reserve hands the item out by id (its cas): it belongs to no
		 * connection, so it survives a proxy's shared connection. */
		mode = (k->opts & PROTO_OPT_RESERVE) ? QUEUE_POP_OPEN_ID
		       : open ? QUEUE_POP_OPEN
		       : (k->opts & PROTO_OPT_PEEK) ? QUEUE_POP_PEEK : QUEUE_POP_HOLD;
		rc = queue_pop(q, mode, c->id, &it);
		if (rc == TERN_EFULL) {
			reply(c, OP_CLIENT_ERROR, "too many open transactions");
			c->state = CONN_REQUEST;
			return;
		}
		if (rc != 0) {
			ops_fail(c, "journal", rc);
			c->state = CONN_REQUEST;
			return;
		}
		if (it) {
			send_item(c, k, it, mode);
		} else if (k->timeout_ms > 0 && mode != QUEUE_POP_PEEK && !s->shutting_down &&
			   !conn_gave_up(c)) {
			conn_wait(c, q, mode, k->timeout_ms, wait_end);
			return;
		} else {
			s->stats.get_misses++;
			fe->miss(c, k);
		}
		r->key_idx++;
	}
	fe->get_end(c);
	c->state = CONN_REQUEST;
}

/* Whether c's user may read every key of its get (answered when not):
 * every key is checked before any is served, so a reply is whole. */
__attribute__((noinline)) static int get_allowed(struct conn *c)
{
	for (unsigned i = 0; i < c->rq.nkeys; i++) {
		const struct proto_key *k = &c->rq.keys[i];

		if (!allowed(c, AUTH_READ, k->name, k->len))
			return 0;
	}
	return 1;
}

/* Whether a key of the get names an alias, or a queue whose status
 * refuses it (answered then): checked for every key before any is
 * served, so a reply is whole. */
static int get_refused(struct conn *c)
{
	struct server *s = c->srv;

	for (unsigned i = 0; i < c->rq.nkeys; i++) {
		const struct proto_key *k = &c->rq.keys[i];
		struct queue *q = find_queue(c, k->name, k->len);
		char why[64 + PROTO_NAME_MAX];

		if (k->peek > 1 && c->rq.x.fe->id != FRONT_TEXT) {
			/* one reply per key in meta and binary */
			reply(c, OP_CLIENT_ERROR, "peek=<n> needs the text protocol");
			return 1;
		}
		if (!q && s->cfg.aliases && config_alias_find(&s->cfg, k->name, k->len)) {
			snprintf(why, sizeof(why), "%.*s is an alias: it takes sets only",
				 (int)k->len, k->name);
			reply(c, OP_CLIENT_ERROR, why);
			return 1;
		}
		if (key_takes(c, k) && status_refuses(c, q, k->name, k->len, 0))
			return 1;
	}
	return 0;
}

void ops_get(struct conn *c)
{
	c->srv->stats.cmd_get++;
	if ((c->acl && !get_allowed(c)) || get_refused(c)) {
		c->state = CONN_REQUEST;
		return;
	}
	c->rq.key_idx = 0;
	c->state = CONN_GET;
	ops_get_continue(c);
}

void ops_rights_changed(struct server *s)
{
	for (struct conn *c = s->conns; c; c = c->next) {
		const struct proto_key *k;

		if (c->state != CONN_WAIT || !c->acl)
			continue;
		k = &c->rq.keys[c->rq.key_idx];
		if (auth_may(c->acl, AUTH_READ, k->name, k->len))
			continue;
		/* ended as a timeout would end it: the item it waited for
		 * goes to a reader that may read it */
		conn_wait_cancel(c);
		conn_resume(c);
	}
}

void ops_monitor(struct conn *c, uint32_t seconds)
{
	c->rq.cmd = PROTO_CMD_MONITOR;
	c->rq.hits = 0;
	c->rq.mon_deadline_ms = tern_mono_ms() + (int64_t)seconds * 1000;
	ops_get(c);
}

/* ---- delete, flush, confirm ---- */

int ops_delete(struct conn *c, const struct proto_key *k, int *existed)
{
	struct queue *q;

	*existed = 0;
	if ((k->opts & PROTO_OPT_CLOSE_ID) ? !allowed(c, AUTH_READ, k->name, k->len)
					   : !allowed(c, AUTH_ADMIN, NULL, 0))
		return TERN_EACCES;
	q = find_queue(c, k->name, k->len);
	if (k->opts & PROTO_OPT_CLOSE_ID) {
		/* delete q/<id>: confirms an item opened by id. */
		*existed = q && queue_confirm_id(q, k->item_id);
		return 0;
	}
	*existed = q != NULL;
	if (q && queue_status_by_operator(q)) {
		char err[600];
		int rc = qreg_delete(c->srv->reg, q);

		/* its line in the status file must go too: a queue made later
		 * under its name starts with its configured status */
		if (status_save(c->srv, err, sizeof(err)))
			log_error("delete: status file not updated: %s", err);
		return rc;
	}
	return q ? qreg_delete(c->srv->reg, q) : 0;
}

/* A flush's answer r: held until ticket resolves (the journal then has
 * the flush as durable as a set's STORED, in the queue's mode), or a
 * failure (emptied in memory but not recorded: a restart would bring the
 * items back, so the client must hear it). */
static void flush_reply(struct conn *c, int rc, uint64_t ticket, enum op_result r)
{
	if (rc)
		ops_fail(c, "flush not journaled", rc);
	else if (!ticket || conn_defer_reply(c, ticket, r) != 0)
		c->rq.x.fe->reply(c, conn_out(c), &c->rq.x, r, NULL, 0);
}

void ops_flush(struct conn *c, const struct proto_key *k, enum op_result r)
{
	struct queue *q;
	uint64_t ticket = 0;
	int rc;

	if (!allowed(c, AUTH_ADMIN, NULL, 0))
		return;
	q = find_queue(c, k->name, k->len);
	rc = q ? queue_flush(q, &ticket) : 0;
	flush_reply(c, rc, ticket, r);
}

struct flush_all {
	int rc;
	uint64_t ticket;
};

static void flush_one(struct queue *q, void *arg)
{
	struct flush_all *fa = arg;
	uint64_t t = 0;
	int rc = queue_flush(q, &t);

	if (rc)
		fa->rc = rc;
	if (t > fa->ticket)
		fa->ticket = t; /* (resolving it resolves every lower one) */
}

void ops_flush_all(struct conn *c, enum op_result r)
{
	struct flush_all fa = { 0, 0 };

	if (!allowed(c, AUTH_ADMIN, NULL, 0))
		return;
	qreg_each(c->srv->reg, flush_one, &fa);
	flush_reply(c, fa.rc, fa.ticket, r);
}

static void expire_one(struct queue *q, void *arg)
{
	*(uint64_t *)arg += queue_flush_expired(q);
}

int ops_flush_expired(struct conn *c, const struct proto_key *k, uint64_t *n)
{
	struct queue *q;

	*n = 0;
	if (!allowed(c, AUTH_ADMIN, NULL, 0))
		return TERN_EACCES;
	if (!k) {
		qreg_each(c->srv->reg, expire_one, n);
		return 0;
	}
	q = find_queue(c, k->name, k->len);
	if (q)
		*n = queue_flush_expired(q);
	return 0;
}

int ops_confirm(struct conn *c, const struct proto_key *k, uint32_t n)
{
	struct queue *q;

	if (!allowed(c, AUTH_READ, k->name, k->len))
		return TERN_EACCES;
	q = find_queue(c, k->name, k->len);
	if (q)
		queue_confirm(q, c->id, n);
	return 0;
}

/* ---- stats ---- */

static void stat_u64(struct conn *c, const char *name, size_t nlen, uint64_t v)
{
	char val[24];

	c->rq.x.fe->stat(c, name, nlen, val, proto_put_u64(val, v));
}

static void stat_str(struct conn *c, const char *name, const char *val)
{
	c->rq.x.fe->stat(c, name, strlen(name), val, strlen(val));
}

/* The figures of queue q (counters.h, QUEUE_FIGURES), as
 * "queue_<name>_<figure>" lines. */
static void stats_queue(struct queue *q, void *arg)
{
	struct conn *c = arg;
	struct queue_stats st;
	struct journal_stats js;
	char name[PROTO_NAME_MAX + 64];
	int has_j = queue_journal(q) != NULL;
	size_t pre;

	queue_get_stats(q, &st);
	if (has_j)
		journal_get_stats(queue_journal(q), &js);
	pre = (size_t)snprintf(name, sizeof(name), "queue_%s_", queue_name(q));
#define QUEUE_STAT(figure, field, from, shown)                                      \
	if (sizeof(#figure) > 1 && (shown)) {                                       \
		memcpy(name + pre, #figure, sizeof(#figure));                       \
		stat_u64(c, name, pre + sizeof(#figure) - 1, (uint64_t)from.field); \
	}
#define QUEUE_STAT_Q(figure, metric, type, help, field, div) QUEUE_STAT(figure, field, st, 1)
#define QUEUE_STAT_J(figure, metric, type, help, field, div) QUEUE_STAT(figure, field, js, has_j)
	QUEUE_FIGURES(QUEUE_STAT_Q, QUEUE_STAT_J)
#undef QUEUE_STAT
#undef QUEUE_STAT_Q
#undef QUEUE_STAT_J
}

/* The queues whose names match a stats pattern. */
struct match_ctx {
	const char *pattern;
	struct queue **qs;
	size_t n, cap;
	int nomem;
};

static void match_one(struct queue *q, void *arg)
{
	struct match_ctx *m = arg;

	if (m->nomem || fnmatch(m->pattern, queue_name(q), 0) != 0)
		return;
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 64;
		struct queue **n = realloc(m->qs, cap * sizeof(*n));

		if (!n) {
			m->nomem = 1;
			return;
		}
		m->qs = n;
		m->cap = cap;
	}
	m->qs[m->n++] = q;
}

static int cmp_queue_name(const void *a, const void *b)
{
	return strcmp(queue_name(*(struct queue *const *)a), queue_name(*(struct queue *const *)b));
}

/* The counters of every queue matching pattern (len bytes), by name. */
static int stats_match(struct conn *c, const char *pattern, size_t len)
{
	char pat[PROTO_NAME_MAX + 1];
	struct match_ctx m = { pat, NULL, 0, 0, 0 };

	memcpy(pat, pattern, len);
	pat[len] = '\0';
	qreg_each(c->srv->reg, match_one, &m);
	if (m.nomem) {
		free(m.qs);
		return TERN_ENOMEM;
	}
	if (m.n > 1)
		qsort(m.qs, m.n, sizeof(*m.qs), cmp_queue_name);
	for (size_t i = 0; i < m.n; i++)
		stats_queue(m.qs[i], c);
	free(m.qs);
	c->rq.x.fe->stats_end(c);
	return 0;
}

/* ---- settings and the log level ---- */

/* One setting as "STAT <section>.<key> <value>" (a [queue NAME] key as
 * queue.NAME.key; a section with no keys has no line). */
static void stat_setting(void *arg, const char *section, const char *key, const char *value)
{
	struct conn *c = arg;
	char name[16 + PROTO_NAME_MAX + 64];
	int n;

	if (!key)
		return;
	n = snprintf(name, sizeof(name), "%s.%s", section, key);
	if (n < 0 || (size_t)n >= sizeof(name))
		return; /* section names are queue names, keys short: cannot happen */
	/* "queue NAME" and "alias NAME" sections: the blank becomes a dot */
	for (char *p = name; *p; p++)
		if (*p == ' ')
			*p = '.';
	c->rq.x.fe->stat(c, name, (size_t)n, value, strlen(value));
}

/* stats settings: memcached's verbosity, then every effective setting in
 * config-file order (config_each). */
static void stats_settings(struct conn *c)
{
	stat_u64(c, "verbosity", 9, (uint64_t)ops_log_verbosity(log_get_level()));
	config_each(&c->srv->cfg, stat_setting, c);
	c->rq.x.fe->stats_end(c);
}

enum log_level ops_verbosity_level(uint64_t v)
{
	return v == 0 ? LOG_LEVEL_WARN : v == 1 ? LOG_LEVEL_INFO : LOG_LEVEL_DEBUG;
}

int ops_log_verbosity(enum log_level level)
{
	return level <= LOG_LEVEL_WARN ? 0 : level == LOG_LEVEL_INFO ? 1 : 2;
}

void ops_set_log_level(struct server *s, enum log_level level, const char *why)
{
	enum log_level old = log_get_level();

	s->cfg.log_level = level;
	if (level == old)
		return;
	/* said at info before a change to a quieter level, after one to a
	 * louder level: shown whenever either level shows it */
	if (level < old)
		log_msg_unfolded(LOG_LEVEL_INFO, "log level %s (was %s): %s", log_level_name(level),
				 log_level_name(old), why);
	log_set_level(level);
	if (level > old)
		log_msg_unfolded(LOG_LEVEL_INFO, "log level %s (was %s): %s", log_level_name(level),
				 log_level_name(old), why);
}

int ops_verbosity(struct conn *c, uint64_t v)
{
	char why[48];

	if (!allowed(c, AUTH_ADMIN, NULL, 0))
		return TERN_EACCES;
	snprintf(why, sizeof(why), "verbosity %llu", (unsigned long long)v);
	ops_set_log_level(c->srv, ops_verbosity_level(v), why);
	return 0;
}

int ops_log_level(struct conn *c, enum log_level level)
{
	if (!allowed(c, AUTH_ADMIN, NULL, 0))
		return TERN_EACCES;
	ops_set_log_level(c->srv, level, "verbosity command");
	return 0;
}

/* ---- the server's own commands ---- */

void ops_shutdown(struct conn *c)
{
	struct server *s = c->srv;

	if (!allowed(c, AUTH_ADMIN, NULL, 0))
		return;
	if (!s->cfg.enable_shutdown) {
		reply(c, OP_CLIENT_ERROR, "shutdown not enabled");
		return;
	}
	log_info("shutdown requested by a client");
	c->state = CONN_CLOSING;
	s->hooks.shutdown(s);
}

void ops_reload(struct conn *c)
{
	struct server *s = c->srv;
	char err[600], buf[500];

	if (!allowed(c, AUTH_ADMIN, NULL, 0))
		return;
	if (s->hooks.reload(s, err, sizeof(err)) == 0) {
		reply(c, OP_OK, NULL);
	} else {
		log_msg_unfolded(LOG_LEVEL_ERROR, "reload failed: %s", err);
		snprintf(buf, sizeof(buf), "reload failed: %.400s", err);
		reply(c, OP_SERVER_ERROR, buf);
	}
}

int ops_status(struct conn *c, const struct proto_key *k, const char *word, size_t wlen,
	       enum queue_status *st, char *err, size_t errlen)
{
	struct server *s = c->srv;
	struct queue *q = NULL;

	if (!allowed(c, word ? AUTH_ADMIN : AUTH_STATS, NULL, 0))
		return TERN_EACCES;
	if (k && !(q = qreg_find(s->reg, k->name, k->len)))
		return TERN_ENOTFOUND;
	if (!word) {
		*st = q ? queue_get_status(q) : s->status;
		return 0;
	}
	if (queue_status_parse(word, wlen, st))
		return TERN_EINVAL;
	if (q) {
		if (*st != queue_get_status(q))
			log_info("queue %s status %s -> %s (status command)", queue_name(q),
				 queue_status_name(queue_get_status(q)), queue_status_name(*st));
		queue_set_status(q, *st, 1);
	} else {
		status_set_server(s, *st, 1);
	}
	if (status_save(s, err, errlen)) {
		log_error("status %s set but not saved: %s", queue_status_name(*st), err);
		return TERN_ESYS;
	}
	return 0;
}

int ops_stats(struct conn *c, const struct proto_stats *what)
{
	struct server *s = c->srv;
	struct figures fig, *f = &fig;
	struct rusage ru;
	char buf[64];
	int64_t now = tern_now_ms();

	if (!allowed(c, AUTH_STATS, NULL, 0))
		return TERN_EACCES;
	if (what->kind == PROTO_STATS_QUEUE) {
		struct queue *q = find_queue(c, what->arg, what->len);

		if (!q)
			return TERN_ENOTFOUND;
		stats_queue(q, c);
		c->rq.x.fe->stats_end(c);
		return 0;
	}
	if (what->kind == PROTO_STATS_MATCH)
		return stats_match(c, what->arg, what->len);
	if (what->kind == PROTO_STATS_SETTINGS) {
		stats_settings(c);
		return 0;
	}
	figures_collect(s, f);
	stat_u64(c, "pid", 3, (uint64_t)getpid());
	stat_u64(c, "uptime", 6, (uint64_t)((tern_mono_ms() - s->started_ms) / 1000));
	stat_u64(c, "time", 4, (uint64_t)(now / 1000));
	stat_str(c, "version", PROTO_MEMCACHED_VERSION);
	stat_str(c, "tern_version", TERN_VERSION);
	stat_u64(c, "pointer_size", 12, sizeof(void *) * 8);
	getrusage(RUSAGE_SELF, &ru);
	snprintf(buf, sizeof(buf), "%ld.%06ld", (long)ru.ru_utime.tv_sec, (long)ru.ru_utime.tv_usec);
	stat_str(c, "rusage_user", buf);
	snprintf(buf, sizeof(buf), "%ld.%06ld", (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec);
	stat_str(c, "rusage_system", buf);
#define STAT_COUNTER(name, ...) stat_u64(c, #name, sizeof(#name) - 1, s->stats.name);
#define STAT_VALUE(name, metric, type, help, value)                            \
	if (sizeof(#name) > 1)                                                  \
		stat_u64(c, #name, sizeof(#name) - 1, (uint64_t)(value));
	SERVER_FIGURES(STAT_COUNTER, STAT_COUNTER, STAT_VALUE)
#undef STAT_COUNTER
#undef STAT_VALUE
	stat_str(c, "status", queue_status_name(s->status));
	qreg_each(s->reg, stats_queue, c);
	c->rq.x.fe->stats_end(c);
	return 0;
}
