"""
The data directory's lock: a second ternd on a directory a running one
holds must exit at once, non-zero, naming the directory and the holder's
pid, before it reads or writes anything there; the first one keeps serving
and keeps every message it acknowledged, before and after the attempt.
tern-journal refuses the directory while the server runs (it would read
files the server is changing) and reads it once the server has stopped.
"""
import os
import subprocess

from jutil import (TIMEOUT, body, check_bodies, drain, set_many, stopped,
                   tern_journal, until_steady)
import jutil

N = 3000
SIZE = 300
Q = "locked"
CONF = "[journal]\nsegment_size = 256K\n"


def size_of(i):
    return SIZE


def second_server(datadir, tmp_path):
    """Runs another ternd on datadir; returns (exit status, stderr text)."""
    p = subprocess.run([jutil.e2e.ternd_path(), "-p", "0", "-d", datadir],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, cwd=str(tmp_path), timeout=TIMEOUT)
    return p.returncode, p.stderr.decode(errors="replace")


def settled_listing(path):
    """The names in path once two listings 0.5 s apart agree (bounded): the
    server prepares its next segment (spare.seg) in the background after a
    roll, so a listing taken right after the sets may miss it."""
    return until_steady(lambda: sorted(os.listdir(path)), 0.5, 1, 5.0)


def test_second_server_refused(ternd, tmp_path):
    srv = ternd(conf=CONF)
    with srv.conn() as c:
        assert set_many(c, Q, [body(i, SIZE) for i in range(N // 2)]) == [b"STORED"] * (N // 2)
    before = settled_listing(os.path.join(srv.datadir, "queues", Q))

    rc, err = second_server(srv.datadir, tmp_path)
    assert rc != 0, "a second ternd on a held data directory exited 0:\n" + err
    assert srv.datadir in err and "pid %d" % srv.pid in err, \
        "the refusal does not name the directory %s and the holder's pid %d:\n%s" % (
            srv.datadir, srv.pid, err)
    assert "listening" not in err, err
    assert srv.alive()
    # it wrote nothing: the queue's files are the ones the first server made
    assert sorted(os.listdir(os.path.join(srv.datadir, "queues", Q))) == before

    rc, out, err = tern_journal("verify", srv.datadir)
    assert rc != 0 and "pid %d" % srv.pid in err, (rc, out, err)
    assert "in use" in err, err

    with srv.conn() as c:
        assert set_many(c, Q, [body(i, SIZE) for i in range(N // 2, N)]) == \
            [b"STORED"] * (N - N // 2)
    stopped(srv)

    rc, out, err = tern_journal("verify", srv.datadir)
    assert rc == 0, out + err
    srv2 = ternd(conf=CONF, datadir=srv.datadir)
    with srv2.conn() as c:
        check_bodies(drain(c, Q, N), range(N), size_of)


def test_lock_released_by_a_crash(ternd):
    """SIGKILL drops the lock with the process: the next server starts."""
    srv = ternd(conf=CONF)
    with srv.conn() as c:
        assert set_many(c, Q, [body(i, SIZE) for i in range(100)]) == [b"STORED"] * 100
    jutil.killed(srv)
    srv2 = ternd(conf=CONF, datadir=srv.datadir)
    with open(os.path.join(srv.datadir, "lock")) as f:
        assert f.read().strip() == str(srv2.pid)
    with srv2.conn() as c:
        check_bodies(drain(c, Q, 100), range(100), size_of)
