"""The simulated kubelet's DRA side: plugin registration, NodePrepareResources before the
containers start, CDI devices and their environment, PodResources DynamicResources, and
NodeUnprepareResources after the pod stops. A fake driver (``draplugin``) on real unix
sockets, ResourceClaims allocated and reserved through the real API as kube-scheduler would."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from kubernetes import client

from vnpu_kubelet_api.podresources.v1 import api_pb2 as pr
from vnpu_kubelet_api.podresources.v1 import api_pb2_grpc as pr_grpc
from vnpu_sandbox.kubelet import kubelet

from .draplugin import DraDriver
from .kubeplane import Pods

DRIVER = "npu.example.com"
RETRY = 0.2


@pytest.fixture
def driver(sock_dir: Path, node_name: str) -> Iterator[DraDriver]:
    """A DRA driver serving its endpoint; it registers when the test says so."""
    made = DraDriver(
        DRIVER, sock_dir / "dra", sock_dir / "plugins_registry", sock_dir / "cdi", node_name
    ).serve()
    try:
        yield made
    finally:
        made.stop()


@pytest.fixture
def dra_kubelet(make_kubelet: Callable[..., kubelet.Kubelet]) -> kubelet.Kubelet:
    return make_kubelet(dra_retry_seconds=RETRY)


class Claims:
    """ResourceClaims of the test's namespace, written by the admin as kube-scheduler would."""

    def __init__(self, pods: Pods) -> None:
        self.pods = pods
        # Any: the client's type hints do not model raw answers (_preload_content=False).
        self.api: Any = client.ResourceV1Api(pods.core.api_client)

    def create(self, name: str, owner: dict[str, object] | None = None) -> None:
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "ownerReferences": [owner] if owner else []},
            "spec": {
                "devices": {"requests": [{"name": "npu", "exactly": {"deviceClassName": DRIVER}}]}
            },
        }
        self.api.create_namespaced_resource_claim(
            self.pods.namespace, body, _preload_content=False
        ).release_conn()

    def allocate(self, name: str, node: str, device: str, pods: list[str]) -> None:
        """status.allocation (one device of ``node``'s pool) and reservedFor the pods."""
        reserved = []
        for pod in pods:
            found = self.pods.get(pod)
            assert found is not None
            assert found.metadata is not None
            reserved.append({"resource": "pods", "name": pod, "uid": found.metadata.uid})
        status = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "npu", "driver": DRIVER, "pool": node, "device": device}
                    ]
                }
            },
            "reservedFor": reserved,
        }
        self.api.patch_namespaced_resource_claim_status(
            name, self.pods.namespace, {"status": status}, _preload_content=False
        ).release_conn()

    def uid(self, name: str) -> str:
        answer = self.api.read_namespaced_resource_claim(
            name, self.pods.namespace, _preload_content=False
        )
        return str(json.loads(answer.data)["metadata"]["uid"])


@pytest.fixture
def claims(pods: Pods) -> Claims:
    return Claims(pods)


def create_pod(pods: Pods, name: str, claim: str) -> None:
    """A pod using ``claim`` in its one container, not bound yet."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "resourceClaims": [{"name": "npu", "resourceClaimName": claim}],
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "npu"}]}}
            ],
        },
    }
    pods.core.create_namespaced_pod(pods.namespace, body)


def bind(pods: Pods, name: str, node: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    pods.core.create_namespaced_pod_binding(
        name, pods.namespace, body, _preload_content=False
    ).release_conn()


def events(pods: Pods, reason: str) -> list[str]:
    listed = pods.core.list_namespaced_event(pods.namespace)
    return [str(e.message) for e in listed.items if e.reason == reason]


def scheduled(pods: Pods, claims: Claims, node: str, pod: str, claim: str) -> None:
    """What kube-scheduler does: create nothing, allocate and reserve the claim, then bind."""
    create_pod(pods, pod, claim)
    claims.allocate(claim, node, "npu-3", [pod])
    bind(pods, pod, node)


def test_claim_is_prepared_before_start_seen_by_the_container_and_unprepared_after(
    dra_kubelet: kubelet.Kubelet,
    driver: DraDriver,
    claims: Claims,
    pods: Pods,
    node_name: str,
    sock_dir: Path,
    wait: Callable[..., None],
) -> None:
    node = dra_kubelet
    driver.register()
    wait(lambda: node.drivers.names() == [DRIVER], what="driver registered")
    assert [s.plugin_registered for s in driver.statuses] == [True]

    phases: list[str | None] = []
    driver.before_prepare = lambda request: phases.append(pods.phase("train"))
    driver.devices["c1"] = "npu-3"
    claims.create("c1")
    scheduled(pods, claims, node_name, "train", "c1")
    wait(lambda: pods.phase("train") == "Running", what="pod running")
    assert driver.prepared_names() == ["c1"]
    assert driver.prepared[0].namespace == pods.namespace
    assert driver.prepared[0].uid == claims.uid("c1")
    assert phases == ["Pending"]  # Prepare came before the containers started

    record = node.allocation(pods.namespace, "train")
    assert record is not None
    main = record.container("main")
    assert main is not None
    assert main.cdi_devices == ("example.com/npu=npu-3",)
    assert main.env == {"ASCEND_VISIBLE_DEVICES": "3", "ASCEND_RUNTIME_OPTIONS": "NODRV"}
    assert main.cdi.device_nodes == ("/dev/davinci3",)
    on_disk = json.loads((sock_dir / "state" / "pods" / f"{pods.namespace}_train.json").read_text())
    assert on_disk["containers"][0]["claims"][0]["cdiDevices"] == ["example.com/npu=npu-3"]

    with grpc.insecure_channel(f"unix://{sock_dir / 'pr' / 'kubelet.sock'}") as channel:
        listed = pr_grpc.PodResourcesListerStub(channel).List(
            pr.ListPodResourcesRequest(), timeout=5
        )
    (pod,) = [p for p in listed.pod_resources if p.name == "train"]
    (dynamic,) = pod.containers[0].dynamic_resources
    assert (dynamic.claim_name, dynamic.claim_namespace) == ("c1", pods.namespace)
    (resource,) = dynamic.claim_resources
    assert (resource.driver_name, resource.pool_name, resource.device_name) == (
        DRIVER,
        node_name,
        "npu-3",
    )
    assert [c.name for c in resource.cdi_devices] == ["example.com/npu=npu-3"]

    pods.delete("train")
    wait(lambda: driver.unprepared_names() == ["c1"], what="claim unprepared")
    wait(lambda: pods.get("train") is None, what="pod deleted for good")
    assert driver.prepared_names() == ["c1"]  # prepared once

    driver.stop()
    wait(lambda: node.drivers.names() == [], what="driver unregistered")


def test_prepare_error_keeps_the_pod_pending_and_is_retried(
    dra_kubelet: kubelet.Kubelet,
    driver: DraDriver,
    claims: Claims,
    pods: Pods,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    driver.prepare_error = "chip 3 is busy"
    driver.register()
    wait(lambda: dra_kubelet.drivers.names() == [DRIVER], what="driver registered")
    claims.create("c1")
    scheduled(pods, claims, node_name, "train", "c1")
    wait(lambda: len(driver.prepared) >= 3, what="prepare retried")
    status = pods.status("train")
    assert status is not None
    assert status.phase == "Pending"
    (container,) = status.container_statuses or []
    assert container.state is not None
    assert container.state.waiting is not None
    assert container.state.waiting.reason == "ContainerCreating"
    assert dra_kubelet.allocation(pods.namespace, "train") is None
    wait(lambda: events(pods, "FailedPrepareDynamicResources"), what="event")
    assert events(pods, "FailedPrepareDynamicResources") == [
        "Failed to prepare dynamic resources: prepare dynamic resources: "
        "NodePrepareResources failed for ResourceClaim c1: chip 3 is busy"
    ]

    driver.prepare_error = ""
    wait(lambda: pods.phase("train") == "Running", what="pod running after the retry")
    record = dra_kubelet.allocation(pods.namespace, "train")
    assert record is not None
    main = record.container("main")
    assert main is not None
    assert main.env["ASCEND_VISIBLE_DEVICES"] == "0"


def test_a_driver_registering_after_the_pod_still_prepares_it(
    dra_kubelet: kubelet.Kubelet,
    driver: DraDriver,
    claims: Claims,
    pods: Pods,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    claims.create("c1")
    scheduled(pods, claims, node_name, "train", "c1")
    wait(lambda: events(pods, "FailedPrepareDynamicResources"), what="event")
    assert events(pods, "FailedPrepareDynamicResources")[0].endswith(
        f"DRA driver {DRIVER} is not registered"
    )
    assert pods.phase("train") == "Pending"
    assert driver.prepared == []

    driver.register()
    wait(lambda: pods.phase("train") == "Running", what="pod running once the driver is there")
    assert driver.prepared_names() == ["c1"]


def test_a_claim_not_reserved_for_the_pod_is_not_prepared(
    dra_kubelet: kubelet.Kubelet,
    driver: DraDriver,
    claims: Claims,
    pods: Pods,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    driver.register()
    wait(lambda: dra_kubelet.drivers.names() == [DRIVER], what="driver registered")
    claims.create("c1")
    create_pod(pods, "train", "c1")
    claims.allocate("c1", node_name, "npu-0", [])
    bind(pods, "train", node_name)
    wait(lambda: events(pods, "FailedPrepareDynamicResources"), what="event")
    (message,) = events(pods, "FailedPrepareDynamicResources")
    assert "pod train (" in message
    assert "is not allowed to use ResourceClaim c1" in message
    assert driver.prepared == []
    claims.allocate("c1", node_name, "npu-0", ["train"])
    wait(lambda: pods.phase("train") == "Running", what="pod running once reserved")


def test_a_shared_claim_is_prepared_once_and_unprepared_after_its_last_pod(
    dra_kubelet: kubelet.Kubelet,
    driver: DraDriver,
    claims: Claims,
    pods: Pods,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    driver.register()
    wait(lambda: dra_kubelet.drivers.names() == [DRIVER], what="driver registered")
    claims.create("shared")
    create_pod(pods, "a", "shared")
    create_pod(pods, "b", "shared")
    claims.allocate("shared", node_name, "npu-1", ["a", "b"])
    bind(pods, "a", node_name)
    bind(pods, "b", node_name)
    wait(lambda: pods.phase("a") == "Running" and pods.phase("b") == "Running", what="running")
    assert driver.prepared_names() == ["shared"]

    pods.delete("a")
    wait(lambda: pods.get("a") is None, what="a gone")
    assert driver.unprepared == []
    dra_kubelet.complete_pod(pods.namespace, "b")
    wait(lambda: driver.unprepared_names() == ["shared"], what="unprepared after the last pod")


def test_a_failed_unprepare_is_retried_and_holds_the_final_delete(
    dra_kubelet: kubelet.Kubelet,
    driver: DraDriver,
    claims: Claims,
    pods: Pods,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    driver.register()
    wait(lambda: dra_kubelet.drivers.names() == [DRIVER], what="driver registered")
    claims.create("c1")
    scheduled(pods, claims, node_name, "train", "c1")
    wait(lambda: pods.phase("train") == "Running", what="running")
    driver.unprepare_error = "still in use"
    pods.delete("train")
    wait(lambda: len(driver.unprepared) >= 3, what="unprepare retried")
    terminating = pods.get("train")
    assert terminating is not None
    assert terminating.metadata is not None
    assert terminating.metadata.deletion_timestamp is not None
    driver.unprepare_error = ""
    wait(lambda: pods.get("train") is None, what="pod deleted once unprepared")


def test_a_claim_from_a_template_is_found_through_the_pod_status(
    dra_kubelet: kubelet.Kubelet,
    driver: DraDriver,
    claims: Claims,
    pods: Pods,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    driver.register()
    wait(lambda: dra_kubelet.drivers.names() == [DRIVER], what="driver registered")
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train"},
        "spec": {
            "resourceClaims": [{"name": "npu", "resourceClaimTemplateName": "one-npu"}],
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "npu"}]}}
            ],
        },
    }
    pods.core.create_namespaced_pod(pods.namespace, body)
    created = pods.get("train")
    assert created is not None
    assert created.metadata is not None
    owner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "train",
        "uid": created.metadata.uid,
        "controller": True,
    }
    claims.create("train-npu-x7", owner=owner)  # as the resourceclaim controller names it
    pods.core.patch_namespaced_pod_status(
        "train",
        pods.namespace,
        {
            "status": {
                "resourceClaimStatuses": [{"name": "npu", "resourceClaimName": "train-npu-x7"}]
            }
        },
    )
    claims.allocate("train-npu-x7", node_name, "npu-5", ["train"])
    bind(pods, "train", node_name)
    wait(lambda: pods.phase("train") == "Running", what="pod running")
    assert driver.prepared_names() == ["train-npu-x7"]
    record = dra_kubelet.allocation(pods.namespace, "train")
    assert record is not None
    main = record.container("main")
    assert main is not None
    assert main.cdi_devices == ("example.com/npu=npu-0",)


def test_after_a_kubelet_restart_drivers_register_again_and_claims_stay_prepared(
    dra_kubelet: kubelet.Kubelet,
    driver: DraDriver,
    claims: Claims,
    pods: Pods,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    driver.register()
    wait(lambda: dra_kubelet.drivers.names() == [DRIVER], what="driver registered")
    claims.create("c1")
    scheduled(pods, claims, node_name, "train", "c1")
    wait(lambda: pods.phase("train") == "Running", what="running")
    dra_kubelet.restart()
    wait(lambda: len(driver.statuses) == 2, what="registered again from the existing socket")
    assert all(s.plugin_registered for s in driver.statuses)
    assert dra_kubelet.drivers.names() == [DRIVER]
    pods.delete("train")
    wait(lambda: driver.unprepared_names() == ["c1"], what="unprepared after the restart")
    assert driver.prepared_names() == ["c1"]


class Slices:
    """ResourceSlices, as the admin reads and writes them (a driver publishing its pool)."""

    def __init__(self, pods: Pods) -> None:
        self.api: Any = client.ResourceV1Api(pods.core.api_client)

    def publish(self, node: str, driver: str = DRIVER) -> None:
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"generateName": f"{node}-"},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
                "devices": [{"name": "npu-0"}],
            },
        }
        self.api.create_resource_slice(body, _preload_content=False).release_conn()

    def of(self, node: str) -> list[str]:
        answer = self.api.list_resource_slice(
            field_selector=f"spec.nodeName={node}", _preload_content=False
        )
        return sorted(str(s["spec"]["driver"]) for s in json.loads(answer.data)["items"])

    def delete_all(self, *nodes: str) -> None:
        for node in nodes:
            self.api.delete_collection_resource_slice(
                field_selector=f"spec.nodeName={node}", _preload_content=False
            ).release_conn()


@pytest.fixture
def slices(pods: Pods, node_name: str) -> Iterator[Slices]:
    made = Slices(pods)
    try:
        yield made
    finally:
        made.delete_all(node_name, f"{node_name}-other")


def test_the_kubelet_wipes_its_nodes_slices_at_start_and_a_gone_drivers_after_the_delay(
    make_kubelet: Callable[..., kubelet.Kubelet],
    driver: DraDriver,
    slices: Slices,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    """As the real kubelet: no driver is usable at start, so every slice of the node goes (not
    another node's); a driver that stops has its slices deleted after the wiping delay."""
    other = f"{node_name}-other"
    slices.publish(node_name)
    slices.publish(node_name, "other.example.com")
    slices.publish(other)
    started = make_kubelet(dra_wiping_delay_seconds=0.5)
    assert slices.of(node_name) == []
    assert slices.of(other) == [DRIVER]
    driver.register()
    wait(lambda: started.drivers.names() == [DRIVER], what="driver registered")
    slices.publish(node_name)
    driver.stop()
    wait(lambda: started.drivers.names() == [], what="driver unregistered")
    wait(lambda: slices.of(node_name) == [], what="the gone driver's slices wiped")
    assert slices.of(other) == [DRIVER]


def test_a_driver_back_within_the_delay_keeps_its_slices(
    make_kubelet: Callable[..., kubelet.Kubelet],
    driver: DraDriver,
    slices: Slices,
    node_name: str,
    wait: Callable[..., None],
) -> None:
    started = make_kubelet(dra_wiping_delay_seconds=2.0)
    driver.register()
    wait(lambda: started.drivers.names() == [DRIVER], what="driver registered")
    slices.publish(node_name)
    driver.stop()  # a driver restart: its sockets go and come back
    wait(lambda: started.drivers.names() == [], what="driver unregistered")
    driver.serve().register()
    wait(lambda: started.drivers.names() == [DRIVER], what="driver registered again")
    time.sleep(3.0)  # past the delay: the wipe was cancelled, nothing deleted the slice
    assert slices.of(node_name) == [DRIVER]
