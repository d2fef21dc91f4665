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

Why ``up`` waits for each node's next report after vc-scheduler's first session
(``sessions``, ``reports``): vc-scheduler turns its deviceshare plugin on when it opens its
first scheduling session, after it has listed the nodes, and reads a node's Ascend devices
only when the node changes after that. Until each node's device plugin writes its annotations
again (every ``--report-interval``, 30 s by default), Volcano counts ``huawei.com/<CW>`` as a
plain number and binds NPU pods there without a device decision.

Not run: Volcano's admission webhook (vc-webhook-manager is not in the pinned source), so a
Volcano Job gets none of the defaults it would set (queue, scheduler name, minAvailable):
write them. Failures are ``peers.PeerError``.
"""

from __future__ import annotations

import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vnpu_core import protocol
from vnpu_sandbox.platform import clusterfile, components, layout, peers, probes

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


_SESSIONS = re.compile(
    r'^volcano_action_scheduling_latency_milliseconds_count\{action="allocate"\} (\S+)$',
    re.MULTILINE,
)


def sessions(volcano: Volcano) -> int:
    """How many scheduling sessions vc-scheduler has run (its allocate action's count); 0 when
    its metrics do not answer yet."""
    url = components.url(volcano.ports.scheduler_metrics, "/metrics")
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            text = answer.read().decode("utf-8", errors="replace")
    except OSError:
        return 0
    found = _SESSIONS.search(text)
    return int(float(found.group(1))) if found else 0


def reports(
    api_url: str, context: ssl.SSLContext | None, nodes: Sequence[clusterfile.NodeSpec]
) -> dict[str, str]:
    """Each node's handshake annotation (``hami.io/node-handshake-<CW>``), which its device
    plugin rewrites at every report: a new value means the Node changed since."""
    try:
        listed = probes.get_json(f"{api_url}/api/v1/nodes", context=context)
    except (OSError, ValueError):
        return {}
    words = {n.name: n.common_word for n in nodes}
    found = {}
    for item in listed.get("items", []):
        name = item["metadata"]["name"]
        annotations = item["metadata"].get("annotations") or {}
        if name in words:
            found[name] = annotations.get(protocol.node_handshake_key(words[name]), "")
    return found


def problems(api_url: str, context: ssl.SSLContext | None) -> dict[str, str]:
    """Empty once vc-scheduler has made Volcano's ``default`` queue, else {what: why}."""
    try:
        probes.get_json(f"{api_url}{_QUEUES}/{DEFAULT_QUEUE}", context=context)
    except urllib.error.HTTPError as exc:
        return {"volcano": f"no {DEFAULT_QUEUE} queue yet ({exc.code})"}
    except (OSError, ValueError) as exc:
        return {"volcano": f"cannot read Volcano's queues: {exc}"}
    return {}
