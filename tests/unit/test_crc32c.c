/* test_crc32c.c: CRC-32C against published check values and a bitwise
 * reference, and a CRC continued across any split equal to the whole. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/crc32c.h"

START_TEST(check_value)
{
	ck_assert_uint_eq(crc32c(0, "123456789", 9), 0xE3069283u);
	ck_assert_uint_eq(crc32c(0, "", 0), 0);
	/* RFC 3720 (iSCSI) B.4: 32 bytes of zeros, of 0xff */
	{
		unsigned char z[32];

		memset(z, 0, sizeof(z));
		ck_assert_uint_eq(crc32c(0, z, sizeof(z)), 0x8A9136AAu);
		memset(z, 0xff, sizeof(z));
		ck_assert_uint_eq(crc32c(0, z, sizeof(z)), 0x62A8AB43u);
	}
}
END_TEST

START_TEST(incremental_equals_whole)
{
	unsigned char buf[1031];
	uint32_t whole, part;
	size_t cut;

	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (unsigned char)(i * 131 + 7);
	whole = crc32c(0, buf, sizeof(buf));
	/* every split point and every misalignment gives the same result */
	for (cut = 0; cut <= sizeof(buf); cut += 13) {
		part = crc32c(0, buf, cut);
		part = crc32c(part, buf + cut, sizeof(buf) - cut);
		ck_assert_uint_eq(part, whole);
	}
	ck_assert_uint_ne(crc32c(0, buf + 1, 100), crc32c(0, buf, 100));
}
END_TEST

/* The definition, one bit at a time (reflected polynomial 0x82F63B78). */
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

START_TEST(matches_definition)
{
	static unsigned char buf[20008];
	uint32_t seed = 12345;

	for (size_t i = 0; i < sizeof(buf); i++) {
		seed = seed * 1103515245u + 12345u;
		buf[i] = (unsigned char)(seed >> 16);
	}
	/* short and long lengths (the library switches methods with length),
	 * at every alignment within 8 bytes */
	for (size_t len = 0; len <= 8192; len = len < 300 ? len + 1 : len * 3 / 2) {
		for (size_t off = 0; off < 8; off++)
			ck_assert_uint_eq(crc32c(0, buf + off, len), crc_bitwise(buf + off, len));
	}
	/* around the three-stream block sizes (3 x 128 and 3 x 1024 bytes),
	 * one and several blocks, with a tail of every length mod 8 */
	{
		static const size_t edge[] = { 383, 384, 385, 391, 767, 768, 775, 3071,
					       3072, 3073, 3455, 3456, 3463, 6144, 6151,
					       9216, 9599, 9600, 9607, 15000, 19999 };

		for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++)
			for (size_t off = 0; off < 8; off++)
				ck_assert_uint_eq(crc32c(0, buf + off, edge[i]),
						  crc_bitwise(buf + off, edge[i]));
	}
}
END_TEST

Suite *crc32c_suite(void)
{
	Suite *s = suite_create("crc32c");
	TCase *tc = tcase_create("crc32c");

	tcase_add_test(tc, check_value);
	tcase_add_test(tc, incremental_equals_whole);
	tcase_add_test(tc, matches_definition);
	suite_add_tcase(s, tc);
	return s;
}
