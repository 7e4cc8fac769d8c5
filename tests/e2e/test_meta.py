"""
memcached's meta protocol (mg, ms, md, mn; me and ma refused) against a
real ternd, exact bytes.  Meta lines share text's connections: both may be
mixed on one.  mg dequeues (Kestrel options in the key), ms enqueues (mode
E: only into an empty queue), md deletes the queue; the cas (c) of an item
is its id; q hides HD, EN and NF but never an error.
"""
import base64

import pytest

from conftest import wait_until


@pytest.fixture
def c(server):
    return server.conn()


def test_mn(c):
    c.send(b"mn\r\nmn with anything\r\n")
    c.expect(b"MN\r\nMN\r\n")


def test_set_and_get(c):
    c.send(b"ms q 5 F7 c k O1\r\nhello\r\nms q 3 q\r\nbye\r\nmn\r\n")
    c.expect(b"HD c1 kq O1\r\nMN\r\n")
    c.send(b"mg q v f s c t k Oab\r\nmg q v\r\nmg q v\r\nmg q v k Oz\r\n")
    c.expect(b"VA 5 f7 s5 c1 t-1 kq Oab\r\nhello\r\nVA 3\r\nbye\r\nEN\r\nEN kq Oz\r\n")


def test_quiet_mode(c):
    # q hides the miss; a pipeline of quiet gets ends with mn
    c.send(b"ms qq 1\r\na\r\nms qq 1\r\nb\r\n")
    c.expect(b"HD\r\nHD\r\n")
    c.send(b"mg qq v q k\r\nmg qq v q k\r\nmg qq v q k\r\nmn\r\n")
    c.expect(b"VA 1 kqq\r\na\r\nVA 1 kqq\r\nb\r\nMN\r\n")


def test_get_without_value_dequeues(c):
    # Without v the item is taken all the same; only its flags come back
    c.send(b"ms nv 2 F3\r\nhi\r\nmg nv f s\r\nmg nv v\r\n")
    c.expect(b"HD\r\nHD f3 s2\r\nEN\r\n")


def test_ttl(c):
    c.send(b"ms tt 1 T100\r\nx\r\nmg tt/peek t v\r\n")
    c.expect(b"HD\r\n")
    line = c.readline()
    assert line in (b"VA 1 t100\r\n", b"VA 1 t99\r\n"), line
    c.expect(b"x\r\n")


def test_options_in_key(server, c):
    o = server.conn()
    c.send(b"ms r 1\r\na\r\nms r 1\r\nb\r\n")
    c.expect(b"HD\r\nHD\r\n")
    c.send(b"mg r/open v k c\r\n")
    c.expect(b"VA 1 kr/open c1\r\na\r\n")
    o.send(b"mg r/peek v c\r\n")
    o.expect(b"VA 1 c2\r\nb\r\n")
    c.send(b"mg r/close/open v c\r\nmg r/close v\r\nmg r/abort v\r\n")
    c.expect(b"VA 1 c2\r\nb\r\nEN\r\nEN\r\n")
    o.send(b"mg r v\r\n")
    o.expect(b"EN\r\n")


def test_wait(server, c):
    o = server.conn()
    c.send(b"mg w/t=60000 v k\r\nmn\r\n")
    wait_until(lambda: o.stats().get("queue_w_waiters") == "1", what="waiter")
    c.assert_silent(0.2)
    o.send(b"ms w 4\r\nwake\r\n")
    o.expect(b"HD\r\n")
    c.expect(b"VA 4 kw/t=60000\r\nwake\r\nMN\r\n")
    c.send(b"mg w/t=200 v q\r\nmn\r\nmg w/t=100 v\r\n")
    c.expect(b"MN\r\nEN\r\n")


def test_add_mode(c):
    c.send(b"ms lk 1 ME c\r\n1\r\nms lk 1 ME c\r\n2\r\nmd lk\r\nms lk 1 ME q\r\n3\r\nmn\r\n")
    c.expect(b"HD c1\r\nNS c0\r\nHD\r\nMN\r\n")


def test_base64_keys(c):
    k = base64.b64encode(b"b64q").decode()
    ko = base64.b64encode(b"b64q/peek").decode()
    c.send(("ms %s 2 b k\r\nhi\r\nmg %s b v k\r\nmg %s b v k\r\nmg %s b v\r\n" % (k, ko, k, k)).encode())
    c.expect(("HD k%s b\r\nVA 2 k%s b\r\nhi\r\nVA 2 k%s b\r\nhi\r\nEN\r\n" % (k, ko, k)).encode())


def test_delete(c):
    c.send(b"ms dq 1\r\nx\r\nmd dq k O5\r\nmd dq k O6\r\nmd dq q\r\nms dq 1\r\ny\r\nmd dq q\r\nmn\r\n")
    c.expect(b"HD\r\nHD kdq O5\r\nNF kdq O6\r\nHD\r\nMN\r\n")
    c.send(b"mg dq v\r\n")
    c.expect(b"EN\r\n")


REFUSED = [
    (b"me q\r\n", b"CLIENT_ERROR me not supported: a queue's counters are in stats\r\n"),
    (b"ma q\r\n", b"CLIENT_ERROR ma not supported: queues hold no counters\r\n"),
    (b"ma q q\r\n", b"CLIENT_ERROR ma not supported: queues hold no counters\r\n"),
    (b"ms q 8 MA\r\nmn\r\nmn\r\n\r\n", b"CLIENT_ERROR append not supported: queued messages cannot be changed\r\n"),
    (b"ms q 8 MP q\r\nmn\r\nmn\r\n\r\n", b"CLIENT_ERROR prepend not supported: queued messages cannot be changed\r\n"),
    (b"ms q 8 MR\r\nmn\r\nmn\r\n\r\n", b"CLIENT_ERROR replace not supported: a queue is appended to (set enqueues)\r\n"),
    (b"ms q 8 MZ\r\nmn\r\nmn\r\n\r\n", b"CLIENT_ERROR invalid mode for ms M token\r\n"),
    (b"ms q 8 C5\r\nmn\r\nmn\r\n\r\n", b"CLIENT_ERROR flag C not supported: queued messages cannot be changed\r\n"),
    (b"ms q 8 v\r\nmn\r\nmn\r\n\r\n", b"CLIENT_ERROR invalid flag\r\n"),
    (b"ms q/open 8\r\nmn\r\nmn\r\n\r\n", b"CLIENT_ERROR bad queue name\r\n"),
    (b"mg q N30 v\r\n", b"CLIENT_ERROR flag N not supported: a queue creates nothing on a miss\r\n"),
    (b"mg q T30 v\r\n", b"CLIENT_ERROR flag T not supported: a queued message keeps its exptime\r\n"),
    (b"mg q v v\r\n", b"CLIENT_ERROR duplicate flag\r\n"),
    (b"mg q Z\r\n", b"CLIENT_ERROR invalid flag\r\n"),
    (b"mg q O" + b"x" * 33 + b"\r\n", b"CLIENT_ERROR opaque token too long\r\n"),
    (b"mg\r\n", b"CLIENT_ERROR bad command line format\r\n"),
    (b"mg a..b v\r\n", b"CLIENT_ERROR bad queue name\r\n"),
    (b"mg " + b"k" * 251 + b" v\r\n", b"CLIENT_ERROR bad command line format\r\n"),
    (b"ms q x\r\n", b"CLIENT_ERROR bad command line format\r\n"),
    (b"ms q 1\r\nxYZ\r\n", b"CLIENT_ERROR bad data chunk\r\n"),
    (b"mx q\r\n", b"ERROR\r\n"),
    (b"md q C1\r\n", b"CLIENT_ERROR flag C not supported: queued messages cannot be changed\r\n"),
]


@pytest.mark.parametrize("line,want", REFUSED, ids=[r[0][:20].decode(errors="replace") for r in REFUSED])
def test_refused_and_bad_requests(c, line, want):
    # errors are answered even with q; a refused ms's data block (here
    # "mn\r\nmn\r\n" plus its CRLF) is skipped, never run
    c.send(line + b"mn\r\n")
    c.expect(want + b"MN\r\n")
    c.send(b"ms ok 2\r\nok\r\nmg ok v\r\n")
    c.expect(b"HD\r\nVA 2\r\nok\r\n")


def test_too_large_is_ns_and_skipped(ternd):
    s = ternd(conf="[server]\nmax_item_size = 10\n")
    c = s.conn()
    c.send(b"ms big 11 q\r\nmn\r\nmn\r\nxyz\r\nms big 10\r\n0123456789\r\nmn\r\n")
    c.expect(b"NS\r\nHD\r\nMN\r\n")


def test_mixed_with_text(c):
    c.send(b"set mx 4 0 4\r\ntext\r\nms mx 4 F5\r\nmeta\r\nget mx\r\nmg mx v f\r\nversion\r\nmn\r\n")
    c.expect(b"STORED\r\nHD\r\nVALUE mx 4 4\r\ntext\r\nEND\r\nVA 4 f5\r\nmeta\r\n")
    assert c.readline().startswith(b"VERSION 1.6.21 tern-")
    c.expect(b"MN\r\n")


@pytest.mark.parametrize("mode", ["always", "odsync"])
def test_deferred_stores_keep_order(ternd, mode):
    s = ternd(args=["--sync", mode])
    c = s.conn()
    req, want = [], []
    for i in range(30):
        req.append(b"ms dq 2 c k\r\nv%d\r\n" % (i % 10) + b"mg none v\r\nms dq 2 q\r\nw%d\r\nmn\r\n" % (i % 10))
        want.append(b"HD c%d kdq\r\nEN\r\nMN\r\n" % (2 * i + 1))
    c.send(b"".join(req))
    c.expect(b"".join(want))
    c.send(b"mg dq v\r\n" * 60)
    c.expect(b"".join(b"VA 2\r\n%s%d\r\n" % (p, i % 10) for i in range(30) for p in (b"v", b"w")))
