"""
memcached compatibility of the text protocol: the commands tern answers
but does not implement (their data blocks are swallowed, so the connection
stays in step), add (enqueue only into an empty queue), and the version
and stats that clients parse (libmemcached's tools, PHP's Memcached,
python-memcache, pymemcache).
"""
import shutil
import subprocess

import pytest

from conftest import TIMEOUT, wait_until
from test_protocol import END, SET, STORED, V, qstat, version_reply

REFUSED_STORE = [
    (b"replace", b"", "replace not supported: a queue is appended to (set enqueues)"),
    (b"append", b"", "append not supported: queued messages cannot be changed"),
    (b"prepend", b"", "prepend not supported: queued messages cannot be changed"),
    (b"cas", b" 12345", "cas not supported: queued messages cannot be changed"),
]


@pytest.mark.parametrize("cmd,extra,why", REFUSED_STORE, ids=[r[0].decode() for r in REFUSED_STORE])
def test_refused_storage_command_swallows_its_block(server, cmd, extra, why):
    # The data block looks like requests: none of them may run.
    c = server.conn()
    block = b"get sw\r\ndelete sw\r\nversion\r\n"
    c.send(SET("sw", "kept"))
    c.expect(STORED)
    c.send(b"%s sw 0 0 %d%s\r\n%s\r\n" % (cmd, len(block), extra, block))
    c.expect(b"CLIENT_ERROR %s\r\n" % why.encode())
    # noreply: nothing at all, the block still swallowed
    c.send(b"%s sw 0 0 %d%s noreply\r\n%s\r\n" % (cmd, len(block), extra, block) + b"get sw\r\n")
    c.expect(V("sw", "kept") + END)


REFUSED_LINE = [
    (b"incr sw 1", "incr not supported: queues hold no counters"),
    (b"decr sw 1", "decr not supported: queues hold no counters"),
    (b"touch sw 10", "touch not supported: a queued message keeps its exptime"),
    (b"gat 10 sw", "gat not supported: a queued message keeps its exptime (use get)"),
    (b"gats 10 sw other", "gats not supported: a queued message keeps its exptime (use gets)"),
]


@pytest.mark.parametrize("line,why", REFUSED_LINE, ids=[r[0].split()[0].decode() for r in REFUSED_LINE])
def test_refused_line_commands(server, line, why):
    c = server.conn()
    ver = version_reply(c)
    c.send(line + b"\r\nversion\r\n")
    c.expect(b"CLIENT_ERROR %s\r\n" % why.encode() + ver)
    if not line.startswith(b"gat"):
        c.send(line + b" noreply\r\nversion\r\n")
        c.expect(ver)


def test_malformed_refused_command_without_length(server):
    # no length: nothing to swallow, the next line is a request
    c = server.conn()
    ver = version_reply(c)
    c.send(b"append sw 0 0\r\nversion\r\n")
    c.expect(b"CLIENT_ERROR bad command line format\r\n" + ver)
    c.send(b"append sw 0 0 -1\r\nversion\r\n")
    c.expect(b"CLIENT_ERROR bad data chunk\r\n" + ver)


def test_add_enqueues_only_into_an_empty_queue(server):
    c = server.conn()
    c.send(b"add lock 0 0 1\r\na\r\nadd lock 0 0 1\r\nb\r\nadd lock 0 0 1 noreply\r\nc\r\n"
           + b"get lock/peek\r\n")
    c.expect(STORED + b"NOT_STORED\r\n" + V("lock/peek", "a") + END)
    # an open item does not count: the queue itself is empty
    c.send(b"get lock/open\r\nadd lock 0 0 1\r\nd\r\nget lock/abort\r\nget lock\r\nget lock\r\n")
    c.expect(V("lock/open", "a") + END + STORED + END + V("lock", "a") + END + V("lock", "d") + END)
    # a lock: taken with add, released with delete
    c.send(b"add lk 0 0 1\r\n1\r\nadd lk 0 0 1\r\n1\r\ndelete lk\r\nadd lk 0 0 1\r\n1\r\n")
    c.expect(STORED + b"NOT_STORED\r\n" + b"DELETED\r\n" + STORED)


def test_message_expired_on_arrival_is_not_queued(server):
    # what libmemcached's exist probe sends: an exptime in 1970
    c = server.conn()
    c.send(b"add probe 0 2678400 0\r\n\r\nset probe 0 2678400 1\r\nx\r\n")
    c.expect(STORED * 2)
    s = c.stats()
    assert s["queue_probe_items"] == "0"
    assert s["queue_probe_expired_items"] == "2"
    assert s["queue_probe_total_items"] == "2"
    assert s["queue_probe_journal_records"] == "0"


# ---------------------------------------------------------------- clients

def test_python_memcache_add_and_refusals_stay_in_step(server):
    import memcache
    mc = memcache.Client(["127.0.0.1:%d" % server.port], socket_timeout=TIMEOUT)
    assert mc.add("pa", "first")
    assert not mc.add("pa", "second")
    assert not mc.append("pa", "more")
    assert not mc.prepend("pa", "more")
    assert not mc.replace("pa", "other")
    assert mc.set("pa", "next")
    # each refusal was one reply: the client is not one behind
    assert mc.get("pa") == "first"
    assert mc.get("pa") == "next"
    assert mc.get("pa") is None
    mc.disconnect_all()


def test_pymemcache_refusals_raise_and_stay_in_step(server):
    from pymemcache.client.base import Client
    from pymemcache.exceptions import MemcacheClientError
    c = Client(("127.0.0.1", server.port), default_noreply=False,
               connect_timeout=TIMEOUT, timeout=TIMEOUT)
    assert c.add("pm", b"x") is True
    assert c.add("pm", b"y") is False
    with pytest.raises(MemcacheClientError):
        c.append("pm", b"more")
    with pytest.raises(MemcacheClientError):
        c.incr("pm", 1)
    with pytest.raises(MemcacheClientError):
        c.touch("pm", 10)
    assert c.get("pm") == b"x"
    # gets: the cas unique is the item's id
    assert c.set("pm", b"z") is True
    assert c.gets("pm") == (b"z", b"2")
    # keys with options come back under the requested key
    assert c.set("pm", b"w") is True
    assert c.get("pm/open") == b"w"
    assert c.get("pm/close") is None
    assert c.get("pm/t=100") is None
    assert c.version().startswith(b"1.6.21 tern-")
    c.close()


def _tool(name):
    p = shutil.which(name)
    if not p:
        pytest.skip("%s not installed (libmemcached-tools)" % name)
    return p


def _run(args):
    p = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=TIMEOUT * 2)
    return p.returncode, p.stdout, p.stderr


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_libmemcached_version_stats_ping_exist(server, binary):
    srv = "--servers=127.0.0.1:%d" % server.port
    extra = ["--binary"] if binary else []
    rc, out, err = _run([_tool("memcstat")] + extra + [srv])
    assert rc == 0, err
    assert b"version: 1.6.21" in out and b"pid: %d" % server.pid in out, out
    rc, out, err = _run([_tool("memcping"), srv])  # (it has no --binary)
    assert rc == 0, err
    # memcexist: "does the queue hold a message?"
    rc, out, err = _run([_tool("memcexist")] + extra + [srv, "ex"])
    assert rc == 1, (out, err)
    c = server.conn()
    c.send(SET("ex", "x"))
    c.expect(STORED)
    rc, out, err = _run([_tool("memcexist")] + extra + [srv, "ex"])
    assert rc == 0, (out, err)
    # the probe left nothing behind
    assert qstat(c, "ex", "items") == 1
    c.send(b"get ex\r\n")
    c.expect(V("ex", "x") + END)


def test_php_memcached_version_and_stats(server):
    php = shutil.which("php")
    if not php:
        pytest.skip("php not installed")
    code = r'''
if (!class_exists("Memcached")) { echo "no-ext"; exit(0); }
foreach ([false, true] as $bin) {
    $m = new Memcached();
    $m->setOption(Memcached::OPT_BINARY_PROTOCOL, $bin);
    $m->addServer("127.0.0.1", %d);
    $v = $m->getVersion();
    $s = $m->getStats();
    $k = "127.0.0.1:%d";
    echo $v[$k], " ", $s[$k]["version"], " ", $s[$k]["pid"], " ";
    echo var_export($m->set("php", "v" . (int)$bin), true), " ";
    echo $m->get("php/peek"), " ", $m->get("php"), "\n";
}
''' % (server.port, server.port)
    p = subprocess.run([php, "-r", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=TIMEOUT * 2)
    if p.stdout == b"no-ext":
        pytest.skip("php-memcached not installed")
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode().splitlines() == [
        "1.6.21 1.6.21 %d true v0 v0" % server.pid,
        "1.6.21 1.6.21 %d true v1 v1" % server.pid,
    ]
