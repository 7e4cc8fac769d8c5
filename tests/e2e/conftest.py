"""
End-to-end test fixtures for ternd.

`ternd` (fixture) is a factory: ternd(conf=TEXT, args=[...]) writes TEXT to a
config file in the test's tmp dir, starts `$TERND [-c conf] -p 0 -d DATA
[args]`, waits (bounded) for the log line `TIME info ternd listening on
ADDR:PORT` on stderr, and returns a Server.  stderr is drained by a thread for the whole life of the
process, so the pipe never fills and tests can assert on it.  On teardown the
server is stopped by PID (SIGTERM, bounded wait, SIGKILL fallback) and the
test fails if ternd left a sanitizer report or exited nonzero when it was not
told to expect that.

`Conn` is a raw-socket client that asserts exact bytes: send(), expect(),
readline(), read_values() (a whole VALUE...END response), stats().
`rss_kib(pid)` reads a process's resident memory from /proc.

Environment: TERND = path of the binary (default build/ternd, relative to the
repository root); TERN_E2E_TIMEOUT = seconds to wait for any single reply
(default 20; generous so an ASan build passes).  No test asserts on speed.
"""
import contextlib
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
TIMEOUT = float(os.environ.get("TERN_E2E_TIMEOUT", "20"))
STARTUP_TIMEOUT = max(20.0, TIMEOUT)
# The log line "TIME info ternd listening on ADDR:PORT" (lib/log.h).
LISTEN_RE = re.compile(rb"^\S+ info ternd listening on (\S+):(\d+)\s*$")
SANITIZER_RE = re.compile(
    rb"ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|"
    rb"UndefinedBehaviorSanitizer|ThreadSanitizer|SUMMARY: \w+Sanitizer")


def ternd_path():
    p = os.environ.get("TERND", "build/ternd")
    if not os.path.isabs(p):
        p = os.path.join(REPO, p)
    return p


def rss_kib(pid):
    """VmRSS of process pid, in KiB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for pid %d" % pid)


def wait_until(pred, timeout=TIMEOUT, interval=0.02, what="condition"):
    """Polls pred() until it returns a true value (returned) or fails the
    test after timeout seconds.  Bounded in time by construction."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            pytest.fail("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


class Server:
    """One running ternd.  port, pid, tmpdir, datadir, conf_path; stderr()
    returns everything it wrote to stderr so far (bytes)."""

    def __init__(self, tmpdir, conf=None, args=(), name="ternd", datadir=None):
        self.binary = ternd_path()
        self.tmpdir = str(tmpdir)
        self.datadir = datadir or os.path.join(self.tmpdir, "data")
        self.conf_path = None
        self.expected_rc = None  # set by expect_exit(); None = must run until teardown
        self.proc = None
        self.port = None
        self.host = None
        self._err = bytearray()
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._reader = None
        # (0700, as ternd makes it: others may not read the messages)
        os.makedirs(self.datadir, mode=0o700, exist_ok=True)
        if conf is not None:
            self.conf_path = os.path.join(self.tmpdir, name + ".conf")
            self.write_conf(conf)
        self.args = list(args)

    def write_conf(self, text):
        """(Re)writes the config file; use before `reload` or SIGHUP."""
        assert self.conf_path is not None, "server was started without a config"
        tmp = self.conf_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.rename(tmp, self.conf_path)

    def command(self):
        cmd = [self.binary]
        if self.conf_path:
            cmd += ["-c", self.conf_path]
        cmd += ["-p", "0", "-d", self.datadir] + self.args
        return cmd

    def _drain(self):
        # Reads stderr until EOF so the server never blocks on a full pipe.
        f = self.proc.stderr
        for line in iter(f.readline, b""):
            with self._lock:
                self._err += line
            m = LISTEN_RE.match(line)
            if m and not self._ready.is_set():
                self.host = m.group(1).decode()
                self.port = int(m.group(2))
                self._ready.set()
        f.close()

    def start(self):
        if not os.path.exists(self.binary):
            pytest.fail("ternd binary not found: %s (set TERND)" % self.binary)
        self.stdout_path = os.path.join(self.tmpdir, "ternd.stdout")
        self._stdout = open(self.stdout_path, "wb")
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                     stdout=self._stdout, stderr=subprocess.PIPE,
                                     cwd=self.tmpdir)
        self.pid = self.proc.pid
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None:
                self._reader.join(5)
                pytest.fail("ternd exited with %s before listening; stderr:\n%s"
                            % (self.proc.returncode, self.stderr().decode(errors="replace")))
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail("ternd did not print its listening line within %.0fs; stderr:\n%s"
                            % (STARTUP_TIMEOUT, self.stderr().decode(errors="replace")))
        return self

    def stderr(self):
        with self._lock:
            return bytes(self._err)

    def alive(self):
        return self.proc.poll() is None

    def conn(self, timeout=TIMEOUT):
        return Conn(self.port, timeout=timeout)

    def signal(self, sig):
        os.kill(self.pid, sig)

    def expect_exit(self, rc=0):
        """Declares that the server will exit by itself with rc (e.g. after
        `shutdown`); teardown then checks the code instead of failing."""
        self.expected_rc = rc

    def wait(self, timeout=TIMEOUT):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        if self.proc and self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self):
        """Stops the server by PID and returns a list of problems (empty = ok)."""
        problems = []
        if self.proc is None:
            return problems
        if self.proc.poll() is None:
            if self.expected_rc is not None:
                # Told it would exit; give it the usual time before signalling.
                self.wait(TIMEOUT)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            rc = self.wait(TIMEOUT)
            if rc is None:
                problems.append("ternd did not exit within %.0fs of SIGTERM (killed)" % TIMEOUT)
                self.kill()
            elif rc != 0:
                problems.append("ternd exited %d after SIGTERM (expected 0)" % rc)
        else:
            rc = self.proc.returncode
            if self.expected_rc is None:
                problems.append("ternd died during the test with exit status %d" % rc)
            elif rc != self.expected_rc:
                problems.append("ternd exited %d, expected %d" % (rc, self.expected_rc))
        self._reader.join(10)
        self._stdout.close()
        err = self.stderr()
        if SANITIZER_RE.search(err):
            problems.append("sanitizer report in ternd's stderr")
        if problems:
            problems.append("stderr:\n" + err.decode(errors="replace")[-20000:])
        return problems


@pytest.fixture
def ternd(tmp_path):
    """Factory: ternd(conf=None, args=(), datadir=None) -> started Server.
    Pass datadir=<an earlier server's datadir> to restart on the same data."""
    servers = []

    def start(conf=None, args=(), name=None, datadir=None):
        name = name or "ternd%d" % len(servers)
        d = tmp_path / name
        d.mkdir()
        s = Server(d, conf=conf, args=args, datadir=datadir)
        servers.append(s)
        return s.start()

    yield start
    problems = []
    for s in servers:
        problems += s.stop()
        # Journals preallocate segments (64 MiB each by default): do not
        # leave gigabytes behind in pytest's retained tmp dirs.
        shutil.rmtree(s.datadir, ignore_errors=True)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


# For tests that create many queues: the default 64 MiB zero-filled first
# segment per queue costs seconds and gigabytes that those tests do not need.
SMALL_SEGMENTS = "[journal]\nsegment_size = 64K\n"


@pytest.fixture
def server(ternd):
    """A ternd with the default configuration."""
    return ternd()


def stop_process(p):
    """Stops a helper process by PID: SIGTERM, a bounded wait, SIGKILL."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


@contextlib.contextmanager
def memcached(args=(), user="nobody"):
    """Debian's memcached on a free loopback port, run as user, with more
    options args: yields the port; stopped by PID."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = subprocess.Popen(["memcached", "-l", "127.0.0.1", "-p", str(port), "-U", "0",
                          "-u", user] + list(args), stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def up():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return p.poll() is not None

    try:
        wait_until(up, what="memcached to listen")
        assert p.poll() is None, "memcached exited with %s" % p.returncode
        yield port
    finally:
        stop_process(p)


def run_ternd(args, timeout=TIMEOUT, cwd=None):
    """Runs ternd to completion (for config errors, --version, -h).
    Returns (rc, stdout, stderr); fails the test if it does not exit."""
    p = subprocess.Popen([ternd_path()] + list(args), stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.kill(p.pid, signal.SIGKILL)
        p.communicate(timeout=10)
        pytest.fail("ternd %s did not exit within %.0fs" % (" ".join(args), timeout))
    return p.returncode, out, err


def read_to_eof(s, timeout=TIMEOUT):
    """What s receives until the server closes it (fails on timeout)."""
    s.settimeout(timeout)
    got = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return got
            got += chunk
    except ConnectionResetError:
        return got
    except socket.timeout:
        raise AssertionError("not closed within %.0fs; got %r" % (timeout, got))


class Closed(AssertionError):
    """The peer closed the connection while we expected data."""


class Conn:
    """A raw memcache-protocol connection that asserts on exact bytes."""

    def __init__(self, port, host="127.0.0.1", timeout=TIMEOUT):
        self.timeout = timeout
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.eof = False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        if isinstance(data, str):
            data = data.encode()
        self.sock.sendall(data)

    def _fill(self, deadline):
        """Reads more bytes into buf; raises Closed at EOF, AssertionError at deadline."""
        if self.eof:
            raise Closed("connection closed by server; unread: %r" % bytes(self.buf[:200]))
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("timed out; received so far: %r" % bytes(self.buf[:400]))
        self.sock.settimeout(left)
        try:
            chunk = self.sock.recv(1 << 20)
        except socket.timeout:
            raise AssertionError("timed out after %.1fs; received so far: %r"
                                 % (self.timeout, bytes(self.buf[:400])))
        except (ConnectionResetError, BrokenPipeError):
            chunk = b""
        if not chunk:
            self.eof = True
            raise Closed("connection closed by server; unread: %r" % bytes(self.buf[:200]))
        self.buf += chunk

    def _deadline(self, timeout):
        return time.monotonic() + (self.timeout if timeout is None else timeout)

    def read_exact(self, n, timeout=None):
        deadline = self._deadline(timeout)
        while len(self.buf) < n:
            self._fill(deadline)
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def expect(self, expected, timeout=None):
        """Reads exactly len(expected) bytes and asserts they equal expected.
        Fails early (with the offending line) on the first differing byte."""
        if isinstance(expected, str):
            expected = expected.encode()
        deadline = self._deadline(timeout)
        while len(self.buf) < len(expected):
            n = len(self.buf)
            if self.buf[:n] != expected[:n]:
                break
            try:
                self._fill(deadline)
            except AssertionError as e:
                raise AssertionError("expected %r, got %r (%s)"
                                     % (_short(expected), _short(self.buf), e)) from None
        got = bytes(self.buf[:len(expected)])
        if got != expected:
            # Give a partial line a moment to complete, for a readable message.
            try:
                while b"\n" not in self.buf[_first_diff(got, expected):]:
                    self._fill(time.monotonic() + 0.5)
            except AssertionError:
                pass
            i = _first_diff(bytes(self.buf), expected)
            raise AssertionError("reply differs at byte %d: expected %r, got %r"
                                 % (i, _short(expected[i:]), _short(self.buf[i:])))
        del self.buf[:len(expected)]

    def readline(self, timeout=None):
        """Returns one line including its \\r\\n."""
        deadline = self._deadline(timeout)
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                line = bytes(self.buf[:i + 1])
                del self.buf[:i + 1]
                return line
            self._fill(deadline)

    def call(self, line, timeout=None):
        """Sends one request line (\\r\\n added) and returns the reply line."""
        self.send(line.encode() + b"\r\n" if isinstance(line, str) else line + b"\r\n")
        return self.readline(timeout)

    def read_values(self, timeout=None):
        """Reads a whole get response; returns [(key, flags, data), ...].
        Fails on anything that is not VALUE blocks followed by END."""
        out = []
        deadline = self._deadline(timeout)
        while True:
            line = self.readline(max(0.0, deadline - time.monotonic()))
            if line == b"END\r\n":
                return out
            m = re.match(rb"^VALUE (\S+) (\d+) (\d+)\r\n$", line)
            if not m:
                raise AssertionError("expected VALUE or END, got %r" % _short(line))
            n = int(m.group(3))
            body = self.read_exact(n + 2, max(0.0, deadline - time.monotonic()))
            assert body[n:] == b"\r\n", "value not followed by CRLF: %r" % body[n:]
            out.append((m.group(1).decode(), int(m.group(2)), body[:n]))

    def set(self, key, data, flags=0, exptime=0, timeout=None):
        """Sends a set and returns the reply line."""
        if isinstance(data, str):
            data = data.encode()
        self.send(b"set %s %d %d %d\r\n" % (key.encode(), flags, exptime, len(data)) + data + b"\r\n")
        return self.readline(timeout)

    def get(self, key, timeout=None):
        """Sends `get key` (options allowed) and returns read_values()."""
        self.send(b"get " + key.encode() + b"\r\n")
        return self.read_values(timeout)

    def get1(self, key, timeout=None):
        """Returns the body of the single item a get of key returns, or None."""
        v = self.get(key, timeout)
        assert len(v) <= 1, v
        return v[0][2] if v else None

    def stats(self, timeout=None):
        self.send(b"stats\r\n")
        out = {}
        deadline = self._deadline(timeout)
        while True:
            line = self.readline(max(0.0, deadline - time.monotonic()))
            if line == b"END\r\n":
                return out
            m = re.match(rb"^STAT (\S+) (.*)\r\n$", line)
            assert m, "bad stats line %r" % line
            out[m.group(1).decode()] = m.group(2).decode()

    def assert_closed(self, timeout=None):
        """Asserts the server closes the connection with no (further) reply."""
        deadline = self._deadline(timeout)
        try:
            while True:
                self._fill(deadline)
                raise AssertionError("expected the connection to close, got %r"
                                     % _short(self.buf))
        except Closed:
            assert not self.buf, "unexpected data before close: %r" % _short(self.buf)

    def assert_silent(self, wait=0.3):
        """Asserts nothing arrives within wait seconds (used to check that a
        reply is held back, never as a speed assertion)."""
        if self.buf:
            raise AssertionError("unexpected data: %r" % _short(self.buf))
        self.sock.settimeout(wait)
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            return
        finally:
            self.sock.settimeout(self.timeout)
        raise AssertionError("unexpected data: %r" % _short(chunk) if chunk else
                             "connection closed unexpectedly")


def _first_diff(a, b):
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _short(b, n=300):
    b = bytes(b)
    return b if len(b) <= n else b[:n] + b"...(%d bytes)" % len(b)
