"""
tools/call-graph on small compiled fixtures: it passes a folder whose
calls run one way, and fails, naming the circle and the symbols behind
each step, when a file calls a file that calls it back (through a call or
through a global variable).
"""
import os
import subprocess

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
TOOL = os.path.join(ROOT, "tools", "call-graph")


def build(tmp_path, folder, files):
    """Compiles files ({name.c: source}) into tmp_path/obj/folder/*.o."""
    src = tmp_path / "src" / folder
    obj = tmp_path / "obj" / folder
    src.mkdir(parents=True)
    obj.mkdir(parents=True)
    for name, text in files.items():
        (src / name).write_text(text)
        subprocess.run(["cc", "-c", "-O0", "-o", str(obj / (name[:-2] + ".o")), str(src / name)],
                       check=True)
    return str(tmp_path / "obj")


def check(objroot, *args):
    return subprocess.run([TOOL, "--obj", objroot] + list(args), capture_output=True,
                          text=True, timeout=60)


ONE_WAY = {
    "top.c": "int mid(void); int top(void) { return mid() + 1; }\n",
    "mid.c": "int low(void); extern int level; int mid(void) { return low() + level; }\n",
    "low.c": "int level = 2; int low(void) { return 1; }\n",
}


def test_one_way_passes(tmp_path):
    r = check(build(tmp_path, "fix", ONE_WAY), "-v", "fix")
    assert r.returncode == 0, r
    assert "fix/top.c -> mid.c: mid\n" in r.stdout
    assert "fix/mid.c -> low.c: level low\n" in r.stdout
    assert "call-graph: fix/: 3 files, 2 arrows, every call runs one way\n" in r.stdout


def test_circle_of_three_fails(tmp_path):
    files = dict(ONE_WAY)
    files["low.c"] = "int top(void); int level = 2; int low(void) { return top(); }\n"
    r = check(build(tmp_path, "fix", files), "fix")
    assert r.returncode == 1, r
    assert r.stdout == ("call-graph: fix/ has a circle of 3: low.c -> top.c -> mid.c -> low.c\n"
                        "  low.c -> top.c: top\n"
                        "  top.c -> mid.c: mid\n"
                        "  mid.c -> low.c: level low\n"), r.stdout


def test_circle_through_a_variable_fails(tmp_path):
    files = {
        "a.c": "int b(void); int a_count; int a(void) { return b(); }\n",
        "b.c": "extern int a_count; int b(void) { return a_count; }\n",
        "c.c": "int a(void); int c(void) { return a(); }\n",
    }
    r = check(build(tmp_path, "fix", files), "fix")
    assert r.returncode == 1, r
    assert "call-graph: fix/ has a circle of 2: a.c -> b.c -> a.c\n" in r.stdout
    assert "  b.c -> a.c: a_count\n" in r.stdout
    assert "c.c" not in r.stdout  # it calls into the circle but is not in it


def test_missing_objects(tmp_path):
    r = check(str(tmp_path / "nothing"), "fix")
    assert r.returncode == 2 and "run make first" in r.stdout, r
