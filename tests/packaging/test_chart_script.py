"""``make chart``: scripts/render_chart.py renders deploy/helm/vnpu as ``helm template`` would."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import helm_python as helm
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "render_chart.py"
CHART = ROOT / "deploy" / "helm" / "vnpu"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_chart", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(*args: object) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(SCRIPT), *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)


def _documents(stream: str) -> list[tuple[str, dict[str, Any]]]:
    """(source template, document) of a ``helm template`` style stream."""
    found: list[tuple[str, dict[str, Any]]] = []
    for block in stream.split("---\n")[1:]:
        source, _, body = block.partition("\n")
        assert source.startswith("# Source: vnpu/"), source
        found.append((source.removeprefix("# Source: "), yaml.safe_load(body)))
    return found


def test_default_render_is_the_charts_documents_in_install_order() -> None:
    done = _run()
    assert (done.returncode, done.stderr) == (0, "")
    documents = _documents(done.stdout)
    with helm.Chart.load(CHART) as chart:
        direct = chart.render({}, name="vnpu", namespace="kube-system", is_install=True)
    expected = {
        (d["kind"], d["metadata"]["name"])
        for path, text in direct.items()
        if not path.endswith("NOTES.txt")
        for d in yaml.safe_load_all(text)
        if d
    }
    assert {(d["kind"], d["metadata"]["name"]) for _, d in documents} == expected
    order = _script().INSTALL_ORDER
    ranks = [order.index(d["kind"]) for _, d in documents if d["kind"] in order]
    assert ranks == sorted(ranks), "kinds in Helm's install order"
    kinds = [d["kind"] for _, d in documents]
    assert kinds.index("ServiceAccount") < kinds.index("DaemonSet") < kinds.index("Deployment")
    assert all(d["metadata"].get("namespace", "kube-system") == "kube-system" for _, d in documents)
    assert "is installed in namespace" not in done.stdout, "NOTES.txt is not a manifest"


def test_values_files_merge_in_order_and_output_goes_to_the_file(tmp_path: Path) -> None:
    first = tmp_path / "first.yaml"
    first.write_text("scheduler: {replicas: 2}\nexporter: {enabled: false}\n")
    second = tmp_path / "second.yaml"
    second.write_text("scheduler:\n  replicas: 3\n")
    out = tmp_path / "vnpu.yaml"
    done = _run("--values", first, "-f", second, "--output", out, "--namespace", "npu")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    documents = [d for _, d in _documents(out.read_text())]
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 3
    assert deployment["metadata"]["namespace"] == "npu"
    daemonsets = {d["metadata"]["name"] for d in documents if d["kind"] == "DaemonSet"}
    assert daemonsets == {"vnpu-device-plugin"}


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("scheduler: {replicas: two}\n", "/scheduler/replicas"),
        ("scheduler: [1\n", "--values"),
    ],
)
def test_bad_values_exit_2_with_one_line_naming_the_problem(
    tmp_path: Path, content: str, words: str
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(content)
    done = _run("--values", values)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("render_chart.py: ")
    assert done.stderr.count("\n") == 1, "one line"
    assert words in done.stderr


def test_a_missing_values_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    done = _run("--values", missing)
    assert (done.returncode, done.stdout) == (2, "")
    assert (
        done.stderr
        == f"render_chart.py: --values {missing}: cannot read it: No such file or directory\n"
    )


@pytest.mark.parametrize(
    ("base", "override", "expected"),
    [
        ({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}}, {"a": {"b": 1, "c": 3}}),
        ({"a": {"b": 1}}, {"a": [1]}, {"a": [1]}),
        ({"a": [1, 2]}, {"a": [3]}, {"a": [3]}),
        ({"a": 1}, {"a": None}, {"a": None}),  # Helm drops the key on null: kept for it
        ({}, {"x": {"y": 1}}, {"x": {"y": 1}}),
    ],
)
def test_merge_of_values(base: Any, override: Any, expected: Any) -> None:
    assert _script().merged(base, override) == expected


def test_make_chart_passes_values_and_out_to_the_script() -> None:
    done = subprocess.run(
        ["make", "-n", "chart", "VALUES=a.yaml b.yaml", "OUT=x.yaml"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    (line,) = [line for line in done.stdout.splitlines() if "render_chart.py" in line]
    assert line.endswith("scripts/render_chart.py --values a.yaml --values b.yaml --output x.yaml")
