/*
 * counters.h: what the server counts, kept apart from its state, and the
 * tables of every figure it shows.  `stats` (ops.c) and /metrics
 * (metrics.c) are both made from these tables, so a figure is named and
 * described once: adding a counter is adding its row (and counting it).
 */
#ifndef TERN_COUNTERS_H
#define TERN_COUNTERS_H

#include <stdint.h>

#include "../journal/journal.h"
#include "queue.h"

struct server;

/*
 * The server's figures, in the order `stats` lists them: memcached's
 * names first where they mean the same (clients such as libmemcached and
 * PHP's Memcached read them), then tern's own.  Each row is one of
 *   C(name, metric, help)         a counter: a field of struct
 *                                 server_counters, which only grows
 *   L(name, metric, label, help)  a counter shown in /metrics as one
 *                                 sample (label) of a family shared with
 *                                 the rows next to it
 *   V(name, metric, type, help, value)
 *                                 a figure read from the server's state
 *                                 when shown: value reads s (the server)
 *                                 and f (struct figures)
 * name is the stats name (and a counter's field); metric is the
 * Prometheus family, counters with the suffix _total, and is empty for a
 * figure /metrics leaves out; a V row with no name is one only /metrics
 * shows.  help is the family's HELP text.
 */
#define SERVER_FIGURES(C, L, V)                                                              \
	V(curr_connections, tern_connections, gauge, "Client connections open.", s->nconns)  \
	C(total_connections, tern_connections_accepted_total, "Client connections accepted.") \
	C(rejected_connections, tern_connections_rejected_total,                             \
	  "Connections refused (max_connections or max_handshakes reached, or shutting "     \
	  "down).")                                                                          \
	V(connection_structures, , gauge, "Client connections open (memcached's name).",     \
	  s->nconns)                                                                         \
	V(max_connections, tern_connections_max, gauge, "The max_connections setting.",      \
	  s->cfg.max_connections)                                                            \
	C(cmd_get, tern_gets_total, "Get requests (mg, binary GET and text get alike).")     \
	C(cmd_set, tern_sets_total, "Set and add requests.")                                 \
	C(get_hits, tern_get_hits_total, "Items returned by gets.")                          \
	C(get_misses, tern_get_misses_total, "Keys of gets that returned no item.")          \
	C(bytes_read, tern_network_receive_bytes_total, "Bytes received from clients.")      \
	C(bytes_written, tern_network_transmit_bytes_total, "Bytes of replies to clients.")  \
	V(limit_maxbytes, , gauge, "Always 0: no memory limit for all queues together.", 0)  \
	C(listen_disabled_num, ,                                                             \
	  "Times accepting failed and paused (out of descriptors or memory).")               \
	V(threads, , gauge, "Threads serving requests: the event loop.", 1)                  \
	V(evictions, , counter, "Always 0: nothing is evicted.", 0)                          \
	V(curr_items, , gauge, "Items waiting in every queue.", f->sum.items)                \
	V(total_items, , counter, "Items ever added to the queues.", f->sum.total_items)     \
	V(bytes, , gauge, "Bytes of the bodies waiting in every queue.", f->sum.bytes)       \
	V(delayed_items, , gauge, "Items set with a delay that are not visible yet.",        \
	  f->sum.delayed_items)                                                              \
	V(redeliveries, , counter, "Open reads of items handed out before.",                 \
	  f->sum.redeliveries)                                                               \
	V(dead_lettered, , counter, "Items moved to a dead_letter queue.",                   \
	  f->sum.dead_lettered)                                                              \
	V(dead_dropped, , counter, "Items dropped after max_deliveries handouts.",           \
	  f->sum.dead_dropped)                                                               \
	V(expired_to, , counter, "Expired items moved to an expire_to queue.",               \
	  f->sum.expired_to)                                                                 \
	V(queues, tern_queues, gauge, "Queues.", qreg_count(s->reg))                         \
	V(max_queues, , gauge, "The max_queues setting.", s->cfg.max_queues)                 \
	C(rejected_queues, , "Requests refused a new queue (auto_create, max_queues).")      \
	C(request_timeouts, , "Connections closed for a request not whole within "           \
	  "request_timeout.")                                                                \
	C(idle_timeouts, tern_idle_timeouts_total, "Connections closed by idle_timeout.")    \
	V(curr_handshakes, tern_connections_handshaking, gauge,                              \
	  "Connections in their handshake (TLS, login, first request).", s->nhs)             \
	C(handshake_timeouts, tern_handshake_timeouts_total,                                 \
	  "Connections closed for not finishing their handshake within handshake_timeout.")  \
	C(handshake_evictions, tern_handshake_evictions_total,                               \
	  "Connections in their handshake closed to make room for a new one.")               \
	V(poll_us, , gauge, "The poll_us setting.", s->cfg.poll_us)                          \
	C(loop_polls, tern_loop_polls_total,                                                 \
	  "Event-loop passes that polled instead of sleeping (poll_us).")                    \
	C(conn_yields, tern_conn_yields_total,                                               \
	  "Turns a connection ended with input left, for the others (memcached's "           \
	  "conn_yields).")                                                                   \
	C(body_direct_bytes, , "Body bytes read from the socket straight into their item.")  \
	V(journal_writer_wakeups, tern_journal_writer_wakeups_total, counter,                \
	  "Times the journal's writer thread was woken from waiting for work.",              \
	  jenv_writer_wakeups(s->env))                                                       \
	V(, tern_journal_fsync_errors_total, counter, "fdatasyncs of the journal that failed.", \
	  f->es.fsync_errors)                                                                \
	V(, tern_journal_group_commit_batches_total, counter,                                \
	  "Batches (one queue's records of one loop pass) written by group commits.",        \
	  f->es.group_batches)                                                               \
	V(journal_group_waits, tern_journal_group_waits_total, counter,                      \
	  "Times the journal's writer waited, after a sync, for the clients it answered "    \
	  "to send their next sets.", f->es.group_waits)                                     \
	V(journal_group_waits_cut, tern_journal_group_waits_cut_total, counter,              \
	  "Of those waits, the ones that ended at their deadline.", f->es.group_waits_cut)   \
	L(requests_text, tern_requests_total, protocol="text", "Requests parsed, by protocol.") \
	L(requests_meta, tern_requests_total, protocol="meta", "Requests parsed, by protocol.") \
	L(requests_binary, tern_requests_total, protocol="binary",                           \
	  "Requests parsed, by protocol.")                                                   \
	C(auth_cmds, tern_auth_attempts_total, "Authentication attempts.")                   \
	C(auth_errors, tern_auth_failures_total, "Failed authentication attempts.")          \
	C(auth_delayed, tern_auth_delayed_total,                                             \
	  "Failed logins whose answer was held back (auth_failure_delay_ms).")               \
	C(auth_closed, tern_auth_closed_total,                                               \
	  "Connections closed after auth_max_failures failed logins.")                       \
	C(reloads, tern_reloads_total, "Reloads of the configuration tried.")                \
	C(reload_failures, tern_reload_failures_total,                                       \
	  "Reloads refused: the configuration, users and rights before them stayed.")        \
	V(reload_ok, tern_reload_ok, gauge,                                                  \
	  "1 when the last reload was applied (or none was tried), 0 when it failed.",       \
	  s->reload_ok)                                                                      \
	C(metrics_timeouts, tern_metrics_timeouts_total,                                     \
	  "Metrics connections closed metrics_timeout after their accept.")                  \
	C(metrics_paused, tern_metrics_paused_total,                                         \
	  "Times the metrics listener paused at metrics_max_connections.")                   \
	C(status_refused, tern_status_refused_total,                                         \
	  "Requests refused because of the server's or a queue's status.")                   \
	V(, tern_server_status, gauge,                                                       \
	  "The server's status: 0 UP, 1 READONLY (refuses sets), 2 QUIESCENT (refuses sets " \
	  "and gets).", s->status)

/* The server's counters: one field per C and L row of SERVER_FIGURES. */
struct server_counters {
#define COUNTER_FIELD(name, ...) uint64_t name;
#define FIGURE_NONE(...)
	SERVER_FIGURES(COUNTER_FIELD, COUNTER_FIELD, FIGURE_NONE)
#undef COUNTER_FIELD
#undef FIGURE_NONE
};

/*
 * Every queue's figures, in the order `stats` lists them as
 * queue_<queue>_<name>; /metrics shows each as a family with a queue
 * label.  Each row is one of
 *   Q(name, metric, type, help, field, div)  field of the queue's
 *                                            struct queue_stats
 *   J(name, metric, type, help, field, div)  field of its journal's
 *                                            struct journal_stats (a
 *                                            queue with a journal only)
 * name is empty for a figure `stats` leaves out; div divides the value
 * for /metrics (1000: milliseconds shown as seconds).  Every value is a
 * number, so that tools can add them up over servers: status is 0 UP, 1
 * READONLY, 2 QUIESCENT (enum queue_status).
 */
#define QUEUE_FIGURES(Q, J)                                                                  \
	Q(items, tern_queue_items, gauge,                                                    \
	  "Items waiting in the queue (items handed out and not yet gone are not counted).", \
	  items, 1)                                                                          \
	Q(bytes, tern_queue_bytes, gauge, "Bytes of the bodies waiting in the queue.",       \
	  bytes, 1)                                                                          \
	Q(total_items, tern_queue_enqueued_total, counter,                                   \
	  "Items added to the queue (sets and fanout copies).", total_items, 1)              \
	Q(expired_items, tern_queue_expired_total, counter,                                  \
	  "Items dropped because they expired.", expired_items, 1)                           \
	Q(discarded, tern_queue_discarded_total, counter,                                    \
	  "Oldest items dropped to make room (discard_old_when_full).", discarded, 1)        \
	Q(waiters, tern_queue_waiters, gauge, "Gets waiting for an item (/t=).", waiters, 1) \
	Q(open_transactions, tern_queue_open_items, gauge,                                   \
	  "Items handed out with /open, neither confirmed nor aborted yet.",                 \
	  open_transactions, 1)                                                              \
	Q(age, tern_queue_oldest_item_age_seconds, gauge,                                    \
	  "Time since the oldest waiting item was added (0 when the queue is empty).",       \
	  age_ms, 1000)                                                                      \
	Q(mem_bytes, tern_queue_memory_bytes, gauge,                                         \
	  "Bytes of waiting bodies held in memory (the rest is read back from the journal).", \
	  mem_bytes, 1)                                                                      \
	Q(dequeued, tern_queue_dequeued_total, counter,                                      \
	  "Items handed out by gets, peeks not counted (an item handed out again after an "  \
	  "abort counts again).", dequeued, 1)                                               \
	Q(delayed_items, tern_queue_delayed_items, gauge,                                    \
	  "Items set with a delay that are not visible yet (counted in tern_queue_items).",  \
	  delayed_items, 1)                                                                  \
	Q(redeliveries, tern_queue_redeliveries_total, counter,                              \
	  "Open reads of items handed out before (aborted, timed out, connection closed).",  \
	  redeliveries, 1)                                                                   \
	Q(dead_lettered, tern_queue_dead_lettered_total, counter,                            \
	  "Items moved to the dead_letter queue after max_deliveries handouts.",             \
	  dead_lettered, 1)                                                                  \
	Q(dead_dropped, tern_queue_dead_dropped_total, counter,                              \
	  "Items dropped after max_deliveries handouts (no dead_letter queue).",             \
	  dead_dropped, 1)                                                                   \
	Q(expired_to, tern_queue_expired_moved_total, counter,                               \
	  "Expired items moved to the expire_to queue (counted as expired too).",            \
	  expired_to, 1)                                                                     \
	Q(status, tern_queue_status, gauge,                                                  \
	  "The queue's own status: 0 UP, 1 READONLY (refuses sets), 2 QUIESCENT (refuses "   \
	  "sets and gets); the server's (tern_server_status) may be stricter.", status, 1)   \
	Q(, tern_queue_get_misses_total, counter, "Gets that found the queue empty.",        \
	  get_misses, 1)                                                                     \
	J(journal_segments, tern_journal_segments, gauge,                                    \
	  "The queue's journal segment files.", segments, 1)                                 \
	J(journal_disk_bytes, tern_journal_disk_bytes, gauge,                                \
	  "Bytes of the queue's journal segment files on disk (the prepared spare "          \
	  "included).", disk_bytes, 1)                                                       \
	J(journal_behind_items, tern_journal_behind_items, gauge,                            \
	  "Waiting items kept only in the journal (the backlog beyond max_memory_size).",    \
	  behind_items, 1)                                                                   \
	J(journal_records, tern_journal_records_total, counter,                              \
	  "Journal records of the queue handed to the kernel.", records_written, 1)          \
	J(journal_syncs, tern_journal_fsyncs_total, counter,                                 \
	  "fdatasyncs of the queue's journal segments.", syncs, 1)                           \
	J(journal_write_errors, tern_journal_write_errors_total, counter,                    \
	  "Failed writes or syncs of the queue's journal (it then refuses sets until a "     \
	  "restart).", write_errors, 1)                                                      \
	J(journal_index_walks, tern_journal_index_walks_total, counter,                      \
	  "Checkpoints and compactions that walked the queue's whole index (loop time "      \
	  "that grows with the items held).", index_walks, 1)

/* What the V rows of SERVER_FIGURES read besides the server. */
struct figures {
	struct jenv_stats es;   /* the journal environment's figures */
	struct queue_stats sum; /* every queue's, added up: items, bytes,
				   total_items, delayed_items, redeliveries,
				   dead_lettered, dead_dropped, expired_to */
};

/* Fills f for s: the journal's figures and the sums over every queue. */
void figures_collect(struct server *s, struct figures *f);

#endif
