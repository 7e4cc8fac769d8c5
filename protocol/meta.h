/*
 * meta.h: memcached's meta protocol (mg, ms, md, mn, me, ma) as tern
 * speaks it.  Pure: no I/O, no allocation.  Meta commands share the text
 * protocol's connection and line framing: the server hands a line here
 * when meta_match() says its command word is a meta one, otherwise to
 * proto_parse().
 *
 * The queue meanings: "mg <key> <flags>*" dequeues like get (Kestrel
 * options in the key: "mg jobs/open v"), "ms <key> <datalen> <flags>*"
 * enqueues like set (mode E like add), "md <key>" deletes the queue like
 * delete, "mn" is a no-op that answers MN.  "me" and "ma" are refused.  Item cas tokens are
 * item ids.
 */
#ifndef TERN_META_H
#define TERN_META_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

/* X-macro table of meta commands: enum suffix, wire word. */
#define META_COMMANDS(X) \
	X(MG, "mg")      \
	X(MS, "ms")      \
	X(MD, "md")      \
	X(MN, "mn")      \
	X(ME, "me")      \
	X(MA, "ma")

enum meta_cmd {
#define META_CMD_ENUM(e, w) META_##e,
	META_COMMANDS(META_CMD_ENUM)
#undef META_CMD_ENUM
	META__COUNT
};

/* Why tern refuses me and ma (CLIENT_ERROR reasons). */
#define META_REFUSALS(X)                                           \
	X(ME, "me not supported: a queue's counters are in stats") \
	X(MA, "ma not supported: queues hold no counters")

/* Commands a flag applies to (masks for META_FLAGS). */
#define META_IN_MG (1u << META_MG)
#define META_IN_MS (1u << META_MS)
#define META_IN_MD (1u << META_MD)
#define META_IN_KEYED (META_IN_MG | META_IN_MS | META_IN_MD)

/*
 * X-macro table of meta flags: letter, enum suffix, token (0 none, 1
 * required, 2 optional), commands that take it, commands that refuse it,
 * and why (the CLIENT_ERROR reason).  A flag a command neither takes nor
 * refuses is memcached's "invalid flag".  P and L are proxy hints that
 * memcached ignores; so does tern.  u (no LRU bump) has nothing to do on
 * a queue and is accepted.
 */
#define META_FLAGS(X)                                                                               \
	X('b', BASE64, 0, META_IN_KEYED, 0, NULL)                                                   \
	X('c', CAS, 0, META_IN_MG | META_IN_MS, 0, NULL)                                            \
	X('f', FLAGS, 0, META_IN_MG, 0, NULL)                                                       \
	X('k', KEY, 0, META_IN_KEYED, 0, NULL)                                                      \
	X('O', OPAQUE, 1, META_IN_KEYED, 0, NULL)                                                   \
	X('q', QUIET, 0, META_IN_KEYED, 0, NULL)                                                    \
	X('s', SIZE, 0, META_IN_MG, 0, NULL)                                                        \
	X('t', TTL, 0, META_IN_MG, 0, NULL)                                                         \
	X('v', VALUE, 0, META_IN_MG, 0, NULL)                                                       \
	X('d', DELIVERIES, 0, META_IN_MG, 0, NULL)                                                  \
	X('u', NOBUMP, 0, META_IN_MG, 0, NULL)                                                      \
	X('P', PROXY_P, 2, META_IN_KEYED, 0, NULL)                                                  \
	X('L', PROXY_L, 2, META_IN_KEYED, 0, NULL)                                                  \
	X('F', SET_FLAGS, 1, META_IN_MS, 0, NULL)                                                   \
	X('T', SET_TTL, 1, META_IN_MS, META_IN_MG | META_IN_MD,                                     \
	  "flag T not supported: a queued message keeps its exptime")                               \
	X('M', MODE, 1, META_IN_MS, 0, NULL)                                                        \
	X('D', DELAY, 1, META_IN_MS, 0, NULL)                                                       \
	X('h', HIT, 0, 0, META_IN_MG, "flag h not supported: every queued message is unread")       \
	X('l', LAST, 0, 0, META_IN_MG, "flag l not supported: every queued message is unread")      \
	X('N', VIVIFY, 1, 0, META_IN_MG, "flag N not supported: a queue creates nothing on a miss") \
	X('R', RECACHE, 1, 0, META_IN_MG, "flag R not supported: queued messages are not recached") \
	X('E', NEW_CAS, 1, 0, META_IN_KEYED, "flag E not supported: a message's cas is its id")     \
	X('C', CMP_CAS, 1, 0, META_IN_MS | META_IN_MD,                                              \
	  "flag C not supported: queued messages cannot be changed")                                \
	X('I', INVALIDATE, 0, 0, META_IN_MS | META_IN_MD,                                           \
	  "flag I not supported: queued messages cannot be changed")                                \
	X('x', NO_VALUE, 0, 0, META_IN_MD, "flag x not supported: queued messages cannot be changed")

enum meta_flag_index {
#define META_FLAG_INDEX(ch, e, tok, in, refused, why) META_FI_##e,
	META_FLAGS(META_FLAG_INDEX)
#undef META_FLAG_INDEX
	META_FI__COUNT
};

/* Bit of each flag in meta_req.seen: META_F_BASE64, META_F_CAS, ... */
enum meta_flag_bit {
#define META_FLAG_BIT(ch, e, tok, in, refused, why) META_F_##e = 1u << META_FI_##e,
	META_FLAGS(META_FLAG_BIT)
#undef META_FLAG_BIT
};

/* Longest opaque token (memcached's limit). */
#define META_OPAQUE_MAX 32

struct meta_req {
	enum meta_cmd cmd;
	struct proto_key key;  /* mg, ms, md: the queue name (and, for mg, the
				  get options); points into the line, or into
				  kbuf when the key was base64 (b) */
	const char *key_tok;   /* the key as sent (k returns it); into the line */
	uint16_t key_tok_len;
	uint64_t bytes;        /* ms: <datalen> */
	uint32_t client_flags; /* ms: F (0 when absent) */
	int64_t exptime;       /* ms: T, >= 0 (0 when absent) */
	uint32_t delay_ms;     /* ms: D<n>[ms|s], delayed delivery (0 when absent) */
	uint32_t seen;         /* META_F_* of every flag given */
	char ret[8];           /* the flags that return something, in request
				  order: c d f k O s t, each at most once */
	uint8_t nret;
	uint8_t add;           /* ms: mode E (add) */
	uint8_t opaque_len;
	const char *opaque;    /* O's token; into the line */
	char kbuf[PROTO_KEY_MAX];
};

/* Returns 1 when the line's first token is a meta command word. */
int meta_match(const char *line, size_t len);

/*
 * Parses one meta request line (without its "\r\n"), as proto_parse
 * does: PROTO_OK with req filled (a refused me or ma is PROTO_OK too:
 * meta_refusal() names it), PROTO_ERROR for an unknown m-word, or
 * PROTO_CLIENT_ERROR with *reason (static, no CRLF) and *swallow (for an
 * ms whose <datalen> parsed: datalen + 2; else 0).  Reasons besides those
 * of proto_key_parse and META_FLAGS: "bad command line format" (missing
 * key or datalen, bad number, key over PROTO_KEY_MAX, bad base64),
 * "bad data chunk" (negative datalen), "invalid flag", "duplicate flag",
 * "opaque token too long", "invalid mode for ms M token",
 * and an unsupported M mode's refusal (that of the text command it names:
 * append, prepend, replace).
 */
enum proto_status meta_parse(const char *line, size_t len, struct meta_req *req,
			     const char **reason, uint64_t *swallow);

/* Why tern refuses cmd (static, no CRLF), or NULL when it implements it. */
const char *meta_refusal(enum meta_cmd cmd);

/* The wire word of a meta command. */
const char *meta_cmd_name(enum meta_cmd cmd);

/* X-macro table of meta return codes: enum suffix, wire word. */
#define META_CODES(X) \
	X(VA, "VA")   \
	X(HD, "HD")   \
	X(EN, "EN")   \
	X(NF, "NF")   \
	X(NS, "NS")   \
	X(MN, "MN")

enum meta_code {
#define META_CODE_ENUM(e, w) META_CODE_##e,
	META_CODES(META_CODE_ENUM)
#undef META_CODE_ENUM
	META_CODE__COUNT
};

/* What the return flags report about an item (NULL when there is none). */
struct meta_item {
	uint32_t flags;  /* f */
	uint32_t size;   /* s, and VA's <size> */
	uint64_t cas;    /* c */
	int64_t ttl;     /* t: seconds left, -1 for none */
	uint32_t deliveries; /* d: open reads of it so far, this one included */
};

/* Longest line meta_reply writes (the key token and the opaque bounded). */
#define META_REPLY_MAX 512

/*
 * Formats a reply line "<code>[ <size>] <flags>*\r\n" into buf (at least
 * META_REPLY_MAX bytes) for request r: VA carries it->size; then the
 * return flags r asked for, in its order: k with the key as sent (and b
 * after it when the key was base64), O with the opaque, and, when it is not
 * NULL, c f s t from it.  Returns the bytes written.
 */
size_t meta_reply(char *buf, enum meta_code code, const struct meta_req *r,
		  const struct meta_item *it);

#endif
