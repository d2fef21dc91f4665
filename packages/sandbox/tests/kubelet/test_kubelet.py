"""The simulated kubelet end to end: the API emulator over HTTP, plugins and PodResources over unix sockets."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from kubernetes import client

from vnpu_kubelet_api.podresources.v1 import api_pb2 as pr
from vnpu_kubelet_api.podresources.v1 import api_pb2_grpc as pr_grpc
from vnpu_sandbox.apiserver import harness
from vnpu_sandbox.kubelet import apiclient, errors, kubelet, nodestatus

RES = "example.com/npu"
NODE = "node-a"


@pytest.fixture(scope="module")
def api_url() -> Iterator[str]:
    with harness.serve() as url:
        yield url


@pytest.fixture
def core(api_url: str) -> Iterator[client.CoreV1Api]:
    api = apiclient.client_for_host(api_url)
    yield client.CoreV1Api(api)
    apiclient.close_client(api)


@pytest.fixture
def node_name(request: pytest.FixtureRequest) -> str:
    """A node name per test, so tests sharing one emulator do not see each other's pods."""
    return f"{NODE}-{abs(hash(request.node.name)) % 10**8}"


@pytest.fixture
def make_kubelet(
    sock_dir: Path, api_url: str, node_name: str
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
        api = apiclient.client_for_host(api_url)
        api_clients.append(api)
        instance = kubelet.Kubelet(kubelet.KubeletConfig(**settings), api)
        instance.start()
        started.append(instance)
        return instance

    yield make
    for instance in started:
        instance.stop()
    for api in api_clients:
        apiclient.close_client(api)


def _pod(node: str, name: str, count: int = 1, **extra: Any) -> client.V1Pod:
    limits = {RES: str(count)} if count else {}
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}],
            **extra,
        },
    }
    pod = client.V1Pod.from_dict(body)
    assert pod is not None
    return pod


def _status(core: client.CoreV1Api, name: str) -> client.V1PodStatus | None:
    try:
        return core.read_namespaced_pod(name, "default").status
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _phase(core: client.CoreV1Api, name: str) -> str | None:
    status = _status(core, name)
    return status.phase if status is not None else None


def _node_resources(core: client.CoreV1Api, node: str) -> tuple[str | None, str | None]:
    status = core.read_node(node).status
    assert status is not None
    capacity, allocatable = status.capacity or {}, status.allocatable or {}
    return capacity.get(RES), allocatable.get(RES)


def test_node_is_registered_with_labels_capacity_and_ready(
    make_kubelet: Callable[..., kubelet.Kubelet], core: client.CoreV1Api, node_name: str
) -> None:
    make_kubelet()
    node = core.read_node(node_name)
    assert node.metadata is not None
    assert node.metadata.labels is not None
    assert node.metadata.labels["kubernetes.io/hostname"] == node_name
    assert node.metadata.labels["example.com/pool"] == "test"
    assert node.status is not None
    assert node.status.capacity is not None
    assert node.status.capacity["pods"] == "110"
    assert node.status.allocatable is not None
    assert node.status.allocatable["cpu"] == "8"
    ready = next(c for c in node.status.conditions or [] if c.type == "Ready")
    assert ready.status == "True"
    assert ready.reason == "KubeletReady"


def test_registration_waits_for_an_api_server_that_comes_up_late(
    sock_dir: Path, node_name: str
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    api = apiclient.client_for_host(f"http://127.0.0.1:{port}")
    config = kubelet.KubeletConfig(
        nodestatus.NodeIdentity(node_name),
        device_plugin_dir=sock_dir / "plugins",
        pod_resources_socket=sock_dir / "pr" / "kubelet.sock",
        heartbeat_seconds=0,
        register_timeout_seconds=20,
    )
    node = kubelet.Kubelet(config, api)
    started = threading.Thread(target=node.start)
    started.start()
    try:
        time.sleep(1.0)  # the kubelet has tried and failed to reach the API by now
        assert started.is_alive()
        with harness.serve(port=port) as url:
            started.join(timeout=20)
            assert not started.is_alive()
            reader = apiclient.client_for_host(url)
            registered = client.CoreV1Api(reader).read_node(node_name)
            apiclient.close_client(reader)
            assert registered.metadata is not None
            assert registered.metadata.name == node_name
            node.stop()
    finally:
        node.stop()
        apiclient.close_client(api)


def test_each_status_publish_renews_the_node_lease(
    make_kubelet: Callable[..., kubelet.Kubelet], api_url: str, node_name: str
) -> None:
    node = make_kubelet()
    api = apiclient.client_for_host(api_url)
    try:
        leases = client.CoordinationV1Api(api)
        first = leases.read_namespaced_lease(node_name, "kube-node-lease")
        assert first.spec is not None
        assert first.metadata is not None
        assert first.spec.holder_identity == node_name
        assert first.spec.lease_duration_seconds == 40
        owner = (first.metadata.owner_references or [None])[0]
        assert owner is not None
        assert (owner.kind, owner.name) == ("Node", node_name)
        time.sleep(0.01)
        node.publish_node_status()
        second = leases.read_namespaced_lease(node_name, "kube-node-lease")
        assert second.spec is not None
        assert second.metadata is not None
        assert second.spec.renew_time > first.spec.renew_time
        assert second.metadata.resource_version != first.metadata.resource_version
    finally:
        apiclient.close_client(api)


def test_plugin_devices_and_health_changes_reach_the_node_status(
    make_kubelet: Callable[..., kubelet.Kubelet],
    make_plugin: Callable[..., Any],
    core: client.CoreV1Api,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    make_kubelet()
    plugin = make_plugin(RES, {"d0": True, "d1": True, "d2": False})
    plugin.register()
    wait(lambda: _node_resources(core, node_name) == ("3", "2"), what="capacity 3 / allocatable 2")
    plugin.set_health("d0", False)
    wait(
        lambda: _node_resources(core, node_name) == ("3", "1"), what="allocatable 1 after d0 fails"
    )
    plugin.end_streams()
    wait(
        lambda: _node_resources(core, node_name) == ("3", "0"),
        what="allocatable 0 after the stream ends",
    )


def test_pods_are_admitted_in_creation_order_and_run(
    make_kubelet: Callable[..., kubelet.Kubelet],
    make_plugin: Callable[..., Any],
    core: client.CoreV1Api,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    node = make_kubelet()
    entered, release = threading.Event(), threading.Event()
    plugin = make_plugin(RES, {"d0": True, "d1": True, "d2": True})

    def hold_first_allocate() -> None:
        if not entered.is_set():
            entered.set()
            release.wait(10)

    plugin.before_allocate = hold_first_allocate  # later pods queue up behind the first
    plugin.register()
    wait(lambda: node.capacity().get(RES) == (3, 3))
    core.create_namespaced_pod("default", _pod(node_name, "blocker"))
    assert entered.wait(5)
    core.create_namespaced_pod("default", _pod(node_name, "zz-older"))
    time.sleep(1.05)  # creation timestamps have one-second resolution
    core.create_namespaced_pod("default", _pod(node_name, "aa-newer"))
    release.set()
    wait(lambda: _phase(core, "aa-newer") == "Running", what="both pods running")
    wait(lambda: _phase(core, "zz-older") == "Running")
    older, newer = node.allocation("default", "zz-older"), node.allocation("default", "aa-newer")
    assert older is not None
    assert newer is not None
    assert older.containers[0].device_ids(RES) == ("d1",)
    assert newer.containers[0].device_ids(RES) == ("d2",)

    status = _status(core, "zz-older")
    assert status is not None
    assert status.pod_ip
    assert status.host_ip == "127.0.0.1"
    (container,) = status.container_statuses or []
    assert container.state is not None
    assert container.state.running is not None
    assert container.ready is True
    record = json.loads((node.config.state_dir / "pods" / "default_zz-older.json").read_text())  # type: ignore[operator]
    (main,) = record["containers"]
    assert main["env"] == {"VISIBLE_DEVICES": "d1"}
    assert main["resources"][0]["cdiDevices"] == ["example.com/dev=d1"]


def test_allocate_failure_fails_the_pod_with_unexpected_admission_error(
    make_kubelet: Callable[..., kubelet.Kubelet],
    make_plugin: Callable[..., Any],
    core: client.CoreV1Api,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    node = make_kubelet()
    plugin = make_plugin(RES, {"d0": True}, allocate_error="device d0 is on fire")
    plugin.register()
    wait(lambda: node.capacity().get(RES) == (1, 1))
    core.create_namespaced_pod("default", _pod(node_name, "doomed"))
    wait(lambda: _phase(core, "doomed") == "Failed", what="pod Failed")
    status = _status(core, "doomed")
    assert status is not None
    assert status.reason == "UnexpectedAdmissionError"
    assert status.message == (
        "Pod was rejected: Allocate failed due to rpc error: code = Internal "
        "desc = device d0 is on fire, which is unexpected"
    )
    events = core.list_namespaced_event("default").items
    assert any(
        e.reason == "UnexpectedAdmissionError" and e.involved_object.name == "doomed"
        for e in events
    )
    assert node.allocation("default", "doomed") is None
    core.create_namespaced_pod("default", _pod(node_name, "too-many", count=2))
    wait(lambda: _phase(core, "too-many") == "Failed")
    status = _status(core, "too-many")
    assert status is not None
    assert status.message is not None
    assert (
        "requested number of devices unavailable for example.com/npu. Requested: 2, Available: 1"
        in status.message
    )


def test_deleted_and_completed_pods_free_their_devices(
    make_kubelet: Callable[..., kubelet.Kubelet],
    make_plugin: Callable[..., Any],
    core: client.CoreV1Api,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    node = make_kubelet()
    plugin = make_plugin(RES, {"d0": True})
    plugin.register()
    wait(lambda: node.capacity().get(RES) == (1, 1))
    core.create_namespaced_pod(
        "default", _pod(node_name, "first", terminationGracePeriodSeconds=30)
    )
    wait(lambda: _phase(core, "first") == "Running")
    core.delete_namespaced_pod("first", "default")  # graceful: the kubelet finishes it
    wait(lambda: _phase(core, "first") is None, what="pod removed by the kubelet's grace-0 delete")
    assert node.allocation("default", "first") is None
    assert not (node.config.state_dir / "pods" / "default_first.json").exists()  # type: ignore[operator]

    core.create_namespaced_pod("default", _pod(node_name, "second"))
    wait(lambda: _phase(core, "second") == "Running")
    second = node.allocation("default", "second")
    assert second is not None
    assert second.containers[0].device_ids(RES) == ("d0",)
    node.complete_pod("default", "second")
    wait(lambda: _phase(core, "second") == "Succeeded")
    status = _status(core, "second")
    assert status is not None
    (container,) = status.container_statuses or []
    assert container.state is not None
    assert container.state.terminated is not None
    assert container.state.terminated.exit_code == 0

    core.create_namespaced_pod("default", _pod(node_name, "third"))
    wait(lambda: _phase(core, "third") == "Running", what="third pod gets the freed device")
    with pytest.raises(errors.PodNotFoundError):
        node.complete_pod("default", "second")


def test_pods_without_devices_run_and_unknown_resources_are_left_to_the_scheduler(
    make_kubelet: Callable[..., kubelet.Kubelet],
    core: client.CoreV1Api,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    make_kubelet()
    core.create_namespaced_pod("default", _pod(node_name, "plain", count=0))
    core.create_namespaced_pod("default", _pod(node_name, "cluster-level", count=4))
    wait(lambda: _phase(core, "plain") == "Running")
    wait(lambda: _phase(core, "cluster-level") == "Running")


def test_restart_drops_plugins_until_they_register_again(
    make_kubelet: Callable[..., kubelet.Kubelet],
    make_plugin: Callable[..., Any],
    core: client.CoreV1Api,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    node = make_kubelet()
    plugin = make_plugin(RES, {"d0": True, "d1": True})
    plugin.register()
    wait(lambda: _node_resources(core, node_name) == ("2", "2"))
    core.create_namespaced_pod("default", _pod(node_name, "survivor"))
    wait(lambda: _phase(core, "survivor") == "Running")

    node.restart()
    assert not plugin.socket.exists()
    assert node.kubelet_socket.exists()
    wait(lambda: _node_resources(core, node_name) == ("0", "0"), what="resource at 0 after restart")
    core.create_namespaced_pod("default", _pod(node_name, "too-early"))
    wait(lambda: _phase(core, "too-early") == "Failed")
    early = _status(core, "too-early")
    assert early is not None
    assert early.message is not None
    assert (
        "no healthy devices present; cannot allocate unhealthy devices example.com/npu"
        in early.message
    )

    plugin.stop()
    plugin.serve()
    plugin.register()
    wait(lambda: _node_resources(core, node_name) == ("2", "2"), what="back after re-registration")
    assert _phase(core, "survivor") == "Running"
    core.create_namespaced_pod("default", _pod(node_name, "after"))
    wait(lambda: _phase(core, "after") == "Running")
    after = node.allocation("default", "after")
    assert after is not None
    assert after.containers[0].device_ids(RES) == ("d1",)


def test_pod_resources_lists_assignments_and_allocatable_devices(
    make_kubelet: Callable[..., kubelet.Kubelet],
    make_plugin: Callable[..., Any],
    core: client.CoreV1Api,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    node = make_kubelet()
    plugin = make_plugin(RES, {"d0": True, "d1": True, "d2": False}, numa={"d1": 1})
    plugin.register()
    wait(lambda: node.capacity().get(RES) == (3, 2))
    core.create_namespaced_pod("default", _pod(node_name, "lister", count=2))
    core.create_namespaced_pod("default", _pod(node_name, "idle", count=0))
    wait(lambda: _phase(core, "lister") == "Running" and _phase(core, "idle") == "Running")

    socket = node.config.pod_resources_socket
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stub = pr_grpc.PodResourcesListerStub(channel)
        listed = stub.List(pr.ListPodResourcesRequest(), timeout=5)
        pods = {p.name: p for p in listed.pod_resources}
        assert set(pods) == {"lister", "idle"}
        (main,) = pods["lister"].containers
        assert [(d.resource_name, list(d.device_ids)) for d in main.devices] == [
            (RES, ["d0"]),
            (RES, ["d1"]),
        ]
        assert not main.devices[0].HasField("topology")
        assert [n.ID for n in main.devices[1].topology.nodes] == [1]
        assert list(pods["idle"].containers[0].devices) == []

        allocatable = stub.GetAllocatableResources(pr.AllocatableResourcesRequest(), timeout=5)
        assert sorted(d.device_ids[0] for d in allocatable.devices) == ["d0", "d1"]

        one = stub.Get(
            pr.GetPodResourcesRequest(pod_name="lister", pod_namespace="default"), timeout=5
        )
        assert one.pod_resources.name == "lister"
        with pytest.raises(grpc.RpcError) as info:
            stub.Get(
                pr.GetPodResourcesRequest(pod_name="ghost", pod_namespace="default"), timeout=5
            )
        assert info.value.code() == grpc.StatusCode.UNKNOWN
        assert info.value.details() == "pod ghost in namespace default not found"


def test_a_new_node_zeroes_stale_extended_resources_of_an_existing_node(
    make_kubelet: Callable[..., kubelet.Kubelet], core: client.CoreV1Api, node_name: str
) -> None:
    stale = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name}}
    body = client.V1Node.from_dict(stale)
    assert body is not None
    core.create_node(body)
    core.patch_node_status(
        node_name,
        {"status": {"capacity": {RES: "4", "cpu": "2"}, "allocatable": {RES: "4", "cpu": "2"}}},
        _content_type="application/merge-patch+json",
    )
    make_kubelet()  # no checkpoint in its device plugin directory: a new node
    assert _node_resources(core, node_name) == ("0", "0")
    node = core.read_node(node_name)
    assert node.status is not None
    assert node.status.capacity is not None
    assert node.status.capacity["cpu"] == "8"


def test_running_pods_are_adopted_not_admitted_again(
    make_kubelet: Callable[..., kubelet.Kubelet],
    core: client.CoreV1Api,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    core.create_namespaced_pod("default", _pod(node_name, "veteran", count=0))
    core.patch_namespaced_pod_status(
        "veteran",
        "default",
        {"status": {"phase": "Running", "podIP": "10.244.9.9"}},
        _content_type="application/merge-patch+json",
    )
    node = make_kubelet()
    status = _status(core, "veteran")
    assert status is not None
    assert status.phase == "Running"
    assert status.pod_ip == "10.244.9.9"
    with grpc.insecure_channel(f"unix://{node.config.pod_resources_socket}") as channel:
        listed = pr_grpc.PodResourcesListerStub(channel).List(
            pr.ListPodResourcesRequest(), timeout=5
        )
    assert [p.name for p in listed.pod_resources] == ["veteran"]
    node.complete_pod("default", "veteran", exit_code=3)
    wait(lambda: _phase(core, "veteran") == "Failed")


def test_pre_start_failure_leaves_the_pod_pending_and_get_can_be_disabled(
    make_kubelet: Callable[..., kubelet.Kubelet],
    make_plugin: Callable[..., Any],
    core: client.CoreV1Api,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    node = make_kubelet(pod_resources_get=False)
    plugin = make_plugin(RES, {"d0": True}, pre_start=True, pre_start_error="firmware not loaded")
    plugin.register()
    wait(lambda: node.capacity().get(RES) == (1, 1))
    core.create_namespaced_pod("default", _pod(node_name, "stuck"))

    def waiting_reason() -> str | None:
        status = _status(core, "stuck")
        statuses = (status.container_statuses if status else None) or []
        waiting = statuses[0].state.waiting if statuses and statuses[0].state else None
        return waiting.reason if waiting else None

    wait(lambda: waiting_reason() == "CreateContainerConfigError", what="container waiting")
    status = _status(core, "stuck")
    assert status is not None
    assert status.phase == "Pending"
    (container,) = status.container_statuses or []
    assert container.state is not None
    assert container.state.waiting is not None
    assert container.state.waiting.message == (
        "device plugin PreStartContainer rpc failed with err: "
        "rpc error: code = FailedPrecondition desc = firmware not loaded"
    )
    with grpc.insecure_channel(f"unix://{node.config.pod_resources_socket}") as channel:
        stub = pr_grpc.PodResourcesListerStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.Get(
                pr.GetPodResourcesRequest(pod_name="stuck", pod_namespace="default"), timeout=5
            )
        assert info.value.details() == "PodResources API Get method disabled"
        listed = stub.List(pr.ListPodResourcesRequest(), timeout=5)
    assert [p.name for p in listed.pod_resources] == ["stuck"]
