/* main.c: ternd's command line.  Options override the config file. */
#include <event2/event.h>
#include <event2/thread.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "server.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ternd [-c FILE] [-p PORT] [-l ADDR] [-d DATADIR] [--sync MODE] [-v] [-h] [--version]\n"
		"  -c, --config FILE   configuration file (INI; see conf/ternd.conf)\n"
		"  -p, --port PORT     TCP port (default 22133; 0 = any free port)\n"
		"  -l, --listen ADDR   address to listen on (default 127.0.0.1)\n"
		"  -d, --data-dir DIR  data directory (default ./data)\n"
		"      --sync MODE     journal sync mode for every queue: none, interval,\n"
		"                      always or odsync (overrides the config file)\n"
		"  -v, --verbose       log more\n"
		"  -h, --help          this text\n"
		"      --version       print the version\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "port", required_argument, NULL, 'p' },
		{ "listen", required_argument, NULL, 'l' },
		{ "data-dir", required_argument, NULL, 'd' },
		{ "sync", required_argument, NULL, 'S' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *conf = NULL, *port = NULL, *listen = NULL, *dir = NULL, *sync = NULL;
	struct config cfg;
	struct server *srv = NULL;
	char err[1024];
	int ch, verbose = 0, rc;

	while ((ch = getopt_long(argc, argv, "c:p:l:d:vh", opts, NULL)) != -1) {
		switch (ch) {
		case 'c': conf = optarg; break;
		case 'p': port = optarg; break;
		case 'l': listen = optarg; break;
		case 'd': dir = optarg; break;
		case 'S': sync = optarg; break;
		case 'v': verbose = 1; break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("ternd %s\n", TERN_VERSION); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "ternd: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	config_defaults(&cfg);
	if (conf && config_load(&cfg, conf, err, sizeof(err)) != 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	if (port) {
		char *end;
		long v = strtol(port, &end, 10);

		if (*end || v < 0 || v > 65535) {
			fprintf(stderr, "ternd: bad port '%s'\n", port);
			return 1;
		}
		cfg.port = (int)v;
	}
	if (listen)
		snprintf(cfg.listen, sizeof(cfg.listen), "%s", listen);
	if (dir)
		snprintf(cfg.data_dir, sizeof(cfg.data_dir), "%s", dir);
	if (sync) {
		if (journal_sync_parse(sync, &cfg.forced_sync) != 0) {
			fprintf(stderr, "ternd: bad --sync mode '%s' (none, interval, always, odsync)\n", sync);
			return 1;
		}
		cfg.sync_forced = 1;
	}
	if (verbose)
		cfg.verbose = 1;
	signal(SIGPIPE, SIG_IGN);
	/* The journal's writer thread signals the loop through libevent. */
	evthread_use_pthreads();
	rc = server_new(&cfg, &srv, err, sizeof(err));
	if (rc) {
		/* server_new freed its copy of cfg (and the overrides it shares). */
		fprintf(stderr, "ternd: %s\n", err);
		return 1;
	}
	fprintf(stderr, "ternd listening on %s:%d\n", cfg.listen, server_port(srv));
	fflush(stderr);
	rc = server_run(srv);
	server_free(srv);
	fprintf(stderr, "ternd: stopped\n");
	return rc == 0 ? 0 : 1;
}
