/*
 * proto.c: request-line parser and reply formatting for the memcached text
 * protocol (contracts in proto.h).  Pure: no I/O, no allocation, no global
 * state, so it is safe to call from any thread and easy to fuzz.
 *
 * The line is split memcached-style into (offset, length) tokens on runs of
 * blanks (space or tab); nothing is copied or NUL-terminated, key names in
 * the result point into the caller's line.
 *
 * Every CLIENT_ERROR reason this file can give (static strings, no CRLF),
 * besides the refusals of PROTO_REFUSALS (proto_refusal()):
 *   "bad command line format"       wrong token count, bad number, bad
 *                                   noreply word, set length over 2^62
 *   "bad data chunk"                set with a negative length (memcached)
 *   "queue name too long"           name longer than PROTO_NAME_MAX
 *   "bad queue name"                empty name, bad characters, "/", ".."
 *   "bad get option"                unknown, empty or repeated get option
 *   "bad get option combination"    /peek or /abort with /open or /close
 *   "bad timeout"                   /t= not a number or above PROTO_TIMEOUT_MAX
 *   "bad peek count"                /peek= not a number in 1..PROTO_PEEK_MAX
 *   "too many keys"                 more than PROTO_MAX_KEYS keys in a get
 *   "bad stats pattern"             stats queue <pattern> with a character
 *                                   no queue name or pattern has
 *   "stats groups not supported ..." memcached's "stats items" and the like
 *                                   (R_STATS_GROUP; proto_stats_parse)
 *   "bad monitor seconds"           monitor seconds outside 1..86400
 *   "line too long"                 len > PROTO_LINE_MAX (the server should
 *                                   never pass one; it closes the connection)
 */
#include "proto.h"
#include "../lib/log.h"

#include <string.h>

#define R_FORMAT "bad command line format"
#define R_CHUNK "bad data chunk"
#define R_NAME_LONG "queue name too long"
#define R_NAME_BAD "bad queue name"
#define R_OPT "bad get option"
#define R_OPT_COMBO "bad get option combination"
#define R_TIMEOUT "bad timeout"
#define R_ID "bad item id"
#define R_RESERVE "reserve needs gets (the item id is the cas)"
#define R_KEYS "too many keys"
#define R_STATS_GROUP "stats groups not supported (stats queue <pattern>)"
#define R_STATS_PATTERN "bad stats pattern"
#define R_MONITOR "bad monitor seconds"
#define R_LINE "line too long"
#define R_DELAY "bad delay"
#define R_PEEK "bad peek count"

/* Longest monitor window: one day, in seconds. */
#define MONITOR_SECONDS_MAX 86400u
/* A set length above this cannot be swallowed reliably (bytes + 2 must not
 * wrap, and no real client sends it): the line is rejected without swallow. */
#define SET_BYTES_MAX (UINT64_C(1) << 62)

/* "get" plus PROTO_MAX_KEYS keys plus one, so an over-long get is seen. */
#define TOK_MAX (PROTO_MAX_KEYS + 2)

struct tok {
	const char *s;
	size_t len;
};

enum shape { SHAPE_CMD, SHAPE_STORE, SHAPE_LINE };

static const struct {
	const char *word;
	size_t len;
	enum shape shape;
} cmd_table[PROTO_CMD__COUNT] = {
#define PROTO_CMD_ROW(e, w, sh) [PROTO_CMD_##e] = { w, sizeof(w) - 1, SHAPE_##sh },
	PROTO_COMMANDS(PROTO_CMD_ROW)
#undef PROTO_CMD_ROW
};

static const char *const refusal_table[PROTO_CMD__COUNT] = {
#define PROTO_REFUSAL_ROW(e, why) [PROTO_CMD_##e] = why,
	PROTO_REFUSALS(PROTO_REFUSAL_ROW)
#undef PROTO_REFUSAL_ROW
};

static const struct {
	const char *s;
	size_t len;
} reply_table[PROTO_REPLY__COUNT] = {
#define PROTO_REPLY_ROW(e, s) [PROTO_REPLY_##e] = { s, sizeof(s) - 1 },
	PROTO_REPLIES(PROTO_REPLY_ROW)
#undef PROTO_REPLY_ROW
};

static int is_blank(char c)
{
	return c == ' ' || c == '\t';
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && defined(__GNUC__)
#define LOWS UINT64_C(0x7f7f7f7f7f7f7f7f)
#define ONES UINT64_C(0x0101010101010101)

/* The high bit of each byte of x that is zero (exact: no carry crosses
 * from one byte into the next). */
static uint64_t zero_lanes(uint64_t x)
{
	return ~(((x & LOWS) + LOWS) | x | LOWS);
}

/* One bit per blank among the 8 bytes of w, bit k for the k-th byte in
 * memory (the low one): the lanes' high bits gathered into one byte by a
 * multiplication whose partial products never overlap. */
static unsigned blank_bits8(uint64_t w)
{
	uint64_t lanes = zero_lanes(w ^ (ONES * ' ')) | zero_lanes(w ^ (ONES * '\t'));

	return (unsigned)(((lanes >> 7) * UINT64_C(0x0102040810204080)) >> 56);
}

static uint64_t load8(const char *p)
{
	uint64_t w;

	memcpy(&w, p, sizeof(w));
	return w;
}

/*
 * Splits a line of 1..64 bytes: a map of its blanks, one bit a byte, eight
 * bytes at a time (the last bytes through a load of the line's last eight
 * shifted down: zeros come in from the top, and a zero is not a blank, so
 * nothing past the line is read), then each token is a run of clear bits.
 * Request lines are mostly this short; the per-byte split below takes the
 * rest and gives the same tokens.
 */
static size_t tokenize_short(const char *line, size_t len, struct tok *toks)
{
	uint64_t blanks = 0, words;
	size_t i, n = 0;

	for (i = 0; len - i >= 8; i += 8)
		blanks |= (uint64_t)blank_bits8(load8(line + i)) << i;
	if (i < len && len >= 8) {
		blanks |= (uint64_t)blank_bits8(load8(line + len - 8) >> (8 * (8 - (len - i))))
			  << i;
	} else {
		for (; i < len; i++)
			blanks |= (uint64_t)is_blank(line[i]) << i;
	}
	words = ~blanks & (len == 64 ? ~UINT64_C(0) : (UINT64_C(1) << len) - 1);
	while (words) {
		/* adding its lowest bit to a run of ones clears the run and
		 * sets the bit past it (none when the run ends the word) */
		uint64_t past = words + (words & -words);
		size_t start = (size_t)__builtin_ctzll(words);
		size_t end = past ? (size_t)__builtin_ctzll(past) : 64;

		/* 64 bytes hold at most 32 tokens, and TOK_MAX is above that */
		toks[n].s = line + start;
		toks[n].len = end - start;
		n++;
		words &= past;
	}
	return n;
}
#undef LOWS
#undef ONES
#define TOKENIZE_SHORT 64
_Static_assert(TOK_MAX >= TOKENIZE_SHORT / 2, "a short line's tokens fit toks");
#endif

/*
 * Splits line into at most TOK_MAX tokens.  Returns the total number of
 * tokens on the line (which may exceed TOK_MAX; only the first TOK_MAX are
 * stored), so callers can tell "too many" from "just enough".
 */
static size_t tokenize(const char *line, size_t len, struct tok *toks)
{
	size_t i = 0, n = 0;

#ifdef TOKENIZE_SHORT
	if (len <= TOKENIZE_SHORT)
		return len ? tokenize_short(line, len, toks) : 0;
#endif
	while (i < len) {
		size_t start;

		while (i < len && is_blank(line[i]))
			i++;
		if (i == len)
			break;
		start = i;
		while (i < len && !is_blank(line[i]))
			i++;
		if (n < TOK_MAX) {
			toks[n].s = line + start;
			toks[n].len = i - start;
		}
		n++;
	}
	return n;
}

static int tok_is(const struct tok *t, const char *word)
{
	size_t wl = strlen(word);

	return t->len == wl && memcmp(t->s, word, wl) == 0;
}

int proto_parse_uint(const char *s, size_t len, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;
	size_t i;

	if (len == 0)
		return -1;
	for (i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		/* v only grows: once above max (or past 2^64) it stays out */
		if (__builtin_mul_overflow(v, 10, &v) ||
		    __builtin_add_overflow(v, (unsigned)(s[i] - '0'), &v) || v > max)
			return -1;
	}
	*out = v;
	return 0;
}

/* Checks a queue name; returns NULL when valid, else the reason. */
static const char *check_name(const char *s, size_t len)
{
	if (len > PROTO_NAME_MAX)
		return R_NAME_LONG;
	if (!tern_name_valid(s, len))
		return R_NAME_BAD;
	return NULL;
}

/* Fills key k from a plain (option-less) name token. */
static const char *set_key(struct proto_key *k, const struct tok *t)
{
	const char *why = check_name(t->s, t->len);

	if (why)
		return why;
	k->raw = k->name = t->s;
	k->raw_len = k->len = (uint16_t)t->len;
	k->opts = 0;
	k->timeout_ms = -1;
	k->item_id = 0;
	k->delay_ms = 0;
	k->peek = 0;
	return NULL;
}

int proto_parse_delay(const char *s, size_t len, uint32_t *ms)
{
	uint64_t v, unit = 1;

	if (len > 2 && s[len - 2] == 'm' && s[len - 1] == 's') {
		len -= 2;
	} else if (len > 1 && s[len - 1] == 's') {
		len -= 1;
		unit = 1000;
	}
	if (proto_parse_uint(s, len, PROTO_DELAY_MAX, &v) || v * unit > PROTO_DELAY_MAX)
		return -1;
	*ms = (uint32_t)(v * unit);
	return 0;
}

const char *proto_set_key_parse(const char *s, size_t len, struct proto_key *k)
{
	const char *slash = memchr(s, '/', len);
	struct tok name = { s, slash ? (size_t)(slash - s) : len };
	const char *why = set_key(k, &name);
	const char *o;
	size_t olen;

	if (why || !slash)
		return why;
	if (len > PROTO_LINE_MAX)
		return R_NAME_BAD; /* cannot come from a line; keeps raw_len in range */
	k->raw_len = (uint16_t)len;
	o = slash + 1;
	olen = len - name.len - 1;
	if (olen < 6 || memcmp(o, "delay=", 6) != 0 || memchr(o, '/', olen))
		return R_NAME_BAD; /* a set takes no get option */
	if (proto_parse_delay(o + 6, olen - 6, &k->delay_ms))
		return R_DELAY;
	return NULL;
}

/* An item id: 1 to 2^63-1 in decimal. */
static const char *parse_item_id(const char *s, size_t len, uint64_t *id)
{
	if (proto_parse_uint(s, len, INT64_MAX, id) || *id == 0)
		return R_ID;
	return NULL;
}

/* delete's key: a queue name, or "<queue>/<id>" (confirm by id). */
static const char *set_delete_key(struct proto_key *k, const struct tok *t)
{
	const char *slash = memchr(t->s, '/', t->len);
	struct tok name = { t->s, slash ? (size_t)(slash - t->s) : t->len };
	const char *why = set_key(k, &name);

	if (why || !slash)
		return why;
	if ((why = parse_item_id(slash + 1, (size_t)(t->s + t->len - slash - 1), &k->item_id)))
		return why;
	k->raw_len = (uint16_t)t->len;
	k->opts = PROTO_OPT_CLOSE_ID;
	return NULL;
}

/*
 * peek+abort is accepted as Kestrel does (the server decides which wins);
 * the other refusals are documented in proto.h.
 */
const char *proto_key_parse(const char *s, size_t len, struct proto_key *k)
{
	const char *p = s, *end = s + len;
	const char *slash = memchr(p, '/', len);
	size_t nlen = slash ? (size_t)(slash - p) : len;
	const char *why = check_name(p, nlen);
	int have_t = 0;

	if (why)
		return why;
	if (len > PROTO_LINE_MAX)
		return R_OPT; /* cannot come from a line; keeps raw_len in range */
	k->raw = s;
	k->raw_len = (uint16_t)len;
	k->name = p;
	k->len = (uint16_t)nlen;
	k->opts = 0;
	k->timeout_ms = -1;
	k->item_id = 0;
	k->delay_ms = 0;
	k->peek = 0;
	while (slash) {
		const char *o = slash + 1;
		size_t olen;
		uint8_t bit = 0;

		slash = memchr(o, '/', (size_t)(end - o));
		olen = (size_t)((slash ? slash : end) - o);
		if (olen >= 2 && o[0] == 't' && o[1] == '=') {
			uint64_t ms;

			if (have_t)
				return R_OPT;
			if (proto_parse_uint(o + 2, olen - 2, PROTO_TIMEOUT_MAX, &ms))
				return R_TIMEOUT;
			k->timeout_ms = (int32_t)ms;
			have_t = 1;
			continue;
		}
		if ((olen >= 6 && memcmp(o, "close=", 6) == 0) ||
		    (olen >= 6 && memcmp(o, "abort=", 6) == 0)) {
			const char *why_id;

			if (k->opts & (PROTO_OPT_CLOSE_ID | PROTO_OPT_ABORT_ID))
				return R_OPT; /* one id per key */
			if ((why_id = parse_item_id(o + 6, olen - 6, &k->item_id)))
				return why_id;
			k->opts |= o[0] == 'c' ? PROTO_OPT_CLOSE_ID : PROTO_OPT_ABORT_ID;
			continue;
		}
		if (olen >= 5 && memcmp(o, "peek=", 5) == 0) {
			uint64_t n;

			if (k->opts & PROTO_OPT_PEEK)
				return R_OPT;
			if (proto_parse_uint(o + 5, olen - 5, PROTO_PEEK_MAX, &n) || n == 0)
				return R_PEEK;
			k->peek = (uint16_t)n;
			k->opts |= PROTO_OPT_PEEK;
			continue;
		}
		if (olen == 4 && memcmp(o, "open", 4) == 0)
			bit = PROTO_OPT_OPEN;
		else if (olen == 5 && memcmp(o, "close", 5) == 0)
			bit = PROTO_OPT_CLOSE;
		else if (olen == 5 && memcmp(o, "abort", 5) == 0)
			bit = PROTO_OPT_ABORT;
		else if (olen == 4 && memcmp(o, "peek", 4) == 0)
			bit = PROTO_OPT_PEEK;
		else if (olen == 7 && memcmp(o, "reserve", 7) == 0)
			bit = PROTO_OPT_RESERVE;
		if (!bit || (k->opts & bit))
			return R_OPT; /* unknown, empty ("q//open", "q/") or repeated */
		k->opts |= bit;
		if (bit == PROTO_OPT_PEEK)
			k->peek = 1;
	}
	if ((k->opts & (PROTO_OPT_PEEK | PROTO_OPT_ABORT)) &&
	    (k->opts & (PROTO_OPT_OPEN | PROTO_OPT_CLOSE)))
		return R_OPT_COMBO;
	/* By id: close=<id> may open or reserve the next; abort=<id> and
	 * reserve stand alone. */
	if ((k->opts & PROTO_OPT_CLOSE_ID) &&
	    (k->opts & (PROTO_OPT_CLOSE | PROTO_OPT_ABORT | PROTO_OPT_PEEK)))
		return R_OPT_COMBO;
	if ((k->opts & PROTO_OPT_RESERVE) &&
	    (k->opts & (PROTO_OPT_OPEN | PROTO_OPT_CLOSE | PROTO_OPT_ABORT | PROTO_OPT_PEEK)))
		return R_OPT_COMBO;
	if ((k->opts & PROTO_OPT_ABORT_ID) &&
	    (k->opts & (PROTO_OPT_OPEN | PROTO_OPT_CLOSE | PROTO_OPT_ABORT | PROTO_OPT_PEEK |
			PROTO_OPT_RESERVE)))
		return R_OPT_COMBO;
	return NULL;
}

/*
 * set|add <queue> <flags> <exptime> <bytes> [noreply]
 * Once <bytes> parses, every later complaint must also tell the server to
 * swallow the data block the client is about to send (bytes + 2 for CRLF),
 * or the body would be read as commands.
 */
static const char *parse_set(struct proto_req *req, const struct tok *t, size_t n,
			     uint64_t *swallow)
{
	uint64_t v;
	const char *why;

	if (n < 5)
		return R_FORMAT; /* <bytes> is not on the line: nothing to swallow */
	if (t[4].len > 0 && t[4].s[0] == '-')
		return R_CHUNK; /* memcached: negative length, no swallow */
	if (proto_parse_uint(t[4].s, t[4].len, UINT64_MAX, &v) || v > SET_BYTES_MAX)
		return R_FORMAT;
	req->bytes = v;
	*swallow = v + 2;
	if (n > 6 || (n == 6 && !tok_is(&t[5], "noreply")))
		return R_FORMAT;
	req->noreply = n == 6;
	if ((why = proto_set_key_parse(t[1].s, t[1].len, &req->keys[0])))
		return why;
	req->nkeys = 1;
	if (proto_parse_uint(t[2].s, t[2].len, UINT32_MAX, &v))
		return R_FORMAT;
	req->flags = (uint32_t)v;
	/* memcached takes a negative exptime as "already expired"; tern's
	 * contract is >= 0, so a '-' fails here as a non-digit. */
	if (proto_parse_uint(t[3].s, t[3].len, INT64_MAX, &v))
		return R_FORMAT;
	req->exptime = (int64_t)v;
	*swallow = 0;
	return NULL;
}

static const char *parse_get(struct proto_req *req, const struct tok *t, size_t n)
{
	size_t i;
	const char *why;

	if (n < 2)
		return R_FORMAT;
	if (n - 1 > PROTO_MAX_KEYS)
		return R_KEYS;
	for (i = 1; i < n; i++) {
		if ((why = proto_key_parse(t[i].s, t[i].len, &req->keys[i - 1])))
			return why;
		if (req->cmd == PROTO_CMD_GET && (req->keys[i - 1].opts & PROTO_OPT_RESERVE))
			return R_RESERVE;
	}
	req->nkeys = (unsigned)(n - 1);
	return NULL;
}

/* Sets req->noreply when the last of n tokens is "noreply"; returns the
 * number of tokens left without it. */
static size_t take_noreply(struct proto_req *req, const struct tok *t, size_t n)
{
	if (n > 1 && n <= TOK_MAX && tok_is(&t[n - 1], "noreply")) {
		req->noreply = 1;
		return n - 1;
	}
	return n;
}

/* <cmd> <queue> [noreply]: delete, flush, flush_expired.  delete also
 * takes memcached's legacy "delete <key> 0" (old clients send it). */
static const char *parse_name_cmd(struct proto_req *req, const struct tok *t, size_t n)
{
	const char *why;

	n = take_noreply(req, t, n);
	if (req->cmd == PROTO_CMD_DELETE && n == 3 && tok_is(&t[2], "0"))
		n = 2;
	if (n != 2)
		return R_FORMAT;
	why = req->cmd == PROTO_CMD_DELETE ? set_delete_key(&req->keys[0], &t[1])
					   : set_key(&req->keys[0], &t[1]);
	if (why)
		return why;
	req->nkeys = 1;
	return NULL;
}

/* status [<word>] | status queue <name> [<word>] */
static const char *parse_status(struct proto_req *req, const struct tok *t, size_t n)
{
	const char *why;
	size_t w = 1;

	if (n >= 3 && tok_is(&t[1], "queue")) {
		if (n > 4)
			return R_FORMAT;
		if ((why = set_key(&req->keys[0], &t[2])))
			return why;
		req->nkeys = 1;
		w = 3;
	} else if (n > 2) {
		return R_FORMAT;
	}
	if (n > w) {
		req->word = t[w].s;
		req->word_len = (uint16_t)(t[w].len > UINT16_MAX ? UINT16_MAX : t[w].len);
	}
	return NULL;
}

static const char *parse_flush_all(struct proto_req *req, const struct tok *t, size_t n)
{
	uint64_t v;

	n = take_noreply(req, t, n);
	if (n > 2)
		return R_FORMAT;
	if (n == 2) {
		if (proto_parse_uint(t[1].s, t[1].len, INT32_MAX, &v))
			return R_FORMAT;
		req->delay = (int32_t)v;
	}
	return NULL;
}

static const char *const log_level_names[] = {
#define LOG_LEVEL_WORD(e, w) w,
	LOG_LEVELS(LOG_LEVEL_WORD)
#undef LOG_LEVEL_WORD
};

/* verbosity <level> [noreply | <ignored>] (n is 2 or 3).  The level is
 * read from the first argument even when it is "noreply" (memcached's
 * reading: "verbosity noreply" is a bad level, answered only without
 * noreply); a '+' sign is accepted as strtoul does.  A log level's name
 * is tern's own form. */
static void parse_verbosity(struct proto_req *req, const struct tok *t, size_t n)
{
	const char *s = t[1].s;
	size_t len = t[1].len;
	uint64_t v;

	take_noreply(req, t, n);
	for (size_t i = 0; i < sizeof(log_level_names) / sizeof(log_level_names[0]); i++)
		if (tok_is(&t[1], log_level_names[i])) {
			req->log_level = (int)i;
			return;
		}
	if (len > 1 && *s == '+') {
		s++;
		len--;
	}
	req->verbosity = proto_parse_uint(s, len, INT64_MAX, &v) ? -1 : (int64_t)v;
}

/* monitor <queue> <seconds> [max] */
static const char *parse_monitor(struct proto_req *req, const struct tok *t, size_t n)
{
	uint64_t v;
	const char *why;

	if (n < 3 || n > 4)
		return R_FORMAT;
	if ((why = set_key(&req->keys[0], &t[1])))
		return why;
	req->nkeys = 1;
	if (proto_parse_uint(t[2].s, t[2].len, UINT64_MAX, &v))
		return R_FORMAT;
	if (v < 1 || v > MONITOR_SECONDS_MAX)
		return R_MONITOR;
	req->seconds = (uint32_t)v;
	if (n == 4) {
		if (proto_parse_uint(t[3].s, t[3].len, UINT32_MAX, &v))
			return R_FORMAT;
		req->count = (uint32_t)v;
	}
	return NULL;
}

/* confirm <queue> <count> [noreply] */
static const char *parse_confirm(struct proto_req *req, const struct tok *t, size_t n)
{
	uint64_t v;
	const char *why;

	n = take_noreply(req, t, n);
	if (n != 3)
		return R_FORMAT;
	if ((why = set_key(&req->keys[0], &t[1])))
		return why;
	req->nkeys = 1;
	if (proto_parse_uint(t[2].s, t[2].len, UINT32_MAX, &v))
		return R_FORMAT;
	req->count = (uint32_t)v;
	return NULL;
}

/*
 * A storage command tern refuses: "<cmd> <key> <flags> <exptime> <bytes>
 * [noreply]", "cas" with <cas unique> before noreply.  Only what the
 * server needs to stay in step is checked (the length, the token count,
 * noreply): whatever the key or numbers, the answer is the refusal.
 */
static const char *parse_refused_store(struct proto_req *req, const struct tok *t,
				       size_t n, uint64_t *swallow)
{
	size_t want = req->cmd == PROTO_CMD_CAS ? 6 : 5;
	uint64_t v;

	if (n < 5)
		return R_FORMAT;
	if (t[4].len > 0 && t[4].s[0] == '-')
		return R_CHUNK;
	if (proto_parse_uint(t[4].s, t[4].len, UINT64_MAX, &v) || v > SET_BYTES_MAX)
		return R_FORMAT;
	req->bytes = v;
	*swallow = v + 2;
	if (n < want || n > want + 1 || (n == want + 1 && !tok_is(&t[want], "noreply")))
		return R_FORMAT;
	req->noreply = n == want + 1;
	*swallow = 0;
	return NULL;
}

static int lookup_cmd(const struct tok *t, enum proto_cmd *cmd)
{
	int i;
	size_t k;

	/* The length and the first byte rule out all rows but one or two, and
	 * words are short: compared in line, without a call. */
	for (i = 0; i < PROTO_CMD__COUNT; i++) {
		if (cmd_table[i].len != t->len || cmd_table[i].word[0] != t->s[0])
			continue;
		for (k = 1; k < t->len && cmd_table[i].word[k] == t->s[k]; k++)
			;
		if (k == t->len) {
			*cmd = (enum proto_cmd)i;
			return 0;
		}
	}
	return -1;
}

enum proto_status proto_parse(const char *line, size_t len, struct proto_req *req,
			      const char **reason, uint64_t *swallow)
{
	struct tok t[TOK_MAX];
	size_t n;
	const char *why = NULL;

	*reason = NULL;
	*swallow = 0;
	/* Scalars only: keys[] is filled up to nkeys, and clearing all of it
	 * would cost more than the parse itself. */
	req->cmd = PROTO_CMD__COUNT;
	req->nkeys = 0;
	req->flags = 0;
	req->exptime = 0;
	req->bytes = 0;
	req->noreply = 0;
	req->seconds = 0;
	req->count = 0;
	req->delay = 0;
	req->verbosity = 0;
	req->log_level = -1;
	req->word = NULL;
	req->word_len = 0;

	if (len > PROTO_LINE_MAX) {
		*reason = R_LINE;
		return PROTO_CLIENT_ERROR;
	}
	n = tokenize(line, len, t);
	if (n == 0 || lookup_cmd(&t[0], &req->cmd))
		return PROTO_ERROR;

	if (cmd_table[req->cmd].shape == SHAPE_STORE) {
		why = parse_refused_store(req, t, n, swallow);
		goto done;
	}
	if (cmd_table[req->cmd].shape == SHAPE_LINE) {
		/* gat/gats take no noreply in memcached: a last "noreply" is a key */
		if (req->cmd != PROTO_CMD_GAT && req->cmd != PROTO_CMD_GATS)
			take_noreply(req, t, n);
		return PROTO_OK;
	}
	switch (req->cmd) {
	case PROTO_CMD_SET:
	case PROTO_CMD_ADD:
		why = parse_set(req, t, n, swallow);
		break;
	case PROTO_CMD_GET:
	case PROTO_CMD_GETS:
		why = parse_get(req, t, n);
		break;
	case PROTO_CMD_DELETE:
	case PROTO_CMD_FLUSH:
	case PROTO_CMD_FLUSH_EXPIRED:
		why = parse_name_cmd(req, t, n);
		break;
	case PROTO_CMD_FLUSH_ALL:
		why = parse_flush_all(req, t, n);
		break;
	case PROTO_CMD_VERBOSITY:
		if (n < 2 || n > 3)
			return PROTO_ERROR;
		parse_verbosity(req, t, n);
		break;
	case PROTO_CMD_MONITOR:
		why = parse_monitor(req, t, n);
		break;
	case PROTO_CMD_CONFIRM:
		why = parse_confirm(req, t, n);
		break;
	case PROTO_CMD_STATUS:
		why = parse_status(req, t, n);
		break;
	case PROTO_CMD_STATS:
		if (n == 1) {
			req->stats.kind = PROTO_STATS_ALL;
			break;
		}
		if (n == 2 && tok_is(&t[1], "noreply"))
			return PROTO_ERROR; /* memcached's answer */
		why = proto_stats_parse(t[1].s, (size_t)(line + len - t[1].s), &req->stats);
		break;
	case PROTO_CMD_VERSION:
		break; /* memcached 1.6 answers whatever follows */
	case PROTO_CMD_FLUSH_ALL_EXPIRED:
	case PROTO_CMD_QUIT:
	case PROTO_CMD_SHUTDOWN:
	case PROTO_CMD_RELOAD:
		if (n != 1)
			why = R_FORMAT;
		break;
	default:
		return PROTO_ERROR; /* PROTO_CMD__COUNT: lookup_cmd found none */
	}
done:
	if (why) {
		/* A failed request is all-or-nothing: no half-filled keys. */
		req->nkeys = 0;
		*reason = why;
		return PROTO_CLIENT_ERROR;
	}
	return PROTO_OK;
}

/* Whether c may appear in a stats pattern: a queue name's characters and
 * the pattern's own (* ? [ ] !). */
static int pattern_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '.' || c == '-' || c == '+' || c == '*' || c == '?' ||
	       c == '[' || c == ']' || c == '!';
}

static const struct tok stats_groups[] = {
#define STATS_GROUP_TOK(w) { w, sizeof(w) - 1 },
	PROTO_STATS_GROUPS(STATS_GROUP_TOK)
#undef STATS_GROUP_TOK
};

const char *proto_stats_parse(const char *s, size_t len, struct proto_stats *st)
{
	struct tok t[4];
	size_t n, i;

	st->kind = PROTO_STATS_ALL;
	st->arg = NULL;
	st->len = 0;
	if (len > PROTO_LINE_MAX)
		return R_FORMAT;
	/* tokenize fills at most TOK_MAX tokens: count words first */
	for (n = 0, i = 0; i < len; n++) {
		while (i < len && is_blank(s[i]))
			i++;
		if (i == len)
			break;
		if (n == 3)
			return R_FORMAT;
		t[n].s = s + i;
		while (i < len && !is_blank(s[i]))
			i++;
		t[n].len = (size_t)(s + i - t[n].s);
	}
	if (n == 0)
		return NULL;
	if (n == 2 && tok_is(&t[0], "queue")) {
		if (t[1].len > PROTO_NAME_MAX)
			return R_STATS_PATTERN;
		for (i = 0; i < t[1].len; i++)
			if (!pattern_char((unsigned char)t[1].s[i]))
				return R_STATS_PATTERN;
		st->kind = PROTO_STATS_MATCH;
		st->arg = t[1].s;
		st->len = (uint16_t)t[1].len;
		return NULL;
	}
	if (n != 1)
		return R_FORMAT;
	if (tok_is(&t[0], "settings")) {
		st->kind = PROTO_STATS_SETTINGS;
		return NULL;
	}
	for (i = 0; i < sizeof(stats_groups) / sizeof(stats_groups[0]); i++) {
		if (stats_groups[i].len == t[0].len &&
		    memcmp(stats_groups[i].s, t[0].s, t[0].len) == 0) {
			st->kind = PROTO_STATS_GROUP;
			return R_STATS_GROUP;
		}
	}
	if (t[0].len > PROTO_NAME_MAX)
		return R_NAME_LONG;
	if (!tern_name_valid(t[0].s, t[0].len))
		return R_NAME_BAD;
	st->kind = PROTO_STATS_QUEUE;
	st->arg = t[0].s;
	st->len = (uint16_t)t[0].len;
	return NULL;
}

const char *proto_reply(enum proto_reply r, size_t *len)
{
	if ((unsigned)r >= PROTO_REPLY__COUNT)
		r = PROTO_REPLY_ERROR; /* a caller bug; still a valid reply */
	*len = reply_table[r].len;
	return reply_table[r].s;
}

size_t proto_put_u64(char *p, uint64_t v)
{
	size_t n = 1;
	uint64_t t;
	char *q;

	/* counted first, then written from the last digit back in place */
	for (t = v; t >= 10; t /= 10)
		n++;
	q = p + n;
	do {
		*--q = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	return n;
}

size_t proto_value_header(char *buf, const char *key, size_t key_len,
			  uint32_t flags, uint32_t bytes, int with_cas, uint64_t cas)
{
	char *p = buf;

	memcpy(p, "VALUE ", 6);
	p += 6;
	memcpy(p, key, key_len);
	p += key_len;
	*p++ = ' ';
	p += proto_put_u64(p, flags);
	*p++ = ' ';
	p += proto_put_u64(p, bytes);
	if (with_cas) {
		*p++ = ' ';
		p += proto_put_u64(p, cas);
	}
	*p++ = '\r';
	*p++ = '\n';
	return (size_t)(p - buf);
}

const char *proto_refusal(enum proto_cmd cmd)
{
	if ((unsigned)cmd >= PROTO_CMD__COUNT)
		return NULL;
	return refusal_table[cmd];
}

int proto_cmd_takes_body(enum proto_cmd cmd)
{
	return (unsigned)cmd < PROTO_CMD__COUNT &&
	       (cmd == PROTO_CMD_SET || cmd == PROTO_CMD_ADD ||
		cmd_table[cmd].shape == SHAPE_STORE);
}

const char *proto_cmd_name(enum proto_cmd cmd)
{
	if ((unsigned)cmd >= PROTO_CMD__COUNT)
		return "unknown";
	return cmd_table[cmd].word;
}
