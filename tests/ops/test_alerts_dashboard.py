"""
The Prometheus alert rules (conf/prometheus/tern-alerts.yml) and the
Grafana dashboard (conf/grafana/tern-dashboard.json): promtool checks the
rules and runs their unit tests (tern-alerts.test.yml: series that fire
each alert and series that must not); every metric the rules and the
dashboard name exists in the /metrics of a running ternd; every dashboard
query is valid PromQL (promtool checks it as a recording rule) and every
panel is well formed.
"""
import json
import os
import re
import shutil

import pytest

from opsutil import REPO, http_get, metrics_port, run

RULES = os.path.join(REPO, "conf", "prometheus", "tern-alerts.yml")
RULES_TEST = os.path.join(REPO, "tests", "ops", "tern-alerts.test.yml")
DASHBOARD = os.path.join(REPO, "conf", "grafana", "tern-dashboard.json")
NAME_RE = re.compile(r"\b((?:tern|process)_[a-z0-9_]+)\b")
# Grafana's variables, as the queries' checks fill them in
GRAFANA_VARS = (("$__rate_interval", "5m"), ("$instance", ".*"), ("$queue", ".*"))


def promtool():
    p = shutil.which("promtool")
    if not p:
        pytest.fail("promtool missing (tools/install-deps.sh installs prometheus)")
    return p


def dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def dashboard_exprs(d):
    out = [t["expr"] for p in d["panels"] for t in p.get("targets", [])]
    out += [v["definition"] for v in d["templating"]["list"] if v["type"] == "query"]
    return out


def rules():
    import yaml

    with open(RULES) as f:
        return [r for g in yaml.safe_load(f)["groups"] for r in g["rules"]]


def rule_exprs():
    return [r["expr"] for r in rules()]


def test_rules_pass_promtool():
    r = run([promtool(), "check", "rules", RULES])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS: 10 rules found" in r.stdout
    r = run([promtool(), "test", "rules", RULES_TEST])
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr
    # every alert has tests, with a case where it fires and one where not
    import yaml

    with open(RULES_TEST) as f:
        cases = [c for t in yaml.safe_load(f)["tests"] for c in t["alert_rule_test"]]
    alerts = {r["alert"] for r in rules()}
    fires = {c["alertname"] for c in cases if c["exp_alerts"]}
    quiet = {c["alertname"] for c in cases if not c["exp_alerts"]}
    assert alerts == fires == quiet, (alerts, fires, quiet)
    for r in rules():
        assert r["labels"]["severity"] in ("critical", "warning", "info"), r
        assert r["annotations"]["summary"], r


def test_dashboard_is_well_formed(tmp_path):
    d = dashboard()
    assert d["title"] == "tern" and d["uid"] and d["schemaVersion"] >= 36
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    names = {v["name"] for v in d["templating"]["list"]}
    assert names == {"datasource", "instance", "queue"}
    for p in d["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            used = set(re.findall(r"\$(\w+)", t["expr"])) - {"__rate_interval"}
            assert used <= names, (p["title"], used)
    # every query parses: promtool checks them as recording rules
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for i, e in enumerate(dashboard_exprs(d)):
        if e.startswith("label_values("):
            e = re.match(r"label_values\((.*), \w+\)$", e).group(1)
        for k, v in GRAFANA_VARS:
            e = e.replace(k, v)
        lines += ["      - record: dashboard:q%d" % i, "        expr: %s" % json.dumps(e)]
    f = tmp_path / "dashboard-rules.yml"
    f.write_text("\n".join(lines) + "\n")
    r = run([promtool(), "check", "rules", str(f)])
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_metric_named_exists(ternd):
    """The names in the rules and the dashboard against a live /metrics
    with a queue in it (per-queue families have samples then)."""
    srv = ternd(conf="[server]\nmetrics_listen = 127.0.0.1:0\n[queue synced]\nsync = always\n")
    with srv.conn() as c:
        assert c.set("synced", "x") == b"STORED\r\n"
    status, _, body = http_get(metrics_port(srv.stderr().decode()))
    assert status == 200
    live = set()
    for line in body.decode().splitlines():
        if line.startswith("#"):
            live.add(line.split()[2])   # HELP / TYPE name
        elif line:
            live.add(re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0))
    named = {}
    for where, exprs in (("rules", rule_exprs()), ("dashboard", dashboard_exprs(dashboard()))):
        assert exprs, where
        for e in exprs:
            for n in NAME_RE.findall(e):
                named.setdefault(n, where)
    missing = {n: w for n, w in named.items() if n not in live}
    assert not missing, "named but not in /metrics: %r" % missing
    # and the ones that matter are used at all
    for n in ("tern_queue_items", "tern_queue_oldest_item_age_seconds",
              "tern_journal_write_errors_total", "tern_journal_fsync_duration_seconds_bucket",
              "tern_server_status"):
        assert n in named, n
