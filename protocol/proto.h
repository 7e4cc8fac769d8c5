/*
 * proto.h: the memcached text protocol as tern speaks it (Kestrel-style
 * queue semantics).  Pure: no I/O, no allocation.  The server finds a line
 * (memchr for '\n'), strips "\n" and one optional "\r", and hands it here.
 *
 * Four verbs: proto_parse() for request lines, proto_reply() for the fixed
 * reply strings, proto_value_header() for "VALUE ..." lines and
 * proto_cmd_name() for stats/logging.
 */
#ifndef TERN_PROTO_H
#define TERN_PROTO_H

#include <stddef.h>
#include <stdint.h>

/* Longest request line accepted (without CRLF).  A longer line without a
 * newline is an error and the connection is closed. */
#define PROTO_LINE_MAX 8192
/* Most keys in one get/gets (memcache clients batch get_many into one
 * line; 512 keys of 15 bytes fill the line limit). */
#define PROTO_MAX_KEYS 512
/* Longest queue name (bytes). */
#define PROTO_NAME_MAX 250
/* Largest /t= timeout accepted, in ms (one day). */
#define PROTO_TIMEOUT_MAX 86400000
/* Largest exptime accepted after conversion: any int64 is parsed; values
 * < 0 are CLIENT_ERROR. */

/* X-macro table of commands: enum suffix, wire word. */
#define PROTO_COMMANDS(X)                     \
	X(GET, "get")                         \
	X(GETS, "gets")                       \
	X(SET, "set")                         \
	X(DELETE, "delete")                   \
	X(FLUSH, "flush")                     \
	X(FLUSH_ALL, "flush_all")             \
	X(FLUSH_EXPIRED, "flush_expired")     \
	X(FLUSH_ALL_EXPIRED, "flush_all_expired") \
	X(STATS, "stats")                     \
	X(VERSION, "version")                 \
	X(VERBOSITY, "verbosity")             \
	X(QUIT, "quit")                       \
	X(SHUTDOWN, "shutdown")               \
	X(RELOAD, "reload")                   \
	X(MONITOR, "monitor")                 \
	X(CONFIRM, "confirm")

enum proto_cmd {
#define PROTO_CMD_ENUM(e, w) PROTO_CMD_##e,
	PROTO_COMMANDS(PROTO_CMD_ENUM)
#undef PROTO_CMD_ENUM
	PROTO_CMD__COUNT
};

/* get options (bit set in proto_key.opts) */
#define PROTO_OPT_OPEN 0x1
#define PROTO_OPT_CLOSE 0x2
#define PROTO_OPT_ABORT 0x4
#define PROTO_OPT_PEEK 0x8

struct proto_key {
	const char *name; /* points into the line; not NUL-terminated */
	uint16_t len;     /* 1..PROTO_NAME_MAX, validated with tern_name_valid */
	uint8_t opts;     /* PROTO_OPT_* (get/gets only) */
	int32_t timeout_ms; /* /t=<ms>; -1 when absent */
};

struct proto_req {
	enum proto_cmd cmd;
	unsigned nkeys;    /* get/gets: 1..PROTO_MAX_KEYS; set, delete,
			      flush, flush_expired, monitor, confirm: 1;
			      others: 0 */
	struct proto_key keys[PROTO_MAX_KEYS];
	uint32_t flags;    /* set */
	int64_t exptime;   /* set: raw value from the line (>= 0) */
	uint64_t bytes;    /* set: body length (the server checks limits) */
	int noreply;       /* set, delete, flush, flush_all, flush_expired,
			      verbosity, confirm: "noreply" was given */
	uint32_t seconds;  /* monitor: <seconds> (>=1) */
	uint32_t count;    /* monitor: [max] (0 = no limit); confirm: <count> */
	int32_t delay;     /* flush_all [delay]: parsed and accepted, >= 0 */
	int32_t verbosity; /* verbosity <level> */
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
 * On PROTO_OK, req is filled and its key names point into line.
 * On PROTO_CLIENT_ERROR, *reason is a static string without "CLIENT_ERROR "
 * and without CRLF (e.g. "bad command line format", "bad data chunk",
 * "queue name too long", "bad queue name", "bad get option"), and *swallow
 * is the number of bytes the server must discard after this line to stay in
 * sync (for a rejected set whose length token parsed: bytes + 2; otherwise
 * 0).  On PROTO_ERROR, *swallow is 0.
 * swallow and reason must not be NULL.
 */
enum proto_status proto_parse(const char *line, size_t len, struct proto_req *req,
			      const char **reason, uint64_t *swallow);

/* Fixed replies, each with its CRLF. */
#define PROTO_REPLIES(X)                                  \
	X(STORED, "STORED\r\n")                           \
	X(NOT_STORED, "NOT_STORED\r\n")                   \
	X(END, "END\r\n")                                 \
	X(DELETED, "DELETED\r\n")                         \
	X(NOT_FOUND, "NOT_FOUND\r\n")                     \
	X(OK, "OK\r\n")                                   \
	X(ERROR, "ERROR\r\n")                             \
	X(RESET, "RESET\r\n")

enum proto_reply {
#define PROTO_REPLY_ENUM(e, s) PROTO_REPLY_##e,
	PROTO_REPLIES(PROTO_REPLY_ENUM)
#undef PROTO_REPLY_ENUM
	PROTO_REPLY__COUNT
};

/* Returns the reply string for r and its length in *len (never NULL). */
const char *proto_reply(enum proto_reply r, size_t *len);

/* Formats "VALUE <name> <flags> <bytes>\r\n" into buf (size >= 300).
 * Returns the number of bytes written. */
size_t proto_value_header(char *buf, const char *name, size_t name_len,
			  uint32_t flags, uint32_t bytes);

/* The wire word of a command ("get", "set", ...). */
const char *proto_cmd_name(enum proto_cmd cmd);

#endif
