"""
`ternd --dump-config`: the effective configuration (defaults, file,
command line) in config-file syntax, which reads back to the same
configuration; it lists every key config.c accepts and opens nothing but the
file.  Also the limits config.c enforces on segment_size.
"""
import os
import re

import pytest

from opsutil import REPO, log_records, run_ternd

# A row of config.c's table of keys: section, name, the field's macro (S: a
# struct config field, Q: a queue's) with its flags, then min, max, the
# default and the help.
ROW_RE = re.compile(r'^\{ "(\w+)", "(\w+)", &t_\w+, ([SQ])\([\w.]+, ([\w |]+)\),'
                    r'(?:[^"]|\n)*?"([^"]*)",', re.M)
KEY_RE = re.compile(r'strcmp\(key, "(\w+)"\)')


def config_keys():
    """The rows of server/config.c's table: [(section, key, flags, default)],
    flags a set of "R" (a reload applies it), "J" (a queue key [journal]
    takes too), "K_QUEUES" (it defaults the [queues] key of its name) and
    "Q" (a queue key)."""
    with open(os.path.join(REPO, "server", "config.c")) as f:
        src = f.read()
    rows = []
    for section, key, where, flags, dflt in ROW_RE.findall(src):
        fl = {w for w in flags.replace("|", " ").split() if w != "0"}
        if where == "Q":
            fl |= {"Q", "R"}
        rows.append((section, key, fl, dflt))
    assert len(rows) > 40, rows
    return rows


def accepted_keys():
    """Every key server/config.c accepts (its whole vocabulary): its table's,
    and those it compares against by name ([alias NAME] destinations)."""
    with open(os.path.join(REPO, "server", "config.c")) as f:
        keys = set(KEY_RE.findall(f.read()))
    return keys | {key for _, key, _, _ in config_keys()}


def dump(args, cwd):
    rc, out, err = run_ternd(list(args) + ["--dump-config"], cwd=cwd)
    assert rc == 0, err
    assert err == b"", err
    return out.decode()


def parse(text):
    """[(section, key, value)] in order; the first line is the comment."""
    lines = text.splitlines()
    assert lines[0].startswith("# ternd "), lines[0]
    out, section = [], None
    for line in lines[1:]:
        if not line:
            continue
        m = re.match(r"^\[(.+)\]$", line)
        if m:
            section = m.group(1)
            continue
        m = re.match(r"^(\w+) = (.*)$", line)
        assert m and section, "bad line %r" % line
        out.append((section, m.group(1), m.group(2)))
    return out


def body(text):
    return text.split("\n", 1)[1]


def test_defaults(tmp_path):
    text = dump([], cwd=tmp_path)
    assert text.startswith("# ternd ") and "built-in defaults and the command line" in \
        text.splitlines()[0]
    d = {(s, k): v for s, k, v in parse(text)}
    assert d[("server", "listen")] == "127.0.0.1"
    assert d[("server", "port")] == "22133"
    assert d[("server", "data_dir")] == "./data"
    assert d[("server", "max_item_size")] == "1M"
    assert d[("server", "log_level")] == "info"
    assert d[("server", "log_output")] == "stderr"
    assert d[("journal", "sync")] == "interval"
    assert d[("journal", "preallocate")] == "auto"
    assert d[("journal", "page_cache")] == "keep"
    assert d[("journal", "segment_size")] == "64M"
    assert d[("queues", "max_open")] == "16"
    assert d[("queues", "max_memory_size")] == "64M"
    # Nothing was opened or created.
    assert os.listdir(tmp_path) == []


def test_every_accepted_key_is_dumped(tmp_path):
    # an [alias] section's key is dumped only with an alias
    conf = tmp_path / "alias.conf"
    conf.write_text("[alias fan]\ndestinations = a,b  c\n")
    dumped = parse(dump(["-c", str(conf)], cwd=tmp_path))
    assert ("alias fan", "destinations", "a b c") in dumped
    assert {k for _, k, _ in dumped} == accepted_keys()


FILE = """\
[server]
listen = 127.0.0.2
max_connections = 77
max_item_size = 2M
idle_timeout = 30
enable_shutdown = on
output_high_water = 1536K
poll_us = 0
log_level = warn

[journal]
sync = none
sync_interval_ms = 250
preallocate = zero
page_cache = drop
segment_size = 1048576
checkpoint_interval_ms = 5000
group_wait_us = 500

[queues]
max_items = 1000
max_size = 1000
max_item_size = 64K
max_age = 3600
discard_old_when_full = yes
open_timeout = 30000
max_open = 2
max_memory_size = 8M

[queue payments]
sync = always
max_items = 5

[queue logs]
max_size = 2G

[queue payments]
open_timeout = 100
"""


def test_file_and_command_line(tmp_path):
    conf = tmp_path / "t.conf"
    conf.write_text(FILE)
    text = dump(["-c", str(conf), "-p", "7000", "-l", "::1", "-d", "/srv/q", "--sync",
                 "odsync", "-vv", "-S"], cwd=tmp_path)
    assert "file %s and the command line" % conf in text.splitlines()[0]
    got = parse(text)
    d = {(s, k): v for s, k, v in got}
    assert d[("server", "listen")] == "::1"
    assert d[("server", "port")] == "7000"
    assert d[("server", "data_dir")] == "/srv/q"
    assert d[("server", "max_connections")] == "77"
    assert d[("server", "max_item_size")] == "2M"
    assert d[("server", "idle_timeout")] == "30"
    assert d[("server", "enable_shutdown")] == "yes"
    assert d[("server", "output_high_water")] == "1536K"
    assert d[("server", "poll_us")] == "0"
    assert d[("server", "log_level")] == "debug"      # -vv
    assert d[("server", "log_output")] == "syslog"    # -S
    assert d[("journal", "sync")] == "odsync"         # --sync
    assert d[("journal", "sync_interval_ms")] == "250"
    assert d[("journal", "preallocate")] == "zero"
    assert d[("journal", "page_cache")] == "drop"
    assert d[("journal", "segment_size")] == "1M"
    assert d[("journal", "group_wait_us")] == "500"
    assert d[("journal", "checkpoint_interval_ms")] == "5000"
    assert d[("queues", "max_items")] == "1000"
    assert d[("queues", "max_size")] == "1000"
    assert d[("queues", "max_item_size")] == "64K"
    assert d[("queues", "max_age")] == "3600"
    assert d[("queues", "discard_old_when_full")] == "yes"
    assert d[("queues", "open_timeout")] == "30000"
    assert d[("queues", "max_open")] == "2"
    assert d[("queues", "max_memory_size")] == "8M"
    # One section per queue, in the order the queues first appear, its keys
    # in file order; --sync forces every sync key.
    assert [x for x in got if x[0].startswith("queue ")] == [
        ("queue payments", "sync", "odsync"),
        ("queue payments", "max_items", "5"),
        ("queue payments", "open_timeout", "100"),
        ("queue logs", "max_size", "2G"),
    ]
    # It reads back to the same configuration.
    again = tmp_path / "again.conf"
    again.write_text(text)
    assert body(dump(["-c", str(again)], cwd=tmp_path)) == body(text)
    assert sorted(os.listdir(tmp_path)) == ["again.conf", "t.conf"]  # no data dir


def test_verbose_never_lowers(tmp_path):
    conf = tmp_path / "t.conf"
    conf.write_text("[server]\nlog_level = debug\n")
    d = {(s, k): v for s, k, v in parse(dump(["-c", str(conf), "-v"], cwd=tmp_path))}
    assert d[("server", "log_level")] == "debug"
    conf.write_text("[server]\nlog_level = error\n")
    d = {(s, k): v for s, k, v in parse(dump(["-c", str(conf), "-v"], cwd=tmp_path))}
    assert d[("server", "log_level")] == "info"


def test_bad_file_no_dump(tmp_path):
    conf = tmp_path / "t.conf"
    conf.write_text("[journal]\nsync = sometimes\n")
    rc, out, err = run_ternd(["-c", str(conf), "--dump-config"], cwd=tmp_path)
    assert rc == 1 and out == b""
    assert log_records(err.decode()) == [
        ("error", "%s:2: bad sync mode (expected none, interval, always or odsync) "
                  "(got 'sometimes')" % conf)]


@pytest.mark.parametrize("value,ok", [("64K", True), ("2G", True), ("2049M", False),
                                      ("1T", False), ("63K", False)])
def test_segment_size_limits(tmp_path, value, ok):
    """Segments are addressed with 32-bit offsets: at most 2G."""
    conf = tmp_path / "t.conf"
    conf.write_text("[journal]\nsegment_size = %s\n" % value)
    rc, out, err = run_ternd(["-c", str(conf), "--dump-config"], cwd=tmp_path)
    if ok:
        assert rc == 0 and ("segment_size = %s\n" % value).encode() in out, err
    else:
        assert rc == 1
        assert b"segment_size must be between 64K and 2G (got '%s')" % value.encode() in err
