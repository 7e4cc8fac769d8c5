"""
The Debian package (debian/): built from a copy of the source tree with
`dpkg-buildpackage -us -uc -b`, checked by lintian (no error, no warning),
installed with `apt-get install ./ternd_*.deb`, started, removed and purged.

Installed, it must hold the programs, man pages, the systemd unit running
as the system user _tern (which systemd-analyze accepts), /etc/tern/ternd.conf
as a conffile, /var/lib/tern owned by _tern, and the documentation with
every page its README and pages link to.  There is no systemd here to run
the unit, so the test starts the installed /usr/sbin/ternd with the
installed configuration as _tern (on a free port), sets and gets, and stops
it by PID.  Removing keeps the configuration and the data; purging takes
them; after the purge and the removal of the user (which a purge leaves,
as Debian's system users stay) no file of the package is left.

It changes the machine (a package, a user, /etc/tern, /var/lib/tern), so
it runs only as root on a machine where none of them exists, and puts the
machine back as it found it even when it fails.  The package build
compiles everything (link-time optimised): it runs in the background of
tests/run-all.sh, with DEB_BUILD_OPTIONS parallel=2 and at nice 10.
"""
import glob
import json
import os
import pwd
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from doclinks import check_doc_links  # noqa: E402
from e2eshared import e2e  # noqa: E402

REPO = e2e.REPO
TIMEOUT = e2e.TIMEOUT
Conn = e2e.Conn
USER = "_tern"
LISTEN_RE = re.compile(rb"ternd listening on 127\.0\.0\.1:(\d+)")
# Where the package may leave files: everything under these, with "tern" in
# its name, is compared before the install and after the purge.
WATCHED = ("/etc", "/usr", "/lib", "/var/lib", "/var/cache/debconf", "/var/log")
NOT_WATCHED = ("/var/lib/apt/lists", "/var/lib/dpkg/info/ternd.list")
# apt-get, waiting a while for the dpkg lock (another apt run on the machine)
APT = ["apt-get", "-y", "-q", "-o", "DPkg::Lock::Timeout=300"]


def sh(cmd, timeout=600, check=True, **kw):
    kw.setdefault("stdin", subprocess.DEVNULL)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                       universal_newlines=True, **kw)
    if check:
        assert r.returncode == 0, "%s exited %d:\n%s" % (" ".join(cmd), r.returncode,
                                                         r.stdout[-6000:])
    return r


def tern_files():
    """Every path under WATCHED whose name holds "tern"."""
    out = set()
    for top in WATCHED:
        for d, dirs, files in os.walk(top):
            if d.startswith(NOT_WATCHED):
                dirs[:] = []
                continue
            for n in dirs + files:
                if "tern" in n:
                    out.add(os.path.join(d, n))
    return out


def installed():
    r = sh(["dpkg-query", "-W", "-f=${Status}", "ternd"], check=False)
    return r.returncode == 0 and "installed" in r.stdout


def user_exists():
    try:
        pwd.getpwnam(USER)
        return True
    except KeyError:
        return False


@pytest.fixture
def machine():
    """Refuses a machine that has any of what the package makes; afterwards
    purges the package and removes the user and directories, whatever
    happened.  Yields the files named *tern* before."""
    if os.geteuid() != 0:
        pytest.skip("installing a package needs root")
    present = [p for p in ("/etc/tern", "/var/lib/tern") if os.path.exists(p)]
    if installed() or user_exists() or present:
        pytest.skip("this machine already has ternd, user %s or %s: the test would "
                    "disturb them" % (USER, " ".join(present) or "its directories"))
    before = tern_files()
    try:
        yield before
    finally:
        if sh(["dpkg-query", "-W", "ternd"], check=False).returncode == 0:
            sh(APT + ["purge", "ternd"], check=False,
               env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        if user_exists():
            sh(["deluser", "--quiet", "--system", USER], check=False)
        subprocess.run(["groupdel", USER], capture_output=True)
        for p in ("/etc/tern", "/var/lib/tern"):
            subprocess.run(["rm", "-rf", p])


def build(tmp_path):
    """Builds the package from a copy of the tree (what git tracks, and new
    files it does not ignore); returns the .changes file."""
    src = tmp_path / "src"
    src.mkdir()
    files = sh(["git", "-C", REPO, "ls-files", "-z", "--cached", "--others",
                "--exclude-standard"]).stdout.split("\0")
    files = [f for f in files if f and os.path.isfile(os.path.join(REPO, f))]
    sh(["cp", "--parents", "-t", str(src)] + files, cwd=REPO)
    t0 = time.monotonic()
    # (niced: in make test it runs beside other steps, which come first)
    sh(["nice", "-n", "10", "dpkg-buildpackage", "-us", "-uc", "-b"], timeout=1800,
       cwd=str(src), env=dict(os.environ, DEB_BUILD_OPTIONS="parallel=2"))
    print("dpkg-buildpackage: %.0f s" % (time.monotonic() - t0))
    changes = glob.glob(str(tmp_path / "tern_*.changes"))
    assert len(changes) == 1, os.listdir(tmp_path)
    return changes[0]


def version():
    m = re.search(r'#define TERN_VERSION "([^"]+)"', open(os.path.join(REPO, "lib/tern.h")).read())
    return m.group(1)


def check_installed():
    for p in ("/usr/sbin/ternd", "/usr/bin/tern-load", "/usr/bin/tern-journal",
              "/usr/bin/ternctl"):
        assert os.access(p, os.X_OK), p
    r = sh(["/usr/sbin/ternd", "--version"])
    assert r.stdout == "ternd %s\n" % version()
    r = sh(["/usr/bin/ternctl", "--version"])
    assert r.stdout == "ternctl %s\n" % version()
    for m in ("man1/tern-load.1.gz", "man1/tern-journal.1.gz", "man1/ternctl.1.gz",
              "man5/ternd.conf.5.gz", "man8/ternd.8.gz"):
        assert os.path.isfile("/usr/share/man/" + m), m
    r = sh(["man", "-w", "ternd"])
    assert r.stdout.strip() == "/usr/share/man/man8/ternd.8.gz"
    unit = open("/lib/systemd/system/ternd.service").read()
    assert "\nExecStart=/usr/sbin/ternd -c /etc/tern/ternd.conf\n" in unit
    assert "\nUser=%s\nGroup=%s\n" % (USER, USER) in unit and "DynamicUser" not in \
        "".join(line for line in unit.splitlines(True) if not line.startswith("#"))
    r = sh(["systemd-analyze", "verify", "/lib/systemd/system/ternd.service"], check=False)
    assert r.returncode == 0 and not r.stdout.strip(), r.stdout
    conffiles = sh(["dpkg-query", "-W", "-f=${Conffiles}", "ternd"]).stdout
    assert re.search(r"^ /etc/tern/ternd\.conf [0-9a-f]{32}$", conffiles, re.M), conffiles
    conf = open("/etc/tern/ternd.conf").read()
    assert "\ndata_dir = /var/lib/tern\n" in conf
    u = pwd.getpwnam(USER)
    assert u.pw_shell in ("/usr/sbin/nologin", "/bin/false"), u
    assert u.pw_uid < 1000
    st = os.stat("/var/lib/tern")
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (u.pw_uid, u.pw_gid, 0o700)
    doc = "/usr/share/doc/ternd"
    for f in ("README.md", "copyright", "docs/PROTOCOL.md", "docs/CLIENTS.md",
              "docs/CLUSTER.md", "docs/SYNC-MODES.md", "docs/OPERATIONS.md",
              "docs/status-page.png", "examples/ternd.conf",
              "examples/prometheus/tern-alerts.yml", "examples/grafana/tern-dashboard.json"):
        assert os.path.isfile(os.path.join(doc, f)), f
    # every relative link of the README and the pages holds
    assert check_doc_links(doc) > 20


def start_as_user():
    """The installed ternd with the installed configuration, as the
    package's user, on a free port; returns (process, port, stderr lines)."""
    p = subprocess.Popen(["setpriv", "--reuid", USER, "--regid", USER, "--init-groups",
                          "/usr/sbin/ternd", "-c", "/etc/tern/ternd.conf", "-p", "0"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    lines, port = [], []
    ready = threading.Event()

    def drain():
        for line in iter(p.stderr.readline, b""):
            lines.append(line)
            m = LISTEN_RE.search(line)
            if m:
                port.append(int(m.group(1)))
                ready.set()
        ready.set()

    threading.Thread(target=drain, daemon=True).start()
    if not ready.wait(TIMEOUT) or not port:
        p.kill()
        p.wait(10)
        pytest.fail("the installed ternd did not start:\n" + b"".join(lines).decode())
    return p, port[0], lines


def test_package_builds_lints_installs_runs_and_purges(machine, tmp_path):
    first = open(os.path.join(REPO, "debian", "changelog")).readline()
    assert first.startswith("tern (%s) " % version()), \
        "debian/changelog's version is not TERN_VERSION (lib/tern.h): %r" % first
    changes = build(tmp_path)
    debs = glob.glob(str(tmp_path / "ternd_*.deb"))
    assert [os.path.basename(d) for d in debs] == ["ternd_%s_%s.deb" % (
        version(), sh(["dpkg", "--print-architecture"]).stdout.strip())]
    # lintian: nothing at error or warning level
    r = sh(["lintian", "--fail-on", "error,warning", changes], check=False)
    tags = [line for line in r.stdout.splitlines() if re.match(r"^[EW]: ", line)]
    print("lintian:\n" + r.stdout)
    assert r.returncode == 0 and not tags, r.stdout

    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    sh(APT + ["install", "--no-install-recommends", debs[0]], env=env)
    assert installed()
    check_installed()

    p, port, lines = start_as_user()
    try:
        with Conn(port) as c:
            assert c.set("pkg.q", "hello") == b"STORED\r\n"
            assert c.get1("pkg.q") == b"hello"
            assert c.set("pkg.q", "kept") == b"STORED\r\n"
        # the installed ternctl reads it
        r = sh(["/usr/bin/ternctl", "-p", str(port), "--json", "queues"])
        q = [q for q in json.loads(r.stdout)["queues"] if q["queue"] == "pkg.q"]
        assert len(q) == 1 and q[0]["items"] == 1, r.stdout
        # its files are the service user's
        u = pwd.getpwnam(USER)
        for d, dirs, files in os.walk("/var/lib/tern"):
            for n in dirs + files:
                assert os.lstat(os.path.join(d, n)).st_uid == u.pw_uid, n
        assert os.path.isdir("/var/lib/tern/queues/pkg.q")
        p.send_signal(signal.SIGTERM)
        assert p.wait(TIMEOUT) == 0, b"".join(lines).decode()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)

    # remove: the configuration and the data stay
    sh(APT + ["remove", "ternd"], env=env)
    assert not os.path.exists("/usr/sbin/ternd")
    assert os.path.isfile("/etc/tern/ternd.conf")
    assert os.path.isdir("/var/lib/tern/queues/pkg.q")
    # purge: they go too; the user stays until removed by hand
    sh(APT + ["purge", "ternd"], env=env)
    assert sh(["dpkg-query", "-W", "ternd"], check=False).returncode != 0
    assert not os.path.exists("/etc/tern") and not os.path.exists("/var/lib/tern")
    assert user_exists()
    sh(["deluser", "--quiet", "--system", USER])
    if sh(["getent", "group", USER], check=False).returncode == 0:
        sh(["delgroup", "--quiet", "--system", USER])
    assert not user_exists()
    assert sh(["getent", "group", USER], check=False).returncode != 0
    left = tern_files() - machine
    assert not left, "left after the purge: %r" % sorted(left)
