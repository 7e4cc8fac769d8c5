/* test_crc32c.c: CRC-32C against published check values and a bitwise
 * reference at every short length, around the length where crc32c()
 * changes method, and on random buffers at random alignments; a CRC
 * continued across any split equal to the whole; a buffer longer than
 * ISA-L takes in one call (2 GiB); no dirty vector register halves left
 * behind. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "../../lib/crc32c.h"

/* The definition, one bit at a time (reflected polynomial 0x82F63B78,
 * register started at all ones and inverted at the end). */
static uint32_t crc_bitwise(const unsigned char *p, size_t len)
{
	uint32_t c = 0xFFFFFFFFu;

	while (len--) {
		c ^= *p++;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
	}
	return ~c;
}

/* A fixed pseudo-random sequence, so a failure repeats. */
static uint32_t next_rand(uint32_t *seed)
{
	*seed = *seed * 1103515245u + 12345u;
	return *seed >> 8;
}

static void fill_random(unsigned char *buf, size_t len, uint32_t seed)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (unsigned char)next_rand(&seed);
}

START_TEST(check_value)
{
	unsigned char b[48];

	ck_assert_uint_eq(crc32c(0, "123456789", 9), 0xE3069283u);
	ck_assert_uint_eq(crc32c(0, "", 0), 0);
	ck_assert_uint_eq(crc32c(0, "a", 1), 0xC1D04330u);
	ck_assert_uint_eq(crc32c(0x12345678u, "", 0), 0x12345678u);
	/* RFC 3720 (iSCSI) B.4: 32 bytes of zeros, of 0xff, ascending,
	 * descending, and an iSCSI read command PDU */
	memset(b, 0, 32);
	ck_assert_uint_eq(crc32c(0, b, 32), 0x8A9136AAu);
	memset(b, 0xff, 32);
	ck_assert_uint_eq(crc32c(0, b, 32), 0x62A8AB43u);
	for (int i = 0; i < 32; i++)
		b[i] = (unsigned char)i;
	ck_assert_uint_eq(crc32c(0, b, 32), 0x46DD794Eu);
	for (int i = 0; i < 32; i++)
		b[i] = (unsigned char)(31 - i);
	ck_assert_uint_eq(crc32c(0, b, 32), 0x113FDB5Cu);
	{
		static const unsigned char pdu[48] = {
			0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
			0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
			0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
			0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		};

		ck_assert_uint_eq(crc32c(0, pdu, sizeof(pdu)), 0xD9963A56u);
	}
}
END_TEST

START_TEST(incremental_equals_whole)
{
	static unsigned char buf[4099];
	uint32_t whole, part, seed = 99;
	size_t cut;

	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (unsigned char)(i * 131 + 7);
	whole = crc32c(0, buf, sizeof(buf));
	ck_assert_uint_eq(whole, crc_bitwise(buf, sizeof(buf)));
	/* every split point: one piece short and one long, both short,
	 * both long, at every misalignment of the second piece */
	for (cut = 0; cut <= sizeof(buf); cut++) {
		part = crc32c(0, buf, cut);
		part = crc32c(part, buf + cut, sizeof(buf) - cut);
		ck_assert_uint_eq(part, whole);
	}
	/* three pieces at random cuts */
	for (int n = 0; n < 2000; n++) {
		size_t a = next_rand(&seed) % (sizeof(buf) + 1);
		size_t b = next_rand(&seed) % (sizeof(buf) + 1);

		if (a > b) {
			size_t t = a;

			a = b;
			b = t;
		}
		part = crc32c(0, buf, a);
		part = crc32c(part, buf + a, b - a);
		part = crc32c(part, buf + b, sizeof(buf) - b);
		ck_assert_uint_eq(part, whole);
	}
	/* byte by byte */
	part = 0;
	for (size_t i = 0; i < sizeof(buf); i++)
		part = crc32c(part, buf + i, 1);
	ck_assert_uint_eq(part, whole);
	ck_assert_uint_ne(crc32c(0, buf + 1, 100), crc32c(0, buf, 100));
}
END_TEST

START_TEST(matches_definition)
{
	static unsigned char buf[70000];

	fill_random(buf, sizeof(buf), 12345);
	/* every length up to 300 (short records, and past the length where
	 * crc32c() hands the buffer to ISA-L) at every alignment within 8
	 * bytes, then longer ones */
	for (size_t len = 0; len <= 8192; len = len < 300 ? len + 1 : len * 3 / 2) {
		for (size_t off = 0; off < 8; off++)
			ck_assert_uint_eq(crc32c(0, buf + off, len), crc_bitwise(buf + off, len));
	}
	/* around ISA-L's block sizes (its folding loops take 64, 128 and
	 * 256 bytes a step), with a tail of every length mod 16 */
	{
		static const size_t edge[] = { 255, 256, 257, 263, 271, 383, 384, 385, 511,
					       512, 513, 767, 768, 1023, 1024, 1025, 1279,
					       4095, 4096, 4097, 65535, 65536, 65537, 69999 };

		for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++)
			for (size_t off = 0; off < 16 && edge[i] + off <= sizeof(buf); off++)
				ck_assert_uint_eq(crc32c(0, buf + off, edge[i]),
						  crc_bitwise(buf + off, edge[i]));
	}
}
END_TEST

START_TEST(random_buffers)
{
	static unsigned char buf[6000];
	uint32_t seed = 777;

	/* fresh contents, a random start within 64 bytes and a random
	 * length, weighted to short ones like journal records */
	for (int n = 0; n < 3000; n++) {
		size_t off = next_rand(&seed) % 64;
		size_t max = n % 2 ? 600 : sizeof(buf) - 64;
		size_t len = next_rand(&seed) % (max + 1);
		uint32_t c0 = next_rand(&seed);

		fill_random(buf + off, len, next_rand(&seed));
		ck_assert_uint_eq(crc32c(0, buf + off, len), crc_bitwise(buf + off, len));
		/* a continued CRC is the register carried on: compare a
		 * continuation from an arbitrary value with a split */
		ck_assert_uint_eq(crc32c(crc32c(c0, buf + off, len / 3), buf + off + len / 3,
					 len - len / 3),
				  crc32c(c0, buf + off, len));
	}
}
END_TEST

/* Longer than an int, the length ISA-L takes: read-only zero pages, so it
 * costs address space and no memory.  The whole must equal the same bytes
 * fed in 64 KiB pieces. */
START_TEST(longer_than_one_call)
{
	size_t len = ((size_t)1 << 31) + 4096 + 5;
	unsigned char *p = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
				-1, 0);
	uint32_t whole, part = 0;

	ck_assert_ptr_ne(p, MAP_FAILED);
	whole = crc32c(0, p, len);
	for (size_t at = 0; at < len; at += 65536)
		part = crc32c(part, p + at, len - at < 65536 ? len - at : 65536);
	ck_assert_uint_eq(whole, part);
	ck_assert_uint_ne(whole, crc32c(0, p, len - 1));
	munmap(p, len);
}
END_TEST

/* After a long buffer (ISA-L's vector code) the upper halves of the vector
 * registers must be clean again, or the next legacy SSE instruction the
 * caller runs stalls on the change of state.  XGETBV with ECX=1 reports which
 * register states are in use: bit 2 the upper 128 bits of ymm0-15, bit 6
 * the upper 256 bits of zmm0-15.  On CPUs without that query there is
 * nothing to read, and nothing to check. */
START_TEST(vector_uppers_clean)
{
#if defined(__x86_64__)
	static unsigned char buf[4096];
	unsigned int a, b, c, d, lo, hi;
	uint32_t crc;

	if (!__get_cpuid_count(0xd, 1, &a, &b, &c, &d) || !(a & (1u << 2)) ||
	    !__builtin_cpu_supports("avx"))
		return;
	fill_random(buf, sizeof(buf), 5);
	for (size_t len = 256; len <= sizeof(buf); len *= 2) {
		crc = crc32c(0, buf, len);
		__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
		ck_assert_uint_eq(lo & ((1u << 2) | (1u << 6)), 0);
		ck_assert_uint_eq(crc, crc_bitwise(buf, len));
	}
#endif
}
END_TEST

Suite *crc32c_suite(void)
{
	Suite *s = suite_create("crc32c");
	TCase *tc = tcase_create("crc32c");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, check_value);
	tcase_add_test(tc, incremental_equals_whole);
	tcase_add_test(tc, matches_definition);
	tcase_add_test(tc, random_buffers);
	tcase_add_test(tc, longer_than_one_call);
	tcase_add_test(tc, vector_uppers_clean);
	suite_add_tcase(s, tc);
	return s;
}
