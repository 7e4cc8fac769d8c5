"""
ternd's log (lib/log.h) end to end: the line format and the effective
configuration at start; log_level and -v/-vv; bad log keys refused with the
file and line; syslog output (-S) received on a /dev/log socket in a private
mount namespace; journald priority prefixes when stderr is a journal stream.
The folding of repeats is tested in tests/unit/test_log.c.
"""
import calendar
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest

from opsutil import (LOG_RE, SANITIZER_RE, TIMEOUT, Conn, fields, log_records, run_ternd,
                     ternd_path, wait_until)

VERSION_RE = re.compile(r"^ternd (\d+\.\d+\.\d+)$")


def version():
    rc, out, _ = run_ternd(["--version"])
    m = VERSION_RE.match(out.decode().strip())
    assert rc == 0 and m, out
    return m.group(1)


# Started as root without -u, ternd warns (test_unix_user.py checks it).
ROOT_WARNING = ("warn", "running as root: every client that gets in acts as root's process; "
                "-u USER (or user = USER) runs ternd as another user once its sockets "
                "are bound")


def startup_records(srv):
    """The log records written up to and including the listening line (but
    the warning of a start as root)."""
    text = srv.stderr().decode()
    head = text[:text.index("ternd listening on")]
    head = head + text[len(head):].split("\n", 1)[0]
    lines = head.splitlines()
    for line in lines:
        assert LOG_RE.match(line), "not a log record: %r" % line
    return [r for r in log_records(head) if r != ROOT_WARNING]


def test_start_logs_format_and_effective_config(ternd):
    srv = ternd(conf="[server]\nmax_connections = 77\n"
                     "[queue payments]\nsync = always\nmax_items = 5\n")
    recs = startup_records(srv)
    msgs = [m for _, m in recs]
    assert all(lv == "info" for lv, _ in recs), recs
    assert msgs[0] == "ternd %s starting (pid %d)" % (version(), srv.pid)
    assert msgs[1] == "config file %s" % srv.conf_path
    server = [m for m in msgs if m.startswith("config [server] ")]
    assert server == ["config [server] listen=127.0.0.1 port=0 data_dir=%s max_connections=77 "
                      "max_item_size=1M idle_timeout=0 request_timeout=30 handshake_timeout=10 "
                      "max_handshakes=auto max_queues=10000 "
                      "auto_create=yes enable_shutdown=no output_high_water=4M "
                      "poll_us=100 log_level=info log_output=stderr unix_socket= "
                      "unix_socket_mode=0700 tls_listen= tls_cert= tls_key= tls_ca= "
                      "tls_verify_client=required metrics_listen= metrics_max_connections=16 "
                      "metrics_timeout=10 "
                      "user= auth_file= auth_max_failures=3 auth_failure_delay_ms=100 "
                      "status=UP" % srv.datadir], msgs
    assert "config [journal] sync=interval sync_interval_ms=100 preallocate=auto page_cache=keep " \
           "segment_size=64M checkpoint_interval_ms=1000 group_wait_us=2000" in msgs
    assert "config [queue payments] sync=always max_items=5" in msgs
    assert msgs[-1] == "ternd listening on 127.0.0.1:%d" % srv.port
    # The time stamps are UTC, now.
    t = LOG_RE.match(srv.stderr().decode().splitlines()[0]).group(1)
    ts = calendar.timegm(time.strptime(t[:19], "%Y-%m-%dT%H:%M:%S"))
    assert abs(ts - time.time()) < 120, t


def test_defaults_logged_without_config_file(ternd):
    srv = ternd()
    msgs = [m for _, m in startup_records(srv)]
    assert "no config file: built-in defaults" in msgs
    assert not any(m.startswith("config [queue ") for m in msgs)


def notified_port(notify):
    msg = notify.expect(lambda m: "READY=1" in m, what="READY=1",
                        skip=lambda m: m.startswith("STATUS=recovering"))
    return int(fields(msg)["STATUS"].rsplit(":", 1)[1])


def test_log_level_warn_writes_no_info(tmp_path, daemon, notify):
    """At warn the start, the listening line and the stop are not logged
    (readiness and the port come from the notify socket instead)."""
    conf = tmp_path / "t.conf"
    conf.write_text("[server]\nlog_level = warn\n")
    d = daemon(["-c", str(conf), "-p", "0", "-d", str(tmp_path / "data")],
               env={"NOTIFY_SOCKET": notify.env})
    port = notified_port(notify)
    with Conn(port) as c:
        assert c.set("q", "v") == b"STORED\r\n"
    assert d.stop() == 0
    recs = log_records(d.stderr())
    assert not [r for r in recs if r[0] in ("info", "debug")], d.stderr()


def test_v_raises_the_level_vv_adds_debug(tmp_path, ternd):
    conf = "[server]\nlog_level = error\n"
    srv = ternd(conf=conf, args=["-v"])  # would never print its port at error
    levels = {lv for lv, _ in startup_records(srv)}
    assert levels == {"info"}
    srv2 = ternd(conf=conf, args=["-vv"])
    recs = startup_records(srv2)
    assert ("debug", "libevent %s; service manager notification off" % libevent_version()) \
        in recs, recs
    assert ("debug", "log: level debug, output stderr, repeats folded within 10000 ms") in recs
    assert any(m.startswith("config [server]") and "log_level=debug" in m for _, m in recs)


def libevent_version():
    out = subprocess.run(["pkg-config", "--modversion", "libevent"], stdout=subprocess.PIPE,
                         universal_newlines=True).stdout.strip()
    return out


def test_debug_from_config_key(ternd):
    srv = ternd(conf="[server]\nlog_level = debug\n")
    assert any(lv == "debug" for lv, _ in startup_records(srv))


@pytest.mark.parametrize("key,value,msg", [
    ("log_level", "verbose", "log_level must be error, warn, info or debug, not 'verbose'"),
    ("log_level", "INFO", "log_level must be error, warn, info or debug, not 'INFO'"),
    ("log_output", "file", "log_output must be stderr or syslog, not 'file'"),
    ("verbose", "yes", "unknown key 'verbose' in [server]"),
])
def test_bad_log_keys_refused(tmp_path, key, value, msg):
    conf = tmp_path / "bad.conf"
    conf.write_text("[server]\n%s = %s\n" % (key, value))
    rc, out, err = run_ternd(["-c", str(conf), "-p", "0", "-d", str(tmp_path / "d")])
    assert rc == 1
    recs = log_records(err.decode())
    assert recs == [("error", "%s:2: %s" % (conf, msg))], err
    assert not (tmp_path / "d").exists()


def unshare_works():
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "true"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return r.returncode == 0


@pytest.mark.skipif(not unshare_works(), reason="needs root and mount namespaces (unshare -m)")
def test_syslog_output(tmp_path):
    """-S: records reach syslog(3)'s socket /dev/log (here ours, bound over
    /dev in a private mount namespace) with facility daemon, the level's
    priority and ident ternd[PID]; nothing is logged on stderr."""
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "null").write_text("")
    log = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    log.bind(str(dev / "log"))
    got = []

    def recv_until(pred, timeout=TIMEOUT):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            log.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                got.append(log.recv(65536).decode(errors="replace"))
            except socket.timeout:
                break
            if pred(got[-1]):
                return got[-1]
        pytest.fail("no such syslog message; got %r" % got)

    script = ('mount --bind /dev/null "$1/null" && mount --bind "$1" /dev && shift && '
              'exec "$@"')
    p = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
                          str(dev), ternd_path(), "-S", "-p", "0", "-d", str(tmp_path / "data")],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    try:
        # sh execs unshare's child in place: the PID in the ident is ternd's.
        first = recv_until(lambda m: "starting" in m)
        m = re.match(r"^<30>\w{3} [ \d]\d \d\d:\d\d:\d\d ternd\[(\d+)\]: ternd \S+ starting "
                     r"\(pid (\d+)\)$", first)
        assert m and m.group(1) == m.group(2), first
        pid = int(m.group(1))
        listen = recv_until(lambda m: "listening on" in m)
        lm = re.match(r"^<30>.* ternd\[%d\]: ternd listening on 127\.0\.0\.1:(\d+)$" % pid, listen)
        assert lm, listen
        with Conn(int(lm.group(1))) as c:
            assert c.set("q", "v") == b"STORED\r\n"
        os.kill(pid, signal.SIGTERM)
        recv_until(lambda m: m.endswith("ternd[%d]: ternd stopped" % pid))
        assert p.wait(TIMEOUT) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
        err = p.stderr.read().decode(errors="replace")
        log.close()
    # (info; started as root, the warning about it: daemon.warning)
    assert all(x.startswith("<30>") or (x.startswith("<28>") and ROOT_WARNING[1] in x)
               for x in got), got
    assert not log_records(err), err
    assert not SANITIZER_RE.search(err.encode()), err


def test_journal_stream_priority_prefix(tmp_path, daemon):
    """stderr connected to the journal (JOURNAL_STREAM names it): lines are
    "<N>message" with the syslog priority of the level, no time stamp."""
    r, w = os.pipe()
    st = os.fstat(w)
    d = daemon(["-p", "0", "-d", str(tmp_path / "data")],
               env={"JOURNAL_STREAM": "%d:%d" % (st.st_dev, st.st_ino)}, stderr=w)
    os.close(w)
    buf = bytearray()
    lock = threading.Lock()

    def drain():
        while True:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            with lock:
                buf.extend(chunk)
        os.close(r)

    t = threading.Thread(target=drain, daemon=True)
    t.start()

    def listening():
        with lock:
            m = re.search(rb"^<6>ternd listening on 127\.0\.0\.1:(\d+)$", bytes(buf), re.M)
        return m and int(m.group(1))

    port = wait_until(listening, what="the listening line")
    with Conn(port) as c:
        assert c.set("q", "v") == b"STORED\r\n"
    assert d.stop() == 0
    t.join(10)
    assert not SANITIZER_RE.search(bytes(buf)), bytes(buf).decode(errors="replace")
    lines = bytes(buf).decode().splitlines()
    assert lines[0] == "<6>ternd %s starting (pid %d)" % (version(), d.pid), lines
    assert "<6>ternd stopped" in lines
    assert all(re.match(r"^<[0-7]>", x) for x in lines if not x.startswith("ternd: ")), lines
