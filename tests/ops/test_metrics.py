"""
Monitoring: the Prometheus endpoint (metrics_listen, --metrics-listen) and
the stats forms of one queue (`stats <queue>`, `stats queue <pattern>`,
binary STAT with a key).

The exposition is parsed with prometheus_client's own parser after known
traffic, and each figure is compared with what that traffic must have
produced; the stats forms are compared line for line with the full
`stats`.
"""
import os
import re
import socket
import struct
import time

import pytest

from opsutil import (Conn, TIMEOUT, bin_frame, bin_req, bin_set, bin_stats, http_get,
                     metrics_port, run_ternd, sample, scrape, stats_lines, wait_until)

CONF = """\
[server]
metrics_listen = 127.0.0.1:0

[journal]
segment_size = 64K

[queue m.always]
sync = always

[queue m.disc]
max_items = 2
discard_old_when_full = yes
"""


def start(ternd, conf=CONF, args=()):
    srv = ternd(conf=conf, args=args)
    return srv, metrics_port(srv.stderr().decode())


def qstats(c, q):
    """The queue_<q>_* lines of the full stats, by counter."""
    pre = "queue_%s_" % q
    return {k[len(pre):]: v for k, v in c.stats().items() if k.startswith(pre)}


def test_scrape_after_known_traffic(ternd):
    srv, mport = start(ternd)
    c = srv.conn()
    # m.a: three sets; a get, an /open get and a peek
    for body in (b"aaaaa", b"bbbbb", b"ccccc"):
        assert c.set("m.a", body) == b"STORED\r\n"
    assert c.get1("m.a") == b"aaaaa"
    assert c.get1("m.a/open") == b"bbbbb"
    assert c.get1("m.a/peek") == b"ccccc"
    # m.x: a set whose absolute exptime has passed is counted and dropped
    assert c.set("m.x", b"gone", exptime=2592001) == b"STORED\r\n"
    # m.disc: the third set discards the oldest
    for body in (b"1", b"22", b"333"):
        assert c.set("m.disc", body) == b"STORED\r\n"
    # m.always: synced before STORED
    assert c.set("m.always", b"sync me") == b"STORED\r\n"
    assert c.set("m.always", b"and me") == b"STORED\r\n"
    # m.w: a get waiting on another connection
    w = srv.conn()
    w.send("get m.w/t=%d\r\n" % int(TIMEOUT * 1000))
    wait_until(lambda: qstats(c, "m.w").get("waiters") == "1", what="the waiter")
    time.sleep(0.25)  # the oldest waiting item of m.a is that old at least

    st_before = qstats(c, "m.a")
    fams, s = scrape(mport)
    st_after = qstats(c, "m.a")
    # every family has its help and a type; names follow the conventions
    for name, f in fams.items():
        assert re.match(r"^(tern|process)_[a-z0-9_]+$", name), name
        assert f.documentation, name
        assert f.type in ("counter", "gauge", "histogram"), (name, f.type)
        for smp in f.samples:
            if f.type == "counter":
                assert smp.name.endswith("_total"), smp.name
    assert sample(s, "tern_build_info", version=srv.stderr().decode().split("ternd ")[1]
                  .split(" ")[0], memcached_version="1.6.21") == 1

    def q(name, queue):
        return sample(s, name, queue=queue)

    assert q("tern_queue_items", "m.a") == 1
    assert q("tern_queue_bytes", "m.a") == 5
    assert q("tern_queue_memory_bytes", "m.a") == 5
    assert q("tern_queue_enqueued_total", "m.a") == 3
    assert q("tern_queue_dequeued_total", "m.a") == 2   # the peek is not counted
    assert q("tern_queue_open_items", "m.a") == 1
    assert q("tern_queue_waiters", "m.a") == 0
    assert q("tern_queue_expired_total", "m.a") == 0
    assert 0.25 <= q("tern_queue_oldest_item_age_seconds", "m.a") < TIMEOUT + 60
    assert q("tern_queue_enqueued_total", "m.x") == 1
    assert q("tern_queue_expired_total", "m.x") == 1
    assert q("tern_queue_items", "m.x") == 0
    assert q("tern_queue_oldest_item_age_seconds", "m.x") == 0
    assert q("tern_queue_items", "m.disc") == 2
    assert q("tern_queue_bytes", "m.disc") == 5
    assert q("tern_queue_discarded_total", "m.disc") == 1
    assert q("tern_queue_enqueued_total", "m.disc") == 3
    assert q("tern_queue_waiters", "m.w") == 1
    assert q("tern_queue_get_misses_total", "m.w") >= 1
    assert sample(s, "tern_queues") == 5
    assert sample(s, "tern_connections") == 2
    assert sample(s, "tern_connections_accepted_total") == 2
    assert sample(s, "tern_connections_max") == 1024
    assert sample(s, "tern_sets_total") == 9
    # the journal: the same figures as stats, a synced queue's fsyncs
    # (the writer may prepare a spare segment meanwhile: either reading)
    for k, name in (("journal_disk_bytes", "tern_journal_disk_bytes"),
                    ("journal_segments", "tern_journal_segments")):
        assert q(name, "m.a") in (int(st_before[k]), int(st_after[k])), k
        assert q(name, "m.a") > 0
    assert q("tern_journal_behind_items", "m.a") == 0
    assert q("tern_journal_write_errors_total", "m.a") == 0
    assert q("tern_journal_index_walks_total", "m.a") == 0
    assert st_after["journal_index_walks"] == "0"
    assert q("tern_journal_fsyncs_total", "m.always") >= 1
    assert q("tern_journal_records_total", "m.always") >= 2
    # histograms: cumulative buckets, +Inf equal to the count
    for h, least in (("tern_journal_fsync_duration_seconds", 1),
                     ("tern_journal_group_commit_records", 1)):
        buckets = sorted(((float(dict(k[1])["le"]), v) for k, v in s.items()
                          if k[0] == h + "_bucket"))
        assert len(buckets) > 5 and buckets[-1][0] == float("inf"), buckets
        counts = [v for _, v in buckets]
        assert counts == sorted(counts), counts
        assert counts[-1] == sample(s, h + "_count") >= least
        assert sample(s, h + "_sum") >= 0
    # every record written was in some group: the sum covers m.always's
    assert sample(s, "tern_journal_group_commit_records_sum") >= 2
    assert sample(s, "tern_journal_group_commit_batches_total") >= 1
    assert sample(s, "tern_journal_fsync_errors_total") == 0
    assert 0 <= sample(s, "tern_journal_group_waits_cut_total") \
        <= sample(s, "tern_journal_group_waits_total")
    assert sample(s, "process_open_fds") > 0
    assert sample(s, "process_resident_memory_bytes") > 0
    assert abs(sample(s, "process_start_time_seconds") - time.time()) < 600
    # the waiter ends with an item, and the scrape sees it gone
    c.set("m.w", b"w")
    assert w.read_values() == [("m.w/t=%d" % int(TIMEOUT * 1000), 0, b"w")]
    _, s = scrape(mport)
    assert sample(s, "tern_queue_waiters", queue="m.w") == 0
    assert sample(s, "tern_queue_dequeued_total", queue="m.w") == 1



def test_dead_letter_and_delay_metrics(ternd):
    conf = CONF + "[queue m.p]\nmax_deliveries = 2\ndead_letter = m.dlq\n" \
        "[queue m.e]\nmax_age = 1\nexpire_to = m.exp\n[queue m.n]\nmax_deliveries = 1\n"
    srv, mport = start(ternd, conf=conf)
    c = srv.conn()
    assert c.set("m.p", b"poison") == b"STORED\r\n"
    for _ in range(2):
        assert c.get1("m.p/open") == b"poison"
        c.send("get m.p/abort\r\n")
        assert c.readline() == b"END\r\n"
    assert c.set("m.n", b"x") == b"STORED\r\n"
    assert c.get1("m.n/open") == b"x"
    c.send("get m.n/abort\r\n")
    assert c.readline() == b"END\r\n"
    assert c.set("m.e", b"old") == b"STORED\r\n"
    c.send("set m.d/delay=60000 0 0 1\r\nd\r\n")
    assert c.readline() == b"STORED\r\n"
    time.sleep(1.1)
    c.send("flush_expired m.e\r\n")
    assert c.readline() == b"1\r\n"
    fams, s = scrape(mport)
    assert sample(s, "tern_queue_dead_lettered_total", queue="m.p") == 1
    assert sample(s, "tern_queue_redeliveries_total", queue="m.p") == 1
    assert sample(s, "tern_queue_items", queue="m.dlq") == 1
    assert sample(s, "tern_queue_dead_dropped_total", queue="m.n") == 1
    assert sample(s, "tern_queue_expired_moved_total", queue="m.e") == 1
    assert sample(s, "tern_queue_expired_total", queue="m.e") == 1
    assert sample(s, "tern_queue_items", queue="m.exp") == 1
    assert sample(s, "tern_queue_delayed_items", queue="m.d") == 1
    assert sample(s, "tern_queue_items", queue="m.d") == 1
    st = c.stats()
    assert (st["dead_lettered"], st["dead_dropped"], st["expired_to"], st["delayed_items"],
            st["redeliveries"]) == ("1", "1", "1", "1", "1")

def test_requests_by_protocol_and_connections(ternd):
    srv, mport = start(ternd)
    _, before = scrape(mport)
    c = srv.conn()
    c.send("version\r\nmn\r\nmn\r\nset r 0 0 1\r\nx\r\nget r\r\n")
    c.expect("VERSION ")
    c.readline()
    c.expect("MN\r\nMN\r\nSTORED\r\nVALUE r 0 1\r\nx\r\nEND\r\n")
    b = srv.conn()
    b.send(bin_req("NOOP", opaque=7))
    assert bin_frame(b)["opaque"] == 7
    _, after = scrape(mport)

    def delta(proto):
        return (sample(after, "tern_requests_total", protocol=proto) -
                sample(before, "tern_requests_total", protocol=proto))

    assert (delta("text"), delta("meta"), delta("binary")) == (3, 2, 1)
    assert sample(after, "tern_connections") == 2
    assert sample(after, "tern_get_hits_total") == 1
    c.close()
    b.close()
    wait_until(lambda: sample(scrape(mport)[1], "tern_connections") == 0,
               what="the connections to close")


def test_http_details(ternd):
    srv, mport = start(ternd)
    status, headers, body = http_get(mport, method="HEAD")
    assert status == 200 and body == b"", (status, body)
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    status, _, body = http_get(mport, path="/nothing")
    assert status == 404 and b"the status page at /" in body, (status, body)
    status, _, _ = http_get(mport, path="/metrics?x=1")
    assert status == 200
    status, _, _ = http_get(mport, method="POST")
    assert status in (405, 501), status
    # the protocol port is unaffected
    with srv.conn() as c:
        assert c.call("version").startswith(b"VERSION ")


def test_off_by_default_and_command_line(ternd, tmp_path):
    srv = ternd()
    assert "metrics at" not in srv.stderr().decode()
    rc, out, err = run_ternd(["--metrics-listen", "nonsense", "--dump-config"])
    assert rc != 0 and b"bad --metrics-listen" in err, err
    srv2 = ternd(args=["--metrics-listen", "127.0.0.1:0"])
    port = metrics_port(srv2.stderr().decode())
    fams, _ = scrape(port)
    assert "tern_connections" in fams
    # the port is taken: a second server with it stops with a clear error
    rc, out, err = run_ternd(["-p", "0", "-d", str(tmp_path / "d"), "--metrics-listen",
                              "127.0.0.1:%d" % port])
    assert rc == 1 and b"cannot listen for metrics on 127.0.0.1:%d" % port in err, err


def test_stats_of_one_queue_and_patterns(ternd):
    srv, _ = start(ternd)
    c = srv.conn()
    for q, n in (("jobs.b", 2), ("jobs.a", 1), ("logs", 3), ("items", 1)):
        for i in range(n):
            assert c.set(q, b"x" * (i + 1)) == b"STORED\r\n"
    full = c.stats()

    def from_full(q):
        pre = "queue_%s_" % q
        return [(k, v) for k, v in full.items() if k.startswith(pre)]

    def no_age(lines):
        """Without the figures that move by themselves: the age, and what
        the journal's threads do in the background (syncs, new segments)."""
        moving = ("_age", "_journal_syncs", "_journal_records", "_journal_disk_bytes",
                  "_journal_segments")
        return [(k, v) for k, v in lines if not k.endswith(moving)]

    one = stats_lines(c, "jobs.a")
    assert [k for k, _ in one] == [k for k, _ in from_full("jobs.a")]
    assert no_age(one) == no_age(from_full("jobs.a"))
    assert dict(one)["queue_jobs.a_items"] == "1"
    assert dict(one)["queue_jobs.a_dequeued"] == "0"
    # a pattern: every match, sorted by name
    lines = stats_lines(c, "queue jobs.*")
    assert no_age(lines) == no_age(from_full("jobs.a") + from_full("jobs.b"))
    assert no_age(stats_lines(c, "queue *")) == no_age(
        from_full("items") + from_full("jobs.a") + from_full("jobs.b") + from_full("logs"))
    assert no_age(stats_lines(c, "queue ?ogs")) == no_age(from_full("logs"))
    assert no_age(stats_lines(c, "queue [il]*")) == no_age(from_full("items") + from_full("logs"))
    # a queue named like memcached's groups is reached through the pattern
    assert no_age(stats_lines(c, "queue items")) == no_age(from_full("items"))
    assert stats_lines(c, "queue nomatch*") == []
    assert stats_lines(c, "nosuch") == []
    # memcached's groups and malformed arguments are refused
    assert c.call("stats items") == \
        b"CLIENT_ERROR stats groups not supported (stats queue <pattern>)\r\n"
    assert c.call("stats slabs") == \
        b"CLIENT_ERROR stats groups not supported (stats queue <pattern>)\r\n"
    assert c.call("stats a b") == b"CLIENT_ERROR bad command line format\r\n"
    assert c.call("stats q/open") == b"CLIENT_ERROR bad queue name\r\n"
    assert c.call("stats queue a/b") == b"CLIENT_ERROR bad stats pattern\r\n"
    # the general stats are unchanged, and the connection still works
    assert "curr_connections" in c.stats()
    assert c.get1("jobs.a") == b"x"

    # the binary protocol: STAT with the same arguments as its key
    b = srv.conn()
    got = bin_stats(b, b"jobs.b")
    assert no_age(list(got.items())) == no_age(from_full("jobs.b"))
    got = bin_stats(b, b"queue jobs.*")
    assert [k for k in got] == [k for k, _ in from_full("jobs.a") + from_full("jobs.b")]
    assert got["queue_jobs.a_items"] == "0"  # the get above took it
    f = bin_stats(b, b"nosuch")
    assert (f["status"], f["value"]) == (0x01, b"Not found")
    f = bin_stats(b, b"items")
    assert (f["status"], f["value"]) == \
        (0x83, b"stats groups not supported (stats queue <pattern>)")
    f = bin_stats(b, b"queue a%")
    assert (f["status"], f["value"]) == (0x04, b"bad stats pattern")
    assert "curr_connections" in bin_stats(b)


def test_status_in_metrics(ternd):
    srv, mport = start(ternd, conf=CONF + "[queue m.ro]\nstatus = READONLY\n")
    c = srv.conn()
    assert c.set("m.up", b"x") == b"STORED\r\n"
    assert c.set("m.ro", b"x") == b"SERVER_ERROR queue m.ro is READONLY\r\n"
    assert c.call("get m.ro") == b"END\r\n"  # made by nothing: a miss
    assert c.call("status queue m.up QUIESCENT") == b"END\r\n"
    assert c.call("get m.up") == b"SERVER_ERROR queue m.up is QUIESCENT\r\n"
    _, samples = scrape(mport)
    assert sample(samples, "tern_server_status") == 0
    assert sample(samples, "tern_queue_status", queue="m.up") == 2
    assert sample(samples, "tern_status_refused_total") == 2
    assert c.call("status READONLY") == b"END\r\n"
    assert c.call("status queue m.up UP") == b"END\r\n"
    _, samples = scrape(mport)
    assert sample(samples, "tern_server_status") == 1
    assert sample(samples, "tern_queue_status", queue="m.up") == 0


def test_metrics_listener_guarded(ternd):
    """The issue's probe: a client sending a byte a second kept its metrics
    connection for good, and the listener took any number of them.  Now
    each connection closes metrics_timeout after its accept, and at
    metrics_max_connections the listener pauses: the next scrape waits in
    the backlog and is served once a slot frees."""
    srv, port = start(ternd, conf="[server]\nmetrics_listen = 127.0.0.1:0\n"
                                  "metrics_max_connections = 3\nmetrics_timeout = 2\n")
    drip = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    idle = [socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) for _ in range(2)]
    t0 = time.monotonic()
    # the fourth waits: connected (the kernel's backlog), not served
    late = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    late.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
    late.settimeout(0.5)
    with pytest.raises(socket.timeout):
        late.recv(1)
    closed = None
    for ch in b"GET /metrics HTTP/1.1\r\nHost: x\r\n":
        try:
            drip.sendall(bytes([ch]))
        except OSError:
            closed = time.monotonic() - t0
            break
        drip.settimeout(0.3)
        try:
            if drip.recv(1) == b"":
                closed = time.monotonic() - t0
                break
        except socket.timeout:
            pass
        if time.monotonic() - t0 > 8:
            break
    assert closed is not None and 1.5 <= closed <= 6, closed
    late.settimeout(TIMEOUT)
    got = b""
    while not got.endswith(b"\n") or b"tern_metrics_timeouts_total" not in got:
        b = late.recv(65536)
        if not b:
            break
        got += b
    assert re.match(rb"HTTP/1\.[01] 200 OK\r\n", got), got[:200]
    m = re.search(rb"\ntern_metrics_timeouts_total (\d+)\n", got)
    assert m and int(m.group(1)) >= 3, got[-2000:]
    assert re.search(rb"\ntern_metrics_paused_total [1-9]", got)
    for s in [drip, late] + idle:
        s.close()
    with srv.conn() as c:
        st = c.stats()
    assert int(st["metrics_timeouts"]) >= 3 and int(st["metrics_paused"]) >= 1, st
    assert b"closed a metrics connection that was still open after 2 s" in srv.stderr()
