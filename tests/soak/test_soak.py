"""
The soak run, short: tools/soak for 3 minutes (TERN_SOAK_MINUTES) across
the four sync modes, with producers, reliable readers and hostile clients
(garbage, half-sent lines, clients that never read) against ternd, which is
killed with SIGKILL every 15 s and restarted on its data directory.

Passes when, in every mode, every acknowledged set was found again (confirmed
by a reader or drained at the end), no body came back after its confirm
except around a kill (at-least-once), drained bodies kept per-producer
order, and ternd came back after every kill.
"""
import json
import os
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_soak_short(tmp_path):
    ternd = os.environ.get("TERND", "build/ternd")
    if not os.path.isabs(ternd):
        ternd = os.path.join(REPO, ternd)
    minutes = os.environ.get("TERN_SOAK_MINUTES", "3")
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "tools", "soak"), "--ternd", ternd,
         "--minutes", minutes, "--kill-every", "15", "--json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=float(minutes) * 60 + 300)
    print(proc.stdout.decode(errors="replace")[-4000:])
    results = json.loads(out.read_text())["results"]
    assert [r["mode"] for r in results] == ["always", "odsync", "interval", "none"]
    for r in results:
        assert r["restarts_failed"] == 0, r
        assert r["kills"] >= 2, r
        assert r["acknowledged"] > 1000, r
        assert r["lost"] == 0, r
        assert r["duplicated_unexplained"] == 0, r
        assert r["disorder"] == 0, r
        assert r["hostile_connections"] > 0, r
    assert proc.returncode == 0
