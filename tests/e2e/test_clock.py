"""
Steps of the wall clock under a running ternd (libfaketime, preloaded: the
offset in a file it rereads at every call, the monotonic clock left
alone).

Timeouts run on the monotonic clock and ignore a step: /open's
open_timeout (a step forward never hands an open item to a second reader;
a step back never holds one past its timeout), /t= waits, idle_timeout and
request_timeout.  Expiry keeps its wall-clock meaning: exptime is a unix
time or seconds from the set, so a step forward past it expires the item;
an item without exptime never expires.
"""
import glob
import os
import time

import pytest

from conftest import TIMEOUT, wait_until
from test_protocol import END, SET, STORED, V, qstat

LIBS = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))


@pytest.fixture
def clock(tmp_path, monkeypatch):
    """Preloads libfaketime into the servers this test starts; returns
    step(spec), which sets the offset ("+2h", "-1h", "+0")."""
    if not LIBS:
        pytest.skip("libfaketime not installed (Debian package faketime)")
    path = tmp_path / "faketime"

    def step(spec):
        tmp = str(path) + ".tmp"
        with open(tmp, "w") as f:
            f.write(spec + "\n")
        os.rename(tmp, path)  # read whole or not at all

    step("+0")
    monkeypatch.setenv("LD_PRELOAD", LIBS[0])
    monkeypatch.setenv("FAKETIME_TIMESTAMP_FILE", str(path))
    monkeypatch.setenv("FAKETIME_NO_CACHE", "1")
    monkeypatch.setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1")
    if os.environ.get("TERN_ASAN"):
        # ASan wants to come first among the libraries; libfaketime only
        # wraps clock calls, which ASan does not intercept.
        cur = os.environ.get("ASAN_OPTIONS", "")
        monkeypatch.setenv("ASAN_OPTIONS", (cur + ":" if cur else "") + "verify_asan_link_order=0")
    return step


def server_time(c):
    return int(c.stats()["time"])


def stepped(c, before, by):
    """Waits until the server's wall clock shows the step (a sanity check:
    the test must not pass because the step did not happen)."""
    wait_until(lambda: abs(server_time(c) - before - by) < 60, what="the clock step")


def test_step_forward(ternd, clock):
    s = ternd(conf="[queues]\nopen_timeout = 600000\n")
    a, b = s.conn(), s.conn()
    a.send(SET("o", "held") + SET("o", "next") + b"get o/open\r\n"
           + SET("plain", "forever") + SET("rel", "soon", exptime=60)
           + SET("rel", "later", exptime=3 * 3600))
    a.expect(STORED * 2 + V("o/open", "held") + END + STORED * 3)
    t0 = server_time(a)
    clock("+2h")
    stepped(a, t0, 7200)
    time.sleep(0.5)  # ten timer ticks
    # the open item stays a's: b gets the next one, then nothing
    b.send(b"get o\r\nget o\r\n")
    b.expect(V("o", "next") + END + END)
    assert qstat(b, "o", "open_transactions") == 1
    # no exptime: never expires; 60 s: two hours later, gone; 3 h: not yet
    b.send(b"get plain\r\nget rel\r\nget rel\r\n")
    b.expect(V("plain", "forever") + END + V("rel", "later") + END + END)
    assert qstat(b, "rel", "expired_items") == 1
    # a still holds its item and confirms it
    a.send(b"get o/close\r\nget o\r\n")
    a.expect(END + END)
    assert int(b.stats()["uptime"]) < 600


def test_step_back(ternd, clock):
    s = ternd(conf="[queues]\nopen_timeout = 1000\n")
    a, b = s.conn(), s.conn()
    a.send(SET("o", "x") + b"get o/open\r\n")
    a.expect(STORED + V("o/open", "x") + END)
    t0 = server_time(b)
    clock("-1h")
    stepped(b, t0, -3600)
    # open_timeout: back at the head after about a second, not an hour
    # (a stays connected: its close would return the item too)
    t = time.monotonic()
    b.send(b"get o/t=10000\r\n")
    b.expect(V("o/t=10000", "x") + END)
    assert time.monotonic() - t < 5
    a.send(b"get o/close\r\n")
    a.expect(END)
    assert qstat(b, "o", "open_transactions") == 0
    # a /t= wait ends after its time
    t = time.monotonic()
    b.send(b"get none/t=1000\r\n")
    b.expect(END)
    assert 0.8 <= time.monotonic() - t < 5
    assert int(b.stats()["uptime"]) < 600


def test_step_back_connection_timeouts(ternd, clock):
    s = ternd(conf="[server]\nidle_timeout = 2\nrequest_timeout = 1\n")
    idle, slow = s.conn(), s.conn()
    idle.send(b"version\r\n")
    idle.readline()
    t0 = server_time(slow)
    clock("-1h")
    stepped(slow, t0, -3600)
    # request_timeout and idle_timeout still close after about 1 and 2 s
    t = time.monotonic()
    slow.send(b"get half")
    idle.assert_closed()
    slow.assert_closed()
    assert time.monotonic() - t < 5
    c = s.conn()
    assert c.stats()["request_timeouts"] == "1"
