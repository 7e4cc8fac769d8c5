"""
pcfs.py: drives pcfs, the file system that can lose power (pcfs.c; the
model is in README.md).  Used by the power-cut tests and tools/powercut.

    fs = Pcfs(backing, mountpoint, rule="posix", tear=0.0, seed=1)
    fs.mount()
    ... work under fs.mnt ...
    fs.cut()           # the backing directory is now what the cut left
    fs.unmount()

Every wait is bounded; the daemon is ended by its PID.
"""
import os
import shutil
import signal
import subprocess
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CTL = ".powercut"


def pcfs_path():
    p = os.environ.get("TERN_PCFS", "build/pcfs")
    return p if os.path.isabs(p) else os.path.join(REPO, p)


def mounted(path):
    """Whether path is a mount point (from the mount table: a stat of a
    mount whose file system has lost power fails)."""
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 4 and fields[4].encode().decode("unicode_escape") == path:
                return True
    return False


def fuse_missing():
    """Why the power-cut tests cannot run here (no /dev/fuse), or None.
    Anything else missing (pcfs not built, no fusermount3) fails them."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is absent: the power-cut file system needs FUSE"
    return None


class Status:
    """What reading the control file tells: state, cut time, counts, the
    most recent operations (op, t in s on the monotonic clock, zeros,
    path), and each file's first and last two fsyncs (path: (first, prev,
    last), prev 0 when there was one)."""

    def __init__(self, text):
        lines = text.splitlines()
        self.state = lines[0] if lines else "gone"
        self.cut_at = None
        self.failed = 0
        self.counts = {}
        self.recent = []
        self.synced = {}    # path: (time of its first fsync, of the one before the last, of the last)
        for line in lines[1:]:
            parts = line.split(" ", 4)
            if parts[0] == "cut_at":
                ns = int(parts[1])
                self.cut_at = ns / 1e9 if ns else None
            elif parts[0] == "failed":
                self.failed = int(parts[1])
            elif parts[0] == "recent" and len(parts) == 5:
                self.recent.append((parts[1], int(parts[2]) / 1e9, parts[3] == "1", parts[4]))
            elif parts[0] == "synced" and len(parts) == 5:
                self.synced[parts[4]] = tuple(int(x) / 1e9 for x in parts[1:4])
            elif len(parts) == 2:
                self.counts[parts[0]] = int(parts[1])


class Pcfs:
    def __init__(self, backing, mnt, rule="posix", tear=0.0, seed=1, log=None):
        self.backing, self.mnt = backing, mnt
        self.rule, self.tear, self.seed = rule, tear, seed
        self.log = log or (backing.rstrip("/") + ".pcfs.log")
        self.state = backing.rstrip("/") + ".pcfs"
        self.proc = None

    def mount(self, timeout=20):
        os.makedirs(self.backing, exist_ok=True)
        os.makedirs(self.mnt, exist_ok=True)
        if not os.path.exists(pcfs_path()):
            raise RuntimeError("%s is not built (make; libfuse3-dev)" % pcfs_path())
        if not shutil.which("fusermount3"):
            raise RuntimeError("fusermount3 is missing (Debian package fuse3)")
        if os.path.exists(self.state):
            shutil.rmtree(self.state)
        err = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [pcfs_path(), "--rule=%s" % self.rule, "--tear=%g" % self.tear,
             "--seed=%d" % self.seed, "--state=%s" % self.state,
             self.backing, self.mnt, "-f", "-o", "auto_unmount"],
            stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        err.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("pcfs exited: %s" % self.tail())
            if mounted(self.mnt) and os.path.exists(os.path.join(self.mnt, CTL)):
                return
            time.sleep(0.01)
        raise RuntimeError("pcfs did not mount: %s" % self.tail())

    def tail(self):
        try:
            with open(self.log, "rb") as f:
                return f.read()[-2000:].decode(errors="replace")
        except OSError:
            return ""

    def ctl(self, cmd):
        with open(os.path.join(self.mnt, CTL), "w") as f:
            f.write(cmd + "\n")

    def status(self):
        with open(os.path.join(self.mnt, CTL)) as f:
            return Status(f.read())

    def cut(self):
        self.ctl("cut")

    def wait_cut(self, timeout):
        """Waits for an armed cut (True once it came)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.status().state == "cut":
                return True
            time.sleep(0.002)
        return False

    def unmount(self, timeout=20):
        if self.proc is None:
            return
        deadline = time.monotonic() + timeout
        while mounted(self.mnt) and time.monotonic() < deadline:
            r = subprocess.run(["fusermount3", "-u", self.mnt],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if r.returncode == 0:
                break
            time.sleep(0.05)
        if mounted(self.mnt):
            subprocess.run(["fusermount3", "-u", "-z", self.mnt],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self.proc.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None
