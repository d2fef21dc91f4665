"""A mixed cluster: every kind of rejection reaches kube-scheduler as a sentence, in the right map."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest

Json = dict[str, Any]
HAMI_REQUESTING = "Requesting_{:%Y-%m-%d %H:%M:%S}"


def _hold(
    kube: Any, make: Any, name: str, node: str, chip: int, template: str, memory: int
) -> None:
    uuid = f"{node}-Ascend310P-{chip}"
    runtime = json.dumps([{"UUID": uuid, "temp": template, "memory": memory}])
    kube.add_pod(make.holder(name, node, f"{uuid},Ascend310P,{memory},0:;", runtime=runtime))


def _hami_node() -> Json:
    """A node registered by HAMi's own device plugin, byte for byte as it writes it."""
    chips = [
        {
            "id": f"7866F664-80406578-6B60A233-E0500485-10430{i}E3",
            "index": i,
            "count": 4,
            "devmem": 65536,
            "devcore": 20,
            "type": "Ascend910B3",
            "health": True,
            "custominfo": {"NetworkID": 0 if i < 4 else 1},
        }
        for i in range(8)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "hami",
            "annotations": {
                "hami.io/node-register-Ascend910B3": json.dumps(chips, separators=(",", ":")),
                "hami.io/node-handshake-Ascend910B3": HAMI_REQUESTING.format(datetime.now()),
                "hami-vnpu-core": "false",
            },
        },
        "status": {"allocatable": {"huawei.com/Ascend910B3": "32"}},
    }


@pytest.fixture
def mixed(kube: Any, make: Any, scheduler: Any) -> Any:
    add = kube.add_node
    add(make.node("duo-idle"))
    add(make.node("duo-whole", chips=2))
    add(make.node("duo-slots", chips=2, count=1))
    add(make.node("p310-cpu", chips=1))
    add(make.node("p310-mem", chips=1))
    add(make.node("b3-8", "Ascend910B3", 8, count=4, devmem=65536, devcore=20, network=True))
    add(make.node("a-ring", "Ascend910A", 8, count=15, devmem=32768, devcore=30, network=True))
    add(make.node("sick", chips=2, unhealthy=(0, 1)))
    add(make.node("stale", handshake_age=600))
    add(make.node("noalloc", allocatable=0))
    add(make.node("soft", extra={"hami-vnpu-core": "true"}))
    add(make.node("badpod"))
    garbled = make.node("garbled")
    garbled["metadata"]["annotations"]["hami.io/node-register-Ascend310P"] = "[{oops"
    add(garbled)
    add({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "noreg"}})
    add(_hami_node())
    for i in range(2):
        kube.add_pod(
            make.holder(f"w{i}", "duo-whole", f"duo-whole-Ascend310P-{i},Ascend310P,21527,0:;")
        )
        _hold(kube, make, f"s{i}", "duo-slots", i, "vir01", 3072)
    _hold(kube, make, "c0", "p310-cpu", 0, "vir04", 12288)
    _hold(kube, make, "c1", "p310-cpu", 0, "vir02", 6144)
    _hold(kube, make, "c2", "p310-cpu", 0, "vir01", 3072)
    _hold(kube, make, "m0", "p310-mem", 0, "vir04", 12288)
    _hold(kube, make, "m1", "p310-mem", 0, "vir04_3c", 12288)
    for i in (0, 4):
        devices = f"a-ring-Ascend910A-{i},Ascend910A,32768,0:;"
        kube.add_pod(make.holder(f"r{i}", "a-ring", devices, word="Ascend910A"))
    kube.add_pod(make.holder("broken", "badpod", "garbage-without-grammar"))
    scheduler.wait_for(lambda: len(scheduler.service.cache.names()) == 15)
    scheduler.wait_for(lambda: scheduler.usage("badpod").problems != ())
    return scheduler


ALL = [
    "duo-idle", "duo-whole", "duo-slots", "p310-cpu", "p310-mem", "b3-8", "a-ring", "sick",
    "stale", "noalloc", "soft", "badpod", "garbled", "noreg", "hami",
]  # fmt: skip


def _filter(kube: Any, make: Any, scheduler: Any, pod: Json) -> Json:
    created = kube.add_pod(pod)
    answer = scheduler.post("filter", {"Pod": created, "Nodes": None, "NodeNames": ALL})
    assert answer.status_code == 200
    result: Json = answer.json()
    assert result["Error"] == ""
    assert set(result["NodeNames"]) | set(result["FailedNodes"]) | set(
        result["FailedAndUnresolvableNodes"]
    ) == set(ALL)
    return result


def test_vnpu_request(kube: Any, make: Any, mixed: Any) -> None:
    result = _filter(kube, make, mixed, make.pod("vir02", memory=4000))
    assert result["NodeNames"] == ["duo-idle"]
    failed, final = result["FailedNodes"], result["FailedAndUnresolvableNodes"]
    assert failed["duo-whole"] == "Ascend310P: no chip free for vir02 (best chip 0 is held whole)"
    assert final["b3-8"] == "Ascend310P: node has no Ascend310P chip (it has: Ascend910B3)"
    assert final["sick"] == "Ascend310P: all 2 chips are unhealthy"
    assert final["stale"].startswith(
        "NPUs unavailable: device plugin for Ascend310P last reported 6"
    )
    assert final["stale"].endswith("s ago (limit 60 s)")
    assert final["noalloc"] == (
        "NPUs unavailable: kubelet reports no allocatable huawei.com/Ascend310P"
    )
    assert final["noreg"] == "NPUs unavailable: no NPU registered on this node"
    assert final["garbled"].startswith(
        "NPUs unavailable: annotation hami.io/node-register-Ascend310P: not JSON"
    )
    assert final["soft"] == (
        "Ascend310P: node shares chips in soft mode (hami-core); hard vNPU vir02 is not created there"
    )
    assert final["badpod"].startswith(
        f"chip usage unknown: pod {kube.namespace}/broken has an unreadable "
        "hami.io/Ascend310P-devices-allocated"
    )
    assert final["hami"] == "Ascend310P: node has no Ascend310P chip (it has: Ascend910B3)"
    assert mixed.sample("vnpu_scheduler_filter_outcomes_total", reason="node-unavailable") == 4
    assert mixed.sample("vnpu_scheduler_filter_outcomes_total", reason="usage-unknown") == 1
    assert mixed.sample("vnpu_scheduler_filter_outcomes_total", reason="chip-in-use") == 1


def test_budget_reasons(kube: Any, make: Any, mixed: Any) -> None:
    result = _filter(kube, make, mixed, make.pod("vir01", memory=3000))
    failed = result["FailedNodes"]
    assert failed["duo-slots"] == (
        "Ascend310P: no chip with a vNPU slot free for vir01 (asked 1, best chip 0 has 0 of 1)"
    )
    assert failed["p310-cpu"] == (
        "Ascend310P: no chip with an AI CPU free for vir01 (asked 1, best chip 0 has 0 of 7)"
    )
    assert failed["p310-mem"] == (
        "Ascend310P: no chip with 3072 MiB free for vir01 (asked 3072 MiB, best chip 0 has 0 of 24576 MiB)"
    )
    for reason in ("vnpu-slots", "aicpu", "memory"):
        assert mixed.sample("vnpu_scheduler_filter_outcomes_total", reason=reason) == 1


def test_whole_chip_reasons(kube: Any, make: Any, mixed: Any) -> None:
    result = _filter(kube, make, mixed, make.pod("five", count=5))
    assert result["FailedAndUnresolvableNodes"]["duo-idle"] == (
        "Ascend310P: asked 5 chips, node has 4 usable of 4"
    )
    one = _filter(kube, make, mixed, make.pod("one", count=1))
    assert one["FailedNodes"]["duo-whole"] == (
        "Ascend310P: no 1 free whole chip (asked 1, 0 of 2 chips are free)"
    )
    assert "duo-idle" in one["NodeNames"]


def test_topology_reasons(kube: Any, make: Any, mixed: Any) -> None:
    four = _filter(kube, make, mixed, make.pod("ring4", "Ascend910A", 4))
    assert four["FailedNodes"]["a-ring"] == (
        "Ascend910A: 4 chips must sit in one HCCS ring of 4 (best ring has 3 free)"
    )
    three = _filter(kube, make, mixed, make.pod("ring3", "Ascend910A", 3))
    assert three["FailedAndUnresolvableNodes"]["a-ring"] == (
        "Ascend910A: 3 chips is not an allowed count on a 910a-8 server with 8 chips "
        "(allowed counts 1, 2, 4, 8)"
    )
    two = _filter(kube, make, mixed, make.pod("ring2", "Ascend910A", 2))
    assert two["NodeNames"] == ["a-ring"]


def test_uuid_lists_and_soft_mode(kube: Any, make: Any, mixed: Any) -> None:
    listed = make.pod("listed", memory=4000, annotations={"hami.io/use-Ascend310P-uuid": "nope"})
    result = _filter(kube, make, mixed, listed)
    assert result["FailedAndUnresolvableNodes"]["duo-idle"] == (
        "Ascend310P: no healthy chip passes the pod's use/no-use UUID lists"
    )
    soft = make.pod("soft-pod", annotations={"huawei.com/vnpu-mode": "hami-core"})
    soft["spec"]["containers"][0]["resources"]["limits"].update(
        {"huawei.com/Ascend310P-memory": "4096", "huawei.com/Ascend310P-core": "50"}
    )
    result = _filter(kube, make, mixed, soft)
    assert result["NodeNames"] == ["soft"]
    assert result["FailedAndUnresolvableNodes"]["duo-idle"] == (
        "Ascend310P: pod asks for soft slices (hami-core); node does not share chips that way"
    )


def test_hami_registered_node_takes_pods(kube: Any, make: Any, mixed: Any) -> None:
    result = _filter(kube, make, mixed, make.npu_pod("b3", "Ascend910B3", 1, 16000))
    assert sorted(result["NodeNames"]) == ["b3-8", "hami"]
    created = kube.pod("b3")
    answer = mixed.post(
        "bind",
        {
            "PodName": "b3",
            "PodNamespace": kube.namespace,
            "PodUID": created["metadata"]["uid"],
            "Node": "hami",
        },
    )
    assert answer.json() == {"Error": ""}
    notes = kube.pod("b3")["metadata"]["annotations"]
    assert notes["hami.io/Ascend910B3-devices-allocated"] == (
        "7866F664-80406578-6B60A233-E0500485-104300E3,Ascend910B3,16384,0:;"
    )
    assert json.loads(notes["huawei.com/Ascend910B3"])[0]["temp"] == "vir05_1c_16g"


def test_malformed_request_is_refused_everywhere(kube: Any, make: Any, mixed: Any) -> None:
    result = _filter(kube, make, mixed, make.pod("gib", memory="4Gi"))
    assert result["NodeNames"] == []
    assert result["FailedNodes"] == {}
    messages = set(result["FailedAndUnresolvableNodes"].values())
    assert messages == {
        "container 'main': huawei.com/Ascend310P-memory=4Gi: write MiB as a plain integer, e.g. 4096"
    }
    too_big = _filter(kube, make, mixed, make.pod("huge", memory=30000))
    assert set(too_big["FailedAndUnresolvableNodes"].values()) == {
        "container 'main': huawei.com/Ascend310P-memory=30000: is larger than one Ascend310P chip (24576 MiB)"
    }
