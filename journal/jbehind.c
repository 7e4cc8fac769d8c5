/* jbehind.c: read-behind (moved from journal.c). */
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

void bp_pop_written(struct journal *j)
{
	while (j->bp_n && j->bp[j->bp_head].pos < j->written_pos) {
		/* the record is in the file now: read-behind reads it there */
		item_unref(j->bp[j->bp_head].it);
		j->bp[j->bp_head].it = NULL;
		j->bp_head = (j->bp_head + 1) % j->bp_cap;
		j->bp_n--;
	}
}

/* Makes room for one more entry in the read-behind pending ring. */
int bp_reserve(struct journal *j)
{
	size_t nc;
	struct bpend *nb;

	if (j->bp_n < j->bp_cap)
		return 0;
	nc = j->bp_cap ? j->bp_cap * 2 : 64;
	nb = malloc(nc * sizeof(*nb));
	if (!nb)
		return TERN_ENOMEM;
	for (size_t i = 0; i < j->bp_n; i++)
		nb[i] = j->bp[(j->bp_head + i) % j->bp_cap];
	free(j->bp);
	j->bp = nb;
	j->bp_cap = nc;
	j->bp_head = 0;
	return 0;
}

static void behind_took(struct journal *j, struct item *it, uint64_t pos)
{
	struct jent *e = jmap_put(&j->idx, it->id);

	if (e) {
		e->pos = pos;
		e->len = it->len;
		e->flags = 0;
	}
	j->behind_items--;
	j->behind_bytes -= it->len <= j->behind_bytes ? it->len : j->behind_bytes;
}

int journal_read_behind(struct journal *j, struct item **out)
{
	*out = NULL;
	while (j->behind_items) {
		struct jrec r;
		const unsigned char *body;
		uint64_t off;
		uint32_t seg = JPOS_SEG(j->rb_pos);
		int rc;

		if (j->rb_pos >= j->written_pos) {
			struct bpend *p;

			/* not in the file yet: the pending batch holds it */
			if (!j->bp_n) {
				fprintf(stderr, "journal: queue %s: %" PRIu64
						" behind items missing from the journal\n",
					j->name, j->behind_items);
				j->behind_items = j->behind_bytes = 0;
				break;
			}
			p = &j->bp[j->bp_head];
			*out = p->it;
			p->it = NULL;
			j->rb_pos = p->pos + jrec_size((*out)->len);
			behind_took(j, *out, p->pos);
			j->bp_head = (j->bp_head + 1) % j->bp_cap;
			j->bp_n--;
			return 0;
		}
		if (!j->rb_open || j->rb.seg != seg) {
			if (j->rb_open)
				jreader_close(&j->rb);
			j->rb_open = 0;
			rc = open_seg_reader(j, seg, &j->rb);
			if (rc < 0) {
				uint32_t nx = next_seg_after(j, seg);

				fprintf(stderr, "journal: queue %s: read-behind: segment %08u: %s\n",
					j->name, seg, tern_strerror(rc));
				j->corrupt_seen++;
				j->rb_pos = nx ? JPOS(nx, JSEG_HDR_SIZE) : j->written_pos;
				continue;
			}
			j->rb_open = 1;
			j->rb_clipped = 0;
		}
		if (seg == JPOS_SEG(j->written_pos)) {
			j->rb.fsize = JPOS_OFF(j->written_pos); /* only what is written */
			j->rb_clipped = 1;
		} else if (j->rb_clipped) {
			if (jreader_refresh(&j->rb) < 0)
				return TERN_ESYS;
			j->rb_clipped = 0;
		}
		if (j->rb.off != JPOS_OFF(j->rb_pos) || j->rb.done)
			jreader_seek(&j->rb, JPOS_OFF(j->rb_pos));
		rc = jreader_next(&j->rb, &off, &r, &body);
		if (rc < 0)
			return rc;
		if (rc == JREAD_END) {
			uint32_t nx = next_seg_after(j, seg);

			if (seg < JPOS_SEG(j->written_pos) && nx)
				j->rb_pos = JPOS(nx, JSEG_HDR_SIZE);
			else
				j->rb_pos = j->written_pos;
			continue;
		}
		if (rc == JREAD_DAMAGE) {
			log_damage(j, &j->rb, NULL);
			j->corrupt_seen++;
			j->rb_pos = JPOS(seg, j->rb.off);
			if (j->rb.done) {
				uint32_t nx = next_seg_after(j, seg);

				j->rb_pos = nx ? JPOS(nx, JSEG_HDR_SIZE) : j->written_pos;
			}
			continue;
		}
		j->rb_pos = JPOS(seg, j->rb.off);
		if (r.type == JREC_ADD && !jdead_has(&j->dead, JPOS(seg, off)) &&
		    !jmap_get(&j->idx, r.id)) {
			struct item *it = item_new(r.len);

			if (!it)
				return TERN_ENOMEM;
			memcpy(it->data, body, r.len);
			it->id = r.id;
			it->flags = r.iflags;
			it->expiry_ms = r.expiry_ms;
			it->add_ms = r.add_ms;
			behind_took(j, it, JPOS(seg, off));
			*out = it;
			return 0;
		}
	}
	if (!j->behind_items && j->rb_open) {
		jreader_close(&j->rb);
		j->rb_open = 0;
	}
	return 0;
}
