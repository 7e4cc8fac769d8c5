/* test_config.c: the configuration file: per-queue settings resolved at
 * load ([queues] defaults, then the first [queue PATTERN] a name matches,
 * then [queue NAME] keys, then --sync), which queues auto_create = no
 * allows, errors with their line (a file that is not text among them), and
 * a reload starting again from the built-in defaults. */
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

/* Writes len bytes of text (which may hold NULs) to the config file. */
/* status in [server], [queues] and [queue NAME]; [alias NAME] sections
 * with their checks; an alias's destinations are queues auto_create = no
 * allows; a reload replaces the aliases. */
START_TEST(status_and_aliases)
{
	struct config c;
	struct queue_conf q;
	const struct config_alias *a;
	char err[256];

	config_defaults(&c);
	ck_assert_int_eq(c.status, QUEUE_UP);
	write_conf("[server]\nstatus = readonly\nauto_create = no\n[queues]\nstatus = QUIESCENT\n"
		   "[queue up]\nstatus = UP\n[alias fan]\ndestinations = a, b\tc\n"
		   "[alias one]\ndestinations = up\n");
	ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), 0);
	ck_assert_int_eq(c.status, QUEUE_READONLY);
	config_queue_conf(&c, "other", &q);
	ck_assert_int_eq(q.status, QUEUE_QUIESCENT);
	config_queue_conf(&c, "up", &q);
	ck_assert_int_eq(q.status, QUEUE_UP);
	a = config_alias_find(&c, "fanX", 3);
	ck_assert_ptr_nonnull(a);
	ck_assert_str_eq(a->name, "fan");
	ck_assert_uint_eq(a->ndest, 3);
	ck_assert_str_eq(a->dest[0], "a");
	ck_assert_str_eq(a->dest[1], "b");
	ck_assert_str_eq(a->dest[2], "c");
	ck_assert_ptr_null(config_alias_find(&c, "fa", 2));
	ck_assert_int_eq(config_queue_known(&c, "b"), 1);
	ck_assert_int_eq(config_queue_known(&c, "fan"), 0);
	ck_assert_int_eq(config_queue_known(&c, "d"), 0);
	/* refused, each with its line, the config unchanged */
	write_conf("[server]\nstatus = DOWN\n");
	ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), TERN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, ":2: status must be UP, READONLY or QUIESCENT, not 'DOWN'"));
	write_conf("[queues]\nstatus = 1\n");
	ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), TERN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "status must be UP, READONLY or QUIESCENT (got '1')"));
	write_conf("[alias x/y]\ndestinations = a\n");
	ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), TERN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, ":1: bad alias name 'x/y'"));
	write_conf("[alias x]\ndestinations = a\n[alias x]\ndestinations = b\n");
	ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), TERN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, ":3: [alias x] given twice"));
	write_conf("[alias x]\ndestinations = a\ndestinations = b\n");
	ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), TERN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, ":3: [alias x] destinations given twice"));
	write_conf("[alias x]\ndestinations = a*\n");
	ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), TERN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "bad destination queue name 'a*'"));
	write_conf("[queue x]\n[alias x]\ndestinations = a\n");
	ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), TERN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "'x' is both an [alias] and a [queue] section"));
	ck_assert_ptr_nonnull(config_alias_find(&c, "fan", 3));
	ck_assert_int_eq(c.status, QUEUE_READONLY);
	/* a reload replaces them, and the statuses return to UP */
	write_conf("[alias fan]\ndestinations = z\n");
	ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), 0);
	ck_assert_ptr_null(config_alias_find(&c, "one", 3));
	a = config_alias_find(&c, "fan", 3);
	ck_assert_uint_eq(a->ndest, 1);
	ck_assert_str_eq(a->dest[0], "z");
	ck_assert_int_eq(c.status, QUEUE_UP);
	config_queue_conf(&c, "other", &q);
	ck_assert_int_eq(q.status, QUEUE_UP);
	config_free(&c);
}
END_TEST

static void write_bytes(const char *text, size_t len)
{
	FILE *f = fopen(path, "w");

	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(text, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

/* A name gets the first pattern it matches, in file order, and its own
 * section on top; a pattern's keys apply over the final defaults. */
START_TEST(pattern_sections)
{
	struct config c;
	struct queue_conf q;
	char err[256];

	config_defaults(&c);
	write_conf("[queue jobs.*]\nmax_items = 3\nsync = always\n\n"
		   "[queue jobs.a]\nmax_open = 2\n\n"
		   "[queue j*]\nmax_items = 99\nmax_age = 5\n\n"
		   "[queue log?]\n\n"
		   "[queues]\nmax_size = 1K\n");
	ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), 0);
	config_queue_conf(&c, "jobs.a", &q);
	ck_assert_uint_eq(q.max_items, 3);
	ck_assert_uint_eq(q.max_open, 2);
	ck_assert_uint_eq(q.max_size, 1024);
	ck_assert_int_eq(q.max_age_ms, 0);
	ck_assert_int_eq(q.jopts.sync, JOURNAL_SYNC_ALWAYS);
	config_queue_conf(&c, "jobs.b+audit", &q); /* '*' takes '.' and '+' too */
	ck_assert_uint_eq(q.max_items, 3);
	ck_assert_uint_eq(q.max_open, 16);
	config_queue_conf(&c, "jx", &q);
	ck_assert_uint_eq(q.max_items, 99);
	ck_assert_int_eq(q.max_age_ms, 5000);
	config_queue_conf(&c, "other", &q);
	ck_assert_uint_eq(q.max_items, 0);
	ck_assert_uint_eq(q.max_size, 1024);
	ck_assert_int_eq(config_queue_known(&c, "jobs.a"), 1);
	ck_assert_int_eq(config_queue_known(&c, "jobs.zz"), 1);
	ck_assert_int_eq(config_queue_known(&c, "jx"), 1);
	ck_assert_int_eq(config_queue_known(&c, "logs"), 1);   /* no keys: named all the same */
	ck_assert_int_eq(config_queue_known(&c, "logs2"), 0);  /* '?' is one character */
	ck_assert_int_eq(config_queue_known(&c, "other"), 0);
	config_free(&c);
}
END_TEST

/* A header names its queue by the whole name (inih keeps 49 bytes of a
 * section); a bad name or pattern is refused at the header's line. */
START_TEST(section_names)
{
	static const char longname[] =
		"a_queue_name_that_is_much_longer_than_forty_nine_bytes_0123456789";
	struct config c;
	struct queue_conf q;
	char err[256], text[512];

	config_defaults(&c);
	snprintf(text, sizeof(text), "[queue %s]\nmax_items = 7\n[queue empty]\n", longname);
	write_conf(text);
	ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), 0);
	config_queue_conf(&c, longname, &q);
	ck_assert_uint_eq(q.max_items, 7);
	ck_assert_int_eq(config_queue_known(&c, longname), 1);
	ck_assert_int_eq(config_queue_known(&c, "empty"), 1);
	/* the first 49 bytes of the section are not the queue */
	config_queue_conf(&c, "a_queue_name_that_is_much_longer_than_forty_n", &q);
	ck_assert_uint_eq(q.max_items, 0);
	write_conf("[server]\nport = 1\n\n[queue ../x*]\n");
	ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), TERN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, ":4: bad queue name or pattern '../x*' in section header"));
	ck_assert_int_eq(config_queue_known(&c, "empty"), 1); /* unchanged */
	config_free(&c);
}
END_TEST

/* A file that is not text is refused at the line of its first bad byte,
 * and the configuration stays as it was. */
START_TEST(not_text_refused)
{
	static const struct {
		const char *text;
		size_t len;
		const char *err;
	} cases[] = {
		{ "\0[server]\n", 11, ":1: NUL byte at column 1: a config file is text" },
		{ "[server]\nport = 1\0\n", 19, ":2: NUL byte at column 9" },
		{ "[server]\n# caf\xe9\n", 15, ":2: invalid UTF-8 (byte 0xe9 at column 6)" },
		{ "# \xc0\xaf\n", 5, ":1: invalid UTF-8 (byte 0xc0 at column 3)" },   /* overlong */
		{ "# \xed\xa0\x80\n", 6, ":1: invalid UTF-8 (byte 0xed" },            /* surrogate */
		{ "# \xf4\x90\x80\x80\n", 7, ":1: invalid UTF-8 (byte 0xf4" },      /* > U+10FFFF */
		{ "# \xe2\x82", 4, ":1: invalid UTF-8 (byte 0xe2 at column 3)" },      /* cut short */
	};
	struct config c;
	struct queue_conf q;
	static const char utf8[] = "# caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\x8d ";
	char err[256], line[300];
	unsigned i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		config_defaults(&c);
		write_conf("[queues]\nmax_items = 5\n");
		ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), 0);
		write_bytes(cases[i].text, cases[i].len);
		ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), TERN_EINVAL);
		ck_assert_msg(strstr(err, cases[i].err) && !strncmp(err, path, strlen(path)),
			      "case %u: %s", i, err);
		config_queue_conf(&c, "q", &q);
		ck_assert_uint_eq(q.max_items, 5);
		config_free(&c);
	}
	/* UTF-8 that is valid passes; so does a line of CONFIG_LINE_MAX bytes */
	config_defaults(&c);
	memset(line, 'x', sizeof(line));
	memcpy(line, utf8, sizeof(utf8) - 1);
	line[CONFIG_LINE_MAX] = '\n';
	write_bytes(line, CONFIG_LINE_MAX + 1);
	ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), 0);
	line[CONFIG_LINE_MAX] = 'x';
	line[CONFIG_LINE_MAX + 1] = '\n';
	write_bytes(line, CONFIG_LINE_MAX + 2);
	ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), TERN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, ":1: line too long (199 bytes; at most 198)"));
	config_free(&c);
}
END_TEST

/* The server's guard keys: defaults and values. */
START_TEST(guard_keys)
{
	struct config c;
	char err[256];

	config_defaults(&c);
	ck_assert_uint_eq(c.request_timeout_s, 30);
	ck_assert_uint_eq(c.max_queues, 10000);
	ck_assert_int_eq(c.auto_create, 1);
	write_conf("[server]\nrequest_timeout = 0\nmax_queues = 0\nauto_create = no\n");
	ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), 0);
	ck_assert_uint_eq(c.request_timeout_s, 0);
	ck_assert_uint_eq(c.max_queues, 0);
	ck_assert_int_eq(c.auto_create, 0);
	write_conf("[server]\nrequest_timeout = 86401\n");
	ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), TERN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, ":2: request_timeout must be seconds 0..86400"));
	write_conf("[server]\nauto_create = maybe\n");
	ck_assert_int_eq(config_load(&c, path, err, sizeof(err)), TERN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, ":2: auto_create must be yes or no"));
	config_free(&c);
}
END_TEST

/* The table of keys is whole, and its defaults for the queue settings are
 * those queue.c and the journal give a queue made without a config. */
START_TEST(keys_table)
{
	struct config c;
	struct queue_conf q;
	char err[256] = "";

	ck_assert_msg(config_keys_check(err, sizeof(err)) == 0, "%s", err);
	config_defaults(&c);
	queue_conf_default(&q);
	ck_assert_uint_eq(c.qdefault.max_items, q.max_items);
	ck_assert_uint_eq(c.qdefault.max_size, q.max_size);
	ck_assert_uint_eq(c.qdefault.max_item_size, q.max_item_size);
	ck_assert_int_eq(c.qdefault.max_age_ms, q.max_age_ms);
	ck_assert_int_eq(c.qdefault.discard_old_when_full, q.discard_old_when_full);
	ck_assert_int_eq(c.qdefault.open_timeout_ms, q.open_timeout_ms);
	ck_assert_uint_eq(c.qdefault.max_open, q.max_open);
	ck_assert_uint_eq(c.qdefault.max_deliveries, q.max_deliveries);
	ck_assert_str_eq(c.qdefault.dead_letter, q.dead_letter);
	ck_assert_str_eq(c.qdefault.expire_to, q.expire_to);
	ck_assert_int_eq(c.qdefault.max_queue_age_ms, q.max_queue_age_ms);
	ck_assert_int_eq(c.qdefault.status, q.status);
	ck_assert_int_eq(c.qdefault.jopts.sync, q.jopts.sync);
	ck_assert_uint_eq(c.qdefault.jopts.sync_interval_ms, q.jopts.sync_interval_ms);
	ck_assert_int_eq(c.qdefault.jopts.prealloc, q.jopts.prealloc);
	ck_assert_uint_eq(c.qdefault.jopts.segment_size, q.jopts.segment_size);
	ck_assert_uint_eq(c.qdefault.jopts.max_memory_size, q.jopts.max_memory_size);
	ck_assert_uint_eq(c.qdefault.jopts.checkpoint_interval_ms, q.jopts.checkpoint_interval_ms);
	ck_assert_int_eq(c.qdefault.jopts.cache, q.jopts.cache);
	ck_assert_int_eq(config_key_reloads("server", "request_timeout"), 1);
	ck_assert_int_eq(config_key_reloads("server", "port"), 0);
	ck_assert_int_eq(config_key_reloads("journal", "group_wait_us"), 1);
	ck_assert_int_eq(config_key_reloads("queues", "max_items"), 1);
	ck_assert_int_eq(config_key_reloads("server", "no_such_key"), 0);
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
	tcase_add_test(tc, pattern_sections);
	tcase_add_test(tc, section_names);
	tcase_add_test(tc, not_text_refused);
	tcase_add_test(tc, guard_keys);
	tcase_add_test(tc, status_and_aliases);
	tcase_add_test(tc, keys_table);
	suite_add_tcase(s, tc);
	return s;
}
