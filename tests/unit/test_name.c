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

Suite *name_suite(void)
{
	Suite *s = suite_create("name");
	TCase *tc = tcase_create("name");

	tcase_add_test(tc, test_accepted);
	tcase_add_test(tc, test_refused);
	tcase_add_test(tc, test_length);
	suite_add_tcase(s, tc);
	return s;
}
