/*
 * tern-journal: inspect and verify tern's journals offline.  It refuses a
 * data directory a running ternd holds (the directory's lock, journal.h).
 *
 *   tern-journal dump   DATA_DIR [QUEUE]   every record, human-readable
 *   tern-journal verify DATA_DIR [QUEUE]   the catalog against the files
 *   tern-journal stat   DATA_DIR [QUEUE]   segments, live items and bytes
 *
 * Every command reads each queue the same way and reports what it finds:
 * verify lists the findings, dump and stat print them among their output.
 * A finding is benign (what a crash, a power cut or an interrupted
 * operation leaves, which the next start puts right, losing nothing the
 * sync mode promised to keep) or damage.
 *
 * Benign: a torn write (part of a write never synced: pages that never
 * reached the disk, or a record cut at a page boundary or at the end of
 * the file; the segment's records end there, as recovery reads them:
 * record.h, enum jread_result); a segment made and never written (its
 * header zeros, no records); dead segments before the checkpoint's oldest
 * live record (a crash between a checkpoint and their deletion); a delete
 * or a creation a crash interrupted; files that are not the journal's.
 * Damage: everything else: a record that fails its check without the
 * shape of a torn write (a flipped bit; recovery skips it); a segment that
 * is missing (the next one names it as the one written before it), out of
 * order (a header naming another segment, or a predecessor that does not
 * fit), truncated (a preallocated segment shorter than its header says),
 * unreadable, or with a damaged header; a checkpoint that fails its check;
 * a queue directory the catalog does not know (ternd does not serve it),
 * or a queue whose directory is missing while its checkpoint counts items.
 *
 * The live set is computed by replaying every segment on disk, not from the
 * checkpoint, so stat also cross-checks what recovery would find.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../journal/catalog.h"
#include "../journal/ckblob.h"
#include "../journal/jmap.h"
#include "../journal/journal.h"
#include "../journal/record.h"
#include "../lib/tern.h"

enum mode { DUMP, VERIFY, STAT };

/* Exit status, and the level of a finding. */
enum level { OK = 0, BENIGN = 1, DAMAGE = 2, TROUBLE = 3 };

struct qstat {
	uint64_t segments, disk_bytes, used_bytes, records, damage, benign;
	uint64_t live_items, live_bytes, open_items;
	int spare;
};

/* One queue being read. */
struct qscan {
	const char *q;
	enum mode mode;
	enum level level;
	struct qstat st;
};

__attribute__((format(printf, 3, 4)))
static void note(struct qscan *x, enum level lv, const char *fmt, ...)
{
	va_list ap;

	if (lv > x->level)
		x->level = lv;
	if (lv == DAMAGE)
		x->st.damage++;
	else
		x->st.benign++;
	printf("%s: %s", x->q, lv == DAMAGE ? "DAMAGE: " : "benign: ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: tern-journal dump|verify|stat DATA_DIR [QUEUE]\n"
		"       tern-journal -h|--help | --version\n"
		"Reads the journals of ternd's data directory (every queue, or QUEUE);\n"
		"it only reads, and refuses a directory a running ternd holds.\n"
		"  dump     every record of every segment, human-readable\n"
		"  verify   check the catalog against the segments and every record;\n"
		"           list what is found, benign or damage\n"
		"  stat     per queue: segments, disk and used bytes, records, live and\n"
		"           open items, damaged regions\n"
		"  -h, --help    this text\n"
		"      --version print the version\n"
		"Benign: what a crash, a power cut or an interrupted operation leaves\n"
		"and the next start puts right, losing nothing the sync mode promised\n"
		"(a torn write: part of a write never synced, where the segment's\n"
		"records end; a segment made and never written, dead segments not\n"
		"deleted yet, an interrupted delete).  Damage: anything else (a damaged record, a missing,\n"
		"truncated, out-of-order or unreadable segment, a checkpoint failing its\n"
		"checksum, a queue the catalog does not know).\n"
		"Exit status: 0 nothing found; 1 benign findings only; 2 damage found;\n"
		"3 a wrong command line, a bad queue name, or a data directory that\n"
		"cannot be read or that a running ternd holds.\n");
}

/* Sorted segment numbers of dir; *spare when spare.seg exists; other
 * files are noted.  -1 (errno) when dir cannot be read. */
static int list_segs(struct qscan *x, const char *dir, uint32_t **out, size_t *n)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	size_t cap = 0;

	*out = NULL;
	*n = 0;
	if (!d)
		return -1;
	while ((de = readdir(d))) {
		char *end;
		unsigned long v;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (!strcmp(de->d_name, "spare.seg")) {
			x->st.spare = 1;
			continue;
		}
		v = de->d_name[0] >= '0' && de->d_name[0] <= '9'
			    ? strtoul(de->d_name, &end, 10) : 0;
		if (!v || strcmp(end, ".seg") || v > UINT32_MAX) {
			if (x->mode == VERIFY)
				note(x, BENIGN, "%s is not a journal file (ignored)", de->d_name);
			continue;
		}
		if (*n == cap) {
			uint32_t *nb;

			cap = cap ? cap * 2 : 16;
			nb = realloc(*out, cap * sizeof(*nb));
			if (!nb) {
				closedir(d);
				errno = ENOMEM;
				return -1;
			}
			*out = nb;
		}
		(*out)[(*n)++] = (uint32_t)v;
	}
	closedir(d);
	if (*n)
		qsort(*out, *n, sizeof(**out), cmp_u32);
	return 0;
}

static void print_rec(uint64_t off, const struct jrec *r, const unsigned char *body)
{
	printf("  @%-10" PRIu64 " %-7s", off, jrec_type_name(r->type));
	switch (r->type) {
	case JREC_ADD:
		printf(" id=%" PRIu64 " len=%u flags=%u expiry_ms=%" PRId64 " add_ms=%" PRId64,
		       r->id, r->len, r->iflags, r->expiry_ms, r->add_ms);
		if (r->rflags & JREC_F_MOVED)
			printf(" moved-from=%u:%u", JPOS_SEG(r->aux), JPOS_OFF(r->aux));
		if (r->rflags & JREC_F_DELAYED)
			printf(" delayed"); /* add_ms is when it becomes visible */
		if (r->deliveries)
			printf(" deliveries=%u", r->deliveries);
		printf(" body=\"");
		for (uint32_t i = 0; i < r->len && i < 32; i++)
			putchar(body[i] >= 32 && body[i] < 127 ? body[i] : '.');
		printf("%s\"", r->len > 32 ? "..." : "");
		break;
	case JREC_REMOVE:
	case JREC_OPEN:
	case JREC_CONFIRM:
	case JREC_ABORT:
		printf(" id=%" PRIu64 " at=%u:%u", r->id, JPOS_SEG(r->aux), JPOS_OFF(r->aux));
		if (r->type == JREC_OPEN || r->type == JREC_ABORT)
			printf(" deliveries=%u", r->deliveries);
		break;
	case JREC_PAD:
		printf(" len=%u", r->len);
		break;
	default:
		break;
	}
	putchar('\n');
}

struct live {
	struct jmap dead, open;
	struct {
		uint64_t pos;
		uint32_t len;
	} *adds;
	size_t nadd, addcap;
};

/* What each record does to the live set (jrec_replay's hooks, on a struct
 * live): an ADD is live until a record names its position dead. */
static int live_add(void *arg, uint64_t pos, const struct jrec *r)
{
	struct live *lv = arg;

	if (lv->nadd == lv->addcap) {
		lv->addcap = lv->addcap ? lv->addcap * 2 : 1024;
		lv->adds = realloc(lv->adds, lv->addcap * sizeof(*lv->adds));
		if (!lv->adds) {
			fprintf(stderr, "tern-journal: out of memory\n");
			exit(TROUBLE);
		}
	}
	lv->adds[lv->nadd].pos = pos;
	lv->adds[lv->nadd++].len = r->len;
	return 0;
}

static int live_moved(void *arg, uint64_t pos, const struct jrec *r)
{
	struct live *lv = arg;

	jmap_put(&lv->dead, r->aux);
	if (jmap_get(&lv->open, r->aux)) {
		jmap_del(&lv->open, r->aux);
		jmap_put(&lv->open, pos);
	}
	return live_add(lv, pos, r);
}

static int live_gone(void *arg, uint64_t pos, const struct jrec *r)
{
	struct live *lv = arg;

	jmap_put(&lv->dead, r->aux);
	jmap_del(&lv->open, r->aux);
	return 0;
}

static int live_open(void *arg, uint64_t pos, const struct jrec *r)
{
	jmap_put(&((struct live *)arg)->open, r->aux);
	return 0;
}

static int live_abort(void *arg, uint64_t pos, const struct jrec *r)
{
	jmap_del(&((struct live *)arg)->open, r->aux);
	return 0;
}

static int live_flush(void *arg, uint64_t pos, const struct jrec *r)
{
	struct live *lv = arg;

	lv->nadd = 0;
	jmap_clear(&lv->dead);
	jmap_clear(&lv->open);
	return 0;
}

static const struct jreplay live_hooks = {
	live_add, live_moved, live_gone, live_open, live_abort, live_flush,
};

/* Where segment s stands in the chain of segments each naming the one
 * written before it (its header's prev), given the segment read before it
 * (before: 0 for the first one read). */
static void check_chain(struct qscan *x, uint32_t s, uint32_t prev, uint32_t before)
{
	if (!before)
		return; /* the ones before it are dead, and gone */
	if (!prev) {
		/* a header written before the field existed */
		if (s != before + 1)
			note(x, DAMAGE, "segments %08u to %08u are missing", before + 1, s - 1);
	} else if (prev >= s) {
		note(x, DAMAGE, "segment %08u is out of order: its header names %08u as the one "
		     "written before it", s, prev);
	} else if (prev > before) {
		note(x, DAMAGE, "segment %08u is missing (segment %08u was written after it)",
		     prev, s);
	} else if (prev < before) {
		note(x, DAMAGE, "segment %08u is out of order: segment %08u was written after "
		     "%08u, not after it", before, s, prev);
	}
}

/* Reads one segment's records (verify's checks, dump's lines, the live
 * set).  Returns 0, or -1 when it could not be read at all. */
static int read_segment(struct qscan *x, const char *dir, uint32_t s, struct live *lv,
			uint32_t *before)
{
	char path[4200];
	struct jreader rd;
	struct jrec r;
	const unsigned char *body;
	uint64_t off, end = JSEG_HDR_SIZE, records0 = x->st.records, damage0 = x->st.damage;
	int res, empty, torn = 0;

	snprintf(path, sizeof(path), "%s/%08u.seg", dir, s);
	res = jreader_open_as(&rd, path, s);
	switch (res) {
	case 0:
		break;
	case JREADER_HDR_EMPTY:
		break; /* judged below, by what it holds */
	case JREADER_HDR_DAMAGED:
		note(x, DAMAGE, "segment %08u: damaged header (its records are read as segment "
		     "%08u)", s, s);
		break;
	case TERN_ESYS:
		note(x, DAMAGE, "segment %08u: cannot be read: %s", s, strerror(errno));
		return -1;
	case TERN_ECORRUPT:
		note(x, DAMAGE, "segment %08u is out of order: its header names another segment",
		     s);
		return -1;
	default:
		note(x, DAMAGE, "segment %08u: %s", s, tern_strerror(res));
		return -1;
	}
	empty = res == JREADER_HDR_EMPTY;
	x->st.segments++;
	x->st.disk_bytes += rd.fsize;
	if (res == 0) {
		if ((rd.flags & JSEG_F_PREALLOC) && rd.fsize < rd.seg_size)
			note(x, DAMAGE, "segment %08u is truncated: %" PRIu64 " of its %" PRIu64
			     " bytes", s, rd.fsize, rd.seg_size);
		check_chain(x, s, rd.prev, *before);
	} else if (*before && s != *before + 1) {
		check_chain(x, s, 0, *before);
	}
	*before = s;
	if (x->mode == DUMP)
		printf(" segment %08u: %" PRIu64 " bytes\n", s, rd.fsize);
	while ((res = jreader_next(&rd, &off, &r, &body)) != JREAD_END) {
		if (res < 0) {
			note(x, DAMAGE, "segment %08u: read error: %s", s, strerror(errno));
			break;
		}
		if (res == JREAD_TORN && rd.dmg_off == 0) {
			torn = 1;
			note(x, BENIGN, "segment %08u: torn write: its header block never reached"
			     " the disk, and the records after it were never synced (not read)",
			     s);
			continue;
		}
		if (res == JREAD_TORN) {
			/* the shape a power cut or crash leaves of a write
			 * never synced: the segment's records end there */
			torn = 1;
			note(x, BENIGN, "segment %08u offset %" PRIu64 ": torn write (%" PRIu64
			     " bytes): part of a write never synced, after the last acknowledged"
			     " record; the segment's records end there", s, rd.dmg_off,
			     rd.dmg_len);
			continue;
		}
		if (res == JREAD_DAMAGE) {
			note(x, DAMAGE, "segment %08u offset %" PRIu64 ": damaged (%" PRIu64
			     " bytes)", s, rd.dmg_off, rd.dmg_len);
			continue;
		}
		x->st.records++;
		end = off + jrec_size(r.len);
		if (x->mode == DUMP)
			print_rec(off, &r, body);
		jrec_replay(&r, JPOS(rd.seg, off), &live_hooks, lv);
	}
	/* a segment made and not yet written when a crash came holds
	 * nothing: benign (a header lost over records is a torn write) */
	if (empty && !torn && x->st.records == records0 && x->st.damage == damage0)
		note(x, BENIGN, "segment %08u was made and never written (a crash right after)",
		     s);
	x->st.used_bytes += end;
	jreader_close(&rd);
	return 0;
}

/* The queue's catalog entry and checkpoint.  state: JCAT_* or -1 (none). */
struct qcat {
	int state;
	int have_ckpt;
	enum ckpt_check ck; /* when have_ckpt */
	const char *why;    /* ck == CKPT_BAD: why */
	struct ckpt_view v; /* its scalars (the blob is not kept) */
};

static void read_catalog(struct jcat *cat, const char *q, struct qcat *qc)
{
	void *blob = NULL;
	size_t len = 0;

	qc->state = -1;
	qc->have_ckpt = 0;
	if (!cat)
		return;
	if (jcat_queue_get(cat, q, &qc->state) < 0)
		qc->state = -1;
	if (jcat_ckpt_get(cat, q, &blob, &len) == 0) {
		qc->have_ckpt = 1;
		qc->why = "";
		memset(&qc->v, 0, sizeof(qc->v));
		qc->ck = ckblob_check(blob, len, &qc->v, &qc->why);
		qc->v.d = qc->v.o = qc->v.m = NULL;
		free(blob);
	}
}

static enum level do_queue(const char *data_dir, const char *q, enum mode mode,
			   struct jcat *cat, struct qstat *out)
{
	char dir[4096];
	uint32_t *segs, hseg = 0, before = 0;
	size_t nseg;
	struct live lv;
	struct qcat qc;
	struct qscan x = { q, mode, OK, { 0 } };
	struct stat st;

	memset(&lv, 0, sizeof(lv));
	read_catalog(cat, q, &qc);
	snprintf(dir, sizeof(dir), "%s/queues/%s", data_dir, q);
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		if (qc.state == JCAT_DELETING)
			note(&x, BENIGN, "a delete was interrupted: ternd finishes it at the next"
			     " start");
		else if (qc.have_ckpt && qc.ck == CKPT_OK && qc.v.live_items)
			note(&x, DAMAGE, "its directory is missing, and its checkpoint counts %"
			     PRIu64 " items", qc.v.live_items);
		else if (qc.state == JCAT_ACTIVE)
			note(&x, BENIGN, "its directory is missing (it holds nothing): ternd makes"
			     " it at the next start");
		*out = x.st;
		return x.level;
	}
	if (cat && qc.state < 0)
		note(&x, DAMAGE, "not in the catalog: ternd does not serve it (a client naming"
		     " the queue again makes ternd adopt it)");
	if (qc.state == JCAT_DELETING) {
		/* (what is left of it is removed whole at the next start: a
		 * segment the delete already removed is no damage) */
		note(&x, BENIGN, "a delete was interrupted: ternd finishes it at the next start");
		*out = x.st;
		return x.level;
	}
	if (qc.have_ckpt && qc.ck == CKPT_BAD)
		note(&x, DAMAGE, "its checkpoint is %s: ternd ignores it and replays every"
		     " segment", qc.why);
	else if (qc.have_ckpt && qc.ck == CKPT_NEWER)
		note(&x, DAMAGE, "its checkpoint is of version %" PRIu64 ", newer than this"
		     " tool reads", qc.v.version);
	else if (qc.have_ckpt)
		hseg = JPOS_SEG(qc.v.H);
	if (list_segs(&x, dir, &segs, &nseg) < 0) {
		note(&x, DAMAGE, "%s: %s", dir, strerror(errno));
		*out = x.st;
		return x.level;
	}
	if (mode == DUMP)
		printf("queue %s: %zu segments%s\n", q, nseg, x.st.spare ? " (+ spare)" : "");
	for (size_t i = 0; i < nseg; i++) {
		if (segs[i] < hseg) {
			if (mode == VERIFY)
				note(&x, BENIGN, "segment %08u is dead (before the checkpoint's"
				     " oldest live record): deleted at the next start", segs[i]);
			continue;
		}
		if (!before && hseg && segs[i] > hseg && qc.v.live_items) {
			/* the oldest live record's segment: there, or never
			 * written (given up for want of room)? the first one
			 * read names the one written before it */
			struct jreader rd;
			char path[4200];

			snprintf(path, sizeof(path), "%s/%08u.seg", dir, segs[i]);
			if (jreader_open_as(&rd, path, segs[i]) == 0) {
				if (rd.prev >= hseg || (!rd.prev && segs[i] > hseg))
					note(&x, DAMAGE, "segment %08u, which holds the checkpoint's"
					     " oldest live record, is missing", hseg);
				jreader_close(&rd);
			}
		}
		read_segment(&x, dir, segs[i], &lv, &before);
	}
	for (size_t i = 0; i < lv.nadd; i++) {
		if (jmap_get(&lv.dead, lv.adds[i].pos))
			continue;
		x.st.live_items++;
		x.st.live_bytes += lv.adds[i].len;
		if (jmap_get(&lv.open, lv.adds[i].pos))
			x.st.open_items++;
	}
	if (mode == STAT)
		printf("queue %s: segments %" PRIu64 "%s, disk %" PRIu64 " bytes, used %" PRIu64
		       " bytes, records %" PRIu64 ", live items %" PRIu64 " (%" PRIu64
		       " bytes), open %" PRIu64 ", damaged regions %" PRIu64 "\n",
		       q, x.st.segments, x.st.spare ? " (+1 spare)" : "", x.st.disk_bytes,
		       x.st.used_bytes, x.st.records, x.st.live_items, x.st.live_bytes,
		       x.st.open_items, x.st.damage);
	free(lv.adds);
	free(segs);
	jmap_free(&lv.dead);
	jmap_free(&lv.open);
	*out = x.st;
	return x.level;
}

/*
 * Takes a shared lock on the data directory's lock file (journal.h), held
 * until exit: ternd holds it exclusively while it runs, so this refuses to
 * read a directory a server is writing (its segments, checkpoints and
 * freed files change under the reader, which would report damage that is
 * not there, or miss some that is).  A directory without a lock file (a
 * copy, or never served) is read as it is.  Returns 0, or -1 after the
 * message.
 */
static int lock_data_dir(const char *data_dir)
{
	char path[4200];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", data_dir, JENV_LOCK_NAME);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : (fprintf(stderr, "tern-journal: %s: %s\n", path,
							strerror(errno)), -1);
	if (flock(fd, LOCK_SH | LOCK_NB) < 0) {
		if (errno == EWOULDBLOCK)
			fprintf(stderr, "tern-journal: %s is in use by a running ternd (pid %ld):"
				" stop it first, or read a copy taken as docs/OPERATIONS.md"
				" describes\n", data_dir, jenv_lock_holder(fd));
		else
			fprintf(stderr, "tern-journal: cannot lock %s: %s\n", path, strerror(errno));
		close(fd);
		return -1;
	}
	return 0; /* the descriptor stays open: the lock lasts until exit */
}

/* The catalog, if the data directory has one (NULL otherwise). */
static struct jcat *open_catalog(const char *data_dir)
{
	char path[4200];
	struct jcat *cat = NULL;
	struct stat st;

	snprintf(path, sizeof(path), "%s/catalog/data.mdb", data_dir);
	if (stat(path, &st) < 0)
		return NULL;
	snprintf(path, sizeof(path), "%s/catalog", data_dir);
	if (jcat_open(path, 1, &cat) < 0)
		return NULL;
	return cat;
}

struct names {
	char **v;
	size_t n, cap;
};

static void names_add(struct names *ns, const char *name)
{
	for (size_t i = 0; i < ns->n; i++)
		if (!strcmp(ns->v[i], name))
			return;
	if (ns->n == ns->cap) {
		ns->cap = ns->cap ? ns->cap * 2 : 64;
		ns->v = realloc(ns->v, ns->cap * sizeof(*ns->v));
	}
	if (!ns->v || !(ns->v[ns->n] = strdup(name))) {
		fprintf(stderr, "tern-journal: out of memory\n");
		exit(TROUBLE);
	}
	ns->n++;
}

static void catalog_name(void *arg, const char *name, int state)
{
	names_add(arg, name);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
	enum mode mode;
	enum level worst = OK;
	struct qstat st;
	struct names ns = { NULL, 0, 0 };
	struct jcat *cat;
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	/* Options only before the command: a queue or directory named like
	 * an option is still taken as one after it. */
	while ((ch = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h':
			usage(stdout);
			return OK;
		case 'V':
			printf("tern-journal %s\n", TERN_VERSION);
			return OK;
		default:
			usage(stderr);
			return TROUBLE;
		}
	}
	argc -= optind - 1;
	argv += optind - 1;
	if (argc < 3 || argc > 4) {
		usage(stderr);
		return TROUBLE;
	}
	if (!strcmp(argv[1], "dump"))
		mode = DUMP;
	else if (!strcmp(argv[1], "verify"))
		mode = VERIFY;
	else if (!strcmp(argv[1], "stat"))
		mode = STAT;
	else {
		usage(stderr);
		return TROUBLE;
	}
	if (argc == 4 && !tern_name_valid(argv[3], strlen(argv[3]))) {
		fprintf(stderr, "tern-journal: bad queue name: %s\n", argv[3]);
		return TROUBLE;
	}
	if (lock_data_dir(argv[2]) < 0)
		return TROUBLE;
	cat = open_catalog(argv[2]);
	if (argc == 4) {
		char qdir[4200];
		struct stat sb;
		int state;

		snprintf(qdir, sizeof(qdir), "%s/queues/%s", argv[2], argv[3]);
		if (stat(qdir, &sb) < 0 && (!cat || jcat_queue_get(cat, argv[3], &state) < 0)) {
			fprintf(stderr, "%s: %s\n", qdir, strerror(errno));
			jcat_close(cat);
			return TROUBLE;
		}
		names_add(&ns, argv[3]);
	} else {
		char qdir[4200];
		DIR *d;
		struct dirent *de;

		snprintf(qdir, sizeof(qdir), "%s/queues", argv[2]);
		d = opendir(qdir);
		if (!d && errno != ENOENT) {
			fprintf(stderr, "tern-journal: %s: %s\n", qdir, strerror(errno));
			jcat_close(cat);
			return TROUBLE;
		}
		/* (none: a data directory made by a ternd that a crash or power
		 * cut stopped before it synced it; the next start makes it,
		 * and the catalog's queues are judged one by one below) */
		if (!d && mode == VERIFY) {
			printf("benign: %s is missing (a start cut short: ternd makes it)\n", qdir);
			worst = BENIGN;
		}
		while (d && (de = readdir(d)))
			if (tern_name_valid(de->d_name, strlen(de->d_name)))
				names_add(&ns, de->d_name);
		if (d)
			closedir(d);
		/* and the queues the catalog knows without a directory */
		if (cat)
			jcat_list(cat, catalog_name, &ns);
		else if (ns.n && mode == VERIFY)
			printf("DAMAGE: %s/catalog is missing: ternd serves none of these queues\n",
			       argv[2]);
		if (!cat && ns.n)
			worst = DAMAGE;
		if (ns.n)
			qsort(ns.v, ns.n, sizeof(*ns.v), cmp_str);
	}
	for (size_t i = 0; i < ns.n; i++) {
		enum level lv = do_queue(argv[2], ns.v[i], mode, cat, &st);

		if (lv > worst)
			worst = lv;
		free(ns.v[i]);
	}
	free(ns.v);
	jcat_close(cat);
	if (mode == VERIFY)
		printf("%zu queue%s checked: %s\n", ns.n, ns.n == 1 ? "" : "s",
		       worst == DAMAGE ? "DAMAGE FOUND" : worst == BENIGN ? "ok (benign findings)"
									  : "ok");
	return worst;
}
