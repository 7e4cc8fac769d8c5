"""
PHP's memcache clients (Debian's php-cli, php-memcache, php-memcached),
through drivers/php_driver.php: pecl memcache (text protocol) and pecl
memcached over libmemcached (text, and binary with OPT_BINARY_PROTOCOL).
"""
import pytest

from clientmatrix import DRIVERS, consumer_dies_with_open_item, exercise, timeout_limit

LONG = "timeout_ms=10000"  # above every /t= the scenario uses


def php(ext, server, *opts):
    return ["php", DRIVERS + "/php_driver.php", ext, "127.0.0.1:%d" % server.port] + list(opts)


def test_php_memcache(server, drivers):
    c = drivers(php("memcache", server, LONG), "php-memcache")
    exercise(c, server, "phpm_")
    assert c.call("version").startswith("1.")
    assert "queue_phpm_fifo_total_items" in c.call("stats")
    consumer_dies_with_open_item(lambda: drivers(php("memcache", server)), server, "phpm_dies")


@pytest.mark.parametrize("mode", ["text", "binary"])
def test_php_memcached(server, drivers, mode):
    opts = ["binary=1"] if mode == "binary" else []
    c = drivers(php("memcached", server, LONG, *opts), "php-memcached-" + mode)
    pre = "phpd%s_" % mode[0]
    exercise(c, server, pre)
    assert c.call("version").startswith("1.")
    assert "queue_%sfifo_total_items" % pre in c.call("stats")
    consumer_dies_with_open_item(lambda: drivers(php("memcached", server, *opts)), server, pre + "dies")


def test_php_memcache_timeout(server, drivers):
    # The 1 s timeout ends a longer /t= wait with a warning ("Network
    # timeout"); the server is then marked failed for retry_interval (15 s)
    # and the next get misses without asking: the message stays queued.
    c = drivers(php("memcache", server), "php-memcache")
    said, fate, nxt = timeout_limit(c, server, "phpm_limit", 2500)
    assert "Network timeout" in said["err"]
    assert (fate, nxt) == ("queued", {"r": None})


@pytest.mark.parametrize("mode", ["text", "binary"])
def test_php_memcached_timeout(server, drivers, mode):
    # OPT_POLL_TIMEOUT (libmemcached's, 5 s by default) bounds a /t= wait;
    # set to 1 s here to keep the test short.
    opts = ["binary=1"] if mode == "binary" else []
    c = drivers(php("memcached", server, "timeout_ms=1000", *opts), "php-memcached-" + mode)
    said, fate, _ = timeout_limit(c, server, "phpd%s_limit" % mode[0], 2500)
    assert "A TIMEOUT OCCURRED" in said["err"]
    assert fate == "next get"
