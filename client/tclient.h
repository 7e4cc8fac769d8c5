/*
 * tclient.h: a small client library for queue servers: the memcache queue
 * protocol (Kestrel/tern), and for comparison Redis lists (RESP) and
 * beanstalkd.  Used by tern-load and by the project's tests.
 *
 * Three layers, each usable alone:
 *  - tc_connect(): a TCP connection with a timeout (IPv4, IPv6, names).
 *  - Pure codec: tc_fmt_*() write requests into caller memory, and
 *    tc_parse_reply() parses one reply incrementally from a contiguous
 *    buffer without allocating or copying (the reply points into the buffer).
 *    This is what an event loop uses: it keeps its own buffers and reuses them.
 *  - struct tc_conn: a blocking, pipelining connection (queue many requests,
 *    flush once, read the replies one by one) with a per-call timeout, for
 *    tests and simple tools.  Its buffers grow to the largest message and are
 *    reused, so a steady stream allocates nothing per message.
 *
 * Errors: 0 or a count on success, negative TC_E* codes on failure; TC_ESYS
 * leaves errno set.  tc_strerror() names them.
 */
#ifndef TERN_TCLIENT_H
#define TERN_TCLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TC_ERRORS(X)                                              \
	X(TC_ESYS, -1, "system error (see errno)")                \
	X(TC_ENOMEM, -2, "out of memory")                         \
	X(TC_EINVAL, -3, "invalid argument")                      \
	X(TC_ETIMEDOUT, -4, "timed out")                          \
	X(TC_ECLOSED, -5, "connection closed by peer")            \
	X(TC_EPROTO, -6, "malformed reply")                       \
	X(TC_ERESOLVE, -7, "cannot resolve host")

enum tc_err {
#define TC_ERR_ENUM(name, val, text) name = (val),
	TC_ERRORS(TC_ERR_ENUM)
#undef TC_ERR_ENUM
};

/* Static text for a TC_E* code (for TC_ESYS, strerror(errno)). */
const char *tc_strerror(int err);

enum tc_proto {
	TC_MEMCACHE = 0, /* set/get, Kestrel-style queue semantics */
	TC_REDIS,        /* LPUSH / RPOP / BRPOP over RESP2 */
	TC_BEANSTALK,    /* use / put / watch / reserve-with-timeout / delete */
};

/* Parses "memcache", "redis" or "beanstalk"; returns -1 when unknown. */
int tc_proto_parse(const char *name);
const char *tc_proto_name(enum tc_proto p);

/*
 * Opens a TCP connection to host:port (numeric IPv4/IPv6 or a name), waiting
 * at most timeout_ms for the handshake.  On success returns 0 and stores a
 * connected, non-blocking socket with TCP_NODELAY in *fd (the caller closes
 * it).  Errors: TC_ERESOLVE, TC_ETIMEDOUT, TC_ESYS (errno: ECONNREFUSED...).
 */
int tc_connect(const char *host, int port, int timeout_ms, int *fd);

/* ---- codec -------------------------------------------------------------- */

enum tc_rtype {
	TC_R_STORED,       /* STORED, redis :n (LPUSH), beanstalk INSERTED id */
	TC_R_NOT_STORED,   /* NOT_STORED, beanstalk BURIED / JOB_TOO_BIG / DRAINING */
	TC_R_VALUE,        /* a message: data/len (and key, flags, id) */
	TC_R_END,          /* no message: END, redis nil, beanstalk TIMED_OUT */
	TC_R_DELETED,      /* DELETED */
	TC_R_NOT_FOUND,    /* NOT_FOUND */
	TC_R_OK,           /* other success lines: OK, +OK, USING, WATCHING, VERSION */
	TC_R_ERROR,        /* ERROR, redis -ERR, beanstalk UNKNOWN_COMMAND/BAD_FORMAT */
	TC_R_CLIENT_ERROR, /* CLIENT_ERROR reason */
	TC_R_SERVER_ERROR, /* SERVER_ERROR reason, beanstalk OUT_OF_MEMORY/INTERNAL_ERROR */
	TC_R_OTHER,        /* any other single line (e.g. STAT ..., redis :n) */
};

/* One parsed reply.  Pointers refer to the parse buffer and stay valid only
 * until the caller moves or overwrites those bytes. */
struct tc_reply {
	enum tc_rtype type;
	const char *line;  /* first line without CRLF */
	size_t line_len;
	const char *key;   /* memcache VALUE key / redis BRPOP list name */
	size_t key_len;
	const char *data;  /* TC_R_VALUE: body */
	size_t len;
	uint32_t flags;    /* memcache VALUE flags */
	uint64_t id;       /* beanstalk job id; redis integer reply; memcache
			      VALUE's cas field (gets; 0 when absent) */
};

/* Replies above this size are refused as malformed (protects against a
 * garbage length making the reader buffer forever). */
#define TC_VALUE_MAX (256u << 20)
/* Longest reply line accepted. */
#define TC_LINE_MAX 8192

/*
 * Parses one complete reply at buf[0..len).  Memcache get replies are for one
 * key: "VALUE k f n\r\n<n bytes>\r\nEND\r\n" is one reply.  Redis: simple
 * strings, errors, integers, bulk strings, nil and the two-element array of
 * BRPOP.  Beanstalk: every reply line, RESERVED with its body.
 * Returns the number of bytes the reply used (> 0) and fills *r; 0 when more
 * bytes are needed, with *need (if not NULL) set to the total length the reply
 * will need when that is known, else to len + 1; TC_EPROTO when the bytes
 * cannot be a reply.
 */
ssize_t tc_parse_reply(enum tc_proto p, const char *buf, size_t len,
		       struct tc_reply *r, size_t *need);

/*
 * Request formatting.  Each tc_fmt_*() writes into dst (which must have room
 * for TC_FMT_MAX(qlen) bytes) and returns the number of bytes written.
 *
 * A "put" (set / LPUSH / put) is tc_fmt_put_head(), then the body bytes, then
 * "\r\n" (TC_PUT_TAIL) in all three protocols.
 */
#define TC_FMT_MAX(qlen) ((qlen) + 128)
#define TC_PUT_TAIL "\r\n"
size_t tc_fmt_put_head(enum tc_proto p, char *dst, const char *q, size_t qlen,
		       uint32_t flags, size_t bodylen);
/* A dequeue request.  memcache: "get q<opts>" (opts like "/t=100/open", may
 * be NULL); redis: RPOP, or BRPOP when wait_ms > 0; beanstalk:
 * reserve-with-timeout (whole seconds, rounded up).  For memcache wait_ms is
 * ignored: put "/t=" in opts. */
size_t tc_fmt_get(enum tc_proto p, char *dst, const char *q, size_t qlen,
		  const char *opts, int wait_ms);
/* beanstalk: "delete <id>\r\n". */
size_t tc_fmt_delete_job(char *dst, uint64_t id);
/* Writes the decimal digits of v to dst and returns their count. */
size_t tc_fmt_u64(char *dst, uint64_t v);

/* ---- growable byte buffer ------------------------------------------------ */

/* Bytes live in p[off .. off+len).  Grows by doubling, never shrinks. */
struct tc_buf {
	char *p;
	size_t off, len, cap;
};
/* Makes room for n more bytes after the data; returns a pointer to it or
 * NULL when out of memory.  May move the data to the front. */
char *tc_buf_reserve(struct tc_buf *b, size_t n);
/* Drops n bytes from the front. */
void tc_buf_consume(struct tc_buf *b, size_t n);
void tc_buf_free(struct tc_buf *b);

/* ---- blocking pipelined connection --------------------------------------- */

struct tc_conn;

/* Connects (see tc_connect).  timeout_ms also bounds every later call that
 * waits.  For beanstalk, pass the tube with tc_conn_use() yourself. */
int tc_conn_open(struct tc_conn **out, const char *host, int port,
		 enum tc_proto p, int timeout_ms);
/* Closes and frees; NULL is ignored. */
void tc_conn_close(struct tc_conn *c);
int tc_conn_fd(const struct tc_conn *c);

/* Queue requests in the output buffer (nothing is sent until tc_conn_flush or
 * tc_conn_reply).  Return 0 or TC_ENOMEM / TC_EINVAL. */
int tc_conn_put(struct tc_conn *c, const char *q, const void *body, size_t len);
int tc_conn_get(struct tc_conn *c, const char *q, const char *opts, int wait_ms);
int tc_conn_raw(struct tc_conn *c, const void *bytes, size_t len);

/* Sends everything queued.  Returns 0, TC_ETIMEDOUT or TC_ESYS. */
int tc_conn_flush(struct tc_conn *c);
/* Flushes, then waits for the next reply.  Returns 0 with *r filled (valid
 * until the next call on c), TC_ETIMEDOUT, TC_ECLOSED, TC_EPROTO, TC_ESYS. */
int tc_conn_reply(struct tc_conn *c, struct tc_reply *r);

#endif
