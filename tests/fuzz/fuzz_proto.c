/*
 * fuzz_proto.c: libFuzzer target for the three request codecs:
 * proto_parse() (text), meta_parse() (meta) and bin_parse_header() /
 * bin_parse_body() (binary).
 *
 * The input is split into lines the way the server does (memchr '\n', one
 * trailing '\r' stripped); each line is copied into an exact-size heap
 * buffer so AddressSanitizer sees any read past it, then parsed as text
 * and as meta.  The whole input is also read as a stream of binary frames,
 * each piece in an exact-size copy.  Besides the sanitizers, every result
 * is checked against its header's contract and abort() is called on any
 * violation.  Text:
 *   - status is one of the three; reason/swallow are set as documented;
 *   - on PROTO_OK every key lies inside the line, has a valid name, legal
 *     options and timeout, nkeys matches the command, numbers are in range;
 *   - on CLIENT_ERROR only a command with a data block (set, add, the
 *     refused storage commands) may ask for a swallow, at most 2^62 + 2;
 *   - parsing is deterministic, and a canonical re-serialisation of a good
 *     request parses back to the same request.
 * Meta: the key lies in the line (or, base64, in the request's buffer) and
 * is a valid queue name, with options only for mg; return flags are a
 * subset of c f k O s t without repeats; the opaque is in the line and at
 * most META_OPAQUE_MAX; only an ms may ask for a swallow; the reply line
 * for the request fits META_REPLY_MAX.
 * Binary: a verdict is one of three, with a status from the table on
 * REJECT; an accepted frame's extras and key fit its body and the limits,
 * its key points into the bytes given to bin_parse_body; response headers
 * decode back to what was encoded.
 * Build and run with tests/fuzz/run.sh.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/tern.h"
#include "../../protocol/binary.h"
#include "../../protocol/meta.h"
#include "../../protocol/proto.h"

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "invariant failed: %s (line %d)\n", \
				#cond, __LINE__);                            \
			abort();                                             \
		}                                                            \
	} while (0)

static int inside(const char *p, size_t n, const char *line, size_t len)
{
	return p >= line && n <= len && (size_t)(p - line) <= len - n;
}

/* Keys every command must have on success. */
static void check_nkeys(const struct proto_req *r)
{
	switch (r->cmd) {
	case PROTO_CMD_GET:
	case PROTO_CMD_GETS:
		CHECK(r->nkeys >= 1 && r->nkeys <= PROTO_MAX_KEYS);
		break;
	case PROTO_CMD_SET:
	case PROTO_CMD_ADD:
	case PROTO_CMD_DELETE:
	case PROTO_CMD_FLUSH:
	case PROTO_CMD_FLUSH_EXPIRED:
	case PROTO_CMD_MONITOR:
	case PROTO_CMD_CONFIRM:
		CHECK(r->nkeys == 1);
		break;
	case PROTO_CMD_STATUS: /* the queue's form names one */
		CHECK(r->nkeys <= 1);
		break;
	default:
		CHECK(r->nkeys == 0);
	}
}

static void check_ok(const struct proto_req *r, const char *line, size_t len)
{
	unsigned i;

	CHECK((unsigned)r->cmd < PROTO_CMD__COUNT);
	check_nkeys(r);
	for (i = 0; i < r->nkeys; i++) {
		const struct proto_key *k = &r->keys[i];

		CHECK(k->len >= 1 && k->len <= PROTO_NAME_MAX);
		CHECK(inside(k->name, k->len, line, len));
		CHECK(k->raw == k->name && k->raw_len >= k->len);
		CHECK(inside(k->raw, k->raw_len, line, len));
		CHECK(k->raw_len == k->len || k->raw[k->len] == '/');
		CHECK(tern_name_valid(k->name, k->len));
		CHECK(memchr(k->name, '/', k->len) == NULL);
		CHECK((k->opts & ~0x7Fu) == 0);
		CHECK(!((k->opts & (PROTO_OPT_PEEK | PROTO_OPT_ABORT)) &&
			(k->opts & (PROTO_OPT_OPEN | PROTO_OPT_CLOSE))));
		/* by id: one id, close=<id> only with open (and t=), abort=<id>
		 * only with t= */
		CHECK(!!(k->opts & (PROTO_OPT_CLOSE_ID | PROTO_OPT_ABORT_ID)) == (k->item_id != 0));
		CHECK(k->item_id <= (uint64_t)INT64_MAX);
		CHECK(!((k->opts & PROTO_OPT_CLOSE_ID) &&
			(k->opts & ~(PROTO_OPT_CLOSE_ID | PROTO_OPT_OPEN | PROTO_OPT_RESERVE))));
		CHECK(!((k->opts & PROTO_OPT_RESERVE) &&
			(k->opts & ~(PROTO_OPT_RESERVE | PROTO_OPT_CLOSE_ID))));
		CHECK(!((k->opts & PROTO_OPT_RESERVE) && r->cmd == PROTO_CMD_GET));
		CHECK(!((k->opts & PROTO_OPT_ABORT_ID) && (k->opts & ~PROTO_OPT_ABORT_ID)));
		CHECK(k->timeout_ms >= -1 && k->timeout_ms <= PROTO_TIMEOUT_MAX);
		/* /peek is 1 item, /peek=<n> 1..PROTO_PEEK_MAX; none without */
		CHECK((k->opts & PROTO_OPT_PEEK) ? k->peek >= 1 && k->peek <= PROTO_PEEK_MAX
						 : k->peek == 0);
		if (r->cmd == PROTO_CMD_DELETE && k->opts)
			CHECK(k->opts == PROTO_OPT_CLOSE_ID && k->timeout_ms == -1 &&
			      k->raw_len > k->len);
		else if (r->cmd != PROTO_CMD_GET && r->cmd != PROTO_CMD_GETS)
			CHECK(k->opts == 0 && k->timeout_ms == -1);
		/* a set's or an add's one option: /delay=<n>[ms|s] */
		if ((r->cmd == PROTO_CMD_SET || r->cmd == PROTO_CMD_ADD) && k->raw_len > k->len)
			CHECK(k->raw_len > k->len + 7 && memcmp(k->raw + k->len, "/delay=", 7) == 0 &&
			      k->delay_ms <= PROTO_DELAY_MAX);
		else if (r->cmd != PROTO_CMD_GET && r->cmd != PROTO_CMD_GETS &&
			 r->cmd != PROTO_CMD_DELETE)
			CHECK(k->raw_len == k->len && k->delay_ms == 0);
	}
	CHECK(r->exptime >= 0);
	CHECK(r->bytes <= (UINT64_C(1) << 62));
	CHECK(r->noreply == 0 || r->noreply == 1);
	CHECK(r->delay >= 0);
	/* a level that is not a number is -1; a level's name sets log_level */
	CHECK(r->verbosity >= -1);
	CHECK(r->log_level >= -1 && r->log_level <= 3);
	if (r->log_level >= 0)
		CHECK(r->cmd == PROTO_CMD_VERBOSITY && r->verbosity == 0);
	if (r->cmd == PROTO_CMD_MONITOR)
		CHECK(r->seconds >= 1 && r->seconds <= 86400);
	else
		CHECK(r->seconds == 0);
}

/* Writes the canonical form of a good request; returns its length. */
static size_t canon(const struct proto_req *r, char *out, size_t cap)
{
	size_t n = 0;
	unsigned i;

#define PUT(...)                                                            \
	do {                                                                \
		int w_ = snprintf(out + n, cap - n, __VA_ARGS__);           \
		CHECK(w_ >= 0 && (size_t)w_ < cap - n);                     \
		n += (size_t)w_;                                            \
	} while (0)

	PUT("%s", proto_cmd_name(r->cmd));
	if (r->cmd == PROTO_CMD_STATUS) {
		/* status [queue <name>] [<word>] */
		if (r->nkeys)
			PUT(" queue %.*s", (int)r->keys[0].len, r->keys[0].name);
		if (r->word) {
			/* copied, not printed: the word may hold any byte but a
			 * blank, a NUL too (the server checks it) */
			CHECK(n + 1 + r->word_len < cap);
			out[n++] = ' ';
			memcpy(out + n, r->word, r->word_len);
			n += r->word_len;
		}
		return n;
	}
	for (i = 0; i < r->nkeys; i++) {
		const struct proto_key *k = &r->keys[i];

		PUT(" %.*s", (int)k->len, k->name);
		if ((r->cmd == PROTO_CMD_SET || r->cmd == PROTO_CMD_ADD) && k->raw_len > k->len)
			PUT("/delay=%ums", (unsigned)k->delay_ms);
		if (k->timeout_ms >= 0)
			PUT("/t=%d", (int)k->timeout_ms);
		if (k->opts & PROTO_OPT_CLOSE)
			PUT("/close");
		if (k->opts & PROTO_OPT_OPEN)
			PUT("/open");
		if (k->opts & PROTO_OPT_ABORT)
			PUT("/abort");
		if ((k->opts & PROTO_OPT_PEEK) && k->peek > 1)
			PUT("/peek=%u", (unsigned)k->peek);
		else if (k->opts & PROTO_OPT_PEEK)
			PUT("/peek");
		if (k->opts & PROTO_OPT_RESERVE)
			PUT("/reserve");
		if (k->opts & PROTO_OPT_ABORT_ID)
			PUT("/abort=%llu", (unsigned long long)k->item_id);
		if ((k->opts & PROTO_OPT_CLOSE_ID) && r->cmd == PROTO_CMD_DELETE)
			PUT("/%llu", (unsigned long long)k->item_id);
		else if (k->opts & PROTO_OPT_CLOSE_ID)
			PUT("/close=%llu", (unsigned long long)k->item_id);
	}
	switch (r->cmd) {
	case PROTO_CMD_SET:
	case PROTO_CMD_ADD:
		PUT(" %u %lld %llu", (unsigned)r->flags, (long long)r->exptime,
		    (unsigned long long)r->bytes);
		break;
	case PROTO_CMD_REPLACE:
	case PROTO_CMD_APPEND:
	case PROTO_CMD_PREPEND:
	case PROTO_CMD_CAS:
		/* refused: only the length and noreply were kept */
		PUT(" k 0 0 %llu%s", (unsigned long long)r->bytes, r->cmd == PROTO_CMD_CAS ? " 1" : "");
		break;
	case PROTO_CMD_FLUSH_ALL:
		PUT(" %d", (int)r->delay);
		break;
	case PROTO_CMD_VERBOSITY: {
		static const char *const levels[] = { "error", "warn", "info", "debug" };

		if (r->log_level >= 0)
			PUT(" %s", levels[r->log_level]);
		else if (r->verbosity < 0)
			PUT(" x"); /* any level that is not a number */
		else
			PUT(" %lld", (long long)r->verbosity);
		break;
	}
	case PROTO_CMD_MONITOR:
		PUT(" %u %u", (unsigned)r->seconds, (unsigned)r->count);
		break;
	case PROTO_CMD_CONFIRM:
		PUT(" %u", (unsigned)r->count);
		break;
	case PROTO_CMD_DELETE:
		/* a queue named "noreply": "delete noreply" is the flag without
		 * a key (as in memcached), so only the legacy "delete <key> 0"
		 * names it (found by the fuzzer: "delete noreply 0") */
		if (!r->noreply && r->nkeys == 1 && r->keys[0].len == 7 &&
		    memcmp(r->keys[0].name, "noreply", 7) == 0)
			PUT(" 0");
		break;
	default:
		break;
	}
	if (r->noreply)
		PUT(" noreply");
#undef PUT
	return n;
}

static int same_req(const struct proto_req *a, const struct proto_req *b)
{
	unsigned i;

	if (a->cmd != b->cmd || a->nkeys != b->nkeys || a->flags != b->flags ||
	    a->exptime != b->exptime || a->bytes != b->bytes || a->noreply != b->noreply ||
	    a->seconds != b->seconds || a->count != b->count || a->delay != b->delay ||
	    a->verbosity != b->verbosity || a->log_level != b->log_level || !a->word != !b->word ||
	    a->word_len != b->word_len ||
	    (a->word && memcmp(a->word, b->word, a->word_len) != 0))
		return 0;
	for (i = 0; i < a->nkeys; i++) {
		const struct proto_key *x = &a->keys[i], *y = &b->keys[i];

		if (x->len != y->len || memcmp(x->name, y->name, x->len) != 0 ||
		    x->opts != y->opts || x->timeout_ms != y->timeout_ms || x->delay_ms != y->delay_ms ||
		    x->peek != y->peek)
			return 0;
	}
	return 1;
}

static void fuzz_line(const char *data, size_t len)
{
	static struct proto_req req, again;
	static char out[PROTO_LINE_MAX + 64];
	char *line = malloc(len ? len : 1);
	const char *why, *why2;
	uint64_t sw, sw2;
	enum proto_status st, st2;

	CHECK(line);
	memcpy(line, data, len);
	st = proto_parse(line, len, &req, &why, &sw);
	CHECK(st == PROTO_OK || st == PROTO_ERROR || st == PROTO_CLIENT_ERROR);
	switch (st) {
	case PROTO_OK:
		CHECK(why == NULL && sw == 0);
		check_ok(&req, line, len);
		break;
	case PROTO_ERROR:
		CHECK(why == NULL && sw == 0);
		CHECK(req.nkeys == 0);
		break;
	case PROTO_CLIENT_ERROR:
		CHECK(why && why[0] && strlen(why) < 64 && !strpbrk(why, "\r\n"));
		CHECK(req.nkeys == 0);
		if (sw) {
			CHECK(proto_cmd_takes_body(req.cmd));
			CHECK(sw >= 2 && sw <= (UINT64_C(1) << 62) + 2);
		}
		break;
	}

	/* deterministic */
	st2 = proto_parse(line, len, &again, &why2, &sw2);
	CHECK(st2 == st && why2 == why && sw2 == sw);
	if (st == PROTO_OK) {
		CHECK(same_req(&req, &again));
		/* the canonical form parses back to the same request */
		size_t n = canon(&req, out, sizeof(out));

		st2 = proto_parse(out, n, &again, &why2, &sw2);
		if (st2 != PROTO_OK || !same_req(&req, &again)) {
			fprintf(stderr, "canonical form '%.*s' differs (status %d)\n", (int)n, out,
				st2);
			abort();
		}
	}
	free(line);
}

static void fuzz_meta(const char *data, size_t len)
{
	static struct meta_req req, again;
	char *line = malloc(len ? len : 1);
	char *out = malloc(META_REPLY_MAX);
	const char *why, *why2;
	uint64_t sw, sw2;
	enum proto_status st, st2;
	unsigned i, j;

	CHECK(line && out);
	memcpy(line, data, len);
	st = meta_parse(line, len, &req, &why, &sw);
	CHECK(st == PROTO_OK || st == PROTO_ERROR || st == PROTO_CLIENT_ERROR);
	if (st == PROTO_CLIENT_ERROR) {
		CHECK(why && why[0] && strlen(why) < 100 && !strpbrk(why, "\r\n"));
		if (sw)
			CHECK(req.cmd == META_MS && sw >= 2 && sw <= (UINT64_C(1) << 62) + 2);
	} else {
		CHECK(why == NULL && sw == 0);
	}
	if (st == PROTO_OK)
		CHECK(meta_match(line, len));
	if (st == PROTO_OK && (req.cmd == META_MG || req.cmd == META_MS || req.cmd == META_MD)) {
		const struct proto_key *k = &req.key;
		int in_buf = k->raw >= req.kbuf && k->raw + k->raw_len <= req.kbuf + sizeof(req.kbuf);

		CHECK(in_buf == ((req.seen & META_F_BASE64) != 0));
		CHECK(in_buf || inside(k->raw, k->raw_len, line, len));
		CHECK(inside(req.key_tok, req.key_tok_len, line, len));
		CHECK(req.key_tok_len >= 1 && req.key_tok_len <= PROTO_KEY_MAX);
		CHECK(k->len >= 1 && k->len <= k->raw_len && k->name == k->raw);
		CHECK(tern_name_valid(k->name, k->len));
		if (req.cmd != META_MG)
			CHECK(k->len == k->raw_len && k->opts == 0 && k->timeout_ms == -1);
		CHECK(req.nret <= 7);
		for (i = 0; i < req.nret; i++) {
			CHECK(strchr("cdfkOst", req.ret[i]) != NULL);
			for (j = 0; j < i; j++)
				CHECK(req.ret[j] != req.ret[i]);
		}
		if (req.opaque) {
			CHECK(req.opaque_len >= 1 && req.opaque_len <= META_OPAQUE_MAX);
			CHECK(inside(req.opaque, req.opaque_len, line, len));
		}
		CHECK(req.cmd == META_MS || (req.bytes == 0 && req.add == 0));
		CHECK(req.exptime >= 0 && req.bytes <= (UINT64_C(1) << 62));
		{
			struct meta_item it = { UINT32_MAX, UINT32_MAX, UINT64_MAX, INT64_MIN, UINT32_MAX };
			size_t n = meta_reply(out, META_CODE_VA, &req, &it);

			CHECK(n <= META_REPLY_MAX && n >= 4 && memcmp(out + n - 2, "\r\n", 2) == 0);
		}
	}
	st2 = meta_parse(line, len, &again, &why2, &sw2);
	CHECK(st2 == st && why2 == why && sw2 == sw);
	free(out);
	free(line);
}

/* Reads data as a stream of binary frames, as a binary connection would. */
static void fuzz_binary(const uint8_t *data, size_t size)
{
	size_t off = 0;

	while (size - off >= BIN_HEADER_LEN) {
		unsigned char *hdr = malloc(BIN_HEADER_LEN), *body;
		struct bin_req r;
		uint16_t status;
		const char *why;
		enum bin_verdict v;

		CHECK(hdr);
		memcpy(hdr, data + off, BIN_HEADER_LEN);
		v = bin_parse_header(hdr, &r, &status, &why);
		free(hdr);
		CHECK(v == BIN_OK || v == BIN_REJECT || v == BIN_CLOSE);
		if (v == BIN_CLOSE) {
			CHECK(why && why[0]);
			return;
		}
		off += BIN_HEADER_LEN;
		if (v == BIN_REJECT) {
			CHECK(why && why[0] && !strpbrk(why, "\r\n"));
			CHECK(status == BIN_STATUS_EINVAL || status == BIN_STATUS_UNKNOWN_COMMAND);
			CHECK(strcmp(bin_status_text(status), "Unknown error") != 0);
		} else {
			CHECK(status == BIN_STATUS_SUCCESS && r.op && r.op == bin_op(r.h.opcode));
			CHECK(r.h.keylen <= PROTO_KEY_MAX && r.h.extlen <= 31);
			if (r.op->value == BIN_INLINE)
				CHECK(r.vlen == 0 && r.value_len <= BIN_INLINE_MAX &&
				      r.need == (uint32_t)r.h.extlen + r.h.keylen + r.value_len);
			else
				CHECK(r.need == (uint32_t)r.h.extlen + r.h.keylen);
			CHECK((uint64_t)r.need + r.vlen == r.h.bodylen);
			CHECK(r.op->value != BIN_NONE || r.vlen == 0);
			CHECK(r.op->key != BIN_REQ || r.h.keylen > 0);
			CHECK(r.op->key != BIN_NONE || r.h.keylen == 0);
			if (size - off >= r.need) {
				body = malloc(r.need ? r.need : 1);
				CHECK(body);
				memcpy(body, data + off, r.need);
				bin_parse_body(&r, body);
				CHECK(r.keylen == r.h.keylen);
				CHECK((const unsigned char *)r.key == body + r.h.extlen);
				if (r.op->value == BIN_INLINE)
					CHECK((const unsigned char *)r.value + r.value_len ==
					      body + r.need);
				if (r.keylen) {
					struct proto_key k;

					if (!proto_key_parse(r.key, r.keylen, &k))
						CHECK(k.raw == r.key && k.raw_len == r.keylen &&
						      tern_name_valid(k.name, k.len));
				}
				free(body);
			}
		}
		{
			unsigned char p[BIN_HEADER_LEN];
			struct bin_header h;

			bin_header_encode(p, r.h.opcode, status, r.h.keylen, r.h.extlen,
					  r.h.bodylen, r.h.opaque, r.h.cas);
			bin_header_decode(p, &h);
			CHECK(h.magic == BIN_MAGIC_RES && h.opcode == r.h.opcode &&
			      h.vbucket == status && h.keylen == r.h.keylen &&
			      h.extlen == r.h.extlen && h.bodylen == r.h.bodylen &&
			      h.opaque == r.h.opaque && h.cas == r.h.cas && h.datatype == 0);
		}
		if (size - off < r.h.bodylen)
			return;
		off += r.h.bodylen;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data, *end = p + size;

	/* The whole input, unsplit, too: exercises lines with '\n' inside and
	 * whatever the splitter would hide. */
	fuzz_line(p, size);
	fuzz_meta(p, size);
	fuzz_binary(data, size);
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = (size_t)((nl ? nl : end) - p);

		if (len > 0 && p[len - 1] == '\r')
			len--;
		fuzz_line(p, len);
		fuzz_meta(p, len);
		p = nl ? nl + 1 : end;
	}
	return 0;
}
