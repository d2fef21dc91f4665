"""The whole sandbox, brought up by its real command, for the end-to-end tests.

``sandbox`` runs ``vnpu-sandbox up`` once per test module in a temporary directory: etcd,
kube-apiserver, kube-controller-manager and kube-scheduler (the binaries ``make k8s-bin``
builds), vnpu-scheduler with its TLS webhooks, and per node a simulated kubelet, the device
plugin and the exporter; ``vnpu-sandbox down`` stops it afterwards. vnpu's services get the
RBAC objects of the chart as ``make chart`` renders it. A module changes the sandbox's shape
with ``CLUSTER`` (the cluster file), ``SCHEDULERS`` (pairs of kube-scheduler and
vnpu-scheduler), ``PROMETHEUS`` (start one, when it is on PATH), ``KUEUE`` (``up --kueue``:
Kueue's CRDs, webhooks and manager too), ``MODE`` (``up --mode``: ``classic`` or ``dra``) and
``PEER`` (``up --scheduler``: a peer's own scheduler places NPU pods, with its chart and vnpu's
chart rendered as ``make peer-charts`` renders them). Tests drive it the way a person does: the kubectl
built beside kube-apiserver, HTTP to the exporters and Prometheus, and the simulated chips'
files read through the simulated NPU backend. Without the binaries every test here skips,
naming the command that builds them (fails with VNPU_REQUIRE_K8S=1); so does a ``KUEUE``
module without Kueue's (``make kueue-bin``; fails with VNPU_REQUIRE_KUEUE=1) and a ``PEER``
module without the peer's build (``make peers-bin``; fails with VNPU_REQUIRE_PEERS=1).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from vnpu_core import granted
from vnpu_npu.sim import backend as sim_backend
from vnpu_sandbox.platform import controlplane, kubectl, kueue, layout, peers, processes

CLUSTER = """\
nodes:
  - {name: duo, chip: 310P3, chips: 4, server: 300i-duo}
  - {name: a2, chip: 910B3, chips: 8, server: 910b-8}
  - {name: soft, chip: 910B4, chips: 4, server: pcie, mode: soft}
"""
ROOT = Path(__file__).resolve().parents[2]
UP_TIMEOUT_SECONDS = 150.0
Json = dict[str, Any]


def wait_for(
    check: Callable[[], Any],
    what: str,
    timeout: float = 60.0,
    explain: Callable[[], str] | None = None,
) -> Any:
    """``check()`` once it is truthy; on timeout an AssertionError naming ``what``, with
    ``explain()`` (the state that kept it from holding) appended."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f"\n{explain()}" if explain is not None else ""
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{detail}")
        time.sleep(0.2)


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
class Sandbox:
    """A running sandbox and the helpers tests use on it (test modules cannot import conftest)."""

    directory: Path
    record: layout.Record
    ctl: kubectl.Kubectl
    bins: dict[str, Path]
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)
    """The processes ``start`` started again."""
    wait_for = staticmethod(wait_for)
    command = staticmethod(sandbox_command)

    def as_identity(self, name: str) -> kubectl.Kubectl:
        """kubectl with one of the sandbox's identities (``node-duo``, ``vnpu-scheduler``...)."""
        path = self.directory / "control-plane" / "kubeconfigs" / f"{name}.yaml"
        return kubectl.Kubectl(str(path), binary=str(self.bins["kubectl"]))

    def write(self, text: str) -> Path:
        path = self.directory / f"manifest-{time.monotonic_ns()}.yaml"
        path.write_text(text, encoding="utf-8")
        return path

    def apply(self, manifest: str) -> None:
        self.ctl.run(["apply", "-f", str(self.write(manifest))])

    def pods(self, namespace: str = "default") -> dict[str, Json]:
        return {p["metadata"]["name"]: p for p in self.ctl.items(["get", "pods", "-n", namespace])}

    def running(self, names: set[str], namespace: str = "default") -> dict[str, Json]:
        """The namespace's pods once every one of ``names`` is Running, else {}."""
        pods = self.pods(namespace)
        if all(pods.get(n, {}).get("status", {}).get("phase") == "Running" for n in names):
            return pods
        return {}

    def delete_pods(self, nodes: Sequence[str], namespace: str = "default") -> None:
        """Delete every pod of the namespace and wait until they are gone and every vNPU of
        ``nodes`` is destroyed and out of the device plugin's ledger."""
        self.ctl.run(["delete", "pods", "--all", "-n", namespace, "--wait=false"])
        self.wait_for(
            lambda: not self.pods(namespace), "the pods gone", 60,
            explain=lambda: self.describe_pods(namespace),
        )  # fmt: skip
        for node in nodes:
            self.wait_for(lambda n=node: not self.vnpus(n), f"the vNPUs of {node} destroyed", 30)
            self.wait_for(
                lambda n=node: not self.ledger_records(n), f"the ledger of {node} emptied", 30
            )
            self.wait_for(
                lambda n=node: not self.granted(n), f"the grant book of {node} emptied", 60
            )

    def granted(self, node: str) -> int:
        """How many pods the node's device plugin reports chips granted to (its grant book,
        published as ``vnpu.io/granted-<CW>``)."""
        spec = next(n for n in self.record.nodes if n.name == node)
        key = granted.annotation_key(spec.common_word)
        found = self.ctl.json(["get", "node", node])["metadata"].get("annotations") or {}
        if not found.get(key):
            return 0
        return sum(len(pods) for pods in granted.decode(key, found[key]).values())

    def describe_pods(self, namespace: str = "default") -> str:
        """Each pod's phase, node, conditions and events: what a timeout message shows."""
        lines = []
        for name, pod in sorted(self.pods(namespace).items()):
            status = pod.get("status") or {}
            conditions = [
                f"{c.get('type')}={c.get('status')} {c.get('reason', '')} {c.get('message', '')}"
                for c in status.get("conditions") or []
            ]
            deleting = " deleting" if pod["metadata"].get("deletionTimestamp") else ""
            lines.append(
                f"  {name}: {status.get('phase')}{deleting} on {pod['spec'].get('nodeName')}; "
                + "; ".join(conditions)
            )
        events = self.ctl.items(["get", "events", "-n", namespace])
        lines += [
            f"  event {e['involvedObject'].get('name')}: {e.get('reason')} {e.get('message')}"
            for e in events[-15:]
        ]
        return "\n".join(lines)

    def stop(self, name: str) -> processes.Process:
        """Stop the sandbox's process ``name`` (as a crash or an upgrade would); ``start`` it
        again with what this returns."""
        record = layout.read(layout.Layout.at(self.directory))
        assert record is not None
        process = next(p for p in record.processes if p.name == name)
        processes.stop([process])
        return process

    def start(self, stopped: processes.Process) -> None:
        """Start a process ``stop`` stopped, with the same command and log; the record names
        the new one, so ``down`` stops it."""
        where = layout.Layout.at(self.directory)
        record = layout.read(where)
        assert record is not None
        started, child = processes.spawn(stopped.name, stopped.argv, Path(stopped.log))
        self.children.append(child)  # ``down`` stops it; the handle must outlive the test
        record.processes = [started if p.name == stopped.name else p for p in record.processes]
        layout.write(where, record)

    def log(self, name: str) -> str:
        return layout.Layout.at(self.directory).log(name).read_text(errors="replace")

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


def _render(output: Path, *flags: str) -> None:
    """A chart rendered by scripts/render_chart.py (vnpu's, or a peer's with ``--peer``)."""
    rendered = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "render_chart.py"), "--output", str(output),
         *flags],
        capture_output=True, text=True, timeout=60, cwd=ROOT, check=False,
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr


@pytest.fixture(scope="module")
def sandbox(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Sandbox]:
    """The module's sandbox, shaped by its ``CLUSTER``, ``SCHEDULERS``, ``PROMETHEUS`` and
    ``KUEUE``."""
    try:
        bins = controlplane.binaries()
    except controlplane.ControlPlaneError as exc:
        if os.environ.get("VNPU_REQUIRE_K8S") == "1":
            pytest.fail(f"the real control plane is required (VNPU_REQUIRE_K8S=1): {exc}")
        pytest.skip(f"the real control plane is not built: {exc}")
    queueing = bool(getattr(request.module, "KUEUE", False))
    if queueing:
        try:
            kueue.build()
        except kueue.KueueError as exc:
            if os.environ.get("VNPU_REQUIRE_KUEUE") == "1":
                pytest.fail(f"Kueue is required (VNPU_REQUIRE_KUEUE=1): {exc}")
            pytest.skip(f"Kueue is not built: {exc}")
    peer = getattr(request.module, "PEER", None)
    if peer is not None:
        try:
            peers.chart_dir(peer)
        except peers.PeerError as exc:
            if os.environ.get("VNPU_REQUIRE_PEERS") == "1":
                pytest.fail(f"the peers are required (VNPU_REQUIRE_PEERS=1): {exc}")
            pytest.skip(f"{peer} is not built: {exc}")
    directory = tmp_path_factory.mktemp("sb")
    cluster_file = directory / "cluster.yaml"
    cluster_file.write_text(getattr(request.module, "CLUSTER", CLUSTER), encoding="utf-8")
    schedulers = str(getattr(request.module, "SCHEDULERS", 1))
    mode = str(getattr(request.module, "MODE", "classic"))
    prometheus = getattr(request.module, "PROMETHEUS", False) and shutil.which("prometheus")
    # The chart's own RBAC gives vnpu's services their rights: the real authorizer judges it.
    # Rendered in the sandbox's mode: DRA mode gives the webhook its claim-template rights.
    chart = directory / "chart.yaml"
    values = directory / "values.yaml"
    values.write_text(yaml.safe_dump({"global": {"mode": mode}}), encoding="utf-8")
    peer_flags: tuple[str, ...] = ()
    if peer is None:
        _render(chart, "--values", str(values))
    else:  # as `make peer-charts` renders them
        _render(chart, "--values", str(ROOT / "deploy" / "helm" / "vnpu" / f"values-{peer}.yaml"))
        _render(directory / "peer-chart.yaml", "--peer", peer)
        peer_flags = ("--scheduler", peer, "--peer-chart", str(directory / "peer-chart.yaml"))
    started = sandbox_command(
        "up", "--cluster", str(cluster_file), "--dir", str(directory),
        "--timeout", f"{UP_TIMEOUT_SECONDS:g}", "--schedulers", schedulers, "--rbac", str(chart),
        "--mode", mode,
        *(() if prometheus else ("--no-prometheus",)), *(("--kueue",) if queueing else ()),
        *peer_flags,
    )  # fmt: skip
    restarted: list[subprocess.Popen[bytes]] = []
    try:
        assert started.returncode == 0, started.stderr + started.stdout
        record = layout.read(layout.Layout.at(directory))
        assert record is not None
        assert record.ready
        ctl = kubectl.Kubectl(record.kubeconfig, binary=str(bins["kubectl"]))
        yield Sandbox(directory, record, ctl, bins, restarted)
    finally:
        sandbox_command("down", "--dir", str(directory))
        for child in restarted:  # stopped by down: reap them
            child.wait(timeout=30)
