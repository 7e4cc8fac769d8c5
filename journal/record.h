/*
 * record.h: tern's on-disk journal format (private to journal/ and
 * tools/tern-journal.c).  The format is documented in docs/JOURNAL.md;
 * change both together and bump JREC_VERSION following the procedure there.
 *
 * A segment file starts with a JSEG_HDR_SIZE (4 KiB) header block so that
 * records start on a 4 KiB boundary, then holds records back to back, each
 * a fixed JREC_HDR_SIZE header + body, padded to 8 bytes.  All integers are
 * little-endian.  Every record carries the number of the segment it was
 * written into, so the stale records of a reused segment file never look
 * like live ones, and a CRC-32C (crc32c.h) of its header and body.
 */
#ifndef TERN_JOURNAL_RECORD_H
#define TERN_JOURNAL_RECORD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define JSEG_MAGIC "TERNJRNL"
#define JREC_VERSION 1
#define JSEG_HDR_SIZE 4096u /* header block; records start at this offset */
#define JSEG_HDR_USED 64u   /* meaningful bytes of the header block */
#define JREC_HDR_SIZE 56u
#define JREC_ALIGN 8u
#define JALIGN_BLOCK 4096u

/* Record types.  0 never occurs: a zero header is the end of the data. */
enum jrec_type {
	JREC_ADD = 1,     /* an item: id, flags, expiry, add time, body */
	JREC_REMOVE = 2,  /* item at aux left the queue for good */
	JREC_OPEN = 3,    /* item at aux handed out with /open */
	JREC_CONFIRM = 4, /* open item at aux confirmed: gone for good */
	JREC_ABORT = 5,   /* open item at aux went back to the head */
	JREC_FLUSH = 6,   /* every item recorded before this one is dead */
	JREC_PAD = 7,     /* filler up to a 4 KiB boundary; body is zeros */
	JREC_SEGEND = 8,  /* no records follow in this segment */
	JREC_TYPE_MAX = 8,
};

/* rflags bits */
#define JREC_F_MOVED 0x01 /* ADD re-appended by compaction; aux = old position */
#define JREC_F_DELAYED 0x02 /* ADD of a delayed item: add_ms is the wall-clock
			     * time at which it becomes visible */

/* The delivery count a record carries (bytes 6..7, zero in records written
 * before the field existed) saturates here. */
#define JREC_DELIVERIES_MAX UINT16_MAX

/* A position in a queue's journal: segment number and byte offset.  Ordered
 * like the journal itself, never 0 for a record (offsets start at 4096). */
#define JPOS(seg, off) (((uint64_t)(seg) << 32) | (uint64_t)(off))
#define JPOS_SEG(p) ((uint32_t)((p) >> 32))
#define JPOS_OFF(p) ((uint32_t)(p))

/* A decoded record header. */
struct jrec {
	uint32_t crc;
	uint8_t type;
	uint8_t rflags;
	uint16_t deliveries; /* OPEN, ABORT: the item's delivery count after
				this handout; ADD: its count so far (a MOVED
				copy), else 0 */
	uint32_t seg;
	uint32_t len;     /* body bytes that follow the header */
	uint64_t id;      /* item id (ADD, REMOVE, OPEN, CONFIRM, ABORT) */
	uint64_t aux;     /* position of the ADD record this one refers to */
	int64_t expiry_ms;
	int64_t add_ms;
	uint32_t iflags;  /* item flags (ADD) */
	uint32_t ilen;    /* item body length (ADD, REMOVE, CONFIRM) */
};

/* Bytes a record with a body of len bytes takes in a segment. */
static inline uint64_t jrec_size(uint32_t len)
{
	return ((uint64_t)JREC_HDR_SIZE + len + JREC_ALIGN - 1) & ~(uint64_t)(JREC_ALIGN - 1);
}

const char *jrec_type_name(int type);

/* An item's delivery count as a record carries it (saturated). */
static inline uint16_t jrec_deliveries(uint32_t n)
{
	return n > JREC_DELIVERIES_MAX ? JREC_DELIVERIES_MAX : (uint16_t)n;
}

/* Encodes r's header (without crc) into out[JREC_HDR_SIZE]. */
void jrec_encode(const struct jrec *r, unsigned char *out);
/* Computes the record checksum over hdr[4..56) and the body and stores it
 * at hdr[0..4). */
void jrec_seal(unsigned char *hdr, const void *body, uint32_t len);
/* Decodes a header (no validation). */
void jrec_decode(const unsigned char *in, struct jrec *r);
/* Checks the checksum of a record whose header and body are in memory. */
int jrec_crc_ok(const unsigned char *hdr, const void *body, uint32_t len);

/*
 * What each record does to a queue's items, for every reader that replays
 * records in journal order (recovery, tern-journal): jrec_replay calls the
 * hook for record r at position pos, so a new record type is taught to
 * every reader at once.  Each hook returns 0 or a negative code, which
 * jrec_replay returns; PAD and SEGEND records change nothing.
 */
struct jreplay {
	/* ADD: a new item (id r->id, r->ilen bytes) whose record is at pos */
	int (*add)(void *arg, uint64_t pos, const struct jrec *r);
	/* ADD with JREC_F_MOVED: compaction's copy of the item whose ADD is
	 * at r->aux, which is dead now; the item (held open or not) is at
	 * pos */
	int (*moved)(void *arg, uint64_t pos, const struct jrec *r);
	/* REMOVE or CONFIRM: the item whose ADD is at r->aux left for good */
	int (*gone)(void *arg, uint64_t pos, const struct jrec *r);
	/* OPEN: the item whose ADD is at r->aux is handed out */
	int (*open)(void *arg, uint64_t pos, const struct jrec *r);
	/* ABORT: the item whose ADD is at r->aux is back in the queue */
	int (*abort)(void *arg, uint64_t pos, const struct jrec *r);
	/* FLUSH: every item recorded before pos is dead */
	int (*flush)(void *arg, uint64_t pos, const struct jrec *r);
};
int jrec_replay(const struct jrec *r, uint64_t pos, const struct jreplay *h, void *arg);

/* Segment header flags (offset 44). */
#define JSEG_F_PREALLOC 0x01 /* the file was created at its full size
			      * (preallocate = zero or fallocate): shorter
			      * means truncated */

/* Fills out[JSEG_HDR_SIZE] with the header block of segment seg; prev is
 * the segment the journal wrote before it (0: none), flags JSEG_F_*. */
void jseg_header_encode(unsigned char *out, uint32_t seg, uint64_t seg_size,
			int64_t created_ms, uint32_t prev, uint32_t flags);
/* Validates a header block's first JSEG_HDR_USED bytes.  0 with *seg set,
 * TERN_EVERSION for a newer format, TERN_ECORRUPT otherwise. */
int jseg_header_decode(const unsigned char *in, uint32_t *seg, uint64_t *seg_size);
/* A valid header's previous segment and flags (0 in headers written before
 * the fields existed: unknown). */
void jseg_header_links(const unsigned char *in, uint32_t *prev, uint32_t *flags);

/*
 * Sequential reader of one segment file through a buffer (never mmap: it
 * keeps RSS bounded while a long backlog is read back).
 */
struct jreader {
	int fd;
	uint32_t seg;      /* segment number from the header */
	uint32_t prev;     /* the header's previous segment (0: unknown) */
	uint32_t flags;    /* the header's flags (JSEG_F_*) */
	uint64_t seg_size; /* the header's size */
	uint64_t fsize;    /* file size */
	uint64_t off;      /* offset of the next record */
	unsigned char *buf;
	size_t cap;
	uint64_t boff;     /* file offset of buf[0] */
	size_t blen;       /* valid bytes in buf */
	/* damage found by the last jreader_next() that returned JREAD_DAMAGE
	 * or JREAD_TORN */
	uint64_t dmg_off, dmg_len;
	int done;
	int hdr_empty;     /* the header block is zeros (JREADER_HDR_EMPTY) */
};

/*
 * What the reader makes of bytes that are not a valid record where one
 * should start (docs/JOURNAL.md, "What counts as the end, and what as
 * damage"):
 * - a torn write: pages that never reached the disk, the shape a power cut
 *   leaves of a write not yet synced: a whole 4 KiB page of the region
 *   reads as zeros (a preallocated or zero-filled file) or holds a valid
 *   record of an older segment (a reused file), or the region runs from a
 *   page boundary to its end as zeros or past the end of the file.
 *   Everything written after it in the segment was written after it, so
 *   was never synced either: the segment's records end there, and a
 *   reader never reads on past it (what survives is a prefix).  A header
 *   block of zeros over records is one too (the segment's first write).
 * - damage: anything else (a record whose bytes are all there but fail
 *   their check: a flipped bit).  The reader skips it and reads on, so
 *   every valid record after it is kept.
 */
enum jread_result {
	JREAD_END = 0,    /* clean end of the segment's data */
	JREAD_REC = 1,    /* *r and *body describe the record at *off */
	JREAD_DAMAGE = 2, /* [dmg_off, dmg_off+dmg_len) is damaged; the reader
			   * resynchronised after it (or reached the end) and the
			   * next call continues */
	JREAD_TORN = 3,   /* a torn write at dmg_off (dmg_len: up to the next
			   * valid record, or to the end of the data): the end
			   * of the segment's records; the next call returns
			   * JREAD_END */
};

/* Opens path and checks its header.  0, TERN_ESYS, TERN_ECORRUPT,
 * TERN_EVERSION, TERN_ENOMEM. */
int jreader_open(struct jreader *rd, const char *path);
/* As jreader_open on an already open fd (taken over). */
int jreader_open_fd(struct jreader *rd, int fd);
/*
 * Opens path as segment seg (the number in its file name).  A header block
 * that fails its check does not hide the records behind it: they carry
 * their segment number and checksum, so the reader goes on as segment seg
 * and returns JREADER_HDR_DAMAGED, or JREADER_HDR_EMPTY when the header is
 * all zeros (both > 0).  Otherwise 0; TERN_ESYS (errno:
 * cannot be opened or read, or not a regular file: EISDIR, EINVAL);
 * TERN_ECORRUPT when a valid header names another segment (a misplaced
 * file); TERN_EVERSION; TERN_ENOMEM.
 */
#define JREADER_HDR_DAMAGED 1
/* The same, for a header that is all zeros (or a file too short to hold
 * one): a segment created and not yet written when a crash came. */
#define JREADER_HDR_EMPTY 2
int jreader_open_as(struct jreader *rd, const char *path, uint32_t seg);
void jreader_close(struct jreader *rd);
/* Positions the reader at off (a record start). */
void jreader_seek(struct jreader *rd, uint64_t off);
/* Reads the next record: JREAD_REC (body valid until the next call),
 * JREAD_END, JREAD_DAMAGE, or a negative TERN_E* code on a read error. */
int jreader_next(struct jreader *rd, uint64_t *off, struct jrec *r,
		 const unsigned char **body);
/*
 * For a caller that keeps the bodies it reads (read-behind), large ones
 * without the copy out of the buffer: jreader_peek decodes the header of
 * the next record, unchecked, if one that fits the file and claims this
 * segment starts there (1; 0 otherwise).  jreader_body_into then reads
 * that record's body into dst (r->len bytes): what the buffer holds is
 * copied, the rest read straight into dst, and the next JREADER_AFTER
 * bytes after it into the buffer, in one call.  It returns JREAD_REC, and
 * moves past the record, when the record is whole and its checksum holds;
 * otherwise 0, and jreader_next reads the record as usual (and reports
 * the damage or the read error).
 */
#define JREADER_DIRECT (32u << 10) /* bodies read straight into the caller's memory from here on */
#define JREADER_AFTER 4096u        /* read after such a body: the next header, small records */
int jreader_peek(struct jreader *rd, uint64_t *off, struct jrec *r);
int jreader_body_into(struct jreader *rd, uint64_t off, const struct jrec *r,
		      unsigned char *dst);
/* Re-reads the file size (the writer may have grown it). */
int jreader_refresh(struct jreader *rd);

#endif
