"""tests/sync: the sync-mode comparison and the journal settings' validation.

- tools/compare-sync-modes --short starts ternd once per sample config
  (conf/sync-*.conf, conf/prealloc-*.conf), runs tern-load against each, and
  must report every config in its table with 0 errors; it cuts the power
  under each (where /dev/fuse is) and reports what a cut lost, which in
  always and odsync must be nothing.  Speed figures are printed, never
  asserted (speed belongs in benchmarks, not in tests).
- A config whose [journal] sync or preallocate value is not one ternd knows
  must stop ternd at startup with `FILE:LINE: message` and a non-zero status.

Binaries: $TERND, $TERN_LOAD, $TERN_JOURNAL_BENCH, else $TERN_BUILD/<name>
(default build/).  Every subprocess has a
timeout; servers are stopped by PID (compare-sync-modes does it for its own).
"""
import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("TERN_BUILD", "build")
# tests/run-all.sh names the binaries with TERND / TERN_LOAD (relative to
# the repository or absolute); TERN_BUILD picks a whole build directory.
TERND = ROOT / os.environ.get("TERND", BUILD / "ternd")
TERN_LOAD = ROOT / os.environ.get("TERN_LOAD", BUILD / "tern-load")
JOURNAL_BENCH = ROOT / os.environ.get("TERN_JOURNAL_BENCH", BUILD / "journal-bench")
PCFS = ROOT / os.environ.get("TERN_PCFS", BUILD / "pcfs")
TERN_JOURNAL = ROOT / os.environ.get("TERN_JOURNAL", BUILD / "tern-journal")
COMPARE = ROOT / "tools" / "compare-sync-modes"
CONFS = ["sync-none", "sync-interval", "sync-always", "sync-odsync",
         "prealloc-zero", "prealloc-none", "prealloc-fallocate"]

need_ternd = pytest.mark.skipif(not TERND.exists(), reason=f"{TERND} not built")
need_load = pytest.mark.skipif(not TERN_LOAD.exists(), reason=f"{TERN_LOAD} not built")


@pytest.mark.parametrize("name", CONFS)
def test_sample_config_is_documented(name):
    """Each sample opens with a prose paragraph and listens on loopback."""
    text = (ROOT / "conf" / f"{name}.conf").read_text()
    head = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        head.append(line)
    prose = " ".join(head)
    assert len(prose) > 400, "opens with a paragraph of prose"
    assert "power" in prose, "says what a power cut can lose"
    assert "listen = 127.0.0.1" in text
    # inih treats an indented line as a continuation of the previous value
    # and truncates lines of 200+ bytes: neither may appear.
    for n, line in enumerate(text.splitlines(), 1):
        assert len(line) < 200, f"{name}.conf:{n}: too long for inih"
        assert not line[:1].isspace(), f"{name}.conf:{n}: indented line"


@need_ternd
@need_load
def test_compare_short(tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, str(COMPARE), "--short", "--out", str(out),
           "--ternd", str(TERND), "--tern-load", str(TERN_LOAD),
           "--journal-bench", str(JOURNAL_BENCH), "--pcfs", str(PCFS),
           "--tern-journal", str(TERN_JOURNAL)]
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=200)
    report = f"stdout:\n{cp.stdout}\nstderr:\n{cp.stderr}"
    print(report)  # the figures, for whoever reads the test log
    assert cp.returncode == 0, report

    table = cp.stdout
    for name in CONFS:
        assert f"\n{name} " in table, f"{name} missing from the table\n{report}"

    with open(out / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    seen = {(r["config"], r["workload"], r["clients"]) for r in rows}
    for name in CONFS:
        for workload in ("mixed", "sequential"):
            for clients in ("1", "4"):
                assert (name, workload, clients) in seen, (name, workload, clients)
    for r in rows:
        assert r["errors"] == "0", f"tern-load reported errors: {r}"
        assert r["set_msgs"] not in ("", "0", "0.0"), f"no throughput figure: {r}"
    assert (out / "runs.csv").exists() and (out / "machine.txt").exists()
    # the file system as mounted, not statfs's "ext2/ext3" for ext4
    fstype = subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "-T", str(out)],
                            capture_output=True, text=True).stdout.strip()
    if fstype:
        assert f"fs_type: {fstype}\n" in (out / "machine.txt").read_text()
    # the loss per power cut beside the speed (each config's promise is
    # checked by the cuts: a broken one fails the run)
    if os.path.exists("/dev/fuse"):
        with open(out / "powercut.csv") as f:
            cuts = {r["config"]: r for r in csv.DictReader(f)}
        assert sorted(cuts) == sorted(CONFS), cuts
        for name, r in cuts.items():
            assert int(r["cuts"]) >= 2 and int(r["acknowledged"]) > 0, r
            if r["sync"] in ("always", "odsync"):
                assert float(r["lost_max"]) == 0, r
        assert "lost/cut" in table


def bad_config(tmp_path, key, value):
    """conf/sync-always.conf with `key = value` in [journal]; (path, line)."""
    lines = (ROOT / "conf" / "sync-always.conf").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.split("=")[0].strip() == key:
            lines[i] = f"{key} = {value}"
            break
    else:
        raise AssertionError(f"sync-always.conf has no {key} line")
    path = tmp_path / f"bad-{key}.conf"
    path.write_text("\n".join(lines) + "\n")
    return path, i + 1


@need_ternd
@pytest.mark.parametrize("key", ["sync", "preallocate"])
def test_bad_journal_value_refuses_to_start(tmp_path, key):
    path, lineno = bad_config(tmp_path, key, "bogus")
    data = tmp_path / "data"
    data.mkdir()
    try:
        cp = subprocess.run([str(TERND), "-c", str(path), "-p", "0", "-d", str(data)],
                            stdin=subprocess.DEVNULL, capture_output=True, text=True,
                            timeout=10)
    except subprocess.TimeoutExpired as e:
        # subprocess.run has killed it (by PID); it must not have started.
        pytest.fail(f"ternd kept running with {key} = bogus: {e.stderr!r}")
    assert cp.returncode != 0, cp.stderr
    assert "ternd listening on" not in cp.stderr
    assert f"{path}:{lineno}:" in cp.stderr, \
        f"expected '{path}:{lineno}:' in stderr, got {cp.stderr!r}"


need_jbench = pytest.mark.skipif(not JOURNAL_BENCH.exists(), reason=f"{JOURNAL_BENCH} not built")


@need_jbench
def test_journal_bench_cpu_group(tmp_path):
    """-g cpu writes the whole file (8 MiB: 2048 records of 4 KiB) both
    ways, reads every record back checked, and prints one row per method;
    the sync groups' table is not printed."""
    d = tmp_path / "jb"
    cp = subprocess.run([str(JOURNAL_BENCH), "-d", str(d), "-g", "cpu", "-s", "4096",
                         "-f", "8M", "--csv"], capture_output=True, text=True, timeout=60)
    print(cp.stdout, cp.stderr)
    assert cp.returncode == 0, cp.stderr
    rows = list(csv.DictReader(cp.stdout.splitlines()))
    assert [r["method"] for r in rows] == ["buffered", "odirect"], cp.stdout
    assert "syncs" not in cp.stdout.splitlines()[0]
    buffered, odirect = rows
    assert buffered["status"] == "ok" and buffered["records"] == "2048"
    assert float(buffered["write_us_per_record"]) > 0
    # O_DIRECT is refused by some file systems (tmpfs): that is a finding
    assert odirect["status"] == "ok" or odirect["status"].startswith("unsupported"), odirect
    if odirect["status"] == "ok":
        assert odirect["records"] == "2048"
    assert not d.exists(), "the directory it made is removed"

    # -s not dividing -f: the records that fit, and the same table form
    cp = subprocess.run([str(JOURNAL_BENCH), "-d", str(d), "-g", "cpu", "-s", "3000",
                         "-f", "64K"], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    lines = [l.split() for l in cp.stdout.splitlines() if l.startswith("cpu ")]
    assert [l[1] for l in lines] == ["buffered", "odirect"], cp.stdout
    assert lines[0][2] == "21" and lines[0][-1] == "ok", cp.stdout

    cp = subprocess.run([str(JOURNAL_BENCH), "-g", "cpux"], capture_output=True,
                        text=True, timeout=10)
    assert cp.returncode == 2 and "align,cpu" in cp.stderr
