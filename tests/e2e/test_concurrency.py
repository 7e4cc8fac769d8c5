"""
Many clients at once and lifecycle races (deleting or flushing a queue that
has waiters or open items, disconnecting mid-reply).  These mostly assert
that nothing is lost or duplicated and that the server neither crashes nor
trips a sanitizer (the fixture checks stderr and the exit status).
Everything is bounded in count and time.
"""
import os
import random
import socket
import struct
import threading

import pytest

from conftest import TIMEOUT, Conn, wait_until
from test_protocol import END, SET, STORED, V, assert_works, qstat


def _run_threads(fns):
    errors = []

    def wrap(fn):
        try:
            fn()
        except BaseException as e:  # reported below, with the thread's error
            errors.append(e)
    ts = [threading.Thread(target=wrap, args=(f,), daemon=True) for f in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join(TIMEOUT * 4)
    assert not [t for t in ts if t.is_alive()], "threads still running"
    if errors:
        raise errors[0]


def test_many_producers_and_waiting_consumers(server):
    producers, consumers, per = 10, 10, 200
    sent = {"p%d-%d" % (p, i) for p in range(producers) for i in range(per)}
    got = []
    lock = threading.Lock()
    done = threading.Event()

    def produce(p):
        with Conn(server.port) as c:
            for i in range(0, per, 20):
                c.send(b"".join(SET("cq", "p%d-%d" % (p, j)) for j in range(i, i + 20)))
                c.expect(STORED * 20)

    def consume():
        with Conn(server.port) as c:
            while True:
                c.send(b"get cq/t=200\r\n")
                v = c.read_values()
                if v:
                    with lock:
                        got.append(v[0][2].decode())
                elif done.is_set():
                    return

    def producers_then_done():
        _run_threads([lambda p=p: produce(p) for p in range(producers)])
        done.set()
    _run_threads([producers_then_done] + [consume] * consumers)
    assert len(got) == len(sent), "got %d of %d messages" % (len(got), len(sent))
    assert sorted(got) == sorted(sent), "lost or duplicated messages"


def test_reliable_consumers_with_aborts_and_disconnects(server):
    """Consumers open items and randomly abort, disconnect, or confirm:
    every message is confirmed exactly once."""
    n = 600
    c = server.conn()
    for i in range(0, n, 50):
        c.send(b"".join(SET("rq", "m%d" % j) for j in range(i, i + 50)))
        c.expect(STORED * 50)
    confirmed = []
    lock = threading.Lock()

    def consume(seed):
        rnd = random.Random(seed)
        conn = Conn(server.port)
        try:
            while True:
                conn.send(b"get rq/open\r\n")
                v = conn.read_values()
                if not v:
                    # Empty now, but items held by others may come back.
                    conn.send(b"get rq/t=300/open\r\n")
                    v = conn.read_values()
                    if not v:
                        return
                r = rnd.random()
                if r < 0.15:
                    conn.send(b"get rq/abort\r\n")
                    conn.expect(END)
                elif r < 0.25:
                    conn.close()
                    conn = Conn(server.port)
                else:
                    conn.send(b"get rq/close\r\n")
                    conn.expect(END)
                    with lock:
                        confirmed.append(v[0][2])
        finally:
            conn.close()
    _run_threads([lambda s=s: consume(s) for s in range(8)])
    wait_until(lambda: qstat(c, "rq", "open_transactions") == 0, what="all aborted")
    # Whatever is left (returned by the last disconnects) is drained here.
    while True:
        c.send(b"get rq\r\n")
        v = c.read_values()
        if not v:
            break
        confirmed.append(v[0][2])
    assert sorted(confirmed) == sorted(b"m%d" % i for i in range(n))


def test_same_connection_set_after_waiting_get(server):
    # The set behind a waiting get on the same connection is only run after
    # the get has timed out: replies stay in order.
    c = server.conn()
    c.send(b"get sw/t=300\r\n" + SET("sw", "late") + b"get sw\r\n")
    c.expect(END + STORED + V("sw", "late") + END)


def test_delete_queue_with_waiter(server):
    a, b = server.conn(), server.conn()
    a.send(b"get dw/t=3000\r\n")
    wait_until(lambda: qstat(b, "dw", "waiters") == 1, what="waiter")
    b.send(b"delete dw\r\n")
    b.expect(b"DELETED\r\n")
    a.expect(END)  # at once or at its timeout
    assert_works(a, "dw")
    assert_works(b, "dw")


def test_delete_queue_with_open_item_then_disconnect(server):
    a, b = server.conn(), server.conn()
    a.send(SET("do", "x") + b"get do/open\r\n")
    a.expect(STORED + V("do/open", "x") + END)
    b.send(b"delete do\r\n")
    b.expect(b"DELETED\r\n")
    a.send(b"get do/abort\r\n")
    a.expect(END)
    a.close()
    wait_until(lambda: int(b.stats()["curr_connections"]) == 1, what="a gone")
    # Whether the aborted item of a deleted queue survives is not specified;
    # the queue must work either way.
    b.send(b"get do\r\n")
    v = b.read_values()
    assert v in ([], [("do", 0, b"x")]), v
    assert_works(b, "do")


def test_delete_queue_with_open_item_and_open_timeout(ternd):
    s = ternd(conf="[queues]\nopen_timeout = 100\n")
    a, b = s.conn(), s.conn()
    a.send(SET("dt", "x") + b"get dt/open\r\n")
    a.expect(STORED + V("dt/open", "x") + END)
    b.send(b"delete dt\r\n")
    b.expect(b"DELETED\r\n")
    # Let the open timeout fire for an item whose queue is gone.
    b.send(b"get other/t=500\r\n")
    b.expect(END)
    a.send(b"get dt/close\r\n")
    a.expect(END)
    assert_works(a, "dt")
    assert_works(b, "dt2")


def test_flush_with_open_items_and_waiters(server):
    a, b, w = server.conn(), server.conn(), server.conn()
    a.send(SET("fw", "a") + SET("fw", "b") + b"get fw/open\r\n")
    a.expect(STORED * 2 + V("fw/open", "a") + END)
    b.send(b"flush fw\r\nflush_all\r\n")
    b.expect(END + b"OK\r\n")
    a.send(b"get fw/abort\r\n")
    a.expect(END)
    b.send(b"get fw\r\n")
    v = b.read_values()
    assert v in ([], [("fw", 0, b"a")]), v
    w.send(b"get fw/t=60000\r\n")
    wait_until(lambda: qstat(b, "fw", "waiters") == 1, what="waiter")
    b.send(b"flush fw\r\n" + SET("fw", "c"))
    b.expect(END + STORED)
    w.expect(V("fw/t=60000", "c") + END)


def test_fanout_child_deleted_between_sets(server):
    c = server.conn()
    c.send(b"get fd+a\r\nget fd+b\r\n")
    c.expect(END + END)
    c.send(SET("fd", "1") + b"delete fd+a\r\n" + SET("fd", "2"))
    c.expect(STORED + b"DELETED\r\n" + STORED)
    c.send(b"get fd+b\r\nget fd+b\r\n")
    c.expect(V("fd+b", "1") + END + V("fd+b", "2") + END)
    s = c.stats()
    assert "queue_fd+a_items" not in s


def test_disconnect_mid_large_reply(server):
    c = server.conn()
    body = os.urandom(1024 * 1024)
    c.send(SET("lr", body))
    c.expect(STORED)
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT)
        s.sendall(b"get lr/peek lr/peek lr/peek lr/peek\r\n" * 5)
        s.recv(1000)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()  # RST while the server is writing
    c.send(b"get lr\r\n")
    c.expect(V("lr", body) + END)


def test_monitor_then_delete_and_disconnect(server):
    a, b = server.conn(), server.conn()
    a.send(SET("md", "1") + SET("md", "2") + b"monitor md 1\r\n")
    a.expect(STORED * 2 + V("md", "1") + V("md", "2") + END)
    b.send(b"delete md\r\n")
    b.expect(b"DELETED\r\n")
    a.send(b"confirm md 2\r\n")
    a.expect(END)
    a.close()
    assert_works(b, "md")


def _random_request(rnd):
    q = rnd.choice(["rq1", "rq2", "rq2+a", "rq2+b", "bad/name", "..", "x" * 251, ""])
    opt = rnd.choice(["", "/open", "/close", "/abort", "/peek", "/t=20", "/t=20/open",
                      "/close/open", "/peek/open", "/t=x", "/"])
    n = rnd.choice([0, 1, 5, 100, 5000])
    body = os.urandom(n)
    choices = [
        lambda: b"set %s %d %d %d\r\n%s\r\n" % (q.encode(), rnd.randrange(4), rnd.choice([0, 1, 2592001]), n, body),
        lambda: b"set %s 0 0 %d\r\n%sXY" % (q.encode(), n, body),        # bad chunk
        lambda: b"set %s 0 0 %d noreply\r\n%s\r\n" % (q.encode(), n, body),
        lambda: b"get %s%s\r\n" % (q.encode(), opt.encode()),
        lambda: b"get %s%s %s\r\n" % (q.encode(), opt.encode(), q.encode()),
        lambda: b"delete %s\r\n" % q.encode(),
        lambda: b"flush %s\r\n" % q.encode(),
        lambda: b"flush_expired %s\r\n" % q.encode(),
        lambda: b"confirm %s %d\r\n" % (q.encode(), rnd.randrange(3)),
        lambda: b"monitor %s 0 %d\r\n" % (q.encode(), rnd.randrange(3)),
        lambda: b"stats\r\n",
        lambda: b"flush_all_expired\r\n",
        lambda: b"set %s 0 0 -%d\r\n" % (q.encode(), n),
        lambda: bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 40))),
        lambda: b"\r\n",
    ]
    return rnd.choice(choices)()


def _random_meta(rnd):
    """A meta line: mostly well formed, sometimes not."""
    q = rnd.choice(["rq1", "rq2", "rq2+a", "rq1", "rq2"] if rnd.random() < 0.9
                   else ["bad/name", "x" * 251, "cnExMQ=="])
    opt = rnd.choice(["", "", "/open", "/close", "/abort", "/peek", "/t=20", "/t=20/open",
                      "/close/open"] if rnd.random() < 0.9 else ["/x", "/peek/open"])
    bad = rnd.sample(["Z", "N5", "C1", "I", "MA", "b", "v v"], 1) if rnd.random() < 0.1 else []
    n = rnd.choice([0, 1, 100, 5000])
    body = os.urandom(n)

    def flags(pool):
        return " ".join(rnd.sample(pool, rnd.randrange(len(pool) + 1)) + bad).encode()
    choices = [
        lambda: b"mg %s%s %s\r\n" % (q.encode(), opt.encode(), flags(["v", "k", "c", "f", "s", "t", "q", "Oab"])),
        lambda: b"ms %s %d %s\r\n%s\r\n" % (q.encode(), n, flags(["c", "k", "q", "T5", "F3", "MS", "Oz"]), body),
        lambda: b"ms %s %d ME\r\n%s\r\n" % (q.encode(), n, body),
        lambda: b"ms %s %d\r\n%sXY" % (q.encode(), n, body),
        lambda: b"md %s %s\r\n" % (q.encode(), flags(["q", "k", "O1"])),
        lambda: b"mn\r\n",
        lambda: b"me %s\r\n" % q.encode(),
        lambda: b"ma %s\r\n" % q.encode(),
    ]
    return rnd.choice(choices)()


def _random_frame(rnd):
    """A binary frame: mostly well formed, sometimes not."""
    hdr = struct.Struct(">BBHBBHIIQ")
    shapes = {0x00: 0, 0x09: 0, 0x0c: 0, 0x0d: 0, 0x01: 8, 0x11: 8, 0x02: 8, 0x12: 8,
              0x04: 0, 0x14: 0, 0x0a: 0, 0x0b: 0, 0x10: 0, 0x0e: 0, 0x1c: 4, 0x05: 20,
              0x08: 4, 0x18: 0, 0x1b: 4, 0x55: 0}
    op = rnd.choice(list(shapes))
    getlike = op in (0x00, 0x09, 0x0c, 0x0d)
    key = rnd.choice([b"rq1", b"rq2", b"rq2+a"])
    if getlike:
        key += rnd.choice([b"", b"", b"/open", b"/peek", b"/t=20", b"/close/open", b"/abort"])
    if op in (0x0a, 0x0b, 0x08, 0x18, 0x1b) or (op == 0x10 and rnd.random() < 0.5):
        key = b""
    ext = b"\0" * shapes[op]
    if op in (0x01, 0x11, 0x02, 0x12):
        ext = struct.pack(">II", rnd.randrange(4), rnd.choice([0, 0, 2678400]))
    val = os.urandom(rnd.choice([0, 1, 100, 5000])) if op in (0x01, 0x11, 0x02, 0x12, 0x0e) else b""
    if rnd.random() < 0.1:  # a shape the opcode does not take, or a bad key
        ext, key = rnd.choice([(b"\0" * 3, key), (ext, b"bad name"), (ext, b"x" * 251), (ext, b"")])
    body = ext + key + val
    bodylen = len(body) if rnd.random() < 0.99 else rnd.randrange(len(ext) + len(key) + 1)
    return hdr.pack(0x80, op, len(key), len(ext), 0, 0, bodylen, rnd.randrange(1 << 32),
                    7 if rnd.random() < 0.05 else 0) + body


def _mix_clients(server, seeds, first, make):
    """Each seed a client sending first then 300 make(rnd) requests while a
    thread drains the replies, then shutting down its sending side: the
    server answers everything it read (a connection it closed after a bad
    frame ends early) and closes; the drain ends at that close."""
    def client(seed):
        rnd = random.Random(seed)
        s = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT)

        def drain():
            try:
                while s.recv(1 << 16):
                    pass
            except OSError:
                return
        t = threading.Thread(target=drain, daemon=True)
        t.start()
        try:
            s.sendall(first)
            for _ in range(300):
                s.sendall(make(rnd))
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may close a connection after a bad frame
        t.join(TIMEOUT * 3)
        assert not t.is_alive(), "server did not close after the half-close"
        s.close()
    _run_threads([lambda k=k: client(k) for k in seeds])


def test_random_meta_and_binary_mix_from_many_clients(server):
    """Meta lines mixed with text ones on three connections, binary frames
    (some malformed) on three more, at once; then the server must still
    answer correctly in all three protocols."""
    base = int(os.environ.get("TERN_E2E_SEED", "0")) * 100
    hdr = struct.Struct(">BBHBBHIIQ")
    noop = hdr.pack(0x80, 0x0a, 0, 0, 0, 0, 0, 0, 0)
    threads = [threading.Thread(target=_mix_clients, args=(
        server, [base + k for k in range(3)], b"mn\r\n",
        lambda rnd: _random_meta(rnd) if rnd.random() < 0.7 else _random_request(rnd))),
        threading.Thread(target=_mix_clients, args=(
            server, [base + 10 + k for k in range(3)], noop, _random_frame))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT * 6)
    c = server.conn()
    assert_works(c, "after_mix")
    c.send(b"ms after_meta 2\r\nok\r\nmg after_meta v\r\n")
    c.expect(b"HD\r\nVA 2\r\nok\r\n")
    b = server.conn()
    b.send(noop)
    b.expect(hdr.pack(0x81, 0x0a, 0, 0, 0, 0, 0, 0, 0))
    assert server.alive()


def test_random_request_mix_from_many_clients(server):
    """2000 random (valid and invalid) requests over 6 connections, replies
    drained by each client; then the server must still answer correctly."""
    def client(seed):
        rnd = random.Random(seed)
        s = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT)
        stop = threading.Event()

        def drain():
            try:
                while not stop.is_set():
                    if not s.recv(1 << 16):
                        return
            except OSError:
                return
        t = threading.Thread(target=drain, daemon=True)
        t.start()
        try:
            for _ in range(330):
                s.sendall(_random_request(rnd))
        except OSError:
            pass  # the server may close a connection after a garbage line
        stop.set()
        s.shutdown(socket.SHUT_WR)
        t.join(TIMEOUT)
        s.close()
    base = int(os.environ.get("TERN_E2E_SEED", "0"))  # vary to explore more
    _run_threads([lambda k=k: client(base * 100 + k) for k in range(6)])
    c = server.conn()
    assert_works(c, "after_mix")
    assert server.alive()


@pytest.mark.parametrize("mode", ["always", "odsync"])
def test_delete_queue_while_its_items_replies_wait_behind_a_sync(ternd, mode):
    """A plain get's reply sits behind a set that waits for its sync; the
    get's queue is deleted meanwhile by another client.  Deleting a journal
    waits for the writer, and the durable callbacks that run then send the
    held reply: its item must not be settled into the journal being
    deleted.  Repeated, since the interleaving depends on the disk."""
    s = ternd(args=["--sync", mode])
    a, b = s.conn(), s.conn()
    for i in range(30):
        q = "dq%d" % i
        b.send(SET(q, "x"))
        b.expect(STORED)
        a.send(SET("other", "o") + b"get " + q.encode() + b"\r\n")
        b.send(b"delete " + q.encode() + b"\r\n")
        b.expect(b"DELETED\r\n")
        a.expect(STORED)
        v = a.read_values()
        assert v in ([], [(q, 0, b"x")]), v
    assert_works(a)
    assert_works(b)
    assert s.alive()
