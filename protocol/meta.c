/*
 * meta.c: parser and reply encoder for the meta protocol (contracts in
 * meta.h).  Pure: no I/O, no allocation, no global state.
 *
 * A line is "<cm> <key> [<datalen>] <flag>*": tokens separated by blanks,
 * each flag one letter, with its token glued to it ("O123", "T60").  Like
 * memcached, a flag may appear once; unlike memcached, a flag that takes no
 * token must be the letter alone ("kq" is refused rather than read as k).
 */
#include "meta.h"

#include <string.h>

#define R_FORMAT "bad command line format"
#define R_CHUNK "bad data chunk"
#define R_INVALID "invalid flag"
#define R_DUP "duplicate flag"
#define R_OPAQUE "opaque token too long"
#define R_MODE "invalid mode for ms M token"

/* An ms length above this cannot be swallowed reliably (as for set). */
#define MS_BYTES_MAX (UINT64_C(1) << 62)

static const char *const cmd_table[META__COUNT] = {
#define META_CMD_ROW(e, w) [META_##e] = w,
	META_COMMANDS(META_CMD_ROW)
#undef META_CMD_ROW
};

static const char *const refusal_table[META__COUNT] = {
#define META_REFUSAL_ROW(e, why) [META_##e] = why,
	META_REFUSALS(META_REFUSAL_ROW)
#undef META_REFUSAL_ROW
};

static const struct {
	char letter;
	uint8_t token;     /* 0 none, 1 required, 2 optional */
	uint32_t in;       /* META_IN_* taking it */
	uint32_t refused;  /* META_IN_* refusing it */
	const char *why;
} flag_table[META_FI__COUNT] = {
#define META_FLAG_ROW(ch, e, tok, inm, ref, w) [META_FI_##e] = { ch, tok, inm, ref, w },
	META_FLAGS(META_FLAG_ROW)
#undef META_FLAG_ROW
};

static const char *const code_table[META_CODE__COUNT] = {
#define META_CODE_ROW(e, w) [META_CODE_##e] = w,
	META_CODES(META_CODE_ROW)
#undef META_CODE_ROW
};

struct tok {
	const char *s;
	size_t len;
};

static int is_blank(char c)
{
	return c == ' ' || c == '\t';
}

/* Returns the next token at or after *pos (len 0 at the end). */
static struct tok next_tok(const char *line, size_t len, size_t *pos)
{
	struct tok t = { line + len, 0 };
	size_t i = *pos;

	while (i < len && is_blank(line[i]))
		i++;
	t.s = line + i;
	while (i < len && !is_blank(line[i]))
		i++;
	t.len = (size_t)(t.s == line + len ? 0 : (line + i) - t.s);
	*pos = i;
	return t;
}

static int lookup_cmd(const struct tok *t, enum meta_cmd *cmd)
{
	int i;

	if (t->len != 2)
		return -1;
	for (i = 0; i < META__COUNT; i++)
		if (memcmp(cmd_table[i], t->s, 2) == 0) {
			*cmd = (enum meta_cmd)i;
			return 0;
		}
	return -1;
}

int meta_match(const char *line, size_t len)
{
	size_t i = 0;
	struct tok t;
	enum meta_cmd cmd;

	/* Asked of every text line: every meta word has two bytes, so the
	 * third byte tells most lines apart without reading the first word
	 * through. */
	while (i < len && is_blank(line[i]))
		i++;
	if (len - i < 2 || (len - i > 2 && !is_blank(line[i + 2])))
		return 0;
	t.s = line + i;
	t.len = 2;
	return lookup_cmd(&t, &cmd) == 0;
}

static int b64_value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

/*
 * Decodes standard base64 (with its '=' padding, length a multiple of 4)
 * into out (cap bytes).  Returns the decoded length, or -1 when the input
 * is not base64 or does not fit.
 */
static long b64_decode(const char *s, size_t len, char *out, size_t cap)
{
	size_t i, n = 0;

	if (len == 0 || len % 4)
		return -1;
	for (i = 0; i < len; i += 4) {
		int v[4], k, pad = 0;
		uint32_t w;

		for (k = 0; k < 4; k++) {
			if (s[i + k] == '=' && i + 4 == len && k >= 2) {
				v[k] = 0;
				pad++;
				continue;
			}
			if (pad || (v[k] = b64_value((unsigned char)s[i + k])) < 0)
				return -1; /* a digit after '=' or outside the alphabet */
		}
		w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
		if (n + 3 - (size_t)pad > cap)
			return -1;
		out[n++] = (char)(w >> 16);
		if (pad < 2)
			out[n++] = (char)(w >> 8);
		if (pad < 1)
			out[n++] = (char)w;
	}
	return (long)n;
}

static int flag_index(char letter)
{
	int i;

	for (i = 0; i < META_FI__COUNT; i++)
		if (flag_table[i].letter == letter)
			return i;
	return -1;
}

/* Parses the flag tokens from *pos on.  Returns NULL or the reason. */
static const char *parse_flags(struct meta_req *r, const char *line, size_t len,
			       size_t pos)
{
	uint32_t mask = 1u << r->cmd;
	uint64_t v;

	for (;;) {
		struct tok t = next_tok(line, len, &pos);
		int fi;
		const char *arg;
		size_t alen;

		if (t.len == 0)
			return NULL;
		/* a flag may appear once: the table's size bounds a line's flags */
		fi = flag_index(t.s[0]);
		if (fi < 0)
			return R_INVALID;
		if (flag_table[fi].refused & mask)
			return flag_table[fi].why;
		if (!(flag_table[fi].in & mask))
			return R_INVALID;
		arg = t.s + 1;
		alen = t.len - 1;
		if ((flag_table[fi].token == 0 && alen) || (flag_table[fi].token == 1 && !alen))
			return R_INVALID;
		if (r->seen & (1u << fi))
			return R_DUP;
		r->seen |= 1u << fi;
		switch (fi) {
		case META_FI_CAS:
		case META_FI_DELIVERIES:
		case META_FI_FLAGS:
		case META_FI_KEY:
		case META_FI_SIZE:
		case META_FI_TTL:
			r->ret[r->nret++] = t.s[0];
			break;
		case META_FI_OPAQUE:
			if (alen > META_OPAQUE_MAX)
				return R_OPAQUE;
			r->opaque = arg;
			r->opaque_len = (uint8_t)alen;
			r->ret[r->nret++] = 'O';
			break;
		case META_FI_SET_FLAGS:
			if (proto_parse_uint(arg, alen, UINT32_MAX, &v))
				return R_FORMAT;
			r->client_flags = (uint32_t)v;
			break;
		case META_FI_SET_TTL:
			/* memcached takes a negative TTL as "already expired";
			 * a queue refuses it, as set does. */
			if (proto_parse_uint(arg, alen, INT64_MAX, &v))
				return R_FORMAT;
			r->exptime = (int64_t)v;
			break;
		case META_FI_DELAY:
			if (proto_parse_delay(arg, alen, &r->delay_ms))
				return "bad delay";
			break;
		case META_FI_MODE:
			if (alen != 1)
				return R_MODE;
			switch (arg[0]) {
			case 'S':
				break;
			case 'E':
				r->add = 1;
				break;
			case 'A':
				return proto_refusal(PROTO_CMD_APPEND);
			case 'P':
				return proto_refusal(PROTO_CMD_PREPEND);
			case 'R':
				return proto_refusal(PROTO_CMD_REPLACE);
			default:
				return R_MODE;
			}
			break;
		default:
			break;
		}
	}
}

/* Fills r->key from the key token (base64-decoded with b). */
static const char *parse_key(struct meta_req *r, const struct tok *k)
{
	const char *s = k->s;
	size_t len = k->len;
	const char *why;

	if (k->len > PROTO_KEY_MAX)
		return R_FORMAT;
	r->key_tok = k->s;
	r->key_tok_len = (uint16_t)k->len;
	if (r->seen & META_F_BASE64) {
		long n = b64_decode(k->s, k->len, r->kbuf, sizeof(r->kbuf));

		if (n <= 0)
			return R_FORMAT;
		s = r->kbuf;
		len = (size_t)n;
	}
	why = proto_key_parse(s, len, &r->key);
	if (why)
		return why;
	/* Options only make sense on a dequeue: ms and md take a plain name
	 * (the text set and delete refuse '/' the same way). */
	if (r->cmd != META_MG && r->key.len != r->key.raw_len)
		return "bad queue name";
	return NULL;
}

enum proto_status meta_parse(const char *line, size_t len, struct meta_req *req,
			     const char **reason, uint64_t *swallow)
{
	size_t pos = 0, flags_pos;
	struct tok t, key;
	const char *why = NULL;

	*reason = NULL;
	*swallow = 0;
	req->cmd = META__COUNT;
	req->key_tok = NULL;
	req->key_tok_len = 0;
	req->bytes = 0;
	req->client_flags = 0;
	req->exptime = 0;
	req->delay_ms = 0;
	req->seen = 0;
	req->nret = 0;
	req->opaque = NULL;
	req->opaque_len = 0;
	req->add = 0;

	if (len > PROTO_LINE_MAX) {
		*reason = "line too long";
		return PROTO_CLIENT_ERROR;
	}
	t = next_tok(line, len, &pos);
	if (lookup_cmd(&t, &req->cmd))
		return PROTO_ERROR;
	if (req->cmd == META_MN)
		return PROTO_OK; /* memcached ignores anything after mn */
	if (meta_refusal(req->cmd))
		return PROTO_OK;
	key = next_tok(line, len, &pos);
	if (key.len == 0) {
		why = R_FORMAT;
		goto fail;
	}
	if (req->cmd == META_MS) {
		uint64_t v;

		t = next_tok(line, len, &pos);
		if (t.len > 0 && t.s[0] == '-') {
			why = R_CHUNK;
			goto fail;
		}
		if (proto_parse_uint(t.s, t.len, UINT64_MAX, &v) || v > MS_BYTES_MAX) {
			why = R_FORMAT;
			goto fail;
		}
		req->bytes = v;
		*swallow = v + 2;
	}
	flags_pos = pos;
	/* Flags first: b decides how the key reads. */
	if ((why = parse_flags(req, line, len, flags_pos)) != NULL)
		goto fail;
	if ((why = parse_key(req, &key)) != NULL)
		goto fail;
	*swallow = 0;
	return PROTO_OK;
fail:
	*reason = why;
	return PROTO_CLIENT_ERROR;
}

const char *meta_refusal(enum meta_cmd cmd)
{
	if ((unsigned)cmd >= META__COUNT)
		return NULL;
	return refusal_table[cmd];
}

const char *meta_cmd_name(enum meta_cmd cmd)
{
	if ((unsigned)cmd >= META__COUNT)
		return "unknown";
	return cmd_table[cmd];
}

static char *put_i64(char *p, int64_t v)
{
	if (v < 0) {
		*p++ = '-';
		return p + proto_put_u64(p, (uint64_t)0 - (uint64_t)v);
	}
	return p + proto_put_u64(p, (uint64_t)v);
}

size_t meta_reply(char *buf, enum meta_code code, const struct meta_req *r,
		  const struct meta_item *it)
{
	char *p = buf;
	unsigned i;

	if ((unsigned)code >= META_CODE__COUNT)
		code = META_CODE_NS; /* a caller bug; still a valid line */
	memcpy(p, code_table[code], 2);
	p += 2;
	if (code == META_CODE_VA) {
		*p++ = ' ';
		p += proto_put_u64(p, it ? it->size : 0);
	}
	for (i = 0; r && i < r->nret; i++) {
		switch (r->ret[i]) {
		case 'k':
			*p++ = ' ';
			*p++ = 'k';
			memcpy(p, r->key_tok, r->key_tok_len);
			p += r->key_tok_len;
			if (r->seen & META_F_BASE64) {
				memcpy(p, " b", 2);
				p += 2;
			}
			break;
		case 'O':
			*p++ = ' ';
			*p++ = 'O';
			memcpy(p, r->opaque, r->opaque_len);
			p += r->opaque_len;
			break;
		default: /* c d f s t: what the item says */
			if (!it)
				break;
			*p++ = ' ';
			*p++ = r->ret[i];
			if (r->ret[i] == 't')
				p = put_i64(p, it->ttl);
			else
				p += proto_put_u64(p, r->ret[i] == 'c' ? it->cas
						   : r->ret[i] == 'd' ? it->deliveries
						   : r->ret[i] == 'f' ? it->flags : it->size);
			break;
		}
	}
	*p++ = '\r';
	*p++ = '\n';
	return (size_t)(p - buf);
}
