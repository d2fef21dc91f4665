"""The plugin as the last line of defence: attacks on a running node, each refused, nothing lost.

Every attack here succeeded once against the running platform. Each test reproduces it
through the real transports (kube-apiserver over HTTPS, the simulated kubelet calling the
plugin's gRPC socket, the plugin's real process where a restart is part of the attack) and
shows the plugin refuse it while what it had already granted keeps running untouched:

* a tenant clears the decision annotations of its running pod, so a scheduler sees its
  chip free and places a second pod there;
* a tenant binds a pod by hand (``spec.nodeName`` preset, the webhook told to ignore it)
  with decision annotations of its own, on a chip another pod holds;
* a container named ``../../../escaped`` in soft mode, aiming hami-vnpu-core's
  per-container directory outside ``containers/`` (kube-apiserver refuses the name, so it
  reaches the plugin only in an API answer altered on the way);
* a ledger record edited to name a pod that does not exist, so the vNPU of a running pod
  looks unowned; and a state file that is not UTF-8;
* a burst of Allocates for pods that do not exist, which once were served one at a time,
  five seconds each.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
import uuid
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import kubernetes
import pytest

from vnpu_core import granted, protocol
from vnpu_kubelet_api.deviceplugin.v1beta1 import api_pb2

Node = Any
Kit = Any
CW = "Ascend310P"
WHOLE = 21527
GRANTED = granted.annotation_key(CW)
MERGE_PATCH = "application/merge-patch+json"
DECISION_KEYS = (
    protocol.to_allocate_key(CW),
    protocol.allocated_key(CW),
    protocol.runtime_key(CW),
    protocol.VGPU_NODE_KEY,
    protocol.BIND_PHASE_KEY,
)


def _sample(node: Node, name: str, **labels: str) -> float:
    value = node.plugin.stats.registry.get_sample_value(name, labels)
    return float(value or 0.0)


def _conflicts(node: Node, reason: str) -> float:
    return _sample(node, "vnpu_device_plugin_grant_conflicts_total", reason=reason)


def _run(node: Node, kit: Kit, name: str, grants: Any, **extra: Any) -> None:
    node.api.place(name, grants, **extra)
    kit.wait_for(lambda: node.running(name), what=f"{name} running")


def _refused(node: Node, kit: Kit, name: str) -> str:
    kit.wait_for(lambda: node.api.phase(name) == "Failed", what=f"{name} refused")
    return str(node.api.pod(name)["status"].get("message", ""))


def _warnings(node: Node, name: str) -> list[tuple[str, str, str]]:
    return [
        (e.get("reason", ""), e.get("type", ""), (e.get("source") or {}).get("component", ""))
        for e in node.api.event_list()
        if (e.get("involvedObject") or {}).get("name") == name
    ]


def _published(node: Node) -> dict[str, Any]:
    raw = node.api.node_annotations().get(GRANTED)
    return dict(json.loads(raw)) if raw else {}


# -- two pods on one chip ------------------------------------------------------------------


def test_clearing_a_running_pods_decision_does_not_free_its_chip_for_another(
    running: Node, kit: Kit
) -> None:
    node = running
    _run(node, kit, "holder", [[kit.Grant(0, None, WHOLE)]])
    uid = node.api.pod("holder")["metadata"]["uid"]
    kit.wait_for(
        lambda: _published(node).get("chips") == {node.api.uuid(0): {uid: ["whole"]}},
        what="the grant published on the node",
    )
    # The tenant wipes its own pod's decision: a scheduler reading pods now sees chip 0 free.
    node.api.core.patch_namespaced_pod(
        "holder",
        node.namespace,
        {"metadata": {"annotations": dict.fromkeys(DECISION_KEYS)}},
        _content_type=MERGE_PATCH,
    )
    node.api.place("second", [[kit.Grant(0, None, WHOLE)]])

    message = _refused(node, kit, "second")
    assert "FailedPrecondition" in message or "FAILED_PRECONDITION" in message
    assert "conflicts with what this node granted on chip 0" in message
    assert f"the chip is held whole (held by {node.namespace}/holder)" in message
    assert ("GrantConflict", "Warning", "vnpu-device-plugin") in _warnings(node, "second")
    assert _conflicts(node, "held_whole") == 1
    assert _sample(node, "vnpu_device_plugin_allocations_total", result="grant_conflict") == 1
    # Nothing the holder got is lost; only it is published for chip 0.
    assert node.running("holder")
    assert node.env("holder", "c0") == {"ASCEND_VISIBLE_DEVICES": "0"}
    assert _published(node)["chips"] == {node.api.uuid(0): {uid: ["whole"]}}
    assert node.api.annotations("second")[protocol.BIND_PHASE_KEY] == "failed"
    assert protocol.NODE_LOCK_KEY not in node.api.node_annotations()
    node.api.place("elsewhere", [[kit.Grant(1, None, WHOLE)]])  # the node goes on serving
    kit.wait_for(lambda: node.running("elsewhere"), what="the next pod served")


@pytest.mark.parametrize(
    ("chip", "template", "reason", "problem"),
    [
        (1, "vir01", "held_whole", "a vir01 vNPU is asked, but the chip is held whole"),
        (1, None, "held_whole", "a whole chip is asked, but the chip is held whole"),
        (2, None, "held_shared", "a whole chip is asked, but the chip has 1 vNPU(s)"),
        (2, "vir04", "over_budget", "vir04 needs 4 aicpu, chip has 3 of 7 free"),
    ],
    ids=["vnpu-on-whole", "whole-on-whole", "whole-on-vnpu", "vnpu-over-budget"],
)
def test_a_pod_bound_by_hand_cannot_take_what_another_pod_holds(
    running: Node, kit: Kit, chip: int, template: str | None, reason: str, problem: str
) -> None:
    node = running
    _run(node, kit, "whole", [[kit.Grant(1, None, WHOLE)]])
    _run(node, kit, "sharer", [[kit.Grant(2, "vir04", 12288)]])
    held = sorted([node.api.uuid(1), node.api.uuid(2)])
    kit.wait_for(lambda: sorted(_published(node).get("chips", {})) == held, what="published")
    before = node.vnpus()
    memory = WHOLE if template is None else 3072 if template == "vir01" else 12288
    decision = node.api.decision([[kit.Grant(chip, template, memory)]])
    node.bind_by_hand("intruder", decision)

    message = _refused(node, kit, "intruder")
    assert problem in message
    assert node.vnpus() == before  # no vNPU created on a chip it had no right to
    assert _conflicts(node, reason) == 1
    assert ("GrantConflict", "Warning", "vnpu-device-plugin") in _warnings(node, "intruder")
    assert node.running("whole")
    assert node.running("sharer")
    assert node.env("whole", "c0") == {"ASCEND_VISIBLE_DEVICES": "1"}
    assert [r["pod"] for r in node.ledger()] == ["sharer"]
    published = _published(node)["chips"]
    assert sorted(published) == held
    intruder = node.api.pod("intruder")["metadata"]["uid"]
    assert intruder not in json.dumps(published)


def test_soft_slices_beside_each_other_stay_within_the_cores(node: Node, kit: Kit) -> None:
    node.start_plugin(hami_vnpu_core=True)
    kit.wait_for(lambda: node.capacity() == (28, 28))
    _run(node, kit, "first", [[kit.Grant(3, None, 6144, 60)]], soft=True)
    node.api.place("second", [[kit.Grant(3, None, 6144, 60)]], soft=True)
    message = _refused(node, kit, "second")
    assert "a soft slice needs 60 core-percent, chip has 40 of 100 free" in message
    assert _conflicts(node, "over_budget") == 1
    assert node.running("first")
    assert node.env("first", "c0")["NPU_PRIORITY"] == "60"
    uid = node.api.pod("first")["metadata"]["uid"]
    kit.wait_for(
        lambda: _published(node).get("chips") == {node.api.uuid(3): {uid: ["soft:6144:60"]}},
        what="the soft slice published",
    )


def test_what_a_deleted_pod_held_is_granted_again_once_it_is_gone(running: Node, kit: Kit) -> None:
    node = running
    kit.wait_for(node.plugin.pod_watch.watching.is_set, what="the pod watch open")
    _run(node, kit, "before", [[kit.Grant(0, None, WHOLE)]])
    kit.wait_for(lambda: _published(node).get("chips"), what="the grant published")
    node.api.delete_pod("before")
    kit.wait_for(lambda: _published(node) == {"v": 1, "chips": {}}, what="the grant released")
    assert json.loads(node.state_dir.joinpath("grants.json").read_text())["records"] == []
    _run(node, kit, "after", [[kit.Grant(0, None, WHOLE)]])
    assert _conflicts(node, "held_whole") == 0


# -- names in paths ------------------------------------------------------------------------


def test_a_container_name_that_climbs_out_of_the_soft_directory_is_refused(
    node: Node, kit: Kit
) -> None:
    with pytest.raises(kubernetes.client.ApiException) as refused:  # the API's own check
        node.api.create_pod("climber", [("../../../escaped", 1)])
    assert refused.value.status == 422
    # So the plugin meets the name only in an answer altered on its way from the API.
    proxy = node.through_proxy()
    proxy.rewrite('"name":"escaped"', '"name":"../../../escaped"')
    node.start_plugin(hami_vnpu_core=True)
    kit.wait_for(lambda: node.capacity() == (28, 28))
    _run(node, kit, "neighbour", [[kit.Grant(0, None, 3072, 30)]], soft=True)
    containers = node.root / "hami-core" / "containers"
    before = sorted(p.name for p in containers.iterdir())
    node.api.place(
        "climber", [[kit.Grant(1, None, 3072, 30)]], containers=[("escaped", 1)], soft=True
    )

    message = _refused(node, kit, "climber")
    assert "InvalidArgument" in message or "INVALID_ARGUMENT" in message
    assert "spec.containers[0].name '../../../escaped' is not a DNS-1123 label" in message
    assert ("InvalidName", "Warning", "vnpu-device-plugin") in _warnings(node, "climber")
    assert sorted(p.name for p in containers.iterdir()) == before
    assert not list(node.root.rglob("escaped"))
    assert not Path("/escaped").exists()
    assert _sample(node, "vnpu_device_plugin_allocations_total", result="invalid_name") == 1
    assert node.running("neighbour")
    assert node.env("neighbour", "c0")["NPU_MEM_QUOTA"] == "3072"


# -- destroys on hearsay -------------------------------------------------------------------


def _metrics_port(process: Any) -> int:
    found = re.findall(r'"port": (\d+), "event": "monitoring_serving"', process.output())
    assert found, "the plugin did not log its metrics port"
    return int(found[-1])


def _scrape(port: int, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{{wanted}}} "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{{{wanted}}} not exported")


def _edit_ledger(node: Node, **fields: str) -> None:
    path = node.state_dir / "ledger.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    for record in document["records"]:
        record.update(fields)
    path.write_text(json.dumps(document), encoding="utf-8")


def test_a_ledger_record_edited_to_name_a_ghost_does_not_destroy_a_live_vnpu(
    node: Node, kit: Kit
) -> None:
    node.start_plugin()
    kit.wait_for(lambda: node.capacity() == (28, 28))
    _run(node, kit, "live", [[kit.Grant(1, "vir02", 6144)]])
    node.stop_plugin()
    (vnpu,) = node.vnpus()
    _edit_ledger(node, pod_uid=str(uuid.uuid4()), pod="ghost")

    second = kit.PluginProcess(node, "--reconcile-interval", "0.2").start()  # the restart
    try:
        kit.wait_for(lambda: "reclaim_withheld" in second.output(), timeout=20, what="withheld")
        time.sleep(0.5)  # a few more passes
        assert node.vnpus() == [vnpu]
        assert node.running("live")
        assert node.env("live", "c0")["ASCEND_VISIBLE_DEVICES"] == str(vnpu[1])
        port = _metrics_port(second)
        withheld = "vnpu_device_plugin_reclaims_withheld_total"
        assert _scrape(port, withheld, reason="granted_to_live_pod") == 1  # reported once
        assert second.output().count('"event": "reclaim_withheld"') == 1
        # Once the pod the grant names is really gone, the vNPU goes too: nothing leaks.
        node.api.delete_pod("live")
        kit.wait_for(lambda: node.vnpus() == [], timeout=10, what="reclaimed once live is gone")
    finally:
        second.stop()


def test_without_the_grant_book_kubelets_listing_still_keeps_a_live_vnpu(
    running: Node, kit: Kit
) -> None:
    node = running
    _run(node, kit, "live", [[kit.Grant(2, "vir01", 3072)]])
    (vnpu,) = node.vnpus()
    node.stop_plugin()
    _edit_ledger(node, pod_uid=str(uuid.uuid4()), pod="ghost")
    (node.state_dir / "grants.json").unlink()  # lost with the state directory, or removed
    node.start_plugin(pod_watch=False)
    assert node.plugin.reconciler.run_once().reclaimed == []
    assert node.vnpus() == [vnpu]
    assert (
        _sample(node, "vnpu_device_plugin_reclaims_withheld_total", reason="unaccounted_holder")
        == 1
    )
    # Nor can a decision take chip 2 whole now: kubelet lists live there, unrecorded.
    node.api.place("taker", [[kit.Grant(2, None, WHOLE)]])
    message = _refused(node, kit, "taker")
    assert f"held by {node.namespace}/live" in message
    assert node.running("live")


def test_a_runtime_vnpu_stays_when_its_pods_annotations_are_cleared(node: Node, kit: Kit) -> None:
    node.start_plugin(vnpu_mode="runtime", unowned_grace=0.0, pod_watch=False)
    kit.wait_for(lambda: node.capacity() == (28, 28))
    _run(node, kit, "runtime", [[kit.Grant(1, "vir02", 6144)]])
    assert node.env("runtime", "c0")["ASCEND_VNPU_SPECS"] == "vir02"
    node.sim().create_vnpu(1, "vir02")  # as ascend-docker-runtime does for the container
    (vnpu,) = node.vnpus()
    node.api.core.patch_namespaced_pod(
        "runtime",
        node.namespace,
        {"metadata": {"annotations": dict.fromkeys(DECISION_KEYS)}},
        _content_type=MERGE_PATCH,
    )
    for _ in range(2):  # no grace: an unowned idle vNPU nobody claims goes at the first pass
        assert node.plugin.reconciler.run_once().reclaimed == []
    assert node.vnpus() == [vnpu]


@pytest.mark.parametrize("file", ["ledger.json", "grants.json"])
def test_a_state_file_that_is_not_utf8_stops_the_start_with_its_path(
    node: Node, kit: Kit, file: str
) -> None:
    node.state_dir.mkdir(parents=True, exist_ok=True)
    path = node.state_dir / file
    path.write_bytes(b'\xff\xfe{"format": 1}')
    process = kit.PluginProcess(node).start()
    try:
        assert process.wait(timeout=25) == 1
    finally:
        process.stop()
    output = process.output()
    assert "Traceback" not in output
    what = "ledger" if file == "ledger.json" else "grant book"
    assert (
        f"vnpu-device-plugin: cannot start: ownership ledger {path}: not UTF-8 text "
        f"(byte 0 is 0xff); move it aside to start with an empty {what}"
    ) in output
    assert path.read_bytes() == b'\xff\xfe{"format": 1}'  # left for a person to look at


# -- Allocates for pods that do not exist --------------------------------------------------


def _allocate(node: Node, device: str) -> grpc.StatusCode:
    request = api_pb2.AllocateRequest(
        container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=[device])]
    )
    try:
        node.stub().Allocate(request, timeout=10)
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def test_a_burst_of_allocates_for_pods_that_do_not_exist_is_answered_at_once(
    node: Node, kit: Kit
) -> None:
    node.start_plugin(allocate_wait=5.0)
    kit.wait_for(lambda: node.capacity() == (28, 28))
    devices = [f"{node.api.uuid(i % 4)}-{i % 7}" for i in range(40)]
    start = time.monotonic()
    with futures.ThreadPoolExecutor(max_workers=40) as pool:
        codes = list(pool.map(lambda d: _allocate(node, d), devices))
        node.api.place("real", [[kit.Grant(0, "vir01", 3072)]])  # a real pod in the burst
        kit.wait_for(lambda: node.running("real"), what="the real pod served during the burst")
    elapsed = time.monotonic() - start
    assert codes == [grpc.StatusCode.FAILED_PRECONDITION] * 40
    assert elapsed < 5.0, f"40 Allocates took {elapsed:.2f} s"  # not one of them waited
    assert _sample(node, "vnpu_device_plugin_allocations_total", result="pod_not_identified") == 40


def test_allocates_waiting_for_their_pod_do_not_hold_up_the_others(node: Node, kit: Kit) -> None:
    node.start_plugin(allocate_wait=3.0)
    kit.wait_for(lambda: node.capacity() == (28, 28))
    node.kubelet.stop()  # the test calls the plugin as kubelet would, on its socket
    node.kubelet = None
    # A pod bound here asking for one device whose decision does not show (yet): an Allocate
    # for one device may be for it, so it waits the full --allocate-wait.
    node.api.create_pod("undecided", [("c0", 1)])
    node.api.bind("undecided", {})
    node.api.place("served", [[kit.Grant(1, None, WHOLE), kit.Grant(2, None, WHOLE)]])
    waited: list[tuple[grpc.StatusCode, float, float]] = []

    def wait_in_vain(device: str) -> None:
        start = time.monotonic()
        code = _allocate(node, device)
        waited.append((code, time.monotonic() - start, time.monotonic()))

    threads = [
        threading.Thread(target=wait_in_vain, args=(f"{node.api.uuid(3)}-{i}",)) for i in range(4)
    ]
    for thread in threads:
        thread.start()
    time.sleep(0.3)  # all four are waiting now
    start = time.monotonic()
    request = api_pb2.AllocateRequest(
        container_requests=[
            api_pb2.ContainerAllocateRequest(
                devices_ids=[f"{node.api.uuid(1)}-0", f"{node.api.uuid(2)}-0"]
            )
        ]
    )
    answer = node.stub().Allocate(request, timeout=10)
    served = time.monotonic()
    for thread in threads:
        thread.join(timeout=10)
    assert answer.container_responses[0].envs["ASCEND_VISIBLE_DEVICES"] == "1,2"
    assert [code for code, _, _ in waited] == [grpc.StatusCode.FAILED_PRECONDITION] * 4
    assert all(seconds >= 2.9 for _, seconds, _ in waited), waited  # they did wait
    first_done = min(done for _, _, done in waited)
    assert served < first_done, (
        f"served {served - start:.2f} s after asking, after an Allocate that waited had ended"
    )
