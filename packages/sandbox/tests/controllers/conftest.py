"""Fixtures for the controller manager's tests: an API emulator, the manager, a stand-in kubelet.

Every test gets its own emulator over loopback HTTP (``harness.serve``) and a
``ControllerManager`` running in-process against it through the official client, with
short backoffs. ``kubelet`` is a stand-in for a node: a thread that, through the API like
any client, binds each new pod to ``node-a``, reports it Running and Ready (unless told to
hold pods back), and finishes pods being deleted with a grace-0 delete, as the real kubelet
does when their containers have stopped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from vnpu_sandbox.apiserver import harness
from vnpu_sandbox.controllers import manager
from vnpu_sandbox.kubelet import apiclient

Json = dict[str, Any]
FAST = manager.Settings(request_timeout=5.0, watch_timeout=30, max_backoff=0.5, settle_seconds=1.0)


def wait_until(predicate: Callable[[], object], timeout: float = 15.0, what: str = "") -> Any:
    """Poll ``predicate`` every 20 ms until it returns something truthy, and return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(0.02)


@pytest.fixture
def wait() -> Callable[..., Any]:
    return wait_until


@pytest.fixture
def api_url() -> Iterator[str]:
    with harness.serve() as url:
        yield url


@pytest.fixture
def api_client(api_url: str) -> Iterator[k8s.ApiClient]:
    made = apiclient.client_for_host(api_url)
    yield made
    apiclient.close_client(made)


@pytest.fixture
def apps(api_client: k8s.ApiClient) -> k8s.AppsV1Api:
    return k8s.AppsV1Api(api_client)


@pytest.fixture
def core(api_client: k8s.ApiClient) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(api_client)


@pytest.fixture
def controllers(api_url: str) -> Iterator[manager.ControllerManager]:
    """The controller manager, started against the test's emulator and synced."""
    own_client = apiclient.client_for_host(api_url)
    running = manager.ControllerManager(own_client, FAST)
    running.start()
    assert running.wait_synced(5.0)
    yield running
    running.stop()
    apiclient.close_client(own_client)


class Kubelet:
    """A stand-in node: binds, starts and finishes pods through the API."""

    def __init__(self, core: k8s.CoreV1Api, node: str = "node-a") -> None:
        self.core = core
        self.node = node
        self.hold = False
        """While True, pods are bound and Running but not made Ready."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="test-kubelet", daemon=True)

    def start(self) -> Kubelet:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def make_ready(self, pod: Any) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.core.patch_namespaced_pod_status(
            pod.metadata.name,
            pod.metadata.namespace,
            {
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
                    "containerStatuses": [
                        {
                            "name": c.name,
                            "ready": True,
                            "restartCount": 0,
                            "image": c.image,
                            "imageID": "",
                            "state": {"running": {"startedAt": now}},
                        }
                        for c in pod.spec.containers
                    ],
                }
            },
        )

    def _step(self) -> None:
        for pod in self.core.list_pod_for_all_namespaces().items:
            name, namespace = pod.metadata.name, pod.metadata.namespace
            if pod.metadata.deletion_timestamp is not None:
                self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            elif not pod.spec.node_name:
                body = {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": name},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": self.node},
                }
                self.core.create_namespaced_pod_binding(
                    name, namespace, body, _preload_content=False
                )
            elif self.hold:
                if pod.status.phase == "Pending":
                    self.core.patch_namespaced_pod_status(
                        name, namespace, {"status": {"phase": "Running"}}
                    )
            elif not any(
                c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []
            ):
                self.make_ready(pod)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            try:
                self._step()
            except k8s.ApiException:
                continue  # a pod that went away under us: the next round sees the truth


@pytest.fixture
def kubelet(core: k8s.CoreV1Api) -> Iterator[Kubelet]:
    node = Kubelet(core).start()
    yield node
    node.stop()


def deployment_manifest(
    name: str, replicas: int = 3, image: str = "nginx:1.25", **spec: Any
) -> Json:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": image}]},
            },
            **spec,
        },
    }


def replica_set_manifest(name: str, replicas: int = 3, **spec: Any) -> Json:
    body = deployment_manifest(name, replicas, **spec)
    body["kind"] = "ReplicaSet"
    return body


@pytest.fixture
def deployment() -> Callable[..., Json]:
    return deployment_manifest


@pytest.fixture
def replica_set() -> Callable[..., Json]:
    return replica_set_manifest


def pods_of(core: k8s.CoreV1Api, selector: str, namespace: str = "default") -> list[Any]:
    return list(core.list_namespaced_pod(namespace, label_selector=selector).items)


@pytest.fixture
def pods() -> Callable[..., list[Any]]:
    return pods_of
