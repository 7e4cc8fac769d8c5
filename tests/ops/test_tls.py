"""
TLS on its own listener (tls_listen, tls_cert, tls_key): a self-signed
certificate made here with `openssl req`; `openssl s_client` and Python's
ssl module speak the text, meta and binary protocols through it, replies
compared byte for byte (large values over many records, long pipelines);
the plain port keeps working beside it; a reload takes a new certificate;
a bad certificate or key stops the start with the reason.
"""
import os
import re
import signal
import socket
import ssl
import subprocess

import pytest

from opsutil import TIMEOUT, Conn, bin_frame, bin_req, bin_set, run, run_ternd, wait_until

TLS_RE = re.compile(rb"ternd listening for TLS on 127\.0\.0\.1:(\d+)")


def make_cert(d, name, cn="localhost"):
    cert, key = str(d / (name + ".pem")), str(d / (name + ".key"))
    r = run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
             "-days", "2", "-subj", "/CN=" + cn,
             "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
    assert r.returncode == 0, r.stderr
    return cert, key


def der(cert):
    with open(cert) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


@pytest.fixture
def certs(tmp_path):
    return make_cert(tmp_path, "server")


def tls_conf(cert, key, extra=""):
    return ("[server]\ntls_listen = 127.0.0.1:0\ntls_cert = %s\ntls_key = %s\n%s"
            % (cert, key, extra))


def tls_port(srv):
    m = TLS_RE.search(srv.stderr())
    assert m, srv.stderr()
    return int(m.group(1))


class TConn(Conn):
    """Conn through TLS, verifying the server's certificate against cafile."""

    def __init__(self, port, cafile, timeout=TIMEOUT):
        ctx = ssl.create_default_context(cafile=cafile)
        self.timeout = timeout
        raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = ctx.wrap_socket(raw, server_hostname="localhost")
        self.buf = bytearray()
        self.eof = False


def test_openssl_s_client(ternd, certs):
    cert, key = certs
    srv = ternd(conf=tls_conf(cert, key))
    port = tls_port(srv)
    r = subprocess.run(["openssl", "s_client", "-quiet", "-verify_return_error", "-CAfile",
                        cert, "-servername", "localhost", "-connect", "127.0.0.1:%d" % port],
                       input=b"set greet 7 0 5\r\nhello\r\nget greet\r\nmn\r\nquit\r\n",
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT)
    assert r.stdout == b"STORED\r\nVALUE greet 7 5\r\nhello\r\nEND\r\nMN\r\n", r.stderr
    # the plain port beside it serves the same queues
    with srv.conn() as c:
        assert c.set("greet", b"plain") == b"STORED\r\n"
    with TConn(port, cert) as t:
        assert t.get1("greet") == b"plain"


def test_python_ssl_round_trips(ternd, certs):
    cert, key = certs
    srv = ternd(conf=tls_conf(cert, key))
    port = tls_port(srv)
    with TConn(port, cert) as t:
        assert t.sock.version() in ("TLSv1.2", "TLSv1.3")
        big = bytes(range(256)) * 4096  # 1 MiB: many records each way
        assert t.set("big", big) == b"STORED\r\n"
        assert t.get("big") == [("big", 0, big)]
        # a long pipeline, written at once and read back whole
        bodies = [(b"%05d" % i) * (1 + i % 300) for i in range(300)]
        t.send(b"".join(b"set p 0 0 %d\r\n%s\r\n" % (len(b), b) for b in bodies))
        t.expect(b"STORED\r\n" * len(bodies))
        t.send(b"get p\r\n" * len(bodies))
        for b in bodies:
            assert t.read_values() == [("p", 0, b)]
        t.send(b"ms m 3 T0\r\nabc\r\nmg m v f\r\n")
        t.expect(b"HD\r\nVA 3 f0\r\nabc\r\n")
    # the binary protocol: the first decrypted byte decides, as in clear
    with TConn(port, cert) as t:
        t.send(bin_set("b", b"binary value", opaque=1) + bin_req("GET", "b", opaque=2))
        assert bin_frame(t)["status"] == 0
        f = bin_frame(t)
        assert (f["status"], f["opaque"], f["value"]) == (0, 2, b"binary value")


def test_bad_peers(ternd, certs):
    cert, key = certs
    srv = ternd(conf=tls_conf(cert, key))
    port = tls_port(srv)
    # a plain client on the TLS port gets no answer but the close
    with Conn(port) as c:
        c.send(b"get q\r\n" * 10)
        c.assert_closed()
    # a TLS client on the plain port fails its handshake
    ctx = ssl.create_default_context(cafile=cert)
    raw = socket.create_connection(("127.0.0.1", srv.port), timeout=TIMEOUT)
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        ctx.wrap_socket(raw, server_hostname="localhost").recv(1)
    raw.close()
    # a client that does not trust the certificate gives up; the server lives on
    raw = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    with pytest.raises(ssl.SSLCertVerificationError):
        ssl.create_default_context().wrap_socket(raw, server_hostname="localhost")
    raw.close()
    with TConn(port, cert) as t:
        assert t.call("mn") == b"MN\r\n"
    assert srv.alive()


def test_tls_with_authentication(ternd, certs, tmp_path):
    cert, key = certs
    users = tmp_path / "users"
    users.write_text("alice:secret\n")
    os.chmod(users, 0o600)
    srv = ternd(conf=tls_conf(cert, key, "auth_file = %s\n" % users))
    with TConn(tls_port(srv), cert) as t:
        assert t.call("get q") == b"CLIENT_ERROR unauthenticated\r\n"
        t.send(b"set a 0 0 12\r\nalice secret\r\n")
        t.expect(b"STORED\r\n")
        assert t.set("q", b"private") == b"STORED\r\n"
        assert t.get1("q") == b"private"
        # the handshake again is a login, not a message holding the password
        t.send(b"set a 0 0 12\r\nalice secret\r\nget a\r\n")
        t.expect(b"STORED\r\nEND\r\n")
        # and a failed one logs the connection out
        t.send(b"set a 0 0 12\r\nalice secreX\r\nget q\r\n")
        t.expect(b"CLIENT_ERROR authentication failure\r\nCLIENT_ERROR unauthenticated\r\n")


def test_reload_takes_a_new_certificate(ternd, certs, tmp_path):
    cert, key = certs
    conf_dir = tmp_path / "live"
    conf_dir.mkdir()
    live_cert, live_key = str(conf_dir / "cert.pem"), str(conf_dir / "key.pem")
    for src, dst in ((cert, live_cert), (key, live_key)):
        with open(src, "rb") as f, open(dst, "wb") as g:
            g.write(f.read())
    srv = ternd(conf=tls_conf(live_cert, live_key))
    port = tls_port(srv)
    old = TConn(port, cert)
    assert old.sock.getpeercert(binary_form=True) == der(cert)
    new_cert, new_key = make_cert(tmp_path, "second", cn="second")
    for src, dst in ((new_cert, live_cert), (new_key, live_key)):
        with open(src, "rb") as f, open(dst, "wb") as g:
            g.write(f.read())
    srv.signal(signal.SIGHUP)
    wait_until(lambda: b"configuration reloaded" in srv.stderr(), what="the reload")
    with TConn(port, new_cert) as t:
        assert t.sock.getpeercert(binary_form=True) == der(new_cert)
        assert t.call("mn") == b"MN\r\n"
    assert old.call("mn") == b"MN\r\n"  # its session goes on
    old.close()
    # a key that does not match is refused, and the running one stays
    with open(key, "rb") as f, open(live_key, "wb") as g:
        g.write(f.read())
    with srv.conn() as c:
        r = c.call("reload")
        assert r.startswith(b"SERVER_ERROR reload failed: TLS key %s (for certificate %s): "
                            % (live_key.encode(), live_cert.encode())), r
        assert b"mismatch" in r, r
    with TConn(port, new_cert) as t:
        assert t.call("mn") == b"MN\r\n"


def test_start_errors(tmp_path, certs):
    cert, key = certs
    other_cert, other_key = make_cert(tmp_path, "other")
    data = str(tmp_path / "data")

    def fails(conf):
        p = tmp_path / "t.conf"
        p.write_text(conf)
        rc, out, err = run_ternd(["-c", str(p), "-p", "0", "-d", data])
        assert rc == 1, err
        return err.decode()

    assert "tls_listen needs tls_cert and tls_key" in fails("[server]\ntls_listen = 127.0.0.1:0\n")
    err = fails(tls_conf(cert, other_key))
    assert "TLS key %s (for certificate %s): " % (other_key, cert) in err, err
    assert "mismatch" in err, err
    err = fails(tls_conf(str(tmp_path / "missing.pem"), key))
    assert "TLS certificate %s: " % (tmp_path / "missing.pem") in err, err
    err = fails("[server]\ntls_listen = localhost\n")
    assert "t.conf:2: tls_listen must be ADDR:PORT or [IPV6]:PORT" in err, err
    # refused before the data directory is even created
    assert not os.path.exists(data)


def make_rsa_cert(d, name):
    cert, key = str(d / (name + ".pem")), str(d / (name + ".key"))
    r = run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
             "-out", cert, "-days", "2", "-subj", "/CN=localhost",
             "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
    assert r.returncode == 0, r.stderr
    return cert, key


def handshake(port, cafile, ciphers=None, tls12=False, client=None):
    """The cipher a TLS client agreed on, or the exception of its failure
    (a failure the server reports after the handshake shows on the first
    read)."""
    ctx = ssl.create_default_context(cafile=cafile)
    if tls12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    if ciphers:
        ctx.set_ciphers(ciphers)
    if client:
        ctx.load_cert_chain(*client)
    raw = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    try:
        s = ctx.wrap_socket(raw, server_hostname="localhost")
        s.sendall(b"mn\r\n")
        if s.recv(16) != b"MN\r\n":
            return ConnectionError("no answer")
        return s.cipher()[0]
    except (ssl.SSLError, OSError) as e:
        return e
    finally:
        raw.close()


def test_modern_ciphers_only(ternd, tmp_path):
    """TLS 1.2 offered suites without forward secrecy and CBC with SHA-1
    (the issue's probe: AES128-SHA was accepted); now only ECDHE with
    AEAD ciphers, and TLS 1.3."""
    cert, key = make_rsa_cert(tmp_path, "rsa")
    srv = ternd(conf=tls_conf(cert, key))
    port = tls_port(srv)
    for weak in ("AES128-SHA", "AES256-GCM-SHA384", "ECDHE-RSA-AES128-SHA",
                 "ECDHE-RSA-AES256-SHA384"):
        got = handshake(port, cert, weak, tls12=True)
        assert isinstance(got, Exception), (weak, got)
    assert handshake(port, cert, "ECDHE-RSA-AES128-GCM-SHA256", tls12=True) == \
        "ECDHE-RSA-AES128-GCM-SHA256"
    assert handshake(port, cert, "ECDHE-RSA-CHACHA20-POLY1305", tls12=True) == \
        "ECDHE-RSA-CHACHA20-POLY1305"
    assert handshake(port, cert).startswith("TLS_")  # TLS 1.3
    assert srv.alive()


def make_ca(d, name):
    """A CA and a client certificate it signed: (ca.pem, (cert, key))."""
    ca, ca_key = make_cert(d, name + "-ca", cn=name + " CA")
    key, csr, crt = (str(d / (name + "-client" + x)) for x in (".key", ".csr", ".pem"))
    r = run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=" + name + " client"])
    assert r.returncode == 0, r.stderr
    r = run(["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key,
             "-CAcreateserial", "-out", crt, "-days", "2"])
    assert r.returncode == 0, r.stderr
    return ca, (crt, key)


def test_client_certificates(ternd, certs, tmp_path):
    """tls_ca asks clients for a certificate of those CAs: required (the
    default) refuses a client without one, optional admits it; either way
    a certificate of another CA is refused.  A reload turns it off."""
    cert, key = certs
    ca, good = make_ca(tmp_path, "ours")
    _, other = make_ca(tmp_path, "theirs")
    srv = ternd(conf=tls_conf(cert, key, "tls_ca = %s\n" % ca))
    port = tls_port(srv)
    assert isinstance(handshake(port, cert), Exception)
    assert isinstance(handshake(port, cert, client=other), Exception)
    assert handshake(port, cert, client=good).startswith("TLS_")
    assert handshake(port, cert, tls12=True, client=good).startswith("ECDHE-")
    srv.write_conf(tls_conf(cert, key, "tls_ca = %s\ntls_verify_client = optional\n" % ca))
    with srv.conn() as c:
        assert c.call("reload") == b"OK\r\n"
    assert handshake(port, cert).startswith("TLS_")
    assert isinstance(handshake(port, cert, client=other), Exception)
    assert handshake(port, cert, client=good).startswith("TLS_")
    srv.write_conf(tls_conf(cert, key))
    with srv.conn() as c:
        assert c.call("reload") == b"OK\r\n"
    assert handshake(port, cert, client=other).startswith("TLS_")
    # a CA file with no certificate is refused, and the running context stays
    empty = tmp_path / "empty.pem"
    empty.write_text("not a certificate\n")
    srv.write_conf(tls_conf(cert, key, "tls_ca = %s\n" % empty))
    with srv.conn() as c:
        r = c.call("reload")
        assert r.startswith(b"SERVER_ERROR reload failed: TLS client CAs %s: " % str(empty).encode()), r
    assert handshake(port, cert).startswith("TLS_")
