"""
A client that sends its requests and then shuts down its sending side (as
`nc -q1` and batch scripts do) gets every reply that is due: sets still
waiting for the journal, gets, and /t= waits, which run to their item or
their timeout; then the server closes.  A binary client's waits end at
once as misses instead (a binary client shuts its side down only when it
gives up on its answers).  A request cut short by the end of
input is dropped, in every state (line, body, binary frame).  An item
handed out for a reply that never reaches the client goes back to the head
of its queue.
"""
import shutil
import socket
import struct
import subprocess
import time

import pytest

from conftest import TIMEOUT, Conn, wait_until
from test_protocol import END, SET, STORED, V, qstat


def half_close(c):
    c.sock.shutdown(socket.SHUT_WR)


def test_nc_q1_gets_every_reply(server):
    nc = shutil.which("nc")
    if not nc:
        pytest.skip("nc not installed")
    data = SET("nc", "one") + SET("nc", "two") + b"get nc\r\nget nc/t=200\r\nget nc/t=200\r\n"
    p = subprocess.run([nc, "-q1", "127.0.0.1", str(server.port)], input=data,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT)
    assert p.stdout == STORED * 2 + V("nc", "one") + END + V("nc/t=200", "two") + END + END


@pytest.mark.parametrize("mode", ["always", "odsync", "interval"])
def test_replies_waiting_for_the_journal_are_sent(ternd, mode):
    s = ternd(args=["--sync", mode])
    c = s.conn()
    n = 200
    c.send(b"".join(SET("hj", "m%d" % i) for i in range(n)) + b"get hj\r\n" * 3)
    half_close(c)
    c.expect(STORED * n + b"".join(V("hj", "m%d" % i) + END for i in range(3)))
    c.assert_closed()
    o = s.conn()
    assert qstat(o, "hj", "items") == n - 3


def test_pending_wait_delivers(server):
    a, o = server.conn(), server.conn()
    a.send(b"get hw/t=60000\r\nget other\r\nversion\r\n")
    half_close(a)
    wait_until(lambda: qstat(o, "hw", "waiters") == 1, what="waiter")
    a.assert_silent(0.2)
    o.send(SET("hw", "late"))
    o.expect(STORED)
    a.expect(V("hw/t=60000", "late") + END + END)
    assert a.readline().startswith(b"VERSION ")
    a.assert_closed()
    # delivered: the item is gone, not back in the queue
    wait_until(lambda: o.stats()["curr_connections"] == "1", what="connection closed")
    o.send(b"get hw\r\n")
    o.expect(END)


def test_pending_wait_times_out(server):
    a = server.conn()
    a.send(b"get ht/t=300\r\n" + SET("ht2", "x") + b"get ht2\r\n")
    half_close(a)
    a.expect(END + STORED + V("ht2", "x") + END)
    a.assert_closed()


def test_open_item_of_half_closed_client_returns(server):
    # /open was never confirmed: the close returns it to the head
    a, o = server.conn(), server.conn()
    a.send(SET("ho", "x") + SET("ho", "y") + b"get ho/open\r\n")
    half_close(a)
    a.expect(STORED * 2 + V("ho/open", "x") + END)
    a.assert_closed()
    wait_until(lambda: qstat(o, "ho", "open_transactions") == 0, what="abort")
    o.send(b"get ho\r\nget ho\r\n")
    o.expect(V("ho", "x") + END + V("ho", "y") + END)


def test_binary_wait_ends_at_eof(server):
    # A binary client that shuts down its side has given up on its waits
    # (memjs does so on a timeout, and drops what still comes), unlike a
    # text batch script: its GETKQ wait ends as a miss (quiet: no reply),
    # the NOOP behind it is answered, and a message set afterwards stays
    # queued instead of going to a client that would drop it.
    a, o = server.conn(), server.conn()
    hdr = struct.Struct(">BBHBBHIIQ")
    key = b"hb/t=60000"
    a.send(hdr.pack(0x80, 0x0d, len(key), 0, 0, 0, len(key), 1, 0) + key)
    wait_until(lambda: qstat(o, "hb", "waiters") == 1, what="waiter")
    a.send(hdr.pack(0x80, 0x0a, 0, 0, 0, 0, 0, 2, 0))
    half_close(a)
    a.expect(hdr.pack(0x81, 0x0a, 0, 0, 0, 0, 0, 2, 0))
    a.assert_closed()
    assert qstat(o, "hb", "waiters") == 0
    o.send(SET("hb", "v", flags=3))
    o.expect(STORED)
    o.send(b"get hb\r\n")
    o.expect(b"VALUE hb 3 1\r\nv\r\n" + END)


CUT_SHORT = [
    ("half a line", b"get partial", b""),
    ("half a line after requests", SET("cs", "a") + b"get cs", STORED),
    ("half a body", b"set cs 0 0 10\r\nabc", b""),
    ("a body without its CRLF", b"set cs 0 0 3\r\nabc", b""),
    ("half a meta body", b"ms cs 10\r\nabc", b""),
    ("half a swallowed block", b"append cs 0 0 10\r\nabc",
     b"CLIENT_ERROR append not supported: queued messages cannot be changed\r\n"),
    ("half a skipped line", b"set cs 0 0 1\r\nxYZ and no newline",
     b"CLIENT_ERROR bad data chunk\r\n"),
]


@pytest.mark.parametrize("what,data,want", CUT_SHORT, ids=[c[0] for c in CUT_SHORT])
def test_request_cut_short_is_dropped(server, what, data, want):
    o = server.conn()
    a = server.conn()
    a.send(data)
    half_close(a)
    a.expect(want)
    a.assert_closed()
    wait_until(lambda: o.stats()["curr_connections"] == "1", what="connection freed")
    # nothing half-read was stored (the one whole set of a row was)
    o.send(b"get cs\r\nget cs\r\n")
    o.expect((V("cs", "a") if b"set cs 0 0 1\r\na" in data else b"") + END + END)


def test_unwritten_replies_return_items_when_peer_resets(server):
    """A client that pipelines gets for large items and never reads them,
    then resets the connection: the replies that could not be written (all
    of them, the socket's buffers being small) carry their items back to
    the head of the queue, in order.  (The server stops parsing once its
    output passes the high mark, so only the first few gets run.)"""
    o = server.conn()
    body = [bytes([65 + i]) * (1024 * 1024 - 1) for i in range(8)]
    for i, b in enumerate(body):
        o.send(SET("big", b, flags=i))
        o.expect(STORED)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", server.port))
    s.sendall(b"get big\r\n" * 8)
    wait_until(lambda: qstat(o, "big", "items") <= 4, what="items handed out")
    time.sleep(0.2)  # let the server fill what it can
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()  # reset, with the replies unread
    wait_until(lambda: qstat(o, "big", "items") == 8, what="items back in the queue")
    for i, b in enumerate(body):
        o.send(b"get big\r\n")
        o.expect(V("big", b, flags=i) + END)
    o.send(b"get big\r\n")
    o.expect(END)
