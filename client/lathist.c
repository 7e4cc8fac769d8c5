/* lathist.c: log-bucketed histogram; see lathist.h. */
#include "lathist.h"

#include <math.h>
#include <string.h>

void lathist_init(struct lathist *h)
{
	memset(h, 0, sizeof *h);
	h->min = UINT64_MAX;
}

unsigned lathist_index(uint64_t v)
{
	unsigned e;

	if (v < LATHIST_SUB)
		return (unsigned)v;
	e = 63u - (unsigned)__builtin_clzll(v); /* >= SUB_BITS */
	/* The top SUB_BITS+1 bits of v: a leading 1, then the sub-bucket. */
	return (e - LATHIST_SUB_BITS + 1) * LATHIST_SUB +
	       (unsigned)((v >> (e - LATHIST_SUB_BITS)) & (LATHIST_SUB - 1));
}

uint64_t lathist_bucket_high(unsigned i)
{
	unsigned e, sub;
	uint64_t lo, width;

	if (i < LATHIST_SUB)
		return i;
	e = i / LATHIST_SUB + LATHIST_SUB_BITS - 1;
	sub = i % LATHIST_SUB;
	width = 1ull << (e - LATHIST_SUB_BITS);
	lo = ((uint64_t)(LATHIST_SUB + sub)) << (e - LATHIST_SUB_BITS);
	return lo + (width - 1); /* for the top bucket this is UINT64_MAX */
}

void lathist_add(struct lathist *h, uint64_t v)
{
	h->b[lathist_index(v)]++;
	h->count++;
	h->sum += v;
	if (v < h->min)
		h->min = v;
	if (v > h->max)
		h->max = v;
}

void lathist_merge(struct lathist *dst, const struct lathist *src)
{
	for (unsigned i = 0; i < LATHIST_BUCKETS; i++)
		dst->b[i] += src->b[i];
	dst->count += src->count;
	dst->sum += src->sum;
	if (src->min < dst->min)
		dst->min = src->min;
	if (src->max > dst->max)
		dst->max = src->max;
}

uint64_t lathist_percentile(const struct lathist *h, double p)
{
	uint64_t rank, seen = 0;

	if (h->count == 0)
		return 0;
	if (p >= 100.0)
		return h->max;
	if (p <= 0.0)
		return h->min;
	rank = (uint64_t)ceil(p / 100.0 * (double)h->count);
	if (rank < 1)
		rank = 1;
	for (unsigned i = 0; i < LATHIST_BUCKETS; i++) {
		seen += h->b[i];
		if (seen >= rank) {
			uint64_t v = lathist_bucket_high(i);

			if (v > h->max)
				v = h->max;
			if (v < h->min)
				v = h->min;
			return v;
		}
	}
	return h->max;
}
