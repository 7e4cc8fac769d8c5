/* test_log.c: lib/log: line format, levels, folded repeats (by the next
 * message and by the flusher thread), records that never fold, journald
 * prefixes, one line per record under concurrent writers, errno kept. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/log.h"
#include "../../lib/tern.h"

static int out_fd = -1;

/* Logs into a fresh memory file with the given level and fold window. */
static void open_log(enum log_level level, int64_t repeat_ms)
{
	struct log_opts o;

	out_fd = memfd_create("log", 0);
	ck_assert_int_ge(out_fd, 0);
	log_opts_default(&o);
	o.fd = out_fd;
	o.level = level;
	o.repeat_ms = repeat_ms;
	ck_assert_int_eq(log_open(&o), 0);
}

static void teardown(void)
{
	log_close();
	unsetenv("JOURNAL_STREAM");
	if (out_fd >= 0)
		close(out_fd);
	out_fd = -1;
}

/* Everything written so far (static buffer, NUL-terminated). */
static const char *written(void)
{
	static char buf[1 << 20];
	ssize_t n = pread(out_fd, buf, sizeof(buf) - 1, 0);

	ck_assert_int_ge(n, 0);
	buf[n] = 0;
	return buf;
}

static int count_lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* The text after "TIME LEVEL " of line i (0-based), in a static buffer. */
static const char *line_msg(int i)
{
	static char buf[LOG_LINE_MAX + 64];
	const char *s = written(), *e;

	while (i-- > 0) {
		s = strchr(s, '\n');
		ck_assert_ptr_nonnull(s);
		s++;
	}
	e = strchr(s, '\n');
	ck_assert_ptr_nonnull(e);
	s = strchr(s, ' ');
	s = strchr(s + 1, ' ') + 1;
	snprintf(buf, sizeof(buf), "%.*s", (int)(e - s), s);
	return buf;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

START_TEST(line_format)
{
	regex_t re;
	const char *s;

	open_log(LOG_LEVEL_INFO, 0);
	log_info("hello %d", 5);
	log_warn("careful");
	log_error("broken: %s", "disk");
	s = written();
	ck_assert_int_eq(regcomp(&re,
				 "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z "
				 "info hello 5\n"
				 "[0-9T:.-]{23}Z warn careful\n"
				 "[0-9T:.-]{23}Z error broken: disk\n$",
				 REG_EXTENDED),
			 0);
	ck_assert_msg(regexec(&re, s, 0, NULL, 0) == 0, "got: %s", s);
	regfree(&re);
}
END_TEST

START_TEST(levels_filter)
{
	open_log(LOG_LEVEL_WARN, 0);
	ck_assert(log_enabled(LOG_LEVEL_ERROR));
	ck_assert(log_enabled(LOG_LEVEL_WARN));
	ck_assert(!log_enabled(LOG_LEVEL_INFO));
	log_debug("d");
	log_info("i");
	log_warn("w");
	log_error("e");
	ck_assert_int_eq(count_lines(written()), 2);
	ck_assert_str_eq(line_msg(0), "w");
	ck_assert_str_eq(line_msg(1), "e");
	log_set_level(LOG_LEVEL_DEBUG);
	ck_assert_int_eq(log_get_level(), LOG_LEVEL_DEBUG);
	log_debug("d2");
	ck_assert_int_eq(count_lines(written()), 3);
	ck_assert(strstr(written(), " debug d2\n"));
	log_set_level(LOG_LEVEL_ERROR);
	log_warn("w2");
	ck_assert_int_eq(count_lines(written()), 3);
}
END_TEST

START_TEST(repeats_fold_until_a_different_message)
{
	open_log(LOG_LEVEL_INFO, 60000);
	for (int i = 0; i < 5; i++)
		log_warn("queue q: journal write failed");
	ck_assert_int_eq(count_lines(written()), 1);
	log_warn("something else");
	ck_assert_int_eq(count_lines(written()), 3);
	ck_assert_str_eq(line_msg(0), "queue q: journal write failed");
	ck_assert_str_eq(line_msg(1), "last message repeated 4 times");
	ck_assert(strstr(written(), " warn last message repeated 4 times\n"));
	ck_assert_str_eq(line_msg(2), "something else");
	/* the same text at another level is another message */
	log_error("something else");
	ck_assert_int_eq(count_lines(written()), 4);
	/* one repeat: singular */
	log_error("something else");
	log_info("third");
	ck_assert_str_eq(line_msg(4), "last message repeated 1 time");
	ck_assert_str_eq(line_msg(5), "third");
}
END_TEST

START_TEST(unfolded_records_are_always_written)
{
	open_log(LOG_LEVEL_INFO, 60000);
	log_info("configuration reloaded");
	log_info("configuration reloaded");
	/* the pending count goes first, then the record itself */
	log_msg_unfolded(LOG_LEVEL_INFO, "configuration reloaded");
	log_msg_unfolded(LOG_LEVEL_INFO, "configuration reloaded");
	/* nothing folds into an unfolded record */
	log_info("configuration reloaded");
	ck_assert_int_eq(count_lines(written()), 5);
	ck_assert_str_eq(line_msg(0), "configuration reloaded");
	ck_assert_str_eq(line_msg(1), "last message repeated 1 time");
	for (int i = 2; i < 5; i++)
		ck_assert_str_eq(line_msg(i), "configuration reloaded");
	/* the level still applies */
	log_set_level(LOG_LEVEL_WARN);
	log_msg_unfolded(LOG_LEVEL_INFO, "configuration reloaded");
	ck_assert_int_eq(count_lines(written()), 5);
}
END_TEST

START_TEST(repeats_flushed_by_the_window)
{
	int64_t deadline;

	open_log(LOG_LEVEL_INFO, 100);
	for (int i = 0; i < 3; i++)
		log_info("tick");
	ck_assert_int_eq(count_lines(written()), 1);
	/* The flusher writes the count within a window (bounded wait). */
	deadline = tern_mono_ms() + 5000;
	while (count_lines(written()) < 2 && tern_mono_ms() < deadline)
		sleep_ms(10);
	ck_assert_int_eq(count_lines(written()), 2);
	ck_assert_str_eq(line_msg(1), "last message repeated 2 times");
	/* Nothing more while nothing repeats. */
	sleep_ms(250);
	ck_assert_int_eq(count_lines(written()), 2);
}
END_TEST

START_TEST(repeats_after_the_window_are_written)
{
	open_log(LOG_LEVEL_INFO, 0);
	log_info("same");
	log_info("same");
	ck_assert_int_eq(count_lines(written()), 2); /* 0 = no folding */
	log_close();
	close(out_fd);
	open_log(LOG_LEVEL_INFO, 50);
	log_info("same");
	sleep_ms(120);
	log_info("same"); /* window over, nothing pending: written again */
	ck_assert_int_eq(count_lines(written()), 2);
	ck_assert_str_eq(line_msg(1), "same");
}
END_TEST

START_TEST(close_writes_the_pending_count)
{
	open_log(LOG_LEVEL_INFO, 60000);
	log_error("e");
	log_error("e");
	log_error("e");
	log_close();
	ck_assert_int_eq(count_lines(written()), 2);
	ck_assert_str_eq(line_msg(1), "last message repeated 2 times");
}
END_TEST

START_TEST(one_line_per_record)
{
	char big[LOG_LINE_MAX * 2];
	const char *s;

	open_log(LOG_LEVEL_INFO, 0);
	log_info("a\nb\rc\td\x7f");
	ck_assert_str_eq(line_msg(0), "a?b?c?d?");
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	log_info("%s", big);
	ck_assert_int_eq(count_lines(written()), 2);
	s = line_msg(1);
	ck_assert_uint_eq(strlen(s), LOG_LINE_MAX - 1);
	ck_assert_str_eq(s + strlen(s) - 3, "...");
}
END_TEST

START_TEST(journal_stream_prefix)
{
	struct stat st;
	char env[64];

	out_fd = memfd_create("journal", 0);
	ck_assert_int_ge(out_fd, 0);
	ck_assert_int_eq(fstat(out_fd, &st), 0);
	snprintf(env, sizeof(env), "%llu:%llu", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino);
	setenv("JOURNAL_STREAM", env, 1);
	{
		struct log_opts o;

		log_opts_default(&o);
		o.fd = out_fd;
		o.level = LOG_LEVEL_DEBUG;
		ck_assert_int_eq(log_open(&o), 0);
	}
	log_error("e");
	log_warn("w");
	log_info("i");
	log_debug("d");
	ck_assert_str_eq(written(), "<3>e\n<4>w\n<6>i\n<7>d\n");
	/* another descriptor's stream is not this one */
	setenv("JOURNAL_STREAM", "1:2", 1);
	{
		struct log_opts o;

		log_opts_default(&o);
		o.fd = out_fd;
		ck_assert_int_eq(log_open(&o), 0);
	}
	log_info("x");
	ck_assert(strstr(written(), "Z info x\n"));
}
END_TEST

START_TEST(errno_kept)
{
	open_log(LOG_LEVEL_INFO, 0);
	errno = ENOSPC;
	log_error("disk full");
	ck_assert_int_eq(errno, ENOSPC);
	errno = EIO;
	log_debug("dropped");
	ck_assert_int_eq(errno, EIO);
}
END_TEST

#define THREADS 4
#define PER_THREAD 500

static void *writer(void *arg)
{
	long t = (long)arg;

	for (int i = 0; i < PER_THREAD; i++)
		log_info("thread %ld message %d %s", t, i, "padding-padding-padding-padding");
	return NULL;
}

START_TEST(concurrent_writers)
{
	pthread_t th[THREADS];
	int seen[THREADS][PER_THREAD];
	const char *s;
	char *copy, *save = NULL, *line;

	memset(seen, 0, sizeof(seen));
	open_log(LOG_LEVEL_INFO, 1000);
	for (long t = 0; t < THREADS; t++)
		ck_assert_int_eq(pthread_create(&th[t], NULL, writer, (void *)t), 0);
	for (int t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	s = written();
	ck_assert_int_eq(count_lines(s), THREADS * PER_THREAD);
	copy = strdup(s);
	for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		long t;
		int i;
		char tail[64];

		ck_assert_msg(sscanf(line, "%*s info thread %ld message %d %63s", &t, &i, tail) == 3,
			      "mangled line: %s", line);
		ck_assert(t >= 0 && t < THREADS && i >= 0 && i < PER_THREAD);
		ck_assert_str_eq(tail, "padding-padding-padding-padding");
		seen[t][i]++;
	}
	free(copy);
	for (int t = 0; t < THREADS; t++)
		for (int i = 0; i < PER_THREAD; i++)
			ck_assert_int_eq(seen[t][i], 1);
}
END_TEST

START_TEST(names_parse)
{
	enum log_level l;
	enum log_output o;

	ck_assert_int_eq(log_level_parse("error", &l), 0);
	ck_assert_int_eq(l, LOG_LEVEL_ERROR);
	ck_assert_int_eq(log_level_parse("debug", &l), 0);
	ck_assert_int_eq(l, LOG_LEVEL_DEBUG);
	ck_assert_int_eq(log_level_parse("warning", &l), TERN_EINVAL);
	ck_assert_int_eq(log_level_parse("", &l), TERN_EINVAL);
	ck_assert_str_eq(log_level_name(LOG_LEVEL_WARN), "warn");
	ck_assert_str_eq(log_level_name(LOG_LEVEL_INFO), "info");
	ck_assert_int_eq(log_output_parse("syslog", &o), 0);
	ck_assert_int_eq(o, LOG_OUTPUT_SYSLOG);
	ck_assert_int_eq(log_output_parse("stderr", &o), 0);
	ck_assert_int_eq(o, LOG_OUTPUT_STDERR);
	ck_assert_int_eq(log_output_parse("file", &o), TERN_EINVAL);
	ck_assert_str_eq(log_output_name(LOG_OUTPUT_SYSLOG), "syslog");
}
END_TEST

START_TEST(defaults_before_open)
{
	int saved = dup(2);

	/* Not opened: records go to descriptor 2 at level info. */
	log_close();
	out_fd = memfd_create("stderr", 0);
	ck_assert_int_ge(out_fd, 0);
	ck_assert_int_ge(dup2(out_fd, 2), 0);
	log_debug("hidden");
	log_info("shown");
	log_info("shown");
	dup2(saved, 2);
	close(saved);
	ck_assert_int_eq(count_lines(written()), 2);
	ck_assert_str_eq(line_msg(0), "shown");
	ck_assert_str_eq(line_msg(1), "shown");
}
END_TEST

Suite *log_suite(void)
{
	Suite *s = suite_create("log");
	TCase *tc = tcase_create("log");

	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, line_format);
	tcase_add_test(tc, levels_filter);
	tcase_add_test(tc, repeats_fold_until_a_different_message);
	tcase_add_test(tc, unfolded_records_are_always_written);
	tcase_add_test(tc, repeats_flushed_by_the_window);
	tcase_add_test(tc, repeats_after_the_window_are_written);
	tcase_add_test(tc, close_writes_the_pending_count);
	tcase_add_test(tc, one_line_per_record);
	tcase_add_test(tc, journal_stream_prefix);
	tcase_add_test(tc, errno_kept);
	tcase_add_test(tc, concurrent_writers);
	tcase_add_test(tc, names_parse);
	tcase_add_test(tc, defaults_before_open);
	suite_add_tcase(s, tc);
	return s;
}
