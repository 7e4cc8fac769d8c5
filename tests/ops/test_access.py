"""
Access control as an attacker would try it (docs/OPERATIONS.md, "Access
and threats"): the modes of the files ternd creates whatever the umask.
"""
import os
import stat

from opsutil import Conn, wait_until  # noqa: F401


def started_with_umask(ternd, mask, **kw):
    """A ternd started with umask mask (restored here at once)."""
    old = os.umask(mask)
    try:
        return ternd(**kw)
    finally:
        os.umask(old)


def modes(top):
    """{path relative to top: permission bits} of top and everything in it."""
    out = {".": stat.S_IMODE(os.lstat(top).st_mode)}
    for root, dirs, files in os.walk(top):
        for n in dirs + files:
            p = os.path.join(root, n)
            out[os.path.relpath(p, top)] = stat.S_IMODE(os.lstat(p).st_mode)
    return out


def test_files_private_whatever_the_umask(ternd, tmp_path):
    """Segments, spares, catalog, lock and status files are 0600 and the
    directories 0700 under umask 0; a data directory others may enter is
    reported at start."""
    data = str(tmp_path / "fresh")
    os.mkdir(data, 0o700)
    os.chmod(data, 0o700)
    srv = started_with_umask(ternd, 0, datadir=data,
                             conf="[journal]\nsegment_size = 64K\n")
    with srv.conn() as c:
        assert c.set("orders", b"card 4111") == b"STORED\r\n"
        assert c.set("orders", b"card 5500") == b"STORED\r\n"
        assert c.call("status queue orders READONLY") == b"END\r\n"
        assert int(c.stats()["queue_orders_journal_segments"]) >= 1
    found = modes(data)
    for rel in ("lock", "status", "catalog", "catalog/data.mdb", "catalog/lock.mdb",
                "queues", "queues/orders"):
        assert rel in found, (rel, sorted(found))
    assert any(p.startswith("queues/orders/") for p in found), sorted(found)
    bad = {p: "%04o" % m for p, m in found.items()
           if m != (0o700 if os.path.isdir(os.path.join(data, p)) else 0o600)}
    assert bad == {}, bad
    assert b"is open to other users" not in srv.stderr()
    # a directory others may enter (an older one, or made by hand): said at start
    srv.expect_exit(0)
    srv.signal(15)
    assert srv.wait() == 0
    os.chmod(data, 0o755)
    srv = ternd(datadir=data)
    assert ("warn data directory %s is open to other users (mode 0755)" % data).encode() \
        in srv.stderr(), srv.stderr()
