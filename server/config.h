/*
 * config.h: ternd's configuration: built-in defaults, the INI file (read
 * with inih) and command-line overrides.  See conf/ternd.conf for the prose
 * description of every option.
 */
#ifndef TERN_CONFIG_H
#define TERN_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../lib/log.h"
#include "queue.h"

struct qoverride; /* a [queue NAME] section's settings, resolved at load */

struct access_rule; /* an [access] line (auth.h) */

/* An [alias NAME] section: a name whose sets go to every destination
 * queue (Kestrel's alias).  Its name is no queue's. */
struct config_alias {
	struct config_alias *next;
	char *name;
	unsigned ndest;
	char **dest;          /* ndest queue names, in the file's order */
};
/* Most destinations of one alias. */
#define CONFIG_ALIAS_DEST_MAX 64

/* port = off: no TCP listener (a Unix socket or the TLS listener only). */
#define CONFIG_PORT_OFF (-1)

/* The longest a failed login's answer is held back (guard.c), and so the
 * largest auth_failure_delay_ms. */
#define AUTH_FAILURE_DELAY_MS_MAX 10000u

/* Most [server] keys the command line can set (config_set_by_cli). */
#define CONFIG_CLI_MAX 16

/* The settings: one field per key of config.c's table, which gives each
 * its default and range (ternd.conf(5) describes them), then the lists of
 * the sections that repeat. */
struct config {
	char path[4096];      /* config file ("" = none) */
	char listen[256];     /* address to bind */
	int port;             /* 0 = any free port; CONFIG_PORT_OFF = no TCP
				 listener */
	char unix_socket[108];    /* a Unix socket to listen on too; "" = none */
	uint32_t unix_socket_mode; /* its permission bits */
	char tls_listen[256];     /* ADDR:PORT of the TLS listener; "" = none */
	char tls_cert[4096];      /* its certificate chain (PEM) */
	char tls_key[4096];       /* its private key (PEM) */
	char tls_ca[4096];        /* CAs of the clients' certificates (PEM);
				     "" = none asked for */
	int tls_client_optional;  /* tls_verify_client = optional: a client
				     may present none (else required) */
	char metrics_listen[256]; /* ADDR:PORT of the HTTP /metrics listener;
				     "" = none */
	uint32_t metrics_max_connections; /* its connections at once */
	uint32_t metrics_timeout_s; /* each of them closes this long after its
				       accept */
	char user[64];            /* run as this user once the sockets are
				     bound; "" = as started */
	char auth_file[4096];     /* user:password lines; "" = no
				     authentication */
	int auth_file_forced;     /* -Y given: wins over the file's, also
				     at a reload */
	uint32_t auth_max_failures;   /* failed logins a connection may make
					 before it is closed; 0 = no limit */
	uint32_t auth_failure_delay_ms; /* a peer's first failed login is
					   answered this late, each next one
					   twice as late (guard.c); 0 = never */
	struct access_rule *access; /* [access]: rights per user */
	struct config_alias *aliases; /* [alias NAME] sections, in file order */
	enum queue_status status;   /* [server] status: the server's configured
				       status */
	char data_dir[4096];
	uint32_t max_connections;
	uint64_t max_item_size;   /* hard cap for any body */
	uint32_t idle_timeout_s;  /* 0 = never */
	uint32_t request_timeout_s; /* a started request must be whole within
				       this (0 = no limit) */
	uint32_t handshake_timeout_s; /* a new connection must finish its
					 handshake (TLS, login, first request)
					 within this (0 = no limit) */
	uint32_t max_handshakes;  /* TCP and TLS connections in their handshake
				     at once; 0 = auto, half of max_connections
				     (config_max_handshakes) */
	uint32_t max_queues;      /* queues clients may create: 0 = no limit */
	int auto_create;          /* a request may create any queue (else only
				     those with a [queue] section) */
	int enable_shutdown;
	uint64_t output_high_water; /* stop reading a client above this */
	uint32_t poll_us;           /* loop polls this long after a read; 0 = never */
	uint32_t group_wait_us;     /* [journal]: jenv_set_group_wait; 0 = never wait */
	enum log_level log_level;
	enum log_output log_output;
	struct queue_conf qdefault; /* [journal] + [queues] */
	struct qoverride *overrides;
	int sync_forced;            /* --sync given: applies to every queue */
	enum journal_sync forced_sync;
	unsigned verbose;           /* -v given this many times: log_level is
				       at least info (once) or debug (twice),
				       also after a reload */
	/* [server] keys the command line set (config_each's names, static
	 * strings): they win over the file, also at a reload */
	const char *cli_keys[CONFIG_CLI_MAX];
	unsigned ncli;
};

/* Built-in defaults (config.c's table of keys). */
void config_defaults(struct config *c);
/*
 * Reads path into c (which holds defaults or a previous load).  On error
 * writes "FILE:LINE: message" into err and returns TERN_EINVAL (or
 * TERN_ESYS when the file cannot be opened).  c is unchanged on error.
 * The file must be text: a NUL byte, invalid UTF-8 or a line longer than
 * CONFIG_LINE_MAX bytes is an error at its line.
 */
int config_load(struct config *c, const char *path, char *err, size_t errlen);
/* The same, the file's contents given: text (len bytes) read from path
 * (which names it in messages).  TERN_ENOMEM when no stream can read it. */
int config_load_text(struct config *c, const char *path, const char *text, size_t len,
		     char *err, size_t errlen);
/* The largest config file read by a reload. */
#define CONFIG_FILE_MAX (1u << 24)
/* The settings queue name gets: [queues] defaults, then the first
 * [queue PATTERN] section it matches, then its own [queue NAME] section,
 * then --sync. */
void config_queue_conf(const struct config *c, const char *name,
		       struct queue_conf *out);
/* 1 when name has a [queue NAME] section or matches a [queue PATTERN]
 * one (what auto_create = no lets clients create), else 0. */
int config_queue_known(const struct config *c, const char *name);
/* The alias named name (len bytes), or NULL. */
const struct config_alias *config_alias_find(const struct config *c, const char *name,
					     size_t len);
/* The max_handshakes in effect: the setting, or half of max_connections
 * (at least 1) when it is auto. */
uint32_t config_max_handshakes(const struct config *c);
/* Frees the lists: [queue NAME], [access] and [alias NAME] sections. */
void config_free(struct config *c);
/* Checks config.c's table of keys (for the unit tests): each key is found
 * by its name, and its default reads and is written back as given.  0, or
 * TERN_EINVAL with the key at fault in err. */
int config_keys_check(char *err, size_t errlen);
/* 1 when a reload applies key of [section] (config.c's table says which
 * do: every [journal] and [queues] key, some of [server]'s), else 0: a
 * change to it waits for a restart. */
int config_key_reloads(const char *section, const char *key);
/* Moves what a reload applies from src (a configuration just read) into
 * dst (the running one): every key config_key_reloads names, and the
 * [queue NAME], [access] and [alias NAME] sections, whose lists src gives
 * up and whose previous lists in dst are freed. */
void config_reload_from(struct config *dst, struct config *src);
/* Records that the command line set [server] key (a static string, one of
 * config_each's names); config_by_cli says whether it did. */
void config_set_by_cli(struct config *c, const char *key);
int config_by_cli(const struct config *c, const char *key);
/* The log level c gives: log_level, raised to info by one -v and to debug
 * by two (c->verbose). */
enum log_level config_log_level(const struct config *c);

/*
 * Calls fn once per setting of the effective configuration, in config-file
 * order: every key of [server], [journal] and [queues] (built-in defaults
 * included), then each [access] line and each [queue NAME] key the file
 * set, in file order.  With
 * --sync the forced mode is shown as every section's sync.  section is
 * "server", "journal", "queues" or "queue NAME"; value is formatted so the
 * file reads back to the same configuration (sizes with K/M/G when exact).
 * A [queue NAME] section without keys (it only names a queue that
 * auto_create = no allows) is one call with key and value NULL.
 */
typedef void config_fn(void *arg, const char *section, const char *key, const char *value);
void config_each(const struct config *c, config_fn *fn, void *arg);
/* Calls fn for each key of [server], [journal] and [queues] whose value
 * (as config_each gives it) differs between a (was) and b (now).  0, or
 * TERN_ENOMEM (no call was made then). */
typedef void config_change_fn(void *arg, const char *section, const char *key,
			      const char *was, const char *now);
int config_each_changed(const struct config *a, const struct config *b,
			config_change_fn *fn, void *arg);
/* Writes the effective configuration to f in config-file syntax (what
 * `ternd --dump-config` prints). */
void config_dump(const struct config *c, FILE *f);

/* The longest line a config file may have, without its newline (inih
 * reads lines of INI_MAX_LINE bytes with the newline and a NUL). */
#define CONFIG_LINE_MAX 198

/* Parses a size with an optional K, M or G suffix (binary). 0 or TERN_EINVAL. */
int config_parse_size(const char *s, uint64_t *out);

/* Parses octal permission bits (e.g. 0700, 660) up to 0777.  0 or
 * TERN_EINVAL. */
int config_parse_mode(const char *s, uint32_t *out);

/* Splits "HOST:PORT" or "[IPV6]:PORT" (PORT 0..65535, 0 = any free port)
 * into host (hlen bytes of room) and *port.  0 or TERN_EINVAL. */
int config_parse_hostport(const char *s, char *host, size_t hlen, int *port);

#endif
