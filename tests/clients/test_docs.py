"""
The client examples in README.md and docs/CLIENTS.md are run as written.
Every fenced code block in a language below that is followed by a line
"Prints:" and a ```text block is one example: it runs against a fresh ternd
(the documented port 22133 replaced by the test server's) and must print
exactly that text.
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
    "go": ("example.go", ["go", "run", "example.go"]),
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


def test_docs_have_examples():
    langs = {p.values[0] for p in examples()}
    assert {"python", "php", "perl", "ruby", "js", "go", "sh"} <= langs, langs


@pytest.mark.parametrize("lang,code,want", examples())
def test_doc_example(lang, code, want, server, tmp_path):
    assert lang in RUN, "no runner for ```%s examples" % lang
    name, argv = RUN[lang]
    (tmp_path / name).write_text(code.replace("22133", str(server.port)))
    env = dict(os.environ, NODE_PATH=os.path.join(HERE, "node_modules"),
               GO111MODULE="off", GOPATH="/usr/share/gocode", GOCACHE=str(tmp_path / "gocache"),
               GOPROXY="off", GOFLAGS="")
    p = subprocess.run(argv, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT * 3)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    assert p.stdout.decode() == want
