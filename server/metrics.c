/*
 * metrics.c: Prometheus text exposition (format 0.0.4) of the server's,
 * the queues' and the journal's figures at GET /metrics (metrics.h).
 *
 * Names follow Prometheus' conventions: the tern_ prefix, base units in
 * the name (_bytes, _seconds), _total on counters, one family per name
 * with its HELP and TYPE, a queue="NAME" label on per-queue families, and
 * the process_* families client libraries export.  A scrape renders every
 * family on the loop thread: the queues' figures are read in one pass into
 * a table sorted by name, so each family lists the queues in one order.
 */
#include "metrics.h"

#include <dirent.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include "conn.h"
#include "evout.h"
#include "statuspage.h"
#include "../lib/log.h"

#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
/* A scraper that holds a connection this long idle is dropped. */
#define HTTP_TIMEOUT_S 10

struct mconn;

struct metrics {
	struct server *s;
	struct evhttp *http;
	struct evconnlistener *listener; /* evhttp's, paused at the cap */
	int port;
	unsigned nconns;                 /* connections open (struct mconn) */
	int paused;
	int closing;                     /* metrics_free: the listener is gone */
	struct mconn *conns;
};

/* One queue's figures for a scrape. */
struct qrow {
	const char *name;
	struct queue_stats st;
	struct journal_stats js;
	int has_j;
};

/*
 * Per-queue families: name, type, help, value (r is the queue's row),
 * divisor (1: an integer; 1000: milliseconds shown as seconds).
 */
#define QUEUE_METRICS(X)                                                                     \
	X(tern_queue_items, gauge,                                                           \
	  "Items waiting in the queue (items handed out and not yet gone are not counted).", \
	  r->st.items, 1)                                                                    \
	X(tern_queue_bytes, gauge, "Bytes of the bodies waiting in the queue.",              \
	  r->st.bytes, 1)                                                                    \
	X(tern_queue_memory_bytes, gauge,                                                    \
	  "Bytes of waiting bodies held in memory (the rest is read back from the journal).", \
	  r->st.mem_bytes, 1)                                                                \
	X(tern_queue_oldest_item_age_seconds, gauge,                                         \
	  "Time since the oldest waiting item was added (0 when the queue is empty).",       \
	  r->st.age_ms, 1000)                                                                \
	X(tern_queue_open_items, gauge,                                                      \
	  "Items handed out with /open, neither confirmed nor aborted yet.",                 \
	  r->st.open_transactions, 1)                                                        \
	X(tern_queue_waiters, gauge, "Gets waiting for an item (/t=).", r->st.waiters, 1)    \
	X(tern_queue_status, gauge,                                                          \
	  "The queue's own status: 0 UP, 1 READONLY (refuses sets), 2 QUIESCENT (refuses "   \
	  "sets and gets); the server's (tern_server_status) may be stricter.",              \
	  r->st.status, 1)                                                                   \
	X(tern_queue_enqueued_total, counter,                                                \
	  "Items added to the queue (sets and fanout copies).", r->st.total_items, 1)        \
	X(tern_queue_dequeued_total, counter,                                                \
	  "Items handed out by gets, peeks not counted (an item handed out again after an "  \
	  "abort counts again).", r->st.dequeued, 1)                                         \
	X(tern_queue_expired_total, counter, "Items dropped because they expired.",          \
	  r->st.expired_items, 1)                                                            \
	X(tern_queue_discarded_total, counter,                                               \
	  "Oldest items dropped to make room (discard_old_when_full).", r->st.discarded, 1)  \
	X(tern_queue_get_misses_total, counter, "Gets that found the queue empty.",          \
	  r->st.get_misses, 1)                                                               \
	X(tern_queue_delayed_items, gauge,                                                   \
	  "Items set with a delay that are not visible yet (counted in tern_queue_items).",  \
	  r->st.delayed_items, 1)                                                            \
	X(tern_queue_redeliveries_total, counter,                                            \
	  "Open reads of items handed out before (aborted, timed out, connection closed).",  \
	  r->st.redeliveries, 1)                                                             \
	X(tern_queue_dead_lettered_total, counter,                                           \
	  "Items moved to the dead_letter queue after max_deliveries handouts.",             \
	  r->st.dead_lettered, 1)                                                            \
	X(tern_queue_dead_dropped_total, counter,                                            \
	  "Items dropped after max_deliveries handouts (no dead_letter queue).",             \
	  r->st.dead_dropped, 1)                                                             \
	X(tern_queue_expired_moved_total, counter,                                           \
	  "Expired items moved to the expire_to queue (counted as expired too).",            \
	  r->st.expired_to, 1)

/* ... and those of a queue's journal. */
#define JOURNAL_METRICS(X)                                                                   \
	X(tern_journal_disk_bytes, gauge,                                                    \
	  "Bytes of the queue's journal segment files on disk (the prepared spare "          \
	  "included).", r->js.disk_bytes, 1)                                                 \
	X(tern_journal_segments, gauge, "The queue's journal segment files.",                \
	  r->js.segments, 1)                                                                 \
	X(tern_journal_behind_items, gauge,                                                  \
	  "Waiting items kept only in the journal (the backlog beyond max_memory_size).",    \
	  r->js.behind_items, 1)                                                             \
	X(tern_journal_records_total, counter,                                               \
	  "Journal records of the queue handed to the kernel.", r->js.records_written, 1)    \
	X(tern_journal_fsyncs_total, counter, "fdatasyncs of the queue's journal segments.", \
	  r->js.syncs, 1)                                                                    \
	X(tern_journal_write_errors_total, counter,                                          \
	  "Failed writes or syncs of the queue's journal (it then refuses sets until a "     \
	  "restart).", r->js.write_errors, 1)                                                \
	X(tern_journal_index_walks_total, counter,                                           \
	  "Checkpoints and compactions that walked the queue's whole index (loop time "      \
	  "that grows with the items held).", r->js.index_walks, 1)

/* Server families without labels: name, type, help, value (s is the
 * server, es the journal environment's figures). */
#define SERVER_METRICS(X)                                                                    \
	X(tern_connections, gauge, "Client connections open.", s->nconns)                    \
	X(tern_connections_max, gauge, "The max_connections setting.",                       \
	  s->cfg.max_connections)                                                            \
	X(tern_connections_accepted_total, counter, "Client connections accepted.",          \
	  s->total_connections)                                                              \
	X(tern_connections_rejected_total, counter,                                          \
	  "Connections refused (max_connections or max_handshakes reached, or shutting "     \
	  "down).", s->rejected_connections)                                                 \
	X(tern_connections_handshaking, gauge,                                               \
	  "Connections in their handshake (TLS, login, first request).", s->nhs)             \
	X(tern_handshake_timeouts_total, counter,                                            \
	  "Connections closed for not finishing their handshake within handshake_timeout.",  \
	  s->handshake_timeouts)                                                             \
	X(tern_handshake_evictions_total, counter,                                           \
	  "Connections in their handshake closed to make room for a new one.",               \
	  s->handshake_evictions)                                                            \
	X(tern_queues, gauge, "Queues.", qreg_count(s->reg))                                 \
	X(tern_server_status, gauge,                                                         \
	  "The server's status: 0 UP, 1 READONLY (refuses sets), 2 QUIESCENT (refuses sets " \
	  "and gets).", s->status)                                                           \
	X(tern_status_refused_total, counter,                                                \
	  "Requests refused because of the server's or a queue's status.", s->status_refused) \
	X(tern_gets_total, counter, "Get requests (mg, binary GET and text get alike).",     \
	  s->cmd_get)                                                                        \
	X(tern_sets_total, counter, "Set and add requests.", s->cmd_set)                     \
	X(tern_get_hits_total, counter, "Items returned by gets.", s->get_hits)              \
	X(tern_get_misses_total, counter, "Keys of gets that returned no item.",             \
	  s->get_misses)                                                                     \
	X(tern_network_receive_bytes_total, counter, "Bytes received from clients.",         \
	  s->bytes_read)                                                                     \
	X(tern_network_transmit_bytes_total, counter, "Bytes of replies to clients.",        \
	  s->bytes_written)                                                                  \
	X(tern_auth_attempts_total, counter, "Authentication attempts.", s->auth_cmds)       \
	X(tern_auth_failures_total, counter, "Failed authentication attempts.",              \
	  s->auth_errors)                                                                    \
	X(tern_auth_delayed_total, counter,                                                  \
	  "Failed logins whose answer was held back (auth_failure_delay_ms).",               \
	  s->auth_delayed)                                                                   \
	X(tern_auth_closed_total, counter,                                                   \
	  "Connections closed after auth_max_failures failed logins.", s->auth_closed)       \
	X(tern_reloads_total, counter, "Reloads of the configuration tried.", s->reloads)    \
	X(tern_metrics_timeouts_total, counter,                                              \
	  "Metrics connections closed metrics_timeout after their accept.",                  \
	  s->metrics_timeouts)                                                               \
	X(tern_metrics_paused_total, counter,                                                \
	  "Times the metrics listener paused at metrics_max_connections.", s->metrics_paused) \
	X(tern_reload_failures_total, counter,                                               \
	  "Reloads refused: the configuration, users and rights before them stayed.",        \
	  s->reload_failures)                                                                \
	X(tern_reload_ok, gauge,                                                             \
	  "1 when the last reload was applied (or none was tried), 0 when it failed.",       \
	  s->reload_ok)                                                                      \
	X(tern_loop_polls_total, counter,                                                    \
	  "Event-loop passes that polled instead of sleeping (poll_us).", s->loop_polls)     \
	X(tern_conn_yields_total, counter,                                                   \
	  "Turns a connection ended with input left, for the others (memcached's "           \
	  "conn_yields).", s->conn_yields)                                                   \
	X(tern_journal_writer_wakeups_total, counter,                                        \
	  "Times the journal's writer thread was woken from waiting for work.",              \
	  jenv_writer_wakeups(s->env))                                                       \
	X(tern_journal_fsync_errors_total, counter, "fdatasyncs of the journal that failed.", \
	  es.fsync_errors)                                                                   \
	X(tern_journal_group_commit_batches_total, counter,                                  \
	  "Batches (one queue's records of one loop pass) written by group commits.",        \
	  es.group_batches)                                                                  \
	X(tern_journal_group_waits_total, counter,                                           \
	  "Times the journal's writer waited, after a sync, for the clients it answered "   \
	  "to send their next sets.", es.group_waits)                                        \
	X(tern_journal_group_waits_cut_total, counter,                                       \
	  "Of those waits, the ones that ended at their deadline.", es.group_waits_cut)

static void family(struct evbuffer *b, int *err, const char *name, const char *type,
		   const char *help)
{
	evout_printf(b, err, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value with \, " and newline escaped (the format's rule). */
static void label_value(struct evbuffer *b, int *err, const char *v)
{
	const char *p = v;

	for (; *p; p++) {
		if (*p != '\\' && *p != '"' && *p != '\n')
			continue;
		if (p > v && evbuffer_add(b, v, (size_t)(p - v)) < 0)
			*err = 1;
		evout_printf(b, err, "%s", *p == '\n' ? "\\n" : *p == '"' ? "\\\"" : "\\\\");
		v = p + 1;
	}
	if (p > v && evbuffer_add(b, v, (size_t)(p - v)) < 0)
		*err = 1;
}

static void sample(struct evbuffer *b, int *err, const char *name, const char *qname,
		   uint64_t v, unsigned div)
{
	if (qname) {
		evout_printf(b, err, "%s{queue=\"", name);
		label_value(b, err, qname);
		evout_printf(b, err, "\"} ");
	} else {
		evout_printf(b, err, "%s ", name);
	}
	if (div == 1)
		evout_printf(b, err, "%llu\n", (unsigned long long)v);
	else
		evout_printf(b, err, "%llu.%03llu\n", (unsigned long long)(v / div),
		    (unsigned long long)(v % div));
}

/*
 * A histogram from per-bucket counts (n bounds, count[n] above them all):
 * cumulative buckets with le="bound" (bounds divided by scale: 1e6 for
 * microseconds shown as seconds, 1 for plain numbers), +Inf, sum, count.
 */
static void histogram(struct evbuffer *b, int *err, const char *name, const char *help,
		      const uint64_t *bounds, const uint64_t *count, size_t n, double scale,
		      double sum)
{
	uint64_t cum = 0;

	family(b, err, name, "histogram", help);
	for (size_t i = 0; i < n; i++) {
		cum += count[i];
		evout_printf(b, err, "%s_bucket{le=\"%g\"} %llu\n", name, (double)bounds[i] / scale,
		    (unsigned long long)cum);
	}
	cum += count[n];
	evout_printf(b, err, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
	evout_printf(b, err, "%s_sum %.6f\n", name, sum);
	evout_printf(b, err, "%s_count %llu\n", name, (unsigned long long)cum);
}

struct collect {
	struct qrow *rows;
	size_t n, cap;
	int nomem;
};

static void collect_one(struct queue *q, void *arg)
{
	struct collect *c = arg;
	struct qrow *r;

	if (c->nomem)
		return;
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 64;
		struct qrow *n = realloc(c->rows, cap * sizeof(*n));

		if (!n) {
			c->nomem = 1;
			return;
		}
		c->rows = n;
		c->cap = cap;
	}
	r = &c->rows[c->n++];
	r->name = queue_name(q);
	queue_get_stats(q, &r->st);
	r->has_j = queue_journal(q) != NULL;
	if (r->has_j)
		journal_get_stats(queue_journal(q), &r->js);
	else
		memset(&r->js, 0, sizeof(r->js));
}

static int cmp_row(const void *a, const void *b)
{
	return strcmp(((const struct qrow *)a)->name, ((const struct qrow *)b)->name);
}

/* The resident set size in bytes, from /proc/self/statm (0 if unknown). */
static uint64_t rss_bytes(void)
{
	unsigned long long size = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "re");

	if (!f)
		return 0;
	if (fscanf(f, "%llu %llu", &size, &res) != 2)
		res = 0;
	fclose(f);
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Descriptors open, from /proc/self/fd (0 if unknown). */
static uint64_t open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	uint64_t n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	return n > 0 ? n - 1 : 0; /* the directory's own descriptor */
}

static void process_metrics(struct server *s, struct evbuffer *b, int *err)
{
	struct rusage ru;
	struct rlimit rl;

	getrusage(RUSAGE_SELF, &ru);
	family(b, err, "process_cpu_seconds_total", "counter",
	       "User and system CPU time spent, in seconds.");
	evout_printf(b, err, "process_cpu_seconds_total %.6f\n",
	    (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
	    ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6);
	family(b, err, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
	evout_printf(b, err, "process_resident_memory_bytes %llu\n", (unsigned long long)rss_bytes());
	family(b, err, "process_open_fds", "gauge", "Number of open file descriptors.");
	evout_printf(b, err, "process_open_fds %llu\n", (unsigned long long)open_fds());
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		family(b, err, "process_max_fds", "gauge",
		       "Maximum number of open file descriptors.");
		evout_printf(b, err, "process_max_fds %llu\n", (unsigned long long)rl.rlim_cur);
	}
	family(b, err, "process_start_time_seconds", "gauge",
	       "Start time of the process since the Unix epoch in seconds.");
	evout_printf(b, err, "process_start_time_seconds %lld.%03lld\n",
	    (long long)(s->started_wall_ms / 1000), (long long)(s->started_wall_ms % 1000));
}

int metrics_render(struct server *s, struct evbuffer *b)
{
	struct collect c = { NULL, 0, 0, 0 };
	struct jenv_stats es;
	int err = 0;
	size_t i;
	const struct qrow *r;
	static const char *const proto_label[FRONT__COUNT] = {
		[FRONT_TEXT] = "text", [FRONT_META] = "meta", [FRONT_BINARY] = "binary",
	};

	qreg_each(s->reg, collect_one, &c);
	if (c.nomem) {
		free(c.rows);
		return TERN_ENOMEM;
	}
	if (c.n > 1)
		qsort(c.rows, c.n, sizeof(*c.rows), cmp_row);
	memset(&es, 0, sizeof(es));
	if (s->env)
		jenv_get_stats(s->env, &es);

	family(b, &err, "tern_build_info", "gauge", "The version of ternd (always 1).");
	evout_printf(b, &err, "tern_build_info{version=\"%s\",memcached_version=\"%s\"} 1\n", TERN_VERSION,
	    PROTO_MEMCACHED_VERSION);
#define SERVER_METRIC(name, type, help, value)   \
	family(b, &err, #name, #type, help);     \
	sample(b, &err, #name, NULL, (uint64_t)(value), 1);
	SERVER_METRICS(SERVER_METRIC)
#undef SERVER_METRIC
	family(b, &err, "tern_requests_total", "counter", "Requests parsed, by protocol.");
	for (i = 0; i < FRONT__COUNT; i++)
		evout_printf(b, &err, "tern_requests_total{protocol=\"%s\"} %llu\n", proto_label[i],
		    (unsigned long long)s->requests[i]);
	histogram(b, &err, "tern_journal_fsync_duration_seconds",
		  "Latency of the journal's fdatasyncs (segments, spares, directories).",
		  jenv_fsync_bounds_us, es.fsync_count, JENV_FSYNC_BUCKETS, 1e6,
		  (double)es.fsync_us / 1e6);
	{
		double sum = (double)es.group_records;

		histogram(b, &err, "tern_journal_group_commit_records",
			  "Records written by one group commit (one write of everything "
			  "queued while the writer was busy).",
			  jenv_group_bounds, es.group_count, JENV_GROUP_BUCKETS, 1, sum);
	}
#define QUEUE_METRIC(metric, type, help, value, div)             \
	family(b, &err, #metric, #type, help);                   \
	for (i = 0, r = c.rows; i < c.n; i++, r++)               \
		sample(b, &err, #metric, r->name, (value), (div));
	QUEUE_METRICS(QUEUE_METRIC)
#undef QUEUE_METRIC
#define JOURNAL_METRIC(metric, type, help, value, div)           \
	family(b, &err, #metric, #type, help);                   \
	for (i = 0, r = c.rows; i < c.n; i++, r++)               \
		if (r->has_j)                                    \
			sample(b, &err, #metric, r->name, (value), (div));
	JOURNAL_METRICS(JOURNAL_METRIC)
#undef JOURNAL_METRIC
	process_metrics(s, b, &err);
	free(c.rows);
	return err ? TERN_ENOMEM : 0;
}

/* ---- the guard: a cap on connections and a deadline for each ----
 *
 * evhttp (libevent 2.1) has neither: a client that sends a byte a second
 * keeps its connection for good, and there is no limit to how many.  Each
 * connection evhttp accepts gets its bufferevent from metrics_bev (its
 * bevcb), which counts it: at metrics_max_connections the listener pauses
 * (the next connections wait in the kernel's backlog, to be taken as
 * slots free) and resumes when one closes.  Right after evhttp has set
 * up the connection (an event activated in metrics_bev runs before any
 * I/O on it), the guard finds its evhttp_connection, the argument evhttp
 * gave the bufferevent's callbacks, to be told when it closes, and arms
 * a timer that frees it metrics_timeout after its accept, whatever it is
 * doing: a scrape takes milliseconds.  Until then a reference on the
 * bufferevent keeps it valid should evhttp drop it first.
 */
struct mconn {
	struct mconn *next, *prev;
	struct metrics *m;
	struct bufferevent *bev;        /* until adopted: our reference */
	struct evhttp_connection *evcon; /* once adopted */
	struct event *timer;            /* adoption, then the deadline */
};

static void mconn_free(struct mconn *mc)
{
	struct metrics *m = mc->m;

	if (mc->prev)
		mc->prev->next = mc->next;
	else
		m->conns = mc->next;
	if (mc->next)
		mc->next->prev = mc->prev;
	event_free(mc->timer);
	free(mc);
	m->nconns--;
	if (m->paused && !m->closing && m->nconns < m->s->cfg.metrics_max_connections) {
		m->paused = 0;
		evconnlistener_enable(m->listener);
	}
}

static void on_mconn_close(struct evhttp_connection *evcon, void *arg)
{
	struct mconn *mc = arg;

	evhttp_connection_set_closecb(evcon, NULL, NULL);
	mconn_free(mc);
}

static void on_mconn_timer(evutil_socket_t fd, short what, void *arg)
{
	struct mconn *mc = arg;
	struct metrics *m = mc->m;

	if (!mc->evcon) {
		/* adoption: evhttp has set the connection up by now */
		bufferevent_data_cb rcb, wcb;
		bufferevent_event_cb ecb;
		void *cbarg;
		struct timeval tv = { (time_t)m->s->cfg.metrics_timeout_s, 0 };

		bufferevent_getcb(mc->bev, &rcb, &wcb, &ecb, &cbarg);
		bufferevent_decref(mc->bev);
		mc->bev = NULL;
		if (!rcb) { /* evhttp dropped it already */
			mconn_free(mc);
			return;
		}
		mc->evcon = cbarg;
		evhttp_connection_set_closecb(mc->evcon, on_mconn_close, mc);
		evtimer_add(mc->timer, &tv);
		return;
	}
	/* (one wording: repeats fold in the log) */
	log_info("closed a metrics connection that was still open after %u s",
		 m->s->cfg.metrics_timeout_s);
	m->s->metrics_timeouts++;
	evhttp_connection_free(mc->evcon); /* on_mconn_close frees mc */
}

static struct bufferevent *metrics_bev(struct event_base *base, void *arg)
{
	struct metrics *m = arg;
	struct mconn *mc = calloc(1, sizeof(*mc));
	struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);

	if (!mc || !bev || !(mc->timer = evtimer_new(base, on_mconn_timer, mc))) {
		/* evhttp makes its own bufferevent: this one goes unguarded */
		if (bev)
			bufferevent_free(bev);
		free(mc);
		return NULL;
	}
	mc->m = m;
	mc->bev = bev;
	bufferevent_incref(bev);
	mc->next = m->conns;
	if (m->conns)
		m->conns->prev = mc;
	m->conns = mc;
	if (++m->nconns >= m->s->cfg.metrics_max_connections && !m->paused) {
		m->paused = 1;
		m->s->metrics_paused++;
		evconnlistener_disable(m->listener);
	}
	event_active(mc->timer, EV_TIMEOUT, 0);
	return bev;
}

/* Frees every connection the guard holds (metrics_free: evhttp_free has
 * freed the connections it had adopted). */
static void metrics_guard_free(struct metrics *m)
{
	while (m->conns) {
		struct mconn *mc = m->conns;

		if (mc->bev)
			bufferevent_decref(mc->bev);
		mc->bev = NULL;
		mconn_free(mc);
	}
}

static void on_metrics(struct evhttp_request *req, void *arg)
{
	struct metrics *m = arg;
	struct evbuffer *b = evhttp_request_get_output_buffer(req);

	if (metrics_render(m->s, b)) {
		evbuffer_drain(b, evbuffer_get_length(b));
		evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
		return;
	}
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", CONTENT_TYPE);
	evhttp_send_reply(req, HTTP_OK, "OK", NULL);
}

static void on_other(struct evhttp_request *req, void *arg)
{
	evhttp_send_error(req, HTTP_NOTFOUND,
			  "Not Found (the metrics are at /metrics, the status page at /)");
}

int metrics_start(struct server *s, const char *host, int port, struct metrics **out_m,
		  char *err, size_t errlen)
{
	struct metrics *m = calloc(1, sizeof(*m));
	struct evhttp_bound_socket *bs;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	*out_m = NULL;
	if (!m || !(m->http = evhttp_new(s->base))) {
		free(m);
		snprintf(err, errlen, "metrics: out of memory");
		return TERN_ENOMEM;
	}
	m->s = s;
	evhttp_set_allowed_methods(m->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
	evhttp_set_timeout(m->http, HTTP_TIMEOUT_S);
	evhttp_set_max_headers_size(m->http, 8192);
	evhttp_set_max_body_size(m->http, 0);
	evhttp_set_cb(m->http, "/metrics", on_metrics, m);
	if (statuspage_attach(m->http, s)) {
		snprintf(err, errlen, "metrics: out of memory");
		metrics_free(m);
		return TERN_ENOMEM;
	}
	evhttp_set_gencb(m->http, on_other, m);
	bs = evhttp_bind_socket_with_handle(m->http, host, (ev_uint16_t)port);
	if (!bs) {
		snprintf(err, errlen, "cannot listen for metrics on %s:%d: %s", host, port,
			 strerror(errno));
		metrics_free(m);
		return TERN_ESYS;
	}
	m->listener = evhttp_bound_socket_get_listener(bs);
	evhttp_set_bevcb(m->http, metrics_bev, m);
	if (getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&ss, &sl) == 0)
		m->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						       : ((struct sockaddr_in *)&ss)->sin_port);
	*out_m = m;
	return 0;
}

int metrics_port(const struct metrics *m)
{
	return m->port;
}

void metrics_free(struct metrics *m)
{
	if (!m)
		return;
	m->closing = 1;
	if (m->http) {
		/* (each connection's close callback runs: the guard's entries go) */
		evhttp_free(m->http);
	}
	metrics_guard_free(m);
	free(m);
}
