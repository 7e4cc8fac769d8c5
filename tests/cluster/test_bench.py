"""tools/bench-cluster runs end to end (small, one round): every topology
starts, tern-load finds no error, the table has a row per topology.  No
figure is asserted."""
import os
import re
import subprocess

from clusterutil import REPO, tool


def test_bench_cluster_smoke(tmp_path):
    out_json = tmp_path / "runs.json"
    r = subprocess.run(["/usr/bin/python3", os.path.join(REPO, "tools", "bench-cluster"),
                        "--runs", "1", "-n", "300", "-q", "3", "--mode", "mixed",
                        "--ternd", tool("TERND", "build/ternd"),
                        "--tern-load", tool("TERN_LOAD", "build/tern-load"),
                        "--json", str(out_json)], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [l for l in r.stdout.splitlines() if re.match(r"^\| (direct|proxy)-[13] \|", l)]
    assert [l.split()[1] for l in rows] == ["direct-1", "proxy-1", "proxy-3", "direct-3"]
    assert rows[0].split("|")[4].strip() == "1.00"
    assert out_json.exists()
    bad = subprocess.run(["/usr/bin/python3", os.path.join(REPO, "tools", "bench-cluster"),
                          "--topologies", "direct-2"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2


def test_bench_cluster_cores_smoke(tmp_path):
    # --cores: one ternd against two, memcached -t 1 against -t 2, each row
    # with the servers' CPU time per message.
    r = subprocess.run(["/usr/bin/python3", os.path.join(REPO, "tools", "bench-cluster"),
                        "--cores", "--runs", "1", "-n", "300", "-q", "2",
                        "--ternd", tool("TERND", "build/ternd"),
                        "--tern-load", tool("TERN_LOAD", "build/tern-load")],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [l for l in r.stdout.splitlines() if re.match(r"^\| (tern|memcached)-", l)]
    assert [l.split()[1] for l in rows] == ["tern-1core", "tern-2core", "memcached-t1",
                                            "memcached-t2"]
    assert rows[0].split("|")[4].strip() == "1.00"
    for l in rows:
        assert re.match(r"^ \d+\.\d\d \(\d+\.\d\d-\d+\.\d\d\) $", l.split("|")[6]), l
