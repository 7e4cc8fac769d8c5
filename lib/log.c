/*
 * log.c: levels, line format, stderr/journal/syslog output and folded
 * repeats (see log.h for the contract).
 *
 * DESIGN: one mutex serialises every record, so the fold state (the last
 * message, its window and its count) and the output never see two threads
 * at once.  The flusher thread sleeps on a condition variable that is only
 * signalled when a count starts; it then waits for the window's end and
 * writes the count, so a burst followed by silence is still reported.
 */
#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "tern.h"

static const char *const level_names[] = {
#define LOG_LEVEL_NAME(e, s) s,
	LOG_LEVELS(LOG_LEVEL_NAME)
#undef LOG_LEVEL_NAME
};
static const char *const output_names[] = {
#define LOG_OUTPUT_NAME(e, s) s,
	LOG_OUTPUTS(LOG_OUTPUT_NAME)
#undef LOG_OUTPUT_NAME
};
/* syslog priorities, in level order. */
static const int level_prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG };
#define NLEVELS (sizeof(level_names) / sizeof(level_names[0]))
#define NOUTPUTS (sizeof(output_names) / sizeof(output_names[0]))

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;
static pthread_once_t cv_once = PTHREAD_ONCE_INIT;

static int cur_level = LOG_LEVEL_DEFAULT; /* atomic: read without mu */
/* The rest is guarded by mu. */
static struct log_opts cur = { LOG_LEVEL_DEFAULT, LOG_OUTPUT_STDERR, 2, 0, "ternd" };
static int journal_fmt;  /* stderr is a journald stream: "<N>message" */
static int syslog_open;
static char last[LOG_LINE_MAX];
static enum log_level last_level;
static int have_last;
static int64_t window_ms; /* monotonic ms when last was written */
static uint64_t repeats;  /* identical records folded since */
static pthread_t flusher;
static int flusher_running, flusher_stop;

void log_opts_default(struct log_opts *o)
{
	o->level = LOG_LEVEL_DEFAULT;
	o->output = LOG_OUTPUT_STDERR;
	o->fd = 2;
	o->repeat_ms = LOG_REPEAT_MS_DEFAULT;
	o->ident = "ternd";
}

int log_level_parse(const char *s, enum log_level *out)
{
	int i = tern_word_index(level_names, NLEVELS, s);

	if (i < 0)
		return TERN_EINVAL;
	*out = (enum log_level)i;
	return 0;
}

const char *log_level_name(enum log_level level)
{
	return (unsigned)level < NLEVELS ? level_names[level] : "?";
}

int log_output_parse(const char *s, enum log_output *out)
{
	int i = tern_word_index(output_names, NOUTPUTS, s);

	if (i < 0)
		return TERN_EINVAL;
	*out = (enum log_output)i;
	return 0;
}

const char *log_output_name(enum log_output output)
{
	return (unsigned)output < NOUTPUTS ? output_names[output] : "?";
}

void log_set_level(enum log_level level)
{
	__atomic_store_n(&cur_level, (int)level, __ATOMIC_RELAXED);
}

enum log_level log_get_level(void)
{
	return (enum log_level)__atomic_load_n(&cur_level, __ATOMIC_RELAXED);
}

int log_enabled(enum log_level level)
{
	return (int)level <= __atomic_load_n(&cur_level, __ATOMIC_RELAXED);
}

/* Writes all of buf, retrying after signals and short writes.  A failing
 * descriptor loses the line: there is nowhere left to report it. */
static void write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		buf += n;
		len -= (size_t)n;
	}
}

/* Writes one record to the current output.  Called with mu held. */
static void emit(enum log_level level, const char *msg)
{
	char line[LOG_LINE_MAX + 64];
	int n;

	if (cur.output == LOG_OUTPUT_SYSLOG) {
		syslog(level_prio[level], "%s", msg);
		return;
	}
	if (journal_fmt) {
		n = snprintf(line, sizeof(line), "<%d>%s\n", level_prio[level], msg);
	} else {
		struct timespec ts;
		struct tm tm;

		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s\n",
			     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
			     tm.tm_sec, ts.tv_nsec / 1000000, level_names[level], msg);
	}
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line)) { /* cannot happen: msg is capped */
		n = (int)sizeof(line) - 1;
		line[n - 1] = '\n';
	}
	write_all(cur.fd, line, (size_t)n);
}

/* Writes the pending count, if any.  Called with mu held. */
static void flush_repeats(void)
{
	char msg[64];

	if (!repeats)
		return;
	snprintf(msg, sizeof(msg), "last message repeated %llu time%s",
		 (unsigned long long)repeats, repeats == 1 ? "" : "s");
	repeats = 0;
	emit(last_level, msg);
}

/* Writes or folds one record (fold 0: always written, and nothing folds
 * into it).  Called with mu held. */
static void record(enum log_level level, const char *msg, int fold)
{
	int64_t now = tern_mono_ms();

	if (!fold) {
		flush_repeats();
		emit(level, msg);
		have_last = 0;
		return;
	}
	if (cur.repeat_ms > 0 && have_last && level == last_level &&
	    now - window_ms < cur.repeat_ms && !strcmp(msg, last)) {
		if (repeats++ == 0)
			pthread_cond_signal(&cv);
		return;
	}
	flush_repeats();
	emit(level, msg);
	snprintf(last, sizeof(last), "%s", msg);
	last_level = level;
	have_last = 1;
	window_ms = now;
}

/* log_msg and log_msg_unfolded (fold: whether repeats may fold). */
__attribute__((format(printf, 3, 0)))
static void log_vmsg(enum log_level level, int fold, const char *fmt, va_list ap)
{
	char msg[LOG_LINE_MAX];
	int saved = errno; /* callers log, then return TERN_ESYS with errno */
	int n;

	if ((unsigned)level >= NLEVELS || !log_enabled(level))
		return;
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	if (n < 0) {
		errno = saved;
		return;
	}
	if ((size_t)n >= sizeof(msg))
		memcpy(msg + sizeof(msg) - 4, "...", 4);
	for (char *p = msg; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	pthread_mutex_lock(&mu);
	record(level, msg, fold);
	pthread_mutex_unlock(&mu);
	errno = saved;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vmsg(level, 1, fmt, ap);
	va_end(ap);
}

void log_msg_unfolded(enum log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vmsg(level, 0, fmt, ap);
	va_end(ap);
}

static void cv_init(void)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&cv, &a);
	pthread_condattr_destroy(&a);
}

static void *flusher_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	while (!flusher_stop) {
		int64_t end, now;
		struct timespec ts;

		if (!repeats || cur.repeat_ms <= 0) {
			pthread_cond_wait(&cv, &mu);
			continue;
		}
		end = window_ms + cur.repeat_ms;
		now = tern_mono_ms();
		if (now >= end) {
			flush_repeats();
			window_ms = now; /* further repeats fold into a new window */
			continue;
		}
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += (end - now) / 1000;
		ts.tv_nsec += ((end - now) % 1000) * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&cv, &mu, &ts);
	}
	pthread_mutex_unlock(&mu);
	return NULL;
}

/* A journald stream is named by JOURNAL_STREAM="DEV:INODE" of the
 * descriptor systemd connected (sd_journal_stream_fd(3)). */
static int is_journal_stream(int fd)
{
	const char *e = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2 || fstat(fd, &st) != 0)
		return 0;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

int log_open(const struct log_opts *o)
{
	sigset_t all, old;
	int rc = 0, start, e;

	pthread_once(&cv_once, cv_init);
	pthread_mutex_lock(&mu);
	flush_repeats();
	if (syslog_open && o->output != LOG_OUTPUT_SYSLOG) {
		closelog();
		syslog_open = 0;
	}
	cur = *o;
	if (!cur.ident)
		cur.ident = "ternd";
	log_set_level(cur.level);
	journal_fmt = cur.output == LOG_OUTPUT_STDERR && is_journal_stream(cur.fd);
	if (cur.output == LOG_OUTPUT_SYSLOG) {
		/* Connect now: the socket stays usable whatever the process
		 * gives up later (privileges, a read-only root). */
		openlog(cur.ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
		syslog_open = 1;
	}
	have_last = 0;
	start = cur.repeat_ms > 0 && !flusher_running;
	if (start)
		flusher_running = 1;
	pthread_mutex_unlock(&mu);
	if (!start)
		return 0;
	/* The thread takes no signals: they belong to the event loop. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	e = pthread_create(&flusher, NULL, flusher_main, NULL);
	if (e) {
		pthread_mutex_lock(&mu);
		flusher_running = 0;
		pthread_mutex_unlock(&mu);
		errno = e;
		rc = TERN_ESYS;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

void log_close(void)
{
	int join;

	pthread_once(&cv_once, cv_init);
	pthread_mutex_lock(&mu);
	flush_repeats();
	join = flusher_running;
	flusher_stop = 1;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
	if (join)
		pthread_join(flusher, NULL);
	pthread_mutex_lock(&mu);
	if (syslog_open) {
		closelog();
		syslog_open = 0;
	}
	log_opts_default(&cur);
	cur.repeat_ms = 0;
	log_set_level(cur.level);
	journal_fmt = 0;
	have_last = 0;
	repeats = 0;
	flusher_running = 0;
	flusher_stop = 0;
	pthread_mutex_unlock(&mu);
}
