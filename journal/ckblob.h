/*
 * ckblob.h: the checkpoint blob the catalog stores for each queue: its
 * layout, and the check every reader makes before it trusts one.  jckpt.c
 * writes it; recovery, journal_delete's summary and tools/tern-journal.c
 * read it through ckblob_check.  docs/JOURNAL.md documents the format:
 * change both together.
 *
 * The blob is little-endian u64 words, version 2:
 *   magic, version, P (journal position covered), H (oldest position that
 *   may hold a live record), max_id, live_items, live_bytes, nD, nO, nM,
 *   D[nD] (dead ADD positions >= H), O[nO] (positions of open items),
 *   M[nM] (positions of live items whose ADD is a MOVED copy), and a last
 *   word holding the CRC-32C of every byte before it (upper 32 bits zero).
 *   Every later version must end so too: a reader checks that word before
 *   it trusts the version field, so a flipped bit anywhere, the version
 *   included, means "ignore the checkpoint", never "refuse the queue".
 *   Version 1 (still read): the same without nM, M and the checksum.
 */
#ifndef TERN_JOURNAL_CKBLOB_H
#define TERN_JOURNAL_CKBLOB_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_MAGIC 0x504b4354u /* "TCKP" */
#define CKPT_VERSION 2u
enum { CK_MAGIC, CK_VERSION, CK_P, CK_H, CK_MAXID, CK_LIVE, CK_BYTES, CK_ND,
       CK_NO, CK_NM, CK_WORDS };
#define CK_WORDS_V1 CK_NM

/* What ckblob_check found in a blob. */
enum ckpt_check {
	CKPT_OK = 0,   /* *v describes it */
	CKPT_BAD,      /* unreadable, truncated or failing its checksum: ignore it */
	CKPT_NEWER,    /* a valid checkpoint of a newer version: refuse */
};

/* A checked blob's fields; the arrays point into it (nM is 0 in version 1). */
struct ckpt_view {
	uint64_t version, P, H, max_id, live_items, live_bytes;
	uint64_t nd, no, nm;
	const unsigned char *d, *o, *m;
};

/* Checks blob p of len bytes (any thread): magic, the checksum (version 2
 * on), the version, the length its counts imply and H <= P.  Fills *v for
 * CKPT_OK, and v->version for CKPT_NEWER.  *why (if given) gets a short
 * reason for CKPT_BAD ("unreadable", "fails its checksum", "truncated"...). */
enum ckpt_check ckblob_check(const unsigned char *p, size_t len, struct ckpt_view *v,
			     const char **why);

/* The blob's words. */
static inline uint64_t rd64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static inline void wr64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

#endif
