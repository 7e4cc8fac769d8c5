"""
The links of tern's documentation where it is installed (make install's
DOCDIR, the Debian package's /usr/share/doc/ternd): the README and the
pages in docs/ link to one another, to images and to conf/ by relative
paths, which must all lead to installed files.
"""
import os
import re

LINK_RE = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def check_doc_links(docdir):
    """Asserts that every relative link of DOCDIR/README.md and
    DOCDIR/docs/*.md names an installed file; returns how many it checked."""
    pages = [os.path.join(docdir, "README.md")] + [
        os.path.join(docdir, "docs", f) for f in sorted(os.listdir(os.path.join(docdir, "docs")))
        if f.endswith(".md")]
    checked = 0
    for page in pages:
        with open(page) as f:
            text = f.read()
        for target in LINK_RE.findall(text):
            if re.match(r"^[a-z]+:", target):
                continue
            path = os.path.normpath(os.path.join(os.path.dirname(page), target))
            assert os.path.isfile(path), "%s links to %s, which is not installed" % (page, target)
            checked += 1
    return checked
