/* test_config.c: the configuration file: per-queue settings resolved at
 * load ([queues] defaults, then [queue NAME] keys, then --sync), errors
 * with their line, and a reload starting again from the built-in
 * defaults. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../server/config.h"

static char path[64];

static void write_conf(const char *text)
{
	FILE *f = fopen(path, "w");

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fputs(text, f) >= 0, 1);
	ck_assert_int_eq(fclose(f), 0);
}

static void setup(void)
{
	int fd;

	strcpy(path, "/tmp/tconf-XXXXXX");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	close(fd);
}

static void teardown(void)
{
	unlink(path);
}

/* A [queue NAME] section applies on top of the [queues] defaults, even
 * those that come after it in the file; other queues get the defaults. */
START_TEST(queue_sections_on_final_defaults)
{
	struct config c;
	struct queue_conf q;
	char err[256];

	config_defaults(&c);
	write_conf("[queue big]\nmax_items = 5\nsync = always\n\n"
		   "[queues]\nmax_items = 2\nmax_size = 1K\n\n"
		   "[queue big]\nmax_open = 3\n");
	ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), 0);
	config_queue_conf(&c, "big", &q);
	ck_assert_uint_eq(q.max_items, 5);
	ck_assert_uint_eq(q.max_size, 1024);
	ck_assert_uint_eq(q.max_open, 3);
	ck_assert_int_eq(q.jopts.sync, JOURNAL_SYNC_ALWAYS);
	config_queue_conf(&c, "other", &q);
	ck_assert_uint_eq(q.max_items, 2);
	ck_assert_uint_eq(q.max_size, 1024);
	ck_assert_uint_eq(q.max_open, 16);
	ck_assert_int_eq(q.jopts.sync, JOURNAL_SYNC_INTERVAL);
	/* --sync wins over the file for every queue */
	c.sync_forced = 1;
	c.forced_sync = JOURNAL_SYNC_NONE;
	config_queue_conf(&c, "big", &q);
	ck_assert_int_eq(q.jopts.sync, JOURNAL_SYNC_NONE);
	config_free(&c);
}
END_TEST

/* A bad value is refused with its line, and the config is unchanged. */
START_TEST(bad_override_refused)
{
	struct config c;
	struct queue_conf q;
	char err[256];

	config_defaults(&c);
	write_conf("[queue a]\nmax_items = 4\n");
	ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), 0);
	write_conf("[queue a]\nmax_items = 7\n\n[queue b]\nmax_open = 0\n");
	ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), TERN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, ":5: max_open must be 1..1000000"));
	config_queue_conf(&c, "a", &q);
	ck_assert_uint_eq(q.max_items, 4);
	config_free(&c);
}
END_TEST

/* A reload starts from the built-in defaults: a key removed from the file
 * no longer applies, and a section removed leaves no override behind. */
START_TEST(reload_forgets_removed_keys)
{
	struct config c;
	struct queue_conf q;
	char err[256];

	config_defaults(&c);
	write_conf("[queues]\nmax_items = 9\n\n[queue a]\nmax_open = 2\n");
	ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), 0);
	write_conf("[queue b]\nmax_open = 4\n");
	ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), 0);
	config_queue_conf(&c, "a", &q);
	ck_assert_uint_eq(q.max_items, 0);
	ck_assert_uint_eq(q.max_open, 16);
	config_queue_conf(&c, "b", &q);
	ck_assert_uint_eq(q.max_open, 4);
	config_free(&c);
}
END_TEST

Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc = tcase_create("file");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, queue_sections_on_final_defaults);
	tcase_add_test(tc, bad_override_refused);
	tcase_add_test(tc, reload_forgets_removed_keys);
	suite_add_tcase(s, tc);
	return s;
}
