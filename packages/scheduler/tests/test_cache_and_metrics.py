"""The node cache recomputes exactly when it must; the per-chip gauges read it on each scrape."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from vnpu_core import catalog, coordination, granted, ledger, nodes, protocol
from vnpu_scheduler import cache

Json = dict[str, Any]
START = datetime(2026, 8, 18, 9, 55, 36)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


def _node(make: Any, name: str = "n1", version: str = "1") -> Json:
    obj: Json = make.node(name, chips=2)
    stamp = coordination.Handshake(coordination.HandshakeState.REPORTED, START)
    obj["metadata"]["annotations"][protocol.node_handshake_key("Ascend310P")] = (
        coordination.encode_handshake(stamp)
    )
    obj["metadata"]["resourceVersion"] = version
    return obj


def _holder(make: Any, uid: str, chip: int = 0) -> Json:
    pod: Json = make.holder(uid, "n1", f"n1-Ascend310P-{chip},Ascend310P,21527,0:;")
    pod["metadata"]["uid"] = uid
    return pod


def test_a_silent_plugin_turns_the_node_unavailable_without_any_event(make: Any) -> None:
    clock = Clock()
    nodes = cache.ClusterCache(catalog.BUILTIN, timedelta(seconds=60), clock)
    nodes.replace_nodes([_node(make)])
    first = nodes.state("n1")
    assert first is not None
    assert first.read.node is not None
    clock.now = START + timedelta(seconds=59)
    assert nodes.state("n1") is first  # nothing changed: the same state, memo included
    clock.now = START + timedelta(seconds=61)
    later = nodes.state("n1")
    assert later is not None
    assert later.read.node is None
    assert "last reported 61 s ago" in later.read.unavailable


def test_pod_changes_invalidate_only_their_node(make: Any) -> None:
    nodes = cache.ClusterCache(catalog.BUILTIN, timedelta(seconds=60), Clock())
    nodes.replace_nodes([_node(make, "n1"), _node(make, "n2")])
    nodes.replace_pods([])
    before = nodes.states(["n1", "n2"])
    nodes.upsert_pod(_holder(make, "u1"))
    after = nodes.states(["n1", "n2"])
    assert after["n2"] is before["n2"]
    state = after["n1"]
    assert state is not None
    assert state.usage.usage["n1-Ascend310P-0"].exclusive
    nodes.remove_pod(_holder(make, "u1"))
    state = nodes.state("n1")
    assert state is not None
    assert state.usage.usage == {}


def test_assumed_pod_counts_until_the_watch_delivers_it(make: Any) -> None:
    nodes = cache.ClusterCache(catalog.BUILTIN, timedelta(seconds=60), Clock())
    nodes.replace_nodes([_node(make)])
    nodes.replace_pods([])
    bound = _holder(make, "u1", chip=1)
    nodes.assume(bound)
    state = nodes.state("n1")
    assert state is not None
    assert list(state.usage.usage) == ["n1-Ascend310P-1"]
    stale = make.pod("u1")  # a late event from before the bind: no node, no annotations
    stale["metadata"]["uid"] = "u1"
    nodes.upsert_pod(stale)
    state = nodes.state("n1")
    assert state is not None
    assert list(state.usage.usage) == ["n1-Ascend310P-1"]  # still assumed
    nodes.upsert_pod(bound)  # the watch caught up
    state = nodes.state("n1")
    assert state is not None
    assert list(state.usage.usage) == ["n1-Ascend310P-1"]  # counted once


def test_nodes_form_reuses_the_cached_state_of_the_same_revision(make: Any) -> None:
    nodes = cache.ClusterCache(catalog.BUILTIN, timedelta(seconds=60), Clock())
    nodes.replace_nodes([_node(make, version="5")])
    cached = nodes.state("n1")
    assert nodes.state_of_object(_node(make, version="5")) is cached
    assert nodes.state_of_object(_node(make, version="6")) is not cached


def test_per_chip_allocation_gauges(kube: Any, make: Any, scheduler: Any) -> None:
    kube.add_node(make.node("n1", chips=2))
    runtime = '[{"UUID":"n1-Ascend310P-1","temp":"vir04","memory":12288}]'
    kube.add_pod(make.holder("v", "n1", "n1-Ascend310P-1,Ascend310P,12288,0:;", runtime=runtime))
    kube.add_pod(make.holder("w", "n1", "n1-Ascend310P-0,Ascend310P,21527,0:;"))
    scheduler.wait_for(lambda: len(scheduler.usage("n1").usage) == 2)
    text = scheduler.http.get(f"{scheduler.url}/metrics").text
    chip0 = 'chip="n1-Ascend310P-0",index="0",model="Ascend310P",node="n1"'
    chip1 = 'chip="n1-Ascend310P-1",index="1",model="Ascend310P",node="n1"'
    assert f"vnpu_scheduler_chip_allocated_whole{{{chip0}}} 1.0" in text
    assert f"vnpu_scheduler_chip_allocated_aicores{{{chip0}}} 8.0" in text
    assert f"vnpu_scheduler_chip_allocated_vnpus{{{chip1}}} 1.0" in text
    assert f"vnpu_scheduler_chip_allocated_aicores{{{chip1}}} 4.0" in text
    assert f"vnpu_scheduler_chip_allocated_aicpus{{{chip1}}} 4.0" in text
    assert scheduler.sample(
        "vnpu_scheduler_chip_allocated_memory_bytes",
        chip="n1-Ascend310P-1",
        index="1",
        model="Ascend310P",
        node="n1",
    ) == float(12288 * 2**20)
    assert 'vnpu_build_info{component="scheduler",version="0.1.0"} 1.0' in text
    assert 'vnpu_scheduler_nodes{state="available"} 1.0' in text
    assert "vnpu_scheduler_cache_synced 1.0" in text


@pytest.mark.parametrize("kube", [{"api_args": ("--watch-cache=false",)}], indirect=True)
def test_relists_when_the_watch_revision_expired(
    kube: Any, make: Any, start_scheduler: Any
) -> None:
    """Watches end every second; once etcd is compacted past the revision the nodes' watch
    goes on from (and no watch cache holds it), the next one meets 410 Gone and re-lists."""
    scheduler = start_scheduler(watch_timeout=1)
    kube.add_node(make.node("n1"))
    scheduler.wait_for(lambda: scheduler.service.cache.names() == ["n1"])
    for i in range(12):  # other writes move the revision on, then it is compacted away
        kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": f"c{i}"}})
    kube.plane.compact()
    scheduler.wait_for(
        lambda: (
            scheduler.sample(
                "vnpu_scheduler_watch_restarts_total", resource="nodes", cause="expired"
            )
            >= 1
        ),
        timeout=10,
    )
    kube.add_node(make.node("n2"))
    scheduler.wait_for(lambda: sorted(scheduler.service.cache.names()) == ["n1", "n2"])


def _state(scheduler: Any) -> Any:
    """Node n1's state, or an empty stand-in until the node reaches the cache."""
    state = scheduler.service.cache.state("n1")
    if state is None:
        return cache.NodeState("n1", nodes.NodeRead("n1", None), ledger.Ledger({}), 0, "", None)
    return state


def _grant_report(chips: dict[str, dict[str, list[str]]]) -> str:
    return json.dumps({"v": 1, "chips": chips}, separators=(",", ":"), sort_keys=True)


def test_what_the_node_granted_counts_whatever_the_pods_annotations_say(
    kube: Any, make: Any, scheduler: Any
) -> None:
    """A tenant cleared one pod's decision and garbled another's: the chips stay counted,
    the node is not denied to everyone, and both show as mismatches."""
    kube.add_node(make.node("n1", chips=2))
    cleared = kube.add_pod(make.holder("cleared", "n1", "n1-Ascend310P-0,Ascend310P,21527,0:;"))
    garbled = kube.add_pod(make.holder("garbled", "n1", "n1-Ascend310P-1,Ascend310P,12288,0:;"))
    report = _grant_report(
        {
            "n1-Ascend310P-0": {cleared["metadata"]["uid"]: ["whole"]},
            "n1-Ascend310P-1": {garbled["metadata"]["uid"]: ["vnpu:vir04"]},
        }
    )
    kube.annotate_node("n1", {granted.annotation_key("Ascend310P"): report})
    kube.annotate_pod("cleared", {protocol.allocated_key("Ascend310P"): None})
    kube.annotate_pod("garbled", {protocol.allocated_key("Ascend310P"): "not;a:decision"})

    def counted() -> bool:
        state = scheduler.service.cache.state("n1")
        return state is not None and len(state.mismatches) == 2

    scheduler.wait_for(counted)
    state = scheduler.service.cache.state("n1")
    assert state.report == "read"
    assert state.usage.problems == ()  # the garbled pod does not make the node unusable
    assert state.usage.usage["n1-Ascend310P-0"].exclusive
    assert state.usage.usage["n1-Ascend310P-1"].templates == ("vir04",)

    whole = make.npu_pod("whole", count=1)
    answer = scheduler.post("filter", {"Pod": whole, "NodeNames": ["n1"]}).json()
    assert answer["NodeNames"] == []
    assert "n1" in answer["FailedNodes"]
    fits = make.npu_pod("small", count=1, memory=3072)
    assert scheduler.post("filter", {"Pod": fits, "NodeNames": ["n1"]}).json()["NodeNames"] == [
        "n1"
    ]

    text = scheduler.http.get(f"{scheduler.url}/metrics").text
    assert 'vnpu_scheduler_grant_mismatches{reason="annotation_missing"} 1.0' in text
    assert 'vnpu_scheduler_grant_mismatches{reason="annotation_unreadable"} 1.0' in text
    assert 'vnpu_scheduler_grant_mismatches{reason="annotation_differs"} 0.0' in text
    assert 'vnpu_scheduler_grant_reports{state="read"} 1.0' in text
    assert "vnpu_scheduler_double_assignments 0.0" in text


def test_a_chip_given_twice_is_counted(kube: Any, make: Any, scheduler: Any) -> None:
    kube.add_node(make.node("n1", chips=2))
    holder = kube.add_pod(make.holder("first", "n1", "n1-Ascend310P-1,Ascend310P,21527,0:;"))
    kube.add_pod(make.holder("second", "n1", "n1-Ascend310P-0,Ascend310P,21527,0:;"))
    # The node granted chip 0 to the first pod; the second pod's decision names it too.
    report = _grant_report({"n1-Ascend310P-0": {holder["metadata"]["uid"]: ["whole"]}})
    kube.annotate_node("n1", {granted.annotation_key("Ascend310P"): report})
    scheduler.wait_for(lambda: _state(scheduler).clashes != ())
    text = scheduler.http.get(f"{scheduler.url}/metrics").text
    assert "vnpu_scheduler_double_assignments 1.0" in text
    assert 'vnpu_scheduler_grant_mismatches{reason="annotation_differs"} 1.0' in text


def test_without_a_report_an_unreadable_pod_still_makes_the_node_unusable(
    kube: Any, make: Any, scheduler: Any
) -> None:
    kube.add_node(make.node("n1", chips=2))
    kube.add_pod(make.holder("garbled", "n1", "not;a:decision"))
    scheduler.wait_for(lambda: _state(scheduler).usage.problems != ())
    assert _state(scheduler).report == "absent"
    answer = scheduler.post("filter", {"Pod": make.npu_pod("p", count=1), "NodeNames": ["n1"]})
    assert answer.json()["NodeNames"] == []
