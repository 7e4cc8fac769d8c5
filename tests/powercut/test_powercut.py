"""
The power-cut run, short: tools/powercut with 12 cuts per sync mode (the
modes start at different plans, so that between them every plan, and so
every phase, is aimed at), bounded to a few minutes.
Passes when every mode kept its promise in every cut (tools/powercut's
verdicts: always and odsync lose nothing acknowledged, interval only within
its window, none keeps a prefix; ternd starts on every image, verify exits
0 or 1, nothing phantom, duplicated, out of order or deleted comes back),
and every phase was hit.  The long run (1,000 cuts per mode) is
tools/powercut without --cuts; its table is in docs/SYNC-MODES.md.
"""
import json
import os
import subprocess
import sys

import pytest

from pcfs import REPO, fuse_missing

pytestmark = pytest.mark.skipif(fuse_missing() is not None, reason=str(fuse_missing()))

CUTS = int(os.environ.get("TERN_POWERCUT_CUTS", "12"))


def test_power_cuts_short(tmp_path):
    out = tmp_path / "powercut.json"
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "tools", "powercut"), "--cuts", str(CUTS),
         "--epoch", "4", "--minutes", "6", "--work", str(tmp_path / "work"),
         "--artifacts", str(tmp_path / "failed"), "--json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    text = proc.stdout.decode(errors="replace")
    print(text[-6000:])
    results = json.loads(out.read_text())["results"]
    assert [r["mode"] for r in results] == ["always", "odsync", "interval", "none"]
    for r in results:
        assert r["cuts"] >= CUTS // 2, r["mode"]
        assert r["acknowledged"] > 500, r["mode"]
        assert not r["failures"], (r["mode"], r["failures"][:5])
        assert r["restart_failures"] == 0, r["mode"]
        assert set(r["verify"]) <= {"0", "1"}, (r["mode"], r["verify"])
        assert r["phantoms"] == r["drain_duplicates"] == r["disorder"] == 0, r["mode"]
        assert r["delete_undone"] == 0, r["mode"]
    for m in ("always", "odsync"):
        r = next(x for x in results if x["mode"] == m)
        assert r["lost"] == r["lost_moved"] == r["flush_undone"] == 0, r
    for phase in results[0]["phases"]:
        assert sum(r["phases"][phase] for r in results) > 0, "no cut in phase %s" % phase
    assert proc.returncode == 0
