"""
Disk errors through pcfs (README.md, `fail`): EIO on a write, EIO on an
fdatasync, ENOSPC.  No set is answered STORED whose record is not durable
in the modes that promise it (checked by cutting the power after the error
and starting ternd on what is left, on a healthy disk); the failed queue
refuses further writes and the others go on (docs/JOURNAL.md, "Failure
policy"); nothing acknowledged before the error is lost; after a restart
the queue works again.
"""
import time

import pytest

import pcut
from pcfs import fuse_missing
from pcut import drain_one

pytestmark = pytest.mark.skipif(fuse_missing() is not None, reason=str(fuse_missing()))

EIO, ENOSPC = 5, 28


def try_sets(c, queue, bodies):
    """Sets one at a time; the replies (first words)."""
    out = []
    for b in bodies:
        c.send(b"set %s 0 0 %d\r\n%s\r\n" % (queue, len(b), b))
        out.append(c.line().split(b" ")[0])
    return out


def stored(bodies, replies):
    return [b for b, r in zip(bodies, replies) if r == b"STORED"]


@pytest.mark.parametrize("mode", ["always", "odsync", "interval", "none"])
@pytest.mark.parametrize("op", ["write", "fsync"])
def test_eio_fails_the_queue_and_keeps_what_was_acknowledged(scenario, mode, op):
    sc = scenario(mode)
    c = sc.up()
    before = [b"b%03d" % i for i in range(20)]
    assert try_sets(c, b"q", before) == [b"STORED"] * 20
    assert try_sets(c, b"other", [b"o1"]) == [b"STORED"]
    time.sleep(0.4)  # synced, in every mode but none
    # every write (or sync) of q's segments fails from now on
    sc.fs.ctl("fail %s 0 -1 %d /queues/q/" % (op, EIO))
    during = [b"d%03d" % i for i in range(10)]
    replies = try_sets(c, b"q", during)
    if op == "write" or pcut.MODES.index(mode) < 2:
        # the failed write, or the failed sync a reply waits for: no STORED
        assert replies == [b"SERVER_ERROR"] * 10, replies
    elif mode == "interval":
        # the sync is the syncer's, after the replies: the queue fails
        # once it runs
        time.sleep(0.4)
        assert try_sets(c, b"q", [b"late"]) == [b"SERVER_ERROR"]
    # the other queue is not affected
    assert try_sets(c, b"other", [b"o2"]) == [b"STORED"]
    if op == "write" or mode != "none":  # (none syncs no segment here)
        assert sc.fs.status().failed > 0
    sc.cut()
    srv, out = sc.reboot()
    got = pcut.drain(srv.port)
    if mode in ("always", "odsync"):
        # nothing answered STORED is missing, and nothing else came back
        assert got.get("q") == before + stored(during, replies), got.get("q")
        assert got.get("other") == [b"o1", b"o2"]
    elif mode == "interval":
        assert got.get("q", [])[:20] == before
    # the queue works again after the restart, on a healthy disk
    c = pcut.Conn(srv.port)
    assert try_sets(c, b"q", [b"after"]) == [b"STORED"]


@pytest.mark.parametrize("mode", ["always", "interval"])
def test_full_disk_refuses_sets_keeps_reads_and_recovers(scenario, mode):
    """No room for the next segment (every fallocate and every write to a
    spare fails with ENOSPC): the current segment keeps working until it is
    full, then sets are answered SERVER_ERROR while gets and confirms go
    on; once there is room again, sets work without a restart."""
    sc = scenario(mode, extra="[queues]\nmax_memory_size = 64M\n")
    c = sc.up()
    bodies = [b"%05d-" % i + b"." * 1000 for i in range(400)]
    replies = try_sets(c, b"q", bodies[:5])  # (the queue has its first segment)
    sc.fs.ctl("fail fallocate 0 -1 %d" % ENOSPC)
    replies += try_sets(c, b"q", bodies[5:])
    ok = stored(bodies, replies)
    assert b"SERVER_ERROR" in replies, "the disk never looked full"
    # (the rest of the first segment, 16 KiB, takes a few sets after the
    # arming; a spare ready before it takes more)
    assert len(ok) > 5, "the segment in use stopped taking sets"
    assert ok == bodies[:len(ok)], "a set failed, and a later one was stored"
    # reads and confirms go on while the disk is full
    c.send(b"get q\r\n")
    assert c.value() == ok[0]
    c.send(b"get q/open\r\n")
    assert c.value() == ok[1]
    c.send(b"get q/close\r\n")
    assert c.value() is None
    # room again: the writer retries every second
    sc.fs.ctl("disarm")
    deadline = time.monotonic() + 10
    while try_sets(c, b"q", [b"again"]) != [b"STORED"]:
        assert time.monotonic() < deadline, "sets still refused once there was room"
        time.sleep(0.2)
    time.sleep(0.4)
    sc.cut()
    srv, out = sc.reboot()
    got = drain_one(srv, b"q")
    assert got[:len(ok) - 2] == ok[2:], "an acknowledged set lost on the full disk"
    assert got[-1] == b"again"


@pytest.mark.parametrize("target", ["fan", "al"])
def test_a_copy_that_cannot_be_written_fails_the_set(scenario, target):
    """A set to a fanout queue or an alias is answered once every copy is
    written as its queue's mode asks: it waited for the highest of its
    tickets only, so a copy whose write failed (a child's or a
    destination's journal) could still be answered STORED."""
    sc = scenario("always")
    c = sc.up()
    c.send(b"get fan+b/peek\r\n")
    assert c.value() is None
    assert try_sets(c, target.encode(), [b"first"]) == [b"STORED"]
    # (the copy with the lower ticket: al_a is the first destination)
    failing = "/queues/fan+b/" if target == "fan" else "/queues/al_a/"
    sc.fs.ctl("fail write 0 -1 %d %s" % (EIO, failing))
    replies = try_sets(c, target.encode(), [b"x%d" % i for i in range(5)])
    if target == "al":
        # a destination that fails to write fails the set
        assert replies == [b"SERVER_ERROR"] * 5, replies
    else:
        # the set whose copy failed is not STORED; later sets skip the
        # failed child, as they skip a full one (fanout delivers where it
        # can), and are stored in the others
        assert replies == [b"SERVER_ERROR"] + [b"STORED"] * 4, replies
