/* notify.c: sd_notify(3) reports and the watchdog timer (see notify.h). */
#include "notify.h"

#include <event2/event.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <time.h>

#include "../lib/log.h"
#include "../lib/tern.h"

/* Everything here runs on the main (event-loop) thread. */
static struct event_base *loop;
static struct timeval wd_every; /* half of WATCHDOG_USEC */
static int stopping, warned;

int notify_enabled(void)
{
	const char *e = getenv("NOTIFY_SOCKET");

	return e && *e;
}

static void send_state(const char *state)
{
	int rc;

	if (!notify_enabled())
		return;
	rc = sd_notify(0, state);
	if (rc < 0 && !warned) {
		warned = 1;
		log_warn("cannot notify the service manager: %s", strerror(-rc));
	}
}

static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
	send_state("WATCHDOG=1");
	/* Re-armed only from here: a loop that stops running timers stops
	 * the keep-alives. */
	if (event_base_once(loop, -1, EV_TIMEOUT, on_watchdog, NULL, &wd_every) != 0)
		log_error("cannot re-arm the watchdog timer; the service manager will "
			  "restart ternd");
}

int notify_attach(struct event_base *base)
{
	uint64_t usec = 0;

	loop = base;
	if (!notify_enabled() || sd_watchdog_enabled(0, &usec) <= 0 || usec == 0)
		return 0;
	usec /= 2;
	wd_every.tv_sec = (time_t)(usec / 1000000);
	wd_every.tv_usec = (suseconds_t)(usec % 1000000);
	log_debug("watchdog: keep-alive every %llu ms", (unsigned long long)(usec / 1000));
	if (event_base_once(base, -1, EV_TIMEOUT, on_watchdog, NULL, &wd_every) != 0) {
		log_error("cannot arm the watchdog timer");
		return TERN_ENOMEM;
	}
	return 0;
}

void notify_ready(const char *status)
{
	char buf[600];

	if (!notify_enabled())
		return;
	if (status)
		snprintf(buf, sizeof(buf), "READY=1\nSTATUS=%s", status);
	else
		snprintf(buf, sizeof(buf), "READY=1");
	send_state(buf);
}

static void on_reloaded(evutil_socket_t fd, short what, void *arg)
{
	send_state("READY=1");
}

void notify_reloading(void)
{
	static const struct timeval now = { 0, 0 };
	struct timespec ts;
	char buf[80];

	if (!notify_enabled())
		return;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	snprintf(buf, sizeof(buf), "RELOADING=1\nMONOTONIC_USEC=%llu",
		 (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000);
	send_state(buf);
	if (!loop || event_base_once(loop, -1, EV_TIMEOUT, on_reloaded, NULL, &now) != 0)
		send_state("READY=1");
}

void notify_stopping(void)
{
	if (stopping)
		return;
	stopping = 1;
	send_state("STOPPING=1\nSTATUS=stopping");
}

void notify_status(const char *fmt, ...)
{
	char buf[600];
	va_list ap;

	if (!notify_enabled())
		return;
	memcpy(buf, "STATUS=", 7);
	va_start(ap, fmt);
	vsnprintf(buf + 7, sizeof(buf) - 7, fmt, ap);
	va_end(ap);
	send_state(buf);
}
