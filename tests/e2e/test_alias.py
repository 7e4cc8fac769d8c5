"""
Aliases ([alias NAME] destinations = ...; Kestrel's alias): a set to the
alias puts a copy in every destination, compared byte for byte on all three
protocols and through pymemcache; the copies are journaled like any set (a
SIGKILL after STORED in sync = always loses none); a get of an alias is
refused; an alias may not be named like a queue; reload adds and changes
aliases; the destinations' statuses and limits apply.
"""
import signal
import subprocess

from conftest import SMALL_SEGMENTS, TIMEOUT, run_ternd
from test_binary import ERR, SETF, VAL, req, res
from test_protocol import END, SET, STORED, V, qstat, queue_names

ALIAS = SMALL_SEGMENTS + "[alias fan]\ndestinations = d1, d2 d3\n"
# every byte value, CR and LF included
BODY = bytes(range(256)) * 3 + b"\r\nEND\r\n"


def drain(c, q, n):
    """The n items of queue q, in order (each a get), then an empty get."""
    out = []
    for _ in range(n):
        c.send(b"get %s\r\n" % q.encode())
        v = c.read_values()
        assert len(v) == 1, v
        out.append(v[0])
    c.send(b"get %s\r\n" % q.encode())
    c.expect(END)
    return out


def test_set_copies_to_every_destination(ternd):
    s = ternd(conf=ALIAS)
    c = s.conn()
    c.send(b"set fan 77 0 %d\r\n" % len(BODY) + BODY + b"\r\n" + SET("fan", "second", flags=5))
    c.expect(STORED * 2)
    for q in ("d1", "d2", "d3"):
        c.send(b"gets %s\r\n" % q.encode())
        c.expect(b"VALUE %s 77 %d 1\r\n" % (q.encode(), len(BODY)) + BODY + b"\r\n" + END)
        c.send(b"get %s\r\nget %s\r\n" % (q.encode(), q.encode()))
        c.expect(V(q, "second", flags=5) + END + END)
    st = c.stats()
    assert queue_names(st) == {"d1", "d2", "d3"}  # no queue named fan
    for q in ("d1", "d2", "d3"):
        assert st["queue_%s_total_items" % q] == "2"


def test_binary_and_meta_sets(ternd):
    s = ternd(conf=ALIAS)
    b, c = s.conn(), s.conn()
    b.send(SETF("fan", BODY, flags=9, opaque=4) + req("NOOP", opaque=5))
    frame = b.read_exact(24)
    assert frame[6:8] == b"\x00\x00", frame  # status: success
    b.read_exact(int.from_bytes(frame[8:12], "big"))
    b.expect(res("NOOP", opaque=5))
    c.send(b"ms fan 3 F4\r\nabc\r\nmn\r\n")
    c.expect(b"HD\r\nMN\r\n")
    for q in ("d1", "d2", "d3"):
        b.send(req("GET", q, opaque=1))
        b.expect(VAL("GET", BODY, flags=9, cas=1, opaque=1))
        c.send(b"mg %s v f\r\n" % q.encode())
        c.expect(b"VA 3 f4\r\nabc\r\n")


def test_get_of_alias_refused(ternd):
    s = ternd(conf=ALIAS)
    c, b = s.conn(), s.conn()
    why = b"fan is an alias: it takes sets only"
    c.send(b"get fan\r\nget d1 fan\r\nget fan/t=1000\r\nmg fan v\r\nmonitor fan 1\r\n"
           b"get fan/peek\r\n")
    c.expect((b"CLIENT_ERROR " + why + b"\r\n") * 6)
    b.send(req("GET", "fan", opaque=3) + req("GETKQ", "fan", opaque=4) + req("NOOP", opaque=5))
    b.expect(ERR("GET", 0x04, why, 3) + ERR("GETKQ", 0x04, why, 4) + res("NOOP", opaque=5))
    # nothing was made by the gets, a wait included
    assert queue_names(c.stats()) == set()


def test_copies_survive_kill(ternd):
    conf = ALIAS + "[queue d1]\nsync = always\n[queue d2]\nsync = none\n[queue d3]\nsync = odsync\n"
    s = ternd(conf=conf)
    c = s.conn()
    bodies = [(b"%d:" % i) + BODY[: i * 7] for i in range(40)]
    for i, body in enumerate(bodies):
        c.send(b"set fan %d 0 %d\r\n" % (i, len(body)) + body + b"\r\n")
    c.expect(STORED * len(bodies))
    c.close()
    s.expect_exit(-signal.SIGKILL)
    s.kill()
    s = ternd(conf=conf, datadir=s.datadir)
    c = s.conn()
    for q in ("d1", "d2", "d3"):
        got = drain(c, q, len(bodies))
        assert got == [(q, i, body) for i, body in enumerate(bodies)], q


def test_full_destination_skips_its_copy(ternd):
    conf = ALIAS + "[queue d2]\nmax_items = 1\n"
    s = ternd(conf=conf)
    c = s.conn()
    c.send(SET("fan", "a") + SET("fan", "b"))
    c.expect(STORED * 2)
    c.send(b"get d1\r\nget d1\r\nget d2\r\nget d2\r\nget d3\r\nget d3\r\n")
    c.expect(V("d1", "a") + END + V("d1", "b") + END + V("d2", "a") + END + END
             + V("d3", "a") + END + V("d3", "b") + END)
    # NOT_STORED only when no destination took it
    conf = SMALL_SEGMENTS + "[alias two]\ndestinations = e1 e2\n[queues]\nmax_items = 1\n"
    s = ternd(conf=conf)
    c = s.conn()
    c.send(SET("two", "1") + SET("two", "2") + b"add two 0 0 1\r\n3\r\n")
    c.expect(STORED + b"NOT_STORED\r\n" * 2)


def test_destination_status_refuses_whole_set(ternd):
    s = ternd(conf=ALIAS)
    c = s.conn()
    c.send(SET("fan", "a"))
    c.expect(STORED)
    c.send(b"status queue d2 READONLY\r\n" + SET("fan", "b") + b"get d1\r\nget d1\r\n")
    c.expect(b"END\r\nSERVER_ERROR queue d2 is READONLY\r\n" + V("d1", "a") + END + END)
    c.send(b"status queue d2 UP\r\nstatus READONLY\r\n" + SET("fan", "c"))
    c.expect(b"END\r\nEND\r\nSERVER_ERROR server is READONLY\r\n")
    assert qstat(c, "d3", "total_items") == 1


def test_alias_may_not_be_a_queue(ternd, tmp_path):
    # in the file
    conf = tmp_path / "both.conf"
    conf.write_text("[queue x]\n[alias x]\ndestinations = y\n")
    rc, _, err = run_ternd(["-c", str(conf), "-p", "0", "-d", str(tmp_path / "d0")])
    assert rc != 0 and b"'x' is both an [alias] and a [queue] section" in err, err
    for text, why in (("[alias a]\n", b"[alias a] has no destinations"),
                      ("[alias a]\ndestinations = a\n", b"[alias a] names itself"),
                      ("[alias a]\ndestinations = b\n[alias b]\ndestinations = c\n",
                       b"[alias a] destination 'b' is an alias"),
                      ("[alias a]\ndestinations = b b\n", b"destination 'b' given twice"),
                      ("[alias a]\ndestinations = ../b\n", b"bad destination queue name"),
                      ("[alias a]\nqueues = b\n", b"unknown key 'queues' in [alias a]")):
        conf.write_text(text)
        rc, _, err = run_ternd(["-c", str(conf), "--dump-config"])
        assert rc != 0 and why in err, (text, err)
    # against the queues of the data directory, at a reload ...
    s = ternd(conf=SMALL_SEGMENTS)
    c = s.conn()
    c.send(SET("taken", "v"))
    c.expect(STORED)
    s.write_conf(SMALL_SEGMENTS + "[alias taken]\ndestinations = other\n")
    c.send(b"reload\r\n")
    line = c.readline()
    assert line.startswith(b"SERVER_ERROR reload failed: [alias taken]: a queue of that "
                           b"name exists"), line
    c.send(b"get taken\r\n")
    c.expect(V("taken", "v") + END)
    # ... and at start
    c.close()
    s.expect_exit(0)
    s.signal(signal.SIGTERM)
    assert s.wait(TIMEOUT) == 0
    rc, _, err = run_ternd(["-c", s.conf_path, "-p", "0", "-d", s.datadir])
    assert rc != 0 and b"[alias taken]: a queue of that name exists" in err, err


def test_reload_adds_and_changes_aliases(ternd):
    s = ternd(conf=SMALL_SEGMENTS)
    c = s.conn()
    c.send(SET("later", "plain"))
    c.expect(STORED)
    c.send(b"get later\r\n")
    c.expect(V("later", "plain") + END)
    c.send(b"delete later\r\n")
    c.expect(b"DELETED\r\n")
    s.write_conf(SMALL_SEGMENTS + "[alias later]\ndestinations = p q\n")
    c.send(b"reload\r\n" + SET("later", "1"))
    c.expect(b"OK\r\n" + STORED)
    s.write_conf(SMALL_SEGMENTS + "[alias later]\ndestinations = q r\n")
    c.send(b"reload\r\n" + SET("later", "2"))
    c.expect(b"OK\r\n" + STORED)
    c.send(b"get p\r\nget p\r\nget q\r\nget q\r\nget r\r\nget r\r\n")
    c.expect(V("p", "1") + END + END + V("q", "1") + END + V("q", "2") + END + V("r", "2")
             + END + END)
    # removed: the name is an ordinary queue name again
    s.write_conf(SMALL_SEGMENTS)
    c.send(b"reload\r\n" + SET("later", "3") + b"get later\r\n")
    c.expect(b"OK\r\n" + STORED + V("later", "3") + END)


def test_alias_destinations_with_auto_create_off(ternd):
    s = ternd(conf=ALIAS + "[server]\nauto_create = no\n")
    c = s.conn()
    c.send(SET("fan", "v") + SET("d9", "v") + b"get d2\r\n")
    c.expect(STORED + b"CLIENT_ERROR no such queue and auto_create is off\r\n" + V("d2", "v") + END)


PYMEMCACHE = r"""
import sys
from pymemcache.client.base import Client
c = Client(("127.0.0.1", int(sys.argv[1])), timeout=20)
body = bytes(range(256)) * 4
assert c.set("fan", body) is True
for q in ("d1", "d2", "d3"):
    got = c.get(q)
    assert got == body, (q, got[:20])
try:
    c.get("fan")
except Exception as e:  # pymemcache raises on CLIENT_ERROR
    print("get fan:", type(e).__name__, e)
else:
    raise SystemExit("a get of the alias was not refused")
print("ok")
"""


def test_pymemcache_client(ternd):
    s = ternd(conf=ALIAS)
    r = subprocess.run(["/usr/bin/python3", "-c", PYMEMCACHE, str(s.port)],
                       capture_output=True, timeout=TIMEOUT * 3)
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode()
    assert "get fan: MemcacheClientError" in out and "fan is an alias: it takes sets only" in out, out
    assert out.endswith("ok\n"), out
