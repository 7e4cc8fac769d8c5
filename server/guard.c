/*
 * guard.c: what keeps clients from tying the server up: the handshake's
 * deadline and share of the slots, the pause in accepting connections
 * when the process is out of file descriptors, and the price of guessing
 * passwords (see guard.h).
 *
 * All run on the event loop and time with libevent's timers (or the
 * server's tick), which use the monotonic clock: a step of the wall clock
 * neither fires nor delays them.
 */
#include "conn.h"
#include "guard.h"
#include "state.h"
#include "../lib/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* ---- the handshake ---- */

/* The least time a connection has been in its handshake before a new one
 * may take its slot: a client that logs in at once is never closed for
 * another. */
#define HANDSHAKE_EVICT_MS 1000

/* Closes the TCP or TLS connection longest in its handshake when it has
 * been there HANDSHAKE_EVICT_MS; returns 1 when one was closed. */
static int handshake_evict(struct server *s)
{
	struct conn *c = s->hs_head;
	char who[80];

	while (c && c->unix_peer)
		c = c->hs_next;
	if (!c || tern_mono_ms() - c->hs_since_ms < HANDSHAKE_EVICT_MS)
		return 0;
	/* (the same words for every connection of a peer: repeats fold) */
	log_info("closed a connection from %s still in its handshake, to make room for "
		 "a new one", conn_peer_name(c, who, sizeof(who)));
	s->stats.handshake_evictions++;
	conn_free(c);
	return 1;
}

int guard_admit(struct server *s, enum conn_kind kind)
{
	if (s->nconns < s->cfg.max_connections &&
	    (kind == CONN_UNIX || s->nhs_net < config_max_handshakes(&s->cfg)))
		return 1;
	return handshake_evict(s);
}

void guard_handshake_tick(struct server *s, int64_t now_ms)
{
	int64_t limit = (int64_t)s->cfg.handshake_timeout_s * 1000;
	char who[80];

	while (limit && s->hs_head && now_ms - s->hs_head->hs_since_ms >= limit) {
		struct conn *c = s->hs_head;

		log_info("closed a connection from %s that did not finish its handshake "
			 "within %u s", conn_peer_name(c, who, sizeof(who)),
			 s->cfg.handshake_timeout_s);
		s->stats.handshake_timeouts++;
		conn_free(c);
	}
}

/* ---- failed logins ----
 *
 * A connection may fail auth_max_failures logins; the answer to the last
 * one is sent and the connection closed.  Guessing on new connections is
 * slowed per peer (an address; a Unix socket's peer by its user): a table
 * of PEERS_SIZE slots, a peer hashed to PEERS_PROBE of them, remembers how
 * many logins each peer failed since it last went AUTH_PEER_FORGET_MS
 * without one, and the answer to each failure is held back twice as long
 * as the one before (auth_failure_delay_ms first).  The table is bounded:
 * a new peer takes the slot of the one that failed longest ago.  A
 * successful login is never held.
 */
#define PEERS_SIZE 1024
#define PEERS_PROBE 4
#define AUTH_PEER_FORGET_MS (10 * 60 * 1000)

struct peer_slot {
	struct conn_peer peer;
	uint32_t failures;
	int64_t last_ms;    /* monotonic; 0: an empty slot */
};

struct guard_peers {
	struct peer_slot slot[PEERS_SIZE];
};

static uint32_t peer_hash(const struct conn_peer *p)
{
	uint32_t h = 2166136261u ^ p->family;

	for (size_t i = 0; i < sizeof(p->addr); i++)
		h = (h ^ p->addr[i]) * 16777619u;
	return (h ^ p->uid) * 16777619u;
}

static int same_peer(const struct conn_peer *a, const struct conn_peer *b)
{
	return a->family == b->family && a->uid == b->uid &&
	       !memcmp(a->addr, b->addr, sizeof(a->addr));
}

/* The slot of peer p (taken for it when it has none), or NULL without
 * memory for the table. */
static struct peer_slot *peer_slot(struct server *s, const struct conn_peer *p, int64_t now)
{
	uint32_t h = peer_hash(p);
	struct peer_slot *oldest = NULL;

	if (!s->peers && !(s->peers = calloc(1, sizeof(*s->peers))))
		return NULL;
	for (unsigned i = 0; i < PEERS_PROBE; i++) {
		struct peer_slot *e = &s->peers->slot[(h + i) % PEERS_SIZE];

		if (e->last_ms && same_peer(&e->peer, p)) {
			if (now - e->last_ms > AUTH_PEER_FORGET_MS)
				e->failures = 0;
			return e;
		}
		if (!oldest || e->last_ms < oldest->last_ms)
			oldest = e;
	}
	oldest->peer = *p;
	oldest->failures = 0;
	return oldest;
}

static void on_auth_release(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	c->auth_held = 0;
	conn_resume(c);
}

void guard_auth_failed(struct conn *c)
{
	struct server *s = c->srv;
	int64_t now = tern_mono_ms(), delay = 0;
	struct peer_slot *e = peer_slot(s, &c->peer, now);
	char who[80];

	c->auth_failures++;
	if (e) {
		e->failures++;
		e->last_ms = now;
		if (s->cfg.auth_failure_delay_ms) {
			delay = s->cfg.auth_failure_delay_ms;
			for (uint32_t i = 1; i < e->failures && delay < AUTH_FAILURE_DELAY_MS_MAX; i++)
				delay *= 2;
			if (delay > AUTH_FAILURE_DELAY_MS_MAX)
				delay = AUTH_FAILURE_DELAY_MS_MAX;
		}
	}
	if (s->cfg.auth_max_failures && c->auth_failures >= s->cfg.auth_max_failures) {
		/* (the same words for every connection of a peer: repeats fold) */
		log_warn("closed a connection from %s after %u failed logins",
			 conn_peer_name(c, who, sizeof(who)), c->auth_failures);
		s->stats.auth_closed++;
		c->state = CONN_CLOSING;
	}
	if (delay && (c->auth_timer || (c->auth_timer = evtimer_new(s->base, on_auth_release, c)))) {
		struct timeval tv = { (time_t)(delay / 1000), (suseconds_t)(delay % 1000) * 1000 };

		s->stats.auth_delayed++;
		c->auth_held = 1;
		evtimer_add(c->auth_timer, &tv);
	}
}

void guard_peers_free(struct server *s)
{
	free(s->peers);
	s->peers = NULL;
}

/* ---- accepting when descriptors run out ---- */

/*
 * When accept fails (EMFILE, ENFILE, ENOBUFS, ENOMEM: the process or the
 * system is out of descriptors or memory) the listening socket stays
 * readable, so a level-triggered loop would retry at once, forever.  As
 * memcached does, the listener is disabled instead and a timer enables it
 * again after ACCEPT_PAUSE_MIN_MS, doubling while accept keeps failing up to
 * ACCEPT_PAUSE_MAX_MS; the connections waiting meanwhile stay in the
 * kernel's backlog and are accepted once descriptors are free.  The log
 * gets one line when accepting first fails, then one every
 * ACCEPT_REPORT_MS with the number of failures in that time, and one when
 * a whole period passed without a failure.
 */
#define ACCEPT_PAUSE_MIN_MS 10
#define ACCEPT_PAUSE_MAX_MS 100
#define ACCEPT_REPORT_MS 5000

struct accept_guard {
	struct accept_guard *next; /* the server's other listeners' */
	struct server *s;
	struct evconnlistener *l;
	struct event *resume_ev;   /* enables the listener again */
	struct event *report_ev;   /* the periodic report while failing */
	int64_t pause_ms;          /* the current pause; 0 = accepting */
	uint64_t failures;         /* since the last report */
	int err;                   /* the last failure's errno */
	int reporting;             /* report_ev is armed */
};

static void arm_ms(struct event *ev, int64_t ms)
{
	struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };

	evtimer_add(ev, &tv);
}

static struct accept_guard *guard_of(struct server *s, struct evconnlistener *l)
{
	struct accept_guard *g;

	for (g = s->accept_guard; g && g->l != l; g = g->next)
		;
	return g;
}

/* libevent calls it with the listener's callback argument: the server. */
static void on_accept_error(struct evconnlistener *l, void *arg)
{
	int err = EVUTIL_SOCKET_ERROR();
	struct accept_guard *g = guard_of(arg, l);

	evconnlistener_disable(l);
	if (!g)
		return; /* cannot happen: every listener with this callback has one */
	g->err = err;
	g->failures++;
	g->s->stats.listen_disabled_num++;
	g->pause_ms = g->pause_ms ? g->pause_ms * 2 : ACCEPT_PAUSE_MIN_MS;
	if (g->pause_ms > ACCEPT_PAUSE_MAX_MS)
		g->pause_ms = ACCEPT_PAUSE_MAX_MS;
	arm_ms(g->resume_ev, g->pause_ms);
	if (!g->reporting) {
		log_warn("cannot accept connections: %s (%u open); pausing accept, "
			 "retrying every %d to %d ms", strerror(err), g->s->nconns,
			 ACCEPT_PAUSE_MIN_MS, ACCEPT_PAUSE_MAX_MS);
		g->failures = 0;
		g->reporting = 1;
		arm_ms(g->report_ev, ACCEPT_REPORT_MS);
	}
}

static void on_accept_resume(evutil_socket_t fd, short what, void *arg)
{
	struct accept_guard *g = arg;

	if (!g->s->shutting_down)
		evconnlistener_enable(g->l);
}

static void on_accept_report(evutil_socket_t fd, short what, void *arg)
{
	struct accept_guard *g = arg;

	if (g->failures) {
		log_warn("accept failed %llu times in the last %d s: %s (%u open)",
			 (unsigned long long)g->failures, ACCEPT_REPORT_MS / 1000,
			 strerror(g->err), g->s->nconns);
		g->failures = 0;
		arm_ms(g->report_ev, ACCEPT_REPORT_MS);
		return;
	}
	log_info("accepting connections again");
	g->reporting = 0;
	g->pause_ms = 0;
}

static void guard_free(struct accept_guard *g)
{
	if (g->resume_ev)
		event_free(g->resume_ev);
	if (g->report_ev)
		event_free(g->report_ev);
	free(g);
}

int guard_listener_add(struct server *s, struct evconnlistener *l)
{
	struct accept_guard *g = calloc(1, sizeof(*g));

	if (!g)
		return TERN_ENOMEM;
	g->s = s;
	g->l = l;
	g->resume_ev = evtimer_new(s->base, on_accept_resume, g);
	g->report_ev = evtimer_new(s->base, on_accept_report, g);
	if (!g->resume_ev || !g->report_ev) {
		guard_free(g);
		return TERN_ENOMEM;
	}
	evconnlistener_set_error_cb(l, on_accept_error);
	g->next = s->accept_guard;
	s->accept_guard = g;
	return 0;
}

void guard_accepted(struct server *s, struct evconnlistener *l)
{
	struct accept_guard *g = guard_of(s, l);

	/* the pause starts again from its shortest at the next failure */
	if (g)
		g->pause_ms = 0;
}

void guard_listeners_free(struct server *s)
{
	while (s->accept_guard) {
		struct accept_guard *g = s->accept_guard;

		s->accept_guard = g->next;
		guard_free(g);
	}
}

/* The most the soft limit is raised to (the kernel's own default cap on
 * a process's descriptors, fs.nr_open). */
#define FD_LIMIT_RAISE_MAX ((rlim_t)1 << 20)

void guard_check_fd_limit(const struct server *s)
{
	struct rlimit rl;
	/* the listener, the loop's own, LMDB's and the log's, and room for
	 * queues' journals (a few each): a rough floor, not an account */
	const rlim_t reserve = 64;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return;
	/* The soft limit is often 1024 with a far higher hard one, left for
	 * programs that need more to raise (as systemd advises): a server
	 * with a descriptor per connection and per journal does.  ternd uses
	 * epoll, never select, so high descriptor numbers are fine. */
	if (rl.rlim_cur < rl.rlim_max && rl.rlim_cur < FD_LIMIT_RAISE_MAX) {
		struct rlimit up = rl;

		up.rlim_cur = rl.rlim_max < FD_LIMIT_RAISE_MAX ? rl.rlim_max : FD_LIMIT_RAISE_MAX;
		if (setrlimit(RLIMIT_NOFILE, &up) == 0) {
			log_debug("open-file limit raised from %llu to %llu",
				  (unsigned long long)rl.rlim_cur, (unsigned long long)up.rlim_cur);
			rl = up;
		}
	}
	if ((rlim_t)s->cfg.max_connections + reserve > rl.rlim_cur)
		log_warn("max_connections is %u but the process may open only %llu files "
			 "(ulimit -n): accepting will pause when they run out",
			 s->cfg.max_connections, (unsigned long long)rl.rlim_cur);
}
