"""
The man pages (docs/man/*.scd, built by make into build/man/): each renders
with `man -l` without warnings; the options each program's --help prints
are exactly those its page's OPTIONS section describes; the keys config.c
accepts are exactly those ternd.conf(5) describes, and each is explained in
the sample conf/ternd.conf.
"""
import os
import re

import pytest

from opsutil import REPO, run, tool
from test_config import accepted_keys, config_keys

MAN = os.path.join(REPO, "build", "man")
PAGES = ["ternd.8", "ternd.conf.5", "tern-load.1", "tern-journal.1", "ternctl.1"]
OPT_RE = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def render(page):
    path = os.path.join(MAN, page)
    if not os.path.exists(path):
        pytest.fail("%s not built (make builds build/man/)" % path)
    r = run(["man", "--warnings", "-l", path], env=dict(os.environ, MANWIDTH="100",
                                                       MAN_KEEP_FORMATTING="0"))
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", r.stderr
    return re.sub(r".\x08", "", r.stdout)  # no overstrike, whatever the pager


def section(text, name):
    """The lines of a top-level section (headings are unindented)."""
    m = re.search(r"^%s\n(.*?)(?=^\S|\Z)" % re.escape(name), text, re.M | re.S)
    assert m, "no %s section" % name
    return m.group(1)


@pytest.mark.parametrize("page", PAGES)
def test_renders(page):
    text = render(page)
    name = page.rsplit(".", 1)[0]
    assert re.match(r"^%s\(%s\)" % (re.escape(name), page.rsplit(".", 1)[1]), text), text[:200]
    assert re.search(r"^NAME\n\s+%s - \S" % re.escape(name), text, re.M), text[:400]
    for s in ("SYNOPSIS", "DESCRIPTION", "SEE ALSO"):
        section(text, s)


def help_text(binary):
    r = run([binary, "--help"])
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("page,binary", [
    ("ternd.8", ("TERND", "build/ternd")),
    ("tern-load.1", ("TERN_LOAD", "build/tern-load")),
    ("tern-journal.1", ("TERN_JOURNAL", "build/tern-journal")),
])
def test_options_match_help(page, binary):
    in_help = set(OPT_RE.findall(help_text(tool(*binary))))
    in_man = set(OPT_RE.findall(section(render(page), "OPTIONS")))
    assert in_help, "no options found in --help"
    assert in_help - in_man == set(), "in --help, not in %s" % page
    assert in_man - in_help == set(), "in %s OPTIONS, not in --help" % page


def test_ternctl_options_and_verbs_match_help():
    """ternctl's options (its own --help and every verb's) are those of
    ternctl(1)'s OPTIONS, and its verbs those of VERBS."""
    ternctl = tool("TERNCTL", "build/ternctl")
    text = help_text(ternctl)
    verbs = re.findall(r"^    ([a-z][a-z-]+) ", text.split("positional arguments:")[1], re.M)
    assert "queues" in verbs and "watch" in verbs, text
    in_help = set(OPT_RE.findall(text))
    for v in verbs:
        in_help |= set(OPT_RE.findall(help_text_args([ternctl, v, "--help"])))
    page = render("ternctl.1")
    in_man = set(OPT_RE.findall(section(page, "OPTIONS")))
    assert in_help - in_man == set(), "in --help, not in ternctl(1)"
    assert in_man - in_help == set(), "in ternctl(1) OPTIONS, not in --help"
    documented = re.findall(r"^ {7}([a-z][a-z-]+)(?: |$)", section(page, "VERBS"), re.M)
    assert sorted(documented) == sorted(verbs)


def help_text_args(cmd):
    r = run(cmd)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_config_keys_documented():
    keys = accepted_keys()
    with open(os.path.join(REPO, "docs", "man", "ternd.conf.5.scd")) as f:
        documented = set(re.findall(r"^\*(\w+)\* = ", f.read(), re.M))
    assert keys - documented == set(), "accepted by config.c, not in ternd.conf(5)"
    assert documented - keys == set(), "in ternd.conf(5), not accepted by config.c"
    text = render("ternd.conf.5")
    for k in keys:
        assert re.search(r"^\s+%s = " % k, text, re.M), k
    with open(os.path.join(REPO, "conf", "ternd.conf")) as f:
        sample = set(re.findall(r"^#? ?(\w+) = ", f.read(), re.M))
    assert keys - sample == set(), "not in conf/ternd.conf"
    assert sample - keys == set(), "in conf/ternd.conf, not accepted by config.c"


def man_keys():
    """ternd.conf(5)'s key entries: {(section, key): text}, the text with
    its blanks folded (a queue key documented under [journal] is there)."""
    with open(os.path.join(REPO, "docs", "man", "ternd.conf.5.scd")) as f:
        src = f.read()
    out, section = {}, None
    for m in re.finditer(r"^# \[(\w+)\]|^\*(\w+)\* = (.*?)(?=^\*\w+\* = |^# |\Z)", src,
                         re.M | re.S):
        if m.group(1):
            section = m.group(1)
        else:
            out[(section, m.group(2))] = re.sub(r"\s+", " ", m.group(3))
    return out


def test_config_table_matches_ternd_conf5():
    """Each key of config.c's table is in its section of ternd.conf(5) (a
    queue key that [journal] takes may be under [journal]) with the table's
    default; the [queues] key a [server] key defaults says so instead."""
    documented = man_keys()
    defaulted = {key for _, key, flags, _ in config_keys() if "K_QUEUES" in flags}
    for section, key, flags, dflt in config_keys():
        text = documented.get((section, key))
        if text is None and "J" in flags:
            text = documented.get(("journal", key))
        assert text is not None, "[%s] %s is not in ternd.conf(5)" % (section, key)
        if section == "queues" and key in defaulted:
            assert "Default: [server] *%s*" % key in text, (section, key, text)
        elif dflt:
            assert "Default %s" % dflt in text, (section, key, dflt, text)


def test_reload_keys_match_ternd_conf5():
    """ternd.conf(5)'s Reload paragraph names exactly the [server] keys
    config.c's table lets a reload apply."""
    with open(os.path.join(REPO, "docs", "man", "ternd.conf.5.scd")) as f:
        src = f.read()
    m = re.search(r"^\*Reload\* .*? of \[server\],(.*?), then ", src, re.M | re.S)
    assert m, "no Reload paragraph"
    named = set(re.findall(r"\*(\w+)\*", m.group(1)))
    table = {key for section, key, flags, _ in config_keys() if section == "server" and "R" in flags}
    assert named == table, (named - table, table - named)


def test_every_stat_is_in_ternd8(ternd):
    """Each name a live `stats` answers (general counters, and every
    per-queue counter of a queue named q) is in ternd(8)'s stats item."""
    srv = ternd()
    with srv.conn() as c:
        c.send(b"set q 0 0 1\r\nx\r\n")
        c.expect(b"STORED\r\n")
        names = set(c.stats())
    text = render("ternd.8")
    m = re.search(r"^\s+stats, stats q, .*?\n(.*?)\n\n", text, re.M | re.S)
    assert m, "no stats item in ternd(8)"
    item = re.sub(r"\u2010\n\s*|-\n\s*", "", m.group(1))  # hyphenated line ends
    documented = set(re.findall(r"[a-z][a-z0-9_]*", item))
    general = {n for n in names if not n.startswith("queue_q_")}
    per_queue = {n[len("queue_q_"):] for n in names if n.startswith("queue_q_")}
    assert per_queue, names
    assert general - documented == set(), "general stats missing from ternd(8)"
    assert per_queue - documented == set(), "per-queue counters missing from ternd(8)"
