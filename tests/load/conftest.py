"""
Fixtures for the tern-load end-to-end tests.

- `load` runs build/tern-load ($TERN_LOAD) with a bounded timeout and returns
  (exit status, stdout, stderr, parsed JSON or None).
- `ternd`, `memcached`, `redis`, `beanstalkd` start a server on a free
  loopback port with fresh directories under the test's tmp dir and kill it
  by PID on teardown.  Each skips the test when its binary is missing.
  `ternd_proc` is `ternd` as (Popen, port), for tests that read /proc.
- `fake_server` (factory) starts an in-process memcache queue server that can
  drop, duplicate, swap, corrupt messages or hang up (see FakeQueueServer).
No test asserts on speed.
"""
import collections
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RUN_TIMEOUT = float(os.environ.get("TERN_LOAD_TEST_TIMEOUT", "120"))


def repo_path(env, default):
    p = os.environ.get(env, default)
    return p if os.path.isabs(p) else os.path.join(REPO, p)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, proc, timeout=20.0):
    """Waits (bounded) until something accepts on 127.0.0.1:port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def stop(proc):
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


class Result:
    def __init__(self, rc, out, err):
        self.rc, self.out, self.err = rc, out, err
        self.json = None
        if out.lstrip().startswith("{"):
            self.json = json.loads(out)

    def __repr__(self):
        return "rc=%d\nstdout:\n%s\nstderr:\n%s" % (self.rc, self.out, self.err)


@pytest.fixture
def load():
    binary = repo_path("TERN_LOAD", "build/tern-load")
    if not os.access(binary, os.X_OK):
        pytest.skip("no tern-load binary at %s" % binary)

    def run(*args):
        p = subprocess.run([binary] + [str(a) for a in args], capture_output=True,
                           text=True, timeout=RUN_TIMEOUT)
        return Result(p.returncode, p.stdout, p.stderr)
    return run


def _start(tmp_path, name, argv_for_port, tries=3):
    """Starts a server whose argv depends on its port; retries on a port
    race.  Returns (proc, port)."""
    binary = shutil.which(name)
    if binary is None:
        pytest.skip("%s is not installed" % name)
    for _ in range(tries):
        port = free_port()
        log = open(os.path.join(str(tmp_path), "%s-%d.log" % (name, port)), "wb")
        proc = subprocess.Popen([binary] + argv_for_port(port), stdout=log,
                                stderr=subprocess.STDOUT)
        log.close()
        if wait_port(port, proc):
            return proc, port
        stop(proc)
    pytest.fail("could not start %s" % name)


@pytest.fixture
def memcached(tmp_path):
    user = ["-u", "root"] if os.geteuid() == 0 else []
    proc, port = _start(tmp_path, "memcached",
                        lambda p: ["-U", "0", "-l", "127.0.0.1", "-p", str(p), "-m", "256"] + user)
    yield port
    stop(proc)


@pytest.fixture
def redis(tmp_path):
    d = tmp_path / "redis"
    d.mkdir()
    proc, port = _start(tmp_path, "redis-server",
                        lambda p: ["--port", str(p), "--bind", "127.0.0.1", "--dir", str(d),
                                   "--save", "", "--appendonly", "no"])
    yield port
    stop(proc)


@pytest.fixture
def beanstalkd(tmp_path):
    d = tmp_path / "beanstalk"
    d.mkdir()
    proc, port = _start(tmp_path, "beanstalkd",
                        lambda p: ["-l", "127.0.0.1", "-p", str(p), "-b", str(d)])
    yield port
    stop(proc)


LISTEN_RE = re.compile(r"ternd listening on (\S+):(\d+)")


@pytest.fixture
def ternd_proc(tmp_path):
    """A ternd on a free port: (its Popen, its port)."""
    binary = repo_path("TERND", "build/ternd")
    if not os.access(binary, os.X_OK):
        pytest.skip("no ternd binary at %s" % binary)
    data = tmp_path / "data"
    data.mkdir()
    proc = subprocess.Popen([binary, "-p", "0", "-d", str(data)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    found = {}
    ready = threading.Event()
    err = bytearray()

    def drain():
        for line in iter(proc.stderr.readline, b""):
            err.extend(line)
            m = LISTEN_RE.search(line.decode(errors="replace"))
            if m and not ready.is_set():
                found["port"] = int(m.group(2))
                ready.set()
        ready.set()
    t = threading.Thread(target=drain, daemon=True)
    t.start()
    if not ready.wait(30) or "port" not in found:
        stop(proc)
        pytest.fail("ternd did not start: %s" % err.decode(errors="replace"))
    yield proc, found["port"]
    stop(proc)
    t.join(5)


@pytest.fixture
def ternd(ternd_proc):
    yield ternd_proc[1]


class FakeQueueServer:
    """A tiny memcache queue server: `set` appends to a FIFO, `get q[/opts]`
    pops (options are ignored; an empty queue answers END at once).  The
    key of every get is recorded in `gets`, options included.

    Faults are keyed by the 1-based number of the set across the server:
    drop (answer STORED, keep nothing), dup (keep it twice), swap (hold it
    and keep it after the next set), corrupt (flip one byte of the body),
    close_after (hang up after that many sets)."""

    def __init__(self, drop=(), dup=(), swap=(), corrupt=(), close_after=None):
        self.drop, self.dup, self.swap, self.corrupt = set(drop), set(dup), set(swap), set(corrupt)
        self.close_after = close_after
        self.lock = threading.Lock()
        self.queues = collections.defaultdict(collections.deque)
        self.nset = 0
        self.gets = []
        self.held = None
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.closing = False
        self.threads = []
        self.conns = []
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self.threads.append(t)

    def _accept(self):
        self.sock.settimeout(0.1)  # so close() is noticed promptly
        while not self.closing:
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            c.settimeout(None)
            self.conns.append(c)
            t = threading.Thread(target=self._serve, args=(c,), daemon=True)
            t.start()
            self.threads.append(t)

    def _store(self, q, data):
        self.nset += 1
        k = self.nset
        if k in self.corrupt:
            data = data[:-1] + bytes([data[-1] ^ 0x01])
        if k in self.drop:
            return
        if k in self.swap:
            self.held = (q, data)
            return
        self.queues[q].append(data)
        if k in self.dup:
            self.queues[q].append(data)
        if self.held is not None:
            hq, hd = self.held
            self.queues[hq].append(hd)
            self.held = None

    def _serve(self, c):
        f = c.makefile("rb")
        try:
            while True:
                line = f.readline()
                if not line:
                    return
                parts = line.split()
                if not parts:
                    c.sendall(b"ERROR\r\n")
                elif parts[0] == b"set" and len(parts) >= 5:
                    data = f.read(int(parts[4]) + 2)[:-2]
                    with self.lock:
                        self._store(parts[1], data)
                        hangup = self.close_after is not None and self.nset >= self.close_after
                    if hangup:
                        c.shutdown(socket.SHUT_RDWR)
                        return
                    c.sendall(b"STORED\r\n")
                elif parts[0] in (b"get", b"gets") and len(parts) >= 2:
                    q = parts[1].split(b"/")[0]
                    with self.lock:
                        self.gets.append(parts[1].decode())
                        data = self.queues[q].popleft() if self.queues[q] else None
                    if data is None:
                        c.sendall(b"END\r\n")
                    else:
                        c.sendall(b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (q, len(data), data))
                else:
                    c.sendall(b"ERROR\r\n")
        except OSError:
            return
        finally:
            f.close()
            c.close()

    def close(self):
        self.closing = True
        self.sock.close()
        for c in self.conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self.threads:
            t.join(5)


@pytest.fixture
def fake_server():
    servers = []

    def make(**faults):
        s = FakeQueueServer(**faults)
        servers.append(s)
        return s
    yield make
    for s in servers:
        s.close()
