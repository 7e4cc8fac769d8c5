/*
 * ckblob.c: the check of a checkpoint blob (ckblob.h), which recovery and
 * tern-journal make before they trust one.
 */
#include "ckblob.h"

#include "../lib/crc32c.h"

enum ckpt_check ckblob_check(const unsigned char *p, size_t len, struct ckpt_view *v,
			     const char **why)
{
	uint64_t words, hdr;
	const char *dummy;

	if (!why)
		why = &dummy;
	if (len < CK_WORDS_V1 * 8 || len % 8 || rd64(p + 8 * CK_MAGIC) != CKPT_MAGIC) {
		*why = "unreadable";
		return CKPT_BAD;
	}
	v->version = rd64(p + 8 * CK_VERSION);
	if (v->version >= 2) {
		uint64_t c = rd64(p + len - 8);

		if (len < (CK_WORDS + 1) * 8 || c >> 32 || (uint32_t)c != crc32c(0, p, len - 8)) {
			*why = "fails its checksum";
			return CKPT_BAD;
		}
		if (v->version > CKPT_VERSION)
			return CKPT_NEWER;
		len -= 8;
		hdr = CK_WORDS;
		v->nm = rd64(p + 8 * CK_NM);
	} else if (v->version == 1) {
		hdr = CK_WORDS_V1;
		v->nm = 0;
	} else {
		*why = "of an unknown version";
		return CKPT_BAD;
	}
	/* (a version 1 blob has no checksum: its counts must at least agree
	 * with its length, and its positions with each other) */
	v->nd = rd64(p + 8 * CK_ND);
	v->no = rd64(p + 8 * CK_NO);
	words = len / 8;
	if (v->nd > words || v->no > words || v->nm > words ||
	    hdr + v->nd + v->no + v->nm != words) {
		*why = "truncated";
		return CKPT_BAD;
	}
	v->P = rd64(p + 8 * CK_P);
	v->H = rd64(p + 8 * CK_H);
	if (v->H > v->P) {
		*why = "inconsistent";
		return CKPT_BAD;
	}
	v->max_id = rd64(p + 8 * CK_MAXID);
	v->live_items = rd64(p + 8 * CK_LIVE);
	v->live_bytes = rd64(p + 8 * CK_BYTES);
	v->d = p + 8 * hdr;
	v->o = v->d + 8 * v->nd;
	v->m = v->o + 8 * v->no;
	return CKPT_OK;
}
