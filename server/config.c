/*
 * config.c: the table of every key (config_keys: its section, type, range,
 * default, the words a bad value gets, and whether a reload applies it),
 * the INI file read with inih against it, the [queue NAME], [alias NAME]
 * and [access] sections, and the effective settings written back
 * (config_each).
 */
#include "config.h"
#include "auth.h"

#include <ctype.h>
#include <stddef.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* One key of a [queue NAME] section, as read (validated, not applied:
 * the [queues] defaults it applies on top of may come later in the file).
 * key NULL: the section's header, which names the queue even when no key
 * follows. */
struct qkey {
	struct qkey *next;
	char *name, *key, *value;
};

/* A queue with a [queue NAME] section, or a [queue PATTERN] section (a
 * name with * or ?): its settings, resolved once when the file is loaded
 * ([queues] defaults, for a name the first pattern it matches, then its
 * keys in file order). */
struct qoverride {
	struct qoverride *next;
	char *name;
	int pattern;
	struct queue_conf conf;
	struct qkey *keys, **keys_tail; /* its keys as written (--dump-config) */
};

int config_parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mul = 1;

	if (!*s || *s == '-' || *s == '+' || *s == ' ')
		return TERN_EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return TERN_EINVAL;
	if (*end) {
		if (!strcasecmp(end, "k") || !strcasecmp(end, "kb") || !strcasecmp(end, "kib"))
			mul = 1024;
		else if (!strcasecmp(end, "m") || !strcasecmp(end, "mb") || !strcasecmp(end, "mib"))
			mul = 1024 * 1024;
		else if (!strcasecmp(end, "g") || !strcasecmp(end, "gb") || !strcasecmp(end, "gib"))
			mul = 1024 * 1024 * 1024;
		else
			return TERN_EINVAL;
	}
	if (v > UINT64_MAX / mul)
		return TERN_EINVAL;
	*out = v * mul;
	return 0;
}

int config_parse_hostport(const char *s, char *host, size_t hlen, int *port)
{
	const char *colon, *h = s, *hend;
	char *end;
	unsigned long v;

	if (*s == '[') {
		hend = strchr(s, ']');
		if (!hend || hend[1] != ':')
			return TERN_EINVAL;
		h = s + 1;
		colon = hend + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon || memchr(s, ':', (size_t)(colon - s)))
			return TERN_EINVAL; /* an IPv6 address needs its brackets */
		hend = colon;
	}
	if (hend == h || (size_t)(hend - h) >= hlen || !colon[1] || colon[1] == '-' ||
	    colon[1] == '+' || colon[1] == ' ')
		return TERN_EINVAL;
	errno = 0;
	v = strtoul(colon + 1, &end, 10);
	if (errno || *end || v > 65535)
		return TERN_EINVAL;
	memcpy(host, h, (size_t)(hend - h));
	host[hend - h] = '\0';
	*port = (int)v;
	return 0;
}

/* A string setting: "" or up to len - 1 bytes.  0 or TERN_EINVAL. */
static int set_str(char *dst, size_t len, const char *val)
{
	if (strlen(val) >= len)
		return TERN_EINVAL;
	strcpy(dst, val);
	return 0;
}

/* "" (off) or a valid HOST:PORT. */
static int set_hostport(char *dst, size_t len, const char *val)
{
	char host[256];
	int port;

	if (*val && config_parse_hostport(val, host, sizeof(host), &port))
		return TERN_EINVAL;
	return set_str(dst, len, val);
}

int config_parse_mode(const char *s, uint32_t *out)
{
	char *end;
	unsigned long v;

	if (!*s || *s == '-' || *s == '+' || *s == ' ')
		return TERN_EINVAL;
	errno = 0;
	v = strtoul(s, &end, 8);
	if (errno || *end || v > 0777)
		return TERN_EINVAL;
	*out = (uint32_t)v;
	return 0;
}

static int parse_bool(const char *s, int *out)
{
	if (!strcasecmp(s, "yes") || !strcasecmp(s, "true") || !strcasecmp(s, "on") || !strcmp(s, "1"))
		*out = 1;
	else if (!strcasecmp(s, "no") || !strcasecmp(s, "false") || !strcasecmp(s, "off") || !strcmp(s, "0"))
		*out = 0;
	else
		return TERN_EINVAL;
	return 0;
}

static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!*s || *s == '-' || *s == '+' || *s == ' ')
		return TERN_EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v > max)
		return TERN_EINVAL;
	*out = v;
	return 0;
}

/* ---- the keys ----
 *
 * Every key of [server], [journal] and [queues] is one row of config_keys,
 * in config-file order.  The parser, the built-in defaults, a reload's
 * reset, config_each (--dump-config, stats settings, the log's summary,
 * a reload's comparison), the list of what a reload applies and the
 * checks of ternd.conf(5) and conf/ternd.conf (tests/ops) all read it:
 * adding a key is adding its row (and its field).
 */

struct config_key;

/* How a key's value is read and written back. */
struct key_type {
	/* Reads val into the field at p; 0 or TERN_EINVAL. */
	int (*parse)(const struct config_key *k, void *p, const char *val);
	/* Writes the field at p as the file would give it, into buf. */
	void (*format)(const struct config_key *k, const void *p, char *buf, size_t len);
};

/* Where a key's field is, and what else it does (config_key.flags). */
enum {
	K_QUEUE = 1,   /* a field of struct queue_conf: [queues] sets it for
			  every queue and [queue NAME] for one; else a field
			  of struct config */
	K_JOURNAL = 2, /* a queue key [journal] takes too */
	K_RELOAD = 4,  /* a reload applies it (else a change waits for a
			  restart, and the log says so) */
	K_QUEUES = 8,  /* also sets the [queues] key of the same name (the
			  [server] cap is that key's default) */
};

struct config_key {
	const char *section;        /* "server", "journal" or "queues" */
	const char *name;
	const struct key_type *type;
	uint16_t off, size;         /* the field: offset, bytes */
	uint8_t flags;
	uint64_t min, max;          /* numbers and sizes: the range */
	const char *dflt;           /* the built-in default, as written */
	const char *help;           /* what a bad value is told ("%s" is
				       the value) */
};

/* A size with the largest binary suffix that divides it exactly. */
static void fmt_size(char *buf, size_t len, uint64_t v)
{
	static const char suffix[] = "GMK";

	for (int i = 0; i < 3; i++) {
		uint64_t unit = 1ULL << (10 * (3 - i));

		if (v && v % unit == 0) {
			snprintf(buf, len, "%llu%c", (unsigned long long)(v / unit), suffix[i]);
			return;
		}
	}
	snprintf(buf, len, "%llu", (unsigned long long)v);
}

/* The unsigned number in the field at p (4 or 8 bytes), and back. */
static uint64_t get_uint(const struct config_key *k, const void *p)
{
	uint32_t v32;
	uint64_t v64;

	if (k->size == 4) {
		memcpy(&v32, p, 4);
		return v32;
	}
	memcpy(&v64, p, 8);
	return v64;
}

static void put_uint(const struct config_key *k, void *p, uint64_t v)
{
	uint32_t v32 = (uint32_t)v;

	if (k->size == 4)
		memcpy(p, &v32, 4);
	else
		memcpy(p, &v, 8);
}

/* A decimal number in k's range. */
static int uint_parse(const struct config_key *k, void *p, const char *val)
{
	uint64_t v;

	if (parse_u64(val, k->max, &v) || v < k->min)
		return TERN_EINVAL;
	put_uint(k, p, v);
	return 0;
}

static void uint_format(const struct config_key *k, const void *p, char *buf, size_t len)
{
	snprintf(buf, len, "%llu", (unsigned long long)get_uint(k, p));
}

/* A number in k's range, or auto (0). */
static int auto_parse(const struct config_key *k, void *p, const char *val)
{
	if (strcmp(val, "auto"))
		return uint_parse(k, p, val);
	put_uint(k, p, 0);
	return 0;
}

static void auto_format(const struct config_key *k, const void *p, char *buf, size_t len)
{
	if (get_uint(k, p))
		uint_format(k, p, buf, len);
	else
		snprintf(buf, len, "auto");
}

/* Seconds in k's range, kept as milliseconds (an int64_t). */
static int secs_parse(const struct config_key *k, void *p, const char *val)
{
	uint64_t v;

	if (parse_u64(val, k->max, &v) || v < k->min)
		return TERN_EINVAL;
	put_uint(k, p, v * 1000);
	return 0;
}

static void secs_format(const struct config_key *k, const void *p, char *buf, size_t len)
{
	snprintf(buf, len, "%llu", (unsigned long long)(get_uint(k, p) / 1000));
}

/* A size (K, M or G suffix) in k's range. */
static int size_parse(const struct config_key *k, void *p, const char *val)
{
	uint64_t v;

	if (config_parse_size(val, &v) || v < k->min || v > k->max)
		return TERN_EINVAL;
	put_uint(k, p, v);
	return 0;
}

static void size_format(const struct config_key *k, const void *p, char *buf, size_t len)
{
	fmt_size(buf, len, get_uint(k, p));
}

/* A TCP port, or off (CONFIG_PORT_OFF). */
static int port_parse(const struct config_key *k, void *p, const char *val)
{
	uint64_t v;
	int port = CONFIG_PORT_OFF;

	if (strcmp(val, "off")) {
		if (parse_u64(val, 65535, &v))
			return TERN_EINVAL;
		port = (int)v;
	}
	memcpy(p, &port, sizeof(port));
	return 0;
}

static void port_format(const struct config_key *k, const void *p, char *buf, size_t len)
{
	int port;

	memcpy(&port, p, sizeof(port));
	if (port == CONFIG_PORT_OFF)
		snprintf(buf, len, "off");
	else
		snprintf(buf, len, "%d", port);
}

/* yes or no (an int). */
static int bool_parse(const struct config_key *k, void *p, const char *val)
{
	return parse_bool(val, p);
}

static void bool_format(const struct config_key *k, const void *p, char *buf, size_t len)
{
	snprintf(buf, len, "%s", *(const int *)p ? "yes" : "no");
}

/* Octal permission bits. */
static int mode_parse(const struct config_key *k, void *p, const char *val)
{
	return config_parse_mode(val, p);
}

static void mode_format(const struct config_key *k, const void *p, char *buf, size_t len)
{
	snprintf(buf, len, "%04o", (unsigned)*(const uint32_t *)p);
}

/* A string that fits the field; at least min bytes. */
static int str_parse(const struct config_key *k, void *p, const char *val)
{
	if (strlen(val) < k->min)
		return TERN_EINVAL;
	return set_str(p, k->size, val);
}

static void str_format(const struct config_key *k, const void *p, char *buf, size_t len)
{
	snprintf(buf, len, "%s", (const char *)p);
}

/* "" (off) or HOST:PORT. */
static int hostport_parse(const struct config_key *k, void *p, const char *val)
{
	return set_hostport(p, k->size, val);
}

/* A queue name, or none ("" too): no queue. */
static int qname_parse(const struct config_key *k, void *p, const char *val)
{
	size_t n = strlen(val);

	if (!strcmp(val, "none"))
		n = 0;
	else if (n && (n > TERN_NAME_MAX || !tern_name_valid(val, n)))
		return TERN_EINVAL;
	memcpy(p, val, n);
	((char *)p)[n] = '\0';
	return 0;
}

static void qname_format(const struct config_key *k, const void *p, char *buf, size_t len)
{
	snprintf(buf, len, "%s", *(const char *)p ? (const char *)p : "none");
}

/* tls_verify_client: required or optional (tls_client_optional). */
static int verify_parse(const struct config_key *k, void *p, const char *val)
{
	if (strcmp(val, "required") && strcmp(val, "optional"))
		return TERN_EINVAL;
	*(int *)p = !strcmp(val, "optional");
	return 0;
}

static void verify_format(const struct config_key *k, const void *p, char *buf, size_t len)
{
	snprintf(buf, len, "%s", *(const int *)p ? "optional" : "required");
}

/* A word of an enum, read and named by the functions of its module. */
#define ENUM_TYPE(kind, type, parse_fn, name_fn)                                       \
	static int kind##_parse(const struct config_key *k, void *p, const char *val)  \
	{                                                                               \
		return parse_fn;                                                        \
	}                                                                               \
	static void kind##_format(const struct config_key *k, const void *p, char *buf, \
				  size_t len)                                           \
	{                                                                               \
		snprintf(buf, len, "%s", name_fn(*(const type *)p));                    \
	}
ENUM_TYPE(level, enum log_level, log_level_parse(val, p), log_level_name)
ENUM_TYPE(output, enum log_output, log_output_parse(val, p), log_output_name)
ENUM_TYPE(status, enum queue_status, queue_status_parse(val, strlen(val), p), queue_status_name)
ENUM_TYPE(sync, enum journal_sync, journal_sync_parse(val, p), journal_sync_name)
ENUM_TYPE(prealloc, enum journal_prealloc, journal_prealloc_parse(val, p),
	  journal_prealloc_name)
ENUM_TYPE(cache, enum journal_cache, journal_cache_parse(val, p), journal_cache_name)
#undef ENUM_TYPE

#define TYPE(t) static const struct key_type t_##t = { t##_parse, t##_format };
TYPE(uint) TYPE(auto) TYPE(secs) TYPE(size) TYPE(port) TYPE(bool) TYPE(mode) TYPE(str)
TYPE(qname) TYPE(verify) TYPE(level) TYPE(output) TYPE(status) TYPE(sync) TYPE(prealloc)
TYPE(cache)
#undef TYPE
static const struct key_type t_hostport = { hostport_parse, str_format };

/* A field of struct config (S) or struct queue_conf (Q), with flags. */
#define S(f, flags) offsetof(struct config, f), sizeof(((struct config *)0)->f), (flags)
#define Q(f, flags) offsetof(struct queue_conf, f), sizeof(((struct queue_conf *)0)->f), \
		    (flags) | K_QUEUE | K_RELOAD
#define R K_RELOAD
#define J K_JOURNAL
#define G (1ULL << 30) /* 1G */

static const struct config_key config_keys[] = {
/* section  name  type  field  min max  default  help */
{ "server", "listen", &t_str, S(listen, 0), 1, 0, "127.0.0.1", "bad listen address '%s'" },
{ "server", "port", &t_port, S(port, 0), 0, 0, "22133", "port must be 0..65535 or off, not '%s'" },
{ "server", "data_dir", &t_str, S(data_dir, 0), 1, 0, "./data", "bad data_dir '%s'" },
{ "server", "max_connections", &t_uint, S(max_connections, 0), 1, 1000000, "1024",
  "max_connections must be 1..1000000, not '%s'" },
{ "server", "max_item_size", &t_size, S(max_item_size, K_QUEUES), 1, G, "1M",
  "max_item_size must be between 1 and 1G, not '%s'" },
{ "server", "idle_timeout", &t_uint, S(idle_timeout_s, 0), 0, 86400 * 365, "0",
  "idle_timeout must be seconds, not '%s'" },
{ "server", "request_timeout", &t_uint, S(request_timeout_s, R), 0, 86400, "30",
  "request_timeout must be seconds 0..86400, not '%s'" },
{ "server", "handshake_timeout", &t_uint, S(handshake_timeout_s, R), 0, 86400, "10",
  "handshake_timeout must be seconds 0..86400, not '%s'" },
{ "server", "max_handshakes", &t_auto, S(max_handshakes, 0), 1, 1000000, "auto",
  "max_handshakes must be 1..1000000 or auto, not '%s'" },
{ "server", "max_queues", &t_uint, S(max_queues, R), 0, 100000000, "10000",
  "max_queues must be 0..100000000, not '%s'" },
{ "server", "auto_create", &t_bool, S(auto_create, R), 0, 0, "yes",
  "auto_create must be yes or no, not '%s'" },
{ "server", "enable_shutdown", &t_bool, S(enable_shutdown, R), 0, 0, "no",
  "enable_shutdown must be yes or no, not '%s'" },
{ "server", "output_high_water", &t_size, S(output_high_water, 0), 4096, UINT64_MAX, "4M",
  "output_high_water must be a size >= 4K, not '%s'" },
{ "server", "poll_us", &t_uint, S(poll_us, 0), 0, 100000, "100",
  "poll_us must be microseconds 0..100000, not '%s'" },
{ "server", "log_level", &t_level, S(log_level, R), 0, 0, "info",
  "log_level must be error, warn, info or debug, not '%s'" },
{ "server", "log_output", &t_output, S(log_output, 0), 0, 0, "stderr",
  "log_output must be stderr or syslog, not '%s'" },
{ "server", "unix_socket", &t_str, S(unix_socket, 0), 0, 0, "",
  "unix_socket must be a path of at most 107 bytes" },
{ "server", "unix_socket_mode", &t_mode, S(unix_socket_mode, 0), 0, 0, "0700",
  "unix_socket_mode must be octal permission bits (0000..0777), not '%s'" },
{ "server", "tls_listen", &t_hostport, S(tls_listen, 0), 0, 0, "",
  "tls_listen must be ADDR:PORT or [IPV6]:PORT, not '%s'" },
{ "server", "tls_cert", &t_str, S(tls_cert, R), 0, 0, "", "tls_cert: path too long" },
{ "server", "tls_key", &t_str, S(tls_key, R), 0, 0, "", "tls_key: path too long" },
{ "server", "tls_ca", &t_str, S(tls_ca, R), 0, 0, "", "tls_ca: path too long" },
{ "server", "tls_verify_client", &t_verify, S(tls_client_optional, R), 0, 0, "required",
  "tls_verify_client must be required or optional, not '%s'" },
{ "server", "metrics_listen", &t_hostport, S(metrics_listen, 0), 0, 0, "",
  "metrics_listen must be ADDR:PORT or [IPV6]:PORT, not '%s'" },
{ "server", "metrics_max_connections", &t_uint, S(metrics_max_connections, 0), 1, 10000, "16",
  "metrics_max_connections must be 1..10000, not '%s'" },
{ "server", "metrics_timeout", &t_uint, S(metrics_timeout_s, 0), 1, 3600, "10",
  "metrics_timeout must be seconds 1..3600, not '%s'" },
{ "server", "user", &t_str, S(user, 0), 0, 0, "", "user: name too long" },
{ "server", "auth_file", &t_str, S(auth_file, R), 0, 0, "", "auth_file: path too long" },
{ "server", "auth_max_failures", &t_uint, S(auth_max_failures, R), 0, 1000, "3",
  "auth_max_failures must be 0..1000, not '%s'" },
{ "server", "auth_failure_delay_ms", &t_uint, S(auth_failure_delay_ms, R), 0,
  AUTH_FAILURE_DELAY_MS_MAX, "100",
  "auth_failure_delay_ms must be milliseconds 0..10000, not '%s'" },
{ "server", "status", &t_status, S(status, R), 0, 0, "UP",
  "status must be UP, READONLY or QUIESCENT, not '%s'" },
{ "journal", "sync", &t_sync, Q(jopts.sync, J), 0, 0, "interval",
  "bad sync mode (expected none, interval, always or odsync) (got '%s')" },
{ "journal", "sync_interval_ms", &t_uint, Q(jopts.sync_interval_ms, J), 1, 3600000, "100",
  "sync_interval_ms must be 1..3600000 (got '%s')" },
{ "journal", "preallocate", &t_prealloc, Q(jopts.prealloc, J), 0, 0, "auto",
  "bad preallocate value (expected auto, zero, fallocate or none) (got '%s')" },
{ "journal", "page_cache", &t_cache, Q(jopts.cache, J), 0, 0, "keep",
  "bad page_cache value (expected keep or drop) (got '%s')" },
/* records address a segment with 32-bit offsets: at most 2G */
{ "journal", "segment_size", &t_size, Q(jopts.segment_size, J), 64 << 10, 2 * G, "64M",
  "segment_size must be between 64K and 2G (got '%s')" },
{ "journal", "checkpoint_interval_ms", &t_uint, Q(jopts.checkpoint_interval_ms, J), 1, 3600000,
  "1000", "checkpoint_interval_ms must be 1..3600000 (got '%s')" },
/* the journal writer's, for every queue: not a queue's key */
{ "journal", "group_wait_us", &t_uint, S(group_wait_us, R), 0, 100000, "2000",
  "group_wait_us must be microseconds 0..100000, not '%s'" },
{ "queues", "max_items", &t_uint, Q(max_items, 0), 0, UINT64_MAX, "0",
  "max_items must be a non-negative integer (got '%s')" },
{ "queues", "max_size", &t_size, Q(max_size, 0), 0, UINT64_MAX, "0",
  "max_size must be a size (e.g. 512M) (got '%s')" },
{ "queues", "max_item_size", &t_size, Q(max_item_size, 0), 1, G, "1M",
  "max_item_size must be between 1 and 1G (got '%s')" },
{ "queues", "max_age", &t_secs, Q(max_age_ms, 0), 0, 100ULL * 365 * 86400, "0",
  "max_age must be seconds (0 = none) (got '%s')" },
{ "queues", "discard_old_when_full", &t_bool, Q(discard_old_when_full, 0), 0, 0, "no",
  "discard_old_when_full must be yes or no (got '%s')" },
{ "queues", "open_timeout", &t_uint, Q(open_timeout_ms, 0), 0, 86400000ULL * 365, "0",
  "open_timeout must be milliseconds (0 = never) (got '%s')" },
{ "queues", "max_open", &t_uint, Q(max_open, 0), 1, 1000000, "16",
  "max_open must be 1..1000000 (got '%s')" },
{ "queues", "max_deliveries", &t_uint, Q(max_deliveries, 0), 0, QUEUE_MAX_DELIVERIES, "0",
  "max_deliveries must be 0..65535 (0 = no limit) (got '%s')" },
{ "queues", "dead_letter", &t_qname, Q(dead_letter, 0), 0, 0, "none",
  "dead_letter must be a queue name (or none) (got '%s')" },
{ "queues", "expire_to", &t_qname, Q(expire_to, 0), 0, 0, "none",
  "expire_to must be a queue name (or none) (got '%s')" },
{ "queues", "max_queue_age", &t_secs, Q(max_queue_age_ms, 0), 0, 100ULL * 365 * 86400, "0",
  "max_queue_age must be seconds (0 = never) (got '%s')" },
{ "queues", "status", &t_status, Q(status, 0), 0, 0, "UP",
  "status must be UP, READONLY or QUIESCENT (got '%s')" },
{ "queues", "max_memory_size", &t_size, Q(jopts.max_memory_size, J), 4096, UINT64_MAX, "64M",
  "max_memory_size must be a size of at least 4K (got '%s')" },
};
#undef S
#undef Q
#undef R
#undef J
#undef G

#define NKEYS (sizeof(config_keys) / sizeof(config_keys[0]))

/* The field of key k in c. */
static void *key_field(const struct config_key *k, struct config *c)
{
	return (char *)((k->flags & K_QUEUE) ? (void *)&c->qdefault : (void *)c) + k->off;
}

/* The key name of [section] (a queue key for [queue NAME]), or NULL. */
static const struct config_key *key_find(const char *section, const char *name)
{
	int queue = !strcmp(section, "queues") || !strncmp(section, "queue ", 6);
	int journal = !strcmp(section, "journal");

	for (size_t i = 0; i < NKEYS; i++) {
		const struct config_key *k = &config_keys[i];

		if (strcmp(k->name, name))
			continue;
		if (queue ? (k->flags & K_QUEUE)
			  : journal ? !strcmp(k->section, "journal") || (k->flags & K_JOURNAL)
				    : !strcmp(k->section, section))
			return k;
	}
	return NULL;
}

/* Sets key k of c from val: 0 or TERN_EINVAL (c unchanged then). */
static int key_set(const struct config_key *k, struct config *c, const char *val)
{
	if (k->type->parse(k, key_field(k, c), val))
		return TERN_EINVAL;
	if (k->flags & K_QUEUES) {
		const struct config_key *q = key_find("queues", k->name);

		memcpy(key_field(q, c), key_field(k, c), k->size);
	}
	return 0;
}

/* The field of key k in c, read only. */
static const void *key_cfield(const struct config_key *k, const struct config *c)
{
	return key_field(k, (struct config *)c);
}

/* Sets every key flagged want (0: every key) to its default (a unit test
 * checks that each default reads).  A [queues] key that a [server] key
 * defaults (K_QUEUES) takes that key's value, as reading it would give. */
static void keys_default(struct config *c, unsigned want)
{
	for (size_t i = 0; i < NKEYS; i++)
		if (!want || (config_keys[i].flags & want))
			config_keys[i].type->parse(&config_keys[i], key_field(&config_keys[i], c),
						   config_keys[i].dflt);
	for (size_t i = 0; i < NKEYS; i++)
		if (config_keys[i].flags & K_QUEUES)
			memcpy(key_field(key_find("queues", config_keys[i].name), c),
			       key_field(&config_keys[i], c), config_keys[i].size);
}

void config_defaults(struct config *c)
{
	memset(c, 0, sizeof(*c));
	keys_default(c, 0);
}

int config_keys_check(char *err, size_t errlen)
{
	struct config c;
	char v[sizeof(c.path) + 16];

	memset(&c, 0, sizeof(c));
	for (size_t i = 0; i < NKEYS; i++) {
		const struct config_key *k = &config_keys[i];

		if (k != key_find(k->section, k->name) ||
		    ((k->flags & K_QUEUES) && !key_find("queues", k->name))) {
			snprintf(err, errlen, "[%s] %s: not found by its name", k->section, k->name);
			return TERN_EINVAL;
		}
		if (k->type->parse(k, key_field(k, &c), k->dflt)) {
			snprintf(err, errlen, "[%s] %s: the default '%s' does not read", k->section,
				 k->name, k->dflt);
			return TERN_EINVAL;
		}
		k->type->format(k, key_cfield(k, &c), v, sizeof(v));
		if (strcmp(v, k->dflt)) {
			snprintf(err, errlen, "[%s] %s: the default '%s' reads back as '%s'",
				 k->section, k->name, k->dflt, v);
			return TERN_EINVAL;
		}
	}
	return 0;
}

int config_key_reloads(const char *section, const char *key)
{
	const struct config_key *k = key_find(section, key);

	return k && (k->flags & K_RELOAD);
}

void config_reload_from(struct config *dst, struct config *src)
{
	struct config old = *dst; /* (for its lists) */

	for (size_t i = 0; i < NKEYS; i++) {
		const struct config_key *k = &config_keys[i];

		if ((k->flags & K_RELOAD) && !(k->flags & K_QUEUE))
			memcpy(key_field(k, dst), key_cfield(k, src), k->size);
	}
	dst->qdefault = src->qdefault;
	dst->overrides = src->overrides;
	dst->access = src->access;
	dst->aliases = src->aliases;
	src->overrides = NULL;
	src->access = NULL;
	src->aliases = NULL;
	config_free(&old);
}

struct parse_state {
	struct config *c;
	const char *path;
	FILE *f;
	int line;
	char *err;
	size_t errlen;
	int failed;
	struct qkey *keys, **tail;
	char section[CONFIG_LINE_MAX + 1]; /* the current one, whole */
	int had_key;                       /* a key since its header */
};

__attribute__((format(printf, 2, 3)))
static int fail(struct parse_state *ps, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(ps->err, ps->errlen, "%s:%d: %s", ps->path, ps->line, msg);
	ps->failed = 1;
	return 0;
}

/*
 * Length of the valid UTF-8 sequence at p (at most n bytes), or 0 when it
 * is not one: overlong forms, surrogates and code points above U+10FFFF
 * are invalid too.
 */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
	size_t len, i;
	uint32_t cp;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf) {
		len = 2;
		cp = p[0] & 0x1f;
	} else if (p[0] >= 0xe0 && p[0] <= 0xef) {
		len = 3;
		cp = p[0] & 0x0f;
	} else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
		len = 4;
		cp = p[0] & 0x07;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

/*
 * Refuses a file that is not text before anything of it is applied: a NUL
 * byte (inih would take the line as ending there, and a file that starts
 * with one as empty), invalid UTF-8, or a line longer than CONFIG_LINE_MAX
 * (inih would read its rest as another line).  0, or TERN_EINVAL with
 * "FILE:LINE: message" in ps->err.  The file is rewound.
 */
static int check_text(struct parse_state *ps)
{
	char *buf = NULL;
	size_t cap = 0;
	ssize_t n;
	int rc = 0;

	for (ps->line = 1; (n = getline(&buf, &cap, ps->f)) > 0; ps->line++) {
		const unsigned char *p = (const unsigned char *)buf;
		size_t len = (size_t)n, i, k;

		if (memchr(buf, '\0', len)) {
			fail(ps, "NUL byte at column %zu: a config file is text",
			     (size_t)((char *)memchr(buf, '\0', len) - buf) + 1);
			rc = TERN_EINVAL;
			break;
		}
		for (i = 0; i < len; i += k) {
			k = utf8_seq(p + i, len - i);
			if (!k)
				break;
		}
		if (i < len) {
			fail(ps, "invalid UTF-8 (byte 0x%02x at column %zu)", p[i], i + 1);
			rc = TERN_EINVAL;
			break;
		}
		if (buf[len - 1] == '\n')
			len--;
		if (len > CONFIG_LINE_MAX) {
			fail(ps, "line too long (%zu bytes; at most %d)", len, CONFIG_LINE_MAX);
			rc = TERN_EINVAL;
			break;
		}
	}
	free(buf);
	if (!rc && ferror(ps->f)) {
		snprintf(ps->err, ps->errlen, "%s: cannot read: %s", ps->path, strerror(errno));
		rc = TERN_ESYS;
	}
	ps->line = 0;
	rewind(ps->f);
	return rc;
}

/* Whether name is a pattern: a queue name with * or ? in it. */
static int is_pattern(const char *name)
{
	return strpbrk(name, "*?") != NULL;
}

/* Whether name is a queue name, or a pattern that becomes one with each
 * wildcard replaced by a letter. */
static int section_name_valid(const char *name)
{
	char tmp[TERN_NAME_MAX + 1];
	size_t len = strlen(name), i;

	if (len > TERN_NAME_MAX)
		return 0;
	for (i = 0; i < len; i++)
		tmp[i] = name[i] == '*' || name[i] == '?' ? 'a' : name[i];
	return tern_name_valid(tmp, len);
}

/* Records key (NULL: the section's header) of section [queue name]. */
static int add_qkey(struct parse_state *ps, const char *name, const char *key,
		    const char *val)
{
	struct qkey *o = calloc(1, sizeof(*o));

	if (!o || !(o->name = strdup(name)) || (key && !(o->key = strdup(key))) ||
	    (val && !(o->value = strdup(val)))) {
		if (o) {
			free(o->name);
			free(o->key);
			free(o);
		}
		return fail(ps, "out of memory");
	}
	*ps->tail = o;
	ps->tail = &o->next;
	return 1;
}

static void free_aliases(struct config_alias *a)
{
	while (a) {
		struct config_alias *next = a->next;

		for (unsigned i = 0; i < a->ndest; i++)
			free(a->dest[i]);
		free(a->dest);
		free(a->name);
		free(a);
		a = next;
	}
}

const struct config_alias *config_alias_find(const struct config *c, const char *name,
					     size_t len)
{
	for (const struct config_alias *a = c->aliases; a; a = a->next)
		if (strlen(a->name) == len && !memcmp(a->name, name, len))
			return a;
	return NULL;
}

/* An [alias NAME] header: a new alias, its destinations to come. */
static void alias_header(struct parse_state *ps, const char *name)
{
	struct config_alias *a, **tail;

	while (*name == ' ')
		name++;
	if (!tern_name_valid(name, strlen(name))) {
		fail(ps, "bad alias name '%s' in section header", name);
		return;
	}
	for (tail = &ps->c->aliases; *tail; tail = &(*tail)->next)
		if (!strcmp((*tail)->name, name)) {
			fail(ps, "[alias %s] given twice", name);
			return;
		}
	a = calloc(1, sizeof(*a));
	if (!a || !(a->name = strdup(name))) {
		free(a);
		fail(ps, "out of memory");
		return;
	}
	*tail = a;
}

/* [alias NAME] destinations = Q1 Q2 ... (blanks or commas between). */
static int alias_key(struct parse_state *ps, const char *name, const char *key,
		     const char *val)
{
	struct config_alias *a;
	char buf[CONFIG_LINE_MAX + 1], *tok, *save;

	while (*name == ' ')
		name++;
	for (a = ps->c->aliases; a && strcmp(a->name, name); a = a->next)
		;
	if (!a) /* its header failed, and said so */
		return 0;
	if (strcmp(key, "destinations"))
		return fail(ps, "unknown key '%s' in [alias %s]", key, name);
	if (a->ndest)
		return fail(ps, "[alias %s] destinations given twice", name);
	snprintf(buf, sizeof(buf), "%s", val);
	for (tok = strtok_r(buf, " \t,", &save); tok; tok = strtok_r(NULL, " \t,", &save)) {
		char **d;

		if (!tern_name_valid(tok, strlen(tok)))
			return fail(ps, "[alias %s] bad destination queue name '%s'", name, tok);
		if (!strcmp(tok, name))
			return fail(ps, "[alias %s] names itself as a destination", name);
		for (unsigned i = 0; i < a->ndest; i++)
			if (!strcmp(a->dest[i], tok))
				return fail(ps, "[alias %s] destination '%s' given twice", name, tok);
		if (a->ndest == CONFIG_ALIAS_DEST_MAX)
			return fail(ps, "[alias %s] has more than %d destinations", name,
				    CONFIG_ALIAS_DEST_MAX);
		d = realloc(a->dest, (a->ndest + 1) * sizeof(*d));
		if (!d)
			return fail(ps, "out of memory");
		a->dest = d;
		if (!(a->dest[a->ndest] = strdup(tok)))
			return fail(ps, "out of memory");
		a->ndest++;
	}
	return 1;
}

/* The aliases as a whole, once the file is read: each has destinations,
 * none is a destination of another (an alias fans out to queues only),
 * and no [queue NAME] section names an alias.  0, or a message in ps. */
static int aliases_check(struct parse_state *ps, const struct qoverride *ov)
{
	for (const struct config_alias *a = ps->c->aliases; a; a = a->next) {
		if (!a->ndest) {
			fail(ps, "[alias %s] has no destinations", a->name);
			return TERN_EINVAL;
		}
		for (unsigned i = 0; i < a->ndest; i++)
			if (config_alias_find(ps->c, a->dest[i], strlen(a->dest[i]))) {
				fail(ps, "[alias %s] destination '%s' is an alias (aliases name "
				     "queues only)", a->name, a->dest[i]);
				return TERN_EINVAL;
			}
		for (const struct qoverride *o = ov; o; o = o->next)
			if (!o->pattern && !strcmp(o->name, a->name)) {
				fail(ps, "'%s' is both an [alias] and a [queue] section", a->name);
				return TERN_EINVAL;
			}
	}
	return 0;
}

/*
 * Follows inih's reading of one line (its ini_parse_stream: a byte-order
 * mark, comments, continuation lines, section headers) to know the current
 * section by its whole name: inih hands the handler at most 49 bytes of it,
 * which would cut a long queue name short.  A [queue NAME] header is
 * checked and recorded here, so that a section without keys still names a
 * queue (auto_create = no).
 */
static void track_line(struct parse_state *ps, const char *line)
{
	const char *start = line, *end;
	size_t len;

	if (ps->line == 1 && !strncmp(start, "\xef\xbb\xbf", 3))
		start += 3;
	while (*start && isspace((unsigned char)*start))
		start++;
	if (!*start || *start == ';' || *start == '#')
		return;
	if (ps->had_key && start > line)
		return; /* a continuation of the previous key's value */
	if (*start != '[') {
		ps->had_key = 1;
		return;
	}
	for (end = start + 1; *end && *end != ']'; end++)
		if (*end == ';' && isspace((unsigned char)end[-1]))
			break; /* an inline comment: inih reports the line */
	if (*end != ']')
		return;
	len = (size_t)(end - start - 1);
	memcpy(ps->section, start + 1, len);
	ps->section[len] = '\0';
	ps->had_key = 0;
	if (!ps->failed && !strncmp(ps->section, "queue ", 6)) {
		const char *name = ps->section + 6;

		while (*name == ' ')
			name++;
		if (!section_name_valid(name))
			fail(ps, "bad queue name or pattern '%s' in section header", name);
		else
			add_qkey(ps, name, NULL, NULL);
	} else if (!ps->failed && !strncmp(ps->section, "alias ", 6)) {
		alias_header(ps, ps->section + 6);
	}
}

static char *read_line(char *str, int num, void *stream)
{
	struct parse_state *ps = stream;
	char *r = fgets(str, num, ps->f);

	if (r) {
		ps->line++;
		track_line(ps, r);
	}
	return r;
}

/* [access] USER = RIGHTS: checked now, kept as written (server/auth.c
 * applies them with the auth file). */
static int access_key(struct parse_state *ps, const char *user, const char *rights)
{
	struct access_rule *r, **tail;
	const char *why = auth_rights_check(rights);

	if (why)
		return fail(ps, "[access] %s: %s", user, why);
	if (!auth_user_name_valid(user, strlen(user)))
		return fail(ps, "[access] bad user name '%s'", user);
	for (tail = &ps->c->access; *tail; tail = &(*tail)->next)
		if (!strcmp((*tail)->user, user))
			return fail(ps, "[access] %s given twice", user);
	r = calloc(1, sizeof(*r));
	if (!r || !(r->user = strdup(user)) || !(r->rights = strdup(rights))) {
		if (r)
			free(r->user);
		free(r);
		return fail(ps, "out of memory");
	}
	*tail = r;
	return 1;
}

/* Fails on the bad value val of key k, with the key's own words. */
static int key_fail(struct parse_state *ps, const struct config_key *k, const char *val)
{
	const char *at = strstr(k->help, "%s");

	if (!at)
		return fail(ps, "%s", k->help);
	return fail(ps, "%.*s%s%s", (int)(at - k->help), k->help, val, at + 2);
}

static int handler(void *user, const char *cut_section, const char *key, const char *val)
{
	struct parse_state *ps = user;
	struct config *c = ps->c;
	/* the whole name (track_line), not inih's copy of at most 49 bytes */
	const char *section = ps->section;
	const struct config_key *k;

	if (ps->failed)
		return 0;
	if (!strcmp(section, "server") || !strcmp(section, "journal") ||
	    !strcmp(section, "queues")) {
		if (!(k = key_find(section, key)))
			return fail(ps, "unknown key '%s' in [%s]", key, section);
		return key_set(k, c, val) ? key_fail(ps, k, val) : 1;
	}
	if (!strcmp(section, "access"))
		return access_key(ps, key, val);
	if (!strncmp(section, "alias ", 6))
		return alias_key(ps, section + 6, key, val);
	if (!strncmp(section, "queue ", 6)) {
		const char *name = section + 6;
		struct queue_conf tmp = c->qdefault;

		while (*name == ' ')
			name++;
		/* the name was checked with the header (track_line); the key
		 * is checked now and applied once the file is read */
		if (!(k = key_find(section, key)))
			return fail(ps, "unknown key '%s' in [queue %s]", key, name);
		if (k->type->parse(k, (char *)&tmp + k->off, val))
			return key_fail(ps, k, val);
		return add_qkey(ps, name, key, val);
	}
	return fail(ps, "unknown section [%s]", section);
}

static void free_access(struct access_rule *r)
{
	while (r) {
		struct access_rule *next = r->next;

		free(r->user);
		free(r->rights);
		free(r);
		r = next;
	}
}

static void free_keys(struct qkey *k)
{
	while (k) {
		struct qkey *next = k->next;

		free(k->name);
		free(k->key);
		free(k->value);
		free(k);
		k = next;
	}
}

static void free_overrides(struct qoverride *o)
{
	while (o) {
		struct qoverride *next = o->next;

		free_keys(o->keys);
		free(o->name);
		free(o);
		o = next;
	}
}

/* The section named exactly name (a queue's, or a pattern's own). */
static struct qoverride *override_find(const struct qoverride *o, const char *name)
{
	for (; o; o = o->next)
		if (!strcmp(o->name, name))
			return (struct qoverride *)o;
	return NULL;
}

/* The first pattern section, in file order, that queue name matches. */
static struct qoverride *pattern_match(const struct qoverride *o, const char *name)
{
	for (; o; o = o->next)
		if (o->pattern && fnmatch(o->name, name, 0) == 0)
			return (struct qoverride *)o;
	return NULL;
}

/* Applies o's keys, in file order, on top of base. */
static void override_apply(struct qoverride *o, const struct queue_conf *base)
{
	const struct qkey *q;

	o->conf = *base;
	for (q = o->keys; q; q = q->next) {
		const struct config_key *k = key_find("queues", q->key);

		/* (validated when read) */
		k->type->parse(k, (char *)&o->conf + k->off, q->value);
	}
}

/* Resolves the keys read into one entry per section (in the order the
 * sections first appear), on top of the final [queues] defaults: patterns
 * first, then each queue's own section on top of the first pattern it
 * matches.  Each key moves from *keys to its section's entry, which keeps
 * them as written for --dump-config.  0 or TERN_ENOMEM (*out is then NULL;
 * the keys not yet moved stay in *keys). */
static int resolve_overrides(const struct config *c, struct qkey **keys,
			     struct qoverride **out)
{
	struct qoverride *list = NULL, **tail = &list, *o;
	struct qkey *k;

	while ((k = *keys)) {
		o = override_find(list, k->name);
		if (!o) {
			o = calloc(1, sizeof(*o));
			if (!o || !(o->name = strdup(k->name))) {
				free(o);
				free_overrides(list);
				*out = NULL;
				return TERN_ENOMEM;
			}
			o->pattern = is_pattern(o->name);
			o->keys_tail = &o->keys;
			*tail = o;
			tail = &o->next;
		}
		*keys = k->next;
		k->next = NULL;
		if (!k->key) { /* a header: the entry is all it adds */
			free_keys(k);
			continue;
		}
		*o->keys_tail = k;
		o->keys_tail = &k->next;
	}
	for (o = list; o; o = o->next)
		if (o->pattern)
			override_apply(o, &c->qdefault);
	for (o = list; o; o = o->next) {
		const struct qoverride *p;

		if (o->pattern)
			continue;
		p = pattern_match(list, o->name);
		override_apply(o, p ? &p->conf : &c->qdefault);
	}
	*out = list;
	return 0;
}

/* config_load's work on the open file f (closed here). */
static int config_read(struct config *c, const char *path, FILE *f, char *err, size_t errlen)
{
	struct config n = *c;
	struct parse_state ps;
	int rc;

	memset(&ps, 0, sizeof(ps));
	/* A reload starts again from the built-in defaults of what it applies
	 * (the keys marked K_RELOAD, every queue key among them), so that
	 * removing a key from the file takes effect. */
	keys_default(&n, K_RELOAD);
	n.overrides = NULL;
	n.access = NULL; /* the file's [access] replaces the previous one */
	n.aliases = NULL; /* and its [alias] sections the previous ones */
	ps.c = &n;
	ps.path = path;
	ps.err = err;
	ps.errlen = errlen;
	ps.tail = &ps.keys;
	ps.f = f;
	rc = check_text(&ps);
	if (rc) {
		fclose(ps.f);
		return rc;
	}
	rc = ini_parse_stream(read_line, &ps, handler, &ps);
	fclose(ps.f);
	if (rc != 0 && !ps.failed) {
		ps.line = rc > 0 ? rc : ps.line;
		snprintf(err, errlen, "%s:%d: syntax error", path, ps.line);
		ps.failed = 1;
	}
	if (!ps.failed && resolve_overrides(&n, &ps.keys, &n.overrides) < 0) {
		snprintf(err, errlen, "%s: out of memory", path);
		ps.failed = 1;
	}
	free_keys(ps.keys);
	if (!ps.failed) {
		ps.line = 0;
		aliases_check(&ps, n.overrides);
	}
	if (ps.failed) {
		free_overrides(n.overrides);
		free_access(n.access);
		free_aliases(n.aliases);
		return TERN_EINVAL;
	}
	free_overrides(c->overrides);
	free_access(c->access);
	free_aliases(c->aliases);
	snprintf(n.path, sizeof(n.path), "%s", path);
	*c = n;
	return 0;
}

int config_load(struct config *c, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "re");

	if (!f) {
		snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
		return TERN_ESYS;
	}
	return config_read(c, path, f, err, errlen);
}

int config_load_text(struct config *c, const char *path, const char *text, size_t len,
		     char *err, size_t errlen)
{
	/* (an empty file is no buffer for fmemopen: any readable byte does) */
	FILE *f = fmemopen((void *)(len ? text : "\n"), len ? len : 1, "r");

	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return TERN_ENOMEM;
	}
	return config_read(c, path, f, err, errlen);
}

void config_queue_conf(const struct config *c, const char *name,
		       struct queue_conf *out)
{
	/* a name has no wildcard: only its own section matches it exactly */
	const struct qoverride *o = override_find(c->overrides, name);

	if (!o)
		o = pattern_match(c->overrides, name);
	*out = o ? o->conf : c->qdefault;
	if (out->max_item_size > c->max_item_size)
		out->max_item_size = c->max_item_size;
	if (c->sync_forced)
		out->jopts.sync = c->forced_sync;
}

int config_queue_known(const struct config *c, const char *name)
{
	if (override_find(c->overrides, name) || pattern_match(c->overrides, name))
		return 1;
	/* an alias's destinations are named by the file too */
	for (const struct config_alias *a = c->aliases; a; a = a->next)
		for (unsigned i = 0; i < a->ndest; i++)
			if (!strcmp(a->dest[i], name))
				return 1;
	return 0;
}

uint32_t config_max_handshakes(const struct config *c)
{
	if (c->max_handshakes)
		return c->max_handshakes;
	return c->max_connections > 1 ? c->max_connections / 2 : 1;
}

void config_free(struct config *c)
{
	free_aliases(c->aliases);
	c->aliases = NULL;
	free_overrides(c->overrides);
	c->overrides = NULL;
	free_access(c->access);
	c->access = NULL;
}

void config_set_by_cli(struct config *c, const char *key)
{
	if (!config_by_cli(c, key) && c->ncli < CONFIG_CLI_MAX)
		c->cli_keys[c->ncli++] = key;
}

int config_by_cli(const struct config *c, const char *key)
{
	for (unsigned i = 0; i < c->ncli; i++)
		if (!strcmp(c->cli_keys[i], key))
			return 1;
	return 0;
}

enum log_level config_log_level(const struct config *c)
{
	enum log_level l = c->log_level;

	if (c->verbose && l < LOG_LEVEL_INFO)
		l = LOG_LEVEL_INFO;
	if (c->verbose > 1)
		l = LOG_LEVEL_DEBUG;
	return l;
}

void config_each(const struct config *c, config_fn *fn, void *arg)
{
	const struct qoverride *o;
	char v[sizeof(c->path) + 16], sect[8 + TERN_NAME_MAX];

	for (size_t i = 0; i < NKEYS; i++) {
		const struct config_key *k = &config_keys[i];

		if (k->type == &t_sync && c->sync_forced) /* --sync */
			snprintf(v, sizeof(v), "%s", journal_sync_name(c->forced_sync));
		else
			k->type->format(k, key_cfield(k, c), v, sizeof(v));
		fn(arg, k->section, k->name, v);
	}
	for (const struct access_rule *r = c->access; r; r = r->next)
		fn(arg, "access", r->user, r->rights);
	for (const struct config_alias *a = c->aliases; a; a = a->next) {
		char list[CONFIG_LINE_MAX + 1];
		size_t used = 0;

		list[0] = '\0';
		for (unsigned i = 0; i < a->ndest && used < sizeof(list); i++)
			used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s",
						 i ? " " : "", a->dest[i]);
		snprintf(sect, sizeof(sect), "alias %s", a->name);
		fn(arg, sect, "destinations", list);
	}
	for (o = c->overrides; o; o = o->next) {
		snprintf(sect, sizeof(sect), "queue %s", o->name);
		if (!o->keys)
			fn(arg, sect, NULL, NULL);
		for (const struct qkey *k = o->keys; k; k = k->next) {
			const char *val = k->value;

			if (c->sync_forced && !strcmp(k->key, "sync"))
				val = journal_sync_name(c->forced_sync);
			fn(arg, sect, k->key, val);
		}
	}
}

/* config_each_changed: a's fixed sections, as formatted, one
 * "\nSECTION.KEY=VALUE" line each (a value holds no newline: the file's
 * lines are its values). */
struct changed_ctx {
	FILE *f;
	const char *text;
	config_change_fn *fn;
	void *arg;
};

static int fixed_section(const char *section)
{
	return !strcmp(section, "server") || !strcmp(section, "journal") ||
	       !strcmp(section, "queues");
}

static void collect_setting(void *arg, const char *section, const char *key, const char *value)
{
	struct changed_ctx *x = arg;

	if (key && fixed_section(section))
		fprintf(x->f, "\n%s.%s=%s", section, key, value);
}

static void compare_setting(void *arg, const char *section, const char *key, const char *value)
{
	struct changed_ctx *x = arg;
	char needle[64], *was;
	const char *p, *end;
	size_t n;

	if (!key || !fixed_section(section))
		return;
	snprintf(needle, sizeof(needle), "\n%s.%s=", section, key);
	p = strstr(x->text, needle);
	if (!p) { /* cannot happen: both list every key */
		x->fn(x->arg, section, key, "", value);
		return;
	}
	p += strlen(needle);
	end = strchr(p, '\n');
	n = end ? (size_t)(end - p) : strlen(p);
	if (strlen(value) == n && !memcmp(p, value, n))
		return;
	was = strndup(p, n);
	x->fn(x->arg, section, key, was ? was : "", value);
	free(was);
}

int config_each_changed(const struct config *a, const struct config *b,
			config_change_fn *fn, void *arg)
{
	struct changed_ctx x = { .fn = fn, .arg = arg };
	char *text = NULL;
	size_t len = 0;

	x.f = open_memstream(&text, &len);
	if (!x.f)
		return TERN_ENOMEM;
	config_each(a, collect_setting, &x);
	fputc('\n', x.f);
	if (fclose(x.f) != 0 || !text) {
		free(text);
		return TERN_ENOMEM;
	}
	x.text = text;
	config_each(b, compare_setting, &x);
	free(text);
	return 0;
}

struct dump_state {
	FILE *f;
	char section[8 + TERN_NAME_MAX];
};

static void dump_one(void *arg, const char *section, const char *key, const char *value)
{
	struct dump_state *d = arg;

	if (strcmp(section, d->section)) {
		fprintf(d->f, "%s[%s]\n", d->section[0] ? "\n" : "", section);
		snprintf(d->section, sizeof(d->section), "%s", section);
	}
	if (key)
		fprintf(d->f, "%s = %s\n", key, value);
}

void config_dump(const struct config *c, FILE *f)
{
	struct dump_state d = { f, "" };

	fprintf(f, "# ternd %s effective configuration: %s%s and the command line\n",
		TERN_VERSION, c->path[0] ? "file " : "built-in defaults", c->path);
	config_each(c, dump_one, &d);
}
