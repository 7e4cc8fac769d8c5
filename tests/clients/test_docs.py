"""
The client examples in README.md and docs/CLIENTS.md are run as written.
Every fenced code block in a language below that is followed by a line
"Prints:" and a ```text block is one example: it runs against a fresh ternd
(the documented port 22133 replaced by the test server's) and must print
exactly that text.  The Go example is built with the command CLIENTS.md
gives; the npm install line there names the versions tested.
"""
import os
import re
import subprocess

import pytest

from clientmatrix import HERE, REPO, TIMEOUT

DOCS = ["README.md", "docs/CLIENTS.md"]
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```\n\s*Prints:\s*\n```text\n(.*?)^```", re.M | re.S)
RUN = {
    "python": ("example.py", ["/usr/bin/python3", "example.py"]),
    "php": ("example.php", ["php", "example.php"]),
    "perl": ("example.pl", ["perl", "example.pl"]),
    "ruby": ("example.rb", ["ruby", "example.rb"]),
    "js": ("example.js", ["node", "example.js"]),
    "go": ("example.go", None),  # built as docs/CLIENTS.md says (go_build_line)
    "sh": ("example.sh", ["sh", "example.sh"]),
}


def examples():
    out = []
    for doc in DOCS:
        with open(os.path.join(REPO, doc)) as f:
            text = f.read()
        for m in BLOCK.finditer(text):
            lang, code, want = m.groups()
            line = text.count("\n", 0, m.start()) + 1
            out.append(pytest.param(lang, code, want, id="%s:%d:%s" % (doc, line, lang)))
    return out


def clients_md():
    with open(os.path.join(REPO, "docs", "CLIENTS.md")) as f:
        return f.read()


def go_build_line():
    """The command docs/CLIENTS.md gives for building the Go example."""
    m = re.search(r"^```\n(GO111MODULE=off GOPATH=\S+ go build -o example example\.go)\n"
                  r"\./example\n```", clients_md(), re.M)
    assert m, "docs/CLIENTS.md does not say how to build the Go example"
    return m.group(1)


def test_node_install_line_matches_the_tested_versions():
    """docs/CLIENTS.md's npm install names the versions package.json pins
    (those `npm ci` installs for these tests)."""
    import json
    m = re.search(r"^```\nnpm install (\S+ \S+) +#.*\nnode example\.js\n```", clients_md(),
                  re.M)
    assert m, "docs/CLIENTS.md does not say how to install the node clients"
    with open(os.path.join(HERE, "package.json")) as f:
        deps = json.load(f)["dependencies"]
    assert sorted(m.group(1).split()) == sorted("%s@%s" % kv for kv in deps.items())


def test_docs_have_examples():
    langs = {p.values[0] for p in examples()}
    assert {"python", "php", "perl", "ruby", "js", "go", "sh"} <= langs, langs


@pytest.mark.parametrize("lang,code,want", examples())
def test_doc_example(lang, code, want, server, tmp_path):
    assert lang in RUN, "no runner for ```%s examples" % lang
    name, argv = RUN[lang]
    (tmp_path / name).write_text(code.replace("22133", str(server.port)))
    env = dict(os.environ, NODE_PATH=os.path.join(HERE, "node_modules"),
               GOCACHE=str(tmp_path / "gocache"), GOPROXY="off", GOFLAGS="")
    if lang == "go":
        # built with the command the page gives (it sets GO111MODULE and
        # GOPATH itself), then run
        for k in ("GO111MODULE", "GOPATH"):
            env.pop(k, None)
        b = subprocess.run(["sh", "-c", go_build_line()], cwd=tmp_path, env=env,
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=TIMEOUT * 15)
        assert b.returncode == 0, b.stdout.decode(errors="replace")
        argv = ["./example"]
    p = subprocess.run(argv, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT * 3)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    assert p.stdout.decode() == want
