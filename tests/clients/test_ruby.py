"""
Ruby's dalli (Debian's ruby-dalli 3.0, which speaks memcached's binary
protocol only; the meta protocol came in dalli 3.1), through
drivers/dalli_driver.rb.
"""
from clientmatrix import DRIVERS, consumer_dies_with_open_item, exercise, timeout_limit

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
    c = drivers(dalli(server), "dalli")
    said, nxt = timeout_limit(c, server, "rb_limit", 4000)
    print("dalli after its 1 s timeout:", said, nxt)
