"""vnpu under the real Kubernetes control plane, brought up by ``vnpu-sandbox up --control-plane real``.

``cluster`` starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler (the
binaries ``make k8s-bin`` builds into ``${XDG_CACHE_HOME:-$HOME/.cache}/vnpu/k8s/``) with
vnpu-scheduler, its TLS webhooks and three simulated nodes, once per test module, and stops
it afterwards. vnpu's services get the RBAC objects of the chart as ``make chart`` renders
it. Without the binaries every test here skips, naming the command that builds them. Tests drive it with the kubectl built beside kube-apiserver, as a person would.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from vnpu_sandbox.platform import controlplane, kubectl, layout

CLUSTER = """\
nodes:
  - {name: duo, chip: 310P3, chips: 4, server: 300i-duo}
  - {name: a2, chip: 910B3, chips: 8, server: 910b-8}
  - {name: soft, chip: 910B4, chips: 4, server: pcie, mode: soft}
"""
ROOT = Path(__file__).resolve().parents[2]
UP_TIMEOUT_SECONDS = 150.0
Json = dict[str, Any]


def wait_for(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.25)


def sandbox_command(*args: str, timeout: float = 240.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vnpu_sandbox", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )


@dataclass
class Cluster:
    """A running sandbox on the real control plane (test modules cannot import conftest)."""

    directory: Path
    record: layout.Record
    ctl: kubectl.Kubectl
    bins: dict[str, Path]
    wait_for = staticmethod(wait_for)

    def as_identity(self, name: str) -> kubectl.Kubectl:
        """kubectl with one of the sandbox's identities (``node-duo``, ``vnpu-scheduler``...)."""
        path = self.directory / "control-plane" / "kubeconfigs" / f"{name}.yaml"
        return kubectl.Kubectl(str(path), binary=str(self.bins["kubectl"]))

    def write(self, text: str) -> Path:
        path = self.directory / f"manifest-{time.monotonic_ns()}.yaml"
        path.write_text(text, encoding="utf-8")
        return path

    def pods(self, namespace: str) -> dict[str, Json]:
        return {p["metadata"]["name"]: p for p in self.ctl.items(["get", "pods", "-n", namespace])}

    def log(self, name: str) -> str:
        return layout.Layout.at(self.directory).log(name).read_text(errors="replace")


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """The sandbox; a test module sets ``CLUSTER`` and ``SCHEDULERS`` to change its shape."""
    try:
        bins = controlplane.binaries()
    except controlplane.ControlPlaneError as exc:
        pytest.skip(f"the real control plane is not built: {exc}")
    directory = tmp_path_factory.mktemp("real")
    cluster_file = directory / "cluster.yaml"
    cluster_file.write_text(getattr(request.module, "CLUSTER", CLUSTER), encoding="utf-8")
    schedulers = str(getattr(request.module, "SCHEDULERS", 1))
    # The chart's own RBAC gives vnpu's services their rights: the real authorizer judges it.
    chart = directory / "chart.yaml"
    rendered = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "render_chart.py"), "--output", str(chart)],
        capture_output=True, text=True, timeout=60, cwd=ROOT, check=False,
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    started = sandbox_command(
        "up", "--control-plane", "real", "--cluster", str(cluster_file), "--dir", str(directory),
        "--no-prometheus", "--timeout", f"{UP_TIMEOUT_SECONDS:g}",
        "--schedulers", schedulers, "--rbac", str(chart),
    )  # fmt: skip
    try:
        assert started.returncode == 0, started.stderr + started.stdout
        record = layout.read(layout.Layout.at(directory))
        assert record is not None
        assert record.ready
        assert record.control_plane == "real"
        ctl = kubectl.Kubectl(record.kubeconfig, binary=str(bins["kubectl"]))
        yield Cluster(directory, record, ctl, bins)
    finally:
        sandbox_command("down", "--dir", str(directory))
