"""
Access control as an attacker would try it (docs/OPERATIONS.md, "Access
and threats"): the modes of the files ternd creates whatever the umask;
a login repeated on a logged-in connection is never stored as a message,
and a failed one drops the identity the connection had (text, meta,
binary, the Unix socket; TLS in test_tls.py); no password stays in
ternd's memory after a login.
"""
import os
import socket
import stat
import time

from opsutil import bin_frame, bin_req, read_to_eof, wait_until
from test_auth import AUTH_ERROR, login, sasl, write_auth
from test_tls import TConn, make_cert, tls_port
from test_unix_user import UConn

UNAUTH = b"CLIENT_ERROR unauthenticated\r\n"
FAILURE = b"CLIENT_ERROR authentication failure\r\n"


def started_with_umask(ternd, mask, **kw):
    """A ternd started with umask mask (restored here at once)."""
    old = os.umask(mask)
    try:
        return ternd(**kw)
    finally:
        os.umask(old)


def modes(top):
    """{path relative to top: permission bits} of top and everything in it."""
    out = {".": stat.S_IMODE(os.lstat(top).st_mode)}
    for root, dirs, files in os.walk(top):
        for n in dirs + files:
            p = os.path.join(root, n)
            out[os.path.relpath(p, top)] = stat.S_IMODE(os.lstat(p).st_mode)
    return out


def test_files_private_whatever_the_umask(ternd, tmp_path):
    """Segments, spares, catalog, lock and status files are 0600 and the
    directories 0700 under umask 0; a data directory others may enter is
    reported at start."""
    data = str(tmp_path / "fresh")
    os.mkdir(data, 0o700)
    os.chmod(data, 0o700)
    srv = started_with_umask(ternd, 0, datadir=data,
                             conf="[journal]\nsegment_size = 64K\n")
    with srv.conn() as c:
        assert c.set("orders", b"card 4111") == b"STORED\r\n"
        assert c.set("orders", b"card 5500") == b"STORED\r\n"
        assert c.call("status queue orders READONLY") == b"END\r\n"
        assert int(c.stats()["queue_orders_journal_segments"]) >= 1
    found = modes(data)
    for rel in ("lock", "status", "catalog", "catalog/data.mdb", "catalog/lock.mdb",
                "queues", "queues/orders"):
        assert rel in found, (rel, sorted(found))
    assert any(p.startswith("queues/orders/") for p in found), sorted(found)
    bad = {p: "%04o" % m for p, m in found.items()
           if m != (0o700 if os.path.isdir(os.path.join(data, p)) else 0o600)}
    assert bad == {}, bad
    assert b"is open to other users" not in srv.stderr()
    # a directory others may enter (an older one, or made by hand): said at start
    srv.expect_exit(0)
    srv.signal(15)
    assert srv.wait() == 0
    os.chmod(data, 0o755)
    srv = ternd(datadir=data)
    assert ("warn data directory %s is open to other users (mode 0755)" % data).encode() \
        in srv.stderr(), srv.stderr()


def auth_server(ternd, tmp_path, users, extra=""):
    path = write_auth(tmp_path, users)
    sock = str(tmp_path / "t.sock")
    srv = ternd(conf="[server]\nauth_file = %s\nunix_socket = %s\n%s\n"
                     "[access]\nadmin = all\nreader = read=*\n" % (path, sock, extra))
    srv.sock = sock
    return srv


def queue_items(srv, name):
    """Items of queue name, read by a user with every right."""
    with srv.conn() as c:
        assert login(c, "admin", "adminpw") == b"STORED\r\n"
        return int(c.stats().get("queue_%s_items" % name, "0"))


def test_repeated_login_never_stored(ternd, tmp_path):
    """The issue's probe, printf 'set auth 0 0 13\\r\\nadmin adminpw\\r\\n' twice,
    answered STORED STORED and put the password in queue auth."""
    srv = auth_server(ternd, tmp_path, "admin:adminpw\nreader:r3ad\nops:correct horse battery\n")
    hs = b"set auth 0 0 13\r\nadmin adminpw\r\n"
    for conn in (srv.conn, lambda: UConn(srv.sock)):
        with conn() as c:
            c.send(hs + hs + b"get auth\r\n")
            c.expect(b"STORED\r\nSTORED\r\nEND\r\n")
            # a pool's re-login with noreply is answered as memcached's is
            c.send(b"set auth 0 0 13 noreply\r\nadmin adminpw\r\nmn\r\n")
            c.expect(b"STORED\r\nMN\r\n")
            # credentials sent to any key, text or meta, are a login too
            c.send(b"set jobs 0 0 25\r\nops correct horse battery\r\n"
                   b"ms jobs 13 T0\r\nadmin adminpw\r\nmn\r\n")
            c.expect(b"STORED\r\nHD\r\nMN\r\n")
            # ... and ordinary messages are messages
            assert c.set("jobs", b"admin wants coffee") == b"STORED\r\n"
            assert c.set("auth2", b"admin adminpw!") == b"STORED\r\n"
    assert queue_items(srv, "auth") == 0
    with srv.conn() as c:
        assert login(c, "reader", "r3ad") == b"STORED\r\n"
        assert c.get("jobs") == [("jobs", 0, b"admin wants coffee")]
        assert c.get("jobs") == [("jobs", 0, b"admin wants coffee")]
        assert c.get("jobs") == []
        assert c.get("auth") == []
    with srv.conn() as c:
        assert login(c, "admin", "adminpw") == b"STORED\r\n"
        st = c.stats()
    # every login counted: 5 on each of the first two connections, 3 since;
    # the sets that were logins by their block are sets too (cmd_set)
    assert (st["auth_cmds"], st["auth_errors"], st["cmd_set"]) == ("13", "0", "8"), st


def test_failed_relogin_drops_identity(ternd, tmp_path):
    """A wrong password after a good one leaves the connection logged out,
    not logged in as before (text on the key it logged in with, SASL)."""
    srv = auth_server(ternd, tmp_path, "admin:adminpw\nreader:r3ad\n")
    with srv.conn() as c:
        assert login(c, "admin", "adminpw") == b"STORED\r\n"
        assert c.set("q", b"x") == b"STORED\r\n"
        assert login(c, "admin", "guess1") == FAILURE
        assert c.call("get q") == UNAUTH
    with UConn(srv.sock) as c:
        assert login(c, "admin", "adminpw") == b"STORED\r\n"
        c.send(b"set auth 0 0 3\r\nxyz\r\n")
        c.expect(b"CLIENT_ERROR bad authentication token format\r\n")
        assert c.call("get q") == UNAUTH
    c = srv.conn()
    assert sasl(c, b"admin", b"adminpw")["status"] == 0
    c.send(bin_req("GET", "q", opaque=1))
    f = bin_frame(c)
    assert (f["status"], f["value"]) == (0, b"x")
    assert sasl(c, b"reader", b"wrong")["status"] == AUTH_ERROR
    c.send(bin_req("GET", "q", opaque=2))
    f = bin_frame(c)
    assert (f["status"], f["value"]) == (AUTH_ERROR, b"unauthenticated")
    c.close()


def memory_holds(pid, needles):
    """Which of needles (bytes) are anywhere in process pid's writable
    memory (regions up to 1 GiB: not a sanitizer's shadow)."""
    found = set()
    with open("/proc/%d/maps" % pid) as maps, open("/proc/%d/mem" % pid, "rb", 0) as mem:
        for line in maps:
            addr, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in addr.split("-"))
            if "rw" not in perms or hi - lo > 1 << 30:
                continue
            try:
                mem.seek(lo)
                chunk = mem.read(hi - lo)
            except (OSError, ValueError, OverflowError):
                continue
            found.update(n for n in needles if n in chunk)
    return found


def test_passwords_wiped_from_memory(ternd, tmp_path):
    """After logins over text, the Unix socket, binary SASL and TLS (and a
    login repeated as a set), no password is left in ternd's memory: not
    in a connection's input buffer, not in the auth file's copy."""
    pw = {k: ("Zq8-%s-wipe-7f3a" % k).encode() for k in ("text", "unix", "sasl", "tls",
                                                            "again", "unused")}
    users = "".join("%s:%s\n" % (k, v.decode()) for k, v in pw.items())
    cert, key = make_cert(tmp_path, "server")
    srv = auth_server(ternd, tmp_path, "admin:adminpw\nreader:r3ad\n" + users,
                      "tls_listen = 127.0.0.1:0\ntls_cert = %s\ntls_key = %s\n" % (cert, key))
    conns = [srv.conn(), UConn(srv.sock), srv.conn(), TConn(tls_port(srv), cert)]
    assert login(conns[0], "text", pw["text"].decode()) == b"STORED\r\n"
    assert login(conns[1], "unix", pw["unix"].decode()) == b"STORED\r\n"
    assert sasl(conns[2], b"sasl", pw["sasl"])["status"] == 0
    assert login(conns[3], "tls", pw["tls"].decode()) == b"STORED\r\n"
    body = b"again " + pw["again"]
    conns[0].send(b"set k 0 0 %d\r\n%s\r\n" % (len(body), body))
    assert conns[0].readline() == b"STORED\r\n"
    for c in conns[:2] + conns[3:]:  # every connection stays open, its buffers with it
        assert c.call("version").startswith(b"VERSION ")
    left = memory_holds(srv.pid, list(pw.values()))
    assert left == set(), "passwords found in ternd's memory: %r" % sorted(left)
    for c in conns:
        c.close()


def test_password_guessing_limited(ternd, tmp_path):
    """The issue's probe: 500 wrong logins in one write were all answered
    within milliseconds and the connection stayed.  Now a connection is
    closed after auth_max_failures, each peer's failures are answered
    later and later, counted in stats and /metrics, and logged with the
    peer's address (text, binary SASL, TLS, the Unix socket)."""
    cert, key = make_cert(tmp_path, "server")
    srv = auth_server(ternd, tmp_path, "admin:adminpw\nreader:r3ad\n",
                      "auth_max_failures = 3\nauth_failure_delay_ms = 1\n"
                      "tls_listen = 127.0.0.1:0\ntls_cert = %s\ntls_key = %s\n" % (cert, key))
    guess = b"".join(b"set auth 0 0 14\r\nadmin guess%03d\r\n" % i for i in range(500))
    for conn in (srv.conn, lambda: TConn(tls_port(srv), cert), lambda: UConn(srv.sock)):
        with conn() as c:
            c.send(guess)
            c.expect(FAILURE * 3)
            c.assert_closed()
    c = srv.conn()
    c.send(b"".join(bin_req("SASL_AUTH", "PLAIN", value=b"\0admin\0guess%03d" % i, opaque=i)
                    for i in range(500)))
    assert [bin_frame(c)["status"] for i in range(3)] == [AUTH_ERROR] * 3
    c.assert_closed()
    c.close()
    # 3 failures over TCP, 3 over TLS, 3 over SASL from 127.0.0.1: the
    # tenth is answered 2**9 ms later (a login that succeeds is not held)
    with srv.conn() as c:
        t0 = time.monotonic()
        assert login(c, "admin", "nope") == FAILURE
        assert time.monotonic() - t0 >= 0.5
        assert login(c, "admin", "adminpw") == b"STORED\r\n"
        st = c.stats()
    assert (st["auth_errors"], st["auth_closed"], st["auth_delayed"]) == ("13", "4", "13"), st
    log = srv.stderr().decode()
    assert "authentication failed for user admin (text) from 127.0.0.1" in log
    assert "authentication failed for user admin (binary SASL PLAIN) from 127.0.0.1" in log
    assert "authentication failed for user admin (text) from the unix socket (uid %d)" \
        % os.getuid() in log
    assert "closed a connection from 127.0.0.1 after 3 failed logins" in log
    assert "closed a connection from the unix socket (uid %d) after 3 failed logins" \
        % os.getuid() in log


def test_silent_connections_hold_no_slots(ternd, tmp_path):
    """The issue's probe: with max_connections = 50, 55 sockets that send
    nothing made a real client get SERVER_ERROR too many connections, for
    good, and the Unix socket with it.  Now connections still in their
    handshake (TLS, login) hold at most max_handshakes slots of the TCP
    and TLS listeners, the Unix socket and clients that log in get in,
    and the silent ones, a stalled TLS handshake among them, are closed
    at handshake_timeout."""
    cert, key = make_cert(tmp_path, "server")
    srv = auth_server(ternd, tmp_path, "admin:adminpw\nreader:r3ad\n",
                      "max_connections = 10\nhandshake_timeout = 2\n"
                      "tls_listen = 127.0.0.1:0\ntls_cert = %s\ntls_key = %s\n" % (cert, key))
    port = tls_port(srv)
    silent = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(4)]
    stalled = socket.create_connection(("127.0.0.1", port))
    stalled.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a ClientHello's start
    # max_handshakes is half of max_connections: 5 slots for strangers
    with UConn(srv.sock) as u:
        assert login(u, "admin", "adminpw") == b"STORED\r\n"
        wait_until(lambda: u.stats()["curr_handshakes"] == "5", what="5 in their handshake")
        refused = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(3)]
        for r in refused:
            assert read_to_eof(r) == b"SERVER_ERROR too many connections\r\n"
            r.close()
        # a second later a client that logs in takes the slot of the
        # oldest silent one, over TCP and over TLS
        time.sleep(1.1)
        with srv.conn() as c, TConn(port, cert) as t:
            assert login(c, "reader", "r3ad") == b"STORED\r\n"
            assert login(t, "reader", "r3ad") == b"STORED\r\n"
            assert [read_to_eof(s) for s in silent[:2]] == [b"", b""]
            # the rest are closed at their deadline, the stalled TLS one too
            assert [read_to_eof(s) for s in silent[2:] + [stalled]] == [b"", b"", b""]
            assert c.call("version").startswith(b"VERSION ")
            assert t.call("version").startswith(b"VERSION ")
        st = u.stats()
        assert (st["curr_handshakes"], st["handshake_evictions"], st["handshake_timeouts"],
                st["rejected_connections"]) == ("0", "2", "3", "3"), st
    for s in silent + [stalled]:
        s.close()
    log = srv.stderr().decode()
    assert "closed a connection from 127.0.0.1 that did not finish its handshake within 2 s" \
        in log, log
    assert "closed a connection from 127.0.0.1 still in its handshake, to make room" in log


def test_first_request_deadline_without_auth(ternd, tmp_path):
    """Without an auth file the handshake is the first request: a socket
    that sends nothing is closed at handshake_timeout, one that made a
    request stays (idle_timeout governs it)."""
    srv = ternd(conf="[server]\nhandshake_timeout = 1\n")
    quiet = socket.create_connection(("127.0.0.1", srv.port))
    with srv.conn() as c:
        assert c.call("version").startswith(b"VERSION ")
        t0 = time.monotonic()
        assert read_to_eof(quiet) == b""
        assert time.monotonic() - t0 >= 0.5
        time.sleep(0.5)
        assert c.call("version").startswith(b"VERSION ")
        assert c.stats()["handshake_timeouts"] == "1"
    quiet.close()


def test_waits_lose_their_right_at_reload(ternd, tmp_path):
    """The issue's probe: a get waiting with /t= was admitted with its
    read right and, after a reload took the right away, still received
    the next item.  Now the wait ends at the reload (text, meta, binary)
    and the item waits for a reader that may read it."""
    users = write_auth(tmp_path, "admin:adminpw\nbob:pw2\n")
    conf = "[server]\nauth_file = %s\n[access]\nadmin = all\nbob = read=jobs.,logs.\n" % users
    srv = ternd(conf=conf)
    text, meta, binary = srv.conn(), srv.conn(), srv.conn()
    for c in (text, meta):
        assert login(c, "bob", "pw2") == b"STORED\r\n"
    assert sasl(binary, b"bob", b"pw2")["status"] == 0
    text.send(b"get logs.w/t=50 jobs.w/t=15000\r\n")
    meta.send(b"mg jobs.w/t=15000 v\r\n")
    binary.send(bin_req("GET", "jobs.w/t=15000", opaque=7))
    with srv.conn() as admin:
        assert login(admin, "admin", "adminpw") == b"STORED\r\n"
        wait_until(lambda: admin.stats().get("queue_jobs.w_waiters") == "3",
                   what="the three waits")
        srv.write_conf(conf.replace("bob = read=jobs.,logs.", "bob = read=logs."))
        assert admin.call("reload") == b"OK\r\n"
        text.expect(b"END\r\n")
        meta.expect(b"EN\r\n")
        f = bin_frame(binary)
        assert (f["opaque"], f["status"]) == (7, 1), f  # a miss: key not found
        assert admin.set("jobs.w", b"for readers only") == b"STORED\r\n"
        assert admin.stats()["queue_jobs.w_items"] == "1"
    assert text.call("get jobs.w") == b"CLIENT_ERROR access denied: read jobs.w\r\n"
    for c in (text, meta, binary):
        c.close()


def test_configured_targets_bypass_rights(ternd, tmp_path):
    """dead_letter, expire_to and alias destinations take items into queues
    the writer or reader has no right on: by design (the operator chose
    them), and docs/OPERATIONS.md says so."""
    users = write_auth(tmp_path, "admin:adminpw\nw:wpw\n")
    srv = ternd(conf="[server]\nauth_file = %s\n[queue jobs]\nmax_deliveries = 1\n"
                     "dead_letter = dead\n[queue brief]\nexpire_to = expired\n"
                     "[alias events]\ndestinations = audit\n[access]\nadmin = all\n"
                     "w = read=jobs write=jobs,brief,events\n" % users)
    with srv.conn() as c:
        assert login(c, "w", "wpw") == b"STORED\r\n"
        assert c.set("events", b"to audit") == b"STORED\r\n"
        assert c.set("brief", b"to expired", exptime=1) == b"STORED\r\n"
        assert c.set("jobs", b"to dead") == b"STORED\r\n"
        assert c.get("jobs/open") == [("jobs/open", 0, b"to dead")]
        assert c.call("get jobs/abort") == b"END\r\n"
        for q in ("audit", "expired", "dead"):
            assert c.call("get %s" % q) == b"CLIENT_ERROR access denied: read %s\r\n" % q.encode()
            assert c.set(q, b"x") == b"CLIENT_ERROR access denied: write %s\r\n" % q.encode()
    time.sleep(1.1)
    with srv.conn() as c:
        assert login(c, "admin", "adminpw") == b"STORED\r\n"
        assert c.call("flush_expired brief") == b"1\r\n"
        for q, body in (("audit", b"to audit"), ("expired", b"to expired"), ("dead", b"to dead")):
            assert c.get1(q) == body, q
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "OPERATIONS.md")) as f:
        doc = " ".join(f.read().split())
    assert ("moves items, by design, into queues it has no right on: the `dead_letter` of a "
            "queue it reads (after `max_deliveries`), the `expire_to` of a queue it writes "
            "(when an item expires), and the destinations of an alias it may write.") in doc
