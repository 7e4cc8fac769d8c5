"""
ternd's reports to a service manager (sd_notify(3)), checked on a datagram
socket standing in for systemd's NOTIFY_SOCKET: the status while recovering,
READY=1 with the listening address, the watchdog's WATCHDOG=1 from the event
loop, RELOADING=1 then READY=1 around a reload (SIGHUP and the reload
command), STOPPING=1 on SIGTERM, and no READY=1 when the start fails.
"""
import os
import re
import signal

import pytest

from opsutil import SANITIZER_RE, TIMEOUT, fields, run_ternd, wait_until

READY_STATUS_RE = re.compile(r"^listening on 127\.0\.0\.1:(\d+)$")


def is_ready(m):
    return fields(m).get("READY") == "1"


def is_watchdog(m):
    return m == "WATCHDOG=1"


def start_notified(ternd, monkeypatch, notify, conf=None, env=None):
    """A ternd whose NOTIFY_SOCKET is ours (the fixture's Popen inherits
    the environment); returns it after READY=1 named its port."""
    monkeypatch.setenv("NOTIFY_SOCKET", notify.env)
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    srv = ternd(conf=conf)
    status = notify.expect(lambda m: fields(m).get("STATUS", "").startswith("recovering"),
                           what="the recovering status")
    assert fields(status) == {"STATUS": "recovering queues in %s" % srv.datadir}
    ready = notify.expect(is_ready, what="READY=1", skip=is_watchdog)
    f = fields(ready)
    assert set(f) == {"READY", "STATUS"}, ready
    m = READY_STATUS_RE.match(f["STATUS"])
    assert m and int(m.group(1)) == srv.port, ready
    return srv


def stop_notified(srv, notify):
    srv.signal(signal.SIGTERM)
    msg = notify.expect(lambda m: "STOPPING=1" in m, what="STOPPING=1", skip=is_watchdog)
    assert fields(msg) == {"STOPPING": "1", "STATUS": "stopping"}
    assert srv.wait(TIMEOUT) == 0
    srv.expected_rc = 0
    # Reported once.
    notify.quiet(0.3, lambda m: "STOPPING" in m)


def test_ready_after_recovery_then_stopping(ternd, monkeypatch, notify):
    srv = start_notified(ternd, monkeypatch, notify)
    # READY means requests are served.
    with srv.conn() as c:
        assert c.set("jobs", "x") == b"STORED\r\n"
        assert c.get1("jobs") == b"x"
    # Without WATCHDOG_USEC there are no keep-alives.
    notify.quiet(0.5, is_watchdog)
    stop_notified(srv, notify)


def test_ready_after_recovering_existing_queues(ternd, monkeypatch, notify):
    """READY=1 comes after every queue of the data directory is recovered:
    items stored before a restart are there once it is sent."""
    first = ternd(conf="[journal]\nsegment_size = 64K\n")
    with first.conn() as c:
        for i in range(20):
            assert c.set("q%d" % (i % 4), "item%d" % i) == b"STORED\r\n"
    first.signal(signal.SIGTERM)
    assert first.wait(TIMEOUT) == 0
    first.expected_rc = 0
    monkeypatch.setenv("NOTIFY_SOCKET", notify.env)
    srv = ternd(conf="[journal]\nsegment_size = 64K\n", datadir=first.datadir)
    notify.expect(is_ready, what="READY=1",
                  skip=lambda m: fields(m).get("STATUS", "").startswith("recovering"))
    with srv.conn() as c:
        st = c.stats()
        assert st["queues"] == "4"
        assert sum(int(st["queue_q%d_items" % i]) for i in range(4)) == 20
    stop_notified(srv, notify)


def test_failed_start_reports_status_not_ready(tmp_path, notify):
    """A data directory that cannot be opened: exit 1, STATUS=failed: ...,
    never READY=1."""
    bad = tmp_path / "not-a-dir"
    bad.write_text("x")
    env_before = os.environ.get("NOTIFY_SOCKET")
    os.environ["NOTIFY_SOCKET"] = notify.env
    try:
        rc, out, err = run_ternd(["-p", "0", "-d", str(bad)])
    finally:
        if env_before is None:
            del os.environ["NOTIFY_SOCKET"]
        else:
            os.environ["NOTIFY_SOCKET"] = env_before
    assert rc == 1, err
    msgs = []
    while True:
        m = notify.recv(0.5)
        if m is None:
            break
        msgs.append(m)
    assert msgs[0] == "STATUS=recovering queues in %s" % bad, msgs
    assert len(msgs) == 2, msgs
    assert msgs[1].startswith("STATUS=failed: cannot open data directory %s" % bad), msgs
    assert b"cannot open data directory" in err
    assert not SANITIZER_RE.search(err), err


def test_watchdog_and_reload(ternd, monkeypatch, notify):
    conf = "[queues]\nmax_items = 5\n"
    srv = start_notified(ternd, monkeypatch, notify, conf=conf,
                         env={"WATCHDOG_USEC": "400000", "WATCHDOG_PID": str(os.getpid())})
    # WATCHDOG_PID names another process (this test): no keep-alives.
    notify.quiet(0.6, is_watchdog)
    stop_notified(srv, notify)

    monkeypatch.delenv("WATCHDOG_PID")
    srv = start_notified(ternd, monkeypatch, notify, conf=conf,
                         env={"WATCHDOG_USEC": "400000"})
    # Keep-alives every 200 ms from the event loop: several in a few seconds.
    for _ in range(3):
        notify.expect(is_watchdog, timeout=5, what="WATCHDOG=1")
    # SIGHUP: RELOADING=1 (with MONOTONIC_USEC), then READY=1 once the
    # reload is done; the new setting is in force by then.
    srv.write_conf("[queues]\nmax_items = 1\n")
    srv.signal(signal.SIGHUP)
    msg = notify.expect(lambda m: "RELOADING=1" in m, what="RELOADING=1", skip=is_watchdog)
    f = fields(msg)
    assert set(f) == {"RELOADING", "MONOTONIC_USEC"} and int(f["MONOTONIC_USEC"]) > 0, msg
    notify.expect(lambda m: m == "READY=1", what="READY=1 after the reload", skip=is_watchdog)
    with srv.conn() as c:
        assert c.set("r", "a") == b"STORED\r\n"
        assert c.set("r", "b") == b"NOT_STORED\r\n"
        # The reload command reports the same.
        assert c.call("reload") == b"OK\r\n"
    notify.expect(lambda m: "RELOADING=1" in m, what="RELOADING=1", skip=is_watchdog)
    notify.expect(lambda m: m == "READY=1", what="READY=1", skip=is_watchdog)
    # Keep-alives go on after the reloads.
    notify.expect(is_watchdog, timeout=5, what="WATCHDOG=1")
    stop_notified(srv, notify)


def test_failed_reload_is_loud(ternd, monkeypatch, notify, tmp_path):
    """A reload that cannot be applied keeps every user and right as they
    were: it is logged at error, counted in stats and /metrics, and shown
    by the service manager until a reload succeeds."""
    from opsutil import http_get, metrics_port
    users = tmp_path / "users"
    users.write_text("alice:secret\nbob:pw2\n")
    os.chmod(users, 0o600)
    conf = "[server]\nauth_file = %s\nmetrics_listen = 127.0.0.1:0\n" % users
    srv = start_notified(ternd, monkeypatch, notify, conf=conf)
    ready_status = fields(notify.seen[-1])["STATUS"]
    users.write_text("alice:secret\nbob has no colon\n")  # bob was to be removed
    srv.signal(signal.SIGHUP)
    msg = notify.expect(lambda m: "STATUS=" in m, what="the failure's status", skip=is_watchdog)
    assert fields(msg)["STATUS"].startswith(
        "reload failed, the previous configuration and users stay: %s:2: expected "
        "user:password" % users), msg
    wait_until(lambda: re.search(r"error reload failed: %s:2: expected user:password"
                                 % re.escape(str(users)), srv.stderr().decode()),
               what="the error in the log")
    with srv.conn() as c:
        c.send(b"set auth 0 0 7\r\nbob pw2\r\n")
        c.expect(b"STORED\r\n")  # the failure was loud, and bob is still there
        st = c.stats()
    assert (st["reloads"], st["reload_failures"], st["reload_ok"]) == ("1", "1", "0"), st
    body = http_get(metrics_port(srv.stderr().decode()))[2].decode()
    assert "\ntern_reload_failures_total 1\n" in body and "\ntern_reload_ok 0\n" in body
    # a reload that works puts the status back
    users.write_text("alice:secret\n")
    srv.signal(signal.SIGHUP)
    notify.expect(lambda m: fields(m).get("STATUS") == ready_status, what="the status back",
                  skip=lambda m: is_watchdog(m) or "RELOADING=1" in m)
    notify.expect(lambda m: m == "READY=1", what="READY=1", skip=is_watchdog)
    with srv.conn() as c:
        c.send(b"set auth 0 0 7\r\nbob pw2\r\n")
        c.expect(b"CLIENT_ERROR authentication failure\r\n")
