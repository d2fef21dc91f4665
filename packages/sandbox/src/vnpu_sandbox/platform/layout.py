"""Where a sandbox keeps its files, and the record of what ``up`` started.

One directory holds a whole sandbox: the record ``sandbox.json`` (the API URL, every port,
every process started, the nodes), the kubeconfig, one log file per process under ``logs/``,
and per node the simulated chips, the kubelet's sockets and the device plugin's ledger under
``nodes/<name>/``. ``up`` writes the record once everything it started is ready (and, while
starting, after each process so a failed start can still be cleaned up); ``down`` and
``status`` read it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vnpu_sandbox.platform import clusterfile, processes

RECORD_FORMAT = "vnpu-sandbox/v1"
SOCKET_PATH_MAX = 107
"""Longest unix socket path Linux accepts (sun_path is 108 bytes with the final NUL)."""


class RecordError(Exception):
    """The sandbox record exists but cannot be read (the message names the file and why)."""


@dataclass(frozen=True, slots=True)
class NodeDirs:
    """The files of one simulated node."""

    root: Path

    @property
    def sim(self) -> Path:
        return self.root / "chips"

    @property
    def device_plugins(self) -> Path:
        return self.root / "device-plugins"

    @property
    def pod_resources_socket(self) -> Path:
        return self.root / "pod-resources" / "kubelet.sock"

    @property
    def kubelet_state(self) -> Path:
        return self.root / "kubelet"

    @property
    def plugin_state(self) -> Path:
        return self.root / "device-plugin"

    @property
    def cdi(self) -> Path:
        """CDI spec files (DRA mode: the driver writes them, the kubelet resolves them)."""
        return self.root / "cdi"

    @property
    def dra_state(self) -> Path:
        """The DRA driver's claim ledger."""
        return self.root / "dra-driver"

    @property
    def hami_core(self) -> Path:
        return self.root / "hami-vnpu-core"

    @property
    def hami_shared(self) -> Path:
        return self.root / "hami-shared-region"


@dataclass(frozen=True, slots=True)
class Layout:
    """The files of a sandbox directory."""

    root: Path

    @classmethod
    def at(cls, directory: Path) -> Layout:
        return cls(Path(os.path.abspath(directory)))

    @property
    def record(self) -> Path:
        return self.root / "sandbox.json"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def kube_scheduler_config(self) -> Path:
        return self.root / "kube-scheduler.yaml"

    @property
    def prometheus(self) -> Path:
        return self.root / "prometheus"

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def node(self, name: str) -> NodeDirs:
        return NodeDirs(self.root / "nodes" / name)


@dataclass(slots=True)
class Record:
    """What ``up`` started: URLs and ports for people, processes for ``down``."""

    api_url: str
    kubeconfig: str
    cluster_file: str
    nodes: list[clusterfile.NodeSpec]
    ports: dict[str, int] = field(default_factory=dict)
    prometheus_url: str | None = None
    processes: list[processes.Process] = field(default_factory=list)
    ready: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "format": RECORD_FORMAT,
            "api_url": self.api_url,
            "kubeconfig": self.kubeconfig,
            "cluster_file": self.cluster_file,
            "nodes": [clusterfile.to_json(n) for n in self.nodes],
            "ports": self.ports,
            "prometheus_url": self.prometheus_url,
            "ready": self.ready,
            "processes": [p.to_json() for p in self.processes],
        }


def write(layout: Layout, record: Record) -> None:
    """Replace the record atomically (write a temporary file, rename it over the record)."""
    layout.root.mkdir(parents=True, exist_ok=True)
    temporary = layout.record.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(record.to_json(), indent=2) + "\n", encoding="utf-8")
    temporary.replace(layout.record)


def read(layout: Layout) -> Record | None:
    """The record of the sandbox in ``layout``, or None when there is none."""
    try:
        text = layout.record.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordError(f"{layout.record}: cannot read it: {exc}") from exc
    try:
        raw = json.loads(text)
        if raw.get("format") != RECORD_FORMAT:
            raise ValueError(f"format is {raw.get('format')!r}, expected {RECORD_FORMAT!r}")
        return Record(
            api_url=str(raw["api_url"]),
            kubeconfig=str(raw["kubeconfig"]),
            cluster_file=str(raw["cluster_file"]),
            nodes=[clusterfile.from_json(n) for n in raw["nodes"]],
            ports={str(k): int(v) for k, v in raw["ports"].items()},
            prometheus_url=raw.get("prometheus_url"),
            processes=[processes.Process.from_json(p) for p in raw["processes"]],
            ready=bool(raw.get("ready", False)),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise RecordError(f"{layout.record}: not a sandbox record: {exc}") from exc
