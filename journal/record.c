/* record.c: journal record and segment-header codec, the sequential
 * segment reader used by recovery, read-behind and tern-journal, and what
 * each record type does when recovery or tern-journal replays it
 * (jrec_replay). */
#include "record.h"

#include "../lib/crc32c.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../lib/tern.h"
#include "jio.h"

#define JREADER_BUF (1u << 20)

/* Little-endian fields, written with memcpy so the compiler emits one
 * store each (the byte loops were most of jrec_encode's cost). */
static void put16(unsigned char *p, uint16_t v)
{
	v = htole16(v);
	memcpy(p, &v, 2);
}

static void put32(unsigned char *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static void put64(unsigned char *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

static uint32_t get32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

static uint64_t get64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return le64toh(v);
}

const char *jrec_type_name(int type)
{
	static const char *const names[] = {
		"ZERO", "ADD", "REMOVE", "OPEN", "CONFIRM", "ABORT", "FLUSH", "PAD", "SEGEND",
	};

	if (type < 0 || type > JREC_TYPE_MAX)
		return "UNKNOWN";
	return names[type];
}

int jrec_replay(const struct jrec *r, uint64_t pos, const struct jreplay *h, void *arg)
{
	switch (r->type) {
	case JREC_ADD:
		if (r->rflags & JREC_F_MOVED)
			return h->moved(arg, pos, r);
		return h->add(arg, pos, r);
	case JREC_REMOVE:
	case JREC_CONFIRM:
		return h->gone(arg, pos, r);
	case JREC_OPEN:
		return h->open(arg, pos, r);
	case JREC_ABORT:
		return h->abort(arg, pos, r);
	case JREC_FLUSH:
		return h->flush(arg, pos, r);
	default:
		return 0;
	}
}

void jrec_encode(const struct jrec *r, unsigned char *out)
{
	put32(out, 0);
	out[4] = r->type;
	out[5] = r->rflags;
	put16(out + 6, r->deliveries);
	put32(out + 8, r->seg);
	put32(out + 12, r->len);
	put64(out + 16, r->id);
	put64(out + 24, r->aux);
	put64(out + 32, (uint64_t)r->expiry_ms);
	put64(out + 40, (uint64_t)r->add_ms);
	put32(out + 48, r->iflags);
	put32(out + 52, r->ilen);
}

void jrec_decode(const unsigned char *in, struct jrec *r)
{
	r->crc = get32(in);
	r->type = in[4];
	r->rflags = in[5];
	r->deliveries = (uint16_t)(in[6] | in[7] << 8);
	r->seg = get32(in + 8);
	r->len = get32(in + 12);
	r->id = get64(in + 16);
	r->aux = get64(in + 24);
	r->expiry_ms = (int64_t)get64(in + 32);
	r->add_ms = (int64_t)get64(in + 40);
	r->iflags = get32(in + 48);
	r->ilen = get32(in + 52);
}

static uint32_t jrec_crc(const unsigned char *hdr, const void *body, uint32_t len)
{
	uint32_t c = crc32c(0, hdr + 4, JREC_HDR_SIZE - 4);

	if (len)
		c = crc32c(c, body, len);
	return c;
}

void jrec_seal(unsigned char *hdr, const void *body, uint32_t len)
{
	put32(hdr, jrec_crc(hdr, body, len));
}

int jrec_crc_ok(const unsigned char *hdr, const void *body, uint32_t len)
{
	return get32(hdr) == jrec_crc(hdr, body, len);
}

void jseg_header_encode(unsigned char *out, uint32_t seg, uint64_t seg_size,
			int64_t created_ms, uint32_t prev, uint32_t flags)
{
	memset(out, 0, JSEG_HDR_SIZE);
	memcpy(out, JSEG_MAGIC, 8);
	put32(out + 8, JREC_VERSION);
	put32(out + 12, JSEG_HDR_SIZE);
	put32(out + 16, seg);
	put32(out + 20, JREC_ALIGN);
	put64(out + 24, seg_size);
	put64(out + 32, (uint64_t)created_ms);
	put32(out + 40, prev);
	put32(out + 44, flags);
	put32(out + 60, crc32c(0, out, 60));
}

void jseg_header_links(const unsigned char *in, uint32_t *prev, uint32_t *flags)
{
	*prev = get32(in + 40);
	*flags = get32(in + 44);
}

int jseg_header_decode(const unsigned char *in, uint32_t *seg, uint64_t *seg_size)
{
	if (memcmp(in, JSEG_MAGIC, 8) != 0)
		return TERN_ECORRUPT;
	if (get32(in + 60) != crc32c(0, in, 60))
		return TERN_ECORRUPT;
	if (get32(in + 8) > JREC_VERSION)
		return TERN_EVERSION;
	if (get32(in + 8) < 1 || get32(in + 12) != JSEG_HDR_SIZE ||
	    get32(in + 20) != JREC_ALIGN)
		return TERN_ECORRUPT;
	*seg = get32(in + 16);
	if (seg_size)
		*seg_size = get64(in + 24);
	return 0;
}

int jreader_open(struct jreader *rd, const char *path)
{
	int fd = jio.openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);

	memset(rd, 0, sizeof(*rd));
	rd->fd = -1;
	if (fd < 0)
		return TERN_ESYS;
	return jreader_open_fd(rd, fd);
}

int jreader_open_as(struct jreader *rd, const char *path, uint32_t seg)
{
	int fd = jio.openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
	struct stat st;
	int rc;

	memset(rd, 0, sizeof(*rd));
	rd->fd = -1;
	if (fd < 0)
		return TERN_ESYS;
	if (fstat(fd, &st) < 0) {
		int e = errno;

		close(fd);
		errno = e;
		return TERN_ESYS;
	}
	/* a directory opens read-only, then fails every read: say so now */
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
		return TERN_ESYS;
	}
	rc = jreader_open_fd(rd, dup(fd));
	if (rc == 0 && rd->seg != seg) {
		jreader_close(rd);
		close(fd);
		return TERN_ECORRUPT;
	}
	if (rc != TERN_ECORRUPT) {
		close(fd);
		return rc;
	}
	/* The header block fails its check: its records still carry their
	 * segment number and checksum, so read them as segment seg. */
	memset(rd, 0, sizeof(*rd));
	rd->fd = fd;
	rc = jreader_refresh(rd);
	if (rc < 0) {
		jreader_close(rd);
		return rc;
	}
	rd->seg = seg;
	rd->off = JSEG_HDR_SIZE;
	{
		/* zeros (or nothing) where the header goes: a segment made
		 * and not yet written when the process died */
		unsigned char hdr[JSEG_HDR_USED];
		ssize_t n = jio.pread(fd, hdr, sizeof(hdr), 0);
		size_t i;

		for (i = 0; n > 0 && i < (size_t)n && !hdr[i]; i++)
			;
		if (n >= 0 && i == (size_t)(n > 0 ? n : 0)) {
			rd->hdr_empty = 1; /* (records after it: jreader_next) */
			return JREADER_HDR_EMPTY;
		}
	}
	return JREADER_HDR_DAMAGED;
}

int jreader_refresh(struct jreader *rd)
{
	struct stat st;

	if (fstat(rd->fd, &st) < 0)
		return TERN_ESYS;
	rd->fsize = (uint64_t)st.st_size;
	return 0;
}

int jreader_open_fd(struct jreader *rd, int fd)
{
	unsigned char hdr[JSEG_HDR_USED];
	ssize_t n;
	int rc;

	memset(rd, 0, sizeof(*rd));
	rd->fd = fd;
	rc = jreader_refresh(rd);
	if (rc < 0)
		goto fail;
	if (fd < 0) {
		rc = TERN_ESYS;
		goto fail;
	}
	n = jio.pread(fd, hdr, sizeof(hdr), 0);
	if (n < 0) {
		rc = TERN_ESYS;
		goto fail;
	}
	if ((size_t)n < sizeof(hdr)) {
		rc = TERN_ECORRUPT;
		goto fail;
	}
	rc = jseg_header_decode(hdr, &rd->seg, &rd->seg_size);
	if (rc < 0)
		goto fail;
	jseg_header_links(hdr, &rd->prev, &rd->flags);
	rd->off = JSEG_HDR_SIZE;
	return 0;
fail:
	{
		int e = errno;

		close(fd);
		rd->fd = -1;
		errno = e;
	}
	return rc;
}

void jreader_close(struct jreader *rd)
{
	if (rd->fd >= 0)
		close(rd->fd);
	free(rd->buf);
	memset(rd, 0, sizeof(*rd));
	rd->fd = -1;
}

void jreader_seek(struct jreader *rd, uint64_t off)
{
	rd->off = off;
	rd->done = 0;
}

/* Makes [off, off+n) available in the buffer (reads are clipped to fsize so
 * that a later, larger fsize never leaves stale bytes cached).  Returns a
 * pointer, NULL past the end (errno 0) or on a read error (errno set). */
static const unsigned char *jreader_get(struct jreader *rd, uint64_t off, size_t n)
{
	size_t want, got = 0;

	if (off + n > rd->fsize) {
		errno = 0;
		return NULL;
	}
	if (off >= rd->boff && off + n <= rd->boff + rd->blen)
		return rd->buf + (off - rd->boff);
	want = n > JREADER_BUF ? n : JREADER_BUF;
	if (want > rd->cap) {
		unsigned char *nb = realloc(rd->buf, want);

		if (!nb)
			return NULL;
		rd->buf = nb;
		rd->cap = want;
	}
	if (off + want > rd->fsize)
		want = (size_t)(rd->fsize - off);
	while (got < want) {
		ssize_t r = jio.pread(rd->fd, rd->buf + got, want - got, (off_t)(off + got));

		if (r < 0) {
			if (errno == EINTR)
				continue;
			rd->blen = 0;
			return NULL;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	rd->boff = off;
	rd->blen = got;
	if (got < n) {
		errno = 0;
		return NULL;
	}
	return rd->buf;
}

/* 1 with r decoded when the header at off claims this segment and a
 * record that fits the file (its checksum not checked). */
static int jreader_header_at(struct jreader *rd, uint64_t off, struct jrec *r)
{
	const unsigned char *h = jreader_get(rd, off, JREC_HDR_SIZE);

	if (!h)
		return 0;
	jrec_decode(h, r);
	return r->type >= 1 && r->type <= JREC_TYPE_MAX && r->seg == rd->seg &&
	       off + jrec_size(r->len) <= rd->fsize;
}

/* 1 when a complete, checksummed record of this segment starts at off. */
static int jreader_valid_at(struct jreader *rd, uint64_t off, struct jrec *r,
			    const unsigned char **hdrp)
{
	const unsigned char *h;

	if (!jreader_header_at(rd, off, r))
		return 0;
	h = jreader_get(rd, off, (size_t)jrec_size(r->len));
	if (!h || !jrec_crc_ok(h, h + JREC_HDR_SIZE, r->len))
		return 0;
	*hdrp = h;
	return 1;
}

int jreader_peek(struct jreader *rd, uint64_t *offp, struct jrec *r)
{
	if (rd->done || !jreader_header_at(rd, rd->off, r))
		return 0;
	*offp = rd->off;
	return 1;
}

int jreader_body_into(struct jreader *rd, uint64_t off, const struct jrec *r,
		      unsigned char *dst)
{
	unsigned char hdr[JREC_HDR_SIZE];
	const unsigned char *h = jreader_get(rd, off, JREC_HDR_SIZE);
	uint64_t body = off + JREC_HDR_SIZE, end = body + r->len;
	size_t have = 0;

	if (!h || end > rd->fsize)
		return 0;
	memcpy(hdr, h, sizeof(hdr)); /* the read below may reuse the buffer */
	if (body >= rd->boff && body < rd->boff + rd->blen) {
		have = (size_t)(rd->boff + rd->blen - body);
		if (have > r->len)
			have = r->len;
		memcpy(dst, rd->buf + (body - rd->boff), have);
	}
	if (have < r->len) {
		/* the rest of the body, then what follows it (clipped to
		 * fsize, as jreader_get reads) into the buffer, which
		 * jreader_get made at least JREADER_BUF bytes */
		uint64_t after = rd->fsize - end < JREADER_AFTER ? rd->fsize - end : JREADER_AFTER;
		struct iovec iov[2] = { { dst + have, r->len - have },
					{ rd->buf, (size_t)after } };
		ssize_t n = jio.preadv(rd->fd, iov, 2, (off_t)(body + have));

		if (n < (ssize_t)iov[0].iov_len)
			return 0; /* the buffer is as it was */
		rd->boff = end;
		rd->blen = (size_t)n - iov[0].iov_len;
	}
	if (!jrec_crc_ok(hdr, dst, r->len))
		return 0;
	rd->off = off + jrec_size(r->len);
	return JREAD_REC;
}

/* 1 when [from, to) of the file reads as zeros, or lies (in part) past
 * its end. */
static int jreader_zeros(struct jreader *rd, uint64_t from, uint64_t to)
{
	while (from < to) {
		size_t n = to - from > JALIGN_BLOCK ? JALIGN_BLOCK : (size_t)(to - from);
		const unsigned char *p;

		if (from + n > rd->fsize)
			return 1; /* (what is left of the file was checked) */
		p = jreader_get(rd, from, n);
		if (!p)
			return 0;
		for (size_t i = 0; i < n; i++)
			if (p[i])
				return 0;
		from += n;
	}
	return 1;
}

/* 1 when a record of an older segment starts in [from, to), part of a
 * page: the stale contents of a reused file, where a write of this
 * segment's never reached the disk.  A stale record that ends within the
 * page must pass its check; one that runs on past it (over the next page,
 * which may hold this segment's records) is taken on its header: a valid
 * type, an older segment's number, an id. */
static int jreader_stale(struct jreader *rd, uint64_t from, uint64_t to)
{
	/* (a stale header's type, segment, length and id are its first 24
	 * bytes: those lie in the page) */
	for (uint64_t q = from; q + 24 <= to; q += JREC_ALIGN) {
		const unsigned char *h = jreader_get(rd, q, JREC_HDR_SIZE);
		struct jrec x;

		if (!h)
			return 0;
		if (h[4] < 1 || h[4] > JREC_TYPE_MAX)
			continue;
		jrec_decode(h, &x);
		if (!x.seg || x.seg >= rd->seg || q + jrec_size(x.len) > rd->fsize)
			continue;
		if (q + jrec_size(x.len) > to) {
			if (x.id && x.type != JREC_PAD && x.type != JREC_SEGEND)
				return 1;
			continue;
		}
		h = jreader_get(rd, q, (size_t)jrec_size(x.len));
		if (h && jrec_crc_ok(h, h + JREC_HDR_SIZE, x.len))
			return 1;
	}
	return 0;
}

/* CRC-32C's polynomial, reflected (lib/crc32c.c's checksum). */
#define CRC32C_POLY 0x82F63B78u

/*
 * 1 when the record at hdr (header and body, len body bytes) fails its
 * check by exactly one flipped bit: in its CRC, its header or its body.
 * The CRC is linear: the check of the bytes as read, xor the stored one,
 * is what the flipped bit alone contributes, which for the bit k bits
 * before the end of the checked bytes is the polynomial stepped k times
 * through the CRC's shift register (no byte needs reading again).
 */
static int jrec_one_bit_off(const unsigned char *hdr, uint32_t len)
{
	uint32_t s = get32(hdr) ^ jrec_crc(hdr, hdr + JREC_HDR_SIZE, len), c = CRC32C_POLY;
	uint64_t bits = ((uint64_t)JREC_HDR_SIZE - 4 + len) * 8;

	if (s && !(s & (s - 1)))
		return 1; /* a bit of the stored CRC itself */
	for (uint64_t k = 0; k < bits; k++) {
		if (c == s)
			return 1;
		c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
	}
	return 0;
}

/* 1 when the record at off, with its header's field at fo (4 bytes) read
 * as v instead, is whole and passes its check. */
static int jreader_valid_with(struct jreader *rd, uint64_t off, size_t fo, uint32_t v)
{
	unsigned char hdr[JREC_HDR_SIZE];
	const unsigned char *h = jreader_get(rd, off, JREC_HDR_SIZE);
	struct jrec x;

	if (!h)
		return 0;
	memcpy(hdr, h, sizeof(hdr));
	put32(hdr + fo, v);
	jrec_decode(hdr, &x);
	if (x.type < 1 || x.type > JREC_TYPE_MAX || x.seg != rd->seg ||
	    off + jrec_size(x.len) > rd->fsize)
		return 0;
	h = jreader_get(rd, off, (size_t)jrec_size(x.len));
	return h && get32(hdr) == jrec_crc(hdr, h + JREC_HDR_SIZE, x.len);
}

/*
 * 1 when the bytes at off are a record of this segment with one bit
 * flipped: damage on the disk, not a torn write.  The flipped bit may
 * also be in the fields that say what the record is (its type, its
 * segment number, its length), which are tried one bit at a time.
 */
static int jreader_flipped(struct jreader *rd, uint64_t off)
{
	const unsigned char *h = jreader_get(rd, off, JREC_HDR_SIZE);
	uint32_t w4, w8, w12;
	struct jrec x;

	if (!h)
		return 0;
	jrec_decode(h, &x);
	w4 = get32(h + 4);
	w8 = get32(h + 8);
	w12 = get32(h + 12);
	if (x.type >= 1 && x.type <= JREC_TYPE_MAX && x.seg == rd->seg &&
	    off + jrec_size(x.len) <= rd->fsize) {
		h = jreader_get(rd, off, (size_t)jrec_size(x.len));
		if (h && jrec_one_bit_off(h, x.len))
			return 1;
	}
	for (int k = 0; k < 32; k++) {
		if ((k < 8 && jreader_valid_with(rd, off, 4, w4 ^ (1u << k))) ||
		    jreader_valid_with(rd, off, 8, w8 ^ (1u << k)) ||
		    jreader_valid_with(rd, off, 12, w12 ^ (1u << k)))
			return 1;
	}
	return 0;
}

/*
 * Whether [off, end), where records of this segment should be and are not,
 * is a torn write (enum jread_result).  A page whose last write never
 * reached the disk holds what it held before that write: the records
 * synced into it earlier, then zeros (a preallocated file) or stale bytes
 * (a reused one).  A page that reached the disk holds this segment's
 * records where they were written.  So, unless the bytes at off are a
 * record of this segment with one flipped bit (damage, whatever its
 * shape), the region is torn when:
 * - it starts with bytes that are no record of this segment up to a page
 *   boundary it reaches (the rest of a page that never reached the disk):
 *   zeros there only if what follows in the region is not zeros too (a
 *   record zeroed whole is damage);
 * - it holds a whole page of zeros or of an older segment's records;
 * - it starts with a record of this segment over a page boundary, a later
 *   page of which never reached the disk;
 * - (tail: nothing valid follows, end is where the record there would
 *   end) it runs from a page boundary on as zeros or past the end of the
 *   file.
 */
static int jreader_torn(struct jreader *rd, uint64_t off, uint64_t end, int tail)
{
	uint64_t b = (off + JALIGN_BLOCK - 1) & ~(uint64_t)(JALIGN_BLOCK - 1);
	uint64_t nb = (off / JALIGN_BLOCK + 1) * JALIGN_BLOCK; /* the next boundary */
	const unsigned char *h;
	struct jrec x = { 0 };
	int claims = 0;

	h = jreader_get(rd, off, JREC_HDR_SIZE);
	if (h) {
		jrec_decode(h, &x);
		claims = x.type >= 1 && x.type <= JREC_TYPE_MAX && x.seg == rd->seg &&
			 off + jrec_size(x.len) <= rd->fsize;
	}
	/* A record of this segment that runs into a page holding zeros from
	 * the boundary to the record's end: that page never reached the disk.
	 * This comes before the test for a flipped bit, which the record
	 * would pass when it held zeros there but for one bit. */
	if (claims && nb < off + JREC_HDR_SIZE + x.len &&
	    jreader_zeros(rd, nb, off + JREC_HDR_SIZE + x.len))
		return 1;
	if (jreader_flipped(rd, off))
		return 0;
	if (tail && end > rd->fsize)
		return 1; /* a growing file cut short */
	/* the rest of the page the region starts in */
	if (nb <= end || tail) {
		uint64_t e1 = nb < end ? nb : end;

		if (jreader_zeros(rd, off, e1)) {
			if (tail || nb >= end || !jreader_zeros(rd, nb, end))
				return 1;
		} else if (!claims || jreader_stale(rd, off, nb)) {
			return 1;
		}
	}
	/* a record of this segment over a page boundary, more than a bit off */
	if (claims && off / JALIGN_BLOCK != (off + JREC_HDR_SIZE + x.len - 1) / JALIGN_BLOCK)
		return 1;
	for (; b < end; b += JALIGN_BLOCK) {
		uint64_t stop = b + JALIGN_BLOCK;

		if (stop > end) {
			if (!tail)
				break; /* (shared with the valid record after it) */
			stop = end;
		}
		if (jreader_zeros(rd, b, stop))
			return 1;
		if (jreader_stale(rd, b, stop))
			return 1;
	}
	return 0;
}

static int jreader_next_rec(struct jreader *rd, uint64_t *offp, struct jrec *r,
			    const unsigned char **body);

int jreader_next(struct jreader *rd, uint64_t *offp, struct jrec *r,
		 const unsigned char **body)
{
	int rc = jreader_next_rec(rd, offp, r, body);

	if (rd->hdr_empty && rc != JREAD_END && rc >= 0) {
		/* A header block of zeros with records of this segment after
		 * it: the segment's first write (its header and first records)
		 * reached the disk only in part: torn, and nothing in it
		 * counts.  Without records, a segment made and never
		 * written: the end. */
		rd->done = 1;
		rd->dmg_off = 0;
		rd->dmg_len = JSEG_HDR_SIZE;
		return JREAD_TORN;
	}
	return rc;
}

static int jreader_next_rec(struct jreader *rd, uint64_t *offp, struct jrec *r,
			    const unsigned char **body)
{
	const unsigned char *h;
	struct jrec bad;
	uint64_t off = rd->off, p;

	if (rd->done || off >= rd->fsize)
		return JREAD_END;
	if (off + JREC_HDR_SIZE > rd->fsize) {
		/* Less than a header before the end of the file: a record torn
		 * by truncation (a growing file cut short) when what is left
		 * claims this segment; otherwise the end of the data. */
		size_t left = (size_t)(rd->fsize - off);

		rd->done = 1;
		h = jreader_get(rd, off, left);
		if (h && left >= 12 && h[4] >= 1 && h[4] <= JREC_TYPE_MAX &&
		    get32(h + 8) == rd->seg) {
			rd->dmg_off = off;
			rd->dmg_len = left;
			return JREAD_TORN;
		}
		return JREAD_END;
	}
	if (jreader_valid_at(rd, off, r, &h)) {
		*offp = off;
		*body = h + JREC_HDR_SIZE;
		rd->off = off + jrec_size(r->len);
		if (r->type == JREC_SEGEND) {
			rd->done = 1;
			return JREAD_END;
		}
		return JREAD_REC;
	}
	h = jreader_get(rd, off, JREC_HDR_SIZE);
	if (!h)
		return errno ? TERN_ESYS : JREAD_END;
	jrec_decode(h, &bad);
	/* Not a record: the end of the data, or damage.  Look for a later
	 * valid record of this segment: if there is one, what lies between is
	 * damage (a zeroed or corrupt record) and the scan continues there. */
	for (p = off + JREC_ALIGN; p + JREC_HDR_SIZE <= rd->fsize; p += JREC_ALIGN) {
		const unsigned char *q = jreader_get(rd, p, JREC_HDR_SIZE);

		if (!q)
			break;
		/* cheap filter before the checksum */
		if (q[4] < 1 || q[4] > JREC_TYPE_MAX || q[8] != (unsigned char)rd->seg)
			continue;
		if (jreader_valid_at(rd, p, r, &h)) {
			rd->dmg_off = off;
			rd->dmg_len = p - off;
			if (jreader_torn(rd, off, p, 0)) {
				rd->done = 1;
				return JREAD_TORN;
			}
			rd->off = p;
			return JREAD_DAMAGE;
		}
	}
	rd->done = 1;
	/* Nothing valid follows.  A header that claims this segment is a torn
	 * or damaged last record; zeros or another segment's number is where
	 * the data ends (a fresh or reused segment). */
	if (bad.seg == rd->seg && bad.type != 0) {
		uint64_t claim = jrec_size(bad.len);

		rd->dmg_off = off;
		rd->dmg_len = off + claim <= rd->fsize ? claim : rd->fsize - off;
		/* (a body's tail: the padding after it is not checksummed) */
		return jreader_torn(rd, off, off + JREC_HDR_SIZE + bad.len, 1) ? JREAD_TORN
										  : JREAD_DAMAGE;
	}
	return JREAD_END;
}
