"""Template pinning (``vnpu.io/template``) through filter, prioritize and bind on a real API.

Replicas of one Deployment share one pod template. Unpinned, the allocator gives a 12 GiB
replica whichever 12 GiB template fits: ``vir04_3c`` (fewer AI CPUs and media engines) on a
310P chip that already holds a ``vir04``. Pinned to ``vir04``, every replica gets ``vir04``,
and a node that could only offer ``vir04_3c`` is refused with a reason naming the pin.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from vnpu_core import allocator, catalog, protocol, requests

Json = dict[str, Any]
PIN = "vnpu.io/template"
RUNTIME = "huawei.com/Ascend310P"
# Chips already holding one vir04 each (by node); the other chips are idle.
HELD = {"n-a": (0, 1), "n-b": (0, 1), "n-c": (0,)}
CHIPS = {"n-a": 2, "n-b": 4, "n-c": 2}


def _replica(make: Any, name: str, pinned: bool = True) -> Json:
    """A pod as the Deployment's ReplicaSet makes it from its pod template, admitted."""
    annotations = {PIN: "vir04"} if pinned else {}
    pod: Json = make.npu_pod(name, memory=12288, annotations=annotations)
    return pod


def _cluster(kube: Any, make: Any, scheduler: Any) -> None:
    for name, chips in CHIPS.items():
        kube.add_node(make.node(name, chips=chips))
        for i in HELD[name]:
            uuid = f"{name}-Ascend310P-{i}"
            runtime = protocol.encode_runtime([protocol.RuntimeInfo(uuid, "vir04", 12288, 0)])
            devices = f"{uuid},Ascend310P,12288,0:;"
            kube.add_pod(make.holder(f"held-{name}-{i}", name, devices, runtime=runtime))
    scheduler.wait_for(lambda: len(scheduler.service.cache.names()) == len(CHIPS))
    for name, held in HELD.items():
        scheduler.wait_for(
            lambda name=name, held=held: len(scheduler.usage(name).usage) == len(held)
        )


def _unpinned_choice(scheduler: Any, make: Any, node: str) -> list[tuple[int, str | None]]:
    """What the allocator gives an unpinned replica on ``node`` (as the filter fits it)."""
    state = scheduler.service.cache.state(node)
    assert state is not None
    assert state.read.node is not None
    pod = requests.from_pod(_replica(make, "twin", pinned=False), catalog.BUILTIN)
    outcome = allocator.fit(state.read.node, state.usage.usage, pod)
    assert isinstance(outcome, allocator.Assignment), outcome
    return [(g.chip, g.template) for c in outcome.containers for g in c.grants]


def _args(pod: Json) -> Json:
    return {"Pod": pod, "NodeNames": sorted(CHIPS)}


def _schedule(scheduler: Any, kube: Any, pod: Json) -> str:
    """Filter, prioritize and bind as kube-scheduler does (ties go to the first name)."""
    filtered = scheduler.post("filter", _args(pod)).json()
    assert filtered["Error"] == ""
    passed = filtered["NodeNames"]
    assert passed, filtered
    scores = {e["Host"]: e["Score"] for e in scheduler.post("prioritize", _args(pod)).json()}
    node: str = min(passed, key=lambda n: (-scores[n], n))
    body = {
        "PodName": pod["metadata"]["name"],
        "PodNamespace": kube.namespace,
        "PodUID": pod["metadata"]["uid"],
        "Node": node,
    }
    assert scheduler.post("bind", body).json() == {"Error": ""}
    return node


def test_every_replica_of_a_pinned_deployment_gets_the_pinned_template(
    kube: Any, make: Any, scheduler: Any, plugin: Any
) -> None:
    _cluster(kube, make, scheduler)
    # Unpinned, a replica would share a held chip as vir04_3c on every node.
    for node in CHIPS:
        assert _unpinned_choice(scheduler, make, node) == [(0, "vir04_3c")]
    placed: list[tuple[str, str]] = []
    for i in range(3):
        pod = kube.add_pod(_replica(make, f"infer-5d8f-{i}"))
        node = _schedule(scheduler, kube, pod)
        scheduler.wait_for(lambda count=i + 1: plugin.served == count)  # its lock released
        (info,) = json.loads(kube.pod(pod["metadata"]["name"])["metadata"]["annotations"][RUNTIME])
        assert info["temp"] == "vir04"
        placed.append((node, info["UUID"]))
    # Each replica took an idle chip; n-a, whose chips only had room for vir04_3c, none.
    assert sorted(uuid for _, uuid in placed) == [
        "n-b-Ascend310P-2",
        "n-b-Ascend310P-3",
        "n-c-Ascend310P-1",
    ]
    # Unpinned replicas would still have been placed, as vir04_3c.
    assert _unpinned_choice(scheduler, make, "n-c") == [(0, "vir04_3c")]


def test_a_pinned_pod_no_node_can_take_is_refused_naming_the_template(
    kube: Any, make: Any, scheduler: Any, plugin: Any
) -> None:
    _cluster(kube, make, scheduler)
    for i in range(3):
        _schedule(scheduler, kube, kube.add_pod(_replica(make, f"infer-5d8f-{i}")))
        scheduler.wait_for(lambda count=i + 1: plugin.served == count)  # its lock released
    extra = kube.add_pod(_replica(make, "infer-5d8f-3"))
    result = scheduler.post("filter", _args(extra)).json()
    assert result["NodeNames"] == []
    assert result["FailedAndUnresolvableNodes"] == {}  # evicting a pod would make room
    refusal = (
        "Ascend310P: no chip with 4 AI CPUs free for vir04 (asked 4, best chip 0 has 3 of 7); "
        "vir04 is pinned by vnpu.io/template, vir04_3c would fit chip 0"
    )
    assert result["FailedNodes"] == dict.fromkeys(sorted(CHIPS), refusal)
    # The same pod unpinned fits (as vir04_3c): the pin alone holds it back.
    twin = copy.deepcopy(extra)
    del twin["metadata"]["annotations"][PIN]
    twin["metadata"].update(name="twin", uid="twin-uid")
    assert scheduler.post("filter", _args(twin)).json()["NodeNames"] == sorted(CHIPS)
    # A bind kube-scheduler sent anyway (its cache behind ours) is refused with the same words.
    body = {
        "PodName": "infer-5d8f-3",
        "PodNamespace": kube.namespace,
        "PodUID": extra["metadata"]["uid"],
        "Node": "n-b",
    }
    assert refusal in scheduler.post("bind", body).json()["Error"]
    assert not kube.pod("infer-5d8f-3")["spec"].get("nodeName")
