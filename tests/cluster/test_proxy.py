"""
Queues through nutcracker: every form of a hash-tagged queue's key reaches
the queue's server, multi-key gets are split and merged, a /t= longer than
the proxy's timeout loses nothing, and a backend killed with SIGKILL under
load costs its clients errors, not acknowledged messages.
"""
import os
import re
import signal
import socket
import threading
import time

import pytest

from clusterutil import TIMEOUT, Conn, routes, tern_load, wait_until, where_queues


def test_key_forms_route_together(cluster):
    """Every form of {qN}'s key is served by the server {qN} hashes to:
    plain, /peek, /t=, /open, /close, /abort, /close/open, a name with the
    tag inside it, and a fanout child."""
    cl = cluster()
    names = ["{kf%d}" % i for i in range(24)]
    want = routes(cl.server_list(), names + ["x%sy" % n for n in names]
                  + ["%s+audit" % n for n in names])
    with cl.conn() as c:
        for n in names:
            # The child exists before the sets, so fanout copies them.
            assert c.get("%s+audit" % n) == []
            for body in ("a", "b", "c", "d", "e"):
                assert c.set(n, "%s-%s" % (n, body)) == b"STORED\r\n"
            assert c.set("x%sy" % n, "inner") == b"STORED\r\n"
        for n in names:
            assert c.get1(n + "/peek") == b"%s-a" % n.encode()
            assert c.get1(n + "/t=50") == b"%s-a" % n.encode()
            assert c.get1(n + "/open") == b"%s-b" % n.encode()
            assert c.get(n + "/abort") == []
            assert c.get1(n + "/open") == b"%s-b" % n.encode()
            assert c.get1(n + "/close/open") == b"%s-c" % n.encode()
            assert c.get(n + "/close") == []
            assert c.get1(n) == b"%s-d" % n.encode()
            assert c.get1("%s+audit" % n) == b"%s-a" % n.encode()
    found = where_queues(cl.servers, names + ["x%sy" % n for n in names]
                        + ["%s+audit" % n for n in names])
    for n in names:
        home = cl.index(want[n])
        assert found[n] == [home], n                    # "-e" left there
        assert found["x%sy" % n] == [home] and want["x%sy" % n] == want[n]
        assert found["%s+audit" % n] == [home] and want["%s+audit" % n] == want[n]
    # The tags spread the queues: every server holds some.
    assert {want[n] for n in names} == {"127.0.0.1:%d" % s.port for s in cl.servers}


def test_untagged_options_go_astray(cluster):
    """Without a tag the proxy hashes "q/open" whole: for a queue whose
    option forms hash elsewhere, the get finds nothing (the reason for
    hash tags)."""
    cl = cluster()
    names = ["plain%d" % i for i in range(40)]
    r = routes(cl.server_list(), names + [n + "/open" for n in names])
    astray = [n for n in names if r[n] != r[n + "/open"]]
    assert astray
    with cl.conn() as c:
        for n in astray[:5]:
            assert c.set(n, "x") == b"STORED\r\n"
            assert c.get(n + "/open") == []
            assert c.get1(n) == b"x"


def test_multi_key_get(cluster):
    """get with keys on several servers: nutcracker splits it and merges
    the replies in the order asked."""
    cl = cluster()
    # The servers' ports are random, so is the placement: pick 4 names of
    # each server from a pool (interleaved, so neighbours differ).
    pool = ["{mk%d}" % i for i in range(90)]
    r = routes(cl.server_list(), pool)
    per = {}
    for n in pool:
        per.setdefault(r[n], []).append(n)
    assert len(per) == 3 and all(len(v) >= 4 for v in per.values()), per
    names = [n for group in zip(*[v[:4] for v in per.values()]) for n in group]
    with cl.conn() as c:
        for n in names:
            assert c.set(n, "v" + n) == b"STORED\r\n"
        keys = [n + ("/open" if i % 3 == 0 else "/t=20" if i % 3 == 1 else "")
                for i, n in enumerate(names)]
        c.send("get %s\r\n" % " ".join(keys))
        got = c.read_values()
        assert [k for k, _, _ in got] == keys
        assert [d for _, _, d in got] == [("v" + n).encode() for n in names]
        c.send("get %s\r\n" % " ".join(names))
        assert c.read_values() == []


def test_wait_longer_than_proxy_timeout(cluster):
    """A /t= longer than the proxy's timeout: the client gets SERVER_ERROR,
    so does a request another client queued behind it on the shared server
    connection, and an item set afterwards is not lost to the waiter that
    left; it is read normally."""
    cl = cluster(n=1, timeout=400)
    with cl.conn() as a, cl.conn() as b:
        t0 = time.monotonic()
        a.send("get {tw}/t=3000\r\n")
        time.sleep(0.1)
        b.send("set {other} 0 0 2\r\nhi\r\n")
        assert b.readline() == b"SERVER_ERROR Connection timed out\r\n"
        assert a.readline() == b"SERVER_ERROR Connection timed out\r\n"
        assert time.monotonic() - t0 < 2.5
    with cl.conn() as c:
        # The set behind the waiter never ran: the server drops what a
        # closed connection had not yet had answered.
        assert c.get("{other}") == []
        assert c.set("{tw}", "late") == b"STORED\r\n"
        time.sleep(0.3)
        assert c.get1("{tw}/t=100") == b"late"
    with cl.servers[0].conn() as d:
        st = d.stats()
        assert st["queue_{tw}_items"] == "0" and st["queue_{tw}_waiters"] == "0"


def test_load_tagged_through_proxy(cluster):
    """tern-load through the proxy with --hash-tag: waiting reads and
    reliable reads (by id through a proxy) route with their queue; every
    message is read once, in order."""
    cl = cluster(timeout=3000)
    p = "127.0.0.1:%d" % cl.proxy.port
    for opts in ("/t=20", "/open"):
        rc, out, err, js = tern_load(["--proxy", p, "--servers", cl.server_list(), "--hash-tag",
                                      "-q", 6, "-n", 300, "--mode", "mixed", "--get-options",
                                      opts, "--prefix", "lt%s" % opts[1], "--json"])
        assert rc == 0, err
        assert js["hash_tag"] is True and js["get_options"] == opts
        assert js["open_by_id"] is (opts == "/open")
        assert js["total"]["read"]["messages"] == 1800 and js["total_errors"] == 0
        assert all(q["name"].startswith("{") for q in js["per_queue"])
        assert sum(s["queues"] for s in js["servers"]) == 6
        # the proxy forwards neither version nor stats: the servers of
        # --servers were asked directly
        assert all(s["sync"] == "interval" for s in js["servers"]), js["servers"]
        assert "server" not in js


class Producer(threading.Thread):
    """Sets numbered bodies into its queues through the proxy, one at a
    time, until stopped; records what each reply said."""

    def __init__(self, port, queues, tag):
        super().__init__(daemon=True)
        self.port, self.queues, self.tag = port, queues, tag
        self.acked = {q: [] for q in queues}
        self.failed = {q: [] for q in queues}
        self.stop = threading.Event()
        self.error = None

    def run(self):
        try:
            c = Conn(self.port, timeout=TIMEOUT)
            i = 0
            while not self.stop.is_set() and i < 200000:
                q = self.queues[i % len(self.queues)]
                body = "%s.%d" % (self.tag, i)
                try:
                    line = c.set(q, body)
                except (AssertionError, OSError):
                    # The proxy hung up: reconnect (bounded by the loop).
                    c.close()
                    c = Conn(self.port, timeout=TIMEOUT)
                    line = b"(connection lost)"
                (self.acked if line == b"STORED\r\n" else self.failed)[q].append(body)
                i += 1
            c.close()
        except Exception as e:  # reported by the test
            self.error = e


def test_backend_killed_under_load(cluster):
    """SIGKILL one of three backends while producers write through the
    proxy (auto_eject_hosts: false): the producers of its queues get errors
    from then on, the others carry on; everything acknowledged is read
    back, from the survivors at once and from the killed one once it is
    restarted on its data."""
    cl = cluster(timeout=2000, server_failure_limit=1, server_retry_timeout=200)
    names = ["{kl%d}" % i for i in range(12)]
    where = routes(cl.server_list(), names)
    victim = cl.servers[cl.index(where[names[0]])]
    producers = [Producer(cl.proxy.port, names[i::3], "p%d" % i) for i in range(3)]
    for p in producers:
        p.start()
    time.sleep(1.0)
    port = victim.port
    victim.kill()
    victim.expect_exit(-signal.SIGKILL)
    time.sleep(1.0)
    for p in producers:
        p.stop.set()
    for p in producers:
        p.join(TIMEOUT)
        assert not p.is_alive() and p.error is None, p.error
    acked = {q: [] for q in names}
    failed = {q: [] for q in names}
    for p in producers:
        for q in p.queues:
            acked[q] += p.acked[q]
            failed[q] += p.failed[q]
    dead = [q for q in names if where[q] == "127.0.0.1:%d" % port]
    alive = [q for q in names if q not in dead]
    assert dead and alive
    # The killed server's queues saw errors from then on; the others none,
    # and they kept going.
    assert all(failed[q] for q in dead)
    assert all(not failed[q] and len(acked[q]) > 10 for q in alive)
    with cl.conn() as c:
        for q in alive:
            assert drain(c, q) == acked[q], q
        c.send("get %s\r\n" % dead[0])
        assert c.readline().startswith(b"SERVER_ERROR")
    # Started again on its port and data, the killed server has every item
    # it acknowledged, in order; anything more can only be a set whose
    # reply was lost (the client saw an error, not a refusal).
    cl.restart(cl.servers.index(victim))
    wait_until(lambda: proxy_reaches(cl, dead[0]), what="the proxy to reach the restarted server")
    with cl.conn() as c:
        for q in dead:
            got = drain(c, q)
            ok = set(acked[q])
            assert [b for b in got if b in ok] == acked[q], q
            assert set(got) - ok <= set(failed[q]), q


def drain(c, q, limit=500000):
    """Every item of q through c, in order (bounded)."""
    out = []
    for _ in range(limit):
        v = c.get1(q)
        if v is None:
            return out
        out.append(v.decode())
    pytest.fail("queue %s did not drain" % q)


def proxy_reaches(cl, q):
    """Whether a request for q gets a reply other than an error (after a
    restart the proxy retries the server after server_retry_timeout)."""
    try:
        with cl.conn(timeout=2) as c:
            c.send("get %s/peek\r\n" % q)
            return c.readline().startswith((b"VALUE", b"END"))
    except AssertionError:
        return False
