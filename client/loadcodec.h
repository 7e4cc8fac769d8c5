/*
 * loadcodec.h: tern-load's self-verifying message bodies and the checker
 * that turns what the consumers read into error counts.
 *
 * Body layout (little-endian, LOADCODEC_HDR = 24 bytes, then filler):
 *   0  u32 magic "tLd1"
 *   4  u32 queue index
 *   8  u32 producer id (within the queue)
 *  12  u32 CRC-32C (lib/crc32c.c) of every byte of the body except these four
 *  16  u64 sequence number (per producer, from 0)
 *  24  filler: a fixed pseudo-random printable pattern, started at an offset
 *      derived from (queue, producer, seq), to the body's size
 * The size of each body is itself derived from (queue, producer, seq) when a
 * size range is used, so a truncated or padded body is caught too.
 *
 * The checker (struct lcheck) knows, per queue and producer, which sequence
 * numbers were acknowledged as stored and which were read.  It tells apart:
 *   corrupt   - bad magic/crc/size, or a header naming another queue or an
 *               impossible producer/sequence;
 *   duplicate - a sequence read a second time;
 *   reordered - within one consumer connection's stream, a producer's
 *               sequence lower than the last one read from that producer
 *               (a FIFO queue keeps each producer's order in every
 *               consumer's subsequence; order across consumers is not judged);
 *   lost      - stored but never read by the end of the run.
 * Bitmaps are allocated lazily in chunks, at most once per 256 Ki messages of
 * a producer, and are updated with atomics so consumers on several threads
 * may share a queue.
 */
#ifndef TERN_LOADCODEC_H
#define TERN_LOADCODEC_H

#include <stddef.h>
#include <stdint.h>

#define LOADCODEC_HDR 24
#define LOADCODEC_MAGIC 0x31644c74u /* "tLd1" read little-endian */

/* Decode results. */
enum {
	LOADCODEC_OK = 0,
	LOADCODEC_ESHORT = -1, /* shorter than the header */
	LOADCODEC_EMAGIC = -2, /* not a tern-load body */
	LOADCODEC_ECRC = -3,   /* content does not match its checksum */
};

struct loadcodec_hdr {
	uint32_t queue, producer;
	uint64_t seq;
};

/* Size of the body for (queue, producer, seq) with sizes in [min, max]
 * (min == max gives min).  Deterministic so the reader can check it. */
size_t loadcodec_size(uint32_t queue, uint32_t producer, uint64_t seq,
		      size_t min, size_t max);
/* Writes a body of len >= LOADCODEC_HDR bytes into dst. */
void loadcodec_encode(char *dst, size_t len, uint32_t queue, uint32_t producer,
		      uint64_t seq);
/* Checks magic and checksum of body[0..len) and fills *h.  Returns
 * LOADCODEC_OK or one of the negative codes above. */
int loadcodec_decode(const char *body, size_t len, struct loadcodec_hdr *h);
/* The filler for bodies written without verification (any length). */
void loadcodec_fill(char *dst, size_t len, uint64_t start);

/* ---- checker -------------------------------------------------------------- */

struct lcheck;

/* Error kinds the checker counts. */
struct lcheck_counts {
	uint64_t read;      /* values handed to lcheck_read */
	uint64_t corrupt, duplicate, reordered, lost;
};

/* nqueues queues, at most max_producers producers each (producer ids beyond
 * that are counted as corrupt).  Returns NULL when out of memory. */
struct lcheck *lcheck_new(unsigned nqueues, unsigned max_producers);
void lcheck_free(struct lcheck *c);

/* A producer's message was acknowledged (stored).  Thread-safe. */
int lcheck_stored(struct lcheck *c, unsigned queue, unsigned producer, uint64_t seq);

/* Per-consumer-stream state for reorder detection: last sequence per
 * producer.  One per consumer connection and queue. */
struct lcheck_stream;
struct lcheck_stream *lcheck_stream_new(unsigned max_producers);
void lcheck_stream_free(struct lcheck_stream *s);

/* Outcomes of lcheck_read (also added to the queue's counters). */
enum lcheck_outcome {
	LCHECK_OK = 0,
	LCHECK_CORRUPT,
	LCHECK_DUPLICATE,
	LCHECK_REORDERED,
};

/* Judges one body read from queue by the consumer whose stream is s (s may
 * be NULL: no reorder check).  size_min/max: the run's size range (0, 0 to
 * skip the size check).  Thread-safe across streams. */
enum lcheck_outcome lcheck_read(struct lcheck *c, struct lcheck_stream *s,
				unsigned queue, const char *body, size_t len,
				size_t size_min, size_t size_max);

/*
 * Counts lost messages of a queue and returns its counts.  Call once all
 * readers are done.  expected_per_producer: when non-NULL, an array of
 * max_producers counts: seqs [0, n) of producer p are expected even if
 * lcheck_stored was never called (a consume-only run); otherwise the stored
 * bitmap is what is expected.
 */
void lcheck_finish(struct lcheck *c, unsigned queue,
		   const uint64_t *expected_per_producer, struct lcheck_counts *out);

#endif
