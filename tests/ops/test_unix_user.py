"""
The Unix socket (-s PATH, -a MODE, unix_socket, unix_socket_mode), alone
(-p off) or beside TCP, and running as another user (-u USER, user):
the process's credentials once it is up, the data directory given to the
user (including one written by root before), the socket's owner, and the
refusals (an unknown user; a switch asked of a process that is not root).
"""
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time

import pytest

from opsutil import TIMEOUT, Conn, run, run_ternd, ternd_path, wait_until


class UConn(Conn):
    """Conn over a Unix socket."""

    def __init__(self, path, timeout=TIMEOUT):
        self.timeout = timeout
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = bytearray()
        self.eof = False


def unix_ready(d, path):
    wait_until(lambda: ("ternd listening on unix socket %s" % path) in d.stderr()
               or d.proc.poll() is not None, what="the unix socket")
    assert d.proc.poll() is None, d.stderr()


@pytest.fixture
def shared_dir():
    """A directory every user can reach (pytest's are root's alone)."""
    d = tempfile.mkdtemp(prefix="tern-ops-", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_unix_socket_alone(daemon, tmp_path):
    path = str(tmp_path / "t.sock")
    d = daemon(["-p", "off", "-s", path, "-a", "0770", "-d", str(tmp_path / "data")])
    unix_ready(d, path)
    st = os.stat(path)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o770
    assert "(mode 0770)" in d.stderr()
    assert not re.search(r"ternd listening on \S+:\d+", d.stderr()), d.stderr()
    with UConn(path) as c:
        c.send(b"set u 5 0 3\r\nabc\r\nget u\r\nmg u v\r\n")
        c.expect(b"STORED\r\nVALUE u 5 3\r\nabc\r\nEND\r\nEN\r\n")
        assert c.stats()["curr_connections"] == "1"
    # a client library by path (pymemcache takes a string as a Unix socket)
    from pymemcache.client.base import Client
    pc = Client(path, default_noreply=False, timeout=TIMEOUT)
    try:
        assert pc.set("lib", b"by path") is True
        assert pc.get("lib") == b"by path"
    finally:
        pc.close()
    assert d.stop() == 0
    assert not os.path.exists(path), "the socket file is left behind"


def test_unix_socket_beside_tcp(ternd, tmp_path):
    path = str(tmp_path / "both.sock")
    srv = ternd(conf="[server]\nunix_socket = %s\nunix_socket_mode = 600\n" % path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with srv.conn() as t, UConn(path) as u:
        assert t.set("shared", b"over tcp") == b"STORED\r\n"
        assert u.get1("shared") == b"over tcp"
        assert u.set("shared", b"over unix") == b"STORED\r\n"
        assert t.get1("shared") == b"over unix"
    # a half-closed Unix peer gets every reply, and a plain get's item is
    # delivered (not returned) once the peer has read it
    with UConn(path) as u:
        u.set("hc", b"item")
        u.send(b"get hc\r\n")
        u.sock.shutdown(socket.SHUT_WR)
        assert u.read_values() == [("hc", 0, b"item")]
        u.assert_closed()
    with srv.conn() as t:
        wait_until(lambda: t.stats().get("queue_hc_items") == "0", what="the item settled")
        time.sleep(0.2)
        assert t.stats()["queue_hc_items"] == "0"
        assert t.get("hc") == []


def test_unix_socket_path_rules(daemon, ternd, tmp_path):
    data = str(tmp_path / "d")
    # a socket left by a dead process is replaced
    stale = str(tmp_path / "stale.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(stale)
    s.close()
    srv = ternd(args=["-s", stale])
    with UConn(stale) as u:
        assert u.call("mn") == b"MN\r\n"
    # ... but not one a live server answers on
    rc, out, err = run_ternd(["-p", "0", "-d", data, "-s", stale])
    assert rc == 1 and b"cannot listen on unix socket %s: another server listens on it" \
        % stale.encode() in err, err
    with UConn(stale) as u:  # the first server still has it
        assert u.call("mn") == b"MN\r\n"
    # nor anything that is not a socket
    f = tmp_path / "file"
    f.write_text("keep me")
    rc, out, err = run_ternd(["-p", "0", "-d", data, "-s", str(f)])
    assert rc == 1 and b"it exists and is not a socket" in err, err
    assert f.read_text() == "keep me"
    # every listener off is refused, and a bad mode
    rc, out, err = run_ternd(["-p", "off", "-d", data])
    assert rc == 1 and b"no listener: port = off needs unix_socket or tls_listen" in err, err
    rc, out, err = run_ternd(["-p", "0", "-d", data, "-s", str(tmp_path / "x"), "-a", "0999"])
    assert rc == 2 or (rc == 1 and b"bad unix socket mode" in err), err
    conf = tmp_path / "m.conf"
    conf.write_text("[server]\nunix_socket_mode = 1777\n")
    rc, out, err = run_ternd(["-c", str(conf), "--dump-config"])
    assert rc == 1 and b"m.conf:2: unix_socket_mode must be octal" in err, err


def ids(pid):
    """(uids, gids, groups) of a process from /proc."""
    with open("/proc/%d/status" % pid) as f:
        text = f.read()
    uid = [int(x) for x in re.search(r"^Uid:\s+(.*)$", text, re.M).group(1).split()]
    gid = [int(x) for x in re.search(r"^Gid:\s+(.*)$", text, re.M).group(1).split()]
    groups = [int(x) for x in re.search(r"^Groups:\s*(.*)$", text, re.M).group(1).split()]
    return uid, gid, groups


def children(pid):
    """The processes whose parent is pid (from /proc; one that ends
    meanwhile is left out)."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p) as f:
                if f.read().rsplit(") ", 1)[1].split()[1] == str(pid):
                    out.append(int(p))
        except (OSError, IndexError):
            continue
    return out


def owners(top):
    """{(uid, gid)} of top and everything under it."""
    seen = {(os.lstat(top).st_uid, os.lstat(top).st_gid)}
    for root, dirs, files in os.walk(top):
        for n in dirs + files:
            st = os.lstat(os.path.join(root, n))
            seen.add((st.st_uid, st.st_gid))
    return seen


def stop(srv):
    """Stops a server of the ternd fixture now (teardown then accepts it)."""
    srv.expect_exit(0)
    srv.signal(signal.SIGTERM)
    assert srv.wait() == 0


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")


@needs_root
def test_runs_as_user(ternd, shared_dir):
    nobody = pwd.getpwnam("nobody")
    data = os.path.join(shared_dir, "data")
    sock = os.path.join(shared_dir, "u.sock")
    # root writes the data directory first (an upgrade to -u, say)
    srv = ternd(datadir=data)
    with srv.conn() as c:
        assert c.set("before", b"written by root") == b"STORED\r\n"
    stop(srv)
    assert (0, 0) in owners(data)

    srv = ternd(datadir=data, args=["-u", "nobody", "-s", sock])
    uid, gid, groups = ids(srv.pid)
    assert uid == [nobody.pw_uid] * 4, uid
    assert gid == [nobody.pw_gid] * 4, gid
    assert 0 not in groups, groups
    log = srv.stderr().decode()
    assert re.search(r"data directory %s given to user nobody \(\d+ files and directories\)"
                     % re.escape(data), log), log
    assert "running as user nobody (uid %d, gid %d)" % (nobody.pw_uid, nobody.pw_gid) in log
    st = os.stat(sock)
    assert (st.st_uid, st.st_gid) == (nobody.pw_uid, nobody.pw_gid)
    with srv.conn() as c:
        assert c.get1("before") == b"written by root"  # recovered as nobody
        assert c.set("after", b"written by nobody") == b"STORED\r\n"
        assert c.set("sync.q", b"x") == b"STORED\r\n"
    with UConn(sock) as u:
        assert u.get1("after") == b"written by nobody"
    assert owners(data) == {(nobody.pw_uid, nobody.pw_gid)}, owners(data)
    stop(srv)
    # again as nobody: nothing left to give, everything recovered
    srv = ternd(datadir=data, args=["-u", "nobody"])
    assert "given to user" not in srv.stderr().decode()
    with srv.conn() as c:
        assert c.get1("sync.q") == b"x"


@needs_root
def test_user_errors(ternd, tmp_path, shared_dir):
    data = os.path.join(shared_dir, "d")
    rc, out, err = run_ternd(["-p", "0", "-d", data, "-u", "no-such-user-tern"])
    assert rc == 1 and b"cannot run as user no-such-user-tern: no such user" in err, err
    # a data directory the user cannot reach is named, with the reason
    rc, out, err = run_ternd(["-p", "0", "-d", str(tmp_path / "data"), "-u", "nobody"])
    assert rc == 1, err
    assert b"Permission denied (as user nobody: each directory above it must let that " \
           b"user in)" in err, err
    # only root switches users
    r = run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--",
             ternd_path(), "-p", "0", "-d", data, "-u", "root"])
    assert r.returncode == 1 and "cannot run as user root: only root can switch users" \
        in r.stderr, r.stderr
    # ... and a process that is the user already runs as it
    os.makedirs(data, exist_ok=True)
    os.chown(data, pwd.getpwnam("nobody").pw_uid, pwd.getpwnam("nobody").pw_gid)
    p = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                          "--", ternd_path(), "-p", "0", "-d", data, "-u", "nobody"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    try:
        line = b""
        deadline = time.monotonic() + TIMEOUT
        while b"ternd listening on" not in line and time.monotonic() < deadline:
            line = p.stderr.readline()
            if not line:
                break
        assert b"ternd listening on" in line, line
    finally:
        p.terminate()
        p.wait(TIMEOUT)


@needs_root
def test_reload_as_user_revokes(ternd, shared_dir):
    """The issue's probe: under -u, set up as docs/OPERATIONS.md advises
    (auth file and TLS key readable by root alone), every reload failed
    with Permission denied, so a user removed from the file kept its
    session and could log in again.  The root reader reads them again."""
    from test_auth import login
    from test_tls import TConn, der, make_cert, tls_port
    etc = os.path.join(shared_dir, "etc")
    os.mkdir(etc, 0o700)
    users = os.path.join(etc, "users")

    def write_users(text):
        # as an editor does: a new file renamed over the old one
        with open(users + ".new", "w") as f:
            f.write(text)
        os.chmod(users + ".new", 0o600)
        os.rename(users + ".new", users)

    from pathlib import Path
    cert, key = make_cert(Path(etc), "server")
    os.chmod(key, 0o600)
    write_users("admin:adminpw\nbob:pw2\n")
    conf = ("[server]\nauth_file = %s\ntls_listen = 127.0.0.1:0\ntls_cert = %s\n"
            "tls_key = %s\n" % (users, cert, key))
    srv = ternd(conf=conf, datadir=os.path.join(shared_dir, "data"), args=["-u", "nobody"])
    assert ids(srv.pid)[0][0] == pwd.getpwnam("nobody").pw_uid
    bob = srv.conn()
    assert login(bob, "bob", "pw2") == b"STORED\r\n"
    write_users("admin:adminpw\n")
    new_cert, new_key = make_cert(Path(etc), "renewed", cn="renewed")
    os.chmod(new_key, 0o600)
    os.rename(new_cert, cert)
    os.rename(new_key, key)
    srv.signal(signal.SIGHUP)
    wait_until(lambda: b"configuration reloaded" in srv.stderr() or b"reload failed" in
               srv.stderr(), what="the reload")
    assert b"reload failed" not in srv.stderr(), srv.stderr()
    bob.assert_closed()
    with srv.conn() as c:
        assert login(c, "bob", "pw2") == b"CLIENT_ERROR authentication failure\r\n"
        assert login(c, "admin", "adminpw") == b"STORED\r\n"
        st = c.stats()
        assert (st["reloads"], st["reload_failures"]) == ("1", "0"), st
    with TConn(tls_port(srv), cert) as t:
        assert t.sock.getpeercert(binary_form=True) == der(cert)
    # the reader is root's and reads those files only; it ends with ternd
    readers = children(srv.pid)
    with open("/proc/%d/status" % readers[0]) as f:
        uid = re.search(r"^Uid:\s+(\d+)", f.read(), re.M).group(1)
    assert len(readers) == 1 and uid == "0", (readers, uid)
    assert sorted(os.listdir("/proc/%d/fd" % readers[0])) == ["0", "1", "2", "3"]
    stop(srv)
    assert readers[0] not in children(srv.pid)
    assert not os.path.exists("/proc/%d/fd/3" % readers[0])  # gone, or a zombie


@needs_root
def test_chown_walk_gives_nothing_away(ternd, shared_dir):
    """The issue's probes: the data directory was chowned by path as root,
    so a hard link placed in it handed an outside root-owned file to the
    service user, and a misspelt data_dir was taken over whole.  Now the
    walk refuses a file with two links, never follows a symbolic link, and
    refuses a directory that is not a data directory."""
    nobody = pwd.getpwnam("nobody")
    data = os.path.join(shared_dir, "data")
    srv = ternd(datadir=data)
    with srv.conn() as c:
        assert c.set("q", b"x") == b"STORED\r\n"
    stop(srv)
    outside = os.path.join(shared_dir, "shadow")
    with open(outside, "w") as f:
        f.write("root:secret-hash\n")
    os.chmod(outside, 0o600)
    secret_dir = os.path.join(shared_dir, "rootonly")
    os.mkdir(secret_dir, 0o700)
    qdir = os.path.join(data, "queues", "q")
    os.link(outside, os.path.join(qdir, "evil"))
    os.symlink(secret_dir, os.path.join(qdir, "link"))
    rc, out, err = run_ternd(["-p", "0", "-d", data, "-u", "nobody"])
    assert rc == 1, err
    assert b"data directory %s: %s has 2 links: refused" % (
        data.encode(), os.path.join(qdir, "evil").encode()) in err, err
    assert (os.stat(outside).st_uid, os.stat(secret_dir).st_uid) == (0, 0)
    # without the hard link it starts; the link is not followed
    os.unlink(os.path.join(qdir, "evil"))
    srv = ternd(datadir=data, args=["-u", "nobody"])
    with srv.conn() as c:
        assert c.get1("q") == b"x"
    assert os.stat(secret_dir).st_uid == 0
    assert os.lstat(os.path.join(qdir, "link")).st_uid == 0
    assert os.stat(os.path.join(data, "lock")).st_uid == nobody.pw_uid
    stop(srv)
    # a directory that is not a data directory is not taken over
    for name, content in (("notes.txt", "keep me"), ("catalog", None)):
        wrong = os.path.join(shared_dir, "wrong-" + name.split(".")[0])
        os.mkdir(wrong, 0o700)
        p = os.path.join(wrong, name)
        if content is None:
            os.mkdir(p)
        else:
            with open(p, "w") as f:
                f.write(content)
        rc, out, err = run_ternd(["-p", "0", "-d", wrong, "-u", "nobody"])
        assert rc == 1, err
        if content is None:
            assert b"data directory %s has no lock file: refused" % wrong.encode() in err, err
        else:
            assert b"data directory %s holds notes.txt, which is not ternd's: refused" \
                % wrong.encode() in err, err
        assert (os.stat(wrong).st_uid, os.stat(p).st_uid) == (0, 0)


@needs_root
def test_root_without_user_warns(ternd, tmp_path):
    """Started as root without -u, ternd said so at info, a level nobody
    watches; it warns now."""
    srv = ternd()
    assert re.search(rb"^\S+ warn running as root: every client that gets in acts as root's "
                     rb"process; -u USER", srv.stderr(), re.M), srv.stderr()
