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


def test_interval_verdict_counts_losses_after_two_syncs():
    # the interval verdict's rule: the queue's newest segment, there
    # before the acknowledgement and synced twice after it, must hold it
    import pcut
    synced = {"/queues/q/00000001.seg": (1.0, 10.0, 10.2),
              "/queues/q/00000002.seg": (5.0, 10.0, 10.2),
              "/queues/r/00000001.seg": (11.0, 0, 11.0),
              "/queues/s/00000001.seg": (1.0, 9.0, 9.5),
              "/queues/s/00000002.seg": (9.6, 9.6, 9.8)}
    assert pcut.synced_twice_after(synced, "q", 9.9)
    assert not pcut.synced_twice_after(synced, "q", 10.1)  # one sync after it only
    assert not pcut.synced_twice_after(synced, "q", 4.0)   # the newest came after it
    assert not pcut.synced_twice_after(synced, "r", 5.0)   # one sync in all
    assert not pcut.synced_twice_after(synced, "s", 5.0)   # the older one's syncs only
    assert not pcut.synced_twice_after(synced, "qq", 1.0)  # another queue's files
