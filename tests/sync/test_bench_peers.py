"""tools/bench-peers: how N per queue is chosen from probe runs, the
run-by-run CPU ratio, the order of the servers in each round, the
workloads run only when named and chosen by name or code, and a run split
into its sets and gets (--phases).

The probe logic runs against a fake tern-load (no server, no timing): each
call reports the durations a real probe of that size might take, and the
test checks which probes were made and the N chosen.
"""
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]


def load_bench_peers():
    sys.dont_write_bytecode = True  # no __pycache__ next to the tool
    loader = importlib.machinery.SourceFileLoader("bench_peers",
                                                  str(ROOT / "tools" / "bench-peers"))
    spec = importlib.util.spec_from_loader("bench_peers", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


bp = load_bench_peers()


def cfg(**kw):
    c = SimpleNamespace(seconds=1.5, probe_n=1000, n_min=200, n_max=2000000)
    c.__dict__.update(kw)
    return c


class FakeLoad:
    """Answers probe runs: messages per queue -> (write_s, read_s)."""

    def __init__(self, secs, err=None):
        self.secs, self.err, self.calls = secs, err, []

    def __call__(self, cfg, spec, port, wl, n, prefix):
        self.calls.append((n, prefix))
        if self.err:
            return None, self.err
        w, r = self.secs(n)
        return {"n": n, "write_s": w, "read_s": r}, None


def test_choose_n_scales_to_the_run_length():
    probe = {"n": 1000, "write_s": 0.05, "read_s": 0.05}
    assert bp.choose_n(cfg(), bp.WL["w1"], probe) == 15000
    assert bp.choose_n(cfg(), bp.WL["w1"], probe, 0.3) == 3000
    # at least 10 messages per connection
    assert bp.choose_n(cfg(), bp.WL["w5"], {"n": 1000, "write_s": 5, "read_s": 5}) == 640


def test_a_probe_of_normal_length_is_enough():
    load = FakeLoad(lambda n: (n / 10000, n / 10000))  # 0.2 s for 1000
    n, err = bp.probe_n(cfg(), None, 1, bp.WL["w1"], "bp1w1_", load)
    assert err is None
    assert load.calls == [(1000, "bp1w1_p")]
    assert n == 7500


def test_a_short_probe_is_followed_by_a_longer_one():
    # 1000 messages over 64 connections: 0.06 s, mostly start-up (0.04 s);
    # the steady rate is 100k msg/s each way
    load = FakeLoad(lambda n: (0.02 + n / 100000, 0.02 + n / 100000))
    n, err = bp.probe_n(cfg(), None, 1, bp.WL["w5"], "bp1w5_", load)
    assert err is None
    # the second probe is sized for a fifth of a run (0.3 s) from the
    # first's rate: 1000 * 0.3 / 0.06
    assert load.calls == [(1000, "bp1w5_p"), (5000, "bp1w5_q")]
    # 5000 in 0.14 s: 1.5 s is ~54k (two significant digits); from the
    # first probe alone it would have been 25k
    assert n == 54000


def test_a_failed_probe_falls_back_to_probe_n():
    load = FakeLoad(None, err="tern-load exit 2: refused")
    n, err = bp.probe_n(cfg(), None, 1, bp.WL["w2"], "bp1w2_", load)
    assert (n, err) == (1000, "tern-load exit 2: refused")
    assert len(load.calls) == 1


def run_fig(n, w, r):
    return {"n": n, "write_s": w, "read_s": r}


def test_a_run_of_normal_length_keeps_n():
    assert bp.rechoose_n(cfg(), bp.WL["w4"], run_fig(15000, 0.7, 0.8)) == 15000
    assert bp.rechoose_n(cfg(), bp.WL["w4"], run_fig(15000, 0.3, 0.3)) == 15000
    assert bp.rechoose_n(cfg(), bp.WL["w4"], run_fig(15000, 2.0, 2.0)) == 15000


def test_a_much_shorter_or_longer_run_sets_n_again():
    # run 14: memcached w4's probe met a slow moment (N = 15000); at its
    # usual speed a run of 15000 lasted 0.18 s
    assert bp.rechoose_n(cfg(), bp.WL["w4"], run_fig(15000, 0.09, 0.09)) == 120000
    # and the other way: 20 s for a run meant to last 1.5 s
    assert bp.rechoose_n(cfg(), bp.WL["w1"], run_fig(30000, 10, 10)) == 2200


def test_proc_cpu_s_counts_every_thread_of_a_process():
    import os
    import threading
    import time

    def burn(until):
        while time.process_time() < until:
            pass

    pid = os.getpid()
    before = bp.proc_cpu_s(pid)
    # Two threads burn CPU: the process's figure includes both.
    t = threading.Thread(target=burn, args=(time.process_time() + 0.3,))
    t.start()
    burn(time.process_time() + 0.3)
    t.join()
    after = bp.proc_cpu_s(pid)
    assert before is not None and after is not None
    assert after - before >= 0.25, (before, after)
    assert bp.proc_cpu_s(2 ** 22 + 1) is None  # above pid_max: no such process


def test_proc_counts_sees_page_faults_and_sleeps():
    import mmap
    import os
    import time

    pid = os.getpid()
    before = bp.proc_counts(pid)
    # 8 MiB of fresh memory, one write per page: a fault each
    m = mmap.mmap(-1, 8 << 20)
    for off in range(0, 8 << 20, 4096):
        m[off] = 1
    for _ in range(20):
        time.sleep(0.002)  # each a voluntary context switch
    after = bp.proc_counts(pid)
    m.close()
    assert before is not None and after is not None
    assert after["minflt"] - before["minflt"] >= 1024, (before, after)
    assert after["vcsw"] - before["vcsw"] >= 20, (before, after)
    assert after["user_s"] + after["sys_s"] >= before["user_s"] + before["sys_s"]
    assert bp.proc_counts(2 ** 22 + 1) is None


def test_where_section_takes_the_cpu_figure_apart():
    c = bp.Cell()
    c.runs = [{"run": i + 1, "server_user_us_per_msg": u, "server_sys_us_per_msg": 2.0,
               "server_faults_per_msg": f, "server_sleeps_per_msg": 0.05}
              for i, (u, f) in enumerate([(0.5, 0.1), (0.7, 0.3), (0.6, 0.2)])]
    servers = [bp.SV["tern-interval"], bp.SV["memcached"]]
    cells = {("tern-interval", "w2"): c, ("memcached", "w2"): bp.Cell()}
    text = "\n".join(bp.where_section(cells, servers, [bp.WL["w2"]]))
    assert ("| 1 queue, pipelined 16 deep | 0.60 + 2.00 us, 0.200 faults, 0.050 sleeps | - |"
            in text)


def test_cpu_section_reports_medians_ratios_and_goals():
    def cell(us_list, w=100000.0, r=200000.0):
        c = bp.Cell()
        c.runs = [{"run": i + 1, "server_us_per_msg": u, "write_msg_s": w, "read_msg_s": r,
                   "write_mib_s": w / 2048, "read_mib_s": r / 2048}
                  for i, u in enumerate(us_list)]
        return c

    servers = [bp.SV["tern-interval"], bp.SV["tern-always"], bp.SV["memcached"]]
    workloads = [bp.WL["w2"], bp.WL["w5"]]
    cells = {("tern-interval", "w2"): cell([2.0, 3.0, 9.0]),      # median 3.0
             ("tern-always", "w2"): cell([4.0]),
             ("memcached", "w2"): cell([6.0, 6.0, 5.0]),          # median 6.0
             ("tern-interval", "w5"): cell([8.0]),
             ("tern-always", "w5"): cell([12.0]),                 # 1.5x interval
             ("memcached", "w5"): cell([4.0])}
    lines, goals = bp.cpu_section(SimpleNamespace(runs=3), cells, servers, workloads)
    text = "\n".join(lines)
    assert "| 1 queue, pipelined 16 deep | 3.00 us (100k / 200k) | 4.00 us" in text
    assert "| 1 queue, pipelined 16 deep | 2.00-9.00 |" in text
    assert "CPU 0.50x, 1.00x / 1.00x" in text  # tern interval / memcached on w2
    # run by run on w2: 2/6, 3/6, 9/5
    assert "| 1 queue, pipelined 16 deep | 0.50x (0.33x-1.80x), below in 2 of 3 |" in text
    # goals name the workload by what it is, never by its code
    assert all(" w2" not in g[0] and " w5" not in g[0] for g in goals)
    verdicts = {g[0].split("'s, ", 1)[1] + ":" + g[0].split(" ")[1]: g[2] for g in goals}
    assert verdicts == {"1 queue, pipelined 16 deep:interval": "met",
                        "64 connections, 1 in flight each:interval": "not met",
                        "64 connections, 1 in flight each:always": "not met"}
    assert goals[1][1] == "2.00x (8.00 vs 4.00 us); run by run 2.00x, below in 0 of 1"
    assert goals[2][1] == "1.50x"
    # medians level (3.00 against 3.05) while tern lost 2 of the 3 rounds:
    # not met
    cells = {("tern-interval", "w4"): cell([1.0, 3.0, 3.1]),
             ("memcached", "w4"): cell([9.0, 2.9, 3.05])}
    lines, goals = bp.cpu_section(SimpleNamespace(runs=3), cells,
                                  [bp.SV["tern-interval"], bp.SV["memcached"]], [bp.WL["w4"]])
    assert goals[0][1] == "0.98x (3.00 vs 3.05 us); run by run 1.02x, below in 1 of 3"
    assert goals[0][2] == "not met"


def test_paired_cpu_pairs_runs_of_one_round():
    def cell(pairs):
        c = bp.Cell()
        c.runs = [{"run": r, "server_us_per_msg": v} for r, v in pairs]
        return c

    # round 2 of a failed (missing), round 4 of b without a CPU figure:
    # only rounds 1 and 3 pair up
    cells = {("a", "w5"): cell([(1, 6.0), (3, 9.0), (4, 5.0)]),
             ("b", "w5"): cell([(1, 5.0), (2, 1.0), (3, 10.0), (4, None)])}
    med, lo, hi, below, n = bp.paired_cpu(cells, "a", "b", "w5")
    assert (lo, hi, below, n) == (0.9, 1.2, 1, 2)
    assert abs(med - 1.05) < 1e-9
    assert bp.paired_cpu(cells, "a", "b", "w4") is None
    assert bp.paired_cpu({("a", "w5"): cell([(1, 6.0)]), ("b", "w5"): cell([(2, 5.0)])},
                         "a", "b", "w5") is None


def test_tern_servers_share_n_in_the_cpu_table():
    ti, ta, mc = bp.SV["tern-interval"], bp.SV["tern-always"], bp.SV["memcached"]
    table = SimpleNamespace(cpu_table=True)
    assert bp.n_owner(table, ti) == bp.n_owner(table, ta) == "ternd"
    assert bp.n_owner(table, mc) == "memcached"
    # memcached with a key per message holds the backlog the tern servers hold
    assert bp.n_owner(table, bp.SV["memcached-keys"]) == "ternd"
    plain = SimpleNamespace(cpu_table=False)
    assert bp.n_owner(plain, ti) == "tern-interval"
    assert bp.n_owner(plain, ta) == "tern-always"


def test_memcached_keys_holds_the_backlog():
    mk = bp.SV["memcached-keys"]
    assert mk.kind == "memcached" and mk.verify and mk.load == ["--key-per-message"]
    assert "-m" in mk.argv(SimpleNamespace(), 11211, "/nonexistent")
    assert "memcached-keys" in bp.CPU_TABLE_SERVERS
    # not in the throughput runs, whose latency step reads in mixed mode
    assert "memcached-keys" not in bp.parse_args([]).servers.split(",")
    assert "memcached-keys" in bp.parse_args(["--cpu-table"]).servers.split(",")


def test_ratios_against_memcached_keys():
    def cell(us_list):
        c = bp.Cell()
        c.runs = [{"run": i + 1, "server_us_per_msg": u, "write_msg_s": 100e3,
                   "read_msg_s": 200e3} for i, u in enumerate(us_list)]
        return c

    servers = [bp.SV["tern-interval"], bp.SV["memcached"], bp.SV["memcached-keys"]]
    cells = {("tern-interval", "w2"): cell([3.0, 3.0, 3.0]),
             ("memcached", "w2"): cell([2.0, 2.0, 2.0]),
             ("memcached-keys", "w2"): cell([6.0, 2.0, 6.0])}
    lines, goals = bp.cpu_section(SimpleNamespace(runs=3), cells, servers, [bp.WL["w2"]])
    text = "\n".join(lines)
    a, b = text.index("## Ratios: tern / memcached\n"), text.index("## Ratios: tern / memcached-keys")
    assert "CPU 1.50x" in text[a:b] and "CPU 0.50x" in text[b:]
    assert "| 1 queue, pipelined 16 deep | 0.50x (0.50x-1.50x), below in 2 of 3 |" in text[b:]
    # the goal stays memcached's (one key)
    assert goals[0][1].startswith("1.50x") and goals[0][2] == "not met"


def test_rounds_alternate_the_order_of_the_servers():
    assert bp.round_order(["a", "b", "c"], 1) == ["a", "b", "c"]
    assert bp.round_order(["a", "b", "c"], 2) == ["c", "b", "a"]
    assert bp.round_order(["a", "b", "c"], 3) == ["a", "b", "c"]


def test_w7_runs_only_when_named():
    assert "w7" not in bp.THROUGHPUT_WORKLOADS and "w7" not in bp.CPU_TABLE_WORKLOADS
    w7 = bp.WL["w7"]
    assert w7.size == 65536 and w7.depth == 4 and w7.mibs
    assert bp.mibs_note([bp.WL["w2"], bp.WL["w4"], w7]) == \
        " (MiB/s for 4 KiB and 64 KiB messages)"
    assert bp.mibs_note([bp.WL["w2"]]) == ""


def test_workloads_are_chosen_by_name_or_code():
    assert bp.parse_args(["--workloads", "64k,w2,4-queues"]).workloads == "w7,w2,w6"
    assert bp.parse_args(["--cpu-table"]).workloads == "w2,w5,w4,w6"
    names = {w.name for w in bp.WORKLOADS}
    assert len(names) == len(bp.WORKLOADS) and not names & set(bp.WL)
    for bad in ("w9", "pipelined16", ""):
        try:
            bp.parse_args(["--workloads", bad])
        except SystemExit as e:
            assert e.code == 2
        else:
            raise AssertionError(f"--workloads {bad!r} was accepted")


FAKE_TERN_LOAD = """#!/bin/sh
# answers as tern-load --json would: the sets in produce mode, the gets in
# consume mode; one error in consume mode; logs its arguments
echo "$@" >> "$(dirname "$0")/calls"
case "$*" in
*"--mode produce"*) w=1000; r=0; e=0 ;;
*"--mode consume"*) w=0; r=1000; e=1 ;;
*) w=1000; r=1000; e=0 ;;
esac
echo '{"total": {"write": {"messages": '$w', "seconds": 0.5, "msg_per_s": 2000, "mib_per_s": 1},'\\
 '"read": {"messages": '$r', "seconds": 0.25, "msg_per_s": 4000, "mib_per_s": 2}},'\\
 '"total_errors": '$e', "errors": {"lost": '$e'},'\\
 '"latency_us": {"set": {"p50": 10, "p99": 20}, "get": {"p50": 30, "p99": 40}}}'
exit $e
"""


def test_phases_split_a_run_into_its_sets_and_its_gets(tmp_path):
    load = tmp_path / "tern-load"
    load.write_text(FAKE_TERN_LOAD)
    load.chmod(0o755)
    c = cfg(driver_pin=[], tern_load=str(load), driver_threads=1, load_timeout=10, phases=True)
    fig, err = bp.run_load(c, bp.SV["tern-interval"], 1, bp.WL["w2"], 1000, "p_",
                           pid=os.getpid())
    assert err is None
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 2 and "--mode produce" in calls[0] and "--mode consume" in calls[1]
    assert (fig["write_msgs"], fig["read_msgs"]) == (1000, 1000)
    assert (fig["set_p99_us"], fig["get_p99_us"]) == (20, 40)
    assert fig["errors"] == 1 and fig["error_kinds"] == {"lost": 1} and fig["error_text"]
    for k in bp.PHASE_KEYS:  # this process's own counters, read between the two
        assert fig[k] is not None and fig[k] >= 0, k
    # without --phases: one sequential run, no figures per set or per get
    c.phases = False
    fig, err = bp.run_load(c, bp.SV["tern-interval"], 1, bp.WL["w2"], 1000, "q_",
                           pid=os.getpid())
    assert err is None and "--mode sequential" in (tmp_path / "calls").read_text().splitlines()[2]
    assert all(fig[k] is None for k in bp.PHASE_KEYS) and "error_text" not in fig


def test_phase_section_shows_sets_and_gets_apart():
    c = bp.Cell()
    c.runs = [{"run": 1, "server_us_per_set": 2.5, "server_faults_per_set": 0.17,
               "server_sleeps_per_set": 0.065, "server_us_per_get": 2.0,
               "server_faults_per_get": 0.002, "server_sleeps_per_get": 0.063}]
    servers = [bp.SV["tern-interval"], bp.SV["memcached"]]
    cells = {("tern-interval", "w2"): c, ("memcached", "w2"): bp.Cell()}
    text = "\n".join(bp.phase_section(cells, servers, [bp.WL["w2"]]))
    assert ("| 1 queue, pipelined 16 deep | 2.50 / 2.00 us, 0.170 / 0.002 faults, "
            "0.065 / 0.063 sleeps | - |" in text)
    cells[("tern-interval", "w2")] = bp.Cell()
    assert bp.phase_section(cells, servers, [bp.WL["w2"]]) == []


def test_the_latency_goal_needs_every_run_under_1_ms():
    def run(set_p99, get_p99):
        return {"set_p50_us": 40, "set_p99_us": set_p99, "get_p50_us": 100,
                "get_p99_us": get_p99}

    # the median run is under 1 ms, one run is not: not met
    figs = [run(600, 200), run(900, 250), run(1500, 230)]
    fig = bp.latency_summary(figs)
    assert (fig["set_p99_us"], fig["runs_under_goal"], fig["runs"]) == (900, 2, 3)
    assert fig["set_p99_range"] == (600, 1500) and fig["get_p99_range"] == (200, 250)
    lat = [{"server": "tern-interval", "rate": 150000, "peak": 300000, "fig": fig}]
    name, measured, verdict = bp.latency_goal(lat)
    assert verdict == "not met"
    assert measured.endswith("both under 1 ms in 2 of 3 runs")
    # a get p99 over 1 ms counts against the run too
    fig = bp.latency_summary([run(600, 200), run(700, 1200)])
    assert fig["runs_under_goal"] == 1
    # every run under: met; the table says so
    fig = bp.latency_summary([run(600, 200), run(700, 300), run(800, 250)])
    lat = [{"server": "tern-interval", "rate": 150000, "peak": 300000, "fig": fig}]
    assert bp.latency_goal(lat)[2] == "met"
    assert bp.latency_rows(lat)[0][6:11] == ["600-800", "100", "250", "200-300", "3 of 3"]
    # a server whose step failed still gets a full row
    row = bp.latency_rows([{"server": "redis-everysec", "error": "no peak"}])[0]
    assert len(row) == 12 and row[-1] == "no peak"
    assert bp.latency_goal([{"server": "redis-everysec", "error": "x"}])[2] == "not measured"


def test_write_doc_keeps_the_sections_other_tools_write(tmp_path):
    """bench-peers rewrites BENCHMARKS.md but carries over bench-durable's
    section, whole, code blocks with `## ` lines in them included."""
    doc = tmp_path / "BENCHMARKS.md"
    durable = ("## Durable modes against the disk (tools/bench-durable)\n\nfigures\n"
               "```\n## not a heading\n```\nmore\n")
    doc.write_text("# old report\n\n## Machine\n\nold\n\n" + durable + "## Old notes\n\nx\n")
    assert bp.kept_sections(doc) == durable
    assert bp.kept_sections(tmp_path / "none.md") == ""
