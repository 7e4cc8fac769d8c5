"""
Queue and server status (Kestrel's UP / READONLY / QUIESCENT): the status
command's exact replies, the refusals on the text, binary and meta
protocols with the stream kept in step, the [server]/[queues]/[queue NAME]
status keys at start and at a reload, the DATA_DIR/status file that keeps
what operators set across a restart, and waiting gets answered when their
queue goes QUIESCENT.
"""
import os
import signal
import time

from conftest import TIMEOUT, run_ternd, wait_until
from test_binary import ERR, OP, SETF, VAL, req, res
from test_protocol import END, SET, STORED, V, qstat

TMPFAIL = 0x86
BAD_STATUS = b"CLIENT_ERROR bad status (expected UP, READONLY or QUIESCENT)\r\n"


def refused(what):
    return b"SERVER_ERROR " + what.encode() + b"\r\n"


def restart(ternd, s, conf=None):
    s.expect_exit(0)
    s.signal(signal.SIGTERM)
    assert s.wait(TIMEOUT) == 0
    return ternd(conf=conf, datadir=s.datadir)


def test_server_status_command(server):
    c = server.conn()
    c.send(b"status\r\n")
    c.expect(b"UP\r\n")
    c.send(SET("q", "one") + b"status READONLY\r\nstatus\r\n")
    c.expect(STORED + b"END\r\nREADONLY\r\n")
    # a refused set's body is swallowed: the next request is in step
    c.send(SET("q", "two") + b"get q\r\n")
    c.expect(refused("server is READONLY") + V("q", "one") + END)
    # (noreply hides the refusal, as it hides every reply of a set)
    c.send(SET("q", "three", noreply=True) + b"add q 0 0 1\r\nx\r\n")
    c.expect(refused("server is READONLY"))
    c.send(b"status quiescent\r\nstatus\r\n")
    c.expect(b"END\r\nQUIESCENT\r\n")
    for get in (b"get q", b"gets q", b"get q/peek", b"get q/open", b"get q/t=10"):
        c.send(get + b"\r\n")
        c.expect(refused("server is QUIESCENT"))
    # confirming and aborting what is open still work
    c.send(b"get q/close\r\nget q/abort\r\nconfirm q 1\r\n")
    c.expect(END * 3)
    c.send(b"status Up\r\n" + SET("q", "four") + b"get q\r\n")
    c.expect(b"END\r\n" + STORED + V("q", "four") + END)
    c.send(b"status BOGUS\r\nstatus\r\nstatus a b\r\nstatus queue\r\n")
    c.expect(BAD_STATUS + b"UP\r\nCLIENT_ERROR bad command line format\r\n" + BAD_STATUS)
    st = c.stats()
    assert st["status"] == "UP"
    assert st["status_refused"] == "8"


def test_queue_status_command(server):
    c = server.conn()
    c.send(b"status queue nope\r\nstatus queue nope READONLY\r\n")
    c.expect(b"NOT_FOUND\r\nNOT_FOUND\r\n")
    c.send(SET("r", "a") + SET("r", "b") + SET("o", "x"))
    c.expect(STORED * 3)
    c.send(b"status queue r readonly\r\nstatus queue r\r\nstatus\r\n")
    c.expect(b"END\r\nREADONLY\r\nUP\r\n")
    c.send(SET("r", "c") + SET("o", "y") + b"get r\r\n")
    c.expect(refused("queue r is READONLY") + STORED + V("r", "a") + END)
    c.send(b"status queue r QUIESCENT\r\nget r\r\nget o\r\nget o r\r\n")
    c.expect(b"END\r\n" + refused("queue r is QUIESCENT") + V("o", "x") + END
             + refused("queue r is QUIESCENT"))
    # stats show each queue's own status, as a number like every queue
    # counter: 0 UP, 1 READONLY, 2 QUIESCENT
    st = c.stats()
    assert st["queue_r_status"] == "2" and st["queue_o_status"] == "0"
    c.send(b"stats r\r\n")
    lines = []
    while True:
        line = c.readline()
        if line == END:
            break
        lines.append(line)
    assert b"STAT queue_r_status 2\r\n" in lines
    # the server's status wins when it is stricter
    c.send(b"status queue r UP\r\nstatus READONLY\r\n" + SET("r", "d") + b"get r\r\n")
    c.expect(b"END\r\nEND\r\n" + refused("server is READONLY") + V("r", "b") + END)
    c.send(b"status QUIESCENT\r\nstatus queue o READONLY\r\nget o\r\n")
    c.expect(b"END\r\nEND\r\n" + refused("server is QUIESCENT"))


def test_refusals_binary(server):
    t, b = server.conn(), server.conn()
    t.send(SET("bq", "held") + b"status queue bq READONLY\r\n")
    t.expect(STORED + b"END\r\n")
    why = b"queue bq is READONLY"
    b.send(SETF("bq", b"zz", opaque=7) + SETF("bq", b"zz", opaque=8, op="SETQ")
           + req("GET", "bq", opaque=9) + req("NOOP", opaque=10))
    b.expect(ERR("SET", TMPFAIL, why, 7) + ERR("SETQ", TMPFAIL, why, 8)
             + VAL("GET", b"held", opaque=9) + res("NOOP", opaque=10))
    t.send(SET("bq", "x") + b"status queue bq QUIESCENT\r\n")
    t.expect(refused("queue bq is READONLY") + b"END\r\n")
    t.send(b"status queue bq UP\r\n" + SET("bq", "x") + b"status queue bq QUIESCENT\r\n")
    t.expect(b"END\r\n" + STORED + b"END\r\n")
    why = b"queue bq is QUIESCENT"
    b.send(req("GET", "bq", opaque=1) + req("GETKQ", "bq", opaque=2)
           + SETF("bq", b"y", opaque=3) + req("NOOP", opaque=4))
    b.expect(ERR("GET", TMPFAIL, why, 1) + ERR("GETKQ", TMPFAIL, why, 2)
             + ERR("SET", TMPFAIL, why, 3) + res("NOOP", opaque=4))
    t.send(b"status queue bq UP\r\nget bq\r\n")
    t.expect(b"END\r\n" + V("bq", "x") + END)


def test_refusals_meta(server):
    c = server.conn()
    c.send(b"ms mq 2 T0\r\nhi\r\nstatus queue mq READONLY\r\n")
    c.expect(b"HD\r\nEND\r\n")
    c.send(b"ms mq 2\r\nno\r\nms mq 2 q\r\nno\r\nmg mq v\r\nmn\r\n")
    c.expect(refused("queue mq is READONLY") * 2 + b"VA 2\r\nhi\r\nMN\r\n")
    c.send(b"status QUIESCENT\r\nmg mq v\r\nmg mq q v\r\nmn\r\n")
    c.expect(b"END\r\n" + refused("server is QUIESCENT") * 2 + b"MN\r\n")


def test_quiescent_answers_waiters(server):
    o = server.conn()
    w1, w2, w3 = server.conn(), server.conn(), server.conn()
    w1.send(b"get wq/t=60000\r\n")
    w2.send(b"get wq/open/t=60000\r\n")
    w3.send(b"get other/t=60000\r\n")
    wait_until(lambda: qstat(o, "wq", "waiters") == 2 and qstat(o, "other", "waiters") == 1,
               what="the waiters")
    start = time.monotonic()
    o.send(b"status queue wq QUIESCENT\r\n")
    o.expect(b"END\r\n")
    w1.expect(END)
    w2.expect(END)
    assert time.monotonic() - start < 30  # answered, not timed out
    assert qstat(o, "wq", "waiters") == 0
    # a new wait on it is refused at once; the other queue still waits
    w1.send(b"get wq/t=60000\r\n")
    w1.expect(refused("queue wq is QUIESCENT"))
    assert qstat(o, "other", "waiters") == 1
    # the server going QUIESCENT answers every waiter, monitors too
    w2.send(b"monitor other 60\r\n")
    wait_until(lambda: qstat(o, "other", "waiters") == 2, what="the monitor")
    o.send(b"status QUIESCENT\r\n")
    o.expect(b"END\r\n")
    w3.expect(END)
    w2.expect(END)
    assert qstat(o, "other", "waiters") == 0
    # a get that waits on a queue gone QUIESCENT after it began: a miss
    o.send(b"status UP\r\nstatus queue wq UP\r\n")
    o.expect(b"END\r\nEND\r\n")
    w1.send(b"get other/t=60000 wq/t=60000\r\n")
    wait_until(lambda: qstat(o, "other", "waiters") == 1, what="the waiter")
    o.send(b"status queue wq QUIESCENT\r\n" + SET("other", "v"))
    o.expect(b"END\r\n" + STORED)
    w1.expect(V("other/t=60000", "v") + END)


def test_status_from_config_and_reload(ternd):
    conf = "[server]\nstatus = READONLY\n[queue cq]\nstatus = QUIESCENT\n"
    s = ternd(conf=conf)
    c = s.conn()
    c.send(b"status\r\n" + SET("a", "x") + SET("cq", "x") + b"get cq\r\nget a\r\n")
    # cq does not exist yet: its configured status applies, and the
    # stricter of the server's and the queue's names the refusal
    c.expect(b"READONLY\r\n" + refused("server is READONLY")
             + refused("queue cq is QUIESCENT") + refused("queue cq is QUIESCENT") + END)
    s.write_conf("[server]\nstatus = UP\n[queues]\nstatus = UP\n[queue cq]\nstatus = READONLY\n")
    s.signal(signal.SIGHUP)
    wait_until(lambda: b"configuration reloaded" in s.stderr(), what="the reload")
    c.send(b"status\r\n" + SET("a", "x") + SET("cq", "x") + b"get cq\r\n")
    c.expect(b"UP\r\n" + STORED + refused("queue cq is READONLY") + END)
    # [queues] status applies to every queue without a section of its own
    s.write_conf("[queues]\nstatus = READONLY\n[queue cq]\nstatus = UP\n")
    c.send(b"reload\r\n" + SET("a", "y") + SET("cq", "y") + b"status queue a\r\n")
    c.expect(b"OK\r\n" + refused("queue a is READONLY") + STORED + b"READONLY\r\n")
    # an operator's setting survives a reload that leaves the configured
    # status as it was ...
    c.send(b"status queue a UP\r\nstatus QUIESCENT\r\nreload\r\nstatus\r\nstatus queue a\r\n")
    c.expect(b"END\r\nEND\r\nOK\r\nQUIESCENT\r\nUP\r\n")
    # ... and gives way to one that changes it
    s.write_conf("[server]\nstatus = READONLY\n[queues]\nstatus = UP\n[queue cq]\nstatus = UP\n")
    c.send(b"reload\r\nstatus\r\nstatus queue a\r\n")
    c.expect(b"OK\r\nREADONLY\r\nUP\r\n")
    s.write_conf("[server]\nstatus = SOMETIMES\n")
    c.send(b"reload\r\nstatus\r\n")
    line = c.readline()
    assert line.startswith(b"SERVER_ERROR reload failed: ") and \
        b"status must be UP, READONLY or QUIESCENT, not 'SOMETIMES'" in line, line
    c.expect(b"READONLY\r\n")


def test_status_persists_across_restart(ternd):
    conf = "[queue k1]\n[queue k2]\n"
    s = ternd(conf=conf)
    c = s.conn()
    c.send(SET("k1", "a") + SET("k2", "b") + SET("k3", "c"))
    c.expect(STORED * 3)
    path = os.path.join(s.datadir, "status")
    assert not os.path.exists(path)  # nothing set, nothing written
    c.send(b"status READONLY\r\nstatus queue k1 QUIESCENT\r\nstatus queue k2 READONLY\r\n"
           b"status queue k2 UP\r\n")
    c.expect(b"END\r\n" * 4)
    with open(path) as f:
        lines = [l for l in f.read().splitlines() if not l.startswith("#")]
    assert sorted(lines) == ["queue k1 QUIESCENT", "queue k2 UP", "server READONLY"]
    c.close()
    s = restart(ternd, s, conf=conf)
    c = s.conn()
    c.send(b"status\r\nstatus queue k1\r\nstatus queue k2\r\nstatus queue k3\r\n"
           b"get k1\r\nget k2\r\n" + SET("k3", "d"))
    c.expect(b"READONLY\r\nQUIESCENT\r\nUP\r\nUP\r\n" + refused("queue k1 is QUIESCENT")
             + V("k2", "b") + END + refused("server is READONLY"))
    # a kill does not lose what was set either (the file is synced)
    c.send(b"status UP\r\nstatus queue k1 READONLY\r\n")
    c.expect(b"END\r\nEND\r\n")
    c.close()
    s.expect_exit(-signal.SIGKILL)
    s.kill()
    s = ternd(conf=conf, datadir=s.datadir)
    c = s.conn()
    c.send(b"status\r\nstatus queue k1\r\nget k1\r\n")
    c.expect(b"UP\r\nREADONLY\r\n" + V("k1", "a") + END)


def test_bad_status_file_stops_start(tmp_path):
    data = str(tmp_path / "bad")
    os.makedirs(data)
    with open(os.path.join(data, "status"), "w") as f:
        f.write("server SIDEWAYS\n")
    rc, out, err = run_ternd(["-p", "0", "-d", data])
    assert rc != 0
    assert b"status:1: expected 'server STATUS' or 'queue NAME STATUS'" in err, err


def test_fanout_child_status(server):
    c = server.conn()
    c.send(b"get f+ro\r\nget f+up\r\n")  # subscribes both children
    c.expect(END * 2)
    c.send(b"status queue f+ro READONLY\r\n" + SET("f", "1") + b"get f+ro\r\nget f+up\r\nget f\r\n")
    c.expect(b"END\r\n" + STORED + END + V("f+up", "1") + END + V("f", "1") + END)
    c.send(b"status queue f+ro UP\r\n" + SET("f", "2") + b"get f+ro\r\n")
    c.expect(b"END\r\n" + STORED + V("f+ro", "2") + END)


def test_delete_forgets_operator_status(ternd):
    s = ternd()
    c = s.conn()
    c.send(SET("gone", "x") + b"status queue gone QUIESCENT\r\ndelete gone\r\n" + SET("gone", "y"))
    c.expect(STORED + b"END\r\nDELETED\r\n" + STORED)
    with open(os.path.join(s.datadir, "status")) as f:
        assert "gone" not in f.read()
    c.close()
    s = restart(ternd, s)
    c = s.conn()
    c.send(b"status queue gone\r\nget gone\r\n")
    c.expect(b"UP\r\n" + V("gone", "y") + END)
