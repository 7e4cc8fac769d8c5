"""
The running configuration: `stats settings` (text and binary) lists every
effective setting, exactly what --dump-config prints; `verbosity N` (and
tern's `verbosity <level name>`, binary VERBOSITY) changes the log level
at once, and says so in the log; a reload applies the file's log_level
(with -v still a floor), names each [server] key it cannot change without
a restart (not those the command line set), and always confirms itself in
the log, however often it repeats.
"""
import re
import signal
import struct

from opsutil import (bin_frame, bin_req, bin_stats, log_records, run_ternd, stats_lines,
                     wait_until)

CONF = """[server]
max_connections = 77
log_level = info
auto_create = no

[journal]
sync = none

[queue jobs]
max_items = 5

[queue jobs.*]
sync = always

[alias all]
destinations = jobs other
"""


def stats_settings(c):
    lines = stats_lines(c, "settings")
    out = dict(lines)
    assert len(out) == len(lines), "a setting named twice: %r" % lines
    return out


def dumped(srv):
    """--dump-config of the same file and options, as stats settings names
    its keys: {section.key: value}."""
    rc, out, err = run_ternd(["-c", srv.conf_path, "-p", "0", "-d", srv.datadir] + srv.args +
                             ["--dump-config"])
    assert rc == 0, err
    section, out_map = None, {}
    for line in out.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^\[(.*)\]$", line)
        if m:
            section = m.group(1).replace(" ", ".")
            continue
        k, v = line.split(" = ", 1) if " = " in line else (line.rstrip(" ="), "")
        out_map["%s.%s" % (section, k)] = v
    return out_map


def records(srv):
    return log_records(srv.stderr().decode())


def wait_record(srv, msg, level=None, count=1):
    return wait_until(lambda: sum(1 for lv, m in records(srv)
                                  if m == msg and (level is None or lv == level)) >= count,
                      what="log record %r x%d" % (msg, count))


def test_stats_settings_is_the_effective_configuration(ternd):
    srv = ternd(conf=CONF, args=["-a", "0750"])
    with srv.conn() as c:
        st = stats_settings(c)
        want = dumped(srv)
        assert st.pop("verbosity") == "1"  # info
        assert st == want
        # the keys read as the sections name them, values as the file writes them
        some = {"server.max_connections": "77", "server.unix_socket_mode": "0750",
                "server.unix_socket": "", "journal.sync": "none", "journal.segment_size": "64M",
                "queue.jobs.max_items": "5", "queue.jobs.*.sync": "always",
                "alias.all.destinations": "jobs other"}
        assert {k: st.get(k) for k in some} == some
        # a queue named like memcached's group is reached by pattern
        c.send(b"stats queue settings\r\n")
        c.expect(b"END\r\n")
    # binary STAT "settings": the same lines
    with srv.conn() as b:
        got = bin_stats(b, b"settings")
        assert got.pop("verbosity") == "1"
        assert got == want


def test_verbosity_sets_the_log_level(ternd):
    srv = ternd(conf="[server]\nauto_create = no\n")
    with srv.conn() as c:
        # debug: a refused queue is logged at debug
        c.send(b"verbosity 2\r\nget nosuch\r\n")
        c.expect(b"OK\r\nCLIENT_ERROR no such queue and auto_create is off\r\n")
        wait_record(srv, "log level debug (was info): verbosity 2", "info")
        wait_record(srv, "refused queue nosuch: auto_create is off and no section names it",
                    "debug")
        assert stats_settings(c)["verbosity"] == "2"
        assert stats_settings(c)["server.log_level"] == "debug"
        # memcached's 0: warnings and errors only; the change is said first
        c.send(b"verbosity 0 noreply\r\nstatus READONLY\r\nstatus UP\r\n")
        c.expect(b"END\r\nEND\r\n")
        wait_record(srv, "log level warn (was debug): verbosity 0", "info")
        st = stats_settings(c)
        assert (st["verbosity"], st["server.log_level"]) == ("0", "warn")
        # tern's own form names the level; error reads as verbosity 0
        c.send(b"verbosity error\r\n")
        c.expect(b"OK\r\n")
        st = stats_settings(c)
        assert (st["verbosity"], st["server.log_level"]) == ("0", "error")
        c.send(b"verbosity 1\r\nstatus READONLY\r\nstatus UP\r\n")
        c.expect(b"OK\r\nEND\r\nEND\r\n")
        wait_record(srv, "log level info (was error): verbosity 1", "info")
        wait_record(srv, "server status UP -> READONLY (status command)", "info")
    msgs = [m for _, m in records(srv)]
    # nothing at info was written while the level was warn or error
    i = msgs.index("log level warn (was debug): verbosity 0")
    j = msgs.index("log level info (was error): verbosity 1")
    assert all("status" not in m for m in msgs[i:j]), msgs[i:j]
    # binary VERBOSITY: the same mapping (5 is debug, as -vvv)
    with srv.conn() as b:
        b.send(bin_req(0x1b, extras=struct.pack(">I", 5), opaque=3))
        f = bin_frame(b)
        assert (f["op"], f["status"], f["opaque"]) == (0x1b, 0, 3)
        assert bin_stats(b, b"settings")["server.log_level"] == "debug"
    wait_record(srv, "log level debug (was info): verbosity 5", "info")


def test_verbosity_needs_the_admin_right(ternd, tmp_path):
    auth = tmp_path / "users"
    auth.write_text("op:secret\nreader:pw\n")
    srv = ternd(conf="[server]\nauth_file = %s\n[access]\nreader = read=q stats\n" % auth)
    with srv.conn() as c:
        c.send(b"set x 0 0 9\r\nreader pw\r\nverbosity 2\r\n")
        c.expect(b"STORED\r\nCLIENT_ERROR access denied: admin\r\n")
        assert stats_settings(c)["server.log_level"] == "info"
    with srv.conn() as c:
        c.send(b"set x 0 0 9\r\nop secret\r\nverbosity 2\r\n")
        c.expect(b"STORED\r\nOK\r\n")


def test_reload_applies_log_level_and_names_restart_keys(ternd):
    srv = ternd(conf="[server]\nlog_level = info\nauto_create = no\n", args=["-l", "127.0.0.1"])
    with srv.conn() as c:
        assert stats_settings(c)["server.log_level"] == "info"
        srv.write_conf("[server]\nlog_level = debug\nauto_create = no\nport = 1\n"
                       "idle_timeout = 9\nlisten = 127.0.0.2\nmax_queues = 7\npoll_us = 5\n")
        c.send(b"reload\r\nget nosuch\r\n")
        c.expect(b"OK\r\nCLIENT_ERROR no such queue and auto_create is off\r\n")
        wait_record(srv, "refused queue nosuch: auto_create is off and no section names it",
                    "debug")
        st = stats_settings(c)
        # applied: the log level and max_queues; kept: what needs a restart
        assert (st["server.log_level"], st["server.max_queues"]) == ("debug", "7")
        assert (st["server.port"], st["server.idle_timeout"], st["server.poll_us"]) == \
            ("0", "0", "100")
        # the same reload again: everything said again, nothing folded
        c.send(b"reload\r\n")
        c.expect(b"OK\r\n")
    path = srv.conf_path
    restart = ["reload: idle_timeout = 9 in %s needs a restart; running with idle_timeout = 0"
               % path,
               "reload: poll_us = 5 in %s needs a restart; running with poll_us = 100" % path]
    wait_record(srv, "configuration reloaded from %s" % path, "info", count=2)
    recs = records(srv)
    for m in restart:
        assert sum(1 for lv, r in recs if (lv, r) == ("warn", m)) == 2, (m, recs)
    # port and listen were given on the command line: the file's do not count
    said = [m for _, m in recs if m.startswith("reload:")]
    assert sorted(said) == sorted(restart * 2), said
    assert not any(m.startswith("last message repeated") for _, m in recs), recs
    assert sum(1 for lv, m in recs if m == "log level debug (was info): reload") == 1, recs
    # SIGHUP does the same; a key removed from the file goes back to its
    # default (log_level info)
    srv.write_conf("[server]\nauto_create = no\n")
    srv.signal(signal.SIGHUP)
    wait_record(srv, "configuration reloaded from %s" % path, "info", count=3)
    wait_record(srv, "log level info (was debug): reload", "info")
    with srv.conn() as c:
        assert stats_settings(c)["server.log_level"] == "info"


def test_reload_keeps_the_v_floor(ternd):
    srv = ternd(conf="[server]\nlog_level = error\n", args=["-vv"])
    with srv.conn() as c:
        assert stats_settings(c)["server.log_level"] == "debug"
        srv.write_conf("[server]\nlog_level = warn\n")
        c.send(b"reload\r\n")
        c.expect(b"OK\r\n")
        assert stats_settings(c)["server.log_level"] == "debug"
    assert not any(m.startswith("log level") for _, m in records(srv))


def test_failed_reload_always_logged(ternd):
    srv = ternd(conf="[server]\n")
    srv.write_conf("[server]\nbogus = 1\n")
    with srv.conn() as c:
        for _ in range(2):
            c.send(b"reload\r\n")
            line = c.readline()
            assert line.startswith(b"SERVER_ERROR reload failed: "), line
    msg = "reload failed: %s:2: unknown key 'bogus' in [server]" % srv.conf_path
    wait_record(srv, msg, "error", count=2)
