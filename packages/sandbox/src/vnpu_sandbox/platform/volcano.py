"""Volcano's scheduler and controllers beside the sandbox, for ``vnpu-sandbox up --scheduler
volcano`` (the operator guide's "Topology 2": vnpu's device plugin and exporter under Volcano).

``up`` calls ``peers.build`` for the binaries ``make peers-bin`` built and ``Ports.choose``
with the other ports; ``bringup`` creates ``install_documents`` (Volcano's namespace, CRDs,
service accounts, roles and ConfigMaps from its chart rendered with
``deploy/peers/volcano-values.yaml``, as ``make peer-charts`` renders it), waits until the
CRDs are served and every node has published its chips, calls ``prepare`` (the scheduler's
configuration from the chart's ConfigMap, the service accounts' tokens) and starts
``components``: vc-controller-manager and vc-scheduler with the arguments of the chart's
Deployments, each as its chart's service account, in-cluster (``peers.in_cluster``). Ready:
both health endpoints answer and ``problems`` is empty (Volcano's ``default`` queue exists).

Why vc-scheduler starts after the nodes have published: a vc-scheduler that lists a node
before it has built its deviceshare plugin keeps no Ascend devices for that node until the
node's next update, and binds NPU pods meanwhile without a device decision (vnpu's device
plugin refuses those, naming the missing decision).

Not run: Volcano's admission webhook (vc-webhook-manager is not in the pinned source), so a
Volcano Job gets none of the defaults it would set (queue, scheduler name, minAvailable):
write them. Failures are ``peers.PeerError``.
"""

from __future__ import annotations

import ssl
import urllib.error
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vnpu_sandbox.platform import components, layout, peers, probes

Json = dict[str, Any]

PEER = "volcano"
BINARIES = ("vc-scheduler", "vc-controller-manager")
NAMESPACE = "volcano-system"
RELEASE = "volcano"
SCHEDULER_NAME = "volcano"
"""What NPU pods name in ``schedulerName`` (the chart's default)."""
SCHEDULER = f"{RELEASE}-scheduler"
"""The scheduler's Deployment and service account in the chart."""
CONTROLLERS = f"{RELEASE}-controllers"
CONFIG_MAP = f"{RELEASE}-scheduler-configmap"
CONFIG_KEY = "volcano-scheduler.conf"
DEFAULT_QUEUE = "default"
_QUEUES = "/apis/scheduling.volcano.sh/v1beta1/queues"
_OWN_FLAGS = ("--scheduler-conf", "--listen-address", "--healthz-address", "--kubeconfig")
"""Flags of the chart's that the sandbox sets itself (paths and loopback ports)."""


@dataclass(frozen=True, slots=True)
class Ports:
    """Volcano's loopback ports: each process's health endpoint and metrics."""

    scheduler_health: int
    scheduler_metrics: int
    controllers_health: int
    controllers_metrics: int

    @classmethod
    def choose(cls, pick: components.PortPicker) -> Ports:
        return cls(pick(), pick(), pick(), pick())

    def as_dict(self) -> dict[str, int]:
        return {
            "volcano-scheduler-health": self.scheduler_health,
            "volcano-scheduler-metrics": self.scheduler_metrics,
            "volcano-controllers-health": self.controllers_health,
            "volcano-controllers-metrics": self.controllers_metrics,
        }


@dataclass(frozen=True, slots=True)
class Volcano:
    """One sandbox's Volcano: its build, its rendered chart, ports and files."""

    build: peers.Build
    chart: list[Json]
    ports: Ports
    root: Path

    @classmethod
    def at(
        cls, where: layout.Layout, built: peers.Build, chart: list[Json], ports: Ports
    ) -> Volcano:
        return cls(built, chart, ports, where.root / PEER)

    @property
    def config(self) -> Path:
        """vc-scheduler's configuration, alone in its directory: vc-scheduler reloads it on any
        write in that directory."""
        return self.root / "scheduler-conf" / CONFIG_KEY

    def account(self, name: str) -> peers.Account:
        return peers.Account(NAMESPACE, name, self.root / "accounts")


def install_documents(volcano: Volcano) -> list[Json]:
    """What the sandbox creates of Volcano's chart (``peers.INSTALL_KINDS``)."""
    return peers.install_documents(volcano.chart, NAMESPACE)


def prepare(volcano: Volcano, ca: Path, api_url: str, context: ssl.SSLContext) -> None:
    """The scheduler's configuration as the chart's ConfigMap holds it, and each process's
    service-account files with a fresh token."""
    volcano.config.parent.mkdir(parents=True, exist_ok=True)
    text = peers.config_map(volcano.chart, CONFIG_MAP, CONFIG_KEY)
    volcano.config.write_text(text, encoding="utf-8")
    for name in (SCHEDULER, CONTROLLERS):
        account = volcano.account(name)
        peers.prepare_account(account, ca)
        peers.request_token(account, api_url, context)


def _process(
    volcano: Volcano, name: str, binary: str, api_port: int, health: int, metrics: int,
    extra: Sequence[str] = (),
) -> components.Component:  # fmt: skip
    found = peers.container(volcano.chart, name)
    argv = (
        str(volcano.build.binary(binary)),
        *peers.arguments(found, _OWN_FLAGS),
        *extra,
        f"--listen-address={components.LOOPBACK}:{metrics}",
        f"--healthz-address={components.LOOPBACK}:{health}",
    )
    wrapped = peers.in_cluster(
        volcano.build, volcano.account(name), api_port, argv, peers.environment(found)
    )
    return components.Component(name, wrapped, components.url(health, "/healthz"))


def components_(volcano: Volcano, api_port: int) -> list[components.Component]:
    """vc-controller-manager, then vc-scheduler, as the chart's Deployments run them."""
    ports = volcano.ports
    return [
        _process(
            volcano, CONTROLLERS, "vc-controller-manager", api_port,
            ports.controllers_health, ports.controllers_metrics,
        ),
        _process(
            volcano, SCHEDULER, "vc-scheduler", api_port,
            ports.scheduler_health, ports.scheduler_metrics,
            (f"--scheduler-conf={volcano.config}",),
        ),
    ]  # fmt: skip


def problems(api_url: str, context: ssl.SSLContext | None) -> dict[str, str]:
    """Empty once vc-scheduler has made Volcano's ``default`` queue, else {what: why}."""
    try:
        probes.get_json(f"{api_url}{_QUEUES}/{DEFAULT_QUEUE}", context=context)
    except urllib.error.HTTPError as exc:
        return {"volcano": f"no {DEFAULT_QUEUE} queue yet ({exc.code})"}
    except (OSError, ValueError) as exc:
        return {"volcano": f"cannot read Volcano's queues: {exc}"}
    return {}
