"""
Perl's memcache clients (Debian's libcache-memcached-perl,
libcache-memcached-fast-perl), through drivers/perl_driver.pl; both speak
the text protocol.
"""
import pytest

from clientmatrix import DRIVERS, consumer_dies_with_open_item, exercise, timeout_limit

LONG = "timeout_ms=10000"  # above every /t= the scenario uses
MODULES = ["Cache::Memcached", "Cache::Memcached::Fast"]


def perl(module, server, *opts):
    return ["perl", DRIVERS + "/perl_driver.pl", module, "127.0.0.1:%d" % server.port] + list(opts)


@pytest.mark.parametrize("module", MODULES)
def test_perl(server, drivers, module):
    pre = "pl%s_" % ("f" if module.endswith("Fast") else "c")
    c = drivers(perl(module, server, LONG), module)
    exercise(c, server, pre)
    if module.endswith("Fast"):
        assert c.call("version").startswith("1.")  # server_versions; it has no stats call
    else:
        assert "queue_%sfifo_total_items" % pre in c.call("stats")  # it has no version call
    consumer_dies_with_open_item(lambda: drivers(perl(module, server)), server, pre + "dies")


@pytest.mark.parametrize("module", MODULES)
def test_perl_timeout(server, drivers, module):
    pre = "pl%s_" % ("f" if module.endswith("Fast") else "c")
    # The 1 s read timeout ends a longer /t= wait as a miss (undef), not as
    # an error; the next get works.
    c = drivers(perl(module, server), module)
    said, fate, _ = timeout_limit(c, server, pre + "limit", 2500)
    assert said == {"r": None}
    assert fate == "next get"
