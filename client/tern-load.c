/*
 * tern-load: load generator for memcache-protocol queue servers (tern,
 * Kestrel, darner, memcached as a baseline), and with --proto for Redis
 * lists and beanstalkd, so that every server is measured by the same driver.
 *
 * DESIGN
 * - One worker thread per core (--threads), each with its own epoll loop over
 *   non-blocking sockets; connections are dealt round-robin over the threads.
 *   Every connection keeps up to -P requests in flight: requests are formatted
 *   straight into the connection's reusable output buffer and written with one
 *   send() per loop pass; replies are parsed in place from a reusable input
 *   buffer (tclient.h).  Nothing is allocated per message.
 * - Modes: sequential (all connections write their share, a barrier, then all
 *   read: the classic kestrel/erq test), mixed (producer and consumer
 *   connections at the same time; consumers wait with /t=), produce, consume.
 * - Verification (default): each body carries queue, producer, sequence and a
 *   crc (loadcodec.h); the checker counts corrupt, duplicate, reordered and
 *   lost messages.  --no-verify for servers whose get does not dequeue.
 * - Every wait is bounded: a request that gets no reply within --timeout
 *   fails its connection; mixed-mode consumers stop when everything stored
 *   was read, or when nothing arrived for --drain seconds after the last
 *   producer finished.
 * - Latency is measured per request from the time it was due (the send time,
 *   or with --rate the scheduled time, so a stalled server is not hidden by
 *   coordinated omission) to its reply, into per-thread log histograms.
 * - Several servers (--servers): each queue lives on the server ketama
 *   hashing (ketama.h) gives its name, as a twemproxy with the same server
 *   list and hash would place it; all of a queue's connections go there,
 *   and the report adds up each server's queues.  Through a proxy
 *   (--proxy) the connections go to the proxy, and --servers only names
 *   the proxy's servers so that the figures can be given per server.
 */
#include "ketama.h"
#include "lathist.h"
#include "loadcodec.h"
#include "tclient.h"
#include "../lib/tern.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PACE_NS 100000 /* open-loop pacing granularity, see worker_run */
/* A mixed-mode consumer whose get does not wait (no /t=) and found the
 * queue empty asks again after this long instead of at once: polling an
 * empty queue in a loop would take a core from the servers measured. */
#define EMPTY_POLL_NS 1000000
#define DEFAULT_PORT 22133
/* Rates of bytes are in MiB/s (2^20 bytes), in the text and the JSON alike. */
#define MIB 1048576.0

enum mode { M_SEQUENTIAL, M_MIXED, M_PRODUCE, M_CONSUME };
static const char *const mode_names[] = { "sequential", "mixed", "produce", "consume" };

/* Error kinds besides the checker's: counted per queue and side. */
#define EKINDS(X)                                                          \
	X(NOT_STORED, "not_stored")     /* NOT_STORED, BURIED, JOB_TOO_BIG */ \
	X(SERVER_ERROR, "server_error") /* ERROR, CLIENT_/SERVER_ERROR */    \
	X(PROTOCOL, "protocol")         /* unparsable or unexpected reply */ \
	X(TIMEOUT, "timeout")           /* no reply within --timeout */       \
	X(IO, "io")                     /* connection reset or closed */

enum ekind {
#define EK_ENUM(e, s) EK_##e,
	EKINDS(EK_ENUM)
#undef EK_ENUM
	EK__COUNT
};
static const char *const ekind_names[] = {
#define EK_NAME(e, s) s,
	EKINDS(EK_NAME)
#undef EK_NAME
};

struct options {
	const char *host;
	int port;
	int host_given;
	const char *servers;   /* --servers LIST */
	const char *proxy;     /* --proxy HOST:PORT */
	enum ketama_hash hash; /* --hash */
	int hash_tag;          /* --hash-tag: queues are named {PREFIXi} */
	int open_by_id;        /* --open-by-id (or /open through --proxy) */
	int keys;              /* --key-per-message */
	int show_routes;
	unsigned nqueues;
	const char *prefix;
	uint64_t n;
	int n_given;
	size_t smin, smax;
	unsigned conns, depth, threads;
	enum mode mode;
	double duration, rate, timeout, drain;
	const char *get_opts;
	int json, quiet, verify, busy_poll, progress;
	enum tc_proto proto;
};

static struct options opt = {
	.host = "127.0.0.1",
	.port = DEFAULT_PORT,
	.nqueues = 1,
	.prefix = "tern_load_",
	.n = 10000,
	.smin = 512,
	.smax = 512,
	.conns = 1,
	.depth = 1,
	.mode = M_SEQUENTIAL,
	.timeout = 10,
	.drain = 2,
	.verify = 1,
	.proto = TC_MEMCACHE,
	.hash = KETAMA_MD5,
};

/* Shared per-queue state.  Counters are updated with relaxed atomics. */
struct qstate {
	char name[TC_LINE_MAX / 4];
	size_t nlen;
	unsigned server; /* index into servers[] (0 without --servers) */
	char get_first[400], get_next[400], get_final[400];
	size_t get_first_len, get_next_len, get_final_len;
	int reliable;   /* /open chain: reads end with a final /close */
	int by_id;      /* reliable by id: gets q/reserve, gets q/close=ID/reserve */
	uint64_t sent;  /* sets sent (attempted) */
	uint64_t stored, stored_bytes;
	uint64_t values, value_bytes;
	uint64_t claimed; /* --no-verify, --key-per-message: reads in flight
			   * or done (with --key-per-message, the next key) */
	uint64_t werr[EK__COUNT], rerr[EK__COUNT];
	int producers_left;
	int64_t producers_done_ns;
	int64_t write_end_ns, read_end_ns; /* atomic max */
	int64_t read_target; /* reads wanted, -1 unknown (see consumer_wants) */
	int64_t read_cap;    /* verify: runaway guard on values read, -1 none */
	uint64_t *expected;                /* consume mode with -n: per producer */
};

enum kind { K_SET, K_GET, K_DEL, K_SETUP, K_CLOSE };
enum role { R_PRODUCER, R_CONSUMER };

struct worker;

struct conn {
	int fd;
	unsigned q, id;  /* queue index; producer/consumer index in the queue */
	enum role role;  /* this phase */
	int done, failed, want_out;
	struct worker *w;
	struct tc_buf in, out;
	/* ring of requests in flight */
	uint8_t *kind;
	int64_t *t0;
	uint64_t *seq;
	unsigned cap, head, count, main_inflight; /* main: sets or gets */
	int64_t last_progress_ns;
	/* producer */
	uint64_t next_seq, share;
	uint64_t key_base; /* --key-per-message: the key of its seq 0 */
	int64_t next_due_ns, interval_ns, last_stored_ns;
	/* consumer */
	uint64_t claimed_key; /* --key-per-message: the key claimed last */
	struct lcheck_stream *stream;
	int got_end, opened, close_sent;
	int64_t idle_until_ns; /* mixed, no /t=: the queue was empty */
	uint64_t *ids;         /* by id: items read and not yet confirmed */
	unsigned nids;         /* (at most depth: one per get in flight) */
	/* batched counter updates, flushed after each read */
	uint64_t d_stored, d_stored_bytes, d_values, d_value_bytes;
	int64_t last_value_ns;
};

struct worker {
	pthread_t tid;
	unsigned idx;
	int ep;
	struct conn **conns;
	unsigned nconns, active;
	int has_rate, has_idle; /* wake for due producers / idle consumers */
	struct lathist set_lat, get_lat;
};

/* --servers, in their order (0 when not given), and their continuum.
 * Without --proxy each queue's connections go to its server; with it they
 * go to the proxy (opt.host, opt.port) and the servers only group the
 * report. */
static struct ketama_server *servers;
static unsigned nservers;
static struct ketama *continuum;

static struct qstate *queues;
static struct conn *conns;
static unsigned nconns;
static struct worker *workers;
static struct lcheck *checker;
static unsigned max_producers;
static pthread_barrier_t barrier;
static int64_t t_write_start, t_read_start, t_produce_end;
static volatile sig_atomic_t g_stop;
static int g_phase; /* 0 write (or single phase), 1 read */
static unsigned workers_done;
static int wait_ms; /* redis/beanstalk wait per dequeue */
/* The options every first get carries (--get-options, or mixed mode's
 * default), as the report records them. */
static char get_opts_used[300];
/* Reads by id: the get options with /open as /reserve. */
static char by_id_opts[310];

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void amax(int64_t *p, int64_t v)
{
	int64_t cur = __atomic_load_n(p, __ATOMIC_RELAXED);

	while (v > cur &&
	       !__atomic_compare_exchange_n(p, &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

static uint64_t ald(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static void aadd(uint64_t *p, uint64_t v)
{
	if (v)
		__atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

__attribute__((format(printf, 2, 3), noreturn))
static void die(int status, const char *fmt, ...)
{
	va_list ap;

	fputs("tern-load: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(status);
}

/* Counts one error of kind k on the write (reads = 0) or read side and
 * reports the first few on stderr. */
__attribute__((format(printf, 4, 5)))
static void conn_error(struct conn *c, int reads, enum ekind k, const char *fmt, ...)
{
	static unsigned printed;
	struct qstate *q = &queues[c->q];
	va_list ap;
	unsigned nth;

	aadd(reads ? &q->rerr[k] : &q->werr[k], 1);
	nth = __atomic_fetch_add(&printed, 1, __ATOMIC_RELAXED);
	if (nth >= 20) {
		if (nth == 20)
			fprintf(stderr, "tern-load: further errors are only counted\n");
		return;
	}
	fprintf(stderr, "tern-load: %s %s %u: ", q->name,
		c->role == R_PRODUCER ? "producer" : "consumer", c->id);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ---- per-connection state machine ---------------------------------------- */

static void conn_flush_counters(struct conn *c)
{
	struct qstate *q = &queues[c->q];

	aadd(&q->stored, c->d_stored);
	aadd(&q->stored_bytes, c->d_stored_bytes);
	aadd(&q->values, c->d_values);
	aadd(&q->value_bytes, c->d_value_bytes);
	c->d_stored = c->d_stored_bytes = c->d_values = c->d_value_bytes = 0;
	if (c->last_value_ns)
		amax(&q->read_end_ns, c->last_value_ns);
}

static void conn_finish(struct conn *c, int64_t now)
{
	struct qstate *q = &queues[c->q];

	if (c->done)
		return;
	c->done = 1;
	c->w->active--;
	conn_flush_counters(c);
	if (c->role == R_PRODUCER) {
		if (c->last_stored_ns)
			amax(&q->write_end_ns, c->last_stored_ns);
		if (__atomic_sub_fetch(&q->producers_left, 1, __ATOMIC_ACQ_REL) == 0)
			__atomic_store_n(&q->producers_done_ns, now, __ATOMIC_RELEASE);
	}
	epoll_ctl(c->w->ep, EPOLL_CTL_DEL, c->fd, NULL);
}

/* A fatal connection error: in-flight requests are abandoned. */
static void conn_fail(struct conn *c, int64_t now, enum ekind k, const char *what)
{
	int reads = c->role == R_CONSUMER;

	conn_error(c, reads, k, "%s (%u requests in flight)", what, c->count);
	if (reads && !opt.verify) {
		/* Give back the read budget of the gets that will never be
		 * answered, so the other consumers read those messages. */
		for (unsigned i = 0; i < c->count; i++)
			if (c->kind[(c->head + i) % c->cap] == K_GET)
				__atomic_fetch_sub(&queues[c->q].claimed, 1, __ATOMIC_RELAXED);
	}
	c->failed = 1;
	c->count = 0;
	c->main_inflight = 0;
	conn_finish(c, now);
	shutdown(c->fd, SHUT_RDWR);
}

/* Records a request just queued; t0 is when it was due (latency origin). */
static void ring_push(struct conn *c, enum kind k, int64_t t0, uint64_t seq, int64_t now)
{
	unsigned i = (c->head + c->count) % c->cap;

	/* The window bounds what is in flight (gets, the deletes they cause,
	 * setup, the final close): 2 * depth + 8 always suffices. */
	if (c->count >= c->cap)
		die(2, "internal error: request ring overflow");
	c->kind[i] = (uint8_t)k;
	c->t0[i] = t0;
	c->seq[i] = seq;
	/* The reply timer runs from the oldest request still unanswered. */
	if (c->count == 0)
		c->last_progress_ns = now;
	c->count++;
}

static int producer_wants(struct conn *c, int64_t now)
{
	if (g_stop)
		return 0;
	if (opt.duration > 0)
		return now < t_produce_end;
	return c->next_seq < c->share;
}

/*
 * Whether consumer c should send another dequeue: 1 yes, 0 not now (the
 * sweep asks again), -1 never: this consumer is finished.  With claim (and
 * --no-verify) a yes takes one read slot from the queue's budget.
 */
static int consumer_wants(struct conn *c, int64_t now, int claim)
{
	struct qstate *q = &queues[c->q];
	int64_t target = q->read_target;

	if (g_stop)
		return -1;
	if (opt.mode == M_MIXED) {
		int left = __atomic_load_n(&q->producers_left, __ATOMIC_ACQUIRE);

		target = (int64_t)ald(&q->stored);
		if (left == 0) {
			int64_t done = __atomic_load_n(&q->producers_done_ns, __ATOMIC_ACQUIRE);
			int64_t last = __atomic_load_n(&q->read_end_ns, __ATOMIC_RELAXED);

			if ((int64_t)(ald(&q->values) + c->d_values) >= target)
				return -1;
			if (c->last_value_ns > last)
				last = c->last_value_ns;
			if (last < done)
				last = done;
			if (now - last > (int64_t)(opt.drain * 1e9))
				return -1;
		} else if (!opt.verify &&
			   (int64_t)__atomic_load_n(&q->claimed, __ATOMIC_RELAXED) >= target) {
			return 0; /* producers are still adding */
		}
	} else {
		uint64_t got = ald(&q->values) + c->d_values;

		if (c->got_end)
			return -1;
		if (opt.duration > 0 && opt.mode == M_CONSUME && now >= t_produce_end)
			return -1;
		if (opt.verify && target >= 0 && (int64_t)got >= target)
			return -1;
		if (opt.verify && q->read_cap >= 0 && (int64_t)got >= q->read_cap)
			return -1;
	}
	if ((!opt.verify || opt.keys) && target >= 0) {
		/* A get that does not dequeue (memcached) would read forever:
		 * each read claims one of the messages there are (with
		 * --key-per-message, the key it reads). */
		if (!claim)
			return (int64_t)__atomic_load_n(&q->claimed, __ATOMIC_RELAXED) < target
				       ? 1 : (opt.mode == M_MIXED ? 0 : -1);
		uint64_t k = __atomic_fetch_add(&q->claimed, 1, __ATOMIC_RELAXED);

		if ((int64_t)k >= target) {
			__atomic_fetch_sub(&q->claimed, 1, __ATOMIC_RELAXED);
			return opt.mode == M_MIXED ? 0 : -1;
		}
		c->claimed_key = k;
	}
	return 1;
}

/* Makes room for n more output bytes; NULL when out of memory. */
static char *out_room(struct conn *c, size_t n)
{
	return tc_buf_reserve(&c->out, n);
}

/* --key-per-message: NAME:N, message n's key in queue q.  key holds
 * sizeof q->name + 24 bytes.  Returns its length. */
static size_t key_of(char *key, const struct qstate *q, uint64_t n)
{
	memcpy(key, q->name, q->nlen);
	key[q->nlen] = ':';
	return q->nlen + 1 + tc_fmt_u64(key + q->nlen + 1, n);
}

/* By-id reliable reads: appends "CMD NAME[/close=ID]OPTS\r\n" (no
 * /close= when id is 0).  Returns -1 when out of memory. */
static int fmt_by_id(struct conn *c, const char *cmd, uint64_t id, const char *opts)
{
	struct qstate *q = &queues[c->q];
	size_t olen = strlen(opts), n = 0;
	char *d = out_room(c, q->nlen + olen + 48);

	if (!d)
		return -1;
	memcpy(d, cmd, strlen(cmd));
	n += strlen(cmd);
	d[n++] = ' ';
	memcpy(d + n, q->name, q->nlen);
	n += q->nlen;
	if (id) {
		memcpy(d + n, "/close=", 7);
		n += 7;
		n += tc_fmt_u64(d + n, id);
	}
	memcpy(d + n, opts, olen);
	n += olen;
	memcpy(d + n, "\r\n", 2);
	c->out.len += n + 2;
	return 0;
}

/* Queues new requests while the window allows, and finishes the connection
 * when it has nothing left to do.  Returns -1 when out of memory. */
static int conn_fill(struct conn *c, int64_t now)
{
	struct qstate *q = &queues[c->q];
	char *d;

	if (c->done)
		return 0;
	if (c->role == R_PRODUCER) {
		while (c->main_inflight < opt.depth && producer_wants(c, now)) {
			int64_t t0 = now;
			uint64_t seq;
			size_t size, h;

			if (c->interval_ns) {
				if (now < c->next_due_ns)
					break;
				t0 = c->next_due_ns;
				c->next_due_ns += c->interval_ns;
			}
			seq = c->next_seq++;
			size = loadcodec_size(c->q, c->id, seq, opt.smin, opt.smax);
			d = out_room(c, TC_FMT_MAX(q->nlen) + size + 2);
			if (!d)
				return -1;
			if (opt.keys) {
				char key[sizeof q->name + 24];
				size_t klen = key_of(key, q, c->key_base + seq);

				h = tc_fmt_put_head(opt.proto, d, key, klen, 0, size);
			} else {
				h = tc_fmt_put_head(opt.proto, d, q->name, q->nlen, 0, size);
			}
			if (opt.verify)
				loadcodec_encode(d + h, size, c->q, c->id, seq);
			else
				loadcodec_fill(d + h, size, seq * 131);
			memcpy(d + h + size, TC_PUT_TAIL, 2);
			c->out.len += h + size + 2;
			ring_push(c, K_SET, t0, seq, now);
			c->main_inflight++;
			aadd(&q->sent, 1);
		}
		if (c->count == 0 && !producer_wants(c, now))
			conn_finish(c, now);
		return 0;
	}
	while (c->main_inflight < opt.depth && now >= c->idle_until_ns &&
	       consumer_wants(c, now, 1) > 0) {
		const char *g = c->opened ? q->get_next : q->get_first;
		size_t glen = c->opened ? q->get_next_len : q->get_first_len;

		if (q->by_id) {
			/* Each get confirms one item read before (any one: they
			 * are confirmed by id) and opens the next. */
			if (fmt_by_id(c, "gets", c->nids ? c->ids[--c->nids] : 0, by_id_opts) < 0)
				return -1;
			ring_push(c, K_GET, now, 0, now);
			c->main_inflight++;
			continue;
		}
		if (opt.keys) {
			/* get NAME:KEY, the key consumer_wants claimed */
			char key[sizeof q->name + 24];
			size_t klen = key_of(key, q, c->claimed_key);

			d = out_room(c, TC_FMT_MAX(klen));
			if (!d)
				return -1;
			c->out.len += tc_fmt_get(TC_MEMCACHE, d, key, klen, NULL, 0);
			ring_push(c, K_GET, now, c->claimed_key, now);
			c->main_inflight++;
			continue;
		}
		d = out_room(c, glen);
		if (!d)
			return -1;
		memcpy(d, g, glen);
		c->out.len += glen;
		c->opened = 1;
		ring_push(c, K_GET, now, 0, now);
		c->main_inflight++;
	}
	if (c->main_inflight == 0 && consumer_wants(c, now, 0) < 0) {
		while (q->by_id && c->nids) {
			/* Confirm what was read last. */
			if (fmt_by_id(c, "get", c->ids[--c->nids], "") < 0)
				return -1;
			ring_push(c, K_CLOSE, now, 0, now);
		}
		if (q->reliable && !q->by_id && c->opened && !c->close_sent) {
			/* Confirm the last item handed out by the /open chain. */
			d = out_room(c, q->get_final_len);
			if (!d)
				return -1;
			memcpy(d, q->get_final, q->get_final_len);
			c->out.len += q->get_final_len;
			ring_push(c, K_CLOSE, now, 0, now);
			c->close_sent = 1;
		}
		if (c->count == 0)
			conn_finish(c, now);
	}
	return 0;
}

/* Sends what is buffered; arms EPOLLOUT only while bytes remain. */

/* What a failed send or recv says about the connection: a peer that hung
 * up shows as EOF on recv but as EPIPE or ECONNRESET on send, depending on
 * which came first; both are reported the same way. err 0 = EOF. */
static const char *io_error_text(int err)
{
	if (err == 0 || err == EPIPE || err == ECONNRESET)
		return "connection closed by server";
	return strerror(err);
}

static void conn_flush(struct conn *c, int64_t now)
{
	int want;

	if (c->failed)
		return;
	while (c->out.len > 0) {
		ssize_t n = send(c->fd, c->out.p + c->out.off, c->out.len,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n > 0) {
			tc_buf_consume(&c->out, (size_t)n);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		conn_fail(c, now, EK_IO, io_error_text(n < 0 ? errno : 0));
		return;
	}
	if (c->done)
		return;
	want = c->out.len > 0;
	if (want != c->want_out) {
		struct epoll_event ev = { .events = EPOLLIN | (want ? EPOLLOUT : 0),
					  .data.ptr = c };

		epoll_ctl(c->w->ep, EPOLL_CTL_MOD, c->fd, &ev);
		c->want_out = want;
	}
}

static enum ekind error_kind(enum tc_rtype t)
{
	switch (t) {
	case TC_R_NOT_STORED:
		return EK_NOT_STORED;
	case TC_R_ERROR:
	case TC_R_CLIENT_ERROR:
	case TC_R_SERVER_ERROR:
		return EK_SERVER_ERROR;
	default:
		return EK_PROTOCOL;
	}
}

static const char *const kind_names[] = { "set", "get", "delete", "setup", "close" };

/* Handles the reply to the oldest request in flight. */
static int conn_on_reply(struct conn *c, const struct tc_reply *r, int64_t now)
{
	struct qstate *q = &queues[c->q];
	enum kind k = (enum kind)c->kind[c->head];
	int64_t t0 = c->t0[c->head];
	uint64_t seq = c->seq[c->head];
	int bad = 0;

	c->head = (c->head + 1) % c->cap;
	c->count--;
	c->last_progress_ns = now;
	switch (k) {
	case K_SET:
		c->main_inflight--;
		if (r->type != TC_R_STORED) {
			bad = 1;
			break;
		}
		c->d_stored++;
		c->d_stored_bytes += loadcodec_size(c->q, c->id, seq, opt.smin, opt.smax);
		c->last_stored_ns = now;
		lathist_add(&c->w->set_lat, (uint64_t)(now - t0));
		if (opt.verify && lcheck_stored(checker, c->q, c->id, seq) < 0)
			die(2, "out of memory");
		break;
	case K_GET:
		c->main_inflight--;
		if (r->type == TC_R_END && opt.keys) {
			/* the key's message is gone (a cache evicts; see
			 * --key-per-message): an error, and the reads go on */
			conn_error(c, 1, EK_PROTOCOL, "get: no value for key %" PRIu64
				   " (evicted or never stored)", seq);
			break;
		}
		if (r->type == TC_R_END) {
			c->got_end = 1;
			if (opt.mode == M_MIXED && wait_ms == 0)
				c->idle_until_ns = now + EMPTY_POLL_NS;
			if (!opt.verify)
				__atomic_fetch_sub(&q->claimed, 1, __ATOMIC_RELAXED);
			break;
		}
		if (r->type != TC_R_VALUE) {
			if (!opt.verify && !opt.keys)
				__atomic_fetch_sub(&q->claimed, 1, __ATOMIC_RELAXED);
			bad = 1;
			break;
		}
		c->d_values++;
		c->d_value_bytes += r->len;
		c->last_value_ns = now;
		lathist_add(&c->w->get_lat, (uint64_t)(now - t0));
		if (opt.verify)
			lcheck_read(checker, c->stream, c->q, r->data, r->len, opt.smin, opt.smax);
		if (q->by_id) {
			if (r->id == 0) {
				/* Without its id the item cannot be confirmed: it
				 * will come back after its timeout. */
				conn_error(c, 1, EK_PROTOCOL, "gets reply without an item id");
				break;
			}
			c->ids[c->nids++] = r->id;
		}
		if (opt.proto == TC_BEANSTALK) {
			char *d = out_room(c, 32);

			if (!d)
				return -1;
			c->out.len += tc_fmt_delete_job(d, r->id);
			ring_push(c, K_DEL, now, r->id, now);
		}
		break;
	case K_DEL:
		bad = r->type != TC_R_DELETED;
		break;
	case K_SETUP:
		bad = r->type != TC_R_OK;
		break;
	case K_CLOSE:
		bad = r->type != TC_R_END && r->type != TC_R_VALUE;
		break;
	}
	if (bad)
		conn_error(c, k != K_SET, error_kind(r->type), "%s: unexpected reply \"%.*s\"",
			   kind_names[k], (int)(r->line_len > 80 ? 80 : r->line_len),
			   r->line ? r->line : "");
	return 0;
}

/* Reads what arrived and handles every complete reply. */
static void conn_read(struct conn *c)
{
	size_t want = 65536;
	char *d;
	ssize_t n;
	int64_t now;

	if (c->in.len > 0) {
		/* A partial reply is waiting: make room for all of it. */
		size_t need = 0;
		struct tc_reply r;

		if (tc_parse_reply(opt.proto, c->in.p + c->in.off, c->in.len, &r, &need) == 0 &&
		    need > c->in.len + want)
			want = need - c->in.len;
	}
	d = tc_buf_reserve(&c->in, want);
	if (!d)
		die(2, "out of memory");
	n = recv(c->fd, d, want, MSG_DONTWAIT);
	now = now_ns();
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	if (n <= 0) {
		conn_fail(c, now, EK_IO, io_error_text(n < 0 ? errno : 0));
		return;
	}
	c->in.len += (size_t)n;
	while (c->in.len > 0) {
		struct tc_reply r;
		ssize_t used;

		if (c->count == 0) {
			conn_fail(c, now, EK_PROTOCOL, "reply without a request");
			return;
		}
		used = tc_parse_reply(opt.proto, c->in.p + c->in.off, c->in.len, &r, NULL);
		if (used == 0)
			break;
		if (used < 0) {
			conn_fail(c, now, EK_PROTOCOL, "malformed reply");
			return;
		}
		if (conn_on_reply(c, &r, now) < 0)
			die(2, "out of memory");
		tc_buf_consume(&c->in, (size_t)used);
	}
	conn_flush_counters(c);
	if (conn_fill(c, now) < 0)
		die(2, "out of memory");
	conn_flush(c, now);
}

/* ---- workers -------------------------------------------------------------- */

/* Starts a phase for c in the given role: resets the window, registers the
 * socket, queues protocol setup. */
static void conn_start(struct conn *c, enum role role, int64_t now)
{
	struct qstate *q = &queues[c->q];
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
	char *d;

	c->role = role;
	if (c->failed)
		return;
	c->done = 0;
	c->w->active++;
	c->head = c->count = c->main_inflight = 0;
	c->got_end = c->opened = c->close_sent = 0;
	c->idle_until_ns = 0;
	if (role == R_CONSUMER && opt.mode == M_MIXED && wait_ms == 0)
		c->w->has_idle = 1;
	c->want_out = 0;
	c->last_value_ns = c->last_stored_ns = 0;
	if (epoll_ctl(c->w->ep, EPOLL_CTL_ADD, c->fd, &ev) < 0)
		die(2, "epoll_ctl: %s", strerror(errno));
	if (opt.proto == TC_BEANSTALK) {
		d = out_room(c, 2 * q->nlen + 64);
		if (!d)
			die(2, "out of memory");
		if (role == R_PRODUCER) {
			c->out.len += (size_t)sprintf(d, "use %s\r\n", q->name);
			ring_push(c, K_SETUP, now, 0, now);
		} else {
			c->out.len += (size_t)sprintf(d, "watch %s\r\nignore default\r\n", q->name);
			ring_push(c, K_SETUP, now, 0, now);
			ring_push(c, K_SETUP, now, 0, now);
		}
	}
	if (role == R_PRODUCER && opt.rate > 0) {
		c->interval_ns = (int64_t)(1e9 * opt.conns / opt.rate);
		if (c->interval_ns < 1)
			c->interval_ns = 1;
		/* Stagger the producers of a queue over one interval. */
		c->next_due_ns = now + c->interval_ns * c->id / opt.conns;
		c->w->has_rate = 1;
	}
}

static int64_t request_timeout_ns(void)
{
	return (int64_t)(opt.timeout * 1e9) + (int64_t)wait_ms * 1000000;
}

static void worker_run(struct worker *w)
{
	struct epoll_event evs[256];
	int64_t now = now_ns(), last_sweep = now, tmo = request_timeout_ns();

	for (unsigned i = 0; i < w->nconns; i++) {
		struct conn *c = w->conns[i];

		if (conn_fill(c, now) < 0)
			die(2, "out of memory");
		conn_flush(c, now);
	}
	while (w->active > 0) {
		int64_t timeout_ns = 10000000;
		struct timespec wait_ts;
		int n;

		if (w->has_rate || w->has_idle) {
			int64_t next = INT64_MAX;

			for (unsigned i = 0; i < w->nconns; i++) {
				struct conn *c = w->conns[i];

				if (c->done)
					continue;
				if (c->role == R_PRODUCER && c->interval_ns &&
				    c->main_inflight < opt.depth && c->next_due_ns < next)
					next = c->next_due_ns;
				if (c->role == R_CONSUMER && c->idle_until_ns > now &&
				    c->idle_until_ns < next)
					next = c->idle_until_ns;
			}
			/* Wake at the next due time, but not sooner than
			 * PACE_NS: requests due within it go out together.  A
			 * millisecond epoll_wait timeout (rounded up) made a
			 * driver that had caught up oversleep up to 1 ms and
			 * then burst, adding up to a millisecond of its own to
			 * the scheduled-time latency of every server; waking
			 * for each request alone (microseconds apart at a high
			 * rate) made it a different workload: one request per server
			 * pass, as from thousands of independent clients. */
			if (next != INT64_MAX && next - now < timeout_ns)
				timeout_ns = next <= now ? 0 : next - now < PACE_NS ? PACE_NS
										  : next - now;
		}
		if (opt.busy_poll && timeout_ns > 0) {
			/* --busy-poll: the same wake-ups, without sleeping
			 * (the driver's own wake-up latency then adds
			 * nothing; its core is busy throughout) */
			const struct timespec zero = { 0, 0 };
			int64_t until = now + timeout_ns;

			do
				n = epoll_pwait2(w->ep, evs, 256, &zero, NULL);
			while (n == 0 && now_ns() < until);
		} else {
			wait_ts.tv_sec = timeout_ns / 1000000000;
			wait_ts.tv_nsec = timeout_ns % 1000000000;
			n = epoll_pwait2(w->ep, evs, 256, &wait_ts, NULL);
		}
		if (n < 0 && errno != EINTR)
			die(2, "epoll_pwait2: %s", strerror(errno));
		for (int i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;

			if (c->done)
				continue;
			if (evs[i].events & EPOLLOUT)
				conn_flush(c, now_ns());
			if (!c->done && (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
				conn_read(c);
		}
		now = now_ns();
		if (!w->has_rate && !w->has_idle && now - last_sweep < 10000000)
			continue;
		last_sweep = now;
		for (unsigned i = 0; i < w->nconns; i++) {
			struct conn *c = w->conns[i];

			if (c->done)
				continue;
			if (c->count > 0 && now - c->last_progress_ns > tmo) {
				conn_fail(c, now, EK_TIMEOUT, "no reply within the timeout");
				continue;
			}
			if (conn_fill(c, now) < 0)
				die(2, "out of memory");
			conn_flush(c, now);
		}
	}
}

/* Sequential mode, between the phases: what the readers should read. */
static void set_read_targets(void)
{
	for (unsigned i = 0; i < opt.nqueues; i++) {
		struct qstate *q = &queues[i];
		int64_t stored = (int64_t)ald(&q->stored);

		q->read_target = opt.keys ? (int64_t)opt.n : opt.verify ? -1 : stored;
		/* Verifying readers go on to END so extra copies are seen, but
		 * a get that does not dequeue must not loop forever. */
		q->read_cap = 2 * stored + 1000 + (int64_t)opt.conns * opt.depth;
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	int64_t now;

	pthread_barrier_wait(&barrier);
	if (w->idx == 0) {
		t_write_start = now_ns();
		t_produce_end = t_write_start + (int64_t)(opt.duration * 1e9);
	}
	pthread_barrier_wait(&barrier);
	now = now_ns();
	if (opt.mode == M_SEQUENTIAL) {
		for (unsigned i = 0; i < w->nconns; i++)
			conn_start(w->conns[i], R_PRODUCER, now);
		worker_run(w);
		pthread_barrier_wait(&barrier);
		if (w->idx == 0) {
			set_read_targets();
			t_read_start = now_ns();
			__atomic_store_n(&g_phase, 1, __ATOMIC_RELEASE);
		}
		pthread_barrier_wait(&barrier);
		now = now_ns();
		for (unsigned i = 0; i < w->nconns; i++)
			conn_start(w->conns[i], R_CONSUMER, now);
		w->has_rate = 0;
		worker_run(w);
	} else {
		for (unsigned i = 0; i < w->nconns; i++)
			conn_start(w->conns[i], w->conns[i]->role, now);
		worker_run(w);
	}
	__atomic_fetch_add(&workers_done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* ---- options ---------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: tern-load [options]\n"
		"  -h HOST            server address (default 127.0.0.1)\n"
		"  -p PORT            server port (default 22133)\n"
		"      --servers LIST several servers, HOST:PORT[:WEIGHT][ NAME],... (IPv6\n"
		"                     as [ADDR]:PORT): each queue on the server its name\n"
		"                     hashes to with ketama, as twemproxy and libmemcached\n"
		"                     place keys; figures per server and in total\n"
		"      --hash H       the key hash for --servers, as twemproxy's hash:\n"
		"                     md5 (default; libmemcached's ketama), fnv1a_64,\n"
		"                     fnv1_64, fnv1a_32, fnv1_32, one_at_a_time\n"
		"      --hash-tag     name the queues {PREFIXi}: with twemproxy's hash_tag\n"
		"                     \"{}\" every form of a queue's key (q/t=, q/open...)\n"
		"                     then reaches the queue's server\n"
		"      --proxy HOST:PORT  connect to a key-hashing proxy (twemproxy) instead\n"
		"                     of -h/-p; --servers, if given, is the proxy's server\n"
		"                     list (same order and hash) and only groups the\n"
		"                     figures; mixed-mode reads do not wait (no /t=): a\n"
		"                     waiting get holds the proxy's shared server connection\n"
		"      --show-routes  read keys from stdin, one a line, print each with the\n"
		"                     server (of --servers) it hashes to, and exit\n"
		"      --open-by-id   reliable reads by id (with /open in --get-options):\n"
		"                     gets q/reserve, then gets q/close=ID/reserve, and get\n"
		"                     q/close=ID for the last ones; the default for /open\n"
		"                     through --proxy\n"
		"  -q QUEUES          queues driven at once (default 1)\n"
		"      --prefix NAME  queues are named NAME0..NAME<Q-1> (default tern_load_)\n"
		"  -n MESSAGES        messages per queue (default 10000)\n"
		"  -s SIZE|MIN-MAX    body size in bytes, or a uniform range (default 512)\n"
		"  -c CONNECTIONS     connections per queue (and per role in mixed mode; default 1)\n"
		"  -P DEPTH           requests in flight per connection (default 1)\n"
		"      --mode M       sequential (write all, then read all), mixed\n"
		"                     (producers and consumers at once), produce, consume\n"
		"      --duration S   produce for S seconds instead of -n messages\n"
		"      --rate R       open loop: R messages/s per queue (latency at a fixed load)\n"
		"      --get-options O  appended to every get, e.g. /t=100 or /open (reads\n"
		"                     then chain get q/close/open and end with get q/close);\n"
		"                     mixed mode uses /t=100 when this option is not given\n"
		"                     (none with --proxy); a mixed-mode consumer whose get\n"
		"                     does not wait asks again 1 ms after finding the\n"
		"                     queue empty\n"
		"      --proto P      memcache (default), redis (LPUSH/RPOP, BRPOP when\n"
		"                     waiting) or beanstalk (put/reserve-with-timeout/delete)\n"
		"      --threads N    worker threads (default: number of cores)\n"
		"      --timeout S    fail a connection whose request waits S s for a reply (10)\n"
		"      --drain S      mixed: consumers give up S s after the last message\n"
		"                     once every producer is done (default 2)\n"
		"      --busy-poll    with --rate: poll instead of sleeping until the next\n"
		"                     request is due (the driver's core stays busy; its\n"
		"                     own wake-up latency is not added to the figures)\n"
		"      --no-verify    do not check bodies (for servers whose get does not\n"
		"                     dequeue, e.g. memcached)\n"
		"      --key-per-message  store each message under a key of its own,\n"
		"                     NAME:N (N = 0, 1, ... per queue), and read each back\n"
		"                     with get NAME:N: a cache (memcached) then holds the\n"
		"                     whole backlog, as a queue server does, and its bodies\n"
		"                     are checked; a key without a value is an error (the\n"
		"                     cache evicted it: give it the memory); --mode\n"
		"                     sequential, produce or consume, with -n\n"
		"      --json         print one JSON object instead of the text report\n"
		"      --quiet        print only the totals and the error count\n"
		"      --progress     report progress on stderr (rate, done/total, ETA)\n"
		"                     even when stderr is not a terminal: then one line\n"
		"                     per second; on a terminal a line that updates itself\n"
		"                     is shown on runs longer than 2 s without this option\n"
		"      --help\n"
		"Exit status: 0 when no error was found, 1 when any was, 2 when the server\n"
		"could not be reached or the options are wrong.\n");
}

static double parse_num(const char *s, const char *what, double min, double max)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= min && v <= max))
		die(2, "bad %s: %s", what, s);
	return v;
}

static void parse_size(const char *s)
{
	char *end;
	unsigned long long a, b;

	errno = 0;
	a = strtoull(s, &end, 10);
	b = a;
	if (!errno && end != s && *end == '-') {
		const char *t = end + 1;

		b = strtoull(t, &end, 10);
		if (end == t)
			errno = EINVAL;
	}
	if (errno || end == s || *end || a > b || b > TC_VALUE_MAX)
		die(2, "bad size: %s (SIZE or MIN-MAX)", s);
	opt.smin = a;
	opt.smax = b;
}

static int name_char_ok(int ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	       (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-' || ch == '{' ||
	       ch == '}';
}

/* "[v6]:port" for an IPv6 host, else "host:port". */
static void fmt_addr(char *buf, size_t len, const char *host, int port)
{
	if (strchr(host, ':'))
		snprintf(buf, len, "[%s]:%d", host, port);
	else
		snprintf(buf, len, "%s:%d", host, port);
}

/* --servers, --proxy, -h/-p: what to connect to and how queues map to
 * servers. */
static void parse_targets(void)
{
	int rc;

	if ((opt.servers || opt.proxy) && opt.host_given)
		die(2, "-h/-p name one server: use --servers or --proxy instead, not both");
	if (opt.show_routes && !opt.servers)
		die(2, "--show-routes needs --servers");
	if (opt.proxy) {
		static char host[KETAMA_HOST_MAX];
		const char *colon = strrchr(opt.proxy, ':'), *h = opt.proxy;
		size_t hlen = colon ? (size_t)(colon - opt.proxy) : 0;

		if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
			h++;
			hlen -= 2;
		}
		if (!colon || hlen == 0 || hlen >= sizeof host)
			die(2, "bad --proxy: %s (HOST:PORT)", opt.proxy);
		memcpy(host, h, hlen);
		opt.host = host;
		opt.port = (int)parse_num(colon + 1, "--proxy port", 1, 65535);
	}
	if (!opt.servers)
		return;
	rc = ketama_servers_parse(opt.servers, &servers, &nservers);
	if (rc == TC_ENOMEM)
		die(2, "out of memory");
	if (rc < 0)
		die(2, "bad --servers: %s (HOST:PORT[:WEIGHT][ NAME],...)", opt.servers);
	rc = ketama_new(&continuum, servers, nservers, opt.hash);
	if (rc < 0)
		die(2, "cannot hash over the servers: %s", tc_strerror(rc));
}

/* --show-routes: each key read from stdin with its server. */
static int show_routes(void)
{
	char line[TC_LINE_MAX];

	while (fgets(line, sizeof line, stdin)) {
		size_t len = strcspn(line, "\r\n");
		const struct ketama_server *s;
		char addr[KETAMA_HOST_MAX + 16];

		if (line[len] == '\0' && !feof(stdin))
			die(2, "key too long: %.40s...", line);
		line[len] = '\0';
		s = ketama_server(continuum, ketama_pick(continuum, line, len));
		fmt_addr(addr, sizeof addr, s->host, s->port);
		printf("%s %s\n", line, addr);
	}
	if (ferror(stdin))
		die(2, "reading stdin: %s", strerror(errno));
	return fflush(stdout) == 0 ? 0 : 2;
}

static void parse_options(int argc, char **argv)
{
	enum { O_PREFIX = 256, O_MODE, O_DURATION, O_RATE, O_GETOPTS, O_JSON, O_QUIET,
	       O_NOVERIFY, O_THREADS, O_PROTO, O_TIMEOUT, O_DRAIN, O_BUSY, O_PROGRESS, O_HELP,
	       O_SERVERS, O_HASH, O_HASHTAG, O_PROXY, O_ROUTES, O_BYID, O_KEYS };
	static const struct option longopts[] = {
		{ "prefix", required_argument, NULL, O_PREFIX },
		{ "mode", required_argument, NULL, O_MODE },
		{ "duration", required_argument, NULL, O_DURATION },
		{ "rate", required_argument, NULL, O_RATE },
		{ "get-options", required_argument, NULL, O_GETOPTS },
		{ "json", no_argument, NULL, O_JSON },
		{ "quiet", no_argument, NULL, O_QUIET },
		{ "no-verify", no_argument, NULL, O_NOVERIFY },
		{ "key-per-message", no_argument, NULL, O_KEYS },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "proto", required_argument, NULL, O_PROTO },
		{ "timeout", required_argument, NULL, O_TIMEOUT },
		{ "drain", required_argument, NULL, O_DRAIN },
		{ "busy-poll", no_argument, NULL, O_BUSY },
		{ "progress", no_argument, NULL, O_PROGRESS },
		{ "help", no_argument, NULL, O_HELP },
		{ "servers", required_argument, NULL, O_SERVERS },
		{ "hash", required_argument, NULL, O_HASH },
		{ "hash-tag", no_argument, NULL, O_HASHTAG },
		{ "proxy", required_argument, NULL, O_PROXY },
		{ "show-routes", no_argument, NULL, O_ROUTES },
		{ "open-by-id", no_argument, NULL, O_BYID },
		{ NULL, 0, NULL, 0 },
	};
	int ch, m;

	while ((ch = getopt_long(argc, argv, "h:p:q:n:s:c:P:", longopts, NULL)) != -1) {
		switch (ch) {
		case 'h':
			opt.host = optarg;
			opt.host_given = 1;
			break;
		case 'p':
			opt.port = (int)parse_num(optarg, "port", 1, 65535);
			opt.host_given = 1;
			break;
		case O_SERVERS:
			opt.servers = optarg;
			break;
		case O_HASH:
			m = ketama_hash_parse(optarg);
			if (m < 0)
				die(2, "bad hash: %s (md5, fnv1a_64, fnv1_64, fnv1a_32, fnv1_32, "
				       "one_at_a_time)", optarg);
			opt.hash = (enum ketama_hash)m;
			break;
		case O_HASHTAG:
			opt.hash_tag = 1;
			break;
		case O_PROXY:
			opt.proxy = optarg;
			break;
		case O_ROUTES:
			opt.show_routes = 1;
			break;
		case O_BYID:
			opt.open_by_id = 1;
			break;
		case O_KEYS:
			opt.keys = 1;
			break;
		case 'q':
			opt.nqueues = (unsigned)parse_num(optarg, "queue count", 1, 100000);
			break;
		case 'n':
			opt.n = (uint64_t)parse_num(optarg, "message count", 0, 1e12);
			opt.n_given = 1;
			break;
		case 's':
			parse_size(optarg);
			break;
		case 'c':
			opt.conns = (unsigned)parse_num(optarg, "connection count", 1, 10000);
			break;
		case 'P':
			opt.depth = (unsigned)parse_num(optarg, "pipeline depth", 1, 100000);
			break;
		case O_PREFIX:
			opt.prefix = optarg;
			break;
		case O_MODE:
			for (m = 0; m < 4 && strcmp(optarg, mode_names[m]) != 0; m++)
				;
			if (m == 4)
				die(2, "bad mode: %s (sequential, mixed, produce, consume)", optarg);
			opt.mode = (enum mode)m;
			break;
		case O_DURATION:
			opt.duration = parse_num(optarg, "duration", 0.001, 1e7);
			break;
		case O_RATE:
			opt.rate = parse_num(optarg, "rate", 0.001, 1e9);
			break;
		case O_GETOPTS:
			opt.get_opts = optarg;
			break;
		case O_JSON:
			opt.json = 1;
			break;
		case O_QUIET:
			opt.quiet = 1;
			break;
		case O_NOVERIFY:
			opt.verify = 0;
			break;
		case O_THREADS:
			opt.threads = (unsigned)parse_num(optarg, "thread count", 1, 1024);
			break;
		case O_PROTO:
			m = tc_proto_parse(optarg);
			if (m < 0)
				die(2, "bad protocol: %s (memcache, redis, beanstalk)", optarg);
			opt.proto = (enum tc_proto)m;
			break;
		case O_TIMEOUT:
			opt.timeout = parse_num(optarg, "timeout", 0.001, 1e6);
			break;
		case O_DRAIN:
			opt.drain = parse_num(optarg, "drain time", 0, 1e6);
			break;
		case O_BUSY:
			opt.busy_poll = 1;
			break;
		case O_PROGRESS:
			opt.progress = 1;
			break;
		case O_HELP:
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			exit(2);
		}
	}
	if (optind < argc)
		die(2, "unexpected argument: %s", argv[optind]);
	for (const char *p = opt.prefix; *p; p++)
		if (!name_char_ok((unsigned char)*p))
			die(2, "bad queue prefix: %s", opt.prefix);
	if (strlen(opt.prefix) > 200)
		die(2, "queue prefix too long");
	if (opt.verify && opt.smin < LOADCODEC_HDR)
		die(2, "verified bodies need at least %d bytes (-s), or use --no-verify",
		    LOADCODEC_HDR);
	if (opt.get_opts && (strchr(opt.get_opts, ' ') || strchr(opt.get_opts, '\r') ||
			     strchr(opt.get_opts, '\n') || strlen(opt.get_opts) > 200))
		die(2, "bad get options: %s", opt.get_opts);
	if (opt.keys) {
		const char *bad = NULL;

		if (opt.proto != TC_MEMCACHE)
			bad = "--proto (other than memcache)";
		else if (opt.mode == M_MIXED)
			bad = "--mode mixed";
		else if (opt.duration > 0)
			bad = "--duration";
		else if (opt.servers)
			bad = "--servers";
		else if (opt.proxy)
			bad = "--proxy";
		else if (opt.get_opts && opt.get_opts[0])
			bad = "--get-options";
		else if (opt.open_by_id)
			bad = "--open-by-id";
		else if (!opt.verify)
			bad = "--no-verify";

		if (bad)
			die(2, "--key-per-message takes --proto memcache, --mode sequential, produce "
			       "or consume with -n, and one server; not %s", bad);
	}
	parse_targets();
}

/* ---- setup ------------------------------------------------------------------ */

static unsigned server_queues(unsigned s)
{
	unsigned n = 0;

	for (unsigned i = 0; i < opt.nqueues; i++)
		n += queues[i].server == s;
	return n;
}

static void setup_queues(void)
{
	const char *go = opt.get_opts ? opt.get_opts : "";
	char opts[300];
	const char *t;

	/* Mixed-mode reads wait (/t=100) unless --get-options was given: then
	 * it is used as is (memcached takes "q/t=100" for another key, so its
	 * baseline runs with --get-options '').  Through a proxy they poll: a
	 * get that waits holds the proxy's one connection to that server, and
	 * every request of every client behind it waits too. */
	if (opt.mode == M_MIXED && !opt.get_opts && !opt.proxy)
		snprintf(opts, sizeof opts, "/t=100%s", go);
	else
		snprintf(opts, sizeof opts, "%s", go);
	/* A proxy hashes the whole key: "q/open" may go to another server
	 * than "q" unless the name carries a hash tag that both share. */
	if (opt.open_by_id && (opt.proto != TC_MEMCACHE || !strstr(opts, "/open") ||
			       strstr(opts, "/close") || strstr(opts, "/abort")))
		die(2, "--open-by-id needs --get-options with /open (and no /close or /abort)");
	if (opt.proxy && opt.proto == TC_MEMCACHE && opts[0] && !opt.hash_tag)
		die(2, "through a proxy, get options change the key (%s): use --hash-tag so that "
		       "they reach the queue's server", opts);
	snprintf(get_opts_used, sizeof get_opts_used, "%s", opts);
	t = strstr(opts, "/open");
	if (t)
		snprintf(by_id_opts, sizeof by_id_opts, "%.*s/reserve%s", (int)(t - opts), opts,
			 t + 5);
	t = strstr(opts, "/t=");
	wait_ms = t ? atoi(t + 3) : 0;
	queues = calloc(opt.nqueues, sizeof *queues);
	if (!queues)
		die(2, "out of memory");
	for (unsigned i = 0; i < opt.nqueues; i++) {
		struct qstate *q = &queues[i];
		char next[320];

		if (opt.hash_tag)
			q->nlen = (size_t)snprintf(q->name, sizeof q->name, "{%s%u}", opt.prefix, i);
		else
			q->nlen = (size_t)snprintf(q->name, sizeof q->name, "%s%u", opt.prefix, i);
		q->server = continuum ? ketama_pick(continuum, q->name, q->nlen) : 0;
		q->reliable = opt.proto == TC_MEMCACHE && strstr(opts, "/open") != NULL;
		/* Through a proxy the per-connection /open is the proxy's
		 * connection, shared by every client: read by id there. */
		q->by_id = q->reliable && (opt.open_by_id || opt.proxy);
		snprintf(next, sizeof next, "%s%s", q->reliable ? "/close" : "", opts);
		q->get_first_len = tc_fmt_get(opt.proto, q->get_first, q->name, q->nlen, opts,
					      wait_ms);
		q->get_next_len = tc_fmt_get(opt.proto, q->get_next, q->name, q->nlen, next,
					     wait_ms);
		q->get_final_len = tc_fmt_get(opt.proto, q->get_final, q->name, q->nlen,
					      "/close", 0);
		q->read_target = -1;
		q->read_cap = -1;
		if (opt.mode == M_CONSUME && (opt.n_given || opt.keys))
			q->read_target = (int64_t)opt.n;
	}
	if (nservers > 1 && !opt.quiet) {
		unsigned idle = 0;

		for (unsigned s = 0; s < nservers; s++)
			idle += server_queues(s) == 0;
		if (idle)
			fprintf(stderr, "tern-load: %u of %u servers get none of the %u queues "
					"(more queues, -q, spread over more servers)\n",
				idle, nservers, opt.nqueues);
	}
}

static uint64_t share_of(uint64_t n, unsigned parts, unsigned i)
{
	return n / parts + (i < n % parts);
}

static void setup_conns(void)
{
	unsigned per_q = opt.mode == M_MIXED ? 2 * opt.conns : opt.conns;
	unsigned ring = 2 * opt.depth + 8;
	int64_t tmo_ms = (int64_t)(opt.timeout * 1000);

	nconns = opt.nqueues * per_q;
	conns = calloc(nconns, sizeof *conns);
	if (!conns)
		die(2, "out of memory");
	if (!opt.threads) {
		long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

		opt.threads = ncpu > 0 ? (unsigned)ncpu : 1;
	}
	if (opt.threads > nconns)
		opt.threads = nconns;
	workers = calloc(opt.threads, sizeof *workers);
	if (!workers)
		die(2, "out of memory");
	for (unsigned t = 0; t < opt.threads; t++) {
		workers[t].idx = t;
		workers[t].ep = epoll_create1(EPOLL_CLOEXEC);
		workers[t].conns = calloc(nconns / opt.threads + 1, sizeof(struct conn *));
		if (workers[t].ep < 0 || !workers[t].conns)
			die(2, "cannot create worker: %s", strerror(errno));
		lathist_init(&workers[t].set_lat);
		lathist_init(&workers[t].get_lat);
	}
	for (unsigned i = 0; i < nconns; i++) {
		struct conn *c = &conns[i];
		struct worker *w = &workers[i % opt.threads];
		const char *host = opt.host;
		int port = opt.port;
		int rc;

		c->q = i / per_q;
		c->id = (i % per_q) % opt.conns;
		if (opt.mode == M_CONSUME || (opt.mode == M_MIXED && i % per_q >= opt.conns))
			c->role = R_CONSUMER;
		else
			c->role = R_PRODUCER;
		c->share = share_of(opt.n, opt.conns, c->id);
		for (unsigned p = 0; p < c->id; p++)
			c->key_base += share_of(opt.n, opt.conns, p);
		c->cap = ring;
		c->kind = calloc(ring, 1);
		c->t0 = calloc(ring, sizeof *c->t0);
		c->seq = calloc(ring, sizeof *c->seq);
		c->ids = queues[c->q].by_id ? calloc(opt.depth, sizeof *c->ids) : NULL;
		if (!c->kind || !c->t0 || !c->seq || (queues[c->q].by_id && !c->ids))
			die(2, "out of memory");
		if (opt.verify && (c->role == R_CONSUMER || opt.mode == M_SEQUENTIAL)) {
			c->stream = lcheck_stream_new(max_producers);
			if (!c->stream)
				die(2, "out of memory");
		}
		c->w = w;
		w->conns[w->nconns++] = c;
		if (servers && !opt.proxy) {
			host = servers[queues[c->q].server].host;
			port = servers[queues[c->q].server].port;
		}
		rc = tc_connect(host, port, tmo_ms < 5000 ? 5000 : (int)tmo_ms, &c->fd);
		if (rc < 0) {
			char addr[KETAMA_HOST_MAX + 16];

			fmt_addr(addr, sizeof addr, host, port);
			die(2, "cannot connect to %s: %s", addr, tc_strerror(rc));
		}
		if (c->role == R_PRODUCER)
			queues[c->q].producers_left++;
	}
}

/* ---- what the servers say of themselves ------------------------------------- */

/* A server's version line and, from `stats settings`, tern's journal sync
 * mode, asked before the run (memcache protocol only: through a proxy,
 * which forwards neither request, the servers of --servers are asked
 * directly).  Empty strings and -1 for what the server did not say. */
struct server_info {
	int answered;              /* the version request was answered */
	char version[128];         /* what follows "VERSION " */
	char sync[32];             /* journal.sync */
	long long sync_interval_ms; /* journal.sync_interval_ms */
};

static struct server_info *server_infos; /* per server, or [0] for -h/-p */
static void json_puts(const char *s);
static char run_started[32];              /* the run's start, ISO 8601 UTC */

/* Copies the rest of r's line after skip bytes into dst (len bytes). */
static void reply_rest(const struct tc_reply *r, size_t skip, char *dst, size_t len)
{
	size_t n = r->line_len > skip ? r->line_len - skip : 0;

	if (n >= len)
		n = len - 1;
	memcpy(dst, r->line + skip, n);
	dst[n] = '\0';
}

static void ask_server(const char *host, int port, struct server_info *si)
{
	static const char req[] = "version\r\nstats settings\r\n";
	struct tc_conn *c;
	struct tc_reply r;

	si->sync_interval_ms = -1;
	if (opt.proto != TC_MEMCACHE ||
	    tc_conn_open(&c, host, port, TC_MEMCACHE, (int)(opt.timeout * 1000)) != 0)
		return;
	if (tc_conn_raw(c, req, sizeof(req) - 1) != 0 || tc_conn_reply(c, &r) != 0)
		goto done;
	if (r.type == TC_R_OK && r.line_len > 8 && !memcmp(r.line, "VERSION ", 8)) {
		si->answered = 1;
		reply_rest(&r, 8, si->version, sizeof(si->version));
	}
	/* STAT lines up to END; a server without the group answers one error */
	while (tc_conn_reply(c, &r) == 0 && r.type == TC_R_OTHER) {
		static const char sync[] = "STAT journal.sync ";
		static const char ival[] = "STAT journal.sync_interval_ms ";

		if (r.line_len > sizeof(sync) - 1 && !memcmp(r.line, sync, sizeof(sync) - 1))
			reply_rest(&r, sizeof(sync) - 1, si->sync, sizeof(si->sync));
		else if (r.line_len > sizeof(ival) - 1 && !memcmp(r.line, ival, sizeof(ival) - 1)) {
			char num[24];

			reply_rest(&r, sizeof(ival) - 1, num, sizeof(num));
			si->sync_interval_ms = strtoll(num, NULL, 10);
		}
	}
done:
	tc_conn_close(c);
}

/* Asks each server (ask_server) and notes the run's start time. */
static void ask_servers(void)
{
	unsigned n = nservers ? nservers : 1;
	time_t now = time(NULL);
	struct tm tm;

	gmtime_r(&now, &tm);
	strftime(run_started, sizeof(run_started), "%Y-%m-%dT%H:%M:%SZ", &tm);
	server_infos = calloc(n, sizeof(*server_infos));
	if (!server_infos)
		die(2, "out of memory");
	if (nservers) {
		for (unsigned i = 0; i < nservers; i++)
			ask_server(servers[i].host, servers[i].port, &server_infos[i]);
	} else if (!opt.proxy) {
		ask_server(opt.host, opt.port, &server_infos[0]);
	}
}

/* "version":...,"sync":...,"sync_interval_ms":... (null for what the
 * server did not say), no braces. */
static void json_server_info(const struct server_info *si)
{
	if (si->answered) {
		printf("\"version\":\"");
		json_puts(si->version);
		printf("\",");
	} else {
		printf("\"version\":null,");
	}
	if (si->sync[0]) {
		printf("\"sync\":\"");
		json_puts(si->sync);
		printf("\",");
	} else {
		printf("\"sync\":null,");
	}
	if (si->sync_interval_ms >= 0)
		printf("\"sync_interval_ms\":%lld", si->sync_interval_ms);
	else
		printf("\"sync_interval_ms\":null");
}

/* ---- report ----------------------------------------------------------------- */

struct side {
	uint64_t msgs, bytes, errors;
	double secs;
};

struct qresult {
	struct side w, r;
	struct lcheck_counts chk;
	uint64_t err[EK__COUNT]; /* both sides */
	uint64_t total_errors;
};

static double rate_of(double x, double secs)
{
	return secs > 0 ? x / secs : 0;
}

/* Prints s as the body of a JSON string (quotes and controls escaped). */
static void json_puts(const char *s)
{
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			printf("\\%c", ch);
		else if (ch < 0x20)
			printf("\\u%04x", ch);
		else
			putchar(ch);
	}
}

static void json_side(const char *name, const struct side *s, int comma)
{
	printf("\"%s\":{\"messages\":%" PRIu64 ",\"bytes\":%" PRIu64
	       ",\"seconds\":%.6f,\"msg_per_s\":%.3f,\"mib_per_s\":%.3f,\"errors\":%" PRIu64 "}%s",
	       name, s->msgs, s->bytes, s->secs, rate_of((double)s->msgs, s->secs),
	       rate_of((double)s->bytes / MIB, s->secs), s->errors, comma ? "," : "");
}

static void json_errors(const struct lcheck_counts *chk, const uint64_t *err)
{
	printf("{\"corrupt\":%" PRIu64 ",\"lost\":%" PRIu64 ",\"duplicate\":%" PRIu64
	       ",\"reordered\":%" PRIu64,
	       chk->corrupt, chk->lost, chk->duplicate, chk->reordered);
	for (int k = 0; k < EK__COUNT; k++)
		printf(",\"%s\":%" PRIu64, ekind_names[k], err[k]);
	printf("}");
}

static void json_lat(const char *name, const struct lathist *h, int comma)
{
	printf("\"%s\":{\"count\":%" PRIu64 ",\"mean\":%.3f,\"p50\":%.3f,\"p90\":%.3f,"
	       "\"p99\":%.3f,\"p99_9\":%.3f,\"max\":%.3f}%s",
	       name, h->count, h->count ? (double)h->sum / (double)h->count / 1e3 : 0.0,
	       lathist_percentile(h, 50) / 1e3, lathist_percentile(h, 90) / 1e3,
	       lathist_percentile(h, 99) / 1e3, lathist_percentile(h, 99.9) / 1e3,
	       h->count ? (double)h->max / 1e3 : 0.0, comma ? "," : "");
}

static void print_lat(const char *name, const struct lathist *h)
{
	if (!h->count)
		return;
	printf("%s latency (us): p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  max %.1f"
	       "  (%" PRIu64 " requests)\n",
	       name, lathist_percentile(h, 50) / 1e3, lathist_percentile(h, 90) / 1e3,
	       lathist_percentile(h, 99) / 1e3, lathist_percentile(h, 99.9) / 1e3,
	       (double)h->max / 1e3, h->count);
}

/* Adds one queue's results into a sum (all queues, or a server's): counts
 * add up, and the time is the longest, since every queue started at once. */
static void result_add(struct qresult *sum, const struct qresult *r)
{
	sum->w.msgs += r->w.msgs;
	sum->w.bytes += r->w.bytes;
	sum->w.errors += r->w.errors;
	sum->r.msgs += r->r.msgs;
	sum->r.bytes += r->r.bytes;
	sum->r.errors += r->r.errors;
	if (r->w.secs > sum->w.secs)
		sum->w.secs = r->w.secs;
	if (r->r.secs > sum->r.secs)
		sum->r.secs = r->r.secs;
	sum->chk.corrupt += r->chk.corrupt;
	sum->chk.lost += r->chk.lost;
	sum->chk.duplicate += r->chk.duplicate;
	sum->chk.reordered += r->chk.reordered;
	for (int k = 0; k < EK__COUNT; k++)
		sum->err[k] += r->err[k];
	sum->total_errors += r->total_errors;
}

/* A queue's or a server's figures: "write", "read", "errors",
 * "total_errors" (no braces around them). */
static void json_result(const struct qresult *r)
{
	json_side("write", &r->w, 1);
	json_side("read", &r->r, 1);
	printf("\"errors\":");
	json_errors(&r->chk, r->err);
	printf(",\"total_errors\":%" PRIu64, r->total_errors);
}

static void json_servers(const struct qresult *sres)
{
	char addr[KETAMA_HOST_MAX + 16];

	printf("\"hash\":\"%s\",\"servers\":[", ketama_hash_name(opt.hash));
	for (unsigned s = 0; s < nservers; s++) {
		fmt_addr(addr, sizeof addr, servers[s].host, servers[s].port);
		printf("%s{\"server\":\"", s ? "," : "");
		json_puts(addr);
		printf("\",\"name\":\"");
		json_puts(servers[s].name);
		printf("\",\"weight\":%u,\"queues\":%u,", servers[s].weight, server_queues(s));
		json_server_info(&server_infos[s]);
		printf(",");
		json_result(&sres[s]);
		printf("}");
	}
	printf("],");
}

static void print_servers(const struct qresult *sres, int writes, int reads)
{
	char addr[KETAMA_HOST_MAX + 16];

	for (unsigned s = 0; s < nservers; s++) {
		const struct qresult *r = &sres[s];

		fmt_addr(addr, sizeof addr, servers[s].host, servers[s].port);
		printf("Server %s (%u queues):", addr, server_queues(s));
		if (writes)
			printf(" write %.3f msg/s - %.3f MiB/s", rate_of((double)r->w.msgs, r->w.secs),
			       rate_of((double)r->w.bytes / MIB, r->w.secs));
		if (reads)
			printf("%s read %.3f msg/s - %.3f MiB/s", writes ? "," : "",
			       rate_of((double)r->r.msgs, r->r.secs),
			       rate_of((double)r->r.bytes / MIB, r->r.secs));
		printf(" (%" PRIu64 " errors)\n", r->total_errors);
	}
}

static int report(double cpu_user, double cpu_sys)
{
	struct qresult *res = calloc(opt.nqueues, sizeof *res);
	struct qresult *sres = nservers ? calloc(nservers, sizeof *sres) : NULL;
	struct qresult tot = { 0 };
	struct lathist set_lat, get_lat;
	int writes = opt.mode != M_CONSUME, reads = opt.mode != M_PRODUCE;
	int64_t rstart = opt.mode == M_SEQUENTIAL ? t_read_start : t_write_start;
	char size[64];
	uint64_t *expected = NULL;
	double cpu_per_msg;

	if (!res || (nservers && !sres))
		die(2, "out of memory");
	if (opt.smin == opt.smax)
		snprintf(size, sizeof size, "%zu", opt.smin);
	else
		snprintf(size, sizeof size, "%zu-%zu", opt.smin, opt.smax);
	if (opt.mode == M_CONSUME && opt.n_given) {
		/* The producers were another run with the same -n and -c. */
		expected = calloc(max_producers, sizeof *expected);
		if (!expected)
			die(2, "out of memory");
		for (unsigned p = 0; p < opt.conns; p++)
			expected[p] = share_of(opt.n, opt.conns, p);
	}
	lathist_init(&set_lat);
	lathist_init(&get_lat);
	for (unsigned t = 0; t < opt.threads; t++) {
		lathist_merge(&set_lat, &workers[t].set_lat);
		lathist_merge(&get_lat, &workers[t].get_lat);
	}
	for (unsigned i = 0; i < opt.nqueues; i++) {
		struct qstate *q = &queues[i];
		struct qresult *r = &res[i];

		if (opt.verify && reads)
			lcheck_finish(checker, i, expected, &r->chk);
		r->w.msgs = q->sent;
		r->w.bytes = q->stored_bytes;
		r->w.secs = q->write_end_ns ? (double)(q->write_end_ns - t_write_start) / 1e9 : 0;
		r->r.msgs = q->values;
		r->r.bytes = q->value_bytes;
		r->r.secs = q->read_end_ns ? (double)(q->read_end_ns - rstart) / 1e9 : 0;
		for (int k = 0; k < EK__COUNT; k++) {
			r->w.errors += q->werr[k];
			r->r.errors += q->rerr[k];
			r->err[k] = q->werr[k] + q->rerr[k];
		}
		r->r.errors += r->chk.corrupt + r->chk.lost + r->chk.duplicate + r->chk.reordered;
		r->total_errors = r->w.errors + r->r.errors;
		result_add(&tot, r);
		if (sres)
			result_add(&sres[q->server], r);
	}
	cpu_per_msg = tot.w.msgs + tot.r.msgs
			      ? (cpu_user + cpu_sys) * 1e6 / (double)(tot.w.msgs + tot.r.msgs)
			      : 0;
	if (opt.json) {
		printf("{\"tool\":\"tern-load\",\"tern_load_version\":\"%s\",\"started\":\"%s\","
		       "\"proto\":\"%s\",\"host\":\"",
		       TERN_VERSION, run_started, tc_proto_name(opt.proto));
		json_puts(opt.host);
		printf("\",\"port\":%d,\"mode\":\"%s\",\"queues\":%u,\"prefix\":\"%s\","
		       "\"messages_per_queue\":%" PRIu64 ",\"size_min\":%zu,\"size_max\":%zu,"
		       "\"connections\":%u,\"depth\":%u,\"threads\":%u,\"verify\":%s,"
		       "\"duration\":%.3f,\"rate\":%.3f,\"reliable_reads\":%s,\"open_by_id\":%s,"
		       "\"get_options\":\"",
		       opt.port, mode_names[opt.mode], opt.nqueues, opt.prefix,
		       opt.duration > 0 ? 0 : opt.n, opt.smin, opt.smax, opt.conns, opt.depth,
		       opt.threads, opt.verify ? "true" : "false", opt.duration, opt.rate,
		       queues[0].reliable ? "true" : "false", queues[0].by_id ? "true" : "false");
		json_puts(get_opts_used);
		printf("\",\"routing\":\"%s\",\"hash_tag\":%s,",
		       opt.proxy ? "proxy" : nservers ? "servers" : "single",
		       opt.hash_tag ? "true" : "false");
		/* the server's own words (for --servers: in each server's entry) */
		if (!nservers && !opt.proxy) {
			printf("\"server\":{");
			json_server_info(&server_infos[0]);
			printf("},");
		} else if (!nservers) {
			printf("\"server\":null,");
		}
		if (nservers)
			json_servers(sres);
		printf("\"per_queue\":[");
		for (unsigned i = 0; i < opt.nqueues; i++) {
			printf("%s{\"name\":\"%s\",", i ? "," : "", queues[i].name);
			if (nservers) {
				char addr[KETAMA_HOST_MAX + 16];

				fmt_addr(addr, sizeof addr, servers[queues[i].server].host,
					 servers[queues[i].server].port);
				printf("\"server\":\"");
				json_puts(addr);
				printf("\",");
			}
			json_result(&res[i]);
			printf("}");
		}
		printf("],\"total\":{");
		json_side("write", &tot.w, 1);
		json_side("read", &tot.r, 0);
		printf("},\"latency_us\":{");
		json_lat("set", &set_lat, 1);
		json_lat("get", &get_lat, 0);
		printf("},\"errors\":");
		json_errors(&tot.chk, tot.err);
		printf(",\"total_errors\":%" PRIu64 ",\"tern_load_cpu\":{\"user_s\":%.6f,"
		       "\"sys_s\":%.6f,\"us_per_msg\":%.4f},\"interrupted\":%s}\n",
		       tot.total_errors, cpu_user, cpu_sys, cpu_per_msg, g_stop ? "true" : "false");
	} else {
		for (unsigned i = 0; i < opt.nqueues && !opt.quiet; i++) {
			struct qresult *r = &res[i];

			if (opt.nqueues > 1)
				printf("Queue %s:\n", queues[i].name);
			if (writes)
				printf("Writing %" PRIu64 " messages of size %s took %.3f seconds - "
				       "%.3f msg/s - %.3f MiB/s (with %" PRIu64 " errors)\n",
				       r->w.msgs, size, r->w.secs, rate_of((double)r->w.msgs, r->w.secs),
				       rate_of((double)r->w.bytes / MIB, r->w.secs), r->w.errors);
			if (!reads)
				continue;
			printf("Reading %" PRIu64 " messages took %.3f seconds - %.3f msg/s - "
			       "%.3f MiB/s\n",
			       r->r.msgs, r->r.secs, rate_of((double)r->r.msgs, r->r.secs),
			       rate_of((double)r->r.bytes / MIB, r->r.secs));
			if (opt.verify)
				printf("Checking response correctness.\n");
			else
				printf("Not checking response correctness (--no-verify).\n");
			printf("Found %" PRIu64 " errors in %" PRIu64 " responses.\n", r->r.errors,
			       r->r.msgs);
			if (r->r.errors)
				printf("  corrupt %" PRIu64 ", lost %" PRIu64 ", duplicate %" PRIu64
				       ", reordered %" PRIu64 ", not_stored %" PRIu64
				       ", server_error %" PRIu64 ", protocol %" PRIu64
				       ", timeout %" PRIu64 ", io %" PRIu64 "\n",
				       r->chk.corrupt, r->chk.lost, r->chk.duplicate, r->chk.reordered,
				       r->err[EK_NOT_STORED], r->err[EK_SERVER_ERROR],
				       r->err[EK_PROTOCOL], r->err[EK_TIMEOUT], r->err[EK_IO]);
		}
		if (opt.nqueues > 1 || opt.quiet) {
			if (writes)
				printf("Total write: %.3f msg/s - %.3f MiB/s (%" PRIu64
				       " messages, %" PRIu64 " errors)\n",
				       rate_of((double)tot.w.msgs, tot.w.secs),
				       rate_of((double)tot.w.bytes / MIB, tot.w.secs), tot.w.msgs,
				       tot.w.errors);
			if (reads)
				printf("Total read: %.3f msg/s - %.3f MiB/s (%" PRIu64
				       " messages, %" PRIu64 " errors)\n",
				       rate_of((double)tot.r.msgs, tot.r.secs),
				       rate_of((double)tot.r.bytes / MIB, tot.r.secs), tot.r.msgs,
				       tot.r.errors);
		}
		if (nservers && !opt.quiet)
			print_servers(sres, writes, reads);
		if (opt.quiet) {
			printf("Found %" PRIu64 " errors in %" PRIu64 " responses.\n",
			       tot.total_errors, tot.r.msgs);
		} else {
			print_lat("Set", &set_lat);
			print_lat("Get", &get_lat);
			printf("tern-load's own CPU (the load generator's, not the server's): %.3f s "
			       "user + %.3f s sys = %.2f us per message\n",
			       cpu_user, cpu_sys, cpu_per_msg);
			if (tot.total_errors) {
				printf("Errors: corrupt %" PRIu64 ", lost %" PRIu64 ", duplicate %" PRIu64
				       ", reordered %" PRIu64,
				       tot.chk.corrupt, tot.chk.lost, tot.chk.duplicate,
				       tot.chk.reordered);
				for (int k = 0; k < EK__COUNT; k++)
					printf(", %s %" PRIu64, ekind_names[k], tot.err[k]);
				printf("\n");
			}
			if (g_stop)
				printf("Interrupted.\n");
		}
	}
	fflush(stdout);
	if (opt.verify && reads && tot.chk.duplicate > tot.r.msgs / 2)
		fprintf(stderr, "tern-load: most reads were duplicates: does this server's get "
				"dequeue? (use --no-verify for memcached)\n");
	free(expected);
	{
		uint64_t e = tot.total_errors;

		free(res);
		free(sres);
		return e || g_stop ? 1 : 0;
	}
}

/* ---- main -------------------------------------------------------------------- */

static void on_sigint(int sig)
{
	(void)sig;
	g_stop = 1;
	signal(SIGINT, SIG_DFL); /* a second ^C kills */
}

/* "12s", "3m05s", "2h07m", or "?" when it cannot be known. */
static void fmt_eta(char *buf, size_t len, double secs)
{
	if (!(secs >= 0) || secs > 1e8)
		snprintf(buf, len, "?");
	else if (secs < 60)
		snprintf(buf, len, "%.0fs", secs);
	else if (secs < 3600)
		snprintf(buf, len, "%dm%02ds", (int)secs / 60, (int)secs % 60);
	else
		snprintf(buf, len, "%dh%02dm", (int)(secs / 3600), (int)secs % 3600 / 60);
}

/* "N" or "N/TOTAL" (total 0 = unknown). */
static void fmt_count(char *buf, size_t len, uint64_t n, uint64_t total)
{
	if (total)
		snprintf(buf, len, "%" PRIu64 "/%" PRIu64, n, total);
	else
		snprintf(buf, len, "%" PRIu64, n);
}

/* Folds the rate since the last report into a smoothed one (*rate < 0:
 * none yet): about a second of memory. */
static void smooth(double *rate, uint64_t done, uint64_t last, int64_t now, int64_t last_ns)
{
	double inst = (double)(done - last) * 1e9 / (double)(now - last_ns);
	double a = (double)(now - last_ns) / 1e9;

	if (a > 1)
		a = 1;
	*rate = *rate < 0 ? inst : *rate + a * (inst - *rate);
}

/*
 * One progress report on stderr: elapsed time, phase, messages written and
 * read against what the run will do (when that is known), each with its
 * recent rate (messages per second, smoothed over about a second), and the
 * time left: the operations left at the two rates together, or with
 * --duration the production time left.  On a terminal the line rewrites
 * itself ("\r"); otherwise (--progress into a file or pipe) each report is
 * a line.
 */
static void progress(int64_t start, int final, int tty)
{
	static int shown;
	static int64_t last_ns;
	static uint64_t last_w, last_r;
	static double wrate = -1, rrate = -1; /* msg/s, smoothed; -1 = none yet */
	double rate;
	uint64_t w = 0, r = 0, e = 0, wt = 0, rt = 0, all = (uint64_t)opt.nqueues * opt.n;
	int64_t now = now_ns();
	double secs = (double)(now - start) / 1e9, left = -1;
	int reading = __atomic_load_n(&g_phase, __ATOMIC_ACQUIRE);
	char ws[48], rs[48], eta[32];

	if (final) {
		if (shown && tty)
			fputs("\r\033[K", stderr);
		return;
	}
	for (unsigned i = 0; i < opt.nqueues; i++) {
		w += ald(&queues[i].stored);
		r += ald(&queues[i].values);
		for (int k = 0; k < EK__COUNT; k++)
			e += ald(&queues[i].werr[k]) + ald(&queues[i].rerr[k]);
	}
	if (!last_ns)
		last_ns = start; /* the first rate is the average so far */
	if (now > last_ns) {
		smooth(&wrate, w, last_w, now, last_ns);
		smooth(&rrate, r, last_r, now, last_ns);
	}
	last_ns = now;
	last_w = w;
	last_r = r;
	rate = wrate < 0 ? -1 : wrate + rrate;
	/* What the run will do, when that is known in advance. */
	if (opt.duration <= 0 && opt.mode != M_CONSUME)
		wt = all;
	if (opt.mode == M_CONSUME && opt.n_given)
		rt = all;
	else if ((opt.mode == M_SEQUENTIAL || opt.mode == M_MIXED) && opt.duration <= 0)
		rt = all;
	else if (opt.mode == M_SEQUENTIAL && reading)
		rt = w; /* --duration: everything written is read back */
	if (opt.duration > 0 && !reading) {
		left = opt.duration - secs; /* time-bound: the production time left */
		if (left < 0)
			left = 0;
	} else if (rate > 0 && (opt.mode == M_CONSUME || wt) && (opt.mode == M_PRODUCE || rt)) {
		uint64_t todo = (wt > w ? wt - w : 0) + (rt > r ? rt - r : 0);

		left = (double)todo / rate;
	}
	fmt_count(ws, sizeof ws, w, wt);
	fmt_count(rs, sizeof rs, r, rt);
	fmt_eta(eta, sizeof eta, left);
	fprintf(stderr, "%s%7.1fs  %s  written %s (%.0f msg/s)  read %s (%.0f msg/s)  ETA %s  "
		"errors %" PRIu64 "%s",
		tty ? "\r\033[K" : "", secs, reading ? "reading" : "running", ws,
		wrate < 0 ? 0 : wrate, rs, rrate < 0 ? 0 : rrate, eta, e, tty ? "" : "\n");
	shown = 1;
}

int main(int argc, char **argv)
{
	struct rusage ru0, ru1;
	int64_t start, next_report = 0;
	int tty, show;

	parse_options(argc, argv);
	if (opt.show_routes)
		return show_routes();
	signal(SIGPIPE, SIG_IGN);
	setup_queues();
	max_producers = opt.mode == M_CONSUME ? (opt.conns > 256 ? opt.conns : 256) : opt.conns;
	if (opt.verify) {
		checker = lcheck_new(opt.nqueues, max_producers);
		if (!checker)
			die(2, "out of memory");
	}
	ask_servers();
	setup_conns();
	signal(SIGINT, on_sigint);
	tty = isatty(2);
	/* On a terminal unless --quiet; anywhere with --progress. */
	show = opt.progress || (tty && !opt.quiet);
	if (pthread_barrier_init(&barrier, NULL, opt.threads) != 0)
		die(2, "pthread_barrier_init failed");
	getrusage(RUSAGE_SELF, &ru0);
	start = now_ns();
	for (unsigned t = 0; t < opt.threads; t++)
		if (pthread_create(&workers[t].tid, NULL, worker_main, &workers[t]) != 0)
			die(2, "pthread_create failed");
	while (__atomic_load_n(&workers_done, __ATOMIC_ACQUIRE) < opt.threads) {
		struct timespec ts = { 0, 200 * 1000000 };

		nanosleep(&ts, NULL);
		if (!show || now_ns() - start < (opt.progress ? 1000000000 : 2000000000))
			continue;
		/* A terminal line is refreshed every pass; lines into a file or
		 * pipe once a second. */
		if (tty || now_ns() >= next_report) {
			progress(start, 0, tty);
			next_report = now_ns() + 1000000000;
		}
	}
	for (unsigned t = 0; t < opt.threads; t++)
		pthread_join(workers[t].tid, NULL);
	if (show)
		progress(start, 1, tty);
	getrusage(RUSAGE_SELF, &ru1);
	return report((double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) +
			      (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) / 1e6,
		      (double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
			      (double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e6);
}
