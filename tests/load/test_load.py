"""
End-to-end tests of tern-load: against ternd (sequential, mixed, several
queues, reliable /open reads, size ranges, produce then consume), against
memcached with --no-verify and with --key-per-message (every body checked), against a fake server that loses, duplicates,
reorders and corrupts messages (verification must report each kind and exit
non-zero), and smoke tests of --proto redis and --proto beanstalk.
Counts are asserted, never speed.
"""
import re
import socket

CLASSIC = [
    r"^Writing (\d+) messages of size 512 took \d+\.\d{3} seconds - \d+\.\d{3} msg/s - "
    r"\d+\.\d{3} MiB/s \(with 0 errors\)$",
    r"^Reading (\d+) messages took \d+\.\d{3} seconds - \d+\.\d{3} msg/s - \d+\.\d{3} MiB/s$",
    r"^Checking response correctness\.$",
    r"^Found 0 errors in (\d+) responses\.$",
]


def assert_clean(r, queues, n):
    assert r.rc == 0, r
    j = r.json
    assert j["total_errors"] == 0, r
    assert len(j["per_queue"]) == queues
    for q in j["per_queue"]:
        assert q["write"]["messages"] == n, r
        assert q["read"]["messages"] == n, r
        assert q["total_errors"] == 0, r
    assert all(v == 0 for v in j["errors"].values()), r


# ---- ternd -------------------------------------------------------------------

def test_ternd_classic_output(load, ternd):
    r = load("-p", ternd, "-n", 2000)
    assert r.rc == 0, r
    lines = r.out.splitlines()
    for i, pat in enumerate(CLASSIC):
        m = re.match(pat, lines[i])
        assert m, "line %d %r does not match %r\n%r" % (i, lines[i], pat, r)
        if m.groups():
            assert m.group(1) == "2000"
    assert re.search(r"^Set latency \(us\): p50 [\d.]+  p90 [\d.]+  p99 [\d.]+  "
                     r"p99\.9 [\d.]+  max [\d.]+", r.out, re.M), r
    assert re.search(r"^Get latency \(us\): p50", r.out, re.M), r
    assert "\r" not in r.err  # no progress line when stderr is not a tty
    # the CPU line is the load generator's own, and says so
    assert re.search(r"^tern-load's own CPU \(the load generator's, not the server's\): "
                     r"[\d.]+ s user \+ [\d.]+ s sys = [\d.]+ us per message$", r.out, re.M), r
    assert not re.search(r"^CPU", r.out, re.M), r


def test_json_says_when_what_and_which_server(load, ternd, memcached):
    """--json: the start time, tern-load's version, and what the server
    said of itself (a tern server its sync mode; memcached has none); the
    byte rates are MiB/s, named so."""
    import calendar
    import time
    from conftest import REPO
    before = time.time()
    r = load("-p", ternd, "-n", 100, "--json")
    assert r.rc == 0, r
    j = r.json
    started = calendar.timegm(time.strptime(j["started"], "%Y-%m-%dT%H:%M:%SZ"))
    assert before - 2 <= started <= time.time() + 1, j["started"]
    with open("%s/lib/tern.h" % REPO) as f:
        ver = re.search(r'TERN_VERSION "([^"]+)"', f.read()).group(1)
    assert j["tern_load_version"] == ver
    assert j["server"] == {"version": "1.6.21 tern-" + ver, "sync": "interval",
                           "sync_interval_ms": 100}, j["server"]
    w = j["total"]["write"]
    assert "mb_per_s" not in w, w
    assert abs(w["mib_per_s"] - w["bytes"] / 1048576 / w["seconds"]) < 0.01, w
    r = load("-p", memcached, "-n", 50, "--no-verify", "--json")
    assert r.rc == 0, r
    s = r.json["server"]
    assert s["version"] and not s["version"].startswith("1.6.21 tern") and \
        (s["sync"], s["sync_interval_ms"]) == (None, None), s


def test_ternd_sequential_several_queues(load, ternd):
    r = load("-p", ternd, "-q", 3, "-n", 3000, "-c", 2, "-P", 8, "--json")
    assert_clean(r, 3, 3000)
    assert r.json["latency_us"]["set"]["count"] == 9000
    assert r.json["latency_us"]["get"]["count"] == 9000
    assert r.json["tern_load_cpu"]["us_per_msg"] > 0


def test_ternd_several_queues_text_totals(load, ternd):
    r = load("-p", ternd, "-q", 2, "-n", 500, "--prefix", "tot_")
    assert r.rc == 0, r
    assert r.out.count("Checking response correctness.") == 2
    assert "Queue tot_0:" in r.out and "Queue tot_1:" in r.out
    assert re.search(r"^Total write: [\d.]+ msg/s - [\d.]+ MiB/s", r.out, re.M), r
    assert re.search(r"^Total read: [\d.]+ msg/s - [\d.]+ MiB/s", r.out, re.M), r


def test_ternd_mixed(load, ternd):
    r = load("-p", ternd, "--mode", "mixed", "-q", 2, "-n", 3000, "-c", 2, "-P", 4, "--json")
    assert_clean(r, 2, 3000)


def test_ternd_mixed_with_rate(load, ternd):
    r = load("-p", ternd, "--mode", "mixed", "-n", 300, "--rate", 1000, "--json")
    assert_clean(r, 1, 300)


def test_ternd_mixed_with_rate_busy_poll(load, ternd):
    """--busy-poll keeps the pacing (500 at 1000/s take about half a second)
    and every message still checks out."""
    r = load("-p", ternd, "--mode", "mixed", "-n", 500, "--rate", 1000, "--busy-poll", "--json",
             "--prefix", "bp_")
    assert_clean(r, 1, 500)
    assert r.json["total"]["write"]["seconds"] >= 0.4, r


def test_ternd_reliable_reads(load, ternd):
    r = load("-p", ternd, "-n", 500, "-P", 4, "--get-options", "/open", "--json",
             "--prefix", "rel_")
    assert_clean(r, 1, 500)
    # Every item was confirmed by the /close chain: nothing comes back.
    r = load("-p", ternd, "--mode", "consume", "--prefix", "rel_", "--json")
    assert r.rc == 0, r
    assert r.json["total"]["read"]["messages"] == 0, r


def test_ternd_size_range(load, ternd):
    r = load("-p", ternd, "-n", 1000, "-s", "24-3000", "-P", 4, "--json")
    assert_clean(r, 1, 1000)
    assert r.json["size_min"] == 24 and r.json["size_max"] == 3000


def test_ternd_produce_then_consume(load, ternd):
    r = load("-p", ternd, "--mode", "produce", "-n", 1000, "-c", 2, "--prefix", "pc_", "--json")
    assert r.rc == 0, r
    assert r.json["total"]["write"]["messages"] == 1000
    r = load("-p", ternd, "--mode", "consume", "-n", 1000, "-c", 2, "--prefix", "pc_", "--json")
    assert r.rc == 0, r
    assert r.json["total"]["read"]["messages"] == 1000
    assert r.json["total_errors"] == 0, r


def test_ternd_consume_reports_missing(load, ternd):
    # Only 600 of the 1000 expected are there: consume reports 400 lost.
    r = load("-p", ternd, "--mode", "produce", "-n", 600, "--prefix", "miss_", "--json")
    assert r.rc == 0, r
    r = load("-p", ternd, "--mode", "consume", "-n", 1000, "--prefix", "miss_", "--json")
    assert r.rc == 1, r
    assert r.json["errors"]["lost"] == 400, r


# ---- memcached (get does not dequeue) ------------------------------------------

def test_memcached_no_verify(load, memcached):
    r = load("-p", memcached, "-n", 2000, "-P", 8, "-c", 2, "--no-verify", "--json")
    assert_clean(r, 1, 2000)
    assert r.json["verify"] is False


def test_memcached_no_verify_mixed(load, memcached):
    # memcached would read "q/t=100" as another key: no get options.
    r = load("-p", memcached, "--mode", "mixed", "-n", 1000, "-P", 4, "--no-verify",
             "--get-options", "", "--json")
    assert r.rc == 0, r
    assert r.json["total"]["read"]["messages"] == 1000, r


def test_memcached_key_per_message(load, memcached):
    # Each message under a key of its own: memcached holds all of them and
    # every body read back is checked (none is read twice, none missing).
    r = load("-p", memcached, "-q", 2, "-n", 1500, "-P", 8, "-c", 3, "-s", "100-3000",
             "--key-per-message", "--json")
    assert_clean(r, 2, 1500)
    assert r.json["verify"] is True
    assert r.json["errors"]["lost"] == 0 and r.json["errors"]["duplicate"] == 0, r


def test_memcached_key_per_message_produce_then_consume(load, memcached):
    common = ("-p", memcached, "-n", 1000, "-c", 2, "-P", 4, "--prefix", "kpm_",
              "--key-per-message", "--json")
    r = load("--mode", "produce", *common)
    assert r.rc == 0, r
    assert r.json["total"]["write"]["messages"] == 1000
    r = load("--mode", "consume", *common)
    assert r.rc == 0, r
    assert r.json["total"]["read"]["messages"] == 1000
    assert r.json["total_errors"] == 0, r
    # The keys are NAME:N: what was stored is there under its own key.
    with socket.create_connection(("127.0.0.1", memcached), timeout=5) as s:
        s.sendall(b"get kpm_0:999\r\nget kpm_0:1000\r\n")
        buf = b""
        while buf.count(b"END\r\n") < 2:
            d = s.recv(65536)
            assert d, buf
            buf += d
    assert buf.startswith(b"VALUE kpm_0:999 0 512\r\n"), buf[:80]
    assert buf.endswith(b"\r\nEND\r\nEND\r\n"), buf[-40:]


def test_memcached_key_per_message_missing_keys_are_errors(load, memcached):
    # Nothing was stored under these keys: every get is an error, and the
    # reads go on to the last key rather than stopping at the first miss.
    r = load("-p", memcached, "--mode", "consume", "-n", 50, "--prefix", "none_",
             "--key-per-message", "--json")
    assert r.rc == 1, r
    assert r.json["total"]["read"]["messages"] == 0
    assert r.json["errors"]["protocol"] == 50, r
    assert "no value for key 0" in r.err


def test_key_per_message_bad_combinations(load):
    for extra in (("--mode", "mixed"), ("--no-verify",), ("--proto", "redis"),
                  ("--duration", "1"), ("--get-options", "/t=10"), ("--proxy", "127.0.0.1:1"),
                  ("--servers", "127.0.0.1:1,127.0.0.1:2")):
        r = load("--key-per-message", *extra)
        assert r.rc == 2, (extra, r)
        assert "--key-per-message takes" in r.err, (extra, r)
        assert "not " + extra[0] in r.err, (extra, r)


# ---- failures --------------------------------------------------------------------

def test_unreachable_server(load):
    from conftest import free_port
    r = load("-p", free_port(), "-n", 10)
    assert r.rc == 2, r
    assert "cannot connect" in r.err


def test_bad_options(load):
    assert load("--mode", "sideways").rc == 2
    assert load("-s", "10").rc == 2  # too small to carry the verification header
    assert load("-s", "20-10").rc == 2


def test_fake_server_drop_dup_reorder(load, fake_server):
    s = fake_server(drop={10}, dup={20}, swap={30})
    r = load("-p", s.port, "-n", 100, "-P", 4, "--json")
    assert r.rc == 1, r
    e = r.json["errors"]
    assert e["lost"] == 1, r
    assert e["duplicate"] == 1, r
    assert e["reordered"] == 1, r
    assert e["corrupt"] == 0, r
    assert r.json["total_errors"] == 3, r
    # the text form says so too
    s2 = fake_server(drop={5}, dup={6}, swap={8})
    r = load("-p", s2.port, "-n", 50)
    assert r.rc == 1, r
    assert "Found 3 errors in 50 responses." in r.out, r
    assert "lost 1, duplicate 1, reordered 1" in r.out, r


def test_fake_server_corrupt(load, fake_server):
    s = fake_server(corrupt={7})
    r = load("-p", s.port, "-n", 50, "--json")
    assert r.rc == 1, r
    e = r.json["errors"]
    # The damaged body no longer says which message it was, so its
    # original also counts as never read.
    assert e["corrupt"] == 1 and e["lost"] == 1, r
    assert e["duplicate"] == 0 and e["reordered"] == 0, r


def test_fake_server_hangup(load, fake_server):
    s = fake_server(close_after=20)
    r = load("-p", s.port, "-n", 100, "-P", 4, "--json")
    assert r.rc == 1, r
    assert r.json["errors"]["io"] >= 1, r
    assert "connection closed by server" in r.err


def test_fake_server_clean(load, fake_server):
    s = fake_server()
    r = load("-p", s.port, "-n", 300, "-c", 3, "-P", 4, "--json")
    assert_clean(r, 1, 300)


# ---- other protocols -------------------------------------------------------------

def test_redis_smoke(load, redis):
    r = load("--proto", "redis", "-p", redis, "-q", 2, "-n", 2000, "-c", 2, "-P", 8, "--json")
    assert_clean(r, 2, 2000)
    r = load("--proto", "redis", "-p", redis, "--mode", "mixed", "-n", 2000, "-P", 4, "--json")
    assert_clean(r, 1, 2000)


def test_beanstalk_smoke(load, beanstalkd):
    r = load("--proto", "beanstalk", "-p", beanstalkd, "-q", 2, "-n", 2000, "-c", 2, "-P", 8,
             "--json")
    assert_clean(r, 2, 2000)
    r = load("--proto", "beanstalk", "-p", beanstalkd, "--mode", "mixed", "-n", 1000, "-P", 4,
             "--json")
    assert_clean(r, 1, 1000)


# ---- connection and terminal details -----------------------------------------------

def test_ipv6_loopback(load, tmp_path):
    import os
    import shutil
    import socket
    import subprocess
    from conftest import stop
    if shutil.which("memcached") is None:
        import pytest
        pytest.skip("memcached is not installed")
    try:
        s = socket.socket(socket.AF_INET6)
        s.bind(("::1", 0))
        port = s.getsockname()[1]
        s.close()
    except OSError:
        import pytest
        pytest.skip("no IPv6 loopback")
    user = ["-u", "root"] if os.geteuid() == 0 else []
    proc = subprocess.Popen(["memcached", "-U", "0", "-l", "::1", "-p", str(port)] + user)
    try:
        r = None
        for _ in range(100):  # bounded wait for the listener
            r = load("-h", "::1", "-p", port, "-n", 200, "--no-verify", "--json")
            if r.rc != 2:
                break
            import time
            time.sleep(0.05)
        assert_clean(r, 1, 200)
    finally:
        stop(proc)


def test_progress_only_on_a_terminal(memcached):
    """A run longer than ~2 s shows a progress line on a terminal stderr."""
    import os
    import pty
    import select
    import subprocess
    import time
    from conftest import repo_path
    binary = repo_path("TERN_LOAD", "build/tern-load")
    master, slave = pty.openpty()
    p = subprocess.Popen([binary, "-p", str(memcached), "--mode", "produce", "--duration", "3",
                          "--rate", "2000", "--no-verify"], stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        elif p.poll() is not None:
            break
    out, _ = p.communicate(timeout=60)
    os.close(master)
    assert p.returncode == 0, (out, seen)
    assert b"\r" in seen and b"written" in seen, seen
    # rate, done/total (unknown with --duration) and the time left
    assert re.search(rb"\r\x1b\[K +\d+\.\ds  running  written \d+ \(\d+ msg/s\)  "
                     rb"read 0 \(0 msg/s\)  ETA \d+s  errors 0", seen), seen
    assert b"written" not in out  # never on stdout


def test_rate_limited_open_loop(load, memcached):
    r = load("-p", memcached, "--mode", "produce", "-n", 500, "--rate", 1000, "--no-verify",
             "--json")
    assert r.rc == 0, r
    assert r.json["total"]["write"]["messages"] == 500
    # 500 messages at 1000/s cannot finish in much less than half a second
    assert r.json["total"]["write"]["seconds"] >= 0.4, r


# each direction with its own rate
PROGRESS_RE = re.compile(r"^ +(\d+\.\d)s  (running|reading)  written (\d+)(?:/(\d+))? \((\d+) msg/s\)  "
                         r"read (\d+)(?:/(\d+))? \((\d+) msg/s\)  ETA (\S+)  errors (\d+)$")


def progress_lines(err):
    lines = [l for l in err.splitlines() if "msg/s" in l]
    out = []
    for l in lines:
        m = PROGRESS_RE.match(l)
        assert m, "bad progress line %r" % l
        out.append(m.groups())
    return out


def test_progress_option_without_a_terminal(load, memcached):
    """--progress: one line per second on a pipe, with done/total, the rate
    and the time left; the JSON on stdout is untouched."""
    r = load("-p", memcached, "--mode", "produce", "-n", 3000, "--rate", 1000, "--no-verify",
             "--progress", "--json")
    assert r.rc == 0, r
    assert r.json["total"]["write"]["messages"] == 3000
    assert "\r" not in r.err
    lines = progress_lines(r.err)
    assert 1 <= len(lines) <= 4, r.err  # 3 s of work, one line a second
    for secs, phase, w, wt, wrate, rd, rt, rrate, eta, errs in lines:
        assert phase == "running" and wt == "3000" and rt is None and errs == "0"
        assert int(w) <= 3000 and int(wrate) > 0 and (rd, rrate) == ("0", "0")
        assert re.match(r"^\d+s$", eta), eta
    # The time left shrinks as the run goes on.
    etas = [int(l[8][:-1]) for l in lines]
    assert etas == sorted(etas, reverse=True), lines


def test_progress_sequential_totals(load, memcached):
    """Sequential mode: written N/total, then reading against the same
    total; --quiet does not silence an explicit --progress."""
    r = load("-p", memcached, "-n", 1500, "--rate", 1000, "--no-verify", "--progress",
             "--quiet")
    assert r.rc == 0, r
    lines = progress_lines(r.err)
    assert lines, r.err
    assert all(l[3] == "1500" and l[6] == "1500" for l in lines), lines
    assert "ETA" not in r.out


def test_no_progress_without_option_or_terminal(load, memcached):
    r = load("-p", memcached, "--mode", "produce", "-n", 2500, "--rate", 1000, "--no-verify")
    assert r.rc == 0, r
    assert "msg/s  ETA" not in r.err


def test_json_records_get_options_mixed_default(load, fake_server):
    """Mixed mode without --get-options waits with /t=100: the report says
    so, and that is what the server received."""
    srv = fake_server()
    r = load("-p", srv.port, "--mode", "mixed", "-n", 200, "--json")
    assert r.rc == 0, r
    assert r.json["get_options"] == "/t=100"
    assert r.json["reliable_reads"] is False
    assert srv.gets and all(g == "tern_load_0/t=100" for g in srv.gets), set(srv.gets)


def test_json_records_get_options_given(load, fake_server):
    srv = fake_server()
    r = load("-p", srv.port, "--mode", "mixed", "-n", 200, "--get-options", "/t=50/open",
             "--json")
    assert r.rc == 0, r
    assert r.json["get_options"] == "/t=50/open"
    assert r.json["reliable_reads"] is True
    assert set(srv.gets) <= {"tern_load_0/t=50/open", "tern_load_0/close/t=50/open",
                             "tern_load_0/close"}, set(srv.gets)
    assert "tern_load_0/close/t=50/open" in srv.gets
    srv2 = fake_server()
    r = load("-p", srv2.port, "--mode", "mixed", "-n", 100, "--get-options", "", "--json")
    assert r.rc == 0, r
    assert r.json["get_options"] == "" and r.json["reliable_reads"] is False
    assert set(srv2.gets) == {"tern_load_0"}
