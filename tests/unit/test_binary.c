/* test_binary.c: unit tests for protocol/binary.c (request headers and
 * bodies, response headers, the opcode and status tables).  Every opcode
 * of BIN_OPCODES is checked against its row: a frame of the shape it
 * takes passes, each way of breaking the shape is refused with the right
 * status. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../protocol/binary.h"

static unsigned char frame[BIN_HEADER_LEN + 512];
static struct bin_req req;
static uint16_t status;
static const char *why;

/* Builds a request header (and zeroed extras/key/value after it). */
static void mk(uint8_t magic, uint8_t op, uint16_t keylen, uint8_t extlen,
	       uint32_t bodylen, uint32_t opaque, uint64_t cas)
{
	memset(frame, 0, sizeof(frame));
	frame[0] = magic;
	frame[1] = op;
	frame[2] = (unsigned char)(keylen >> 8);
	frame[3] = (unsigned char)keylen;
	frame[4] = extlen;
	frame[8] = (unsigned char)(bodylen >> 24);
	frame[9] = (unsigned char)(bodylen >> 16);
	frame[10] = (unsigned char)(bodylen >> 8);
	frame[11] = (unsigned char)bodylen;
	frame[12] = (unsigned char)(opaque >> 24);
	frame[13] = (unsigned char)(opaque >> 16);
	frame[14] = (unsigned char)(opaque >> 8);
	frame[15] = (unsigned char)opaque;
	for (int i = 0; i < 8; i++)
		frame[16 + i] = (unsigned char)(cas >> (56 - 8 * i));
}

/* Checks the header now in frame from an exact-size heap copy. */
static enum bin_verdict check(void)
{
	unsigned char *p = malloc(BIN_HEADER_LEN);
	enum bin_verdict v;

	ck_assert_ptr_nonnull(p);
	memcpy(p, frame, BIN_HEADER_LEN);
	status = 0xffff;
	why = "unset";
	v = bin_parse_header(p, &req, &status, &why);
	free(p);
	return v;
}

START_TEST(opcode_table)
{
	static const struct {
		uint8_t code;
		const char *name;
		enum bin_kind kind;
		uint8_t quiet, withkey;
	} rows[] = {
#define ROW(e, code, k, ext, key, val, q, wk, ref) { code, #e, BIN_K_##k, q, wk },
		BIN_OPCODES(ROW)
#undef ROW
	};
	size_t i;
	int known = 0, op;

	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const struct bin_opinfo *o = bin_op(rows[i].code);

		ck_assert_ptr_nonnull(o);
		ck_assert_str_eq(o->name, rows[i].name);
		ck_assert_int_eq(o->kind, rows[i].kind);
		ck_assert_uint_eq(o->quiet, rows[i].quiet);
		ck_assert_uint_eq(o->withkey, rows[i].withkey);
		if (o->kind == BIN_K_REFUSED) {
			ck_assert_ptr_nonnull(proto_refusal(o->refused_as));
			ck_assert_str_eq(bin_refusal(o), proto_refusal(o->refused_as));
		} else {
			ck_assert_int_eq(o->refused_as, PROTO_CMD__COUNT);
		}
	}
	for (op = 0; op < 256; op++)
		known += bin_op((uint8_t)op) != NULL;
	ck_assert_int_eq(known, (int)(sizeof(rows) / sizeof(rows[0])));
	ck_assert_ptr_null(bin_op(0x1f));
	ck_assert_int_eq(bin_op(0x20)->kind, BIN_K_SASL_LIST);
	ck_assert_int_eq(bin_op(0x21)->kind, BIN_K_SASL_AUTH);
	ck_assert_int_eq(bin_op(0x22)->kind, BIN_K_SASL_STEP);
	ck_assert_ptr_null(bin_op(0x25));
	ck_assert_ptr_null(bin_op(0xff));
	ck_assert_str_eq(bin_refusal(NULL), "Not supported");
	/* the quiet twins */
	ck_assert_int_eq(bin_op(BIN_OP_GETQ)->kind, BIN_K_GET);
	ck_assert_int_eq(bin_op(BIN_OP_SETQ)->kind, BIN_K_SET);
	ck_assert_int_eq(bin_op(BIN_OP_ADDQ)->kind, BIN_K_ADD);
	ck_assert_int_eq(bin_op(BIN_OP_QUITQ)->kind, BIN_K_QUIT);
	ck_assert_str_eq(bin_refusal(bin_op(BIN_OP_APPENDQ)),
			 "append not supported: queued messages cannot be changed");
}
END_TEST

START_TEST(status_texts)
{
	ck_assert_str_eq(bin_status_text(BIN_STATUS_KEY_ENOENT), "Not found");
	ck_assert_str_eq(bin_status_text(BIN_STATUS_KEY_EEXISTS), "Data exists for key.");
	ck_assert_str_eq(bin_status_text(BIN_STATUS_E2BIG), "Too large.");
	ck_assert_str_eq(bin_status_text(BIN_STATUS_EINVAL), "Invalid arguments");
	ck_assert_str_eq(bin_status_text(BIN_STATUS_NOT_STORED), "Not stored.");
	ck_assert_str_eq(bin_status_text(BIN_STATUS_UNKNOWN_COMMAND), "Unknown command");
	ck_assert_str_eq(bin_status_text(BIN_STATUS_ENOMEM), "Out of memory");
	ck_assert_str_eq(bin_status_text(BIN_STATUS_NOT_SUPPORTED), "Not supported");
	ck_assert_str_eq(bin_status_text(BIN_STATUS_EINTERNAL), "Internal error");
	ck_assert_str_eq(bin_status_text(0x0042), "Unknown error");
	ck_assert_uint_eq(BIN_STATUS_UNKNOWN_COMMAND, 0x0081);
	ck_assert_uint_eq(BIN_STATUS_E2BIG, 0x0003);
	ck_assert_uint_eq(BIN_STATUS_EINVAL, 0x0004);
	ck_assert_uint_eq(BIN_STATUS_KEY_ENOENT, 0x0001);
}
END_TEST

START_TEST(header_roundtrip)
{
	unsigned char p[BIN_HEADER_LEN];
	struct bin_header h;

	bin_header_encode(p, 0x0c, 0x0081, 0x0102, 4, 0x01020304, 0xdeadbeef,
			  UINT64_C(0x0102030405060708));
	ck_assert_uint_eq(p[0], BIN_MAGIC_RES);
	ck_assert_uint_eq(p[5], 0);
	bin_header_decode(p, &h);
	ck_assert_uint_eq(h.magic, 0x81);
	ck_assert_uint_eq(h.opcode, 0x0c);
	ck_assert_uint_eq(h.keylen, 0x0102);
	ck_assert_uint_eq(h.extlen, 4);
	ck_assert_uint_eq(h.vbucket, 0x0081); /* the status, in a response */
	ck_assert_uint_eq(h.bodylen, 0x01020304);
	ck_assert_uint_eq(h.opaque, 0xdeadbeef);
	ck_assert(h.cas == UINT64_C(0x0102030405060708));
	/* big-endian on the wire */
	ck_assert_uint_eq(p[2], 0x01);
	ck_assert_uint_eq(p[3], 0x02);
	ck_assert_uint_eq(p[6], 0x00);
	ck_assert_uint_eq(p[7], 0x81);
	ck_assert_uint_eq(p[8], 0x01);
	ck_assert_uint_eq(p[11], 0x04);
	ck_assert_uint_eq(p[12], 0xde);
	ck_assert_uint_eq(p[16], 0x01);
	ck_assert_uint_eq(p[23], 0x08);
}
END_TEST

START_TEST(get_and_set)
{
	mk(0x80, BIN_OP_GET, 5, 0, 5, 7, 0);
	memcpy(frame + 24, "q/pek", 5);
	ck_assert_int_eq(check(), BIN_OK);
	ck_assert_uint_eq(status, BIN_STATUS_SUCCESS);
	ck_assert_uint_eq(req.need, 5);
	ck_assert_uint_eq(req.vlen, 0);
	ck_assert_uint_eq(req.h.opaque, 7);
	bin_parse_body(&req, frame + 24);
	ck_assert_uint_eq(req.keylen, 5);
	ck_assert(memcmp(req.key, "q/pek", 5) == 0);

	mk(0x80, BIN_OP_SETQ, 3, 8, 8 + 3 + 10, 1, 0);
	frame[24] = 0x01; frame[25] = 0x02; frame[26] = 0x03; frame[27] = 0x04; /* flags */
	frame[31] = 60;                                                        /* exptime */
	memcpy(frame + 32, "job", 3);
	ck_assert_int_eq(check(), BIN_OK);
	ck_assert_uint_eq(req.need, 11);
	ck_assert_uint_eq(req.vlen, 10);
	ck_assert(req.op->quiet);
	bin_parse_body(&req, frame + 24);
	ck_assert_uint_eq(req.flags, 0x01020304);
	ck_assert_uint_eq(req.exptime, 60);
	ck_assert(memcmp(req.key, "job", 3) == 0);

	/* an empty value is a value */
	mk(0x80, BIN_OP_SET, 1, 8, 9, 0, 0);
	ck_assert_int_eq(check(), BIN_OK);
	ck_assert_uint_eq(req.vlen, 0);
}
END_TEST

START_TEST(other_bodies)
{
	mk(0x80, BIN_OP_FLUSH, 0, 4, 4, 0, 0);
	frame[27] = 9;
	ck_assert_int_eq(check(), BIN_OK);
	bin_parse_body(&req, frame + 24);
	ck_assert_uint_eq(req.delay, 9);
	mk(0x80, BIN_OP_FLUSHQ, 0, 0, 0, 0, 0);
	ck_assert_int_eq(check(), BIN_OK);
	bin_parse_body(&req, frame + 24);
	ck_assert_uint_eq(req.delay, 0);
	mk(0x80, BIN_OP_VERBOSITY, 0, 4, 4, 0, 0);
	frame[27] = 2;
	ck_assert_int_eq(check(), BIN_OK);
	bin_parse_body(&req, frame + 24);
	ck_assert_uint_eq(req.verbosity, 2);
	mk(0x80, BIN_OP_STAT, 0, 0, 0, 0, 0);
	ck_assert_int_eq(check(), BIN_OK);
	mk(0x80, BIN_OP_STAT, 4, 0, 4, 0, 0);
	ck_assert_int_eq(check(), BIN_OK);
	mk(0x80, BIN_OP_INCREMENT, 1, 20, 21, 0, 0);
	ck_assert_int_eq(check(), BIN_OK);
	ck_assert_int_eq(req.op->kind, BIN_K_REFUSED);
	mk(0x80, BIN_OP_APPEND, 1, 0, 5, 0, 0);
	ck_assert_int_eq(check(), BIN_OK);
	ck_assert_uint_eq(req.vlen, 4);
}
END_TEST

/* Header rows: the frame's fields -> verdict, status, reason. */
struct hcase {
	const char *what;
	uint8_t magic, op;
	uint16_t keylen;
	uint8_t extlen;
	uint32_t bodylen;
	enum bin_verdict v;
	uint16_t status;
	const char *reason;
};

static const struct hcase hrows[] = {
	{ "response magic", 0x81, 0x00, 1, 0, 1, BIN_CLOSE, 0, "bad magic" },
	{ "text", 'g', 0x00, 1, 0, 1, BIN_CLOSE, 0, "bad magic" },
	{ "key past body", 0x80, 0x00, 5, 0, 4, BIN_CLOSE, 0, "body shorter than its extras and key" },
	{ "extras past body", 0x80, 0x01, 1, 8, 8, BIN_CLOSE, 0, "body shorter than its extras and key" },
	{ "max fields past body", 0x80, 0x01, 0xffff, 0xff, 0xffff, BIN_CLOSE, 0,
	  "body shorter than its extras and key" },
	{ "unknown opcode", 0x80, 0x55, 1, 0, 10, BIN_REJECT, 0x0081, "Unknown command" },
	{ "sasl list key", 0x80, 0x20, 1, 0, 1, BIN_REJECT, 0x0004, "key not allowed" },
	{ "sasl auth no key", 0x80, 0x21, 0, 0, 5, BIN_REJECT, 0x0004, "key required" },
	{ "sasl auth value 1025", 0x80, 0x21, 5, 0, 1030, BIN_REJECT, 0x0004, "value too long" },
	{ "key 251", 0x80, 0x00, 251, 0, 251, BIN_REJECT, 0x0004, "key too long" },
	{ "key 65535", 0x80, 0x01, 0xffff, 8, 0x10007, BIN_REJECT, 0x0004, "key too long" },
	{ "get extras", 0x80, 0x00, 1, 4, 5, BIN_REJECT, 0x0004, "bad extras length" },
	{ "get no key", 0x80, 0x00, 0, 0, 0, BIN_REJECT, 0x0004, "key required" },
	{ "get value", 0x80, 0x00, 1, 0, 2, BIN_REJECT, 0x0004, "value not allowed" },
	{ "getkq value", 0x80, 0x0d, 1, 0, 9, BIN_REJECT, 0x0004, "value not allowed" },
	{ "set extras 4", 0x80, 0x01, 1, 4, 6, BIN_REJECT, 0x0004, "bad extras length" },
	{ "set extras 0", 0x80, 0x01, 1, 0, 2, BIN_REJECT, 0x0004, "bad extras length" },
	{ "set no key", 0x80, 0x01, 0, 8, 9, BIN_REJECT, 0x0004, "key required" },
	{ "add no key", 0x80, 0x02, 0, 8, 8, BIN_REJECT, 0x0004, "key required" },
	{ "delete extras", 0x80, 0x04, 1, 4, 5, BIN_REJECT, 0x0004, "bad extras length" },
	{ "delete value", 0x80, 0x04, 1, 0, 3, BIN_REJECT, 0x0004, "value not allowed" },
	{ "noop key", 0x80, 0x0a, 1, 0, 1, BIN_REJECT, 0x0004, "key not allowed" },
	{ "noop value", 0x80, 0x0a, 0, 0, 1, BIN_REJECT, 0x0004, "value not allowed" },
	{ "version extras", 0x80, 0x0b, 0, 4, 4, BIN_REJECT, 0x0004, "bad extras length" },
	{ "quit key", 0x80, 0x07, 1, 0, 1, BIN_REJECT, 0x0004, "key not allowed" },
	{ "flush extras 8", 0x80, 0x08, 0, 8, 8, BIN_REJECT, 0x0004, "bad extras length" },
	{ "flush key", 0x80, 0x08, 1, 0, 1, BIN_REJECT, 0x0004, "key not allowed" },
	{ "stat value", 0x80, 0x10, 0, 0, 3, BIN_REJECT, 0x0004, "value not allowed" },
	{ "verbosity none", 0x80, 0x1b, 0, 0, 0, BIN_REJECT, 0x0004, "bad extras length" },
	{ "incr extras 8", 0x80, 0x05, 1, 8, 9, BIN_REJECT, 0x0004, "bad extras length" },
	{ "touch value", 0x80, 0x1c, 1, 4, 6, BIN_REJECT, 0x0004, "value not allowed" },
	{ "extras 255", 0x80, 0x01, 1, 255, 300, BIN_REJECT, 0x0004, "bad extras length" },
	{ "extras 32", 0x80, 0x01, 1, 32, 40, BIN_REJECT, 0x0004, "bad extras length" },
};

/* A SASL_AUTH's value is read with its key (BIN_INLINE): need covers it,
 * and bin_parse_body points at it. */
START_TEST(sasl_inline_value)
{
	static const unsigned char body[] = "PLAIN\0alice\0secret";
	unsigned char *p;

	mk(0x80, 0x21, 5, 0, 5 + 13, 1, 0);
	ck_assert_int_eq(check(), BIN_OK);
	ck_assert_uint_eq(req.need, 18);
	ck_assert_uint_eq(req.vlen, 0);
	ck_assert_uint_eq(req.value_len, 13);
	p = malloc(18);
	ck_assert_ptr_nonnull(p);
	memcpy(p, body, 18);
	bin_parse_body(&req, p);
	ck_assert_uint_eq(req.keylen, 5);
	ck_assert(memcmp(req.key, "PLAIN", 5) == 0);
	ck_assert(memcmp(req.value, "\0alice\0secret", 13) == 0);
	free(p);
	mk(0x80, 0x21, 5, 0, 5 + 1024, 1, 0);
	ck_assert_int_eq(check(), BIN_OK);
}
END_TEST

START_TEST(header_rows)
{
	const struct hcase *c = &hrows[_i];
	enum bin_verdict v;

	mk(c->magic, c->op, c->keylen, c->extlen, c->bodylen, 1, 0);
	v = check();
	ck_assert_msg(v == c->v, "%s: verdict %d, want %d", c->what, v, c->v);
	ck_assert_msg(why && strcmp(why, c->reason) == 0, "%s: reason '%s', want '%s'",
		      c->what, why ? why : "(null)", c->reason);
	if (v == BIN_REJECT)
		ck_assert_msg(status == c->status, "%s: status 0x%x, want 0x%x", c->what, status,
			      c->status);
	ck_assert_uint_eq(req.h.opaque, 1);
}
END_TEST

/* Every opcode: the shape its row describes passes; the key limit is
 * exactly PROTO_KEY_MAX. */
START_TEST(every_opcode_shape)
{
	int op;

	for (op = 0; op < 256; op++) {
		const struct bin_opinfo *o = bin_op((uint8_t)op);
		uint8_t ext = 0;
		uint16_t key;
		uint32_t val;

		if (!o)
			continue;
		while (!(o->ext_mask & BIN_EXT(ext)))
			ext++;
		key = o->key == BIN_REQ ? PROTO_KEY_MAX : 0;
		val = o->value == BIN_REQ ? 100 : 0;
		mk(0x80, (uint8_t)op, key, ext, ext + key + val, 3, 0);
		ck_assert_msg(check() == BIN_OK, "%s: %s", o->name, why ? why : "(null)");
		ck_assert_ptr_eq(req.op, o);
		ck_assert_uint_eq(req.need, ext + key);
		ck_assert_uint_eq(req.vlen, val);
		if (o->key == BIN_OPT) {
			mk(0x80, (uint8_t)op, 3, ext, ext + 3, 3, 0);
			ck_assert_int_eq(check(), BIN_OK);
		}
	}
}
END_TEST

Suite *binary_suite(void)
{
	Suite *s = suite_create("binary");
	TCase *tc = tcase_create("codec");

	tcase_add_test(tc, opcode_table);
	tcase_add_test(tc, status_texts);
	tcase_add_test(tc, header_roundtrip);
	tcase_add_test(tc, sasl_inline_value);
	tcase_add_test(tc, get_and_set);
	tcase_add_test(tc, other_bodies);
	tcase_add_loop_test(tc, header_rows, 0, (int)(sizeof(hrows) / sizeof(hrows[0])));
	tcase_add_test(tc, every_opcode_shape);
	suite_add_tcase(s, tc);
	return s;
}
