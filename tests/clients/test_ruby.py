"""
Ruby's dalli (Debian's ruby-dalli 3.0, which speaks memcached's binary
protocol only; the meta protocol came in dalli 3.1), through
drivers/dalli_driver.rb.
"""
from clientmatrix import (DRIVERS, assert_queue, consumer_dies_with_open_item, exercise,
                          wait_until)

LONG = "timeout_ms=10000"  # above every /t= the scenario uses


def dalli(server, *opts):
    return ["ruby", DRIVERS + "/dalli_driver.rb", "127.0.0.1:%d" % server.port] + list(opts)


def test_dalli(server, drivers):
    c = drivers(dalli(server, LONG), "dalli")
    exercise(c, server, "rb_")
    assert c.call("version").startswith("1.")
    assert "queue_rb_fifo_total_items" in c.call("stats")
    consumer_dies_with_open_item(lambda: drivers(dalli(server)), server, "rb_dies")


def test_dalli_timeout(server, drivers):
    # socket_timeout defaults to 1 s.  dalli 3.0 retries a request that timed
    # out on a new connection, and the retry resets its failure count, so a
    # /t= wait longer than socket_timeout never ends with a miss: it becomes
    # a loop of 1 s waits that returns only when a message arrives.
    c = drivers(dalli(server), "dalli")
    raw = server.conn()
    q = "rb_limit"
    before = int(raw.stats()["total_connections"])
    c.send("get", q + "/t=2000")
    # Three connections: the first wait and two retries, past the 2 s the
    # server would have waited for the first one.
    wait_until(lambda: int(raw.stats()["total_connections"]) >= before + 3, what="dalli to retry")
    assert c._lines.empty(), "dalli answered: %r" % c.recv()
    assert raw.set(q, b"at last") == b"STORED\r\n"
    assert c.result() == b"at last".hex()
    assert_queue(raw, q, items=0, total=1)
