"""
Statistics in a cluster: the proxy does not pass `stats` on, each server
answers its own, and ternctl --servers (the proxy's server list as it is)
puts them side by side with totals and finds each queue's server.
"""
import json
import os
import subprocess

from clusterutil import REPO, TIMEOUT, addr, routes, free_port

TERNCTL = os.environ.get("TERNCTL", os.path.join(REPO, "build", "ternctl"))


def ternctl(args):
    r = subprocess.run(["/usr/bin/python3", TERNCTL] + args, capture_output=True, text=True,
                       timeout=TIMEOUT * 2)
    return r.returncode, r.stdout, r.stderr


def test_proxy_does_not_forward_stats(cluster):
    cl = cluster(n=1)
    with cl.conn() as c:
        c.send("stats\r\n")
        c.assert_closed()


def test_ternctl_totals_and_placement(cluster):
    cl = cluster()
    names = ["{st%d}" % i for i in range(9)]
    where = routes(cl.server_list(), names)
    with cl.conn() as c:
        for i, n in enumerate(names):
            for k in range(i + 1):
                assert c.set(n, "b%d" % k) == b"STORED\r\n"
    servers = [addr(s) for s in cl.servers]
    rc, out, err = ternctl(["--servers", cl.server_list(), "stats", "--json"])
    assert rc == 0, err
    js = json.loads(out)
    assert js["servers"] == servers
    assert js["totals"]["cmd_set"] == sum(range(1, 10))
    assert js["totals"]["total_items"] == sum(range(1, 10))
    for k in ("pid", "version", "max_queues"):
        assert k not in js["totals"], k
    rc, out, err = ternctl(["--servers", cl.server_list(), "queues", "--interval", "0",
                            "--json"])
    js = json.loads(out)
    assert rc == 0, err
    for i, n in enumerate(names):
        rows = [r for r in js["queues"] if r["queue"] == n]
        assert [(r["server"], r["items"]) for r in rows] == [(where[n], i + 1)]
    assert js["queues_on_several_servers"] == []
    # A queue with items on two servers (as after a server was added, or an
    # ejected one came back) is pointed out; a pattern narrows the report.
    other = next(s for s in cl.servers if addr(s) != where[names[0]])
    with other.conn() as c:
        assert c.set(names[0], "stray") == b"STORED\r\n"
    rc, out, err = ternctl(["--servers", cl.server_list(), "queues", "{st0}", "--interval", "0",
                            "--json"])
    js = json.loads(out)
    assert {r["queue"] for r in js["queues"]} == {names[0]}
    assert js["queues_on_several_servers"] == [names[0]]
    assert js["totals"][names[0]]["items"] == 2
    rc, out, err = ternctl(["--servers", cl.server_list(), "queues", "--interval", "0"])
    assert rc == 0, err
    assert "queue %s has items on several servers" % names[0] in out.splitlines()
    rc, out, err = ternctl(["--servers", cl.server_list(), "stats"])
    cmd_set = [l.split() for l in out.splitlines() if l.startswith("cmd_set ")]
    assert len(cmd_set) == 1 and cmd_set[0][-1] == str(sum(range(1, 10)) + 1)


def test_ternctl_unreachable_server(cluster):
    cl = cluster(n=1)
    dead = "127.0.0.1:%d" % free_port()
    rc, out, err = ternctl(["--servers", "%s,%s" % (addr(cl.servers[0]), dead), "stats"])
    assert rc == 1
    assert dead in err
    assert out.splitlines()[0].split() == ["NAME", addr(cl.servers[0])]
    rc, out, err = ternctl(["--servers", "nonsense:x", "stats"])
    assert rc == 2 and "bad server" in err
