"""The command line of every process the sandbox starts, and the files each one needs.

``up`` calls ``plan`` for the list of ``Component`` values in start order and writes each
node's simulated chips with ``write_chips``. Every vnpu part runs as its own real command
(``python -m vnpu_device_plugin`` and so on) with the interpreter running ``up``, so the
sandbox exercises exactly what an operator deploys; only the chips and the kubelet are
simulated. Each component names how to tell it is ready: an HTTP URL that answers 200, or
nothing (then running is enough).
"""

from __future__ import annotations

import random
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from vnpu_sandbox.platform import clusterfile, layout

LOOPBACK = "127.0.0.1"
TENANTS_NAMESPACE = "kube-system"
TENANTS_CONFIG_MAP = "vnpu-scheduler-tenants"  # the chart's name for it (key tenants.yaml)
PLUGIN_REPORT_RETRY_SECONDS = 1.0
REGISTER_TIMEOUT_SECONDS = 120.0
DRA_PUBLISH_SECONDS = 5.0
"""How often a DRA driver republishes its slices (health changes show within this)."""
"""How long a simulated kubelet retries registering its Node with a real kube-apiserver."""
EXPORTER_FAST_GROUPS = ("vnpus", "pods", "pod_resources", "ownership")
EXPORTER_REFRESH_SECONDS = 2.0
"""The exporter's allocation groups refresh this often here (10 s by default), so a person
watching the sandbox sees a pod's allocation in Prometheus within a few seconds."""


@dataclass(frozen=True, slots=True)
class Component:
    """One process to start: its name (also its log's), argv and readiness URL."""

    name: str
    argv: tuple[str, ...]
    ready_url: str | None = None


Credentials = Callable[[str, str | None], str]
"""The kubeconfig of a part by role (``vnpu-scheduler``, ``kubelet``, ``device-plugin``,
``exporter``) and node (None for the scheduler): one identity each on a real control plane."""


@dataclass(frozen=True, slots=True)
class Ports:
    """The loopback ports of one sandbox: one per listener, chosen before anything starts."""

    api: int
    scheduler: int
    prometheus: int
    device_plugins: dict[str, int]
    exporters: dict[str, int]

    def as_dict(self) -> dict[str, int]:
        ports = {"api": self.api, "scheduler": self.scheduler}
        if self.prometheus:
            ports["prometheus"] = self.prometheus
        for node, port in self.device_plugins.items():
            ports[f"device-plugin/{node}"] = port
        for node, port in self.exporters.items():
            ports[f"exporter/{node}"] = port
        return ports


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (outgoing connections take theirs there)."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text(encoding="ascii")
        return int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


class PortPicker:
    """Free loopback ports for one sandbox, each different, none reused.

    Ports come from below the kernel's ephemeral range, starting at a random place: a port the
    kernel hands out for a bind to port 0 is also one it may hand to the next outgoing
    connection, and a port picked here must stay free until its server binds it. Each port is
    checked by binding it; the probe sockets stay bound until ``close``, so the picker never
    returns one port twice and no other picker can take it meanwhile.
    """

    FIRST = 10000

    def __init__(self) -> None:
        self._held: list[socket.socket] = []
        self._last = max(_ephemeral_low() - 1, self.FIRST + 1)
        self._next = random.randrange(self.FIRST, self._last)

    def __call__(self, wanted: int = 0) -> int:
        if wanted:
            return wanted
        for _ in range(self._last - self.FIRST):
            port = self._next
            self._next = self.FIRST + (self._next + 1 - self.FIRST) % (self._last - self.FIRST)
            probe = socket.socket()
            try:
                probe.bind((LOOPBACK, port))
            except OSError:
                probe.close()
                continue
            self._held.append(probe)
            return port
        raise OSError(f"no free loopback port from {self.FIRST} to {self._last}")

    def close(self) -> None:
        for probe in self._held:
            probe.close()
        self._held.clear()


def free_ports(count: int) -> list[int]:
    """``count`` different free ports from one ``PortPicker``, for a test or a benchmark that
    starts its own listeners at once."""
    pick = PortPicker()
    try:
        return [pick() for _ in range(count)]
    finally:
        pick.close()


def choose_ports(
    nodes: Sequence[clusterfile.NodeSpec],
    pick: PortPicker,
    api: int = 0,
    prometheus: int | None = 0,
    exporters: bool = True,
) -> Ports:
    """Ports for every listener, all different; 0 picks a free one, None (Prometheus) none.

    Without ``exporters`` no node gets an exporter (and so no exporter port).
    """
    return Ports(
        api=pick(api),
        scheduler=pick(),
        prometheus=0 if prometheus is None else pick(prometheus),
        device_plugins={n.name: pick() for n in nodes},
        exporters={n.name: pick() for n in nodes} if exporters else {},
    )


def url(port: int, path: str = "") -> str:
    return f"http://{LOOPBACK}:{port}{path}"


def _python(module: str, *args: str) -> tuple[str, ...]:
    return (sys.executable, "-m", module, *args)


def services(
    where: layout.Layout,
    nodes: Sequence[clusterfile.NodeSpec],
    ports: Ports,
    prometheus: str | None,
    credentials: Credentials,
    scheduler_flags: Sequence[str] = (),
    dra: bool = False,
    scheduler: bool = True,
) -> list[Component]:
    """vnpu-scheduler (unless not ``scheduler``), every node's agents and Prometheus, in start
    order. Without vnpu-scheduler (a peer's places NPU pods), the device plugins decide for a
    pod bound without a device decision (``--place-undecided``), as vnpu's chart's presets for
    the peers set it (``devicePlugin.placeUndecided`` in values-volcano.yaml, values-hami.yaml).

    ``credentials`` gives each part its own kubeconfig; ``scheduler_flags`` are added to
    vnpu-scheduler's command line. ``dra``: DRA mode (the webhook's ``--mode dra``, and the
    DRA driver on each node instead of the device plugin).
    """
    vnpu_scheduler = Component(
        "vnpu-scheduler",
        _python(
            "vnpu_scheduler",
            "--kubeconfig",
            credentials("scheduler", None),
            "--host",
            LOOPBACK,
            "--port",
            str(ports.scheduler),
            # as the chart installs it in kube-system: the quota Leases and the teams
            "--lock-namespace",
            TENANTS_NAMESPACE,
            "--tenants-config",
            f"{TENANTS_NAMESPACE}/{TENANTS_CONFIG_MAP}",
            *(("--mode", "dra") if dra else ()),
            *scheduler_flags,
        ),
        url(ports.scheduler, "/readyz"),
    )
    out = [vnpu_scheduler] if scheduler else []
    for node in nodes:
        out.extend(node_agents(where, node, ports, credentials, dra, not scheduler))
    if prometheus is not None and ports.prometheus:
        data = where.prometheus / "data"
        argv = (
            prometheus,
            f"--config.file={where.prometheus / 'prometheus.yml'}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address={LOOPBACK}:{ports.prometheus}",
            "--web.enable-lifecycle",
        )
        out.append(Component("prometheus", argv, url(ports.prometheus, "/-/ready")))
    return out


def node_agents(
    where: layout.Layout,
    node: clusterfile.NodeSpec,
    ports: Ports,
    credentials: Credentials,
    dra: bool = False,
    place_undecided: bool = False,
) -> list[Component]:
    """The simulated kubelet, the device plugin (DRA mode: the DRA driver) and (when it has a
    port) the exporter of a node; ``place_undecided``: the plugin's ``--place-undecided``."""
    dirs = where.node(node.name)

    def kubeconfig_of(role: str) -> str:
        return credentials(role, node.name)

    kubeconfig = kubeconfig_of("kubelet")
    kubelet = _python(
        "vnpu_sandbox",
        "kubelet",
        "--node",
        node.name,
        "--kubeconfig",
        kubeconfig,
        "--device-plugin-dir",
        str(dirs.device_plugins),
        "--pod-resources-socket",
        str(dirs.pod_resources_socket),
        "--state-dir",
        str(dirs.kubelet_state),
        "--label",
        f"vnpu.io/chip-model={node.model}",
        # kube-apiserver times creates out while many nodes start at once.
        "--register-timeout",
        f"{REGISTER_TIMEOUT_SECONDS:g}",
        "--cdi-dir",
        str(dirs.cdi),
    )
    plugin = _python(
        "vnpu_device_plugin",
        "--node-name",
        node.name,
        "--backend",
        "sim",
        "--sim-dir",
        str(dirs.sim),
        "--device-plugin-dir",
        str(dirs.device_plugins),
        "--pod-resources-socket",
        str(dirs.pod_resources_socket),
        "--kubeconfig",
        kubeconfig_of("device-plugin"),
        "--state-dir",
        str(dirs.plugin_state),
        "--metrics-host",
        LOOPBACK,
        "--metrics-port",
        str(ports.device_plugins[node.name]),
        "--hami-vnpu-core" if node.soft else "--no-hami-vnpu-core",
        "--hami-core-dir",
        str(dirs.hami_core),
        "--hami-shared-dir",
        str(dirs.hami_shared),
        # The plugin may start before its kubelet has created the Node: publish again soon.
        f"--report-retry={PLUGIN_REPORT_RETRY_SECONDS:g}",
        *(("--place-undecided",) if place_undecided else ()),
    )
    agents = [Component(f"kubelet-{node.name}", kubelet)]
    if dra:
        agents.append(Component(f"dra-driver-{node.name}", _dra_driver(dirs, node, kubeconfig)))
    else:
        agents.append(
            Component(
                f"device-plugin-{node.name}",
                plugin,
                url(ports.device_plugins[node.name], "/healthz"),
            )
        )
    port = ports.exporters.get(node.name)
    if port is not None:
        exporter = _python(
            "vnpu_exporter",
            "--node-name",
            node.name,
            "--backend",
            "sim",
            "--sim-dir",
            str(dirs.sim),
            "--pod-resources-socket",
            str(dirs.pod_resources_socket),
            "--kubeconfig",
            kubeconfig_of("exporter"),
            "--device-plugin-state-dir",
            str(dirs.plugin_state),
            *(("--dra-state-dir", str(dirs.dra_state)) if dra else ()),
            "--host",
            LOOPBACK,
            "--port",
            str(port),
            *(f"--interval={group}={EXPORTER_REFRESH_SECONDS:g}" for group in EXPORTER_FAST_GROUPS),
        )
        agents.append(Component(f"exporter-{node.name}", exporter, url(port, "/healthz")))
    return agents


def _dra_driver(
    dirs: layout.NodeDirs, node: clusterfile.NodeSpec, kubeconfig: str
) -> tuple[str, ...]:
    """The DRA driver of a node, with the kubelet's identity: the Node authorizer lets a node
    manage its own ResourceSlices and read the claims of its pods."""
    return _python(
        "vnpu_dra_driver",
        "serve",
        "--node",
        node.name,
        "--sim-dir",
        str(dirs.sim),
        *(
            (
                "--soft",
                "--hami-core-dir",
                str(dirs.hami_core),
                "--hami-shared-dir",
                str(dirs.hami_shared),
            )
            if node.soft
            else ()
        ),
        "--kubelet-dir",
        str(dirs.root),
        "--cdi-dir",
        str(dirs.cdi),
        "--state-dir",
        str(dirs.dra_state),
        "--kubeconfig",
        kubeconfig,
        "--interval",
        f"{DRA_PUBLISH_SECONDS:g}",
    )


def write_chips(dirs: layout.NodeDirs, node: clusterfile.NodeSpec) -> None:
    """The simulated chips of a node (``chips.yaml``, read by the plugin and the exporter)."""
    dirs.sim.mkdir(parents=True, exist_ok=True)
    for path in (dirs.device_plugins, dirs.pod_resources_socket.parent, dirs.hami_core, dirs.cdi):
        path.mkdir(parents=True, exist_ok=True)
    chips = {"chip": node.model, "chips": node.chips, "server": node.server, "seed": node.name}
    (dirs.sim / "chips.yaml").write_text(yaml.safe_dump(chips, sort_keys=False), encoding="utf-8")


def longest_socket(where: layout.Layout, nodes: Sequence[clusterfile.NodeSpec]) -> Path | None:
    """The longest unix socket path the nodes will use, when it is too long for Linux."""
    paths = [where.node(n.name).device_plugins / f"vnpu-{n.common_word}.sock" for n in nodes] + [
        where.node(n.name).pod_resources_socket for n in nodes
    ]
    longest = max(paths, key=lambda p: len(str(p)))
    return longest if len(str(longest)) > layout.SOCKET_PATH_MAX else None
