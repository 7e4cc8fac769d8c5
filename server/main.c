/*
 * main.c: ternd's command line, logging set-up and service-manager reports.
 * Options override the config file.
 */
#include <event2/event.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/log.h"
#include "../lib/tern.h"
#include "config.h"
#include "notify.h"
#include "server.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ternd [-c FILE] [-p PORT] [-l ADDR] [-d DATADIR] [-s PATH] [-a MODE]\n"
		"             [-u USER] [-Y FILE] [--metrics-listen ADDR:PORT] [--sync MODE]\n"
		"             [-v[v]] [-S] [--dump-config] [-h] [--version]\n"
		"  -c, --config FILE   configuration file (INI; see ternd.conf(5))\n"
		"  -p, --port PORT     TCP port (default 22133; 0 = any free port; off = none)\n"
		"  -l, --listen ADDR   address to listen on (default 127.0.0.1)\n"
		"  -d, --data-dir DIR  data directory (default ./data)\n"
		"  -s, --unix-socket PATH\n"
		"                      listen on a Unix socket too (with -p off: only)\n"
		"  -a, --unix-socket-mode MODE\n"
		"                      the Unix socket's permission bits, octal (default 0700)\n"
		"  -u, --user USER     run as USER once the sockets are bound (as root)\n"
		"  -Y, --auth-file FILE\n"
		"                      require authentication: user:password lines\n"
		"      --metrics-listen ADDR:PORT\n"
		"                      serve Prometheus metrics at http://ADDR:PORT/metrics\n"
		"      --sync MODE     journal sync mode for every queue: none, interval,\n"
		"                      always or odsync (overrides the config file)\n"
		"  -v, --verbose       log at least at level info; twice (-vv): debug\n"
		"  -S, --syslog        log to syslog instead of stderr\n"
		"      --dump-config   print the effective configuration and exit\n"
		"  -h, --help          this text\n"
		"      --version       print the version\n");
}

/* libevent's own messages (a failing epoll_wait, a bad fd) join the log. */
static void on_libevent_log(int severity, const char *msg)
{
	static const enum log_level map[] = {
		[EVENT_LOG_DEBUG] = LOG_LEVEL_DEBUG,
		[EVENT_LOG_MSG] = LOG_LEVEL_INFO,
		[EVENT_LOG_WARN] = LOG_LEVEL_WARN,
		[EVENT_LOG_ERR] = LOG_LEVEL_ERROR,
	};

	log_msg(severity >= 0 && severity <= EVENT_LOG_ERR ? map[severity] : LOG_LEVEL_ERROR,
		"libevent: %s", msg);
}

/* Collects one section's settings into one log line. */
struct summary {
	char section[8 + TERN_NAME_MAX];
	char line[LOG_LINE_MAX - 64];
	size_t len;
};

static void summary_flush(struct summary *s)
{
	if (s->section[0])
		log_info("config [%s]%s", s->section, s->line);
	s->len = 0;
	s->line[0] = 0;
}

static void summary_add(void *arg, const char *section, const char *key, const char *value)
{
	struct summary *s = arg;
	int n;

	if (strcmp(section, s->section)) {
		summary_flush(s);
		snprintf(s->section, sizeof(s->section), "%s", section);
	}
	if (!key)
		return; /* a [queue NAME] section without keys */
	n = snprintf(s->line + s->len, sizeof(s->line) - s->len, " %s=%s", key, value);
	if (n > 0 && s->len + (size_t)n < sizeof(s->line))
		s->len += (size_t)n;
	else
		s->line[s->len] = 0; /* a setting that does not fit is left out whole */
}

/* The effective configuration at info, one line per section. */
static void log_config(const struct config *cfg)
{
	struct summary s;

	if (!log_enabled(LOG_LEVEL_INFO))
		return;
	memset(&s, 0, sizeof(s));
	if (cfg->path[0])
		log_info("config file %s", cfg->path);
	else
		log_info("no config file: built-in defaults");
	config_each(cfg, summary_add, &s);
	summary_flush(&s);
}

/* One line per listener; the TCP one last ("ternd listening on ADDR:PORT"
 * tells that every listener is up).  ready gets the first for the service
 * manager's status. */
static void log_listeners(const struct config *cfg, struct server *srv, char *ready,
			  size_t len)
{
	char host[256];
	int port;

	ready[0] = '\0';
	if (server_tls_port(srv) >= 0 &&
	    config_parse_hostport(cfg->tls_listen, host, sizeof(host), &port) == 0) {
		log_info("ternd listening for TLS on %s:%d", host, server_tls_port(srv));
		snprintf(ready, len, "listening for TLS on %s:%d", host, server_tls_port(srv));
	}
	if (server_metrics_port(srv) >= 0 &&
	    config_parse_hostport(cfg->metrics_listen, host, sizeof(host), &port) == 0)
		log_info("metrics at http://%s%s%s:%d/metrics", strchr(host, ':') ? "[" : "", host,
			 strchr(host, ':') ? "]" : "", server_metrics_port(srv));
	if (cfg->unix_socket[0]) {
		log_info("ternd listening on unix socket %s (mode %04o)", cfg->unix_socket,
			 (unsigned)cfg->unix_socket_mode);
		snprintf(ready, len, "listening on unix socket %s", cfg->unix_socket);
	}
	if (server_port(srv) >= 0) {
		log_info("ternd listening on %s:%d", cfg->listen, server_port(srv));
		snprintf(ready, len, "listening on %s:%d", cfg->listen, server_port(srv));
	}
}

int main(int argc, char **argv)
{
	enum { O_SYNC = 256, O_VERSION, O_DUMP, O_METRICS };
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "port", required_argument, NULL, 'p' },
		{ "listen", required_argument, NULL, 'l' },
		{ "data-dir", required_argument, NULL, 'd' },
		{ "unix-socket", required_argument, NULL, 's' },
		{ "unix-socket-mode", required_argument, NULL, 'a' },
		{ "user", required_argument, NULL, 'u' },
		{ "auth-file", required_argument, NULL, 'Y' },
		{ "metrics-listen", required_argument, NULL, O_METRICS },
		{ "sync", required_argument, NULL, O_SYNC },
		{ "verbose", no_argument, NULL, 'v' },
		{ "syslog", no_argument, NULL, 'S' },
		{ "dump-config", no_argument, NULL, O_DUMP },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, O_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	const char *conf = NULL, *port = NULL, *listen = NULL, *dir = NULL, *sync = NULL;
	const char *usock = NULL, *umode = NULL, *user = NULL, *authf = NULL, *metrics = NULL;
	struct config cfg;
	struct log_opts lo;
	struct server *srv = NULL;
	char err[1024];
	int ch, verbose = 0, use_syslog = 0, dump = 0, rc, heap_kept;

	/* This thread runs the event loop.  The hooks go in before any other
	 * libevent call: libevent must free only what they allocated. */
	tern_block_keep();
	heap_kept = tern_heap_keep() == 0;
	event_set_mem_functions(tern_sized_alloc, tern_sized_realloc, tern_sized_free);
	while ((ch = getopt_long(argc, argv, "c:p:l:d:s:a:u:Y:vSh", opts, NULL)) != -1) {
		switch (ch) {
		case 'c': conf = optarg; break;
		case 'p': port = optarg; break;
		case 'l': listen = optarg; break;
		case 'd': dir = optarg; break;
		case 's': usock = optarg; break;
		case 'a': umode = optarg; break;
		case 'u': user = optarg; break;
		case 'Y': authf = optarg; break;
		case O_METRICS: metrics = optarg; break;
		case O_SYNC: sync = optarg; break;
		case 'v': verbose++; break;
		case 'S': use_syslog = 1; break;
		case O_DUMP: dump = 1; break;
		case 'h': usage(stdout); return 0;
		case O_VERSION: printf("ternd %s\n", TERN_VERSION); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "ternd: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	/* Until log_open() below, records go to stderr at level info. */
	config_defaults(&cfg);
	if (conf && config_load(&cfg, conf, err, sizeof(err)) != 0) {
		log_error("%s", err);
		return 1;
	}
	if (port && !strcmp(port, "off")) {
		cfg.port = CONFIG_PORT_OFF;
	} else if (port) {
		char *end;
		long v = strtol(port, &end, 10);

		if (!*port || *end || v < 0 || v > 65535) {
			log_error("bad port '%s' (0..65535 or off)", port);
			goto fail_cfg;
		}
		cfg.port = (int)v;
	}
	if (port)
		config_set_by_cli(&cfg, "port");
	if (usock && snprintf(cfg.unix_socket, sizeof(cfg.unix_socket), "%s", usock) >=
			     (int)sizeof(cfg.unix_socket)) {
		log_error("unix socket path too long: %s", usock);
		goto fail_cfg;
	}
	if (usock)
		config_set_by_cli(&cfg, "unix_socket");
	if (umode && config_parse_mode(umode, &cfg.unix_socket_mode)) {
		log_error("bad unix socket mode '%s' (octal, 0000..0777)", umode);
		goto fail_cfg;
	}
	if (umode)
		config_set_by_cli(&cfg, "unix_socket_mode");
	if (user && snprintf(cfg.user, sizeof(cfg.user), "%s", user) >= (int)sizeof(cfg.user)) {
		log_error("user name too long: %s", user);
		goto fail_cfg;
	}
	if (user)
		config_set_by_cli(&cfg, "user");
	if (authf) {
		snprintf(cfg.auth_file, sizeof(cfg.auth_file), "%s", authf);
		cfg.auth_file_forced = 1;
		config_set_by_cli(&cfg, "auth_file");
	}
	if (metrics) {
		char host[256];
		int mport;

		if (config_parse_hostport(metrics, host, sizeof(host), &mport) ||
		    strlen(metrics) >= sizeof(cfg.metrics_listen)) {
			log_error("bad --metrics-listen '%s' (ADDR:PORT or [IPV6]:PORT)", metrics);
			goto fail_cfg;
		}
		strcpy(cfg.metrics_listen, metrics);
		config_set_by_cli(&cfg, "metrics_listen");
	}
	if (listen) {
		snprintf(cfg.listen, sizeof(cfg.listen), "%s", listen);
		config_set_by_cli(&cfg, "listen");
	}
	if (dir) {
		snprintf(cfg.data_dir, sizeof(cfg.data_dir), "%s", dir);
		config_set_by_cli(&cfg, "data_dir");
	}
	if (sync) {
		if (journal_sync_parse(sync, &cfg.forced_sync) != 0) {
			log_error("bad --sync mode '%s' (none, interval, always, odsync)", sync);
			goto fail_cfg;
		}
		cfg.sync_forced = 1;
	}
	cfg.verbose = (unsigned)verbose;
	cfg.log_level = config_log_level(&cfg);
	if (use_syslog) {
		cfg.log_output = LOG_OUTPUT_SYSLOG;
		config_set_by_cli(&cfg, "log_output");
	}
	if (dump) {
		config_dump(&cfg, stdout);
		config_free(&cfg);
		return fflush(stdout) == 0 ? 0 : 1;
	}

	log_opts_default(&lo);
	lo.level = cfg.log_level;
	lo.output = cfg.log_output;
	if (log_open(&lo))
		log_warn("cannot start the log's flusher thread: %s", tern_strerror(TERN_ESYS));
	event_set_log_callback(on_libevent_log);
	log_info("ternd %s starting (pid %ld)", TERN_VERSION, (long)getpid());
	log_debug("libevent %s; service manager notification %s", event_get_version(),
		  notify_enabled() ? "on" : "off");
	log_debug("log: level %s, output %s, repeats folded within %lld ms",
		  log_level_name(lo.level), log_output_name(lo.output), (long long)lo.repeat_ms);
	log_config(&cfg);
	if (heap_kept)
		log_debug("heap: up to %zu MiB of freed memory kept for reuse, "
			  "given back after %d s idle", TERN_HEAP_KEEP >> 20, SERVER_HEAP_IDLE_MS / 1000);
	else
		log_debug("heap: malloc took no settings; freed memory goes back at its pace");
	signal(SIGPIPE, SIG_IGN);
	notify_status("recovering queues in %s", cfg.data_dir);
	rc = server_new(&cfg, &srv, err, sizeof(err));
	if (rc) {
		/* server_new freed its copy of cfg (and the overrides it shares). */
		log_error("%s", err);
		notify_status("failed: %s", err);
		log_close();
		return 1;
	}
	log_listeners(&cfg, srv, err, sizeof(err));
	server_set_status_line(srv, err);
	notify_ready(err);
	rc = server_run(srv);
	/* The loop has ended: an orderly stop reported it as it began; this
	 * covers a loop that ended for any other reason. */
	notify_stopping();
	server_free(srv);
	log_info("ternd stopped");
	log_close();
	return rc == 0 ? 0 : 1;

fail_cfg:
	config_free(&cfg);
	return 1;
}
