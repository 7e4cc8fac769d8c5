"""
node's memcache clients from npm (pinned in package.json/package-lock.json,
installed into node_modules by `npm ci`, see run.sh): `memcached` (text
protocol, carries strings) and `memjs` (binary protocol), through
drivers/node_driver.js.
"""
import os

import pytest

from clientmatrix import (DRIVERS, HERE, TEXT_BODIES, assert_queue, consumer_dies_with_open_item,
                          exercise, qstats, raw_peek, timeout_limit, wait_until)

LONG = "timeout_ms=10000"  # above every /t= the scenario uses


def node(lib, server, *opts):
    assert os.path.isdir(os.path.join(HERE, "node_modules", lib)), \
        "npm package %s missing: run `npm ci` in tests/clients (run.sh does)" % lib
    return ["node", DRIVERS + "/node_driver.js", lib, "127.0.0.1:%d" % server.port] + list(opts)


def test_node_memcached(server, drivers):
    c = drivers(node("memcached", server, LONG), "node-memcached")
    exercise(c, server, "nmc_", bodies=TEXT_BODIES)
    assert c.call("version").startswith("1.")
    assert "queue_nmc_fifo_total_items" in c.call("stats")
    consumer_dies_with_open_item(lambda: drivers(node("memcached", server)), server, "nmc_dies")


def test_memjs(server, drivers):
    c = drivers(node("memjs", server, LONG), "memjs")
    exercise(c, server, "mjs_", mget=False)  # memjs has neither a multi-key get nor version
    assert "queue_mjs_fifo_total_items" in c.call("stats")
    consumer_dies_with_open_item(lambda: drivers(node("memjs", server)), server, "mjs_dies")


def test_memjs_timeout(server, drivers):
    # timeout defaults to 0.5 s and retries to 2: a /t= wait longer than
    # that is sent twice, then fails.  memjs gives up by half-closing the
    # connection (end()) and drops whatever answer still comes; tern ends
    # the waits of a binary client that shuts its side down, so a message
    # set once that is seen is not handed to the abandoned wait: the next
    # get returns it.
    c = drivers(node("memjs", server), "memjs")
    said, fate, _ = timeout_limit(c, server, "mjs_limit", 30000, gave_up=True)
    assert said == {"err": "socket timed out waiting on response."}
    assert fate == "next get"
    said, fate, _ = timeout_limit(c, server, "mjs_limit_open", 30000, opt="/open", gave_up=True)
    assert said == {"err": "socket timed out waiting on response."}
    assert fate == "next get"


def test_node_memcached_timeout(server, drivers):
    # The socket's inactivity timeout (`idle`, 5 s by default; 1 s here to
    # keep the test short) closes a connection whose get is still waiting,
    # and the get's callback is never called: the request hangs.  Nothing
    # is lost on the server: the wait ends (at its /t=) with an END nobody
    # reads, and a message set afterwards stays queued.
    c = drivers(node("memcached", server, "timeout_ms=1000"), "node-memcached")
    raw = server.conn()
    q = "nmc_limit"
    c.send("get", q + "/t=1500")
    wait_until(lambda: qstats(raw, q).get("waiters") == 1, what="the get to wait")
    wait_until(lambda: qstats(raw, q).get("waiters") == 0, what="the wait to end")
    assert raw.set(q, b"after timeout") == b"STORED\r\n"
    with pytest.raises(AssertionError, match="no reply within"):
        c.recv(timeout=1.0)  # past the end of the server's wait: no answer ever
    assert_queue(raw, q, items=1, total=1)


def test_node_memcached_values(server, drivers):
    # node memcached carries strings.  It escapes CR and LF with a backslash
    # on the way in and unescapes them on the way out, so only node reads
    # such a message back as it was sent.
    c = drivers(node("memcached", server, "timeout_ms=1000"), "node-memcached")
    raw = server.conn()
    assert c.set("nmc_crlf", b"a\r\nb") is True
    assert raw_peek(raw, "nmc_crlf") == (0, b"a\\\r\\\nb")
    assert c.get("nmc_crlf") == b"a\r\nb"
    # A Buffer is sent with flag 4 and every byte >= 0x80 as two UTF-8 bytes.
    b = drivers(node("memcached", server, "values=buffer"), "node-memcached-buffer")
    assert b.set("nmc_buf", b"\x00\xff\x80") is True
    assert raw_peek(raw, "nmc_buf") == (4, b"\x00\xc3\xbf\xc2\x80")
    assert b.get("nmc_buf") == b"\x00\xff\x80"
    # A message with CR LF from another producer breaks its reply parser:
    # the get never answers.  Read with /open, the message goes back to the
    # queue when node memcached drops the idle connection (here after 1 s).
    q = "nmc_raw"
    assert raw.set(q, b"a\r\nb") == b"STORED\r\n"
    c.send("get", q + "/open")
    wait_until(lambda: qstats(raw, q)["open_transactions"] == 1, what="the item to be open")
    wait_until(lambda: qstats(raw, q)["open_transactions"] == 0, what="node to drop the connection")
    with pytest.raises(AssertionError, match="no reply within"):
        c.recv(timeout=0.5)
    assert_queue(raw, q, items=1, total=1)
    assert raw.get(q) == [(q, 0, b"a\r\nb")]
