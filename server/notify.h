/*
 * notify.h: ternd's reports to a service manager (systemd's sd_notify(3)
 * protocol, through libsystemd): readiness, reloading, stopping, a status
 * line, and the watchdog's keep-alive.
 *
 * Every call is a no-op when NOTIFY_SOCKET is not set (ternd started from
 * a shell, a test or another supervisor), so callers never check.  A
 * failed send is logged once at warn and otherwise ignored: the service
 * manager is told, it is not a dependency of the queue.
 *
 * Who calls what: main.c reports the status while recovering, READY=1 once
 * the server is built (journals recovered, socket bound) and STOPPING=1
 * when the loop has ended; the event loop (server.c) attaches the watchdog
 * timer with notify_attach() and reports reloads and the start of an
 * orderly shutdown as they begin.
 */
#ifndef TERN_NOTIFY_H
#define TERN_NOTIFY_H

struct event_base;

/* 1 when a service manager listens (NOTIFY_SOCKET is set). */
int notify_enabled(void);

/*
 * Arms the watchdog on base when the service manager asked for one
 * (WATCHDOG_USEC, and WATCHDOG_PID if set is this process): WATCHDOG=1 is
 * sent every WATCHDOG_USEC/2 from a timer of the event loop, so a loop that
 * hangs stops the keep-alives and gets the service restarted.  Also keeps
 * base for notify_reloading().  The timers are libevent "once" events, which
 * event_base_free() releases: nothing to undo.  Returns 0, or TERN_ENOMEM
 * when the timer cannot be added (logged).
 */
int notify_attach(struct event_base *base);

/* READY=1 with a STATUS= line (status may be NULL).  Also sent after a
 * reload (see notify_reloading). */
void notify_ready(const char *status);

/*
 * RELOADING=1 (with MONOTONIC_USEC=, which systemd's notify-reload type
 * wants).  Call it on the event-loop thread as a reload starts: READY=1
 * follows from the loop's next pass, that is once the reload the caller is
 * running has finished (reloads are synchronous).  Without notify_attach()
 * READY=1 is sent at once.
 */
void notify_reloading(void);

/* STOPPING=1 with STATUS=stopping; sent once, later calls do nothing. */
void notify_stopping(void);

/* STATUS=<formatted text> (shown by systemctl status). */
void notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
