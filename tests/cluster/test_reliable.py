"""
Reliable reads by id through nutcracker: `gets {q}/reserve` hands out an item
with its id in the CAS field; any connection confirms (`get {q}/close=ID`,
`delete {q}/ID`) or aborts (`get {q}/abort=ID`) it; an item opened by id
belongs to no connection, so a client leaving does not return it, but the
queue's open_timeout does (30 s when open_timeout = 0), and so does a
restart.
"""
import re
import signal
import time

import pytest

from clusterutil import SMALL_SEGMENTS, TIMEOUT, routes, wait_until

VALUE_RE = re.compile(rb"^VALUE (\S+) (\d+) (\d+) (\d+)\r\n$")
# Queues whose open items go back after 600 ms (the others keep the
# default, open_timeout = 0).
CONF = SMALL_SEGMENTS + "\n[queue {exp}]\nopen_timeout = 600\n[queue {exp2}]\nopen_timeout = 600\n"


def gets(c, key):
    """Sends `gets key` and returns (key, body, id) or None for END."""
    c.send("gets %s\r\n" % key)
    line = c.readline()
    if line == b"END\r\n":
        return None
    m = VALUE_RE.match(line)
    assert m, line
    body = c.read_exact(int(m.group(3)) + 2)[:-2]
    assert c.readline() == b"END\r\n"
    return m.group(1).decode(), body, int(m.group(4))


def qstats(cl, q):
    """The queue's counters on the server that holds it."""
    where = routes(cl.server_list(), [q])[q]
    with cl.servers[cl.index(where)].conn() as c:
        st = c.stats()
    return {k[len("queue_%s_" % q):]: int(v) for k, v in st.items()
            if k.startswith("queue_%s_" % q)}


def test_confirm_by_id_from_another_connection(cluster):
    cl = cluster(conf=CONF)
    with cl.conn() as a, cl.conn() as b:
        for body in ("one", "two", "three"):
            assert a.set("{rel}", body) == b"STORED\r\n"
        k1, body1, id1 = gets(a, "{rel}/reserve")
        assert (k1, body1) == ("{rel}/reserve", b"one")
        k2, body2, id2 = gets(a, "{rel}/reserve")
        assert body2 == b"two" and id2 != id1
        # b confirms a's second item, then its first: order does not matter.
        assert b.get("{rel}/close=%d" % id2) == []
        assert qstats(cl, "{rel}")["open_transactions"] == 1
        assert b.call("delete {rel}/%d" % id1) == b"DELETED\r\n"
        assert b.call("delete {rel}/%d" % id1) == b"NOT_FOUND\r\n"
        assert b.call("delete {rel}/%d" % (id2 + 1000)) == b"NOT_FOUND\r\n"
        st = qstats(cl, "{rel}")
        assert st["open_transactions"] == 0 and st["items"] == 1
        # Confirm and reserve the next in one request.
        _, body3, id3 = gets(b, "{rel}/reserve")
        assert body3 == b"three"
        assert b.set("{rel}", "four") == b"STORED\r\n"
        k4, body4, id4 = gets(a, "{rel}/close=%d/reserve" % id3)
        assert (k4, body4) == ("{rel}/close=%d/reserve" % id3, b"four")
        assert a.get("{rel}/close=%d" % id4) == []
        assert qstats(cl, "{rel}")["open_transactions"] == 0
        assert a.get("{rel}") == []


def test_abort_by_id(cluster):
    cl = cluster(conf=CONF)
    with cl.conn() as a, cl.conn() as b:
        for body in ("x", "y"):
            assert a.set("{ab}", body) == b"STORED\r\n"
        _, _, idx = gets(a, "{ab}/reserve")
        _, _, idy = gets(a, "{ab}/reserve")
        # Aborted by b, newest first: both back at the head, in order.
        assert b.get("{ab}/abort=%d" % idy) == []
        assert b.get("{ab}/abort=%d" % idx) == []
        assert b.call("delete {ab}/%d" % idx) == b"NOT_FOUND\r\n"
        assert b.get1("{ab}") == b"x"
        assert b.get1("{ab}") == b"y"


def test_per_connection_open_unchanged_direct(cluster):
    """Direct clients keep per-connection /open: get q/open (or gets
    q/open) is returned when its connection closes, and get q/close
    confirms only its own."""
    cl = cluster(n=1, conf=CONF)
    s = cl.servers[0]
    with s.conn() as a:
        assert a.set("{pc}", "v") == b"STORED\r\n"
        with s.conn() as b:
            assert b.get1("{pc}/open") == b"v"
            assert a.get("{pc}/close") == []      # a holds nothing
        # b closed: its item is back.
        wait_until(lambda: a.stats().get("queue_{pc}_items") == "1", what="item back")
        # gets /open is per connection too (some clients send only gets).
        with s.conn() as b:
            assert gets(b, "{pc}/open")[1] == b"v"
        wait_until(lambda: a.stats().get("queue_{pc}_items") == "1", what="item back")
        assert a.get1("{pc}/open") == b"v"
        assert a.get("{pc}/close") == []
        assert a.get("{pc}") == []


def test_client_leaving_does_not_return_id_items(cluster):
    """An item opened by id stays open when the client that opened it
    leaves (through the proxy, connections are shared); open_timeout
    returns it to the head for another client."""
    cl = cluster(conf=CONF)
    with cl.conn() as a:
        assert a.set("{exp}", "job") == b"STORED\r\n"
        assert a.set("{exp}", "next") == b"STORED\r\n"
        _, body, ident = gets(a, "{exp}/reserve")
        assert body == b"job"
    t0 = time.monotonic()
    st = qstats(cl, "{exp}")
    assert st["open_transactions"] == 1 and st["items"] == 1
    with cl.conn() as b:
        assert b.get1("{exp}/peek") == b"next"
        wait_until(lambda: qstats(cl, "{exp}")["open_transactions"] == 0,
                   timeout=10, what="the open_timeout")
        assert time.monotonic() - t0 > 0.4
        assert b.get1("{exp}") == b"job"             # back at the head
        assert b.call("delete {exp}/%d" % ident) == b"NOT_FOUND\r\n"
        assert b.get1("{exp}") == b"next"


def test_waiter_that_left_through_proxy(cluster):
    """A client waits with gets {q}/t=.../reserve through the proxy and leaves;
    the proxy still has the request out and swallows the reply when the
    item arrives.  Opened by id, that item is not lost: open_timeout puts it
    back."""
    cl = cluster(conf=CONF, timeout=5000)
    a = cl.conn()
    a.send("gets {exp2}/t=3000/reserve\r\n")
    time.sleep(0.2)
    a.close()
    time.sleep(0.2)
    with cl.conn() as b:
        assert b.set("{exp2}", "precious") == b"STORED\r\n"
        wait_until(lambda: qstats(cl, "{exp2}")["total_items"] == 1, what="the set")
        # Handed to the departed waiter, opened by id, then back after 600 ms.
        wait_until(lambda: b.get("{exp2}") == [(u"{exp2}", 0, b"precious")],
                   timeout=10, interval=0.1, what="the item to come back")


def test_id_open_survives_restart(cluster):
    """Items opened by id when the server is killed (SIGKILL) are back in
    the queue, in order, after the restart, and their old ids confirm
    nothing; an item confirmed by id before the kill stays gone."""
    cl = cluster(n=1, conf=CONF)
    s = cl.servers[0]
    with s.conn() as c:
        for body in ("first", "second", "third", "fourth"):
            assert c.set("{rs}", body) == b"STORED\r\n"
        ids = [gets(c, "{rs}/reserve")[2] for _ in range(3)]
        assert c.call("delete {rs}/%d" % ids[1]) == b"DELETED\r\n"   # "second"
        # Confirmations, like every remove, are written after the reply
        # (docs/JOURNAL.md): wait until the journal has the 4 adds, 3 opens
        # and the confirm, or a kill now would hand "second" out again.
        wait_until(lambda: int(c.stats()["queue_{rs}_journal_records"]) >= 8,
                   what="the confirm record")
    s.kill()
    s.expect_exit(-signal.SIGKILL)
    s2 = cl.restart(0)
    with s2.conn() as c:
        st = c.stats()
        assert st["queue_{rs}_items"] == "3" and st["queue_{rs}_open_transactions"] == "0"
        for i in ids:
            assert c.call("delete {rs}/%d" % i) == b"NOT_FOUND\r\n"
        assert [c.get1("{rs}") for _ in range(4)] == [b"first", b"third", b"fourth", None]


def test_bad_id_requests(cluster):
    cl = cluster(n=1, conf=CONF)
    with cl.servers[0].conn() as c:
        for req, why in [("get {b}/close=", "bad item id"), ("get {b}/close=x", "bad item id"),
                         ("get {b}/abort=-1", "bad item id"), ("get {b}/close=0", "bad item id"),
                         ("get {b}/close=99999999999999999999999", "bad item id"),
                         ("get {b}/close=1/close", "bad get option combination"),
                         ("get {b}/abort=1/open", "bad get option combination"),
                         ("get {b}/peek/close=1", "bad get option combination"),
                         ("get {b}/close=1/abort=2", "bad get option"),
                         ("delete {b}/", "bad item id"), ("delete {b}/x", "bad item id"),
                         ("delete {b}/1/2", "bad item id"), ("delete {b}/open", "bad item id"),
                         ("delete {b}/0", "bad item id"),
                         ("get {b}/reserve", "reserve needs gets (the item id is the cas)"),
                         ("gets {b}/reserve/open", "bad get option combination")]:
            assert c.call(req) == b"CLIENT_ERROR %s\r\n" % why.encode(), req
        # A queue that does not exist has no open item either.
        assert c.call("delete {nosuch}/5") == b"NOT_FOUND\r\n"
        # noreply: nothing comes back, the next request's reply does.
        c.send("delete {b}/5 noreply\r\n")
        assert c.call("version").startswith(b"VERSION ")


def test_cluster_md_worker_runs_as_printed(cluster, tmp_path):
    """docs/CLUSTER.md's worker, as printed (the proxy's port replaced):
    it reads every item by id through the proxy and confirms it."""
    import os
    import subprocess
    from clusterutil import REPO
    with open(os.path.join(REPO, "docs", "CLUSTER.md")) as f:
        text = f.read()
    m = re.search(r"^A worker through the proxy.*?^```python\n(.*?)^```\nPrints:\n```text\n"
                  r"(.*?)^```", text, re.M | re.S)
    assert m, "no worker example in docs/CLUSTER.md"
    code, want = m.groups()
    cl = cluster()
    with cl.conn() as c:
        for body in ("resize photo 42", "send mail 7"):
            assert c.set("{jobs}", body) == b"STORED\r\n"
    (tmp_path / "worker.py").write_text(code.replace("22122", str(cl.proxy.port)))
    p = subprocess.run(["/usr/bin/python3", "worker.py"], cwd=tmp_path, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT * 3)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    assert p.stdout.decode() == want
    q = qstats(cl, "{jobs}")
    assert (q["items"], q["open_transactions"], q["dequeued"]) == (0, 0, 2), q
