"""
The status page and the probes on the metrics listener (server/statuspage.h):
/healthz, /readyz with each reason it gives (server status, a failed
journal, an unwritable or full data directory), and the HTML page read as
a browser would get it, after known traffic: every figure in its row, the
charts' totals, no message body, names and arguments escaped, pages of
many queues with sorting and a filter.  test_status_browser.py loads the
same page in a real browser.

The failed journal comes from an LD_PRELOAD shim that makes fdatasync fail
while a flag file exists; the full and read-only data directories from a
small tmpfs (root only: skipped with the reason otherwise).
"""
import html.parser
import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest

from opsutil import (TIMEOUT, Conn, http_get, metrics_port, sample, scrape,
                     wait_until)

CONF = """\
[server]
metrics_listen = 127.0.0.1:0

[journal]
segment_size = 64K
"""
BODY_MARK = "BODYMARK-7f3a"


def start(ternd, conf=CONF, **kw):
    srv = ternd(conf=conf, **kw)
    return srv, metrics_port(srv.stderr().decode())


class PageParser(html.parser.HTMLParser):
    """The parts of the page the tests read: the queue table's rows ({queue:
    {cell class: text}}), each row's chart titles, elements' text by id, the
    links, and every chart's class."""

    def __init__(self):
        super().__init__()
        self.rows, self.order, self.by_id, self.links, self.svgs = {}, [], {}, {}, []
        self.titles = {}
        self._row = None
        self._cell = None
        self._ids = []       # (id, depth) of open elements with an id
        self._depth = 0
        self._svg_title = False
        self._in_svg = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag not in ("meta", "input", "br", "link", "polyline", "polygon", "rect"):
            self._depth += 1
            if "id" in a:
                self._ids.append((a["id"], self._depth))
                self.by_id[a["id"]] = ""
        if tag == "tr" and "data-queue" in a:
            self._row = a["data-queue"]
            self.rows[self._row] = {}
            self.order.append(self._row)
            self.titles[self._row] = []
        elif tag == "td" and self._row is not None:
            self._cell = (a.get("class") or "").split(" ")[0]
            self.rows[self._row].setdefault(self._cell, "")
        elif tag == "a" and "id" in a:
            self.links[a["id"]] = a["href"]
        elif tag == "svg":
            self.svgs.append(a.get("class", ""))
            self._in_svg += 1
        elif tag == "title" and self._in_svg:
            self._svg_title = True
            if self._row is not None:
                self.titles[self._row].append("")

    def handle_endtag(self, tag):
        if tag in ("meta", "input", "br", "link", "polyline", "polygon", "rect"):
            return
        while self._ids and self._ids[-1][1] >= self._depth:
            self._ids.pop()
        self._depth -= 1
        if tag == "tr":
            self._row = None
        elif tag == "td":
            self._cell = None
        elif tag == "svg":
            self._in_svg -= 1
        elif tag == "title":
            self._svg_title = False

    def handle_data(self, data):
        for i, _ in self._ids:
            self.by_id[i] += data
        if self._svg_title:
            if self._row is not None:
                self.titles[self._row][-1] += data
            return
        if self._row is not None and self._cell is not None and not self._in_svg:
            self.rows[self._row][self._cell] += data


def page(mport, query=""):
    """(parsed page, raw text, headers) of GET /?query."""
    status, headers, body = http_get(mport, "/" + ("?" + query if query else ""))
    assert status == 200, (status, body[:500])
    text = body.decode()
    p = PageParser()
    p.feed(text)
    p.close()
    return p, text, headers


def known_traffic(srv):
    """Known traffic on four queues; returns the connections that hold open
    items and a waiting get (close them to end those)."""
    c = srv.conn()
    for i in range(30):
        assert c.set("orders", "%s order %d" % (BODY_MARK, i)) == b"STORED\r\n"
    for i in range(10):
        assert c.get1("orders") == ("%s order %d" % (BODY_MARK, i)).encode()
    for i in range(5):
        assert c.set("emails", "%s mail %d" % (BODY_MARK, i)) == b"STORED\r\n"
    holder = srv.conn()
    for i in range(2):
        assert holder.get1("emails/open") == ("%s mail %d" % (BODY_MARK, i)).encode()
    assert c.set("frozen", "x") == b"STORED\r\n"
    c.send("status queue frozen READONLY\r\n")
    assert c.readline() == b"END\r\n"
    waiter = srv.conn()
    waiter.send("get idle/t=%d\r\n" % int(TIMEOUT * 1000))
    wait_until(lambda: c.stats().get("queue_idle_waiters") == "1", what="the waiter")
    return [c, holder, waiter]


def test_probes(ternd):
    srv, mport = start(ternd)
    assert http_get(mport, "/healthz")[::2] == (200, b"ok\n")
    status, headers, body = http_get(mport, "/readyz")
    assert (status, body) == (200, b"ready\n")
    assert headers["content-type"] == "text/plain; charset=utf-8"
    assert headers["cache-control"] == "no-store"
    status, _, body = http_get(mport, "/readyz", method="HEAD")
    assert (status, body) == (200, b"")
    c = srv.conn()
    for word, reason in (("READONLY", b"not ready: server is READONLY\n"),
                         ("QUIESCENT", b"not ready: server is QUIESCENT\n")):
        c.send("status %s\r\n" % word)
        assert c.readline() == b"END\r\n"
        assert http_get(mport, "/readyz")[::2] == (503, reason)
        assert http_get(mport, "/healthz")[::2] == (200, b"ok\n")
        p, _, _ = page(mport)
        assert p.by_id["server-status"] == word
        assert "not ready" in p.by_id["ready"] and ("server is " + word) in p.by_id["ready"]
    # a queue's own status is not the server's readiness
    c.send("status UP\r\n")
    assert c.readline() == b"END\r\n"
    assert c.set("q", "x") == b"STORED\r\n"
    c.send("status queue q READONLY\r\n")
    assert c.readline() == b"END\r\n"
    assert c.set("q", "x") == b"SERVER_ERROR queue q is READONLY\r\n"
    assert http_get(mport, "/readyz")[::2] == (200, b"ready\n")


FAIL_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* fdatasync of a file whose path contains TERN_TEST_FSYNC_PATH fails with
 * EIO while the file TERN_TEST_FSYNC_FAIL names exists. */
int fdatasync(int fd)
{
	static int (*real)(int);
	const char *flag = getenv("TERN_TEST_FSYNC_FAIL");
	const char *part = getenv("TERN_TEST_FSYNC_PATH");
	char link[64], path[4096];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof(path) - 1);
	path[n > 0 ? n : 0] = '\0';
	if (flag && part && strstr(path, part) && access(flag, F_OK) == 0) {
		errno = EIO;
		return -1;
	}
	if (!real)
		real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
	return real(fd);
}
"""


def test_ready_names_a_failed_journal(ternd, tmp_path, monkeypatch):
    src, lib, flag = tmp_path / "fail.c", tmp_path / "libfail.so", tmp_path / "fail-now"
    src.write_text(FAIL_SHIM)
    r = subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(lib),
                        str(src), "-ldl"],
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    monkeypatch.setenv("LD_PRELOAD", str(lib))
    monkeypatch.setenv("TERN_TEST_FSYNC_FAIL", str(flag))
    # only the segments of queue "synced" (another queue's periodic sync
    # must not fail meanwhile)
    monkeypatch.setenv("TERN_TEST_FSYNC_PATH", "/queues/synced/")
    # under ASan the shim comes before the sanitizer's runtime
    monkeypatch.setenv("ASAN_OPTIONS", os.environ.get("ASAN_OPTIONS", "") +
                       ":verify_asan_link_order=0")
    srv, mport = start(ternd, conf=CONF + "[queue synced]\nsync = always\n")
    c = srv.conn()
    assert c.set("synced", "one") == b"STORED\r\n"
    assert c.set("other", "two") == b"STORED\r\n"
    assert http_get(mport, "/readyz")[::2] == (200, b"ready\n")
    flag.write_text("")
    reply = c.set("synced", "lost")
    assert reply.startswith(b"SERVER_ERROR"), reply
    flag.unlink()
    status, _, body = http_get(mport, "/readyz")
    assert (status, body) == (503, b"not ready: the journal of queue synced has failed "
                                   b"(it refuses sets until a restart)\n")
    p, _, _ = page(mport)
    assert p.rows["synced"]["jstate"] == "failed"
    assert p.rows["other"]["jstate"] == "ok"
    assert p.by_id["journal-errors"].startswith("1 failed journal, ")
    _, s = scrape(mport)
    assert sample(s, "tern_journal_write_errors_total", queue="synced") >= 1
    assert sample(s, "tern_journal_fsync_errors_total") >= 1
    # the rest of the server still works
    assert c.set("other", "three") == b"STORED\r\n"


@pytest.fixture
def tmpfs():
    """A 4 MiB tmpfs that every user can reach (pytest's directories are
    root's alone), unmounted by path at teardown (request it before the
    ternd fixture, so that its servers stop first)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a size-limited tmpfs and to run ternd as nobody")
    d = tempfile.mkdtemp(prefix="tern-ready-", dir="/tmp")
    os.chmod(d, 0o755)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0755", "tmpfs", d],
                       capture_output=True, timeout=30)
    if r.returncode != 0:
        os.rmdir(d)
        pytest.skip("cannot mount a tmpfs: %s" % r.stderr.decode().strip())
    try:
        yield d
    finally:
        if subprocess.run(["umount", d], capture_output=True, timeout=30).returncode:
            subprocess.run(["umount", "-l", d], capture_output=True, timeout=30)
        shutil.rmtree(d, ignore_errors=True)


def test_ready_checks_the_data_directory(tmpfs, ternd):
    """As user nobody, on a small file system: a full one and a data
    directory the user cannot write make it not ready, until they are
    put right."""
    data = os.path.join(tmpfs, "data")
    srv, mport = start(ternd, conf=CONF.replace("64K", "1M"), datadir=data,
                       args=["-u", "nobody"])
    with srv.conn() as c:
        assert c.set("q", "x") == b"STORED\r\n"
    assert http_get(mport, "/readyz")[::2] == (200, b"ready\n")
    # the file system fills up: less than one segment left
    filler = os.path.join(tmpfs, "filler")
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    status, _, body = http_get(mport, "/readyz")
    assert status == 503, body
    assert re.fullmatch(rb"not ready: the data directory's file system has [0-9.]+ [KM]?i?B "
                        rb"free, less than one journal segment \(segment_size 1\.00 MiB\)\n",
                        body), body
    os.unlink(filler)
    assert http_get(mport, "/readyz")[::2] == (200, b"ready\n")
    # the directory taken away from the server's user
    mode = os.stat(data).st_mode & 0o7777
    os.chmod(data, 0o555)
    try:
        status, _, body = http_get(mport, "/readyz")
        assert (status, body) == (503, b"not ready: the data directory is not writable: "
                                       b"Permission denied\n")
        p, _, _ = page(mport)
        assert "not writable" in p.by_id["ready"]
    finally:
        os.chmod(data, mode)
    assert http_get(mport, "/readyz")[::2] == (200, b"ready\n")


def test_page_shows_known_traffic(ternd):
    srv, mport = start(ternd)
    conns = known_traffic(srv)
    p, text, headers = page(mport)
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert "script-src 'self'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    assert BODY_MARK not in text, "a message body on the page"
    assert p.order == ["emails", "frozen", "idle", "orders"]
    want = {
        "orders": dict(items="20", open="0", waiters="0", status="UP", sync="interval",
                       jstate="ok"),
        "emails": dict(items="3", open="2", waiters="0", status="UP"),
        "frozen": dict(items="1", status="READONLY"),
        "idle": dict(items="0", waiters="1", age="\u2013", status="UP"),
    }
    for q, cells in want.items():
        for k, v in cells.items():
            assert p.rows[q][k] == v, (q, k, p.rows[q])
    assert re.fullmatch(r"\d+(\.\d)? (ms|s)", p.rows["orders"]["age"]), p.rows["orders"]
    assert float(p.rows["orders"]["in"]) > 0 and float(p.rows["orders"]["out"]) > 0
    # each row's chart states what went in and out since the start
    assert p.titles["orders"] == ["since start, under 10 min: 30 in, 10 out; depth now 20, "
                                  "at most 20"]
    assert p.titles["emails"] == ["since start, under 10 min: 5 in, 2 out; depth now 3, "
                                  "at most 3"]
    assert p.svgs.count("spark") == 4 and p.svgs.count("chart") == 2
    assert re.search(r'<polyline class="in" points="[0-9., ]+"/>', text)
    # the server's figures
    assert p.by_id["version"].startswith("ternd %s " % srv.stderr().decode()
                                         .split("ternd ")[1].split(" ")[0])
    assert p.by_id["sync-mode"] == "interval (every 100 ms) (every queue)"
    assert p.by_id["server-status"] == "UP"
    assert p.by_id["ready"] == "ready"
    assert p.by_id["queue-count"] == "4"
    assert p.by_id["items"].startswith("24 (") and p.by_id["items"].endswith(", 2 open")
    assert p.by_id["connections"] == "3 (at most 1024)"
    assert re.fullmatch(r"[0-9.]+ (B|KiB|MiB) in \d+ segment files?; [0-9.]+ \w+ free",
                        p.by_id["disk"]), p.by_id["disk"]
    assert re.fullmatch(r"\d+ fdatasyncs? since start, mean [0-9.]+ ms, median \S+ [0-9.]+ "
                        r"ms, p99 \S+ [0-9.]+ ms; 0 failed\.|no fdatasync since start; 0 "
                        r"failed\.", p.by_id["fsync-summary"]), p.by_id["fsync-summary"]
    for c in conns:
        c.close()


def test_page_names_the_sync_modes(ternd):
    srv, mport = start(ternd, args=["--sync", "always"])
    p, _, _ = page(mport)
    assert p.by_id["sync-mode"] == "always (--sync, every queue)"
    srv, mport = start(ternd, conf=CONF + "[queue s.*]\nsync = always\n")
    with srv.conn() as c:
        for q in ("s.1", "s.2", "plain"):
            assert c.set(q, "x") == b"STORED\r\n"
    p, _, _ = page(mport)
    assert p.by_id["sync-mode"] == "interval (every 100 ms) (the default; 2 queues have another)"
    assert [p.rows[q]["sync"] for q in ("plain", "s.1", "s.2")] == ["interval", "always",
                                                                   "always"]


def test_arguments_are_escaped_and_checked(ternd):
    srv, mport = start(ternd)
    with srv.conn() as c:
        assert c.set("a.b", "x") == b"STORED\r\n"
    p, text, _ = page(mport, "q=%3Cscript%3Ealert(1)%3C/script%3E%22%27&sort=bogus&n=-3"
                             "&page=zz&refresh=99999")
    assert "<script>alert" not in text and "\"'" not in text.split("<body")[1]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;" in text
    assert p.order == []
    assert 'data-refresh="3600"' in text     # capped
    assert "by name" in p.by_id["shown"]     # a bad sort is the default
    p, text, _ = page(mport, "q=a.&refresh=0")
    assert p.order == ["a.b"] and 'data-refresh="0"' in text
    # other paths are not the page
    assert http_get(mport, "/index.html")[0] == 404
    status, headers, body = http_get(mport, "/status.js")
    assert status == 200 and headers["content-type"].startswith("text/javascript")
    assert b"getElementById('main')" in body


def test_many_queues_in_pages(ternd):
    n = 1234
    srv, mport = start(ternd)
    c = srv.conn()
    # queue qNNNN gets NNNN % 7 items: the sort by items is known
    batch = b"".join(b"set q%04d 0 0 1 noreply\r\nx\r\n" % i
                     for i in range(n) for _ in range(i % 7 or 1))
    c.send(batch)
    wait_until(lambda: c.stats()["queues"] == str(n), timeout=120, what="the queues")
    t0 = time.monotonic()
    p, text, _ = page(mport)
    first_s = time.monotonic() - t0
    assert len(p.order) == 100
    assert p.order == ["q%04d" % i for i in range(100)]
    assert p.by_id["shown"].startswith("queues 1\u2013100 of %d, by name; page 1 of 13" % n)
    assert "prev" not in p.links and p.links["next"].startswith("?page=2&n=100&sort=name")
    assert len(text) < 400000, len(text)
    p, text, _ = page(mport, "page=13")
    assert p.order == ["q%04d" % i for i in range(1200, n)]
    assert "next" not in p.links
    p, _, _ = page(mport, "page=999")   # past the end: the last page
    assert p.order[-1] == "q%04d" % (n - 1)
    # by items: 6 items first (q0006, q0013, ...), then 5, ...
    p, _, _ = page(mport, "sort=items&n=500")
    six = sorted("q%04d" % i for i in range(n) if i % 7 == 6)
    assert p.order[:len(six)] == six
    assert [p.rows[q]["items"] for q in p.order[:len(six) + 1]] == ["6"] * len(six) + ["5"]
    assert len(p.order) == 500
    # a filter, with the link to the next page keeping it
    p, _, _ = page(mport, "q=q12&n=10")
    assert p.order == ["q%04d" % i for i in range(1200, 1210)]
    assert p.links["next"] == "?page=2&n=10&sort=name&refresh=5&q=q12"
    assert "of %d" % n in p.by_id["shown"]
    print("page of 100 rows out of %d queues: %d bytes, %.3f s" % (n, len(text), first_s))
