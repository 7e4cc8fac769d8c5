/* test_name.c: the queue-name rule (lib/tern.h tern_name_valid): what a
 * name may hold, and that none can leave the data directory. */
#include <check.h>
#include <string.h>

#include "../../lib/tern.h"

static int valid(const char *s)
{
	return tern_name_valid(s, strlen(s));
}

START_TEST(test_accepted)
{
	static const char *const ok[] = {
		"jobs", "a", "Z9", "tern_load_0", "mail.high", "a-b", "q+child", "a.b.c",
		/* hash tags, anywhere in the name */
		"{jobs}", "x{jobs}y", "{mail}.high", "{jobs}+audit", "{}", "{", "}", "a}b{c",
		"{{q}}",
	};

	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		ck_assert_msg(valid(ok[i]), "refused %s", ok[i]);
}
END_TEST

START_TEST(test_refused)
{
	static const char *const bad[] = {
		"", ".", "..", ".hidden", "+child", "a..b", "{..}", "..{q}", "{q}..",
		"a/b", "{q}/open", "/", "{a/b}", "a b", "a\\b", "a:b", "a*b", "a\xc3\xa9",
		".{q}",
	};

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		ck_assert_msg(!valid(bad[i]), "accepted %s", bad[i]);
	/* Only len bytes count: a NUL inside is refused, and so is every byte
	 * outside the set. */
	ck_assert(!tern_name_valid("a\0b", 3));
	for (int c = 1; c < 256; c++) {
		char s[2] = { (char)c, 'x' };
		int want = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			   (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '{' || c == '}';

		ck_assert_msg(tern_name_valid(s, 2) == want, "byte 0x%02x", c);
	}
}
END_TEST

START_TEST(test_length)
{
	char s[TERN_NAME_MAX + 2];

	memset(s, 'q', sizeof s);
	s[0] = '{';
	ck_assert(tern_name_valid(s, TERN_NAME_MAX));
	ck_assert(!tern_name_valid(s, TERN_NAME_MAX + 1));
}
END_TEST

/* The rule of lib/tern.h, byte by byte. */
static int valid_reference(const unsigned char *p, size_t len)
{
	if (len == 0 || len > TERN_NAME_MAX || p[0] == '.' || p[0] == '+')
		return 0;
	for (size_t i = 0; i < len; i++) {
		unsigned c = p[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-' || c == '+' || c == '.' || c == '{' || c == '}'))
			return 0;
		if (c == '.' && i + 1 < len && p[i + 1] == '.')
			return 0;
	}
	return 1;
}

START_TEST(test_every_place)
{
	/* Every byte, and pairs of the bytes that matter next to each other
	 * ('.' for "..", '+' and '.' for the first byte, a few outside the
	 * set), at every place of names of 1 to 11 bytes (the check reads
	 * four bytes at a time, then the rest one by one) and at the end of
	 * the longest name: the same verdict as the rule. */
	static const unsigned char pair[] = { '.', 'q', '+', '{', '/', 0, ' ', 0x80, 0xff };
	static const size_t lens[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, TERN_NAME_MAX };
	unsigned char s[TERN_NAME_MAX];

	for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
		size_t len = lens[li];

		for (size_t at = len == TERN_NAME_MAX ? len - 2 : 0; at < len; at++) {
			for (unsigned a = 0; a < 256; a++) {
				memset(s, 'q', len);
				s[at] = (unsigned char)a;
				ck_assert_msg(tern_name_valid((const char *)s, len) ==
						      valid_reference(s, len),
					      "len %zu at %zu byte 0x%02x", len, at, a);
			}
			for (size_t a = 0; at + 1 < len && a < sizeof pair; a++) {
				for (size_t b = 0; b < sizeof pair; b++) {
					memset(s, 'q', len);
					s[at] = pair[a];
					s[at + 1] = pair[b];
					ck_assert_msg(tern_name_valid((const char *)s, len) ==
							      valid_reference(s, len),
						      "len %zu at %zu bytes 0x%02x 0x%02x", len, at,
						      pair[a], pair[b]);
				}
			}
		}
	}
}
END_TEST

Suite *name_suite(void)
{
	Suite *s = suite_create("name");
	TCase *tc = tcase_create("name");

	tcase_add_test(tc, test_accepted);
	tcase_add_test(tc, test_refused);
	tcase_add_test(tc, test_length);
	tcase_add_test(tc, test_every_place);
	suite_add_tcase(s, tc);
	return s;
}
