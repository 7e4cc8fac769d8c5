"""
Restarts of ternd on the same data directory after: items expired while it
ran (SIGKILL), `delete <queue>`, and many segments' worth of traffic through
small, reused segments (also with an old item held open, which compaction must
move forward instead of keeping its segment).
"""
import os
import time

import pytest

from jutil import (body, check_bodies, drain, get_many, killed, qstat, set_many,
                   settle_journal, stopped, tern_journal)

SIZE = 700


def size_of(i):
    return SIZE


# ---- expired items -------------------------------------------------------------

@pytest.mark.parametrize("mem", ["in_memory", "read_behind"])
def test_restart_with_expired_items(ternd, mem):
    """Items set with exptime 1 among items without expiry; ternd is SIGKILLed
    after they expired (no get touched them) and restarted: the expired ones
    are never returned, each is counted in expired_items as the head passes
    it, and the live ones come back in order.  read_behind: max_memory_size
    is so small that most of them are read back from disk."""
    conf = "[journal]\nsegment_size = 256K\n"
    if mem == "read_behind":
        conf += "[queues]\nmax_memory_size = 8K\n"
    n = 400
    # expiring: runs of various lengths, including the very first and last items
    expiring = {i for i in range(n) if (i * 37) % 100 < 45 or i == 0 or i == n - 1}
    srv = ternd(conf=conf)
    with srv.conn() as c:
        r = set_many(c, "exq", [body(i, SIZE) for i in range(n)],
                     exptime=lambda i: 1 if i in expiring else 0)
        assert r == [b"STORED"] * n
        st = c.stats()
        assert qstat(st, "exq", "items") == n
        assert qstat(st, "exq", "expired_items") == 0
    # exptime 1 = one second after the set, at millisecond resolution
    time.sleep(2.2)
    killed(srv)

    srv2 = ternd(conf=conf, datadir=srv.datadir)
    with srv2.conn() as c:
        got = drain(c, "exq", n)
        st = c.stats()
    check_bodies(got, [i for i in range(n) if i not in expiring], size_of)
    assert qstat(st, "exq", "expired_items") == len(expiring), \
        "expired_items = %d, expected %d" % (qstat(st, "exq", "expired_items"), len(expiring))
    assert qstat(st, "exq", "items") == 0

    # and they stay gone: one more restart finds an empty queue
    stopped(srv2)
    srv3 = ternd(conf=conf, datadir=srv.datadir)
    with srv3.conn() as c:
        assert c.get("exq") == []
        assert qstat(c.stats(), "exq", "items") == 0


# ---- delete ---------------------------------------------------------------------

@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_restart_after_delete(ternd, how):
    conf = "[journal]\nsegment_size = 64K\n"
    srv = ternd(conf=conf)
    qdir = os.path.join(srv.datadir, "queues")
    with srv.conn() as c:
        assert set_many(c, "doomed", [body(i, SIZE) for i in range(300)]) == [b"STORED"] * 300
        assert set_many(c, "kept", [body(i, SIZE) for i in range(50)]) == [b"STORED"] * 50
        assert c.get1("doomed") == body(0, SIZE)
        assert os.path.isdir(os.path.join(qdir, "doomed"))
        assert c.call("delete doomed") == b"DELETED\r\n"
        st = c.stats()
        assert not [k for k in st if k.startswith("queue_doomed_")], \
            "queue still in stats after delete: %s" % [k for k in st if "doomed" in k]
        assert not os.path.exists(os.path.join(qdir, "doomed")), \
            "queue directory still there after delete: %s" % os.listdir(os.path.join(qdir, "doomed"))
    if how == "sigterm":
        stopped(srv)
    else:
        killed(srv)
    rc, out, err = tern_journal("stat", srv.datadir)
    assert rc == 0, out + err
    assert "doomed" not in out, out
    assert "kept" in out, out

    srv2 = ternd(conf=conf, datadir=srv.datadir)
    assert not os.path.exists(os.path.join(qdir, "doomed"))
    with srv2.conn() as c:
        st = c.stats()
        assert not [k for k in st if k.startswith("queue_doomed_")], st
        assert qstat(st, "kept", "items") == 50
        # a later set recreates it, empty but for the new item
        assert c.set("doomed", b"reborn") == b"STORED\r\n"
        assert c.get1("doomed") == b"reborn"
        assert c.get1("doomed") is None
        assert c.set("doomed", b"again") == b"STORED\r\n"
        check_bodies(drain(c, "kept", 50), range(50), size_of)
    stopped(srv2)
    srv3 = ternd(conf=conf, datadir=srv.datadir)
    with srv3.conn() as c:
        assert c.get1("doomed") == b"again"
        assert c.get1("doomed") is None
        assert c.get1("kept") is None


# ---- segment reuse ----------------------------------------------------------------

REUSE_CONF = """
[journal]
segment_size = 64K
checkpoint_interval_ms = 50
"""
MAX_SEGMENTS = 8   # bounded: head segment, a few in between, current, spare


def segments_of(datadir, q):
    rc, out, err = tern_journal("stat", datadir, q)
    assert rc == 0, out + err
    # "queue q: segments 5 (+1 spare), disk ..."
    line = [l for l in out.splitlines() if l.startswith("queue %s:" % q)]
    assert line, out
    n = int(line[0].split("segments")[1].split()[0].strip(","))
    return n, line[0]


def churn(c, q, start, count, backlog):
    """Pushes items start.. start+count through q keeping `backlog` items
    queued; returns the next sequence number.  Each get must return the
    item set `backlog` earlier."""
    seq = start
    step = 200
    while seq < start + count:
        k = min(step, start + count - seq)
        r = set_many(c, q, [body(i, SIZE) for i in range(seq, seq + k)])
        assert r == [b"STORED"] * k
        got = get_many(c, q, k)
        exp = list(range(seq - backlog, seq - backlog + k))
        check_bodies(got, exp, size_of)
        seq += k
    return seq


@pytest.mark.parametrize("pin", [False, True], ids=["plain", "pinned_open"])
def test_restart_after_segment_reuse(ternd, pin):
    """~16 MiB through 64 KiB segments with a 100-item backlog: the journal
    holds a bounded number of segments (while running, after SIGKILL and after
    a clean stop), and the restarted queue has exactly the remaining items.
    pinned_open: one early item stays open (/open) on a connection for the
    whole run; compaction must move it forward rather than keep its segment
    and everything after it."""
    q = "reuse"
    backlog = 100
    srv = ternd(conf=REUSE_CONF)
    with srv.conn() as c, srv.conn() as holder:
        assert set_many(c, q, [body(i, SIZE) for i in range(backlog)]) == [b"STORED"] * backlog
        seq = backlog
        if pin:
            v = holder.get(q + "/open")
            assert [x[2] for x in v] == [body(0, SIZE)]
            # keep the backlog at 100 queued items
            assert set_many(c, q, [body(backlog, SIZE)]) == [b"STORED"]
            seq += 1
        total = 16 << 20
        per_round = total // SIZE // 4
        for rnd in range(4):
            seq = churn(c, q, seq, per_round, backlog)
            # Right after a burst many consumed segments may still exist
            # (they are freed by checkpoints); once the queue is idle the
            # next checkpoints must bring it down to a few segments.
            history = []
            deadline = time.monotonic() + 5
            while True:
                st = c.stats()
                history.append(qstat(st, q, "journal_segments"))
                if history[-1] <= MAX_SEGMENTS or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert history[-1] <= MAX_SEGMENTS, \
                "round %d: queue_%s_journal_segments still %d (> %d) after 5 s idle, with " \
                "a %d-item backlog, %d MiB through 64 KiB segments, checkpoint every 50 ms " \
                "(samples: %s...%s)" % (rnd, q, history[-1], MAX_SEGMENTS, backlog,
                                       (seq * SIZE) >> 20, history[:5], history[-3:])
        assert qstat(st, q, "items") == backlog
        remaining = list(range(seq - backlog, seq))
        if pin:
            remaining = [0] + remaining  # the open item comes back first after a crash
        # Gets never wait for their REMOVE records, and segments are freed
        # by the writer after the checkpoint that made them dead commits:
        # the files follow the server's in-memory view a moment later.  Let
        # the idle server catch up (bounded) before the crash.
        # (Counted from the directory: tern-journal stat on a live server
        # races with the segments being unlinked.)
        qdir = os.path.join(srv.datadir, "queues", q)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and sum(
                1 for f in os.listdir(qdir) if f.endswith(".seg") and f[:-4].isdigit()) > MAX_SEGMENTS:
            time.sleep(0.05)
        # SIGKILL can cut a record that is being written (the kernel stops
        # a write between two pages for a fatal signal), which the stat
        # below reports as damage, and the queue's own records (REMOVEs
        # nobody waits for, relocations at checkpoints) may still be going
        # out.  Kill once the journal's record count has held still for a
        # few checkpoint intervals.
        settle_journal(c, q, 0.05)
        killed(srv)
    n, line = segments_of(srv.datadir, q)
    assert n <= MAX_SEGMENTS, line

    srv2 = ternd(conf=REUSE_CONF, datadir=srv.datadir)
    with srv2.conn() as c:
        assert qstat(c.stats(), q, "items") == len(remaining)
        if pin:
            check_bodies(get_many(c, q, 1), [0], size_of)
        # a bit more traffic after the restart, then a clean stop
        seq2 = churn(c, q, seq, 2000, backlog)
        remaining = list(range(seq2 - backlog, seq2))
    stopped(srv2)
    n, line = segments_of(srv.datadir, q)
    assert n <= MAX_SEGMENTS, line
    srv3 = ternd(conf=REUSE_CONF, datadir=srv.datadir)
    with srv3.conn() as c:
        check_bodies(drain(c, q, 2 * backlog), remaining, size_of)
