"""The cluster of ``bench_scale.py``: a real control plane, KWOK nodes, vnpu's node agents.

``Cluster.start`` brings up, in a directory of its own, etcd, kube-apiserver,
kube-controller-manager and kube-scheduler (``vnpu_sandbox.platform.controlplane``, the
binaries of ``make k8s-bin``) and KWOK (``make kwok-bin``), which plays the kubelet of every
node annotated ``kwok.x-k8s.io/node=fake``. KWOK's Stage CRD and its default stages come from
the ``kustomize/`` directory of the KWOK module in the Go module cache, whose path
``scripts/kwok-bin.sh`` records beside the binary: nothing of KWOK's is kept in this
repository. In ``classic`` mode vnpu-scheduler runs as kube-scheduler's extender (the
chart's KubeSchedulerConfiguration and webhooks, as ``vnpu-sandbox up`` writes them), each
KWOK node carries the annotations vnpu's device plugin publishes and ``NodeAgents`` plays
that plugin for them through the API: the handshake renewed every 30 s, and after each bind
what Allocate writes (the pod's to-allocate entry erased, ``bind-phase: success``, the node
lock released). Optional real simulated nodes (the sandbox's kubelet and vnpu's device
plugin) run Allocate for real. In ``plain`` mode there is no vnpu at all: the chips are a
plain extended resource that kube-scheduler counts alone. In ``dra`` mode kube-scheduler, with
the same bare configuration as ``plain``, allocates the devices of vnpu's DRA driver: the
DeviceClasses are created before it starts, the nodes carry no chip resource (a node that
lists the extended resource is left to a device plugin), and ``scale_dra`` publishes each
node's ResourceSlices.

In the peers' modes (``PEER_MODES``) a peer's scheduler places the NPU pods and vnpu-scheduler
does not run: the nodes carry what vnpu's device plugin publishes and ``NodeAgents`` plays it,
as in ``classic``; the peer runs as ``vnpu-sandbox up --scheduler <peer>`` runs it, with the
charts ``make peer-charts`` renders and vnpu's device ConfigMap (what the peer's chart
installs is created before kube-scheduler starts, ``_install_peer``; its processes are
started by ``start_peer`` once the KWOK nodes exist); kube-scheduler runs beside it with the
bare configuration of ``plain``.

* ``volcano`` (the operator guide's "Topology 2", ``vnpu_sandbox.platform.volcano``):
  vc-controller-manager and vc-scheduler; ``start_peer`` returns once vc-scheduler has run a
  session, and ``report_again`` then writes every node's annotations again, as the plugin's
  next report would, which is when Volcano reads a node's chips.
* ``hami`` ("Topology 3", ``vnpu_sandbox.platform.hami``): HAMi's extender (which serves its
  webhook too) and the chart's own kube-scheduler calling it (profile ``hami-scheduler``);
  ``start_peer`` returns once HAMi has registered every node (it marks the handshake
  ``Requesting_``), and ``NodeAgents`` answers with its reports as the plugin does.

Every mode gets the same kube-scheduler settings (client QPS and burst raised) and the same
KWOK stages. The peers' clients are raised to the same unless ``chart_limits``:
vc-controller-manager (its chart: 50 QPS, burst 100), HAMi's extender (client-go's 5 QPS,
burst 10, through its ``--kube-qps``/``--kube-burst``, as its values file tells a busy cluster
to) and HAMi's kube-scheduler (its chart's configuration sets none: 50, 100); vc-scheduler
keeps its chart's 2000 QPS, burst 2000. HAMi's kube-scheduler also lets ``/metrics`` be read
without a token (``--authorization-always-allow-paths``), as the benchmark reads it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import ssl
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import kubernetes
import standin
import yaml

from vnpu_core import catalog, coordination, draclasses, nodes, protocol, topology
from vnpu_sandbox.platform import (
    clusterfile,
    components,
    controlplane,
    hami,
    layout,
    manifests,
    peers,
    probes,
    startup,
    volcano,
)

Json = dict[str, Any]
KWOK_VERSION = "v0.8.0"
KWOK_SELECTOR = ("kwok.x-k8s.io/node", "fake")
"""The annotation that hands a node to KWOK (``--manage-nodes-with-annotation-selector``)."""
KWOK_STAGES = "stage/fast"
"""KWOK's default stages (node-initialize, node-heartbeat-with-lease, pod-ready, pod-complete,
pod-delete), under the module's ``kustomize/``."""
KWOK_STAGE_CRD = "crd/bases/kwok.x-k8s.io_stages.yaml"
MODEL = "910B3"
CHIPS = 8
CLIENT_QPS = 5000
CLIENT_BURST = 10000
"""kube-scheduler's and kube-controller-manager's client rate limits: high enough that no
client-side limit caps a run (kube-scheduler's default is 50 QPS). vnpu-scheduler's client
has no rate limiter; its ``--api-threads`` bound how many calls run at once."""
VNPU_API_THREADS = 32
HANDSHAKE_SECONDS = 30.0
"""How often vnpu's device plugin renews its handshake (its ``--report-interval``)."""
NODE_LEASE_SECONDS = 40
"""A kubelet's default Lease duration; the holder renews it every quarter of that."""
MERGE = "application/merge-patch+json"
MODES = ("plain", "classic", "dra", "volcano", "hami")
PLUGIN_MODES = ("classic", "volcano", "hami")
"""The modes whose nodes carry what vnpu's device plugin publishes and whose pods its Allocate
(``NodeAgents``) serves."""
PEER_MODES = ("volcano", "hami")
"""The modes where a peer's scheduler places the NPU pods instead of vnpu-scheduler."""
PEER_CHARTS = Path(__file__).resolve().parents[1] / ".venv" / "peer-charts"
"""What ``make peer-charts`` renders: each peer's chart with ``deploy/peers/<peer>-values.yaml``
(``<peer>.yaml``) and vnpu's with ``values-<peer>.yaml`` (``vnpu-<peer>.yaml``, which holds the
device ConfigMap the peer reads the chip models from)."""
PEERS = {"volcano": volcano.BINARIES, "hami": hami.BINARIES}
"""Each peer's mode and the binaries ``make peers-bin`` builds for it."""
Peer = volcano.Volcano | hami.Hami
PEER_START_SECONDS = 180.0
PEER_START_SECONDS_PER_NODE = 0.6
"""How long a peer may take from its start to its first session (Volcano) or to having
registered every node (HAMi): the larger of the two. HAMi reads and writes every node once
per device kind it knows (14), at about 0.4 s per node here with its client limits raised."""
SERVER = "910b-8"


class ScaleError(Exception):
    """The benchmark cannot run (a binary missing, a component that does not start)."""


def kwok_root(version: str = KWOK_VERSION) -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vnpu" / "kwok" / version


def kwok_files() -> tuple[Path, Path]:
    """KWOK's binary and the module's ``kustomize/`` directory; ScaleError when missing."""
    root = kwok_root()
    binary = root / "bin" / "kwok"
    try:
        module = Path((root / "module-dir").read_text(encoding="utf-8").strip())
    except OSError:
        module = Path("/nonexistent")
    kustomize = module / "kustomize"
    if not os.access(binary, os.X_OK) or not (kustomize / KWOK_STAGES).is_dir():
        raise ScaleError(
            f"no kwok {KWOK_VERSION} in {root} (or its module source left the Go module "
            "cache): build it with `make kwok-bin` (scripts/kwok-bin.sh)"
        )
    return binary, kustomize


def peer_files(mode: str) -> tuple[peers.Build, list[Json], Json]:
    """The build, the rendered chart and vnpu's device ConfigMap a peer's mode runs with;
    ScaleError naming what to build or render when one is missing."""
    if mode not in PEERS:
        raise ValueError(f"no peer runs in mode {mode!r}")
    try:
        built = peers.build(mode, PEERS[mode])
        chart = peers.read_chart(PEER_CHARTS / f"{mode}.yaml")
        device = controlplane.device_config(PEER_CHARTS / f"vnpu-{mode}.yaml")
    except (peers.PeerError, controlplane.ControlPlaneError) as exc:
        raise ScaleError(f"{mode}: {exc} (`make peers-bin peer-charts`)") from exc
    return built, chart, device


def kustomize_resources(directory: Path) -> list[Path]:
    """The files a kustomization lists under ``resources``, directories followed."""
    document = yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))
    found: list[Path] = []
    for entry in document.get("resources") or []:
        path = (directory / entry).resolve()
        found.extend(kustomize_resources(path) if path.is_dir() else [path])
    return found


# -- the nodes --------------------------------------------------------------------------------


def chip_model() -> catalog.ChipModel:
    model = next((m for m in catalog.BUILTIN if m.name == MODEL), None)
    assert model is not None, f"no {MODEL} in the built-in catalog"
    return model


def _chip_uuid(node: str, index: int) -> str:
    """Five 8-hex-digit words, as vnpu's device plugin names a chip (its die id)."""
    digest = hashlib.sha256(f"{node}/{index}".encode()).hexdigest().upper()
    return "-".join(digest[i : i + 8] for i in range(0, 40, 8))


def plugin_annotations(node: str, model: catalog.ChipModel, chips: int = CHIPS) -> dict[str, str]:
    """What vnpu's device plugin publishes on its node: inventory, handshake, mode, server.

    Built as its publisher builds them (``vnpu_device_plugin.publisher.node_annotations``)
    from ``vnpu_core``; the grant report (``vnpu.io/granted-<CW>``) is left out, so the
    scheduler counts these nodes from the pods' annotations, as it does HAMi's plugin's.
    """
    registered = [
        protocol.RegisteredChip(
            id=_chip_uuid(node, index),
            index=index,
            count=model.split_count,
            devmem=model.memory_allocatable_mib,
            devcore=model.aicore,
            type=model.common_word,
            health=True,
            network_id=0 if index < CHIPS // 2 else 1,  # the 910 series' NetworkID
        )
        for index in range(chips)
    ]
    return {
        protocol.node_register_key(model.common_word): protocol.encode_node_register(registered),
        **handshake(model),
        protocol.SOFT_MODE_NODE_KEY: protocol.encode_soft_mode_node(False),
        nodes.SERVER_KIND_KEY: topology.default_kind(model, chips).value,
    }


def handshake(model: catalog.ChipModel) -> dict[str, str]:
    """The handshake as the plugin writes it now (``Reported_<local time>``)."""
    now = datetime.now().replace(microsecond=0)
    value = coordination.Handshake(coordination.HandshakeState.REPORTED, now)
    return {protocol.node_handshake_key(model.common_word): coordination.encode_handshake(value)}


def kwok_node(index: int, mode: str, model: catalog.ChipModel) -> Json:
    """A Node for KWOK to run: the chips in capacity (not in ``dra``: its ResourceSlices say
    them), vnpu's annotations in ``PLUGIN_MODES``."""
    name = f"kwok-{index:05d}"
    resources = {"cpu": "192", "memory": "1536Gi", "pods": "110"}
    # plain: whole chips counted by kube-scheduler; PLUGIN_MODES: the plugin's device ids
    if mode != "dra":
        chips = CHIPS if mode == "plain" else CHIPS * model.split_count
        resources[model.resource_name] = str(chips)
    annotations = {KWOK_SELECTOR[0]: KWOK_SELECTOR[1]}
    if mode in PLUGIN_MODES:
        annotations |= plugin_annotations(name, model)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": annotations,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "vnpu.io/chip-model": MODEL,
            },
        },
        # Pod addresses for KWOK's pod-ready stage: a /24 per node, 10.0.0.0/24 onwards.
        "spec": {"podCIDR": f"10.{index // 256 % 256}.{index % 256}.0/24"},
        "status": {"capacity": resources, "allocatable": resources},
    }


def real_node_specs(count: int, where: Path) -> tuple[clusterfile.NodeSpec, ...]:
    """``count`` simulated 910B3 nodes as a sandbox cluster file describes them."""
    if not count:
        return ()
    path = where / "real-nodes.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = [
        {"name": f"real-{i}", "chip": MODEL, "chips": CHIPS, "server": SERVER} for i in range(count)
    ]
    path.write_text(yaml.safe_dump({"nodes": entries}), encoding="utf-8")
    return clusterfile.read(path)


def _done(answer: Any) -> None:
    answer.drain_conn()
    answer.release_conn()


def publish(core: kubernetes.client.CoreV1Api, name: str, model: catalog.ChipModel) -> None:
    """One report of vnpu's device plugin on node ``name``: a merge patch of every annotation
    it publishes, the handshake with the time now."""
    notes = {"metadata": {"annotations": plugin_annotations(name, model)}}
    _done(core.patch_node(name, notes, _content_type=MERGE, _preload_content=False))


def handshakes(core: kubernetes.client.CoreV1Api, model: catalog.ChipModel) -> dict[str, str]:
    """Each KWOK node's handshake annotation as kube-apiserver holds it now."""
    key = protocol.node_handshake_key(model.common_word)
    answer = core.list_node(label_selector="type=kwok", _preload_content=False)
    return {
        item["metadata"]["name"]: (item["metadata"].get("annotations") or {}).get(key, "")
        for item in json.loads(answer.data)["items"]
    }


def report_again(api: kubernetes.client.ApiClient, names: Sequence[str]) -> None:
    """Every node's next report, now: its annotations written again with a new handshake, so
    each Node changes, as when vnpu's device plugin reports at its ``--report-interval``.

    The handshake's time has whole seconds: a node whose value a write left as it was (written
    within the same second as before) is written again a second later, so that every Node
    really changes. ScaleError when some never did."""
    core = kubernetes.client.CoreV1Api(api)
    model = chip_model()
    before = handshakes(core, model)
    left = list(names)
    with ThreadPoolExecutor(16, thread_name_prefix="report") as pool:
        for _attempt in range(3):
            list(pool.map(lambda name: publish(core, name, model), left))
            now = handshakes(core, model)
            left = [name for name in left if now.get(name) == before.get(name)]
            if not left:
                return
            time.sleep(1.0)
    raise ScaleError(f"{len(left)} nodes kept their handshake (first {left[0]})")


class NodeAgents:
    """vnpu's device plugin on every KWOK node, played through the API (``PLUGIN_MODES``).

    The handshake of each node is renewed every ``HANDSHAKE_SECONDS``, spread evenly over
    that time (one merge patch of every annotation, as the plugin's publisher writes them).
    ``pod_changed`` hears every pod event of the benchmark's watch; a pod bound to a KWOK
    node in ``bind-phase: allocating`` gets what the plugin's Allocate writes, then its node
    lock is released (``standin.release_lock``; under Volcano, which takes no lock here, that
    read of the Node finds none, as the plugin's own read after each Allocate does).
    """

    def __init__(self, api: kubernetes.client.ApiClient, names: Sequence[str]) -> None:
        self.core = kubernetes.client.CoreV1Api(api)
        self.model = chip_model()
        self.names = list(names)
        self.members = set(names)
        self.pool = ThreadPoolExecutor(16, thread_name_prefix="allocate")
        self.beats = ThreadPoolExecutor(4, thread_name_prefix="handshake")
        self.stopping = threading.Event()
        self.served: set[str] = set()
        self.guard = threading.Lock()
        self.errors: list[str] = []
        self.seconds: list[float] = []  # per Allocate: the pod seen allocating to lock released
        self.thread = threading.Thread(target=self._renew, name="handshakes", daemon=True)

    def __enter__(self) -> NodeAgents:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stopping.set()
        self.thread.join(timeout=HANDSHAKE_SECONDS)
        self.beats.shutdown(wait=True, cancel_futures=True)
        self.pool.shutdown(wait=True)

    def _renew(self) -> None:
        while not self.stopping.is_set():
            began = time.monotonic()
            for i, name in enumerate(self.names):
                due = began + HANDSHAKE_SECONDS * i / len(self.names)
                if self.stopping.wait(max(0.0, due - time.monotonic())):
                    return
                self.beats.submit(self._guarded, self._publish, name)
            self.stopping.wait(max(0.0, began + HANDSHAKE_SECONDS - time.monotonic()))

    def _publish(self, name: str) -> None:
        publish(self.core, name, self.model)

    def _guarded(self, work: Any, *args: Any) -> None:
        try:
            work(*args)
        except Exception as exc:  # counted and shown, never fatal to the run
            with self.guard:
                self.errors.append(f"{work.__name__}{args[:1]}: {exc}")

    def pod_changed(self, pod: Json) -> None:
        node = (pod.get("spec") or {}).get("nodeName")
        if node not in self.members:
            return
        notes = pod["metadata"].get("annotations") or {}
        if notes.get(protocol.BIND_PHASE_KEY) != protocol.BindPhase.ALLOCATING.value:
            return
        uid = pod["metadata"]["uid"]
        with self.guard:
            if uid in self.served:
                return
            self.served.add(uid)
        self.pool.submit(self._guarded, self._allocate, pod, time.monotonic())

    def _allocate(self, pod: Json, seen: float) -> None:
        meta = pod["metadata"]
        name, namespace, node = meta["name"], meta["namespace"], pod["spec"]["nodeName"]
        key = protocol.to_allocate_key(self.model.common_word)
        erased = protocol.erase_first_container(meta["annotations"][key], key=key, count=1)
        update = {key: erased, protocol.BIND_PHASE_KEY: protocol.BindPhase.SUCCESS.value}
        body = {"metadata": {"annotations": update}}
        _done(
            self.core.patch_namespaced_pod(
                name, namespace, body, _content_type=MERGE, _preload_content=False
            )
        )
        standin.release_lock(self.core, node, f",{namespace},{name}")
        with self.guard:
            self.seconds.append(time.monotonic() - seen)


# -- the processes ----------------------------------------------------------------------------


@dataclasses.dataclass
class Cluster:
    """One run's processes and files under ``root``; ``start`` then ``stop``."""

    root: Path
    mode: str
    real_nodes: int = 0
    chart_limits: bool = False
    """Run the peer's processes with the client QPS and burst of its chart."""
    where: layout.Layout = dataclasses.field(init=False)
    plane: controlplane.Plane = dataclasses.field(init=False)
    run: startup.Startup = dataclasses.field(init=False)
    specs: tuple[clusterfile.NodeSpec, ...] = ()
    vnpu_port: int = 0
    kwok_port: int = 0
    plugin_ports: dict[str, int] = dataclasses.field(default_factory=dict)
    peer: Peer | None = None
    device_config: Json = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        self.where = layout.Layout.at(self.root)
        self.specs = real_node_specs(self.real_nodes, self.root)
        found = peer_files(self.mode) if self.mode in PEER_MODES else None
        pick = components.PortPicker()
        try:
            ports = controlplane.Ports.choose(pick)
            self.vnpu_port, self.kwok_port = pick(), pick()
            self.plugin_ports = {spec.name: pick() for spec in self.specs}
            if found is not None:
                built, chart, self.device_config = found
                if self.mode == "volcano":
                    self.peer = volcano.Volcano.at(
                        self.where, built, chart, volcano.Ports.choose(pick)
                    )
                else:
                    self.peer = hami.Hami.at(self.where, built, chart, hami.Ports.choose(pick))
        finally:
            pick.close()
        self.plane = controlplane.Plane.at(self.where, ports, controlplane.binaries())
        record = layout.Record(
            api_url=self.plane.api_url,
            kubeconfig=str(self.where.kubeconfig),
            cluster_file="",
            nodes=list(self.specs),
            ports=self.plane.ports.as_dict() | (self.peer.ports.as_dict() if self.peer else {}),
        )
        self.run = startup.Startup(self.where, record)

    @property
    def tls(self) -> ssl.SSLContext:
        assert self.run.tls is not None
        return self.run.tls

    def start(self, timeout: float = 300.0) -> None:
        """Everything up and ready. Raises ScaleError naming what did not start."""
        kwok, kustomize = kwok_files()
        try:
            self._start(kwok, kustomize, timeout)
        except (startup.StartError, controlplane.ControlPlaneError) as exc:
            raise ScaleError(str(exc)) from exc

    def _start(self, kwok: Path, kustomize: Path, timeout: float) -> None:
        plane, run, where = self.plane, self.run, self.where
        deadline = time.monotonic() + timeout

        def left() -> float:
            return max(deadline - time.monotonic(), 1.0)

        controlplane.prepare(plane, where, self.specs)
        run.tls = controlplane.tls_context(plane.pki)
        run.start(controlplane.etcd(plane))
        run.wait_ready(left(), names=["etcd"])
        run.start(controlplane.api_server(plane))
        run.wait_ready(left(), names=["kube-apiserver"])
        if self.mode == "classic":
            webhooks = manifests.webhook_configurations(
                controlplane.https(plane.ports.webhook), controlplane.ca_bundle(plane)
            )
            for document in [*controlplane.rbac_documents(), *webhooks]:
                controlplane.create(plane.api_url, self.tls, document)
        if self.mode == "dra":  # before kube-scheduler starts, as the chart installs them
            for document in draclasses.device_classes(catalog.BUILTIN):
                controlplane.create(plane.api_url, self.tls, document)
        if self.peer is not None:
            self._install_peer(left())
        self._kwok_objects(kustomize)
        config = self.scheduler_config()
        where.kube_scheduler_config.write_text(yaml.safe_dump(config, sort_keys=False))
        manager = controlplane.controller_manager(plane)
        limits = (f"--kube-api-qps={CLIENT_QPS}", f"--kube-api-burst={CLIENT_BURST}")
        run.start(dataclasses.replace(manager, argv=manager.argv + limits))
        run.start(controlplane.scheduler(plane, where.kube_scheduler_config))
        run.start(self._kwok(kwok))
        if self.mode == "classic":
            for component in self._vnpu():
                run.start(component)
        extra = None
        if self.specs:
            specs = self.specs

            def extra() -> dict[str, str]:
                return probes.node_problems(plane.api_url, specs, self.tls)

        run.wait_ready(left(), extra=extra)

    def _install_peer(self, timeout: float) -> None:
        """What ``vnpu-sandbox up --scheduler <peer>`` creates before kube-scheduler starts:
        vnpu's device ConfigMap, then the peer's namespace, CRDs, service accounts, roles and
        ConfigMaps (HAMi's: and its webhook configuration); then waits until kube-apiserver
        serves the CRDs."""
        plane, peer = self.plane, self.peer
        if isinstance(peer, volcano.Volcano):
            documents = [self.device_config, *volcano.install_documents(peer)]
        else:
            assert peer is not None
            name = self.device_config["metadata"]["name"]
            bundle = controlplane.ca_bundle(plane)
            documents = [self.device_config, *hami.install_documents(peer, bundle, name)]
        for document in documents:
            controlplane.create(plane.api_url, self.tls, document)
        crds = [d["metadata"]["name"] for d in documents if d["kind"] == "CustomResourceDefinition"]
        self.run.wait_ready(
            timeout,
            names=[],
            extra=lambda: controlplane.unestablished(plane.api_url, self.tls, crds),
        )

    def start_peer(self, nodes: Sequence[str], timeout: float | None = None) -> None:
        """The peer's processes, started once the ``nodes`` exist (as the sandbox starts them
        once every node has published its chips), each with a fresh token of its chart's
        service account. Volcano: returns once both answer, its ``default`` queue exists and
        vc-scheduler has run a session. HAMi: once both answer and the extender has registered
        every node. ``timeout``: by default ``PEER_START_SECONDS``, or
        ``PEER_START_SECONDS_PER_NODE`` per node when that is longer. Raises ScaleError."""
        if timeout is None:
            timeout = max(PEER_START_SECONDS, PEER_START_SECONDS_PER_NODE * len(nodes))
        try:
            if isinstance(self.peer, volcano.Volcano):
                self._start_volcano(self.peer, timeout)
            else:
                assert self.peer is not None
                self._start_hami(self.peer, nodes, timeout)
        except peers.PeerError as exc:
            raise ScaleError(f"{self.mode}: {exc}") from exc
        except startup.StartError as exc:
            raise ScaleError(str(exc)) from exc

    def _start_volcano(self, peer: volcano.Volcano, timeout: float) -> None:
        plane, run = self.plane, self.run
        volcano.prepare(peer, plane.pki.ca.cert, plane.api_url, self.tls)
        names = []
        limits = (f"--kube-api-qps={CLIENT_QPS}", f"--kube-api-burst={CLIENT_BURST}")
        for found in volcano.components_(peer, plane.ports.api):
            raised = found.name == volcano.CONTROLLERS and not self.chart_limits
            run.start(dataclasses.replace(found, argv=found.argv + limits) if raised else found)
            names.append(found.name)

        def waiting() -> dict[str, str]:
            found = volcano.problems(plane.api_url, self.tls)
            if not found and not volcano.sessions(peer):
                found = {volcano.SCHEDULER: "no scheduling session yet"}
            return found

        run.wait_ready(timeout, names=names, extra=waiting)

    def _start_hami(self, peer: hami.Hami, nodes: Sequence[str], timeout: float) -> None:
        plane, run = self.plane, self.run
        hami.prepare(peer, plane.pki.ca.cert, plane.api_url, self.tls, self.device_config)
        if not self.chart_limits:  # HAMi's kube-scheduler reads its limits from its file
            config = yaml.safe_load(peer.scheduler_config.read_text(encoding="utf-8"))
            limits = {"qps": CLIENT_QPS, "burst": CLIENT_BURST}
            config["clientConnection"] = (config.get("clientConnection") or {}) | limits
            peer.scheduler_config.write_text(yaml.safe_dump(config, sort_keys=False))
        extender, kube = hami.components_(
            peer, plane.ports.api, plane.pki.serving, plane.bins["kube-scheduler"]
        )
        if not self.chart_limits:
            raised = (f"--kube-qps={CLIENT_QPS}", f"--kube-burst={CLIENT_BURST}")
            extender = dataclasses.replace(extender, argv=extender.argv + raised)
        scrape = ("--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",)
        kube = dataclasses.replace(kube, argv=kube.argv + scrape)
        for component in (extender, kube):
            run.start(component)
        model = chip_model()
        specs = [
            clusterfile.NodeSpec(name, MODEL, model.common_word, CHIPS, SERVER, False)
            for name in nodes
        ]
        seen: set[str] = set()
        run.wait_ready(
            timeout,
            names=[extender.name, kube.name],
            extra=lambda: hami.registered(plane.api_url, self.tls, specs, seen),
        )

    def scheduler_config(self) -> Json:
        """The chart's KubeSchedulerConfiguration (``classic``) or a bare one (``plain``,
        ``dra``, the peers': kube-scheduler's default plugins, DynamicResources among
        them)."""
        if self.mode == "classic":
            document = manifests.kube_scheduler_config(components.url(self.vnpu_port))
        else:
            document = {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "leaderElection": {"leaderElect": False},
                "profiles": [{"schedulerName": "default-scheduler"}],
            }
        config = controlplane.scheduler_config(self.plane, document)
        config["clientConnection"] |= {"qps": CLIENT_QPS, "burst": CLIENT_BURST}
        return config

    def kubectl(self, *args: str) -> None:
        argv = [str(self.plane.bins["kubectl"]), f"--kubeconfig={self.where.kubeconfig}", *args]
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
        if done.returncode:
            raise ScaleError(f"kubectl {' '.join(args[:2])} failed: {done.stderr.strip()}")

    def _kwok_objects(self, kustomize: Path) -> None:
        """KWOK's Stage CRD, then its default stages, from the module's kustomize/."""
        self.kubectl("apply", "--server-side", "-f", str(kustomize / KWOK_STAGE_CRD))
        self.kubectl(
            "wait", "--for=condition=Established", "crd/stages.kwok.x-k8s.io", "--timeout=60s"
        )
        stages = kustomize_resources(kustomize / KWOK_STAGES)
        self.kubectl("apply", *(f"--filename={path}" for path in stages))

    def _kwok(self, binary: Path) -> components.Component:
        home = self.root / "kwok-home"  # so that no ~/.kwok/kwok.yaml of the user's is read
        home.mkdir(parents=True, exist_ok=True)
        argv = (
            "env",
            f"HOME={home}",
            str(binary),
            f"--kubeconfig={self.where.kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_SELECTOR[0]}={KWOK_SELECTOR[1]}",
            "--enable-crds=Stage",
            f"--server-address={components.LOOPBACK}:{self.kwok_port}",
            f"--node-ip={components.LOOPBACK}",
            # Leases renewed every 10 s, as a kubelet does (KWOK keeps none unless told); the
            # node-heartbeat-with-lease stage refreshes the conditions only every ten minutes
            f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
        )
        return components.Component("kwok", argv, components.url(self.kwok_port, "/healthz"))

    def _vnpu(self) -> list[components.Component]:
        """vnpu-scheduler (extender and webhooks), then the real simulated nodes' agents."""
        ports = components.Ports(
            api=self.plane.ports.api,
            scheduler=self.vnpu_port,
            prometheus=0,
            device_plugins=self.plugin_ports,
            exporters={},
        )
        credentials = controlplane.credentials(self.plane)
        found = components.services(
            self.where,
            self.specs,
            ports,
            None,
            credentials=credentials,
            scheduler_flags=controlplane.scheduler_flags(self.plane),
        )
        scheduler = found[0]
        threads = ("--api-threads", str(VNPU_API_THREADS))
        for spec in self.specs:
            components.write_chips(self.where.node(spec.name), spec)
        return [dataclasses.replace(scheduler, argv=scheduler.argv + threads), *found[1:]]

    def stop(self) -> None:
        self.run.stop_all()

    # -- what the benchmark reads -----------------------------------------------------------

    def client(self, pool: int = 48) -> kubernetes.client.ApiClient:
        config = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(
            config_file=str(self.where.kubeconfig), client_configuration=config
        )
        config.connection_pool_maxsize = pool
        return kubernetes.client.ApiClient(config)

    def pids(self) -> dict[str, int]:
        """Each process by its name (Volcano's by their binaries', not their charts')."""
        binaries = {volcano.SCHEDULER: "vc-scheduler", volcano.CONTROLLERS: "vc-controller-manager"}
        return {binaries.get(p.name, p.name): p.pid for p in self.run.record.processes}

    def metrics(self, which: str) -> str:
        """The Prometheus text of ``vnpu-scheduler``, ``vc-scheduler``, ``hami-kube-scheduler``
        (HAMi's own kube-scheduler) or ``kube-scheduler``."""
        if which == "vnpu-scheduler":
            url, context = components.url(self.vnpu_port, "/metrics"), None
        elif which == "vc-scheduler":
            assert isinstance(self.peer, volcano.Volcano)
            url = components.url(self.peer.ports.scheduler_metrics, "/metrics")
            context = None
        elif which == "hami-kube-scheduler":
            assert isinstance(self.peer, hami.Hami)
            url = controlplane.https(self.peer.ports.kube_scheduler, "/metrics")
            context = self.tls
        else:
            url = controlplane.https(self.plane.ports.scheduler, "/metrics")
            context = self.tls
        with urllib.request.urlopen(url, timeout=60, context=context) as answer:
            return str(answer.read().decode("utf-8", errors="replace"))


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """User + system CPU seconds so far of each named process (this one as ``bench``)."""
    ticks = os.sysconf("SC_CLK_TCK")
    found: dict[str, float] = {}
    for name, pid in pids.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[name] = (int(fields[11]) + int(fields[12])) / ticks
    times = os.times()
    found["bench"] = times.user + times.system
    return found


def machine_cpu_seconds() -> float:
    """CPU seconds every process on the machine has used since boot (``/proc/stat``)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    busy = sum(int(v) for i, v in enumerate(fields) if i not in (3, 4))  # not idle, iowait
    return busy / os.sysconf("SC_CLK_TCK")


def iter_events(stream: Any) -> Iterator[Json]:
    """The events of a watch answer, one JSON document per line."""
    for line in stream:
        if line.strip():
            yield json.loads(line)


# -- Prometheus text ---------------------------------------------------------------------------

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of the metric ``name`` in Prometheus text: (labels, value)."""
    found = []
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        match = _SAMPLE.match(line)
        if match and match.group(1) == name:
            labels = dict(_LABEL.findall(match.group(2) or ""))
            found.append((labels, float(match.group(3))))
    return found


def histogram(
    before: str, after: str, name: str, **wanted: str
) -> tuple[list[tuple[float, float]], float]:
    """The buckets (upper bound, cumulative count) and sum of ``name`` gained between scrapes."""

    def read(text: str) -> tuple[dict[float, float], float]:
        buckets: dict[float, float] = {}
        for labels, value in samples(text, f"{name}_bucket"):
            if all(labels.get(k) == v for k, v in wanted.items()):  # summed over the rest
                le = float(labels["le"])
                buckets[le] = buckets.get(le, 0.0) + value
        total = sum(
            v
            for labels, v in samples(text, f"{name}_sum")
            if all(labels.get(k) == w for k, w in wanted.items())
        )
        return buckets, total

    (old, old_sum), (new, new_sum) = read(before), read(after)
    gained = sorted((le, count - old.get(le, 0.0)) for le, count in new.items())
    return gained, new_sum - old_sum


def quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """``histogram_quantile``: linear within the bucket holding the q-th observation."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower  # beyond the last finite bound: that bound, as Prometheus says
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower
