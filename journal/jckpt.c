/*
 * jckpt.c: checkpoints and compaction, on the loop thread.
 *
 * A checkpoint records where the journal stands (P: the position it
 * covers; H: the oldest position that may hold a live record; the dead and
 * open positions in between; the counts), so recovery replays only what
 * follows P.  The loop builds it and attaches it to the journal's batch;
 * the writer commits it to LMDB only after the records it covers are on
 * disk (through the syncer, see jgroup.c), and then the segments wholly
 * before H are freed: reused as the spare or unlinked.  Taken every
 * checkpoint_interval_ms when something changed, at open and at close.
 */
#include "jpriv.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/crc32c.h"
#include "../lib/log.h"

#define RELOC_MAX_ITEMS 64 /* move at most this many items to free a segment */
#define RELOC_MAX_SHARE 4  /* ... holding at most 1/4 of its bytes */

/* The index entry of the lowest id from k on whose ADD is in segment s
 * (not unordered), NULL when there is none up to s->klast.  Compaction's
 * copies are not among them: their ids are older than the records around
 * them, so they are found through the set of flagged ids (moved_min). */
static struct jent *seg_from(struct journal *j, const struct jseg *s, uint64_t k)
{
	for (; k && k <= s->klast; k++) {
		struct jent *e = jmap_get(&j->loop.idx, k);

		if (e && JPOS_SEG(e->pos) == s->num && !(e->flags & JENT_MOVED))
			return e;
	}
	return NULL;
}

/* seg_from(s->kcur), and kcur moves up to it.  Each id is looked at about
 * once over the segment's life: the ids below kcur have left s for good,
 * but for items read back from the journal, which move kcur down again
 * (jseg_note_index). */
static struct jent *seg_first(struct journal *j, struct jseg *s)
{
	struct jent *e = seg_from(j, s, s->kcur);

	s->kcur = e ? e->key : s->klast + 1;
	return e;
}

/* Refills the set of flagged ids from a walk of the index, after an
 * insert into it failed.  0, or -1 without memory (still lost). */
static int flagged_refill(struct journal *j)
{
	const struct jent *e;

	jmap_clear(&j->loop.flagged);
	for (size_t i = 0; (e = jmap_next(&j->loop.idx, &i));)
		if (e->flags && !jmap_put(&j->loop.flagged, e->key))
			return -1;
	j->loop.flagged_lost = 0;
	return 0;
}

/* The set of flagged ids is whole (refilled if an insert into it had
 * failed): 0, or -1 without memory. */
static int flagged_whole(struct journal *j)
{
	return j->loop.flagged_lost ? flagged_refill(j) : 0;
}

/* The index entry of the flagged set's next id from *i on that is a
 * MOVED copy (JENT_MOVED), NULL after the last; as jmap_next. */
static struct jent *moved_next(struct journal *j, size_t *i)
{
	const struct jent *k;

	while ((k = jmap_next(&j->loop.flagged, i))) {
		struct jent *e = jmap_get(&j->loop.idx, k->key);

		if (e->flags & JENT_MOVED)
			return e;
	}
	return NULL;
}

/* The lowest position of a MOVED copy, UINT64_MAX for none (the set of
 * flagged ids whole: flagged_whole). */
static uint64_t moved_min(struct journal *j)
{
	uint64_t m = UINT64_MAX;
	const struct jent *e;

	for (size_t i = 0; (e = moved_next(j, &i));)
		if (e->pos < m)
			m = e->pos;
	return m;
}

/* Adds index entry e to seg_entries' lists: -1 when they are full or its
 * record is not written yet. */
static int ent_take(struct journal *j, const struct jent *e, uint64_t *pos, uint64_t *ids,
		    size_t max, size_t *n, uint64_t *bytes)
{
	if (*n == max || e->pos >= j->loop.written_pos)
		return -1;
	pos[*n] = e->pos;
	ids[(*n)++] = e->key;
	*bytes += jrec_size(e->len);
	return 0;
}

/* Collects the index entries whose ADD is in segment s: up to max of them
 * into pos[] and ids[], *n their count, *bytes their records' size.  -1
 * when there are more than max, or one not written yet. */
static int seg_entries(struct journal *j, struct jseg *s, uint64_t *pos, uint64_t *ids,
		       size_t max, size_t *n, uint64_t *bytes)
{
	struct jent *e;

	*n = 0;
	*bytes = 0;
	if (!s->unordered && flagged_whole(j) == 0) {
		for (e = seg_first(j, s); e; e = seg_from(j, s, e->key + 1))
			if (ent_take(j, e, pos, ids, max, n, bytes) < 0)
				return -1;
		for (size_t i = 0; (e = moved_next(j, &i));)
			if (JPOS_SEG(e->pos) == s->num &&
			    ent_take(j, e, pos, ids, max, n, bytes) < 0)
				return -1;
		return 0;
	}
	j->loop.index_walks++;
	for (size_t i = 0; (e = jmap_next(&j->loop.idx, &i));)
		if (JPOS_SEG(e->pos) == s->num && ent_take(j, e, pos, ids, max, n, bytes) < 0)
			return -1;
	return 0;
}

/*
 * Compaction: moves the few live items that pin the oldest segment to the
 * tail (MOVED ADD records), so the segment can be freed; without it one
 * long-open item would keep every later segment on disk (Kestrel's and
 * beanstalkd's journals grew without bound so).  Only segments two or more
 * behind the tail, not holding the read-behind backlog, and with at most
 * RELOC_MAX_ITEMS live items, all written already, whose records take at
 * most 1/RELOC_MAX_SHARE of the segment: a segment mostly live is backlog
 * that the head will reach, such as a young queue's small first segments,
 * and copying it would cost as many bytes as it frees.  Returns 1 when it
 * may have moved items (their positions changed).
 */
static int relocate(struct journal *j, uint32_t oldest)
{
	uint64_t cand[RELOC_MAX_ITEMS], ids[RELOC_MAX_ITEMS], live = 0;
	struct jseg *seg = jseg_find(j, oldest);
	size_t n = 0;
	int fd = -1;
	char *p;

	if (!seg || oldest + 1 >= j->loop.wseg)
		return 0;
	if (j->loop.behind_items && JPOS_SEG(j->loop.rb_pos) <= oldest)
		return 0;
	/* The copies go only into a segment the writer has written already,
	 * without a roll: a new segment could be given up for want of room
	 * (w_abandon), and with it the copies, after the checkpoint that
	 * marked the originals dead had freed their segment. */
	if (JPOS_SEG(j->loop.written_pos) != j->loop.wseg ||
	    JPOS_OFF(j->loop.written_pos) <= JSEG_HDR_SIZE)
		return 0;
	if (seg_entries(j, seg, cand, ids, RELOC_MAX_ITEMS, &n, &live) < 0)
		return 0;
	if (!n || live > seg->size / RELOC_MAX_SHARE)
		return 0;
	p = jseg_path(j, oldest);
	if (p)
		fd = open(p, O_RDONLY | O_CLOEXEC);
	free(p);
	if (fd < 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char h[JREC_HDR_SIZE];
		struct jrec r;
		struct item *it;
		struct jent *e;
		uint64_t npos;

		if (pread(fd, h, sizeof(h), JPOS_OFF(cand[i])) != (ssize_t)sizeof(h))
			break;
		jrec_decode(h, &r);
		if (r.type != JREC_ADD || r.id != ids[i])
			break;
		it = item_new(r.len);
		if (!it)
			break;
		if (pread(fd, it->data, r.len, JPOS_OFF(cand[i]) + JREC_HDR_SIZE) != (ssize_t)r.len ||
		    !jrec_crc_ok(h, it->data, r.len) ||
		    j->loop.woff + jrec_size(r.len) + j->loop.reserve + SEGEND_SIZE >
			    j->loop.wseg_size ||
		    jdead_put(&j->loop.dead, cand[i]) < 0) {
			item_unref(it);
			break;
		}
		r.rflags |= JREC_F_MOVED;
		r.aux = cand[i];
		e = jmap_get(&j->loop.idx, ids[i]);
		if (e && e->deliveries > r.deliveries)
			r.deliveries = e->deliveries; /* the copy keeps the count */
		if (jb_append(j, &r, it, &npos) < 0) {
			jdead_del(&j->loop.dead, cand[i]);
			item_unref(it);
			break;
		}
		j->loop.cur->relocated = 1; /* its checkpoint waits for a sync */
		item_unref(it);
		/* (not among the segment's ids: seg_from) */
		e = jmap_get(&j->loop.idx, ids[i]);
		if (e) {
			e->pos = npos;
			jent_flags_set(j, e, e->flags | JENT_MOVED);
		}
	}
	close(fd);
	return 1;
}

/* The lowest ADD position of the index's entries (UINT64_MAX for none),
 * by a walk: each is loop time that grows with the items held. */
static uint64_t idx_walk(struct journal *j)
{
	uint64_t m = UINT64_MAX;
	const struct jent *e;

	for (size_t i = 0; (e = jmap_next(&j->loop.idx, &i));)
		if (e->pos < m)
			m = e->pos;
	return m;
}

#ifdef TERN_INDEX_CHECK
/* The set of flagged ids holds exactly the index's entries with a flag. */
static void flagged_check(struct journal *j)
{
	const struct jmap *f = &j->loop.flagged;
	const struct jent *e, *k;
	size_t nf = 0, bad = 0;

	if (j->loop.flagged_lost)
		return;
	for (size_t i = 0; (e = jmap_next(&j->loop.idx, &i));)
		nf += !!e->flags;
	for (size_t i = 0; (k = jmap_next(f, &i));) {
		e = jmap_get(&j->loop.idx, k->key);
		bad += !e || !e->flags;
	}
	if (nf != f->n || bad) {
		fprintf(stderr, "journal: queue %s: %zu flagged ids (%zu not flagged in"
			" the index), the index has %zu\n", j->name, f->n, bad, nf);
		abort();
	}
}
#endif

/* The same without the walk where the segments' ids allow it: the oldest
 * segment holding an index entry, and its entry of the lowest id (struct
 * jseg), or compaction's copy placed lowest (moved_min) if lower.  Walks
 * while an unordered segment could hold the oldest entry. */
static uint64_t idx_scan(struct journal *j)
{
	uint64_t minpos = UINT64_MAX, m;

	if (j->loop.idx.n && flagged_whole(j) < 0) {
		j->loop.index_walks++;
		return idx_walk(j);
	}
	for (size_t i = 0; i < j->loop.nseg && j->loop.idx.n; i++) {
		struct jseg *s = &j->loop.segs[i];
		struct jent *e;

		if (s->unordered) {
			j->loop.index_walks++;
			minpos = idx_walk(j);
			break;
		}
		e = seg_first(j, s);
		if (e) {
			minpos = e->pos;
			break;
		}
	}
	m = moved_min(j);
	if (m < minpos)
		minpos = m;
#ifdef TERN_INDEX_CHECK
	{
		uint64_t w = idx_walk(j);

		if (w != minpos) {
			fprintf(stderr, "journal: queue %s: index summary %" PRIx64 ", walk %" PRIx64
				"\n", j->name, minpos, w);
			abort();
		}
		flagged_check(j);
	}
#endif
	return minpos;
}

/* H: the oldest position that may hold a live record (minpos: see
 * idx_scan), counting the read-behind backlog and the pending ring. */
static uint64_t h_from(struct journal *j, uint64_t minpos)
{
	uint64_t H = jb_tail_pos(j);

	if (minpos < H)
		H = minpos;
	if (j->loop.behind_items && j->loop.rb_pos && j->loop.rb_pos < H)
		H = j->loop.rb_pos;
	if (j->loop.bp_n && j->loop.bp[j->loop.bp_head].pos < H)
		H = j->loop.bp[j->loop.bp_head].pos;
	return H;
}

/* Step: the index's lowest ADD position (idx_scan), compacting first
 * where it pays (see relocate). */
static uint64_t ckpt_scan(struct journal *j)
{
	uint64_t minpos = idx_scan(j);

	if (j->loop.nseg >= 3 && relocate(j, JPOS_SEG(h_from(j, minpos))))
		minpos = idx_scan(j);
	return minpos;
}

struct blob_ctx {
	unsigned char *blob;
	size_t w;
};

static void blob_put(void *arg, uint64_t pos)
{
	struct blob_ctx *bc = arg;

	wr64(bc->blob + 8 * bc->w++, pos);
}

/* Step: the blob for positions H and P and the index's open and moved
 * items; NULL without memory.  *len gets its length.
 *
 * The moved items are listed because recovery loads items in file order up
 * to max_memory_size and reads the rest back in file order: a MOVED copy
 * sits after items newer than it, and read back late it would be delivered
 * out of queue order.  Recovery loads the listed ones whatever the memory
 * cap (compaction moves few items).
 *
 * Both lists come from the set of flagged ids (jent_flags_set), so a
 * queue with items held open is not walked either: the checkpoint's work
 * grows with the items open or moved, not with the items held. */
static unsigned char *ckpt_blob(struct journal *j, uint64_t H, uint64_t P, size_t *len)
{
	uint64_t nd = jdead_count(&j->loop.dead), no = 0, nm = 0;
	const struct jmap *f = &j->loop.flagged;
	const struct jent *k;
	unsigned char *blob;
	struct blob_ctx bc;
	size_t mo, mm;

	if (flagged_whole(j) < 0)
		return NULL;
	for (size_t i = 0; (k = jmap_next(f, &i));) {
		unsigned flags = jmap_get(&j->loop.idx, k->key)->flags;

		no += !!(flags & JENT_OPEN);
		nm += !!(flags & JENT_MOVED);
	}
	blob = tern_malloc((CK_WORDS + nd + no + nm + 1) * 8);
	bc.blob = blob;
	bc.w = CK_WORDS;
	if (!blob)
		return NULL;
	wr64(blob + 8 * CK_MAGIC, CKPT_MAGIC);
	wr64(blob + 8 * CK_VERSION, CKPT_VERSION);
	wr64(blob + 8 * CK_P, P);
	wr64(blob + 8 * CK_H, H);
	wr64(blob + 8 * CK_MAXID, j->loop.max_id);
	wr64(blob + 8 * CK_LIVE, j->loop.live_items);
	wr64(blob + 8 * CK_BYTES, j->loop.live_bytes);
	wr64(blob + 8 * CK_ND, nd);
	wr64(blob + 8 * CK_NO, no);
	wr64(blob + 8 * CK_NM, nm);
	jdead_each(&j->loop.dead, blob_put, &bc);
	/* O then M, in one pass */
	mo = bc.w;
	mm = mo + no;
	for (size_t i = 0; (k = jmap_next(f, &i));) {
		const struct jent *e = jmap_get(&j->loop.idx, k->key);

		if (e->flags & JENT_OPEN)
			wr64(blob + 8 * mo++, e->pos);
		if (e->flags & JENT_MOVED)
			wr64(blob + 8 * mm++, e->pos);
	}
	bc.w = mm;
	wr64(blob + 8 * bc.w, crc32c(0, blob, bc.w * 8));
	*len = (bc.w + 1) * 8;
	return blob;
}

/* Step: moves the segments wholly before H (dead once the checkpoint is
 * durable) from the journal's list to b's, for the writer to free. */
static void ckpt_free_before(struct journal *j, struct jbatch *b, uint64_t H)
{
	size_t k = 0;

	while (k < j->loop.nseg && j->loop.segs[k].num < JPOS_SEG(H) &&
	       j->loop.segs[k].num != j->loop.wseg) {
		if (jgrow((void **)&b->free_segs, &b->freecap, b->nfree + 1,
			  sizeof(*b->free_segs)) < 0)
			break;
		b->free_segs[b->nfree++] = j->loop.segs[k];
		if (!j->loop.segs[k].lost) {
			stat_add(&j->atom.dead_bytes, j->loop.segs[k].size);
			stat_add(&j->atom.dead_files, 1);
		}
		k++;
	}
	if (k)
		memmove(j->loop.segs, j->loop.segs + k, (j->loop.nseg - k) * sizeof(*j->loop.segs));
	j->loop.nseg -= k;
	if (j->loop.rb_open && JPOS_SEG(j->loop.rb_pos) != j->loop.rb.seg) {
		jreader_close(&j->loop.rb);
		j->loop.rb_open = 0;
	}
}

/* Attaches the checkpoint of the journal as it stands to b (minpos: see
 * ckpt_scan).  0, or TERN_ENOMEM with b unchanged. */
static int ckpt_attach(struct journal *j, struct jbatch *b, uint64_t minpos)
{
	uint64_t H = h_from(j, minpos), P = jb_tail_pos(j);
	unsigned char *blob;
	size_t len;

	/* prune the dead set to [H, P): its sorted run keeps its array (a
	 * set rebuilt at every checkpoint would grow through every size
	 * again, each growth a rehash on the loop), and the prune moves a
	 * start index instead of walking a table (jdead.h) */
	if (jdead_prune_below(&j->loop.dead, H) < 0)
		return TERN_ENOMEM;
	blob = ckpt_blob(j, H, P, &len);
	if (!blob)
		return TERN_ENOMEM;
	free(b->ckpt);
	b->ckpt = blob;
	b->ckpt_len = len;
	ckpt_free_before(j, b, H);
	return 0;
}

int jckpt_take(struct journal *j)
{
	struct jbatch *b;
	uint64_t minpos;
	int rc;

	if (!j->loop.ckpt_dirty || failed_get(j))
		return 0;
	minpos = ckpt_scan(j);
	b = jb_get(j);
	if (!b)
		return TERN_ENOMEM;
	rc = ckpt_attach(j, b, minpos);
	if (rc < 0)
		return rc;
	b->sync = j->loop.opts.sync;
	j->loop.ckpt_dirty = 0;
	env_handoff(j->env);
	return 0;
}

void jckpt_close(struct journal *j, enum jclose how)
{
	int ckpt = how == JCLOSE_KEEP && !failed_get(j);
	uint64_t minpos = 0;
	struct jbatch *b;

	jb_check_lost(j);
	if (ckpt) {
		minpos = ckpt_scan(j);
		if (j->loop.wseg) {
			struct jrec end = { .type = JREC_SEGEND };

			/* room is always kept for it (without memory for it,
			 * recovery finds the end of the records anyway) */
			jb_append(j, &end, NULL, NULL);
			j->loop.wseg = 0;
		}
	}
	/* never NULL: journal_open keeps a batch for this (loop.last_b) */
	b = jb_get_for_close(j);
	if (ckpt && ckpt_attach(j, b, minpos) < 0)
		log_warn("journal: queue %s: no memory for the last checkpoint;"
			" the next open replays from the one before", j->name);
	b->sync = j->loop.opts.sync;
	b->close = how;
	j->loop.ckpt_dirty = 0;
}

static void ckpt_now_cb(evutil_socket_t fd, short what, void *arg)
{
	struct journal *j = arg;

	j->loop.ckpt_soon = 0;
	if (jckpt_take(j) < 0)
		log_warn("journal: queue %s: no memory for a checkpoint;"
			" the timer takes it later", j->name);
}

static void ckpt_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct journal *j = arg;

	if (jckpt_take(j) < 0)
		log_warn("journal: queue %s: no memory for a checkpoint;"
			" trying again in %u ms", j->name, j->loop.opts.checkpoint_interval_ms);
}

int jckpt_timer_start(struct journal *j)
{
	struct timeval tv = { j->loop.opts.checkpoint_interval_ms / 1000,
			      (j->loop.opts.checkpoint_interval_ms % 1000) * 1000 };

	if (!j->loop.ckpt_ev) {
		j->loop.ckpt_ev = event_new(j->env->base, -1, EV_PERSIST, ckpt_timer_cb, j);
		if (!j->loop.ckpt_ev)
			return TERN_ENOMEM;
	}
	if (!j->loop.ckpt_now_ev) {
		j->loop.ckpt_now_ev = event_new(j->env->base, -1, 0, ckpt_now_cb, j);
		if (!j->loop.ckpt_now_ev)
			return TERN_ENOMEM;
	}
	event_add(j->loop.ckpt_ev, &tv);
	return 0;
}
