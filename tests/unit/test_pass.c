/* test_pass.c: the loop's pass clocks (lib/tern.h tern_pass_*): one reading
 * per pass on the loop's thread, fresh readings outside a pass and on any
 * other thread. */
#include <check.h>
#include <pthread.h>
#include <time.h>

#include "../../lib/tern.h"

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0)
		;
}

/* Outside a pass both follow their clock. */
START_TEST(test_outside)
{
	int64_t w = tern_pass_now_ms(), m = tern_pass_mono_ms();

	sleep_ms(20);
	ck_assert_int_ge(tern_pass_now_ms() - w, 15);
	ck_assert_int_ge(tern_pass_mono_ms() - m, 20);
}
END_TEST

/* In a pass the first reading stays; the next pass reads again. */
START_TEST(test_in_pass)
{
	int64_t w, m;

	tern_pass_begin(-1);
	w = tern_pass_now_ms();
	m = tern_pass_mono_ms();
	sleep_ms(20);
	ck_assert_int_eq(tern_pass_now_ms(), w);
	ck_assert_int_eq(tern_pass_mono_ms(), m);
	tern_pass_end();
	ck_assert_int_ge(tern_pass_mono_ms() - m, 20);
	tern_pass_begin(-1);
	ck_assert_int_ge(tern_pass_mono_ms() - m, 20);
	ck_assert_int_ge(tern_pass_now_ms() - w, 15);
	tern_pass_end();
}
END_TEST

/* A pass begun with a monotonic reading uses it. */
START_TEST(test_given_reading)
{
	int64_t now = tern_mono_us();

	tern_pass_begin(now);
	ck_assert_int_eq(tern_pass_mono_ms(), now / 1000);
	tern_pass_end();
	tern_pass_begin(5000999);
	ck_assert_int_eq(tern_pass_mono_ms(), 5000);
	tern_pass_end();
}
END_TEST

static void *read_elsewhere(void *arg)
{
	int64_t *v = arg;

	v[0] = tern_pass_mono_ms();
	sleep_ms(20);
	v[1] = tern_pass_mono_ms();
	return NULL;
}

/* Another thread never sees the loop's pass. */
START_TEST(test_other_thread)
{
	int64_t v[2];
	pthread_t t;

	tern_pass_begin(-1);
	(void)tern_pass_mono_ms();
	ck_assert_int_eq(pthread_create(&t, NULL, read_elsewhere, v), 0);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	tern_pass_end();
	ck_assert_int_ge(v[1] - v[0], 20);
}
END_TEST

Suite *pass_suite(void)
{
	Suite *s = suite_create("pass");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_outside);
	tcase_add_test(tc, test_in_pass);
	tcase_add_test(tc, test_given_reading);
	tcase_add_test(tc, test_other_thread);
	suite_add_tcase(s, tc);
	return s;
}
