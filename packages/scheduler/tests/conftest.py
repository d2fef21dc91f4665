"""Fixtures: the real kube-apiserver, cluster builders and a running scheduler.

Every test talks to the session's kube-apiserver (the root conftest's ``kube_plane``) with
the official ``kubernetes`` client, in a namespace of its own (``kube_namespace``): ``Kube``
is the tests' view of it, and its helpers (``add_pod``, ``pod``, ``annotate_pod``,
``events``, and the ``make`` builders) default to that namespace. What a test leaves there,
in the namespaces it adds with ``Kube.add_namespace``, and every node is deleted when it
ends. The schedulers a test starts reach the API with the admin's kubeconfig (HTTPS, client
certificate) and keep their Leases in the test's namespace; the tests reach them over HTTP
on loopback. A test that needs a kube-apiserver of its own (other flags) parametrizes
``kube`` indirectly with ``{"api_args": (...)}``.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import kubernetes
import prometheus_client
import pytest
import yaml

from vnpu_core import coordination, ledger, protocol
from vnpu_sandbox.platform import apiplane
from vnpu_scheduler import app, cluster, server, settings

Json = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
NOT_READY = "node.kubernetes.io/not-ready"


def handshake(age_seconds: float = 0.0, state: str = "reported") -> str:
    when = datetime.now().replace(microsecond=0) - timedelta(seconds=age_seconds)
    return coordination.encode_handshake(
        coordination.Handshake(coordination.HandshakeState(state), when)
    )


def node_object(
    name: str,
    word: str = "Ascend310P",
    chips: int = 4,
    *,
    count: int = 7,
    devmem: int = 21527,
    devcore: int = 8,
    unhealthy: tuple[int, ...] = (),
    network: bool = False,
    handshake_age: float | None = 0.0,
    allocatable: int | None = None,
    server_kind: str | None = None,
    extra: dict[str, str] | None = None,
) -> Json:
    """A node as a device plugin leaves it: registered chips, handshake, allocatable."""
    registered = [
        protocol.RegisteredChip(
            f"{name}-{word}-{i}",
            i,
            count,
            devmem,
            devcore,
            word,
            i not in unhealthy,
            (0 if i < 4 else 1) if network else None,
        )
        for i in range(chips)
    ]
    annotations = {protocol.node_register_key(word): protocol.encode_node_register(registered)}
    if handshake_age is not None:
        annotations[protocol.node_handshake_key(word)] = handshake(handshake_age)
    if server_kind is not None:
        annotations["vnpu.io/server"] = server_kind
    annotations.update(extra or {})
    slots = chips * count if allocatable is None else allocatable
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": annotations, "labels": {}},
        "status": {
            "capacity": {f"huawei.com/{word}": str(slots)},
            "allocatable": {f"huawei.com/{word}": str(slots)},
        },
    }


def pod_object(
    name: str,
    word: str = "Ascend310P",
    count: int | str | None = 1,
    memory: int | str | None = None,
    *,
    namespace: str = "default",
    annotations: dict[str, str] | None = None,
    containers: list[Json] | None = None,
    scheduler_name: str | None = None,
) -> Json:
    """A pod with one container asking for ``count`` chips of ``word`` (and ``memory`` MiB).

    ``scheduler_name`` sets ``spec.schedulerName`` (unset: the API's default-scheduler).
    """
    limits: dict[str, str] = {}
    if count is not None:
        limits[f"huawei.com/{word}"] = str(count)
    if memory is not None:
        limits[f"huawei.com/{word}-memory"] = str(memory)
    spec_containers = containers or [
        {"name": "main", "image": "ascend/app", "resources": {"limits": limits}}
    ]
    spec: Json = {"containers": spec_containers}
    if scheduler_name is not None:
        spec["schedulerName"] = scheduler_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
        "spec": spec,
    }


def npu_pod_object(name: str, *args: Any, **options: Any) -> Json:
    """``pod_object`` as the webhook leaves it: routed to vnpu-scheduler, so ``/bind`` takes it."""
    return pod_object(name, *args, scheduler_name="vnpu-scheduler", **options)


@dataclass
class Kube:
    """One test's namespace on a real kube-apiserver, with the official client bound to it.

    ``plane`` is the ``apiplane.ApiPlane`` (its ``url``, ``tls``, ``compact``); ``namespace``
    the test's own, where the helpers put and look for pods unless told otherwise.
    """

    plane: Any
    namespace: str
    kubeconfig: Path
    client: kubernetes.client.ApiClient
    core: kubernetes.client.CoreV1Api
    added: list[str] = field(default_factory=list)
    elsewhere: list[tuple[str, str]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return str(self.plane.url)

    def plain(self, obj: Any) -> Json:
        result: Json = self.client.sanitize_for_serialization(obj)
        return result

    def namespaced(self, suffix: str) -> str:
        """The name of this test's extra namespace ``suffix`` (see ``add_namespace``)."""
        return f"{self.namespace}-{suffix}"

    def add_namespace(self, suffix: str) -> str:
        """Create namespace ``<test's namespace>-<suffix>`` (with its default ServiceAccount,
        so it takes pods); emptied when the test ends. Returns its name."""
        name = self.namespaced(suffix)
        self.plane.namespace(name)
        self.added.append(name)
        return name

    def use_namespace(self, name: str) -> None:
        """Let namespace ``name``, which no test owns (kube-system), take pods: it and its
        default ServiceAccount (kube-controller-manager's doing in a cluster) exist. The pods
        the test makes there are deleted when it ends; the namespace is left alone."""
        self.plane.namespace(name)

    def add_node(self, obj: Json) -> Json:
        """Create ``obj`` as a ready node. kube-apiserver taints every new node
        ``node.kubernetes.io/not-ready:NoSchedule``, and kube-controller-manager lifts the
        taint once the kubelet reports Ready; neither runs here, so this lifts it."""
        created = self.plain(self.core.create_node(obj))
        taints = created.get("spec", {}).get("taints") or []
        kept = [t for t in taints if t.get("key") != NOT_READY]
        if len(kept) == len(taints):
            return created
        body = {"spec": {"taints": kept or None}}
        return self.plain(
            self.core.patch_node(obj["metadata"]["name"], body, _content_type=MERGE_PATCH)
        )

    def add_pod(self, obj: Json) -> Json:
        """Create ``obj`` in its namespace (the test's when it names none). A pod made in a
        namespace no test owns (kube-system) is deleted when the test ends."""
        namespace = obj["metadata"].setdefault("namespace", self.namespace)
        created = self.plain(self.core.create_namespaced_pod(namespace, obj))
        if namespace != self.namespace and namespace not in self.added:
            self.elsewhere.append((namespace, obj["metadata"]["name"]))
        return created

    def pod(self, name: str, namespace: str | None = None) -> Json:
        return self.plain(self.core.read_namespaced_pod(name, namespace or self.namespace))

    def node(self, name: str) -> Json:
        return self.plain(self.core.read_node(name))

    def annotate_node(self, name: str, annotations: dict[str, str | None]) -> None:
        body = {"metadata": {"annotations": annotations}}
        self.core.patch_node(name, body, _content_type=MERGE_PATCH)

    def annotate_pod(
        self, name: str, annotations: dict[str, str | None], namespace: str | None = None
    ) -> None:
        body = {"metadata": {"annotations": annotations}}
        self.core.patch_namespaced_pod(
            name, namespace or self.namespace, body, _content_type=MERGE_PATCH
        )

    def events(self, name: str, namespace: str | None = None) -> list[Json]:
        found = self.core.list_namespaced_event(
            namespace or self.namespace, field_selector=f"involvedObject.name={name}"
        )
        return [self.plain(e) for e in found.items]

    def tidy(self) -> None:
        """Delete what the test made outside the namespaces the fixture clears."""
        for namespace, name in self.elsewhere:
            with contextlib.suppress(kubernetes.client.exceptions.ApiException):
                self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        for namespace in self.added:
            self.plane.clear(namespace)


def plain_kubeconfig(path: Path, url: str, namespace: str = "default") -> Path:
    """Write a kubeconfig for an API at ``url`` reached with no credentials (plain HTTP: a
    test's proxy in front of the API, or an address where nothing listens)."""
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": url}}],
        "users": [{"name": "test", "user": {}}],
        "contexts": [
            {"name": "test", "context": {"cluster": "test", "user": "test", "namespace": namespace}}
        ],
        "current-context": "test",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture
def write_kubeconfig() -> Callable[..., Path]:
    """``plain_kubeconfig``, for test modules (which cannot import conftest)."""
    return plain_kubeconfig


@pytest.fixture
def kube(kube_namespace: Any, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Kube]:
    """The test's namespace on the session's kube-apiserver; with ``{"api_args": (...)}``
    (indirect parametrization), a namespace on a kube-apiserver of the test's own started
    with those flags (the session's namespace is then left unused)."""
    api_args = getattr(request, "param", {}).get("api_args")
    with contextlib.ExitStack() as stack:
        space = kube_namespace
        if api_args is not None:
            private = stack.enter_context(apiplane.serve(tmp_path / "api", api_args=api_args))
            space = private.namespace("private")
        client = kubernetes.config.new_client_from_config(str(space.kubeconfig))
        stack.callback(client.close)
        view = Kube(
            space.plane, space.name, space.kubeconfig, client, kubernetes.client.CoreV1Api(client)
        )
        stack.callback(view.tidy)
        yield view


@dataclass
class Running:
    """A scheduler serving on loopback."""

    url: str
    service: app.Service
    registry: prometheus_client.CollectorRegistry
    urls: list[str] = field(default_factory=list)
    http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=30))

    def post(self, verb: str, body: object) -> httpx.Response:
        return self.http.post(f"{self.url}/{verb}", json=body)

    def post_raw(self, verb: str, content: bytes) -> httpx.Response:
        return self.http.post(
            f"{self.url}/{verb}", content=content, headers={"Content-Type": "application/json"}
        )

    def sample(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    def usage(self, node: str) -> ledger.Ledger:
        """The cache's usage of ``node``; empty until the watch has delivered the node."""
        state = self.service.cache.state(node)
        return ledger.Ledger({}) if state is None else state.usage

    def wait_for(self, check: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError("condition not reached in time")
            time.sleep(0.02)


StartScheduler = Callable[..., Running]


@pytest.fixture
def start_scheduler(kube: Kube) -> Iterator[StartScheduler]:
    """Start a scheduler against ``kube`` with settings overrides; stopped after the test."""
    stack: list[Any] = []

    def start(*, client: httpx.Client | None = None, **overrides: Any) -> Running:
        """``client`` talks to the extender listener (default: plain httpx, 30 s timeout)."""
        options: dict[str, Any] = {
            "kubeconfig": kube.kubeconfig,
            "lock_namespace": kube.namespace,
            "host": "127.0.0.1",
            "port": 0,
            "webhook_port": 0,
            "config_poll_seconds": 0.1,
            "lock_wait": 2.0,
            "webhook_host": "127.0.0.1",
            "metrics_host": "127.0.0.1",
        }
        options.update(overrides)
        config = settings.Settings(**options)
        registry = prometheus_client.CollectorRegistry()
        api = cluster.KubeCluster.connect(config.kubeconfig, config.api_timeout, 16)
        application = app.build(config, api, registry)
        context = server.running(application, config)
        urls = context.__enter__()
        stack.append((context, api))
        running = Running(urls[0], application.state.service, registry, urls)
        if client is not None:
            running.http.close()
            running.http = client
        stack.append(running.http)
        running.wait_for(lambda: running.http.get(f"{running.url}/readyz").status_code == 200)
        return running

    yield start
    for item in reversed(stack):
        if isinstance(item, httpx.Client):
            item.close()
        else:
            context, api = item
            context.__exit__(None, None, None)
            api.close()


@pytest.fixture
def scheduler(start_scheduler: StartScheduler) -> Running:
    return start_scheduler()


def holder_object(
    name: str,
    node: str,
    devices: str,
    word: str = "Ascend310P",
    runtime: str | None = None,
    *,
    namespace: str = "default",
) -> Json:
    """A running pod bound to ``node`` holding ``devices`` (the devices-allocated grammar)."""
    annotations = {
        protocol.allocated_key(word): devices,
        protocol.VGPU_NODE_KEY: node,
        protocol.BIND_PHASE_KEY: "success",
    }
    if runtime is not None:
        annotations[protocol.runtime_key(word)] = runtime
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "ascend/app"}],
        },
    }


class Make:
    """Builders for test objects (a fixture, since test modules cannot import conftest).

    Pods are made in ``namespace`` (the test's) unless a builder is told another.
    """

    node = staticmethod(node_object)
    handshake = staticmethod(handshake)

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    def pod(self, *args: Any, **options: Any) -> Json:
        options.setdefault("namespace", self.namespace)
        return pod_object(*args, **options)

    def npu_pod(self, *args: Any, **options: Any) -> Json:
        options.setdefault("namespace", self.namespace)
        return npu_pod_object(*args, **options)

    def holder(self, *args: Any, **options: Any) -> Json:
        options.setdefault("namespace", self.namespace)
        return holder_object(*args, **options)


@pytest.fixture
def make(request: pytest.FixtureRequest) -> Make:
    """The builders, making pods in the test's namespace (``default`` for a test with no API)."""
    if "kube" in request.fixturenames:
        return Make(request.getfixturevalue("kube").namespace)
    return Make("default")


class PluginStandIn:
    """Plays the device plugin's part on the wire, through the API only.

    No device plugin runs in these tests, so after each bind something must do what the
    plugin does after a successful Allocate: set ``hami.io/bind-phase: success``, erase the
    served containers from ``-devices-to-allocate`` and remove the node lock the pod owns.
    """

    def __init__(self, kubeconfig: Path) -> None:
        self._client = kubernetes.config.new_client_from_config(str(kubeconfig))
        self._core = kubernetes.client.CoreV1Api(self._client)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.served = 0

    def __enter__(self) -> PluginStandIn:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stopping.set()
        self._thread.join(timeout=5)
        self._client.close()

    def _run(self) -> None:
        version = ""
        while not self._stopping.is_set():
            response = self._core.list_pod_for_all_namespaces(
                watch=True,
                resource_version=version or None,
                timeout_seconds=1,
                _preload_content=False,
            )
            for line in response:
                if not line.strip():
                    continue
                event = json.loads(line)
                pod = event.get("object") or {}
                version = (pod.get("metadata") or {}).get("resourceVersion", version)
                if event.get("type") == "MODIFIED":
                    self._serve(pod)
            response.release_conn()

    def _serve(self, pod: Json) -> None:
        meta = pod["metadata"]
        notes = meta.get("annotations") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if notes.get(protocol.BIND_PHASE_KEY) != "allocating" or not node:
            return
        update: dict[str, str | None] = {protocol.BIND_PHASE_KEY: "success"}
        for key, value in notes.items():
            if key.endswith("-devices-to-allocate") and value.strip(";"):
                pending = sum(1 for c in protocol.decode_devices(key, value) if c)
                update[key] = protocol.erase_first_container(value, key=key, count=pending)
        body = {"metadata": {"annotations": update}}
        self._core.patch_namespaced_pod(
            meta["name"], meta["namespace"], body, _content_type=MERGE_PATCH
        )
        owner = f",{meta['namespace']},{meta['name']}"
        for _ in range(20):
            found = self._core.read_node(node, _preload_content=False)
            current = json.loads(found.data)
            lock = (current["metadata"].get("annotations") or {}).get(protocol.NODE_LOCK_KEY, "")
            if not lock.endswith(owner):
                break
            release = {
                "metadata": {
                    "resourceVersion": current["metadata"]["resourceVersion"],
                    "annotations": {protocol.NODE_LOCK_KEY: None},
                }
            }
            try:
                self._core.patch_node(node, release, _content_type=MERGE_PATCH)
                break
            except kubernetes.client.exceptions.ApiException as exc:
                if exc.status != 409:
                    raise
        self.served += 1


@pytest.fixture
def plugin(kube: Kube) -> Iterator[PluginStandIn]:
    with PluginStandIn(kube.kubeconfig) as stand_in:
        yield stand_in


def start_replica(kubeconfig: Path, log: Path, *flags: str) -> subprocess.Popen[bytes]:
    """A scheduler process on loopback, logging to ``log`` (``replica_url`` waits for it)."""
    command = [
        sys.executable, "-m", "vnpu_scheduler", "--kubeconfig", str(kubeconfig),
        "--host", "127.0.0.1", "--port", "0", "--lock-wait", "25", "--bind-timeout", "28",
        *flags,
    ]  # fmt: skip
    with log.open("wb") as handle:
        return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)


def replica_url(process: subprocess.Popen[bytes], log: Path) -> str:
    """The extender URL of a replica from ``start_replica``, once it listens."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if '"listening"' in line:
                url: str = json.loads(line)["urls"][0]
                return url
        if process.poll() is not None:
            raise AssertionError(f"replica exited: {log.read_text()}")
        time.sleep(0.05)
    raise AssertionError(f"replica did not start: {log.read_text()}")


@pytest.fixture
def replicas(kube: Any, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[list[str]]:
    """Two scheduler processes against ``kube``, started together; parametrize indirectly
    with extra flags."""
    flags = ("--lock-namespace", kube.namespace, *getattr(request, "param", ()))
    logs = [tmp_path / f"replica-{number}.log" for number in range(2)]
    started = []
    try:
        for log in logs:
            started.append(start_replica(kube.kubeconfig, log, *flags))
        urls = [replica_url(process, log) for process, log in zip(started, logs, strict=True)]
        with httpx.Client() as client:
            for url in urls:
                deadline = time.monotonic() + 10
                while client.get(f"{url}/readyz").status_code != 200:
                    assert time.monotonic() < deadline, "replica not ready"
                    time.sleep(0.05)
        yield urls
    finally:
        for process in started:
            process.terminate()
        for process in started:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


LaunchReplica = Callable[..., tuple[subprocess.Popen[bytes], str]]


@pytest.fixture
def launch_replica(tmp_path: Path) -> Iterator[LaunchReplica]:
    """Start a scheduler process (``start_replica``: kubeconfig, log, flags) and wait until it
    listens; its process and URL. Each is stopped after the test (a test may kill it first)."""
    started: list[subprocess.Popen[bytes]] = []

    def launch(kubeconfig: Path, log: Path, *flags: str) -> tuple[subprocess.Popen[bytes], str]:
        process = start_replica(kubeconfig, log, *flags)
        started.append(process)
        return process, replica_url(process, log)

    yield launch
    for process in started:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def alias_bomb() -> str:
    """A "billion laughs" YAML document in the device config's place: 376 bytes, nine levels of
    ten aliases each, 10**9 strings once expanded."""
    rows = ["a: &a [" + ",".join(['"lol"'] * 10) + "]"]
    for parent, name in zip("abcdefgh", "bcdefghi", strict=True):
        key = "vnpus" if name == "i" else name
        rows.append(f"{key}: &{name} [" + ",".join([f"*{parent}"] * 10) + "]")
    return "\n".join(rows) + "\n"
