"""
max_queue_age: a queue empty and unused for that many seconds is dropped
with its files and its catalog entry (clients name queues freely: every set,
and a get that waits, makes one).  A queue holding an item, one polled by a client, and
one whose [queue NAME] section sets 0 stay; a restart finds only those.
"""
import os
import time

from jutil import TIMEOUT, stats, stopped

CONF = """
[queues]
max_queue_age = 1
[queue keep]
max_queue_age = 0
"""


def queues_in(st):
    sfx = "_open_transactions"      # one line per queue, whatever its name
    return {k[len("queue_"):-len(sfx)] for k in st
            if k.startswith("queue_") and k.endswith(sfx)}


def test_idle_queues_dropped(ternd):
    srv = ternd(conf=CONF)
    qroot = os.path.join(srv.datadir, "queues")
    with srv.conn() as c:
        assert c.set("used", b"gone soon") == b"STORED\r\n"
        assert c.get1("used") == b"gone soon"
        assert c.get1("named/t=1") is None      # made by a waiting get, never written
        assert c.set("full", b"stays") == b"STORED\r\n"
        assert c.get1("keep/t=1") is None       # max_queue_age = 0 in its section
        assert c.get1("polled/t=1") is None
        assert queues_in(c.stats()) >= {"used", "named", "full", "keep", "polled"}
        assert os.path.isdir(os.path.join(qroot, "used"))
        # "polled" is read every 200 ms meanwhile: in use, it stays
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            assert c.get1("polled") is None
            qs = queues_in(c.stats())
            if "used" not in qs and "named" not in qs:
                break
            time.sleep(0.2)
        assert "used" not in qs and "named" not in qs, qs
        assert qs >= {"full", "keep", "polled"}, qs
    for q in ("used", "named"):
        assert not os.path.exists(os.path.join(qroot, q)), os.listdir(qroot)
    assert os.path.isdir(os.path.join(qroot, "full"))
    log = srv.stderr().decode(errors="replace")
    assert "queue used: empty and unused" in log and "dropped" in log, log[-2000:]
    stopped(srv)

    srv2 = ternd(conf=CONF, datadir=srv.datadir)
    qs = queues_in(stats(srv2))
    assert "used" not in qs and "named" not in qs, qs
    assert {"full", "keep"} <= qs, qs
    with srv2.conn() as c:
        assert c.get1("full") == b"stays"
        # named again: made anew, and works
        assert c.set("used", b"again") == b"STORED\r\n"
        assert c.get1("used") == b"again"
