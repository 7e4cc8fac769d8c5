"""
Python clients: pymemcache and python-memcache (Debian's python3-pymemcache,
python3-memcache), through drivers/py_driver.py.
"""
import sys

from clientmatrix import (CONF, DRIVERS, assert_queue, consumer_dies_with_open_item,
                          exercise, timeout_limit)

PY = sys.executable


def py(lib, server, *opts):
    return [PY, DRIVERS + "/py_driver.py", lib, "127.0.0.1:%d" % server.port] + list(opts)


def test_pymemcache(server, drivers):
    c = drivers(py("pymemcache", server), "pymemcache")
    exercise(c, server, "pym_")
    assert c.call("version").startswith("1.")
    assert "queue_pym_fifo_total_items" in c.call("stats")
    consumer_dies_with_open_item(lambda: drivers(py("pymemcache", server)), server, "pym_dies")


def test_python_memcache(server, drivers):
    c = drivers(py("python-memcache", server, "timeout_ms=10000"), "python-memcache")
    exercise(c, server, "pmc_")
    assert "queue_pmc_fifo_total_items" in c.call("stats")
    consumer_dies_with_open_item(lambda: drivers(py("python-memcache", server)), server, "pmc_dies")


def test_python_memcache_timeout(server, drivers):
    # socket_timeout defaults to 3 s.  A longer /t= wait is cut off, and
    # python-memcache reports it as a miss (None), not as an error; it then
    # marks the server dead for dead_retry (30 s), so its next get is a miss
    # without asking: the message set meanwhile stays queued.
    c = drivers(py("python-memcache", server), "python-memcache")
    said, fate, nxt = timeout_limit(c, server, "pmc_limit", 5000)
    assert said == {"r": None}
    assert (fate, nxt) == ("queued", {"r": None})


def test_pymemcache_default_noreply(ternd, drivers):
    # pymemcache's default_noreply=True sends "set ... noreply" and returns
    # True at once, so a set the server refuses is reported as stored: the
    # message is gone without a word.  default_noreply=False reports it.
    s = ternd(conf=CONF + "[queue pymnr]\nmax_items = 1\n")
    c = drivers(py("pymemcache", s, "noreply=1"), "pymemcache-noreply")
    assert c.set("pymnr", b"one") is True
    assert c.set("pymnr", b"two") is True  # refused by the server, not said
    # A get on the same connection is answered after both sets were handled.
    assert c.get("pymnr/peek") == b"one"
    raw = s.conn()
    assert_queue(raw, "pymnr", items=1, total=1)
    c = drivers(py("pymemcache", s), "pymemcache")
    assert c.set("pymnr", b"three") is False  # NOT_STORED, reported
    assert c.get("pymnr") == b"one"
    assert c.get("pymnr") is None
