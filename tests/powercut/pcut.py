"""
pcut.py: power cuts under a running ternd, and what they cost.

One run (run_mode) repeats cycles on one data directory that lives on pcfs
(pcfs.py): ternd starts on the directory, a workload drives it and records
every acknowledgement with its time, the power goes (pcfs cuts the disk and
ternd is SIGKILLed at once), and then the image the cut left is checked:
`tern-journal verify` on it, ternd started on a copy of it, every queue
drained, and every acknowledged message looked for.  The next cycle starts
ternd on the image itself (so cuts also land in recovery and on what
earlier cuts left); every few cycles the directory starts afresh, with the
next file system rule, tearing and preallocation of the list.

The workload (Workload): producers pipelining and one request at a time,
to several queues, a fanout queue with two children, an alias with two
destinations, delayed items, items with a short exptime moved to an
expire_to queue, and items aborted until they move to a dead-letter queue;
readers taking with plain gets (one at a time and pipelined), with
`/close/open`, with `/open` then `/close`, and one holding an item open the
whole cycle (so compaction moves it); an admin flushing and deleting a
queue and moving expired items.  Each cycle's cut is aimed at one phase
(PLANS): at a random moment, or at the Nth file-system operation of a kind
(pcfs's armed cut), or while a flush or delete is in flight; and every cut
is counted in each phase it found in progress (classify).

The verdicts (check): per acknowledged message copy (a fanout or alias set
has one copy per queue), found in the drain, taken by a reader whose reply
came, confirmed by an answered /close, flushed or deleted by an answered
request, or lost; how long before the cut each lost one was acknowledged;
phantoms (bodies never sent, or in a queue they were not sent to);
duplicates within a drain; per-producer order in the drained queues;
holes (a lost message followed by a surviving one of the same producer and
queue); confirms, removes, flushes and deletes undone.

Every wait is bounded; servers and pcfs are ended by PID; traffic stays on
127.0.0.1.
"""
import collections
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import threading
import time

from pcfs import REPO, Pcfs

MODES = ("always", "odsync", "interval", "none")
INTERVAL_MS = 100
SOCK_TIMEOUT = 5.0
START_TIMEOUT = 30.0
LISTEN_RE = re.compile(rb"ternd listening on (\S+):(\d+)\s*$")
VALUE_RE = re.compile(rb"VALUE (\S+) (\d+) (\d+)(?: (\d+))?\r\n")
BODY_RE = re.compile(rb"^(c\d+[A-Za-z0-9]+)\.(\d+)\.")

# The phases a cut is counted in (classify); PLANS aims cuts at each.
PHASES = (
    "group commit", "segment rotation", "spare and zeros", "checkpoint",
    "compaction", "reclaim", "queue create/delete", "fanout", "dead letter/expire",
    "delayed", "alias", "confirm", "flush/delete", "recovery at start",
)

# Queues whose drained items keep per-producer order (no aborts, delays or
# moves into them).
FIFO_QUEUES = ("qpipe", "qsingle", "fan", "fan+a", "fan+b", "al_a", "al_b", "qchurn")
# Where an item may move: expire_to and dead_letter.
MOVES = {"qexp": "qexpired", "qdl": "qdead"}
DESTS = {"fan": ("fan", "fan+a", "fan+b"), "al": ("al_a", "al_b")}


def tool(env, default):
    p = os.environ.get(env, default)
    return p if os.path.isabs(p) else os.path.join(REPO, p)


def write_conf(path, mode, prealloc, interval_ms=INTERVAL_MS):
    with open(path, "w") as f:
        f.write("[server]\nlisten = 127.0.0.1\nmax_queues = 1000\n")
        f.write("[journal]\nsync = %s\nsync_interval_ms = %d\npreallocate = %s\n"
                "segment_size = 64K\ncheckpoint_interval_ms = 200\n"
                % (mode, interval_ms, prealloc))
        f.write("[queues]\nmax_memory_size = 256K\n")
        f.write("[queue qdl]\nmax_deliveries = 2\ndead_letter = qdead\n")
        f.write("[queue qexp]\nexpire_to = qexpired\n")
        f.write("[alias al]\ndestinations = al_a, al_b\n")


class Ternd:
    """ternd on one data directory; stderr appended to a log file."""

    def __init__(self, conf, datadir, logpath):
        self.conf, self.datadir, self.logpath = conf, datadir, logpath
        self.proc = None
        self.port = None

    def start(self, timeout=START_TIMEOUT):
        """True once it listens; False if it exited or never listened."""
        err = open(self.logpath, "ab")
        start = self.log_start = err.tell()
        self.proc = subprocess.Popen(
            [tool("TERND", "build/ternd"), "-c", self.conf, "-p", "0", "-d", self.datadir],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        err.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.logpath, "rb") as f:
                f.seek(start)
                for line in f.read().splitlines():
                    m = LISTEN_RE.search(line)
                    if m:
                        self.port = int(m.group(2))
                        return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.01)
        self.kill()
        return False

    def log_since(self, nbytes=3000):
        """The end of what this ternd logged."""
        try:
            with open(self.logpath, "rb") as f:
                f.seek(getattr(self, "log_start", 0))
                return f.read()[-nbytes:].decode(errors="replace")
        except OSError:
            return ""

    def kill(self):
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        if self.proc:
            self.proc.wait(30)
        self.sanitized()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)
        self.sanitized()

    def sanitized(self):
        """Raises if a sanitizer (make SAN=1) reported anything."""
        text = self.log_since(1 << 20)
        if "Sanitizer" in text or "runtime error:" in text:
            raise AssertionError("sanitizer report in ternd's log:\n" + text[-4000:])


class Conn:
    """One memcache text connection with a read buffer."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=SOCK_TIMEOUT)
        self.s.settimeout(SOCK_TIMEOUT)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def _fill(self):
        data = self.s.recv(262144)
        if not data:
            raise ConnectionError("closed")
        self.buf += data

    def line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def value(self):
        """One get reply: the body, or None for END.  Raises on anything
        else (an error reply: the server failed or went away)."""
        while True:
            if self.buf.startswith(b"END\r\n"):
                self.buf = self.buf[5:]
                return None
            m = VALUE_RE.match(self.buf)
            if m:
                n = int(m.group(3))
                need = m.end() + n + 7
                if len(self.buf) >= need:
                    body = self.buf[m.end():m.end() + n]
                    if self.buf[m.end() + n:need] != b"\r\nEND\r\n":
                        raise ConnectionError("bad reply framing")
                    self.buf = self.buf[need:]
                    return body
            elif b"\r\n" in self.buf and not self.buf.startswith(b"VALUE"):
                raise ConnectionError("reply %r" % self.buf.split(b"\r\n", 1)[0])
            self._fill()

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


# ------------------------------------------------------------- workload

class Rec:
    """What the workload saw, with times (time.monotonic)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.sets = []         # [cid, seq, queue, body, t_send, t_ack, reply]
        self.taken = []        # (queue, body, t): plain get replies
        self.confirmed = []    # (queue, body, t): answered /close
        self.maybe = []        # (queue, body): a /close in flight at the cut
        self.get_inflight = collections.Counter()  # queue -> plain gets unanswered
        self.admin = []        # [kind, queue, t_send, t_reply]
        self.closes = []       # [t_send, t_reply] of every /close
        self.aborts = []       # [t_send, t_reply] of every abort
        self.delayed = []      # (t_ack, delay_s) of delayed sets


class Worker(threading.Thread):
    def __init__(self, wl, name):
        super().__init__(daemon=True, name=name)
        self.wl, self.rec = wl, wl.rec

    def run(self):
        try:
            self.work(Conn(self.wl.port))
        except (OSError, ConnectionError, ValueError):
            pass  # the cut: the server is gone

    def stopping(self):
        return self.wl.stop.is_set()


class Producer(Worker):
    def __init__(self, wl, cid, key, depth, rate, sizes, exptime=0, delay_ms=0):
        super().__init__(wl, cid)
        self.cid, self.key, self.depth, self.rate = cid, key, depth, rate
        self.sizes, self.exptime, self.delay_ms = sizes, exptime, delay_ms
        self.rng = random.Random(hash(cid) ^ wl.seed)

    def work(self, c):
        out = collections.deque()
        seq = 0
        t0 = time.monotonic()
        while not self.stopping():
            batch = []
            while len(out) < self.depth:
                head = b"%s.%d." % (self.cid.encode(), seq)
                size = max(len(head), self.rng.randint(*self.sizes))
                body = head + b"x" * (size - len(head))
                key = self.key + (b"/delay=%d" % self.delay_ms if self.delay_ms else b"")
                batch.append(b"set %s 0 %d %d\r\n%s\r\n" % (key, self.exptime, len(body), body))
                r = [self.cid, seq, self.key.decode(), body, time.monotonic(), None, None]
                with self.rec.lock:
                    self.rec.sets.append(r)
                out.append(r)
                seq += 1
            c.send(b"".join(batch))
            line = c.line()
            r = out.popleft()
            r[5], r[6] = time.monotonic(), line
            if self.delay_ms and line == b"STORED":
                with self.rec.lock:
                    self.rec.delayed.append((r[5], self.delay_ms / 1000.0))
            ahead = seq / self.rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(min(ahead, 0.05))


class PlainReader(Worker):
    """Plain gets, depth of them in flight."""

    def __init__(self, wl, queue, depth, pause=0.0):
        super().__init__(wl, "get " + queue)
        self.queue, self.depth, self.pause = queue, depth, pause

    def work(self, c):
        q = self.queue.encode()
        inflight = 0
        try:
            while not self.stopping():
                while inflight < self.depth:
                    c.send(b"get %s/t=20\r\n" % q)
                    inflight += 1
                body = c.value()
                inflight -= 1
                if body is not None:
                    with self.rec.lock:
                        self.rec.taken.append((self.queue, body, time.monotonic()))
                elif self.pause:
                    time.sleep(self.pause)
        finally:
            with self.rec.lock:
                self.rec.get_inflight[self.queue] += inflight


class CloseOpenReader(Worker):
    """`get q/close/open`: confirms the item it holds and opens the next."""

    def __init__(self, wl, queue, pause=0.0):
        super().__init__(wl, "close/open " + queue)
        self.queue, self.pause = queue, pause

    def work(self, c):
        q = self.queue.encode()
        held = None
        t = None
        try:
            c.send(b"get %s/open\r\n" % q)
            held = c.value()
            while not self.stopping():
                t = [time.monotonic(), None]
                with self.rec.lock:
                    self.rec.closes.append(t)
                c.send(b"get %s/close/open/t=20\r\n" % q)
                body = c.value()
                t[1] = time.monotonic()
                with self.rec.lock:
                    if held is not None:
                        self.rec.confirmed.append((self.queue, held, t[1]))
                held = body
                t = None
                if body is None and self.pause:
                    time.sleep(self.pause)
        finally:
            if t is not None and held is not None:
                with self.rec.lock:
                    self.rec.maybe.append((self.queue, held))


class OpenCloseReader(Worker):
    """`get q/open`, then `get q/close` once the reply came."""

    def __init__(self, wl, queue):
        super().__init__(wl, "open+close " + queue)
        self.queue = queue

    def work(self, c):
        q = self.queue.encode()
        held = None
        t = None
        try:
            while not self.stopping():
                c.send(b"get %s/open/t=20\r\n" % q)
                held = c.value()
                if held is None:
                    continue
                t = [time.monotonic(), None]
                with self.rec.lock:
                    self.rec.closes.append(t)
                c.send(b"get %s/close\r\n" % q)
                if c.value() is not None:
                    raise ConnectionError("close returned an item")
                t[1] = time.monotonic()
                with self.rec.lock:
                    self.rec.confirmed.append((self.queue, held, t[1]))
                held = t = None
        finally:
            if t is not None and held is not None:
                with self.rec.lock:
                    self.rec.maybe.append((self.queue, held))


class Aborter(Worker):
    """Opens and aborts items until they reach max_deliveries and move to
    the dead-letter queue."""

    def __init__(self, wl, queue):
        super().__init__(wl, "abort " + queue)
        self.queue = queue

    def work(self, c):
        q = self.queue.encode()
        while not self.stopping():
            c.send(b"get %s/open/t=20\r\n" % q)
            if c.value() is None:
                continue
            t = [time.monotonic(), None]
            with self.rec.lock:
                self.rec.aborts.append(t)
            c.send(b"get %s/abort\r\n" % q)
            c.value()
            t[1] = time.monotonic()


class Holder(Worker):
    """Holds one item open all cycle: its segment gets compacted."""

    def __init__(self, wl, queue):
        super().__init__(wl, "hold " + queue)
        self.queue = queue

    def work(self, c):
        c.send(b"get %s/open\r\n" % self.queue.encode())
        c.value()
        while not self.stopping():
            time.sleep(0.02)


class Admin(Worker):
    """Flushes and deletes qchurn, moves qexp's expired items, now and then;
    Workload.admin_want makes it act at once (a cut aimed at it)."""

    def __init__(self, wl):
        super().__init__(wl, "admin")
        self.rng = random.Random(wl.seed * 7 + 1)

    def do(self, c, kind, queue):
        r = [kind, queue, time.monotonic(), None]
        with self.rec.lock:
            self.rec.admin.append(r)
        cmd = {"flush": b"flush %s\r\n", "delete": b"delete %s\r\n",
               "flush_expired": b"flush_expired %s\r\n"}[kind] % queue.encode()
        c.send(cmd)
        self.wl.admin_sent(kind, r)
        line = c.line()
        if kind == "flush" and line not in (b"END", b"OK"):
            raise ConnectionError("flush: %r" % line)
        if kind == "delete" and line not in (b"DELETED", b"NOT_FOUND"):
            raise ConnectionError("delete: %r" % line)
        r[3] = time.monotonic()

    def work(self, c):
        nxt = time.monotonic() + self.rng.uniform(0.05, 0.3)
        while not self.stopping():
            kind = self.wl.admin_take()
            if kind is None and time.monotonic() < nxt:
                time.sleep(0.005)
                continue
            if kind is None:
                kind = self.rng.choice(("flush", "delete", "flush_expired", "flush_expired"))
                nxt = time.monotonic() + self.rng.uniform(0.1, 0.4)
            self.do(c, kind, "qexp" if kind == "flush_expired" else "qchurn")


class Workload:
    def __init__(self, port, cycle, seed):
        self.port, self.cycle, self.seed = port, cycle, seed
        self.rec = Rec()
        self.stop = threading.Event()
        self.workers = []
        self.admin_lock = threading.Lock()
        self.admin_want = None
        self.admin_hook = None

    def admin_take(self):
        with self.admin_lock:
            k, self.admin_want = self.admin_want, None
            return k

    def admin_sent(self, kind, r):
        hook = self.admin_hook
        if hook:
            hook(kind, r)

    def prepare(self):
        """The fanout children exist before any set to their parent."""
        c = Conn(self.port)
        try:
            for q in (b"fan+a", b"fan+b"):
                c.send(b"get %s/peek\r\n" % q)  # (a get of a new name makes it)
                c.value()
        finally:
            c.close()

    def start(self):
        p = "c%d" % self.cycle
        small, mixed = (100, 600), (100, 9000)
        self.workers = [
            Producer(self, p + "P1", b"qpipe", 16, 1500, mixed),
            Producer(self, p + "P2", b"qpipe", 1, 300, small),
            Producer(self, p + "P3", b"qsingle", 1, 400, small),
            Producer(self, p + "F", b"fan", 4, 300, small),
            Producer(self, p + "A", b"al", 2, 300, small),
            Producer(self, p + "D", b"qdelay", 2, 150, small, delay_ms=150),
            Producer(self, p + "E", b"qexp", 2, 150, small, exptime=1),
            Producer(self, p + "L", b"qdl", 1, 100, small),
            Producer(self, p + "C", b"qchurn", 8, 800, small),
            CloseOpenReader(self, "qpipe"),
            PlainReader(self, "qsingle", 1),
            PlainReader(self, "al_a", 4),
            PlainReader(self, "qdelay", 1),
            PlainReader(self, "qchurn", 2),
            OpenCloseReader(self, "fan+a"),
            CloseOpenReader(self, "fan", pause=0.01),
            Aborter(self, "qdl"),
            Holder(self, "qpipe"),
            Admin(self),
        ]
        for w in self.workers:
            w.start()

    def end(self):
        self.stop.set()
        for w in self.workers:
            w.join(SOCK_TIMEOUT + 5)


# ---------------------------------------------------------------- check

def queue_stats(c):
    """{queue: {counter: value}} from `stats`."""
    c.send(b"stats\r\n")
    names, vals = set(), {}
    while True:
        line = c.line()
        if line == b"END":
            break
        parts = line.split(b" ")
        if len(parts) == 3 and parts[1].startswith(b"queue_"):
            key = parts[1][6:].decode()
            vals[key] = parts[2]
            if key.endswith("_total_items"):
                names.add(key[:-len("_total_items")])
    out = {}
    for q in names:
        out[q] = {k[len(q) + 1:]: v for k, v in vals.items() if k.startswith(q + "_")}
    return out


def drain(port, deadline_s=20.0):
    """Every queue's items in order ({queue: [body, ...]}), waiting for
    delayed ones to come due."""
    c = Conn(port)
    got = {}
    deadline = time.monotonic() + deadline_s
    try:
        while True:
            # (a drain may make queues: an expired item moves to expire_to)
            names = sorted(set(queue_stats(c)) - set(got), key=lambda q: (q in MOVES.values(), q))
            if not names:
                break
            drain_queues(c, names, got, deadline)
    finally:
        c.close()
    return got


def drain_queues(c, names, got, deadline):
    if True:
        for q in names:
            items = got.setdefault(q, [])
            while time.monotonic() < deadline:
                c.send(b"get %s\r\nget %s\r\nget %s\r\nget %s\r\n" % ((q.encode(),) * 4))
                ends = 0
                for _ in range(4):
                    body = c.value()
                    if body is None:
                        ends += 1
                    else:
                        items.append(body)
                if ends == 4:
                    st = queue_stats(c).get(q, {})
                    if int(st.get("delayed_items", b"0")) == 0 and \
                            int(st.get("items", b"0")) == 0:
                        break
                    time.sleep(0.02)
            else:
                raise RuntimeError("drain of %s did not end" % q)


def dests(queue):
    return DESTS.get(queue, (queue,))


def move_places(queue):
    """Where an item of queue may be: the queue itself, and the other end
    of a move (expire_to, dead_letter) in either direction (an item drained
    from a target may still sit in its source on the image: the check's
    drain moved it on a copy)."""
    return [queue] + [t for s, t in MOVES.items() if s == queue] + \
        [s for s, t in MOVES.items() if t == queue]


class Verdict:
    """The figures of one cut (check), added up per mode (add)."""
    FIELDS = ("acknowledged", "lost", "lost_carried", "lost_moved", "phantoms", "drain_duplicates",
              "disorder", "holes", "confirm_undone", "remove_undone", "flush_undone",
              "flush_undone_late", "delete_undone", "move_duplicates", "excused_inflight",
              "lost_synced")

    def __init__(self):
        for f in self.FIELDS:
            setattr(self, f, 0)
        self.window = 0.0        # largest t_cut - t_ack of a lost copy
        self.notes = []

    def note(self, msg):
        if len(self.notes) < 20:
            self.notes.append(msg)


# In `interval`, a loss older than this plus sync_interval_ms means the
# syncer stopped: a sync running that long is beyond any load seen here.
STALL_S = 5.0


def synced_twice_after(synced, q, t):
    """Whether queue q's newest segment file was synced before time t and
    twice after it: a write acknowledged at t went into that file (synced
    before t, it existed then), or into an older one, which the writer
    synced before it wrote into the newer; and the second of those syncs
    began after the first ended, so after t, and covered every write made
    to the file before t."""
    part = "/queues/%s/" % q
    segs = sorted(p for p in synced if part in p and re.search(r"/[0-9]+\.seg$", p))
    if not segs:
        return False
    first, prev, _ = synced[segs[-1]]
    return first < t < prev


def check(rec, carried, drained, t_cut, known, mode, interval_ms=INTERVAL_MS, synced=None):
    """The verdict of one cut.  rec: the cycle's Rec; carried: {queue:
    [body]} present when the cycle began (the last drain); drained: {queue:
    [body]} after the cut; known: {body: (cid, seq, queue)} of every set
    ever sent; synced: pcfs's last two fsyncs of each file ({path: (t,
    t)})."""
    v = Verdict()
    synced = synced or {}
    found = collections.Counter()
    for q, bodies in drained.items():
        for b in bodies:
            found[(q, b)] += 1
    taken = {(q, b) for q, b, _ in rec.taken}
    confirmed = {(q, b) for q, b, _ in rec.confirmed}
    maybe = set(rec.maybe)
    # copies expected: (queue, body, t_send, t_ack); carried ones first
    expect = []
    for q, bodies in carried.items():
        for b in bodies:
            expect.append((q, b, float("-inf"), float("-inf")))
    for cid, seq, key, body, ts, ta, reply in rec.sets:
        # (ternd outlives the cut by a moment here, killed right after it;
        # a real power cut leaves no reply after it)
        if reply == b"STORED" and ta <= t_cut:
            v.acknowledged += 1
            for q in dests(key):
                expect.append((q, body, ts, ta))
    admin = collections.defaultdict(list)
    for kind, q, ts, tr in rec.admin:
        if kind in ("flush", "delete"):
            admin[q].append((kind, ts, tr))
    inflight = collections.Counter(rec.get_inflight)
    status = {}
    for q, b, ts, ta in sorted(expect, key=lambda e: e[3]):
        places = move_places(q)
        here = [p for p in places if found[(p, b)]]
        gone_by = None   # an answered flush or delete sent after its ack
        maybe_gone = False
        for kind, fts, ftr in admin.get(q, ()):
            if ta < fts and ftr is not None:
                gone_by = (kind, ftr)
            elif ftr is None or not ts > ftr:
                maybe_gone = True
        if here:
            status[(q, b)] = "found"
            if len(here) > 1:
                v.move_duplicates += 1
            if (q, b) in confirmed:
                v.confirm_undone += 1
            elif (q, b) in taken:
                v.remove_undone += 1
            elif gone_by:
                kind, ftr = gone_by
                if kind == "delete":
                    v.delete_undone += 1
                    v.note("deleted %s came back: %r" % (q, b[:40]))
                else:
                    v.flush_undone += 1
                    if synced_twice_after(synced, q, ftr) or \
                            t_cut - ftr > STALL_S + interval_ms / 1000.0:
                        v.flush_undone_late += 1
                        v.note("flushed %.0f ms before the cut, %s came back: %r"
                               % ((t_cut - ftr) * 1000, q, b[:40]))
            continue
        if (q, b) in taken or (q, b) in confirmed or (q, b) in maybe or gone_by or maybe_gone:
            status[(q, b)] = "accounted"
            continue
        if inflight[q] > 0:
            # a get in flight at the cut may have taken it (the head)
            inflight[q] -= 1
            v.excused_inflight += 1
            status[(q, b)] = "accounted"
            continue
        status[(q, b)] = "lost"
        if len(places) > 1:
            # an expired or dead-lettered item: its move is written after
            # its set, and in none and interval the source's remove can be
            # durable (a checkpoint) before the target's copy is synced
            v.lost_moved += 1
            v.note("lost in a move: %s %r" % (q, b[:40]))
        elif ta == float("-inf"):
            v.lost_carried += 1
            v.note("lost a message present before the cycle: %s %r" % (q, b[:40]))
        else:
            v.lost += 1
            age = t_cut - ta
            v.window = max(v.window, age)
            if synced_twice_after(synced, q, ta):
                # (a record of it is in one of the queue's files: lost
                # although that file was synced after its write, unless it
                # lived in another file whose syncs all came before)
                v.lost_synced += 1
            if len(v.notes) < 20:
                v.note("lost %s %r, acknowledged %.1f ms before the cut"
                       % (q, b[:40], age * 1000))
    # phantoms and duplicates in the drain
    for q, bodies in drained.items():
        seen = set()
        for b in bodies:
            k = known.get(b)
            if k is None:
                v.phantoms += 1
                v.note("phantom in %s: %r" % (q, b[:40]))
            elif q not in dests(k[2]) and not (q in MOVES.values() and
                                               any(MOVES.get(d) == q for d in dests(k[2]))):
                v.phantoms += 1
                v.note("%r, set to %s, found in %s" % (b[:40], k[2], q))
            if b in seen and q in MOVES.values():
                # moved twice: a cut undid the remove in the source after
                # the copy in the target was durable, and it moved again
                v.move_duplicates += 1
            elif b in seen:
                v.drain_duplicates += 1
                v.note("twice in the drain of %s: %r" % (q, b[:40]))
            seen.add(b)
    # per-producer order (of what was not delivered before: a redelivery,
    # after a confirm or remove undone, comes back behind an item that was
    # open at the cut)
    for q in FIFO_QUEUES:
        last = {}
        for b in drained.get(q, ()):
            k = known.get(b)
            if not k or (q, b) in taken or (q, b) in confirmed or (q, b) in maybe:
                continue
            cid, seq = k[0], k[1]
            if cid in last and seq < last[cid]:
                v.disorder += 1
                v.note("out of order in %s: %s %d after %d" % (q, cid, seq, last[cid]))
            last[cid] = max(seq, last.get(cid, -1))
    # holes: a lost copy followed by a found one of the same producer and queue
    runs = collections.defaultdict(list)
    for cid, seq, key, body, ts, ta, reply in rec.sets:
        if reply == b"STORED" and ta <= t_cut:
            for q in dests(key):
                if len(move_places(q)) == 1:
                    runs[(cid, q)].append((seq, status.get((q, body))))
    for (cid, q), items in runs.items():
        lost_before = False
        for seq, st in sorted(items):
            if st == "lost":
                lost_before = True
            elif st == "found" and lost_before:
                v.holes += 1
                v.note("hole in %s: %s %d survived after a lost one" % (q, cid, seq))
                break
    return v


# -------------------------------------------------- phases and plans

SEG_RE = re.compile(r"/\d{8}\.seg$")


def moved_in_flight(image):
    """Whether the image holds a compaction copy whose original's segment
    is still there (the cut fell between a relocation and the reclaim of
    the segment it emptied)."""
    r = subprocess.run([tool("TERN_JOURNAL", "build/tern-journal"), "dump", image],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=60)
    segs, moved = collections.defaultdict(set), []
    q = None
    for line in r.stdout.decode(errors="replace").splitlines():
        m = re.match(r"queue (\S+): ", line)
        if m:
            q = m.group(1)
            continue
        m = re.match(r"\s+segment (\d+): ", line)
        if m and q:
            segs[q].add(int(m.group(1)))
            continue
        m = re.search(r"moved-from=(\d+):", line)
        if m and q:
            moved.append((q, int(m.group(1))))
    return any(s in segs[q] for q, s in moved)


def classify(st, rec, t_cut, before_work, image):
    """The phases the cut found in progress."""
    ph = set()
    if before_work:
        ph.add("recovery at start")
    for op, t, zeros, path in st.recent:
        if t < t_cut - 0.03:
            continue
        seg = SEG_RE.search(path)
        if op in ("write", "fsync") and seg and not zeros and ">" not in path:
            ph.add("group commit")
        if (op == "rename" and "spare.seg>" in path) or \
                (op == "fsyncdir" and "/queues/" in path):
            ph.add("segment rotation")
        if ("spare.seg" in path and op in ("write", "fallocate", "truncate", "fsync")) or \
                (op == "write" and seg and zeros):
            ph.add("spare and zeros")
        if "data.mdb" in path and op in ("write", "fsync"):
            ph.add("checkpoint")
        if (op == "rename" and path.endswith("spare.seg") and ".seg>" in path and
                "spare.seg>" not in path) or (op in ("unlink", "truncate") and seg):
            ph.add("reclaim")
        if op in ("mkdir", "rmdir") and path.startswith("/queues/") or \
                (op == "unlink" and path.startswith("/queues/qchurn/")):
            ph.add("queue create/delete")
        if "/qdead/" in path or "/qexpired/" in path:
            ph.add("dead letter/expire")

    def inflight(ts, tr):
        return ts <= t_cut and (tr is None or tr >= t_cut)

    for cid, seq, key, body, ts, ta, reply in rec.sets:
        if not inflight(ts, ta):
            continue
        if key == "fan":
            ph.add("fanout")
        elif key == "al":
            ph.add("alias")
        elif key == "qdelay":
            ph.add("delayed")
    if any(t_cut - 0.05 <= ta + d <= t_cut for ta, d in rec.delayed):
        ph.add("delayed")
    if any(inflight(ts, tr) for ts, tr in rec.closes):
        ph.add("confirm")
    if any(inflight(ts, tr) for ts, tr in rec.aborts):
        ph.add("dead letter/expire")
    for kind, q, ts, tr in rec.admin:
        if inflight(ts, tr) or (tr is not None and t_cut - 0.02 <= tr <= t_cut):
            ph.add("dead letter/expire" if kind == "flush_expired" else "flush/delete")
    if image and moved_in_flight(image):
        ph.add("compaction")
    return ph


# (kind, when, op, path pattern): where each cycle's cut is aimed, in turn
PLANS = (
    ("random",),
    ("arm", "after", "fsync", ".seg"),
    ("arm", "before", "fsync", ".seg"),
    ("arm", "after", "write", ".seg"),
    ("arm", "after", "rename", "spare.seg>"),
    ("arm", "before", "fsyncdir", "/queues/"),
    ("arm", "after", "write", "spare.seg"),
    ("arm", "after", "fallocate", ""),
    ("arm", "after", "write", "data.mdb"),
    ("arm", "before", "fsync", "data.mdb"),
    ("arm", "after", "rename", "spare.seg$"),
    ("arm", "after", "unlink", ".seg"),
    ("arm", "after", "truncate", ".seg"),
    ("arm", "after", "mkdir", "/queues/"),
    ("arm", "after", "rmdir", "/queues/"),
    ("arm", "after", "unlink", "/qchurn/"),
    ("admin", "flush"),
    ("admin", "delete"),
    ("start", "after", "fsync", "data.mdb"),
    ("start", "after", "fsyncdir", ""),
    ("random",),
)

# Each run of cycles on one directory (an epoch) takes the next of these:
# (file-system rule, tear probability, preallocate).
EPOCHS = (
    ("posix", 0.0, "auto"),
    ("linux", 0.0, "auto"),
    ("posix", 0.5, "auto"),
    ("linux", 0.5, "zero"),
    ("posix", 0.0, "zero"),
    ("posix", 0.5, "none"),
    ("linux", 0.0, "fallocate"),
)


# ------------------------------------------------------------------ runs

class ModeRun:
    """Cycles of one sync mode; figures in self.result."""

    def __init__(self, mode, work, seed, epoch_cycles=5, artifacts=None, log=None,
                 epochs=EPOCHS, interval_ms=INTERVAL_MS, plan_offset=0):
        self.mode, self.work, self.seed = mode, work, seed
        self.plan_offset = plan_offset  # (runs of several modes share the plans out)
        self.epochs = epochs
        self.interval_ms = interval_ms
        self.epoch_cycles = epoch_cycles
        self.artifacts = artifacts
        self.log = log or (lambda msg: None)
        self.rng = random.Random(seed)
        self.total = Verdict()
        self.phases = collections.Counter()
        self.verify = collections.Counter()
        self.restart_failures = 0
        self.cuts = 0
        self.cycle = 0
        self.failures = []     # (cycle, what) of every failed verdict
        self.windows = []      # per cut: the largest loss window (s)
        self.losses = []       # per cut: acknowledged copies lost
        self.epoch = -1
        self.fresh = True

    def _paths(self):
        w = self.work
        return (os.path.join(w, "image"), os.path.join(w, "mnt"), os.path.join(w, "check"),
                os.path.join(w, "ternd.conf"), os.path.join(w, "ternd.log"))

    def _new_epoch(self):
        image, mnt, check_dir, conf, _ = self._paths()
        self.epoch += 1
        self.rule, self.tear, self.prealloc = self.epochs[self.epoch % len(self.epochs)]
        for p in (image, image + ".pcfs", check_dir):
            shutil.rmtree(p, ignore_errors=True)
        os.makedirs(image)
        write_conf(conf, self.mode, self.prealloc, self.interval_ms)
        self.carried = {}
        self.known = {}
        self.n_in_epoch = 0

    def run_cycle(self):
        if self.fresh or self.n_in_epoch >= self.epoch_cycles:
            self._new_epoch()
            self.fresh = False
        image, mnt, check_dir, conf, tlog = self._paths()
        self.cycle += 1
        self.n_in_epoch += 1
        plan = PLANS[(self.cycle + self.plan_offset) % len(PLANS)]
        fs = Pcfs(image, mnt, self.rule, self.tear, self.rng.randrange(1, 1 << 30))
        fs.mount()
        srv = Ternd(conf, mnt, tlog)
        wl = None
        cut_evt = threading.Event()
        before_work = False
        try:
            if plan[0] == "start":
                fs.ctl("arm %s %s %d %s" % (plan[1], plan[2], self.rng.randint(1, 2), plan[3]))
            started = srv.start()
            if not started or fs.status().state == "cut":
                before_work = True
                if not fs.status().state == "cut":
                    raise RuntimeError("ternd did not start on pcfs: %s" % srv.log_since())
            else:
                wl = Workload(srv.port, self.cycle, self.rng.randrange(1 << 30))
                wl.prepare()
                self._aim(plan, fs, wl, cut_evt)
                wl.start()
                self._wait_cut(plan, fs, wl, cut_evt)
        except (OSError, ConnectionError, RuntimeError) as e:
            # (the harness's own trouble, not a verdict: say what ternd said)
            self.log("%s: cut %d: workload failed: %r; ternd's log: %s"
                     % (self.mode, self.cycle, e, srv.log_since(1500)))
            raise
        finally:
            try:
                if fs.status().state != "cut":
                    fs.cut()
                st = fs.status()
            finally:
                srv.kill()
                if wl:
                    wl.end()
                fs.unmount()
        self.cuts += 1
        rec = wl.rec if wl else Rec()
        for r in rec.sets:
            self.known[r[3]] = (r[0], r[1], r[2])
        return self._check(st, rec, before_work)

    def _aim(self, plan, fs, wl, cut_evt):
        self.cut_plan_at = time.monotonic() + self.rng.uniform(0.2, 1.0)
        self.arm_at = time.monotonic() + self.rng.uniform(0.1, 0.6)
        if plan[0] == "admin":
            on_reply = self.rng.random() < 0.5
            delay = self.rng.uniform(0, 0.002)

            def hook(kind, r, fs=fs, want=plan[1]):
                if kind != want or cut_evt.is_set():
                    return
                if on_reply:
                    deadline = time.monotonic() + 2
                    while r[3] is None and time.monotonic() < deadline:
                        time.sleep(0.0002)
                else:
                    time.sleep(delay)
                fs.cut()
                cut_evt.set()
            wl.admin_hook = hook

    def _wait_cut(self, plan, fs, wl, cut_evt):
        deadline = time.monotonic() + 2.0
        if plan[0] == "random":
            time.sleep(max(0, self.cut_plan_at - time.monotonic()))
            return
        if plan[0] == "arm":
            time.sleep(max(0, self.arm_at - time.monotonic()))
            fs.ctl("arm %s %s %d %s" % (plan[1], plan[2], self.rng.randint(1, 3), plan[3]))
            fs.wait_cut(max(0.1, deadline - time.monotonic()))
            return
        if plan[0] == "admin":
            time.sleep(max(0, self.arm_at - time.monotonic()))
            with wl.admin_lock:
                wl.admin_want = plan[1]  # the admin acts now; its hook cuts
            cut_evt.wait(max(0.1, deadline - time.monotonic()))
            return
        fs.wait_cut(max(0.1, deadline - time.monotonic()))

    def _check(self, st, rec, before_work):
        image, mnt, check_dir, conf, tlog = self._paths()
        t_cut = st.cut_at or time.monotonic()
        ph = classify(st, rec, t_cut, before_work, image)
        self.phases.update(ph)
        shutil.rmtree(check_dir, ignore_errors=True)
        shutil.copytree(image, check_dir, symlinks=True)
        r = subprocess.run([tool("TERN_JOURNAL", "build/tern-journal"), "verify", check_dir],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        self.verify[r.returncode] += 1
        if r.returncode not in (0, 1):
            self._fail("tern-journal verify exited %d: %s" % (
                r.returncode, r.stdout.decode(errors="replace")[-1500:]), image)
        srv = Ternd(conf, check_dir, tlog)
        drained = None
        try:
            if not srv.start():
                self.restart_failures += 1
                self._fail("ternd did not start on the image: %s" % srv.log_since(), image)
            else:
                try:
                    drained = drain(srv.port)
                except (OSError, ConnectionError, RuntimeError) as e:
                    self.restart_failures += 1
                    self._fail("drain failed: %s" % e, image)
        finally:
            srv.stop()
        if drained is None:
            self.fresh = True   # start afresh: the image is kept for a look
            return None
        v = check(rec, self.carried, drained, t_cut, self.known, self.mode, self.interval_ms,
                  st.synced)
        for b in (b for bodies in drained.values() for b in bodies):
            if b not in self.known:
                m = BODY_RE.match(b)
                if m:
                    self.known[b] = (m.group(1).decode(), int(m.group(2)), "?")
        self.carried = drained
        self._add(v)
        return v

    def _add(self, v):
        t = self.total
        for f in Verdict.FIELDS:
            setattr(t, f, getattr(t, f) + getattr(v, f))
        t.window = max(t.window, v.window)
        self.windows.append(v.window)
        self.losses.append(v.lost + v.lost_moved)
        bad = self.bad(v)
        if bad:
            self._fail("%s: %s" % (", ".join(bad), "; ".join(v.notes[:6])), None)

    def bad(self, v):
        """What in a cut's verdict breaks the mode's promise."""
        out = []
        if self.mode in ("always", "odsync"):
            if v.lost or v.lost_moved:
                out.append("%d acknowledged lost" % (v.lost + v.lost_moved))
            if v.flush_undone:
                out.append("%d flushed came back" % v.flush_undone)
        if self.mode == "interval":
            if v.lost_synced:
                out.append("%d lost although their queue's newest segment was synced after them"
                           % v.lost_synced)
            if v.window > STALL_S + self.interval_ms / 1000.0:
                out.append("a loss %.0f ms old" % (v.window * 1000))
            if v.flush_undone_late:
                out.append("%d flushed long before came back" % v.flush_undone_late)
        if self.mode == "none" and v.holes:
            out.append("%d holes" % v.holes)
        for f in ("lost_carried", "phantoms", "drain_duplicates", "disorder", "delete_undone"):
            if getattr(v, f):
                out.append("%d %s" % (getattr(v, f), f.replace("_", " ")))
        return out

    def _fail(self, what, image):
        self.failures.append((self.cycle, what))
        self.log("%s: cut %d (%s, tear %.1f, preallocate %s): %s" % (
            self.mode, self.cycle, self.rule, self.tear, self.prealloc, what))
        if image and self.artifacts and len(os.listdir(self.artifacts)) < 12:
            dst = os.path.join(self.artifacts, "%s-cut%d" % (self.mode, self.cycle))
            shutil.copytree(image, dst, symlinks=True, dirs_exist_ok=True)

    def result(self):
        t = self.total
        r = {f: getattr(t, f) for f in Verdict.FIELDS}
        r.update(mode=self.mode, cuts=self.cuts, window_ms=round(t.window * 1000, 1),
                 restart_failures=self.restart_failures,
                 verify={str(k): v for k, v in sorted(self.verify.items())},
                 phases={p: self.phases.get(p, 0) for p in PHASES},
                 failures=self.failures[:50], losses=self.losses,
                 windows_ms=[round(w * 1000, 1) for w in self.windows])
        return r


# ----------------------------------------------------- aimed scenarios

class Scenario:
    """ternd on pcfs in tmp, with a config of its own; cut() leaves the
    image in self.image, and restart() starts ternd on it directly."""

    def __init__(self, tmp, mode, rule="posix", tear=0.0, seed=1, prealloc="auto",
                 extra=""):
        self.tmp = str(tmp)
        self.image = os.path.join(self.tmp, "image")
        self.mnt = os.path.join(self.tmp, "mnt")
        self.conf = os.path.join(self.tmp, "ternd.conf")
        self.log = os.path.join(self.tmp, "ternd.log")
        self.mode, self.rule, self.tear, self.seed = mode, rule, tear, seed
        os.makedirs(self.image, exist_ok=True)
        write_conf(self.conf, mode, prealloc)
        if extra:
            with open(self.conf, "a") as f:
                f.write(extra)
        self.fs = self.srv = None

    def up(self):
        self.fs = Pcfs(self.image, self.mnt, self.rule, self.tear, self.seed)
        self.fs.mount()
        self.srv = Ternd(self.conf, self.mnt, self.log)
        assert self.srv.start(), self.srv.log_since()
        return Conn(self.srv.port)

    def cut(self):
        """Cuts the power now (if an armed cut has not), kills ternd."""
        try:
            if self.fs.status().state != "cut":
                self.fs.cut()
            st = self.fs.status()
        finally:
            self.srv.kill()
            self.fs.unmount()
        return st

    def restart(self):
        """ternd on the image, or None (with its log) when it does not start."""
        self.srv = Ternd(self.conf, self.image, self.log)
        if not self.srv.start():
            return None
        return self.srv

    def reboot(self):
        """After cut(): what a reboot finds.  tern-journal verify on the
        image must exit 0 or 1, and ternd must start on it: (ternd, what
        verify printed)."""
        rc, out = self.verify()
        assert rc in (0, 1), out
        assert self.restart(), "ternd did not start: %s" % self.srv.log_since()
        return self.srv, out

    def verify(self):
        r = subprocess.run([tool("TERN_JOURNAL", "build/tern-journal"), "verify",
                            self.image], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=60)
        return r.returncode, r.stdout.decode(errors="replace")

    def close(self):
        if self.srv:
            self.srv.stop()
        if self.fs:
            self.fs.unmount()


def set_items(c, queue, bodies):
    for b in bodies:
        c.send(b"set %s 0 0 %d\r\n%s\r\n" % (queue, len(b), b))
        assert c.line() == b"STORED"


def drain_one(srv, queue):
    return drain(srv.port).get(queue.decode(), [])
