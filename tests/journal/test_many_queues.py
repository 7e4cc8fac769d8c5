"""
Twenty thousand queues from one client, then a restart.  Every `set` to a
new name creates a queue; each must cost little: a small first segment and
no spare (disk), no descriptor once idle (descriptors go through a bounded
cache), and a restart that reopens them all quickly, with every message.

Prints the figures (creation, stop and restart times, descriptors, disk);
asserts only bounds that catch a regression or a hang, never a speed.
"""
import os
import random
import subprocess
import time

from jutil import TIMEOUT, Conn, killed, stats, stopped

NQ = int(os.environ.get("TERN_MANY_QUEUES", "20000"))
WINDOW = 512
DISK_MAX = 1 << 30        # "well under 1 GiB" for 10,000 queues; 20,000 here
FD_SLACK = 64             # the listener, LMDB, the log, the event base...
RESTART_MAX_S = 30        # a hang, not a speed
# max_queues (default 10000) must admit them all
CONF = "[server]\nmax_queues = %d\n" % max(NQ, 10000)


def name(i):
    return b"mq%05d" % i


def payload(i):
    return b"message %05d for its own queue " % i + bytes((i * 7 + k) % 251 for k in range(40))


def fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def fd_limit(pid):
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    raise AssertionError("no open-files limit for %d" % pid)


def du(path):
    out = subprocess.run(["du", "-sb", path], capture_output=True, check=True, timeout=120)
    return int(out.stdout.split()[0])


def set_all(srv):
    """One set to each of NQ new queue names, pipelined; all STORED."""
    sent = got = 0
    deadline = time.monotonic() + max(600, TIMEOUT)
    with srv.conn() as c:
        while got < NQ:
            if sent < NQ and sent - got <= WINDOW // 2:
                k = min(WINDOW - (sent - got), NQ - sent)
                c.send(b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (name(i), len(payload(i)), payload(i))
                                for i in range(sent, sent + k)))
                sent += k
            line = c.readline()
            assert line == b"STORED\r\n", "set #%d answered %r" % (got, line)
            got += 1
            assert time.monotonic() < deadline, "sets did not finish"


def restart(ternd, srv):
    t0 = time.monotonic()
    srv2 = ternd(conf=CONF, datadir=srv.datadir)
    took = time.monotonic() - t0
    return srv2, took


def check_sample(srv, k=300):
    rng = random.Random(20240)
    sample = rng.sample(range(NQ), k)
    with srv.conn() as c:
        for i in sample:
            c.send(b"get %s\r\nget %s\r\n" % (name(i), name(i)))
            b = payload(i)
            c.expect(b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (name(i), len(b), b))
            c.expect(b"END\r\n")  # one message each
    return sample


def test_twenty_thousand_queues(ternd, capsys):
    srv = ternd(conf=CONF)
    limit = fd_limit(srv.pid)
    cache = max(16, min(1024, limit // 4))
    fd0 = fds(srv.pid)
    t0 = time.monotonic()
    set_all(srv)
    t_create = time.monotonic() - t0
    fd_busy = fds(srv.pid)
    st = stats(srv)
    assert int(st["queues"]) == NQ and int(st["curr_items"]) == NQ, \
        (st["queues"], st["curr_items"])
    journal_bytes = sum(int(v) for k, v in st.items() if k.endswith("_journal_disk_bytes"))

    t0 = time.monotonic()
    stopped(srv)
    t_stop = time.monotonic() - t0
    disk = du(srv.datadir)

    srv2, t_restart = restart(ternd, srv)
    fd_idle = fds(srv2.pid)
    st2 = stats(srv2)
    assert int(st2["queues"]) == NQ and int(st2["curr_items"]) == NQ, \
        (st2["queues"], st2["curr_items"])
    sample = check_sample(srv2)
    st3 = stats(srv2)
    assert int(st3["curr_items"]) == NQ - len(sample)

    # a crash and a restart: the same, less the sample
    killed(srv2)
    srv3, t_restart_crash = restart(ternd, srv2)
    assert int(stats(srv3)["curr_items"]) == NQ - len(sample)

    with capsys.disabled():
        print("\n%d queues, one message each: created in %.1f s; %d descriptors while busy "
              "(%d at start, cache %d of a limit of %d), %d idle after a restart; "
              "disk %.0f MiB (journal_disk_bytes %.0f MiB); stop %.1f s, "
              "restart %.2f s, after kill -9 %.2f s"
              % (NQ, t_create, fd_busy, fd0, cache, limit, fd_idle, disk / 2**20,
                 journal_bytes / 2**20, t_stop, t_restart, t_restart_crash))
    assert fd_busy <= fd0 + cache + FD_SLACK, (fd_busy, fd0, cache)
    assert fd_idle <= fd0 + FD_SLACK, (fd_idle, fd0)
    assert disk < DISK_MAX, disk
    assert t_restart < RESTART_MAX_S and t_restart_crash < RESTART_MAX_S
    stopped(srv3)
