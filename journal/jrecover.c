/*
 * jrecover.c: recovery, when journal_open finds a queue's files.  Loop
 * thread.
 *
 * 1. List the segments; read the checkpoint (P, H, the dead and open
 *    positions, the counts).  Without one, everything is replayed.
 * 2. Delete the segments before H's (a crash between a checkpoint and
 *    freeing them).
 * 3. Replay the records at or after P (jrec_replay, with the hooks
 *    below): ADD counts, REMOVE/CONFIRM mark their ADD dead, OPEN/ABORT
 *    track open items, FLUSH resets, a MOVED ADD supersedes its original.
 * 4. Load live items from H on, until max_memory_size of bodies; the first
 *    one that does not fit becomes the read-behind cursor, and the rest are
 *    only counted.  So restart time depends on the checkpoint interval and
 *    max_memory_size, not on the backlog.
 * 5. Index the loaded items and settle the counts; items open at the crash
 *    come first, then queue order.
 */
#include "jpriv.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../lib/log.h"
#include "catalog.h"

struct recover_state {
	struct jmap open; /* positions of open items */
	struct jmap dlv;  /* item id -> highest delivery count an OPEN or
			     ABORT record gave it (in jent.len) */
	struct jmap moved; /* positions of live items' MOVED copies */
	uint64_t P;       /* replay from here */
	uint64_t H;       /* load from here */
	enum {
		RS_CKPT_NONE, /* none stored (a new queue, or the catalog lost it) */
		RS_CKPT_BAD,  /* ignored: unreadable or failing its checksum */
		RS_CKPT_OLD,  /* valid, of an older version */
		RS_CKPT_OK,   /* valid, of this version */
	} ckpt;
};

static int cmp_rec_item(const void *a, const void *b)
{
	const struct rec_item *x = a, *y = b;

	if (x->open != y->open)
		return y->open - x->open;
	return x->it->id < y->it->id ? -1 : x->it->id > y->it->id;
}

/* Step 1: reads the checkpoint, if there is a valid one, into j and rs.
 * One that is unreadable, truncated or fails its checksum is ignored
 * (logged): the queue is recovered from its segments' own checksummed
 * records, by a full replay, and nothing is deleted on its word.  A
 * valid one of a newer version is refused (TERN_EVERSION). */
static int load_ckpt(struct journal *j, struct recover_state *rs)
{
	void *blob = NULL;
	size_t len = 0;
	struct ckpt_view v;
	const unsigned char *p;
	const char *why = "";
	int rc = jcat_ckpt_get(j->env->cat, j->name, &blob, &len);

	if (rc == TERN_ENOTFOUND) {
		rs->ckpt = RS_CKPT_NONE;
		return 0;
	}
	if (rc < 0)
		return rc;
	p = blob;
	rc = 0;
	switch (ckblob_check(p, len, &v, &why)) {
	case CKPT_BAD:
		log_warn("journal: queue %s: checkpoint %s (%zu bytes); ignored:"
			" replaying every segment", j->name, why, len);
		rs->ckpt = RS_CKPT_BAD;
		goto out;
	case CKPT_NEWER:
		log_error("journal: queue %s: checkpoint of version %llu, newer than this"
			" ternd reads (%u)", j->name,
			(unsigned long long)rd64(p + 8 * CK_VERSION), CKPT_VERSION);
		rc = TERN_EVERSION;
		goto out;
	case CKPT_OK:
		break;
	}
	rs->ckpt = v.version == CKPT_VERSION ? RS_CKPT_OK : RS_CKPT_OLD;
	rs->P = v.P;
	rs->H = v.H;
	j->loop.max_id = v.max_id;
	j->loop.live_items = v.live_items;
	j->loop.live_bytes = v.live_bytes;
	for (uint64_t i = 0; i < v.nd; i++)
		if (jdead_put(&j->loop.dead, rd64(v.d + 8 * i)) < 0)
			rc = TERN_ENOMEM;
	for (uint64_t i = 0; i < v.no; i++)
		if (!jmap_put(&rs->open, rd64(v.o + 8 * i)))
			rc = TERN_ENOMEM;
	for (uint64_t i = 0; i < v.nm; i++)
		if (!jmap_put(&rs->moved, rd64(v.m + 8 * i)))
			rc = TERN_ENOMEM;
out:
	free(blob);
	return rc;
}

/* Step 1: where replay and loading start; new segments are numbered after
 * every one the checkpoint knows, and grow on from the newest one's size. */
static void start_points(struct journal *j, struct recover_state *rs)
{
	if (j->loop.nseg) {
		uint64_t last = j->loop.segs[j->loop.nseg - 1].size * 2;

		if (last > FIRST_SEG_SIZE)
			__atomic_store_n(&j->atom.next_size, last, __ATOMIC_RELEASE);
	}
	if (!rs->P)
		rs->P = rs->H = j->loop.nseg ? JPOS(j->loop.segs[0].num, JSEG_HDR_SIZE) : 0;
	else if (JPOS_SEG(rs->P) > j->loop.last_seg + 1)
		j->loop.last_seg = JPOS_SEG(rs->P) - 1;
}

/* Step 2: deletes the segments before H's. */
static void drop_dead_segments(struct journal *j, uint64_t H)
{
	size_t keep;

	for (keep = 0; keep < j->loop.nseg && j->loop.segs[keep].num < JPOS_SEG(H); keep++) {
		char path[JPATH_MAX];

		jpath_seg(j, j->loop.segs[keep].num, path);
		unlink(path);
	}
	if (keep)
		memmove(j->loop.segs, j->loop.segs + keep,
			(j->loop.nseg - keep) * sizeof(*j->loop.segs));
	j->loop.nseg -= keep;
}

/* Notes the delivery count an OPEN or ABORT record carries.  0 or
 * TERN_ENOMEM. */
static int note_deliveries(struct recover_state *rs, const struct jrec *r)
{
	struct jent *e;

	if ((r->type != JREC_OPEN && r->type != JREC_ABORT) || !r->deliveries || !r->id)
		return 0;
	e = jmap_put(&rs->dlv, r->id);
	if (!e)
		return TERN_ENOMEM;
	if (r->deliveries > e->len)
		e->len = r->deliveries;
	return 0;
}

/* Step 3: what each record does (jrec_replay's hooks), to j and rs.
 * Each returns 0 or TERN_ENOMEM. */
struct replay_ctx {
	struct journal *j;
	struct recover_state *rs;
};

static void note_max_id(struct journal *j, const struct jrec *r)
{
	if (r->id > j->loop.max_id)
		j->loop.max_id = r->id;
}

static int replay_add(void *arg, uint64_t pos, const struct jrec *r)
{
	struct journal *j = ((struct replay_ctx *)arg)->j;

	note_max_id(j, r);
	j->loop.live_items++;
	j->loop.live_bytes += r->ilen;
	return 0;
}

static int replay_moved(void *arg, uint64_t pos, const struct jrec *r)
{
	struct replay_ctx *c = arg;
	struct recover_state *rs = c->rs;

	note_max_id(c->j, r);
	if (jdead_put(&c->j->loop.dead, r->aux) < 0)
		return TERN_ENOMEM;
	jmap_del(&rs->moved, r->aux);
	if (!jmap_put(&rs->moved, pos))
		return TERN_ENOMEM;
	if (jmap_get(&rs->open, r->aux)) {
		jmap_del(&rs->open, r->aux);
		if (!jmap_put(&rs->open, pos))
			return TERN_ENOMEM;
	}
	return 0;
}

static int replay_gone(void *arg, uint64_t pos, const struct jrec *r)
{
	struct replay_ctx *c = arg;
	struct journal *j = c->j;
	struct recover_state *rs = c->rs;

	if (r->aux >= rs->H && !jdead_has(&j->loop.dead, r->aux)) {
		if (jdead_put(&j->loop.dead, r->aux) < 0)
			return TERN_ENOMEM;
		if (j->loop.live_items)
			j->loop.live_items--;
		j->loop.live_bytes -= r->ilen <= j->loop.live_bytes ? r->ilen : j->loop.live_bytes;
	}
	jmap_del(&rs->open, r->aux);
	jmap_del(&rs->moved, r->aux);
	return 0;
}

static int replay_open(void *arg, uint64_t pos, const struct jrec *r)
{
	struct recover_state *rs = ((struct replay_ctx *)arg)->rs;

	if (note_deliveries(rs, r) < 0)
		return TERN_ENOMEM;
	return jmap_put(&rs->open, r->aux) ? 0 : TERN_ENOMEM;
}

static int replay_abort(void *arg, uint64_t pos, const struct jrec *r)
{
	struct recover_state *rs = ((struct replay_ctx *)arg)->rs;

	jmap_del(&rs->open, r->aux);
	return note_deliveries(rs, r);
}

static int replay_flush(void *arg, uint64_t pos, const struct jrec *r)
{
	struct replay_ctx *c = arg;
	struct recover_state *rs = c->rs;

	jdead_clear(&c->j->loop.dead);
	jmap_clear(&rs->open);
	jmap_clear(&rs->dlv);
	jmap_clear(&rs->moved);
	c->j->loop.live_items = c->j->loop.live_bytes = 0;
	rs->H = pos + jrec_size(0);
	return 0;
}

static const struct jreplay replay_hooks = {
	replay_add, replay_moved, replay_gone, replay_open, replay_abort, replay_flush,
};

/* Step 3: applies every record at or after P. */
static int replay(struct journal *j, struct recover_state *rs, struct journal_recovery *rec)
{
	uint64_t P = rs->P;
	struct replay_ctx ctx = { j, rs };

	for (size_t s = 0; s < j->loop.nseg; s++) {
		struct jreader rd;
		struct jrec r;
		const unsigned char *body;
		uint64_t off;
		int rc;

		if (j->loop.segs[s].num < JPOS_SEG(P))
			continue;
		rc = jseg_reader_open(j, j->loop.segs[s].num, &rd, rec);
		if (rc < 0)
			return rc; /* (logged) */
		if (j->loop.segs[s].num == JPOS_SEG(P) && JPOS_OFF(P) > JSEG_HDR_SIZE)
			jreader_seek(&rd, JPOS_OFF(P));
		while ((rc = jreader_next(&rd, &off, &r, &body)) != JREAD_END) {
			if (rc == JREAD_DAMAGE || rc == JREAD_TORN) {
				jseg_log_damage(j, &rd, rec, rc);
				continue;
			}
			if (rc < 0) {
				jseg_log_read_error(j, rd.seg, rc);
			} else {
				rec->records_replayed++;
				rc = jrec_replay(&r, JPOS(rd.seg, off), &replay_hooks, &ctx);
			}
			if (rc < 0) {
				jreader_close(&rd);
				return rc;
			}
		}
		jreader_close(&rd);
	}
	return 0;
}

/* Appends the item of the ADD record at pos to *v (jgrow'd).  0, 1 when
 * no valid ADD is there (damage: logged by the reader's caller), or a
 * TERN_E* code. */
static int load_one(struct journal *j, uint64_t pos, struct rec_item **v, size_t *n,
		    size_t *cap, struct journal_recovery *rec)
{
	struct jreader rd;
	struct jrec r;
	const unsigned char *body;
	uint64_t off;
	struct item *it;
	int rc = jseg_reader_open(j, JPOS_SEG(pos), &rd, NULL);

	if (rc < 0)
		return rc;
	jreader_seek(&rd, JPOS_OFF(pos));
	rc = jreader_next(&rd, &off, &r, &body);
	if (rc < 0) {
		jseg_log_read_error(j, rd.seg, rc);
	} else if (rc != JREAD_REC || off != JPOS_OFF(pos) || r.type != JREC_ADD) {
		if (rc == JREAD_DAMAGE || rc == JREAD_TORN)
			jseg_log_damage(j, &rd, rec, rc);
		rc = 1;
	} else {
		it = jitem_from_rec(&r, body);
		if (!it || jgrow((void **)v, cap, *n + 1, sizeof(**v)) < 0) {
			item_unref(it);
			rc = TERN_ENOMEM;
		} else {
			(*v)[*n].it = it;
			(*v)[*n].pos = pos;
			(*v)[*n].open = 0;
			(*n)++;
			rc = 0;
		}
	}
	jreader_close(&rd);
	return rc;
}

/* Step 4, after the memory cap: the live MOVED copies the load did not
 * reach are loaded all the same.  Read back later, in file order, they
 * would come after items newer than them (compaction appended them at the
 * tail); there are few (compaction moves few items). */
static int load_moved(struct journal *j, struct recover_state *rs, int stopped,
		      struct rec_item **v, size_t *n, size_t *cap)
{
	const struct jent *e;

	for (size_t i = 0; (e = jmap_next(&rs->moved, &i));) {
		uint64_t pos = e->key;
		int rc;

		if (pos < rs->H || jdead_has(&j->loop.dead, pos) ||
		    !stopped || pos < j->loop.rb_pos)
			continue; /* dead, or loaded already */
		rc = load_one(j, pos, v, n, cap, NULL);
		if (rc < 0)
			return rc;
		if (rc == 0)
			(*v)[*n - 1].open = jmap_get(&rs->open, pos) != NULL;
	}
	return 0;
}

/* Step 4: reads live items from H on into memory, up to max_memory_size. */
static int load(struct journal *j, struct recover_state *rs, struct journal_recovery *rec,
		struct rec_item **outv, size_t *outn)
{
	struct rec_item *v = NULL;
	size_t n = 0, cap = 0;
	uint64_t bytes = 0, H = rs->H;
	int stop = 0, rc = 0;

	for (size_t s = 0; s < j->loop.nseg && !stop; s++) {
		struct jreader rd;
		struct jrec r;
		const unsigned char *body;
		uint64_t off;

		if (j->loop.segs[s].num < JPOS_SEG(H))
			continue;
		/* (a damaged header in [H, P) is counted here, after P by
		 * replay()) */
		rc = jseg_reader_open(j, j->loop.segs[s].num, &rd,
				      j->loop.segs[s].num < JPOS_SEG(rs->P) ? rec : NULL);
		if (rc < 0)
			break; /* (logged) */
		if (j->loop.segs[s].num == JPOS_SEG(H) && JPOS_OFF(H) > JSEG_HDR_SIZE)
			jreader_seek(&rd, JPOS_OFF(H));
		while (!stop && (rc = jreader_next(&rd, &off, &r, &body)) != JREAD_END) {
			uint64_t pos = JPOS(rd.seg, off);
			struct item *it;

			if (rc < 0) {
				jseg_log_read_error(j, rd.seg, rc);
				break;
			}
			if (rc == JREAD_DAMAGE || rc == JREAD_TORN) {
				/* damage at or after P was reported by replay() */
				if (JPOS(rd.seg, rd.dmg_off) < rs->P)
					jseg_log_damage(j, &rd, rec, rc);
				continue;
			}
			/* Delivery counts: those at or after P were noted by
			 * replay(); these are the ones before it. */
			if (pos < rs->P && note_deliveries(rs, &r) < 0) {
				rc = TERN_ENOMEM;
				break;
			}
			if (r.type != JREC_ADD || jdead_has(&j->loop.dead, pos))
				continue;
			rc = 0;
			if (bytes + r.len > j->loop.opts.max_memory_size) {
				j->loop.rb_pos = pos;
				stop = 1;
				break;
			}
			it = jitem_from_rec(&r, body);
			if (!it || jgrow((void **)&v, &cap, n + 1, sizeof(*v)) < 0) {
				item_unref(it);
				rc = TERN_ENOMEM;
				break;
			}
			v[n].it = it;
			v[n].pos = pos;
			v[n].open = jmap_get(&rs->open, pos) != NULL;
			n++;
			bytes += r.len;
		}
		jreader_close(&rd);
		if (rc < 0)
			break;
	}
	if (rc >= 0)
		rc = load_moved(j, rs, stop, &v, &n, &cap);
	/* An item's ADD (or MOVED copy) precedes its OPEN and ABORT records,
	 * so the counts are applied once everything is read. */
	for (size_t i = 0; i < n; i++) {
		struct jent *e = jmap_get(&rs->dlv, v[i].it->id);

		if (e && e->len > v[i].it->deliveries)
			v[i].it->deliveries = e->len;
	}
	*outv = v;
	*outn = n;
	return rc < 0 ? rc : 0;
}

/* Step 5: indexes the loaded items, settles the counts (the checkpoint's
 * may disagree with what was found: the files win), and places the
 * read-behind cursor and the reserve. */
static int settle(struct journal *j, struct recover_state *rs, const struct rec_item *items,
		  size_t nitems)
{
	uint64_t loaded_bytes = 0;

	for (size_t i = 0; i < nitems; i++) {
		struct jent *e = jmap_put(&j->loop.idx, items[i].it->id);

		if (!e)
			return TERN_ENOMEM;
		e->pos = items[i].pos;
		e->len = items[i].it->len;
		e->deliveries = jrec_deliveries(items[i].it->deliveries);
		/* a MOVED copy is listed again at each checkpoint, and found
		 * through the set of flagged ids, not its segment's ids */
		if (jmap_get(&rs->moved, items[i].pos))
			jent_flags_set(j, e, e->flags | JENT_MOVED);
		else
			jseg_note_index(j, items[i].pos, items[i].it->id); /* (in load order) */
		loaded_bytes += items[i].it->len;
	}
	if (j->loop.live_items < nitems || (j->loop.live_items > nitems && !j->loop.rb_pos)) {
		if (j->loop.live_items != nitems) {
			log_warn("journal: queue %s: expected %" PRIu64 " live items, found %zu",
				j->name, j->loop.live_items, nitems);
			j->loop.ckpt_dirty = 1;
		}
		j->loop.live_items = nitems;
		j->loop.live_bytes = loaded_bytes;
	}
	j->loop.behind_items = j->loop.live_items - nitems;
	j->loop.behind_bytes = j->loop.live_bytes > loaded_bytes
				       ? j->loop.live_bytes - loaded_bytes : 0;
	if (!j->loop.behind_items)
		j->loop.rb_pos = 0;
	j->loop.written_pos = JPOS(j->loop.last_seg + 1, 0);
	j->loop.reserve = j->loop.live_items * SMALL_REC;
	if (j->loop.reserve > jb_reserve_cap(j))
		j->loop.reserve = jb_reserve_cap(j);
	return 0;
}

int jrecover(struct journal *j, struct journal_recovery *rec,
	     struct rec_item **itemsp, size_t *nitemsp)
{
	struct recover_state rs = { .P = 0, .H = 0, .dlv = { .seq = 1 } };
	struct rec_item *items = NULL;
	size_t nitems = 0;
	int rc;

	rc = jseg_list(j);
	if (rc == 0)
		rc = load_ckpt(j, &rs);
	if (rc == 0) {
		start_points(j, &rs);
		drop_dead_segments(j, rs.H);
		rc = replay(j, &rs, rec);
	}
	if (rc == 0)
		rc = load(j, &rs, rec, &items, &nitems);
	if (rc == 0)
		rc = settle(j, &rs, items, nitems);
	jmap_free(&rs.open);
	jmap_free(&rs.dlv);
	jmap_free(&rs.moved);
	if (rc < 0) {
		for (size_t i = 0; i < nitems; i++)
			item_unref(items[i].it);
		free(items);
		return rc;
	}
	/* a checkpoint at open only when this one says something the stored
	 * one does not: records after it, or none (valid) stored for the
	 * segments there are */
	if (rec->records_replayed || (rs.ckpt != RS_CKPT_OK && j->loop.nseg))
		j->loop.ckpt_dirty = 1;
	if (nitems)
		qsort(items, nitems, sizeof(*items), cmp_rec_item);
	rec->next_id = j->loop.max_id + 1;
	rec->behind_items = j->loop.behind_items;
	rec->behind_bytes = j->loop.behind_bytes;
	if (rec->corrupt_records)
		log_warn("journal: queue %s: recovered %zu items in memory, %" PRIu64
			" behind; %" PRIu64 " damaged regions (%" PRIu64 " bytes)",
			j->name, nitems, j->loop.behind_items, rec->corrupt_records,
			rec->corrupt_bytes);
	*itemsp = items;
	*nitemsp = nitems;
	return 0;
}
