"""
The power-cut file system's own tests: it keeps exactly what was made
durable (README.md, "The model"), under the portable rule and Linux's, and
tears unsynced writes only a page at a time.  Each test mounts pcfs on a
fresh backing directory, works through the mount, cuts the power and looks
at what the backing directory holds.
"""
import fcntl
import mmap
import os
import time

import pytest

from pcfs import Pcfs, fuse_missing

PAGE = 4096

pytestmark = pytest.mark.skipif(fuse_missing() is not None, reason=str(fuse_missing()))


@pytest.fixture
def mount(tmp_path):
    made = []

    def make(rule="posix", tear=0.0, seed=1):
        n = len(made)
        fs = Pcfs(str(tmp_path / ("b%d" % n)), str(tmp_path / ("m%d" % n)), rule, tear, seed)
        fs.mount()
        made.append(fs)
        return fs

    yield make
    for fs in made:
        fs.unmount()


def write_file(path, data, sync=True):
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.pwrite(fd, data, 0)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def sync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def cut(fs):
    fs.cut()
    assert fs.status().state == "cut"
    fs.unmount()
    return fs.backing


def read(path):
    with open(path, "rb") as f:
        return f.read()


def test_synced_version_survives_unsynced_one(mount):
    fs = mount()
    p = os.path.join(fs.mnt, "f")
    write_file(p, b"first version")
    sync_dir(fs.mnt)
    write_file(p, b"SECOND", sync=False)
    assert read(p) == b"SECONDversion"  # what the program sees
    b = cut(fs)
    assert read(os.path.join(b, "f")) == b"first version"


def test_fdatasync_and_dsync_writes_are_durable(mount):
    fs = mount()
    p = os.path.join(fs.mnt, "f")
    write_file(p, b"a" * 10)
    sync_dir(fs.mnt)
    fd = os.open(p, os.O_RDWR)
    os.pwrite(fd, b"b" * 10, 0)
    os.fdatasync(fd)
    os.pwritev(fd, [b"c" * 5], 10, os.RWF_DSYNC)  # RWF_DSYNC: durable on return
    os.close(fd)
    fd = os.open(p, os.O_WRONLY | os.O_DSYNC)
    os.pwrite(fd, b"e", 0)                          # O_DSYNC: durable on return
    os.close(fd)
    fd = os.open(p, os.O_WRONLY)
    os.pwrite(fd, b"d" * 5, 15)                     # not synced
    os.close(fd)
    b = cut(fs)
    assert read(os.path.join(b, "f")) == b"e" + b"b" * 9 + b"c" * 5


def test_size_changes_need_a_sync(mount):
    fs = mount()
    for name in ("trunc", "falloc", "grow", "synced"):
        write_file(os.path.join(fs.mnt, name), b"x" * 3 * PAGE)
    sync_dir(fs.mnt)
    fd = os.open(os.path.join(fs.mnt, "trunc"), os.O_RDWR)
    os.ftruncate(fd, 100)
    os.close(fd)
    fd = os.open(os.path.join(fs.mnt, "falloc"), os.O_RDWR)
    os.posix_fallocate(fd, 0, 8 * PAGE)
    os.close(fd)
    fd = os.open(os.path.join(fs.mnt, "grow"), os.O_RDWR)
    os.pwrite(fd, b"y" * PAGE, 3 * PAGE)
    os.close(fd)
    fd = os.open(os.path.join(fs.mnt, "synced"), os.O_RDWR)
    os.ftruncate(fd, 100)
    os.posix_fallocate(fd, 0, 2 * PAGE)
    os.fsync(fd)
    os.close(fd)
    b = cut(fs)
    for name in ("trunc", "falloc", "grow"):
        assert read(os.path.join(b, name)) == b"x" * 3 * PAGE, name
    assert read(os.path.join(b, "synced")) == b"x" * 100 + bytes(2 * PAGE - 100)


def test_names_need_their_directory_synced(mount):
    fs = mount()
    m = fs.mnt
    os.mkdir(os.path.join(m, "d"))
    write_file(os.path.join(m, "d", "old"), b"old")
    write_file(os.path.join(m, "gone"), b"gone")
    write_file(os.path.join(m, "moved"), b"moved")
    sync_dir(os.path.join(m, "d"))
    sync_dir(m)
    # after the last directory syncs: none of these is durable
    write_file(os.path.join(m, "d", "new"), b"new")        # file synced, directory not
    os.rename(os.path.join(m, "moved"), os.path.join(m, "renamed"))
    os.unlink(os.path.join(m, "gone"))
    os.mkdir(os.path.join(m, "newdir"))
    os.unlink(os.path.join(m, "d", "old"))
    b = cut(fs)
    assert sorted(os.listdir(b)) == ["d", "gone", "moved"]
    assert sorted(os.listdir(os.path.join(b, "d"))) == ["old"]
    assert read(os.path.join(b, "gone")) == b"gone"
    assert read(os.path.join(b, "moved")) == b"moved"


def test_synced_directory_keeps_its_names(mount):
    fs = mount()
    m = fs.mnt
    os.mkdir(os.path.join(m, "d"))
    sync_dir(m)
    write_file(os.path.join(m, "d", "a"), b"a")
    write_file(os.path.join(m, "d", "b"), b"b")
    sync_dir(os.path.join(m, "d"))
    os.rename(os.path.join(m, "d", "a"), os.path.join(m, "d", "c"))
    os.unlink(os.path.join(m, "d", "b"))
    sync_dir(os.path.join(m, "d"))
    b = cut(fs)
    assert os.listdir(os.path.join(b, "d")) == ["c"]
    assert read(os.path.join(b, "d", "c")) == b"a"


def test_a_removed_directory_comes_back_unless_its_parent_is_synced(mount):
    fs = mount()
    m = fs.mnt
    for d in ("keep", "drop"):
        os.mkdir(os.path.join(m, d))
        write_file(os.path.join(m, d, "f"), d.encode())
        sync_dir(os.path.join(m, d))
    sync_dir(m)
    for d in ("keep", "drop"):
        os.unlink(os.path.join(m, d, "f"))
        os.rmdir(os.path.join(m, d))
    write_file(os.path.join(m, "other"), b"x")
    sync_dir(m)  # makes both removals durable
    os.mkdir(os.path.join(m, "keep"))
    b = cut(fs)
    assert sorted(os.listdir(b)) == ["other"]


def test_linux_rule_commits_every_name_at_any_sync(mount):
    fs = mount(rule="linux")
    m = fs.mnt
    os.mkdir(os.path.join(m, "d"))
    write_file(os.path.join(m, "d", "f"), b"f", sync=False)
    write_file(os.path.join(m, "moved"), b"moved", sync=False)
    os.rename(os.path.join(m, "moved"), os.path.join(m, "renamed"))
    fd = os.open(os.path.join(m, "d", "f"), os.O_RDWR)
    os.ftruncate(fd, 3 * PAGE)
    os.close(fd)
    write_file(os.path.join(m, "synced"), b"s")  # one fsync of one file
    write_file(os.path.join(m, "later"), b"l", sync=False)
    b = cut(fs)
    assert sorted(os.listdir(b)) == ["d", "renamed", "synced"]
    assert os.listdir(os.path.join(b, "d")) == ["f"]
    # the size change is committed with the names, the data is not
    assert read(os.path.join(b, "d", "f")) == bytes(3 * PAGE)
    assert read(os.path.join(b, "renamed")) == b""
    assert read(os.path.join(b, "synced")) == b"s"


def test_torn_writes_keep_whole_pages_in_any_order(mount):
    old = b"".join(bytes([0x41 + i]) * PAGE for i in range(8))
    new = b"".join(bytes([0x61 + i]) * PAGE for i in range(8))
    mixes = set()
    for seed in range(1, 13):
        fs = mount(tear=0.5, seed=seed)
        p = os.path.join(fs.mnt, "f")
        write_file(p, old)
        sync_dir(fs.mnt)
        write_file(p, new, sync=False)
        data = read(os.path.join(cut(fs), "f"))
        assert len(data) == len(old)
        pages = []
        for i in range(8):
            page = data[i * PAGE:(i + 1) * PAGE]
            assert page in (old[i * PAGE:(i + 1) * PAGE], new[i * PAGE:(i + 1) * PAGE]), i
            pages.append(page == new[i * PAGE:(i + 1) * PAGE])
        mixes.add(tuple(pages))
    # some cuts kept a later page of the write and lost an earlier one
    assert any(any(not m[i] and m[j] for i in range(8) for j in range(i + 1, 8)) for m in mixes)
    assert len(mixes) > 4


def test_tear_all_keeps_everything_and_none_keeps_nothing(mount):
    for tear, expect in ((1.0, b"new!"), (0.0, b"old")):
        fs = mount(tear=tear)
        write_file(os.path.join(fs.mnt, "f"), b"old")
        sync_dir(fs.mnt)
        write_file(os.path.join(fs.mnt, "f"), b"new!", sync=False)
        write_file(os.path.join(fs.mnt, "g"), b"g", sync=False)
        b = cut(fs)
        assert read(os.path.join(b, "f")) == expect
        assert os.path.exists(os.path.join(b, "g")) == (tear == 1.0)


def test_a_failed_fsync_loses_its_pages_for_good(mount):
    fs = mount()
    p = os.path.join(fs.mnt, "f")
    write_file(p, b"a" * 2 * PAGE)
    sync_dir(fs.mnt)
    fd = os.open(p, os.O_RDWR)
    os.pwrite(fd, b"bb", 0)
    fs.ctl("fail fsync 0 1 5")
    with pytest.raises(OSError) as e:
        os.fsync(fd)
    assert e.value.errno == 5
    os.pwrite(fd, b"c", PAGE)
    os.fsync(fd)  # works, and does not write the page the failed one dropped
    os.close(fd)
    assert fs.status().failed == 1
    b = cut(fs)
    assert read(os.path.join(b, "f")) == b"a" * PAGE + b"c" + b"a" * (PAGE - 1)


def test_faults_fail_writes_with_the_errno_asked(mount):
    fs = mount()
    p = os.path.join(fs.mnt, "f")
    fs.ctl("fail write 1 -1 28 /f")  # the second write on, ENOSPC
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    os.pwrite(fd, b"one", 0)
    for _ in range(3):
        with pytest.raises(OSError) as e:
            os.pwrite(fd, b"two", 3)
        assert e.value.errno == 28
    os.close(fd)
    fs.ctl("disarm")
    write_file(os.path.join(fs.mnt, "g"), b"ok")


def test_armed_cut_comes_at_the_nth_operation(mount):
    fs = mount()
    m = fs.mnt
    for i in range(3):
        write_file(os.path.join(m, "f%d" % i), b"%d" % i)
    sync_dir(m)
    fs.ctl("arm after rename 2 f")
    os.rename(os.path.join(m, "f0"), os.path.join(m, "g0"))
    sync_dir(m)
    os.rename(os.path.join(m, "f1"), os.path.join(m, "g1"))  # the cut comes after this one
    st = fs.status()
    assert st.state == "cut" and st.counts["rename"] == 2
    assert st.recent[-1][0] == "rename" and st.recent[-1][3] == "/f1>/g1"
    with pytest.raises(OSError) as e:
        os.rename(os.path.join(m, "f2"), os.path.join(m, "g2"))
    assert e.value.errno == 5
    fs.unmount()
    assert sorted(os.listdir(fs.backing)) == ["f1", "f2", "g0"]


def test_shared_mapping_is_durable_only_once_synced(mount):
    fs = mount()
    p = os.path.join(fs.mnt, "f")
    write_file(p, bytes(2 * PAGE))
    sync_dir(fs.mnt)
    fd = os.open(p, os.O_RDWR)
    m = mmap.mmap(fd, 2 * PAGE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    m[0:5] = b"hello"
    m.flush()                 # msync(MS_SYNC): written back and synced
    m[PAGE:PAGE + 5] = b"later"
    m.close()
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # locks work (the kernel's)
    os.close(fd)              # written back at the close, never synced
    assert read(p)[PAGE:PAGE + 5] == b"later"
    b = cut(fs)
    data = read(os.path.join(b, "f"))
    assert data[:5] == b"hello" and data[PAGE:PAGE + 5] == bytes(5)


def test_status_gives_each_files_first_and_last_two_syncs(mount):
    fs = mount()
    a, b = os.path.join(fs.mnt, "a"), os.path.join(fs.mnt, "b")
    t0 = time.monotonic()
    write_file(a, b"1")
    t1 = time.monotonic()
    write_file(a, b"2")
    write_file(b, b"3")
    write_file(b, b"4", sync=False)
    t2 = time.monotonic()
    st = fs.status()
    first, prev, last = st.synced["/a"]
    assert t0 <= first == prev <= t1 <= last <= t2
    first, prev, last = st.synced["/b"]
    assert prev == 0 and t1 <= first == last <= t2
    assert set(st.synced) == {"/a", "/b"}
