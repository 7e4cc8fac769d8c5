/*
 * qhist.h: a queue's recent history, for the status page (statuspage.h):
 * how many items went in and out, and how deep the queue was, in each of
 * the last QHIST_SLOTS slots of QHIST_SLOT_MS.
 *
 * The registry samples every queue at the end of each slot (qreg_tick).
 * The ring of slots is allocated only while a queue changes: a queue that
 * changed nothing for a whole window frees it, because each of its slots
 * would read the same (nothing in or out, the depth it has now).  So a
 * server with thousands of idle queues keeps a ring only for the busy
 * ones.  Pure bookkeeping, no clock and no I/O: the caller says which
 * slot a sample fills.
 */
#ifndef TERN_QHIST_H
#define TERN_QHIST_H

#include <stdint.h>

#define QHIST_SLOTS 60
#define QHIST_SLOT_MS 10000

/* One slot: items added and handed out during it, and the depth at its
 * end (each saturates at UINT32_MAX). */
struct qhist_slot {
	uint32_t in, out, depth;
};

struct qhist {
	struct qhist_slot *ring; /* QHIST_SLOTS slots, indexed by the sample
				    number; NULL: every slot is quiet at
				    depth */
	uint64_t in, out, depth; /* the totals and the depth at the last
				    sample (or at qhist_init) */
	unsigned quiet;          /* samples in a row that changed nothing */
	unsigned lost;           /* samples until a slot that found no
				    memory for the ring (and reads as quiet)
				    leaves the window; 0: none in it */
};

/* Starts h from the queue's totals now (in: items ever added, out: items
 * ever handed out) and its depth: the slots before read as quiet at that
 * depth. */
void qhist_init(struct qhist *h, uint64_t in, uint64_t out, uint64_t depth);
/*
 * Records the slot that ends now at ring position pos (the sample number
 * modulo QHIST_SLOTS) from the totals and the depth now; *din and *dout
 * get what went in and out during the slot.  The totals never decrease.
 * Returns 0, or TERN_ENOMEM when the ring could not be allocated (the
 * slot then reads as quiet, and h->lost counts down the samples until it
 * leaves the window).
 */
int qhist_sample(struct qhist *h, unsigned pos, uint64_t in, uint64_t out, uint64_t depth,
		 uint64_t *din, uint64_t *dout);
/* Copies the slots into out[QHIST_SLOTS], oldest first, the newest (the
 * one recorded at position pos) last. */
void qhist_read(const struct qhist *h, unsigned pos, struct qhist_slot *out);
/* Frees h's ring. */
void qhist_free(struct qhist *h);

#endif
