"""The extender wire contract: bodies exactly as kube-scheduler sends them, answers field by field."""

from __future__ import annotations

import json
from typing import Any

Json = dict[str, Any]

FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


def _cluster(kube: Any, make: Any) -> Json:
    """n-free: 4 idle 310P chips; n-full: every chip held whole; n-910: Ascend910B3 only."""
    kube.add_node(make.node("n-free"))
    kube.add_node(make.node("n-full", chips=2))
    kube.add_node(make.node("n-910", "Ascend910B3", 8, count=4, devmem=65536, devcore=20))
    for i in range(2):
        devices = f"n-full-Ascend310P-{i},Ascend310P,21527,0:;"
        kube.add_pod(make.holder(f"whole-{i}", "n-full", devices))
    return kube.add_pod(make.npu_pod("job", memory=4000))


def _synced(scheduler: Any) -> None:
    """Wait until the cache holds the three nodes and both pods holding n-full's chips."""
    scheduler.wait_for(lambda: len(scheduler.service.cache.names()) == 3)
    scheduler.wait_for(lambda: len(scheduler.usage("n-full").usage) == 2)


def _go_args(pod: Json, names: list[str] | None, nodes: list[Json] | None) -> bytes:
    """ExtenderArgs as Go's encoding/json writes it: field order Pod, Nodes, NodeNames."""
    node_list = None if nodes is None else {"metadata": {}, "items": nodes}
    text = (
        '{"Pod":'
        + json.dumps(pod, separators=(",", ":"))
        + ',"Nodes":'
        + json.dumps(node_list, separators=(",", ":"))
        + ',"NodeNames":'
        + json.dumps(names, separators=(",", ":"))
        + "}"
    )
    return text.encode()


def test_filter_node_names_form(kube: Any, make: Any, scheduler: Any) -> None:
    pod = _cluster(kube, make)
    _synced(scheduler)
    body = _go_args(pod, ["n-free", "n-full", "n-910", "n-gone"], None)
    answer = scheduler.post_raw("filter", body)
    assert answer.status_code == 200
    result = answer.json()
    assert set(result) == FILTER_KEYS
    assert result["Error"] == ""
    assert result["Nodes"] is None
    assert result["NodeNames"] == ["n-free"]
    assert set(result["FailedNodes"]) == {"n-full", "n-gone"}
    assert result["FailedNodes"]["n-full"] == (
        "Ascend310P: no chip free for vir02 (best chip 0 is held whole)"
    )
    assert "n-gone is not known" in result["FailedNodes"]["n-gone"]
    assert result["FailedAndUnresolvableNodes"] == {
        "n-910": "Ascend310P: node has no Ascend310P chip (it has: Ascend910B3)"
    }


def test_filter_nodes_form(kube: Any, make: Any, scheduler: Any) -> None:
    pod = _cluster(kube, make)
    _synced(scheduler)
    nodes = [kube.node(name) for name in ("n-free", "n-full", "n-910")]
    answer = scheduler.post_raw("filter", _go_args(pod, None, nodes))
    assert answer.status_code == 200
    result = answer.json()
    assert set(result) == FILTER_KEYS
    assert result["NodeNames"] is None
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["n-free"]
    assert result["Nodes"]["items"][0] == nodes[0]  # the node object is returned untouched
    assert list(result["FailedNodes"]) == ["n-full"]
    assert list(result["FailedAndUnresolvableNodes"]) == ["n-910"]
    assert result["Error"] == ""


def test_filter_nodes_form_reads_the_objects_sent(kube: Any, make: Any, scheduler: Any) -> None:
    """A node object newer than the cache (e.g. its plugin just registered) is read as sent."""
    pod = _cluster(kube, make)
    _synced(scheduler)
    fresh = make.node("n-new")
    fresh["metadata"]["resourceVersion"] = "999999"
    result = scheduler.post_raw("filter", _go_args(pod, None, [fresh])).json()
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["n-new"]


def test_prioritize_both_forms(kube: Any, make: Any, scheduler: Any) -> None:
    pod = _cluster(kube, make)
    kube.add_node(make.node("n-half"))
    kube.add_pod(make.holder("half", "n-half", "n-half-Ascend310P-0,Ascend310P,21527,0:;"))
    scheduler.wait_for(lambda: len(scheduler.service.cache.names()) == 4)
    scheduler.wait_for(lambda: scheduler.usage("n-half").usage != {})
    names = ["n-free", "n-half", "n-910"]
    by_names = scheduler.post_raw("prioritize", _go_args(pod, names, None))
    assert by_names.status_code == 200
    scores = by_names.json()
    assert [entry["Host"] for entry in scores] == names
    assert all(set(entry) == {"Host", "Score"} for entry in scores)
    assert all(isinstance(e["Score"], int) and 0 <= e["Score"] <= 10 for e in scores)
    table = {e["Host"]: e["Score"] for e in scores}
    assert table["n-910"] == 0
    # best-fit: the node whose Duo card is already broken packs better than the idle one
    assert table["n-half"] > table["n-free"]
    nodes = [kube.node(name) for name in names]
    by_nodes = scheduler.post_raw("prioritize", _go_args(pod, None, nodes)).json()
    assert by_nodes == scores


def test_pod_without_npu_passes_every_node(kube: Any, make: Any, scheduler: Any) -> None:
    _cluster(kube, make)
    plain = kube.add_pod(make.pod("web", count=None))
    names = ["n-free", "n-full", "n-910", "anything"]
    result = scheduler.post_raw("filter", _go_args(plain, names, None)).json()
    assert result["NodeNames"] == names
    assert result["FailedNodes"] == {}
    assert result["FailedAndUnresolvableNodes"] == {}
    scores = scheduler.post_raw("prioritize", _go_args(plain, names, None)).json()
    assert scores == [{"Host": n, "Score": 0} for n in names]


def test_bind_writes_annotations_and_node_in_one_binding(
    kube: Any, make: Any, scheduler: Any
) -> None:
    pod = _cluster(kube, make)
    body = {
        "PodName": "job",
        "PodNamespace": kube.namespace,
        "PodUID": pod["metadata"]["uid"],
        "Node": "n-free",
    }
    answer = scheduler.post("bind", body)
    assert answer.status_code == 200
    assert answer.json() == {"Error": ""}
    bound = kube.pod("job")
    assert bound["spec"]["nodeName"] == "n-free"
    notes = bound["metadata"]["annotations"]
    # best-fit on an idle Duo server takes the first chip of the first card
    devices = "n-free-Ascend310P-0,Ascend310P,6144,0:;"
    assert notes["hami.io/Ascend310P-devices-allocated"] == devices
    assert notes["hami.io/Ascend310P-devices-to-allocate"] == devices
    assert json.loads(notes["huawei.com/Ascend310P"]) == [
        {"UUID": "n-free-Ascend310P-0", "temp": "vir02", "memory": 6144}
    ]
    assert notes["hami.io/vgpu-node"] == "n-free"
    assert notes["hami.io/bind-phase"] == "allocating"
    stamp = notes["hami.io/bind-time"]
    assert stamp.isdigit()
    assert notes["hami.io/vgpu-time"] == stamp
    assert notes["predicate-time"] == stamp
    lock = kube.node("n-free")["metadata"]["annotations"]["hami.io/mutex.lock"]
    assert lock.endswith(f",{kube.namespace},job")
    scheduler.wait_for(lambda: any(e["reason"] == "NPUAssigned" for e in kube.events("job")))
    event = next(e for e in kube.events("job") if e["reason"] == "NPUAssigned")
    assert event["type"] == "Normal"
    assert "main: Ascend310P chip 0 (vir02)" in event["message"]
    # The same bind again (kube-scheduler retrying after a lost answer) is a success.
    again = scheduler.post("bind", body)
    assert again.json() == {"Error": ""}
    assert scheduler.sample("vnpu_scheduler_binds_total", result="already_bound") == 1
