"""Fixtures for the simulated kubelet's tests: short socket directories, device plugins, and
the real kube-apiserver the kubelet talks to as ``system:node:<node>``.

``make_plugin`` serves ``plugin.Plugin`` instances (a minimal device plugin that records what
the kubelet sends). Socket paths must stay under ~100 bytes, so directories are made under
/tmp directly.

The API is the session's shared kube-apiserver (the root ``conftest``'s ``kube_namespace``:
pods go in the test's namespace; nodes are deleted when the test ends), or, for the tests
that kill and restart it, a private plane (``private_plane``, see ``kubeplane.Outages``).
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from vnpu_sandbox.kubelet import apiclient, kubelet, nodestatus
from vnpu_sandbox.platform import apiplane

from .kubeplane import Outages, Pods, node_kubeconfig
from .plugin import Plugin

_nodes = itertools.count(1)


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory for unix sockets (``/tmp/vkXXXXXX``)."""
    path = Path(tempfile.mkdtemp(prefix="vk", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_plugin(sock_dir: Path) -> Iterator[Callable[..., Plugin]]:
    """Build and serve plugins in ``<sock_dir>/plugins``; all are stopped at the end."""
    made: list[Plugin] = []

    def make(resource: str, devices: dict[str, bool], **kwargs: Any) -> Plugin:
        plugin = Plugin(sock_dir / "plugins", resource, devices, **kwargs).serve()
        made.append(plugin)
        return plugin

    (sock_dir / "plugins").mkdir(exist_ok=True)
    yield make
    for plugin in made:
        plugin.stop()


def wait_until(predicate: Callable[[], object], timeout: float = 15.0, what: str = "") -> None:
    """Poll ``predicate`` every 20 ms until it is truthy; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    pytest.fail(f"timed out after {timeout}s waiting for {what or predicate}")


@pytest.fixture
def wait() -> Callable[..., None]:
    return wait_until


@pytest.fixture
def node_name() -> str:
    """A node name per test: nodes are cluster-wide, and their Leases outlive the test."""
    return f"node-{next(_nodes)}"


@pytest.fixture
def kubelet_kubeconfig(kube_namespace: Any, node_name: str, tmp_path: Path) -> Path:
    """The kubeconfig of the kubelet of ``node_name`` on the shared plane."""
    return node_kubeconfig(kube_namespace.plane, node_name, tmp_path / "identities")


@pytest.fixture
def pods(kube_namespace: Any) -> Iterator[Pods]:
    """The test's namespace on the shared plane, as the admin sees it."""
    api = apiclient.client_from_kubeconfig(str(kube_namespace.kubeconfig))
    try:
        yield Pods(client.CoreV1Api(api), kube_namespace.name)
    finally:
        apiclient.close_client(api)


@contextlib.contextmanager
def _kubelets(
    sock_dir: Path, node_name: str, kubeconfig: Path
) -> Iterator[Callable[..., kubelet.Kubelet]]:
    started: list[kubelet.Kubelet] = []
    api_clients: list[client.ApiClient] = []

    def make(**overrides: Any) -> kubelet.Kubelet:
        settings: dict[str, Any] = {
            "node": nodestatus.NodeIdentity(node_name, labels={"example.com/pool": "test"}),
            "device_plugin_dir": sock_dir / "plugins",
            "pod_resources_socket": sock_dir / "pr" / "kubelet.sock",
            "state_dir": sock_dir / "state",
            "heartbeat_seconds": 0,
        }
        settings.update(overrides)
        api = apiclient.client_from_kubeconfig(str(kubeconfig))
        api_clients.append(api)
        instance = kubelet.Kubelet(kubelet.KubeletConfig(**settings), api)
        instance.start()
        started.append(instance)
        return instance

    try:
        yield make
    finally:
        for instance in started:
            instance.stop()
        for api in api_clients:
            apiclient.close_client(api)


@pytest.fixture
def make_kubelet(
    sock_dir: Path, node_name: str, kubelet_kubeconfig: Path
) -> Iterator[Callable[..., kubelet.Kubelet]]:
    """Start kubelets of ``node_name`` on the shared plane; all stop before its cleanup."""
    with _kubelets(sock_dir, node_name, kubelet_kubeconfig) as make:
        yield make


@pytest.fixture(scope="module")
def _module_plane(kube_plane: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outages]:
    with apiplane.serve(tmp_path_factory.mktemp("private-plane")) as plane:
        outages = Outages(plane)
        try:
            yield outages
        finally:
            outages.close()


@pytest.fixture
def private_plane(_module_plane: Outages) -> Outages:
    """A kube-apiserver and etcd of the test module's own, which a test may kill and start
    again; each test finds both running (``kube_plane`` is only there for its check that the
    binaries are built)."""
    for name in ("etcd", "kube-apiserver"):
        if not _module_plane.running(name):
            _module_plane.start(name)
    return _module_plane


@pytest.fixture
def private_kubeconfig(private_plane: Outages, node_name: str, tmp_path: Path) -> Path:
    """The kubeconfig of the kubelet of ``node_name`` on the private plane."""
    return node_kubeconfig(private_plane.plane, node_name, tmp_path / "private-identities")


@pytest.fixture
def make_private_kubelet(
    sock_dir: Path, node_name: str, private_kubeconfig: Path
) -> Iterator[Callable[..., kubelet.Kubelet]]:
    """Start kubelets of ``node_name`` on the private plane; all stop before it does."""
    with _kubelets(sock_dir, node_name, private_kubeconfig) as make:
        yield make
