/*
 * crc-bench.c: the cost of CRC-32C per call, tern's crc32c() beside
 * ISA-L's crc32_iscsi() called directly.
 *
 * DESIGN
 * Every journal record is checksummed when it is written and checked when
 * it is read back, from a few dozen bytes (a REMOVE or OPEN record) to a
 * whole body, so the figure that matters is nanoseconds per call at each
 * size, not only bytes per second on long buffers.  For each size (-s, or
 * 16, 32, 64, 128, 512, 4096 and 65536 bytes) and each implementation the
 * program runs -r rounds of calls over the same buffer and prints the best
 * round as ns per call and GB/s.  Each call continues the CRC the previous
 * one returned, as a record's body continues its header's CRC, so calls
 * cannot overlap and the result cannot be optimized away.
 *
 * Every loop is bounded: a round makes at most -b MiB / size calls (and at
 * least one), so the program does a fixed amount of work whatever the CPU.
 */
#include <errno.h>
#include <getopt.h>
#include <isa-l/crc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../lib/crc32c.h"

#define MAX_SIZES 32
#define MAX_LEN (64u << 20)

static uint32_t run_tern(uint32_t c, const unsigned char *p, size_t len)
{
	return crc32c(c, p, len);
}

/* ISA-L's register convention: no inversion inside, so tern's pre- and
 * post-inversion are done here (as lib/crc32c.c does). */
static uint32_t run_isal(uint32_t c, const unsigned char *p, size_t len)
{
	return ~crc32_iscsi((unsigned char *)p, (int)len, ~c);
}

static const struct impl {
	const char *name;
	uint32_t (*fn)(uint32_t, const unsigned char *, size_t);
} impls[] = {
	{ "tern crc32c", run_tern },
	{ "isa-l crc32_iscsi", run_isal },
};
#define N_IMPLS (sizeof(impls) / sizeof(impls[0]))

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: crc-bench [-s BYTES]... [-r ROUNDS] [-b MIB] [-o OFFSET]\n"
		   "  -s BYTES   a buffer size to measure (repeatable; default 16 32 64 128\n"
		   "             512 4096 65536; at most %u)\n"
		   "  -r ROUNDS  rounds per size and implementation, best one printed (default 5)\n"
		   "  -b MIB     bytes checksummed per round (default 64)\n"
		   "  -o OFFSET  start the buffer OFFSET bytes past a 64-byte boundary (0..63)\n",
		MAX_LEN);
}

/* Parses option opt's decimal argument s into *out, within lo..hi;
 * returns 0, or -1 after saying what -opt takes. */
static int parse_num(int opt, const char *s, unsigned long lo, unsigned long hi,
		     unsigned long *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi) {
		fprintf(stderr, "crc-bench: -%c takes %lu..%lu\n", opt, lo, hi);
		return -1;
	}
	*out = v;
	return 0;
}

int main(int argc, char **argv)
{
	static const size_t dflt[] = { 16, 32, 64, 128, 512, 4096, 65536 };
	size_t sizes[MAX_SIZES], n_sizes = 0, max_len = 0;
	unsigned long rounds = 5, mib = 64, offset = 0, v;
	unsigned char *mem, *buf;
	uint32_t check[N_IMPLS];
	int opt;

	while ((opt = getopt(argc, argv, "s:r:b:o:h")) != -1) {
		switch (opt) {
		case 's':
			if (n_sizes == MAX_SIZES) {
				fprintf(stderr, "crc-bench: at most %d sizes\n", MAX_SIZES);
				return 2;
			}
			if (parse_num(opt, optarg, 1, MAX_LEN, &v))
				return 2;
			sizes[n_sizes++] = v;
			break;
		case 'r':
			if (parse_num(opt, optarg, 1, 1000, &rounds))
				return 2;
			break;
		case 'b':
			if (parse_num(opt, optarg, 1, 4096, &mib))
				return 2;
			break;
		case 'o':
			if (parse_num(opt, optarg, 0, 63, &offset))
				return 2;
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
	if (!n_sizes) {
		memcpy(sizes, dflt, sizeof(dflt));
		n_sizes = sizeof(dflt) / sizeof(dflt[0]);
	}
	for (size_t i = 0; i < n_sizes; i++)
		if (sizes[i] > max_len)
			max_len = sizes[i];
	if (posix_memalign((void **)&mem, 64, max_len + 64)) {
		fprintf(stderr, "crc-bench: out of memory\n");
		return 1;
	}
	buf = mem + offset;
	{
		uint32_t seed = 1;

		for (size_t i = 0; i < max_len; i++) {
			seed = seed * 1103515245u + 12345u;
			buf[i] = (unsigned char)(seed >> 16);
		}
	}

	printf("%8s  %-18s %10s %9s\n", "bytes", "implementation", "ns/call", "GB/s");
	for (size_t i = 0; i < n_sizes; i++) {
		size_t len = sizes[i];
		unsigned long calls = (unsigned long)((mib << 20) / len);

		if (!calls)
			calls = 1;
		for (size_t k = 0; k < N_IMPLS; k++) {
			double best = 0;

			for (unsigned long r = 0; r < rounds; r++) {
				uint32_t c = 0;
				double t0 = now_ns(), dt;

				for (unsigned long n = 0; n < calls; n++)
					c = impls[k].fn(c, buf, len);
				dt = now_ns() - t0;
				if (!r || dt < best)
					best = dt;
				check[k] = c;
			}
			printf("%8zu  %-18s %10.2f %9.2f\n", len, impls[k].name, best / calls,
			       (double)len * calls / best);
		}
		/* both chains ran the same calls over the same bytes */
		for (size_t k = 1; k < N_IMPLS; k++) {
			if (check[k] != check[0]) {
				fprintf(stderr, "crc-bench: %s and %s disagree at %zu bytes\n",
					impls[0].name, impls[k].name, len);
				free(mem);
				return 1;
			}
		}
	}
	free(mem);
	return 0;
}
