/*
 * lathist.h: a log-bucketed latency histogram (HdrHistogram-like, fixed
 * size, no allocation).  Values are unsigned 64-bit (tern-load records
 * nanoseconds).  Each power of two is split into LATHIST_SUB linear
 * sub-buckets, so a reported percentile is within 1/LATHIST_SUB (~3%) of the
 * true value; values below LATHIST_SUB are exact.
 *
 * One histogram per thread and kind, merged at the end: lathist_add() is a
 * few instructions and touches one counter.
 */
#ifndef TERN_LATHIST_H
#define TERN_LATHIST_H

#include <stdint.h>

#define LATHIST_SUB_BITS 5
#define LATHIST_SUB (1u << LATHIST_SUB_BITS)
/* Values < SUB map to themselves; each exponent e >= SUB_BITS adds SUB
 * buckets: 32 + (64 - 5) * 32. */
#define LATHIST_BUCKETS (LATHIST_SUB + (64 - LATHIST_SUB_BITS) * LATHIST_SUB)

struct lathist {
	uint64_t count, sum, min, max;
	uint64_t b[LATHIST_BUCKETS];
};

void lathist_init(struct lathist *h);
/* Records one value. */
void lathist_add(struct lathist *h, uint64_t v);
/* Adds every count of src into dst. */
void lathist_merge(struct lathist *dst, const struct lathist *src);
/* The value at percentile p (0..100): the upper bound of the bucket holding
 * the ceil(p% * count)-th smallest value, clamped to [min, max].  p >= 100
 * gives max exactly.  0 when empty. */
uint64_t lathist_percentile(const struct lathist *h, double p);

/* Bucket of v, and the largest value that falls in bucket i. */
unsigned lathist_index(uint64_t v);
uint64_t lathist_bucket_high(unsigned i);

#endif
