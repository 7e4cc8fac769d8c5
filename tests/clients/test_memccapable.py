"""
libmemcached's protocol conformance tester (memccapable, Debian's
libmemcached-tools) against ternd, text (-a) and binary (-b): the cases
that fail are exactly those docs/CLIENTS.md lists (queue semantics, each
with its reason), so a new failure, or a listed case that starts to pass,
fails this test.  The forms of version, verbosity and stats that
memccapable probes are also sent to Debian's memcached beside it, and
ternd must answer each as memcached does.
"""
import os
import re
import shutil
import socket
import subprocess

import pytest

from clientmatrix import REPO, TIMEOUT, e2e

# Every case memccapable 1.1.4 runs, in its order.
TEXT_CASES = [
    "version", "quit", "verbosity", "set", "set noreply", "get", "gets", "mget", "flush",
    "flush noreply", "add", "add noreply", "replace", "replace noreply", "cas", "cas noreply",
    "delete", "delete noreply", "incr", "incr noreply", "decr", "decr noreply", "append",
    "append noreply", "prepend", "prepend noreply", "stat"]
BINARY_CASES = [
    "noop", "quit", "quitq", "set", "setq", "flush", "flushq", "add", "addq", "replace",
    "replaceq", "delete", "deleteq", "get", "getq", "getk", "getkq", "incr", "incrq", "decr",
    "decrq", "version", "append", "appendq", "prepend", "prependq", "stat"]


def listed_failures():
    """The cases docs/CLIENTS.md says fail, by section: {"ascii ...", ...}."""
    with open(os.path.join(REPO, "docs", "CLIENTS.md")) as f:
        text = f.read()
    m = re.search(r"^## memccapable.*?\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, "docs/CLIENTS.md has no memccapable section"
    out = set()
    for row in re.findall(r"^\| (`(?:ascii|binary) [^|]*?) \|", m.group(1), re.M):
        for case in row.split(", "):
            case = case.strip("` ")
            proto, _, names = case.partition(" ")
            out.add("%s %s" % (proto, names))
    return out


def run_memccapable(port, flag):
    """{case: passed} of one memccapable run.  Each case prints its name
    padded to 40 columns on stdout, then [pass] on stdout or [FAIL] on
    stderr, so stdout alone tells them apart."""
    tool = shutil.which("memccapable")
    assert tool, "memccapable missing (Debian package libmemcached-tools)"
    p = subprocess.run([tool, "-h", "127.0.0.1", "-p", str(port), "-t", "2", flag],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=TIMEOUT * 6)
    out = p.stdout.decode()
    if out.endswith("All tests passed\n"):
        out = out[:-len("All tests passed\n")]
    got, i = {}, 0
    while i < len(out):
        name = out[i:i + 40].strip()
        i += 40
        passed = out.startswith("[pass]\n", i)
        if passed:
            i += len("[pass]\n")
        got[name] = passed
    return p.returncode, got


@pytest.mark.parametrize("flag,proto,cases", [("-a", "ascii", TEXT_CASES),
                                              ("-b", "binary", BINARY_CASES)])
def test_memccapable(ternd, flag, proto, cases):
    srv = ternd()
    rc, got = run_memccapable(srv.port, flag)
    assert list(got) == ["%s %s" % (proto, c) for c in cases], got
    failed = {c for c, ok in got.items() if not ok}
    want = {c for c in listed_failures() if c.startswith(proto + " ")}
    assert failed - want == set(), "failing, not listed in docs/CLIENTS.md"
    assert want - failed == set(), "listed in docs/CLIENTS.md, but passing"
    assert rc == (1 if failed else 0)


@pytest.fixture
def memcached():
    with e2e.memcached() as port:
        yield port


# Each form, then a version request: what came before the sentinel's
# VERSION line is the form's answer (nothing, for a silent one).
FORMS = ["version", "version foo bar", "version noreply", "verbosity foo bar my",
         "verbosity noreply", "verbosity 0 noreply", "verbosity", "verbosity 1", "verbosity 0",
         "verbosity 5", "verbosity 1 2", "verbosity 1 noreply", "verbosity 1 noreply x",
         "verbosity -1", "verbosity abc", "verbosity +1", "verbosity 4294967296",
         "verbosity 99999999999999999999", "stats noreply"]


def answers(port):
    out = {}
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
        f = s.makefile("rb")
        for form in FORMS:
            s.sendall(form.encode() + b"\r\nversion\r\n")
            lines = []
            while True:
                line = f.readline()
                assert line, "connection closed after %r" % form
                if line.startswith(b"VERSION ") and form.startswith("version") and not lines:
                    lines.append(b"VERSION <v>\r\n")  # the form's own answer
                    continue
                if line.startswith(b"VERSION "):
                    break
                lines.append(line)
            out[form] = b"".join(lines)
    return out


def test_forms_answered_as_memcached(ternd, memcached):
    srv = ternd()
    mine, theirs = answers(srv.port), answers(memcached)
    assert mine == theirs
    # what the forms mean for ternd: the last level set (4294967296) is
    # above memcached's highest, 2: debug
    with srv.conn() as c:
        c.send(b"stats settings\r\n")
        text = b""
        while not text.endswith(b"END\r\n"):
            text += c.readline()
    assert b"STAT verbosity 2\r\n" in text and b"STAT server.log_level debug\r\n" in text
