"""
Power cuts aimed at what the journal once got wrong: each test puts ternd's
data directory on pcfs (README.md), cuts the power at the moment that
mattered, starts ternd on what is left and checks what the mode promises
(docs/SYNC-MODES.md).  Each failed before its fix.

Environment: TERND, TERN_JOURNAL, TERN_PCFS (defaults build/...).
"""
import os
import shutil
import time

import pytest

import pcut
from pcfs import fuse_missing
from pcut import drain_one, set_items

pytestmark = pytest.mark.skipif(fuse_missing() is not None, reason=str(fuse_missing()))


@pytest.mark.parametrize("mode", ["always", "odsync", "interval", "none"])
def test_a_segment_reused_at_the_cut_does_not_stop_the_start(scenario, mode):
    """A dead segment renamed into place as the next one, its directory
    synced, and the power cut before its new header was durable: the file
    held the old segment's header, and ternd refused to start ("has another
    segment's number in its header")."""
    sc = scenario(mode, rule="linux")
    c = sc.up()
    body = b"r" * 3000
    armed = False
    stored = 0
    deadline = time.monotonic() + 60
    while sc.fs.status().state != "cut" and time.monotonic() < deadline:
        for _ in range(20):
            try:
                c.send(b"set q 0 0 %d\r\n%s\r\nget q\r\n" % (len(body), body))
                if c.line() == b"STORED":
                    stored += 1
                c.value()
            except (OSError, ConnectionError):
                break
        if not armed and any(op == "rename" and path.endswith("/spare.seg")
                             for op, _, _, path in sc.fs.status().recent):
            # a dead segment became the spare: cut right after the
            # directory sync of the next segment's rename
            sc.fs.ctl("arm after fsyncdir 1 /queues/q")
            armed = True
    assert armed, "no segment was reused"
    st = sc.cut()
    assert st.recent[-1][0] == "fsyncdir"
    srv, _ = sc.reboot()
    assert drain_one(srv, b"q") in ([], [body])


@pytest.mark.parametrize("rule", ["posix", "linux"])
def test_queues_made_since_the_start_survive_a_cut(scenario, rule):
    """The data directory's queues/ and catalog/, and each queue's
    directory, were made without syncing the directory above them: under
    POSIX's rule a cut lost every queue made since the start (and here,
    where the data directory is new, the catalog too)."""
    sc = scenario("always", rule=rule)
    c = sc.up()
    set_items(c, b"first", [b"a%d" % i for i in range(10)])
    sc.cut()
    srv, _ = sc.reboot()
    srv.stop()
    c = sc.up()
    set_items(c, b"second", [b"b%d" % i for i in range(10)])
    sc.cut()
    srv, out = sc.reboot()
    got = pcut.drain(srv.port)
    assert got.get("first") == [b"a%d" % i for i in range(10)]
    assert got.get("second") == [b"b%d" % i for i in range(10)]


def test_a_queue_whose_directory_is_missing_is_refused(scenario):
    """Its checkpoint counts items and its directory is gone (a cut before
    queues' directories were synced left exactly this): ternd served it
    empty and wrote a checkpoint saying so, after which verify found
    nothing wrong.  It must refuse, as for an unreadable segment, and
    leave the evidence alone."""
    sc = scenario("always", rule="linux")
    c = sc.up()
    set_items(c, b"q", [b"x%d" % i for i in range(5)])
    set_items(c, b"other", [b"y"])
    time.sleep(0.5)  # a checkpoint counting them
    sc.cut()
    shutil.rmtree(os.path.join(sc.image, "queues", "q"))
    rc, before = sc.verify()
    assert rc == 2 and "q: DAMAGE: its directory is missing" in before, before
    assert sc.restart() is None
    log = sc.srv.log_since()
    assert "queue q: its directory" in log and "counts 5 items" in log, log
    assert "cannot recover queue q" in log, log
    assert not os.path.exists(os.path.join(sc.image, "queues", "q"))
    assert sc.verify() == (rc, before)


@pytest.mark.parametrize("mode", ["always", "interval", "none"])
def test_a_torn_tail_reads_as_a_prefix(scenario, mode):
    """The unsynced tail written back in part and out of order (later pages
    on disk, earlier ones not): verify called it damage (exit 2) and
    recovery read on past it, keeping later messages without the earlier
    ones.  The rule is one: recovery and verify stop at a torn write, what
    survives of a queue is a prefix, and verify calls it benign."""
    torn = 0
    for seed in range(1, 9):
        sc = scenario(mode, rule="linux", tear=0.5, seed=seed)
        c = sc.up()
        first = [b"s%03d-" % i + b"." * 900 for i in range(20)]
        set_items(c, b"q", first)
        time.sleep(0.4)  # synced: by its group, its interval, or (none) nothing
        # (each a page or more: however the writer groups them, what is
        # written and not synced at the cut spans several pages)
        later = [b"u%03d-" % i + b"." * 4200 for i in range(16)]
        if mode == "always":
            # in flight: written, and cut before their group's sync
            sc.fs.ctl("arm before fsync 1 /queues/q/")
            c.send(b"".join(b"set q 0 0 %d\r\n%s\r\n" % (len(b), b) for b in later))
            assert sc.fs.wait_cut(10)
        else:
            set_items(c, b"q", later)
        sc.cut()
        srv, out = sc.reboot()
        torn += "torn write" in out
        got = drain_one(srv, b"q")
        srv.stop()
        sc.srv = None
        sent = first + later
        assert got == sent[:len(got)], "not a prefix: %r" % [g[:5] for g in got]
        if mode in ("always", "interval"):
            assert got[:len(first)] == first
    assert torn > 0, "no cut tore a write"


@pytest.mark.parametrize("rule", ["posix", "linux"])
@pytest.mark.parametrize("mode", ["always", "odsync", "interval", "none"])
def test_an_answered_delete_stays_done(scenario, mode, rule):
    """delete removed the queue's files and then its catalog entry, without
    syncing queues/: after a cut the directory could be back, unknown to
    the catalog, and the next set to the name adopted it with every
    deleted item."""
    sc = scenario(mode, rule=rule)
    c = sc.up()
    set_items(c, b"q", [b"old%d" % i for i in range(50)])
    set_items(c, b"keep", [b"k"])
    time.sleep(0.4)  # everything synced, whatever the mode
    c.send(b"delete q\r\n")
    assert c.line() == b"DELETED"
    sc.cut()
    srv, out = sc.reboot()
    assert "not in the catalog" not in out
    c = pcut.Conn(srv.port)
    set_items(c, b"q", [b"new"])
    assert drain_one(srv, b"q") == [b"new"]


@pytest.mark.parametrize("mode", ["always", "odsync"])
def test_an_answered_flush_stays_done(scenario, mode):
    """flush was answered before its record was durable: with no set after
    it on the queue, a cut brought every flushed item back."""
    sc = scenario(mode)
    c = sc.up()
    set_items(c, b"q", [b"f%d" % i for i in range(30)])
    set_items(c, b"other", [b"o"])
    c.send(b"flush q\r\n")
    assert c.line() == b"END"
    sc.cut()
    srv, _ = sc.reboot()
    got = pcut.drain(srv.port)
    assert got.get("q", []) == []
    assert got.get("other") == [b"o"]


def test_an_answered_flush_survives_in_interval_after_its_window(scenario):
    sc = scenario("interval")
    c = sc.up()
    set_items(c, b"q", [b"f%d" % i for i in range(30)])
    c.send(b"flush q\r\n")
    assert c.line() == b"END"
    time.sleep(3 * pcut.INTERVAL_MS / 1000.0)
    sc.cut()
    srv, _ = sc.reboot()
    assert drain_one(srv, b"q") == []


@pytest.mark.parametrize("mode", ["always", "odsync", "interval"])
def test_a_confirm_is_durable_within_the_checkpoint_interval(scenario, mode):
    """A /close is answered before its record is written (gets never wait
    for the disk); the record is durable with the queue's next sync: in
    always and odsync at the latest with the next checkpoint, in interval
    with the next interval sync.  After that a cut does not bring the item
    back."""
    sc = scenario(mode)
    c = sc.up()
    set_items(c, b"q", [b"c%d" % i for i in range(5)])
    c.send(b"get q/open\r\n")
    assert c.value() == b"c0"
    c.send(b"get q/close\r\n")
    assert c.value() is None
    time.sleep(0.6)  # checkpoint_interval_ms 200, sync_interval_ms 100
    sc.cut()
    srv, _ = sc.reboot()
    assert drain_one(srv, b"q") == [b"c%d" % i for i in range(1, 5)]

