/* jckpt.c: checkpoints and compaction (moved from journal.c). */
#include "jpriv.h"

#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "catalog.h"
#include "jio.h"

/* Moves the few live items that pin the oldest segment to the tail, so the
 * segment can be freed (Kestrel's and beanstalkd's journals grew without
 * bound when one long-open item pinned an old file). */
/* Returns 1 when it moved items (their positions changed). */
static int relocate(struct journal *j, uint32_t oldest)
{
	uint64_t cand[RELOC_MAX_ITEMS], ids[RELOC_MAX_ITEMS];
	size_t n = 0;
	int fd = -1;
	char *p;

	if (oldest + 1 >= j->wseg)
		return 0; /* only segments that are two or more behind the tail */
	if (j->behind_items && JPOS_SEG(j->rb_pos) <= oldest)
		return 0; /* the backlog itself lives there */
	for (size_t i = 0; i <= j->idx.mask && j->idx.t; i++) {
		struct jent *e = &j->idx.t[i];

		if (!e->key || JPOS_SEG(e->pos) != oldest)
			continue;
		if (n == RELOC_MAX_ITEMS || e->pos >= j->written_pos)
			return 0; /* too many to be worth it, or not yet written */
		cand[n] = e->pos;
		ids[n++] = e->key;
	}
	if (!n)
		return 0;
	p = seg_path(j, oldest);
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
		    make_room(j, jrec_size(r.len), j->reserve) < 0 ||
		    jdead_put(&j->dead, cand[i]) < 0) {
			item_unref(it);
			break;
		}
		r.rflags |= JREC_F_MOVED;
		r.aux = cand[i];
		if (rec_append(j, &r, it, &npos) < 0) {
			jdead_del(&j->dead, cand[i]);
			item_unref(it);
			break;
		}
		item_unref(it);
		e = jmap_get(&j->idx, ids[i]);
		if (e)
			e->pos = npos;
	}
	close(fd);
	return 1;
}

/* One pass over the index of in-memory live items: the lowest ADD
 * position and the number of open items.  Checkpoints used to take four
 * passes; with a 100k-item backlog each pass cost the loop ~0.5 ms. */
static void idx_scan(struct journal *j, uint64_t *minpos, uint64_t *nopen)
{
	uint64_t m = UINT64_MAX, no = 0;

	for (size_t i = 0; j->idx.t && i <= j->idx.mask; i++) {
		const struct jent *e = &j->idx.t[i];

		if (!e->key)
			continue;
		if (e->pos < m)
			m = e->pos;
		if (e->flags & JENT_OPEN)
			no++;
	}
	*minpos = m;
	*nopen = no;
}

/* H from the index's lowest position (see idx_scan). */
static uint64_t h_from(struct journal *j, uint64_t minpos)
{
	uint64_t H = tail_pos(j);

	if (minpos < H)
		H = minpos;
	if (j->behind_items && j->rb_pos && j->rb_pos < H)
		H = j->rb_pos;
	if (j->bp_n && j->bp[j->bp_head].pos < H)
		H = j->bp[j->bp_head].pos;
	return H;
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

/* close_mode: 0 periodic, 1 close, 2 delete (no checkpoint, just close). */
int checkpoint(struct journal *j, int close_mode)
{
	struct jbatch *b;
	uint64_t H, P, nd = 0, no = 0, minpos;
	unsigned char *blob;
	size_t w = CK_WORDS;

	if (close_mode == 0 && (!j->ckpt_dirty || failed_get(j)))
		return 0;
	idx_scan(j, &minpos, &no);
	if (close_mode != 2 && !failed_get(j)) {
		if (j->nseg >= 3 && relocate(j, JPOS_SEG(h_from(j, minpos))))
			idx_scan(j, &minpos, &no);
		if (close_mode == 1 && j->wseg) {
			struct jrec end = { .type = JREC_SEGEND };

			/* room is always kept for it */
			rec_append(j, &end, NULL, NULL);
			j->wseg = 0;
		}
	}
	H = h_from(j, minpos);
	P = tail_pos(j);
	/* prune the dead set to [H, P): its sorted run keeps its array (a
	 * set rebuilt each interval grew through every size again, each
	 * growth a rehash on the loop: 0.4-3.8 ms stalls every second at 76k
	 * removes a second), and the prune moves a start index instead of
	 * walking a table (jdead.h) */
	if (jdead_prune_below(&j->dead, H) < 0)
		return TERN_ENOMEM;
	b = batch_get(j);
	if (!b)
		return TERN_ENOMEM;
	b->sync = j->opts.sync;
	if (close_mode)
		b->close = close_mode;
	if (close_mode == 2)
		goto handoff;
	nd = jdead_count(&j->dead);
	blob = malloc((CK_WORDS + nd + no) * 8);
	if (!blob)
		return TERN_ENOMEM;
	wr64(blob + 8 * CK_MAGIC, CKPT_MAGIC);
	wr64(blob + 8 * CK_VERSION, CKPT_VERSION);
	wr64(blob + 8 * CK_P, P);
	wr64(blob + 8 * CK_H, H);
	wr64(blob + 8 * CK_MAXID, j->max_id);
	wr64(blob + 8 * CK_LIVE, j->live_items);
	wr64(blob + 8 * CK_BYTES, j->live_bytes);
	wr64(blob + 8 * CK_ND, nd);
	wr64(blob + 8 * CK_NO, no);
	{
		struct blob_ctx bc = { blob, w };

		jdead_each(&j->dead, blob_put, &bc);
		w = bc.w;
	}
	for (size_t i = 0; no && j->idx.t && i <= j->idx.mask; i++)
		if (j->idx.t[i].key && (j->idx.t[i].flags & JENT_OPEN))
			wr64(blob + 8 * w++, j->idx.t[i].pos);
	free(b->ckpt);
	b->ckpt = blob;
	b->ckpt_len = w * 8;
	/* segments wholly before H are dead once this checkpoint is durable */
	{
		size_t k = 0;

		while (k < j->nseg && j->segs[k].num < JPOS_SEG(H) && j->segs[k].num != j->wseg) {
			if (grow((void **)&b->free_segs, &b->freecap, b->nfree + 1,
				 sizeof(*b->free_segs)) < 0)
				break;
			b->free_segs[b->nfree++] = j->segs[k].num;
			k++;
		}
		if (k)
			memmove(j->segs, j->segs + k, (j->nseg - k) * sizeof(*j->segs));
		j->nseg -= k;
		if (j->rb_open && JPOS_SEG(j->rb_pos) != j->rb.seg) {
			jreader_close(&j->rb);
			j->rb_open = 0;
		}
	}
handoff:
	j->ckpt_dirty = 0;
	env_handoff(j->env);
	return 0;
}

void ckpt_cb(evutil_socket_t fd, short what, void *arg)
{
	checkpoint(arg, 0);
}
