/* test_auth.c: the auth file's users (server/auth.h): what the parser
 * refuses, passwords with spaces, and a password check that takes the
 * same time whatever the password's length or whether the user exists. */
#include <check.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "../../server/auth.h"
#include "../../lib/tern.h"

static struct auth *parse(const char *text, size_t len, char *err, size_t errlen, int *rc)
{
	struct auth *a = NULL;

	*rc = auth_parse(text, len, "users", NULL, &a, err, errlen);
	return a;
}

START_TEST(parses_users)
{
	static const char text[] = "# the team\nalice:secret\r\n\nops:correct horse battery\n";
	char err[256] = "";
	int rc;
	struct auth *a = parse(text, sizeof(text) - 1, err, sizeof(err), &rc);

	ck_assert_msg(rc == 0, "%s", err);
	ck_assert_uint_eq(auth_count(a), 2);
	ck_assert_ptr_nonnull(auth_check(a, "alice", 5, "secret", 6));
	ck_assert_ptr_null(auth_check(a, "alice", 5, "secret\r", 7));
	ck_assert_ptr_null(auth_check(a, "alice", 5, "secre", 5));
	ck_assert_ptr_null(auth_check(a, "alic", 4, "secret", 6));
	ck_assert_ptr_nonnull(auth_check(a, "ops", 3, "correct horse battery", 21));
	ck_assert_ptr_null(auth_check(a, "ops", 3, "correct", 7));
	ck_assert_ptr_null(auth_check(a, "nobody", 6, "secret", 6));
	ck_assert_str_eq(auth_user_name(auth_find(a, "ops", 3)), "ops");
	ck_assert_ptr_null(auth_find(a, "op", 2));
	auth_free(a);
}
END_TEST

START_TEST(refuses_bad_files)
{
	static const struct {
		const char *text;
		size_t len;
		const char *err;
	} cases[] = {
		{ "alice:secret\nbob:pass\0word\n", 27,
		  "users:2: NUL byte in the line (the file must be text)" },
		{ "alice:secret\nbob\n", 17, "users:2: expected user:password" },
		{ "alice:\n", 7, "users:1: the password must be 1 to 256 bytes" },
		{ "a b:x\n", 6, "users:1: bad user name" },
		{ "alice:a\nalice:b\n", 16, "users:2: user alice given twice" },
		{ "# nobody\n", 9, "users: no user (expected user:password lines)" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char err[256] = "";
		int rc;
		struct auth *a = parse(cases[i].text, cases[i].len, err, sizeof(err), &rc);

		ck_assert_ptr_null(a);
		ck_assert_int_eq(rc, TERN_EINVAL);
		ck_assert_str_eq(err, cases[i].err);
	}
}
END_TEST

/* The CPU time this thread has used: time spent waiting for a core on a
 * busy machine is not counted. */
static int64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/*
 * The cheapest of ROUNDS batches of CALLS checks of each kind of wrong
 * attempt, the kinds taking turns: the right length with the last byte
 * wrong, one byte shorter, and a user that does not exist.  A check that
 * compared lengths first, or stopped at an unknown user, would answer the
 * last two several times faster than the first; CPU time, short batches
 * and the cheapest of many keep out the other work of a shared machine.
 */
#define ROUNDS 200
#define CALLS 100

START_TEST(check_time_is_constant)
{
	char text[AUTH_PASS_MAX + 64], pass[AUTH_PASS_MAX];
	char err[256] = "";
	int64_t best[3] = { INT64_MAX, INT64_MAX, INT64_MAX };
	struct auth *a;
	int rc, sink = 0;

	memset(pass, 'p', sizeof(pass));
	memcpy(text, "alice:", 6);
	memcpy(text + 6, pass, sizeof(pass));
	memcpy(text + 6 + sizeof(pass), "\nbob:x\n", 7);
	a = parse(text, 6 + sizeof(pass) + 7, err, sizeof(err), &rc);
	ck_assert_msg(rc == 0, "%s", err);
	ck_assert_ptr_nonnull(auth_check(a, "alice", 5, pass, sizeof(pass)));
	pass[sizeof(pass) - 1] = 'q';
	for (int r = 0; r < ROUNDS; r++) {
		for (int kind = 0; kind < 3; kind++) {
			const char *user = kind == 2 ? "mallory" : "alice";
			size_t plen = kind == 1 ? sizeof(pass) - 1 : sizeof(pass);
			int64_t t0 = cpu_ns(), t;

			for (int i = 0; i < CALLS; i++)
				sink += auth_check(a, user, strlen(user), pass, plen) != NULL;
			t = cpu_ns() - t0;
			if (t < best[kind])
				best[kind] = t;
		}
	}
	ck_assert_int_eq(sink, 0);
	for (int kind = 1; kind < 3; kind++)
		ck_assert_msg(best[kind] * 4 > best[0] * 3 && best[0] * 4 > best[kind] * 3,
			      "checks of kind %d took %lld ns, of the same length %lld ns", kind,
			      (long long)best[kind], (long long)best[0]);
	auth_free(a);
}
END_TEST

Suite *auth_suite(void)
{
	Suite *s = suite_create("auth");
	TCase *tc = tcase_create("file");

	tcase_add_test(tc, parses_users);
	tcase_add_test(tc, refuses_bad_files);
	tcase_add_test(tc, check_time_is_constant);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	return s;
}
