"""
make install / make uninstall (PREFIX, DESTDIR), the installed systemd unit
(systemd-analyze verify, and its ExecStart runs with the installed
configuration), and make run starting a working server from the tree.
Everything is installed under the test's tmp dir.
"""
import os
import re
import shutil
import signal
import stat
import subprocess
import threading
import time

import pytest

from opsutil import REPO, TIMEOUT, Conn, run
from doclinks import check_doc_links  # (opsutil puts tests/ on the path)

PAGES = {"man1/tern-load.1", "man1/tern-journal.1", "man1/ternctl.1", "man5/ternd.conf.5",
         "man8/ternd.8"}


def make(*args):
    r = run(["make", "--no-print-directory", "-C", REPO] + list(args), timeout=600)
    assert r.returncode == 0, "make %s:\n%s\n%s" % (" ".join(args), r.stdout, r.stderr)
    return r.stdout


def files_under(root):
    out = set()
    for d, _, fs in os.walk(root):
        for f in fs:
            out.add(os.path.relpath(os.path.join(d, f), root))
    return out


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def expected_files(prefix, sysconf):
    p = prefix.lstrip("/")
    docs = {"README.md", "LICENSE", "examples/prometheus/tern-alerts.yml",
            "examples/grafana/tern-dashboard.json"} | {
        "examples/" + f for f in os.listdir(os.path.join(REPO, "conf")) if f.endswith(".conf")} | {
        "docs/" + f for f in os.listdir(os.path.join(REPO, "docs"))
        if f.endswith((".md", ".png"))}
    return ({p + "/sbin/ternd", p + "/bin/tern-load", p + "/bin/tern-journal", p + "/bin/ternctl",
             p + "/lib/systemd/system/ternd.service", sysconf.lstrip("/") + "/tern/ternd.conf"}
            | {p + "/share/man/" + m for m in PAGES}
            | {p + "/share/doc/tern/" + d for d in docs})


def test_install_layout_and_uninstall(tmp_path):
    dest = str(tmp_path / "root")
    out = make("install", "DESTDIR=" + dest)
    assert "installed %s/usr/local/etc/tern/ternd.conf" % dest in out
    assert files_under(dest) == expected_files("/usr/local", "/usr/local/etc")
    u = dest + "/usr/local"
    for b in ("sbin/ternd", "bin/tern-load", "bin/tern-journal", "bin/ternctl"):
        assert mode(os.path.join(u, b)) == 0o755, b
    for f in ["lib/systemd/system/ternd.service", "etc/tern/ternd.conf"] + \
            ["share/man/" + m for m in PAGES]:
        assert mode(os.path.join(u, f)) == 0o644, f
    # The installed programs run.
    r = run([u + "/sbin/ternd", "--version"])
    assert r.returncode == 0 and re.match(r"^ternd \d+\.\d+\.\d+\n$", r.stdout), r
    r = run([u + "/bin/tern-journal", "--version"])
    assert r.returncode == 0 and r.stdout.startswith("tern-journal "), r
    r = run([u + "/bin/tern-load", "--help"])
    assert r.returncode == 0 and "--progress" in r.stdout
    r = run([u + "/bin/ternctl", "--version"])
    assert r.returncode == 0 and re.match(r"^ternctl \d+\.\d+\.\d+\n$", r.stdout), r
    # The documentation's links hold where it is installed.
    assert os.readlink(u + "/share/doc/tern/conf") == "examples"
    assert check_doc_links(u + "/share/doc/tern") > 20
    # The unit names the installed paths.
    unit = open(u + "/lib/systemd/system/ternd.service").read()
    assert "\nExecStart=/usr/local/sbin/ternd -c /usr/local/etc/tern/ternd.conf\n" in unit
    assert not re.search(r"@[A-Z]+@", unit), "unsubstituted @VAR@"
    # The installed configuration is the sample with the unit's data dir.
    conf = open(u + "/etc/tern/ternd.conf").read()
    sample = open(os.path.join(REPO, "conf", "ternd.conf")).read()
    assert conf == sample.replace("\ndata_dir = ./data\n", "\ndata_dir = /var/lib/tern\n")
    r = run([u + "/sbin/ternd", "-c", u + "/etc/tern/ternd.conf", "--dump-config"])
    assert r.returncode == 0 and "\ndata_dir = /var/lib/tern\n" in r.stdout, r
    # Each installed page renders.
    for m in PAGES:
        r = run(["man", "-l", os.path.join(u, "share/man", m)], env=dict(os.environ,
                                                                          MANWIDTH="80"))
        assert r.returncode == 0 and r.stdout and not r.stderr, (m, r.stderr)

    # A second install keeps an edited configuration; uninstall keeps it too.
    with open(u + "/etc/tern/ternd.conf", "a") as f:
        f.write("# edited\n")
    out = make("install", "DESTDIR=" + dest)
    assert "keeping the existing %s/usr/local/etc/tern/ternd.conf" % dest in out
    assert open(u + "/etc/tern/ternd.conf").read().endswith("# edited\n")
    out = make("uninstall", "DESTDIR=" + dest)
    assert "keeping %s/usr/local/etc/tern/ternd.conf: it was edited" % dest in out
    assert files_under(dest) == {"usr/local/etc/tern/ternd.conf"}

    # Reinstalled and uninstalled unedited: nothing of it is left.
    os.unlink(u + "/etc/tern/ternd.conf")
    make("install", "DESTDIR=" + dest)
    out = make("uninstall", "DESTDIR=" + dest)
    assert "removed the unmodified" in out
    assert files_under(dest) == set()
    assert not os.path.exists(u + "/etc/tern")
    assert not os.path.exists(u + "/share/doc/tern")


def test_prefix_usr_puts_configuration_in_etc(tmp_path):
    dest = str(tmp_path / "root")
    make("install", "DESTDIR=" + dest, "PREFIX=/usr")
    assert files_under(dest) == expected_files("/usr", "/etc")
    unit = open(dest + "/usr/lib/systemd/system/ternd.service").read()
    assert "\nExecStart=/usr/sbin/ternd -c /etc/tern/ternd.conf\n" in unit
    assert "\nDynamicUser=yes\n" in unit and "\nUser=" not in unit
    make("uninstall", "DESTDIR=" + dest, "PREFIX=/usr")
    assert files_under(dest) == set()
    # A packager's user instead of a dynamic one
    make("install", "DESTDIR=" + dest, "PREFIX=/usr", "SERVICE_USER=_tern")
    unit = open(dest + "/usr/lib/systemd/system/ternd.service").read()
    assert "\nUser=_tern\nGroup=_tern\n" in unit and "\nDynamicUser=" not in unit
    make("uninstall", "DESTDIR=" + dest, "PREFIX=/usr")
    assert files_under(dest) == set()


def test_unit_verifies_and_its_command_starts(tmp_path):
    """Installed with PREFIX under the tmp dir (no DESTDIR) so that the
    unit's paths exist: systemd-analyze verify (man pages included) accepts
    it, and its ExecStart, with the data dir moved into the tmp dir, starts
    a server that reports READY=1."""
    if not shutil.which("systemd-analyze"):
        pytest.fail("systemd-analyze missing (tools/install-deps.sh installs systemd)")
    prefix = str(tmp_path / "usr")
    make("install", "PREFIX=" + prefix)
    unit = os.path.join(prefix, "lib/systemd/system/ternd.service")
    env = dict(os.environ, MANPATH=os.path.join(prefix, "share/man"))
    r = run(["systemd-analyze", "verify", unit], env=env, timeout=120)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r
    text = open(unit).read()
    for line in ("Type=notify", "WatchdogSec=30s", "StateDirectory=tern", "DynamicUser=yes",
                 "ProtectSystem=strict", "NoNewPrivileges=yes", "PrivateTmp=yes",
                 "LimitNOFILE=65536", "ExecReload=/bin/kill -HUP $MAINPID"):
        assert "\n" + line + "\n" in text, line
    argv = re.search(r"^ExecStart=(.*)$", text, re.M).group(1).split()
    assert argv == [prefix + "/sbin/ternd", "-c", prefix + "/etc/tern/ternd.conf"]
    # The unit's command with the configuration as installed, but port 0
    # and a data dir here (StateDirectory would provide /var/lib/tern).
    from opsutil import NotifySocket, fields
    n = NotifySocket()
    p = subprocess.Popen(argv + ["-p", "0", "-d", str(tmp_path / "data")],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=dict(os.environ, NOTIFY_SOCKET=n.env))
    try:
        msg = n.expect(lambda m: "READY=1" in m, what="READY=1",
                       skip=lambda m: m.startswith("STATUS=recovering"))
        port = int(fields(msg)["STATUS"].rsplit(":", 1)[1])
        with Conn(port) as c:
            assert c.set("q", "v") == b"STORED\r\n"
            assert c.get1("q") == b"v"
        p.send_signal(signal.SIGTERM)
        assert p.wait(TIMEOUT) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
        n.close()
    make("uninstall", "PREFIX=" + prefix)


def test_make_run(tmp_path):
    """`make run` builds and starts ternd from the tree in one command
    (RUN_ARGS, as the README names it, moves it to a free port and a data
    dir of the test's)."""
    with open(os.path.join(REPO, "README.md")) as f:
        assert 'make run RUN_ARGS="' in f.read()
    p = subprocess.Popen(["make", "--no-print-directory", "-C", REPO, "run",
                          "RUN_ARGS=-p 0 -d %s" % (tmp_path / "data")],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    found = {}
    ready = threading.Event()

    def drain():
        for line in iter(p.stderr.readline, b""):
            m = re.search(rb"ternd \S+ starting \(pid (\d+)\)", line)
            if m:
                found["pid"] = int(m.group(1))
            m = re.match(rb"^\S+ info ternd listening on 127\.0\.0\.1:(\d+)$", line.strip())
            if m:
                found["port"] = int(m.group(1))
                ready.set()
        ready.set()

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    try:
        assert ready.wait(300) and "port" in found, "make run did not start ternd"
        with Conn(found["port"]) as c:
            assert c.set("q", "v") == b"STORED\r\n"
            assert c.get1("q") == b"v"
        os.kill(found["pid"], signal.SIGTERM)  # make exec'd it: ternd's own PID
        assert p.wait(TIMEOUT) == 0
    finally:
        if p.poll() is None:
            if "pid" in found:
                os.kill(found["pid"], signal.SIGKILL)
            p.wait(10)
        t.join(10)
    assert os.path.isdir(tmp_path / "data" / "queues")
