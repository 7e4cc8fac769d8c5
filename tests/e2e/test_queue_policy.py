"""
Queue creation is governed (docs/PROTOCOL.md, "Which requests create a
queue").  A set creates its queue; a get creates nothing unless it waits
(/t=, monitor) or names a fanout child; max_queues bounds how many queues
clients can create (SERVER_ERROR past it); with auto_create = no only
queues named by a [queue NAME] or [queue PATTERN] section can be used
(CLIENT_ERROR for the others).  Every refusal on all three protocols, with
the stream kept in step; reload applies new limits; a restart reopens every
queue on disk, past max_queues too.
"""
import signal

from conftest import SMALL_SEGMENTS, TIMEOUT, wait_until
from test_binary import ERR, OP, SETF, VAL, read_frame, req, res
from test_protocol import END, SET, STORED, V, qstat, queue_names

EINVAL, EINTERNAL = 0x04, 0x84
TOO_MANY = "too many queues (max_queues is %d)"
UNKNOWN = "no such queue and auto_create is off"


def restart_prep(s):
    """Stops s cleanly, for a restart on its data directory."""
    s.expect_exit(0)
    s.signal(signal.SIGTERM)
    assert s.wait(TIMEOUT) == 0


def text_err(cls, reason):
    return ("%s %s\r\n" % (cls, reason)).encode()


def test_gets_create_nothing(server):
    c = server.conn()
    c.send(b"get g1\r\nget g2/open\r\nget g3/peek\r\nget g4/close\r\nget g5/abort\r\n"
           b"gets g6 g7\r\nget g8/t=0\r\n")
    c.expect(END * 7)
    c.send(b"mg m1 v\r\nmg m2/open v\r\nmn\r\n")
    c.expect(b"EN\r\nEN\r\nMN\r\n")
    b = server.conn()
    b.send(req("GET", "b1", opaque=1) + req("GETK", "b2", opaque=2) + req("NOOP", opaque=3))
    b.expect(ERR("GET", 0x01, "Not found", 1) + res("GETK", 0x01, key="b2", opaque=2)
             + res("NOOP", opaque=3))
    st = c.stats()
    assert queue_names(st) == set()
    assert st["queues"] == "0" and int(st["get_misses"]) == 12


def test_waits_and_fanout_children_create(server):
    c, o = server.conn(), server.conn()
    c.send(b"get w/t=60000\r\n")
    wait_until(lambda: qstat(o, "w", "waiters") == 1, what="the waiter")
    o.send(SET("w", "x"))
    o.expect(STORED)
    c.expect(V("w/t=60000", "x") + END)
    # a reader subscribes a fanout child by reading it (Kestrel's way)
    c.send(b"get f+a\r\n")
    c.expect(END)
    o.send(SET("f", "1"))
    o.expect(STORED)
    c.send(b"get f+a\r\n")
    c.expect(V("f+a", "1") + END)
    assert queue_names(o.stats()) == {"w", "f", "f+a"}


def test_max_queues(ternd):
    s = ternd(conf=SMALL_SEGMENTS + "[server]\nmax_queues = 100\n")
    c = s.conn()
    # 150 names from one client: 100 queues, then refusals
    c.send(b"".join(SET("n%03d" % i, "v%d" % i) for i in range(150)))
    c.expect(STORED * 100 + text_err("SERVER_ERROR", TOO_MANY % 100) * 50)
    st = c.stats()
    assert st["queues"] == "100" and st["max_queues"] == "100"
    assert st["rejected_queues"] == "50"
    # the other protocols, and a wait on a new queue (it needs one), are
    # refused alike; the stream stays in step
    c.send(b"ms m1 2\r\nab\r\nmn\r\nget new/t=100\r\nget new\r\nget n001\r\n")
    c.expect(text_err("SERVER_ERROR", TOO_MANY % 100) + b"MN\r\n"
             + text_err("SERVER_ERROR", TOO_MANY % 100)
             + END + V("n001", "v1") + END)   # a plain get needs no queue
    b = s.conn()
    b.send(SETF("b1", "xy", opaque=7) + req("GET", "b1/t=50", opaque=8) + req("NOOP", opaque=9))
    b.expect(ERR("SET", EINTERNAL, TOO_MANY % 100, 7) + ERR("GET", EINTERNAL, TOO_MANY % 100, 8)
             + res("NOOP", opaque=9))
    # a delete makes room
    c.send(b"delete n000\r\n" + SET("fresh", "f"))
    c.expect(b"DELETED\r\n" + STORED)
    restart_prep(s)
    # A restart opens every queue (with what it held) and keeps the limit.
    r = ternd(conf=SMALL_SEGMENTS + "[server]\nmax_queues = 100\n", datadir=s.datadir)
    c = r.conn()
    st = c.stats()
    assert st["queues"] == "100"
    assert queue_names(st) == {"n%03d" % i for i in range(1, 100)} | {"fresh"}
    c.send(b"get n099\r\nget fresh\r\n" + SET("n150", "z"))
    c.expect(V("n099", "v99") + END + V("fresh", "f") + END
             + text_err("SERVER_ERROR", TOO_MANY % 100))


def test_restart_past_max_queues_opens_all(ternd):
    s = ternd(conf=SMALL_SEGMENTS)
    c = s.conn()
    c.send(b"".join(SET("r%d" % i, "v") for i in range(6)))
    c.expect(STORED * 6)
    restart_prep(s)
    r = ternd(conf=SMALL_SEGMENTS + "[server]\nmax_queues = 4\n", datadir=s.datadir)
    c = r.conn()
    assert c.stats()["queues"] == "6"
    c.send(b"get r5\r\n" + SET("r6", "v"))
    c.expect(V("r5", "v") + END + text_err("SERVER_ERROR", TOO_MANY % 4))
    assert b"the data directory holds 6 queues, more than max_queues (4)" in r.stderr()


POLICY = SMALL_SEGMENTS + """
[server]
auto_create = no

[queue jobs]

[queue logs.*]
max_items = 2

[queue f+*]
"""


def test_auto_create_off(ternd):
    s = ternd(conf=POLICY)
    c = s.conn()
    c.send(SET("jobs", "j") + SET("logs.a", "1") + SET("logs.a", "2") + SET("logs.a", "3")
           + SET("other", "o") + b"get other\r\nget other/t=10\r\nget logs.b\r\nget jobs\r\n")
    c.expect(STORED * 3 + b"NOT_STORED\r\n"          # logs.* holds 2 (its section)
             + text_err("CLIENT_ERROR", UNKNOWN) * 3
             + END                                   # configured, absent: a miss
             + V("jobs", "j") + END)
    # deleting an unknown queue is not an error (Kestrel answers DELETED)
    c.send(b"delete other\r\n")
    c.expect(b"DELETED\r\n")
    # meta: refused, the data block skipped; md of an unknown queue is NF
    c.send(b"ms other 3 T0\r\nabc\r\nmg other v\r\nmd other\r\nms logs.c 1\r\nx\r\nmn\r\n")
    c.expect(text_err("CLIENT_ERROR", UNKNOWN) * 2 + b"NF\r\nHD\r\nMN\r\n")
    # binary: 0x0004 with the reason; the value is skipped
    b = s.conn()
    b.send(SETF("other", "val", opaque=1) + req("GET", "other", opaque=2)
           + req("GETQ", "other", opaque=3) + SETF("jobs", "k", opaque=4)
           + req("GET", "jobs", opaque=5))
    b.expect(ERR("SET", EINVAL, UNKNOWN, 1) + ERR("GET", EINVAL, UNKNOWN, 2)
             + ERR("GETQ", EINVAL, UNKNOWN, 3) + res("SET", opaque=4, cas=2)
             + VAL("GET", "k", cas=2, opaque=5))
    # fanout: the parent must be allowed to be created; a child matches f+*
    c.send(b"get f+x\r\n" + SET("f", "p") + b"get f+x\r\n")
    c.expect(END + text_err("CLIENT_ERROR", UNKNOWN) + END)
    assert queue_names(c.stats()) == {"jobs", "logs.a", "logs.c", "f+x"}
    assert c.stats()["rejected_queues"] == "9"


def test_reload_applies_policy(ternd):
    s = ternd(conf=SMALL_SEGMENTS)
    c = s.conn()
    c.send(SET("a", "1"))
    c.expect(STORED)
    s.write_conf(POLICY)
    c.send(b"reload\r\n")
    c.expect(b"OK\r\n")
    # an existing queue stays usable; a new unknown one is refused
    c.send(SET("a", "2") + SET("b", "1") + SET("jobs", "j"))
    c.expect(STORED + text_err("CLIENT_ERROR", UNKNOWN) + STORED)
    s.write_conf(SMALL_SEGMENTS + "[server]\nmax_queues = 3\n")
    c.send(b"reload\r\n" + SET("b", "1") + SET("c", "1"))
    c.expect(b"OK\r\n" + STORED + text_err("SERVER_ERROR", TOO_MANY % 3))
