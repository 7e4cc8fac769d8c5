"""
A segment that cannot be read is never skipped and never deleted: ternd
refuses to start on it, naming the file and the cause, and once the file
reads again every acknowledged item is there, in order.

Two ways to make a segment unreadable for a moment:
- mode 000, with ternd run without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH
  (setpriv), since root reads a mode 000 file anyway; skipped where setpriv
  cannot drop them;
- a directory put where the segment file was (the file moved aside).
"""
import os
import shutil
import subprocess

import pytest

import jutil
from jutil import TIMEOUT, body, check_bodies, drain, set_many, stopped

N = 3000
SIZE = 400
Q = "unread"
CONF = "[journal]\nsegment_size = 64K\n[queues]\nmax_memory_size = 64K\n"
NOCAPS = ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
          "--bounding-set=-dac_override,-dac_read_search"]


def size_of(i):
    return SIZE


def filled(ternd):
    """A stopped server's data directory holding items 0..N-1 of Q over
    several segments; returns (server, segment paths)."""
    srv = ternd(conf=CONF)
    with srv.conn() as c:
        assert set_many(c, Q, [body(i, SIZE) for i in range(N)]) == [b"STORED"] * N
    stopped(srv)
    qdir = os.path.join(srv.datadir, "queues", Q)
    segs = sorted(os.path.join(qdir, f) for f in os.listdir(qdir)
                  if f.endswith(".seg") and f[:-4].isdigit())
    assert len(segs) >= 4, segs
    return srv, segs


def refused(cmd, tmp_path, path, cause):
    """Runs ternd (cmd) and checks it exits non-zero without listening,
    naming path and cause."""
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, cwd=str(tmp_path), timeout=TIMEOUT)
    err = p.stderr.decode(errors="replace")
    assert p.returncode != 0, "ternd started on an unreadable segment:\n" + err
    assert "listening" not in err, err
    assert path in err and cause in err, \
        "the refusal does not name %s and %r:\n%s" % (path, cause, err)
    assert "cannot recover queue %s" % Q in err, err


def check_all_there(ternd, srv, segs):
    assert all(os.path.isfile(s) for s in segs), segs
    srv2 = ternd(conf=CONF, datadir=srv.datadir)
    with srv2.conn() as c:
        check_bodies(drain(c, Q, N), range(N), size_of)


def test_mode_000_segment(ternd, tmp_path):
    if subprocess.run(NOCAPS + ["true"], capture_output=True).returncode != 0:
        pytest.skip("setpriv cannot drop CAP_DAC_OVERRIDE here")
    srv, segs = filled(ternd)
    victim = segs[1]
    os.chmod(victim, 0)
    cmd = NOCAPS + [jutil.e2e.ternd_path(), "-c", srv.conf_path, "-p", "0", "-d", srv.datadir]
    try:
        refused(cmd, tmp_path, victim, "Permission denied")
        refused(cmd, tmp_path, victim, "Permission denied")  # and again: nothing changed
    finally:
        os.chmod(victim, 0o644)
    check_all_there(ternd, srv, segs)


def test_directory_in_place_of_a_segment(ternd, tmp_path):
    srv, segs = filled(ternd)
    victim = segs[2]
    os.rename(victim, victim + ".aside")
    os.mkdir(victim)
    cmd = [jutil.e2e.ternd_path(), "-c", srv.conf_path, "-p", "0", "-d", srv.datadir]
    try:
        refused(cmd, tmp_path, victim, "Is a directory")
        assert os.path.isdir(victim)
    finally:
        shutil.rmtree(victim, ignore_errors=True)
        os.rename(victim + ".aside", victim)
    check_all_there(ternd, srv, segs)
