"""The exporter's dashboards and alert rules, packaged in the chart, equal their sources.

Helm cannot read files outside a chart, so the exporter subchart keeps copies under files/.
These tests fail as soon as a copy differs from deploy/dashboards or deploy/alerts (the files
the exporter's own tests check against a real Prometheus): refresh them with
``cp deploy/dashboards/*.json deploy/helm/vnpu/charts/exporter/files/dashboards/`` and
``cp deploy/alerts/vnpu-alerts.yaml deploy/helm/vnpu/charts/exporter/files/alerts/``.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
FILES = ROOT / "deploy" / "helm" / "vnpu" / "charts" / "exporter" / "files"
SOURCES = ROOT / "deploy"


def test_dashboard_copies_equal_the_exporters_dashboards():
    sources = {p.name: p.read_bytes() for p in (SOURCES / "dashboards").glob("*.json")}
    copies = {p.name: p.read_bytes() for p in (FILES / "dashboards").glob("*.json")}
    assert sources, "no dashboards in deploy/dashboards"
    assert sorted(copies) == sorted(sources)
    for name, data in sources.items():
        assert copies[name] == data, (
            f"files/dashboards/{name} differs from deploy/dashboards/{name}"
        )


def test_alert_rules_copy_equals_the_exporters_rules():
    sources = sorted(
        p.name for p in (SOURCES / "alerts").glob("*.yaml") if not p.name.endswith(".test.yaml")
    )
    copies = sorted(p.name for p in (FILES / "alerts").glob("*.yaml"))
    assert sources == copies == ["vnpu-alerts.yaml"]
    assert (FILES / "alerts" / "vnpu-alerts.yaml").read_bytes() == (
        SOURCES / "alerts" / "vnpu-alerts.yaml"
    ).read_bytes()


def test_dashboards_render_as_sidecar_config_maps(default):
    maps = [
        c
        for c in default.all("ConfigMap")
        if c["metadata"]["labels"].get("grafana_dashboard") == "1"
    ]
    assert len(maps) == len(list((SOURCES / "dashboards").glob("*.json")))
    for config_map in maps:
        assert config_map["metadata"]["annotations"] == {"grafana_folder": "vnpu"}
        ((name, text),) = config_map["data"].items()
        source = json.loads((SOURCES / "dashboards" / name).read_text(encoding="utf-8"))
        assert json.loads(text) == source, name


def test_dashboard_label_and_namespace_are_values(render):
    manifests = render(
        {
            "exporter": {
                "dashboards": {
                    "label": "dash",
                    "labelValue": "yes",
                    "namespace": "monitoring",
                    "folder": "",
                }
            }
        }
    )
    maps = [c for c in manifests.all("ConfigMap") if "dash" in c["metadata"]["labels"]]
    assert maps
    for config_map in maps:
        assert config_map["metadata"]["labels"]["dash"] == "yes"
        assert config_map["metadata"]["namespace"] == "monitoring"
        assert "annotations" not in config_map["metadata"]
    off = render({"exporter": {"dashboards": {"enabled": False}}})
    assert not [c for c in off.all("ConfigMap") if "grafana_dashboard" in c["metadata"]["labels"]]


def test_prometheus_rule_carries_the_alert_rules(render, default):
    assert default.all("PrometheusRule") == []  # needs the operator's CRD: off by default
    manifests = render(
        {"exporter": {"prometheusRule": {"enabled": True, "labels": {"release": "prom"}}}}
    )
    rule = manifests.get("PrometheusRule", "vnpu-exporter")
    assert rule["metadata"]["labels"]["release"] == "prom"
    source = yaml.safe_load((SOURCES / "alerts" / "vnpu-alerts.yaml").read_text(encoding="utf-8"))
    assert rule["spec"] == source
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert "VnpuChipUnhealthy" in alerts
