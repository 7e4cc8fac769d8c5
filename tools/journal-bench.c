/*
 * journal-bench.c: the disk experiment behind tern's journal design, to be
 * run on the operator's own machine.
 *
 * DESIGN
 * tern's journal (docs/JOURNAL.md) rests on four measurements:
 *   1. batch     one record per sync is bounded by the disk's flush rate;
 *                writing K records and syncing once (group commit) is not.
 *   2. prealloc  syncing into a growing file, or into a fallocate()d one
 *                (unwritten extents), also commits file-system metadata on
 *                every flush; a zero-filled file does not.
 *   3. method    fdatasync after write, O_DSYNC writes, or O_DIRECT|O_DSYNC
 *                writes (and, as a ceiling, no sync at all).
 *   4. align     synced writes that start on a 4 KiB boundary versus the
 *                same writes shifted by 24 bytes.
 * and, when asked for (-g cpu; not in the default set), on what a record
 * costs the CPU rather than the disk:
 *   5. cpu       records written back to back into a fallocate()d file
 *                through the page cache, up to 64 KiB of them per write
 *                (writeback started behind every 8 MiB, fdatasync every
 *                100 ms, as the interval mode does), against the same
 *                records copied into a 1 MiB aligned buffer and written
 *                with O_DIRECT; then every record read back, 1 MiB at a
 *                time (through the page cache, or with O_DIRECT) and
 *                copied out of the buffer.  The figure is the process's
 *                user + system CPU per record (getrusage): what the page
 *                cache costs a journal, which on a VM whose new memory is
 *                dear can exceed all else a server does with a record.
 * Each case writes batches sequentially into a fresh file in the directory
 * given by -d and times every write(+sync).  Every batch occupies a whole
 * number of 4 KiB blocks (K records, zero-padded), as tern's journal starts
 * every batch on a 4 KiB boundary; the unaligned layout writes the same
 * bytes 24 bytes further on.
 *
 * A zero-filled file is written circularly (at most 32 MiB, or -f if
 * smaller), as tern reuses a segment once it is consumed: every block was
 * written once during preparation, which is the point.  A growing or
 * fallocate()d file is never wrapped, since rewriting would measure
 * already-allocated blocks; such a case also stops when its -f bytes are
 * used (default 256 MiB; the file costs nothing to prepare).
 *
 * Every loop is bounded: a case stops at the first of -t seconds, -n syncs,
 * or (grow/fallocate) the end of the test file.  The test file and, when this
 * program created it, the directory are removed at the end (also after
 * SIGINT/SIGTERM, which only end the current case early).
 *
 * Standalone on purpose (libc + libm only): it must build and run on a
 * machine where tern's dependencies are not installed.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#define BLOCK 4096u           /* batch alignment and O_DIRECT alignment */
#define UNALIGNED_SHIFT 24u   /* as in the classic aligned-vs-unaligned test */
#define ZERO_CHUNK (1u << 20) /* zero-fill write size */
#define ZERO_FILE_MAX (32ull << 20) /* zero-filled files are reused circularly */

enum file_alloc { ALLOC_GROW, ALLOC_FALLOCATE, ALLOC_ZERO };
enum sync_method { METHOD_FDATASYNC, METHOD_ODSYNC, METHOD_ODIRECT, METHOD_NOSYNC };

static const char *const alloc_names[] = { "grow", "fallocate", "zero" };
static const char *const method_names[] = { "fdatasync", "odsync", "odirect", "nosync" };

struct bench_case {
	const char *group;
	enum file_alloc alloc;
	enum sync_method method;
	unsigned k;        /* records per sync */
	int unaligned;     /* batches start 24 bytes past a 4 KiB boundary */
};

struct bench_result {
	int done;          /* measured (or failed) already; reused for duplicates */
	char status[64];   /* "ok" or why there are no figures */
	uint64_t syncs;
	uint64_t records;
	double secs;
	double p50_ms, p99_ms, max_ms;
};

struct bench_opts {
	const char *dir;
	size_t record_size;
	double seconds;
	uint64_t max_syncs;
	uint64_t file_size;
	int csv;
	unsigned repeat;   /* runs per case; the median run (by records/s) is shown */
	unsigned groups;   /* bit set of GROUP_* */
};

#define GROUP_BATCH (1u << 0)
#define GROUP_PREALLOC (1u << 1)
#define GROUP_METHOD (1u << 2)
#define GROUP_ALIGN (1u << 3)
#define GROUP_CPU (1u << 4)
#define GROUPS_DEFAULT (GROUP_BATCH | GROUP_PREALLOC | GROUP_METHOD | GROUP_ALIGN)

/* The cpu experiment (group cpu). */
#define CPU_BATCH (64u << 10)       /* buffered: records written together */
#define CPU_STAGE (1u << 20)        /* O_DIRECT buffer; reads of 1 MiB */
#define CPU_WRITEBACK (8u << 20)    /* buffered: writeback started behind every 8 MiB */
#define CPU_SYNC_S 0.1              /* fdatasync every 100 ms, both methods */
#define CPU_MAX_S 60.0              /* a write phase stops after this long */
static const char *const cpu_method_names[] = { "buffered", "odirect" };

struct cpu_result {
	char status[64];   /* "ok" or why there are no figures */
	uint64_t records;  /* written, and read back */
	double w_cpu, w_secs, r_cpu, r_secs;
};

/*
 * The cases, in the order they are printed.  The same configuration can
 * appear in several groups (zero + fdatasync + K=1 is the reference point of
 * three of them); it is measured once and its figures reused.
 */
static const unsigned default_batch_k[] = { 1, 8, 64, 512 };
#define MAX_BATCH_K 16

/* Every case but the batch group, whose K values come from -k and methods from -m. */
static const struct bench_case fixed_cases[] = {
	{ "prealloc", ALLOC_GROW, METHOD_FDATASYNC, 1, 0 },
	{ "prealloc", ALLOC_FALLOCATE, METHOD_FDATASYNC, 1, 0 },
	{ "prealloc", ALLOC_ZERO, METHOD_FDATASYNC, 1, 0 },
	{ "prealloc", ALLOC_GROW, METHOD_FDATASYNC, 64, 0 },
	{ "prealloc", ALLOC_FALLOCATE, METHOD_FDATASYNC, 64, 0 },
	{ "prealloc", ALLOC_ZERO, METHOD_FDATASYNC, 64, 0 },
	{ "method", ALLOC_ZERO, METHOD_FDATASYNC, 1, 0 },
	{ "method", ALLOC_ZERO, METHOD_ODSYNC, 1, 0 },
	{ "method", ALLOC_ZERO, METHOD_ODIRECT, 1, 0 },
	{ "method", ALLOC_ZERO, METHOD_FDATASYNC, 64, 0 },
	{ "method", ALLOC_ZERO, METHOD_ODSYNC, 64, 0 },
	{ "method", ALLOC_ZERO, METHOD_ODIRECT, 64, 0 },
	{ "method", ALLOC_ZERO, METHOD_NOSYNC, 64, 0 },
	{ "align", ALLOC_ZERO, METHOD_FDATASYNC, 8, 0 },
	{ "align", ALLOC_ZERO, METHOD_FDATASYNC, 8, 1 },
	{ "align", ALLOC_ZERO, METHOD_ODSYNC, 8, 0 },
	{ "align", ALLOC_ZERO, METHOD_ODSYNC, 8, 1 },
	{ "align", ALLOC_ZERO, METHOD_FDATASYNC, 64, 0 },
	{ "align", ALLOC_ZERO, METHOD_FDATASYNC, 64, 1 },
};
#define NFIXED (sizeof(fixed_cases) / sizeof(fixed_cases[0]))
#define MAX_BATCH_METHODS 4
#define MAX_CASES (MAX_BATCH_K * MAX_BATCH_METHODS + NFIXED)

/* Set by SIGINT/SIGTERM: the running case stops, the rest are skipped, and
 * the test file is still removed. */
static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static unsigned group_bit(const char *name)
{
	if (strcmp(name, "batch") == 0)
		return GROUP_BATCH;
	if (strcmp(name, "prealloc") == 0)
		return GROUP_PREALLOC;
	if (strcmp(name, "method") == 0)
		return GROUP_METHOD;
	if (strcmp(name, "align") == 0)
		return GROUP_ALIGN;
	if (strcmp(name, "cpu") == 0)
		return GROUP_CPU;
	return 0;
}

/* Names the file system holding dir from its statfs magic (the ones people
 * run queues on, plus tmpfs, where sync is free and O_DIRECT fails). */
static const char *fs_name(const char *dir)
{
	struct statfs sf;

	if (statfs(dir, &sf) != 0)
		return "unknown";
	switch ((unsigned long)sf.f_type) {
	case 0xEF53UL: return "ext2/3/4";
	case 0x58465342UL: return "xfs";
	case 0x9123683EUL: return "btrfs";
	case 0x01021994UL: return "tmpfs";
	case 0x2FC12FC1UL: return "zfs";
	case 0xF2F52010UL: return "f2fs";
	case 0x794C7630UL: return "overlayfs";
	case 0x6969UL: return "nfs";
	case 0x65735546UL: return "fuse";
	case 0x858458F6UL: return "ramfs";
	default: return "other";
	}
}

/* Writes (wr) or reads len bytes at off, retrying short transfers (bounded:
 * one that makes no progress, or a read at the end of the file, is an
 * error, EIO).  0 or -1 with errno set. */
static int io_full(int fd, int wr, char *buf, size_t len, off_t off)
{
	while (len > 0) {
		ssize_t n = wr ? pwrite(fd, buf, len, off) : pread(fd, buf, len, off);

		if (n < 0) {
			if (errno == EINTR && !stop_requested)
				continue;
			return -1;
		}
		if (n == 0) {
			errno = EIO;
			return -1;
		}
		buf += n;
		len -= (size_t)n;
		off += n;
	}
	return 0;
}

/*
 * Creates (truncating) the test file and prepares it as the case asks:
 * grow = empty; fallocate = blocks reserved (unwritten extents); zero =
 * every block written with zeros.  The preparation is made durable so the
 * timed part only measures the case's own writes.  0, or -1 with errno set
 * and *what naming the step that failed.
 */
static int file_prepare(const char *path, enum file_alloc alloc, uint64_t size,
			const char **what)
{
	char *zeros = NULL;
	int fd, rc = -1, saved;

	*what = "open";
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	if (alloc == ALLOC_FALLOCATE) {
		*what = "fallocate";
		if (fallocate(fd, 0, 0, (off_t)size) != 0)
			goto fail;
	} else if (alloc == ALLOC_ZERO) {
		*what = "zero-fill";
		zeros = calloc(1, ZERO_CHUNK);
		if (zeros == NULL)
			goto fail;
		for (uint64_t off = 0; off < size && !stop_requested; off += ZERO_CHUNK) {
			size_t n = size - off < ZERO_CHUNK ? (size_t)(size - off) : ZERO_CHUNK;

			if (io_full(fd, 1, zeros, n, (off_t)off) != 0)
				goto fail;
		}
	}
	*what = "fsync";
	if (fsync(fd) != 0)
		goto fail;
	rc = 0;
fail:
	saved = errno;
	free(zeros);
	close(fd);
	errno = saved;
	return rc;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile of n sorted values (n > 0). */
static double percentile(const double *sorted, uint64_t n, double p)
{
	uint64_t rank = (uint64_t)ceil(p / 100.0 * (double)n);

	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return sorted[rank - 1];
}

/* Round up to a multiple of BLOCK. */
static size_t block_roundup(size_t n)
{
	return (n + BLOCK - 1) / BLOCK * BLOCK;
}

/*
 * Runs one case into r.  Figures are left at zero and r->status explains
 * why when the case cannot run here (O_DIRECT on tmpfs, fallocate on a file
 * system without it, ...).  Returns 0, or -1 when a resource the program
 * itself needs (memory) is missing.
 */
static int case_run(const struct bench_opts *o, const struct bench_case *c,
		    const char *path, struct bench_result *r)
{
	size_t stride = block_roundup(o->record_size * c->k);
	off_t base = c->unaligned ? UNALIGNED_SHIFT : 0;
	int wrap = c->alloc == ALLOC_ZERO;
	uint64_t fsize = wrap && o->file_size > ZERO_FILE_MAX ? ZERO_FILE_MAX : o->file_size;
	uint64_t slots, max_syncs, n = 0;
	double *lat = NULL;
	char *buf = NULL;
	const char *what;
	int fd = -1, flags, rc = -1;
	double t0, deadline;

	memset(r, 0, sizeof(*r));
	r->done = 1;
	snprintf(r->status, sizeof(r->status), "ok");

	if (fsize < (uint64_t)base + stride) {
		snprintf(r->status, sizeof(r->status), "file-size too small");
		return 0;
	}
	slots = (fsize - (uint64_t)base) / stride;
	max_syncs = o->max_syncs;
	if (!wrap && max_syncs > slots)
		max_syncs = slots;
	if (c->method == METHOD_ODIRECT && c->unaligned) {
		/* O_DIRECT demands aligned offsets: EINVAL by definition. */
		snprintf(r->status, sizeof(r->status), "n/a (O_DIRECT needs alignment)");
		return 0;
	}

	if (posix_memalign((void **)&buf, BLOCK, stride) != 0 ||
	    (lat = malloc(max_syncs * sizeof(*lat))) == NULL) {
		fprintf(stderr, "journal-bench: out of memory\n");
		goto out;
	}
	/* Records: a recognisable header per record, payload bytes, zero
	 * padding to the 4 KiB boundary (as the journal pads a batch). */
	memset(buf, 0, stride);
	for (unsigned i = 0; i < c->k; i++) {
		char *rec = buf + (size_t)i * o->record_size;

		memset(rec, 'a' + (int)(i % 26), o->record_size);
		if (o->record_size >= 8)
			memcpy(rec, "JBRECORD", 8);
	}

	if (file_prepare(path, c->alloc, fsize, &what) != 0) {
		/* fallocate on a file system without it is a finding, not a
		 * failure; anything else (ENOSPC, EIO) is. */
		snprintf(r->status, sizeof(r->status), "%s (%s: %s)",
			 errno == EOPNOTSUPP || errno == EINVAL ? "unsupported" : "failed",
			 what, strerror(errno));
		rc = 0;
		goto out;
	}
	/* Reopen with the case's flags, as a journal opens a prepared segment. */
	flags = O_RDWR | O_CLOEXEC;
	if (c->method == METHOD_ODSYNC)
		flags |= O_DSYNC;
	if (c->method == METHOD_ODIRECT)
		flags |= O_DIRECT | O_DSYNC; /* O_DIRECT alone skips the drive-cache flush */
	fd = open(path, flags);
	if (fd < 0) {
		snprintf(r->status, sizeof(r->status), "unsupported (open: %s)",
			 strerror(errno));
		rc = 0;
		goto out;
	}

	t0 = now_s();
	deadline = t0 + o->seconds;
	while (n < max_syncs && !stop_requested) {
		off_t off = base + (off_t)((n % slots) * stride);
		double a = now_s(), b;

		if (a >= deadline)
			break;
		/* Bytes 8..15 of the batch carry the sync number, so no layer
		 * can skip an identical rewrite when a zero-filled file wraps. */
		if (o->record_size >= 16)
			memcpy(buf + 8, &n, sizeof(n));
		if (io_full(fd, 1, buf, stride, off) != 0) {
			snprintf(r->status, sizeof(r->status), "%s (write: %s)",
				 (errno == EINVAL && c->method == METHOD_ODIRECT) ?
				 "unsupported" : "failed", strerror(errno));
			break;
		}
		if (c->method == METHOD_FDATASYNC && fdatasync(fd) != 0) {
			snprintf(r->status, sizeof(r->status), "failed (fdatasync: %s)",
				 strerror(errno));
			break;
		}
		b = now_s();
		lat[n++] = (b - a) * 1e3;
	}
	r->secs = now_s() - t0;
	r->syncs = n;
	r->records = n * c->k;
	if (n > 0 && strcmp(r->status, "ok") == 0) {
		qsort(lat, n, sizeof(*lat), cmp_double);
		r->p50_ms = percentile(lat, n, 50);
		r->p99_ms = percentile(lat, n, 99);
		r->max_ms = lat[n - 1];
	} else if (n == 0 && strcmp(r->status, "ok") == 0) {
		snprintf(r->status, sizeof(r->status), "no samples");
	}
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	unlink(path);
	free(lat);
	free(buf);
	return rc;
}

/* The index of the median of v[0..n-1] (n > 0): the value an ascending
 * sort would put at n / 2, equal values kept in their order. */
static unsigned median_index(const double *v, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		unsigned rank = 0;

		for (unsigned j = 0; j < n; j++)
			rank += v[j] < v[i] || (v[j] == v[i] && j < i);
		if (rank == n / 2)
			return i;
	}
	return 0;
}

static double result_rps(const struct bench_result *r)
{
	return r->secs > 0 ? (double)r->records / r->secs : 0;
}

/* Runs a case o->repeat times and keeps the run with the median records/s
 * (a failed run is kept at once: there is nothing to take a median of). */
static int case_repeat(const struct bench_opts *o, const struct bench_case *c,
		       const char *path, struct bench_result *out)
{
	struct bench_result runs[9];
	double key[9];
	unsigned n = 0;

	for (unsigned i = 0; i < o->repeat && i < 9 && !stop_requested; i++) {
		if (case_run(o, c, path, &runs[n]) != 0)
			return -1;
		if (strcmp(runs[n].status, "ok") != 0) {
			*out = runs[n];
			return 0;
		}
		n++;
	}
	if (n == 0)
		return case_run(o, c, path, out);
	for (unsigned i = 0; i < n; i++)
		key[i] = result_rps(&runs[i]);
	*out = runs[median_index(key, n)];
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: journal-bench [-d DIR] [-s RECORD_SIZE] [-t SECONDS] [-n MAX_SYNCS]\n"
		"                     [-f FILE_SIZE] [-g GROUPS] [-k K,...] [-m METHOD,...]\n"
		"                     [-r RUNS] [--csv]\n"
		"  -d DIR        directory to test in (default ./journal-bench.tmp; a\n"
		"                directory this program creates is removed at the end)\n"
		"  -s BYTES      record size (default 512)\n"
		"  -t SECONDS    time limit per case (default 1; at most 60)\n"
		"  -n COUNT      sync limit per case (default 200000)\n"
		"  -f BYTES      test file size, K/M/G suffix (default 256M): a grow or\n"
		"                fallocate case stops when its file is full; zero-filled\n"
		"                files (at most 32M) are rewritten circularly; the cpu\n"
		"                group writes the whole file (for at most 60 s) per run\n"
		"  -g LIST       comma-separated groups: batch,prealloc,method,align,cpu,\n"
		"                or all (default batch,prealloc,method,align; `-g batch` is\n"
		"                the group-commit ceiling; `-g cpu -s 65536 -f 1G` the CPU a\n"
		"                large record costs through the page cache or O_DIRECT)\n"
		"  -k LIST       records per sync in the batch group (default 1,8,64,512)\n"
		"  -m LIST       sync methods of the batch group, each measured at every K:\n"
		"                fdatasync,odsync,odirect,nosync (default fdatasync)\n"
		"  -r RUNS       runs per case, the median run is shown (default 1, max 9;\n"
		"                disks on shared machines are noisy)\n"
		"  --csv         CSV instead of a table\n");
}

/* Parses a size with optional K/M/G (binary) suffix.  0 or -1. */
static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || end == s)
		return -1;
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (*end != '\0')
		return -1;
	*out = v;
	return 0;
}

/* Splits the comma-separated list s, copied into buf (len bytes), into at
 * most max tokens.  Their count, or -1 when s is too long or empty or has
 * more than max items. */
static int split_list(const char *s, char *buf, size_t len, char **tok, size_t max)
{
	char *save = NULL, *t;
	size_t n = 0;

	if (strlen(s) >= len)
		return -1;
	strcpy(buf, s);
	for (t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (n == max)
			return -1;
		tok[n++] = t;
	}
	return n ? (int)n : -1;
}

/* Parses "1,8,64" into k[] (at most MAX_BATCH_K values).  0 or -1. */
static int parse_k_list(const char *s, unsigned *k, size_t *n)
{
	char buf[256], *tok[MAX_BATCH_K];
	int count = split_list(s, buf, sizeof(buf), tok, MAX_BATCH_K);
	uint64_t v;

	if (count < 0)
		return -1;
	for (int i = 0; i < count; i++) {
		if (parse_size(tok[i], &v) != 0 || v < 1 || v > 65536)
			return -1;
		k[i] = (unsigned)v;
	}
	*n = (size_t)count;
	return 0;
}

static int parse_groups(const char *s, unsigned *out)
{
	char buf[128], *tok[16];
	int count = split_list(s, buf, sizeof(buf), tok, 16);
	unsigned bits = 0;

	if (count < 0)
		return -1;
	for (int i = 0; i < count; i++) {
		unsigned b = strcmp(tok[i], "all") == 0 ? ~0u : group_bit(tok[i]);

		if (b == 0)
			return -1;
		bits |= b;
	}
	*out = bits;
	return 0;
}

/* Parses a comma-separated list of distinct sync method names into
 * methods[] (at most MAX_BATCH_METHODS).  0 or -1. */
static int parse_methods(const char *s, enum sync_method *methods, size_t *n)
{
	const size_t nnames = sizeof(method_names) / sizeof(method_names[0]);
	char buf[128], *tok[MAX_BATCH_METHODS];
	int count = split_list(s, buf, sizeof(buf), tok, MAX_BATCH_METHODS);

	if (count < 0)
		return -1;
	for (int i = 0; i < count; i++) {
		size_t m = 0;

		while (m < nnames && strcmp(tok[i], method_names[m]) != 0)
			m++;
		if (m == nnames)
			return -1;
		for (int d = 0; d < i; d++)
			if (methods[d] == (enum sync_method)m)
				return -1;
		methods[i] = (enum sync_method)m;
	}
	*n = (size_t)count;
	return 0;
}

static double cpu_now_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* The cpu experiment's write phase: n records of o->record_size back to
 * back from offset 0, each numbered in its bytes 8..15.  buffered: the
 * records of up to CPU_BATCH bytes in one write from batch (where they lie
 * back to back, as a journal gathers a loop pass's records); odirect: each
 * record copied into stage, written a full 1 MiB at a time.  Sets *written
 * to the records written (fewer when stopped or after CPU_MAX_S).  0, or -1
 * with errno set and *what naming the step that failed. */
static int cpu_write(const struct bench_opts *o, int fd, int direct, char *batch,
		     char *stage, uint64_t n, uint64_t *written, const char **what)
{
	size_t rs = o->record_size, per = rs >= CPU_BATCH ? 1 : CPU_BATCH / rs;
	uint64_t off = 0, wb_from = 0, stage_at = 0, i = 0, checked = 0;
	size_t staged = 0;
	double t0 = now_s(), last_sync = t0;

	while (i < n && !stop_requested) {
		size_t k = n - i < per ? (size_t)(n - i) : per;

		for (size_t j = 0; j < k && rs >= 16; j++) {
			uint64_t num = i + j;

			memcpy(batch + j * rs + 8, &num, sizeof(num));
		}
		if (!direct) {
			*what = "write";
			if (io_full(fd, 1, batch, k * rs, (off_t)off) != 0)
				return -1;
			off += k * rs;
			if (off - wb_from >= CPU_WRITEBACK) {
				sync_file_range(fd, (off_t)wb_from, (off_t)(off - wb_from),
						SYNC_FILE_RANGE_WRITE);
				wb_from = off;
			}
		} else {
			/* a record may straddle the buffer's end: it goes in in
			 * pieces, each full buffer written at once */
			for (size_t done = 0; done < k * rs;) {
				size_t m = CPU_STAGE - staged < k * rs - done ? CPU_STAGE - staged
									     : k * rs - done;

				memcpy(stage + staged, batch + done, m);
				staged += m;
				done += m;
				if (staged == CPU_STAGE) {
					*what = "O_DIRECT write";
					if (io_full(fd, 1, stage, CPU_STAGE, (off_t)stage_at) != 0)
						return -1;
					stage_at += CPU_STAGE;
					staged = 0;
				}
			}
		}
		i += k;
		if (i - checked >= 64) {
			double t = now_s();

			checked = i;
			if (t - last_sync >= CPU_SYNC_S) {
				*what = "fdatasync";
				if (fdatasync(fd) != 0)
					return -1;
				last_sync = t;
			}
			if (t - t0 >= CPU_MAX_S)
				break;
		}
	}
	if (direct && staged > 0) {
		/* the last block padded with zeros, as a journal pads a batch */
		memset(stage + staged, 0, block_roundup(staged) - staged);
		*what = "O_DIRECT write";
		if (io_full(fd, 1, stage, block_roundup(staged), (off_t)stage_at) != 0)
			return -1;
	}
	*what = "fdatasync";
	if (fdatasync(fd) != 0)
		return -1;
	*written = i;
	return 0;
}

/* The cpu experiment's read phase, the same for both methods but for the
 * descriptor's O_DIRECT: the file read 1 MiB at a time into stage, and
 * records 0..n-1 copied out of it into rec (as into an item), each checked
 * by its header and number.  0, or -1 with errno set (EIO for a record that
 * reads back wrong) and *what naming the step. */
static int cpu_read(const struct bench_opts *o, int fd, char *rec, char *stage, uint64_t n,
		    const char **what)
{
	size_t rs = o->record_size;
	uint64_t have_from = 0, have_to = 0; /* file bytes the buffer holds */

	for (uint64_t i = 0; i < n && !stop_requested; i++) {
		uint64_t off = i * rs;

		for (size_t done = 0; done < rs;) {
			uint64_t at = off + done;
			size_t k;

			if (at < have_from || at >= have_to) {
				/* the next 1 MiB, from the block holding at, or
				 * what is left of the file (a whole number of
				 * blocks, -f) */
				uint64_t from = at / BLOCK * BLOCK;
				size_t len = o->file_size - from < CPU_STAGE ?
					     (size_t)(o->file_size - from) : CPU_STAGE;

				*what = "read";
				if (io_full(fd, 0, stage, len, (off_t)from) != 0)
					return -1;
				have_from = from;
				have_to = from + len;
			}
			k = have_to - at < rs - done ? (size_t)(have_to - at) : rs - done;
			memcpy(rec + done, stage + (at - have_from), k);
			done += k;
		}
		*what = "record read back wrong";
		if (rs >= 16 && (memcmp(rec, "JBRECORD", 8) != 0 ||
				 memcmp(rec + 8, &i, sizeof(i)) != 0)) {
			errno = EIO;
			return -1;
		}
	}
	return 0;
}

/* One run of the cpu experiment for one method into r.  Returns 0 (r->status
 * says whether there are figures), or -1 when memory is missing. */
static int cpu_run(const struct bench_opts *o, int direct, const char *path,
		   struct cpu_result *r)
{
	uint64_t n = o->file_size / o->record_size, written = 0;
	size_t per = o->record_size >= CPU_BATCH ? 1 : CPU_BATCH / o->record_size;
	char *rec = NULL, *batch = NULL, *stage = NULL;
	const char *what = "open";
	int fd = -1, rc = -1;
	double c0, t0;

	memset(r, 0, sizeof(*r));
	snprintf(r->status, sizeof(r->status), "ok");
	if (n == 0) {
		snprintf(r->status, sizeof(r->status), "file-size too small");
		return 0;
	}
	if ((rec = malloc(o->record_size)) == NULL || (batch = malloc(per * o->record_size)) == NULL ||
	    posix_memalign((void **)&stage, BLOCK, CPU_STAGE) != 0) {
		fprintf(stderr, "journal-bench: out of memory\n");
		goto out;
	}
	memset(batch, 'r', per * o->record_size);
	for (size_t j = 0; j < per && o->record_size >= 8; j++)
		memcpy(batch + j * o->record_size, "JBRECORD", 8);
	rc = 0;
	/* reserved as a segment is (preallocate = auto), then opened as the
	 * method asks */
	if (file_prepare(path, ALLOC_FALLOCATE, o->file_size, &what) != 0) {
		snprintf(r->status, sizeof(r->status), "%s (%s: %s)",
			 errno == EOPNOTSUPP || errno == EINVAL ? "unsupported" : "failed",
			 what, strerror(errno));
		goto out;
	}
	fd = open(path, O_RDWR | O_CLOEXEC | (direct ? O_DIRECT : 0));
	if (fd < 0) {
		snprintf(r->status, sizeof(r->status), "unsupported (open: %s)",
			 strerror(errno));
		goto out;
	}
	c0 = cpu_now_s();
	t0 = now_s();
	if (cpu_write(o, fd, direct, batch, stage, n, &written, &what) != 0)
		goto failed;
	r->w_cpu = cpu_now_s() - c0;
	r->w_secs = now_s() - t0;
	r->records = written;
	c0 = cpu_now_s();
	t0 = now_s();
	if (cpu_read(o, fd, rec, stage, written, &what) != 0)
		goto failed;
	r->r_cpu = cpu_now_s() - c0;
	r->r_secs = now_s() - t0;
	if (written == 0)
		snprintf(r->status, sizeof(r->status), "no samples");
	goto out;
failed:
	snprintf(r->status, sizeof(r->status), "%s (%s: %s)",
		 direct && errno == EINVAL ? "unsupported" : "failed", what, strerror(errno));
out:
	if (fd >= 0)
		close(fd);
	unlink(path);
	free(stage);
	free(batch);
	free(rec);
	return rc;
}

static double cpu_us_per(double cpu, uint64_t records)
{
	return records ? cpu * 1e6 / (double)records : 0;
}

/* Runs the cpu experiment o->repeat times for one method and keeps the run
 * with the median write CPU per record (a failed run is kept at once). */
static int cpu_repeat(const struct bench_opts *o, int direct, const char *path,
		      struct cpu_result *out)
{
	struct cpu_result runs[9];
	double key[9];
	unsigned n = 0;

	for (unsigned i = 0; i < o->repeat && i < 9 && !stop_requested; i++) {
		if (cpu_run(o, direct, path, &runs[n]) != 0)
			return -1;
		if (strcmp(runs[n].status, "ok") != 0) {
			*out = runs[n];
			return 0;
		}
		n++;
	}
	if (n == 0)
		return cpu_run(o, direct, path, out);
	for (unsigned i = 0; i < n; i++)
		key[i] = cpu_us_per(runs[i].w_cpu, runs[i].records);
	*out = runs[median_index(key, n)];
	return 0;
}

static void print_cpu_header(const struct bench_opts *o)
{
	if (o->csv) {
		printf("group,method,record_size,records,write_us_per_record,write_mib_per_s,"
		       "read_us_per_record,read_mib_per_s,status\n");
		return;
	}
	printf("\ncpu: process CPU (user + system) per record of %zu B, %llu MiB written "
	       "back to back into a fallocate()d file, then read back; median of %u run(s) "
	       "by write CPU\n",
	       o->record_size, (unsigned long long)(o->file_size >> 20), o->repeat);
	printf("(buffered: up to 64 KiB of records per write into the page cache, writeback "
	       "every 8 MiB; odirect: records copied into a 1 MiB buffer written with O_DIRECT; "
	       "both fdatasync every 100 ms and read back 1 MiB at a time)\n\n");
	printf("%-9s %-9s %10s %14s %12s %14s %12s  %s\n", "group", "method", "records",
	       "write us/rec", "write MiB/s", "read us/rec", "read MiB/s", "status");
}

static void print_cpu_row(const struct bench_opts *o, int direct, const struct cpu_result *r)
{
	double wm = r->w_secs > 0 ? (double)r->records * (double)o->record_size / r->w_secs / 1048576.0 : 0;
	double rm = r->r_secs > 0 ? (double)r->records * (double)o->record_size / r->r_secs / 1048576.0 : 0;

	if (o->csv) {
		printf("cpu,%s,%zu,%llu,%.3f,%.1f,%.3f,%.1f,\"%s\"\n", cpu_method_names[direct],
		       o->record_size, (unsigned long long)r->records,
		       cpu_us_per(r->w_cpu, r->records), wm, cpu_us_per(r->r_cpu, r->records),
		       rm, r->status);
		return;
	}
	if (strcmp(r->status, "ok") != 0) {
		printf("%-9s %-9s %10s %14s %12s %14s %12s  %s\n", "cpu",
		       cpu_method_names[direct], "-", "-", "-", "-", "-", r->status);
		return;
	}
	printf("%-9s %-9s %10llu %14.2f %12.0f %14.2f %12.0f  ok\n", "cpu",
	       cpu_method_names[direct], (unsigned long long)r->records,
	       cpu_us_per(r->w_cpu, r->records), wm, cpu_us_per(r->r_cpu, r->records), rm);
}

static void print_header(const struct bench_opts *o)
{
	struct utsname u;

	if (uname(&u) != 0)
		memset(&u, 0, sizeof(u));
	if (o->csv) {
		printf("group,file,method,k,layout,record_size,write_size,syncs,records,"
		       "seconds,records_per_s,mib_per_s,p50_ms,p99_ms,max_ms,status\n");
		return;
	}
	printf("journal-bench: %s %s, dir %s (%s), record %zu B, "
	       "per case <= %.3g s / %llu syncs / %llu MiB file (zero-filled: circular), "
	       "median of %u run(s)\n",
	       u.sysname, u.release, o->dir, fs_name(o->dir), o->record_size,
	       o->seconds, (unsigned long long)o->max_syncs,
	       (unsigned long long)(o->file_size >> 20), o->repeat);
	printf("(K = records per sync; every sync writes K records padded to 4 KiB; "
	       "latency is per write+sync)\n\n");
	printf("%-9s %-10s %-10s %4s %-9s %8s %12s %9s %9s %9s  %s\n", "group", "file",
	       "method", "K", "layout", "syncs", "records/s", "MiB/s", "p50 ms",
	       "p99 ms", "status");
}

static void print_row(const struct bench_opts *o, const struct bench_case *c,
		      const struct bench_result *r)
{
	double rps = r->secs > 0 ? (double)r->records / r->secs : 0;
	double mibs = rps * (double)o->record_size / 1048576.0;
	const char *layout = c->unaligned ? "+24" : "aligned";
	size_t wsize = block_roundup(o->record_size * c->k);

	if (o->csv) {
		printf("%s,%s,%s,%u,%s,%zu,%zu,%llu,%llu,%.6f,%.1f,%.3f,%.4f,%.4f,%.4f,\"%s\"\n",
		       c->group, alloc_names[c->alloc], method_names[c->method], c->k,
		       layout, o->record_size, wsize, (unsigned long long)r->syncs,
		       (unsigned long long)r->records, r->secs, rps, mibs, r->p50_ms,
		       r->p99_ms, r->max_ms, r->status);
		return;
	}
	if (strcmp(r->status, "ok") != 0) {
		printf("%-9s %-10s %-10s %4u %-9s %8s %12s %9s %9s %9s  %s\n", c->group,
		       alloc_names[c->alloc], method_names[c->method], c->k, layout,
		       "-", "-", "-", "-", "-", r->status);
		return;
	}
	printf("%-9s %-10s %-10s %4u %-9s %8llu %12.0f %9.2f %9.3f %9.3f  ok\n",
	       c->group, alloc_names[c->alloc], method_names[c->method], c->k, layout,
	       (unsigned long long)r->syncs, rps, mibs, r->p50_ms, r->p99_ms);
}

static int same_config(const struct bench_case *a, const struct bench_case *b)
{
	return a->alloc == b->alloc && a->method == b->method && a->k == b->k &&
	       a->unaligned == b->unaligned;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "csv", no_argument, NULL, 'C' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct bench_opts o = {
		.dir = "./journal-bench.tmp",
		.record_size = 512,
		.seconds = 1.0,
		.max_syncs = 200000,
		.file_size = 256ull << 20,
		.repeat = 1,
		.groups = GROUPS_DEFAULT,
	};
	struct bench_case cases[MAX_CASES];
	struct bench_result results[MAX_CASES];
	unsigned batch_k[MAX_BATCH_K];
	size_t nbatch = sizeof(default_batch_k) / sizeof(default_batch_k[0]), ncases = 0;
	enum sync_method batch_methods[MAX_BATCH_METHODS] = { METHOD_FDATASYNC };
	size_t nmethods = 1;
	struct sigaction sa;
	char path[4096];
	int made_dir = 0, opt, rc = 0;
	uint64_t v;

	memcpy(batch_k, default_batch_k, sizeof(default_batch_k));
	while ((opt = getopt_long(argc, argv, "d:s:t:n:f:g:r:k:m:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'd':
			o.dir = optarg;
			break;
		case 's':
			if (parse_size(optarg, &v) != 0 || v < 1 || v > (16u << 20)) {
				fprintf(stderr, "journal-bench: -s: record size 1..16M\n");
				return 2;
			}
			o.record_size = (size_t)v;
			break;
		case 't': {
			char *end;

			o.seconds = strtod(optarg, &end);
			if (*end != '\0' || !(o.seconds > 0) || o.seconds > 60) {
				fprintf(stderr, "journal-bench: -t: seconds in (0, 60]\n");
				return 2;
			}
			break;
		}
		case 'n':
			if (parse_size(optarg, &v) != 0 || v < 1 || v > 10000000) {
				fprintf(stderr, "journal-bench: -n: count 1..10000000\n");
				return 2;
			}
			o.max_syncs = v;
			break;
		case 'f':
			if (parse_size(optarg, &v) != 0 || v < BLOCK || v > (64ull << 30)) {
				fprintf(stderr, "journal-bench: -f: file size 4K..64G\n");
				return 2;
			}
			o.file_size = v / BLOCK * BLOCK;
			break;
		case 'g':
			if (parse_groups(optarg, &o.groups) != 0) {
				fprintf(stderr, "journal-bench: -g: groups are "
					"batch,prealloc,method,align,cpu (or all)\n");
				return 2;
			}
			break;
		case 'k':
			if (parse_k_list(optarg, batch_k, &nbatch) != 0) {
				fprintf(stderr, "journal-bench: -k: up to %d values 1..65536\n",
					MAX_BATCH_K);
				return 2;
			}
			break;
		case 'm':
			if (parse_methods(optarg, batch_methods, &nmethods) != 0) {
				fprintf(stderr, "journal-bench: -m: distinct methods among "
					"fdatasync,odsync,odirect,nosync\n");
				return 2;
			}
			break;
		case 'r':
			if (parse_size(optarg, &v) != 0 || v < 1 || v > 9) {
				fprintf(stderr, "journal-bench: -r: runs 1..9\n");
				return 2;
			}
			o.repeat = (unsigned)v;
			break;
		case 'C':
			o.csv = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}

	if (mkdir(o.dir, 0700) == 0) {
		made_dir = 1;
	} else if (errno != EEXIST) {
		fprintf(stderr, "journal-bench: mkdir %s: %s\n", o.dir, strerror(errno));
		return 1;
	}
	if ((size_t)snprintf(path, sizeof(path), "%s/journal-bench.%ld.dat", o.dir,
			     (long)getpid()) >= sizeof(path)) {
		fprintf(stderr, "journal-bench: path too long\n");
		rc = 1;
		goto out;
	}

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	for (size_t m = 0; m < nmethods; m++)
		for (size_t i = 0; i < nbatch; i++)
			cases[ncases++] = (struct bench_case){ "batch", ALLOC_ZERO,
							       batch_methods[m], batch_k[i], 0 };
	for (size_t i = 0; i < NFIXED; i++)
		cases[ncases++] = fixed_cases[i];
	memset(results, 0, sizeof(results));
	if (o.groups & GROUPS_DEFAULT)
		print_header(&o);
	for (size_t i = 0; i < ncases && !stop_requested; i++) {
		const struct bench_case *c = &cases[i];
		const struct bench_result *prev = NULL;

		if (!(o.groups & group_bit(c->group)))
			continue;
		for (size_t j = 0; j < i; j++) {
			if (results[j].done && same_config(&cases[j], c)) {
				prev = &results[j];
				break;
			}
		}
		if (prev != NULL) {
			results[i] = *prev;
		} else if (case_repeat(&o, c, path, &results[i]) != 0) {
			rc = 1;
			break;
		}
		print_row(&o, c, &results[i]);
		fflush(stdout);
		if (strncmp(results[i].status, "failed", 6) == 0)
			rc = 1;
	}
	if ((o.groups & GROUP_CPU) && rc == 0 && !stop_requested) {
		print_cpu_header(&o);
		for (int direct = 0; direct <= 1 && !stop_requested; direct++) {
			struct cpu_result r;

			if (cpu_repeat(&o, direct, path, &r) != 0) {
				rc = 1;
				break;
			}
			print_cpu_row(&o, direct, &r);
			fflush(stdout);
			if (strncmp(r.status, "failed", 6) == 0)
				rc = 1;
		}
	}
	if (stop_requested) {
		fprintf(stderr, "journal-bench: interrupted\n");
		rc = 1;
	}
out:
	unlink(path);
	if (made_dir && rmdir(o.dir) != 0)
		fprintf(stderr, "journal-bench: rmdir %s: %s\n", o.dir, strerror(errno));
	return rc;
}
