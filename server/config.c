/* config.c: defaults, the INI file (inih) and per-queue settings. */
#include "config.h"
#include "auth.h"

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_ITEM_SIZE_LIMIT (1024ULL * 1024 * 1024)
/* Records address a segment with 32-bit offsets; the journal clamps to 2G. */
#define SEGMENT_SIZE_MAX (2048ULL * 1024 * 1024)

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

void config_defaults(struct config *c)
{
	memset(c, 0, sizeof(*c));
	strcpy(c->listen, "127.0.0.1");
	c->port = 22133;
	strcpy(c->data_dir, "./data");
	c->max_connections = 1024;
	c->metrics_max_connections = 16;
	c->metrics_timeout_s = 10;
	c->request_timeout_s = REQUEST_TIMEOUT_DEFAULT;
	c->handshake_timeout_s = HANDSHAKE_TIMEOUT_DEFAULT;
	c->auth_max_failures = AUTH_MAX_FAILURES_DEFAULT;
	c->auth_failure_delay_ms = AUTH_FAILURE_DELAY_MS_DEFAULT;
	c->max_queues = MAX_QUEUES_DEFAULT;
	c->auto_create = 1;
	c->max_item_size = 1024 * 1024;
	c->output_high_water = 4 * 1024 * 1024;
	c->poll_us = POLL_US_DEFAULT;
	c->group_wait_us = GROUP_WAIT_US_DEFAULT;
	c->unix_socket_mode = 0700;
	c->log_level = LOG_LEVEL_DEFAULT;
	c->log_output = LOG_OUTPUT_STDERR;
	queue_conf_default(&c->qdefault);
}

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

/*
 * Applies one [queues]/[queue NAME]/[journal] key to a queue_conf.
 * Returns NULL on success, else a message.  journal_only limits the keys to
 * those of [journal].
 */
static const char *queue_key(struct queue_conf *q, const char *key,
			     const char *val, int journal_only, int *known)
{
	uint64_t v;
	int b;

	*known = 1;
	if (!strcmp(key, "sync")) {
		if (journal_sync_parse(val, &q->jopts.sync))
			return "bad sync mode (expected none, interval, always or odsync)";
	} else if (!strcmp(key, "sync_interval_ms")) {
		if (parse_u64(val, 3600000, &v) || v == 0)
			return "sync_interval_ms must be 1..3600000";
		q->jopts.sync_interval_ms = (uint32_t)v;
	} else if (!strcmp(key, "preallocate")) {
		if (journal_prealloc_parse(val, &q->jopts.prealloc))
			return "bad preallocate value (expected auto, zero, fallocate or none)";
	} else if (!strcmp(key, "page_cache")) {
		if (journal_cache_parse(val, &q->jopts.cache))
			return "bad page_cache value (expected keep or drop)";
	} else if (!strcmp(key, "segment_size")) {
		if (config_parse_size(val, &v) || v < 65536 || v > SEGMENT_SIZE_MAX)
			return "segment_size must be between 64K and 2G";
		q->jopts.segment_size = v;
	} else if (!strcmp(key, "checkpoint_interval_ms")) {
		if (parse_u64(val, 3600000, &v) || v == 0)
			return "checkpoint_interval_ms must be 1..3600000";
		q->jopts.checkpoint_interval_ms = (uint32_t)v;
	} else if (!strcmp(key, "max_memory_size")) {
		if (config_parse_size(val, &v) || v < 4096)
			return "max_memory_size must be a size of at least 4K";
		q->jopts.max_memory_size = v;
	} else if (journal_only) {
		*known = 0;
	} else if (!strcmp(key, "max_items")) {
		if (parse_u64(val, UINT64_MAX, &v))
			return "max_items must be a non-negative integer";
		q->max_items = v;
	} else if (!strcmp(key, "max_size")) {
		if (config_parse_size(val, &v))
			return "max_size must be a size (e.g. 512M)";
		q->max_size = v;
	} else if (!strcmp(key, "max_item_size")) {
		if (config_parse_size(val, &v) || v == 0 || v > MAX_ITEM_SIZE_LIMIT)
			return "max_item_size must be between 1 and 1G";
		q->max_item_size = v;
	} else if (!strcmp(key, "max_age")) {
		if (parse_u64(val, 100ULL * 365 * 86400, &v))
			return "max_age must be seconds (0 = none)";
		q->max_age_ms = (int64_t)v * 1000;
	} else if (!strcmp(key, "discard_old_when_full")) {
		if (parse_bool(val, &b))
			return "discard_old_when_full must be yes or no";
		q->discard_old_when_full = b;
	} else if (!strcmp(key, "open_timeout")) {
		if (parse_u64(val, 86400000ULL * 365, &v))
			return "open_timeout must be milliseconds (0 = never)";
		q->open_timeout_ms = (int64_t)v;
	} else if (!strcmp(key, "max_open")) {
		if (parse_u64(val, 1000000, &v) || v == 0)
			return "max_open must be 1..1000000";
		q->max_open = (uint32_t)v;
	} else if (!strcmp(key, "max_deliveries")) {
		if (parse_u64(val, QUEUE_MAX_DELIVERIES, &v))
			return "max_deliveries must be 0..65535 (0 = no limit)";
		q->max_deliveries = (uint32_t)v;
	} else if (!strcmp(key, "dead_letter") || !strcmp(key, "expire_to")) {
		char *dst = key[0] == 'd' ? q->dead_letter : q->expire_to;
		size_t n = strlen(val);

		/* "" (or none) turns a default off for one queue */
		if (n && strcmp(val, "none") && (n > TERN_NAME_MAX || !tern_name_valid(val, n)))
			return key[0] == 'd' ? "dead_letter must be a queue name (or none)"
					     : "expire_to must be a queue name (or none)";
		if (!strcmp(val, "none"))
			n = 0;
		memcpy(dst, val, n);
		dst[n] = '\0';
	} else if (!strcmp(key, "max_queue_age")) {
		if (parse_u64(val, 100ULL * 365 * 86400, &v))
			return "max_queue_age must be seconds (0 = never)";
		q->max_queue_age_ms = (int64_t)v * 1000;
	} else if (!strcmp(key, "status")) {
		if (queue_status_parse(val, strlen(val), &q->status))
			return "status must be UP, READONLY or QUIESCENT";
	} else {
		*known = 0;
	}
	return NULL;
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

static int handler(void *user, const char *cut_section, const char *key, const char *val)
{
	struct parse_state *ps = user;
	struct config *c = ps->c;
	/* the whole name (track_line), not inih's copy of at most 49 bytes */
	const char *section = ps->section;
	uint64_t v;
	int known = 0, b;
	const char *msg;

	if (ps->failed)
		return 0;
	if (!strcmp(section, "server")) {
		if (!strcmp(key, "listen")) {
			if (!*val || strlen(val) >= sizeof(c->listen))
				return fail(ps, "bad listen address '%s'", val);
			strcpy(c->listen, val);
		} else if (!strcmp(key, "port")) {
			if (!strcmp(val, "off"))
				c->port = CONFIG_PORT_OFF;
			else if (parse_u64(val, 65535, &v))
				return fail(ps, "port must be 0..65535 or off, not '%s'", val);
			else
				c->port = (int)v;
		} else if (!strcmp(key, "data_dir")) {
			if (!*val || strlen(val) >= sizeof(c->data_dir))
				return fail(ps, "bad data_dir '%s'", val);
			strcpy(c->data_dir, val);
		} else if (!strcmp(key, "max_connections")) {
			if (parse_u64(val, 1000000, &v) || v == 0)
				return fail(ps, "max_connections must be 1..1000000, not '%s'", val);
			c->max_connections = (uint32_t)v;
		} else if (!strcmp(key, "max_item_size")) {
			if (config_parse_size(val, &v) || v == 0 || v > MAX_ITEM_SIZE_LIMIT)
				return fail(ps, "max_item_size must be between 1 and 1G, not '%s'", val);
			c->max_item_size = v;
			c->qdefault.max_item_size = v;
		} else if (!strcmp(key, "idle_timeout")) {
			if (parse_u64(val, 86400 * 365, &v))
				return fail(ps, "idle_timeout must be seconds, not '%s'", val);
			c->idle_timeout_s = (uint32_t)v;
		} else if (!strcmp(key, "request_timeout")) {
			if (parse_u64(val, 86400, &v))
				return fail(ps, "request_timeout must be seconds 0..86400, not '%s'",
					    val);
			c->request_timeout_s = (uint32_t)v;
		} else if (!strcmp(key, "handshake_timeout")) {
			if (parse_u64(val, 86400, &v))
				return fail(ps, "handshake_timeout must be seconds 0..86400, not '%s'",
					    val);
			c->handshake_timeout_s = (uint32_t)v;
		} else if (!strcmp(key, "max_handshakes")) {
			if (!strcmp(val, "auto"))
				c->max_handshakes = 0;
			else if (parse_u64(val, 1000000, &v) || v == 0)
				return fail(ps, "max_handshakes must be 1..1000000 or auto, not '%s'",
					    val);
			else
				c->max_handshakes = (uint32_t)v;
		} else if (!strcmp(key, "max_queues")) {
			if (parse_u64(val, 100000000, &v))
				return fail(ps, "max_queues must be 0..100000000, not '%s'", val);
			c->max_queues = (uint32_t)v;
		} else if (!strcmp(key, "auto_create")) {
			if (parse_bool(val, &b))
				return fail(ps, "auto_create must be yes or no, not '%s'", val);
			c->auto_create = b;
		} else if (!strcmp(key, "enable_shutdown")) {
			if (parse_bool(val, &b))
				return fail(ps, "enable_shutdown must be yes or no, not '%s'", val);
			c->enable_shutdown = b;
		} else if (!strcmp(key, "output_high_water")) {
			if (config_parse_size(val, &v) || v < 4096)
				return fail(ps, "output_high_water must be a size >= 4K, not '%s'", val);
			c->output_high_water = v;
		} else if (!strcmp(key, "poll_us")) {
			if (parse_u64(val, POLL_US_MAX, &v))
				return fail(ps, "poll_us must be microseconds 0..%u, not '%s'",
					    POLL_US_MAX, val);
			c->poll_us = (uint32_t)v;
		} else if (!strcmp(key, "log_level")) {
			if (log_level_parse(val, &c->log_level))
				return fail(ps, "log_level must be error, warn, info or debug, not '%s'",
					    val);
		} else if (!strcmp(key, "log_output")) {
			if (log_output_parse(val, &c->log_output))
				return fail(ps, "log_output must be stderr or syslog, not '%s'", val);
		} else if (!strcmp(key, "unix_socket")) {
			if (set_str(c->unix_socket, sizeof(c->unix_socket), val))
				return fail(ps, "unix_socket must be a path of at most %zu bytes",
					    sizeof(c->unix_socket) - 1);
		} else if (!strcmp(key, "unix_socket_mode")) {
			if (config_parse_mode(val, &c->unix_socket_mode))
				return fail(ps, "unix_socket_mode must be octal permission bits "
					    "(0000..0777), not '%s'", val);
		} else if (!strcmp(key, "tls_listen")) {
			if (set_hostport(c->tls_listen, sizeof(c->tls_listen), val))
				return fail(ps, "tls_listen must be ADDR:PORT or [IPV6]:PORT, not '%s'", val);
		} else if (!strcmp(key, "tls_cert")) {
			if (set_str(c->tls_cert, sizeof(c->tls_cert), val))
				return fail(ps, "tls_cert: path too long");
		} else if (!strcmp(key, "tls_key")) {
			if (set_str(c->tls_key, sizeof(c->tls_key), val))
				return fail(ps, "tls_key: path too long");
		} else if (!strcmp(key, "tls_ca")) {
			if (set_str(c->tls_ca, sizeof(c->tls_ca), val))
				return fail(ps, "tls_ca: path too long");
		} else if (!strcmp(key, "tls_verify_client")) {
			if (strcmp(val, "required") && strcmp(val, "optional"))
				return fail(ps, "tls_verify_client must be required or optional, "
					    "not '%s'", val);
			c->tls_client_optional = !strcmp(val, "optional");
		} else if (!strcmp(key, "metrics_listen")) {
			if (set_hostport(c->metrics_listen, sizeof(c->metrics_listen), val))
				return fail(ps, "metrics_listen must be ADDR:PORT or [IPV6]:PORT, not '%s'",
					    val);
		} else if (!strcmp(key, "metrics_max_connections")) {
			if (parse_u64(val, 10000, &v) || v == 0)
				return fail(ps, "metrics_max_connections must be 1..10000, not '%s'",
					    val);
			c->metrics_max_connections = (uint32_t)v;
		} else if (!strcmp(key, "metrics_timeout")) {
			if (parse_u64(val, 3600, &v) || v == 0)
				return fail(ps, "metrics_timeout must be seconds 1..3600, not '%s'", val);
			c->metrics_timeout_s = (uint32_t)v;
		} else if (!strcmp(key, "user")) {
			if (set_str(c->user, sizeof(c->user), val))
				return fail(ps, "user: name too long");
		} else if (!strcmp(key, "auth_file")) {
			if (set_str(c->auth_file, sizeof(c->auth_file), val))
				return fail(ps, "auth_file: path too long");
		} else if (!strcmp(key, "auth_max_failures")) {
			if (parse_u64(val, 1000, &v))
				return fail(ps, "auth_max_failures must be 0..1000, not '%s'", val);
			c->auth_max_failures = (uint32_t)v;
		} else if (!strcmp(key, "auth_failure_delay_ms")) {
			if (parse_u64(val, AUTH_FAILURE_DELAY_MS_MAX, &v))
				return fail(ps, "auth_failure_delay_ms must be milliseconds 0..%u, "
					    "not '%s'", AUTH_FAILURE_DELAY_MS_MAX, val);
			c->auth_failure_delay_ms = (uint32_t)v;
		} else if (!strcmp(key, "status")) {
			if (queue_status_parse(val, strlen(val), &c->status))
				return fail(ps, "status must be UP, READONLY or QUIESCENT, not '%s'", val);
		} else {
			return fail(ps, "unknown key '%s' in [server]", key);
		}
		return 1;
	}
	if (!strcmp(section, "journal") && !strcmp(key, "group_wait_us")) {
		/* the journal's writer's, for every queue: not in [queues] */
		if (parse_u64(val, GROUP_WAIT_US_MAX, &v))
			return fail(ps, "group_wait_us must be microseconds 0..%u, not '%s'",
				    GROUP_WAIT_US_MAX, val);
		c->group_wait_us = (uint32_t)v;
		return 1;
	}
	if (!strcmp(section, "journal") || !strcmp(section, "queues")) {
		int jonly = !strcmp(section, "journal");

		msg = queue_key(&c->qdefault, key, val, jonly, &known);
		if (!known)
			return fail(ps, "unknown key '%s' in [%s]", key, section);
		if (msg)
			return fail(ps, "%s (got '%s')", msg, val);
		return 1;
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
		/* the name was checked with the header (track_line) */
		msg = queue_key(&tmp, key, val, 0, &known);
		if (!known)
			return fail(ps, "unknown key '%s' in [queue %s]", key, name);
		if (msg)
			return fail(ps, "%s (got '%s')", msg, val);
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
	const struct qkey *k;
	int known;

	o->conf = *base;
	for (k = o->keys; k; k = k->next)
		queue_key(&o->conf, k->key, k->value, 0, &known); /* validated when read */
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
	/* Reloads start again from the built-in defaults of what a reload
	 * changes (queue settings, the [server] keys server_reload copies), so
	 * removing a key from the file takes effect. */
	queue_conf_default(&n.qdefault);
	n.enable_shutdown = 0;
	n.tls_ca[0] = '\0';
	n.tls_client_optional = 0;
	n.request_timeout_s = REQUEST_TIMEOUT_DEFAULT;
	n.handshake_timeout_s = HANDSHAKE_TIMEOUT_DEFAULT;
	n.auth_max_failures = AUTH_MAX_FAILURES_DEFAULT;
	n.auth_failure_delay_ms = AUTH_FAILURE_DELAY_MS_DEFAULT;
	n.max_queues = MAX_QUEUES_DEFAULT;
	n.auto_create = 1;
	n.qdefault.max_item_size = n.max_item_size;
	n.overrides = NULL;
	n.access = NULL; /* the file's [access] replaces the previous one */
	n.aliases = NULL; /* and its [alias] sections the previous ones */
	n.status = QUEUE_UP;
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

static void fmt_u64(char *buf, size_t len, uint64_t v)
{
	snprintf(buf, len, "%llu", (unsigned long long)v);
}

void config_each(const struct config *c, config_fn *fn, void *arg)
{
	const struct queue_conf *q = &c->qdefault;
	const struct journal_opts *j = &q->jopts;
	const struct qoverride *o;
	char v[64], sect[8 + TERN_NAME_MAX];

#define S "server"
	fn(arg, S, "listen", c->listen);
	if (c->port == CONFIG_PORT_OFF)
		snprintf(v, sizeof(v), "off");
	else
		fmt_u64(v, sizeof(v), (uint64_t)c->port);
	fn(arg, S, "port", v);
	fn(arg, S, "data_dir", c->data_dir);
	fmt_u64(v, sizeof(v), c->max_connections);
	fn(arg, S, "max_connections", v);
	fmt_size(v, sizeof(v), c->max_item_size);
	fn(arg, S, "max_item_size", v);
	fmt_u64(v, sizeof(v), c->idle_timeout_s);
	fn(arg, S, "idle_timeout", v);
	fmt_u64(v, sizeof(v), c->request_timeout_s);
	fn(arg, S, "request_timeout", v);
	fmt_u64(v, sizeof(v), c->handshake_timeout_s);
	fn(arg, S, "handshake_timeout", v);
	if (c->max_handshakes)
		fmt_u64(v, sizeof(v), c->max_handshakes);
	else
		snprintf(v, sizeof(v), "auto");
	fn(arg, S, "max_handshakes", v);
	fmt_u64(v, sizeof(v), c->max_queues);
	fn(arg, S, "max_queues", v);
	fn(arg, S, "auto_create", c->auto_create ? "yes" : "no");
	fn(arg, S, "enable_shutdown", c->enable_shutdown ? "yes" : "no");
	fmt_size(v, sizeof(v), c->output_high_water);
	fn(arg, S, "output_high_water", v);
	fmt_u64(v, sizeof(v), c->poll_us);
	fn(arg, S, "poll_us", v);
	fn(arg, S, "log_level", log_level_name(c->log_level));
	fn(arg, S, "log_output", log_output_name(c->log_output));
	fn(arg, S, "unix_socket", c->unix_socket);
	snprintf(v, sizeof(v), "%04o", (unsigned)c->unix_socket_mode);
	fn(arg, S, "unix_socket_mode", v);
	fn(arg, S, "tls_listen", c->tls_listen);
	fn(arg, S, "tls_cert", c->tls_cert);
	fn(arg, S, "tls_key", c->tls_key);
	fn(arg, S, "tls_ca", c->tls_ca);
	fn(arg, S, "tls_verify_client", c->tls_client_optional ? "optional" : "required");
	fn(arg, S, "metrics_listen", c->metrics_listen);
	fmt_u64(v, sizeof(v), c->metrics_max_connections);
	fn(arg, S, "metrics_max_connections", v);
	fmt_u64(v, sizeof(v), c->metrics_timeout_s);
	fn(arg, S, "metrics_timeout", v);
	fn(arg, S, "user", c->user);
	fn(arg, S, "auth_file", c->auth_file);
	fmt_u64(v, sizeof(v), c->auth_max_failures);
	fn(arg, S, "auth_max_failures", v);
	fmt_u64(v, sizeof(v), c->auth_failure_delay_ms);
	fn(arg, S, "auth_failure_delay_ms", v);
	fn(arg, S, "status", queue_status_name(c->status));
#undef S
	fn(arg, "journal", "sync",
	   journal_sync_name(c->sync_forced ? c->forced_sync : j->sync));
	fmt_u64(v, sizeof(v), j->sync_interval_ms);
	fn(arg, "journal", "sync_interval_ms", v);
	fn(arg, "journal", "preallocate", journal_prealloc_name(j->prealloc));
	fn(arg, "journal", "page_cache", journal_cache_name(j->cache));
	fmt_size(v, sizeof(v), j->segment_size);
	fn(arg, "journal", "segment_size", v);
	fmt_u64(v, sizeof(v), j->checkpoint_interval_ms);
	fn(arg, "journal", "checkpoint_interval_ms", v);
	fmt_u64(v, sizeof(v), c->group_wait_us);
	fn(arg, "journal", "group_wait_us", v);
	fmt_u64(v, sizeof(v), q->max_items);
	fn(arg, "queues", "max_items", v);
	fmt_size(v, sizeof(v), q->max_size);
	fn(arg, "queues", "max_size", v);
	fmt_size(v, sizeof(v), q->max_item_size);
	fn(arg, "queues", "max_item_size", v);
	fmt_u64(v, sizeof(v), (uint64_t)(q->max_age_ms / 1000));
	fn(arg, "queues", "max_age", v);
	fn(arg, "queues", "discard_old_when_full", q->discard_old_when_full ? "yes" : "no");
	fmt_u64(v, sizeof(v), (uint64_t)q->open_timeout_ms);
	fn(arg, "queues", "open_timeout", v);
	fmt_u64(v, sizeof(v), q->max_open);
	fn(arg, "queues", "max_open", v);
	fmt_u64(v, sizeof(v), q->max_deliveries);
	fn(arg, "queues", "max_deliveries", v);
	fn(arg, "queues", "dead_letter", q->dead_letter[0] ? q->dead_letter : "none");
	fn(arg, "queues", "expire_to", q->expire_to[0] ? q->expire_to : "none");
	fmt_u64(v, sizeof(v), (uint64_t)(q->max_queue_age_ms / 1000));
	fn(arg, "queues", "max_queue_age", v);
	fn(arg, "queues", "status", queue_status_name(q->status));
	fmt_size(v, sizeof(v), j->max_memory_size);
	fn(arg, "queues", "max_memory_size", v);
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
