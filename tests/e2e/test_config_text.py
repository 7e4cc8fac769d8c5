"""
A config file that is not text (a NUL byte, invalid UTF-8) is refused with
its file and line: at start ternd exits with the message; a reload (the
`reload` command or SIGHUP) is refused, the error logged and returned to
the `reload` client, and the running settings stay.  UTF-8 in comments is
fine.
"""
import os
import signal

import pytest

from conftest import run_ternd, wait_until
from test_protocol import SET, STORED

GOOD = b"[queues]\n# caf\xc3\xa9 \xe2\x82\xac: UTF-8 is text\nmax_items = 1\n"

BAD = {
    "NUL first": (b"\0[queues]\nmax_items = 5\n", 1, "NUL byte at column 1: a config file is text"),
    "NUL in a value": (b"[queues]\nmax_items = 5\0\n", 2, "NUL byte at column 14: a config file is text"),
    "Latin-1": (b"[queues]\n# caf\xe9\nmax_items = 5\n", 2, "invalid UTF-8 (byte 0xe9 at column 6)"),
    "overlong": (b"[queues]\nmax_items = 5\n# \xc0\xaf\n", 3, "invalid UTF-8 (byte 0xc0 at column 3)"),
}


def write(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.rename(tmp, path)


@pytest.mark.parametrize("kind", sorted(BAD))
def test_refused_at_start(tmp_path, kind):
    data, line, msg = BAD[kind]
    conf = str(tmp_path / "t.conf")
    write(conf, data)
    rc, out, err = run_ternd(["-c", conf, "-p", "0", "-d", str(tmp_path / "data")],
                             cwd=str(tmp_path))
    assert rc == 1, err
    lines = err.decode().splitlines()
    assert lines[-1].split(" ", 2)[1:] == ["error", "%s:%d: %s" % (conf, line, msg)], lines
    assert not os.path.exists(tmp_path / "data")  # nothing was opened


def settings_kept(c):
    """max_items = 1 still applies to queue k."""
    c.send(b"delete k\r\n" + SET("k", "1") + SET("k", "2"))
    c.expect(b"DELETED\r\n" + STORED + b"NOT_STORED\r\n")


@pytest.mark.parametrize("kind", sorted(BAD))
def test_reload_refused(ternd, kind):
    data, line, msg = BAD[kind]
    s = ternd(conf=GOOD.decode())
    c = s.conn()
    settings_kept(c)
    write(s.conf_path, data)
    want = "%s:%d: %s" % (s.conf_path, line, msg)
    # SIGHUP: refused, in the log
    s.signal(signal.SIGHUP)
    wait_until(lambda: ("error reload failed: %s" % want).encode() in s.stderr(),
               what="the SIGHUP reload's error")
    settings_kept(c)
    # the command: refused, with the reason (the log folds the repeat)
    c.send(b"reload\r\n")
    assert c.readline() == ("SERVER_ERROR reload failed: %s\r\n" % want).encode()
    settings_kept(c)
    # a good file again reloads
    write(s.conf_path, GOOD.replace(b"max_items = 1", b"max_items = 2"))
    c.send(b"reload\r\n" + SET("k", "3") + SET("k", "4"))
    c.expect(b"OK\r\n" + STORED + b"NOT_STORED\r\n")
