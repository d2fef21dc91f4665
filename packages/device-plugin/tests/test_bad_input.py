"""Bad input: unknown device ids, malformed pod annotations, pods no scheduler placed.

Each gets a clear error naming what is wrong (the device id, the annotation key), the pod
concerned fails, and the plugin goes on serving the next pod.
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from vnpu_core import protocol
from vnpu_kubelet_api.deviceplugin.v1beta1 import api_pb2

Node = Any
Kit = Any
CW = "Ascend310P"


def _allocate(node: Node, *ids: str) -> api_pb2.AllocateResponse:
    request = api_pb2.AllocateRequest(
        container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=list(ids))]
    )
    response: api_pb2.AllocateResponse = node.stub().Allocate(request, timeout=10)
    return response


@pytest.mark.parametrize(
    ("device", "problem"),
    [
        ("nvidia-0", "no Ascend310P chip on npu-node-1 has it"),
        ("{uuid}-7", "has device ids -0 to -6"),
        ("{uuid}-01", "has device ids -0 to -6"),
        ("{uuid}", "no Ascend310P chip"),
        ("", "no Ascend310P chip"),
    ],
)
def test_unknown_device_ids_are_invalid_argument(running: Node, device: str, problem: str) -> None:
    device = device.format(uuid=running.api.uuid(0))
    with pytest.raises(grpc.RpcError) as caught:
        _allocate(running, device)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert problem in str(caught.value.details())
    assert repr(device) in str(caught.value.details())


def test_a_request_without_devices_or_with_a_repeated_id_is_invalid_argument(
    running: Node,
) -> None:
    device = f"{running.api.uuid(0)}-0"
    for ids in ([], [device, device]):
        with pytest.raises(grpc.RpcError) as caught:
            _allocate(running, *ids)
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as caught:
        running.stub().Allocate(api_pb2.AllocateRequest(), timeout=10)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def _place_broken(node: Node, kit: Kit, name: str, key: str, value: str, lock: str) -> None:
    notes = node.api.decision([[kit.Grant(1, "vir02", 6144)]])
    notes[key] = value
    node.api.create_pod(name, [("c0", 1)])
    if lock == "owner":
        node.api.lock((node.namespace, name))
    node.api.bind(name, notes)


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        (protocol.to_allocate_key(CW), "garbage", "container entry not closed by ';'"),
        (protocol.to_allocate_key(CW), "U1,Ascend310P,6144,0:;", "not a Ascend310P chip"),
        (protocol.to_allocate_key(CW), "{uuid},Ascend310P,-5,0:;", "memory must be an integer"),
        (protocol.runtime_key(CW), '[{"UUID": 5}]', "must be a string"),
        (protocol.runtime_key(CW), "{not json", "not JSON"),
        (protocol.runtime_key(CW), '[{"UUID":"{uuid}","temp":"vir99"}]', "not a 310P3 template"),
        (protocol.VNPU_MODE_KEY, protocol.SOFT_MODE_VALUE, "does not run hami-vnpu-core"),
    ],
)
@pytest.mark.parametrize("lock", ["owner", "none"])
def test_a_malformed_annotation_fails_the_pod_naming_the_key_and_the_next_pod_is_served(
    running: Node, kit: Kit, key: str, value: str, problem: str, lock: str
) -> None:
    node = running
    uuid = node.api.uuid(1)
    value = value.replace("{uuid}", uuid)
    _place_broken(node, kit, "broken", key, value, lock)
    kit.wait_for(lambda: node.api.phase("broken") == "Failed", what="the broken pod failed")
    message = node.api.pod("broken")["status"].get("message", "")
    assert f"annotation {key}" in message
    assert problem in message
    notes = node.api.annotations("broken")
    assert notes[protocol.BIND_PHASE_KEY] == "failed"
    assert protocol.NODE_LOCK_KEY not in node.api.node_annotations()
    assert node.vnpus() == []
    node.api.place("fine", [[kit.Grant(1, "vir02", 6144)]])
    kit.wait_for(lambda: node.running("fine"), what="the next pod served")
    assert (
        node.plugin.stats.registry.get_sample_value(
            "vnpu_device_plugin_allocations_total", {"result": "bad_annotation"}
        )
        == 1
    )


def test_a_pod_no_npu_scheduler_placed_fails_with_a_reason(running: Node, kit: Kit) -> None:
    node = running
    node.api.create_pod("direct", [("c0", 1)])
    node.api.bind("direct", {})  # bound without any scheduler annotation
    kit.wait_for(lambda: node.api.phase("direct") == "Failed", what="rejected")
    message = node.api.pod("direct")["status"]["message"]
    assert "FailedPrecondition" in message or "FAILED_PRECONDITION" in message
    assert (
        f"kubelet is admitting pod {node.namespace}/direct, which has no decision for this node"
        in message
    )
    node.api.place("fine", [[kit.Grant(0, "vir01", 3072)]])
    kit.wait_for(lambda: node.running("fine"))


def test_a_decision_for_another_device_count_is_refused_after_waiting(
    running: Node, kit: Kit
) -> None:
    node = running
    node.api.lock((node.namespace, "ghost"))  # a lock naming a pod that is not here
    node.api.create_pod("asks-one", [("c0", 1)])
    two = node.api.decision([[kit.Grant(0, None, 21527), kit.Grant(1, None, 21527)]])
    node.api.bind("asks-one", two)
    kit.wait_for(lambda: node.api.phase("asks-one") == "Failed", what="count mismatch rejected")
    message = node.api.pod("asks-one")["status"]["message"]
    assert (
        f"kubelet is admitting pod {node.namespace}/asks-one, whose next container needs 2 "
        "device(s), but kubelet asks for 1" in message
    )
    assert node.api.annotations("asks-one")[protocol.BIND_PHASE_KEY] == "allocating"  # not its turn


def test_an_unreadable_node_lock_is_left_alone_and_the_pod_served(running: Node, kit: Kit) -> None:
    node = running
    node.api.annotate_node({protocol.NODE_LOCK_KEY: "yesterday"})
    node.api.place("p", [[kit.Grant(0, "vir01", 3072)]], lock="none")
    kit.wait_for(lambda: node.running("p"))
    assert node.api.node_annotations()[protocol.NODE_LOCK_KEY] == "yesterday"


def test_get_preferred_allocation_without_a_waiting_pod_still_answers(running: Node) -> None:
    uuids = [running.api.uuid(i) for i in range(2)]
    request = api_pb2.PreferredAllocationRequest(
        container_requests=[
            api_pb2.ContainerPreferredAllocationRequest(
                available_deviceIDs=[f"{uuids[0]}-0", f"{uuids[1]}-3", "unknown-1"],
                must_include_deviceIDs=[f"{uuids[1]}-3"],
                allocation_size=2,
            )
        ]
    )
    response = running.stub().GetPreferredAllocation(request, timeout=10)
    assert list(response.container_responses[0].deviceIDs) == [f"{uuids[1]}-3", f"{uuids[0]}-0"]


def test_volcanos_oversize_decision_fails_the_pod_and_creates_nothing(
    running: Node, kit: Kit
) -> None:
    """Volcano's trimMemory turns a 30000 MiB ask on a 310P (24576 MiB) into memory 0 and
    template vir01; the plugin refuses it rather than create a 3072 MiB vNPU."""
    node = running
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "big"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {
                        "limits": {f"huawei.com/{CW}": "1", f"huawei.com/{CW}-memory": "30000"}
                    },
                }
            ]
        },
    }
    node.api.core.create_namespaced_pod(node.namespace, body, _preload_content=False)
    node.api.lock(None)  # Volcano's bare lock
    node.api.bind("big", node.api.decision([[kit.Grant(1, "vir01", 0)]]))
    assert node.api.annotations("big")[protocol.to_allocate_key(CW)].endswith(",0,0:;")

    kit.wait_for(lambda: node.api.phase("big") == "Failed", what="the oversize pod failed")
    message = node.api.pod("big")["status"].get("message", "")
    assert (
        f"pod {node.namespace}/big container main: template vir01 (3072 MiB) is smaller than "
        "the 30000 MiB asked; an Ascend310P chip has 24576 MiB"
    ) in message
    assert "InvalidArgument" in message or "INVALID_ARGUMENT" in message
    assert node.vnpus() == []
    assert node.api.annotations("big")[protocol.BIND_PHASE_KEY] == "failed"
    assert protocol.NODE_LOCK_KEY not in node.api.node_annotations()
    warnings = [
        (e.get("reason"), e.get("type"), (e.get("source") or {}).get("component"))
        for e in node.api.event_list()
        if (e.get("involvedObject") or {}).get("name") == "big"
    ]
    assert ("DecisionTooSmall", "Warning", "vnpu-device-plugin") in warnings
    assert (
        node.plugin.stats.registry.get_sample_value(
            "vnpu_device_plugin_allocations_total", {"result": "decision_too_small"}
        )
        == 1
    )
    node.api.place("fine", [[kit.Grant(1, "vir02", 6144)]])  # the node goes on serving
    kit.wait_for(lambda: node.running("fine"), what="the next pod served")
