"""Fixtures for the scheduling driver's tests: an API emulator, a fake extender, a running driver.

Everything is real over loopback HTTP: the API emulator (``vnpu_sandbox.apiserver.harness``),
a fake extender (a starlette app under uvicorn on a thread, recording every call and answering
with functions a test sets), and the driver itself started in-process with a configuration
the test writes. ``Cluster`` has the few helpers the tests share: create nodes and pods, read
them back, wait for a condition.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from vnpu_sandbox.apiserver import harness
from vnpu_sandbox.kubelet import apiclient
from vnpu_sandbox.scheduling import config, driver

Json = dict[str, Any]


def wait_for(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def node_object(
    name: str,
    *,
    cpu: str = "8",
    memory: str = "32Gi",
    pods: str = "110",
    labels: dict[str, str] | None = None,
    taints: list[Json] | None = None,
    unschedulable: bool = False,
    ready: str = "True",
    extra: dict[str, str] | None = None,
) -> Json:
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {
            "capacity": allocatable,
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady"}],
        },
    }


def pod_object(
    name: str,
    *,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    scheduler: str | None = None,
    node: str | None = None,
    spec: Json | None = None,
) -> Json:
    resources: Json = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    body: Json = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "main", "image": "x", "resources": resources}],
            **(spec or {}),
        },
    }
    if scheduler:
        body["spec"]["schedulerName"] = scheduler
    if node:
        body["spec"]["nodeName"] = node
    return body


class Cluster:
    """The emulator at ``url`` through the official client, JSON in and out."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = apiclient.client_for_host(url)
        self.core = kubernetes.client.CoreV1Api(self.client)

    def add_node(self, name: str, **options: Any) -> Json:
        body = node_object(name, **options)
        self.core.create_node(body, _preload_content=False)
        answer = self.core.patch_node_status(
            name, {"status": body["status"]}, _preload_content=False
        )
        patched: Json = json.loads(answer.data)
        return patched

    def patch_node(self, name: str, patch: Json) -> None:
        self.core.patch_node(
            name, patch, _content_type="application/merge-patch+json", _preload_content=False
        )

    def add_pod(self, name: str, **options: Any) -> Json:
        created: Json = json.loads(
            self.core.create_namespaced_pod(
                "default", pod_object(name, **options), _preload_content=False
            ).data
        )
        return created

    def pod(self, name: str) -> Json:
        found: Json = json.loads(
            self.core.read_namespaced_pod(name, "default", _preload_content=False).data
        )
        return found

    def node_of(self, name: str) -> str:
        return str(self.pod(name)["spec"].get("nodeName") or "")

    def delete_pod(self, name: str) -> None:
        self.core.delete_namespaced_pod(
            name, "default", grace_period_seconds=0, _preload_content=False
        )

    def events(self, pod: str, reason: str | None = None) -> list[Json]:
        items = json.loads(self.core.list_namespaced_event("default", _preload_content=False).data)[
            "items"
        ]
        return [
            e
            for e in items
            if e["involvedObject"]["name"] == pod and (reason is None or e["reason"] == reason)
        ]

    def condition(self, pod: str) -> Json | None:
        for condition in self.pod(pod)["status"].get("conditions") or []:
            if condition["type"] == "PodScheduled":
                return dict(condition)
        return None

    def close(self) -> None:
        apiclient.close_client(self.client)


class FakeExtender:
    """A scheduler extender on loopback that records calls and answers with ``on_<verb>``.

    By default it passes every node, scores all 0 and binds with a real ``pods/binding``.
    ``calls`` holds ``(verb, body, monotonic time)`` in arrival order.
    """

    def __init__(self, cluster: Cluster | None, *, ssl: dict[str, str] | None = None) -> None:
        self.cluster = cluster
        self.calls: list[tuple[str, Json, float]] = []
        self.on_filter: Callable[[Json], Any] = self.pass_all
        self.on_prioritize: Callable[[Json], Any] = lambda body: [
            {"Host": n, "Score": 0} for n in self.names(body)
        ]
        self.on_bind: Callable[[Json], Any] = self.bind
        self.status = 200
        app = Starlette(
            routes=[
                Route(f"/{verb}", self._endpoint(verb), methods=["POST"])
                for verb in ("filter", "prioritize", "bind")
            ]
        )
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        self._listener = listener
        scheme = "https" if ssl else "http"
        self.url = f"{scheme}://127.0.0.1:{listener.getsockname()[1]}"
        self._server = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", lifespan="off", **(ssl or {}))
        )
        self._thread = threading.Thread(
            target=lambda: self._server.run(sockets=[listener]), daemon=True
        )
        self._thread.start()
        wait_for(lambda: self._server.started, "the fake extender to start")

    @staticmethod
    def names(body: Json) -> list[str]:
        if body.get("NodeNames") is not None:
            return list(body["NodeNames"])
        return [n["metadata"]["name"] for n in body["Nodes"]["items"]]

    def pass_all(self, body: Json) -> Json:
        return {"NodeNames": self.names(body), "FailedNodes": {}, "Error": ""}

    def bind(self, body: Json) -> Json:
        assert self.cluster is not None, "this fake extender has no cluster to bind in"
        self.cluster.core.create_namespaced_pod_binding(
            body["PodName"],
            body["PodNamespace"],
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": body["PodName"], "uid": body["PodUID"]},
                "target": {"kind": "Node", "name": body["Node"]},
            },
            _preload_content=False,
        )
        return {"Error": ""}

    def _endpoint(self, verb: str) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            body = json.loads(await request.body())
            self.calls.append((verb, body, time.monotonic()))
            if self.status != 200:
                return Response("broken", status_code=self.status)
            handler = {
                "filter": self.on_filter,
                "prioritize": self.on_prioritize,
                "bind": self.on_bind,
            }[verb]
            answer = await run_in_threadpool(handler, body)
            return answer if isinstance(answer, Response) else JSONResponse(answer)

        return endpoint

    def verbs(self) -> list[str]:
        return [verb for verb, _, _ in self.calls]

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._listener.close()


def extender_config(
    url: str,
    *,
    weight: int = 1,
    node_cache_capable: bool = True,
    ignorable: bool = False,
    managed: tuple[str, ...] = ("example.com/chip",),
    profiles: tuple[str, ...] = ("vnpu-scheduler",),
    max_backoff: int = 10,
) -> config.Config:
    return config.parse(
        {
            "apiVersion": config.API_VERSION,
            "kind": config.KIND,
            "podMaxBackoffSeconds": max_backoff,
            "profiles": [{"schedulerName": name} for name in profiles],
            "extenders": [
                {
                    "urlPrefix": url,
                    "filterVerb": "filter",
                    "prioritizeVerb": "prioritize",
                    "bindVerb": "bind",
                    "weight": weight,
                    "nodeCacheCapable": node_cache_capable,
                    "httpTimeout": "5s",
                    "enableHTTPS": False,
                    "ignorable": ignorable,
                    "managedResources": [
                        {"name": name, "ignoredByScheduler": True} for name in managed
                    ],
                }
            ],
        }
    )


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with harness.serve() as url:
        world = Cluster(url)
        try:
            yield world
        finally:
            world.close()


@pytest.fixture
def extender(cluster: Cluster) -> Iterator[FakeExtender]:
    fake = FakeExtender(cluster)
    try:
        yield fake
    finally:
        fake.stop()


Start = Callable[..., driver.Driver]


@pytest.fixture
def start_driver(cluster: Cluster) -> Iterator[Start]:
    """``start_driver(config, **settings)``: a running driver on ``cluster``, stopped at the end."""
    started: list[tuple[driver.Driver, Any]] = []

    def start(settings_config: config.Config, **settings: Any) -> driver.Driver:
        api = apiclient.client_for_host(cluster.url)
        running = driver.Driver(driver.Settings(config=settings_config, seed=7, **settings), api)
        running.start()
        started.append((running, api))
        assert running.synced(10), "the driver's informers did not list the cluster"
        return running

    yield start
    for running, api in started:
        running.stop()
        apiclient.close_client(api)
