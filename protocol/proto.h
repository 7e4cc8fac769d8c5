/*
 * proto.h: the memcached text protocol as tern speaks it (Kestrel-style
 * queue semantics).  Pure: no I/O, no allocation.  The server finds a line
 * (memchr for '\n'), strips "\n" and one optional "\r", and hands it here.
 *
 * Verbs: proto_parse() for request lines, proto_key_parse() for one key
 * with its Kestrel options (shared with the binary and meta codecs),
 * proto_reply() for the fixed reply strings, proto_value_header() for
 * "VALUE ..." lines, proto_refusal() for the commands tern answers but does
 * not implement, and proto_cmd_name() for stats and logging.
 */
#ifndef TERN_PROTO_H
#define TERN_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "../lib/tern.h"

/* Longest request line accepted (without CRLF).  A longer line without a
 * newline is an error and the connection is closed. */
#define PROTO_LINE_MAX 8192
/* Most keys in one get/gets (memcache clients batch get_many into one
 * line; 512 keys of 15 bytes fill the line limit). */
#define PROTO_MAX_KEYS 512
/* Longest queue name (bytes). */
#define PROTO_NAME_MAX 250
/* Longest whole key, options included, in the binary and meta protocols
 * (memcached's key limit, which their clients enforce too).  Text keys may
 * carry options past it: only their queue name is limited. */
#define PROTO_KEY_MAX 250
/* Largest /t= timeout accepted, in ms (one day). */
#define PROTO_TIMEOUT_MAX 86400000
/* Most items one /peek=<n> shows (its reply holds them all at once). */
#define PROTO_PEEK_MAX 1000
/* Largest delay of a delayed set, in ms (30 days). */
#define PROTO_DELAY_MAX 2592000000u

/*
 * The version tern reports: memcached's number first, because clients
 * (libmemcached, PHP's Memcached, dalli) parse it to decide what the
 * server can do and refuse anything that is not 1.x; it names the memcached
 * release whose text, meta and binary protocols tern follows.  tern's own
 * version follows as a second word ("VERSION 1.6.21 tern-0.1.0").
 */
#define PROTO_MEMCACHED_VERSION "1.6.21"
#define PROTO_VERSION PROTO_MEMCACHED_VERSION " tern-" TERN_VERSION

/*
 * X-macro table of commands: enum suffix, wire word, shape.  Shapes:
 *   CMD   a command tern implements (add: set, but only into a queue
 *         with no message waiting);
 *   STORE a storage command tern refuses: parsed as memcached's
 *         "<cmd> <key> <flags> <exptime> <bytes> [noreply]" ("cas" with a
 *         <cas unique> before noreply) so the server can swallow its data
 *         block and stay in step;
 *   LINE  a one-line command tern refuses (no data block follows).
 * Why each refused command is refused: PROTO_REFUSALS below.
 */
#define PROTO_COMMANDS(X)                              \
	X(GET, "get", CMD)                             \
	X(GETS, "gets", CMD)                           \
	X(SET, "set", CMD)                             \
	X(DELETE, "delete", CMD)                       \
	X(FLUSH, "flush", CMD)                         \
	X(FLUSH_ALL, "flush_all", CMD)                 \
	X(FLUSH_EXPIRED, "flush_expired", CMD)         \
	X(FLUSH_ALL_EXPIRED, "flush_all_expired", CMD) \
	X(STATS, "stats", CMD)                         \
	X(VERSION, "version", CMD)                     \
	X(VERBOSITY, "verbosity", CMD)                 \
	X(QUIT, "quit", CMD)                           \
	X(SHUTDOWN, "shutdown", CMD)                   \
	X(RELOAD, "reload", CMD)                       \
	X(MONITOR, "monitor", CMD)                     \
	X(CONFIRM, "confirm", CMD)                     \
	X(STATUS, "status", CMD)                       \
	X(ADD, "add", CMD)                             \
	X(REPLACE, "replace", STORE)                   \
	X(APPEND, "append", STORE)                     \
	X(PREPEND, "prepend", STORE)                   \
	X(CAS, "cas", STORE)                           \
	X(INCR, "incr", LINE)                          \
	X(DECR, "decr", LINE)                          \
	X(TOUCH, "touch", LINE)                        \
	X(GAT, "gat", LINE)                            \
	X(GATS, "gats", LINE)

enum proto_cmd {
#define PROTO_CMD_ENUM(e, w, shape) PROTO_CMD_##e,
	PROTO_COMMANDS(PROTO_CMD_ENUM)
#undef PROTO_CMD_ENUM
	PROTO_CMD__COUNT
};

/*
 * Why tern refuses each memcached command it does not implement (the
 * reason of the CLIENT_ERROR it answers; the binary protocol sends the
 * same text with status "not supported").  A queue holds immutable
 * messages: there is no value to change in place (append, prepend, cas,
 * incr, decr), no expiry to move once a message is queued (touch, gat),
 * and replace has no meaning for something that is appended to.  add
 * keeps one: a memcached key holds one value or none, a queue holds
 * messages or none, and "store only if there is none" is "enqueue only
 * into an empty queue" (which gives libmemcached's exist probe, and a lock
 * taken with add and released with delete, their meaning).
 */
#define PROTO_REFUSALS(X)                                                          \
	X(REPLACE, "replace not supported: a queue is appended to (set enqueues)") \
	X(APPEND, "append not supported: queued messages cannot be changed")       \
	X(PREPEND, "prepend not supported: queued messages cannot be changed")     \
	X(CAS, "cas not supported: queued messages cannot be changed")             \
	X(INCR, "incr not supported: queues hold no counters")                     \
	X(DECR, "decr not supported: queues hold no counters")                     \
	X(TOUCH, "touch not supported: a queued message keeps its exptime")        \
	X(GAT, "gat not supported: a queued message keeps its exptime (use get)")  \
	X(GATS, "gats not supported: a queued message keeps its exptime (use gets)")

/* get options (bit set in proto_key.opts) */
#define PROTO_OPT_OPEN 0x1
#define PROTO_OPT_CLOSE 0x2
#define PROTO_OPT_ABORT 0x4
#define PROTO_OPT_PEEK 0x8
#define PROTO_OPT_CLOSE_ID 0x10 /* close=<id>; delete <q>/<id> */
#define PROTO_OPT_ABORT_ID 0x20 /* abort=<id> */
#define PROTO_OPT_RESERVE 0x40  /* reserve: open by id */

struct proto_key {
	const char *raw;    /* the key as the client sent it, options included
			       (replies echo it); points into the caller's bytes */
	const char *name;   /* the queue name: raw up to the first '/' */
	uint16_t raw_len;   /* 1..PROTO_LINE_MAX */
	uint16_t len;       /* 1..PROTO_NAME_MAX, validated with tern_name_valid */
	uint8_t opts;       /* PROTO_OPT_* (get/gets only; delete: CLOSE_ID) */
	int32_t timeout_ms; /* /t=<ms>; -1 when absent */
	uint64_t item_id;   /* close=<id>, abort=<id>, delete <q>/<id>; else 0 */
	uint32_t delay_ms;  /* set: /delay=<n>[ms|s]; else 0 */
	uint16_t peek;      /* items to show without taking them: /peek 1,
			       /peek=<n> n (1..PROTO_PEEK_MAX); else 0 */
};

/*
 * What a stats request asks for: the text protocol's "stats [args]" and the
 * binary STAT key are read alike (proto_stats_parse).
 *   (nothing)           PROTO_STATS_ALL    general counters, every queue's
 *   <queue>             PROTO_STATS_QUEUE  that queue's counters
 *   queue <pattern>     PROTO_STATS_MATCH  the queues whose names match the
 *                                          shell-style pattern (* ? [..])
 *   settings            PROTO_STATS_SETTINGS every effective setting
 *                                          (memcached's group of that name)
 *   another of memcached's groups (items, slabs, conns, ...):
 *                       PROTO_STATS_GROUP  refused (proto_stats_parse's
 *                                          reason)
 * A queue named like a group ("settings" included) is reached as
 * "stats queue <name>".
 */
enum proto_stats_kind {
	PROTO_STATS_ALL,
	PROTO_STATS_QUEUE,
	PROTO_STATS_MATCH,
	PROTO_STATS_GROUP,
	PROTO_STATS_SETTINGS,
};

struct proto_stats {
	enum proto_stats_kind kind;
	const char *arg;  /* QUEUE: the name; MATCH: the pattern (into the
			     caller's bytes, not NUL-terminated) */
	uint16_t len;
};

/* memcached's stats groups that tern refuses (a queue server has no
 * slabs, items or per-size tables); "settings" it answers. */
#define PROTO_STATS_GROUPS(X)                                               \
	X("items") X("slabs") X("sizes") X("sizes_enable")                  \
	X("sizes_disable") X("conns") X("detail") X("reset") X("cachedump") \
	X("extstore") X("proxy") X("proxyfuncs") X("proxybe")

/*
 * Parses the arguments of a stats request (len bytes at s: what follows
 * "stats" on a text line, or a binary STAT key; blanks separate words)
 * into st.  Returns NULL, or a reason (static, no CRLF): "bad queue name",
 * "bad stats pattern", "queue name too long", "bad command line format",
 * or for a memcached group (kind PROTO_STATS_GROUP) "stats groups not
 * supported (stats queue <pattern>)".
 */
const char *proto_stats_parse(const char *s, size_t len, struct proto_stats *st);

struct proto_req {
	enum proto_cmd cmd;
	unsigned nkeys;    /* get/gets: 1..PROTO_MAX_KEYS; set, add, delete,
			      flush, flush_expired, monitor, confirm: 1;
			      others: 0 */
	struct proto_key keys[PROTO_MAX_KEYS];
	uint32_t flags;    /* set, add */
	int64_t exptime;   /* set, add: raw value from the line (>= 0) */
	uint64_t bytes;    /* set and refused storage commands: body length
			      (the server checks limits) */
	int noreply;       /* set, add, delete, flush, flush_all, flush_expired,
			      verbosity, confirm, refused commands: "noreply"
			      was given */
	uint32_t seconds;  /* monitor: <seconds> (>=1) */
	uint32_t count;    /* monitor: [max] (0 = no limit); confirm: <count> */
	int32_t delay;     /* flush_all [delay]: parsed and accepted, >= 0 */
	int64_t verbosity; /* verbosity <level>: memcached's level (0 and up),
			      or -1 when the level is neither a number nor a
			      log level's name (answered CLIENT_ERROR unless
			      noreply, as memcached does) */
	int log_level;     /* verbosity <name>: tern's log level named
			      (enum log_level: error, warn, info, debug),
			      else -1 */
	struct proto_stats stats; /* stats: what it asks for */
	const char *word;  /* status: the status word to set (into the
			      line), or NULL to read; nkeys 1 with the
			      queue form (status queue <name> [word]) */
	uint16_t word_len;
};

enum proto_status {
	PROTO_OK = 0,           /* req is filled in */
	PROTO_ERROR = 1,        /* unknown/empty command: reply "ERROR\r\n" */
	PROTO_CLIENT_ERROR = 2, /* malformed: reply "CLIENT_ERROR <reason>\r\n" */
};

/*
 * Parses one request line.  line/len: the line without its "\r\n" (or
 * "\n").  Tokens are separated by one or more spaces (or tabs); leading and
 * trailing blanks are ignored (python-memcache sends "set k 16 0 2 \r\n").
 * On PROTO_OK, req is filled and its key names point into line; a refused
 * command (proto_refusal() != NULL) is PROTO_OK too, with bytes set for a
 * storage command: the server swallows bytes + 2 and answers the refusal.
 * status takes "", "<word>", "queue <name>" or "queue <name> <word>" (the
 * word is not checked here: the server knows the statuses).
 * version, verbosity and stats take arguments as memcached 1.6 does:
 * version ignores any (noreply included: it is always answered);
 * verbosity takes one or two (a second is ignored unless it is noreply;
 * other counts are PROTO_ERROR), its level a number or, tern's own, a log
 * level's name (req->log_level), else req->verbosity is -1; "stats noreply" is PROTO_ERROR (stats takes no noreply).
 * delete takes a queue name, or "<queue>/<id>" to confirm the item opened
 * by id <id> (key opts PROTO_OPT_CLOSE_ID, item_id).
 * On PROTO_CLIENT_ERROR, *reason is a static string without "CLIENT_ERROR "
 * and without CRLF (e.g. "bad command line format", "bad data chunk",
 * "queue name too long", "bad queue name", "bad get option"), and *swallow
 * is the number of bytes the server must discard after this line to stay in
 * sync (for a rejected set or storage command whose length token parsed:
 * bytes + 2; otherwise 0).  On PROTO_ERROR, *swallow is 0.
 * swallow and reason must not be NULL.
 */
enum proto_status proto_parse(const char *line, size_t len, struct proto_req *req,
			      const char **reason, uint64_t *swallow);

/*
 * Parses one key "name[/opt]..." of len bytes at s into k (k->raw = s).
 * Options (Kestrel's): t=<ms>, open, close, abort, peek, in any order, each
 * at most once; close+open together confirms the last item and opens the
 * next; peek or abort with open or close is refused.  peek=<n> (1 to
 * PROTO_PEEK_MAX) shows the first n items (k->peek), as peek the first.
 * Reliable reads by id: reserve opens the item for no connection (its id is the cas), close=<id>
 * confirms that item, abort=<id> returns it to the head; <id> is 1 to
 * 2^63-1 in decimal.  reserve goes with t= and close=<id> (confirm, then
 * reserve the next) only; close=<id> with reserve, open or t=; abort=<id>
 * with t= only.  A text get (not gets) refuses reserve: it would not show
 * the id ("reserve needs gets").
 * Returns NULL, or the reason it is refused (a static string as for
 * proto_parse: "queue name too long", "bad queue name", "bad get option",
 * "bad get option combination", "bad timeout", "bad item id", "bad peek
 * count").
 */
const char *proto_key_parse(const char *s, size_t len, struct proto_key *k);

/*
 * Parses a set's key "name[/delay=<n>]" (text set and add, binary set and
 * add) into k: <n> is milliseconds, or seconds with an "s" suffix ("ms" is
 * accepted too), up to PROTO_DELAY_MAX; k->delay_ms gets it.  Returns NULL,
 * or "queue name too long", "bad queue name" (any other option), "bad
 * delay".
 */
const char *proto_set_key_parse(const char *s, size_t len, struct proto_key *k);
/* Parses a delay "<n>", "<n>ms" or "<n>s" into milliseconds; 0 or -1 when
 * malformed or above PROTO_DELAY_MAX.  Shared by the three protocols. */
int proto_parse_delay(const char *s, size_t len, uint32_t *ms);

/* Fixed replies, each with its CRLF. */
#define PROTO_REPLIES(X)                \
	X(STORED, "STORED\r\n")         \
	X(NOT_STORED, "NOT_STORED\r\n") \
	X(END, "END\r\n")               \
	X(DELETED, "DELETED\r\n")       \
	X(NOT_FOUND, "NOT_FOUND\r\n")   \
	X(OK, "OK\r\n")                 \
	X(ERROR, "ERROR\r\n")

enum proto_reply {
#define PROTO_REPLY_ENUM(e, s) PROTO_REPLY_##e,
	PROTO_REPLIES(PROTO_REPLY_ENUM)
#undef PROTO_REPLY_ENUM
	PROTO_REPLY__COUNT
};

/* Returns the reply string for r and its length in *len (never NULL). */
const char *proto_reply(enum proto_reply r, size_t *len);

/* Room proto_value_header needs besides the key: "VALUE ", three numbers
 * (the cas unique up to 20 digits), their blanks and CRLF. */
#define PROTO_VALUE_HEADER_EXTRA 64

/*
 * Formats "VALUE <key> <flags> <bytes>\r\n", or with with_cas
 * "VALUE <key> <flags> <bytes> <cas>\r\n" (gets), into buf, which must
 * hold key_len + PROTO_VALUE_HEADER_EXTRA bytes.  key is written as given
 * (the requested key, options included).  Returns the bytes written.
 */
size_t proto_value_header(char *buf, const char *key, size_t key_len,
			  uint32_t flags, uint32_t bytes, int with_cas, uint64_t cas);

/* Why tern refuses cmd (a static string without CRLF), or NULL when cmd is
 * one tern implements. */
const char *proto_refusal(enum proto_cmd cmd);

/* Whether a data block follows cmd's line (set, add, and the storage
 * commands tern refuses): bytes + 2 of it. */
int proto_cmd_takes_body(enum proto_cmd cmd);

/* The wire word of a command ("get", "set", ...). */
const char *proto_cmd_name(enum proto_cmd cmd);

/* Writes v in decimal at p (room for 20 digits); returns the digits
 * written.  Shared by the encoders of the three protocols. */
size_t proto_put_u64(char *p, uint64_t v);

/* Parses len bytes at s as an unsigned decimal number of digits only (no
 * sign, blank or base prefix) into *out.  Returns 0, or -1 when the token
 * is empty, holds a non-digit, or is above max.  Shared by the parsers. */
int proto_parse_uint(const char *s, size_t len, uint64_t max, uint64_t *out);

#endif
