/*
 * queue.h: one named FIFO queue and the registry of all queues.
 *
 * Pure queue semantics (FIFO, waiters, reliable reads, limits, expiry,
 * fanout) on the event-loop thread.  Persistence plugs in underneath: when a
 * queue has a journal, every mutation is recorded through journal/journal.h
 * before it becomes visible; without one (unit tests) the queue lives in
 * memory only.  Bodies beyond conf.max_memory_size stay in the journal and
 * are read back in order as the head reaches them (read-behind).
 */
#ifndef TERN_QUEUE_H
#define TERN_QUEUE_H

#include <stdint.h>

#include "../journal/journal.h"
#include "../lib/tern.h"
#include "qhist.h"

struct jenv;

/* The connection id of items opened by id (QUEUE_POP_OPEN_ID): no
 * connection ever has it. */
#define QUEUE_NO_CONN UINT32_MAX
/* How long an item opened by id stays open when the queue's open_timeout
 * is 0 (never): such an item has no connection whose end would return it,
 * so it must have a deadline. */
#define QUEUE_OPEN_ID_TIMEOUT_MS 30000

/* Largest max_deliveries: the journal keeps delivery counts up to 65535
 * (higher counts are kept as 65535). */
#define QUEUE_MAX_DELIVERIES 65535
/*
 * A queue's or the server's status (Kestrel's): what requests it takes.
 * Ordered from the most to the least open, so the stricter of two is the
 * larger: UP takes everything; READONLY refuses sets and serves gets;
 * QUIESCENT refuses both (confirming and aborting items already open still
 * work, so work in flight can finish).
 */
#define QUEUE_STATUSES(X) X(UP) X(READONLY) X(QUIESCENT)

enum queue_status {
#define QUEUE_STATUS_ENUM(w) QUEUE_##w,
	QUEUE_STATUSES(QUEUE_STATUS_ENUM)
#undef QUEUE_STATUS_ENUM
	QUEUE__STATUS_COUNT
};

/* Parses a status word of len bytes (UP, READONLY, QUIESCENT; any case).
 * 0 or TERN_EINVAL. */
int queue_status_parse(const char *s, size_t len, enum queue_status *out);
/* The word of st ("UP", ...). */
const char *queue_status_name(enum queue_status st);

/* Per-queue settings ([queues] defaults, [queue NAME] overrides). */
struct queue_conf {
	uint64_t max_items;      /* 0 = unlimited */
	uint64_t max_size;       /* bytes of bodies; 0 = unlimited */
	uint64_t max_item_size;  /* bytes; a larger set gets NOT_STORED */
	int64_t max_age_ms;      /* 0 = none */
	int discard_old_when_full;
	int64_t open_timeout_ms; /* 0 = never */
	uint32_t max_open;       /* open items per connection per queue */
	uint32_t max_deliveries; /* an open item returned after this many
				    handouts moves to dead_letter (or is
				    dropped without one); 0 = no limit */
	char dead_letter[TERN_NAME_MAX + 1]; /* "" = none */
	char expire_to[TERN_NAME_MAX + 1];   /* expired items move here;
						"" = they are dropped */
	int64_t max_queue_age_ms; /* drop the queue once empty and unused this
				   * long (qreg_drop_idle); 0 = never */
	enum queue_status status; /* the configured status */
	struct journal_opts jopts; /* sync mode, memory cap, ... */
};

void queue_conf_default(struct queue_conf *c);

struct queue;
struct qreg;

/* How queue_pop hands out the head item. */
enum queue_pop_mode {
	QUEUE_POP_REMOVE, /* gone for good at once (journal REMOVE) */
	QUEUE_POP_HOLD,   /* taken off the queue but not yet gone: the caller
			     says later, with queue_settle(), whether it was
			     delivered (then it is removed) or not (then it goes
			     back to the head, as an aborted open item does) */
	QUEUE_POP_OPEN,   /* reliable read: open for conn_id until confirmed or
			     aborted */
	QUEUE_POP_OPEN_ID, /* reliable read by id: open for no connection
			      (conn_id is ignored) until confirmed or aborted
			      by its id (queue_confirm_id, queue_abort_id) or
			      its deadline: open_timeout, or
			      QUEUE_OPEN_ID_TIMEOUT_MS when that is 0.  A
			      connection closing does not return it: through
			      a proxy, connections are shared and outlive the
			      client that opened it */
	QUEUE_POP_PEEK,   /* a reference to the head, which stays queued */
};

/*
 * A waiter: a connection blocked in get/t=.  Embedded in the connection;
 * linked in the queue's FIFO of waiters while waiting.  serve() is called
 * with an item (reference passed, taken with mode: QUEUE_POP_HOLD or
 * QUEUE_POP_OPEN) or NULL on timeout/cancel by the queue.
 */
struct qwaiter {
	struct qwaiter *next, *prev;
	struct queue *q;
	enum queue_pop_mode mode;
	uint32_t conn_id;
	void (*serve)(struct qwaiter *w, struct item *it);
};

struct queue_stats {
	uint64_t items, bytes, total_items, expired_items, discarded;
	uint64_t waiters, open_transactions, age_ms, mem_bytes;
	uint64_t get_hits, get_misses;
	uint64_t dequeued; /* handed out by gets (peeks not counted); an item
			      aborted or returned and handed out again counts
			      again */
	uint64_t delayed_items; /* of items: not visible yet (delayed set) */
	uint64_t redeliveries;  /* open reads of items handed out before */
	uint64_t dead_lettered; /* moved to dead_letter at max_deliveries */
	uint64_t dead_dropped;  /* dropped at max_deliveries (no dead_letter) */
	uint64_t expired_to;    /* expired items moved to expire_to (counted in
				   expired_items too) */
	enum queue_status status; /* its own (queue_get_status) */
};

/* Registry: owns every queue.  env may be NULL (memory only). */
int qreg_new(struct jenv *env, struct qreg **out);
/*
 * How the registry configures a queue it creates itself (the target of an
 * expire_to or dead_letter move that does not exist yet): fn fills *out
 * for name.  Without it such a queue gets the settings of the queue the
 * item leaves, without its moves.
 */
void qreg_set_conf_fn(struct qreg *r,
		      void (*fn)(void *arg, const char *name, struct queue_conf *out),
		      void *arg);
/*
 * Tells the registry that journal tickets up to upto are resolved with err
 * (the server's jenv_durable_fn calls it).  An item moving to another
 * queue (expire_to, dead_letter) is removed from its source's journal only
 * once its ADD into the target is written (err 0): a crash in between
 * finds it in both (at least once), never in neither.  When the target's
 * write failed, the item returns to its source instead.
 */
void qreg_durable(struct qreg *r, uint64_t upto, int err);
/* Nonzero while moves wait for their target's write (see qreg_durable). */
unsigned qreg_moves_pending(const struct qreg *r);
/* Closes every queue (journals checkpointed and closed) and frees. */
void qreg_free(struct qreg *r);
/* Finds a queue; NULL when it does not exist. */
struct queue *qreg_find(struct qreg *r, const char *name, size_t len);
/*
 * Finds or creates (and recovers, when persistent) queue name with conf.
 * Returns 0, TERN_EBADNAME, TERN_ENOMEM, or a journal error.
 */
int qreg_get(struct qreg *r, const char *name, size_t len,
	     const struct queue_conf *conf, struct queue **out);
/* Deletes a queue: its waiters get NULL, its open items vanish, its journal
 * files are removed.  Returns 0 or a journal error. */
int qreg_delete(struct qreg *r, struct queue *q);
/* Calls fn for every queue (in no particular order). fn must not delete. */
void qreg_each(struct qreg *r, void (*fn)(struct queue *q, void *arg), void *arg);
unsigned qreg_count(struct qreg *r);
/* Changes whenever a queue is deleted: a cached queue pointer taken under
 * an older generation may dangle. */
uint64_t qreg_generation(const struct qreg *r);

/* Runs timers: makes delayed items whose time has come visible (waking
 * waiters), returns open items whose open_timeout has passed to their
 * heads; about once a second, drops idle queues (qreg_drop_idle); every
 * QHIST_SLOT_MS, records a slot of every queue's history.  now_ms:
 * the wall clock (tern_now_ms), for what has a wall-clock meaning; mono_ms:
 * the monotonic clock (tern_mono_ms), for timeouts: open deadlines and
 * idle ages are monotonic, so a clock step does not move them. */
void qreg_tick(struct qreg *r, int64_t now_ms, int64_t mono_ms);
/*
 * Deletes (journal files and catalog entry included) every queue whose
 * conf.max_queue_age_ms is set and that has been empty and unused for that
 * long at mono_ms (the monotonic clock, tern_mono_ms): no items, none open
 * or held, no waiter, no status set by an operator, no set or get of it
 * since.  At most QREG_DROP_MAX per call, so
 * a crowd of idle queues does not stall the loop.  Returns how many.
 */
#define QREG_DROP_MAX 16
unsigned qreg_drop_idle(struct qreg *r, int64_t mono_ms);

const char *queue_name(const struct queue *q);
size_t queue_name_len(const struct queue *q);
const struct queue_conf *queue_get_conf(const struct queue *q);
/* Applies new settings (reload).  A configured status that differs from
 * the previous one becomes the queue's status (replacing one an operator
 * set); an unchanged one leaves the queue's status as it is. */
void queue_set_conf(struct queue *q, const struct queue_conf *conf);

/* The queue's own status (the server's may be stricter: the caller
 * combines them).  A new queue starts with its configured status. */
enum queue_status queue_get_status(const struct queue *q);
/* Whether the status was set by an operator (queue_set_status with
 * by_operator) rather than taken from the configuration. */
int queue_status_by_operator(const struct queue *q);
/* Sets the queue's status.  by_operator: set by a command (kept across a
 * reload that leaves the configured status unchanged, and persisted by
 * the caller). */
void queue_set_status(struct queue *q, enum queue_status st, int by_operator);
/* Answers every waiter of q with NULL (as a timeout would): for a queue
 * that stopped serving gets. */
void queue_cancel_waiters(struct queue *q);

/*
 * Enqueues a new item built from it (the caller's reference is consumed:
 * the queue takes it, or drops it on failure), and delivers a copy-by-
 * reference to every fanout child q+name (but those whose own status is
 * not UP, which refuse sets).  Sets it->id, add_ms.  An item
 * whose expiry_ms has passed already is counted (total, expired) and
 * dropped: 0 with *ticket and *id 0.
 * *ticket: 0 or the journal ticket to wait for before replying STORED
 * (the highest among q and its children).  *id (when id is not NULL): the
 * item's id in q (it may be gone from memory by the time push returns).
 * Returns 0; TERN_EFULL (NOT_STORED); TERN_ETOOBIG (NOT_STORED); journal
 * errors (SERVER_ERROR).
 */
int queue_push(struct queue *q, struct item *it, uint64_t *ticket, uint64_t *id);
/*
 * queue_push of an item that stays invisible for delay_ms (delayed
 * delivery; 0 is queue_push).  Its add time (and the journal's) is the
 * wall-clock time it becomes visible; the running server waits on the
 * monotonic clock.  Delayed items stay in memory, counted in max_items and
 * max_size like any item; their bodies are bounded by max_memory_size on
 * their own (TERN_EFULL beyond it).  Once visible an item joins the queue
 * in the order of the time it became visible (see docs/PROTOCOL.md).
 * *ticket_lo (when not NULL): the lowest ticket among q's and its
 * children's copies, each of which must succeed before STORED.
 */
int queue_push_delayed(struct queue *q, struct item *it, uint64_t delay_ms,
		       uint64_t *ticket, uint64_t *id, uint64_t *ticket_lo);

/* A new item with the body, flags, expiry, add time and delay state (a copy for
 * another queue: fanout children, aliases' destinations), or NULL when
 * out of memory. */
struct item *queue_item_copy(const struct item *it);

/*
 * Takes the head item (skipping and counting expired ones) as mode says
 * (see enum queue_pop_mode); conn_id: the connection it is held or opened
 * for.  *out: a reference the caller must unref (for a held item, the only
 * one: the caller keeps it alive until it is settled), or NULL when empty.
 * Returns 0, TERN_EFULL when conn_id already holds max_open items (open
 * only), or a journal error.
 */
int queue_pop(struct queue *q, enum queue_pop_mode mode, uint32_t conn_id,
	      struct item **out);
/*
 * Shows the first n items a get would take next, in order, without taking
 * them: fn(arg, it) for each (the queue keeps its reference: fn takes its
 * own to keep the item).  Only items in memory are shown: of a backlog
 * longer than max_memory_size, those still in the journal alone are not
 * (they come into memory as the head reaches them).  Counts as one peek
 * (a get hit or miss).  Returns how many were shown.
 */
unsigned queue_peek(struct queue *q, unsigned n, void (*fn)(void *arg, struct item *it),
		    void *arg);
/*
 * Ends the hold of an item taken with QUEUE_POP_HOLD: delivered, it is
 * removed for good; otherwise it returns to the head of its queue (several
 * from one queue: settle the newest first, so they keep their order).
 * Nothing happens when its queue was flushed or deleted meanwhile.  The
 * caller's reference is untouched.
 */
void queue_settle(struct item *it, int delivered);
/* Whether q has an item to hand out (expired ones are dropped first; open
 * and held items do not count). */
int queue_has_items(struct queue *q);
/* Confirms up to count of conn_id's oldest open items on q; returns how
 * many were confirmed (none for QUEUE_NO_CONN: items opened by id are
 * confirmed by id). */
unsigned queue_confirm(struct queue *q, uint32_t conn_id, unsigned count);
/* Confirms the item opened by id (QUEUE_POP_OPEN_ID) whose id is id: it
 * is gone for good.  Returns 1, or 0 when no item with that id is open by
 * id (confirmed already, back in the queue after its deadline, never
 * opened, or opened by a connection). */
int queue_confirm_id(struct queue *q, uint64_t id);
/* Returns the item opened by id whose id is id to the head of q; 1, or 0
 * as for queue_confirm_id. */
int queue_abort_id(struct queue *q, uint64_t id);
/* Returns every item conn_id holds open on q to the head, in order;
 * returns how many (none for QUEUE_NO_CONN). */
unsigned queue_abort(struct queue *q, uint32_t conn_id);
/* Aborts conn_id's open items on every queue (connection closed). */
void qreg_abort_conn(struct qreg *r, uint32_t conn_id);
/* Number of items conn_id holds open on q. */
unsigned queue_open_count(struct queue *q, uint32_t conn_id);

/* Adds w to the queue's FIFO of waiters (after a pop found nothing). */
void queue_wait(struct queue *q, struct qwaiter *w);
/* Removes w from its queue's waiters (timeout, connection closed). */
void queue_unwait(struct qwaiter *w);

/* Removes every item (flush).  Open items stay open; held items are
 * forgotten (queue_settle does nothing for them).  *ticket: the journal's
 * for the flush (0: none), to answer once it resolves (on_durable), as a
 * set's reply is. */
int queue_flush(struct queue *q, uint64_t *ticket);
/* Removes expired items; returns how many. */
uint64_t queue_flush_expired(struct queue *q);

void queue_get_stats(struct queue *q, struct queue_stats *st);
struct journal *queue_journal(struct queue *q);

/* A queue's recent history (qhist.h), as of now. */
struct queue_history {
	struct qhist_slot slot[QHIST_SLOTS]; /* oldest first */
	unsigned filled;   /* slots recorded since the registry started (at
			      most QHIST_SLOTS): the last `filled` of slot */
	int64_t since_ms;  /* time since the newest slot ended */
	uint64_t in_now, out_now; /* added and handed out since then */
	uint64_t depth_now;
	int incomplete;    /* a slot of the window lacked memory for the ring
			      and reads as quiet */
};
void queue_history(const struct queue *q, struct queue_history *out);
/* The same summed over every queue: the server's traffic and depth.  A
 * queue deleted leaves what it recorded in the slots before. */
void qreg_history(struct qreg *r, struct queue_history *out);

#endif
