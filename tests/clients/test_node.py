"""
node's memcache clients from npm (pinned in package.json/package-lock.json,
installed into node_modules by `npm ci`, see run.sh): `memcached` (text
protocol, carries strings) and `memjs` (binary protocol), through
drivers/node_driver.js.
"""
import os

import pytest

from clientmatrix import (DRIVERS, HERE, TEXT_BODIES, assert_queue, consumer_dies_with_open_item,
                          exercise, qstats, timeout_limit, wait_until)

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
    exercise(c, server, "mjs_", mget=False)
    assert c.call("version").startswith("1.")
    assert "queue_mjs_fifo_total_items" in c.call("stats")
    consumer_dies_with_open_item(lambda: drivers(node("memjs", server)), server, "mjs_dies")


def test_memjs_timeout(server, drivers):
    c = drivers(node("memjs", server), "memjs")
    said, nxt = timeout_limit(c, server, "mjs_limit", 3000)
    print("memjs after its 0.5 s timeout:", said, nxt)


def test_node_memcached_timeout(server, drivers):
    # The socket's inactivity timeout (`idle`, 5 s by default; 1 s here to
    # keep the test short) closes a connection whose get is still waiting,
    # and the get's callback is never called: the request hangs.  Nothing
    # is lost on the server (the wait ends with the connection).
    c = drivers(node("memcached", server, "timeout_ms=1000"), "node-memcached")
    raw = server.conn()
    q = "nmc_limit"
    c.send("get", q + "/t=3000")
    wait_until(lambda: qstats(raw, q).get("waiters") == 1, what="the get to wait")
    wait_until(lambda: qstats(raw, q).get("waiters") == 0, what="the connection to close")
    assert raw.set(q, b"after timeout") == b"STORED\r\n"
    with pytest.raises(AssertionError, match="no reply within"):
        c.recv(timeout=3.0)  # well past the 3 s /t= the server would have kept
    assert_queue(raw, q, items=1, total=1)
