"""values.yaml, values.schema.json, Chart.yaml and lint.

Wrong values must stop ``helm install`` with the key named (the schema, or a template's own
check for rules that span keys); every value is documented and known to the schema; the chart
versions follow the packages; Helm's linter finds nothing, and does find a broken template.
"""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "vnpu"

BAD_VALUES = [
    ({"scheduler": {"replicas": -1}}, "/scheduler/replicas"),
    ({"scheduler": {"replicas": "two"}}, "/scheduler/replicas"),
    ({"devicePlugin": {"vnpuMode": "hybrid"}}, "/devicePlugin/vnpuMode"),
    ({"devicePlugin": {"backend": "npu-smi"}}, "/devicePlugin/backend"),
    ({"devicePlugin": {"hamiVnpuCore": True}}, "/devicePlugin/hamiVnpuCore"),
    ({"devicePlugin": {"metricsPort": 70000}}, "/devicePlugin/metricsPort"),
    ({"devicePlugin": {"healthInterval": 0}}, "/devicePlugin/healthInterval"),
    ({"devicePlugin": {"serverKind": "dgx"}}, "/devicePlugin/serverKind"),
    ({"scheduler": {"replcas": 2}}, "replcas"),
    ({"scheduler": {"config": {"policy": "first-fit"}}}, "/scheduler/config/policy"),
    ({"scheduler": {"config": {"bindAttempts": 0}}}, "/scheduler/config/bindAttempts"),
    ({"scheduler": {"extender": {"weight": 0}}}, "/scheduler/extender/weight"),
    # The webhook always fails closed: the old Ignore is no longer a value.
    ({"scheduler": {"webhook": {"failurePolicy": "Ignore"}}}, "failurePolicy"),
    ({"admissionPolicy": {"validationActions": ["Block"]}}, "/admissionPolicy/validationActions/0"),
    ({"admissionPolicy": {"validationActions": []}}, "/admissionPolicy/validationActions"),
    ({"admissionPolicy": {"trustedUsers": [""]}}, "/admissionPolicy/trustedUsers/0"),
    (
        {"admissionPolicy": {"ignoreLabelNamespaces": ["Team_A"]}},
        "/admissionPolicy/ignoreLabelNamespaces/0",
    ),
    ({"scheduler": {"webhook": {"tls": {"mode": "vault"}}}}, "/scheduler/webhook/tls/mode"),
    (
        {"scheduler": {"kubeScheduler": {"image": {"tag": "v1.24.9"}}}},
        "/scheduler/kubeScheduler/image/tag",
    ),
    ({"exporter": {"intervals": {"temperature": 5}}}, "temperature"),
    ({"exporter": {"intervals": {"health": 0.01}}}, "/exporter/intervals/health"),
    ({"exporter": {"staleFactor": 1}}, "/exporter/staleFactor"),
    ({"global": {"logLevel": "trace"}}, "/global/logLevel"),
    ({"global": {"kubeletRootDir": "var/lib/kubelet"}}, "/global/kubeletRootDir"),
    ({"global": {"deviceConfig": {"name": "Hami_Device"}}}, "/global/deviceConfig/name"),
]


@pytest.mark.parametrize(("values", "key"), BAD_VALUES, ids=[k for _, k in BAD_VALUES])
def test_a_wrong_value_fails_with_the_key_named(render, values, key):
    with pytest.raises(helm.HelmValuesError) as caught:
        render(values)
    assert key in str(caught.value)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"scheduler": {"extender": {"httpTimeoutSeconds": 20}}},
            r"scheduler\.extender\.httpTimeoutSeconds \(20\) must exceed scheduler\.config\.lockWait \(20\)",
        ),
        (
            {"scheduler": {"config": {"bindTimeout": 22}}},
            r"scheduler\.config\.bindTimeout \(22\) must exceed scheduler\.config\.lockWait \(20\) by more than 2 s",
        ),
        (
            {"scheduler": {"config": {"bindTimeout": 30}}},
            r"scheduler\.extender\.httpTimeoutSeconds \(30\) must exceed scheduler\.config\.bindTimeout \(30\)",
        ),
        ({"devicePlugin": {"backend": "sim"}}, r"devicePlugin\.simDir is required"),
        ({"exporter": {"backend": "sim"}}, r"exporter\.simDir is required"),
    ],
)
def test_rules_across_keys_fail_with_the_keys_named(render, values, message):
    with pytest.raises(helm.HelmRenderError, match=message):
        render(values)


def test_a_disabled_component_is_still_validated(render):
    """The schema covers a component that is turned off: typos never go unnoticed."""
    with pytest.raises(helm.HelmValuesError, match="/devicePlugin/vnpuMode"):
        render({"devicePlugin": {"enabled": False, "vnpuMode": "hybrid"}})


# Every value is documented and known to the schema


KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z][\w-]*):(?P<rest>.*)$")


def _key_lines() -> list[tuple[int, str, int, bool]]:
    """(line number, dotted key, indent, has a comment directly above) of values.yaml."""
    lines = (CHART / "values.yaml").read_text(encoding="utf-8").splitlines()
    found: list[tuple[int, str, int, bool]] = []
    stack: list[tuple[int, str]] = []
    block_indent: int | None = None
    for number, line in enumerate(lines):
        stripped = line.lstrip(" ")
        indent = len(line) - len(stripped)
        if block_indent is not None:
            if not stripped or indent > block_indent:
                continue  # inside a literal block (the device config document)
            block_indent = None
        match = KEY.match(line)
        if not match:
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        dotted = ".".join([k for _, k in stack] + [match["key"]])
        previous = lines[number - 1].strip() if number else ""
        found.append((number + 1, dotted, indent, previous.startswith("#")))
        stack.append((indent, match["key"]))
        if match["rest"].strip() in ("|", "|-", ">"):
            block_indent = indent
    return found


def test_every_value_has_a_comment():
    keys = _key_lines()
    commented = {dotted for _, dotted, _, has in keys if has}
    parents = {dotted.rsplit(".", 1)[0] for _, dotted, _, _ in keys if "." in dotted}
    missing = []
    for number, dotted, _, has in keys:
        if has or dotted in parents:
            continue  # documented itself, or a group whose members are
        parent = dotted.rsplit(".", 1)[0] if "." in dotted else ""
        if parent not in commented:
            missing.append(f"line {number}: {dotted}")
    assert not missing, "values without a comment: " + ", ".join(missing)


def _schema_paths(
    node: dict[str, Any], definitions: dict[str, Any], prefix: str = ""
) -> tuple[set[str], set[str]]:
    """(every key path the schema names, the paths of objects that allow no other keys)."""
    if "$ref" in node:
        node = definitions[node["$ref"].rsplit("/", 1)[1]]
    paths: set[str] = set()
    closed = {prefix} if node.get("additionalProperties") is False else set()
    for name, child in node.get("properties", {}).items():
        path = f"{prefix}.{name}" if prefix else name
        paths.add(path)
        below, shut = _schema_paths(child, definitions, path)
        paths |= below
        closed |= shut
    return paths, closed


def _value_paths(node: Any, prefix: str = "") -> set[str]:
    paths: set[str] = set()
    if isinstance(node, dict):
        for name, child in node.items():
            path = f"{prefix}.{name}" if prefix else name
            paths.add(path)
            paths |= _value_paths(child, path)
    return paths


def _lookup(values: dict[str, Any], path: str) -> Any:
    node: Any = values
    for name in path.split("."):
        node = node[name]
    return node


def test_schema_and_values_name_the_same_keys():
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    in_schema, closed = _schema_paths(schema, schema["definitions"])
    in_values = _value_paths(values)
    # Helm itself adds these: the library chart's values and the globals copied into subcharts.
    added_by_helm = {"common", "scheduler.global", "devicePlugin.global", "exporter.global"}
    parent = lambda path: path.rsplit(".", 1)[0] if "." in path else ""  # noqa: E731
    # Keys of a map that is empty by default (exporter.intervals, ...) are named in its comment.
    empty = {p for p in in_values if _lookup(values, p) == {}}
    undocumented = {p for p in in_schema - in_values - added_by_helm if parent(p) not in empty}
    assert not undocumented, f"schema keys missing from values.yaml: {sorted(undocumented)}"
    unknown = {p for p in in_values if parent(p) in closed and p not in in_schema}
    assert not unknown, f"values.yaml keys the schema does not know: {sorted(unknown)}"
    assert "" in closed  # the top level refuses unknown keys too


def test_exporter_interval_groups_are_the_exporters():
    from vnpu_exporter import metrics

    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    intervals = schema["properties"]["exporter"]["properties"]["intervals"]["properties"]
    assert set(intervals) == {group.value for group in metrics.Group}


# Chart.yaml


def _package_version(directory: str) -> str:
    data = tomllib.loads(
        (ROOT / "packages" / directory / "pyproject.toml").read_text(encoding="utf-8")
    )
    version: str = data["project"]["version"]
    return version


def test_chart_versions_follow_the_packages():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert chart["apiVersion"] == "v2"
    assert chart["version"] == "0.1.0"
    versions = {_package_version(d) for d in ("scheduler", "device-plugin", "exporter")}
    assert versions == {chart["appVersion"]}
    for sub in ("scheduler", "device-plugin", "exporter"):
        subchart = yaml.safe_load(
            (CHART / "charts" / sub / "Chart.yaml").read_text(encoding="utf-8")
        )
        assert subchart["appVersion"] == chart["appVersion"], sub
        assert subchart["version"] == next(
            d["version"] for d in chart["dependencies"] if d["name"] == sub
        )


def test_each_component_is_gated_by_its_enabled_value():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    conditions = {d.get("alias", d["name"]): d.get("condition") for d in chart["dependencies"]}
    assert conditions == {
        "common": None,
        "scheduler": "scheduler.enabled",
        "devicePlugin": "devicePlugin.enabled",
        "exporter": "exporter.enabled",
    }


# Lint


@pytest.mark.parametrize(
    "values",
    [
        {},
        yaml.safe_load((CHART / "values-volcano.yaml").read_text(encoding="utf-8")),
        {"scheduler": {"replicas": 2, "webhook": {"tls": {"mode": "certManager"}}}},
        {"exporter": {"prometheusRule": {"enabled": True}, "serviceMonitor": {"enabled": True}}},
        {"scheduler": {"extender": {"tls": {"enabled": True}}}},
        {
            "admissionPolicy": {
                "validationActions": ["Warn", "Audit"],
                "trustedUsers": ["system:serviceaccount:kube-system:hami-scheduler"],
                "ignoreLabelNamespaces": ["legacy"],
            }
        },
    ],
    ids=["default", "volcano", "ha-cert-manager", "monitoring", "extender-mtls", "admission"],
)
def test_lint_is_clean(values):
    report = helm.lint(CHART, values, strict=True, namespace="kube-system", kube_version="v1.31.0")
    assert report["errors"] == []
    serious = [m for m in report["messages"] if m["severity"] >= 2]
    assert serious == []


def test_lint_finds_a_broken_template(tmp_path):
    """The lint above is not vacuous: a template error in a copy of the chart is reported."""
    copy = tmp_path / "vnpu"
    shutil.copytree(CHART, copy)
    target = copy / "charts" / "scheduler" / "templates" / "service.yaml"
    target.write_text(
        target.read_text(encoding="utf-8").replace(
            "{{ .Values.config.metricsPort }}", "{{ .Values.config.metricsPort "
        ),
        encoding="utf-8",
    )
    report = helm.lint(copy, strict=True, namespace="kube-system")
    assert report["errors"] or any(m["severity"] == 3 for m in report["messages"])


def test_notes_say_what_was_installed(render):
    default = render()
    assert "vnpu-scheduler" in default.notes
    assert "deviceshare" not in default.notes
    volcano = render(yaml.safe_load((CHART / "values-volcano.yaml").read_text(encoding="utf-8")))
    assert "scheduler      not installed" in volcano.notes
    for line in (
        "deviceshare.AscendHAMiVNPUEnable: true",
        "deviceshare.KnownGeometriesCMName: hami-scheduler-device",
        "deviceshare.KnownGeometriesCMNamespace: kube-system",
        "deviceshare.NodeLockEnable: true",
        "schedulerName: volcano",
    ):
        assert line in volcano.notes
    weight = re.search(r"deviceshare\.ScheduleWeight: (\d+)", volcano.notes)
    assert weight is not None
    assert int(weight[1]) > 0
