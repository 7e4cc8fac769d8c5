/*
 * qhist.c: a queue's recent history in a ring of slots (qhist.h).
 */
#include "qhist.h"
#include "../lib/tern.h"

#include <stdlib.h>
#include <string.h>

static uint32_t sat32(uint64_t v)
{
	return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

void qhist_init(struct qhist *h, uint64_t in, uint64_t out, uint64_t depth)
{
	memset(h, 0, sizeof(*h));
	h->in = in;
	h->out = out;
	h->depth = depth;
}

int qhist_sample(struct qhist *h, unsigned pos, uint64_t in, uint64_t out, uint64_t depth,
		 uint64_t *din, uint64_t *dout)
{
	struct qhist_slot now;
	int rc = 0;

	*din = in >= h->in ? in - h->in : 0;
	*dout = out >= h->out ? out - h->out : 0;
	now.in = sat32(*din);
	now.out = sat32(*dout);
	now.depth = sat32(depth);
	if (h->lost)
		h->lost--;
	if (!*din && !*dout && depth == h->depth)
		h->quiet++;
	else
		h->quiet = 0;
	if (!h->ring && h->quiet == 0) {
		/* the first change: every slot before it was quiet at the
		 * depth of the last sample */
		h->ring = tern_malloc(QHIST_SLOTS * sizeof(*h->ring));
		if (h->ring) {
			struct qhist_slot q = { 0, 0, sat32(h->depth) };

			for (unsigned i = 0; i < QHIST_SLOTS; i++)
				h->ring[i] = q;
		} else {
			h->lost = QHIST_SLOTS;
			rc = TERN_ENOMEM;
		}
	}
	if (h->ring) {
		h->ring[pos % QHIST_SLOTS] = now;
		/* a whole window without change: each slot is quiet at the
		 * depth now, which is what a queue without a ring reads as */
		if (h->quiet >= QHIST_SLOTS)
			qhist_free(h);
	}
	h->in = in;
	h->out = out;
	h->depth = depth;
	return rc;
}

void qhist_read(const struct qhist *h, unsigned pos, struct qhist_slot *out)
{
	struct qhist_slot q = { 0, 0, sat32(h->depth) };

	for (unsigned i = 0; i < QHIST_SLOTS; i++)
		out[i] = h->ring ? h->ring[(pos + 1 + i) % QHIST_SLOTS] : q;
}

void qhist_free(struct qhist *h)
{
	free(h->ring);
	h->ring = NULL;
}
