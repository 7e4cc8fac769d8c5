"""
Dead letters, retry limits, expire_to and delayed delivery (docs/PROTOCOL.md,
"Dead letters and retry limits", "Delayed delivery"): exact replies in the
text, meta and binary protocols; the poison message (aborted max_deliveries
times, it lands in the dead-letter queue and nowhere else, byte for byte);
delivery counts and delays kept across a clean restart and a kill -9; a
kill -9 in the middle of dead-letter moves loses nothing; a real client
(pymemcache) sets with a delay.
"""
import signal
import threading
import time

from conftest import TIMEOUT, wait_until
from test_binary import OP, SETF, VAL, req, res
from test_protocol import END, SET, STORED, V, qstat

CONF = """
[queues]
max_deliveries = 3
dead_letter = dlq
[queue dlq]
max_deliveries = 0
[queue ex]
max_age = 1
expire_to = expired
[queue once]
max_deliveries = 1
dead_letter = none
"""

POISON = b"\x00poison\r\nbody\xff"


def VB(key, data, flags=0):
    """A text VALUE reply for bytes data."""
    return b"VALUE %s %d %d\r\n%s\r\nEND\r\n" % (key.encode(), flags, len(data), data)


def SETB(key, data, flags=0):
    return b"set %s %d 0 %d\r\n%s\r\n" % (key.encode(), flags, len(data), data)


def test_poison_message_lands_in_dead_letter_only(ternd):
    s = ternd(conf=CONF)
    c = s.conn()
    c.send(SETB("jobs", POISON, 7) + SET("jobs", "good"))
    c.expect(STORED * 2)
    for _ in range(3):
        c.send(b"get jobs/open\r\nget jobs/abort\r\n")
        c.expect(VB("jobs/open", POISON, 7) + END)
    # the third abort moved it: the next open gets the item behind it
    c.send(b"get jobs/open\r\nget jobs/close\r\nget jobs\r\n")
    c.expect(V("jobs/open", "good") + END + END + END)
    c.send(b"get dlq/peek\r\n")
    c.expect(VB("dlq/peek", POISON, 7))
    st = c.stats()
    assert st["queue_jobs_items"] == "0"
    assert st["queue_jobs_dead_lettered"] == "1"
    assert st["queue_jobs_redeliveries"] == "2"
    assert st["queue_jobs_open_transactions"] == "0"
    assert st["queue_dlq_items"] == "1"
    assert st["queue_dlq_total_items"] == "1"
    assert st["dead_lettered"] == "1" and st["redeliveries"] == "2"
    # nowhere else: no other queue holds anything
    assert [k for k, v in st.items() if k.endswith("_items") and k.startswith("queue_")
            and not k.endswith(("total_items", "expired_items", "delayed_items"))
            and v != "0"] == ["queue_dlq_items"]
    # the moved copy is a new item there: its count starts again
    c.send(b"mg dlq/open v d f\r\nmg dlq/close\r\nmg dlq v\r\n")
    c.expect(b"VA %d d1 f7\r\n%s\r\nEN\r\nEN\r\n" % (len(POISON), POISON))


def test_retry_limit_by_timeout_disconnect_and_reserve(ternd):
    s = ternd(conf=CONF + "[queue slow]\nmax_deliveries = 2\nopen_timeout = 100\n")
    c = s.conn()
    c.send(SET("slow", "t") + SET("slow", "after"))
    c.expect(STORED * 2)
    # two open reads that time out
    for _ in range(2):
        c.send(b"get slow/open\r\n")
        c.expect(V("slow/open", "t") + END)
        wait_until(lambda: qstat(c, "slow", "open_transactions") == 0, what="the timeout")
    assert qstat(c, "slow", "dead_lettered") == 1
    # a closed connection counts as a failed delivery; so does abort by id
    c.send(SET("once", "x") + SET("once", "y"))
    c.expect(STORED * 2)
    d = s.conn()
    d.send(b"get once/open\r\n")
    d.expect(V("once/open", "x") + END)
    d.close()
    wait_until(lambda: qstat(c, "once", "dead_dropped") == 1, what="the disconnect")
    c.send(b"gets once/reserve\r\n")
    line = c.readline()
    assert line.startswith(b"VALUE once/reserve 0 1 ")
    rid = int(line.split()[-1])
    c.expect(b"y\r\nEND\r\n")
    c.send(b"get once/abort=%d\r\nget once\r\n" % rid)
    c.expect(END + END)
    st = c.stats()
    assert st["queue_once_dead_dropped"] == "2"  # dead_letter = none: dropped
    assert st["queue_once_items"] == "0"
    c.send(b"get dlq\r\nget dlq\r\n")
    c.expect(V("dlq", "t") + END + END)


def test_expire_to(ternd):
    s = ternd(conf=CONF)
    c = s.conn()
    c.send(SET("ex", "one", 3) + SET("ex", "two"))
    c.expect(STORED * 2)
    time.sleep(1.2)
    c.send(b"get ex\r\nget expired\r\nget expired\r\n")
    c.expect(END + V("expired", "one", 3) + END + V("expired", "two") + END)
    st = c.stats()
    assert st["queue_ex_expired_items"] == "2" and st["queue_ex_expired_to"] == "2"
    assert st["expired_to"] == "2"
    # flush_expired moves too
    c.send(SET("ex", "three") + b"get expired\r\n")
    c.expect(STORED + END)
    time.sleep(1.2)
    c.send(b"flush_expired ex\r\nget expired\r\n")
    c.expect(b"1\r\n" + V("expired", "three") + END)


def test_delay_text_exact(ternd):
    s = ternd(conf=CONF)
    c = s.conn()
    # Delays long enough that a stalled machine cannot make the item
    # visible before the checks that expect it hidden; waits are polled.
    c.send(b"set d/delay=3000 5 0 5\r\nlater\r\n" + SET("d", "now"))
    c.expect(STORED * 2)
    # the delayed head blocks nothing behind it
    c.send(b"get d\r\nget d\r\n")
    c.expect(V("d", "now") + END + END)
    st = c.stats()
    assert st["queue_d_items"] == "1" and st["queue_d_delayed_items"] == "1"
    wait_until(lambda: qstat(c, "d", "delayed_items") == 0, what="the delay")
    c.send(b"get d\r\n")
    c.expect(V("d", "later", 5) + END)
    # seconds, and errors (the body is swallowed, the stream stays in step)
    c.send(b"set d/delay=1s 0 0 1\r\na\r\nget d\r\n"
           b"set d/delay=abc 0 0 1\r\nb\r\nset d/delay=2592001s 0 0 1\r\nc\r\n"
           b"set d/open 0 0 1\r\nd\r\nget d/delay=5\r\n")
    c.expect(STORED + END + b"CLIENT_ERROR bad delay\r\n" * 2
             + b"CLIENT_ERROR bad queue name\r\n" + b"CLIENT_ERROR bad get option\r\n")


def test_delay_wakes_waiter(ternd):
    s = ternd(conf=CONF)
    c, w = s.conn(), s.conn()
    c.send(b"set wq/delay=300 0 0 2\r\nhi\r\n")
    c.expect(STORED)
    t0 = time.monotonic()
    w.send(b"get wq/t=10000\r\n")
    w.expect(V("wq/t=10000", "hi") + END)
    assert time.monotonic() - t0 < 9  # woken by the delay, not the timeout


def test_delay_meta_exact(ternd):
    s = ternd(conf=CONF)
    c = s.conn()
    c.send(b"ms m 2 D500 T0 F9\r\nhi\r\nmg m v\r\nms m 2 Dx\r\nno\r\nmn\r\n")
    c.expect(b"HD\r\nEN\r\nCLIENT_ERROR bad delay\r\nMN\r\n")
    time.sleep(0.7)
    c.send(b"mg m v f\r\n")
    c.expect(b"VA 2 f9\r\nhi\r\n")


def test_delay_binary_exact(ternd):
    s = ternd(conf=CONF)
    b = s.conn()
    b.send(SETF("bq/delay=500", "hi", flags=4, opaque=1) + req("GET", "bq", opaque=2))
    b.expect(res("SET", opaque=1, cas=1) + res("GET", 0x01, value=b"Not found", opaque=2))
    time.sleep(0.7)
    b.send(req("GET", "bq", opaque=3))
    b.expect(VAL("GET", b"hi", flags=4, cas=1, opaque=3))
    b.send(SETF("bq/delay=zz", "x", opaque=4) + req("NOOP", opaque=5))
    b.expect(res("SET", 0x04, value=b"bad delay", opaque=4) + res("NOOP", opaque=5))


def restart(ternd, s, how):
    datadir = s.datadir
    if how == "kill":
        s.expect_exit(-signal.SIGKILL)
        s.kill()
    else:
        s.expect_exit(0)
        s.signal(signal.SIGTERM)
        assert s.wait(TIMEOUT) == 0
    return ternd(conf=CONF, datadir=datadir)


def check_restart_keeps_delay_and_counts(ternd, how):
    s = ternd(conf=CONF)
    c = s.conn()
    # timed from before the set: the delay runs from when ternd takes it
    t_set = time.monotonic()
    c.send(b"set d/delay=2500 0 0 5\r\nlater\r\n" + SET("r", "retry") + SET("r", "next"))
    c.expect(STORED * 3)
    for _ in range(2):
        c.send(b"get r/open\r\nget r/abort\r\n")
        c.expect(V("r/open", "retry") + END + END)
    if how == "kill":
        # one more handout, open when ternd is killed: it comes back
        # first, with its count (a clean stop would close the connection,
        # which counts as the third failed delivery and moves it)
        c.send(b"mg r/open v d\r\n")
        c.expect(b"VA 5 d3\r\nretry\r\n")
        time.sleep(0.3)  # the OPEN record goes out with the next batch
    s2 = restart(ternd, s, how)
    c2 = s2.conn()
    st = c2.stats()
    assert st["queue_d_delayed_items"] == "1"
    c2.send(b"get d\r\n")
    if time.monotonic() - t_set < 2.0:
        c2.expect(END)
    # the handouts before the restart count: this abort reaches the limit
    n = 4 if how == "kill" else 3
    c2.send(b"mg r/open v d\r\nmg r/abort\r\nmg r v\r\nmg dlq v\r\n")
    c2.expect(b"VA 5 d%d\r\nretry\r\nEN\r\nVA 4\r\nnext\r\nVA 5\r\nretry\r\n" % n)
    wait_until(lambda: qstat(c2, "d", "delayed_items") == 0, timeout=10, what="the delay")
    c2.send(b"get d\r\n")
    c2.expect(V("d", "later") + END)


def test_restart_keeps_delay_and_counts(ternd):
    check_restart_keeps_delay_and_counts(ternd, "term")


def test_kill9_keeps_delay_and_counts(ternd):
    check_restart_keeps_delay_and_counts(ternd, "kill")


def drain(c, queue, limit):
    got = []
    for _ in range(limit):
        c.send(b"get %s\r\n" % queue.encode())
        line = c.readline()
        if line == b"END\r\n":
            return got
        n = int(line.split()[3])
        got.append(c.read_exact(n + 2)[:-2])
        c.expect(END)
    raise AssertionError("%s did not drain" % queue)


def test_kill9_during_dead_letter_moves(ternd):
    """Items handed out once and aborted move to the dead letter queue,
    pipelined, while ternd is killed; after a restart every item is in
    work or dlq (a move cut by the kill may leave it in both: at least
    once), none is lost.  Three rounds, killed at different moments."""
    conf = "[queue work]\nmax_deliveries = 1\ndead_letter = dlq\nsync = always\n"
    n = 300
    for rnd, pause in enumerate((0.05, 0.15, 0.3)):
        s = ternd(conf=conf)
        c = s.conn()
        bodies = [b"r%d-item-%05d" % (rnd, i) for i in range(n)]
        c.send(b"".join(SETB("work", x) for x in bodies))
        c.expect(STORED * n)
        stop = threading.Event()

        def consume(port):
            try:
                k = s.conn()
                for _ in range(n):
                    if stop.is_set():
                        return
                    k.send(b"get work/open\r\nget work/abort\r\n" * 4)
                    for _ in range(4):
                        line = k.readline()
                        if line.startswith(b"VALUE"):
                            k.read_exact(int(line.split()[3]) + 2)
                            k.expect(END)
                        k.expect(END)
            except (AssertionError, OSError):
                return  # the kill

        t = threading.Thread(target=consume, args=(s.port,))
        t.start()
        wait_until(lambda: (qstat(c, "dlq", "items") or 0) >= 20, what="moves under way")
        time.sleep(pause)
        s.expect_exit(-signal.SIGKILL)
        s.kill()
        stop.set()
        t.join(TIMEOUT)
        s2 = ternd(conf=conf, datadir=s.datadir)
        c2 = s2.conn()
        left = drain(c2, "work", n + 1)
        dead = drain(c2, "dlq", n + 1)
        assert set(left) | set(dead) == set(bodies), "lost: %r" % (set(bodies) - set(left) - set(dead))
        assert len(set(dead)) == len(dead) and len(set(left)) == len(left)
        assert len(dead) > 0


def test_pymemcache_sets_with_delay(server):
    from pymemcache.client.base import Client

    cl = Client(("127.0.0.1", server.port), timeout=TIMEOUT, connect_timeout=TIMEOUT)
    assert cl.set("pq/delay=3000", b"wait for it", noreply=False) is True
    assert cl.set("pq", b"first", noreply=False) is True
    assert cl.get("pq") == b"first"
    assert cl.get("pq") is None
    assert wait_until(lambda: cl.get("pq"), what="the delay") == b"wait for it"
    assert cl.get("pq") is None
    cl.close()


def test_shutdown_moves_open_item_at_limit_once(ternd):
    """An item at its limit, open when ternd stops: the closing connection
    returns it, it moves, and the move is finished before the journals
    close (in the dead-letter queue after the restart, not in both)."""
    s = ternd(conf=CONF)
    c = s.conn()
    c.send(SET("sd", "last") + b"get sd/open\r\nget sd/abort\r\n" * 2 + b"get sd/open\r\n")
    c.expect(STORED + (V("sd/open", "last") + END + END) * 2 + V("sd/open", "last") + END)
    s2 = restart(ternd, s, "term")
    c2 = s2.conn()
    c2.send(b"get sd\r\nget dlq\r\nget dlq\r\n")
    c2.expect(END + V("dlq", "last") + END + END)


def test_delay_through_alias_and_fanout(ternd):
    s = ternd(conf=CONF + "[alias al]\ndestinations = al1, al2\n")
    c = s.conn()
    c.send(b"get fo+kid\r\n")
    c.expect(END)
    c.send(b"set al/delay=3000 0 0 1\r\na\r\nset fo/delay=3000 0 0 1\r\nf\r\n"
           b"get al1\r\nget al2\r\nget fo\r\nget fo+kid\r\n")
    c.expect(STORED * 2 + END * 4)
    wait_until(lambda: all(qstat(c, q, "delayed_items") == 0 for q in ("al1", "al2", "fo", "fo+kid")),
               what="the delays")
    c.send(b"get al1\r\nget al2\r\nget fo\r\nget fo+kid\r\n")
    c.expect(V("al1", "a") + END + V("al2", "a") + END + V("fo", "f") + END + V("fo+kid", "f") + END)
