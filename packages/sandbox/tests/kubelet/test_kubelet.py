"""The simulated kubelet end to end: kube-apiserver over HTTPS as ``system:node:<node>``,
plugins and PodResources over unix sockets. What it does while the API is away is in
``test_outages``."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import grpc
import pytest
from kubernetes import client

from vnpu_kubelet_api.podresources.v1 import api_pb2 as pr
from vnpu_kubelet_api.podresources.v1 import api_pb2_grpc as pr_grpc
from vnpu_sandbox.kubelet import errors, kubelet

from .kubeplane import Pods

RES = "example.com/npu"


def _limits(count: int) -> dict[str, str]:
    return {RES: str(count)} if count else {}


def _node_resources(core: client.CoreV1Api, node: str) -> tuple[str | None, str | None]:
    status = core.read_node(node).status
    assert status is not None
    capacity, allocatable = status.capacity or {}, status.allocatable or {}
    return capacity.get(RES), allocatable.get(RES)


def test_node_is_registered_with_labels_capacity_and_ready(
    make_kubelet: Callable[..., kubelet.Kubelet], pods: Pods, node_name: str
) -> None:
    make_kubelet()
    node = pods.core.read_node(node_name)
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


def test_each_status_publish_renews_the_node_lease(
    make_kubelet: Callable[..., kubelet.Kubelet], pods: Pods, node_name: str
) -> None:
    node = make_kubelet()
    leases = client.CoordinationV1Api(pods.core.api_client)
    first = leases.read_namespaced_lease(node_name, "kube-node-lease")
    assert first.spec is not None
    assert first.metadata is not None
    assert first.spec.holder_identity == node_name
    assert first.spec.lease_duration_seconds == 40
    owner = (first.metadata.owner_references or [None])[0]
    assert owner is not None
    assert (owner.kind, owner.name) == ("Node", node_name)
    node.publish_node_status()
    second = leases.read_namespaced_lease(node_name, "kube-node-lease")
    assert second.spec is not None
    assert second.metadata is not None
    assert second.spec.renew_time > first.spec.renew_time
    assert second.metadata.resource_version != first.metadata.resource_version


def test_plugin_devices_and_health_changes_reach_the_node_status(
    make_kubelet: Callable[..., kubelet.Kubelet],
    make_plugin: Callable[..., Any],
    pods: Pods,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    make_kubelet()
    plugin = make_plugin(RES, {"d0": True, "d1": True, "d2": False})
    plugin.register()
    wait(
        lambda: _node_resources(pods.core, node_name) == ("3", "2"),
        what="capacity 3 / allocatable 2",
    )
    plugin.set_health("d0", False)
    wait(
        lambda: _node_resources(pods.core, node_name) == ("3", "1"),
        what="allocatable 1 after d0 fails",
    )
    plugin.end_streams()
    wait(
        lambda: _node_resources(pods.core, node_name) == ("3", "0"),
        what="allocatable 0 after the stream ends",
    )


def test_pods_are_admitted_in_creation_order_and_run(
    make_kubelet: Callable[..., kubelet.Kubelet],
    make_plugin: Callable[..., Any],
    pods: Pods,
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
    pods.create(node_name, "blocker", _limits(1))
    assert entered.wait(5)
    pods.create(node_name, "zz-older", _limits(1))
    older_pod = pods.get("zz-older")
    assert older_pod is not None
    assert older_pod.metadata is not None
    created = older_pod.metadata.creation_timestamp
    # Creation timestamps have one-second resolution: the next pod must be created a second on.
    wait(lambda: datetime.now(UTC).replace(microsecond=0) > created, what="the next second")
    pods.create(node_name, "aa-newer", _limits(1))
    release.set()
    wait(lambda: pods.phase("aa-newer") == "Running", what="both pods running")
    wait(lambda: pods.phase("zz-older") == "Running")
    older, newer = (
        node.allocation(pods.namespace, "zz-older"),
        node.allocation(pods.namespace, "aa-newer"),
    )
    assert older is not None
    assert newer is not None
    assert older.containers[0].device_ids(RES) == ("d1",)
    assert newer.containers[0].device_ids(RES) == ("d2",)

    status = pods.status("zz-older")
    assert status is not None
    assert status.pod_ip
    assert status.host_ip == "127.0.0.1"
    (container,) = status.container_statuses or []
    assert container.state is not None
    assert container.state.running is not None
    assert container.ready is True
    assert node.config.state_dir is not None
    record = json.loads(
        (node.config.state_dir / "pods" / f"{pods.namespace}_zz-older.json").read_text()
    )
    (main,) = record["containers"]
    assert main["env"] == {"VISIBLE_DEVICES": "d1"}
    assert main["resources"][0]["cdiDevices"] == ["example.com/dev=d1"]


def test_allocate_failure_fails_the_pod_with_unexpected_admission_error(
    make_kubelet: Callable[..., kubelet.Kubelet],
    make_plugin: Callable[..., Any],
    pods: Pods,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    node = make_kubelet()
    plugin = make_plugin(RES, {"d0": True}, allocate_error="device d0 is on fire")
    plugin.register()
    wait(lambda: node.capacity().get(RES) == (1, 1))
    pods.create(node_name, "doomed", _limits(1))
    wait(lambda: pods.phase("doomed") == "Failed", what="pod Failed")
    status = pods.status("doomed")
    assert status is not None
    assert status.reason == "UnexpectedAdmissionError"
    assert status.message == (
        "Pod was rejected: Allocate failed due to rpc error: code = Internal "
        "desc = device d0 is on fire, which is unexpected"
    )

    def rejection_recorded() -> bool:
        events = pods.core.list_namespaced_event(pods.namespace).items
        return any(
            e.reason == "UnexpectedAdmissionError" and e.involved_object.name == "doomed"
            for e in events
        )

    wait(rejection_recorded, what="an UnexpectedAdmissionError event for the pod")
    assert node.allocation(pods.namespace, "doomed") is None
    pods.create(node_name, "too-many", _limits(2))
    wait(lambda: pods.phase("too-many") == "Failed")
    status = pods.status("too-many")
    assert status is not None
    assert status.message is not None
    assert (
        "requested number of devices unavailable for example.com/npu. Requested: 2, Available: 1"
        in status.message
    )


def test_deleted_and_completed_pods_free_their_devices(
    make_kubelet: Callable[..., kubelet.Kubelet],
    make_plugin: Callable[..., Any],
    pods: Pods,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    node = make_kubelet()
    plugin = make_plugin(RES, {"d0": True})
    plugin.register()
    wait(lambda: node.capacity().get(RES) == (1, 1))
    pods.create(node_name, "first", _limits(1), terminationGracePeriodSeconds=30)
    wait(lambda: pods.phase("first") == "Running")
    pods.delete("first")  # graceful: the kubelet finishes it
    wait(lambda: pods.phase("first") is None, what="pod removed by the kubelet's grace-0 delete")
    assert node.allocation(pods.namespace, "first") is None
    assert node.config.state_dir is not None
    assert not (node.config.state_dir / "pods" / f"{pods.namespace}_first.json").exists()

    pods.create(node_name, "second", _limits(1))
    wait(lambda: pods.phase("second") == "Running")
    second = node.allocation(pods.namespace, "second")
    assert second is not None
    assert second.containers[0].device_ids(RES) == ("d0",)
    node.complete_pod(pods.namespace, "second")
    wait(lambda: pods.phase("second") == "Succeeded")
    status = pods.status("second")
    assert status is not None
    (container,) = status.container_statuses or []
    assert container.state is not None
    assert container.state.terminated is not None
    assert container.state.terminated.exit_code == 0

    pods.create(node_name, "third", _limits(1))
    wait(lambda: pods.phase("third") == "Running", what="third pod gets the freed device")
    with pytest.raises(errors.PodNotFoundError):
        node.complete_pod(pods.namespace, "second")


def test_pods_without_devices_run_and_unknown_resources_are_left_to_the_scheduler(
    make_kubelet: Callable[..., kubelet.Kubelet],
    pods: Pods,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    make_kubelet()
    pods.create(node_name, "plain", _limits(0))
    pods.create(node_name, "cluster-level", _limits(4))
    wait(lambda: pods.phase("plain") == "Running")
    wait(lambda: pods.phase("cluster-level") == "Running")


def test_restart_drops_plugins_until_they_register_again(
    make_kubelet: Callable[..., kubelet.Kubelet],
    make_plugin: Callable[..., Any],
    pods: Pods,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    node = make_kubelet()
    plugin = make_plugin(RES, {"d0": True, "d1": True})
    plugin.register()
    wait(lambda: _node_resources(pods.core, node_name) == ("2", "2"))
    pods.create(node_name, "survivor", _limits(1))
    wait(lambda: pods.phase("survivor") == "Running")

    node.restart()
    assert not plugin.socket.exists()
    assert node.kubelet_socket.exists()
    wait(
        lambda: _node_resources(pods.core, node_name) == ("0", "0"),
        what="resource at 0 after restart",
    )
    pods.create(node_name, "too-early", _limits(1))
    wait(lambda: pods.phase("too-early") == "Failed")
    early = pods.status("too-early")
    assert early is not None
    assert early.message is not None
    assert (
        "no healthy devices present; cannot allocate unhealthy devices example.com/npu"
        in early.message
    )

    plugin.stop()
    plugin.serve()
    plugin.register()
    wait(
        lambda: _node_resources(pods.core, node_name) == ("2", "2"),
        what="back after re-registration",
    )
    assert pods.phase("survivor") == "Running"
    pods.create(node_name, "after", _limits(1))
    wait(lambda: pods.phase("after") == "Running")
    after = node.allocation(pods.namespace, "after")
    assert after is not None
    assert after.containers[0].device_ids(RES) == ("d1",)


def test_pod_resources_lists_assignments_and_allocatable_devices(
    make_kubelet: Callable[..., kubelet.Kubelet],
    make_plugin: Callable[..., Any],
    pods: Pods,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    node = make_kubelet()
    plugin = make_plugin(RES, {"d0": True, "d1": True, "d2": False}, numa={"d1": 1})
    plugin.register()
    wait(lambda: node.capacity().get(RES) == (3, 2))
    pods.create(node_name, "lister", _limits(2))
    pods.create(node_name, "idle", _limits(0))
    wait(lambda: pods.phase("lister") == "Running" and pods.phase("idle") == "Running")

    socket = node.config.pod_resources_socket
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stub = pr_grpc.PodResourcesListerStub(channel)
        listed = stub.List(pr.ListPodResourcesRequest(), timeout=5)
        by_name = {p.name: p for p in listed.pod_resources}
        assert set(by_name) == {"lister", "idle"}
        (main,) = by_name["lister"].containers
        assert [(d.resource_name, list(d.device_ids)) for d in main.devices] == [
            (RES, ["d0"]),
            (RES, ["d1"]),
        ]
        assert not main.devices[0].HasField("topology")
        assert [n.ID for n in main.devices[1].topology.nodes] == [1]
        assert list(by_name["idle"].containers[0].devices) == []

        allocatable = stub.GetAllocatableResources(pr.AllocatableResourcesRequest(), timeout=5)
        assert sorted(d.device_ids[0] for d in allocatable.devices) == ["d0", "d1"]

        one = stub.Get(
            pr.GetPodResourcesRequest(pod_name="lister", pod_namespace=pods.namespace), timeout=5
        )
        assert one.pod_resources.name == "lister"
        with pytest.raises(grpc.RpcError) as info:
            stub.Get(
                pr.GetPodResourcesRequest(pod_name="ghost", pod_namespace=pods.namespace), timeout=5
            )
        assert info.value.code() == grpc.StatusCode.UNKNOWN
        assert info.value.details() == f"pod ghost in namespace {pods.namespace} not found"


def test_a_new_node_zeroes_stale_extended_resources_of_an_existing_node(
    make_kubelet: Callable[..., kubelet.Kubelet], pods: Pods, node_name: str
) -> None:
    stale = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name}}
    body = client.V1Node.from_dict(stale)
    assert body is not None
    pods.core.create_node(body)
    pods.core.patch_node_status(
        node_name,
        {"status": {"capacity": {RES: "4", "cpu": "2"}, "allocatable": {RES: "4", "cpu": "2"}}},
        _content_type="application/merge-patch+json",
    )
    make_kubelet()  # no checkpoint in its device plugin directory: a new node
    assert _node_resources(pods.core, node_name) == ("0", "0")
    node = pods.core.read_node(node_name)
    assert node.status is not None
    assert node.status.capacity is not None
    assert node.status.capacity["cpu"] == "8"


def test_running_pods_are_adopted_not_admitted_again(
    make_kubelet: Callable[..., kubelet.Kubelet],
    pods: Pods,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    pods.create(node_name, "veteran", _limits(0))
    pods.core.patch_namespaced_pod_status(
        "veteran",
        pods.namespace,
        {"status": {"phase": "Running", "podIP": "10.244.9.9"}},
        _content_type="application/merge-patch+json",
    )
    node = make_kubelet()
    status = pods.status("veteran")
    assert status is not None
    assert status.phase == "Running"
    assert status.pod_ip == "10.244.9.9"
    with grpc.insecure_channel(f"unix://{node.config.pod_resources_socket}") as channel:
        listed = pr_grpc.PodResourcesListerStub(channel).List(
            pr.ListPodResourcesRequest(), timeout=5
        )
    assert [p.name for p in listed.pod_resources] == ["veteran"]
    node.complete_pod(pods.namespace, "veteran", exit_code=3)
    wait(lambda: pods.phase("veteran") == "Failed")


def test_pre_start_failure_leaves_the_pod_pending_and_get_can_be_disabled(
    make_kubelet: Callable[..., kubelet.Kubelet],
    make_plugin: Callable[..., Any],
    pods: Pods,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    node = make_kubelet(pod_resources_get=False)
    plugin = make_plugin(RES, {"d0": True}, pre_start=True, pre_start_error="firmware not loaded")
    plugin.register()
    wait(lambda: node.capacity().get(RES) == (1, 1))
    pods.create(node_name, "stuck", _limits(1))

    def waiting_reason() -> str | None:
        status = pods.status("stuck")
        statuses = (status.container_statuses if status else None) or []
        waiting = statuses[0].state.waiting if statuses and statuses[0].state else None
        return waiting.reason if waiting else None

    wait(lambda: waiting_reason() == "CreateContainerConfigError", what="container waiting")
    status = pods.status("stuck")
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
                pr.GetPodResourcesRequest(pod_name="stuck", pod_namespace=pods.namespace), timeout=5
            )
        assert info.value.details() == "PodResources API Get method disabled"
        listed = stub.List(pr.ListPodResourcesRequest(), timeout=5)
    assert [p.name for p in listed.pod_resources] == ["stuck"]
