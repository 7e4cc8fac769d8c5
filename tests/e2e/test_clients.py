"""
Real memcache clients against ternd, used the way applications use them:
pymemcache, python-memcache (Debian's python3-pymemcache, python3-memcache)
and libmemcached-tools' memccp/memccat.  Every body is compared byte for byte.
"""
import os
import random
import shutil
import subprocess

import pytest

from conftest import SMALL_SEGMENTS, TIMEOUT, wait_until

SIZES = [0, 1, 2, 100, 1000, 4095, 4096, 65536, 100 * 1024]


def body(n, seed):
    """A binary-unsafe-looking body: CRLFs, NULs, 'END' and 'VALUE' inside."""
    rnd = random.Random(seed)
    pool = [b"\r\n", b"\x00", b"END\r\n", b"VALUE q 0 5\r\n", b"\n", b"\r", bytes([rnd.randrange(256)])]
    out = bytearray()
    while len(out) < n:
        out += rnd.choice(pool) if rnd.random() < 0.2 else os.urandom(rnd.randrange(1, 64))
    return bytes(out[:n])


# ---------------------------------------------------------------- pymemcache

class FlagsSerde:
    """Passes bytes through and keeps the flags, so tests see both."""

    def serialize(self, key, value):
        data, flags = value
        return data, flags

    def deserialize(self, key, value, flags):
        return value, flags


@pytest.fixture
def pymc(server):
    from pymemcache.client.base import Client
    c = Client(("127.0.0.1", server.port), serde=FlagsSerde(), default_noreply=False,
               connect_timeout=TIMEOUT, timeout=TIMEOUT)
    yield c
    c.close()


def test_pymemcache_set_get_byte_exact(pymc):
    items = [(body(n, n), (n * 7919) % (2 ** 32)) for n in SIZES]
    for data, flags in items:
        assert pymc.set("pyq", (data, flags)) is True
    for data, flags in items:
        got = pymc.get("pyq")
        assert got is not None, "queue empty early"
        assert got[1] == flags
        assert got[0] == data, "body of %d bytes differs" % len(data)
    assert pymc.get("pyq") is None


def test_pymemcache_get_many_and_admin(pymc):
    assert pymc.set("pa", (b"A", 1)) is True
    assert pymc.set("pb", (b"B", 2)) is True
    assert pymc.get_many(["pa", "pb", "pc"]) == {"pa": (b"A", 1), "pb": (b"B", 2)}
    assert pymc.get_many(["pa", "pb"]) == {}
    assert pymc.version().split()[0].count(b".") == 2
    st = pymc.stats()
    assert int(st[b"cmd_set"]) >= 2
    assert pymc.set("pa", (b"x", 0)) is True
    assert pymc.delete("pa") is True
    assert pymc.get("pa") is None
    assert pymc.set("pb", (b"y", 0)) is True
    assert pymc.flush_all() is True
    assert pymc.get("pb") is None


def test_pymemcache_noreply_then_get(server):
    from pymemcache.client.base import Client
    c = Client(("127.0.0.1", server.port), connect_timeout=TIMEOUT, timeout=TIMEOUT)  # default noreply
    data = body(5000, 1)
    for i in range(50):
        c.set("nrq", data[i:])
    for i in range(50):
        assert c.get("nrq") == data[i:]
    assert c.get("nrq") is None
    c.close()


# ---------------------------------------------------------------- python-memcache

@pytest.fixture
def pmc(server):
    import memcache
    c = memcache.Client(["127.0.0.1:%d" % server.port], socket_timeout=TIMEOUT)
    yield c
    c.disconnect_all()


def test_python_memcache_set_get_byte_exact(pmc):
    datas = [body(n, 1000 + n) for n in SIZES]
    for d in datas:
        assert pmc.set("pmq", d)
    for d in datas:
        got = pmc.get("pmq")
        assert got == d, "body of %d bytes differs" % len(d)
    assert pmc.get("pmq") is None


def test_python_memcache_types_and_flags(pmc, server):
    # python-memcache encodes types in flags (text 16, int 2, pickle 1) and
    # sends "set k 16 0 N \r\n" with a trailing space.
    values = ["héllo wörld", 42, {"a": [1, 2, 3], "b": "x"}, b"raw\r\nbytes", ""]
    for v in values:
        assert pmc.set("typed", v)
    for v in values:
        assert pmc.get("typed") == v
    assert pmc.get("typed") is None
    assert pmc.set("fl", "text")
    c = server.conn()
    c.send(b"get fl\r\n")
    assert c.read_values() == [("fl", 16, b"text")]


def test_python_memcache_kestrel_options(pmc, server):
    # Kestrel users pass the options in the key; the VALUE line echoes the
    # key as sent, options included.
    assert pmc.get("kq/t=100") is None
    assert pmc.set("kq", b"one")
    assert pmc.set("kq", b"two")
    assert pmc.get("kq/open") == b"one"
    assert pmc.get("kq/close/open") == b"two"
    assert pmc.get("kq/abort") is None
    assert pmc.get("kq/peek") == b"two"
    assert pmc.get("kq/t=1000") == b"two"
    assert pmc.get("kq") is None


def test_python_memcache_waits_for_set_from_another_client(pmc, server):
    import threading
    import memcache
    got = []
    t = threading.Thread(target=lambda: got.append(pmc.get("wq/t=60000")))
    t.start()
    o = server.conn()
    wait_until(lambda: o.stats().get("queue_wq_waiters") == "1", what="waiter")
    other = memcache.Client(["127.0.0.1:%d" % server.port], socket_timeout=TIMEOUT)
    assert other.set("wq", b"payload")
    t.join(TIMEOUT)
    assert not t.is_alive()
    assert got == [b"payload"]
    other.disconnect_all()


# ---------------------------------------------------------------- libmemcached-tools

def _tool(name):
    for n in (name, name.replace("memc", "mem")):
        p = shutil.which(n)
        if p:
            return p
    pytest.skip("%s not installed (libmemcached-tools)" % name)


def _run(args, **kw):
    p = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=TIMEOUT * 2, **kw)
    return p.returncode, p.stdout, p.stderr


def test_memccp_memccat_byte_exact(server, tmp_path):
    cp, cat = _tool("memccp"), _tool("memccat")
    srv = "--servers=127.0.0.1:%d" % server.port
    files = {}
    for name, n in [("small.bin", 10), ("page.bin", 4096), ("big.bin", 100 * 1024)]:
        p = tmp_path / name
        p.write_bytes(body(n, n + 7))
        files[name] = p
    rc, out, err = _run([cp, srv] + [str(p) for p in files.values()])
    assert rc == 0, err
    outdir = tmp_path / "out"
    outdir.mkdir()
    for name, p in files.items():
        dst = outdir / name
        rc, out, err = _run([cat, srv, "--file=%s" % dst, name])
        assert rc == 0, err
        assert dst.read_bytes() == p.read_bytes(), "%s differs after memccp/memccat" % name
    # Dequeued: the queues are empty now.
    c = server.conn()
    c.send(b"get small.bin page.bin big.bin\r\n")
    assert c.read_values() == []


def test_memccp_is_a_queue(server, tmp_path):
    # The same file copied twice is two messages, read back in order.
    cp, cat = _tool("memccp"), _tool("memccat")
    srv = "--servers=127.0.0.1:%d" % server.port
    p = tmp_path / "job"
    p.write_bytes(b"first\x00\r\n")
    assert _run([cp, srv, "--flags=7", str(p)])[0] == 0
    p.write_bytes(b"second")
    assert _run([cp, srv, str(p)])[0] == 0
    c = server.conn()
    c.send(b"get job/peek\r\n")
    assert c.read_values() == [("job/peek", 7, b"first\x00\r\n")]
    rc, out, err = _run([cat, srv, "--file=%s" % (tmp_path / "o1"), "job"])
    assert rc == 0, err
    assert (tmp_path / "o1").read_bytes() == b"first\x00\r\n"
    rc, out, err = _run([cat, srv, "job"])
    assert rc == 0, err
    # memccat prints the value then a newline on stdout.
    assert out == b"second\n"
    c.send(b"get job\r\n")
    assert c.read_values() == []


def test_pymemcache_get_many_hundred_queues(ternd):
    # get_many sends every key in one `get` line, as memcached allows.
    from pymemcache.client.base import Client
    s = ternd(conf=SMALL_SEGMENTS)
    pymc = Client(("127.0.0.1", s.port), serde=FlagsSerde(), default_noreply=False,
                  connect_timeout=TIMEOUT, timeout=TIMEOUT)
    keys = ["gm%03d" % i for i in range(100)]
    for i, k in enumerate(keys[::3]):
        assert pymc.set(k, (b"v%d" % i, i)) is True
    got = pymc.get_many(keys)
    assert got == {k: (b"v%d" % i, i) for i, k in enumerate(keys[::3])}
    assert pymc.get_many(keys) == {}
