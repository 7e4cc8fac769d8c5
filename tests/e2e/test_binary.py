"""
memcached's binary protocol against a real ternd: frames built with struct,
replies compared byte for byte (header fields, extras, key, value).  A
connection whose first byte is 0x80 speaks binary for its whole life.

Queue semantics are those of the text protocol: GET dequeues (options in
the key), SET enqueues, the cas of a value is the item's id, /open items
belong to the connection, /t= blocks, quiet opcodes answer only failures
(and a quiet get only a hit), so a NOOP after them marks the end.
"""
import socket
import struct
import time

import pytest

from conftest import TIMEOUT, Closed, Conn, wait_until

HDR = struct.Struct(">BBHBBHIIQ")

OP = dict(GET=0x00, SET=0x01, ADD=0x02, REPLACE=0x03, DELETE=0x04, INCREMENT=0x05,
          DECREMENT=0x06, QUIT=0x07, FLUSH=0x08, GETQ=0x09, NOOP=0x0a, VERSION=0x0b,
          GETK=0x0c, GETKQ=0x0d, APPEND=0x0e, PREPEND=0x0f, STAT=0x10, SETQ=0x11,
          ADDQ=0x12, DELETEQ=0x14, QUITQ=0x17, FLUSHQ=0x18, APPENDQ=0x19,
          VERBOSITY=0x1b, TOUCH=0x1c, GAT=0x1d, GATQ=0x1e)
SUCCESS, ENOENT, EEXISTS, E2BIG, EINVAL, NOT_STORED = 0x00, 0x01, 0x02, 0x03, 0x04, 0x05
UNKNOWN, NOT_SUPPORTED = 0x81, 0x83


def req(op, key=b"", extras=b"", value=b"", opaque=0, cas=0, bodylen=None, magic=0x80):
    """A request frame; bodylen overrides the computed length."""
    if isinstance(key, str):
        key = key.encode()
    if isinstance(value, str):
        value = value.encode()
    if isinstance(op, str):
        op = OP[op]
    bl = len(extras) + len(key) + len(value) if bodylen is None else bodylen
    return HDR.pack(magic, op, len(key), len(extras), 0, 0, bl, opaque, cas) + extras + key + value


def SETF(key, value, flags=0, exptime=0, opaque=0, op="SET", cas=0):
    return req(op, key, struct.pack(">II", flags, exptime), value, opaque, cas)


def res(op, status=SUCCESS, key=b"", extras=b"", value=b"", opaque=0, cas=0):
    """The exact bytes of a response."""
    if isinstance(key, str):
        key = key.encode()
    if isinstance(value, str):
        value = value.encode()
    if isinstance(op, str):
        op = OP[op]
    return HDR.pack(0x81, op, len(key), len(extras), 0, status,
                    len(extras) + len(key) + len(value), opaque, cas) + extras + key + value


def VAL(op, value, flags=0, cas=1, key=b"", opaque=0):
    """A get hit: flags in the extras, the key for GETK/GETKQ."""
    return res(op, SUCCESS, key, struct.pack(">I", flags), value, opaque, cas)


def ERR(op, status, text, opaque=0, key=b""):
    return res(op, status, key, b"", text, opaque)


def read_frame(c):
    """One response as a dict."""
    h = c.read_exact(24)
    magic, op, kl, el, dt, st, bl, opq, cas = HDR.unpack(h)
    assert magic == 0x81 and dt == 0, h
    body = c.read_exact(bl)
    return dict(op=op, status=st, opaque=opq, cas=cas, extras=body[:el],
                key=body[el:el + kl], value=body[el + kl:])


@pytest.fixture
def b(server):
    return server.conn()


def test_get_miss_forms(b):
    # GET: "Not found"; GETK: the key, no text; quiet gets: nothing; NOOP
    # marks the end.  Every reply carries its request's opaque.
    b.send(req("GET", "nq", opaque=1) + req("GETK", "nq/t=0", opaque=2) + req("GETQ", "nq", opaque=3)
           + req("GETKQ", "nq", opaque=4) + req("NOOP", opaque=5))
    b.expect(ERR("GET", ENOENT, "Not found", 1) + res("GETK", ENOENT, "nq/t=0", opaque=2)
             + res("NOOP", opaque=5))


def test_set_get_exact(b):
    b.send(SETF("q", "hello", flags=7, opaque=9))
    b.expect(res("SET", opaque=9, cas=1))
    b.send(SETF("q", "world", flags=0xffffffff, op="SETQ", opaque=10) + req("NOOP", opaque=11))
    b.expect(res("NOOP", opaque=11))
    b.send(req("GET", "q", opaque=12) + req("GETK", "q", opaque=13) + req("GET", "q", opaque=14))
    b.expect(VAL("GET", "hello", 7, cas=1, opaque=12)
             + VAL("GETK", "world", 0xffffffff, cas=2, key="q", opaque=13)
             + ERR("GET", ENOENT, "Not found", 14))


def test_binary_bodies_and_empty_value(b):
    bodies = [b"", b"\r\n", b"END\r\n", bytes(range(256)), b"\x80\x01" * 1000, b"x" * 100000]
    b.send(b"".join(SETF("bin", v, flags=i) for i, v in enumerate(bodies)))
    b.expect(b"".join(res("SET", cas=i + 1) for i in range(len(bodies))))
    b.send(req("GET", "bin") * len(bodies))
    b.expect(b"".join(VAL("GET", v, i, cas=i + 1) for i, v in enumerate(bodies)))


def test_binary_large_bodies_read_straight_into_items(server, b):
    """A binary SET's value from 16 KiB up is read straight into its item
    (STAT body_direct_bytes), the next frames behind it still parsed."""
    t = server.conn()  # the stats, on a text connection
    d0 = int(t.stats()["body_direct_bytes"])
    bodies = [bytes((i + k) % 256 for k in range(n)) for i, n in enumerate((70000, 16384, 300001))]
    data = b"".join(SETF("bl", v, flags=i) + req("NOOP", opaque=i) for i, v in enumerate(bodies))
    for k in range(0, len(data), 9000):
        b.send(data[k:k + 9000])
    b.expect(b"".join(res("SET", cas=i + 1) + res("NOOP", opaque=i) for i in range(len(bodies))))
    b.send(req("GET", "bl") * len(bodies))
    b.expect(b"".join(VAL("GET", v, i, cas=i + 1) for i, v in enumerate(bodies)))
    assert int(t.stats()["body_direct_bytes"]) - d0 > (70000 + 16384 + 300001) // 2


def test_options_in_key_and_ownership(server, b):
    o = server.conn()
    b.send(SETF("r", "a") + SETF("r", "b") + SETF("r", "c"))
    b.expect(res("SET", cas=1) + res("SET", cas=2) + res("SET", cas=3))
    b.send(req("GETK", "r/open", opaque=1))
    b.expect(VAL("GETK", "a", cas=1, key="r/open", opaque=1))
    # the open item is this connection's: others see the next one
    o.send(req("GET", "r/peek"))
    o.expect(VAL("GET", "b", cas=2))
    # /abort returns it; a get that takes no item answers "not found"
    b.send(req("GET", "r/abort", opaque=2))
    b.expect(ERR("GET", ENOENT, "Not found", 2))
    b.send(req("GET", "r/open") + req("GETK", "r/close/open", opaque=3))
    b.expect(VAL("GET", "a", cas=1) + VAL("GETK", "b", cas=2, key="r/close/open", opaque=3))
    b.send(req("GET", "r/close"))
    b.expect(ERR("GET", ENOENT, "Not found"))
    b.close()  # nothing open any more; c stays queued
    o.send(req("GET", "r") + req("GET", "r"))
    o.expect(VAL("GET", "c", cas=3) + ERR("GET", ENOENT, "Not found"))


def test_open_item_returns_on_disconnect(server, b):
    o = server.conn()
    b.send(SETF("d", "first") + SETF("d", "second") + req("GET", "d/open"))
    b.expect(res("SET", cas=1) + res("SET", cas=2) + VAL("GET", "first", cas=1))
    b.close()
    wait_until(lambda: o.stats().get("queue_d_open_transactions") == "0", what="abort")
    o.send(b"get d\r\nget d\r\n")
    o.expect(b"VALUE d 0 5\r\nfirst\r\nEND\r\nVALUE d 0 6\r\nsecond\r\nEND\r\n")


def test_wait_blocks_until_set(server, b):
    o = server.conn()
    b.send(req("GETK", "w/t=60000", opaque=77))
    wait_until(lambda: o.stats().get("queue_w_waiters") == "1", what="waiter")
    b.assert_silent(0.2)
    o.send(b"set w 5 0 4\r\nwake\r\n")
    o.expect(b"STORED\r\n")
    b.expect(VAL("GETK", "wake", 5, cas=1, key="w/t=60000", opaque=77))


def test_quiet_wait_times_out_silently(b):
    # A GETQ that waits and finds nothing answers nothing; the NOOP behind
    # it is answered after the wait, in order.
    b.send(req("GETQ", "tw/t=300", opaque=1) + req("NOOP", opaque=2))
    b.expect(res("NOOP", opaque=2))
    b.send(req("GET", "tw/t=100", opaque=3))
    b.expect(ERR("GET", ENOENT, "Not found", 3))


def test_quiet_gets_then_noop(b):
    b.send(b"".join(SETF("qg", "m%d" % i, op="SETQ") for i in range(3)))
    b.send(req("GETKQ", "qg", opaque=1) * 4 + req("NOOP", opaque=2))
    b.expect(b"".join(VAL("GETKQ", "m%d" % i, cas=i + 1, key="qg", opaque=1) for i in range(3))
             + res("NOOP", opaque=2))


def test_add_only_into_empty_queue(b):
    b.send(SETF("lk", "1", op="ADD", opaque=1) + SETF("lk", "2", op="ADD", opaque=2)
           + SETF("lk", "3", op="ADDQ", opaque=3) + req("NOOP", opaque=4))
    b.expect(res("ADD", opaque=1, cas=1) + ERR("ADD", EEXISTS, "Data exists for key.", 2)
             + ERR("ADDQ", EEXISTS, "Data exists for key.", 3) + res("NOOP", opaque=4))
    b.send(req("DELETE", "lk") + SETF("lk", "4", op="ADDQ") + req("GET", "lk"))
    b.expect(res("DELETE") + VAL("GET", "4", cas=1))


REFUSED = [
    ("REPLACE", struct.pack(">II", 0, 0), b"body", "replace not supported: a queue is appended to (set enqueues)"),
    ("APPEND", b"", b"body", "append not supported: queued messages cannot be changed"),
    ("APPENDQ", b"", b"body", "append not supported: queued messages cannot be changed"),
    ("PREPEND", b"", b"body", "prepend not supported: queued messages cannot be changed"),
    ("INCREMENT", struct.pack(">QQI", 1, 0, 0), b"", "incr not supported: queues hold no counters"),
    ("DECREMENT", struct.pack(">QQI", 1, 0, 0), b"", "decr not supported: queues hold no counters"),
    ("TOUCH", struct.pack(">I", 10), b"", "touch not supported: a queued message keeps its exptime"),
    ("GAT", struct.pack(">I", 10), b"", "gat not supported: a queued message keeps its exptime (use get)"),
    ("GATQ", struct.pack(">I", 10), b"", "gat not supported: a queued message keeps its exptime (use get)"),
]


@pytest.mark.parametrize("op,extras,value,why", REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_commands(b, op, extras, value, why):
    # "not supported" with the reason; a value is skipped, so a body that
    # looks like frames is never run; quiet variants answer too (a failure)
    if value:
        value += req("DELETE", "keep") + req("QUIT")
    b.send(SETF("keep", "v") + req(op, "keep", extras, value, opaque=5) + req("NOOP", opaque=6))
    b.expect(res("SET", cas=1) + ERR(op, NOT_SUPPORTED, why, 5) + res("NOOP", opaque=6))
    b.send(req("GET", "keep"))
    b.expect(VAL("GET", "v", cas=1))


def test_set_with_cas_refused(b):
    b.send(SETF("cq", "x", cas=5, opaque=1) + req("NOOP", opaque=2))
    b.expect(ERR("SET", NOT_SUPPORTED, "cas not supported: queued messages cannot be changed", 1)
             + res("NOOP", opaque=2))


def test_unknown_opcode_skipped(b):
    b.send(req(0x55, "k", b"", req("QUIT"), opaque=3) + req(0x21, b"PLAIN", opaque=4) + req("NOOP", opaque=5))
    b.expect(ERR(0x55, UNKNOWN, "Unknown command", 3) + ERR(0x21, UNKNOWN, "Unknown command", 4)
             + res("NOOP", opaque=5))


BAD_FRAMES = [
    ("get with extras", req("GET", "k", b"abcd"), "GET", "bad extras length"),
    ("get without key", req("GET"), "GET", "key required"),
    ("get with value", req("GET", "k", b"", b"v"), "GET", "value not allowed"),
    ("set without extras", req("SET", "k", b"", b"v"), "SET", "bad extras length"),
    ("set extras 4", req("SET", "k", b"abcd", b"v"), "SET", "bad extras length"),
    ("noop with key", req("NOOP", "k"), "NOOP", "key not allowed"),
    ("key too long", req("GET", "k" * 251), "GET", "key too long"),
    ("flush extras 8", req("FLUSH", b"", b"12345678"), "FLUSH", "bad extras length"),
    ("bad queue name", req("GET", "a..b"), "GET", "bad queue name"),
    ("bad option", req("GET", "q/bogus"), "GET", "bad get option"),
    ("option on set", SETF("q/open", "x"), "SET", "bad queue name"),
    ("option on delete", req("DELETE", "q/open"), "DELETE", "bad queue name"),
    ("binary key", req("GET", b"a\x00b"), "GET", "bad queue name"),
]


@pytest.mark.parametrize("what,frame,op,why", BAD_FRAMES, ids=[f[0] for f in BAD_FRAMES])
def test_bad_frames_answered_and_skipped(server, what, frame, op, why):
    c = server.conn()
    c.send(frame + req("NOOP", opaque=9))
    c.expect(ERR(op, EINVAL, why) + res("NOOP", opaque=9))
    c.send(SETF("fine", "ok") + req("GET", "fine"))
    c.expect(res("SET", cas=1) + VAL("GET", "ok", cas=1))


def test_inconsistent_lengths_close(server):
    # extras + key longer than the body: the next frame's start is unknown
    c = server.conn()
    c.send(req("NOOP", opaque=1) + req("GET", "abcde", opaque=2, bodylen=3) + req("NOOP", opaque=3))
    c.expect(res("NOOP", opaque=1) + ERR("GET", EINVAL, "body shorter than its extras and key", 2))
    c.assert_closed()
    assert server.alive()


def test_bad_magic_after_good_frames_closes(server):
    c = server.conn()
    c.send(req("NOOP", opaque=1) + req("GET", "k", opaque=2, magic=0x81))
    c.expect(res("NOOP", opaque=1) + ERR("GET", EINVAL, "bad magic", 2))
    c.assert_closed()
    # text after binary is bad magic too: the answer echoes what the
    # header's opcode and opaque bytes held
    c = server.conn()
    text = b"get k\r\n" + b"x" * 17
    c.send(req("NOOP") + text)
    fields = HDR.unpack(text[:24])
    c.expect(res("NOOP") + ERR(fields[1], EINVAL, "bad magic", fields[7]))
    c.assert_closed()
    assert server.alive()


def test_too_large_value_skipped(ternd):
    s = ternd(conf="[server]\nmax_item_size = 1K\n")
    c = s.conn()
    c.send(SETF("big", b"v" * 1025 + req("QUIT"), opaque=1) + SETF("big", b"v" * 1024, opaque=2)
           + req("NOOP", opaque=3))
    c.expect(ERR("SET", E2BIG, "Too large.", 1) + res("SET", opaque=2, cas=1) + res("NOOP", opaque=3))


def test_delete_flush_version_verbosity(b):
    b.send(SETF("dq", "x") + req("DELETE", "dq", opaque=1) + req("DELETE", "dq", opaque=2)
           + req("DELETEQ", "dq", opaque=3) + SETF("dq", "y") + req("DELETEQ", "dq", opaque=4)
           + req("NOOP", opaque=5))
    b.expect(res("SET", cas=1) + res("DELETE", opaque=1) + ERR("DELETE", ENOENT, "Not found", 2)
             + ERR("DELETEQ", ENOENT, "Not found", 3) + res("SET", cas=1) + res("NOOP", opaque=5))
    b.send(SETF("f1", "x") + SETF("f2", "y") + req("FLUSH", opaque=6) + SETF("f1", "z")
           + req("FLUSHQ", b"", struct.pack(">I", 0), opaque=7) + req("GET", "f1") + req("GET", "f2"))
    b.expect(res("SET", cas=1) + res("SET", cas=1) + res("FLUSH", opaque=6) + res("SET", cas=2)
             + ERR("GET", ENOENT, "Not found") + ERR("GET", ENOENT, "Not found"))
    b.send(req("VERBOSITY", b"", struct.pack(">I", 1), opaque=8) + req("VERSION", opaque=9))
    b.expect(res("VERBOSITY", opaque=8))
    f = read_frame(b)
    assert f["op"] == OP["VERSION"] and f["status"] == 0 and f["opaque"] == 9
    assert f["value"].startswith(b"1.6.21 tern-"), f


def test_stat_all_and_one_queue(b):
    b.send(SETF("sq", "hello") + req("STAT", opaque=4))
    b.expect(res("SET", cas=1))
    stats = {}
    while True:
        f = read_frame(b)
        assert f["op"] == OP["STAT"] and f["status"] == 0 and f["opaque"] == 4
        if not f["key"]:
            assert not f["value"]
            break
        stats[f["key"].decode()] = f["value"].decode()
    for k in ["pid", "uptime", "time", "version", "curr_connections", "cmd_get", "cmd_set",
              "curr_items", "total_items", "bytes", "queue_sq_items"]:
        assert k in stats, k
    assert stats["version"] == "1.6.21"
    assert stats["queue_sq_items"] == "1"
    b.send(req("STAT", "sq", opaque=5))
    one = []
    while True:
        f = read_frame(b)
        assert f["opaque"] == 5 and f["status"] == 0
        if not f["key"]:
            break
        one.append((f["key"].decode(), f["value"].decode()))
    assert one[0] == ("queue_sq_items", "1")
    assert all(k.startswith("queue_sq_") for k, v in one)
    b.send(req("STAT", "nosuch", opaque=6))
    b.expect(ERR("STAT", ENOENT, "Not found", 6))


def test_quit_and_quitq(server):
    c = server.conn()
    c.send(req("QUIT", opaque=1) + req("NOOP"))
    c.expect(res("QUIT", opaque=1))
    c.assert_closed()
    c = server.conn()
    c.send(req("NOOP", opaque=2) + req("QUITQ") + req("NOOP"))
    c.expect(res("NOOP", opaque=2))
    c.assert_closed()


def test_byte_at_a_time(b):
    data = SETF("bt", "hello\r\n", flags=3, opaque=1) + req("GETK", "bt/t=1000", opaque=2) + req("NOOP", opaque=3)
    for i in range(len(data)):
        b.send(data[i:i + 1])
        if i % 7 == 0:
            time.sleep(0.001)
    b.expect(res("SET", opaque=1, cas=1) + VAL("GETK", "hello\r\n", 3, cas=1, key="bt/t=1000", opaque=2)
             + res("NOOP", opaque=3))


def test_text_and_binary_connections_share_queues(server, b):
    t = server.conn()
    t.send(b"set mix 9 0 4\r\ntext\r\n")
    t.expect(b"STORED\r\n")
    b.send(SETF("mix", "binary", flags=8) + req("GET", "mix") + req("GET", "mix"))
    b.expect(res("SET", cas=2) + VAL("GET", "text", 9, cas=1) + VAL("GET", "binary", 8, cas=2))


@pytest.mark.parametrize("mode", ["always", "odsync"])
def test_deferred_stores_keep_order(ternd, mode):
    # In always/odsync a SET's answer waits for the disk while the frames
    # behind it are read on: every answer still comes out in order, and a
    # SETQ's (success: none) holds nothing up.
    s = ternd(args=["--sync", mode])
    c = s.conn()
    frames, want = [], []
    for i in range(20):
        frames.append(SETF("dq", "v%d" % i, opaque=i) + req("GET", "other", opaque=100 + i)
                      + SETF("dq", "w%d" % i, op="SETQ") + req("NOOP", opaque=200 + i))
        want.append(res("SET", opaque=i, cas=2 * i + 1) + ERR("GET", ENOENT, "Not found", 100 + i)
                    + res("NOOP", opaque=200 + i))
    c.send(b"".join(frames))
    c.expect(b"".join(want))
    c.send(req("GET", "dq") * 40)
    c.expect(b"".join(VAL("GET", "%s%d" % (p, i), cas=2 * i + 1 + (p == "w"))
                      for i in range(20) for p in "vw"))


def test_truncated_frames_then_eof(server):
    # A client that stops in the middle of a frame and closes its side:
    # the connection closes, nothing half-read is stored.
    for cut in [5, 24, 30, 40]:
        c = server.conn()
        frame = SETF("tr", "0123456789")
        c.send(req("NOOP", opaque=1) + frame[:cut])
        c.sock.shutdown(socket.SHUT_WR)
        c.expect(res("NOOP", opaque=1))
        c.assert_closed()
    o = server.conn()
    o.send(b"get tr\r\n")
    o.expect(b"END\r\n")


def test_eof_ends_binary_waits(server):
    # A binary client that shuts down its side has given up (memjs does so
    # on a timeout and drops what still comes): its waiting GET ends at once
    # as a miss, and a GET with /t= behind it does not wait either, so a
    # message set afterwards stays queued instead of being handed to it.
    c = server.conn()
    c.send(req("GET", "gw/t=60000", opaque=7))
    o = server.conn()
    wait_until(lambda: o.stats().get("queue_gw_waiters") == "1", what="waiter")
    c.send(req("GET", "gw/t=60000", opaque=8))
    c.sock.shutdown(socket.SHUT_WR)
    c.expect(ERR("GET", ENOENT, "Not found", 7) + ERR("GET", ENOENT, "Not found", 8))
    c.assert_closed()
    o.send(b"set gw 0 0 5\r\nafter\r\n")
    o.expect(b"STORED\r\n")
    o.send(b"get gw\r\n")
    o.expect(b"VALUE gw 0 5\r\nafter\r\nEND\r\n")
