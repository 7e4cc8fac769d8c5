/*
 * jbehind.c: read-behind.  Items beyond max_memory_size stay on disk; the
 * queue asks for them back, in order, as its in-memory part drains.  They
 * are read sequentially from the cursor (rb_pos) with a buffered reader
 * (no mmap, so memory stays bounded), skipping dead and non-ADD records.
 * An item whose record the writer has not reported written yet is still
 * referenced from the pending ring (bp), and comes from there.  Loop
 * thread only.
 */
#include "jpriv.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "../lib/log.h"

/* Takes the oldest pending item out of the ring (its reference moves to
 * the caller); *pos gets its record's position. */
static struct item *bp_pop(struct journal *j, uint64_t *pos)
{
	struct bpend *p = &j->loop.bp[j->loop.bp_head];
	struct item *it = p->it;

	if (pos)
		*pos = p->pos;
	p->it = NULL;
	j->loop.bp_head = (j->loop.bp_head + 1) % j->loop.bp_cap;
	j->loop.bp_n--;
	return it;
}

void jbehind_pop_written(struct journal *j)
{
	/* the record is in the file now: read-behind reads it there */
	while (j->loop.bp_n && j->loop.bp[j->loop.bp_head].pos < j->loop.written_pos)
		item_unref(bp_pop(j, NULL));
}

void jbehind_clear(struct journal *j)
{
	while (j->loop.bp_n)
		item_unref(bp_pop(j, NULL));
}

int jbehind_drop(struct journal *j, uint64_t pos)
{
	size_t i, cap = j->loop.bp_cap;

	for (i = 0; i < j->loop.bp_n; i++)
		if (j->loop.bp[(j->loop.bp_head + i) % cap].pos == pos)
			break;
	if (i == j->loop.bp_n)
		return 0;
	{
		struct bpend *p = &j->loop.bp[(j->loop.bp_head + i) % cap];

		j->loop.behind_items--;
		j->loop.behind_bytes -= p->it->len <= j->loop.behind_bytes
						? p->it->len : j->loop.behind_bytes;
		item_unref(p->it);
	}
	/* the ring keeps its order: the later ones move up by one */
	for (; i + 1 < j->loop.bp_n; i++)
		j->loop.bp[(j->loop.bp_head + i) % cap] =
			j->loop.bp[(j->loop.bp_head + i + 1) % cap];
	j->loop.bp_n--;
	if (j->loop.behind_items && j->loop.bp_n && j->loop.rb_pos == pos)
		j->loop.rb_pos = j->loop.bp[j->loop.bp_head].pos;
	return 1;
}

int jbehind_reserve(struct journal *j)
{
	size_t nc;
	struct bpend *nb;

	if (j->loop.bp_n < j->loop.bp_cap)
		return 0;
	nc = j->loop.bp_cap ? j->loop.bp_cap * 2 : 64;
	nb = malloc(nc * sizeof(*nb));
	if (!nb)
		return TERN_ENOMEM;
	for (size_t i = 0; i < j->loop.bp_n; i++)
		nb[i] = j->loop.bp[(j->loop.bp_head + i) % j->loop.bp_cap];
	free(j->loop.bp);
	j->loop.bp = nb;
	j->loop.bp_cap = nc;
	j->loop.bp_head = 0;
	return 0;
}

void jbehind_push(struct journal *j, struct item *it, uint64_t pos)
{
	j->loop.bp[(j->loop.bp_head + j->loop.bp_n) % j->loop.bp_cap] =
		(struct bpend){ item_ref(it), pos };
	j->loop.bp_n++;
	if (!j->loop.behind_items)
		j->loop.rb_pos = pos;
	j->loop.behind_items++;
	j->loop.behind_bytes += it->len;
}

/* A new item with r's fields, its body not filled in. */
static struct item *jitem_for_rec(const struct jrec *r)
{
	struct item *it = item_new(r->len);

	if (!it)
		return NULL;
	it->id = r->id;
	it->flags = r->iflags;
	it->expiry_ms = r->expiry_ms;
	it->add_ms = r->add_ms;
	it->deliveries = r->deliveries;
	if (r->rflags & JREC_F_DELAYED)
		it->state |= ITEM_DELAYED;
	return it;
}

struct item *jitem_from_rec(const struct jrec *r, const unsigned char *body)
{
	struct item *it = jitem_for_rec(r);

	if (it)
		memcpy(it->data, body, r->len);
	return it;
}

/* Item it (record at pos) is in memory from now on. */
static void behind_took(struct journal *j, struct item *it, uint64_t pos)
{
	struct jent *e = jmap_put(&j->loop.idx, it->id);

	if (e) {
		jent_flags_set(j, e, 0);
		e->pos = pos;
		e->len = it->len;
		e->deliveries = jrec_deliveries(it->deliveries);
		jseg_note_index(j, pos, it->id);
	}
	j->loop.behind_items--;
	j->loop.behind_bytes -= it->len <= j->loop.behind_bytes ? it->len : j->loop.behind_bytes;
}

/* Step: the cursor is past what is written, so the next item is the
 * oldest pending one.  *out = NULL (and the count reset) if there is none,
 * which would be a bug: the count promised more items than exist. */
static void rb_from_pending(struct journal *j, struct item **out)
{
	uint64_t pos;

	if (!j->loop.bp_n) {
		log_error("journal: queue %s: %" PRIu64
				" behind items missing from the journal",
			j->name, j->loop.behind_items);
		j->loop.behind_items = j->loop.behind_bytes = 0;
		return;
	}
	*out = bp_pop(j, &pos);
	j->loop.rb_pos = pos + jrec_size((*out)->len);
	behind_took(j, *out, pos);
}

/* Where the cursor goes when segment seg cannot be read further: the next
 * segment, or the end of what is written. */
static uint64_t rb_skip_seg(struct journal *j, uint32_t seg)
{
	uint32_t nx = jseg_next_after(j, seg);

	return nx ? JPOS(nx, JSEG_HDR_SIZE) : j->loop.written_pos;
}

/* A segment the loop has left since the journal opened ends at its SEGEND:
 * the reader reads no further.  Past it lies the segment's unwritten tail
 * (the reserve for removes, journal.c), which the kernel would fill with
 * zeros for the reader's 1 MiB reads, and read ahead more of. */
static void rb_clip_end(struct journal *j, uint32_t seg)
{
	const struct jseg *s = jseg_find(j, seg);

	if (s && s->end && s->end < j->loop.rb.fsize)
		j->loop.rb.fsize = s->end;
}

/* Closes the reader.  page_cache = drop: the pages it read leave the page
 * cache, and with them the rest of a segment the writer has left (what the
 * kernel read ahead); of the segment being written, only what the reader
 * passed, which never includes the page the next write goes into. */
static void rb_close(struct journal *j)
{
	struct jreader *rb = &j->loop.rb;

	if (j->loop.opts.cache == JOURNAL_CACHE_DROP)
		jseg_drop_cached(rb->fd, &j->loop.rb_dropped,
				 rb->seg == JPOS_SEG(j->loop.written_pos) ? rb->off : JDROP_ALL, 0);
	jreader_close(rb);
	j->loop.rb_open = 0;
}

/* Step: positions the reader at the cursor in segment seg, reading only
 * what the writer reported written.  0, 1 when seg was given up by the
 * writer (the cursor moved on), or a TERN_E* code: a segment that cannot
 * be read is not skipped (the cursor stays, so its items stay on disk and
 * are there after a restart; logged). */
static int rb_seek(struct journal *j, uint32_t seg)
{
	struct jreader *rb = &j->loop.rb;

	if (!j->loop.rb_open || rb->seg != seg) {
		int rc;

		if (j->loop.rb_open)
			rb_close(j);
		if (jseg_lost(j, seg)) {
			/* given up: nothing of it is live (jb_undo) */
			j->loop.rb_pos = rb_skip_seg(j, seg);
			return 1;
		}
		rc = jseg_reader_open(j, seg, rb, NULL);
		if (rc < 0)
			return rc;
		j->loop.rb_open = 1;
		j->loop.rb_clipped = 0;
		j->loop.rb_dropped = 0;
		rb_clip_end(j, seg);
	}
	if (seg == JPOS_SEG(j->loop.written_pos)) {
		rb->fsize = JPOS_OFF(j->loop.written_pos); /* only what is written */
		j->loop.rb_clipped = 1;
	} else if (j->loop.rb_clipped) {
		if (jreader_refresh(rb) < 0)
			return TERN_ESYS;
		j->loop.rb_clipped = 0;
		rb_clip_end(j, seg);
	}
	if (rb->off != JPOS_OFF(j->loop.rb_pos) || rb->done)
		jreader_seek(rb, JPOS_OFF(j->loop.rb_pos));
	/* page_cache = drop: what the cursor has passed is in memory now */
	if (j->loop.opts.cache == JOURNAL_CACHE_DROP)
		jseg_drop_cached(rb->fd, &j->loop.rb_dropped, rb->off, DROP_LAG);
	return 0;
}

/* Whether the ADD record of item id at pos is a live item not in memory. */
static int rb_wanted(struct journal *j, uint64_t pos, uint64_t id)
{
	return !jdead_has(&j->loop.dead, pos) && !jmap_get(&j->loop.idx, id);
}

/* Step for a large record: a live item not in memory is read straight into
 * its item (jreader_body_into), without the copy out of the reader's
 * buffer.  1 with *out set; 0 for any other record, or when the record
 * does not check out, which rb_step then reads as usual. */
static int rb_step_large(struct journal *j, uint32_t seg, struct item **out)
{
	struct jreader *rb = &j->loop.rb;
	struct jrec r;
	struct item *it;
	uint64_t off;

	if (!jreader_peek(rb, &off, &r) || r.type != JREC_ADD || r.len < JREADER_DIRECT ||
	    !rb_wanted(j, JPOS(seg, off), r.id) || !(it = jitem_for_rec(&r)))
		return 0;
	if (jreader_body_into(rb, off, &r, (unsigned char *)it->data) != JREAD_REC) {
		item_unref(it);
		return 0;
	}
	j->loop.rb_pos = JPOS(seg, rb->off);
	behind_took(j, it, JPOS(seg, off));
	*out = it;
	return 1;
}

/* Step: reads the record at the cursor and moves the cursor past it.
 * Returns 1 with *out set when it was a live item not in memory, 0 to go
 * on, or a TERN_E* code. */
static int rb_step(struct journal *j, uint32_t seg, struct item **out)
{
	struct jreader *rb = &j->loop.rb;
	struct jrec r;
	const unsigned char *body;
	uint64_t off;
	int rc;

	if (rb_step_large(j, seg, out))
		return 1;
	rc = jreader_next(rb, &off, &r, &body);
	if (rc < 0) {
		jseg_log_read_error(j, seg, rc);
		return rc;
	}
	if (rc == JREAD_END) {
		if (seg < JPOS_SEG(j->loop.written_pos) && jseg_next_after(j, seg))
			j->loop.rb_pos = rb_skip_seg(j, seg);
		else
			j->loop.rb_pos = j->loop.written_pos;
		return 0;
	}
	if (rc == JREAD_DAMAGE || rc == JREAD_TORN) {
		jseg_log_damage(j, rb, NULL, rc);
		if (rc == JREAD_DAMAGE)
			j->loop.corrupt_seen++;
		j->loop.rb_pos = rb->done ? rb_skip_seg(j, seg) : JPOS(seg, rb->off);
		return 0;
	}
	j->loop.rb_pos = JPOS(seg, rb->off);
	if (r.type != JREC_ADD || !rb_wanted(j, JPOS(seg, off), r.id))
		return 0;
	*out = jitem_from_rec(&r, body);
	if (!*out)
		return TERN_ENOMEM;
	behind_took(j, *out, JPOS(seg, off));
	return 1;
}

int journal_read_behind(struct journal *j, struct item **out)
{
	*out = NULL;
	while (j->loop.behind_items) {
		uint32_t seg = JPOS_SEG(j->loop.rb_pos);
		int rc;

		if (j->loop.rb_pos >= j->loop.written_pos) {
			rb_from_pending(j, out);
			if (*out)
				return 0;
			break;
		}
		rc = rb_seek(j, seg);
		if (rc == 0)
			rc = rb_step(j, seg, out);
		if (rc < 0)
			return rc;
		if (*out)
			return 0;
	}
	if (!j->loop.behind_items && j->loop.rb_open)
		rb_close(j);
	return 0;
}
