"""
Statistics in a cluster: the proxy does not pass `stats` on, each server
answers its own, and tools/tern-stats puts them side by side with totals.
"""
import json
import os
import subprocess

from clusterutil import REPO, TIMEOUT, addr, routes, free_port

TERN_STATS = os.path.join(REPO, "tools", "tern-stats")


def tern_stats(args):
    r = subprocess.run(["/usr/bin/python3", TERN_STATS] + args, capture_output=True, text=True,
                       timeout=TIMEOUT * 2)
    return r.returncode, r.stdout, r.stderr


def test_proxy_does_not_forward_stats(cluster):
    cl = cluster(n=1)
    with cl.conn() as c:
        c.send("stats\r\n")
        c.assert_closed()


def test_tern_stats_totals_and_placement(cluster):
    cl = cluster()
    names = ["{st%d}" % i for i in range(9)]
    where = routes(cl.server_list(), names)
    with cl.conn() as c:
        for i, n in enumerate(names):
            for k in range(i + 1):
                assert c.set(n, "b%d" % k) == b"STORED\r\n"
    rc, out, err = tern_stats(["--servers", cl.server_list(), "--json"])
    assert rc == 0, err
    js = json.loads(out)
    assert js["servers"] == [addr(s) for s in cl.servers]
    assert js["totals"]["cmd_set"] == sum(range(1, 10))
    assert js["totals"]["total_items"] == sum(range(1, 10))
    assert "pid" not in js["totals"] and "version" not in js["totals"]
    for i, n in enumerate(names):
        assert list(js["queues"][n]) == [where[n]]
        assert js["queues"][n][where[n]]["items"] == str(i + 1)
    assert js["queues_on_several_servers"] == []
    # A queue with items on two servers (as after a server was added, or an
    # ejected one came back) is pointed out; --queue narrows the report.
    other = next(s for s in cl.servers if addr(s) != where[names[0]])
    with other.conn() as c:
        assert c.set(names[0], "stray") == b"STORED\r\n"
    rc, out, err = tern_stats(["--servers", cl.server_list(), "--queue", names[0], "--json"])
    js = json.loads(out)
    assert list(js["queues"]) == [names[0]]
    assert js["queues_on_several_servers"] == [names[0]]
    rc, out, err = tern_stats(["--servers", cl.server_list()])
    assert rc == 0, err
    lines = [l for l in out.splitlines() if l.startswith(names[0] + " ")]
    assert len(lines) == 2 and all(l.endswith("(items on several servers)") for l in lines)
    cmd_set = [l.split() for l in out.splitlines() if l.startswith("cmd_set ")]
    assert len(cmd_set) == 1 and cmd_set[0][-1] == str(sum(range(1, 10)) + 1)


def test_tern_stats_unreachable_server(cluster):
    cl = cluster(n=1)
    dead = "127.0.0.1:%d" % free_port()
    rc, out, err = tern_stats(["--servers", "%s,%s" % (addr(cl.servers[0]), dead)])
    assert rc == 1
    assert dead in err
    assert out.splitlines()[0].split() == [addr(cl.servers[0]), "total"]
    rc, out, err = tern_stats(["--servers", "nonsense"])
    assert rc == 2 and "bad --servers" in err
