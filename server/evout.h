/*
 * evout.h: appending text to a libevent buffer while remembering whether
 * any append failed, so that a renderer (metrics.c, statuspage.c) writes
 * straight on and checks once at the end.
 */
#ifndef TERN_EVOUT_H
#define TERN_EVOUT_H

#include <event2/buffer.h>
#include <stdarg.h>
#include <string.h>

/* Appends printf output to b; a failure sets *err to 1. */
__attribute__((format(printf, 3, 4)))
static inline void evout_printf(struct evbuffer *b, int *err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (evbuffer_add_vprintf(b, fmt, ap) < 0)
		*err = 1;
	va_end(ap);
}

/* Appends the string s to b; a failure sets *err to 1. */
static inline void evout_str(struct evbuffer *b, int *err, const char *s)
{
	if (evbuffer_add(b, s, strlen(s)) < 0)
		*err = 1;
}

#endif
