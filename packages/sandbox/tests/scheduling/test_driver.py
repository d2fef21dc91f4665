"""The driver against the API emulator and a fake extender, both real servers on loopback.

What kube-scheduler does with an extender configuration, checked on the wire: the bodies of
filter, prioritize and bind, the weight scaling, the FailedScheduling message and its count,
the backoff after a failed bind, pods the extender has no interest in, the requeue when a pod
is deleted, and the built-in filters.
"""

from __future__ import annotations

import logging
import socket
import time
from typing import Any

import pytest

from vnpu_sandbox.apiserver import harness
from vnpu_sandbox.kubelet import apiclient
from vnpu_sandbox.scheduling import config, driver

from .conftest import Cluster, FakeExtender, Start, extender_config, wait_for

Json = dict[str, Any]
CHIP = {"example.com/chip": "1"}


def test_filter_prioritize_and_bind_bodies_are_kube_schedulers(
    cluster: Cluster, extender: FakeExtender, start_driver: Start
) -> None:
    for name in ("n1", "n2", "n4"):
        cluster.add_node(name)
    cluster.add_node("n3", unschedulable=True)
    extender.on_filter = lambda body: {
        "NodeNames": ["n1", "n2"],
        "FailedNodes": {"n4": "chip busy"},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }
    extender.on_prioritize = lambda body: [{"Host": "n1", "Score": 0}, {"Host": "n2", "Score": 10}]
    start_driver(extender_config(extender.url))
    pod = cluster.add_pod("train", limits=CHIP, scheduler="vnpu-scheduler")
    wait_for(lambda: cluster.node_of("train"), "the pod to be bound")

    assert cluster.node_of("train") == "n2"
    assert extender.verbs() == ["filter", "prioritize", "bind"]
    (_, filter_body, _), (_, prioritize_body, _), (_, bind_body, _) = extender.calls
    assert set(filter_body) == {"Pod", "Nodes", "NodeNames"}
    assert filter_body["Nodes"] is None
    assert filter_body["NodeNames"] == ["n1", "n2", "n4"]  # n3 is cordoned: never sent
    assert filter_body["Pod"]["metadata"]["uid"] == pod["metadata"]["uid"]
    assert filter_body["Pod"]["spec"]["containers"][0]["resources"]["limits"] == CHIP
    assert prioritize_body["NodeNames"] == ["n1", "n2"]
    assert prioritize_body["Nodes"] is None
    assert bind_body == {
        "PodName": "train",
        "PodNamespace": "default",
        "PodUID": pod["metadata"]["uid"],
        "Node": "n2",
    }
    scheduled = wait_for(lambda: cluster.events("train", "Scheduled"), "the Scheduled event")
    assert scheduled[0]["message"] == "Successfully assigned default/train to n2"
    assert scheduled[0]["source"]["component"] == "vnpu-scheduler"
    assert scheduled[0]["type"] == "Normal"


def test_whole_nodes_are_sent_when_not_node_cache_capable(
    cluster: Cluster, extender: FakeExtender, start_driver: Start
) -> None:
    cluster.add_node("n1", labels={"rack": "r1"})
    cluster.add_node("n2")

    def keep_n1(body: Json) -> Json:
        kept = [n for n in body["Nodes"]["items"] if n["metadata"]["name"] == "n1"]
        return {"Nodes": {"items": kept}, "FailedNodes": {"n2": "no"}, "Error": ""}

    extender.on_filter = keep_n1
    start_driver(extender_config(extender.url, node_cache_capable=False))
    cluster.add_pod("p", limits=CHIP, scheduler="vnpu-scheduler")
    wait_for(lambda: cluster.node_of("p"), "the pod to be bound")

    assert cluster.node_of("p") == "n1"
    # One node left after filtering: kube-scheduler picks it without prioritizing.
    assert extender.verbs() == ["filter", "bind"]
    body = extender.calls[0][1]
    assert body["NodeNames"] is None
    assert body["Nodes"]["metadata"] == {}
    items = body["Nodes"]["items"]
    assert [n["metadata"]["name"] for n in items] == ["n1", "n2"]
    assert items[0]["metadata"]["labels"]["rack"] == "r1"  # the whole Node object
    assert items[0]["status"]["allocatable"]["cpu"] == "8"


@pytest.mark.parametrize(("weight", "expected"), [(1, "n1"), (2, "n2")])
def test_extender_weight_against_the_built_in_scores(
    cluster: Cluster, extender: FakeExtender, start_driver: Start, weight: int, expected: str
) -> None:
    # Built-in totals for a 1 cpu / 1Gi pod: n1 (empty) 486, n2 (half full) 436. The
    # extender's score 4 on n2 adds 4 x weight x 10: 40 loses, 80 wins.
    cluster.add_node("n1")
    cluster.add_node("n2")
    cluster.add_pod("resident", requests={"cpu": "4", "memory": "16Gi"}, node="n2")
    extender.on_prioritize = lambda body: [{"Host": "n1", "Score": 0}, {"Host": "n2", "Score": 4}]
    start_driver(extender_config(extender.url, weight=weight))
    cluster.add_pod(
        "p", requests={"cpu": "1", "memory": "1Gi"}, limits=CHIP, scheduler="vnpu-scheduler"
    )
    assert wait_for(lambda: cluster.node_of("p"), "the pod to be bound") == expected


def test_failed_scheduling_event_text_condition_and_count(
    cluster: Cluster, start_driver: Start
) -> None:
    cluster.add_node("n1", unschedulable=True)
    cluster.add_node("n2", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    cluster.add_node("n3", cpu="1")
    start_driver(config.Config())
    pod = cluster.add_pod("big", requests={"cpu": "2"})
    expected = (
        "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint "
        "{dedicated: gpu}, 1 node(s) were unschedulable. preemption: 0/3 nodes are available: "
        "1 No preemption victims found for incoming pod, 2 Preemption is not helpful for "
        "scheduling.."
    )
    events = wait_for(lambda: cluster.events("big", "FailedScheduling"), "FailedScheduling")
    assert len(events) == 1
    event = events[0]
    assert event["message"] == expected
    assert event["type"] == "Warning"
    assert event["count"] == 1
    assert event["source"]["component"] == "default-scheduler"
    assert event["reportingComponent"] == "default-scheduler"
    assert event["involvedObject"]["uid"] == pod["metadata"]["uid"]
    condition = wait_for(lambda: cluster.condition("big"), "the PodScheduled condition")
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "Unschedulable",
        expected,
    )

    # A node change that does not help: tried again (after its 1 s backoff), same message,
    # so the same event counts 2.
    cluster.patch_node("n1", {"metadata": {"labels": {"touched": "yes"}}})
    counted = wait_for(
        lambda: [e for e in cluster.events("big", "FailedScheduling") if e["count"] == 2],
        "the event's count to reach 2",
    )
    assert len(cluster.events("big", "FailedScheduling")) == 1
    assert counted[0]["lastTimestamp"] >= counted[0]["firstTimestamp"]

    # A change that helps: uncordoned, the pod goes there.
    cluster.patch_node("n1", {"spec": {"unschedulable": False}})
    assert wait_for(lambda: cluster.node_of("big"), "the pod to be bound") == "n1"


def test_extender_reasons_are_counted_in_the_message(
    cluster: Cluster, extender: FakeExtender, start_driver: Start
) -> None:
    for name in ("n1", "n2", "n3"):
        cluster.add_node(name)
    extender.on_filter = lambda body: {
        "NodeNames": [],
        "FailedNodes": {"n1": "chip busy", "n2": "chip busy"},
        "FailedAndUnresolvableNodes": {"n3": "node has no chip"},
        "Error": "",
    }
    start_driver(extender_config(extender.url))
    cluster.add_pod("p", limits=CHIP, scheduler="vnpu-scheduler")
    events = wait_for(lambda: cluster.events("p", "FailedScheduling"), "FailedScheduling")
    assert events[0]["message"] == (
        "0/3 nodes are available: 1 node has no chip, 2 chip busy. preemption: 0/3 nodes are "
        "available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found "
        "for incoming pod.."
    )
    assert "bind" not in extender.verbs()


def test_a_failed_bind_is_reported_and_retried_after_backoff(
    cluster: Cluster, extender: FakeExtender, start_driver: Start
) -> None:
    cluster.add_node("n1")
    failures = ["node n1 is locked by pod default/other (waited 20.0 s)"]

    def bind_once_failing(body: Json) -> Json:
        if failures:
            return {"Error": failures.pop()}
        return extender.bind(body)

    extender.on_bind = bind_once_failing
    start_driver(extender_config(extender.url))
    cluster.add_pod("p", limits=CHIP, scheduler="vnpu-scheduler")
    assert wait_for(lambda: cluster.node_of("p"), "the pod to be bound") == "n1"

    binds = [at for verb, _, at in extender.calls if verb == "bind"]
    assert len(binds) == 2
    # The retry waits out the 1 s backoff; the upper bound leaves room for a loaded machine.
    assert 0.9 <= binds[1] - binds[0] < 10.0
    assert extender.verbs() == ["filter", "bind", "filter", "bind"]
    failed = cluster.events("p", "FailedScheduling")
    assert [e["message"] for e in failed] == [
        "node n1 is locked by pod default/other (waited 20.0 s)"
    ]
    condition = cluster.condition("p")
    assert condition is not None
    assert condition["status"] == "True"  # the Binding set it


def test_the_bind_error_sets_scheduler_error_condition(
    cluster: Cluster, extender: FakeExtender, start_driver: Start
) -> None:
    cluster.add_node("n1")
    extender.on_bind = lambda body: {"Error": "no chip left"}
    start_driver(extender_config(extender.url))
    cluster.add_pod("p", limits=CHIP, scheduler="vnpu-scheduler")
    condition = wait_for(lambda: cluster.condition("p"), "the PodScheduled condition")
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "SchedulerError",
        "no chip left",
    )
    assert cluster.node_of("p") == ""


def test_a_pod_the_extender_does_not_manage_is_bound_directly(
    cluster: Cluster, extender: FakeExtender, start_driver: Start
) -> None:
    cluster.add_node("n1")
    start_driver(extender_config(extender.url))
    cluster.add_pod("web", requests={"cpu": "100m"}, scheduler="vnpu-scheduler")
    assert wait_for(lambda: cluster.node_of("web"), "the pod to be bound") == "n1"
    wait_for(lambda: cluster.events("web", "Scheduled"), "the Scheduled event")
    assert extender.calls == []


def test_pods_of_other_schedulers_are_left_alone(
    cluster: Cluster, extender: FakeExtender, start_driver: Start
) -> None:
    cluster.add_node("n1")
    start_driver(extender_config(extender.url))
    cluster.add_pod("theirs", scheduler="volcano")
    cluster.add_pod("ours", scheduler="vnpu-scheduler")
    wait_for(lambda: cluster.node_of("ours"), "our pod to be bound")
    assert cluster.node_of("theirs") == ""
    assert cluster.events("theirs") == []


def test_deleting_a_pod_requeues_the_unschedulable(cluster: Cluster, start_driver: Start) -> None:
    cluster.add_node("n1", cpu="2")
    start_driver(config.Config())
    cluster.add_pod("first", requests={"cpu": "2"})
    wait_for(lambda: cluster.node_of("first"), "the first pod to be bound")
    cluster.add_pod("second", requests={"cpu": "2"})
    wait_for(lambda: cluster.events("second", "FailedScheduling"), "the second pod to fail")
    assert cluster.node_of("second") == ""
    deleted = time.monotonic()
    cluster.delete_pod("first")
    assert wait_for(lambda: cluster.node_of("second"), "the second pod to be bound") == "n1"
    # Far sooner than the 60 s periodic retry: the deletion moved it (after its 1 s backoff).
    assert time.monotonic() - deleted < 20.0


def test_selectors_taints_and_cpu_pick_the_nodes(cluster: Cluster, start_driver: Start) -> None:
    cluster.add_node("a", cpu="4", labels={"zone": "a"})
    cluster.add_node(
        "b",
        cpu="4",
        labels={"zone": "b"},
        taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}],
    )
    cluster.add_node("c", cpu="1", labels={"zone": "c"})
    cluster.add_node("d", cpu="16", ready="False", labels={"zone": "d"})
    start_driver(config.Config())

    def affinity(operator: str, values: list[str]) -> Json:
        term = {"matchExpressions": [{"key": "zone", "operator": operator, "values": values}]}
        return {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }

    cluster.add_pod("selected", spec={"nodeSelector": {"zone": "a"}})
    cluster.add_pod(
        "tolerant",
        spec={
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": affinity("In", ["b"]),
        },
    )
    cluster.add_pod(
        "small", requests={"cpu": "500m"}, spec={"affinity": affinity("NotIn", ["a", "b"])}
    )
    cluster.add_pod(
        "large", requests={"cpu": "3"}, spec={"affinity": affinity("NotIn", ["a", "b"])}
    )

    for name, node in (("selected", "a"), ("tolerant", "b"), ("small", "c")):
        assert wait_for(lambda name=name: cluster.node_of(name), f"{name} to be bound") == node
    events = wait_for(lambda: cluster.events("large", "FailedScheduling"), "large to fail")
    assert events[0]["message"] == (
        # Filters run in order and the first refusal counts: b fails on its taint, not on
        # the affinity; d is not Ready, so it carries the not-ready taint.
        "0/4 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node "
        "affinity/selector, 1 node(s) had untolerated taint {gpu: yes}, 1 node(s) had "
        "untolerated taint {node.kubernetes.io/not-ready: }. preemption: 0/4 nodes are "
        "available: 1 No preemption victims found for incoming pod, 3 Preemption is not "
        "helpful for scheduling.."
    )


def test_an_extender_failure_is_reported_and_the_driver_carries_on(
    cluster: Cluster, extender: FakeExtender, start_driver: Start
) -> None:
    cluster.add_node("n1")
    extender.status = 500
    start_driver(extender_config(extender.url, max_backoff=2))
    cluster.add_pod("p", limits=CHIP, scheduler="vnpu-scheduler")
    events = wait_for(lambda: cluster.events("p", "FailedScheduling"), "FailedScheduling")
    assert (
        events[0]["message"]
        == f"failed filter with extender at URL {extender.url}/filter, code 500"
    )
    condition = wait_for(lambda: cluster.condition("p"), "the PodScheduled condition")
    assert condition["reason"] == "SchedulerError"
    cluster.add_pod("plain", scheduler="vnpu-scheduler")  # no extender involved: still scheduled
    assert wait_for(lambda: cluster.node_of("plain"), "the plain pod to be bound") == "n1"
    extender.status = 200  # the extender is back: the pod gets through on a retry (<= 2 s)
    assert wait_for(lambda: cluster.node_of("p"), "the pod to be bound") == "n1"


def test_an_unreachable_extender(cluster: Cluster, start_driver: Start) -> None:
    cluster.add_node("n1")
    start_driver(extender_config("http://127.0.0.1:9"))
    cluster.add_pod("p", limits=CHIP, scheduler="vnpu-scheduler")
    events = wait_for(lambda: cluster.events("p", "FailedScheduling"), "FailedScheduling")
    assert events[0]["message"].startswith('Post "http://127.0.0.1:9/filter": ')


def test_an_ignorable_extender_that_fails_is_skipped(cluster: Cluster, start_driver: Start) -> None:
    cluster.add_node("n1")
    start_driver(extender_config("http://127.0.0.1:9", ignorable=True))
    cluster.add_pod("p", limits=CHIP, scheduler="vnpu-scheduler")
    # The filter is skipped and the bind falls back to the driver's own Binding.
    assert wait_for(lambda: cluster.node_of("p"), "the pod to be bound") == "n1"
    assert cluster.events("p", "FailedScheduling") == []


def test_an_api_server_that_comes_up_late(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    api = apiclient.client_for_host(f"http://127.0.0.1:{port}")
    late = driver.Driver(driver.Settings(config=config.Config(), seed=1), api)
    caplog.set_level(logging.INFO, logger="vnpu_sandbox.scheduling")
    late.start()
    try:
        time.sleep(1.0)  # several list attempts fail meanwhile
        assert not late.synced(0)
        with harness.serve(port=port) as url:
            world = Cluster(url)
            try:
                world.add_node("n1")
                world.add_pod("p")
                assert late.synced(10)
                assert wait_for(lambda: world.node_of("p"), "the pod to be bound") == "n1"
                records = list(caplog.records)
            finally:
                world.close()
    finally:
        late.stop()
        apiclient.close_client(api)
    failures = [r for r in records if r.getMessage() == "informer_failed"]
    assert sorted(r.fields["resource"] for r in failures) == ["nodes", "pods"]  # once each
    assert {
        r.fields["resource"] for r in caplog.records if r.getMessage() == "informer_recovered"
    } == {
        "nodes",
        "pods",
    }
