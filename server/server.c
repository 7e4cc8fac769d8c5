/*
 * server.c: the listener, timers, signals, reload and the server's
 * lifecycle.  Connections and what they run: conn.h.
 */
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn.h"
#include "notify.h"
#include "../lib/log.h"

#define TICK_MS 50
#define SHUTDOWN_GRACE_MS 5000

static void on_durable(void *arg, uint64_t upto, int err)
{
	conn_durable(arg, upto, err);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd,
		      struct sockaddr *sa, int salen, void *arg)
{
	struct server *s = arg;

	if (s->nconns >= s->cfg.max_connections || s->shutting_down) {
		static const char msg[] = "SERVER_ERROR too many connections\r\n";

		/* Best effort: the socket is fresh, the reply fits its buffer. */
		if (write(fd, msg, sizeof(msg) - 1) < 0) {
			/* nothing more to do: the connection is refused anyway */
		}
		s->rejected_connections++;
		evutil_closesocket(fd);
		return;
	}
	guard_accepted(s, l);
	conn_accept(s, fd);
}

struct reload_ctx {
	struct server *s;
};

static void reload_one(struct queue *q, void *arg)
{
	struct server *s = ((struct reload_ctx *)arg)->s;
	struct queue_conf qc;

	config_queue_conf(&s->cfg, queue_name(q), &qc);
	queue_set_conf(q, &qc);
}

/* Rereads queue settings from the config file (conn.h).  Returns 0 or an error with
 * "FILE:LINE: message" in err.  Server-level settings (listen, port,
 * data_dir) need a restart and are kept. */
int server_reload(struct server *s, char *err, size_t errlen)
{
	struct reload_ctx x = { s };
	struct config n;
	int rc;

	if (s->cfg.path[0]) {
		n = s->cfg;
		rc = config_load(&n, s->cfg.path, err, errlen);
		if (rc)
			return rc;
		/* Only queue settings change on reload. */
		s->cfg.qdefault = n.qdefault;
		s->cfg.overrides = n.overrides;
		s->cfg.enable_shutdown = n.enable_shutdown;
		s->cfg.request_timeout_s = n.request_timeout_s;
		s->cfg.max_queues = n.max_queues;
		s->cfg.auto_create = n.auto_create;
	}
	notify_reloading();
	qreg_each(s->reg, reload_one, &x);
	log_info("configuration reloaded");
	return 0;
}

/* ---- timers, signals, shutdown ---- */

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
	struct server *s = arg;

	qreg_tick(s->reg, tern_now_ms(), tern_mono_ms());
}

static int all_flushed(struct server *s)
{
	struct conn *c;

	for (c = s->conns; c; c = c->next)
		if (conn_busy(c))
			return 0;
	return 1;
}

static void on_stop_check(evutil_socket_t fd, short what, void *arg)
{
	struct server *s = arg;
	struct timeval tv = { 0, 20 * 1000 };

	if (!all_flushed(s) && tern_mono_ms() < s->shutdown_deadline) {
		evtimer_add(s->stop_ev, &tv);
		return;
	}
	while (s->conns)
		conn_free(s->conns);
	event_base_loopbreak(s->base);
}

void server_begin_shutdown(struct server *s)
{
	struct conn *c;
	struct timeval tv = { 0, 0 };

	if (s->shutting_down)
		return;
	s->shutting_down = 1;
	notify_stopping();
	s->shutdown_deadline = tern_mono_ms() + SHUTDOWN_GRACE_MS;
	if (s->listener)
		evconnlistener_disable(s->listener);
	/* Requests already received are answered; waiting gets end now (END)
	 * and nothing new is read. */
	for (c = s->conns; c; c = c->next) {
		conn_update_read(c);
		if (c->state == CONN_WAIT) {
			queue_unwait(&c->waiter);
			ops_wait_end(c, NULL);
		}
		conn_resume(c);
	}
	evtimer_add(s->stop_ev, &tv);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	struct server *s = arg;

	if (sig == SIGHUP) {
		char err[600];

		if (server_reload(s, err, sizeof(err)))
			log_error("reload failed: %s", err);
		return;
	}
	log_info("signal %d, shutting down", (int)sig);
	server_begin_shutdown(s);
}

/* ---- lifecycle ---- */

struct reopen_ctx {
	struct server *s;
	int rc;
	char name[PROTO_NAME_MAX + 1];
};

static void reopen_queue(void *arg, const char *name)
{
	struct reopen_ctx *x = arg;
	struct queue_conf qc;
	struct queue *q;
	int rc;

	if (x->rc)
		return;
	config_queue_conf(&x->s->cfg, name, &qc);
	rc = qreg_get(x->s->reg, name, strlen(name), &qc, &q);
	if (rc) {
		x->rc = rc;
		snprintf(x->name, sizeof(x->name), "%s", name);
	}
}

static int bind_listener(struct server *s, char *err, size_t errlen)
{
	struct addrinfo hints, *res = NULL;
	char port[16];
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int rc;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	snprintf(port, sizeof(port), "%d", s->cfg.port);
	rc = getaddrinfo(s->cfg.listen, port, &hints, &res);
	if (rc != 0 || !res) {
		snprintf(err, errlen, "cannot resolve listen address %s: %s",
			 s->cfg.listen, gai_strerror(rc));
		return TERN_EINVAL;
	}
	s->listener = evconnlistener_new_bind(s->base, on_accept, s,
		LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
		1024, res->ai_addr, (int)res->ai_addrlen);
	freeaddrinfo(res);
	if (!s->listener) {
		snprintf(err, errlen, "cannot listen on %s:%d: %s", s->cfg.listen,
			 s->cfg.port, strerror(errno));
		return TERN_ESYS;
	}
	if (guard_listener_add(s, s->listener)) {
		snprintf(err, errlen, "out of memory");
		return TERN_ENOMEM;
	}
	if (getsockname(evconnlistener_get_fd(s->listener), (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET)
			s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		else
			s->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	}
	return 0;
}

int server_new(const struct config *cfg, struct server **out, char *err, size_t errlen)
{
	struct server *s = calloc(1, sizeof(*s));
	struct reopen_ctx x;
	struct timeval tick = { 0, TICK_MS * 1000 };
	int rc;

	if (!s) {
		snprintf(err, errlen, "out of memory");
		return TERN_ENOMEM;
	}
	s->cfg = *cfg;
	s->started_ms = tern_mono_ms();
	s->base = event_base_new();
	if (!s->base) {
		snprintf(err, errlen, "cannot create the event loop");
		rc = TERN_ENOMEM;
		goto fail;
	}
	/* before the journals: each queue recovered takes descriptors */
	guard_check_fd_limit(s);
	rc = jenv_open(cfg->data_dir, s->base, on_durable, s, &s->env);
	if (rc) {
		snprintf(err, errlen, "cannot open data directory %s: %s",
			 cfg->data_dir, tern_strerror(rc));
		goto fail;
	}
	rc = qreg_new(s->env, &s->reg);
	if (rc) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	memset(&x, 0, sizeof(x));
	x.s = s;
	rc = jenv_catalog_list(s->env, reopen_queue, &x);
	if (rc || x.rc) {
		rc = rc ? rc : x.rc;
		snprintf(err, errlen, "cannot recover queue %s: %s", x.name,
			 tern_strerror(rc));
		goto fail;
	}
	if (cfg->max_queues && qreg_count(s->reg) > cfg->max_queues)
		log_warn("the data directory holds %u queues, more than max_queues (%u): "
			 "all are open, and clients can create no more",
			 qreg_count(s->reg), cfg->max_queues);
	rc = bind_listener(s, err, errlen);
	if (rc)
		goto fail;
	s->tick_ev = event_new(s->base, -1, EV_PERSIST, on_tick, s);
	s->stop_ev = evtimer_new(s->base, on_stop_check, s);
	s->sig_term = evsignal_new(s->base, SIGTERM, on_signal, s);
	s->sig_int = evsignal_new(s->base, SIGINT, on_signal, s);
	s->sig_hup = evsignal_new(s->base, SIGHUP, on_signal, s);
	if (!s->tick_ev || !s->stop_ev || !s->sig_term || !s->sig_int || !s->sig_hup) {
		snprintf(err, errlen, "out of memory");
		rc = TERN_ENOMEM;
		goto fail;
	}
	event_add(s->tick_ev, &tick);
	event_add(s->sig_term, NULL);
	event_add(s->sig_int, NULL);
	event_add(s->sig_hup, NULL);
	if (notify_attach(s->base)) {
		snprintf(err, errlen, "cannot arm the watchdog timer");
		rc = TERN_ENOMEM;
		goto fail;
	}
	*out = s;
	return 0;
fail:
	server_free(s);
	return rc;
}

int server_port(struct server *s)
{
	return s->port;
}

/*
 * The event loop.  With poll_us > 0 it polls (epoll_wait with no timeout)
 * instead of sleeping for poll_us after the last read, as long as the
 * journal's threads have nothing to do: a request that arrives meanwhile
 * is picked up without waking a sleeping thread.  In a VM that wake-up is
 * a kick of a halted vCPU, which can cost more than the request's own
 * work.  The price is a busy core while clients keep coming within
 * poll_us; an idle server sleeps.
 */
int server_run(struct server *s)
{
	int64_t poll_us = s->cfg.poll_us, last = INT64_MIN / 2;
	uint64_t seen = s->reads;
	int rc = 0;

	if (!poll_us) {
		event_base_dispatch(s->base);
		return 0;
	}
	while (!rc && !event_base_got_break(s->base) && !event_base_got_exit(s->base)) {
		int64_t now = tern_mono_us();

		if (s->reads != seen) { /* the last pass read something */
			seen = s->reads;
			last = now;
		}
		if (now - last < poll_us && !jenv_background_busy(s->env)) {
			s->loop_polls++;
			rc = event_base_loop(s->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
		} else {
			rc = event_base_loop(s->base, EVLOOP_ONCE);
		}
	}
	return rc < 0 ? TERN_ESYS : 0;
}

void server_free(struct server *s)
{
	unsigned i;

	if (!s)
		return;
	while (s->conns)
		conn_free(s->conns);
	guard_listeners_free(s);
	if (s->listener)
		evconnlistener_free(s->listener);
	/* Queues first (each journal checkpoints and closes), then the
	 * environment (syncs, stops the writer, closes LMDB). */
	qreg_free(s->reg);
	if (s->env)
		jenv_close(s->env);
	if (s->tick_ev)
		event_free(s->tick_ev);
	if (s->stop_ev)
		event_free(s->stop_ev);
	if (s->sig_term)
		event_free(s->sig_term);
	if (s->sig_int)
		event_free(s->sig_int);
	if (s->sig_hup)
		event_free(s->sig_hup);
	for (i = 0; i < s->nspare; i++)
		evbuffer_free(s->spare_bufs[i]);
	free(s->spare_bufs);
	if (s->base)
		event_base_free(s->base);
	config_free(&s->cfg);
	free(s);
}
