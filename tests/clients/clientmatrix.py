"""
The client matrix's harness (tests/clients).  Every client library runs in a
small driver program of its own language (drivers/), which reads one JSON
request per line on stdin and answers one JSON line on stdout:

    ["set", KEY, HEX]      -> {"r": true|false}       enqueue the bytes HEX
    ["get", KEY]           -> {"r": HEX|null}         null = a miss
    ["mget", [KEY, ...]]   -> {"r": {KEY: HEX, ...}}  the keys as the client reports them
    ["version"]            -> {"r": "..."}
    ["stats"]              -> {"r": {NAME: VALUE, ...}}
    any failure            -> {"err": "what the client said"}

so one scenario written here runs unchanged through every client.  The
scenario (`exercise`) checks what an application relies on: messages come
back in order and byte for byte, /peek leaves the head in place, /open hands
out an item that only /close confirms and that returns when the consumer
dies, /t= waits for a set from another connection, a multi-key get reports
the keys as requested, and afterwards the server's per-queue counters show
that nothing was lost or duplicated.  `timeout_limit` shows what happens
when a /t= wait outlasts the client's own timeout.

Reuses tests/e2e/conftest.py (loaded under another module name, as
tests/journal does): the `ternd` factory fixture, Server, Conn, wait_until.
Every wait is bounded; drivers are ended by PID.
"""
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from e2eshared import e2e  # noqa: E402 (tests/ on the path first)

ternd = e2e.ternd  # the fixture; conftest.py re-exports it
Conn = e2e.Conn
wait_until = e2e.wait_until
TIMEOUT = e2e.TIMEOUT
REPO = e2e.REPO
# Each client uses a dozen queues: segments of 1 MiB (a segment must hold
# the largest body) instead of the default 64 MiB keep that cheap.
CONF = "[journal]\nsegment_size = 1M\n"
HERE = os.path.dirname(os.path.abspath(__file__))
DRIVERS = os.path.join(HERE, "drivers")

# Bodies for binary-safe clients: every byte value, CRLFs, NULs and protocol
# words inside, the empty body, and sizes around a page and well past one.
_rnd = random.Random(18)
BINARY_BODIES = [
    b"first",
    b"",
    b"\x00\r\nEND\r\nVALUE q 0 5\r\n\xff\x80 \t",
    bytes(range(256)),
    bytes(_rnd.randrange(256) for _ in range(4096)),
    bytes(_rnd.randrange(256) for _ in range(100 * 1024)),
    b"last",
]
# Bodies for clients that carry only text (UTF-8 without CR or LF).
TEXT_BODIES = [
    b"first",
    "h\u00e9llo w\u00f6rld \u2713 \u6f22\u5b57".encode(),
    b"END VALUE q 0 5 \t tabs and spaces",
    ("%d " * 2000 % tuple(range(2000))).encode(),
    b"last",
]


class ClientError(AssertionError):
    """The client library reported an error for a request."""


class Driver:
    """One driver process.  call() sends a request and returns its result,
    raising ClientError with the client's message on {"err": ...};
    send()/recv() split the two for a request that blocks (a /t= wait)."""

    def __init__(self, argv, tmpdir, name, env=None, cwd=None):
        self.name = name
        self.argv = argv
        self.err_path = os.path.join(str(tmpdir), name + ".stderr")
        self._err = open(self.err_path, "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._err, env=env, cwd=cwd or HERE)
        self.pid = self.proc.pid
        self._lines = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in iter(self.proc.stdout.readline, b""):
            self._lines.put(line)
        self._lines.put(None)

    def stderr(self):
        with open(self.err_path, "rb") as f:
            return f.read().decode(errors="replace")[-4000:]

    def send(self, *req):
        self.proc.stdin.write(json.dumps(list(req)).encode() + b"\n")
        self.proc.stdin.flush()

    def recv(self, timeout=TIMEOUT):
        """Returns the next reply as a dict ({"r": ...} or {"err": ...})."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("%s: no reply within %.0fs; stderr:\n%s"
                                 % (self.name, timeout, self.stderr())) from None
        if line is None:
            raise AssertionError("%s exited (status %s); stderr:\n%s"
                                 % (self.name, self.proc.wait(10), self.stderr()))
        try:
            return json.loads(line)
        except ValueError:
            raise AssertionError("%s: not a JSON reply: %r" % (self.name, line)) from None

    def result(self, timeout=TIMEOUT):
        rep = self.recv(timeout)
        if "err" in rep:
            raise ClientError("%s: %s" % (self.name, rep["err"]))
        return rep["r"]

    def call(self, *req, timeout=TIMEOUT):
        self.send(*req)
        return self.result(timeout)

    # Typed shortcuts; bodies are bytes here and hex on the wire.
    def set(self, key, data):
        return self.call("set", key, data.hex())

    def get(self, key):
        r = self.call("get", key)
        return None if r is None else bytes.fromhex(r)

    def mget(self, keys):
        return {k: bytes.fromhex(v) for k, v in self.call("mget", list(keys)).items()}

    def stop(self):
        """Ends the driver: EOF on stdin, a bounded wait, then SIGKILL by PID.
        Returns its exit status (None when it had to be killed)."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait(10)
                self._err.close()
                return None
        self._err.close()
        return self.proc.returncode


@pytest.fixture
def drivers(tmp_path):
    """Factory: drivers(argv, name=None, env=None) -> a started Driver; every
    driver is stopped by PID at teardown, and one that exits non-zero fails
    the test (a crash in a client library is a finding, not noise)."""
    started = []

    def start(argv, name=None, env=None):
        d = Driver(argv, tmp_path, name or "driver%d" % len(started), env=env)
        started.append(d)
        return d

    yield start
    bad = []
    for d in started:
        rc = d.stop()
        if rc != 0:
            bad.append("%s exited %s; stderr:\n%s" % (d.name, rc, d.stderr()))
    if bad:
        pytest.fail("\n".join(bad), pytrace=False)


@pytest.fixture
def server(ternd):
    """A ternd on a free port, with small journal segments (many queues)."""
    return ternd(conf=CONF)


def qstats(conn, q):
    """The server's counters for queue q (raw `stats`), as ints."""
    st = conn.stats()
    pre = "queue_%s_" % q
    return {k[len(pre):]: int(v) for k, v in st.items() if k.startswith(pre)}


def assert_queue(conn, q, items=0, open_=0, total=None, waiters=0):
    """Asserts the per-queue counters: items queued, open transactions,
    blocked waiters and (if given) total_items ever added."""
    st = qstats(conn, q)
    assert st, "queue %s does not exist on the server" % q
    got = {"items": st["items"], "open_transactions": st["open_transactions"],
           "waiters": st["waiters"]}
    want = {"items": items, "open_transactions": open_, "waiters": waiters}
    if total is not None:
        got["total_items"] = st["total_items"]
        want["total_items"] = total
    assert got == want, "queue %s counters" % q


def raw_peek(conn, q):
    """The head of q as the server holds it: (flags, body) or None."""
    v = conn.get(q + "/peek")
    return (v[0][1], v[0][2]) if v else None


def exercise(c, server, pre, bodies=BINARY_BODIES, flags=0, wait_ms=3000, mget=True):
    """The queue scenario every client passes.  c is a Driver, pre a prefix
    for this client's queue names, bodies what it can carry, flags what it
    writes for a plain byte string, wait_ms a /t= wait shorter than its
    timeout, mget whether its API has a multi-key get.  Returns the queues it
    used with how many items each was given (for the final check)."""
    raw = server.conn()
    totals = {}

    # FIFO, byte for byte, and the server holds exactly what was sent.
    q = pre + "fifo"
    for b in bodies:
        assert c.set(q, b) is True, "set of %d bytes" % len(b)
    assert raw_peek(raw, q) == (flags, bodies[0])
    assert_queue(raw, q, items=len(bodies), total=len(bodies))
    for i, b in enumerate(bodies):
        got = c.get(q)
        assert got is not None, "queue empty at item %d of %d" % (i, len(bodies))
        assert got == b, "item %d (%d bytes) differs" % (i, len(b))
    assert c.get(q) is None
    # A message from another producer (raw socket, flags 0) reads back as is.
    assert raw.set(q, bodies[-1]) == b"STORED\r\n"
    assert c.get(q) == bodies[-1]
    totals[q] = len(bodies) + 1

    # /peek leaves the head in place.
    q = pre + "peek"
    a, b = bodies[0], bodies[-1]
    assert c.set(q, a) is True and c.set(q, b) is True
    assert c.get(q + "/peek") == a
    assert c.get(q + "/peek") == a
    assert c.get(q) == a
    assert c.get(q + "/peek") == b
    assert c.get(q) == b
    assert c.get(q + "/peek") is None
    totals[q] = 2

    # /open + /close: an open item is out of the queue but not gone; /abort
    # returns it; /close confirms it; /close/open confirms and takes the next.
    q = pre + "open"
    x, y, z = bodies[0], bodies[2 % len(bodies)], bodies[-1]
    for v in (x, y, z):
        assert c.set(q, v) is True
    assert c.get(q + "/open") == x
    assert_queue(raw, q, items=2, open_=1)
    assert c.get(q + "/close") is None
    assert_queue(raw, q, items=2, open_=0)
    assert c.get(q + "/open") == y
    assert c.get(q + "/abort") is None
    assert_queue(raw, q, items=2, open_=0)
    assert c.get(q + "/open") == y
    assert c.get(q + "/close/open") == z
    assert c.get(q + "/close/open") is None
    assert_queue(raw, q, items=0, open_=0, total=3)
    totals[q] = 3

    # /t=: an item already there comes at once, an empty queue answers a miss
    # when the wait ends, and a waiting get is woken by another producer.
    q = pre + "wait"
    assert c.set(q, x) is True
    assert c.get(q + "/t=%d" % wait_ms) == x
    assert c.get(q + "/t=20") is None
    c.send("get", q + "/t=%d" % wait_ms)
    wait_until(lambda: qstats(raw, q).get("waiters") == 1, what="the client's get to wait")
    assert raw.set(q, z) == b"STORED\r\n"
    rep = c.result()
    assert rep is not None and bytes.fromhex(rep) == z
    # /t= with /open: the woken item is open until /close.
    c.send("get", q + "/t=%d/open" % wait_ms)
    wait_until(lambda: qstats(raw, q).get("waiters") == 1, what="the client's get to wait")
    assert raw.set(q, y) == b"STORED\r\n"
    rep = c.result()
    assert rep is not None and bytes.fromhex(rep) == y
    assert_queue(raw, q, items=0, open_=1)
    assert c.get(q + "/close") is None
    totals[q] = 3

    # One multi-key get with options: the reply keys are the requested keys.
    if mget:
        q1, q2, q3 = pre + "m1", pre + "m2", pre + "m3"
        assert c.set(q1, x) is True and c.set(q2, y) is True
        got = c.mget([q1 + "/peek", q2 + "/open", q3])
        assert got == {q1 + "/peek": x, q2 + "/open": y}
        assert_queue(raw, q2, items=0, open_=1)
        assert c.get(q2 + "/close") is None
        assert c.get(q1) == x
        assert not qstats(raw, q3), "a get created queue %s" % q3
        totals.update({q1: 1, q2: 1})

    for qq, n in totals.items():
        assert_queue(raw, qq, items=0, open_=0, total=n)
    raw.close()
    return totals


def consumer_dies_with_open_item(start, server, q, body=b"survivor"):
    """A consumer process that exits holding an /open item loses nothing:
    the item is back at the head.  start() starts a fresh driver."""
    raw = server.conn()
    assert raw.set(q, body) == b"STORED\r\n"
    d = start()
    assert d.get(q + "/open") == body
    assert_queue(raw, q, items=0, open_=1)
    assert d.stop() == 0
    wait_until(lambda: qstats(raw, q).get("open_transactions") == 0, what="the open item to return")
    assert_queue(raw, q, items=1, open_=0, total=1)
    assert raw.get(q) == [(q, 0, body)]
    raw.close()


def timeout_limit(c, server, q, wait_ms, opt="", gave_up=False):
    """A /t= wait longer than the client's own timeout, on an empty queue
    (opt is appended to the key, e.g. "/open").  Asserts that the client
    gave up before the server's wait could end, so the limit is the
    client's.  Then a message is set at once, while the server may still
    hold the abandoned wait (tern lets a wait run on after the client closes
    its side, as a batch client that half-closes expects), and the client
    asks again.  Returns (what the client said when it gave up, the
    message's fate): "next get" (the client's next get returned it),
    "queued" (the next get missed, the message is still in the queue) or
    "lost" (it was handed to the abandoned wait and the client dropped it).
    Clients differ; each test asserts the fate its client gives.  With
    gave_up, the message is set only once the server has ended the
    abandoned waits (it ends a binary client's waits when the client shuts
    its side down), as a message that comes after the client gave up."""
    raw = server.conn()
    t0 = time.monotonic()
    c.send("get", "%s/t=%d%s" % (q, wait_ms, opt))
    said = c.recv(timeout=wait_ms / 1000.0 + TIMEOUT)
    waited = time.monotonic() - t0
    assert waited < wait_ms / 1000.0, (
        "the client waited %.1f s for a /t=%d get (%r): no client-side limit" % (waited, wait_ms, said))
    if gave_up:
        wait_until(lambda: qstats(raw, q)["waiters"] == 0, what="the abandoned waits to end")
    assert raw.set(q, b"after timeout") == b"STORED\r\n"
    wait_until(lambda: all(qstats(raw, q)[k] == 0 for k in ("waiters", "open_transactions")),
               what="the abandoned waits to end")
    c.send("get", q)
    nxt = c.recv()
    if nxt.get("r") is not None:
        assert bytes.fromhex(nxt["r"]) == b"after timeout"
        fate = "next get"
    elif qstats(raw, q)["items"] == 1:
        assert raw.get(q) == [(q, 0, b"after timeout")]
        fate = "queued"
    else:
        fate = "lost"
    assert_queue(raw, q, items=0, total=1)
    raw.close()
    return said, fate, nxt
