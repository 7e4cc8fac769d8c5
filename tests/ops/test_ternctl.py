"""
ternctl (tools/ternctl, built into build/ternctl): every verb against real
servers, in text and --json, one server and several; queue names that end
like a counter's (jobs_delayed beside jobs, whose counters include
delayed_items: one queue each, not a third); move interrupted by SIGKILL of ternctl and of
ternd, counting every body after; the login, TLS and the Unix socket; bad
command lines.  Every run is bounded by a timeout.
"""
import json
import os
import re
import signal
import socket
import subprocess
import threading

import pytest

from opsutil import REPO, TIMEOUT, run, stats_lines, tool, wait_until
from test_tls import make_cert, tls_conf, tls_port

TERNCTL = tool("TERNCTL", "build/ternctl")


def ternctl(*args, env=None, timeout=TIMEOUT * 3):
    """(exit status, stdout, stderr) of one run."""
    full = dict(os.environ)
    full.pop("TERN_PASSWORD", None)
    full.update(env or {})
    r = run(["/usr/bin/python3", TERNCTL] + [str(a) for a in args], timeout=timeout, env=full)
    return r.returncode, r.stdout, r.stderr


def jrun(*args, **kw):
    rc, out, err = ternctl(*(args + ("--json",)), **kw)
    assert rc == 0, (rc, out, err)
    return json.loads(out)


def addr(srv):
    return "127.0.0.1:%d" % srv.port


def fill(srv, queue, bodies, flags=0, exptime=0):
    with srv.conn() as c:
        c.send(b"".join(b"set %s %d %d %d\r\n%s\r\n" % (queue.encode(), flags, exptime, len(b), b)
                        for b in bodies))
        c.expect(b"STORED\r\n" * len(bodies))


def drain(srv, queue):
    """Every body left in queue (taken)."""
    out = []
    with srv.conn() as c:
        while True:
            c.send(b"get %s\r\n" % queue.encode())
            vals = c.read_values()
            if not vals:
                return out
            out += [v[2] for v in vals]


def items(srv, queue):
    with srv.conn() as c:
        return int(c.stats().get("queue_%s_items" % queue, 0))


def test_queues_one_server(ternd):
    srv = ternd()
    # names that end like counters: jobs_delayed beside jobs (whose
    # counters include delayed_items), a beside a_b and a_b_items
    fill(srv, "jobs", [b"1", b"22"])
    fill(srv, "jobs_delayed", [b"x"])
    fill(srv, "a", [b"1"])
    fill(srv, "a_b", [b"1", b"2", b"3"])
    fill(srv, "a_b_items", [b"1234"])
    with srv.conn() as c:
        c.send(b"get jobs/open\r\nstatus queue a READONLY\r\n")
        c.read_values()
        c.expect(b"END\r\n")
        js = jrun("-p", srv.port, "queues", "--interval", "0")
    assert js["servers"] == [addr(srv)] and js["errors"] == {}
    got = {r["queue"]: r for r in js["queues"]}
    assert sorted(got) == ["a", "a_b", "a_b_items", "jobs", "jobs_delayed"]
    assert (got["jobs"]["items"], got["jobs"]["bytes"], got["jobs"]["open"]) == (1, 2, 1)
    assert (got["a_b"]["items"], got["a_b_items"]["bytes"]) == (3, 4)
    assert got["a"]["status"] == "READONLY" and got["jobs"]["status"] == "UP"
    assert got["jobs_delayed"]["items"] == 1
    assert all(r["in_per_s"] is None for r in js["queues"])
    # a pattern; the text table
    rc, out, err = ternctl("-p", srv.port, "queues", "a*", "--interval", "0")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["QUEUE", "ITEMS", "BYTES", "OPEN", "WAITERS", "OLDEST", "IN/S",
                                "OUT/S", "STATUS"]
    assert [l.split()[0] for l in lines[1:]] == ["a", "a_b", "a_b_items"]
    assert lines[1].split()[-1] == "READONLY" and lines[2].split()[1:4] == ["3", "3", "B"]


def test_queues_rates(ternd):
    """Rates come from two samples: items set and taken between them."""
    srv = ternd()
    fill(srv, "r", [b"x"] * 50)
    stop = threading.Event()

    def traffic():
        with srv.conn() as c:
            while not stop.is_set():
                c.send(b"set r 0 0 1\r\ny\r\nget r\r\n")
                c.expect(b"STORED\r\n")
                c.read_values()

    t = threading.Thread(target=traffic)
    t.start()
    try:
        js = jrun("-p", srv.port, "queues", "r", "--interval", "0.5")
    finally:
        stop.set()
        t.join(TIMEOUT)
    r = js["queues"][0]
    assert r["in_per_s"] > 0 and r["out_per_s"] > 0, r
    assert js["interval_s"] == 0.5


def test_peek_purge_and_json_bodies(ternd):
    srv = ternd()
    fill(srv, "pq", [b"alpha", b"\xff\x00bin", b"line\nbreak"], flags=7)
    js = jrun("-p", srv.port, "peek", "pq", "5")
    assert [(i["id"], i["flags"], i["bytes"]) for i in js["items"]] == [(1, 7, 5), (2, 7, 5),
                                                                       (3, 7, 10)]
    assert js["items"][0]["body"] == "alpha"
    assert js["items"][1]["body_base64"] == "/wBiaW4="
    assert js["items"][2]["body"] == "line\nbreak"
    rc, out, err = ternctl("-p", srv.port, "peek", "pq", "3", "--width", "6")
    assert rc == 0, err
    assert [l.split() for l in out.splitlines()] == [
        ["ID", "FLAGS", "BYTES", "BODY"], ["1", "7", "5", "alpha"], ["2", "7", "5", "\\xf..."],
        ["3", "7", "10", "lin..."]]
    rc, out, err = ternctl("-p", srv.port, "peek", "pq", "3", "--width", "0")
    assert [l.split()[-1] for l in out.splitlines()[1:]] == ["alpha", "\\xff\\x00bin",
                                                             "line\\nbreak"]
    assert items(srv, "pq") == 3  # nothing taken
    rc, out, err = ternctl("-p", srv.port, "peek", "none")
    assert (rc, out) == (0, "queue none: no items\n"), err
    js = jrun("-p", srv.port, "purge", "pq")
    assert js["purged"] == {addr(srv): 3}
    assert items(srv, "pq") == 0
    rc, out, err = ternctl("-p", srv.port, "purge", "pq")
    assert (rc, out) == (0, "%s: purged pq (0 items)\n" % addr(srv)), err


def test_move_keeps_flags_and_exptime(ternd):
    srv = ternd()
    fill(srv, "dead", [b"a", b"b", b"c"], flags=3, exptime=3600)
    fill(srv, "dead", [b"d"], flags=4)
    js = jrun("-p", srv.port, "move", "dead", "live", "2")
    assert js["moved"] == {addr(srv): 2}
    rc, out, err = ternctl("-p", srv.port, "move", "dead", "live")
    assert (rc, out) == (0, "%s: moved 2 items from dead to live\n" % addr(srv)), err
    with srv.conn() as c:
        c.send(b"mg live v f t\r\n" * 4 + b"mg dead v\r\n")
        for body, flags in ((b"a", 3), (b"b", 3), (b"c", 3)):
            m = re.match(rb"^VA 1 f(\d+) t(\d+)\r\n$", c.readline())
            assert m and int(m.group(1)) == flags and 3590 <= int(m.group(2)) <= 3600
            c.expect(body + b"\r\n")
        c.expect(b"VA 1 f4 t-1\r\nd\r\nEN\r\n")


def test_move_stops_when_the_destination_refuses(ternd):
    srv = ternd()
    fill(srv, "src", [b"1", b"2"])
    with srv.conn() as c:
        c.send(b"set dst 0 0 1\r\nx\r\nstatus queue dst READONLY\r\n")
        c.expect(b"STORED\r\nEND\r\n")
    rc, out, err = ternctl("-p", srv.port, "move", "src", "dst")
    assert rc == 1 and out == ""
    assert "move stopped after 0 items: set dst: SERVER_ERROR queue dst is READONLY" in err
    assert drain(srv, "src") == [b"1", b"2"]  # the opened item went back to the head
    rc, out, err = ternctl("-p", srv.port, "move", "src", "src")
    assert rc == 2 and "the same queue" in err


def move_killed(srv_get, kill, n=4000):
    """Fills src with n numbered bodies, starts a move to dst, calls kill
    once dst holds some, and checks (on srv_get(), the server to count on)
    that every body is in src or dst, at most one in both."""
    srv = srv_get()
    bodies = [b"m%05d" % i for i in range(n)]
    for i in range(0, n, 500):
        fill(srv, "src", bodies[i:i + 500])
    p = subprocess.Popen(["/usr/bin/python3", TERNCTL, "-p", str(srv.port), "move", "src", "dst"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: items(srv, "dst") >= 200 or p.poll() is not None,
                   what="the move to begin")
        assert p.poll() is None, "the move ended before the kill: %r" % (p.communicate(),)
        kill(p)
        p.wait(TIMEOUT)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    srv = srv_get()
    # an item the move held open goes back when its connection closes
    wait_until(lambda: items(srv, "src") + items(srv, "dst") >= n, what="the open item back")
    got = drain(srv, "src") + drain(srv, "dst")
    assert set(got) == set(bodies), "lost: %r" % sorted(set(bodies) - set(got))[:5]
    assert len(got) - len(bodies) <= 1, "duplicated %d" % (len(got) - len(bodies))
    return p


def test_move_survives_sigkill_of_ternctl(ternd):
    srv = ternd()
    move_killed(lambda: srv, lambda p: p.send_signal(signal.SIGKILL))


def test_move_survives_sigkill_of_ternd(ternd):
    state = {"srv": ternd()}

    def kill(p):
        old = state["srv"]
        old.expect_exit(-signal.SIGKILL)
        old.kill()
        out, err = p.communicate(timeout=TIMEOUT)
        assert p.returncode == 1 and any(w in err for w in (
            b"connection closed by the server", b"send:", b"receive:")), err
        state["srv"] = ternd(args=["-p", str(old.port)], datadir=old.datadir)

    move_killed(lambda: state["srv"], kill)


def test_status_log_level_settings(ternd):
    srv = ternd()
    fill(srv, "sq", [b"x"])
    a = addr(srv)
    assert jrun("-p", srv.port, "status")["status"] == {a: "UP"}
    js = jrun("-p", srv.port, "status", "readonly")
    assert (js["status"], js["was"]) == ({a: "READONLY"}, {a: "UP"})
    rc, out, err = ternctl("-p", srv.port, "status", "sq", "QUIESCENT")
    assert (rc, out) == (0, "%s: queue sq QUIESCENT (was UP)\n" % a), err
    rc, out, err = ternctl("-p", srv.port, "status", "sq")
    assert (rc, out) == (0, "%s: queue sq QUIESCENT\n" % a), err
    rc, out, err = ternctl("-p", srv.port, "status", "nosuch")
    assert rc == 1 and "%s: no queue nosuch" % a in err
    with srv.conn() as c:
        c.send(b"status\r\nstatus queue sq\r\n")
        c.expect(b"READONLY\r\nQUIESCENT\r\n")
    js = jrun("-p", srv.port, "log-level", "debug")
    assert (js["log_level"], js["was"]) == ({a: "debug"}, {a: "info"})
    rc, out, err = ternctl("-p", srv.port, "log-level", "1")
    assert (rc, out) == (0, "%s: log level info (was debug)\n" % a), err
    js = jrun("-p", srv.port, "settings")
    with srv.conn() as c:
        want = dict(stats_lines(c, "settings"))
    assert js["settings"] == {a: want}
    rc, out, err = ternctl("-p", srv.port, "settings")
    assert rc == 0 and "server.max_queues 10000\n" in out and out.startswith("verbosity 1\n")


def test_watch(ternd):
    srv = ternd()
    fill(srv, "w", [b"abc"] * 3)
    rc, out, err = ternctl("-p", srv.port, "watch", "--count", "2", "--interval", "0.2", "--json")
    assert rc == 0, err
    lines = [json.loads(l) for l in out.splitlines()]
    assert len(lines) == 2
    for l in lines:
        assert (l["queues"], l["items"], l["bytes"], l["servers"], l["servers_down"]) == \
            (1, 3, 9, 1, 0)
        # nothing but ternctl talks to the server: its own traffic is left out
        assert (l["conns"], l["set_per_s"], l["read_bytes_per_s"], l["written_bytes_per_s"]) == \
            (0, 0, 0, 0), l
    rc, out, err = ternctl("-p", srv.port, "watch", "--count", "1", "--interval", "0.1")
    lines = out.splitlines()
    assert rc == 0 and len(lines) == 2 and lines[0].split()[:3] == ["queues", "items", "bytes"]
    assert lines[1].split()[:3] == ["1", "3", "9"]


def test_several_servers_and_one_down(ternd):
    a, b = ternd(), ternd()
    fill(a, "jobs", [b"1"])
    fill(b, "jobs", [b"1", b"2"])
    fill(b, "jobs_delayed", [b"x"])
    s = "%s,%s" % (addr(a), addr(b))
    js = jrun("--servers", s, "queues", "--interval", "0")
    assert [(r["server"], r["queue"], r["items"]) for r in js["queues"]] == [
        (addr(a), "jobs", 1), (addr(b), "jobs", 2), (addr(b), "jobs_delayed", 1)]
    assert js["totals"]["jobs"]["items"] == 3 and js["totals"]["jobs"]["servers"] == 2
    assert js["queues_on_several_servers"] == ["jobs"]
    rc, out, err = ternctl("--servers", s, "queues", "--interval", "0")
    assert rc == 0, err
    rows = [l.split() for l in out.splitlines()]
    assert rows[3][:3] == ["(total)", "jobs", "3"]
    assert rows[-1] == ["queue", "jobs", "has", "items", "on", "several", "servers"]
    js = jrun("--servers", s, "stats")
    assert js["totals"]["cmd_set"] == 4 and js["totals"]["curr_items"] == 4
    for k in ("max_queues", "pid", "version", "poll_us", "status"):
        assert k not in js["totals"], k
    assert js["general"]["max_queues"] == {addr(a): "10000", addr(b): "10000"}
    assert not any(n.startswith("queue_") for n in js["general"])
    # every verb on both servers
    assert jrun("--servers", s, "peek", "jobs")["items"][1]["server"] == addr(b)
    js = jrun("--servers", s, "status", "jobs", "READONLY")
    assert js["status"] == {addr(a): "READONLY", addr(b): "READONLY"}
    assert jrun("--servers", s, "move", "jobs", "j2")["moved"] == {addr(a): 1, addr(b): 2}
    # a server that does not answer: reported, the others still served
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    down = "127.0.0.1:%d" % dead.getsockname()[1]
    dead.close()
    rc, out, err = ternctl("--servers", "%s,%s" % (addr(a), down), "queues", "--interval", "0",
                           "--json")
    js = json.loads(out)
    assert rc == 1 and down in js["errors"] and "cannot connect" in err
    assert [r["server"] for r in js["queues"]] == [addr(a), addr(a)]
    rc, out, err = ternctl("--servers", "%s,%s" % (addr(a), down), "watch", "--count", "1",
                           "--interval", "0.1", "--json")
    assert rc == 1 and json.loads(out)["servers_down"] == 1


def test_login_tls_and_unix_socket(ternd, tmp_path):
    users = tmp_path / "users"
    users.write_text("ops:s3cret\n")
    os.chmod(users, 0o600)
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    cert, key = make_cert(tmp_path, "server")
    sock = str(tmp_path / "t.sock")
    srv = ternd(conf=tls_conf(cert, key, "auth_file = %s\nunix_socket = %s\n" % (users, sock)))
    fill_cmd = b"set a 0 0 10\r\nops s3cret\r\nset tq 0 0 1\r\nx\r\n"
    with srv.conn() as c:
        c.send(fill_cmd)
        c.expect(b"STORED\r\nSTORED\r\n")
    rc, out, err = ternctl("-p", srv.port, "queues")
    assert rc == 1 and "unauthenticated" in err
    js = jrun("-p", srv.port, "-u", "ops", "--password-file", pw, "queues", "--interval", "0")
    assert [r["queue"] for r in js["queues"]] == ["tq"]
    js = jrun("-U", sock, "-u", "ops", "queues", "--interval", "0", env={"TERN_PASSWORD": "s3cret"})
    assert js["servers"] == [sock] and [r["queue"] for r in js["queues"]] == ["tq"]
    rc, out, err = ternctl("-p", srv.port, "-u", "ops", "queues", env={"TERN_PASSWORD": "bad"})
    assert rc == 1 and "login as ops: CLIENT_ERROR authentication failure" in err
    tport = tls_port(srv)
    js = jrun("-p", tport, "--tls", "--tls-ca", cert, "--tls-server-name", "localhost",
              "-u", "ops", "--password-file", pw, "peek", "tq")
    assert js["items"][0]["body"] == "x"
    rc, out, err = ternctl("-p", tport, "--tls", "-u", "ops", "--password-file", pw, "queues")
    assert rc == 1 and "certificate verify failed" in err
    rc, out, err = ternctl("-p", tport, "--tls", "--tls-no-verify", "-u", "ops",
                           "--password-file", pw, "status", "--json")
    assert rc == 0 and json.loads(out)["status"] == {"127.0.0.1:%d" % tport: "UP"}, err


@pytest.mark.parametrize("args,msg", [
    ([], "a verb is needed"),
    (["bogus"], "invalid choice"),
    (["peek", "q", "0"], "peek shows 1 to 1000 items"),
    (["peek", "a/b"], "bad queue name"),
    (["--servers", "x:99999", "queues"], "bad port"),
    (["--servers", "127.0.0.1:1", "-p", "2", "queues"], "--servers goes without"),
    (["-u", "x", "queues"], "-u needs a password"),
    (["--tls-ca", "f", "queues"], "go with --tls"),
    (["status", "a", "b", "c"], "status [QUEUE]"),
    (["log-level", "loud"], "log level: error, warn, info, debug"),
    (["watch", "--count", "0"], "--count must be 1 or more"),
])
def test_bad_command_lines(args, msg):
    rc, out, err = ternctl(*args)
    assert rc == 2 and msg in err and out == "", (rc, out, err)


def test_version_and_help():
    rc, out, err = ternctl("--version")
    with open(os.path.join(REPO, "lib", "tern.h")) as f:
        ver = re.search(r'TERN_VERSION "([^"]+)"', f.read()).group(1)
    assert (rc, out) == (0, "ternctl %s\n" % ver), err
    rc, out, err = ternctl("--help")
    assert rc == 0
    for v in ("queues", "stats", "peek", "purge", "move", "status", "log-level", "settings",
              "watch"):
        assert v in out, v
