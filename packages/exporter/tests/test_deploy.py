"""Dashboards and alert rules cannot drift from the metric definitions; promtool checks them."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from vnpu_core import holdings, quotas
from vnpu_device_plugin import metrics as plugin_metrics
from vnpu_exporter import dashboards, grafana, metrics
from vnpu_scheduler import metrics as scheduler_metrics

REPO = Path(__file__).resolve().parents[3]
DASHBOARD_DIR = REPO / "deploy" / "dashboards"
ALERT_DIR = REPO / "deploy" / "alerts"
RULES = ALERT_DIR / "vnpu-alerts.yaml"
RULE_TESTS = ALERT_DIR / "vnpu-alerts.test.yaml"

_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (no functions, labels or keywords)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings, template variables in them
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for match in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text):
        word = match.group(0)
        following = text[match.end() :].lstrip()
        if following.startswith("(") or word in _KEYWORDS:
            continue
        names.add(word)
    return names


def test_metric_names_helper() -> None:
    expr = 'histogram_quantile(0.99, sum by (le, verb) (rate(x_bucket{a=~"$n"}[$__rate_interval]))) / on (node) group_left () y_total > 0 and bool z'
    assert metric_names(expr) == {"x_bucket", "y_total", "z"}


def test_committed_dashboards_are_the_generated_ones() -> None:
    for dashboard in dashboards.build():
        path = DASHBOARD_DIR / f"{dashboard.uid}.json"
        assert path.read_text(encoding="utf-8") == grafana.dumps(dashboard), (
            f"{path} is out of date: run python -m vnpu_exporter.dashboards"
        )
    expected = {f"{d.uid}.json" for d in dashboards.build()}
    assert {p.name for p in DASHBOARD_DIR.glob("*.json")} == expected


def test_the_dashboards_cover_what_operators_asked_for() -> None:
    titles = {d.uid: {p.title for p in d.panels()} for d in dashboards.build()}
    assert set(titles) == {
        "vnpu-cluster-overview",
        "vnpu-node-detail",
        "vnpu-workloads",
        "vnpu-control-plane",
        "vnpu-tenants",
    }
    assert {
        "Memory",
        "AI cores",
        "Fragmentation: free capacity no template can use",
        "Why pods wait: node refusals by reason",
    } <= titles["vnpu-cluster-overview"]
    assert {"Idle allocations (no AI core use now)", "Pods: allocated versus used"} <= titles[
        "vnpu-workloads"
    ]
    assert {
        "Latency p50 / p99 by verb",
        "Filter refusals by reason",
        "vNPUs created, destroyed, reclaimed",
    } <= titles["vnpu-control-plane"]
    assert {
        "AI cores: used, nominal, limit",
        "Memory: used, nominal, limit",
        "Borrowed (held above nominal)",
        "Pending demand",
        "Weighted dominant share",
        "AI-core-hours per team",
        "MiB-hours per team",
        "NPU-hours per namespace",
        "ResourceQuota use versus limit",
        "Quota refusals by rule",
        "Tenants config",
    } <= titles["vnpu-tenants"]


@pytest.mark.parametrize("dashboard", dashboards.build(), ids=lambda d: d.uid)
def test_every_query_reads_defined_metrics(dashboard: grafana.Dashboard) -> None:
    known = metrics.sample_names()
    for panel, query in dashboard.queries():
        names = metric_names(query.expr)
        assert names, (panel.title, query.expr)
        unknown = names - set(known)
        assert not unknown, (panel.title, query.expr, unknown)
    for variable in dashboard.variables:
        assert variable.definition in (*metrics.EXPORTER, *metrics.SCHEDULER)
    rendered = grafana.render(dashboard)
    ids = [p["id"] for p in rendered["panels"]]
    assert len(ids) == len(set(ids))
    for panel in rendered["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24


def _rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_alert_rules_read_defined_metrics_and_are_all_unit_tested() -> None:
    known = metrics.sample_names()
    for rule in _rules():
        names = metric_names(rule["expr"])
        assert names, rule["alert"]
        assert names <= set(known), (rule["alert"], names - set(known))
        assert rule["labels"]["severity"] in ("critical", "warning", "info")
        assert {"summary", "description"} <= set(rule["annotations"])
    tested = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))["tests"]
        for case in test["alert_rule_test"]
        if case["exp_alerts"]
    }
    assert tested == {rule["alert"] for rule in _rules()}


def test_the_alerts_cover_what_operators_asked_for() -> None:
    names = {rule["alert"] for rule in _rules()}
    wanted = {
        "VnpuChipUnhealthy", "VnpuDevicePluginDown", "VnpuHandshakeStale", "VnpuReclaimed", "VnpuLeaked",
        "VnpuSchedulerFailureRateHigh", "VnpuNamespaceOverShare", "VnpuAllocatedButIdle",
    }  # fmt: skip
    assert wanted <= names


@pytest.mark.needs_prometheus
def test_promtool_checks_and_unit_tests_the_rules(promtool: str) -> None:
    checked = subprocess.run(
        [promtool, "check", "rules", str(RULES)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        [promtool, "test", "rules", RULE_TESTS.name],
        cwd=ALERT_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def substitute(expr: str) -> str:
    """A dashboard query as Grafana sends it with every variable at "All"."""
    return (
        expr.replace("$__rate_interval", "1m")
        .replace("$__range", "1h")
        .replace("$node", ".*")
        .replace("$model", ".*")
        .replace("$namespace", ".*")
        .replace("$team", ".*")
    )


@pytest.mark.needs_prometheus
def test_promtool_parses_every_dashboard_query(promtool: str, tmp_path: Path) -> None:
    rules = [
        {"record": f"vnpu_dashboard_check:{i}", "expr": substitute(query.expr)}
        for i, (_, _, query) in enumerate(grafana.all_queries(dashboards.build()))
    ]
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    checked = subprocess.run(
        [promtool, "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _families(objects: Any) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Name -> (type, label names) of the client_python metric objects of a service's metrics class."""
    found = {}
    for value in vars(objects).values():
        if isinstance(value, MetricWrapperBase):
            (described,) = value.describe()
            found[described.name] = (
                described.type,
                tuple(value._labelnames),
            )  # client_python keeps them here
    return found


def _scheduler() -> dict[str, tuple[str, tuple[str, ...]]]:
    found = _families(scheduler_metrics.Metrics(CollectorRegistry()))
    snapshot = scheduler_metrics.Snapshot(chips=[], nodes={"available": 1}, synced=True)
    key = holdings.Key(holdings.ALL_MODELS, holdings.Unit.AICORE)
    standings = scheduler_metrics.QuotaSnapshot(
        limits=(quotas.QuotaStanding("ml/npu", "ml", "limits.vnpu.io/aicore", key, 6, 8),),
        teams=(quotas.TeamStanding("vision", key, 10, 8, 12, 2),),
        team_pending={("vision", key.name): 4},
        namespaces={("ml", key.name): 6},
        namespace_pending={("ml", key.name): 4},
        aicore_seconds={"ml": 60.0},
        memory_mib_seconds={"ml": 6144.0},
        team_of={"ml": "vision"},
        weights={"vision": 2.0},
        shares={"vision": 0.25},
    )
    collected = [
        *scheduler_metrics.AllocationCollector(lambda: snapshot).collect(),
        *scheduler_metrics.QuotaCollector(lambda: standings).collect(),
    ]
    for family in collected:
        labels = {name for sample in family.samples for name in sample.labels}
        found[family.name] = (family.type, tuple(sorted(labels)))
    return found


@pytest.mark.parametrize(
    ("definitions", "build"),
    [
        (metrics.SCHEDULER, _scheduler),
        (metrics.DEVICE_PLUGIN, lambda: _families(plugin_metrics.Metrics(CollectorRegistry()))),
    ],
    ids=["scheduler", "device-plugin"],
)
def test_other_services_metrics_match_their_code(
    definitions: tuple[metrics.Definition, ...], build: Any
) -> None:
    actual = build()
    for d in definitions:
        assert d.name in actual, f"{d.name} is not in that service's metrics any more"
        kind, labels = actual[d.name]
        assert kind == d.kind.value, d.name
        assert set(labels) == set(d.labels), (d.name, labels)


def test_dashboard_json_is_valid_grafana_shape() -> None:
    for path in DASHBOARD_DIR.glob("*.json"):
        document = json.loads(path.read_text())
        assert document["schemaVersion"] == 39
        assert document["templating"]["list"][0]["type"] == "datasource"
        for panel in document["panels"]:
            if panel["type"] == "row":
                continue
            assert panel["targets"], panel["title"]
            assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])


def test_the_docs_name_every_metric_and_alert() -> None:
    text = (REPO / "docs" / "exporter.md").read_text(encoding="utf-8")
    missing = [d.samples[0] if d.kind is metrics.Kind.COUNTER else d.name for d in metrics.EXPORTER]
    missing = [name for name in missing if f"`{name}`" not in text and f"{name}`" not in text]
    missing += [
        d.name
        for d in metrics.COMPAT
        if d.name not in text and not d.name.startswith("npu_chip_info_error_code_")
    ]
    missing += [rule["alert"] for rule in _rules() if f"`{rule['alert']}`" not in text]
    assert not missing, missing
