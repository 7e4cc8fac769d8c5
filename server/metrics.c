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

#include "state.h"
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

/* One figure of the server (counters.h, SERVER_FIGURES): its family's
 * HELP and TYPE unless the figure before was of the same family (*last),
 * then the sample, with its label when it has one. */
static void figure(struct evbuffer *b, int *err, const char **last, const char *name,
		   const char *type, const char *help, const char *label, uint64_t v)
{
	if (!*last || strcmp(*last, name))
		family(b, err, name, type, help);
	*last = name;
	if (label)
		evout_printf(b, err, "%s{%s} %llu\n", name, label, (unsigned long long)v);
	else
		sample(b, err, name, NULL, v, 1);
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
	struct figures fig, *f = &fig;
	const char *last = NULL;
	int err = 0;
	size_t i;
	const struct qrow *r;

	qreg_each(s->reg, collect_one, &c);
	if (c.nomem) {
		free(c.rows);
		return TERN_ENOMEM;
	}
	if (c.n > 1)
		qsort(c.rows, c.n, sizeof(*c.rows), cmp_row);
	figures_collect(s, f);

	family(b, &err, "tern_build_info", "gauge", "The version of ternd (always 1).");
	evout_printf(b, &err, "tern_build_info{version=\"%s\",memcached_version=\"%s\"} 1\n", TERN_VERSION,
	    PROTO_MEMCACHED_VERSION);
#define METRIC_COUNTER(name, metric, help)                                       \
	if (sizeof(#metric) > 1)                                                  \
		figure(b, &err, &last, #metric, "counter", help, NULL, s->stats.name);
#define METRIC_LABELLED(name, metric, label, help)                                \
	figure(b, &err, &last, #metric, "counter", help, #label, s->stats.name);
#define METRIC_VALUE(name, metric, type, help, value)                             \
	if (sizeof(#metric) > 1)                                                  \
		figure(b, &err, &last, #metric, #type, help, NULL, (uint64_t)(value));
	SERVER_FIGURES(METRIC_COUNTER, METRIC_LABELLED, METRIC_VALUE)
#undef METRIC_COUNTER
#undef METRIC_LABELLED
#undef METRIC_VALUE
	histogram(b, &err, "tern_journal_fsync_duration_seconds",
		  "Latency of the journal's fdatasyncs (segments, spares, directories).",
		  jenv_fsync_bounds_us, f->es.fsync_count, JENV_FSYNC_BUCKETS, 1e6,
		  (double)f->es.fsync_us / 1e6);
	histogram(b, &err, "tern_journal_group_commit_records",
		  "Records written by one group commit (one write of everything queued "
		  "while the writer was busy).",
		  jenv_group_bounds, f->es.group_count, JENV_GROUP_BUCKETS, 1,
		  (double)f->es.group_records);
#define QUEUE_METRIC(metric, type, help, value, div, shown)              \
	family(b, &err, #metric, #type, help);                           \
	for (i = 0, r = c.rows; i < c.n; i++, r++)                       \
		if (shown)                                               \
			sample(b, &err, #metric, r->name, (uint64_t)(value), (div));
#define QUEUE_METRIC_Q(name, metric, type, help, field, div) \
	QUEUE_METRIC(metric, type, help, r->st.field, div, 1)
#define QUEUE_METRIC_J(name, metric, type, help, field, div) \
	QUEUE_METRIC(metric, type, help, r->js.field, div, r->has_j)
	QUEUE_FIGURES(QUEUE_METRIC_Q, QUEUE_METRIC_J)
#undef QUEUE_METRIC
#undef QUEUE_METRIC_Q
#undef QUEUE_METRIC_J
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
	m->s->stats.metrics_timeouts++;
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
		m->s->stats.metrics_paused++;
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
