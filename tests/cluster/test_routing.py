"""
Routing: tern-load's ketama hashing (client/ketama.c) places every key on
the server nutcracker sends it to and libmemcached's weighted ketama picks,
and tern-load drives several servers directly or through the proxy with
every message checked and figures per server.
"""
import json
import re
import shutil
import subprocess

import pytest

from clusterutil import TIMEOUT, addr, routes, tern_load, where_queues

# Weights and a named server, so that point counts and the hashed server
# names are checked too, not only the plain case.
WEIGHTED = dict(weights=[1, 2, 1], names=[None, None, "third"])


def set_through(cluster, keys):
    with cluster.conn() as c:
        for k in keys:
            assert c.set(k, b"x") == b"STORED\r\n", k


@pytest.mark.parametrize("hash", ["md5", "fnv1a_64", "one_at_a_time"])
def test_ketama_matches_nutcracker(cluster, hash):
    cl = cluster(hash=hash, **WEIGHTED)
    keys = ["rt%s.%d" % (hash[:3], i) for i in range(150)] + ["jobs", "mail", "a", "Z-9_.x"]
    set_through(cl, keys)
    found = where_queues(cl.servers, keys)
    want = routes(cl.server_list(), keys, hash)
    for k in keys:
        assert found[k] == [cl.index(want[k])], (k, found[k], want[k])
    # Every server took some keys (with fnv1a_64 the similar names cluster,
    # which is the point of comparing more than one hash).
    if hash != "fnv1a_64":
        assert all(any(found[k] == [i] for k in keys) for i in range(3))


PHP = r"""
$m = new Memcached();
$m->setOption(Memcached::OPT_LIBKETAMA_COMPATIBLE, true);
foreach (json_decode($argv[1]) as $s) { $m->addServer($s[0], $s[1], $s[2]); }
while (($k = fgets(STDIN)) !== false) {
    $k = rtrim($k, "\n");
    $s = $m->getServerByKey($k);
    echo $k, " ", $s['host'], ":", $s['port'], "\n";
}
"""


def test_ketama_matches_libmemcached():
    """libmemcached (through PHP's memcached extension) with
    OPT_LIBKETAMA_COMPATIBLE, i.e. weighted ketama with MD5, places every
    key where tern-load does.  No server is contacted."""
    php = shutil.which("php")
    if not php:
        pytest.fail("php not found (Debian packages php-cli php-memcached; make test installs them)")
    servers = [["127.0.0.1", 22133, 1], ["127.0.0.1", 22134, 2], ["127.0.0.1", 22135, 1]]
    keys = ["lm.%d" % i for i in range(300)] + ["jobs"]
    r = subprocess.run([php, "-r", PHP, json.dumps(servers)], input="".join(k + "\n" for k in keys),
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0 and "Class \"Memcached\" not found" not in r.stdout + r.stderr, \
        r.stdout[-2000:] + r.stderr[-2000:]
    lm = dict(line.rsplit(" ", 1) for line in r.stdout.splitlines())
    mine = routes("127.0.0.1:22133,127.0.0.1:22134:2,127.0.0.1:22135", keys, "md5")
    for k in keys:
        assert lm[k] == mine[k], k
    assert len(set(mine.values())) == 3


def test_load_direct_servers(cluster):
    """--servers: every queue's messages go to the server its name hashes
    to (seen in that server's own stats), each server's figures add up to
    the totals, and every message is checked."""
    cl = cluster(**WEIGHTED)
    rc, out, err, js = tern_load(["--servers", cl.server_list(), "-q", 8, "-n", 300, "-c", 2,
                                  "-P", 4, "--mode", "produce", "--prefix", "dq", "--json"])
    assert rc == 0, err
    assert js["routing"] == "servers" and js["hash"] == "md5"
    names = ["dq%d" % i for i in range(8)]
    want = routes(cl.server_list(), names)
    found = where_queues(cl.servers, names)
    for q in js["per_queue"]:
        assert q["server"] == want[q["name"]]
        assert found[q["name"]] == [cl.index(q["server"])]
        assert q["write"]["messages"] == 300
    per = {s["server"]: s for s in js["servers"]}
    assert sorted(per) == sorted(addr(s) for s in cl.servers)
    assert [per[addr(s)]["name"] for s in cl.servers] == [addr(cl.servers[0]),
                                                          addr(cl.servers[1]), "third"]
    assert [per[addr(s)]["weight"] for s in cl.servers] == [1, 2, 1]
    # each server was asked what it is, directly
    for s in per.values():
        assert s["version"].startswith("1.6.21 tern-") and s["sync"] == "interval", s
        assert s["sync_interval_ms"] == 100, s
    for a, s in per.items():
        mine = [q for q in js["per_queue"] if q["server"] == a]
        assert s["queues"] == len(mine)
        assert s["write"]["messages"] == 300 * len(mine)
        assert s["write"]["bytes"] == sum(q["write"]["bytes"] for q in mine)
        assert s["total_errors"] == 0
    assert sum(s["write"]["messages"] for s in per.values()) == js["total"]["write"]["messages"]
    # Now read them back through the servers, checked.
    rc, out, err, js = tern_load(["--servers", cl.server_list(), "-q", 8, "-n", 300, "-c", 2,
                                  "--mode", "consume", "--prefix", "dq", "--json"])
    assert rc == 0, err
    assert js["total"]["read"]["messages"] == 2400 and js["total_errors"] == 0
    assert sum(s["read"]["messages"] for s in js["servers"]) == 2400


def test_load_text_report_per_server(cluster):
    cl = cluster()
    rc, out, err, _ = tern_load(["--servers", cl.server_list(), "-q", 6, "-n", 200, "-P", 4])
    assert rc == 0, err
    lines = [l for l in out.splitlines() if l.startswith("Server ")]
    assert len(lines) == 3
    for l in lines:
        assert re.match(r"^Server 127\.0\.0\.1:\d+ \(\d+ queues\): write [\d.]+ msg/s - [\d.]+ "
                        r"MiB/s, read [\d.]+ msg/s - [\d.]+ MiB/s \(0 errors\)$", l), l
    assert sum(int(re.search(r"\((\d+) queues\)", l).group(1)) for l in lines) == 6


def test_load_mixed_through_proxy(cluster):
    """Mixed mode through nutcracker: reads poll (no /t=, which would hold
    the proxy's shared server connection), every message arrives once and
    in order, and --servers groups the figures by the server the proxy
    chose."""
    cl = cluster()
    rc, out, err, js = tern_load(["--proxy", "127.0.0.1:%d" % cl.proxy.port, "--servers",
                                  cl.server_list(), "-q", 6, "-n", 400, "-c", 2,
                                  "--mode", "mixed", "--prefix", "pm", "--json"])
    assert rc == 0, err
    assert js["routing"] == "proxy" and js["get_options"] == ""
    assert js["total"]["write"]["messages"] == 2400
    assert js["total"]["read"]["messages"] == 2400
    assert js["total_errors"] == 0
    assert sum(s["read"]["messages"] for s in js["servers"]) == 2400
    # Every queue was drained on the server tern-load attributes it to.
    for s in cl.servers:
        with s.conn() as c:
            st = c.stats()
        for q in js["per_queue"]:
            assert int(st.get("queue_%s_items" % q["name"], "0")) == 0


def test_option_errors(cluster):
    cl = cluster(n=1)
    p = "127.0.0.1:%d" % cl.proxy.port
    for args, msg in [
        (["--proxy", p, "--get-options", "/open"], "use --hash-tag"),
        (["--proxy", p, "--mode", "mixed", "--get-options", "/t=50"], "use --hash-tag"),
        (["--servers", addr(cl.servers[0]), "-p", "1"], "not both"),
        (["--proxy", p, "-h", "127.0.0.1"], "not both"),
        (["--servers", "a:1,"], "bad --servers"),
        (["--servers", "a:0"], "bad --servers"),
        (["--proxy", "nocolon"], "bad --proxy"),
        (["--show-routes"], "needs --servers"),
        (["--servers", "a:1", "--hash", "crc99"], "bad hash"),
    ]:
        rc, out, err, _ = tern_load(args)
        assert rc == 2 and msg in err, (args, rc, err)
