/*
 * fuzz_proto.c: libFuzzer target for proto_parse().
 *
 * The input is split into lines the way the server does (memchr '\n', one
 * trailing '\r' stripped); each line is copied into an exact-size heap
 * buffer so AddressSanitizer sees any read past it, then parsed.  Besides
 * the sanitizers, the result is checked against proto.h's contract and
 * abort() is called on any violation:
 *   - status is one of the three; reason/swallow are set as documented;
 *   - on PROTO_OK every key lies inside the line, has a valid name, legal
 *     options and timeout, nkeys matches the command, numbers are in range;
 *   - on CLIENT_ERROR only a set may ask for a swallow, bytes + 2 <= 2^62 + 2;
 *   - parsing is deterministic, and a canonical re-serialisation of a good
 *     request parses back to the same request.
 * Build and run with tests/fuzz/run.sh.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../protocol/proto.h"
#include "../../lib/tern.h"

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
	case PROTO_CMD_DELETE:
	case PROTO_CMD_FLUSH:
	case PROTO_CMD_FLUSH_EXPIRED:
	case PROTO_CMD_MONITOR:
	case PROTO_CMD_CONFIRM:
		CHECK(r->nkeys == 1);
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
		CHECK(tern_name_valid(k->name, k->len));
		CHECK(memchr(k->name, '/', k->len) == NULL);
		CHECK((k->opts & ~0xFu) == 0);
		CHECK(!((k->opts & (PROTO_OPT_PEEK | PROTO_OPT_ABORT)) &&
			(k->opts & (PROTO_OPT_OPEN | PROTO_OPT_CLOSE))));
		CHECK(k->timeout_ms >= -1 && k->timeout_ms <= PROTO_TIMEOUT_MAX);
		if (r->cmd != PROTO_CMD_GET && r->cmd != PROTO_CMD_GETS)
			CHECK(k->opts == 0 && k->timeout_ms == -1);
	}
	CHECK(r->exptime >= 0);
	CHECK(r->bytes <= (UINT64_C(1) << 62));
	CHECK(r->noreply == 0 || r->noreply == 1);
	CHECK(r->delay >= 0);
	CHECK(r->verbosity >= 0);
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
	for (i = 0; i < r->nkeys; i++) {
		const struct proto_key *k = &r->keys[i];

		PUT(" %.*s", (int)k->len, k->name);
		if (k->timeout_ms >= 0)
			PUT("/t=%d", (int)k->timeout_ms);
		if (k->opts & PROTO_OPT_CLOSE)
			PUT("/close");
		if (k->opts & PROTO_OPT_OPEN)
			PUT("/open");
		if (k->opts & PROTO_OPT_ABORT)
			PUT("/abort");
		if (k->opts & PROTO_OPT_PEEK)
			PUT("/peek");
	}
	switch (r->cmd) {
	case PROTO_CMD_SET:
		PUT(" %u %lld %llu", (unsigned)r->flags, (long long)r->exptime,
		    (unsigned long long)r->bytes);
		break;
	case PROTO_CMD_FLUSH_ALL:
		PUT(" %d", (int)r->delay);
		break;
	case PROTO_CMD_VERBOSITY:
		PUT(" %d", (int)r->verbosity);
		break;
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
	    a->verbosity != b->verbosity)
		return 0;
	for (i = 0; i < a->nkeys; i++) {
		const struct proto_key *x = &a->keys[i], *y = &b->keys[i];

		if (x->len != y->len || memcmp(x->name, y->name, x->len) != 0 ||
		    x->opts != y->opts || x->timeout_ms != y->timeout_ms)
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
			CHECK(req.cmd == PROTO_CMD_SET);
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data, *end = p + size;

	/* The whole input, unsplit, too: exercises lines with '\n' inside and
	 * whatever the splitter would hide. */
	fuzz_line(p, size);
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = (size_t)((nl ? nl : end) - p);

		if (len > 0 && p[len - 1] == '\r')
			len--;
		fuzz_line(p, len);
		p = nl ? nl + 1 : end;
	}
	return 0;
}
