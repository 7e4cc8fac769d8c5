"""
tern-journal verify: the catalog checked against the segments, each kind of
damage reported as damage (exit 2) with the queue, the segment and what is
wrong; what a crash leaves that the next start puts right reported as
benign (exit 1); an intact directory exit 0.

A pristine data directory (queue "v" over many 64 KiB segments, its first
items consumed so its checkpoint's oldest live record is past the first
segments, a last item large enough to span pages) is copied and damaged in
one way per case.  The catalog is edited with mdb_dump/mdb_load (lmdb-utils).
Then kill -9 rounds: a server killed while it writes large records leaves
at most a benign torn write, never damage, and every acknowledged set is
there after a restart.
"""
import os
import random
import re
import shutil
import subprocess
import threading
import time

import pytest

import jutil
from jutil import (TIMEOUT, body, check_bodies, drain, get_many, set_many, stopped,
                   tern_journal)

Q = "v"
N = 1500
CONSUMED = 120
BIG = 12000  # (jutil.body makes at most 16 KiB)
CONF = "[journal]\nsegment_size = 64K\n"


def size_of(i):
    return BIG if i == N else 200 + (i * 7919) % 700


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    d = tmp_path_factory.mktemp("verify")
    srv = jutil.Server(d, conf=CONF)
    srv.start()
    try:
        with srv.conn() as c:
            assert set_many(c, Q, [body(i, size_of(i)) for i in range(N + 1)]) == \
                [b"STORED"] * (N + 1)
            assert set_many(c, "w", [body(i, 300) for i in range(20)]) == [b"STORED"] * 20
            got = get_many(c, Q, CONSUMED)
            check_bodies(got, range(CONSUMED), size_of)
    finally:
        problems = srv.stop()
    assert not problems, "\n".join(problems)
    rc, out, err = tern_journal("verify", srv.datadir)
    assert rc == 0 and out.endswith("2 queues checked: ok\n"), (rc, out, err)
    yield srv.datadir
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def data(pristine, tmp_path):
    d = str(tmp_path / "data")
    shutil.copytree(pristine, d)
    return d


def qdir(data, q=Q):
    return os.path.join(data, "queues", q)


def segs(data, q=Q):
    return sorted(int(f[:-4]) for f in os.listdir(qdir(data, q))
                  if f.endswith(".seg") and f[:-4].isdigit())


def seg_path(data, s, q=Q):
    return os.path.join(qdir(data, q), "%08d.seg" % s)


def verify(data, expect_rc, *patterns):
    rc, out, err = tern_journal("verify", data)
    assert rc == expect_rc, "verify exited %d, expected %d:\n%s%s" % (rc, expect_rc, out, err)
    for p in patterns:
        assert re.search(p, out, re.M), "verify's output lacks %r:\n%s" % (p, out)
    return out


# ---- the catalog, through lmdb-utils ------------------------------------------

def db_edit(data, db, key, fn):
    """Replaces the value of key in LMDB database db of the catalog by
    fn(value) (bytes -> bytes)."""
    env = os.path.join(data, "catalog")
    dump = subprocess.run(["mdb_dump", "-s", db, env], capture_output=True, check=True,
                          timeout=TIMEOUT).stdout.decode()
    head, rest = dump.split("HEADER=END\n", 1)
    lines = rest.split("DATA=END\n")[0].splitlines()
    out = []
    found = False
    for k, v in zip(lines[0::2], lines[1::2]):
        if bytes.fromhex(k.strip()) == key.encode():
            v = " " + fn(bytes.fromhex(v.strip())).hex()
            found = True
        out += [k, v]
    assert found, "no %s in %s" % (key, db)
    path = os.path.join(data, "edit.dump")
    with open(path, "w") as f:
        f.write(head + "HEADER=END\n" + "\n".join(out) + "\nDATA=END\n")
    subprocess.run(["mdb_load", "-s", db, "-f", path, env], check=True, timeout=TIMEOUT,
                   capture_output=True)
    os.unlink(path)


def ckpt_h_seg(data):
    got = {}

    def grab(v):
        got["v"] = v
        return v
    db_edit(data, "ckpt", Q, grab)
    return int.from_bytes(got["v"][24:32], "little") >> 32


# ---- damage --------------------------------------------------------------------

def test_intact(pristine):
    verify(pristine, 0, r"^2 queues checked: ok$")


def test_missing_segment(data):
    s = segs(data)
    victim = s[len(s) // 2]
    os.unlink(seg_path(data, victim))
    verify(data, 2, r"^v: DAMAGE: segment %08d is missing" % victim,
           r"^2 queues checked: DAMAGE FOUND$")


def test_missing_oldest_live_segment(data):
    h = ckpt_h_seg(data)
    s = segs(data)
    assert h in s and h > 1, (h, s)
    os.unlink(seg_path(data, h))
    verify(data, 2, r"^v: DAMAGE: segment %08d, which holds the checkpoint's oldest live "
           r"record, is missing" % h)


def test_truncated_segment(data):
    s = segs(data)[2]
    size = os.path.getsize(seg_path(data, s))
    os.truncate(seg_path(data, s), size // 2)
    verify(data, 2, r"^v: DAMAGE: segment %08d is truncated: %d of its %d bytes"
           % (s, size // 2, size))


def test_out_of_order_segments(data):
    a, b = segs(data)[3:5]
    tmp = seg_path(data, a) + ".tmp"
    os.rename(seg_path(data, a), tmp)
    os.rename(seg_path(data, b), seg_path(data, a))
    os.rename(tmp, seg_path(data, b))
    verify(data, 2, r"^v: DAMAGE: segment %08d is out of order" % a,
           r"^v: DAMAGE: segment %08d is out of order" % b)


def test_queue_not_in_catalog(data):
    shutil.copytree(qdir(data), qdir(data, "orphan"))
    verify(data, 2, r"^orphan: DAMAGE: not in the catalog", r"^3 queues checked: DAMAGE FOUND$")


def test_checkpoint_checksum(data):
    def flip(v):
        v = bytearray(v)
        v[33] ^= 0x10  # in H
        return bytes(v)
    db_edit(data, "ckpt", Q, flip)
    verify(data, 2, r"^v: DAMAGE: its checkpoint is fails its checksum|"
           r"^v: DAMAGE: its checkpoint is fails its checksum")


def test_damaged_record(data):
    s = segs(data)[3]
    with open(seg_path(data, s), "r+b") as f:
        f.seek(4096 + 100)
        b = f.read(1)
        f.seek(4096 + 100)
        f.write(bytes([b[0] ^ 4]))
    verify(data, 2, r"^v: DAMAGE: segment %08d offset 4096: damaged" % s)


# ---- benign ---------------------------------------------------------------------

def test_interrupted_delete(data):
    def deleting(v):
        return v[:8] + (1).to_bytes(8, "little") + v[16:]
    db_edit(data, "queues", "w", deleting)
    verify(data, 1, r"^w: benign: a delete was interrupted", r"^2 queues checked: ok \(benign")


def test_delete_interrupted_after_some_segments(data):
    # a cut in the middle of a delete: some of the queue's segments are
    # gone, the catalog still says it is being deleted
    def deleting(v):
        return v[:8] + (1).to_bytes(8, "little") + v[16:]
    db_edit(data, "queues", Q, deleting)
    for s in segs(data)[:3]:
        os.unlink(seg_path(data, s))
    verify(data, 1, r"^%s: benign: a delete was interrupted" % Q,
           r"^2 queues checked: ok \(benign")


def last_big_record(data):
    """(segment, offset) of the big last item's record."""
    rc, out, err = tern_journal("dump", data, Q)
    assert rc == 0, out + err
    cur = None
    found = None
    for line in out.splitlines():
        m = re.match(r"^ segment (\d+): ", line)
        if m:
            cur = int(m.group(1))
        m = re.match(r"^  @(\d+)\s+ADD\s.*len=%d " % BIG, line)
        if m:
            found = (cur, int(m.group(1)))
    assert found, out[-2000:]
    return found


def test_torn_tail_is_benign_and_a_flip_is_not(data, pristine):
    s, off = last_big_record(data)
    page = (off // 4096 + 2) * 4096  # inside its 12000-byte body
    size = os.path.getsize(seg_path(data, s))
    # what a crash during its write leaves: its first pages, then the
    # preallocated zeros (none of what the clean stop wrote after it)
    with open(seg_path(data, s), "r+b") as f:
        f.seek(page)
        f.write(b"\0" * (size - page))
    verify(data, 1, r"^v: benign: segment %08d offset %d: torn write" % (s, off),
           r"^2 queues checked: ok \(benign findings\)$")
    # the same record whole but for one flipped bit: damage
    shutil.rmtree(data)
    shutil.copytree(pristine, data)
    with open(seg_path(data, s), "r+b") as f:
        f.seek(page + 10)
        b = f.read(1)
        f.seek(page + 10)
        f.write(bytes([b[0] ^ 1]))
    verify(data, 2, r"^v: DAMAGE: segment %08d offset %d: damaged" % (s, off))


# ---- kill -9 -------------------------------------------------------------------

ROUNDS = int(os.environ.get("TERN_VERIFY_ROUNDS", "8"))


class Producer(threading.Thread):
    """Pipelines sets of large, varied bodies to queue "torn" until the
    server dies; acked: the sequence numbers answered STORED."""

    def __init__(self, srv, start, rng):
        super().__init__(daemon=True)
        self.srv, self.seq, self.rng = srv, start, rng
        self.acked = []

    def run(self):
        try:
            with self.srv.conn() as c:
                while True:
                    sizes = [self.rng.randrange(100, 900000) for _ in range(8)]
                    seqs = list(range(self.seq, self.seq + 8))
                    self.seq += 8
                    c.send(b"".join(b"set torn 0 0 %d\r\n%s\r\n" % (n, tbody(s, n))
                                    for s, n in zip(seqs, sizes)))
                    for s in seqs:
                        if c.readline() == b"STORED\r\n":
                            self.acked.append(s)
        except (AssertionError, OSError):
            pass  # the server was killed


def tbody(seq, n):
    head = b"%010d:" % seq
    return head + bytes((seq + k) % 251 for k in range(min(n, 64) - len(head))) + \
        b"x" * max(0, n - 64)


def test_kill9_rounds_leave_no_damage(ternd):
    rng = random.Random(int(os.environ.get("TERN_VERIFY_SEED", "424242")))
    srv = ternd(conf="[journal]\nsegment_size = 4M\n")
    data = srv.datadir
    acked, seq, torn = [], 0, 0
    for r in range(ROUNDS):
        if r:
            srv = ternd(conf="[journal]\nsegment_size = 4M\n", datadir=data)
        p = Producer(srv, seq, rng)
        p.start()
        time.sleep(rng.uniform(0.2, 0.6))
        jutil.killed(srv)
        p.join(TIMEOUT)
        acked += p.acked
        seq = p.seq
        rc, out, err = tern_journal("verify", data)
        assert rc in (0, 1), "round %d: verify found damage after kill -9:\n%s%s" % (r, out, err)
        assert "DAMAGE" not in out, out
        torn += rc == 1 and "torn write" in out
    srv = ternd(conf="[journal]\nsegment_size = 4M\n", datadir=data)
    with srv.conn() as c:
        # (a few gets in flight: these bodies are up to 900 KB each)
        got = [int(b[:10]) for b in drain(c, "torn", len(acked) + 1000, window=4)]
    missing = sorted(set(acked) - set(got))
    assert not missing, "acknowledged sets lost: %s" % missing[:20]
    assert len(got) == len(set(got)), "duplicates after kill -9 rounds"
    assert got == sorted(got), "out of order after kill -9 rounds"
    stopped(srv)
    print("\n%d kill -9 rounds: %d acknowledged sets, %d rounds left a torn write (benign)"
          % (ROUNDS, len(acked), torn))
