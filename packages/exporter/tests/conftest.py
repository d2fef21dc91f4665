"""Fixtures: simulated nodes, pods as the scheduler annotates them, and an exporter over them.

Chips are real simulated nodes (``vnpu_npu.sim``) in a temporary directory;
faults and load go in through ``sim.control`` as the sandbox does. Pods are the JSON the API
serves, annotated with ``vnpu_core.protocol`` exactly as the scheduler binds them. The
``Exporter`` class wires the real sampler and collector on a fresh registry and refreshes
synchronously, so every test sees one deterministic snapshot.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from vnpu_core import catalog, protocol
from vnpu_exporter import claims, collector, metrics, ownership, podresources, sampler, telemetry
from vnpu_npu import backend
from vnpu_npu.sim import backend as sim_backend
from vnpu_service import kubeapi

Json = dict[str, Any]
NODE = "npu-node-1"


def make_node(
    directory: Path, chip: str = "310P3", chips: int = 4, extra: str = ""
) -> sim_backend.SimBackend:
    """A simulated node of ``chips`` chips of ``chip`` in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    text = f"chip: {chip}\nchips: {chips}\nseed: {directory.name}\n{extra}"
    (directory / "chips.yaml").write_text(text, encoding="utf-8")
    return sim_backend.SimBackend(directory)


@dataclass(frozen=True)
class Device:
    """One device of a container: a chip and a template (None: whole chip or soft slice)."""

    chip: backend.ChipInfo
    template: str | None = None
    memory_mib: int = 0
    cores: int = 0


def pod(
    name: str,
    containers: Sequence[Sequence[Device]],
    *,
    namespace: str = "default",
    node: str = NODE,
    phase: str = "Running",
    soft: bool = False,
    init: int = 0,
    init_finished: bool = False,
    extra_annotations: dict[str, str] | None = None,
) -> Json:
    """A pod bound to ``node`` whose containers hold ``containers``; the first ``init`` are init containers."""
    model = (
        catalog.BUILTIN.by_chip_name(containers[0][0].chip.model)
        if containers and containers[0]
        else None
    )
    word = model.common_word if model else "Ascend310P"
    entries, infos = [], []
    for devices in containers:
        row = []
        for d in devices:
            memory = d.memory_mib
            if not memory and d.template and model is not None:
                found = model.template(d.template)
                memory = found.memory_mib if found else 0
            row.append(protocol.DeviceEntry(d.chip.uuid, word, memory, d.cores))
            infos.append(
                protocol.RuntimeInfo(
                    d.chip.uuid, d.template, d.memory_mib if soft else 0, d.cores if soft else 0
                )
            )
        entries.append(row)
    annotations = {
        protocol.allocated_key(word): protocol.encode_devices(entries),
        protocol.runtime_key(word): protocol.encode_runtime(infos),
    }
    if soft:
        annotations[protocol.VNPU_MODE_KEY] = protocol.SOFT_MODE_VALUE
    annotations.update(extra_annotations or {})
    names = [f"c{i}" for i in range(len(containers))]
    spec: Json = {
        "nodeName": node,
        "initContainers": [{"name": n, "image": "app"} for n in names[:init]],
        "containers": [{"name": n, "image": "app"} for n in names[init:]],
    }
    status: Json = {
        "phase": phase,
        "containerStatuses": [
            {"name": n, "containerID": f"containerd://{name}-{n}"} for n in names[init:]
        ],
    }
    if init:
        state = {"terminated": {"exitCode": 0}} if init_finished else {"running": {}}
        status["initContainerStatuses"] = [{"name": n, "state": state} for n in names[:init]]
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "annotations": annotations,
        },
        "spec": spec,
        "status": status,
    }


class StaticPods:
    """``pods.Source`` over a list the test edits; ``failure`` makes ``list`` raise it."""

    def __init__(self, items: list[Json] | None = None) -> None:
        self.items = items if items is not None else []
        self.failure: Exception | None = None

    def list(self, node: str) -> list[Json]:
        if self.failure is not None:
            raise self.failure
        return [p for p in self.items if (p.get("spec") or {}).get("nodeName") == node]

    def close(self) -> None:
        pass


class StaticDevices:
    """``podresources.Source`` over a list the test edits."""

    def __init__(self, items: list[podresources.Assignment] | None = None) -> None:
        self.items = items if items is not None else []
        self.failure: Exception | None = None

    def list(self) -> tuple[podresources.Assignment, ...]:
        if self.failure is not None:
            raise self.failure
        return tuple(self.items)

    def close(self) -> None:
        pass


class StaticLedger:
    def __init__(self, records: Sequence[ownership.Record] = ()) -> None:
        self.records = tuple(records)
        self.failure: Exception | None = None

    def read(self) -> ownership.Ledger:
        if self.failure is not None:
            raise self.failure
        return ownership.Ledger(self.records)


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Exporter:
    """The real sampler and collector of one node, refreshed on demand."""

    npu: backend.Backend
    pods: StaticPods | None = field(default_factory=StaticPods)
    devices: StaticDevices | None = field(default_factory=StaticDevices)
    ledger: StaticLedger | None = None
    compat: bool = False
    clock: Clock = field(default_factory=Clock)
    claim_ledger: claims.Source | None = None  # the DRA driver's (claims.ClaimLedgerFile)

    def __post_init__(self) -> None:
        self.registry = CollectorRegistry()
        self.telemetry = telemetry.Telemetry(self.registry)
        self.sampler = sampler.Sampler(
            self.npu,
            NODE,
            self.telemetry,
            pod_source=self.pods,
            pod_resources=self.devices,
            ledger_source=self.ledger,
            claim_source=self.claim_ledger,
            clock=self.clock,
        )
        simulated = isinstance(self.npu, sim_backend.SimBackend)
        self.collector = collector.NodeCollector(
            self.sampler.snapshot,
            NODE,
            npu_exporter_compat=self.compat,
            backend_name="sim" if simulated else "dcmi",
        )
        self.registry.register(self.collector)

    def refresh(self) -> Exporter:
        self.sampler.refresh_all()
        return self

    def text(self) -> str:
        return generate_latest(self.registry).decode()

    def value(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)

    def samples(self, name: str) -> list[tuple[dict[str, str], float]]:
        """Every sample of ``name`` (exact sample name) in one collection."""
        found = []
        for family in self.registry.collect():
            for s in family.samples:
                if s.name == name:
                    found.append((dict(s.labels), s.value))
        return found

    def errors(self, group: metrics.Group, reason: metrics.ErrorReason) -> float:
        value = self.value(
            "vnpu_exporter_read_errors_total", group=group.value, reason=reason.value
        )
        return value or 0.0


def chip_labels(chip: backend.ChipInfo, model: str = "Ascend310P") -> dict[str, str]:
    return {"node": NODE, "chip": str(chip.phy_id), "uuid": chip.uuid, "model": model}


@pytest.fixture
def node310(tmp_path: Path) -> sim_backend.SimBackend:
    """Four 310P3 chips (two Atlas 300I Duo cards)."""
    return make_node(tmp_path / "n310", "310P3", 4)


@pytest.fixture
def node910(tmp_path: Path) -> sim_backend.SimBackend:
    """Eight 910B3 chips."""
    return make_node(tmp_path / "n910", "910B3", 8)


API_DOWN = kubeapi.Unavailable(
    0, "ConnectionRefused", "list pods on node npu-node-1: connection refused"
)


class Kit:
    """The builders above, for test modules (which cannot import conftest)."""

    NODE = NODE
    API_DOWN = API_DOWN
    Device = Device
    Exporter = Exporter
    StaticPods = StaticPods
    StaticDevices = StaticDevices
    StaticLedger = StaticLedger
    make_node = staticmethod(make_node)
    pod = staticmethod(pod)
    chip_labels = staticmethod(chip_labels)


@pytest.fixture
def kit() -> type[Kit]:
    return Kit


@pytest.fixture
def promtool() -> str:
    """The promtool binary; the test is skipped when Prometheus is not installed."""
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not installed (Debian package prometheus; .ci/run installs it)")
    return found


@pytest.fixture
def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        pytest.skip("prometheus is not installed (Debian package prometheus; .ci/run installs it)")
    return found
