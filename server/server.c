/*
 * server.c: the listener, timers, signals, reload and the server's
 * lifecycle.  Connections: conn.h; how a request reaches the operations:
 * front.h.
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
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "auth.h"
#include "conn.h"
#include "front.h"
#include "guard.h"
#include "ops.h"
#include "state.h"
#include "status.h"
#include "tls.h"
#include "metrics.h"
#include "notify.h"
#include "privs.h"
#include "../lib/log.h"

#define TICK_MS 50
#define SHUTDOWN_GRACE_MS 5000

static void on_durable(void *arg, uint64_t upto, int err)
{
	struct server *s = arg;

	/* moves first: their sources' records join this pass's batch */
	if (s->reg)
		qreg_durable(s->reg, upto, err);
	conn_durable(s, upto, err);
}

/* The settings of a queue the registry creates for a move (expire_to,
 * dead_letter target), as a client's first set would get them. */
static void queue_conf_for(void *arg, const char *name, struct queue_conf *out)
{
	struct server *s = arg;

	config_queue_conf(&s->cfg, name, out);
}

/* A new connection from a listener of kind: refused above
 * max_connections or max_handshakes (guard_admit) or while shutting
 * down, else accepted. */
static void accept_kind(struct server *s, struct evconnlistener *l, evutil_socket_t fd,
			const struct sockaddr *sa, int salen, enum conn_kind kind)
{
	if (s->shutting_down || !guard_admit(s, kind)) {
		static const char msg[] = "SERVER_ERROR too many connections\r\n";

		/* Best effort: the socket is fresh, the reply fits its buffer. */
		if (write(fd, msg, sizeof(msg) - 1) < 0) {
			/* nothing more to do: the connection is refused anyway */
		}
		s->stats.rejected_connections++;
		evutil_closesocket(fd);
		return;
	}
	guard_accepted(s, l);
	conn_accept(s, fd, sa, salen, kind);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd,
		      struct sockaddr *sa, int salen, void *arg)
{
	accept_kind(arg, l, fd, sa, salen, CONN_TCP);
}

static void on_accept_unix(struct evconnlistener *l, evutil_socket_t fd,
			   struct sockaddr *sa, int salen, void *arg)
{
	accept_kind(arg, l, fd, sa, salen, CONN_UNIX);
}

/* (a TLS connection's refusal is written in clear: it never shakes
 * hands, and a TLS client reports a protocol error) */
static void on_accept_tls(struct evconnlistener *l, evutil_socket_t fd,
			  struct sockaddr *sa, int salen, void *arg)
{
	accept_kind(arg, l, fd, sa, salen, CONN_TLS);
}

/* Reads the auth file of cfg and its [access] rules into *out (through
 * s's root reader, when there is one).  0 or an error with a message in
 * err. */
static int auth_read(struct server *s, const struct config *cfg, struct auth **out, char *err,
		     size_t errlen)
{
	struct privs_file f;
	int rc = privs_file_read(s->reader, cfg->auth_file, AUTH_FILE_MAX, &f, err, errlen);

	if (rc)
		return rc;
	if (f.mode & 0004)
		log_warn("auth file %s can be read by other users (mode %04o): chmod 600 it "
			 "(or 640 with a group of ternd's alone)", cfg->auth_file, f.mode & 0777);
	rc = auth_parse(f.data, f.len, cfg->auth_file, cfg->access, out, err, errlen);
	privs_file_free(&f);
	return rc;
}

/* Reads the TLS certificate and key of cfg into *out (as auth_read).  0
 * or an error with a message in err. */
static int tls_files_read(struct server *s, const struct config *cfg, struct tls_ctx **out,
		    char *err, size_t errlen)
{
	struct privs_file cert, key, ca = { NULL, 0, 0 };
	struct tls_pem pem = { cfg->tls_cert, cfg->tls_key, cfg->tls_ca, NULL, NULL, 0, 0,
			       NULL, 0, cfg->tls_client_optional };
	char why[600];
	int rc;

	rc = privs_file_read(s->reader, cfg->tls_cert, TLS_FILE_MAX, &cert, why, sizeof(why));
	if (rc) {
		snprintf(err, errlen, "TLS certificate %s", why);
		return rc;
	}
	rc = privs_file_read(s->reader, cfg->tls_key, TLS_FILE_MAX, &key, why, sizeof(why));
	if (rc) {
		snprintf(err, errlen, "TLS key %s", why);
		privs_file_free(&cert);
		return rc;
	}
	if (cfg->tls_ca[0] &&
	    (rc = privs_file_read(s->reader, cfg->tls_ca, TLS_FILE_MAX, &ca, why, sizeof(why)))) {
		snprintf(err, errlen, "TLS client CAs %s", why);
		privs_file_free(&cert);
		privs_file_free(&key);
		return rc;
	}
	pem.cert = cert.data;
	pem.cert_len = cert.len;
	pem.key = key.data;
	pem.key_len = key.len;
	pem.ca = ca.data;
	pem.ca_len = ca.len;
	rc = tls_ctx_new(&pem, out, err, errlen);
	privs_file_free(&cert);
	privs_file_free(&key);
	privs_file_free(&ca);
	return rc;
}

/*
 * Starts the root reader (privs.h) when ternd will become cfg.user and has
 * files to read again at reloads: the configuration file, the auth file,
 * the TLS certificate, key and client CAs.  0 or an error with a message in err.
 */
static int reader_start(struct server *s, char *err, size_t errlen)
{
	const struct config *c = &s->cfg;
	const char *paths[] = { c->path, c->auth_file, c->tls_listen[0] ? c->tls_cert : "",
				c->tls_listen[0] ? c->tls_key : "", c->tls_listen[0] ? c->tls_ca : "" };
	unsigned n = sizeof(paths) / sizeof(paths[0]), any = 0;
	struct privs p;
	int rc;

	for (unsigned i = 0; i < n; i++)
		any |= paths[i][0] != '\0';
	if (!c->user[0] || !any)
		return 0;
	if ((rc = privs_lookup(c->user, &p, err, errlen)) != 0 || !p.change)
		return rc;
	return privs_reader_start(paths, n, &s->reader, err, errlen);
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

/* config_each_changed's callback: says in the log that a [server] key the
 * file changed waits for a restart (arg: the running server). */
static void restart_needed(void *arg, const char *section, const char *key, const char *was,
			   const char *now)
{
	struct server *s = arg;

	if (config_key_reloads(section, key) || config_by_cli(&s->cfg, key))
		return; /* applied, or the command line's value wins */
	log_msg_unfolded(LOG_LEVEL_WARN,
			 "reload: %s = %s in %s needs a restart; running with %s = %s", key,
			 *now ? now : "(empty)", s->cfg.path, key, *was ? was : "(empty)");
}

/*
 * Rereads the config file and applies what a reload may change (the keys
 * config.c's table marks so: config_key_reloads; the log level keeps -v
 * as a floor under it), then the auth file with the [access] rights, and
 * the TLS certificate and key.  Everything new is read before anything
 * changes: on error (with "FILE:LINE: message" in err) the running
 * settings all stay.  A change to any other [server] key (addresses,
 * ports, data_dir, user, ...) waits for a restart, and the log names each
 * one the file changed.  The file is
 * read over the built-in defaults, as a restart would read it, so a key
 * removed from the file goes back to its default.  The confirmation is
 * logged unfolded (an operator waits for it).  Without a config file the
 * auth file (-Y) is reread.
 */
static int reload_apply(struct server *s, char *err, size_t errlen)
{
	struct reload_ctx x = { s };
	struct config n;
	const struct config *nc = &s->cfg;
	struct auth *na = NULL, *oa;
	struct tls_ctx *nt = NULL;
	struct privs_file f;
	enum queue_status old_status = s->cfg.status;
	char serr[600];
	int rc;

	config_defaults(&n);
	if (s->cfg.path[0]) {
		rc = privs_file_read(s->reader, s->cfg.path, CONFIG_FILE_MAX, &f, err, errlen);
		if (rc)
			return rc;
		rc = config_load_text(&n, s->cfg.path, f.data, f.len, err, errlen);
		privs_file_free(&f);
		if (rc)
			return rc;
		if (s->cfg.auth_file_forced) /* -Y wins over the file */
			memcpy(n.auth_file, s->cfg.auth_file, sizeof(n.auth_file));
		nc = &n;
	}
	if (!nc->auth_file[0] && nc->access) {
		snprintf(err, errlen, "[access] rights need an auth_file (or -Y)");
		rc = TERN_EINVAL;
		goto fail;
	}
	if ((rc = status_aliases_check(s, nc, err, errlen)) != 0)
		goto fail;
	if (nc->auth_file[0] && (rc = auth_read(s, nc, &na, err, errlen)) != 0)
		goto fail;
	if (s->tls_listener &&
	    (rc = tls_files_read(s, nc, &nt, err, errlen)) != 0)
		goto fail;
	if (nc == &n) {
		/* before anything changes: the keys it leaves as they are */
		if (config_each_changed(&s->cfg, &n, restart_needed, s))
			log_warn("reload: out of memory comparing the settings");
		config_reload_from(&s->cfg, &n);
		jenv_set_group_wait(s->env, n.group_wait_us);
		n.verbose = s->cfg.verbose;
		ops_set_log_level(s, config_log_level(&n), "reload");
	}
	notify_reloading();
	qreg_each(s->reg, reload_one, &x);
	if (status_reload(s, old_status, serr, sizeof(serr)))
		log_error("reload: statuses set by operators not saved: %s", serr);
	oa = s->auth;
	s->auth = na;
	front_auth_rebind(s);
	ops_rights_changed(s);
	auth_free(oa);
	if (nt) {
		/* sessions keep the certificate they started with */
		tls_ctx_free(s->tls_ctx);
		s->tls_ctx = nt;
	}
	log_msg_unfolded(LOG_LEVEL_INFO, "configuration reloaded%s%s",
			 s->cfg.path[0] ? " from " : "", s->cfg.path);
	return 0;
fail:
	auth_free(na);
	if (nc == &n)
		config_free(&n);
	return rc;
}

/*
 * A reload that fails leaves every running setting, the users and their
 * rights included, as they were: it must not go unseen.  Besides the
 * error in the log (the caller's), it is counted (stats reload_failures,
 * tern_reload_failures_total, tern_reload_ok) and shown by the service
 * manager (STATUS=) until a reload succeeds.
 */
static int server_reload(struct server *s, char *err, size_t errlen)
{
	int rc = reload_apply(s, err, errlen), was_ok = s->reload_ok;

	s->stats.reloads++;
	s->reload_ok = rc == 0;
	if (rc) {
		s->stats.reload_failures++;
		notify_status("reload failed, the previous configuration and users stay: %s", err);
	} else if (!was_ok) {
		notify_status("%s", s->status_line); /* the failure is over */
	}
	return rc;
}

void server_set_status_line(struct server *s, const char *line)
{
	snprintf(s->status_line, sizeof(s->status_line), "%s", line);
}

/* ---- timers, signals, shutdown ---- */

/* The heap kept for reuse (tern_heap_keep) goes back to the kernel once
 * the server has been idle, no byte read or written, SERVER_HEAP_IDLE_MS:
 * the memory of a burst of large messages is not held for good. */
static void heap_idle_check(struct server *s, int64_t mono_ms)
{
	uint64_t moved = server_moved(s);

	if (moved != s->heap_moved) {
		s->heap_moved = moved;
		s->heap_busy_ms = mono_ms;
		s->heap_used = 1;
	} else if (s->heap_used && mono_ms - s->heap_busy_ms >= SERVER_HEAP_IDLE_MS) {
		tern_heap_trim();
		s->heap_used = 0;
	}
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
	struct server *s = arg;
	int64_t mono_ms = tern_mono_ms();

	qreg_tick(s->reg, tern_now_ms(), mono_ms);
	guard_handshake_tick(s, mono_ms);
	heap_idle_check(s, mono_ms);
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

/* Stops accepting, answers what was received, then stops the loop (the
 * signals, and the shutdown command through s->hooks). */
static void server_begin_shutdown(struct server *s)
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
	if (s->unix_listener)
		evconnlistener_disable(s->unix_listener);
	if (s->tls_listener)
		evconnlistener_disable(s->tls_listener);
	/* Requests already received are answered; waiting gets end now (END)
	 * and nothing new is read. */
	for (c = s->conns; c; c = c->next) {
		conn_update_read(c);
		conn_wait_cancel(c);
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
			log_msg_unfolded(LOG_LEVEL_ERROR, "reload failed: %s", err);
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

/* Binds a TCP listener on host:port calling cb; *bound gets the port
 * (useful with port 0).  what names it in an error. */
static int bind_tcp(struct server *s, const char *host, int port, evconnlistener_cb cb,
		    struct evconnlistener **out, int *bound, const char *what, char *err,
		    size_t errlen)
{
	struct addrinfo hints, *res = NULL;
	char pstr[16];
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int rc;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	snprintf(pstr, sizeof(pstr), "%d", port);
	rc = getaddrinfo(host, pstr, &hints, &res);
	if (rc != 0 || !res) {
		snprintf(err, errlen, "cannot resolve %s address %s: %s", what, host,
			 gai_strerror(rc));
		return TERN_EINVAL;
	}
	*out = evconnlistener_new_bind(s->base, cb, s,
		LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
		1024, res->ai_addr, (int)res->ai_addrlen);
	freeaddrinfo(res);
	if (!*out) {
		snprintf(err, errlen, "cannot listen%s%s on %s:%d: %s", *what ? " for " : "", what,
			 host, port, strerror(errno));
		return TERN_ESYS;
	}
	if (guard_listener_add(s, *out)) {
		snprintf(err, errlen, "out of memory");
		return TERN_ENOMEM;
	}
	if (getsockname(evconnlistener_get_fd(*out), (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET)
			*bound = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		else
			*bound = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	}
	return 0;
}

/* Whether a server answers on the Unix socket at sa. */
static int unix_in_use(const struct sockaddr_un *sa)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), used;

	if (fd < 0)
		return 0;
	used = connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0;
	close(fd);
	return used;
}

/*
 * Listens on the Unix socket unix_socket with unix_socket_mode (set while
 * it is created, so no other mode is ever seen).  A socket left at the
 * path by an earlier run is replaced; one a live server answers on, or
 * anything that is not a socket, is an error.
 */
static int bind_unix(struct server *s, char *err, size_t errlen)
{
	const char *path = s->cfg.unix_socket;
	mode_t mode = (mode_t)s->cfg.unix_socket_mode, old;
	struct sockaddr_un sa;
	struct stat st;
	int e;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "unix socket path too long: %s", path);
		return TERN_EINVAL;
	}
	strcpy(sa.sun_path, path);
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "cannot listen on unix socket %s: it exists and is "
				 "not a socket", path);
			return TERN_EINVAL;
		}
		if (unix_in_use(&sa)) {
			snprintf(err, errlen, "cannot listen on unix socket %s: another server "
				 "listens on it", path);
			return TERN_EINVAL;
		}
		unlink(path);
	}
	old = umask(~mode & 0777);
	s->unix_listener = evconnlistener_new_bind(s->base, on_accept_unix, s,
		LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 1024,
		(struct sockaddr *)&sa, (int)sizeof(sa));
	e = errno;
	umask(old);
	if (!s->unix_listener) {
		snprintf(err, errlen, "cannot listen on unix socket %s: %s", path, strerror(e));
		return TERN_ESYS;
	}
	s->unix_made = 1;
	if (guard_listener_add(s, s->unix_listener)) {
		snprintf(err, errlen, "out of memory");
		return TERN_ENOMEM;
	}
	if (chmod(path, mode) < 0) {
		snprintf(err, errlen, "cannot set the mode of unix socket %s: %s", path,
			 strerror(errno));
		return TERN_ESYS;
	}
	return 0;
}

/* Every listener the configuration asks for: TCP, the Unix socket, TLS,
 * metrics. */
static int bind_all(struct server *s, char *err, size_t errlen)
{
	const struct config *c = &s->cfg;
	char host[256];
	int port, rc;

	if (c->port != CONFIG_PORT_OFF &&
	    (rc = bind_tcp(s, c->listen, c->port, on_accept, &s->listener, &s->port, "",
			   err, errlen)) != 0)
		return rc;
	if (c->unix_socket[0] && (rc = bind_unix(s, err, errlen)) != 0)
		return rc;
	if (c->tls_listen[0]) {
		if (!c->tls_cert[0] || !c->tls_key[0]) {
			snprintf(err, errlen, "tls_listen needs tls_cert and tls_key");
			return TERN_EINVAL;
		}
		if ((rc = tls_files_read(s, c, &s->tls_ctx, err, errlen)) != 0)
			return rc;
		if (config_parse_hostport(c->tls_listen, host, sizeof(host), &port) ||
		    (rc = bind_tcp(s, host, port, on_accept_tls, &s->tls_listener, &s->tls_port,
				   "TLS", err, errlen)) != 0)
			return rc ? rc : TERN_EINVAL;
	}
	if (c->metrics_listen[0]) {
		if (config_parse_hostport(c->metrics_listen, host, sizeof(host), &port))
			return TERN_EINVAL;
		if ((rc = metrics_start(s, host, port, &s->metrics, err, errlen)) != 0)
			return rc;
		s->metrics_port = metrics_port(s->metrics);
	}
	if (!s->listener && !s->unix_listener && !s->tls_listener) {
		snprintf(err, errlen, "no listener: port = off needs unix_socket or tls_listen");
		return TERN_EINVAL;
	}
	return 0;
}

/* What ternd puts at the top of a data directory: the journal's lock file,
 * catalog and queues (journal.c), the status file and the one written to
 * replace it (status.c), and lost+found when it is a file system of its
 * own.  A directory holding anything else is not given to -u's user. */
static const char *const data_names[] = {
	JENV_LOCK_NAME, "catalog", "queues", "status", "status.new", "lost+found",
};

/* Becomes cfg.user, once the sockets are bound and the keys read, giving
 * it the data directory first (privs.h). */
static int drop_privileges(struct server *s, char *err, size_t errlen)
{
	struct privs p;
	unsigned long changed;
	int rc;

	if (!s->cfg.user[0]) {
		/* warned, not refused (memcached refuses): containers and
		 * tests run as root */
		if (geteuid() == 0)
			log_warn("running as root: every client that gets in acts as root's "
				 "process; -u USER (or user = USER) runs ternd as another user "
				 "once its sockets are bound");
		return 0;
	}
	if ((rc = privs_lookup(s->cfg.user, &p, err, errlen)) != 0 || !p.change)
		return rc;
	if ((rc = privs_give_dir(&p, s->cfg.data_dir, data_names,
				 sizeof(data_names) / sizeof(data_names[0]), JENV_LOCK_NAME,
				 &changed, err, errlen)) != 0)
		return rc;
	if (changed)
		log_info("data directory %s given to user %s (%lu files and directories)",
			 s->cfg.data_dir, p.name, changed);
	if (s->unix_made && lchown(s->cfg.unix_socket, p.uid, p.gid) < 0) {
		snprintf(err, errlen, "cannot give unix socket %s to user %s: %s",
			 s->cfg.unix_socket, p.name, strerror(errno));
		return TERN_ESYS;
	}
	if ((rc = privs_drop(&p, err, errlen)) != 0)
		return rc;
	log_info("running as user %s (uid %ld, gid %ld)", p.name, (long)p.uid, (long)p.gid);
	return 0;
}

/* Warns when users other than ternd's may enter the data directory: the
 * files in it are created for ternd's user alone (TERN_FILE_MODE), but
 * older ones, or ones copied in, may not be. */
static void data_dir_check(const char *dir)
{
	struct stat st;

	if (stat(dir, &st) == 0 && (st.st_mode & 0077))
		log_warn("data directory %s is open to other users (mode %04o): the messages "
			 "in it are readable by them unless every file is private; chmod 700 it",
			 dir, (unsigned)(st.st_mode & 07777));
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
	s->text_fe = &front_text;
	s->binary_fe = &front_binary;
	s->hooks.shutdown = server_begin_shutdown;
	s->hooks.reload = server_reload;
	s->started_ms = tern_mono_ms();
	s->started_wall_ms = tern_now_ms();
	s->base = event_base_new();
	if (!s->base) {
		snprintf(err, errlen, "cannot create the event loop");
		rc = TERN_ENOMEM;
		goto fail;
	}
	/* before the sockets and the journals: each takes descriptors */
	guard_check_fd_limit(s);
	/* What may need root comes first: the root reader, which reads the
	 * auth file and TLS files again at reloads (privs.h), the auth file
	 * and TLS key (often readable by root only), the sockets (a port
	 * below 1024); then ternd becomes its user, before it opens any
	 * journal, so every file it creates is the user's. */
	s->reload_ok = 1;
	if ((rc = reader_start(s, err, errlen)) != 0)
		goto fail;
	if (cfg->auth_file[0] &&
	    (rc = auth_read(s, cfg, &s->auth, err, errlen)) != 0)
		goto fail;
	if (!cfg->auth_file[0] && cfg->access) {
		snprintf(err, errlen, "[access] rights need an auth_file (or -Y)");
		rc = TERN_EINVAL;
		goto fail;
	}
	rc = bind_all(s, err, errlen);
	if (rc)
		goto fail;
	rc = drop_privileges(s, err, errlen);
	if (rc)
		goto fail;
	rc = jenv_open(cfg->data_dir, s->base, on_durable, s, &s->env);
	if (rc) {
		int e = errno;

		snprintf(err, errlen, "cannot open data directory %s: %s%s%s%s", cfg->data_dir,
			 rc == TERN_ESYS ? strerror(e) : tern_strerror(rc),
			 rc == TERN_ESYS && e == EACCES && cfg->user[0] ? " (as user " : "",
			 rc == TERN_ESYS && e == EACCES && cfg->user[0] ? cfg->user : "",
			 rc == TERN_ESYS && e == EACCES && cfg->user[0]
				 ? ": each directory above it must let that user in)" : "");
		goto fail;
	}
	jenv_set_group_wait(s->env, cfg->group_wait_us);
	data_dir_check(cfg->data_dir);
	rc = qreg_new(s->env, &s->reg);
	if (rc == 0)
		qreg_set_conf_fn(s->reg, queue_conf_for, s);
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
	if ((rc = status_aliases_check(s, cfg, err, errlen)) != 0)
		goto fail;
	s->status = cfg->status;
	if ((rc = status_load(s, err, errlen)) != 0)
		goto fail;
	if (cfg->max_queues && qreg_count(s->reg) > cfg->max_queues)
		log_warn("the data directory holds %u queues, more than max_queues (%u): "
			 "all are open, and clients can create no more",
			 qreg_count(s->reg), cfg->max_queues);
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
	/* what recovery freed counts as used: trimmed once idle */
	s->heap_used = 1;
	s->heap_busy_ms = tern_mono_ms();
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
	return s->listener ? s->port : -1;
}

int server_tls_port(struct server *s)
{
	return s->tls_listener ? s->tls_port : -1;
}

int server_metrics_port(struct server *s)
{
	return s->metrics ? s->metrics_port : -1;
}

/*
 * The event loop.  With poll_us > 0 it polls (epoll_wait with no timeout)
 * instead of sleeping for poll_us after a pass that read one socket, as
 * long as the journal's threads have nothing to do: requests that arrive
 * meanwhile are picked up without waking a sleeping thread.  In a VM that
 * wake-up is a kick of a halted vCPU, which can cost more than a request's
 * own work.  The price is a busy core while clients keep coming within
 * poll_us; an idle server sleeps.
 * - One client, one request at a time: its next request comes as soon as
 *   it has the reply.
 * - One client pipelining: its next batch comes once it has read these
 *   replies; the loop spins through that turnaround, which costs about
 *   what the wake-up would (the CPU per message is the same either way),
 *   and the client gets the replies to its next batch that much sooner.
 * - Several sockets read: it sleeps at once.  With several clients active
 *   the wake-up is shared by the requests that arrive meanwhile, while
 *   polling would run a pass (an epoll_wait, a journal hand-off) for every
 *   one or two.
 * Each pass is one event_base_loop run between tern_pass_begin and
 * tern_pass_end: its requests share one reading of each clock.
 */
int server_run(struct server *s)
{
	int64_t poll_us = s->cfg.poll_us, last = INT64_MIN / 2;
	uint64_t seen = s->reads;
	int rc = 0;

	while (!rc && !event_base_got_break(s->base) && !event_base_got_exit(s->base)) {
		int64_t now = poll_us ? tern_mono_us() : 0;

		if (s->reads - seen == 1)
			last = now; /* one client: its next requests come soon */
		else if (s->reads != seen)
			last = INT64_MIN / 2; /* several clients */
		seen = s->reads;
		/* one client alone: no other connection sent in the last pass
		 * (and none does in this one: conn.c) */
		jenv_set_solo(s->env, !s->reader_switched);
		s->reader_switched = 0;
		if (now - last < poll_us && !jenv_background_busy(s->env)) {
			s->stats.loop_polls++;
			tern_pass_begin(now); /* the pass runs now: no wait */
			rc = event_base_loop(s->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
		} else {
			tern_pass_begin(-1);
			rc = event_base_loop(s->base, EVLOOP_ONCE);
		}
		tern_pass_end();
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
	/* Moves in flight (dead letters made by the connections just closed,
	 * or before): the loop runs until their targets' writes are reported,
	 * so that their sources record them gone before the journals close;
	 * otherwise a restart would find them in both queues.  Bounded: the
	 * tick wakes the loop every TICK_MS. */
	for (i = 0; i < 200 && s->reg && s->base && qreg_moves_pending(s->reg); i++)
		event_base_loop(s->base, EVLOOP_ONCE);
	guard_listeners_free(s);
	if (s->listener)
		evconnlistener_free(s->listener);
	if (s->unix_listener)
		evconnlistener_free(s->unix_listener);
	if (s->unix_made)
		unlink(s->cfg.unix_socket); /* (may fail once the user changed) */
	if (s->tls_listener)
		evconnlistener_free(s->tls_listener);
	metrics_free(s->metrics);
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
	tls_ctx_free(s->tls_ctx);
	auth_free(s->auth);
	guard_peers_free(s);
	privs_reader_stop(s->reader);
	for (i = 0; i < s->nspare; i++)
		evbuffer_free(s->spare_bufs[i]);
	free(s->spare_bufs);
	if (s->base)
		event_base_free(s->base);
	config_free(&s->cfg);
	free(s);
}
