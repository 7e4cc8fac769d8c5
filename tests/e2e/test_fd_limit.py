"""
Out of file descriptors: ternd runs with an open-file limit of 64 and more
clients connect than it can take.  It pauses accepting (as memcached does)
instead of retrying accept() in a loop: its CPU time stays small, its log
holds a handful of records (counting the repeats the log folds), the
clients it accepted keep working, and once they leave the waiting ones and
new ones are served, by itself.

The server is started here rather than with the ternd fixture: a spinning
server writes millions of log records, which this test counts without
keeping.
"""
import os
import re
import resource
import socket
import subprocess
import threading
import time

import pytest

from conftest import (LISTEN_RE, SANITIZER_RE, TIMEOUT, Conn, stop_process, ternd_path,
                      wait_until)
from test_protocol import END, SET, STORED, V

LIMIT = 64
CLIENTS = 90
HOLD_S = 3.0


class Log:
    """Counts stderr's records without keeping them all (the first 50
    lines are kept).  A folded repeat ("last message repeated N times")
    counts N records."""

    def __init__(self, f):
        self.lines = 0
        self.records = 0
        self.head = []
        self.port = None
        self.ready = threading.Event()
        self._f = f
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        for line in iter(self._f.readline, b""):
            self.lines += 1
            m = re.search(rb"last message repeated (\d+) times", line)
            self.records += int(m.group(1)) if m else 1
            if len(self.head) < 50:
                self.head.append(line)
            m = LISTEN_RE.match(line)
            if m and not self.ready.is_set():
                self.port = int(m.group(2))
                self.ready.set()

    def join(self):
        self._t.join(TIMEOUT)

    def text(self):
        return b"".join(self.head).decode(errors="replace")


def cpu_seconds(pid):
    """User + system CPU time of pid so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_out_of_descriptors_pauses_accept(tmp_path):
    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))

    data = tmp_path / "data"
    data.mkdir()
    p = subprocess.Popen([ternd_path(), "-p", "0", "-d", str(data)], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=limit,
                         cwd=str(tmp_path))
    log = Log(p.stderr)
    socks = []
    try:
        assert log.ready.wait(TIMEOUT), "ternd did not start:\n" + log.text()
        port = log.port
        at_start = log.records
        # More clients than descriptors: the kernel completes every
        # handshake; ternd accepts what it can hold.
        # The queue (its journal takes descriptors too) before the rush.
        first = Conn(port)
        socks.append(first.sock)
        first.send(SET("fl", "x"))
        first.expect(STORED)
        for _ in range(CLIENTS - 1):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT))
        first.send(SET("fl", "x") + b"get fl\r\nget fl\r\n")
        first.expect(STORED + V("fl", "x") + END + V("fl", "x") + END)
        c0, t0 = cpu_seconds(p.pid), time.monotonic()
        time.sleep(HOLD_S)
        cpu, wall = cpu_seconds(p.pid) - c0, time.monotonic() - t0
        print("ternd CPU time with accept failing: %.3f s in %.1f s" % (cpu, wall))
        assert p.poll() is None, "ternd died:\n" + log.text()
        # The accepted clients still work meanwhile.
        first.send(b"version\r\n")
        assert first.readline().startswith(b"VERSION ")
        # Generous: a spinning accept loop takes a whole core.
        assert cpu < 0.5 * wall, "ternd used %.2f s of CPU in %.1f s" % (cpu, wall)
        # Everyone leaves; the waiting connections were accepted meanwhile
        # or are now; a new client is served.
        for s in socks:
            s.close()
        socks = []
        c = wait_until(lambda: _try_conn(port), what="a new connection")
        c.send(SET("fl", "y") + b"get fl\r\n")
        c.expect(STORED + V("fl", "y") + END)
        st = c.stats()
        assert int(st["listen_disabled_num"]) >= 1
        assert int(st["total_connections"]) >= CLIENTS
        c.close()
    finally:
        for s in socks:
            s.close()
        stop_process(p)
        log.join()
    text = log.text()
    assert p.returncode == 0, text
    assert not SANITIZER_RE.search(text.encode()), text
    # The whole run, start and stop included: a few records, not one per
    # failed accept (a folded repeat counts as many as it stands for).
    assert "cannot accept connections: Too many open files" in text, text
    assert log.records - at_start <= 8, "%d log records:\n%s" % (log.records, text)


def _try_conn(port):
    try:
        c = Conn(port, timeout=TIMEOUT)
    except OSError:
        return None
    c.send(b"version\r\n")
    try:
        if c.readline().startswith(b"VERSION "):
            return c
    except AssertionError:
        pass
    c.close()
    return None
