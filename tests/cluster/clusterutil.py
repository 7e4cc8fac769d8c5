"""
Helpers for the cluster tests (tests/cluster): several ternd behind
twemproxy (Debian's nutcracker), and tern-load's own ketama hashing.
Reuses tests/e2e/conftest.py under another module name (as tests/journal
does): the `ternd` factory fixture, Server, Conn, wait_until.  Adds:

- Nutcracker: writes its YAML configuration into the test's tmp dir, starts
  `nutcracker -c FILE -s STATS -a 127.0.0.1` on free loopback ports (the
  proxy cannot take port 0: a port found free is tried, and another one if
  nutcracker could not bind it), waits (bounded) until it accepts, and is
  stopped by PID;
- Cluster: N ternd started on port 0 and one nutcracker in front of them;
- tern_load(args): runs $TERN_LOAD (default build/tern-load) with a bounded
  timeout and returns (exit status, stdout, stderr, JSON or None);
- routes(servers, keys, hash): the server tern-load --show-routes gives each
  key;
- where_queues(servers, names): which backend holds items of which queue,
  from each backend's own stats.

Environment: TERND, TERN_LOAD, NUTCRACKER (default: nutcracker on PATH),
TERN_E2E_TIMEOUT.  No test asserts on speed; every wait is bounded.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
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
# Journals of many small queues: 64 KiB first segments instead of 64 MiB.
SMALL_SEGMENTS = e2e.SMALL_SEGMENTS
RUN_TIMEOUT = float(os.environ.get("TERN_CLUSTER_RUN_TIMEOUT", "120"))


def tool(env, default):
    p = os.environ.get(env, default)
    return p if os.path.isabs(p) else os.path.join(REPO, p)


def nutcracker_path():
    p = os.environ.get("NUTCRACKER") or shutil.which("nutcracker") or "/usr/sbin/nutcracker"
    if not os.path.exists(p):
        pytest.fail("nutcracker not found (Debian package nutcracker; make test installs it)")
    return p


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def addr(server):
    return "127.0.0.1:%d" % server.port


class Nutcracker:
    """One nutcracker process with one pool.  servers: [(Server, weight,
    name or None)]; pool: extra pool settings (hash, hash_tag, timeout...)."""

    def __init__(self, tmpdir, servers, **pool):
        self.tmpdir = str(tmpdir)
        self.servers = servers
        self.pool = dict(pool)
        self.proc = None
        self.port = None
        self.stats_port = None
        self.conf_path = os.path.join(self.tmpdir, "nutcracker.yml")
        self.log_path = os.path.join(self.tmpdir, "nutcracker.log")

    def config(self):
        lines = ["tern:", "  listen: 127.0.0.1:%d" % self.port]
        pool = {"hash": "md5", "distribution": "ketama", "hash_tag": '"{}"',
                "timeout": 5000, "auto_eject_hosts": "false"}
        pool.update(self.pool)
        for k, v in pool.items():
            if v is not None:
                lines.append("  %s: %s" % (k, v))
        lines.append("  servers:")
        for s, weight, name in self.servers:
            lines.append("    - %s:%d%s" % (addr(s), weight, " " + name if name else ""))
        return "\n".join(lines) + "\n"

    def start(self, tries=5):
        for _ in range(tries):
            self.port, self.stats_port = free_port(), free_port()
            with open(self.conf_path, "w") as f:
                f.write(self.config())
            self.log = open(self.log_path, "ab")
            self.proc = subprocess.Popen(
                [nutcracker_path(), "-c", self.conf_path, "-s", str(self.stats_port),
                 "-a", "127.0.0.1", "-i", "1000"],
                stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, cwd=self.tmpdir)
            deadline = time.monotonic() + TIMEOUT
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    return self
                except OSError:
                    time.sleep(0.05)
            self.stop()
        pytest.fail("nutcracker did not start; log:\n" + self.log_text()[-4000:])

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def conn(self, timeout=TIMEOUT):
        return Conn(self.port, timeout=timeout)

    def stats(self):
        """nutcracker's own statistics (JSON on its stats port)."""
        with socket.create_connection(("127.0.0.1", self.stats_port), timeout=TIMEOUT) as s:
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        return json.loads(data)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if self.proc is not None:
            self.log.close()


class Cluster:
    """ternds (e2e Servers) and the nutcracker in front of them."""

    def __init__(self, servers, proxy, weights, names, start_ternd, conf):
        self.servers = servers
        self.proxy = proxy
        self.weights = weights
        self.names = names
        self._start_ternd = start_ternd
        self._conf = conf

    def restart(self, i):
        """Starts server i again, on its port and data directory, after it
        stopped or was killed (tell the old Server what exit to expect).
        The proxy's list is unchanged, so it finds it at the same address."""
        old = self.servers[i]
        self.servers[i] = self._start_ternd(conf=self._conf, args=["-p", str(old.port)],
                                            datadir=old.datadir)
        return self.servers[i]

    def server_list(self):
        """The servers as tern-load's --servers spells them (the proxy's
        order, weights and names)."""
        out = []
        for s, w, n in zip(self.servers, self.weights, self.names):
            out.append("%s%s%s" % (addr(s), ":%d" % w if w != 1 else "", " " + n if n else ""))
        return ",".join(out)

    def conn(self, timeout=TIMEOUT):
        return self.proxy.conn(timeout)

    def index(self, address):
        return [addr(s) for s in self.servers].index(address)


@pytest.fixture
def cluster(ternd, tmp_path):
    """Factory: cluster(n=3, weights=None, names=None, conf=SMALL_SEGMENTS,
    **pool) starts n ternd and a nutcracker over them (pool settings as
    keyword arguments: hash="fnv1a_64", timeout=500, ...)."""
    proxies = []

    def start(n=3, weights=None, names=None, conf=SMALL_SEGMENTS, **pool):
        weights = weights or [1] * n
        names = names or [None] * n
        servers = [ternd(conf=conf) for _ in range(n)]
        d = tmp_path / ("nutcracker%d" % len(proxies))
        d.mkdir()
        p = Nutcracker(d, list(zip(servers, weights, names)), **pool)
        proxies.append(p)
        p.start()
        return Cluster(servers, p, weights, names, ternd, conf)

    yield start
    # The proxy goes first, so that the servers see their clients leave.
    for p in proxies:
        p.stop()


def tern_load(args, timeout=RUN_TIMEOUT, stdin=None):
    """Runs tern-load; returns (rc, stdout, stderr, parsed JSON or None)."""
    cmd = [tool("TERN_LOAD", "build/tern-load")] + [str(a) for a in args]
    try:
        r = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail("tern-load %s did not finish within %.0fs" % (" ".join(cmd[1:]), timeout))
    js = None
    if "--json" in cmd:
        try:
            js = json.loads(r.stdout)
        except ValueError:
            pass
    return r.returncode, r.stdout, r.stderr, js


def routes(server_list, keys, hash="md5"):
    """{key: "host:port"} as tern-load --show-routes computes it."""
    rc, out, err, _ = tern_load(["--servers", server_list, "--hash", hash, "--show-routes"],
                                stdin="".join(k + "\n" for k in keys))
    assert rc == 0, err
    got = dict(line.rsplit(" ", 1) for line in out.splitlines())
    assert sorted(got) == sorted(keys)
    return got


def where_queues(servers, names):
    """{name: [indexes of the servers whose stats show items of it]}."""
    found = {n: [] for n in names}
    for i, s in enumerate(servers):
        with s.conn() as c:
            st = c.stats()
        for n in names:
            if int(st.get("queue_%s_items" % n, "0")) > 0:
                found[n].append(i)
    return found
