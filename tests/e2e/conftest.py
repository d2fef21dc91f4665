"""The whole sandbox, brought up by its real command for the end-to-end tests.

``sandbox`` runs ``vnpu-sandbox up`` on a three-node cluster (one node per sharing mode) in
a temporary directory, once per test module, and ``vnpu-sandbox down`` afterwards. Tests
drive it the way a person does: kubectl with the kubeconfig ``up`` wrote, HTTP to the
exporters and Prometheus, and the simulated chips' files read through the simulated NPU
backend.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from vnpu_device_plugin.npu.sim import backend as sim_backend
from vnpu_sandbox.platform import kubectl, layout

CLUSTER = """\
nodes:
  - {name: duo, chip: 310P3, chips: 4, server: 300i-duo}
  - {name: a2, chip: 910B3, chips: 8, server: 910b-8}
  - {name: soft, chip: 910B4, chips: 4, server: pcie, mode: soft}
"""
ROOT = Path(__file__).resolve().parents[2]
Json = dict[str, Any]


def wait_for(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.2)


def sandbox_command(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vnpu_sandbox", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )


@dataclass
class Sandbox:
    """A running sandbox and the helpers tests use on it (test modules cannot import conftest)."""

    directory: Path
    record: layout.Record
    ctl: kubectl.Kubectl
    wait_for = staticmethod(wait_for)
    command = staticmethod(sandbox_command)

    def pods(self, namespace: str = "default") -> dict[str, Json]:
        return {p["metadata"]["name"]: p for p in self.ctl.items(["get", "pods", "-n", namespace])}

    def apply(self, manifest: str) -> None:
        path = self.directory / f"manifest-{time.monotonic_ns()}.yaml"
        path.write_text(manifest, encoding="utf-8")
        self.ctl.run(["apply", "--validate=false", "-f", str(path)])

    def vnpus(self, node: str) -> list[sim_backend.backend.VnpuInfo]:
        sim = sim_backend.SimBackend(layout.Layout.at(self.directory).node(node).sim)
        return [v for chip in sim.chips() for v in sim.vnpus(chip.phy_id)]

    def ledger_records(self, node: str) -> list[Json]:
        path = layout.Layout.at(self.directory).node(node).plugin_state / "ledger.json"
        if not path.exists():
            return []
        records: list[Json] = json.loads(path.read_text(encoding="utf-8"))["records"]
        return records

    def metrics(self, node: str) -> str:
        port = self.record.ports[f"exporter/{node}"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            return str(answer.read().decode())

    def promql(self, query: str) -> list[Json]:
        assert self.record.prometheus_url is not None
        url = f"{self.record.prometheus_url}/api/v1/query?query={urllib.parse.quote(query)}"
        with urllib.request.urlopen(url, timeout=10) as answer:
            body = json.loads(answer.read())
        assert body["status"] == "success", body
        result: list[Json] = body["data"]["result"]
        return result


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not on PATH (Debian: kubernetes-client; .ci/run installs it)")
    directory = tmp_path_factory.mktemp("sb")
    cluster = directory / "cluster.yaml"
    cluster.write_text(CLUSTER, encoding="utf-8")
    started = sandbox_command("up", "--cluster", str(cluster), "--dir", str(directory))
    assert started.returncode == 0, started.stderr + started.stdout
    record = layout.read(layout.Layout.at(directory))
    assert record is not None
    assert record.ready
    try:
        yield Sandbox(directory, record, kubectl.Kubectl(record.kubeconfig))
    finally:
        sandbox_command("down", "--dir", str(directory))
