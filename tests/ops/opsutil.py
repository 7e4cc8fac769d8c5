"""
Helpers for the operations tests (tests/ops): logging, --dump-config, the
service-manager notifications, man pages, make install.  Reuses
tests/e2e/conftest.py under another module name (as tests/journal does), so
this directory can run in one pytest invocation with the others:
the `ternd` factory fixture, Server, Conn, run_ternd, wait_until.  Adds:

- LOG_RE: one stderr log record (lib/log.h);
- NotifySocket: an abstract-namespace datagram socket standing in for
  systemd's NOTIFY_SOCKET; every message is kept, waits are bounded;
- Daemon: a ternd started with a chosen environment that is not waited for
  by its listening line (e.g. at log_level = warn), stopped by PID;
- tool(name), REPO, run(cmd).

Environment: TERND, TERN_LOAD, TERN_JOURNAL (paths, default build/...).
No test asserts on speed; every wait is bounded.
"""
import http.client
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from e2eshared import e2e  # noqa: E402 (tests/ on the path first)

ternd = e2e.ternd  # the fixture; conftest.py re-exports it
Conn = e2e.Conn
run_ternd = e2e.run_ternd
wait_until = e2e.wait_until
read_to_eof = e2e.read_to_eof
ternd_path = e2e.ternd_path
TIMEOUT = e2e.TIMEOUT
REPO = e2e.REPO
SANITIZER_RE = e2e.SANITIZER_RE

# "2025-06-01T12:00:00.123Z info message"
LOG_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z (error|warn|info|debug) (.*)$")


def tool(var, default):
    p = os.environ.get(var, default)
    return p if os.path.isabs(p) else os.path.join(REPO, p)


def run(cmd, timeout=300, **kw):
    """Runs cmd to completion (bounded); returns CompletedProcess with text."""
    kw.setdefault("stdin", subprocess.DEVNULL)
    try:
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout, universal_newlines=True, **kw)
    except subprocess.TimeoutExpired:
        pytest.fail("%s did not finish within %d s" % (" ".join(map(str, cmd)), timeout))


def log_records(text):
    """[(level, message)] of the lines of text that are log records."""
    out = []
    for line in text.splitlines():
        m = LOG_RE.match(line)
        if m:
            out.append((m.group(2), m.group(3)))
    return out


class NotifySocket:
    """The receiving end of sd_notify(3): NOTIFY_SOCKET=@name."""

    def __init__(self):
        self.name = "tern-test-notify-%d-%s" % (os.getpid(), uuid.uuid4().hex[:12])
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + self.name)
        self.env = "@" + self.name
        self.seen = []  # every message received, in order

    def close(self):
        self.sock.close()

    def recv(self, timeout):
        """The next message (str), or None after timeout seconds."""
        self.sock.settimeout(max(0.001, timeout))
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return None
        msg = data.decode()
        self.seen.append(msg)
        return msg

    def expect(self, pred, timeout=TIMEOUT, what="a notification", skip=None):
        """Returns the first message for which pred(msg) is true.  Messages
        for which skip(msg) is true are passed over; any other message
        before it fails the test (so the order is checked)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail("no %s within %.1f s; received: %r" % (what, timeout, self.seen))
            msg = self.recv(left)
            if msg is None:
                continue
            if pred(msg):
                return msg
            if skip and skip(msg):
                continue
            pytest.fail("expected %s, got %r (all: %r)" % (what, msg, self.seen))

    def quiet(self, seconds, pred=lambda m: True):
        """Asserts no message matching pred arrives within seconds."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            msg = self.recv(left)
            if msg is not None and pred(msg):
                pytest.fail("unexpected notification %r" % msg)


def fields(msg):
    """'A=1\\nB=x' -> {'A': '1', 'B': 'x'}"""
    return dict(line.split("=", 1) for line in msg.split("\n") if line)


@pytest.fixture
def notify():
    n = NotifySocket()
    yield n
    n.close()


class Daemon:
    """A ternd process with a chosen environment; stderr drained by a
    thread; stopped by PID at teardown (see the `daemon` fixture)."""

    def __init__(self, args, env=None, cwd=None, stderr=None):
        full = dict(os.environ)
        full.update(env or {})
        self._err = bytearray()
        self._lock = threading.Lock()
        self.proc = subprocess.Popen([ternd_path()] + list(args), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL,
                                     stderr=stderr if stderr is not None else subprocess.PIPE,
                                     env=full, cwd=cwd)
        self.pid = self.proc.pid
        self._reader = None
        if stderr is None:
            self._reader = threading.Thread(target=self._drain, daemon=True)
            self._reader.start()

    def _drain(self):
        for line in iter(self.proc.stderr.readline, b""):
            with self._lock:
                self._err += line
        self.proc.stderr.close()

    def stderr(self):
        with self._lock:
            return bytes(self._err).decode(errors="replace")

    def signal(self, sig):
        os.kill(self.pid, sig)

    def stop(self, timeout=TIMEOUT):
        """SIGTERM by PID; returns the exit status (SIGKILL after timeout)."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait(10)
                pytest.fail("ternd did not exit within %.0f s of SIGTERM" % timeout)
        if self._reader:
            self._reader.join(10)
        return self.proc.returncode


@pytest.fixture
def daemon():
    """Factory: daemon(args, env=None, cwd=None, stderr=None) -> Daemon.
    Teardown stops each by PID and fails on a sanitizer report."""
    started = []

    def start(args, env=None, cwd=None, stderr=None):
        d = Daemon(args, env=env, cwd=cwd, stderr=stderr)
        started.append(d)
        return d

    yield start
    problems = []
    for d in started:
        d.stop()
        if SANITIZER_RE.search(d.stderr().encode()):
            problems.append("sanitizer report:\n" + d.stderr()[-20000:])
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


# ---- memcached's binary protocol: frames for the access and stats tests

BIN_HDR = struct.Struct(">BBHBBHIIQ")
BIN_OP = dict(GET=0x00, SET=0x01, DELETE=0x04, FLUSH=0x08, NOOP=0x0a, VERSION=0x0b,
              STAT=0x10, SASL_LIST_MECHS=0x20, SASL_AUTH=0x21, SASL_STEP=0x22)


def bin_req(op, key=b"", extras=b"", value=b"", opaque=0):
    """A request frame (op: a name of BIN_OP or a number)."""
    key = key.encode() if isinstance(key, str) else key
    value = value.encode() if isinstance(value, str) else value
    op = BIN_OP[op] if isinstance(op, str) else op
    return BIN_HDR.pack(0x80, op, len(key), len(extras), 0, 0,
                        len(extras) + len(key) + len(value), opaque, 0) + extras + key + value


def bin_set(key, value, flags=0, exptime=0, opaque=0):
    return bin_req("SET", key, struct.pack(">II", flags, exptime), value, opaque)


def bin_frame(c):
    """One response read from Conn c: a dict of its fields."""
    h = c.read_exact(24)
    magic, op, kl, el, dt, st, bl, opq, cas = BIN_HDR.unpack(h)
    assert magic == 0x81 and dt == 0, h
    body = c.read_exact(bl)
    return dict(op=op, status=st, opaque=opq, cas=cas, extras=body[:el],
                key=body[el:el + kl], value=body[el + kl:])


def stats_lines(c, arg):
    """The STAT lines of `stats <arg>` as (name, value), up to END (a value
    may hold blanks, or be empty)."""
    c.send("stats %s\r\n" % arg)
    out = []
    while True:
        line = c.readline()
        if line == b"END\r\n":
            return out
        m = re.match(rb"^STAT (\S+) (.*)\r\n$", line)
        assert m, line
        out.append((m.group(1).decode(), m.group(2).decode()))


def bin_stats(c, key=b""):
    """A binary STAT request's answer: {name: value} up to the empty frame,
    or the error frame when its status is not 0."""
    c.send(bin_req("STAT", key))
    out = {}
    while True:
        f = bin_frame(c)
        if f["status"]:
            return f
        if not f["key"]:
            return out
        out[f["key"].decode()] = f["value"].decode()


# ---- Prometheus metrics

METRICS_RE = re.compile(r"metrics at http://([^ ]+):(\d+)/metrics")


def metrics_port(text):
    """The metrics port from a ternd's log (the 'metrics at http://...' line)."""
    m = METRICS_RE.search(text)
    assert m, "no metrics line in the log:\n" + text[-3000:]
    return int(m.group(2))


def http_get(port, path="/metrics", method="GET", host="127.0.0.1"):
    """(status, {header: value}, body) of one HTTP request."""
    c = http.client.HTTPConnection(host, port, timeout=TIMEOUT)
    try:
        c.request(method, path)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def scrape(port):
    """The exposition parsed with prometheus_client's parser:
    (families {name: Metric}, samples {(sample name, frozenset(labels)): value})."""
    from prometheus_client.parser import text_string_to_metric_families

    status, headers, body = http_get(port)
    assert status == 200, (status, body[:300])
    assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8", headers
    fams, samples = {}, {}
    for f in text_string_to_metric_families(body.decode()):
        assert f.name not in fams, "family %s twice" % f.name
        fams[f.name] = f
        for s in f.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in samples, "sample %r twice" % (key,)
            samples[key] = s.value
    return fams, samples


def sample(samples, name, **labels):
    """One sample's value (fails when it is missing)."""
    key = (name, frozenset(labels.items()))
    assert key in samples, "no sample %s%r" % (name, labels)
    return samples[key]
