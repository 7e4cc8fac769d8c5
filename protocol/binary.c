/*
 * binary.c: header checks, body decoding and response headers for
 * memcached's binary protocol (contracts in binary.h).  Pure: no I/O, no
 * allocation, no global state.  Multi-byte fields are big-endian.
 *
 * Which bad frames close the connection: only those whose length fields
 * contradict each other (or whose magic is wrong), because the end of the
 * frame, and so the start of the next, is then unknown.  A frame that is
 * well delimited but asks for something tern cannot do is answered with
 * an error status and skipped, so the connection stays in step.
 */
#include "binary.h"

#include <string.h>

static const struct bin_opinfo op_table[256] = {
#define BIN_OP_ROW(e, code, k, ext, key, val, q, wk, refused)                         \
	[code] = { #e, BIN_K_##k, ext, key, val, q, wk, PROTO_CMD_##refused },
	BIN_OPCODES(BIN_OP_ROW)
#undef BIN_OP_ROW
};

static const struct {
	uint16_t status;
	const char *text;
} status_table[] = {
#define BIN_STATUS_ROW(e, v, text) { v, text },
	BIN_STATUSES(BIN_STATUS_ROW)
#undef BIN_STATUS_ROW
};

const struct bin_opinfo *bin_op(uint8_t opcode)
{
	return op_table[opcode].name ? &op_table[opcode] : NULL;
}

const char *bin_refusal(const struct bin_opinfo *op)
{
	const char *why = op ? proto_refusal(op->refused_as) : NULL;

	return why ? why : bin_status_text(BIN_STATUS_NOT_SUPPORTED);
}

const char *bin_status_text(uint16_t status)
{
	size_t i;

	for (i = 0; i < sizeof(status_table) / sizeof(status_table[0]); i++)
		if (status_table[i].status == status)
			return status_table[i].text;
	return "Unknown error";
}

static uint16_t get16(const unsigned char *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)(v >> 8);
	p[1] = (unsigned char)v;
}

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

void bin_header_decode(const unsigned char *p, struct bin_header *h)
{
	h->magic = p[0];
	h->opcode = p[1];
	h->keylen = get16(p + 2);
	h->extlen = p[4];
	h->datatype = p[5];
	h->vbucket = get16(p + 6);
	h->bodylen = get32(p + 8);
	h->opaque = get32(p + 12);
	h->cas = (uint64_t)get32(p + 16) << 32 | get32(p + 20);
}

enum bin_verdict bin_parse_header(const unsigned char *p, struct bin_req *r,
				  uint16_t *status, const char **reason)
{
	const struct bin_opinfo *op;
	struct bin_header *h = &r->h;

	memset(r, 0, sizeof(*r));
	bin_header_decode(p, h);
	*status = BIN_STATUS_EINVAL;
	*reason = NULL;
	if (h->magic != BIN_MAGIC_REQ) {
		*reason = "bad magic";
		return BIN_CLOSE;
	}
	if ((uint64_t)h->extlen + h->keylen > h->bodylen) {
		*reason = "body shorter than its extras and key";
		return BIN_CLOSE;
	}
	op = bin_op(h->opcode);
	if (!op) {
		*status = BIN_STATUS_UNKNOWN_COMMAND;
		*reason = bin_status_text(*status);
		return BIN_REJECT;
	}
	r->op = op;
	r->vlen = h->bodylen - h->extlen - h->keylen;
	if (h->keylen > PROTO_KEY_MAX)
		*reason = "key too long";
	else if (h->extlen > 31 || !(op->ext_mask & BIN_EXT(h->extlen)))
		*reason = "bad extras length";
	else if (op->key == BIN_REQ && h->keylen == 0)
		*reason = "key required";
	else if (op->key == BIN_NONE && h->keylen != 0)
		*reason = "key not allowed";
	else if (op->value == BIN_NONE && r->vlen != 0)
		*reason = "value not allowed";
	else if (op->value == BIN_INLINE && r->vlen > BIN_INLINE_MAX)
		*reason = "value too long";
	if (*reason)
		return BIN_REJECT;
	r->need = (uint32_t)h->extlen + h->keylen;
	if (op->value == BIN_INLINE) {
		r->need += r->vlen;
		r->value_len = r->vlen;
		r->vlen = 0;
	}
	*status = BIN_STATUS_SUCCESS;
	return BIN_OK;
}

void bin_parse_body(struct bin_req *r, const unsigned char *p)
{
	const unsigned char *ext = p;

	r->key = (const char *)p + r->h.extlen;
	r->keylen = r->h.keylen;
	r->value = r->key + r->keylen; /* BIN_INLINE: the rest of need */
	switch (r->op->kind) {
	case BIN_K_SET:
	case BIN_K_ADD:
		r->flags = get32(ext);
		r->exptime = get32(ext + 4);
		break;
	case BIN_K_FLUSH:
		r->delay = r->h.extlen == 4 ? get32(ext) : 0;
		break;
	case BIN_K_VERBOSITY:
		r->verbosity = get32(ext);
		break;
	default:
		break;
	}
}

void bin_header_encode(unsigned char *p, uint8_t opcode, uint16_t status,
		       uint16_t keylen, uint8_t extlen, uint32_t bodylen,
		       uint32_t opaque, uint64_t cas)
{
	p[0] = BIN_MAGIC_RES;
	p[1] = opcode;
	put16(p + 2, keylen);
	p[4] = extlen;
	p[5] = 0; /* raw bytes */
	put16(p + 6, status);
	put32(p + 8, bodylen);
	put32(p + 12, opaque);
	put32(p + 16, (uint32_t)(cas >> 32));
	put32(p + 20, (uint32_t)cas);
}
