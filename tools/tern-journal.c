/*
 * tern-journal: inspect tern's journals offline (or beside a running
 * ternd: it only reads).
 *
 *   tern-journal dump   DATA_DIR [QUEUE]   every record, human-readable
 *   tern-journal verify DATA_DIR [QUEUE]   exit 1 on any damage, listing it
 *   tern-journal stat   DATA_DIR [QUEUE]   segments, live items and bytes
 *
 * The live set is computed by replaying every segment on disk (not from the
 * LMDB checkpoint), so stat also cross-checks what recovery would find.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../journal/jmap.h"
#include "../journal/record.h"
#include "../lib/tern.h"

enum mode { DUMP, VERIFY, STAT };

struct qstat {
	uint64_t segments, disk_bytes, used_bytes, records, damage;
	uint64_t live_items, live_bytes, open_items;
	int spare;
};

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
		"safe beside a running ternd: it only reads.\n"
		"  dump     every record of every segment, human-readable\n"
		"  verify   check every record; list the damage; exit 1 if any\n"
		"  stat     per queue: segments, disk and used bytes, records, live and\n"
		"           open items, damaged regions\n"
		"  -h, --help    this text\n"
		"      --version print the version\n"
		"Exit status: 0 ok, 1 damage found (or a queue unreadable), 2 usage or\n"
		"data directory errors.\n");
}

static int list_segs(const char *dir, uint32_t **out, size_t *n, int *spare)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	size_t cap = 0;

	*out = NULL;
	*n = 0;
	*spare = 0;
	if (!d)
		return -1;
	while ((de = readdir(d))) {
		char *end;
		unsigned long v;

		if (!strcmp(de->d_name, "spare.seg")) {
			*spare = 1;
			continue;
		}
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		v = strtoul(de->d_name, &end, 10);
		if (strcmp(end, ".seg") || v == 0 || v > UINT32_MAX)
			continue;
		if (*n == cap) {
			uint32_t *nb;

			cap = cap ? cap * 2 : 16;
			nb = realloc(*out, cap * sizeof(*nb));
			if (!nb) {
				closedir(d);
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

static int do_queue(const char *data_dir, const char *q, enum mode mode, struct qstat *st)
{
	char dir[4096], path[4200];
	uint32_t *segs;
	size_t nseg;
	struct jmap dead = { 0 }, open = { 0 };
	struct {
		uint64_t pos;
		uint32_t len;
	} *adds = NULL;
	size_t nadd = 0, addcap = 0;
	int rc = 0;

	memset(st, 0, sizeof(*st));
	snprintf(dir, sizeof(dir), "%s/queues/%s", data_dir, q);
	if (list_segs(dir, &segs, &nseg, &st->spare) < 0) {
		fprintf(stderr, "%s: %s\n", dir, strerror(errno));
		return 1;
	}
	if (mode == DUMP)
		printf("queue %s: %zu segments%s\n", q, nseg, st->spare ? " (+ spare)" : "");
	for (size_t s = 0; s < nseg; s++) {
		struct jreader rd;
		struct jrec r;
		const unsigned char *body;
		uint64_t off, end = JSEG_HDR_SIZE;
		int res;

		snprintf(path, sizeof(path), "%s/%08u.seg", dir, segs[s]);
		res = jreader_open(&rd, path);
		if (res < 0) {
			printf("%s: segment %08u: unreadable header: %s\n", q, segs[s],
			       tern_strerror(res));
			st->damage++;
			continue;
		}
		st->segments++;
		st->disk_bytes += rd.fsize;
		if (rd.seg != segs[s]) {
			printf("%s: segment %08u: header says segment %u\n", q, segs[s], rd.seg);
			st->damage++;
		}
		if (mode == DUMP)
			printf(" segment %08u: %" PRIu64 " bytes\n", segs[s], rd.fsize);
		while ((res = jreader_next(&rd, &off, &r, &body)) != JREAD_END) {
			uint64_t pos;

			if (res < 0) {
				printf("%s: segment %08u: read error: %s\n", q, segs[s], strerror(errno));
				st->damage++;
				break;
			}
			if (res == JREAD_DAMAGE) {
				printf("%s: segment %08u offset %" PRIu64 ": damaged (%" PRIu64
				       " bytes)\n",
				       q, segs[s], rd.dmg_off, rd.dmg_len);
				st->damage++;
				continue;
			}
			pos = JPOS(rd.seg, off);
			st->records++;
			end = off + jrec_size(r.len);
			if (mode == DUMP)
				print_rec(off, &r, body);
			switch (r.type) {
			case JREC_ADD:
				if (r.rflags & JREC_F_MOVED) {
					jmap_put(&dead, r.aux);
					if (jmap_get(&open, r.aux)) {
						jmap_del(&open, r.aux);
						jmap_put(&open, pos);
					}
				}
				if (nadd == addcap) {
					addcap = addcap ? addcap * 2 : 1024;
					adds = realloc(adds, addcap * sizeof(*adds));
					if (!adds) {
						fprintf(stderr, "out of memory\n");
						exit(1);
					}
				}
				adds[nadd].pos = pos;
				adds[nadd++].len = r.len;
				break;
			case JREC_REMOVE:
			case JREC_CONFIRM:
				jmap_put(&dead, r.aux);
				jmap_del(&open, r.aux);
				break;
			case JREC_OPEN:
				jmap_put(&open, r.aux);
				break;
			case JREC_ABORT:
				jmap_del(&open, r.aux);
				break;
			case JREC_FLUSH:
				nadd = 0;
				jmap_clear(&dead);
				jmap_clear(&open);
				break;
			default:
				break;
			}
		}
		st->used_bytes += end;
		jreader_close(&rd);
	}
	for (size_t i = 0; i < nadd; i++) {
		if (jmap_get(&dead, adds[i].pos))
			continue;
		st->live_items++;
		st->live_bytes += adds[i].len;
		if (jmap_get(&open, adds[i].pos))
			st->open_items++;
	}
	if (mode == STAT)
		printf("queue %s: segments %" PRIu64 "%s, disk %" PRIu64 " bytes, used %" PRIu64
		       " bytes, records %" PRIu64 ", live items %" PRIu64 " (%" PRIu64
		       " bytes), open %" PRIu64 ", damaged regions %" PRIu64 "\n",
		       q, st->segments, st->spare ? " (+1 spare)" : "", st->disk_bytes,
		       st->used_bytes, st->records, st->live_items, st->live_bytes,
		       st->open_items, st->damage);
	if (st->damage)
		rc = 1;
	free(adds);
	free(segs);
	jmap_free(&dead);
	jmap_free(&open);
	return rc;
}

int main(int argc, char **argv)
{
	enum mode mode;
	char qdir[4096];
	int bad = 0, nq = 0;
	struct qstat st;
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
			return 0;
		case 'V':
			printf("tern-journal %s\n", TERN_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	argc -= optind - 1;
	argv += optind - 1;
	if (argc < 3 || argc > 4) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "dump"))
		mode = DUMP;
	else if (!strcmp(argv[1], "verify"))
		mode = VERIFY;
	else if (!strcmp(argv[1], "stat"))
		mode = STAT;
	else {
		usage(stderr);
		return 2;
	}
	if (argc == 4) {
		if (!tern_name_valid(argv[3], strlen(argv[3]))) {
			fprintf(stderr, "tern-journal: bad queue name: %s\n", argv[3]);
			return 2;
		}
		bad |= do_queue(argv[2], argv[3], mode, &st);
		nq = 1;
	} else {
		DIR *d;
		struct dirent *de;

		snprintf(qdir, sizeof(qdir), "%s/queues", argv[2]);
		d = opendir(qdir);
		if (!d) {
			fprintf(stderr, "tern-journal: %s: %s\n", qdir, strerror(errno));
			return 2;
		}
		while ((de = readdir(d))) {
			if (!tern_name_valid(de->d_name, strlen(de->d_name)))
				continue;
			bad |= do_queue(argv[2], de->d_name, mode, &st);
			nq++;
		}
		closedir(d);
	}
	if (mode == VERIFY)
		printf("%d queue%s checked: %s\n", nq, nq == 1 ? "" : "s",
		       bad ? "DAMAGE FOUND" : "ok");
	return bad ? 1 : 0;
}
