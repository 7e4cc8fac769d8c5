"""
ternd's heap under large messages (lib/tern.h, tern_heap_keep): memory a
backlog of large messages freed is reused by the next one instead of being
taken from the kernel afresh (a page fault each 4 KiB), and it goes back
to the kernel once the server is idle (server.h, SERVER_HEAP_IDLE_MS).
Counts page faults and resident memory from /proc, never time.
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from e2eshared import e2e  # noqa: E402 (tests/ on the path first)

rss_kib = e2e.rss_kib
# 400 messages of 256 KiB: a 100 MiB backlog, past the default 64 MiB a
# queue keeps in memory, so the queue fills its memory, reads the rest
# back from the journal and frees everything as it is consumed.
ARGS = ("-q", 1, "-n", 400, "-s", 262144, "-P", 2, "--mode", "sequential", "--json")
PAGES_PER_MSG = 262144 // 4096


def minflt(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def backlog(load, port, pid):
    before = minflt(pid)
    r = load("-p", port, *ARGS, "--prefix", "heap_")
    assert r.rc == 0 and r.json["total_errors"] == 0, r
    return minflt(pid) - before


def test_large_backlog_reuses_freed_memory_then_returns_it_when_idle(load, ternd_proc):
    proc, port = ternd_proc
    first = backlog(load, port, proc.pid)
    second = backlog(load, port, proc.pid)
    msgs = 2 * 400
    # the first backlog faults its memory in: a page fault per 4 KiB
    # (fewer with transparent huge pages); the second reuses that memory.
    assert second / msgs < 2, (first, second)
    peak = rss_kib(proc.pid)
    assert peak > 40 * 1024, peak  # the kept memory is resident
    # idle: given back after SERVER_HEAP_IDLE_MS (5 s); bounded wait
    deadline = time.monotonic() + 15
    while rss_kib(proc.pid) > peak / 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert rss_kib(proc.pid) <= peak / 2, (peak, rss_kib(proc.pid))
