/*
 * log.h: tern's log: levels, timestamps, stderr or syslog, folded repeats.
 *
 * Every line is one record: "2024-05-01T12:00:00.123Z LEVEL message" on
 * stderr (UTC, milliseconds).  When stderr is a systemd journal stream
 * (JOURNAL_STREAM names the descriptor) the line is "<N>message" instead:
 * journald keeps its own timestamp and takes the priority N from the prefix.
 * With syslog output, syslog(3) gets the message with the matching priority
 * (LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG) under the ident given.
 *
 * Repeats: a message identical (level and text) to the one before it,
 * within repeat_ms of when that one was written, is counted instead of
 * written.  The count is written as "last message repeated N times" before
 * the next different message, or by a small flusher thread when the window
 * ends, whichever comes first; then a new window starts.  A message that
 * repeats without end therefore costs one line per window.
 *
 * Thread-safe: the event loop and the journal's threads log concurrently;
 * each record is formatted and written whole under one mutex (one write(2)
 * per line, so lines from other processes sharing the descriptor do not
 * interleave inside a line either).  Control characters in a message are
 * written as '?', so a record is always one line.
 *
 * Before log_open() (and after log_close()) records go to descriptor 2 at
 * level info with the stderr format and no folding, so errors met while
 * reading the configuration are logged like any other.
 */
#ifndef TERN_LOG_H
#define TERN_LOG_H

#include <stdint.h>

/* X-macro table of levels: enum suffix, name in config and on each line. */
#define LOG_LEVELS(X)          \
	X(ERROR, "error")      \
	X(WARN, "warn")        \
	X(INFO, "info")        \
	X(DEBUG, "debug")

enum log_level {
#define LOG_LEVEL_ENUM(e, s) LOG_LEVEL_##e,
	LOG_LEVELS(LOG_LEVEL_ENUM)
#undef LOG_LEVEL_ENUM
};

#define LOG_OUTPUTS(X)         \
	X(STDERR, "stderr")    \
	X(SYSLOG, "syslog")

enum log_output {
#define LOG_OUTPUT_ENUM(e, s) LOG_OUTPUT_##e,
	LOG_OUTPUTS(LOG_OUTPUT_ENUM)
#undef LOG_OUTPUT_ENUM
};

#define LOG_LEVEL_DEFAULT LOG_LEVEL_INFO
#define LOG_REPEAT_MS_DEFAULT 10000
#define LOG_LINE_MAX 2048 /* longer messages are cut, ending in "..." */

struct log_opts {
	enum log_level level;   /* records above it are dropped; default info */
	enum log_output output; /* default stderr */
	int fd;                 /* stderr output: the descriptor; default 2 */
	int64_t repeat_ms;      /* folding window; 0 = write every repeat */
	const char *ident;      /* syslog ident (kept by reference); "ternd" */
};

/* Fills o with the defaults above. */
void log_opts_default(struct log_opts *o);

/*
 * Starts logging with o (copied; o->ident must outlive the log).  Calling it
 * again replaces the settings (the pending repeat count is written first).
 * Returns 0, or TERN_ESYS when the flusher thread cannot be started (the
 * log then works without it: a count waits for the next message).
 */
int log_open(const struct log_opts *o);

/* Writes a pending repeat count, stops the flusher thread, closes syslog
 * and returns to the defaults described above.  Idempotent. */
void log_close(void);

/* Changes only the level; safe from any thread at any time. */
void log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* 1 when a record at level would be written (to skip costly formatting). */
int log_enabled(enum log_level level);

/* Writes one record (fmt is printf's; no trailing newline needed). */
void log_msg(enum log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* As log_msg, but never folded: the record is written even when it repeats
 * the one before (a pending count is written first), and the next record is
 * not folded into it.  For answers an operator waits for, such as a
 * reload's confirmation. */
void log_msg_unfolded(enum log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)

/* "error", "warn", "info", "debug" <-> level.  Parse: 0 or TERN_EINVAL. */
int log_level_parse(const char *s, enum log_level *out);
const char *log_level_name(enum log_level level);
/* "stderr", "syslog" <-> output.  Parse: 0 or TERN_EINVAL. */
int log_output_parse(const char *s, enum log_output *out);
const char *log_output_name(enum log_output output);

#endif
