"""Faults: the plugin killed between the steps of an Allocate, chips failing and recovering,
and a Kubernetes API that answers 409 and 500.

Crash tests run the real ``vnpu-device-plugin`` command with the hidden ``--crash-at`` flag:
the process exits at that point as if killed, the kubelet fails the pod's admission, and a
restarted plugin must leave no vNPU behind and serve no pod twice.
"""

from __future__ import annotations

import json
import signal
from typing import Any

import grpc
import pytest

from vnpu_core import protocol
from vnpu_device_plugin import crashpoints
from vnpu_kubelet_api.deviceplugin.v1beta1 import api_pb2
from vnpu_npu import backend
from vnpu_npu.sim import control

Node = Any
Kit = Any
CW = "Ascend310P"


def _sample(node: Node, name: str, **labels: str) -> float:
    value = node.plugin.stats.registry.get_sample_value(name, labels)
    return float(value or 0.0)


@pytest.mark.parametrize("point", crashpoints.POINTS)
def test_killed_mid_allocate_leaks_no_vnpu_and_serves_no_pod_twice(
    node: Node, kit: Kit, point: str
) -> None:
    first = kit.PluginProcess(node, "--reconcile-interval", "0.2").start("--crash-at", point)
    try:
        kit.wait_for(lambda: node.kubelet.capacity().get(kit.RESOURCE) == (28, 28), timeout=30)
        node.api.place("victim", [[kit.Grant(1, "vir02", 6144)]])
        assert first.wait() == crashpoints.EXIT_STATUS
    finally:
        first.stop()
    kit.wait_for(lambda: node.api.phase("victim") == "Failed", what="kubelet fails the pod")
    records = node.ledger()
    if point == crashpoints.AFTER_CREATE:
        assert [r["state"] for r in records] == ["intent"]
    else:
        assert [r["state"] for r in records] == ["owned"]
    assert [v[0::2] for v in node.vnpus()] == [(1, "vir02")]  # created, then the crash

    second = kit.PluginProcess(node, "--reconcile-interval", "0.2").start()
    try:
        kit.wait_for(lambda: node.vnpus() == [], what="the orphaned vNPU reclaimed")
        kit.wait_for(lambda: node.ledger() == [], what="the ledger emptied")
        kit.wait_for(
            lambda: protocol.NODE_LOCK_KEY not in node.api.node_annotations(),
            what="the failed pod's node lock released",
        )
        kit.wait_for(lambda: node.kubelet.capacity().get(kit.RESOURCE) == (28, 28), timeout=30)
        node.api.place("next", [[kit.Grant(1, "vir02", 6144)]])
        kit.wait_for(lambda: node.running("next"), what="the next pod served")
        (vnpu,) = node.vnpus()
        assert node.env("next", "c0")["ASCEND_VISIBLE_DEVICES"] == str(vnpu[1])
        assert [r["pod"] for r in node.ledger()] == ["next"]
        assert node.api.phase("victim") == "Failed"
        assert protocol.NODE_LOCK_KEY not in node.api.node_annotations()
    finally:
        second.stop()
    assert "owner_finished" in second.output()


def test_a_chip_that_fails_is_withdrawn_and_advertised_again_when_it_recovers(
    running: Node, kit: Kit
) -> None:
    node = running
    control.inject_fault(node.sim_dir, 2, codes=[0x80E18402])  # SeparateNPU
    kit.wait_for(lambda: node.kubelet.capacity()[kit.RESOURCE] == (28, 21), what="chip 2 out")
    kit.wait_for(lambda: '"health":true' not in _chip(node, 2), what="register says unhealthy")
    control.clear_fault(node.sim_dir, 2)
    kit.wait_for(lambda: node.kubelet.capacity()[kit.RESOURCE] == (28, 28), what="chip 2 back")
    kit.wait_for(lambda: '"health":true' in _chip(node, 2), what="register says healthy")
    to = "vnpu_device_plugin_health_transitions_total"
    assert _sample(node, to, to="unhealthy") == 1
    assert _sample(node, to, to="healthy") == 1


def _chip(node: Node, phy: int) -> str:
    register = node.api.node_annotations()[protocol.node_register_key(CW)]
    return json.dumps(json.loads(register)[phy], separators=(",", ":"))


def test_a_chip_that_drops_off_the_bus_and_comes_back(running: Node, kit: Kit) -> None:
    node = running
    control.inject_fault(node.sim_dir, 0, gone=True)
    kit.wait_for(lambda: node.kubelet.capacity()[kit.RESOURCE] == (28, 21), what="chip 0 gone")
    control.clear_fault(node.sim_dir, 0)
    kit.wait_for(lambda: node.kubelet.capacity()[kit.RESOURCE] == (28, 28), what="chip 0 back")


def test_sub_health_faults_keep_the_chip_and_free_restart_faults_wait_for_idle_chips(
    running: Node, kit: Kit
) -> None:
    node = running
    node.api.place("busy", [[kit.Grant(0, "vir01", 3072)]])
    kit.wait_for(lambda: node.running("busy"))
    control.inject_fault(node.sim_dir, 3, health=backend.Health.MINOR, codes=[0x80E18405])
    control.inject_fault(node.sim_dir, 0, health=backend.Health.MAJOR, codes=[0x8C0E4E00])
    control.inject_fault(node.sim_dir, 1, health=backend.Health.MAJOR, codes=[0x8C0E4E00])
    # chip 1 is idle: FreeRestartNPU takes it out; chip 0 runs a pod, chip 3 is sub-healthy
    kit.wait_for(lambda: node.kubelet.capacity()[kit.RESOURCE] == (28, 21), what="chip 1 out")
    healthy = node.plugin.board.healthy()
    assert healthy == {0: True, 1: False, 2: True, 3: True}


def test_api_500s_and_409s_are_retried(node: Node, kit: Kit) -> None:
    proxy = node.through_proxy()
    node.start_plugin()
    kit.wait_for(lambda: node.capacity() == (28, 28))
    proxy.inject("GET", r"/api/v1/nodes/", 500, times=2)
    proxy.inject("PATCH", rf"/namespaces/{node.namespace}/pods/flaky$", 500, times=2)
    proxy.inject("PATCH", rf"/namespaces/{node.namespace}/pods/flaky$", 409, times=1)
    node.api.place("flaky", [[kit.Grant(0, "vir02", 6144)]])
    kit.wait_for(lambda: node.running("flaky"), what="served despite 500s and a 409")
    assert node.api.annotations("flaky")[protocol.BIND_PHASE_KEY] == "success"
    assert [v[0::2] for v in node.vnpus()] == [(0, "vir02")]
    assert _sample(node, "vnpu_device_plugin_api_retries_total") >= 5
    statuses = [status for method, path, status in proxy.requests if path.endswith("/flaky")]
    assert statuses.count(500) == 2
    assert statuses.count(409) == 1


def test_a_lost_answer_to_the_pod_patch_is_recognised(node: Node, kit: Kit) -> None:
    proxy = node.through_proxy()
    node.start_plugin()
    kit.wait_for(lambda: node.capacity() == (28, 28))
    # The patch reaches the API, but its answer is a 500: the retry then meets a 409.
    proxy.inject("PATCH", rf"/namespaces/{node.namespace}/pods/lost$", 500, after=True)
    node.api.place("lost", [[kit.Grant(2, "vir01", 3072)]])
    kit.wait_for(lambda: node.running("lost"), what="served once")
    notes = node.api.annotations("lost")
    assert notes[protocol.BIND_PHASE_KEY] == "success"
    assert notes[protocol.to_allocate_key(CW)] == ";;"
    assert len(node.vnpus()) == 1


def test_an_api_that_stays_down_fails_the_allocate_rolls_back_and_keeps_serving(
    node: Node, kit: Kit
) -> None:
    proxy = node.through_proxy()
    node.start_plugin()
    kit.wait_for(lambda: node.capacity() == (28, 28))
    fault = proxy.inject("PATCH", rf"/namespaces/{node.namespace}/pods/down$", 500, times=1000)
    node.api.place("down", [[kit.Grant(1, "vir04", 12288)]])
    kit.wait_for(lambda: node.api.phase("down") == "Failed", what="pod rejected")
    assert node.vnpus() == []  # created, then rolled back
    assert node.ledger() == []
    assert _sample(node, "vnpu_device_plugin_allocations_total", result="api_error") == 1
    assert _sample(node, "vnpu_device_plugin_vnpus_destroyed_total", reason="rollback") == 1
    fault.times = 0
    node.api.place("up", [[kit.Grant(1, "vir04", 12288)]])
    kit.wait_for(lambda: node.running("up"), what="the next pod served")


def test_allocate_answers_unavailable_when_the_api_cannot_be_read(node: Node, kit: Kit) -> None:
    proxy = node.through_proxy()
    node.start_plugin()
    kit.wait_for(lambda: node.capacity() == (28, 28))
    proxy.inject("GET", r"^/api/v1/pods\?(?!.*watch=true)", 503, times=1000)  # the pod list
    device = f"{node.api.uuid(0)}-0"
    request = api_pb2.AllocateRequest(
        container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=[device])]
    )
    with pytest.raises(grpc.RpcError) as caught:
        node.stub().Allocate(request, timeout=10)
    assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
    assert "503" in str(caught.value.details())


def test_a_refused_vnpu_fails_the_pod_naming_the_budget_and_undoes_the_others(
    running: Node, kit: Kit
) -> None:
    node = running
    sim = node.sim()
    for _ in range(6):
        sim.create_vnpu(1, "vir01")  # chip 1 keeps room for one more vNPU only
    before = node.vnpus()
    grants = [[kit.Grant(1, "vir01", 3072), kit.Grant(1, "vir01", 3072)]]
    node.api.place("greedy", grants, containers=[("c0", 2)])
    kit.wait_for(lambda: node.api.phase("greedy") == "Failed", what="refused")
    message = node.api.pod("greedy")["status"]["message"]
    assert "ResourceExhausted" in message or "RESOURCE_EXHAUSTED" in message
    assert "vir01 needs 1 vnpu-slots" in message
    assert node.vnpus() == before  # the first vNPU of the container was destroyed again
    assert node.ledger() == []
    assert _sample(node, "vnpu_device_plugin_vnpus_destroyed_total", reason="rollback") == 1
    assert _sample(node, "vnpu_device_plugin_allocations_total", result="vnpu_failed") == 1


def test_sighup_serves_a_new_server_and_registers_again(node: Node, kit: Kit) -> None:
    process = kit.PluginProcess(node).start()
    try:
        kit.wait_for(lambda: node.kubelet.capacity().get(kit.RESOURCE) == (28, 28), timeout=30)
        process.process.send_signal(signal.SIGHUP)
        kit.wait_for(lambda: process.output().count('"event": "registered"') == 2, timeout=5)
        kit.wait_for(lambda: node.kubelet.capacity().get(kit.RESOURCE) == (28, 28), timeout=5)
        node.api.place("after-hup", [[kit.Grant(0, "vir01", 3072)]])
        kit.wait_for(lambda: node.running("after-hup"), what="served after SIGHUP")
    finally:
        process.stop()
