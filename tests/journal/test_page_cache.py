"""
page_cache = drop: a backlog larger than the queue's memory leaves little of
its journal in the page cache, every item still comes back byte-exact and in
order (read back from the disk), and a dead segment is not reused as the
spare (its pages are gone: each first write into one would read it back).
With page_cache = keep the same backlog stays cached, which shows that the
measurement can tell the two apart.

Residency is read with fincore(1) (util-linux): the bytes of each segment
file in the page cache.
"""
import glob
import os
import subprocess
import time

from jutil import body, check_bodies, drain, get_many, qstat, set_many, stats

Q = "cached"
N = 10000
SIZE = 4096  # 40 MiB of records: ten 4 MiB segments
CONF = """
[journal]
page_cache = %s
segment_size = 4M
sync_interval_ms = 20
[queues]
max_memory_size = 1M
"""


def segments(srv):
    """The queue's segment files, oldest first (not the spare)."""
    return sorted(glob.glob(os.path.join(srv.datadir, "queues", Q, "[0-9]*.seg")))


def resident(paths):
    """Bytes of the files in the page cache, from fincore(1)."""
    if not paths:
        return 0
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES"]
                         + paths, check=True, stdout=subprocess.PIPE, timeout=30).stdout
    return sum(int(x) for x in out.split())


def left_resident(srv):
    """Resident bytes of every segment but the newest (the one being
    written), and their total size."""
    left = segments(srv)[:-1]
    return resident(left), sum(os.path.getsize(p) for p in left)


def fill(srv):
    with srv.conn() as c:
        assert set_many(c, Q, [body(i, SIZE) for i in range(N)]) == [b"STORED"] * N
    assert qstat(stats(srv), Q, "journal_behind_items") > 0


def test_drop_keeps_little_of_a_backlog_cached(ternd):
    srv = ternd(conf=CONF % "drop")
    fill(srv)
    assert len(segments(srv)) >= 8, segments(srv)
    # the syncer drops what it has synced: a left segment once it is synced
    deadline = time.monotonic() + 10
    res, size = left_resident(srv)
    while res > 1 << 20 and time.monotonic() < deadline:
        time.sleep(0.1)
        res, size = left_resident(srv)
    assert res <= 1 << 20, ("page_cache = drop: %d of the %d bytes of the left segments "
                            "still in the page cache 10 s after the sets" % (res, size))
    inodes = {os.stat(p).st_ino for p in segments(srv)}
    with srv.conn() as c:
        got = get_many(c, Q, N // 2)
        # read-behind drops what it has read: left cached are at most the
        # segment it reads (4 MiB) and what the kernel read ahead of it (up
        # to the disk's read_ahead_kb: 8 MiB on the test machines), where
        # keep would hold the whole backlog (40 MiB)
        mid = resident(segments(srv)[:-1])
        assert mid <= 13 << 20, "%d bytes cached after reading half the backlog back" % mid
        got += drain(c, Q, N)
        assert get_many(c, Q, 1) == [None]
    check_bodies(got, range(N), lambda i: SIZE)

    # the dead segments are unlinked, not reused: the spare is a new file
    spare = os.path.join(srv.datadir, "queues", Q, "spare.seg")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(segments(srv)) > 1:
        time.sleep(0.1)
    assert len(segments(srv)) == 1, segments(srv)
    if os.path.exists(spare):
        assert os.stat(spare).st_ino not in inodes, "a dead segment became the spare"


def test_keep_leaves_the_backlog_cached(ternd):
    srv = ternd(conf=CONF % "keep")
    fill(srv)
    time.sleep(0.5)  # (several sync intervals)
    res, size = left_resident(srv)
    assert size >= 28 << 20, size
    assert res >= size // 2, ("page_cache = keep: only %d of %d bytes of the left segments "
                              "in the page cache" % (res, size))
    with srv.conn() as c:
        got = drain(c, Q, N)
    check_bodies(got, range(N), lambda i: SIZE)

