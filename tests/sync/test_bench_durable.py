"""tools/bench-durable --short: the disk's figures and tern's durable modes
in one report.

One short run (one round, 0.3 s per tern shape; a few seconds) must give
every disk row (512 B and 4 KiB, fdatasync and O_DSYNC, K = 1, 8, 64, 512),
every tern row (always, odsync, interval x 1c p1, 16c p1, 64c p1, 1c p16)
with sets counted, the ratios to the disk and to interval where they
apply, every goal, and leave nothing behind in its --data-root.  The text
report is rendered from the same figures.  Speed is printed, never
asserted.

Binaries: $TERND, $TERN_LOAD, $TERN_JOURNAL_BENCH, else $TERN_BUILD/<name>
(default build/).  The run has a timeout; the script stops its servers by
PID.
"""
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("TERN_BUILD", "build")
TERND = ROOT / os.environ.get("TERND", BUILD / "ternd")
TERN_LOAD = ROOT / os.environ.get("TERN_LOAD", BUILD / "tern-load")
JOURNAL_BENCH = ROOT / os.environ.get("TERN_JOURNAL_BENCH", BUILD / "journal-bench")
BENCH = ROOT / "tools" / "bench-durable"

pytestmark = pytest.mark.skipif(
    not all(p.exists() for p in (TERND, TERN_LOAD, JOURNAL_BENCH)),
    reason="ternd, tern-load and journal-bench must be built")


def bench(*args, timeout=120):
    cmd = [sys.executable, str(BENCH), "--ternd", str(TERND), "--tern-load", str(TERN_LOAD),
           "--journal-bench", str(JOURNAL_BENCH)] + list(args)
    return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout)


def load_module():
    loader = importlib.machinery.SourceFileLoader("bench_durable", str(BENCH))
    spec = importlib.util.spec_from_loader("bench_durable", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def test_short_run_reports_every_row(tmp_path):
    root = tmp_path / "data"
    cp = bench("--short", "--json", "--data-root", str(root))
    report = f"stdout:\n{cp.stdout}\nstderr:\n{cp.stderr}"
    print(report)  # the figures, for whoever reads the test log
    assert cp.returncode == 0, report
    out = json.loads(cp.stdout)
    assert out["ok"] is True and out["runs"] == 1 and out["set_size"] == 512

    disk = {(d["size"], d["method"], d["k"]): d for d in out["disk"]}
    assert set(disk) == {(size, method, k) for size in (512, 4096)
                         for method in ("fdatasync", "odsync") for k in (1, 8, 64, 512)}
    for d in disk.values():
        assert d["runs"] == 1 and d["rps"] > 0 and d["p50_us"] > 0, d

    tern = {(t["mode"], t["shape"]): t for t in out["tern"]}
    shapes = ["1c p1", "16c p1", "64c p1", "1c p16"]
    assert list(tern) == [(m, s) for m in ("always", "odsync", "interval") for s in shapes]
    for (mode, shape), t in tern.items():
        assert t["runs"] == 1 and t["msg_s"] > 0 and t["p99_us"] >= t["p50_us"] > 0, t
        assert t["sets_per_group"] > 0 and t["cpu_us_per_msg"] is not None, t
        if mode == "interval":
            assert t["vs_disk"] is None and t["cpu_vs_interval"] is None, t
        else:
            assert t["disk_rps"] > 0 and t["vs_disk"] > 0 and t["p99_vs_disk_p50"] > 0, t
            assert t["disk_k"] == max(1, round(t["sets_per_group"])), t
    runs = out["tern_runs"]
    assert len(runs) == 12 and all(r["messages"] > 0 for r in runs)

    goals = out["goals"]
    assert len(goals) == 10
    # (a ratio has no figure when its divisor measured 0, e.g. interval's
    # CPU in a 0.3 s run that a stall of the shared disk held up)
    for g in goals:
        assert (g["met"] is None) == (g["value"] is None), g
    assert list(root.iterdir()) == [], "the data directories are removed"

    mod = load_module()
    args = mod.parse_args(["--short", "--ternd", str(TERND), "--tern-load", str(TERN_LOAD),
                           "--journal-bench", str(JOURNAL_BENCH)])
    info = dict(out["machine"])
    text = mod.report(args, info, out["disk"], out["tern"], goals)
    lines = text.splitlines()
    assert lines[0].startswith("bench-durable: ")
    head = next(ln for ln in lines if ln.startswith("mode "))
    for col in ("msg/s", "p50 us", "p99 us", "sets/group", "sets/fsync", "cpu us/set",
                "x bare", "p99/bare50", "cpu/intvl"):
        assert col in head, col
    assert sum(ln.startswith("always ") for ln in lines) == 4
    assert sum(ln.startswith("512 B ") for ln in lines) == 8
    assert sum(ln.startswith("  always ") or ln.startswith("  odsync ")
               for ln in lines) == 10


def test_usage_errors(tmp_path):
    for args in (["--runs", "0"], ["--seconds", "0"], ["--ternd", str(tmp_path / "none")]):
        cp = bench("--data-root", str(tmp_path), *args, timeout=30)
        assert cp.returncode == 2 and "usage: bench-durable" in cp.stderr, (args, cp)
        assert cp.stdout == ""


def test_ab_ratios_pair_runs_of_one_round():
    """With --ternd-base each run is set against the base build's run of the
    same round and shape, and CPU against interval's of its own build."""
    mod = load_module()

    def run(mode, rnd, msg_s, cpu):
        sync = mode.replace("base-", "")
        return {"mode": mode, "sync": sync, "shape": "1c p1", "round": rnd,
                "msg_s": msg_s, "cpu_us_per_msg": cpu}
    runs = [run("always", 0, 300, 90), run("base-always", 0, 200, 180),
            run("interval", 0, 900, 30), run("base-interval", 0, 1000, 60),
            run("always", 1, 100, 100), run("base-always", 1, 400, 50),
            run("interval", 1, 800, 40), run("base-interval", 1, 800, 50)]
    mod.derive(runs)
    r = {(t["mode"], t["round"]): t for t in runs}
    assert r[("always", 0)]["msg_s_vs_base"] == 1.5 and r[("always", 0)]["cpu_vs_base"] == 0.5
    assert r[("always", 1)]["msg_s_vs_base"] == 0.25 and r[("always", 1)]["cpu_vs_base"] == 2
    assert r[("always", 0)]["cpu_vs_interval"] == 3 and r[("base-always", 0)]["cpu_vs_interval"] == 3
    assert r[("always", 1)]["cpu_vs_interval"] == 2.5
    assert r[("base-always", 1)]["cpu_vs_interval"] == 1
    assert r[("interval", 1)]["msg_s_vs_base"] == 1 and "msg_s_vs_base" not in r[("base-always", 0)]
    assert "cpu_vs_interval" not in r[("interval", 0)]
