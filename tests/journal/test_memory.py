"""
Bounded memory: a backlog many times max_memory_size stays on disk (read
behind), ternd's RSS stays bounded while it is written and drained, and every
item comes back byte-exact and in order, also across a restart mid-backlog.

The backlog (N x SIZE = 60,000 x 2 KiB = 117 MiB) is well above the RSS bound
(48 MiB above the idle RSS), so a server that kept the backlog in memory
would fail; it is 117x max_memory_size (1 MiB).
"""
import os

import pytest

from jutil import (RssSampler, body, check_bodies, drain, get_many, killed,
                      qstat, rss_kib, set_many, stats, stopped)

N = 60000
SIZE = 2048
MAX_MEM = 1 << 20
RSS_BOUND_KIB = 48 * 1024
CONF = """
[journal]
segment_size = 4M
[queues]
max_memory_size = 1M
"""
Q = "backlog"


def size_of(i):
    return SIZE


@pytest.fixture
def small_quarantine(monkeypatch):
    # ASan keeps freed memory in a 256 MiB quarantine by default, which
    # would count every consumed body into RSS; a small one keeps the
    # measurement about ternd's own memory.  No effect without ASan.
    cur = os.environ.get("ASAN_OPTIONS", "")
    monkeypatch.setenv("ASAN_OPTIONS", (cur + ":" if cur else "") + "quarantine_size_mb=4")


def fill(srv):
    bodies = [body(i, SIZE) for i in range(N)]
    with srv.conn() as c:
        replies = set_many(c, Q, bodies)
    assert replies == [b"STORED"] * N, "not all STORED: %r" % sorted(set(replies))


def check_backlog_stats(srv, expect_items):
    st = stats(srv)
    assert qstat(st, Q, "items") == expect_items
    behind = qstat(st, Q, "journal_behind_items")
    assert behind > 0, "queue_%s_journal_behind_items = %d with a backlog of %d items " \
        "and max_memory_size 1M" % (Q, behind, expect_items)
    # bodies in memory bounded by max_memory_size (plus at most one item)
    mem = qstat(st, Q, "mem_bytes")
    if mem >= 0:
        assert mem <= MAX_MEM + SIZE, "queue_%s_mem_bytes = %d > max_memory_size" % (Q, mem)
    return st


def test_backlog_drains_in_order_with_bounded_rss(ternd, small_quarantine):
    srv = ternd(conf=CONF)
    with srv.conn() as c:  # create the queue, so the baseline includes it
        assert c.get(Q) == []
    base = rss_kib(srv.pid)
    sampler = RssSampler(srv.pid)
    try:
        fill(srv)
        check_backlog_stats(srv, N)
        with srv.conn() as c:
            got = drain(c, Q, N)
            assert get_many(c, Q, 1) == [None]
    finally:
        peak = sampler.stop()
    check_bodies(got, range(N), size_of)
    st = stats(srv)
    assert qstat(st, Q, "items") == 0
    assert qstat(st, Q, "journal_behind_items") == 0
    assert peak - base < RSS_BOUND_KIB, (
        "ternd's RSS grew by %d KiB (idle %d KiB, peak %d KiB, %d samples) with a "
        "%d KiB backlog and max_memory_size 1M; bound %d KiB"
        % (peak - base, base, peak, sampler.samples, N * SIZE // 1024, RSS_BOUND_KIB))


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_backlog_survives_restart_mid_drain(ternd, small_quarantine, how):
    srv = ternd(conf=CONF)
    fill(srv)
    check_backlog_stats(srv, N)
    first = N // 3  # well past what fits in memory: the head is read back from disk
    with srv.conn() as c:
        got = get_many(c, Q, first)
        assert None not in got
        check_bodies(got, range(first), size_of)
        # the removes are journaled without waiting; a round trip after the
        # last get makes sure the server processed them
        c.stats()
    if how == "sigterm":
        stopped(srv)
    else:
        killed(srv)

    srv2 = ternd(conf=CONF, datadir=srv.datadir)
    base = rss_kib(srv2.pid)
    sampler = RssSampler(srv2.pid)
    try:
        if how == "sigterm":
            check_backlog_stats(srv2, N - first)
        with srv2.conn() as c:
            rest = drain(c, Q, N)
    finally:
        peak = sampler.stop()
    if how == "sigterm":
        check_bodies(rest, range(first, N), size_of)
    else:
        # After SIGKILL a get whose REMOVE record had not reached the kernel
        # may be delivered again (at least once), but nothing is lost, the
        # order holds and nothing comes twice after the restart.
        k = int(rest[0][:8]) if rest else N
        assert k <= first, "items %d..%d lost across SIGKILL" % (first, k - 1)
        check_bodies(rest, range(k, N), size_of)
    assert qstat(stats(srv2), Q, "items") == 0
    assert peak - base < RSS_BOUND_KIB, (
        "restarted ternd's RSS grew by %d KiB (start %d, peak %d) draining %d items"
        % (peak - base, base, peak, N - first))


def test_read_behind_reads_little_ahead(ternd):
    """Once the head reaches the part on disk, read-behind keeps at most
    512 KiB (server/queue.c, READ_AHEAD) plus one item ahead of it, however
    large max_memory_size is: items are sent soon after they are read back,
    and a drain does not hold max_memory_size of them for it."""
    size, n, ahead = 4096, 4000, 512 * 1024
    conf = "[journal]\nsegment_size = 4M\n[queues]\nmax_memory_size = 8M\n"
    srv = ternd(conf=conf)
    bodies = [body(i, size) for i in range(n)]
    with srv.conn() as c:
        assert set_many(c, Q, bodies) == [b"STORED"] * n
        st = stats(srv)
        in_mem = qstat(st, Q, "mem_bytes")
        # the first 8 MiB were set into memory, the rest is behind
        assert 8 * 1024 * 1024 - size < in_mem <= 8 * 1024 * 1024, in_mem
        assert qstat(st, Q, "journal_behind_items") > 0
        first = 2500  # past the 2048 items set into memory
        got = get_many(c, Q, first)
        st = stats(srv)
        mem = qstat(st, Q, "mem_bytes")
        assert 0 < mem <= ahead + size, "mem_bytes %d after the head reached the disk" % mem
        assert qstat(st, Q, "journal_behind_items") > 0
        got += drain(c, Q, n)
    check_bodies(got, range(n), lambda i: size)
