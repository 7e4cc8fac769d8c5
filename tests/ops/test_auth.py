"""
Authentication and rights: the auth file (-Y FILE, auth_file), memcached's
text handshake (compared byte for byte with memcached -Y itself), binary
SASL PLAIN (raw frames and libmemcached's memccp/memccat), the [access]
rights per queue prefix on the text, meta and binary protocols, reloads
that change users, and a log that never shows a password.
"""
import os
import re
import signal
import socket
import time

import pytest

from opsutil import (TIMEOUT, Conn, bin_frame, bin_req, bin_set, bin_stats, e2e, run,
                     run_ternd, wait_until)

USERS = "alice:secret\nbob:pw2\ncarol:c4rol\neve:3ve\n"
ACCESS = """\
[access]
alice = all
bob = read=jobs.,logs. write=jobs. stats
carol = admin read=*
* = read=public.
"""
DENIED_ADMIN = b"CLIENT_ERROR access denied: admin\r\n"
AUTH_ERROR = 0x20


def write_auth(tmp_path, text=USERS, name="users"):
    p = tmp_path / name
    p.write_text(text)
    os.chmod(p, 0o600)
    return str(p)


def auth_conf(tmp_path, users=USERS, access=ACCESS, extra=""):
    path = write_auth(tmp_path, users)
    return "[server]\nauth_file = %s\nenable_shutdown = yes\n%s\n%s" % (path, extra, access)


def login(c, user, password):
    body = ("%s %s" % (user, password)).encode()
    c.send(b"set auth 0 0 %d\r\n" % len(body) + body + b"\r\n")
    return c.readline()


def exchange(port, chunks, wants=None, idle=0.15):
    """Sends each chunk (one request) and reads its answer: with wants (a
    length per chunk), until that many bytes came (bounded by TIMEOUT) and
    then nothing for a moment; without, until nothing came for idle
    seconds.  Returns the answers.  One request at a time: memcached reads
    a connection's requests one per read while it is unauthenticated, so a
    pipeline would stall there."""
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    answers = []
    try:
        for i, chunk in enumerate(chunks):
            s.sendall(chunk)
            want = None if wants is None else wants[i]
            out, wait = b"", idle if want is None else TIMEOUT
            while True:
                s.settimeout(wait)
                try:
                    b = s.recv(65536)
                except socket.timeout:
                    break
                if not b:
                    break
                out += b
                if want is not None and len(out) >= want:
                    wait = 0.05
            answers.append(out)
        return answers
    finally:
        s.close()


@pytest.fixture
def memcached(tmp_path):
    """memcached -Y with the same users (as root: the file is root's
    alone), on a free port; stopped by PID."""
    with e2e.memcached(["-Y", write_auth(tmp_path, USERS, "mc-users")], user="root") as port:
        yield port


# Handshakes, one request per chunk; keys differ per case so nothing
# stored by one case is seen by another (memcached keeps a value, tern a
# queue).
HANDSHAKES = [
    [b"get k1\r\n", b"get k1\r\n"],
    [b"set k2 0 0 12\r\nalice secreX\r\n", b"get k2\r\n"],
    [b"set k3 0 0 12\r\nalice secret\r\n", b"get k3\r\n"],
    [b"set k4 0 0 12\r\nalice secret\r\n", b"set k4 0 0 12\r\nalice secret\r\n", b"get k4\r\n"],
    [b"set k5 0 0 5\r\nhello\r\n", b"set k5 0 0 12\r\nalice secret\r\n", b"get k5\r\n"],
    [b"set k6 0 0 12 noreply\r\nalice secret\r\n", b"get k6\r\n"],
    # (a block that does not end in CRLF: memcached's answer depends on
    # whether what follows arrives with it; this is its answer when not)
    [b"set k7 0 0 12\r\nalice secretXX", b"\r\n", b"get k7\r\n"],
    [b"set k8 0 0 18\r\nalice secret extra\r\n", b"get k8\r\n"],
    [b"set k9 0 0 13\r\nalice  secret\r\n", b"get k9\r\n"],
    [b"set k10 0 0\r\n", b"get k10\r\n"],
    [b"set k11 0 0 0\r\n\r\n", b"get k11\r\n"],
    [b"set k12 0 0 12\r\nalice\tsecret\r\n", b"get k12\r\n"],
    [b"set k13 0 0 12\r\nbob:pw2 zzzz\r\n", b"get k13\r\n"],
    [b"mg k14 v\r\n", b"mn\r\n", b"quit\r\n"],
    [b"SET k15 0 0 12\r\n", b"alice secret\r\n"],
    [b"set k16 0 0 12 junk junk\r\nalice secret\r\n", b"get k16\r\n"],
    [b"set k17 0 0 -1\r\n", b"get k17\r\n"],
    [b"set  k18  0 0  12\r\nalice secret\r\n", b"get k18\r\n"],
    [b"set k19 0 0 7\r\nbob pw2\r\n", b"get jobs.k19\r\n"],
    [b"set k20 0 0 14\r\n alice secret \r\n", b"get k20\r\n"],
    [b"set k21 0 0 6\r\nalice \r\n", b"get k21\r\n"],
    [b"add k22 0 0 12\r\n", b"alice secret\r\n"],
]


def test_text_handshake_matches_memcached(ternd, tmp_path, memcached):
    srv = ternd(conf=auth_conf(tmp_path, access=""))
    for chunks in HANDSHAKES:
        want = exchange(memcached, chunks)
        if chunks is HANDSHAKES[3]:
            # the one difference: memcached stores a second handshake as a
            # value, the password in it; tern takes it as the login again
            assert want[2] == b"VALUE k4 0 12\r\nalice secret\r\nEND\r\n", want
            want[2] = b"END\r\n"
        got = exchange(srv.port, chunks, wants=[len(w) for w in want])
        assert got == want, "for %r: memcached %r, ternd %r" % (chunks, want, got)
    # what the answers are, for a few of them
    assert exchange(srv.port, HANDSHAKES[2], wants=[8, 5]) == [b"STORED\r\n", b"END\r\n"]
    assert exchange(srv.port, HANDSHAKES[1], wants=[37, 30]) == \
        [b"CLIENT_ERROR authentication failure\r\n", b"CLIENT_ERROR unauthenticated\r\n"]
    # tern reads a pipeline whole, authenticated or not
    with srv.conn() as c:
        c.send(b"get a\r\nget b\r\nset k 0 0 7\r\nbob pw2\r\nget jobs.x\r\n")
        c.expect(b"CLIENT_ERROR unauthenticated\r\nCLIENT_ERROR unauthenticated\r\n"
                 b"STORED\r\nEND\r\n")


def test_text_handshake_details(ternd, tmp_path):
    srv = ternd(conf=auth_conf(tmp_path, access=""))
    with srv.conn() as c:
        # a failure leaves the connection open for another try
        assert login(c, "alice", "nope") == b"CLIENT_ERROR authentication failure\r\n"
        assert c.call("version") == b"CLIENT_ERROR unauthenticated\r\n"
        assert login(c, "alice", "secret") == b"STORED\r\n"
        # nothing was enqueued by the handshake; the session is a normal one
        assert c.call("version").startswith(b"VERSION ")
        assert c.get("auth") == []
        assert c.set("q", b"hi") == b"STORED\r\n"
        assert c.get1("q") == b"hi"
        st = c.stats()
        assert (st["auth_cmds"], st["auth_errors"]) == ("2", "1")
    with srv.conn() as c:
        # a block longer than any credentials is not read: the answer, then the close
        c.send(b"set x 0 0 100000\r\n")
        c.expect(b"CLIENT_ERROR bad authentication token format\r\n")
        c.assert_closed()
    with srv.conn() as c:
        # the body arrives in pieces
        c.send(b"set x 0 0 12\r\nali")
        time.sleep(0.1)
        c.send(b"ce sec")
        time.sleep(0.1)
        c.send(b"ret\r\nget nothing\r\n")
        c.expect(b"STORED\r\nEND\r\n")


def test_pymemcache_logs_in(ternd, tmp_path):
    from pymemcache.client.base import Client

    srv = ternd(conf=auth_conf(tmp_path))
    c = Client(("127.0.0.1", srv.port), default_noreply=False, timeout=TIMEOUT)
    try:
        # the handshake is answered even under noreply (memcached's rule):
        # the client must read it
        assert c.set("auth", "bob pw2") is True
        assert c.set("jobs.py", b"from pymemcache") is True
        assert c.get("jobs.py") == b"from pymemcache"
        with pytest.raises(Exception) as e:
            c.set("other.py", b"refused")
        assert "access denied: write other.py" in str(e.value)
    finally:
        c.close()


def sasl(c, user, password, authzid=b"", mech=b"PLAIN", opaque=9):
    c.send(bin_req("SASL_AUTH", mech, value=authzid + b"\0" + user + b"\0" + password,
                   opaque=opaque))
    return bin_frame(c)


def test_binary_sasl_plain(ternd, tmp_path):
    # (five failures on one connection: more than auth_max_failures allows)
    srv = ternd(conf=auth_conf(tmp_path, access="", extra="auth_max_failures = 0\n"
                               "auth_failure_delay_ms = 0\n"))
    c = srv.conn()
    # before authentication: VERSION and SASL only
    c.send(bin_req("GET", "q", opaque=1))
    f = bin_frame(c)
    assert (f["op"], f["status"], f["opaque"], f["value"]) == (0, AUTH_ERROR, 1,
                                                               b"unauthenticated")
    c.send(bin_set("q", b"value skipped", opaque=2) + bin_req("NOOP", opaque=3))
    assert (bin_frame(c)["status"], bin_frame(c)["status"]) == (AUTH_ERROR, AUTH_ERROR)
    c.send(bin_req("VERSION", opaque=4))
    f = bin_frame(c)
    assert f["status"] == 0 and f["value"].startswith(b"1.6.21 tern-")
    c.send(bin_req("SASL_LIST_MECHS", opaque=5))
    f = bin_frame(c)
    assert (f["op"], f["status"], f["value"]) == (0x20, 0, b"PLAIN")
    # failures: a wrong password, another mechanism, a foreign authzid, a step
    f = sasl(c, b"alice", b"wrong")
    assert (f["op"], f["status"], f["opaque"], f["value"]) == (0x21, AUTH_ERROR, 9,
                                                               b"Auth failure.")
    assert sasl(c, b"alice", b"secret", mech=b"CRAM-MD5")["status"] == AUTH_ERROR
    assert sasl(c, b"alice", b"secret", authzid=b"bob")["status"] == AUTH_ERROR
    c.send(bin_req("SASL_AUTH", "PLAIN", value=b"no nul bytes"))
    assert bin_frame(c)["status"] == AUTH_ERROR
    c.send(bin_req("SASL_STEP", "PLAIN", value=b"x"))
    assert bin_frame(c)["status"] == AUTH_ERROR
    # success, with and without an authzid equal to the user
    f = sasl(c, b"alice", b"secret", authzid=b"alice")
    assert (f["status"], f["value"]) == (0, b"Authenticated")
    c.send(bin_set("q", b"v1", opaque=6))
    assert bin_frame(c)["status"] == 0
    c2 = srv.conn()
    assert sasl(c2, b"bob", b"pw2")["status"] == 0
    c2.send(bin_req("GET", "q", opaque=7))
    f = bin_frame(c2)
    assert (f["status"], f["value"]) == (0, b"v1")


def test_sasl_without_auth_is_unknown(ternd):
    srv = ternd()
    c = srv.conn()
    c.send(bin_req("SASL_LIST_MECHS", opaque=1))
    f = bin_frame(c)
    assert (f["status"], f["value"]) == (0x81, b"Unknown command")
    c.send(bin_req("NOOP", opaque=2))
    assert bin_frame(c)["status"] == 0


def test_libmemcached_sasl(ternd, tmp_path):
    srv = ternd(conf=auth_conf(tmp_path, access=""))
    f = tmp_path / "payload"
    f.write_bytes(b"from memccp\n")
    common = ["--servers=127.0.0.1:%d" % srv.port, "--binary"]
    r = run(["memccp"] + common + ["--username=alice", "--password=secret", str(f)],
            cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    r = run(["memccat"] + common + ["--username=alice", "--password=secret", "payload"])
    assert r.returncode == 0 and r.stdout.startswith("from memccp\n"), r.stderr
    r = run(["memccat"] + common + ["--username=alice", "--password=wrong", "payload"])
    assert r.returncode != 0 and "AUTHENTICATION FAILURE" in r.stderr.upper(), r.stderr
    r = run(["memccat"] + common + ["payload"])
    assert r.returncode != 0


def authed(srv, user, password):
    c = srv.conn()
    assert login(c, user, password) == b"STORED\r\n"
    return c


def test_rights_text_and_meta(ternd, tmp_path):
    srv = ternd(conf=auth_conf(tmp_path))
    bob = authed(srv, "bob", "pw2")
    assert bob.set("jobs.1", b"one") == b"STORED\r\n"
    assert bob.set("jobs.1", b"two") == b"STORED\r\n"
    # refused sets swallow their data block: the next request is in step
    assert bob.set("logs.1", b"no") == b"CLIENT_ERROR access denied: write logs.1\r\n"
    assert bob.set("other", b"no") == b"CLIENT_ERROR access denied: write other\r\n"
    assert bob.call("get logs.1") == b"END\r\n"
    assert bob.call("get other") == b"CLIENT_ERROR access denied: read other\r\n"
    # a get of several keys is refused whole: nothing is taken
    assert bob.call("get jobs.1 other/open") == b"CLIENT_ERROR access denied: read other\r\n"
    assert bob.get("jobs.1/open") == [("jobs.1/open", 0, b"one")]
    assert bob.call("confirm other 1") == b"CLIENT_ERROR access denied: read other\r\n"
    assert bob.call("confirm jobs.1 1") == b"END\r\n"
    assert bob.call("monitor other 1") == b"CLIENT_ERROR access denied: read other\r\n"
    for cmd in ("delete jobs.1", "flush jobs.1", "flush_all", "flush_expired jobs.1",
                "flush_all_expired", "reload", "shutdown"):
        assert bob.call(cmd) == DENIED_ADMIN, cmd
    assert "curr_connections" in bob.stats()  # bob may read stats
    # reads by id: reserving and confirming are a reader's rights
    assert bob.set("jobs.r", b"by id") == b"STORED\r\n"
    bob.send(b"gets jobs.r/reserve\r\n")
    m = re.match(rb"^VALUE jobs\.r/reserve 0 5 (\d+)\r\n$", bob.readline())
    assert m, "no reserved item"
    assert bob.readline() == b"by id\r\n" and bob.readline() == b"END\r\n"
    assert bob.call("delete jobs.r/%s" % m.group(1).decode()) == b"DELETED\r\n"
    assert bob.call("delete other/%s" % m.group(1).decode()) == \
        b"CLIENT_ERROR access denied: read other\r\n"
    # meta: the same rights, the text protocol's error lines
    bob.send(b"ms other 2\r\nno\r\nms jobs.2 3\r\nabc\r\nmg other v\r\nmd jobs.1\r\nmn\r\n")
    bob.expect(b"CLIENT_ERROR access denied: write other\r\nHD\r\n"
               b"CLIENT_ERROR access denied: read other\r\n" + DENIED_ADMIN + b"MN\r\n")
    # noreply hides a refusal as it hides any error
    bob.send(b"set other 0 0 2 noreply\r\nno\r\nmn\r\n")
    bob.expect(b"MN\r\n")

    # the default rule ("*") for a user without a line of its own
    eve = authed(srv, "eve", "3ve")
    assert eve.call("get public.news") == b"END\r\n"
    assert eve.set("public.news", b"x") == b"CLIENT_ERROR access denied: write public.news\r\n"
    assert eve.call("stats") == b"CLIENT_ERROR access denied: stats\r\n"
    assert eve.call("stats jobs.1") == b"CLIENT_ERROR access denied: stats\r\n"
    # admin (with read=*): deletes and flushes, but no writes
    carol = authed(srv, "carol", "c4rol")
    assert carol.set("jobs.9", b"x") == b"CLIENT_ERROR access denied: write jobs.9\r\n"
    assert carol.get1("jobs.2") == b"abc"
    assert carol.call("flush_all") == b"OK\r\n"
    assert carol.call("delete jobs.1") == b"DELETED\r\n"
    assert "queue_jobs.2_items" in carol.stats()
    # all: everything
    alice = authed(srv, "alice", "secret")
    assert alice.set("anything", b"x") == b"STORED\r\n"
    assert alice.get1("anything") == b"x"
    assert alice.call("delete anything") == b"DELETED\r\n"


def test_rights_binary(ternd, tmp_path):
    srv = ternd(conf=auth_conf(tmp_path))
    c = srv.conn()
    assert sasl(c, b"bob", b"pw2")["status"] == 0
    c.send(bin_set("jobs.b", b"ok", opaque=1))
    assert bin_frame(c)["status"] == 0
    c.send(bin_set("other", b"refused value", opaque=2) + bin_req("NOOP", opaque=3))
    f = bin_frame(c)
    assert (f["op"], f["status"], f["opaque"], f["value"]) == \
        (0x01, AUTH_ERROR, 2, b"access denied: write other")
    assert bin_frame(c)["opaque"] == 3  # the refused value was skipped
    c.send(bin_req("GET", "other", opaque=4))
    f = bin_frame(c)
    assert (f["status"], f["value"]) == (AUTH_ERROR, b"access denied: read other")
    for op in ("DELETE", "FLUSH"):
        c.send(bin_req(op, "jobs.b" if op == "DELETE" else b"", opaque=5))
        f = bin_frame(c)
        assert (f["status"], f["value"]) == (AUTH_ERROR, b"access denied: admin"), op
    assert bin_stats(c, b"jobs.b")["queue_jobs.b_items"] == "1"
    c.send(bin_req("GET", "jobs.b", opaque=6))
    f = bin_frame(c)
    assert (f["status"], f["value"]) == (0, b"ok")
    e = srv.conn()
    assert sasl(e, b"eve", b"3ve")["status"] == 0
    f = bin_stats(e)
    assert (f["status"], f["value"]) == (AUTH_ERROR, b"access denied: stats")


PASSWORDS = ["secret", "pw2", "c4rol", "3ve", "hunter2", "NewPass1", "typo-in-name"]


def test_credentials_never_logged(ternd, tmp_path):
    # (failures answered at once: test_access.py times the delays)
    srv = ternd(conf=auth_conf(tmp_path, extra="auth_failure_delay_ms = 0\n"), args=["-vv"])
    c = srv.conn()
    assert login(c, "alice", "hunter2") == b"CLIENT_ERROR authentication failure\r\n"
    # a password typed where the user goes
    assert login(c, "typo-in-name", "x") == b"CLIENT_ERROR authentication failure\r\n"
    assert login(c, "alice", "secret") == b"STORED\r\n"
    b = srv.conn()
    assert sasl(b, b"bob", b"hunter2")["status"] == AUTH_ERROR
    assert sasl(b, b"hunter2", b"pw2")["status"] == AUTH_ERROR
    assert sasl(b, b"bob", b"pw2")["status"] == 0
    wait_until(lambda: srv.stderr().count(b"authenticated as") == 2, what="the log lines")
    log = srv.stderr().decode()
    for p in PASSWORDS:
        assert p not in log, "%s in the log:\n%s" % (p, log)
    assert "authentication failed for user alice (text)" in log
    assert "authentication failed: unknown user (text)" in log
    assert "authentication failed for user bob (binary SASL PLAIN)" in log
    assert "authentication failed: unknown user (binary SASL PLAIN)" in log
    assert re.search(r"connection \d+ authenticated as alice \(text\)", log)


def test_reload_changes_users(ternd, tmp_path):
    conf = auth_conf(tmp_path)
    srv = ternd(conf=conf)
    alice = authed(srv, "alice", "secret")
    bob = authed(srv, "bob", "pw2")
    eve = authed(srv, "eve", "3ve")
    # bob goes, alice's password changes, eve gets write rights
    write_auth(tmp_path, "alice:NewPass1\ncarol:c4rol\neve:3ve\n")
    srv.write_conf(conf.replace("bob = read=jobs.,logs. write=jobs. stats\n", "")
                   .replace("* = read=public.", "* = read=public. write=public."))
    srv.signal(signal.SIGHUP)
    wait_until(lambda: b"configuration reloaded" in srv.stderr(), what="the reload")
    bob.assert_closed()
    assert b"closed: its user was removed" in srv.stderr()
    assert alice.set("kept", b"session") == b"STORED\r\n"  # the session stays
    assert eve.set("public.x", b"now") == b"STORED\r\n"
    with srv.conn() as c:
        assert login(c, "alice", "secret") == b"CLIENT_ERROR authentication failure\r\n"
        assert login(c, "bob", "pw2") == b"CLIENT_ERROR authentication failure\r\n"
        assert login(c, "alice", "NewPass1") == b"STORED\r\n"
    # a broken file is refused whole: the users stay as they were
    write_auth(tmp_path, "alice:NewPass1\nno colon here\n")
    assert alice.call("reload").startswith(b"SERVER_ERROR reload failed: ")
    with srv.conn() as c:
        assert login(c, "carol", "c4rol") == b"STORED\r\n"


def test_reload_turns_authentication_on(ternd, tmp_path):
    srv = ternd(conf="[server]\nenable_shutdown = no\n")
    old = srv.conn()
    assert old.set("q", b"x") == b"STORED\r\n"
    srv.write_conf(auth_conf(tmp_path, access=""))
    srv.signal(signal.SIGHUP)
    wait_until(lambda: b"configuration reloaded" in srv.stderr(), what="the reload")
    old.assert_closed()
    with srv.conn() as c:
        assert c.call("get q") == b"CLIENT_ERROR unauthenticated\r\n"
        assert login(c, "eve", "3ve") == b"STORED\r\n"
        assert c.get1("q") == b"x"


def test_startup_errors(tmp_path):
    data = str(tmp_path / "data")

    def fails(conf, *args):
        p = tmp_path / "t.conf"
        p.write_text(conf)
        rc, out, err = run_ternd(["-c", str(p), "-p", "0", "-d", data] + list(args))
        assert rc == 1, (rc, err)
        return err.decode()

    users = write_auth(tmp_path)
    err = fails("[server]\nauth_file = %s\n[access]\nmallory = all\n" % users)
    assert "[access] mallory: no such user in %s" % users in err
    err = fails("[access]\nbob = all\n")
    assert "[access] rights need an auth_file" in err
    err = fails("[server]\nauth_file = %s\n[access]\nbob = read=jobs. delete\n" % users)
    assert re.search(r"t\.conf:4: \[access\] bob: unknown right", err), err
    err = fails("[server]\nauth_file = %s\n[access]\nbob = read=a/b\n" % users)
    assert "a queue prefix holds only the characters of queue names" in err
    bad = write_auth(tmp_path, "alice:secret\nbroken line\n", "bad")
    err = fails("[server]\nauth_file = %s\n" % bad)
    assert "%s:2: expected user:password" % bad in err
    assert "secret" not in err
    err = fails("", "-Y", str(tmp_path / "missing"))
    assert "missing: cannot open: No such file or directory" in err
    dup = write_auth(tmp_path, "alice:a\nalice:b\n", "dup")
    err = fails("", "-Y", dup)
    assert "%s:2: user alice given twice" % dup in err


def test_world_readable_auth_file_warns(ternd, tmp_path):
    users = write_auth(tmp_path)
    os.chmod(users, 0o644)
    srv = ternd(args=["-Y", users])
    assert ("warn auth file %s can be read by other users (mode 0644): chmod 600 it"
            % users).encode() in srv.stderr()
    with srv.conn() as c:
        assert login(c, "alice", "secret") == b"STORED\r\n"


def test_command_line_auth_file_wins(ternd, tmp_path):
    cli = write_auth(tmp_path, "cli:from-cli\n", "cli-users")
    srv = ternd(conf=auth_conf(tmp_path, access=""), args=["-Y", cli])
    with srv.conn() as c:
        assert login(c, "alice", "secret") == b"CLIENT_ERROR authentication failure\r\n"
        assert login(c, "cli", "from-cli") == b"STORED\r\n"
        # a reload keeps -Y's file, and rereads it
        write_auth(tmp_path, "cli:changed\n", "cli-users")
        assert c.call("reload") == b"OK\r\n"
    with srv.conn() as c:
        assert login(c, "alice", "secret") == b"CLIENT_ERROR authentication failure\r\n"
        assert login(c, "cli", "changed") == b"STORED\r\n"


def test_status_needs_admin(ternd, tmp_path):
    srv = ternd(conf=auth_conf(tmp_path))
    bob, carol = authed(srv, "bob", "pw2"), authed(srv, "carol", "c4rol")
    eve = authed(srv, "eve", "3ve")
    assert bob.set("jobs.s", b"x") == b"STORED\r\n"
    # reading is a stats right, setting an admin's
    assert bob.call("status") == b"UP\r\n"
    assert bob.call("status queue jobs.s") == b"UP\r\n"
    assert bob.call("status READONLY") == DENIED_ADMIN
    assert bob.call("status queue jobs.s QUIESCENT") == DENIED_ADMIN
    assert eve.call("status") == b"CLIENT_ERROR access denied: stats\r\n"
    assert bob.call("status") == b"UP\r\n"
    assert carol.call("status queue jobs.s READONLY") == b"END\r\n"
    assert bob.set("jobs.s", b"y") == b"SERVER_ERROR queue jobs.s is READONLY\r\n"
    assert carol.call("status QUIESCENT") == b"END\r\n"
    assert bob.call("status") == b"QUIESCENT\r\n"


def test_password_with_spaces(ternd, tmp_path):
    """The auth file's password is the rest of its line; the text login
    reads the rest of the block after the user the same way, so the
    example of docs/OPERATIONS.md logs in over text as over SASL."""
    srv = ternd(conf=auth_conf(tmp_path, users="ops:correct horse battery\nalice:secret\n",
                               access=""))
    with srv.conn() as c:
        assert login(c, "ops", "correct horse") == b"CLIENT_ERROR authentication failure\r\n"
        assert login(c, "ops", "correct horse battery ") == \
            b"CLIENT_ERROR authentication failure\r\n"
        assert login(c, "ops", "correct horse battery") == b"STORED\r\n"
        assert c.set("q", b"x") == b"STORED\r\n"
    with srv.conn() as c:
        assert sasl(c, b"ops", b"correct horse battery")["status"] == 0
    with srv.conn() as c:
        # memcached's reading still works for a password without spaces:
        # more words after it are ignored
        assert login(c, "alice", "secret extra words") == b"STORED\r\n"


def test_nul_in_password_refused(tmp_path):
    """A NUL byte would end the password early for a reader of C strings,
    so a shorter password than written would log in: the file is refused."""
    users = tmp_path / "users"
    users.write_bytes(b"alice:secret\nbob:pass\x00word\n")
    os.chmod(users, 0o600)
    rc, out, err = run_ternd(["-p", "0", "-d", str(tmp_path / "data"), "-Y", str(users)])
    assert rc == 1, err
    assert ("%s:2: NUL byte in the line (the file must be text)" % users).encode() in err, err
    assert b"pass" not in err.replace(b"password", b"")
