"""
libmemcached's command-line tools (Debian's libmemcached-tools): memccp
enqueues a file's bytes under the file's name, memccat dequeues (options go
in the key), memcstat and memcping talk to the server; text protocol and
binary protocol (--binary; memcping has no binary option).
"""
import shutil
import subprocess
import time

import pytest

from clientmatrix import (BINARY_BODIES, TIMEOUT, assert_queue, qstats, raw_peek,
                          wait_until)

MODES = {"text": [], "binary": ["--binary"]}


def tool(name):
    p = shutil.which(name)
    assert p, "%s not installed (Debian package libmemcached-tools)" % name
    return p


def run(args, timeout=TIMEOUT):
    p = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


class Tools:
    def __init__(self, server, tmp_path, mode):
        self.srv = ["--servers=127.0.0.1:%d" % server.port] + MODES[mode]
        self.dir = tmp_path
        self.n = 0

    def cp(self, q, data):
        """Enqueues data on q with memccp (the file is named q)."""
        d = self.dir / ("cp%d" % self.n)
        self.n += 1
        d.mkdir()
        (d / q).write_bytes(data)
        rc, out, err = run([tool("memccp")] + self.srv + [str(d / q)])
        assert rc == 0, err
        return True

    def cat(self, key):
        """Dequeues one item with memccat --file: its bytes, or None on a miss."""
        out = self.dir / ("cat%d" % self.n)
        self.n += 1
        rc, _, err = run([tool("memccat")] + self.srv + ["--file=%s" % out, key])
        if rc != 0:
            assert not out.exists() or out.read_bytes() == b"", err
            return None
        return out.read_bytes()

    def cat_many(self, keys):
        """memccat with several keys: one connection, one get per key in
        order; returns stdout, each value found followed by a newline.  Its
        exit status is 1 when any key was a miss (a /close is one), so
        stderr being empty is what says nothing failed."""
        rc, out, err = run([tool("memccat")] + self.srv + list(keys))
        assert err == b"" and rc in (0, 1), (rc, err)
        return out

    def cat_cmd(self, key):
        return [tool("memccat")] + self.srv + [key]


@pytest.mark.parametrize("mode", ["text", "binary"])
def test_libmemcached_tools(server, tmp_path, mode):
    t = Tools(server, tmp_path, mode)
    raw = server.conn()
    pre = "lm%s_" % mode[0]

    # FIFO, byte for byte; memccp writes flags 0.
    q = pre + "fifo"
    for b in BINARY_BODIES:
        t.cp(q, b)
    assert raw_peek(raw, q) == (0, BINARY_BODIES[0])
    for i, b in enumerate(BINARY_BODIES):
        assert t.cat(q) == b, "item %d (%d bytes) differs" % (i, len(b))
    assert t.cat(q) is None
    assert_queue(raw, q, total=len(BINARY_BODIES))

    # /peek.
    q = pre + "peek"
    t.cp(q, b"a")
    t.cp(q, b"b")
    assert t.cat(q + "/peek") == b"a"
    assert t.cat(q) == b"a"
    assert t.cat(q + "/peek") == b"b"
    assert t.cat(q) == b"b"
    assert_queue(raw, q, total=2)

    # /open + /close in one memccat run (one connection): confirmed.  /open
    # alone: memccat exits holding the item, which goes back to the head.
    q = pre + "open"
    for v in (b"x", b"y", b"z"):
        t.cp(q, v)
    assert t.cat_many([q + "/open", q + "/close", q + "/open", q + "/abort"]) == b"x\ny\n"
    assert_queue(raw, q, items=2, total=3)
    assert t.cat(q + "/open") == b"y"
    wait_until(lambda: qstats(raw, q)["open_transactions"] == 0, what="the open item to return")
    assert_queue(raw, q, items=2, total=3)
    assert t.cat_many([q + "/open", q + "/close/open", q + "/close"]) == b"y\nz\n"
    assert_queue(raw, q, items=0, total=3)

    # /t=: a waiting memccat is woken by a set from another connection.
    q = pre + "wait"
    assert t.cat(q + "/t=20") is None
    p = subprocess.Popen(t.cat_cmd(q + "/t=4000"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: qstats(raw, q).get("waiters") == 1, what="memccat to wait")
        assert raw.set(q, b"woken") == b"STORED\r\n"
        out, err = p.communicate(timeout=TIMEOUT)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    assert (p.returncode, out) == (0, b"woken\n"), err
    assert_queue(raw, q, total=1)

    # memcstat reads the stats (it checks the version first).
    rc, out, err = run([tool("memcstat")] + t.srv)
    assert rc == 0, err
    assert b"queue_%s_total_items: 1" % q.encode() in out, out
    rc, out, err = run([tool("memcstat"), "--server-version"] + t.srv)
    assert rc == 0, err
    assert b"127.0.0.1:%d 1." % server.port in out + err, (out, err)  # printed on stderr
    raw.close()


def test_memcping(server):
    # memcping has no binary option: it pings with the text `version`.
    rc, out, err = run([tool("memcping"), "--servers=127.0.0.1:%d" % server.port])
    assert rc == 0, err


def test_memccat_timeout(server, tmp_path):
    # libmemcached waits 5 s for a reply (its poll timeout; memccat has no
    # option for it): a longer /t= wait ends as "A TIMEOUT OCCURRED" and
    # memccat exits.  A message set at once goes to the abandoned wait,
    # whose peer is gone (the connection resets), so it returns to the queue.
    t = Tools(server, tmp_path, "text")
    raw = server.conn()
    t0 = time.monotonic()
    rc, out, err = run(t.cat_cmd("lm_limit/t=7000"))
    assert time.monotonic() - t0 < 7.0
    assert rc != 0 and b"TIMEOUT" in err, (rc, out, err)
    assert raw.set("lm_limit", b"after") == b"STORED\r\n"
    wait_until(lambda: qstats(raw, "lm_limit")["items"] == 1, what="the message back in the queue")
    assert t.cat("lm_limit") == b"after"
    assert_queue(raw, "lm_limit", total=1)
