"""
tern-journal's --help and --version, and its usage errors.  (tern-load's
--progress and --json get options are tested in tests/load.)
"""
import re

from opsutil import run, tool


def tj(*args):
    return run([tool("TERN_JOURNAL", "build/tern-journal")] + list(args))


def test_help():
    for flag in ("--help", "-h"):
        r = tj(flag)
        assert r.returncode == 0 and r.stderr == "", r
        assert r.stdout.startswith("usage: tern-journal dump|verify|stat DATA_DIR [QUEUE]\n")
        for word in ("dump", "verify", "stat", "--version", "Exit status", "benign", "damage"):
            assert word in r.stdout


def test_version_matches_ternd():
    r = tj("--version")
    assert r.returncode == 0 and r.stderr == ""
    m = re.match(r"^tern-journal (\d+\.\d+\.\d+)\n$", r.stdout)
    assert m, r.stdout
    d = run([tool("TERND", "build/ternd"), "--version"])
    assert d.stdout == "ternd %s\n" % m.group(1)


def test_usage_errors(tmp_path):
    for args in ([], ["stat"], ["bogus", str(tmp_path)], ["--bogus"],
                 ["stat", str(tmp_path), "q", "extra"]):
        r = tj(*args)
        assert r.returncode == 3, (args, r)
        assert r.stdout == "" and "usage: tern-journal" in r.stderr, (args, r)


def test_option_after_command_is_an_argument(tmp_path):
    """Options come before the command: after it, '--help' is a queue name
    (a valid one, with no directory here), not a request for help."""
    r = tj("stat", str(tmp_path), "--help")
    assert r.returncode == 3 and r.stdout == ""
    assert r.stderr == "%s/queues/--help: No such file or directory\n" % tmp_path


def test_stat_after_options_end(tmp_path):
    (tmp_path / "queues").mkdir()
    r = tj("--", "verify", str(tmp_path))
    assert r.returncode == 0 and r.stdout == "0 queues checked: ok\n", r
