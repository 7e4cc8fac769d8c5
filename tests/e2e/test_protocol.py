"""
End-to-end protocol tests: start a real ternd on a free port and assert the
exact bytes of every reply (the semantics: README.md, "Protocol reference",
and docs/DESIGN.md).

Waiting is always bounded (conftest.TIMEOUT per reply, wait_until for
polling); no test asserts on speed.  Where a test sleeps it is to let wall
clock time pass for exptime/max_age, never to measure the server.
"""
import os
import re
import select
import shutil
import signal
import socket
import threading
import time

import pytest

from conftest import SMALL_SEGMENTS, TIMEOUT, Closed, Conn, rss_kib, run_ternd, wait_until

MAX_LINE = 8192


def V(key, data, flags=0, cas=None):
    """The bytes of one VALUE block; key is the key as requested, options
    included; cas (gets) is the item's id."""
    if isinstance(key, str):
        key = key.encode()
    if isinstance(data, str):
        data = data.encode()
    if cas is not None:
        return b"VALUE %s %d %d %d\r\n%s\r\n" % (key, flags, len(data), cas, data)
    return b"VALUE %s %d %d\r\n%s\r\n" % (key, flags, len(data), data)


def SET(key, data, flags=0, exptime=0, noreply=False):
    """The bytes of one set request."""
    if isinstance(key, str):
        key = key.encode()
    if isinstance(data, str):
        data = data.encode()
    return (b"set %s %d %d %d%s\r\n" % (key, flags, exptime, len(data), b" noreply" if noreply else b"")
            + data + b"\r\n")


END = b"END\r\n"
STORED = b"STORED\r\n"


def qstat(conn, queue, counter):
    """One per-queue counter as int, or None when the queue is not listed."""
    v = conn.stats().get("queue_%s_%s" % (queue, counter))
    return None if v is None else int(v)


def queue_names(stats):
    """Queue names listed in a stats dict (every queue has a _waiters line)."""
    return {k[len("queue_"):-len("_waiters")] for k in stats
            if k.startswith("queue_") and k.endswith("_waiters")}


def version_reply(conn):
    conn.send(b"version\r\n")
    line = conn.readline()
    assert re.match(rb"^VERSION 1\.\d+\.\d+ tern-\d+\.\d+\.\d+\r\n$", line), line
    return line


def assert_works(conn, queue="sanity"):
    """The connection still answers requests correctly (set + get round trip)."""
    conn.send(SET(queue, b"ok") + b"get " + queue.encode() + b"\r\n")
    conn.expect(STORED + V(queue, b"ok") + END)


# ---------------------------------------------------------------- set / get

def test_set_get_exact(server):
    c = server.conn()
    c.send(b"set q 0 0 5\r\nhello\r\n")
    c.expect(STORED)
    c.send(b"get q\r\n")
    c.expect(b"VALUE q 0 5\r\nhello\r\nEND\r\n")
    c.send(b"get q\r\n")
    c.expect(END)


def test_gets_returns_item_id_as_cas(server):
    # gets is get with memcached's cas unique, which is the item's id in
    # its queue (1, 2, ... per queue, never reused).
    c = server.conn()
    c.send(SET("q", "one") + SET("q", "two") + SET("q", "three") + SET("r", "other"))
    c.expect(STORED * 4)
    c.send(b"gets q\r\n")
    c.expect(V("q", "one", cas=1) + END)
    c.send(b"gets q/peek r\r\ngets q/open\r\nget q/abort\r\ngets q\r\ngets q\r\n")
    c.expect(V("q/peek", "two", cas=2) + V("r", "other", cas=1) + END
             + V("q/open", "two", cas=2) + END + END + V("q", "two", cas=2) + END
             + V("q", "three", cas=3) + END)


def test_empty_and_binary_bodies(server):
    c = server.conn()
    bodies = [b"", b"\r\n", b"\r\nEND\r\n", b"\x00" * 10, bytes(range(256)) * 4,
              b"set q 0 0 1\r\nx\r\n", os.urandom(100 * 1024)]
    for b in bodies:
        c.send(SET("bin", b))
        c.expect(STORED)
    for b in bodies:
        c.send(b"get bin\r\n")
        c.expect(V("bin", b) + END)
    c.send(b"get bin\r\n")
    c.expect(END)


@pytest.mark.parametrize("flags", [0, 1, 16, 12345, 2 ** 31, 2 ** 32 - 1])
def test_flags_returned(server, flags):
    c = server.conn()
    c.send(SET("fl", "x", flags=flags))
    c.expect(STORED)
    c.send(b"get fl\r\n")
    c.expect(V("fl", "x", flags) + END)


def test_noreply(server):
    c = server.conn()
    c.send(SET("nr", "a", noreply=True) + SET("nr", "b", flags=3, noreply=True) + b"get nr\r\nget nr\r\n")
    c.expect(V("nr", "a") + END + V("nr", "b", 3) + END)


def test_python_memcache_trailing_space(server):
    # python-memcache sends an empty noreply token: "set k 16 0 2 \r\n".
    c = server.conn()
    c.send(b"set k 16 0 2 \r\nab\r\n")
    c.expect(STORED)
    c.send(b"get k\r\n")
    c.expect(b"VALUE k 16 2\r\nab\r\nEND\r\n")


def test_fifo(server):
    c = server.conn()
    n = 500
    c.send(b"".join(SET("fifo", "m%d" % i, flags=i) for i in range(n)))
    c.expect(STORED * n)
    c.send(b"get fifo\r\n" * n)
    c.expect(b"".join(V("fifo", "m%d" % i, i) + END for i in range(n)))
    c.send(b"get fifo\r\n")
    c.expect(END)


def test_fifo_across_connections(server):
    a, b = server.conn(), server.conn()
    for i in range(20):
        (a if i % 2 else b).send(SET("x", "%d" % i))
        (a if i % 2 else b).expect(STORED)
    for i in range(20):
        d = (b if i % 2 else a)
        d.send(b"get x\r\n")
        d.expect(V("x", "%d" % i) + END)


def test_several_keys_per_get(server):
    c = server.conn()
    c.send(SET("ka", "A", 1) + SET("kc", "C", 3) + SET("kd", "D1") + SET("kd", "D2"))
    c.expect(STORED * 4)
    c.send(b"get ka kb kc\r\n")
    c.expect(V("ka", "A", 1) + V("kc", "C", 3) + END)
    # The same queue twice dequeues twice, in order.
    c.send(b"get kd kd kd\r\n")
    c.expect(V("kd", "D1") + V("kd", "D2") + END)
    c.send(b"gets ka kb kc kd\r\n")
    c.expect(END)
    # A get that finds no queue creates none (docs/PROTOCOL.md).
    assert qstat(c, "kb", "items") is None


@pytest.mark.parametrize("nkeys", [32, 200])
def test_many_keys_in_one_get(server, nkeys):
    # memcached takes any number of keys that fit in a line (pymemcache's
    # get_many and libmemcached's mget send hundreds).
    c = server.conn()
    n = nkeys - 7
    c.send(b"".join(SET("kk", "%d" % i) for i in range(n)))
    c.expect(STORED * n)
    c.send(b"get" + b" kk" * nkeys + b"\r\n")
    c.expect(b"".join(V("kk", "%d" % i) for i in range(n)) + END)


def test_items_survive_restart(ternd):
    # Persistence through the journal: a clean SIGTERM and a restart on the
    # same data directory keep queued items (flags, order), return items
    # that were open to the head, and do not resurrect what was consumed,
    # confirmed, flushed or deleted.
    s = ternd()
    c = s.conn()
    c.send(SET("pers", "one", 1) + SET("pers", "two", 2) + SET("pers", "three", 3)
           + SET("gone", "x") + b"get gone\r\nget pers/open\r\n")
    c.expect(STORED * 4 + V("gone", "x") + END + V("pers/open", "one", 1) + END)
    c.send(SET("conf", "a") + SET("conf", "b") + b"get conf/open\r\nget conf/close\r\n"
           + SET("fl", "f") + b"flush fl\r\n" + SET("del", "d") + b"delete del\r\n"
           + b"get f+child\r\n" + SET("f", "fan"))
    c.expect(STORED * 2 + V("conf/open", "a") + END + END + STORED + END + STORED + b"DELETED\r\n"
             + END + STORED)
    datadir = s.datadir
    s.expect_exit(0)
    s.signal(signal.SIGTERM)
    assert s.wait(TIMEOUT) == 0
    s2 = ternd(datadir=datadir)
    c2 = s2.conn()
    st = c2.stats()
    assert "queue_del_items" not in st
    c2.send(b"get pers\r\n" * 4 + b"get gone\r\n")
    c2.expect(V("pers", "one", 1) + END + V("pers", "two", 2) + END + V("pers", "three", 3) + END
              + END + END)
    c2.send(b"get conf\r\nget conf\r\nget fl\r\nget del\r\nget f\r\nget f+child\r\n")
    c2.expect(V("conf", "b") + END + END + END + END + V("f", "fan") + END + V("f+child", "fan") + END)
    # Fanout children are remembered too.
    c2.send(SET("f", "again") + b"get f+child\r\n")
    c2.expect(STORED + V("f+child", "again") + END)


def test_long_but_legal_request_line(ternd):
    # 30 keys of 250 bytes: a ~7.5 KB line, under the 8192 limit.
    c = ternd(conf=SMALL_SEGMENTS).conn()
    keys = [("k%03d" % i) + "x" * 246 for i in range(30)]
    c.send(SET(keys[7], "seven"))
    c.expect(STORED)
    line = ("get " + " ".join(keys) + "\r\n").encode()
    assert len(line) < MAX_LINE
    c.send(line)
    c.expect(V(keys[7], "seven") + END)


# ---------------------------------------------------------------- exptime

def test_exptime_relative(server):
    c = server.conn()
    c.send(SET("ex", "short", exptime=1) + SET("ex", "forever") + SET("ex", "month", exptime=2591999))
    c.expect(STORED * 3)
    time.sleep(2.2)  # let the 1 s expiry pass (wall clock, not a speed test)
    c.send(b"get ex\r\nget ex\r\nget ex\r\n")
    c.expect(V("ex", "forever") + END + V("ex", "month") + END + END)
    s = c.stats()
    assert s["queue_ex_expired_items"] == "1"


def test_exptime_relative_not_yet_expired(server):
    c = server.conn()
    c.send(SET("ex", "a", exptime=3600))
    c.expect(STORED)
    c.send(b"get ex\r\n")
    c.expect(V("ex", "a") + END)


def test_exptime_absolute(server):
    c = server.conn()
    now = int(time.time())
    c.send(SET("abs", "past", exptime=now - 100)
           + SET("abs", "ancient", exptime=2592000)  # exactly the threshold: unix time 1970
           + SET("abs", "future", exptime=now + 3600)
           + SET("abs", "past2", exptime=now - 5))
    c.expect(STORED * 4)
    c.send(b"get abs\r\nget abs\r\n")
    c.expect(V("abs", "future") + END + END)
    assert qstat(c, "abs", "expired_items") == 3
    assert qstat(c, "abs", "items") == 0


def test_expired_items_never_returned_by_peek_or_open(server):
    c = server.conn()
    past = int(time.time()) - 10
    c.send(SET("ep", "dead", exptime=past) + SET("ep", "alive"))
    c.expect(STORED * 2)
    c.send(b"get ep/peek\r\n")
    c.expect(V("ep/peek", "alive") + END)
    c.send(b"get ep/open\r\n")
    c.expect(V("ep/open", "alive") + END)
    c.send(b"get ep/close\r\nget ep\r\n")
    c.expect(END + END)


# ---------------------------------------------------------------- /t= waiters

def test_wait_timeout_gives_end(server):
    c = server.conn()
    c.send(b"get w/t=300\r\n")
    c.expect(END)
    c.send(b"get w/t=0\r\n")
    c.expect(END)
    assert qstat(c, "w", "waiters") == 0


def test_wait_returns_at_once_when_item_present(server):
    c = server.conn()
    c.send(SET("w", "now") + b"get w/t=60000\r\n")
    c.expect(STORED + V("w/t=60000", "now") + END)


def test_waiter_woken_by_set_from_other_connection(server):
    a, b = server.conn(), server.conn()
    a.send(b"get w/t=60000\r\n")
    wait_until(lambda: qstat(b, "w", "waiters") == 1, what="waiter registered")
    a.assert_silent(0.2)
    b.send(SET("w", "wake", flags=9))
    b.expect(STORED)
    a.expect(V("w/t=60000", "wake", 9) + END)
    assert qstat(b, "w", "items") == 0
    assert qstat(b, "w", "waiters") == 0


def test_waiters_served_fifo(server):
    ws = [server.conn() for _ in range(4)]
    p = server.conn()
    for i, w in enumerate(ws):
        w.send(b"get fw/t=60000\r\n")
        wait_until(lambda: qstat(p, "fw", "waiters") == i + 1, what="waiter %d" % i)
    # All four sets in one packet: waiters must get them in arrival order.
    p.send(b"".join(SET("fw", "item%d" % i) for i in range(4)))
    p.expect(STORED * 4)
    for i, w in enumerate(ws):
        w.expect(V("fw/t=60000", "item%d" % i) + END)


def test_waiters_fifo_one_set_at_a_time(server):
    ws = [server.conn() for _ in range(3)]
    p = server.conn()
    for i, w in enumerate(ws):
        w.send(b"get fw/t=60000\r\n")
        wait_until(lambda: qstat(p, "fw", "waiters") == i + 1, what="waiter %d" % i)
    for i, w in enumerate(ws):
        p.send(SET("fw", "i%d" % i))
        p.expect(STORED)
        w.expect(V("fw/t=60000", "i%d" % i) + END)
        for other in ws[i + 1:]:
            other.assert_silent(0.05)


def test_waiter_with_open_option_any_order(server):
    a, b = server.conn(), server.conn()
    a.send(b"get wo/open/t=60000\r\n")
    wait_until(lambda: qstat(b, "wo", "waiters") == 1, what="waiter registered")
    b.send(SET("wo", "x"))
    b.expect(STORED)
    a.expect(V("wo/open/t=60000", "x") + END)
    assert qstat(b, "wo", "open_transactions") == 1
    a.send(b"get wo/close\r\n")
    a.expect(END)
    wait_until(lambda: qstat(b, "wo", "open_transactions") == 0, what="close")
    b.send(b"get wo\r\n")
    b.expect(END)


def test_waiter_that_disconnects_does_not_lose_items(server):
    # A waiting get whose client has closed keeps waiting (a client that
    # only shut down its sending side still reads the answer); the item it
    # is then handed cannot reach a client that closed completely (its
    # system answers with a reset) and goes back to the head of the queue.
    a, b = server.conn(), server.conn()
    a.send(b"get wd/t=60000\r\n")
    wait_until(lambda: qstat(b, "wd", "waiters") == 1, what="waiter registered")
    a.close()
    b.send(SET("wd", "kept"))
    b.expect(STORED)
    wait_until(lambda: qstat(b, "wd", "waiters") == 0, what="waiter served")
    wait_until(lambda: qstat(b, "wd", "items") == 1, what="item back in the queue")
    b.send(b"get wd\r\nget wd\r\n")
    b.expect(V("wd", "kept") + END + END)


def test_waiting_get_keeps_replies_in_order(server):
    a, b = server.conn(), server.conn()
    a.send(SET("x", "a") + b"get wq/t=60000\r\nget x\r\nversion\r\n")
    a.expect(STORED)
    wait_until(lambda: qstat(b, "wq", "waiters") == 1, what="waiter registered")
    # Requests sent while the get waits are answered after it.
    a.send(SET("x", "b") + b"get x\r\n")
    a.assert_silent(0.3)
    b.send(SET("wq", "hi"))
    b.expect(STORED)
    a.expect(V("wq/t=60000", "hi") + END + V("x", "a") + END)
    line = a.readline()
    assert line.startswith(b"VERSION "), line
    a.expect(STORED + V("x", "b") + END)


def test_waiting_get_times_out_in_pipeline(server):
    c = server.conn()
    c.send(b"get wt/t=300\r\nversion\r\n" + SET("wt", "z") + b"get wt/t=300\r\n")
    c.expect(END)
    assert c.readline().startswith(b"VERSION ")
    c.expect(STORED + V("wt/t=300", "z") + END)


# ---------------------------------------------------------------- reliable reads

def test_open_close_abort(server):
    c, o = server.conn(), server.conn()
    c.send(SET("r", "a") + SET("r", "b") + SET("r", "c"))
    c.expect(STORED * 3)
    c.send(b"get r/open\r\n")
    c.expect(V("r/open", "a") + END)
    assert qstat(o, "r", "open_transactions") == 1
    # Other connections do not see the open item.
    o.send(b"get r/peek\r\n")
    o.expect(V("r/peek", "b") + END)
    c.send(b"get r/close\r\n")  # alone: just END
    c.expect(END)
    assert qstat(o, "r", "open_transactions") == 0
    c.send(b"get r/open\r\n")
    c.expect(V("r/open", "b") + END)
    c.send(b"get r/abort\r\n")
    c.expect(END)
    assert qstat(o, "r", "open_transactions") == 0
    c.send(b"get r/open\r\n")  # b is back at the head
    c.expect(V("r/open", "b") + END)
    c.send(b"get r/close/open\r\n")  # confirm b, open c
    c.expect(V("r/close/open", "c") + END)
    c.send(b"get r/open/close\r\n")  # order of options does not matter; queue empty
    c.expect(END)
    c.send(b"get r/close\r\nget r\r\n")
    c.expect(END + END)
    o.send(b"get r\r\n")
    o.expect(END)


def test_close_and_abort_without_open_item(server):
    c = server.conn()
    c.send(SET("nc", "a") + b"get nc/close\r\nget nc/abort\r\nget nc\r\n")
    c.expect(STORED + END + END + V("nc", "a") + END)


def test_several_open_items_per_connection(server):
    c, o = server.conn(), server.conn()
    c.send(b"".join(SET("m", "i%d" % i) for i in range(4)))
    c.expect(STORED * 4)
    c.send(b"get m/open\r\nget m/open\r\nget m/open\r\n")
    c.expect(V("m/open", "i0") + END + V("m/open", "i1") + END + V("m/open", "i2") + END)
    assert qstat(o, "m", "open_transactions") == 3
    c.send(b"get m/close\r\n")  # confirms the oldest (i0)
    c.expect(END)
    c.send(b"get m/abort\r\n")  # i1, i2 back to the head, in order
    c.expect(END)
    o.send(b"get m\r\nget m\r\nget m\r\nget m\r\n")
    o.expect(V("m", "i1") + END + V("m", "i2") + END + V("m", "i3") + END + END)


def test_open_returns_to_head_on_disconnect(server):
    c, o = server.conn(), server.conn()
    c.send(SET("d", "first") + SET("d", "second") + b"get d/open\r\n")
    c.expect(STORED * 2 + V("d/open", "first") + END)
    assert qstat(o, "d", "open_transactions") == 1
    c.close()
    wait_until(lambda: qstat(o, "d", "open_transactions") == 0, what="abort on disconnect")
    o.send(b"get d\r\nget d\r\nget d\r\n")
    o.expect(V("d", "first") + END + V("d", "second") + END + END)


def test_open_returns_to_head_on_open_timeout(ternd):
    s = ternd(conf="[queues]\nopen_timeout = 200\n")
    c, o = s.conn(), s.conn()
    c.send(SET("ot", "first") + SET("ot", "second") + b"get ot/open\r\n")
    c.expect(STORED * 2 + V("ot/open", "first") + END)
    wait_until(lambda: qstat(o, "ot", "open_transactions") == 0, what="open_timeout")
    o.send(b"get ot\r\n")
    o.expect(V("ot", "first") + END)
    # The timed-out opener's close confirms nothing and its connection works.
    c.send(b"get ot/close\r\n")
    c.expect(END)
    o.send(b"get ot\r\nget ot\r\n")
    o.expect(V("ot", "second") + END + END)
    assert_works(c)


def test_open_without_timeout_stays_open(server):
    # Default config: no open_timeout; the item stays open while we wait.
    c, o = server.conn(), server.conn()
    c.send(SET("st", "x") + b"get st/open\r\n")
    c.expect(STORED + V("st/open", "x") + END)
    time.sleep(0.5)
    o.send(b"get st\r\n")
    o.expect(END)
    c.send(b"get st/close\r\n")
    c.expect(END)


def test_max_open_default_16(server):
    c, o = server.conn(), server.conn()
    c.send(b"".join(SET("mo", "i%d" % i) for i in range(18)))
    c.expect(STORED * 18)
    c.send(b"get mo/open\r\n" * 16)
    c.expect(b"".join(V("mo/open", "i%d" % i) + END for i in range(16)))
    c.send(b"get mo/open\r\n")
    c.expect(b"CLIENT_ERROR too many open transactions\r\n")
    # /close/open confirms one first, so it is allowed.
    c.send(b"get mo/close/open\r\n")
    c.expect(V("mo/close/open", "i16") + END)
    c.send(b"get mo/abort\r\n")
    c.expect(END)
    o.send(b"get mo\r\n" * 18)
    o.expect(b"".join(V("mo", "i%d" % i) + END for i in list(range(1, 17)) + [17]) + END)


def test_max_open_configurable(ternd):
    s = ternd(conf="[queue lim]\nmax_open = 2\n")
    c = s.conn()
    c.send(SET("lim", "a") + SET("lim", "b") + SET("lim", "c") + b"get lim/open\r\nget lim/open\r\nget lim/open\r\n")
    c.expect(STORED * 3 + V("lim/open", "a") + END + V("lim/open", "b") + END
             + b"CLIENT_ERROR too many open transactions\r\n")


def test_peek(server):
    c = server.conn()
    c.send(b"get p/peek\r\n")
    c.expect(END)
    c.send(SET("p", "a", 5) + SET("p", "b") + b"get p/peek\r\nget p/peek\r\nget p\r\nget p/peek\r\n")
    c.expect(STORED * 2 + V("p/peek", "a", 5) + END + V("p/peek", "a", 5) + END + V("p", "a", 5) + END
             + V("p/peek", "b") + END)
    assert qstat(c, "p", "items") == 1


def test_peek_n(server):
    """/peek=<n>: the first n items in order, one VALUE each, none taken;
    open items are not shown; meta refuses it (one reply per key)."""
    c = server.conn()
    c.send(b"get pn/peek=3\r\n")
    c.expect(END)
    c.send(SET("pn", "a", 1) + SET("pn", "bb", 2) + SET("pn", "ccc", 3) + SET("pn", "d"))
    c.expect(STORED * 4)
    c.send(b"gets pn/peek=2 pn/peek=9\r\n")
    c.expect(V("pn/peek=2", "a", 1, cas=1) + V("pn/peek=2", "bb", 2, cas=2)
             + b"".join(V("pn/peek=9", d, f, cas=i + 1)
                        for i, (d, f) in enumerate([("a", 1), ("bb", 2), ("ccc", 3), ("d", 0)]))
             + END)
    c.send(b"get pn/open\r\nget pn/peek=2\r\n")
    c.expect(V("pn/open", "a", 1) + END + V("pn/peek=2", "bb", 2) + V("pn/peek=2", "ccc", 3) + END)
    assert qstat(c, "pn", "items") == 3
    assert qstat(c, "pn", "dequeued") == 1
    c.send(b"get pn/peek=0\r\nget pn/peek=1001\r\nget pn/peek=2/open\r\nmg pn/peek=2 v\r\n"
           b"mg pn/peek=1 v\r\n")
    c.expect(b"CLIENT_ERROR bad peek count\r\n" * 2
             + b"CLIENT_ERROR bad get option combination\r\n"
             + b"CLIENT_ERROR peek=<n> needs the text protocol\r\n"
             + b"VA 2\r\nbb\r\n")


@pytest.mark.parametrize("opts", ["peek/open", "open/peek", "peek/close", "close/peek",
                                  "abort/open", "open/abort", "abort/close", "close/abort",
                                  "t=100/peek/open", "abort/peek/close"])
def test_conflicting_options(server, opts):
    c = server.conn()
    c.send(SET("co", "keep"))
    c.expect(STORED)
    c.send(b"get co/%s\r\n" % opts.encode())
    line = c.readline()
    assert line.startswith(b"CLIENT_ERROR "), line
    assert line.endswith(b"\r\n")
    # Nothing was taken or opened; the connection still works.
    assert qstat(c, "co", "open_transactions") == 0
    c.send(b"get co\r\n")
    c.expect(V("co", "keep") + END)
    assert_works(c)


def test_confirm(server):
    c, o = server.conn(), server.conn()
    c.send(SET("cf", "a") + SET("cf", "b") + SET("cf", "c") + b"get cf/open\r\n" * 3)
    c.expect(STORED * 3 + V("cf/open", "a") + END + V("cf/open", "b") + END + V("cf/open", "c") + END)
    c.send(b"confirm cf 2\r\n")
    c.expect(END)
    assert qstat(o, "cf", "open_transactions") == 1
    c.send(b"get cf/abort\r\n")
    c.expect(END)
    o.send(b"get cf\r\nget cf\r\n")
    o.expect(V("cf", "c") + END + END)


def test_monitor_with_max(server):
    c, o = server.conn(), server.conn()
    c.send(SET("mn", "a") + SET("mn", "b") + SET("mn", "c"))
    c.expect(STORED * 3)
    c.send(b"monitor mn 5 2\r\n")
    c.expect(V("mn", "a") + V("mn", "b") + END)
    assert qstat(o, "mn", "open_transactions") == 2
    c.send(b"confirm mn 2\r\n")
    c.expect(END)
    assert qstat(o, "mn", "open_transactions") == 0
    o.send(b"get mn\r\nget mn\r\n")
    o.expect(V("mn", "c") + END + END)


def test_monitor_collects_arrivals_then_end(server):
    c, o = server.conn(), server.conn()
    # A long window ended by MAX, so a slow (ASan, loaded) machine cannot
    # make the sets miss it.
    c.send(b"monitor ma 30 2\r\n")
    time.sleep(0.2)
    o.send(SET("ma", "x", 4) + SET("ma", "y"))
    o.expect(STORED * 2)
    c.expect(V("ma", "x", 4) + V("ma", "y") + END)
    c.send(b"confirm ma 2\r\n")
    c.expect(END)
    o.send(b"get ma\r\n")
    o.expect(END)


def test_monitor_window_ends_with_end(server):
    c, o = server.conn(), server.conn()
    c.send(b"monitor mw 3\r\n")
    o.send(SET("mw", "in-window"))
    o.expect(STORED)
    c.expect(V("mw", "in-window") + END)  # END when the 3 s window closes
    c.send(b"confirm mw 1\r\n")
    c.expect(END)


def test_monitor_unconfirmed_returned_on_disconnect(server):
    c, o = server.conn(), server.conn()
    c.send(SET("mu", "a") + SET("mu", "b") + b"monitor mu 1 1\r\n")
    c.expect(STORED * 2 + V("mu", "a") + END)
    c.close()
    wait_until(lambda: qstat(o, "mu", "open_transactions") == 0, what="abort on disconnect")
    o.send(b"get mu\r\nget mu\r\n")
    o.expect(V("mu", "a") + END + V("mu", "b") + END)


def test_monitor_empty_queue_ends(server):
    c = server.conn()
    c.send(b"monitor me 1\r\n")
    c.expect(END)
    assert_works(c)


# ---------------------------------------------------------------- limits

LIMITS_CONF = """
# per-queue limits used by the limit tests
[queue small]
max_items = 3

[queue sized]
max_size = 10

[queue ksize]
max_size = 1K

[queue disc]
max_items = 3
discard_old_when_full = yes

[queue discsz]
max_size = 10
discard_old_when_full = yes

[queue tiny]
max_item_size = 100

[queue aged]
max_age = 1
"""


@pytest.fixture
def limited(ternd):
    return ternd(conf=LIMITS_CONF)


def test_max_items(limited):
    c = limited.conn()
    c.send(SET("small", "a") + SET("small", "b") + SET("small", "c") + SET("small", "d"))
    c.expect(STORED * 3 + b"NOT_STORED\r\n")
    c.send(b"get small\r\n")
    c.expect(V("small", "a") + END)
    c.send(SET("small", "e"))
    c.expect(STORED)
    c.send(b"get small\r\n" * 4)
    c.expect(V("small", "b") + END + V("small", "c") + END + V("small", "e") + END + END)
    # Other queues are not limited.
    c.send(b"".join(SET("other", "%d" % i) for i in range(10)))
    c.expect(STORED * 10)


def test_max_size(limited):
    c = limited.conn()
    c.send(SET("sized", "12345") + SET("sized", "67890") + SET("sized", "x"))
    c.expect(STORED * 2 + b"NOT_STORED\r\n")
    c.send(b"get sized\r\n")
    c.expect(V("sized", "12345") + END)
    c.send(SET("sized", "abcde"))
    c.expect(STORED)


def test_max_size_with_suffix(limited):
    c = limited.conn()
    c.send(SET("ksize", b"k" * 1024) + SET("ksize", "x"))
    c.expect(STORED + b"NOT_STORED\r\n")


def test_discard_old_when_full(limited):
    c = limited.conn()
    c.send(b"".join(SET("disc", x) for x in "abcde"))
    c.expect(STORED * 5)
    c.send(b"get disc\r\n" * 4)
    c.expect(V("disc", "c") + END + V("disc", "d") + END + V("disc", "e") + END + END)
    assert qstat(c, "disc", "discarded") == 2


def test_discard_old_when_full_by_size(limited):
    c = limited.conn()
    c.send(SET("discsz", "11111") + SET("discsz", "22222") + SET("discsz", "33333"))
    c.expect(STORED * 3)
    c.send(b"get discsz\r\n" * 3)
    c.expect(V("discsz", "22222") + END + V("discsz", "33333") + END + END)
    assert qstat(c, "discsz", "discarded") == 1


def test_max_item_size_per_queue_swallows_body(limited):
    c = limited.conn()
    # The body contains request-like lines: they must be swallowed by length.
    body = (b"x\r\nget tiny\r\nversion\r\n" * 10)[:101]
    c.send(b"set tiny 0 0 101\r\n" + body + b"\r\nget tiny\r\n")
    c.expect(b"NOT_STORED\r\n" + END)
    c.send(SET("tiny", b"y" * 100) + b"get tiny\r\n")
    c.expect(STORED + V("tiny", b"y" * 100) + END)
    # Another queue takes the same size.
    c.send(SET("big", body))
    c.expect(STORED)


def test_max_item_size_server_wide(ternd):
    s = ternd(conf="[server]\nmax_item_size = 1K\n")
    c = s.conn()
    c.send(SET("q", b"a" * 1025) + SET("q", b"b" * 1024) + b"get q\r\nget q\r\n")
    c.expect(b"NOT_STORED\r\n" + STORED + V("q", b"b" * 1024) + END + END)


def test_max_item_size_default_1mib(server):
    c = server.conn()
    big = b"\r\n" * (512 * 1024)  # 1 MiB of line ends
    c.send(SET("mb", big + b"+") + b"get mb\r\n")
    c.expect(b"NOT_STORED\r\n" + END)
    c.send(SET("mb", big) + b"get mb\r\n")
    c.expect(STORED + V("mb", big) + END)


def test_max_age(limited):
    c = limited.conn()
    c.send(SET("aged", "old") + SET("aged", "old2"))
    c.expect(STORED * 2)
    time.sleep(2.2)  # wall clock for max_age = 1 s
    c.send(SET("aged", "new") + b"get aged\r\nget aged\r\n")
    c.expect(STORED + V("aged", "new") + END + END)
    assert qstat(c, "aged", "expired_items") == 2


def test_queue_limits_from_defaults_section(ternd):
    s = ternd(conf="[queues]\nmax_items = 2\n\n[queue big]\nmax_items = 5\n")
    c = s.conn()
    c.send(b"".join(SET("any", x) for x in "abc"))
    c.expect(STORED * 2 + b"NOT_STORED\r\n")
    c.send(b"".join(SET("big", x) for x in "abcdef"))
    c.expect(STORED * 5 + b"NOT_STORED\r\n")


# ---------------------------------------------------------------- fanout

def test_fanout(server):
    c = server.conn()
    c.send(b"get f+a\r\nget f+b\r\n")  # get creates the children
    c.expect(END + END)
    c.send(SET("f", "hello", 7))
    c.expect(STORED)
    c.send(b"get f\r\nget f+a\r\nget f+b\r\n")
    c.expect(V("f", "hello", 7) + END + V("f+a", "hello", 7) + END + V("f+b", "hello", 7) + END)
    # A child created later does not get earlier items.
    c.send(b"get f+c\r\n")
    c.expect(END)
    # A set to a child goes only to that child.
    c.send(SET("f+a", "only"))
    c.expect(STORED)
    c.send(b"get f\r\nget f+b\r\nget f+c\r\nget f+a\r\n")
    c.expect(END + END + END + V("f+a", "only") + END)
    # Each child consumes independently.
    c.send(SET("f", "1") + SET("f", "2"))
    c.expect(STORED * 2)
    c.send(b"get f+c\r\nget f+c\r\nget f+a\r\n")
    c.expect(V("f+c", "1") + END + V("f+c", "2") + END + V("f+a", "1") + END)
    assert qstat(c, "f", "items") == 2
    assert qstat(c, "f+b", "items") == 2


def test_fanout_children_of_other_queue_unaffected(server):
    c = server.conn()
    c.send(b"get fo+x\r\nget fox\r\n")
    c.expect(END + END)
    c.send(SET("f", "v"))
    c.expect(STORED)
    c.send(b"get fo+x\r\nget fox\r\n")
    c.expect(END + END)


# ---------------------------------------------------------------- delete / flush

def test_delete(server):
    c = server.conn()
    c.send(SET("del", "a") + SET("del", "b"))
    c.expect(STORED * 2)
    qdirs_before = _dirs_named(server.datadir, "del")
    c.send(b"delete del\r\n")
    c.expect(b"DELETED\r\n")
    s = c.stats()
    assert not [k for k in s if k.startswith("queue_del_")], "queue still listed after delete"
    if qdirs_before:
        wait_until(lambda: not _dirs_named(server.datadir, "del"), what="queue files removed")
    c.send(b"get del\r\n")
    c.expect(END)
    c.send(b"delete never_existed\r\n")
    c.expect(b"DELETED\r\n")
    assert_works(c, "del")


def _dirs_named(root, name):
    out = []
    for d, dirs, _ in os.walk(root):
        out += [os.path.join(d, x) for x in dirs if x == name]
    return out


def test_flush(server):
    c = server.conn()
    c.send(SET("fl", "a") + SET("fl", "b") + SET("keep", "k"))
    c.expect(STORED * 3)
    c.send(b"flush fl\r\n")
    c.expect(END)
    c.send(b"get fl\r\nget keep\r\n")
    c.expect(END + V("keep", "k") + END)
    assert qstat(c, "fl", "items") == 0
    c.send(b"flush nothing_here\r\n")
    c.expect(END)


def test_flush_all(server):
    c = server.conn()
    c.send(SET("fa1", "a") + SET("fa2", "b") + SET("fa2", "c"))
    c.expect(STORED * 3)
    c.send(b"flush_all\r\n")
    c.expect(b"OK\r\n")
    c.send(b"get fa1\r\nget fa2\r\n")
    c.expect(END + END)
    s = c.stats()
    assert s["curr_items"] == "0"
    assert s["bytes"] == "0"


def test_flush_expired(server):
    c = server.conn()
    c.send(SET("fx", "e1", exptime=1) + SET("fx", "live") + SET("fx", "e2", exptime=1)
           + SET("fy", "e3", exptime=1) + SET("fz", "live"))
    c.expect(STORED * 5)
    time.sleep(2.2)
    c.send(b"flush_expired fx\r\n")
    c.expect(b"2\r\n")
    assert qstat(c, "fx", "items") == 1
    assert qstat(c, "fx", "expired_items") == 2
    c.send(b"flush_expired fx\r\n")
    c.expect(b"0\r\n")
    c.send(b"flush_all_expired\r\n")
    c.expect(b"1\r\n")  # fy's
    c.send(b"get fx\r\nget fy\r\nget fz\r\n")
    c.expect(V("fx", "live") + END + END + V("fz", "live") + END)


# ---------------------------------------------------------------- stats

GENERAL_STATS = ["pid", "uptime", "time", "version", "curr_connections", "total_connections",
                 "cmd_get", "cmd_set", "get_hits", "get_misses", "bytes_read", "bytes_written",
                 "curr_items", "total_items", "bytes"]
QUEUE_STATS = ["items", "bytes", "total_items", "expired_items", "discarded", "waiters",
               "open_transactions", "age"]


def test_stats_format_and_general_fields(server):
    c = server.conn()
    c.send(b"stats\r\n")
    lines = []
    while True:
        line = c.readline()
        if line == END:
            break
        assert re.match(rb"^STAT [A-Za-z0-9_.+-]+ [^\r\n]*\r\n$", line), line
        lines.append(line)
    s = c.stats()
    for k in GENERAL_STATS:
        assert k in s, "missing STAT %s" % k
    assert int(s["pid"]) == server.pid
    assert abs(int(s["time"]) - time.time()) < 120
    assert int(s["uptime"]) >= 0
    ver = version_reply(c).decode().split()[1]
    assert s["version"] == ver
    for k in ["pointer_size", "rusage_user", "rusage_system", "threads", "evictions",
              "connection_structures", "limit_maxbytes"]:
        assert k in s, "missing STAT %s (memcached's, read by clients)" % k


def test_stats_counters(server):
    c = server.conn()
    s0 = c.stats()
    c.send(SET("sq", "hello") + SET("sq", "abc"))
    c.expect(STORED * 2)
    s1 = c.stats()
    d = lambda a, b, k: int(b[k]) - int(a[k])
    assert d(s0, s1, "cmd_set") == 2
    assert d(s0, s1, "total_items") == 2
    assert d(s0, s1, "curr_items") == 2
    assert d(s0, s1, "bytes") == 8
    assert d(s0, s1, "bytes_read") > 0
    assert d(s0, s1, "bytes_written") > 0
    assert s1["queue_sq_items"] == "2"
    assert s1["queue_sq_bytes"] == "8"
    assert s1["queue_sq_total_items"] == "2"
    for k in QUEUE_STATS:
        assert "queue_sq_" + k in s1, "missing STAT queue_sq_%s" % k
    assert s1["queue_sq_waiters"] == "0"
    assert s1["queue_sq_open_transactions"] == "0"
    assert s1["queue_sq_discarded"] == "0"
    assert s1["queue_sq_expired_items"] == "0"
    # the journal's record count: both ADDs were written before their replies
    # (sync = interval acknowledges once the record is in the kernel)
    assert int(s1["queue_sq_journal_records"]) - \
        int(s0.get("queue_sq_journal_records", 0)) == 2
    c.send(b"get sq\r\n")
    c.expect(V("sq", "hello") + END)
    s2 = c.stats()
    assert d(s1, s2, "cmd_get") == 1
    assert d(s1, s2, "get_hits") == 1
    assert d(s1, s2, "get_misses") == 0
    assert d(s1, s2, "curr_items") == -1
    assert d(s1, s2, "total_items") == 0
    assert d(s1, s2, "bytes") == -5
    assert s2["queue_sq_items"] == "1"
    assert s2["queue_sq_bytes"] == "3"
    assert s2["queue_sq_total_items"] == "2"
    c.send(b"get sq\r\nget sq\r\n")
    c.expect(V("sq", "abc") + END + END)
    s3 = c.stats()
    assert d(s2, s3, "cmd_get") == 2
    assert d(s2, s3, "get_hits") == 1
    assert d(s2, s3, "get_misses") == 1
    # Kestrel: the global curr_items/bytes are the sums over the queues.
    names = queue_names(s3)
    assert "sq" in names
    assert int(s3["curr_items"]) == sum(int(s3["queue_%s_items" % q]) for q in names)
    assert int(s3["bytes"]) == sum(int(s3["queue_%s_bytes" % q]) for q in names)


def test_stats_connections(server):
    c = server.conn()
    s0 = c.stats()
    others = [server.conn() for _ in range(3)]
    for o in others:
        version_reply(o)
    s1 = c.stats()
    assert int(s1["curr_connections"]) - int(s0["curr_connections"]) == 3
    assert int(s1["total_connections"]) - int(s0["total_connections"]) == 3
    for o in others:
        o.close()
    wait_until(lambda: int(c.stats()["curr_connections"]) == int(s0["curr_connections"]),
               what="curr_connections back down")
    assert int(c.stats()["total_connections"]) == int(s1["total_connections"])


def test_stats_queue_age(server):
    c = server.conn()
    c.send(SET("ag", "x"))
    c.expect(STORED)
    time.sleep(0.5)  # wall clock passes; age is a lower bound, not a speed figure
    age = qstat(c, "ag", "age")
    assert age >= 400, age
    c.send(b"get ag\r\n")
    c.expect(V("ag", "x") + END)
    assert qstat(c, "ag", "age") == 0


# ---------------------------------------------------------------- misc commands

def test_version(server):
    # memcached's number first (clients such as libmemcached refuse a
    # version that is not 1.x), then tern's own, as --version prints it.
    c = server.conn()
    line = version_reply(c)
    rc, out, err = run_ternd(["--version"])
    assert rc == 0
    ver = (out + err).split()[1]
    assert line == b"VERSION 1.6.21 tern-" + ver + b"\r\n"
    s = c.stats()
    assert s["version"] == "1.6.21"
    assert s["tern_version"] == ver.decode()


def test_verbosity(server):
    c = server.conn()
    c.send(b"verbosity 1\r\nverbosity 0\r\n")
    c.expect(b"OK\r\nOK\r\n")


def test_quit(server):
    c, o = server.conn(), server.conn()
    c.send(SET("qt", "a") + b"quit\r\nget qt\r\n")
    c.expect(STORED)
    c.assert_closed()
    # The get after quit was not executed.
    o.send(b"get qt\r\n")
    o.expect(V("qt", "a") + END)


def test_shutdown_disabled(server):
    c = server.conn()
    c.send(b"shutdown\r\n")
    c.expect(b"CLIENT_ERROR shutdown not enabled\r\n")
    assert server.alive()
    assert_works(c)


def test_shutdown_enabled(ternd):
    s = ternd(conf="[server]\nenable_shutdown = yes\n")
    c = s.conn()
    s.expect_exit(0)
    c.send(b"shutdown\r\n")
    c.assert_closed()
    assert s.wait(TIMEOUT) == 0


def test_sigterm_with_waiters_and_open_items(ternd):
    s = ternd()
    a, b = s.conn(), s.conn()
    a.send(SET("tq", "x") + b"get tq/open\r\n")
    a.expect(STORED + V("tq/open", "x") + END)
    b.send(b"get tq2/t=60000\r\n")
    wait_until(lambda: qstat(a, "tq2", "waiters") == 1, what="waiter")
    s.expect_exit(0)
    s.signal(signal.SIGTERM)
    assert s.wait(TIMEOUT) == 0


RELOAD_CONF = "[server]\nmax_connections = 100\n\n[queue rl]\nmax_items = %d\n"


def test_reload_command(ternd):
    s = ternd(conf=RELOAD_CONF % 2)
    c = s.conn()
    c.send(SET("rl", "a") + SET("rl", "b") + SET("rl", "c"))
    c.expect(STORED * 2 + b"NOT_STORED\r\n")
    s.write_conf(RELOAD_CONF % 4)
    c.send(b"reload\r\n")
    c.expect(b"OK\r\n")
    c.send(SET("rl", "c") + SET("rl", "d") + SET("rl", "e"))
    c.expect(STORED * 2 + b"NOT_STORED\r\n")
    # Items survive the reload, in order.
    c.send(b"get rl\r\n" * 5)
    c.expect(b"".join(V("rl", x) + END for x in "abcd") + END)


def test_reload_on_sighup(ternd):
    s = ternd(conf=RELOAD_CONF % 1)
    c = s.conn()
    c.send(SET("rl", "a") + SET("rl", "b"))
    c.expect(STORED + b"NOT_STORED\r\n")
    s.write_conf(RELOAD_CONF % 3)
    s.signal(signal.SIGHUP)

    def stored():
        r = c.set("rl", "b")
        assert r in (STORED, b"NOT_STORED\r\n"), r
        return r == STORED
    wait_until(stored, interval=0.1, what="SIGHUP reload to raise max_items")
    c.send(SET("rl", "c") + SET("rl", "d"))
    c.expect(STORED + b"NOT_STORED\r\n")
    assert s.alive()


def test_reload_with_broken_config_keeps_serving(ternd):
    # What reload replies on a bad file is unspecified; it must not kill the
    # server nor change the limits already in force.
    s = ternd(conf=RELOAD_CONF % 1)
    c = s.conn()
    s.write_conf("[queue rl]\nmax_items = lots\n")
    c.send(b"reload\r\n")
    line = c.readline()
    assert line.endswith(b"\r\n")
    c.send(SET("rl", "a") + SET("rl", "b"))
    c.expect(STORED + b"NOT_STORED\r\n")
    assert s.alive()


def test_idle_timeout(ternd):
    s = ternd(conf="[server]\nidle_timeout = 1\n")
    c = s.conn()
    version_reply(c)
    c.assert_closed(timeout=TIMEOUT)


def test_idle_timeout_counted(ternd):
    """A connection idle_timeout closes is counted (stats idle_timeouts);
    a busy one is not."""
    s = ternd(conf="[server]\nidle_timeout = 1\n")
    idle = s.conn()
    version_reply(idle)
    idle.assert_closed(timeout=TIMEOUT)
    with s.conn() as c:
        assert c.stats()["idle_timeouts"] == "1"


# ---------------------------------------------------------------- pipelining

def _mixed_stream(ver):
    """A request stream using most commands, and its exact expected replies."""
    body = bytes(range(256)) + b"\r\nEND\r\n"
    req, rep = [], []

    def add(r, e):
        req.append(r)
        rep.append(e)
    add(SET("pa", "one", 1), STORED)
    add(SET("pa", body, 2), STORED)
    add(SET("pb", "", 3), STORED)
    add(SET("pa", "quiet", noreply=True), b"")
    add(b"get pa pb\r\n", V("pa", "one", 1) + V("pb", "", 3) + END)
    add(b"get pa/peek\r\n", V("pa/peek", body, 2) + END)
    add(b"get pa/open\r\n", V("pa/open", body, 2) + END)
    add(b"get pa/close/open\r\n", V("pa/close/open", "quiet") + END)
    add(b"get pa/abort\r\n", END)
    add(b"bogus command\r\n", b"ERROR\r\n")
    add(b"get pa/t=50\r\n", V("pa/t=50", "quiet") + END)
    add(b"get pa/t=50\r\n", END)
    add(b"version\r\n", ver)
    add(b"verbosity 1\r\n", b"OK\r\n")
    add(SET("pc", "x") + SET("pc", "y"), STORED * 2)
    add(b"confirm pc 1\r\n", END)
    add(b"flush pc\r\n", END)
    add(b"get pc\r\n", END)
    add(b"delete pc\r\n", b"DELETED\r\n")
    add(b"set pd 0 0 3\r\nabcXY\r\n", b"CLIENT_ERROR bad data chunk\r\n")
    add(b"flush_expired pa\r\n", b"0\r\n")
    add(SET("pd", "z", 9) + b"get pd\r\n", STORED + V("pd", "z", 9) + END)
    add(b"flush_all\r\n", b"OK\r\n")
    return req, rep


def test_pipelining_many_requests_in_one_send(server):
    c = server.conn()
    ver = version_reply(c)
    n = 1000
    reqs = [SET("pp", "msg%d" % i, i) for i in range(n)] + [b"get pp\r\n"] * (n + 1)
    c.send(b"".join(reqs))
    c.expect(STORED * n + b"".join(V("pp", "msg%d" % i, i) + END for i in range(n)) + END)
    req, rep = _mixed_stream(ver)
    c.send(b"".join(req) * 5)
    c.expect(b"".join(rep) * 5)


def test_pipeline_then_half_close_answers_everything(server):
    """A long pipeline is parsed a few requests per loop pass (replies go
    out between passes); a client that half-closes after sending still gets
    every reply, in order, and then EOF."""
    c = server.conn()
    n = 300
    reqs = [SET("hc", "m%d" % i, i) for i in range(n)] + [b"get hc\r\n"] * (n + 1) + [b"quit\r\n"]
    c.send(b"".join(reqs))
    c.sock.shutdown(socket.SHUT_WR)
    c.expect(STORED * n + b"".join(V("hc", "m%d" % i, i) + END for i in range(n)) + END)
    with pytest.raises(Closed):
        c.read_exact(1, timeout=5)


def test_pipelines_on_many_connections_interleave(server):
    """Several clients pipelining at once: each gets exactly its own replies,
    in its own order (parsing takes turns between connections)."""
    conns = [server.conn() for _ in range(8)]
    n = 200
    for k, c in enumerate(conns):
        c.send(b"".join(SET("il%d" % k, "c%d-%d" % (k, i), i) for i in range(n))
               + b"get il%d\r\n" % k * n)
    for k, c in enumerate(conns):
        c.expect(STORED * n + b"".join(V("il%d" % k, "c%d-%d" % (k, i), i) + END for i in range(n)))


def test_pipeline_of_large_bodies_in_order(server):
    """Turns end sooner when bodies are large (after 4 requests once a turn
    has moved 32 KiB, instead of 16): a pipeline mixing large and small
    sets, then gets, still gets every reply in order and every body byte
    for byte."""
    c = server.conn()
    n = 60
    bodies = []
    for i in range(n):
        size = 5000 + 37 * i if i % 3 else 11 + i
        bodies.append(bytes((i * 7 + k) % 251 for k in range(size)).replace(b"\r\n", b"xx"))
    reqs = [SET("lb", b, i) for i, b in enumerate(bodies)] + [b"get lb\r\n"] * (n + 1)
    c.send(b"".join(reqs) + b"quit\r\n")
    c.sock.shutdown(socket.SHUT_WR)
    c.expect(STORED * n + b"".join(V("lb", b, i) + END for i, b in enumerate(bodies)) + END)
    with pytest.raises(Closed):
        c.read_exact(1, timeout=5)


def test_large_bodies_end_a_turn_after_32_kib(server):
    """A connection's turn ends after 16 requests, or after 32 KiB of
    requests and replies once it has taken 4, so a client pipelining 4 KiB
    sets has its first replies while the rest are still copied; STAT
    conn_yields counts the turns that ended with input left."""
    c = server.conn()
    body = b"y" * 4096
    # a first burst grows the connection's input buffer (each read that
    # fills it doubles it), so that the next one arrives in large reads
    c.send(b"".join(SET("ty", body, i) for i in range(80)))
    c.expect(STORED * 80)
    y0 = int(c.stats()["conn_yields"])
    c.send(b"".join(SET("ty", body, i) for i in range(64)))
    c.expect(STORED * 64)
    y1 = int(c.stats()["conn_yields"])
    # turns of 16 would end at most 3 times in 64 requests; of 8, up to 7
    assert y1 - y0 >= 4, (y0, y1)
    c.send(b"".join(SET("ts", "s%d" % i, i) for i in range(15)))
    c.expect(STORED * 15)
    assert int(c.stats()["conn_yields"]) == y1  # 15 small sets: one turn


def test_large_bodies_read_straight_into_items(server):
    """A body from 16 KiB up is read straight into its item once nothing
    else is buffered (STAT body_direct_bytes counts those bytes), with at
    most the next request's start read behind it: large sets sent in pieces
    and back to back, each followed in the same write by small requests,
    and one with a bad trailer, get every reply in order and every body
    back byte for byte."""
    c = server.conn()
    sizes = [16384, 65536, 100003, 16383, 262144, 20000]
    bodies = [bytes((i * 13 + k) % 251 for k in range(n)).replace(b"\r\n", b"xx")
              for i, n in enumerate(sizes)]
    d0 = int(c.stats()["body_direct_bytes"])
    stream, rep = [], []
    for i, body in enumerate(bodies):
        stream.append(SET("lg", body, i) + SET("sm", "s%d" % i) + b"get sm\r\n")
        rep.append(STORED * 2 + V("sm", "s%d" % i) + END)
    # a bad trailer after a large body: refused, and the stream goes on
    stream.append(b"set lg 0 0 32768\r\n" + b"b" * 32768 + b"XY\r\nversion\r\n")
    rep.append(b"CLIENT_ERROR bad data chunk\r\n" + version_reply(c))
    data = b"".join(stream)
    # in pieces that split headers, bodies and trailers, with pauses so the
    # server reads them apart, then the rest at once
    for k in range(0, 300000, 7001):
        c.send(data[k:min(k + 7001, 300000)])
        time.sleep(0.002)
    c.send(data[300000:])
    c.expect(b"".join(rep))
    c.send(b"get lg\r\n" * len(bodies) + b"get lg\r\n")
    c.expect(b"".join(V("lg", b, i) + END for i, b in enumerate(bodies)) + END)
    direct = int(c.stats()["body_direct_bytes"]) - d0
    # most of every body of 16 KiB and more (the bad one's too, with the
    # trailers), nothing of the 16383-byte one
    large = sum(sizes) - sizes[3] + 32768 + 2 * 6
    assert large >= direct > large // 2, direct
    # back to back: after the first, almost all of each body comes straight
    d1 = int(c.stats()["body_direct_bytes"])
    big = b"z" * 65536
    c.send(SET("bb", big) * 8)
    c.expect(STORED * 8)
    assert int(c.stats()["body_direct_bytes"]) - d1 >= 6 * 60000
    c.send(b"get bb\r\n" * 8)
    c.expect((V("bb", big) + END) * 8)


def test_byte_at_a_time(server):
    c = server.conn()
    ver = version_reply(c)
    req, rep = _mixed_stream(ver)
    data = b"".join(req)
    for i in range(len(data)):
        c.send(data[i:i + 1])
        if i % 8 == 0:
            time.sleep(0.001)  # let the server see the bytes in separate reads
    c.expect(b"".join(rep))


def test_split_at_every_offset(server):
    c = server.conn()
    data = SET("sp", "hello\r\nworld", 5) + b"get sp\r\n"
    for k in range(1, len(data)):
        c.send(data[:k])
        time.sleep(0.002)
        c.send(data[k:])
        c.expect(STORED + V("sp", "hello\r\nworld", 5) + END)


# ---------------------------------------------------------------- bad input

# (request, expected reply; a bytes value is exact, "CLIENT_ERROR" means any
# `CLIENT_ERROR <reason>\r\n` line).  After each, the same connection must
# answer `version`, proving the stream resynchronised (bodies swallowed).
BAD_INPUT = [
    (b"foo\r\n", b"ERROR\r\n"),
    (b"\r\n", b"ERROR\r\n"),
    (b"gett q\r\n", b"ERROR\r\n"),
    # malformed numbers (length parsed: body swallowed)
    (b"set q abc 0 1\r\nx\r\n", "CLIENT_ERROR"),
    (b"set q 0 abc 1\r\nx\r\n", "CLIENT_ERROR"),
    (b"set q -1 0 1\r\nx\r\n", "CLIENT_ERROR"),
    (b"set q 4294967296 0 1\r\nx\r\n", "CLIENT_ERROR"),
    (b"set q 1.5 0 1\r\nx\r\n", "CLIENT_ERROR"),
    # malformed / negative / overflowing lengths (nothing to swallow)
    (b"set q 0 0 abc\r\n", "CLIENT_ERROR"),
    (b"set q 0 0 1x\r\n", "CLIENT_ERROR"),
    (b"set q 0 0 -1\r\n", "CLIENT_ERROR"),
    (b"set q 0 0 18446744073709551616\r\n", "CLIENT_ERROR"),
    (b"set q 0 0 99999999999999999999999999\r\n", "CLIENT_ERROR"),
    # missing and extra tokens
    (b"set\r\n", "CLIENT_ERROR"),
    (b"set q\r\n", "CLIENT_ERROR"),
    (b"set q 0\r\n", "CLIENT_ERROR"),
    (b"set q 0 0\r\n", "CLIENT_ERROR"),
    (b"set q 0 0 1 noreply extra\r\nx\r\n", "CLIENT_ERROR"),
    (b"get\r\n", "CLIENT_ERROR"),
    (b"gets\r\n", "CLIENT_ERROR"),
    (b"delete\r\n", "CLIENT_ERROR"),
    (b"flush\r\n", "CLIENT_ERROR"),
    (b"flush_expired\r\n", "CLIENT_ERROR"),
    (b"confirm q\r\n", "CLIENT_ERROR"),
    (b"confirm q abc\r\n", "CLIENT_ERROR"),
    (b"confirm q -1\r\n", "CLIENT_ERROR"),
    (b"monitor q\r\n", "CLIENT_ERROR"),
    (b"monitor q abc\r\n", "CLIENT_ERROR"),
    (b"monitor q 1 abc\r\n", "CLIENT_ERROR"),
    (b"get q/t=abc\r\n", "CLIENT_ERROR"),
    (b"get q/t=\r\n", "CLIENT_ERROR"),
    (b"get q/t=-5\r\n", "CLIENT_ERROR"),
    (b"get q/t=99999999999999999999999\r\n", "CLIENT_ERROR"),
    # bad data chunk
    (b"set q 0 0 3\r\nabcXY\r\n", b"CLIENT_ERROR bad data chunk\r\n"),
    (b"set q 0 0 3\r\nabcd\r\n", b"CLIENT_ERROR bad data chunk\r\n"),
    (b"set q 0 0 0\r\nX\r\n", b"CLIENT_ERROR bad data chunk\r\n"),
    # names: too long, '/', '..', leading '.' or '+', characters outside the set
    (b"set " + b"n" * 251 + b" 0 0 1\r\nx\r\n", "CLIENT_ERROR"),
    (b"get " + b"n" * 251 + b"\r\n", "CLIENT_ERROR"),
    (b"set a/b 0 0 1\r\nx\r\n", "CLIENT_ERROR"),
    (b"set a..b 0 0 1\r\nx\r\n", "CLIENT_ERROR"),
    (b"set .. 0 0 1\r\nx\r\n", "CLIENT_ERROR"),
    (b"set . 0 0 1\r\nx\r\n", "CLIENT_ERROR"),
    (b"set .hidden 0 0 1\r\nx\r\n", "CLIENT_ERROR"),
    (b"set +child 0 0 1\r\nx\r\n", "CLIENT_ERROR"),
    (b"set a*b 0 0 1\r\nx\r\n", "CLIENT_ERROR"),
    (b"set a$b 0 0 1\r\nx\r\n", "CLIENT_ERROR"),
    (b"set a\x01b 0 0 1\r\nx\r\n", "CLIENT_ERROR"),
    (b"set \xc3\xa9t\xc3\xa9 0 0 1\r\nx\r\n", "CLIENT_ERROR"),
    (b"set a:b 0 0 1\r\nx\r\n", "CLIENT_ERROR"),
    (b"get /open\r\n", "CLIENT_ERROR"),
    (b"get a..b\r\n", "CLIENT_ERROR"),
    (b"get ..\r\n", "CLIENT_ERROR"),
    (b"get ../etc\r\n", "CLIENT_ERROR"),
    (b"get a*b\r\n", "CLIENT_ERROR"),
    (b"get ok a*b\r\n", "CLIENT_ERROR"),
    (b"delete ../etc\r\n", "CLIENT_ERROR"),
    (b"delete a/b\r\n", "CLIENT_ERROR"),
    (b"flush a..b\r\n", "CLIENT_ERROR"),
    (b"flush_expired a*b\r\n", "CLIENT_ERROR"),
    (b"confirm a..b 1\r\n", "CLIENT_ERROR"),
    (b"monitor a..b 1\r\n", "CLIENT_ERROR"),
]


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    """One server for the many bad-input cases (started and checked like the
    per-test ones)."""
    from conftest import Server
    d = tmp_path_factory.mktemp("shared")
    s = Server(d).start()
    yield s
    problems = s.stop()
    shutil.rmtree(s.datadir, ignore_errors=True)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.mark.parametrize("req,want", BAD_INPUT, ids=[repr(c[0][:40]) for c in BAD_INPUT])
def test_bad_input(shared_server, req, want):
    s = shared_server
    good = s.conn()
    bad = s.conn()
    version_reply(good)
    bad.send(req + b"version\r\n")
    if isinstance(want, bytes):
        bad.expect(want)
    else:
        line = bad.readline()
        assert re.match(rb"^CLIENT_ERROR [^\r\n]+\r\n$", line), \
            "expected CLIENT_ERROR <reason>, got %r" % line
    # The stream resynchronised: the next request is answered.
    line = bad.readline()
    assert line.startswith(b"VERSION "), "after the bad request, `version` got %r" % line
    assert_works(bad)
    assert_works(good)
    assert s.alive()


def test_bad_input_creates_no_queues(shared_server):
    # Runs after the parametrized cases (file order): no bad name became a queue.
    c = shared_server.conn()
    names = queue_names(c.stats())
    assert names <= {"sanity", "q", "ok"}, names
    c.send(b"get q\r\n")
    c.expect(END)  # no bad set stored anything in q


def test_name_of_250_bytes_is_valid(server):
    c = server.conn()
    name = "n" * 250
    c.send(SET(name, "x") + b"get " + name.encode() + b"\r\n")
    c.expect(STORED + V(name, "x") + END)
    for name in ["a-b_c.d", "A9", "x.y.z", "q+child", "-", "_"]:
        c.send(SET(name, "v") + b"get " + name.encode() + b"\r\n")
        c.expect(STORED + V(name, "v") + END)


def test_reply_key_echoes_the_longest_keys(server):
    # Options make a key longer than any queue name (a /t= may carry
    # leading zeros): the VALUE line still echoes it whole.
    c = server.conn()
    name = "n" * 250
    for opts in ["/close/open/t=100", "/t=" + "0" * 3000 + "5/peek"]:
        key = name + opts
        c.send(SET(name, "x") + b"get " + key.encode() + b"\r\n")
        c.expect(STORED + V(key, "x") + END)
        c.send(b"get " + name.encode() + b"/close\r\nget " + name.encode() + b"\r\n")
        c.expect(END + (V(name, "x") + END if "peek" in opts else END))


def test_line_too_long_closes_connection(server):
    c, o = server.conn(), server.conn()
    c.send(b"get " + b"a" * (MAX_LINE + 2000))
    c.expect(b"CLIENT_ERROR line too long\r\n")
    c.assert_closed()
    assert_works(o)


def test_line_too_long_after_good_requests(server):
    c = server.conn()
    c.send(SET("lt", "a") + b"x" * (MAX_LINE * 2))
    c.expect(STORED + b"CLIENT_ERROR line too long\r\n")
    c.assert_closed()
    o = server.conn()
    o.send(b"get lt\r\n")
    o.expect(V("lt", "a") + END)


def test_line_too_long_in_small_pieces(server):
    # The over-long line arrives in 512-byte pieces (bounded: 4x the limit).
    c = server.conn()
    sent = 0
    while sent < MAX_LINE * 4:
        try:
            c.send(b"z" * 512)
        except (BrokenPipeError, ConnectionResetError):
            break  # the server already answered and closed
        sent += 512
        time.sleep(0.001)
    c.expect(b"CLIENT_ERROR line too long\r\n")
    c.assert_closed()


def test_small_replies_the_socket_cannot_take_arrive_whole(server):
    """A turn's small replies are gathered in the connection's stage and
    sent with one send(2).  With 10 MB of replies, more than the socket
    buffers hold, to a client that reads nothing for half a second, sends
    are cut short and the rest waits for the socket; a body sent by
    reference now and then puts the stage behind the connection's buffer.
    Every reply arrives, in order, byte for byte."""
    c = server.conn()
    small = bytes(range(256)) * 4
    big = os.urandom(5000).replace(b"\r\n", b"xx")
    c.send(SET("stg", small, 7) + SET("stgbig", big, 9))
    c.expect(STORED * 2)
    n = 10000
    req, want = [], []
    for i in range(n):
        if i % 997 == 500:
            req.append(b"get stgbig/peek\r\n")
            want.append(V("stgbig/peek", big, 9) + END)
        else:
            req.append(b"get stg/peek\r\n")
            want.append(V("stg/peek", small, 7) + END)
    req, want = b"".join(req), b"".join(want)
    f = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT)
    # (a thread sends: the server stops reading while its replies wait)
    sender = threading.Thread(target=f.sendall, args=(req,))
    sender.start()
    time.sleep(0.5)
    got = bytearray()
    deadline = time.monotonic() + 60
    while len(got) < len(want) and time.monotonic() < deadline:
        chunk = f.recv(1 << 20)
        if not chunk:
            break
        got += chunk
    sender.join(timeout=TIMEOUT)
    f.close()
    assert len(got) == len(want)
    assert bytes(got) == want


def test_unread_pipeline_does_not_grow_memory(server):
    """A client pipelines 50 MB of `get big/peek` (each answered by a 100 KB
    value) and never reads: ternd must stop reading from it instead of
    buffering ~370 GB of replies.  Bounded in time: we stop sending when the
    budget is sent, when the socket has accepted nothing for 3 s, or after
    60 s."""
    c = server.conn()
    body = os.urandom(100 * 1024)
    c.send(SET("big", body) + b"get big/peek\r\n")
    c.expect(STORED + V("big/peek", body) + END)
    base = rss_kib(server.pid)
    bound_mb = 256
    f = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT)
    f.setblocking(False)
    req = b"get big/peek\r\n" * 4096
    budget = 50 * 1024 * 1024
    sent = 0
    peak = base

    def check_rss():
        # A server that keeps reading can eat all the machine's memory in
        # seconds: kill it as soon as the bound is crossed.
        nonlocal peak
        peak = max(peak, rss_kib(server.pid))
        if (peak - base) / 1024 >= bound_mb:
            server.kill()
            server.expect_exit(-signal.SIGKILL)
            pytest.fail("VmRSS grew by more than %d MB (to %d kB) after %.1f MB of unread "
                        "pipelined requests; server killed" % (bound_mb, peak, sent / 2 ** 20))
    start = last = time.monotonic()
    view = memoryview(req)
    off = 0
    while sent < budget:
        now = time.monotonic()
        if now - last > 3 or now - start > 60:
            break
        try:
            n = f.send(view[off:])
            sent += n
            off = (off + n) % len(req)
            last = time.monotonic()
        except BlockingIOError:
            select.select([], [f], [], 0.2)
        check_rss()
    for _ in range(5):
        time.sleep(0.1)
        check_rss()
    print("unread flood: sent %.1f MB, VmRSS %d -> %d kB" % (sent / 2 ** 20, base, peak))
    # Other clients are served meanwhile.
    assert_works(c)
    # The flooding client's replies are still correct when it finally reads.
    f.setblocking(True)
    f.settimeout(TIMEOUT)
    fc = Conn.__new__(Conn)
    fc.sock, fc.buf, fc.eof, fc.timeout = f, bytearray(), False, TIMEOUT
    fc.expect(V("big/peek", body) + END + V("big/peek", body) + END)
    fc.close()
    assert_works(c)
    assert server.alive()


def test_max_connections(ternd):
    s = ternd(conf="[server]\nmax_connections = 5\n")
    conns = []
    for _ in range(5):
        # (each makes its first request before the next connects: at most
        # max_handshakes of them may be silent at once)
        conns.append(s.conn())
        version_reply(conns[-1])
    extra = s.conn()
    extra.expect(b"SERVER_ERROR too many connections\r\n")
    extra.assert_closed()
    for c in conns:
        assert_works(c)
    conns.pop().close()

    def new_conn_works():
        c = s.conn()
        c.send(b"version\r\n")
        line = c.readline()
        if line.startswith(b"SERVER_ERROR too many connections"):
            c.close()
            return False
        assert line.startswith(b"VERSION "), line
        conns.append(c)
        return True
    wait_until(new_conn_works, interval=0.1, what="a slot after one client left")
    extra = s.conn()
    extra.expect(b"SERVER_ERROR too many connections\r\n")
    extra.assert_closed()


# ---------------------------------------------------------------- polling

def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def test_poll_us_default(server):
    c = server.conn()
    c.send(SET("pq", "x"))
    c.expect(STORED)
    st = c.stats()
    assert st["poll_us"] == "100"
    # each stats request is a read, after which the loop polls (unless the
    # journal's threads are busy, e.g. preparing the new queue's segments)
    wait_until(lambda: int(c.stats()["loop_polls"]) > 0, interval=0.05,
               what="a polling loop pass")


def test_writer_wakeups_stat(ternd):
    # The counter is reported and counts: the writer is woken from waiting
    # for work at least once here (a new queue's first segment, its first
    # interval sync), but the loop's own writes must not wake it once per
    # set.  That they do not wake it during an interval sync at all is
    # test_no_wakeups_during_sync (unit).
    c = ternd(conf="[journal]\nsync = interval\n").conn()
    w0 = int(c.stats()["journal_writer_wakeups"])
    c.send(SET("wq", "first"))
    c.expect(STORED)
    c.send(b"".join(SET("wq", "m%d" % i) for i in range(2000)))
    c.expect(STORED * 2000)
    wait_until(lambda: int(c.stats()["journal_writer_wakeups"]) > w0, interval=0.05,
               what="a writer wake-up")
    w1 = int(c.stats()["journal_writer_wakeups"])
    assert w1 < w0 + 2000, (w0, w1)


@pytest.mark.parametrize("mode", ["always", "odsync"])
def test_lone_client_synced_by_loop(ternd, mode):
    # One client alone, one set at a time: the loop writes and syncs each
    # set itself, without waking the writer (docs/JOURNAL.md, "The loop's
    # inline write").  Two clients taking turns: every set goes to the
    # writer, so that one client's gets never wait behind another's sync.
    s = ternd(conf="[journal]\nsync = %s\npreallocate = none\n"
                   "checkpoint_interval_ms = 3600000\n" % mode)
    a, b = s.conn(), s.conn()
    a.send(SET("lq", "first"))
    a.expect(STORED)
    w0 = int(a.stats()["journal_writer_wakeups"])
    # (the writer still takes a few: each new segment, and a set that finds
    # it busy with one; without the loop's own sync, every one of them)
    for i in range(200):
        a.send(SET("lq", "a%d" % i))
        a.expect(STORED)
    w1 = int(a.stats()["journal_writer_wakeups"])
    assert w1 - w0 < 80, (w0, w1)
    for i in range(200):
        c = (a, b)[i % 2]
        c.send(SET("lq", "t%d" % i))
        c.expect(STORED)
    w2 = int(a.stats()["journal_writer_wakeups"])
    assert w2 - w1 >= 120, (w1, w2)
    want = ["first"] + ["a%d" % i for i in range(200)] + ["t%d" % i for i in range(200)]
    for m in want:
        a.send(b"get lq\r\n")
        a.expect(V("lq", m) + END)


def test_poll_us_off(ternd):
    c = ternd(conf="[server]\npoll_us = 0\n").conn()
    for i in range(20):
        c.send(SET("pq", "m%d" % i))
        c.expect(STORED)
    for i in range(20):
        c.send(b"get pq\r\n")
        c.expect(V("pq", "m%d" % i) + END)
    st = c.stats()
    assert st["poll_us"] == "0"
    assert st["loop_polls"] == "0"


def test_poll_us_sleeps_when_idle(ternd):
    # A long window (50 ms) so the polling is plain in the CPU time; after
    # it the server must go back to sleep.
    s = ternd(conf="[server]\npoll_us = 50000\n")
    c = s.conn()
    for i in range(5):
        c.send(SET("pq", "m%d" % i))
        c.expect(STORED)
    wait_until(lambda: int(c.stats()["loop_polls"]) > 0, interval=0.05,
               what="a polling loop pass")
    time.sleep(0.3)  # past the window
    t0 = cpu_ticks(s.pid)
    time.sleep(1.0)
    t1 = cpu_ticks(s.pid)
    # ~100 ticks if it kept polling; an idle ternd uses next to none
    assert t1 - t0 <= 20, "idle ternd used %d ticks in 1 s" % (t1 - t0)
    c.send(b"get pq\r\n")
    c.expect(V("pq", "m0") + END)


def test_poll_us_after_a_batch(ternd):
    # A pass that took a pipelined batch from one client polls too: the
    # client's next batch comes once it has read these replies, and the loop
    # spins through that turnaround instead of sleeping.  A long window
    # (100 ms) makes the poll plain in the CPU time: ~10 ticks per batch.
    s = ternd(conf="[server]\npoll_us = 100000\n")
    c = s.conn()
    c.send(SET("pb", "first"))
    c.expect(STORED)
    time.sleep(0.3)  # past the window the single set opened
    t0 = cpu_ticks(s.pid)
    for r in range(8):
        c.send(b"".join(SET("pb", "b%d-%d" % (r, i)) for i in range(16)))
        c.expect(STORED * 16)
        time.sleep(0.12)
    t1 = cpu_ticks(s.pid)
    # 8 windows of 100 ms spun: ~80 ticks on an idle core, fewer on a
    # shared one; sleeping after each batch takes 0-2
    assert t1 - t0 >= 20, "ternd used %d ticks over 8 batches" % (t1 - t0)
    # every message is there, in order
    c.send(b"get pb\r\n")
    c.expect(V("pb", "first") + END)
    for r in range(8):
        for i in range(16):
            c.send(b"get pb\r\n")
            c.expect(V("pb", "b%d-%d" % (r, i)) + END)


def lockstep_sets(conns, queue, rounds):
    """Each round (of the range rounds) one set on every connection, then
    every reply: clients with one set in flight each, answered by the same
    syncs."""
    for r in rounds:
        for i, c in enumerate(conns):
            c.send(SET(queue, "c%d-r%d" % (i, r)))
        for c in conns:
            c.expect(STORED)


def test_group_wait(ternd):
    # In always, after a sync the writer waits for the clients it answered
    # to send their next sets (at most group_wait_us, 2000 by default), so
    # that they share the next sync.  Off (0), it never waits; a reload
    # turns it on.  Every set is there either way.
    conf = "[journal]\nsync = always\ngroup_wait_us = %d\n"
    s = ternd(conf=conf % 0)
    conns = [s.conn() for _ in range(8)]
    lockstep_sets(conns, "gw", range(20))
    st = conns[0].stats()
    assert st["journal_group_waits"] == "0", st
    assert st["journal_group_waits_cut"] == "0", st
    s.write_conf(conf % 2000)
    conns[0].send(b"reload\r\n")
    conns[0].expect(b"OK\r\n")
    lockstep_sets(conns, "gw", range(20, 40))
    st = conns[0].stats()
    waits, cut = int(st["journal_group_waits"]), int(st["journal_group_waits_cut"])
    assert waits >= 1, st
    assert cut <= waits, st
    got = set()
    for _ in range(8 * 40):
        got.add(conns[0].get1("gw").decode())
    assert got == {"c%d-r%d" % (i, r) for i in range(8) for r in range(40)}
    conns[0].send(b"get gw\r\n")
    conns[0].expect(END)


# ---------------------------------------------------------------- config errors

CONFIG_ERRORS = [
    ("[server]\nbogus_key = 1\n", 2),
    ("# comment\n\n[server]\nport = 22133\nmax_connections = lots\n", 5),
    ("[server]\nmax_item_size = 2G\n", 2),
    ("[server]\nenable_shutdown = perhaps\n", 2),
    ("[server]\npoll_us = 100001\n", 2),
    ("[server]\npoll_us = -5\n", 2),
    ("[journal]\ngroup_wait_us = 100001\n", 2),
    ("[queues]\ngroup_wait_us = 100\n", 2),
    ("[journal]\nsync = sometimes\n", 2),
    ("[queues]\nmax_items = abc\n", 2),
    ("[queues]\ndiscard_old_when_full = maybe\n", 2),
    ("[queues]\nmax_size = 10Q\n", 2),
    ("[queue foo]\nmax_age = -3\n", 2),
    ("[queue foo]\nmax_items = 5\nnot_a_key = 1\n", 3),
]


@pytest.mark.parametrize("text,line", CONFIG_ERRORS, ids=[c[0].strip().splitlines()[-1] for c in CONFIG_ERRORS])
def test_config_error(tmp_path, text, line):
    conf = tmp_path / "bad.conf"
    conf.write_text(text)
    data = tmp_path / "data"
    data.mkdir()
    rc, out, err = run_ternd(["-c", str(conf), "-p", "0", "-d", str(data)])
    assert rc == 1, "exit %d, stderr %r" % (rc, err)
    assert ("%s:%d:" % (conf, line)).encode() in err, err
    assert b"listening" not in err


def test_config_missing_file(tmp_path):
    rc, out, err = run_ternd(["-c", str(tmp_path / "nope.conf"), "-p", "0", "-d", str(tmp_path)])
    assert rc != 0
    assert b"listening" not in err


def test_config_shipped_file_starts(ternd):
    path = os.path.join(os.path.dirname(__file__), "..", "..", "conf", "ternd.conf")
    if not os.path.exists(path):
        pytest.skip("conf/ternd.conf not written yet")
    with open(path) as f:
        s = ternd(conf=f.read())
    assert_works(s.conn())


# ---------------------------------------------------------------- sync modes

@pytest.mark.parametrize("mode", ["none", "interval", "always", "odsync"])
def test_sync_modes_keep_reply_order(ternd, mode):
    # In always/odsync STORED waits for the disk while gets, version and
    # errors could be answered at once: replies must still come in order.
    s = ternd(conf="[journal]\nsegment_size = 1M\n", args=["--sync", mode])
    c = s.conn()
    ver = version_reply(c)
    req, rep = _mixed_stream(ver)
    inter = []
    exp = []
    for i in range(50):
        inter.append(SET("sm", "v%d" % i) + b"get other\r\nversion\r\nbogus\r\n")
        exp.append(STORED + END + ver + b"ERROR\r\n")
    # (the mixed stream ends with flush_all, so sm is read before it)
    c.send(b"".join(inter) + b"get sm\r\n" * 51 + b"".join(req))
    c.expect(b"".join(exp) + b"".join(V("sm", "v%d" % i) + END for i in range(50)) + END + b"".join(rep))
    # Many clients at once (group commit in always/odsync).
    conns = [s.conn() for _ in range(8)]
    for k, cc in enumerate(conns):
        cc.send(b"".join(SET("sm%d" % k, "x%d" % i) for i in range(20)))
    for k, cc in enumerate(conns):
        cc.expect(STORED * 20)
        cc.send(b"get sm%d\r\n" % k * 20)
        cc.expect(b"".join(V("sm%d" % k, "x%d" % i) + END for i in range(20)))


def test_sync_option_rejects_bad_mode(tmp_path):
    rc, out, err = run_ternd(["--sync", "sometimes", "-p", "0", "-d", str(tmp_path)])
    assert rc != 0
    assert b"listening" not in err


def test_mixed_sync_modes_in_one_pipeline(ternd):
    # Queues in different sync modes share one ticket sequence: the replies
    # of sets to an `always` queue (written by the writer thread, after its
    # fdatasync) and to a `none` queue (written on the loop when the writer
    # is idle) are interleaved in one pipeline.  Every reply must come back
    # in request order, and after a SIGKILL every acknowledged set must be
    # there, once, in order.
    conf = ("[journal]\nsync = none\n"
            "[queue dur]\nsync = always\n"
            "[queue mid]\nsync = interval\n")
    s = ternd(conf=conf)
    c = s.conn()
    names = ("dur", "fast", "mid")
    batch = b"".join(SET(names[i % 3], "m%03d" % i) for i in range(300))
    for _ in range(3):
        c.send(batch)
        c.expect(STORED * 300)
    datadir, conf_path = s.datadir, s.conf_path
    s.expect_exit(-signal.SIGKILL)
    s.kill()
    s2 = ternd(conf=conf, datadir=datadir)
    c2 = s2.conn()
    for qi, q in enumerate(names):
        want = [("m%03d" % i) for i in range(300) if i % 3 == qi] * 3
        c2.send(b"".join(b"get " + q.encode() + b"\r\n" for _ in want) + b"get " + q.encode() + b"\r\n")
        c2.expect(b"".join(V(q, w) + END for w in want) + END)
