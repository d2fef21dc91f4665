"""Fixtures for the device plugin's tests: kube-apiserver, a simulated kubelet, a simulated node.

Everything runs over real transports: the session's kube-apiserver (the root conftest's
``kube_plane``; each test gets a namespace of its own from ``kube_namespace``, and the node,
which is cluster-scoped, is deleted when the test ends) over HTTPS with the admin's client
certificate, the simulated kubelet (``vnpu_sandbox.kubelet``) on unix sockets, the plugin's
gRPC server on its own socket, the simulated chips in a directory. Socket paths must stay
under ~100 bytes, so socket directories are made under /tmp directly.

``Cluster`` is the tests' own view of the API: create pods in the test's namespace, place
them as a scheduler would (annotations inside the Binding, with HAMi's owner lock or
Volcano's bare one), read them back, wait for a condition. ``FaultProxy`` sits between the
plugin and the API when a test wants the API to fail.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc
import kubernetes
import pytest
import yaml

from vnpu_core import coordination, protocol
from vnpu_device_plugin import plugin, settings
from vnpu_kubelet_api.deviceplugin.v1beta1 import api_pb2_grpc
from vnpu_npu.sim import backend as sim_backend
from vnpu_sandbox.kubelet import apiclient, kubelet, nodestatus

Json = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
NODE = "npu-node-1"
CW = "Ascend310P"
RESOURCE = "huawei.com/Ascend310P"


def wait_for(check: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll ``check`` until it returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


@dataclass(frozen=True)
class Grant:
    """One device the scheduler gives a container: a chip (physical id) and what of it."""

    chip: int
    template: str | None = None  # None: a whole chip (or a soft slice with memory/cores)
    memory: int = 0
    cores: int = 0


class Cluster:
    """The tests' client of the API, as the admin; pods go to ``namespace`` unless told."""

    def __init__(self, kubeconfig: Path, namespace: str, sim_dir: Path) -> None:
        self.namespace = namespace
        self.sim_dir = sim_dir
        self.client = apiclient.client_from_kubeconfig(str(kubeconfig))
        self.core = kubernetes.client.CoreV1Api(self.client)

    def close(self) -> None:
        apiclient.close_client(self.client)

    def uuid(self, chip: int) -> str:
        return sim_backend.SimBackend(self.sim_dir).chips()[chip].uuid

    def node(self, name: str = NODE) -> Json:
        data: Json = json.loads(self.core.read_node(name, _preload_content=False).data)
        return data

    def node_annotations(self, name: str = NODE) -> dict[str, str]:
        return dict(self.node(name)["metadata"].get("annotations") or {})

    def annotate_node(self, annotations: dict[str, str | None], name: str = NODE) -> None:
        body = {"metadata": {"annotations": annotations}}
        self.core.patch_node(name, body, _content_type=MERGE_PATCH)

    def pod(self, name: str, namespace: str | None = None) -> Json:
        data: Json = json.loads(
            self.core.read_namespaced_pod(
                name, namespace or self.namespace, _preload_content=False
            ).data
        )
        return data

    def annotations(self, name: str, namespace: str | None = None) -> dict[str, str]:
        return dict(self.pod(name, namespace)["metadata"].get("annotations") or {})

    def phase(self, name: str, namespace: str | None = None) -> str:
        return str(self.pod(name, namespace)["status"].get("phase", ""))

    def create_pod(
        self,
        name: str,
        containers: Sequence[tuple[str, int]],
        *,
        init: Sequence[tuple[str, int]] = (),
        annotations: dict[str, str] | None = None,
        namespace: str | None = None,
        resource: str = RESOURCE,
    ) -> Json:
        """A pod whose containers (name, device count) ask for ``resource``."""

        def spec(name: str, count: int) -> Json:
            limits = {resource: str(count)} if count else {}
            return {"name": name, "image": "busybox", "resources": {"limits": limits}}

        body: Json = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"containers": [spec(n, c) for n, c in containers]},
        }
        if init:
            body["spec"]["initContainers"] = [spec(n, c) for n, c in init]
        created: Json = json.loads(
            self.core.create_namespaced_pod(
                namespace or self.namespace, body, _preload_content=False
            ).data
        )
        return created

    def decision(
        self,
        grants: Sequence[Sequence[Grant]],
        *,
        soft: bool = False,
        word: str = CW,
        node: str = NODE,
    ) -> dict[str, str]:
        """The annotations a scheduler writes for ``grants`` (one list per annotation entry)."""
        entries = [
            [
                protocol.DeviceEntry(self.uuid(g.chip), word, g.memory, g.cores if soft else 0)
                for g in container
            ]
            for container in grants
        ]
        runtime = [
            protocol.RuntimeInfo(
                self.uuid(g.chip), g.template, g.memory if soft or g.template else 0, g.cores
            )
            for container in grants
            for g in container
        ]
        devices = protocol.encode_devices(entries)
        now = str(int(time.time()))
        return {
            protocol.to_allocate_key(word): devices,
            protocol.allocated_key(word): devices,
            protocol.runtime_key(word): protocol.encode_runtime(runtime),
            protocol.VGPU_NODE_KEY: node,
            protocol.VGPU_TIME_KEY: now,
            protocol.BIND_TIME_KEY: now,
            protocol.BIND_PHASE_KEY: protocol.BindPhase.ALLOCATING.value,
        }

    def lock(self, owner: tuple[str, str] | None, node: str = NODE) -> str:
        """Take the node lock as HAMi (``owner`` = namespace, pod) or Volcano (None) does."""
        now = datetime.now(UTC).astimezone()
        if owner is None:
            value = coordination.encode_lock(coordination.NodeLock(now))
        else:
            value = coordination.encode_lock(coordination.NodeLock(now, owner[0], owner[1]))
        self.annotate_node({protocol.NODE_LOCK_KEY: value}, node)
        return value

    def bind(
        self, name: str, annotations: dict[str, str], node: str = NODE, namespace: str | None = None
    ) -> None:
        """Bind the pod with ``annotations`` in the Binding (one write, as vnpu and Volcano do)."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "annotations": annotations},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self.core.create_namespaced_pod_binding(
            name, namespace or self.namespace, body, _preload_content=False
        )

    def place(
        self,
        name: str,
        grants: Sequence[Sequence[Grant]],
        *,
        containers: Sequence[tuple[str, int]] | None = None,
        init: Sequence[tuple[str, int]] = (),
        lock: str = "owner",
        soft: bool = False,
        annotations: dict[str, str] | None = None,
        namespace: str | None = None,
    ) -> None:
        """Create a pod and place it like a scheduler: lock (owner, bare or none), then bind."""
        namespace = namespace or self.namespace
        if containers is None:
            containers = [(f"c{i}", len(g)) for i, g in enumerate(grants)]
        extra = dict(annotations or {})
        if soft:
            extra[protocol.VNPU_MODE_KEY] = protocol.SOFT_MODE_VALUE
        self.create_pod(name, containers, init=init, annotations=extra, namespace=namespace)
        if lock == "owner":
            self.lock((namespace, name))
        elif lock == "bare":
            self.lock(None)
        self.bind(name, self.decision(grants, soft=soft), namespace=namespace)

    def set_phase(self, name: str, phase: str, namespace: str | None = None) -> None:
        body = {"status": {"phase": phase}}
        self.core.patch_namespaced_pod_status(
            name, namespace or self.namespace, body, _content_type=MERGE_PATCH
        )

    def delete_pod(self, name: str, namespace: str | None = None, *, force: bool = False) -> None:
        """Delete the pod as ``kubectl delete`` does: gracefully, so a pod bound to a node
        stays (with a deletionTimestamp) until its kubelet confirms. ``force``: gone at once
        (grace period 0), as with ``--force``, for a node whose kubelet does not run."""
        self.core.delete_namespaced_pod(
            name, namespace or self.namespace, grace_period_seconds=0 if force else None
        )

    def gone(self, name: str, namespace: str | None = None) -> bool:
        """Whether the pod has left the API."""
        try:
            self.core.read_namespaced_pod(name, namespace or self.namespace, _preload_content=False)
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    def event_list(self) -> list[Json]:
        """Every Event in the namespace."""
        listed = json.loads(
            self.core.list_namespaced_event(self.namespace, _preload_content=False).data
        )
        return list(listed.get("items") or [])

    def events(self, name: str) -> list[str]:
        return [
            str(e.get("message", ""))
            for e in self.event_list()
            if (e.get("involvedObject") or {}).get("name") == name
        ]


@dataclass
class Fault:
    """Answer ``status`` to the next ``times`` requests matching ``method`` and ``path``.

    With ``after`` the request still reaches the API and only the answer is replaced, as
    when a reply is lost on the way back.
    """

    method: str
    path: str  # a regular expression searched in the request path
    status: int
    times: int = 1
    after: bool = False
    hits: int = 0


class FaultProxy:
    """A plain-HTTP proxy on loopback in front of kube-apiserver that injects error answers.

    The plugin reaches it through the kubeconfig ``write_kubeconfig`` writes, which carries no
    credentials: the proxy sends every request on over TLS as the admin, with the plane's
    client certificate. Watch requests (``watch=true``) that get no fault are relayed as they
    stream, chunk by chunk, so the plugin's pod watch works through the proxy too. A 410
    injected into a watch is answered as kube-apiserver answers a watch from a revision it no
    longer keeps: 200, then one ERROR event whose Status has code 410. ``rewrite`` alters what
    the API answers (watches aside) on the way back, as a broken or hostile API server would.
    """

    def __init__(self, plane: Any) -> None:
        upstream = urlsplit(plane.url)
        self._host = upstream.hostname or "127.0.0.1"
        self._port = upstream.port or 443
        self._tls: ssl.SSLContext = plane.tls
        self.faults: list[Fault] = []
        self.rewrites: list[tuple[bytes, bytes]] = []
        self.requests: list[tuple[str, str, int]] = []
        self._lock = threading.Lock()
        self._streams: set[http.client.HTTPSConnection] = set()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                watch = "watch=true" in self.path
                fault = proxy._match(self.command, self.path)
                if fault is not None and not fault.after:
                    if watch and fault.status == 410:
                        self._expire()
                    else:
                        self._fail(fault.status)
                    return
                if watch:
                    self._relay(body)
                    return
                status, headers, data = proxy._forward(self.command, self.path, self.headers, body)
                if fault is not None:
                    self._fail(fault.status)
                    return
                for old, new in list(proxy.rewrites):
                    data = data.replace(old, new)
                proxy.requests.append((self.command, self.path, status))
                self.send_response(status)
                for key, value in headers:
                    if key.lower() not in ("transfer-encoding", "content-length", "connection"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _relay(self, body: bytes) -> None:
                """Pass a streaming answer on as it arrives (chunked), until either side ends."""
                upstream = proxy._connection(timeout=None)
                with proxy._lock:
                    proxy._streams.add(upstream)
                self.close_connection = True
                try:
                    upstream.request(
                        self.command, self.path, body=body or None, headers=_forwarded(self.headers)
                    )
                    response = upstream.getresponse()
                    proxy.requests.append((self.command, self.path, response.status))
                    self.send_response(response.status)
                    for key, value in response.getheaders():
                        if key.lower() not in ("transfer-encoding", "content-length", "connection"):
                            self.send_header(key, value)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    while chunk := response.read1(65536):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except (OSError, http.client.HTTPException):
                    pass  # the plugin closed its watch, or the proxy or the API went away
                finally:
                    with proxy._lock:
                        proxy._streams.discard(upstream)
                    upstream.close()

            def _expire(self) -> None:
                """Open the watch, then end it as kube-apiserver does for a compacted revision."""
                proxy.requests.append((self.command, self.path, 410))
                event = {
                    "type": "ERROR",
                    "object": _status(410, "Expired", "too old resource version"),
                }
                data = json.dumps(event).encode() + b"\n"
                self.close_connection = True
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _fail(self, status: int) -> None:
                proxy.requests.append((self.command, self.path, status))
                reason = {
                    409: "Conflict",
                    410: "Expired",
                    500: "InternalError",
                    503: "ServiceUnavailable",
                }.get(status, "Failure")
                data = json.dumps(_status(status, reason, f"injected {status}")).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _handle

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def write_kubeconfig(self, path: Path, namespace: str) -> Path:
        """A kubeconfig for the proxy, without credentials, defaulting to ``namespace``."""
        name = "fault-proxy"
        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": {"server": self.url}}],
            "users": [{"name": name, "user": {}}],
            "contexts": [
                {"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}
            ],
            "current-context": name,
        }
        path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
        return path

    def inject(
        self, method: str, path: str, status: int, times: int = 1, after: bool = False
    ) -> Fault:
        fault = Fault(method, path, status, times, after)
        with self._lock:
            self.faults.append(fault)
        return fault

    def rewrite(self, old: str, new: str) -> None:
        """Replace ``old`` with ``new`` in every answer from now on (watches aside)."""
        self.rewrites.append((old.encode(), new.encode()))

    def _match(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if (
                    fault.hits < fault.times
                    and fault.method == method
                    and re.search(fault.path, path)
                ):
                    fault.hits += 1
                    return fault
        return None

    def _connection(self, timeout: float | None) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            self._host, self._port, timeout=timeout, context=self._tls
        )

    def _forward(
        self, method: str, path: str, headers: Any, body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        connection = self._connection(timeout=30)
        try:
            connection.request(method, path, body=body or None, headers=_forwarded(headers))
            response = connection.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            connection.close()

    def close(self) -> None:
        """Stop serving and end the watches still relayed (their upstream side too)."""
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            streams = list(self._streams)
        for connection in streams:
            if connection.sock is not None:
                with contextlib.suppress(OSError):  # it ended by itself meanwhile
                    connection.sock.shutdown(socket.SHUT_RDWR)


def _forwarded(headers: Any) -> dict[str, str]:
    """The request's headers to send on: not the hop's own, and no compression asked for, so
    answers pass (and are rewritten) as plain JSON."""
    dropped = ("host", "connection", "accept-encoding")
    return {k: v for k, v in headers.items() if k.lower() not in dropped}


def _status(code: int, reason: str, message: str) -> Json:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def write_node(
    sim_dir: Path, chip: str = "310P3", chips: int = 4, server: str | None = None, **extra: Any
) -> Path:
    sim_dir.mkdir(parents=True, exist_ok=True)
    doc: Json = {"chip": chip, "chips": chips, "seed": "device-plugin-tests", **extra}
    if server:
        doc["server"] = server
    (sim_dir / "chips.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    sim_backend.SimBackend(sim_dir)  # creates the state file
    return sim_dir


@dataclass
class Node:
    """One test node: directories, the test's namespace (an ``apiplane.Namespace``), the
    API, and (once started) the kubelet and the plugin. ``kubeconfig`` is the plugin's."""

    root: Path
    space: Any
    kubeconfig: Path
    api: Cluster
    channels: list[grpc.Channel] = field(default_factory=list)
    kubelet: kubelet.Kubelet | None = None
    plugin: plugin.Plugin | None = None
    proxy: FaultProxy | None = None

    @property
    def namespace(self) -> str:
        """The test's namespace, where its pods are."""
        return str(self.space.name)

    def bind_by_hand(self, name: str, annotations: dict[str, str] | None = None) -> None:
        """Create pod ``name`` bound to this node by its own spec, past the scheduler (the
        webhook-skip label, ``spec.nodeName``), asking for one device, with ``annotations``
        of its own (none: no decision at all)."""
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": {protocol.WEBHOOK_IGNORE_KEY: protocol.WEBHOOK_IGNORE_VALUE},
                "annotations": annotations or {},
            },
            "spec": {
                "nodeName": NODE,
                "containers": [
                    {"name": "c0", "image": "busybox", "resources": {"limits": {RESOURCE: "1"}}}
                ],
            },
        }
        self.api.core.create_namespaced_pod(self.namespace, body, _preload_content=False)

    def through_proxy(self) -> FaultProxy:
        """From now on the plugin reaches the API through a fault-injecting proxy."""
        self.proxy = FaultProxy(self.space.plane)
        self.kubeconfig = self.proxy.write_kubeconfig(
            self.root / "kubeconfig-proxy", self.namespace
        )
        return self.proxy

    def stub(self) -> api_pb2_grpc.DevicePluginStub:
        """A client of the plugin's own socket (as kubelet dials it)."""
        channel = grpc.insecure_channel(f"unix://{self.plugin_dir / 'vnpu-Ascend310P.sock'}")
        self.channels.append(channel)
        return api_pb2_grpc.DevicePluginStub(channel)

    def sim(self) -> sim_backend.SimBackend:
        return sim_backend.SimBackend(self.sim_dir)

    def vnpus(self) -> list[tuple[int, int, str]]:
        """Every vNPU of the simulated node: (chip, vNPU id, template)."""
        sim = self.sim()
        return [(v.phy_id, v.vnpu_id, v.template) for c in sim.chips() for v in sim.vnpus(c.phy_id)]

    def ledger(self) -> list[Json]:
        path = self.state_dir / "ledger.json"
        if not path.exists():
            return []
        records: list[Json] = json.loads(path.read_text(encoding="utf-8"))["records"]
        return records

    @property
    def sim_dir(self) -> Path:
        return self.root / "sim"

    @property
    def plugin_dir(self) -> Path:
        return self.root / "dp"

    @property
    def pod_resources(self) -> Path:
        return self.root / "pr" / "kubelet.sock"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    def settings(self, **overrides: Any) -> settings.Settings:
        values: Json = {
            "node_name": NODE,
            "backend": "sim",
            "sim_dir": self.sim_dir,
            "device_plugin_dir": self.plugin_dir,
            "pod_resources_socket": self.pod_resources,
            "kubeconfig": self.kubeconfig,
            "state_dir": self.state_dir,
            "metrics_host": "127.0.0.1",
            "metrics_port": 0,
            "health_interval": 0.1,
            "report_interval": 30.0,
            "reconcile_interval": 30.0,
            "allocate_wait": 1.0,
            "unowned_grace": 300.0,
            "hami_core_dir": self.root / "hami-core",
            "hami_shared_dir": self.root / "hami-shared",
        }
        values.update(overrides)
        return settings.Settings(**values)

    def start_kubelet(self) -> kubelet.Kubelet:
        config = kubelet.KubeletConfig(
            node=nodestatus.NodeIdentity(NODE),
            device_plugin_dir=self.plugin_dir,
            pod_resources_socket=self.pod_resources,
            heartbeat_seconds=0,
        )
        # The kubelet talks to the API directly, never through the plugin's proxy.
        client = apiclient.client_from_kubeconfig(str(self.space.kubeconfig))
        self.kubelet = kubelet.Kubelet(config, client)
        self.kubelet.start()
        return self.kubelet

    def start_plugin(self, **overrides: Any) -> plugin.Plugin:
        self.plugin = plugin.Plugin(self.settings(**overrides))
        self.plugin.start()
        return self.plugin

    def stop_plugin(self) -> None:
        if self.plugin is not None:
            self.plugin.stop()
            self.plugin = None

    def serving(self) -> bool:
        """Whether the plugin is registered (kubelet published 4 chips x 7 on the Node, and
        the plugin's Register call has returned) and has published its inventory annotation
        (its publisher runs beside registration)."""
        if self.plugin is None or self.plugin.link.registrations < 1:
            return False
        node = self.api.node()
        status = node.get("status") or {}
        counts = (
            int(status.get("capacity", {}).get(RESOURCE, 0)),
            int(status.get("allocatable", {}).get(RESOURCE, 0)),
        )
        notes = node["metadata"].get("annotations") or {}
        return counts == (28, 28) and protocol.node_register_key(CW) in notes

    def capacity(self) -> tuple[int, int]:
        status = self.api.node()["status"]
        return (
            int(status.get("capacity", {}).get(RESOURCE, 0)),
            int(status.get("allocatable", {}).get(RESOURCE, 0)),
        )

    def env(self, pod: str, container: str) -> dict[str, str]:
        assert self.kubelet is not None
        record = self.kubelet.allocation(self.namespace, pod)
        assert record is not None, f"pod {pod} has no allocation"
        found = record.container(container)
        assert found is not None, f"pod {pod} has no container {container} in its allocation"
        return found.env

    def running(self, pod: str) -> bool:
        return self.api.phase(pod) == "Running"


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="vdp-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def node(root: Path, kube_namespace: Any) -> Iterator[Node]:
    """A four-chip 310P3 node (Atlas 300I Duo), its kubelet started; the plugin not yet.

    Its pods go to the test's namespace; the Node object goes when the test ends (with
    everything in the namespace: ``kube_namespace``), after the kubelet and plugin stop."""
    write_node(root / "sim", server="300i-duo")
    cluster = Cluster(kube_namespace.kubeconfig, kube_namespace.name, root / "sim")
    test_node = Node(root, kube_namespace, kube_namespace.kubeconfig, cluster)
    test_node.start_kubelet()
    yield test_node
    test_node.stop_plugin()
    if test_node.kubelet is not None:
        test_node.kubelet.stop()
    for channel in test_node.channels:
        channel.close()
    if test_node.proxy is not None:
        test_node.proxy.close()
    cluster.close()


@pytest.fixture
def running(node: Node) -> Node:
    """The node with its plugin started and registered."""
    node.start_plugin()
    wait_for(node.serving, what="capacity 28 (4 chips x 7) and the inventory published")
    return node


class PluginProcess:
    """The real ``vnpu-device-plugin`` command, for crash and signal tests."""

    def __init__(self, node: Node, *args: str, backend: Sequence[str] = ()) -> None:
        self.node = node
        self.args = list(args)
        self.backend = list(backend) or ["--backend", "sim", "--sim-dir", str(node.sim_dir)]
        self.process: subprocess.Popen[str] | None = None
        self.log = node.root / "plugin.log"

    def command(self) -> list[str]:
        options = self.node.settings()
        return [
            sys.executable,
            "-m",
            "vnpu_device_plugin",
            "--node-name",
            options.node_name,
            *self.backend,
            "--device-plugin-dir",
            str(self.node.plugin_dir),
            "--pod-resources-socket",
            str(self.node.pod_resources),
            "--kubeconfig",
            str(self.node.kubeconfig),
            "--state-dir",
            str(self.node.state_dir),
            "--metrics-host",
            "127.0.0.1",
            "--metrics-port",
            "0",
            "--health-interval",
            "0.1",
            "--allocate-wait",
            "1",
            *self.args,
        ]

    def start(self, *extra: str, env: dict[str, str] | None = None) -> PluginProcess:
        out = self.log.open("a", encoding="utf-8")
        self.process = subprocess.Popen(
            [*self.command(), *extra],
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {})},
        )
        out.close()
        return self

    def wait(self, timeout: float = 20.0) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8") if self.log.exists() else ""


class Kit:
    """Helpers tests reach through the ``kit`` fixture (test modules cannot import conftest)."""

    Grant = Grant
    Cluster = Cluster
    FaultProxy = FaultProxy
    PluginProcess = PluginProcess
    wait_for = staticmethod(wait_for)
    write_node = staticmethod(write_node)
    NODE = NODE
    CW = CW
    RESOURCE = RESOURCE


@pytest.fixture
def kit() -> type[Kit]:
    return Kit
