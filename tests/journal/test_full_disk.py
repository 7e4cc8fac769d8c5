"""
Full disk: ternd's data directory on a 16 MiB tmpfs (needs root and a
working `mount -t tmpfs`; skipped with the reason otherwise).  Sets fill it
until they are answered SERVER_ERROR; ternd must not crash, every item
answered STORED must stay readable in order, gets must keep working while the
disk is full (also after a restart on the full disk), and sets must work
again once space returns: a filler file placed on the tmpfs beforehand is
removed, or the queue is drained.  A queue whose first segment cannot be
made on the full disk answers SERVER_ERROR, delivers nothing it did not
store, and works as soon as there is room again (no restart).  The journal retries its preallocation
every second or so, hence the bounded retry loops (no speed is asserted).
"""
import os
import subprocess
import time

import pytest

from jutil import (body, check_bodies, drain, get_many, killed, qstat, set_many,
                   stats, stopped)

SIZE = 4000
MAX_SETS = 8000   # 32 MB: twice the filesystem, so it must fill
CONF = """
[journal]
segment_size = 1M
[queues]
max_memory_size = 2M
"""
Q = "full"
RETRY_S = int(os.environ.get("TERN_FULL_RETRY_S", "20"))


def size_of(i):
    return SIZE


@pytest.fixture
def tmpfs(tmp_path):
    """A 16 MiB tmpfs mounted on a fresh directory; unmounted (by path) at
    teardown, after the ternd fixture (requested later) has stopped its
    servers."""
    if os.geteuid() != 0:
        pytest.skip("full-disk test needs root to mount a size-limited tmpfs")
    d = tmp_path / "tmpfs"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(d)],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    if r.returncode != 0:
        pytest.skip("cannot mount a 16 MiB tmpfs (%s): %s"
                    % (r.returncode, r.stderr.decode(errors="replace").strip()))
    try:
        yield str(d)
    finally:
        r = subprocess.run(["umount", str(d)], capture_output=True, timeout=30)
        if r.returncode != 0:
            subprocess.run(["umount", "-l", str(d)], capture_output=True, timeout=30)


def put_filler(mnt, mib):
    path = os.path.join(mnt, "filler")
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(b"\xa5" * (1 << 20))
    return path


def top_up(mnt):
    """Takes the last free pages of the file system (the journal's sets stop
    when a segment cannot be had, a few pages before it is full).  The
    journal retries its next segment about once a second, and a retry can
    give pages back after this took the last ones (those of a failed
    fallocate, which it holds until the call returns, or the end of a partly
    prepared segment cut to a smaller size), so the pages are taken again
    until three passes 0.4 s apart find none."""
    path = os.path.join(mnt, "topup")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def take():
        n = 0
        try:
            for _ in range(1 << 16):
                os.write(fd, b"\x5a" * 4096)
                n += 1
        except OSError:
            pass
        return n

    try:
        take()
        empty = 0
        for _ in range(20):
            time.sleep(0.4)
            empty = empty + 1 if take() == 0 else 0
            if empty == 3:
                break
    finally:
        os.close(fd)
    return path


def fill_until_full(srv):
    """Sets until SERVER_ERROR; returns the seqs answered STORED."""
    with srv.conn() as c:
        replies = set_many(c, Q, [body(i, SIZE) for i in range(MAX_SETS)],
                           window=32, stop_on_error=True)
    stored = [i for i, r in enumerate(replies) if r == b"STORED"]
    bad = sorted({r for r in replies if r != b"STORED"})
    assert bad, "all %d sets of %d bytes were STORED on a 16 MiB tmpfs" % (MAX_SETS, SIZE)
    assert all(r.startswith(b"SERVER_ERROR") for r in bad), \
        "a set on a full disk was answered %r (expected SERVER_ERROR)" % bad
    assert stored, "no set was STORED before the disk was full"
    assert srv.alive()
    return stored, len(replies)


def still_full(srv, seq, tries=3):
    """A few more sets are refused with SERVER_ERROR (nothing was freed)."""
    with srv.conn() as c:
        for k in range(tries):
            r = c.set(Q, body(seq + k, SIZE))
            assert r.startswith(b"SERVER_ERROR"), \
                "set on a still-full disk answered %r (expected SERVER_ERROR)" % r


def set_when_space(srv, seq, what, q=Q):
    """Retries a set (bounded, ~RETRY_S s) until it is STORED; returns it."""
    deadline = time.monotonic() + RETRY_S
    replies = []
    with srv.conn() as c:
        while True:
            r = c.set(q, body(seq, SIZE))
            replies.append(r)
            if r == b"STORED\r\n":
                return
            assert r.startswith(b"SERVER_ERROR"), "set answered %r" % r
            if time.monotonic() > deadline:
                pytest.fail("sets still fail %d s after %s (%d tries, last %r)"
                            % (RETRY_S, what, len(replies), r))
            time.sleep(0.2)


def test_full_disk_sets_fail_gets_work_then_recover(tmpfs, ternd):
    filler = put_filler(tmpfs, 3)
    srv = ternd(conf=CONF, datadir=os.path.join(tmpfs, "data"))
    stored, sent = fill_until_full(srv)
    still_full(srv, sent)
    nxt = sent + 3

    # gets work on the full disk: the first half, in order
    half = len(stored) // 2
    with srv.conn() as c:
        got = get_many(c, Q, half)
        assert qstat(c.stats(), Q, "items") == len(stored) - half
    check_bodies(got, stored[:half], size_of)
    assert srv.alive()

    # space returns: sets work again (after a bounded number of retries)
    os.unlink(filler)
    set_when_space(srv, nxt, "3 MiB were freed")
    new = [nxt]
    with srv.conn() as c:
        r = set_many(c, Q, [body(i, SIZE) for i in range(nxt + 1, nxt + 50)])
        assert r == [b"STORED"] * 49, sorted(set(r))
    new += list(range(nxt + 1, nxt + 50))
    with srv.conn() as c:
        rest = drain(c, Q, MAX_SETS + 100)
    check_bodies(rest, stored[half:] + new, size_of)
    stopped(srv)


def test_restart_on_full_disk(tmpfs, ternd):
    """SIGKILL on a full disk, restart on it: everything STORED is there and
    gets work; draining the queue frees its segments and sets work again
    (the filler stays)."""
    put_filler(tmpfs, 3)
    data = os.path.join(tmpfs, "data")
    srv = ternd(conf=CONF, datadir=data)
    stored, sent = fill_until_full(srv)
    killed(srv)

    srv2 = ternd(conf=CONF, datadir=data)
    assert qstat(stats(srv2), Q, "items") == len(stored)
    half = len(stored) // 2
    with srv2.conn() as c:
        got = get_many(c, Q, half)
    check_bodies(got, stored[:half], size_of)
    with srv2.conn() as c:
        rest = drain(c, Q, MAX_SETS)
    check_bodies(rest, stored[half:], size_of)
    assert srv2.alive()

    # the queue is empty: its segments can be reused or freed, sets work again
    set_when_space(srv2, sent, "the queue was drained")
    with srv2.conn() as c:
        r = set_many(c, Q, [body(i, SIZE) for i in range(sent + 1, sent + 50)])
        assert r == [b"STORED"] * 49, sorted(set(r))
    stopped(srv2)
    srv3 = ternd(conf=CONF, datadir=data)
    with srv3.conn() as c:
        check_bodies(drain(c, Q, 100), range(sent, sent + 50), size_of)


def test_new_queue_on_full_disk_then_room(tmpfs, ternd):
    """Two queues get their first set on the full disk: "early" was created
    (by a waiting get) before the disk filled, "late" is created by that set.  Both
    answer SERVER_ERROR, hold nothing, and store again once the filler is
    removed; a restart finds exactly what they stored."""
    filler = put_filler(tmpfs, 3)
    data = os.path.join(tmpfs, "data")
    srv = ternd(conf=CONF, datadir=data)
    with srv.conn() as c:
        assert c.get1("early/t=1") is None   # a plain get creates nothing
    assert "queue_early_items" in stats(srv)
    stored, sent = fill_until_full(srv)
    topup = top_up(tmpfs)
    nxt = sent
    with srv.conn() as c:
        for q in ("early", "late"):
            for k in range(3):
                r = c.set(q, body(nxt, SIZE))
                nxt += 1
                assert r.startswith(b"SERVER_ERROR"), \
                    "set to %s on a full disk answered %r" % (q, r)
            # nothing it did not store
            assert c.get1(q) is None, "%s delivered an item it answered SERVER_ERROR for" % q
    assert srv.alive()

    os.unlink(filler)
    os.unlink(topup)
    kept = {}
    for q in ("early", "late"):
        set_when_space(srv, nxt, "3 MiB were freed", q=q)
        first = nxt
        nxt += 1
        with srv.conn() as c:
            r = set_many(c, q, [body(i, SIZE) for i in range(nxt, nxt + 20)])
            assert r == [b"STORED"] * 20, sorted(set(r))
        kept[q] = list(range(first, first + 1)) + list(range(nxt, nxt + 20))
        nxt += 20
    stopped(srv)

    srv2 = ternd(conf=CONF, datadir=data)
    with srv2.conn() as c:
        for q in ("early", "late"):
            check_bodies(drain(c, q, 100), kept[q], size_of)
        check_bodies(drain(c, Q, MAX_SETS), stored, size_of)
