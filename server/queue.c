/*
 * queue.c: queue semantics and the queue registry.  See queue.h.
 *
 * Each queue keeps three lists:
 *   - items: the queued items in memory, head first (FIFO);
 *   - open:  items handed out with /open, oldest first, each tagged with
 *            the connection that holds it (QUEUE_NO_CONN when opened by
 *            id) and its deadline (open_timeout; for items opened by id
 *            QUEUE_OPEN_ID_TIMEOUT_MS when that is 0);
 *   - held:  items handed to a connection by a plain get whose reply is not
 *            yet written: the journal still counts them as queued until
 *            queue_settle says they were delivered, so a reply that never
 *            reaches the client puts its item back instead of losing it;
 *   - delayed: items set with a delay, not visible yet, ordered by the
 *            (monotonic) time they become visible; each joins items then,
 *            placed by that time among the items set meanwhile;
 *   - waiters: connections blocked in get/t=, in arrival order.
 * Items beyond conf.jopts.max_memory_size are not kept: the journal holds
 * them (behind_items) and journal_read_behind() brings them back, in order,
 * as the in-memory part drains.  Once a queue is behind, every new item is
 * behind too, so FIFO order holds across the boundary.
 *
 * Moves (expire_to, dead_letter): the item is set into the target like
 * any set and leaves its source's journal only when the target's ADD is
 * written (struct qmove, qreg_durable), so a crash between the two finds it
 * twice, never nowhere.
 */
#include "queue.h"
#include "../lib/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* How far read-behind reads ahead of a queue's head (see refill). */
#define READ_AHEAD (512u * 1024u)

struct ilist {
	struct item *head, *tail;
	uint64_t n;
};

struct queue {
	struct queue *hnext; /* registry hash chain */
	struct qreg *reg;
	char name[TERN_NAME_MAX + 1];
	size_t name_len;
	struct queue_conf conf;
	struct journal *j;

	struct ilist items;  /* queued, in memory */
	struct ilist open;   /* open (reliable reads in flight) */
	int opened_by_id;    /* ever opened an item by id: the tick must look
				for deadlines even when open_timeout is 0 */
	struct ilist held;   /* plain gets whose reply is in flight */
	uint64_t mem_bytes;  /* body bytes in items */
	uint64_t nitems;     /* queued items, memory + behind */
	uint64_t nbytes;     /* queued body bytes, memory + behind */
	uint64_t behind_items, behind_bytes;
	uint64_t next_id;
	uint64_t total_items, expired_items, discarded, get_hits, get_misses, dequeued;
	struct ilist delayed; /* not visible yet, by open_deadline_ms */
	uint64_t delayed_bytes;
	uint64_t redeliveries, dead_lettered, dead_dropped, expired_to;
	int move_error_logged;
	int64_t used_mono;   /* last set or get of it (tern_mono_ms) */
	int journal_error_logged;

	struct qwaiter *wait_head, *wait_tail;
	uint64_t nwaiters;

	enum queue_status status; /* its own (queue_get_status) */
	int status_by_op;         /* ... set by a command */

	struct queue *parent;    /* fanout parent (name before the first '+') */
	struct queue **children; /* fanout children */
	unsigned nchildren, cap_children;

	struct qhist hist;       /* recent history (the status page) */
};

/* An item that moved to another queue and waits for the target's ticket
 * before its source records it gone (kind: JREC_CONFIRM for an open item,
 * JREC_REMOVE for a queued one). */
struct qmove {
	struct qmove *next;
	struct queue *src;
	struct item *it;  /* the source's item (a reference) */
	uint64_t ticket;
	int opened;       /* it was open: CONFIRM, else REMOVE */
};

struct qreg {
	uint64_t gen;       /* bumped by every delete */
	struct jenv *env;
	void (*conf_fn)(void *arg, const char *name, struct queue_conf *out);
	void *conf_arg;
	struct qmove *moves, **moves_tail; /* in ticket order */
	unsigned walking;   /* qreg_each calls in progress */
	struct queue **buckets;
	unsigned nbuckets;
	unsigned count;
	unsigned nfanout;   /* queues whose name holds a '+' (fanout children) */
	int64_t next_idle_scan; /* qreg_tick: when to look for idle queues */
	/* history (qhist.h): the server's, summed over the queues, from the
	 * running sums of what each queue's slots recorded */
	struct qhist hist;
	uint64_t hist_in, hist_out, hist_depth;
	uint64_t hist_samples;  /* slots recorded so far */
	int64_t hist_last;      /* when the newest ended (mono ms) */
};

void queue_conf_default(struct queue_conf *c)
{
	memset(c, 0, sizeof(*c));
	c->max_item_size = 1024 * 1024;
	c->max_open = 16;
	journal_opts_default(&c->jopts);
}

/* ---- intrusive item lists ---- */

static void ilist_push_tail(struct ilist *l, struct item *it)
{
	it->next = NULL;
	it->prev = l->tail;
	if (l->tail)
		l->tail->next = it;
	else
		l->head = it;
	l->tail = it;
	l->n++;
}

static void ilist_push_head(struct ilist *l, struct item *it)
{
	it->prev = NULL;
	it->next = l->head;
	if (l->head)
		l->head->prev = it;
	else
		l->tail = it;
	l->head = it;
	l->n++;
}

/* Links it after at (at NULL: at the head). */
static void ilist_insert_after(struct ilist *l, struct item *at, struct item *it)
{
	if (!at) {
		ilist_push_head(l, it);
		return;
	}
	it->prev = at;
	it->next = at->next;
	if (at->next)
		at->next->prev = it;
	else
		l->tail = it;
	at->next = it;
	l->n++;
}

static void ilist_unlink(struct ilist *l, struct item *it)
{
	if (it->prev)
		it->prev->next = it->next;
	else
		l->head = it->next;
	if (it->next)
		it->next->prev = it->prev;
	else
		l->tail = it->prev;
	it->next = it->prev = NULL;
	l->n--;
}

/* ---- journal calls: failures are logged, never hidden ---- */

static void journal_failed(struct queue *q, const char *what, int rc)
{
	if (!q->journal_error_logged) {
		log_error("queue %s: journal %s failed: %s",
			  q->name, what, tern_strerror(rc));
		q->journal_error_logged = 1;
	}
}

static void jrec_remove(struct queue *q, uint64_t id)
{
	int rc;

	if (q->j && (rc = journal_remove(q->j, id)) != 0)
		journal_failed(q, "remove", rc);
}

/* ---- memory accounting ---- */

static void take_from_items(struct queue *q, struct item *it)
{
	ilist_unlink(&q->items, it);
	q->mem_bytes -= it->len;
	q->nitems--;
	q->nbytes -= it->len;
}

/* Body bytes in memory of visible items (delayed ones have a bound of
 * their own). */
static uint64_t visible_bytes(const struct queue *q)
{
	return q->mem_bytes - q->delayed_bytes;
}

/* ---- delayed items ---- */

/* Links it (in memory, counted in mem_bytes) into delayed, ordered by the
 * monotonic time it becomes visible (open_deadline_ms).  Mostly appended:
 * items set with one delay come due in the order they were set. */
static void delayed_insert(struct queue *q, struct item *it, int64_t now, int64_t mono)
{
	struct item *at = q->delayed.tail;

	it->open_deadline_ms = mono + (it->add_ms > now ? it->add_ms - now : 0);
	while (at && at->open_deadline_ms > it->open_deadline_ms)
		at = at->prev;
	ilist_insert_after(&q->delayed, at, it);
	q->delayed_bytes += it->len;
}

static void take_from_delayed(struct queue *q, struct item *it)
{
	ilist_unlink(&q->delayed, it);
	q->delayed_bytes -= it->len;
	q->mem_bytes -= it->len;
	q->nitems--;
	q->nbytes -= it->len;
	it->open_deadline_ms = 0;
}

/*
 * Makes the delayed items whose time has come visible; returns how many.
 * Each is placed among the visible items by the wall-clock time it became
 * visible (its add_ms): after every item set before that time, before
 * those set since, so the queue stays FIFO by the time items became
 * visible even when this runs late (at the next pop or tick).
 */
static unsigned promote(struct queue *q, int64_t mono)
{
	struct item *it;
	unsigned n = 0;

	while ((it = q->delayed.head) != NULL && it->open_deadline_ms <= mono) {
		struct item *at = q->items.tail;

		ilist_unlink(&q->delayed, it);
		q->delayed_bytes -= it->len;
		it->open_deadline_ms = 0;
		while (at && at->add_ms > it->add_ms)
			at = at->prev;
		ilist_insert_after(&q->items, at, it);
		n++;
	}
	return n;
}

/* Reads behind items into memory while there is room (or nothing in
 * memory at all, so a large item cannot block the queue), and no further
 * than READ_AHEAD ahead of the head: an item read back is sent while its
 * body is still in the CPU's cache, and a queue that drains a long backlog
 * does not churn through max_memory_size of fresh items to do it.  A behind
 * item still delayed (after a restart) joins the delayed list. */
static void refill(struct queue *q)
{
	uint64_t room = q->conf.jopts.max_memory_size < READ_AHEAD ?
			q->conf.jopts.max_memory_size : READ_AHEAD;

	while (q->behind_items > 0 &&
	       ((q->items.head == NULL && q->delayed_bytes < q->conf.jopts.max_memory_size) ||
		visible_bytes(q) < room)) {
		struct item *it = NULL;
		int rc = q->j ? journal_read_behind(q->j, &it) : TERN_ENOTFOUND;

		if (rc != 0 || !it) {
			/* The journal lost track of what it owes us: log it
			 * and stop counting the missing items rather than
			 * spin.  This is a bug or on-disk corruption. */
			log_error("queue %s: read-behind failed (%s); "
				  "%llu items unreadable", q->name,
				rc ? tern_strerror(rc) : "journal returned none",
				(unsigned long long)q->behind_items);
			q->nitems -= q->behind_items;
			q->nbytes -= q->behind_bytes;
			q->behind_items = q->behind_bytes = 0;
			return;
		}
		q->behind_items--;
		q->behind_bytes -= it->len;
		q->mem_bytes += it->len;
		if ((it->state & ITEM_DELAYED) && it->add_ms > tern_now_ms())
			delayed_insert(q, it, tern_now_ms(), tern_mono_ms());
		else
			ilist_push_tail(&q->items, it);
	}
}

static int item_expired(const struct queue *q, const struct item *it, int64_t now)
{
	if (it->expiry_ms && it->expiry_ms <= now)
		return 1;
	if (q->conf.max_age_ms && it->add_ms + q->conf.max_age_ms <= now)
		return 1;
	return 0;
}

/* ---- moves to another queue (expire_to, dead_letter) ---- */

/* The item (a reference, taken over) left q for good: recorded (CONFIRM
 * for an open item, REMOVE for a queued one) and dropped. */
static void source_gone(struct queue *q, struct item *it, int opened)
{
	int rc;

	if (q->j) {
		rc = opened ? journal_confirm(q->j, it->id) : journal_remove(q->j, it->id);
		if (rc != 0)
			journal_failed(q, opened ? "confirm" : "remove", rc);
	}
	item_unref(it);
}

static void serve_waiters(struct queue *q);

/* A move's target write failed: the item (a reference, taken over) goes
 * back to the head of q, as an aborted open item does. */
static void move_failed(struct queue *q, struct item *it, int opened)
{
	int rc;

	if (opened && q->j && (rc = journal_abort(q->j, it->id)) != 0)
		journal_failed(q, "abort", rc);
	ilist_push_head(&q->items, it);
	q->mem_bytes += it->len;
	q->nitems++;
	q->nbytes += it->len;
	serve_waiters(q);
}

/*
 * Moves it (unlinked from q's lists and counts; the reference is taken
 * over on success) to queue target, created when needed: a copy is set
 * there (same body and flags, no expiry, no delay, delivery count 0), and
 * q records it gone once that set is written (qreg_durable).  0, or the
 * error that kept it in the caller's hands (target full, too big, failed
 * journal, the target is q itself).
 */
static int move_out(struct queue *q, struct item *it, const char *target, int opened)
{
	struct qreg *r = q->reg;
	size_t tlen = strlen(target);
	struct queue *t = qreg_find(r, target, tlen);
	struct item *copy;
	uint64_t ticket = 0;
	int rc;

	if (!t) {
		struct queue_conf qc;

		if (r->conf_fn) {
			r->conf_fn(r->conf_arg, target, &qc);
		} else {
			qc = q->conf;
			qc.expire_to[0] = qc.dead_letter[0] = '\0';
			qc.max_deliveries = 0;
		}
		if ((rc = qreg_get(r, target, tlen, &qc, &t)) != 0)
			goto fail;
	}
	if (t == q) {
		rc = TERN_EINVAL;
		goto fail;
	}
	copy = queue_item_copy(it);
	if (!copy) {
		rc = TERN_ENOMEM;
		goto fail;
	}
	copy->expiry_ms = 0; /* a new item of its target */
	if ((rc = queue_push(t, copy, &ticket, NULL)) != 0)
		goto fail;
	it->open_conn = 0;
	it->open_deadline_ms = 0;
	it->owner = NULL;
	if (q->j && ticket) {
		struct qmove *m = malloc(sizeof(*m));

		if (m) {
			m->next = NULL;
			m->src = q;
			m->it = it;
			m->ticket = ticket;
			m->opened = opened;
			*r->moves_tail = m;
			r->moves_tail = &m->next;
			return 0;
		}
		/* No memory to wait with: recorded now, in the same loop pass
		 * as the target's ADD (a crash between the two journals'
		 * writes could then lose it: logged). */
		log_warn("queue %s: no memory to order a move to %s", q->name, target);
	}
	source_gone(q, it, opened);
	return 0;
fail:
	if (!q->move_error_logged) {
		log_error("queue %s: cannot move an item to %s: %s", q->name, target,
			  tern_strerror(rc));
		q->move_error_logged = 1;
	}
	return rc;
}

void qreg_durable(struct qreg *r, uint64_t upto, int err)
{
	struct qmove *m;

	while ((m = r->moves) != NULL && m->ticket <= upto) {
		r->moves = m->next;
		if (!r->moves)
			r->moves_tail = &r->moves;
		if (err == 0)
			source_gone(m->src, m->it, m->opened);
		else
			move_failed(m->src, m->it, m->opened);
		free(m);
	}
}

/* Whether an item of q is moving (its removal waits for the target's
 * write): q is not idle then. */
static int moving_from(const struct qreg *r, const struct queue *q)
{
	for (const struct qmove *m = r->moves; m; m = m->next)
		if (m->src == q)
			return 1;
	return 0;
}

unsigned qreg_moves_pending(const struct qreg *r)
{
	return r->moves != NULL;
}

/* Forgets q's moves in flight (q is deleted or freed): the items go with
 * it. */
static void drop_moves(struct qreg *r, struct queue *q)
{
	struct qmove **pp = &r->moves, *m;

	while ((m = *pp) != NULL) {
		if (q && m->src != q) {
			pp = &m->next;
			continue;
		}
		*pp = m->next;
		item_unref(m->it);
		free(m);
	}
	r->moves_tail = &r->moves;
	for (m = r->moves; m; m = m->next)
		r->moves_tail = &m->next;
}

/* An expired item (unlinked, counts taken, reference taken over) moves to
 * expire_to, or is dropped. */
static void expire_item(struct queue *q, struct item *it)
{
	q->expired_items++;
	/* a queue named as its own target has none (a [queues] default
	 * applies to the target queue too) */
	if (q->conf.expire_to[0] && strcmp(q->conf.expire_to, q->name) &&
	    move_out(q, it, q->conf.expire_to, 0) == 0) {
		q->expired_to++;
		return;
	}
	jrec_remove(q, it->id);
	item_unref(it);
}

/* An open item (unlinked from open) handed out max_deliveries times
 * leaves q: to dead_letter, or dropped (confirmed) without one.  0, or -1
 * when the move failed and the caller must return it to the head. */
static int dead_letter(struct queue *q, struct item *it)
{
	if (!q->conf.dead_letter[0] || !strcmp(q->conf.dead_letter, q->name)) {
		q->dead_dropped++;
		it->open_conn = 0;
		it->owner = NULL;
		source_gone(q, it, 1);
		return 0;
	}
	if (move_out(q, it, q->conf.dead_letter, 1) != 0)
		return -1;
	q->dead_lettered++;
	return 0;
}

/* Returns the head after dropping expired items, or NULL. */
static struct item *live_head(struct queue *q)
{
	int64_t now = tern_pass_now_ms();

	if (q->delayed.head)
		promote(q, tern_pass_mono_ms());
	for (;;) {
		struct item *it;

		refill(q);
		it = q->items.head;
		if (!it || !item_expired(q, it, now))
			return it;
		take_from_items(q, it);
		expire_item(q, it);
	}
}

/* ---- waiters ---- */

static void serve_waiters(struct queue *q)
{
	while (q->wait_head && live_head(q)) {
		struct qwaiter *w = q->wait_head;
		struct item *it = NULL;

		queue_unwait(w);
		if (queue_pop(q, w->mode, w->conn_id, &it) != 0 || !it) {
			w->serve(w, NULL);
			continue;
		}
		w->serve(w, it);
	}
}

void queue_wait(struct queue *q, struct qwaiter *w)
{
	w->q = q;
	w->next = NULL;
	w->prev = q->wait_tail;
	if (q->wait_tail)
		q->wait_tail->next = w;
	else
		q->wait_head = w;
	q->wait_tail = w;
	q->nwaiters++;
}

void queue_unwait(struct qwaiter *w)
{
	struct queue *q = w->q;

	if (q)
		q->used_mono = tern_pass_mono_ms(); /* (a reader was there until now) */
	if (!q)
		return;
	if (w->prev)
		w->prev->next = w->next;
	else
		q->wait_head = w->next;
	if (w->next)
		w->next->prev = w->prev;
	else
		q->wait_tail = w->prev;
	w->next = w->prev = NULL;
	w->q = NULL;
	q->nwaiters--;
}

/* ---- push / pop ---- */

/* Makes room for an item of len bytes; 0 or TERN_EFULL. */
static int make_room(struct queue *q, uint32_t len)
{
	for (;;) {
		int full = (q->conf.max_items && q->nitems >= q->conf.max_items) ||
			   (q->conf.max_size && q->nbytes + len > q->conf.max_size);
		struct item *old;

		if (!full)
			return 0;
		if (!q->conf.discard_old_when_full)
			return TERN_EFULL;
		refill(q);
		old = q->items.head;
		if (!old)
			return TERN_EFULL; /* only open items left; nothing to drop */
		take_from_items(q, old);
		jrec_remove(q, old->id);
		q->discarded++;
		item_unref(old);
	}
}

static int push_one(struct queue *q, struct item *it, uint64_t *ticket)
{
	int in_memory, rc, delayed = (it->state & ITEM_DELAYED) != 0;
	uint64_t t = 0;

	*ticket = 0;
	q->used_mono = tern_pass_mono_ms();
	if (it->len > q->conf.max_item_size) {
		item_unref(it);
		return TERN_ETOOBIG;
	}
	if (it->expiry_ms && it->expiry_ms <= it->add_ms) {
		/* Expired on arrival (an exptime in the past, as libmemcached's
		 * exist probe sends; or before a delayed item would become
		 * visible): counted, but neither queued nor written nor moved
		 * to expire_to. */
		q->total_items++;
		q->expired_items++;
		item_unref(it);
		return 0;
	}
	if (delayed && q->delayed_bytes + it->len > q->conf.jopts.max_memory_size) {
		item_unref(it); /* delayed items stay in memory: bounded */
		return TERN_EFULL;
	}
	if ((rc = make_room(q, it->len)) != 0) {
		item_unref(it);
		return rc;
	}
	it->id = q->next_id;
	in_memory = delayed ||
		    (q->behind_items == 0 &&
		     (q->items.head == NULL ||
		      visible_bytes(q) + it->len <= q->conf.jopts.max_memory_size));
	if (q->j && (rc = journal_add(q->j, it, in_memory, &t)) != 0) {
		item_unref(it);
		return rc;
	}
	q->next_id++;
	q->nitems++;
	q->nbytes += it->len;
	q->total_items++;
	if (delayed) {
		q->mem_bytes += it->len;
		delayed_insert(q, it, tern_now_ms(), tern_mono_ms());
		*ticket = t;
		return 0;
	}
	if (in_memory || !q->j) {
		ilist_push_tail(&q->items, it);
		q->mem_bytes += it->len;
	} else {
		q->behind_items++;
		q->behind_bytes += it->len;
		item_unref(it); /* the journal keeps what it needs */
	}
	*ticket = t;
	serve_waiters(q);
	return 0;
}

struct item *queue_item_copy(const struct item *it)
{
	struct item *copy = item_new(it->len);

	if (!copy)
		return NULL;
	memcpy(copy->data, it->data, it->len);
	copy->flags = it->flags;
	copy->expiry_ms = it->expiry_ms;
	copy->add_ms = it->add_ms;
	copy->state = it->state;
	return copy;
}

int queue_push(struct queue *q, struct item *it, uint64_t *ticket, uint64_t *id)
{
	return queue_push_delayed(q, it, 0, ticket, id, NULL);
}

int queue_push_delayed(struct queue *q, struct item *it, uint64_t delay_ms,
		       uint64_t *ticket, uint64_t *id, uint64_t *ticket_lo)
{
	unsigned i;
	int rc;
	uint64_t t, lo = 0;

	it->add_ms = tern_pass_now_ms();
	it->state &= ~ITEM_DELAYED;
	if (delay_ms) {
		/* the time it becomes visible is its add time, in memory and
		 * in the journal (see ITEM_DELAYED) */
		it->add_ms += delay_ms > INT32_MAX ? INT32_MAX : (int64_t)delay_ms;
		it->state |= ITEM_DELAYED;
	}
	/* Children first: the parent's push consumes it. */
	*ticket = 0;
	for (i = 0; i < q->nchildren; i++) {
		struct queue *c = q->children[i];
		struct item *copy;

		/* a child whose status refuses sets gets no copy, as a full
		 * one does not */
		if (c->status != QUEUE_UP)
			continue;
		copy = queue_item_copy(it);
		if (!copy) {
			item_unref(it); /* the caller's reference is ours to drop */
			return TERN_ENOMEM;
		}
		/* A full child does not refuse the parent's set: Kestrel's
		 * fanout delivers where it can. */
		if (push_one(c, copy, &t) == 0 && t) {
			if (t > *ticket)
				*ticket = t;
			if (!lo || t < lo)
				lo = t;
		}
	}
	if (id) /* push_one gives it this id on success, unless it is expired */
		*id = it->expiry_ms && it->expiry_ms <= it->add_ms ? 0 : q->next_id;
	rc = push_one(q, it, &t);
	if (rc == 0 && t > *ticket)
		*ticket = t;
	if (rc == 0 && t && (!lo || t < lo))
		lo = t;
	if (ticket_lo)
		*ticket_lo = lo;
	return rc;
}

unsigned queue_open_count(struct queue *q, uint32_t conn_id)
{
	struct item *it;
	unsigned n = 0;

	for (it = q->open.head; it; it = it->next)
		if (it->open_conn == conn_id)
			n++;
	return n;
}

int queue_pop(struct queue *q, enum queue_pop_mode mode, uint32_t conn_id,
	      struct item **out)
{
	struct item *it;
	int rc;

	*out = NULL;
	q->used_mono = tern_pass_mono_ms();
	/* max_open bounds what one connection holds; items opened by id
	 * belong to none (their deadline bounds them). */
	if (mode == QUEUE_POP_OPEN && queue_open_count(q, conn_id) >= q->conf.max_open)
		return TERN_EFULL;
	it = live_head(q);
	if (!it) {
		q->get_misses++;
		return 0;
	}
	q->get_hits++;
	if (mode == QUEUE_POP_PEEK) {
		*out = item_ref(it);
		return 0;
	}
	q->dequeued++;
	take_from_items(q, it);
	switch (mode) {
	case QUEUE_POP_OPEN:
	case QUEUE_POP_OPEN_ID:
		if (it->deliveries < UINT32_MAX)
			it->deliveries++;
		if (it->deliveries > 1)
			q->redeliveries++;
		/* The OPEN record carries the count: a restart keeps it. */
		if (q->j && (rc = journal_open_item(q->j, it->id, it->deliveries)) != 0)
			journal_failed(q, "open", rc);
		it->open_conn = mode == QUEUE_POP_OPEN_ID ? QUEUE_NO_CONN : conn_id;
		/* monotonic: a step of the wall clock neither returns it
		 * early (to be handed to a second reader) nor holds it */
		it->open_deadline_ms = q->conf.open_timeout_ms
			? tern_mono_ms() + q->conf.open_timeout_ms : 0;
		if (mode == QUEUE_POP_OPEN_ID) {
			q->opened_by_id = 1;
			if (!it->open_deadline_ms)
				it->open_deadline_ms = tern_mono_ms() + QUEUE_OPEN_ID_TIMEOUT_MS;
		}
		it->owner = q;
		ilist_push_tail(&q->open, it);
		*out = item_ref(it);
		break;
	case QUEUE_POP_HOLD:
		/* No journal record yet: the REMOVE is written by queue_settle
		 * once the reply is out, and a crash meanwhile recovers the item
		 * as still queued.  The queue's reference moves to the caller;
		 * the held list only links the item. */
		it->owner = q;
		ilist_push_tail(&q->held, it);
		*out = it;
		break;
	default:
		jrec_remove(q, it->id);
		*out = it; /* the queue's reference moves to the caller */
		break;
	}
	refill(q);
	return 0;
}

unsigned queue_peek(struct queue *q, unsigned n, void (*fn)(void *arg, struct item *it),
		    void *arg)
{
	struct item *it;
	int64_t now;
	unsigned shown = 0;

	q->used_mono = tern_pass_mono_ms();
	it = live_head(q);
	if (!it) {
		q->get_misses++;
		return 0;
	}
	q->get_hits++;
	now = tern_pass_now_ms();
	/* an expired item behind the head is dropped when it reaches the
	 * head; until then it is only passed over */
	for (; it && shown < n; it = it->next) {
		if (item_expired(q, it, now))
			continue;
		fn(arg, it);
		shown++;
	}
	return shown;
}

int queue_has_items(struct queue *q)
{
	return live_head(q) != NULL;
}

void queue_settle(struct item *it, int delivered)
{
	struct queue *q = it->owner;

	if (!q)
		return;
	ilist_unlink(&q->held, it);
	it->owner = NULL;
	if (delivered) {
		jrec_remove(q, it->id);
		return;
	}
	/* Back to the head, with a reference of the queue's own; the journal
	 * never recorded it leaving, so nothing is written. */
	ilist_push_head(&q->items, item_ref(it));
	q->mem_bytes += it->len;
	q->nitems++;
	q->nbytes += it->len;
	serve_waiters(q);
}

/* Forgets the held items (flush, delete): their settling does nothing.
 * Their references are their holders'. */
static void drop_held(struct queue *q)
{
	struct item *it;

	while ((it = q->held.head) != NULL) {
		ilist_unlink(&q->held, it);
		it->owner = NULL;
	}
}

unsigned queue_confirm(struct queue *q, uint32_t conn_id, unsigned count)
{
	struct item *it, *next;
	unsigned n = 0;
	int rc;

	if (conn_id == QUEUE_NO_CONN)
		return 0; /* items opened by id are confirmed by id only */
	for (it = q->open.head; it && n < count; it = next) {
		next = it->next;
		if (it->open_conn != conn_id)
			continue;
		ilist_unlink(&q->open, it);
		if (q->j && (rc = journal_confirm(q->j, it->id)) != 0)
			journal_failed(q, "confirm", rc);
		item_unref(it);
		n++;
	}
	return n;
}

/* Returns one open item to the head of the queue (aborted, timed out,
 * its connection closed), or, handed out max_deliveries times already,
 * to its dead letter. */
static void return_to_head(struct queue *q, struct item *it)
{
	int rc;

	ilist_unlink(&q->open, it);
	if (q->conf.max_deliveries && it->deliveries >= q->conf.max_deliveries &&
	    dead_letter(q, it) == 0)
		return;
	it->open_conn = 0;
	it->open_deadline_ms = 0;
	if (q->j && (rc = journal_abort(q->j, it->id)) != 0)
		journal_failed(q, "abort", rc);
	ilist_push_head(&q->items, it);
	q->mem_bytes += it->len;
	q->nitems++;
	q->nbytes += it->len;
}

/* The item open by id with this id, or NULL.  A scan of the open items:
 * they are the reads in flight, few next to a queue's backlog. */
static struct item *find_open_id(struct queue *q, uint64_t id)
{
	struct item *it;

	for (it = q->open.head; it; it = it->next)
		if (it->id == id && it->open_conn == QUEUE_NO_CONN)
			return it;
	return NULL;
}

int queue_confirm_id(struct queue *q, uint64_t id)
{
	struct item *it = find_open_id(q, id);
	int rc;

	if (!it)
		return 0;
	ilist_unlink(&q->open, it);
	if (q->j && (rc = journal_confirm(q->j, it->id)) != 0)
		journal_failed(q, "confirm", rc);
	item_unref(it);
	return 1;
}

int queue_abort_id(struct queue *q, uint64_t id)
{
	struct item *it = find_open_id(q, id);

	if (!it)
		return 0;
	return_to_head(q, it);
	serve_waiters(q);
	return 1;
}

unsigned queue_abort(struct queue *q, uint32_t conn_id)
{
	struct item *it, *prev;
	unsigned n = 0;

	if (conn_id == QUEUE_NO_CONN)
		return 0; /* items opened by id are aborted by id only */
	/* Newest first, each to the head: the oldest ends up first. */
	for (it = q->open.tail; it; it = prev) {
		prev = it->prev;
		if (it->open_conn != conn_id)
			continue;
		return_to_head(q, it);
		n++;
	}
	if (n)
		serve_waiters(q);
	return n;
}

int queue_flush(struct queue *q, uint64_t *ticket)
{
	struct item *it;
	int rc = 0;

	*ticket = 0;
	while ((it = q->items.head) != NULL) {
		take_from_items(q, it);
		item_unref(it);
	}
	while ((it = q->delayed.head) != NULL) {
		take_from_delayed(q, it);
		item_unref(it);
	}
	drop_held(q);
	drop_moves(q->reg, q); /* their sources' records are moot now */
	q->nitems -= q->behind_items;
	q->nbytes -= q->behind_bytes;
	q->behind_items = q->behind_bytes = 0;
	if (q->j && (rc = journal_flush(q->j, ticket)) != 0)
		journal_failed(q, "flush", rc);
	return rc;
}

uint64_t queue_flush_expired(struct queue *q)
{
	int64_t now = tern_now_ms();
	struct item *it, *next;
	uint64_t n = 0;

	struct ilist gone = { NULL, NULL, 0 };

	/* Only the in-memory part is scanned: behind items are checked as
	 * they are read back (they are never handed out expired).  The
	 * expired ones are collected first and moved or dropped after the
	 * scan: a move sets into another queue, whose waiters and limits may
	 * act on this one again (a pair of queues expiring into each other). */
	promote(q, tern_mono_ms());
	for (it = q->items.head; it; it = next) {
		next = it->next;
		if (!item_expired(q, it, now))
			continue;
		take_from_items(q, it);
		ilist_push_tail(&gone, it);
	}
	/* A delayed item's exptime can pass before it is visible. */
	for (it = q->delayed.head; it; it = next) {
		next = it->next;
		if (!it->expiry_ms || it->expiry_ms > now)
			continue;
		take_from_delayed(q, it);
		ilist_push_tail(&gone, it);
	}
	while ((it = gone.head) != NULL) {
		ilist_unlink(&gone, it);
		expire_item(q, it);
		n++;
	}
	refill(q);
	return n;
}

void queue_get_stats(struct queue *q, struct queue_stats *st)
{
	struct item *h = q->items.head;

	memset(st, 0, sizeof(*st));
	st->items = q->nitems;
	st->bytes = q->nbytes;
	st->total_items = q->total_items;
	st->expired_items = q->expired_items;
	st->discarded = q->discarded;
	st->waiters = q->nwaiters;
	st->open_transactions = q->open.n;
	st->mem_bytes = q->mem_bytes;
	st->get_hits = q->get_hits;
	st->get_misses = q->get_misses;
	st->dequeued = q->dequeued;
	st->delayed_items = q->delayed.n;
	st->redeliveries = q->redeliveries;
	st->dead_lettered = q->dead_lettered;
	st->dead_dropped = q->dead_dropped;
	st->expired_to = q->expired_to;
	st->status = q->status;
	if (h) {
		int64_t age = tern_now_ms() - h->add_ms;

		st->age_ms = age > 0 ? (uint64_t)age : 0;
	}
}

const char *queue_name(const struct queue *q) { return q->name; }
size_t queue_name_len(const struct queue *q) { return q->name_len; }
const struct queue_conf *queue_get_conf(const struct queue *q) { return &q->conf; }
struct journal *queue_journal(struct queue *q) { return q->j; }

static const char *const status_names[] = {
#define QUEUE_STATUS_NAME(w) #w,
	QUEUE_STATUSES(QUEUE_STATUS_NAME)
#undef QUEUE_STATUS_NAME
};

int queue_status_parse(const char *s, size_t len, enum queue_status *out)
{
	for (int i = 0; i < QUEUE__STATUS_COUNT; i++)
		if (strlen(status_names[i]) == len && !strncasecmp(status_names[i], s, len)) {
			*out = (enum queue_status)i;
			return 0;
		}
	return TERN_EINVAL;
}

const char *queue_status_name(enum queue_status st)
{
	return (unsigned)st < QUEUE__STATUS_COUNT ? status_names[st] : "?";
}

enum queue_status queue_get_status(const struct queue *q) { return q->status; }
int queue_status_by_operator(const struct queue *q) { return q->status_by_op; }

void queue_set_status(struct queue *q, enum queue_status st, int by_operator)
{
	q->status = st;
	q->status_by_op = by_operator;
	if (st == QUEUE_QUIESCENT)
		queue_cancel_waiters(q);
}

void queue_cancel_waiters(struct queue *q)
{
	while (q->wait_head) {
		struct qwaiter *w = q->wait_head;

		queue_unwait(w);
		w->serve(w, NULL);
	}
}

void queue_set_conf(struct queue *q, const struct queue_conf *conf)
{
	if (conf->status != q->conf.status)
		queue_set_status(q, conf->status, 0);
	q->conf = *conf;
	if (q->j)
		journal_set_opts(q->j, &conf->jopts);
	refill(q);
	serve_waiters(q);
}

/* ---- registry ---- */

static uint32_t name_hash(const char *s, size_t n)
{
	uint32_t h = 2166136261u;

	while (n--)
		h = (h ^ (unsigned char)*s++) * 16777619u;
	return h;
}

int qreg_new(struct jenv *env, struct qreg **out)
{
	struct qreg *r = calloc(1, sizeof(*r));

	if (!r)
		return TERN_ENOMEM;
	r->env = env;
	r->moves_tail = &r->moves;
	r->hist_last = tern_mono_ms();
	qhist_init(&r->hist, 0, 0, 0);
	r->nbuckets = 256;
	r->buckets = calloc(r->nbuckets, sizeof(*r->buckets));
	if (!r->buckets) {
		free(r);
		return TERN_ENOMEM;
	}
	*out = r;
	return 0;
}

void qreg_set_conf_fn(struct qreg *r,
		      void (*fn)(void *arg, const char *name, struct queue_conf *out),
		      void *arg)
{
	r->conf_fn = fn;
	r->conf_arg = arg;
}

struct queue *qreg_find(struct qreg *r, const char *name, size_t len)
{
	struct queue *q = r->buckets[name_hash(name, len) & (r->nbuckets - 1)];

	for (; q; q = q->hnext)
		if (q->name_len == len && memcmp(q->name, name, len) == 0)
			return q;
	return NULL;
}

static void grow(struct qreg *r)
{
	unsigned nb = r->nbuckets * 2, i;
	struct queue **b = calloc(nb, sizeof(*b));

	if (!b)
		return; /* longer chains, still correct */
	for (i = 0; i < r->nbuckets; i++) {
		struct queue *q = r->buckets[i], *next;

		for (; q; q = next) {
			uint32_t h = name_hash(q->name, q->name_len) & (nb - 1);

			next = q->hnext;
			q->hnext = b[h];
			b[h] = q;
		}
	}
	free(r->buckets);
	r->buckets = b;
	r->nbuckets = nb;
}

static int child_add(struct queue *p, struct queue *c)
{
	if (p->nchildren == p->cap_children) {
		unsigned cap = p->cap_children ? p->cap_children * 2 : 4;
		struct queue **a = realloc(p->children, cap * sizeof(*a));

		if (!a)
			return TERN_ENOMEM;
		p->children = a;
		p->cap_children = cap;
	}
	p->children[p->nchildren++] = c;
	c->parent = p;
	return 0;
}

static void child_remove(struct queue *p, struct queue *c)
{
	unsigned i;

	for (i = 0; i < p->nchildren; i++)
		if (p->children[i] == c) {
			p->children[i] = p->children[--p->nchildren];
			break;
		}
	c->parent = NULL;
}

/* The journal could not write the add of item id (its set was answered
 * SERVER_ERROR): it leaves the queue, wherever it is, unless a reader has
 * it already. */
static void lost_item(void *arg, uint64_t id, uint32_t len, int in_memory)
{
	struct queue *q = arg;
	struct item *it;

	if (!in_memory) {
		if (q->behind_items) {
			q->behind_items--;
			q->behind_bytes -= len <= q->behind_bytes ? len : q->behind_bytes;
			q->nitems--;
			q->nbytes -= len <= q->nbytes ? len : q->nbytes;
		}
		return;
	}
	/* (recent: from the tail) */
	for (it = q->items.tail; it && it->id != id; it = it->prev)
		;
	if (it) {
		take_from_items(q, it);
		item_unref(it);
		return;
	}
	/* a delayed set's */
	for (it = q->delayed.tail; it && it->id != id; it = it->prev)
		;
	if (it) {
		take_from_delayed(q, it);
		item_unref(it);
	}
}

static void recovered_item(void *arg, struct item *it)
{
	struct queue *q = arg;
	int64_t now = tern_now_ms();

	it->open_conn = 0;
	if ((it->state & ITEM_DELAYED) && it->add_ms > now)
		delayed_insert(q, it, now, tern_mono_ms());
	else
		ilist_push_tail(&q->items, it);
	q->mem_bytes += it->len;
	q->nitems++;
	q->nbytes += it->len;
}

int qreg_get(struct qreg *r, const char *name, size_t len,
	     const struct queue_conf *conf, struct queue **out)
{
	struct queue *q = qreg_find(r, name, len);
	const char *plus;
	int rc;
	unsigned i;

	if (q) {
		*out = q;
		return 0;
	}
	if (!tern_name_valid(name, len))
		return TERN_EBADNAME;
	q = calloc(1, sizeof(*q));
	if (!q)
		return TERN_ENOMEM;
	q->reg = r;
	memcpy(q->name, name, len);
	q->name[len] = '\0';
	q->name_len = len;
	q->conf = *conf;
	q->status = conf->status;
	q->next_id = 1;
	q->used_mono = tern_mono_ms();
	if (r->env) {
		struct journal_recovery rec;

		memset(&rec, 0, sizeof(rec));
		rc = journal_open(r->env, q->name, &q->conf.jopts, recovered_item,
				  q, &rec, &q->j);
		if (rc != 0) {
			struct item *it;

			while ((it = q->items.head) != NULL) {
				ilist_unlink(&q->items, it);
				item_unref(it);
			}
			free(q);
			return rc;
		}
		journal_set_lost_fn(q->j, lost_item, q);
		if (rec.next_id > q->next_id)
			q->next_id = rec.next_id;
		q->behind_items = rec.behind_items;
		q->behind_bytes = rec.behind_bytes;
		q->nitems += rec.behind_items;
		q->nbytes += rec.behind_bytes;
		if (rec.corrupt_records)
			log_warn("queue %s: recovery skipped %llu "
				 "damaged records (%llu bytes)", q->name,
				(unsigned long long)rec.corrupt_records,
				(unsigned long long)rec.corrupt_bytes);
	}
	{
		uint32_t h = name_hash(name, len) & (r->nbuckets - 1);

		q->hnext = r->buckets[h];
		r->buckets[h] = q;
		r->count++;
	}
	/* Fanout: "a+b" is a child of "a"; "a" adopts existing "a+...".  The
	 * search for children walks every queue, so it is skipped while there
	 * are none: thousands of plain queues would cost a walk each (a
	 * restart reopens them all). */
	plus = memchr(name, '+', len);
	if (plus) {
		struct queue *p = qreg_find(r, name, (size_t)(plus - name));

		r->nfanout++;
		if (p)
			child_add(p, q);
	} else if (r->nfanout) {
		for (i = 0; i < r->nbuckets; i++) {
			struct queue *c;

			for (c = r->buckets[i]; c; c = c->hnext)
				if (c != q && c->name_len > len &&
				    c->name[len] == '+' &&
				    memcmp(c->name, name, len) == 0 &&
				    memchr(c->name, '+', len) == NULL)
					child_add(q, c);
		}
	}
	/* Not while qreg_each walks the table: a move made during the walk
	 * (a tick's dead letter) may create its target queue. */
	if (r->count > r->nbuckets * 2 && !r->walking)
		grow(r);
	/* what recovery found is where its history starts, not traffic */
	qhist_init(&q->hist, q->total_items, q->dequeued, q->nitems);
	*out = q;
	return 0;
}

static void queue_free_mem(struct queue *q)
{
	struct item *it;

	queue_cancel_waiters(q);
	while ((it = q->items.head) != NULL) {
		ilist_unlink(&q->items, it);
		item_unref(it);
	}
	while ((it = q->open.head) != NULL) {
		ilist_unlink(&q->open, it);
		item_unref(it);
	}
	while ((it = q->delayed.head) != NULL) {
		ilist_unlink(&q->delayed, it);
		item_unref(it);
	}
	drop_held(q);
	qhist_free(&q->hist);
	free(q->children);
	free(q);
}

static void unlink_from_reg(struct qreg *r, struct queue *q)
{
	struct queue **pp = &r->buckets[name_hash(q->name, q->name_len) & (r->nbuckets - 1)];
	unsigned i;

	for (; *pp; pp = &(*pp)->hnext)
		if (*pp == q) {
			*pp = q->hnext;
			r->count--;
			if (memchr(q->name, '+', q->name_len))
				r->nfanout--;
			break;
		}
	if (q->parent)
		child_remove(q->parent, q);
	for (i = 0; i < q->nchildren; i++)
		q->children[i]->parent = NULL;
	q->nchildren = 0;
}

/*
 * Detaches q from its journal and forgets its held items, so that nothing
 * more is recorded for it: closing or deleting a journal waits for the
 * writer, and the durable callbacks that run meanwhile send replies, whose
 * held items would be settled into the journal being closed.  Nor does the
 * journal call back into q (its lost callback) while q goes.
 */
static struct journal *detach_journal(struct queue *q)
{
	struct journal *j = q->j;

	q->j = NULL;
	drop_held(q);
	if (j)
		journal_set_lost_fn(j, NULL, NULL);
	return j;
}

int qreg_delete(struct qreg *r, struct queue *q)
{
	struct journal *j;
	int rc = 0;

	r->gen++;
	drop_moves(r, q);
	unlink_from_reg(r, q);
	j = detach_journal(q);
	if (j)
		rc = journal_delete(j);
	queue_free_mem(q);
	return rc;
}

void qreg_each(struct qreg *r, void (*fn)(struct queue *q, void *arg), void *arg)
{
	unsigned i;

	r->walking++;
	for (i = 0; i < r->nbuckets; i++) {
		struct queue *q;

		for (q = r->buckets[i]; q; q = q->hnext)
			fn(q, arg);
	}
	r->walking--;
}

unsigned qreg_count(struct qreg *r) { return r->count; }
uint64_t qreg_generation(const struct qreg *r) { return r->gen; }

void qreg_free(struct qreg *r)
{
	struct journal **js;
	size_t n = 0;
	unsigned i;

	if (!r)
		return;
	/* Moves still waiting for their target's write: the sources keep
	 * their items (a restart finds them in both: at least once). */
	drop_moves(r, NULL);
	/* every journal closed at once (see journal_close_many); one by one
	 * without memory for the list */
	js = malloc((r->count ? r->count : 1) * sizeof(*js));
	for (i = 0; i < r->nbuckets; i++) {
		struct queue *q = r->buckets[i], *next;

		for (; q; q = next) {
			struct journal *j = detach_journal(q);

			next = q->hnext;
			if (j && js)
				js[n++] = j;
			else if (j)
				journal_close(j);
			queue_free_mem(q);
		}
	}
	if (js)
		journal_close_many(js, n);
	free(js);
	qhist_free(&r->hist);
	free(r->buckets);
	free(r);
}

static void tick_queue(struct queue *q, void *arg)
{
	int64_t now = *(int64_t *)arg;
	struct item *it, *prev;
	int n = 0;

	if (promote(q, now))
		serve_waiters(q); /* a delayed item became visible */
	/* Without open_timeout only items opened by id have deadlines. */
	if (!q->open.head || (!q->conf.open_timeout_ms && !q->opened_by_id))
		return;
	for (it = q->open.tail; it; it = prev) {
		prev = it->prev;
		if (it->open_deadline_ms && it->open_deadline_ms <= now) {
			return_to_head(q, it);
			n++;
		}
	}
	if (n)
		serve_waiters(q);
}

/* ---- history (qhist.h) ---- */

struct hist_ctx {
	unsigned pos;
	uint64_t in, out, depth;
};

static void sample_queue(struct queue *q, void *arg)
{
	struct hist_ctx *x = arg;
	uint64_t din, dout;

	qhist_sample(&q->hist, x->pos, q->total_items, q->dequeued, q->nitems, &din, &dout);
	x->in += din;
	x->out += dout;
	x->depth += q->nitems;
}

/* Records the slot that ends now for every queue and for the server. */
static void sample_history(struct qreg *r, int64_t mono_ms)
{
	struct hist_ctx x = { (unsigned)(r->hist_samples % QHIST_SLOTS), 0, 0, 0 };
	uint64_t din, dout;

	qreg_each(r, sample_queue, &x);
	r->hist_in += x.in;
	r->hist_out += x.out;
	r->hist_depth = x.depth;
	qhist_sample(&r->hist, x.pos, r->hist_in, r->hist_out, x.depth, &din, &dout);
	r->hist_samples++;
	r->hist_last = mono_ms;
}

static void history_fill(const struct qhist *h, const struct qreg *r, int64_t mono_ms,
			 struct queue_history *out)
{
	qhist_read(h, (unsigned)((r->hist_samples + QHIST_SLOTS - 1) % QHIST_SLOTS), out->slot);
	out->filled = r->hist_samples < QHIST_SLOTS ? (unsigned)r->hist_samples : QHIST_SLOTS;
	out->since_ms = mono_ms > r->hist_last ? mono_ms - r->hist_last : 0;
	out->incomplete = h->lost != 0;
}

void queue_history(const struct queue *q, struct queue_history *out)
{
	history_fill(&q->hist, q->reg, tern_mono_ms(), out);
	out->in_now = q->total_items - q->hist.in;
	out->out_now = q->dequeued - q->hist.out;
	out->depth_now = q->nitems;
}

static void sum_now(struct queue *q, void *arg)
{
	struct queue_history *h = arg;

	h->in_now += q->total_items >= q->hist.in ? q->total_items - q->hist.in : 0;
	h->out_now += q->dequeued >= q->hist.out ? q->dequeued - q->hist.out : 0;
	h->depth_now += q->nitems;
}

void qreg_history(struct qreg *r, struct queue_history *out)
{
	history_fill(&r->hist, r, tern_mono_ms(), out);
	out->in_now = out->out_now = out->depth_now = 0;
	qreg_each(r, sum_now, out);
}

void qreg_tick(struct qreg *r, int64_t now_ms, int64_t mono_ms)
{
	(void)now_ms;
	qreg_each(r, tick_queue, &mono_ms);
	/* (about once a second: a walk of every queue) */
	if (mono_ms >= r->next_idle_scan) {
		r->next_idle_scan = mono_ms + 1000;
		qreg_drop_idle(r, mono_ms);
	}
	if (mono_ms - r->hist_last >= QHIST_SLOT_MS)
		sample_history(r, mono_ms);
}

struct idle_ctx {
	int64_t now;
	struct queue *drop[QREG_DROP_MAX];
	unsigned n;
};

static void find_idle(struct queue *q, void *arg)
{
	struct idle_ctx *x = arg;

	/* a status an operator set (kept in DATA_DIR/status) is a use: the
	 * queue stays until the operator deletes it */
	if (x->n == QREG_DROP_MAX || q->conf.max_queue_age_ms <= 0 || q->nitems ||
	    q->open.head || q->held.head || q->wait_head || q->status_by_op ||
	    moving_from(q->reg, q) ||
	    x->now - q->used_mono < q->conf.max_queue_age_ms)
		return;
	x->drop[x->n++] = q;
}

unsigned qreg_drop_idle(struct qreg *r, int64_t mono_ms)
{
	struct idle_ctx x;
	unsigned dropped = 0;

	x.now = mono_ms;
	x.n = 0;
	qreg_each(r, find_idle, &x);
	for (unsigned i = 0; i < x.n; i++) {
		struct queue *q = x.drop[i];
		int rc;

		log_info("queue %s: empty and unused for %lld s (max_queue_age):"
			" dropped", q->name, (long long)((mono_ms - q->used_mono) / 1000));
		rc = qreg_delete(r, q);
		if (rc)
			log_error("queue dropped, but removing its journal failed: %s",
				tern_strerror(rc));
		dropped++;
	}
	return dropped;
}

static void abort_conn(struct queue *q, void *arg)
{
	queue_abort(q, *(uint32_t *)arg);
}

void qreg_abort_conn(struct qreg *r, uint32_t conn_id)
{
	qreg_each(r, abort_conn, &conn_id);
}
