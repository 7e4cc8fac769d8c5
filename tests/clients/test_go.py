"""
Go's gomemcache (Debian's golang-github-bradfitz-gomemcache-dev, the 2014
snapshot), through drivers/gomemcache_driver.go, built offline from the
Debian source package once per test session.
"""
import os
import subprocess

import pytest

from clientmatrix import DRIVERS, consumer_dies_with_open_item, exercise, timeout_limit

LONG = "timeout_ms=10000"  # above every /t= the scenario uses
GOPATH = "/usr/share/gocode"


@pytest.fixture(scope="module")
def gomc(tmp_path_factory):
    """Builds the driver without network: GOPATH mode against Debian's
    source tree, a throwaway build cache."""
    assert os.path.isdir(GOPATH + "/src/github.com/bradfitz/gomemcache/memcache"), \
        "golang-github-bradfitz-gomemcache-dev not installed"
    d = tmp_path_factory.mktemp("go")
    env = dict(os.environ, GO111MODULE="off", GOPATH=GOPATH, GOCACHE=str(d / "cache"),
               GOPROXY="off", GOFLAGS="", CGO_ENABLED="0")
    out = str(d / "gomemcache_driver")
    p = subprocess.run(["go", "build", "-o", out, "gomemcache_driver.go"], cwd=DRIVERS, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    assert p.returncode == 0, p.stdout.decode(errors="replace")
    return out


def test_gomemcache(server, drivers, gomc):
    addr = "127.0.0.1:%d" % server.port
    c = drivers([gomc, addr, LONG], "gomemcache")
    exercise(c, server, "go_")
    consumer_dies_with_open_item(lambda: drivers([gomc, addr]), server, "go_dies")


def test_gomemcache_timeout(server, drivers, gomc):
    # Client.Timeout defaults to 100 ms: any /t= wait longer than that fails
    # with an i/o timeout; gomemcache closes that connection and the next
    # get works.
    c = drivers([gomc, "127.0.0.1:%d" % server.port], "gomemcache")
    said, fate, _ = timeout_limit(c, server, "go_limit", 1000)
    assert "i/o timeout" in said["err"]
    assert fate == "next get"
