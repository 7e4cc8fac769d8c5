/*
 * binary.h: memcached's binary protocol as tern speaks it.  Pure: no I/O,
 * no allocation.  A connection whose first byte is 0x80 speaks it for its
 * whole life (memcached's rule); every frame is a 24-byte header, then
 * extras, key and value, their lengths given by the header.
 *
 * The server reads a header and hands it to bin_parse_header(), which
 * decides whether the frame is one tern runs, one it answers with an error
 * status while skipping its body, or one after which the stream cannot be
 * trusted (the connection is closed).  Once extras and key are in, it
 * calls bin_parse_body(); a value (SET) is read straight into its item.
 * Replies are built with bin_header_encode() and the status texts.
 */
#ifndef TERN_BINARY_H
#define TERN_BINARY_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

#define BIN_HEADER_LEN 24
#define BIN_MAGIC_REQ 0x80
#define BIN_MAGIC_RES 0x81

/* What a request asks tern to do (several opcodes share one). */
enum bin_kind {
	BIN_K_GET,       /* dequeue (options in the key) */
	BIN_K_SET,       /* enqueue */
	BIN_K_ADD,       /* enqueue into an empty queue only */
	BIN_K_DELETE,    /* delete the queue */
	BIN_K_QUIT,
	BIN_K_FLUSH,     /* flush every queue (flush_all) */
	BIN_K_NOOP,
	BIN_K_VERSION,
	BIN_K_STAT,      /* every stat, or one queue's (key = its name) */
	BIN_K_VERBOSITY,
	BIN_K_SASL_LIST, /* SASL: the mechanisms (authentication on) */
	BIN_K_SASL_AUTH, /* SASL: authenticate (key: mechanism, value: data) */
	BIN_K_SASL_STEP, /* SASL: a further step (PLAIN has none) */
	BIN_K_REFUSED,   /* a memcached command tern does not implement */
};

/* Allowed extras lengths, as a mask: bit n allows n bytes. */
#define BIN_EXT(n) (UINT32_C(1) << (n))
/* Key and value rules. */
#define BIN_NONE 0
#define BIN_REQ 1 /* key: required; value: may be present (0 bytes allowed) */
#define BIN_OPT 2 /* key: optional */
#define BIN_INLINE 3 /* value: read with extras and key (r->value), at
			most BIN_INLINE_MAX bytes */
#define BIN_INLINE_MAX 1024

/*
 * X-macro table of opcodes: enum suffix, opcode, kind, allowed extras,
 * key, value, quiet (success is not answered; a get's miss neither),
 * returns the key (GETK), and for a refused command the text command whose
 * refusal it shares (_COUNT for the others).  Opcodes not listed answer
 * "unknown command".
 */
#define BIN_OPCODES(X)                                                                    \
	X(GET, 0x00, GET, BIN_EXT(0), BIN_REQ, BIN_NONE, 0, 0, _COUNT)                    \
	X(SET, 0x01, SET, BIN_EXT(8), BIN_REQ, BIN_REQ, 0, 0, _COUNT)                     \
	X(ADD, 0x02, ADD, BIN_EXT(8), BIN_REQ, BIN_REQ, 0, 0, _COUNT)                     \
	X(REPLACE, 0x03, REFUSED, BIN_EXT(8), BIN_REQ, BIN_REQ, 0, 0, REPLACE)            \
	X(DELETE, 0x04, DELETE, BIN_EXT(0), BIN_REQ, BIN_NONE, 0, 0, _COUNT)              \
	X(INCREMENT, 0x05, REFUSED, BIN_EXT(20), BIN_REQ, BIN_NONE, 0, 0, INCR)           \
	X(DECREMENT, 0x06, REFUSED, BIN_EXT(20), BIN_REQ, BIN_NONE, 0, 0, DECR)           \
	X(QUIT, 0x07, QUIT, BIN_EXT(0), BIN_NONE, BIN_NONE, 0, 0, _COUNT)                 \
	X(FLUSH, 0x08, FLUSH, BIN_EXT(0) | BIN_EXT(4), BIN_NONE, BIN_NONE, 0, 0, _COUNT)  \
	X(GETQ, 0x09, GET, BIN_EXT(0), BIN_REQ, BIN_NONE, 1, 0, _COUNT)                   \
	X(NOOP, 0x0a, NOOP, BIN_EXT(0), BIN_NONE, BIN_NONE, 0, 0, _COUNT)                 \
	X(VERSION, 0x0b, VERSION, BIN_EXT(0), BIN_NONE, BIN_NONE, 0, 0, _COUNT)           \
	X(GETK, 0x0c, GET, BIN_EXT(0), BIN_REQ, BIN_NONE, 0, 1, _COUNT)                   \
	X(GETKQ, 0x0d, GET, BIN_EXT(0), BIN_REQ, BIN_NONE, 1, 1, _COUNT)                  \
	X(APPEND, 0x0e, REFUSED, BIN_EXT(0), BIN_REQ, BIN_REQ, 0, 0, APPEND)              \
	X(PREPEND, 0x0f, REFUSED, BIN_EXT(0), BIN_REQ, BIN_REQ, 0, 0, PREPEND)            \
	X(STAT, 0x10, STAT, BIN_EXT(0), BIN_OPT, BIN_NONE, 0, 0, _COUNT)                  \
	X(SETQ, 0x11, SET, BIN_EXT(8), BIN_REQ, BIN_REQ, 1, 0, _COUNT)                    \
	X(ADDQ, 0x12, ADD, BIN_EXT(8), BIN_REQ, BIN_REQ, 1, 0, _COUNT)                    \
	X(REPLACEQ, 0x13, REFUSED, BIN_EXT(8), BIN_REQ, BIN_REQ, 1, 0, REPLACE)           \
	X(DELETEQ, 0x14, DELETE, BIN_EXT(0), BIN_REQ, BIN_NONE, 1, 0, _COUNT)             \
	X(INCREMENTQ, 0x15, REFUSED, BIN_EXT(20), BIN_REQ, BIN_NONE, 1, 0, INCR)          \
	X(DECREMENTQ, 0x16, REFUSED, BIN_EXT(20), BIN_REQ, BIN_NONE, 1, 0, DECR)          \
	X(QUITQ, 0x17, QUIT, BIN_EXT(0), BIN_NONE, BIN_NONE, 1, 0, _COUNT)                \
	X(FLUSHQ, 0x18, FLUSH, BIN_EXT(0) | BIN_EXT(4), BIN_NONE, BIN_NONE, 1, 0, _COUNT) \
	X(APPENDQ, 0x19, REFUSED, BIN_EXT(0), BIN_REQ, BIN_REQ, 1, 0, APPEND)             \
	X(PREPENDQ, 0x1a, REFUSED, BIN_EXT(0), BIN_REQ, BIN_REQ, 1, 0, PREPEND)           \
	X(VERBOSITY, 0x1b, VERBOSITY, BIN_EXT(4), BIN_NONE, BIN_NONE, 0, 0, _COUNT)       \
	X(TOUCH, 0x1c, REFUSED, BIN_EXT(4), BIN_REQ, BIN_NONE, 0, 0, TOUCH)               \
	X(GAT, 0x1d, REFUSED, BIN_EXT(4), BIN_REQ, BIN_NONE, 0, 0, GAT)                   \
	X(GATQ, 0x1e, REFUSED, BIN_EXT(4), BIN_REQ, BIN_NONE, 1, 0, GAT)                  \
	X(SASL_LIST_MECHS, 0x20, SASL_LIST, BIN_EXT(0), BIN_NONE, BIN_NONE, 0, 0, _COUNT) \
	X(SASL_AUTH, 0x21, SASL_AUTH, BIN_EXT(0), BIN_REQ, BIN_INLINE, 0, 0, _COUNT)      \
	X(SASL_STEP, 0x22, SASL_STEP, BIN_EXT(0), BIN_REQ, BIN_INLINE, 0, 0, _COUNT)      \
	X(GATK, 0x23, REFUSED, BIN_EXT(4), BIN_REQ, BIN_NONE, 0, 1, GAT)                  \
	X(GATKQ, 0x24, REFUSED, BIN_EXT(4), BIN_REQ, BIN_NONE, 1, 1, GAT)

enum bin_opcode {
#define BIN_OP_ENUM(e, code, kind, ext, key, val, q, k, text) BIN_OP_##e = code,
	BIN_OPCODES(BIN_OP_ENUM)
#undef BIN_OP_ENUM
};

/*
 * X-macro table of the response statuses tern sends: enum suffix, value,
 * memcached's text for it (the body of an error reply when there is no
 * more specific reason).
 */
#define BIN_STATUSES(X)                                \
	X(SUCCESS, 0x0000, "Success")                  \
	X(KEY_ENOENT, 0x0001, "Not found")             \
	X(KEY_EEXISTS, 0x0002, "Data exists for key.") \
	X(E2BIG, 0x0003, "Too large.")                 \
	X(EINVAL, 0x0004, "Invalid arguments")         \
	X(NOT_STORED, 0x0005, "Not stored.")           \
	X(AUTH_ERROR, 0x0020, "Auth failure.")         \
	X(AUTH_CONTINUE, 0x0021, "Auth continue")      \
	X(UNKNOWN_COMMAND, 0x0081, "Unknown command")  \
	X(ENOMEM, 0x0082, "Out of memory")             \
	X(NOT_SUPPORTED, 0x0083, "Not supported")      \
	X(EINTERNAL, 0x0084, "Internal error")         \
	X(ETMPFAIL, 0x0086, "Temporary failure")

enum bin_status {
#define BIN_STATUS_ENUM(e, v, text) BIN_STATUS_##e = v,
	BIN_STATUSES(BIN_STATUS_ENUM)
#undef BIN_STATUS_ENUM
};

/* One row of BIN_OPCODES. */
struct bin_opinfo {
	const char *name;     /* "GET", "SETQ", ...; NULL: not an opcode */
	enum bin_kind kind;
	uint32_t ext_mask;
	uint8_t key, value;   /* BIN_NONE, BIN_REQ, BIN_OPT, BIN_INLINE */
	uint8_t quiet, withkey;
	enum proto_cmd refused_as; /* BIN_K_REFUSED: the text command whose
				      refusal it shares; else PROTO_CMD__COUNT */
};

/* The table row of opcode, or NULL when tern does not know it. */
const struct bin_opinfo *bin_op(uint8_t opcode);

/* Why tern refuses a BIN_K_REFUSED request (the text command's refusal). */
const char *bin_refusal(const struct bin_opinfo *op);

/* memcached's text for a status ("Not found", ...); "Unknown error" for a
 * status not in BIN_STATUSES. */
const char *bin_status_text(uint16_t status);

struct bin_header {
	uint8_t magic, opcode, extlen, datatype;
	uint16_t keylen, vbucket;  /* vbucket: status in a response */
	uint32_t bodylen, opaque;
	uint64_t cas;
};

/* A request whose header was accepted. */
struct bin_req {
	struct bin_header h;
	const struct bin_opinfo *op;
	uint32_t need;      /* extras + key bytes to read before bin_parse_body */
	uint32_t vlen;      /* value bytes after them (BIN_INLINE: 0, the
			       value is part of need) */
	uint32_t value_len; /* BIN_INLINE: the value's bytes */
	const char *key;    /* bin_parse_body: into the caller's bytes */
	uint16_t keylen;
	const char *value;  /* BIN_INLINE: the value (vlen bytes), after the key */
	uint32_t flags;     /* SET extras */
	uint32_t exptime;   /* SET extras (memcached's exptime rules) */
	uint32_t delay;     /* FLUSH extras (0 when absent) */
	uint32_t verbosity; /* VERBOSITY extras */
};

enum bin_verdict {
	BIN_OK,     /* read r->need more bytes, then bin_parse_body */
	BIN_REJECT, /* answer *status with *reason, skip the h.bodylen body bytes */
	BIN_CLOSE,  /* the stream cannot be trusted: close the connection */
};

/* Decodes 24 header bytes at p (no checks). */
void bin_header_decode(const unsigned char *p, struct bin_header *h);

/*
 * Decodes and checks the request header at p (BIN_HEADER_LEN bytes) into
 * r.  BIN_CLOSE: a magic other than 0x80, or extras + key longer than the
 * body.  BIN_REJECT with BIN_STATUS_UNKNOWN_COMMAND for an opcode not in
 * BIN_OPCODES, or BIN_STATUS_EINVAL for a key over PROTO_KEY_MAX, an
 * extras length, key or value the opcode does not take.  *reason is a
 * static string (no CRLF), never NULL on REJECT or CLOSE.
 */
enum bin_verdict bin_parse_header(const unsigned char *p, struct bin_req *r,
				  uint16_t *status, const char **reason);

/* Fills r's extras fields and key from the r->need bytes at p (extras,
 * then key); r->key points into p. */
void bin_parse_body(struct bin_req *r, const unsigned char *p);

/* Encodes a response header into p (BIN_HEADER_LEN bytes): magic 0x81, the
 * request's opcode and opaque, status, lengths (bodylen = extras + key +
 * value) and cas. */
void bin_header_encode(unsigned char *p, uint8_t opcode, uint16_t status,
		       uint16_t keylen, uint8_t extlen, uint32_t bodylen,
		       uint32_t opaque, uint64_t cas);

#endif
