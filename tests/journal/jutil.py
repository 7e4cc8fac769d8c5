"""
Helpers for the journal end-to-end tests (tests/journal).  Reuses
tests/e2e/conftest.py (loaded under another module name, so both directories
can run in one pytest invocation): the `ternd` factory fixture, Server, Conn,
wait_until.  Adds:
- pipelined raw-socket helpers (set_many, get_many) that keep a bounded
  window of requests in flight and check every reply;
- rss_kib(pid), a background RSS sampler;
- tern_journal(args): runs $TERN_JOURNAL (default build/tern-journal);
- killed(server) / stopped(server): SIGKILL / SIGTERM a server by PID and tell
  the e2e teardown which exit status to expect.

Environment: TERND, TERN_JOURNAL, TERN_E2E_TIMEOUT (see tests/e2e).
No test asserts on speed; every loop is bounded in count and time.
"""
import os
import re
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
Server = e2e.Server
wait_until = e2e.wait_until
TIMEOUT = e2e.TIMEOUT
REPO = e2e.REPO

WINDOW = 128  # requests in flight on one connection


def tool_path(var, default):
    p = os.environ.get(var, default)
    return p if os.path.isabs(p) else os.path.join(REPO, p)


def tern_journal(*args, timeout=120):
    """Runs tern-journal ARGS; returns (rc, stdout text, stderr text)."""
    exe = tool_path("TERN_JOURNAL", "build/tern-journal")
    if not os.path.exists(exe):
        pytest.fail("tern-journal not found: %s (set TERN_JOURNAL)" % exe)
    p = subprocess.run([exe] + [str(a) for a in args], stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def killed(server):
    """SIGKILLs server by PID; its teardown then expects status -9."""
    server.expected_rc = -signal.SIGKILL
    os.kill(server.pid, signal.SIGKILL)
    assert server.wait(TIMEOUT) == -signal.SIGKILL


def stopped(server):
    """SIGTERMs server by PID and waits for a clean exit 0."""
    server.expected_rc = 0
    os.kill(server.pid, signal.SIGTERM)
    rc = server.wait(TIMEOUT)
    assert rc == 0, "ternd exited %r after SIGTERM; stderr:\n%s" % (
        rc, server.stderr().decode(errors="replace")[-5000:])


def stats(server):
    with server.conn() as c:
        return c.stats()


def qstat(st, q, name):
    return int(st.get("queue_%s_%s" % (q, name), "-1"))


def until_steady(sample, period, repeats, timeout):
    """Calls sample() every period seconds until it has returned the same
    value repeats more times in a row (or timeout seconds have passed);
    returns the last value."""
    deadline = time.monotonic() + timeout
    last, still = sample(), 0
    while still < repeats and time.monotonic() <= deadline:
        time.sleep(period)
        cur = sample()
        still = still + 1 if cur == last else 0
        last = cur
    return last


def settle_journal(conn, q, checkpoint_s, timeout=5.0):
    """Waits (bounded) until queue q's journal has written nothing new for
    four checkpoint intervals: its records_written count (the STAT
    queue_<q>_journal_records, counted as each record is handed to the
    kernel) unchanged across five samples.  Returns that count."""
    def records():
        n = qstat(conn.stats(), q, "journal_records")
        assert n >= 0, "no STAT queue_%s_journal_records" % q
        return n

    return until_steady(records, checkpoint_s, 4, timeout)


# ---- pipelined clients ------------------------------------------------------

def set_many(conn, queue, bodies, window=WINDOW, exptime=0, stop_on_error=False):
    """Sends one `set queue` per body, at most `window` in flight, and
    returns the list of reply lines (bytes, without CRLF), one per body sent.
    exptime: an int, or a function of the index.  With stop_on_error, stops
    sending after the first reply that is not STORED (replies to requests
    already in flight are still collected)."""
    if isinstance(queue, str):
        queue = queue.encode()
    replies = []
    sent = 0
    n = len(bodies)
    failed = False
    deadline = time.monotonic() + max(TIMEOUT, 600)
    while len(replies) < sent or (sent < n and not failed):
        if sent < n and not failed and sent - len(replies) <= window // 2:
            out = []
            while sent + len(out) < n and sent - len(replies) + len(out) < window:
                b = bodies[sent + len(out)]
                e = exptime(sent + len(out)) if callable(exptime) else exptime
                out.append(b"set %s 0 %d %d\r\n%s\r\n" % (queue, e, len(b), b))
            conn.send(b"".join(out))
            sent += len(out)
        # collect at least one reply (more if already buffered)
        line = conn.readline()
        replies.append(line.rstrip(b"\r\n"))
        if stop_on_error and replies[-1] != b"STORED":
            failed = True
        while b"\n" in conn.buf and len(replies) < sent:
            line = conn.readline()
            replies.append(line.rstrip(b"\r\n"))
            if stop_on_error and replies[-1] != b"STORED":
                failed = True
        assert time.monotonic() < deadline, "set_many did not finish"
    return replies


_VALUE_RE = re.compile(rb"VALUE (\S+) (\d+) (\d+)\r\n")


def get_many(conn, queue, count, window=WINDOW):
    """Sends `count` gets of queue (window in flight) and returns the list of
    bodies, None for each get that answered END (empty queue)."""
    if isinstance(queue, str):
        queue = queue.encode()
    req = b"get %s\r\n" % queue
    out = []
    sent = 0
    deadline = time.monotonic() + max(TIMEOUT, 600)
    while len(out) < count:
        if sent < count and sent - len(out) < window // 2:
            k = min(window - (sent - len(out)), count - sent)
            conn.send(req * k)
            sent += k
        out.append(_read_one(conn))
        assert time.monotonic() < deadline, "get_many did not finish"
    return out


def _read_one(conn):
    """Reads one get reply: the body of its single VALUE, or None for END."""
    line = conn.readline()
    if line == b"END\r\n":
        return None
    m = _VALUE_RE.fullmatch(line)
    assert m, "expected VALUE or END, got %r" % line[:200]
    n = int(m.group(3))
    data = conn.read_exact(n + 2)
    assert data[n:] == b"\r\n", "value not followed by CRLF"
    end = conn.readline()
    assert end == b"END\r\n", "expected END after one value, got %r" % end[:200]
    return data[:n]


def drain(conn, queue, limit, window=WINDOW):
    """Gets until the queue answers END (at most limit + 1 gets); returns the
    bodies in the order received."""
    got = []
    while len(got) <= limit:
        k = min(window * 8, limit + 1 - len(got))
        batch = get_many(conn, queue, k, window)
        for b in batch:
            if b is None:
                return got
            got.append(b)
    pytest.fail("queue %s still not empty after %d gets" % (queue, limit + 1))


# ---- bodies ------------------------------------------------------------------

_BLOCK = bytes((i * 7919 + (i >> 5) * 31 + 17) % 251 for i in range(16384))


def body(i, size):
    """A deterministic body of `size` bytes for sequence number i, starting
    with its number in ASCII so `tern-journal dump` shows it."""
    head = b"%08d:" % i
    start = (i * 613) % (len(_BLOCK) - size)
    return head + _BLOCK[start:start + size - len(head)]


def seq_of(b):
    return int(b[:8])


def check_bodies(got, expected_seqs, size_of):
    """Asserts got (list of bodies) is exactly body(s, size_of(s)) for s in
    expected_seqs, in order; reports the first difference readably."""
    seqs = []
    for k, b in enumerate(got):
        try:
            seqs.append(seq_of(b))
        except ValueError:
            pytest.fail("item #%d is not a test body: %r" % (k, b[:40]))
    exp = list(expected_seqs)
    if seqs != exp:
        dup = len(seqs) - len(set(seqs))
        missing = sorted(set(exp) - set(seqs))
        extra = sorted(set(seqs) - set(exp))
        first = next((k for k in range(min(len(seqs), len(exp))) if seqs[k] != exp[k]),
                     min(len(seqs), len(exp)))
        pytest.fail("wrong items: got %d, expected %d; %d duplicated; missing %s; "
                    "unexpected %s; first difference at #%d: got %s expected %s"
                    % (len(seqs), len(exp), dup, _abbrev(missing), _abbrev(extra), first,
                       seqs[first:first + 5], exp[first:first + 5]))
    for k, (b, s) in enumerate(zip(got, exp)):
        if b != body(s, size_of(s)):
            pytest.fail("item #%d (seq %d): body differs (len %d, expected %d)"
                        % (k, s, len(b), size_of(s)))


def _abbrev(lst, n=12):
    return str(lst) if len(lst) <= n else "%s ... (%d)" % (lst[:n], len(lst))


# ---- memory ------------------------------------------------------------------

rss_kib = e2e.rss_kib


class RssSampler:
    """Samples a process's VmRSS every `interval` s in a thread; .max (KiB)."""

    def __init__(self, pid, interval=0.02):
        self.pid = pid
        self.max = rss_kib(pid)
        self.samples = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._t.start()

    def _run(self, interval):
        while not self._stop.wait(interval):
            try:
                v = rss_kib(self.pid)
            except (OSError, AssertionError):
                return
            self.samples += 1
            self.max = max(self.max, v)

    def stop(self):
        self._stop.set()
        self._t.join(5)
        return self.max


def is_asan(server):
    """True when the running ternd links AddressSanitizer."""
    try:
        with open("/proc/%d/maps" % server.pid) as f:
            return "libasan" in f.read()
    except OSError:
        return False
