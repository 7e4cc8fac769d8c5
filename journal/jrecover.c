/* jrecover.c: recovery (moved from journal.c). */
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

int cmp_rec_item(const void *a, const void *b)
{
	const struct rec_item *x = a, *y = b;

	if (x->open != y->open)
		return y->open - x->open;
	return x->it->id < y->it->id ? -1 : x->it->id > y->it->id;
}

/* Phase 1: applies every record at or after P. */
int replay(struct journal *j, uint64_t P, struct recover_state *rs,
		  struct journal_recovery *rec)
{
	for (size_t s = 0; s < j->nseg; s++) {
		struct jreader rd;
		struct jrec r;
		const unsigned char *body;
		uint64_t off;
		int rc;

		if (j->segs[s].num < JPOS_SEG(P))
			continue;
		rc = open_seg_reader(j, j->segs[s].num, &rd);
		if (rc < 0) {
			fprintf(stderr, "journal: queue %s: segment %08u unreadable: %s\n",
				j->name, j->segs[s].num, tern_strerror(rc));
			if (rc == TERN_EVERSION)
				return rc;
			rec->corrupt_records++;
			continue;
		}
		if (j->segs[s].num == JPOS_SEG(P) && JPOS_OFF(P) > JSEG_HDR_SIZE)
			jreader_seek(&rd, JPOS_OFF(P));
		while ((rc = jreader_next(&rd, &off, &r, &body)) != JREAD_END) {
			uint64_t pos = JPOS(rd.seg, off);

			if (rc < 0) {
				jreader_close(&rd);
				return rc;
			}
			if (rc == JREAD_DAMAGE) {
				log_damage(j, &rd, rec);
				continue;
			}
			rec->records_replayed++;
			switch (r.type) {
			case JREC_ADD:
				if (r.id > j->max_id)
					j->max_id = r.id;
				if (r.rflags & JREC_F_MOVED) {
					if (jdead_put(&j->dead, r.aux) < 0)
						goto nomem;
					if (jmap_get(&rs->open, r.aux)) {
						jmap_del(&rs->open, r.aux);
						if (!jmap_put(&rs->open, pos))
							goto nomem;
					}
				} else {
					j->live_items++;
					j->live_bytes += r.ilen;
				}
				break;
			case JREC_REMOVE:
			case JREC_CONFIRM:
				if (r.aux >= rs->H && !jdead_has(&j->dead, r.aux)) {
					if (jdead_put(&j->dead, r.aux) < 0)
						goto nomem;
					if (j->live_items)
						j->live_items--;
					j->live_bytes -= r.ilen <= j->live_bytes ? r.ilen : j->live_bytes;
				}
				jmap_del(&rs->open, r.aux);
				break;
			case JREC_OPEN:
				if (!jmap_put(&rs->open, r.aux))
					goto nomem;
				break;
			case JREC_ABORT:
				jmap_del(&rs->open, r.aux);
				break;
			case JREC_FLUSH:
				jdead_clear(&j->dead);
				jmap_clear(&rs->open);
				j->live_items = j->live_bytes = 0;
				rs->H = pos + jrec_size(0);
				break;
			default:
				break;
			}
		}
		jreader_close(&rd);
		continue;
nomem:
		jreader_close(&rd);
		return TERN_ENOMEM;
	}
	return 0;
}

/* Phase 2: reads live items from H on into memory, up to max_memory_size. */
int load(struct journal *j, struct recover_state *rs, uint64_t P,
		struct journal_recovery *rec, struct rec_item **outv, size_t *outn)
{
	struct rec_item *v = NULL;
	size_t n = 0, cap = 0;
	uint64_t bytes = 0;
	int stop = 0, rc = 0;

	for (size_t s = 0; s < j->nseg && !stop; s++) {
		struct jreader rd;
		struct jrec r;
		const unsigned char *body;
		uint64_t off;

		if (j->segs[s].num < JPOS_SEG(rs->H))
			continue;
		if (open_seg_reader(j, j->segs[s].num, &rd) < 0)
			continue; /* reported by replay or before */
		if (j->segs[s].num == JPOS_SEG(rs->H) && JPOS_OFF(rs->H) > JSEG_HDR_SIZE)
			jreader_seek(&rd, JPOS_OFF(rs->H));
		while (!stop && (rc = jreader_next(&rd, &off, &r, &body)) != JREAD_END) {
			uint64_t pos = JPOS(rd.seg, off);
			struct item *it;

			if (rc < 0)
				break;
			if (rc == JREAD_DAMAGE) {
				/* damage at or after P was reported by replay() */
				if (JPOS(rd.seg, rd.dmg_off) < P)
					log_damage(j, &rd, rec);
				continue;
			}
			if (r.type != JREC_ADD || jdead_has(&j->dead, pos))
				continue;
			rc = 0;
			if (bytes + r.len > j->opts.max_memory_size) {
				j->rb_pos = pos;
				stop = 1;
				break;
			}
			it = item_new(r.len);
			if (!it || grow((void **)&v, &cap, n + 1, sizeof(*v)) < 0) {
				item_unref(it);
				rc = TERN_ENOMEM;
				break;
			}
			memcpy(it->data, body, r.len);
			it->id = r.id;
			it->flags = r.iflags;
			it->expiry_ms = r.expiry_ms;
			it->add_ms = r.add_ms;
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
	if (rc < 0) {
		for (size_t i = 0; i < n; i++)
			item_unref(v[i].it);
		free(v);
		return rc;
	}
	*outv = v;
	*outn = n;
	return 0;
}

int load_ckpt(struct journal *j, uint64_t *P, struct recover_state *rs)
{
	void *blob = NULL;
	size_t len = 0;
	const unsigned char *p;
	uint64_t nd, no;
	int rc = jcat_ckpt_get(j->env->cat, j->name, &blob, &len);

	if (rc == TERN_ENOTFOUND)
		return 0;
	if (rc < 0)
		return rc;
	p = blob;
	rc = 0;
	if (len < CK_WORDS * 8 || rd64(p + 8 * CK_MAGIC) != CKPT_MAGIC) {
		fprintf(stderr, "journal: queue %s: checkpoint unreadable; replaying the journal\n",
			j->name);
		goto out;
	}
	if (rd64(p + 8 * CK_VERSION) > CKPT_VERSION) {
		rc = TERN_EVERSION;
		goto out;
	}
	nd = rd64(p + 8 * CK_ND);
	no = rd64(p + 8 * CK_NO);
	if (len != (CK_WORDS + nd + no) * 8) {
		fprintf(stderr, "journal: queue %s: checkpoint truncated; replaying the journal\n",
			j->name);
		goto out;
	}
	*P = rd64(p + 8 * CK_P);
	rs->H = rd64(p + 8 * CK_H);
	j->max_id = rd64(p + 8 * CK_MAXID);
	j->live_items = rd64(p + 8 * CK_LIVE);
	j->live_bytes = rd64(p + 8 * CK_BYTES);
	for (uint64_t i = 0; i < nd; i++)
		if (jdead_put(&j->dead, rd64(p + 8 * (CK_WORDS + i))) < 0)
			rc = TERN_ENOMEM;
	for (uint64_t i = 0; i < no; i++)
		if (!jmap_put(&rs->open, rd64(p + 8 * (CK_WORDS + nd + i))))
			rc = TERN_ENOMEM;
out:
	free(blob);
	return rc;
}
