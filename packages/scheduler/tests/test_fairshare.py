"""Fair sharing through the running scheduler against kube-apiserver: lenders first, reclaim.

Three teams share two nodes of three whole Ascend310P chips (8 AI cores each). Each team
has a namespace of the test's own (``<test's namespace>-a`` for team a, where its pods
``a-1``, ``a-2``... live). Running pods are created bound, as a device plugin leaves them,
with their priority from a PriorityClass; pending pods are filtered (and bound) over HTTP
as kube-scheduler would; evictions go through kube-apiserver's pods/eviction; a pod with a
grace period stays Terminating (no kubelet confirms it) until it is deleted with grace 0,
as its kubelet would.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import kubernetes
import pytest

from vnpu_core import holdings
from vnpu_scheduler import cluster, leader

Json = dict[str, Any]
AICORE = holdings.Key(holdings.ALL_MODELS, holdings.Unit.AICORE)
TEAMS = """\
teams:
  - {name: a, namespaces: [A], nominal: {aicore: 16}}
  - {name: b, namespaces: [B], nominal: {aicore: 16}}
  - {name: c, namespaces: [C], nominal: {aicore: 16}}
"""


def _space(kube: Any, name: str) -> str:
    """The namespace of team ``name[0]`` (of pod ``name``, named after its team)."""
    space: str = kube.namespaced(name[0])
    return space


def _setup(kube: Any, make: Any, chips: int = 3) -> str:
    """The teams' namespaces, the nodes and the tenants ConfigMap; its ``namespace/name``."""
    teams = TEAMS
    for name in ("a", "b", "c"):
        teams = teams.replace(f"[{name.upper()}]", f"[{kube.add_namespace(name)}]")
    for node in ("n1", "n2"):
        kube.add_node(make.node(node, chips=chips))
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "vnpu-tenants", "namespace": kube.namespace},
        "data": {"tenants.yaml": teams},
    }
    kube.core.create_namespaced_config_map(kube.namespace, body)
    return f"{kube.namespace}/vnpu-tenants"


def _priority_class(kube: Any, value: int) -> str:
    """A PriorityClass of ``value`` (kube-apiserver sets a pod's priority from its class)."""
    name = f"vnpu-test-{value}"
    body = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
    }
    try:
        kubernetes.client.SchedulingV1Api(kube.client).create_priority_class(body)
    except kubernetes.client.exceptions.ApiException as exc:
        if exc.status != 409:
            raise
    return name


def _running(
    kube: Any, make: Any, name: str, node: str, chip: int, priority: int = 0, grace: int = 0
) -> None:
    """A pod of team ``name[0]`` holding one whole chip of ``node``."""
    devices = f"{node}-Ascend310P-{chip},Ascend310P,21527,0:;"
    pod: Json = make.holder(name, node, devices, runtime="[]", namespace=_space(kube, name))
    if priority:
        pod["spec"]["priorityClassName"] = _priority_class(kube, priority)
    pod["spec"]["terminationGracePeriodSeconds"] = grace
    _until(lambda: _admitted(kube, pod), f"pod {name} admitted")
    assert kube.pod(name, _space(kube, name))["spec"].get("priority", 0) == priority


def _admitted(kube: Any, pod: Json) -> bool:
    """Create ``pod``; False while kube-apiserver's priority admission, which reads the
    PriorityClasses through an informer, has not yet seen the class just made."""
    try:
        kube.add_pod(pod)
    except kubernetes.client.exceptions.ApiException as exc:
        if exc.status == 403 and "no PriorityClass with name" in str(exc.body):
            return False
        raise
    return True


def _until(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached: {what}")
        time.sleep(0.02)


def _used(scheduler: Any, kube: Any, team: str) -> int:
    usage = scheduler.service.cache.namespace_usage()
    used: int = usage.get(_space(kube, team), holdings.ZERO)[AICORE]
    return used


def _filter(scheduler: Any, pod: Json) -> Json:
    answer: Json = scheduler.post("filter", {"Pod": pod, "NodeNames": ["n1", "n2"]}).json()
    return answer


def _bind(scheduler: Any, pod: Json, node: str) -> None:
    meta = pod["metadata"]
    body = {
        "PodName": meta["name"],
        "PodNamespace": meta["namespace"],
        "PodUID": meta["uid"],
        "Node": node,
    }
    assert scheduler.post("bind", body).json()["Error"] == ""


def _state(kube: Any, name: str) -> str:
    """``running``, ``terminating`` or ``gone``."""
    try:
        pod = kube.core.read_namespaced_pod(name, _space(kube, name))
    except kubernetes.client.exceptions.ApiException as exc:
        if exc.status != 404:
            raise
        return "gone"
    return "terminating" if pod.metadata.deletion_timestamp else "running"


def _reasons(kube: Any, name: str) -> list[str]:
    return [
        e["message"]
        for e in kube.events(name, _space(kube, name))
        if e["reason"] == "NPUCapacityReclaimed"
    ]


def test_a_borrowing_pod_waits_while_a_lender_has_pods_pending(
    kube: Any, make: Any, start_scheduler: Any
) -> None:
    tenants = _setup(kube, make)
    _running(kube, make, "b-1", "n1", 0)
    _running(kube, make, "b-2", "n1", 1)  # b holds its nominal, 16 AI cores; 32 are idle
    scheduler = start_scheduler(tenants_config=tenants, reclaim=False)
    _until(lambda: _used(scheduler, kube, "b") == 16, "b's pods counted")
    mine = [
        kube.add_pod(make.npu_pod(f"a-{i}", count=1, namespace=_space(kube, "a"))) for i in (1, 2)
    ]
    for pod in mine:
        assert _filter(scheduler, pod)["NodeNames"] == ["n1", "n2"]  # a's, not bound yet
    extra = kube.add_pod(make.npu_pod("b-3", count=1, namespace=_space(kube, "b")))
    answer = _filter(scheduler, extra)
    assert answer["NodeNames"] == []
    message = (
        "team b would borrow 8 aicore above its nominal 16 while team a, below its nominal, "
        "has 16 aicore pending"
    )
    assert answer["FailedAndUnresolvableNodes"] == {"n1": message, "n2": message}
    assert (
        scheduler.sample(
            "vnpu_scheduler_quota_refusals_total", verb="filter", rule="lender-pending"
        )
        == 1.0
    )
    _until(
        lambda: any(
            e["reason"] == "NPUQuotaExceeded" and message in e["message"]
            for e in kube.events("b-3", _space(kube, "b"))
        ),
        "the NPUQuotaExceeded event",
    )
    # A team within its nominal is never held back by another's pending pods.
    lender = kube.add_pod(make.npu_pod("c-1", count=1, namespace=_space(kube, "c")))
    assert _filter(scheduler, lender)["NodeNames"] == ["n1", "n2"]
    # Once a's pods are gone (deleted here; bound works the same), c's pending pod remains.
    for pod in mine:
        kube.core.delete_namespaced_pod(pod["metadata"]["name"], _space(kube, "a"))
    only_c = (
        "team b would borrow 8 aicore above its nominal 16 while team c, below its nominal, "
        "has 8 aicore pending"
    )
    _until(
        lambda: _filter(scheduler, extra)["FailedAndUnresolvableNodes"].get("n1") == only_c,
        "a's pods no longer pending",
    )
    kube.core.delete_namespaced_pod("c-1", _space(kube, "c"))
    _until(lambda: _filter(scheduler, extra)["NodeNames"] == ["n1", "n2"], "b-3 may borrow")


def test_the_reclaimer_takes_back_only_borrowed_capacity_lowest_priority_first(
    kube: Any, make: Any, start_scheduler: Any, plugin: Any
) -> None:
    """b borrows all idle capacity (40 of 48 AI cores, nominal 16); a's two pods (its nominal)
    then wait: b's two priority-0 pods are evicted, one per node; c's pod later reclaims b's
    next lowest, which takes b to exactly its nominal; its higher-priority pods stay."""
    tenants = _setup(kube, make)
    _running(kube, make, "b-1", "n1", 0, priority=3)
    _running(kube, make, "b-2", "n1", 1, priority=0, grace=30)  # stays Terminating
    _running(kube, make, "b-3", "n1", 2, priority=5)
    _running(kube, make, "b-4", "n2", 0, priority=0)
    _running(kube, make, "b-5", "n2", 1, priority=1)
    _running(kube, make, "c-1", "n2", 2, priority=0)  # c holds 8 of its 16
    scheduler = start_scheduler(
        tenants_config=tenants, reclaim_interval=0.1, reclaim_lease_seconds=2
    )
    _until(
        lambda: _used(scheduler, kube, "b") == 40 and _used(scheduler, kube, "c") == 8,
        "pods counted",
    )
    first = [
        kube.add_pod(make.npu_pod(f"a-{i}", count=1, namespace=_space(kube, "a"))) for i in (1, 2)
    ]
    for pod in first:
        answer = _filter(scheduler, pod)
        assert answer["NodeNames"] == []
        assert set(answer["FailedNodes"]) == {"n1", "n2"}  # room only: eviction could help
    _until(lambda: _state(kube, "b-2") == "terminating", "b-2 evicted")
    _until(lambda: _state(kube, "b-4") == "gone", "b-4 evicted")
    reclaimer = scheduler.service.reclaimer
    assert [_state(kube, n) for n in ("b-1", "b-3", "b-5", "c-1")] == ["running"] * 4
    (reason,) = _reasons(kube, "b-2")
    assert reason.startswith(
        f"Evicted to give NPU capacity back to team a for pod {_space(kube, 'a')}/a-"
    )
    assert "team b borrows 24 aicore above its nominal 16; team a needs 8 aicore" in reason
    _until(lambda: len(_reasons(kube, "b-4")) == 1, "b-4's event")
    # The API has b-4 gone; the filter answers from the scheduler's cache, which learns it
    # from its watch a moment later (b-2, terminating, still counts: 40 - 8).
    _until(lambda: _used(scheduler, kube, "b") == 32, "b-4 gone from the scheduler's cache")
    # One of a's pods takes the room b-4 left; while b-2 terminates the other still finds
    # no room, yet nothing more is evicted for it.
    assert _filter(scheduler, first[1])["NodeNames"] == ["n2"]
    _bind(scheduler, first[1], "n2")
    assert _filter(scheduler, first[0])["NodeNames"] == []
    seen = reclaimer.rounds
    _until(lambda: reclaimer.rounds >= seen + 5, "five more rounds")
    assert [_state(kube, n) for n in ("b-1", "b-3", "b-5", "c-1")] == ["running"] * 4
    assert _reasons(kube, "b-2") == [reason]  # evicted once
    kube.core.delete_namespaced_pod("b-2", _space(kube, "b"), grace_period_seconds=0)  # kubelet
    _until(lambda: _used(scheduler, kube, "b") == 24, "b-2 gone")
    assert _filter(scheduler, first[0])["NodeNames"] == ["n1"]
    _bind(scheduler, first[0], "n1")
    _until(lambda: _used(scheduler, kube, "a") == 16, "a's pods bound")
    # c, within its nominal, takes b's next lowest pod; c's pod beyond its nominal gets none.
    second = [
        kube.add_pod(make.npu_pod(f"c-{i}", count=1, namespace=_space(kube, "c"))) for i in (2, 3)
    ]
    for pod in second:
        assert _filter(scheduler, pod)["NodeNames"] == []
    _until(lambda: _state(kube, "b-5") == "gone", "b-5 evicted")
    _until(lambda: _used(scheduler, kube, "b") == 16, "b at its nominal")
    seen = reclaimer.rounds
    _until(lambda: reclaimer.rounds >= seen + 5, "five more rounds")
    assert [_state(kube, n) for n in ("b-1", "b-3")] == ["running", "running"]
    assert _used(scheduler, kube, "b") == 16  # never below its nominal
    assert _filter(scheduler, second[0])["NodeNames"] == ["n2"]
    assert scheduler.sample("vnpu_scheduler_reclaim_evictions_total", team="b") == 3.0
    assert scheduler.sample("vnpu_scheduler_reclaim_wait_seconds_count") == 3.0
    assert scheduler.sample("vnpu_scheduler_reclaimer_leader") == 1.0


def test_the_replica_whose_filters_saw_the_need_leads_the_reclaimer(
    kube: Any, make: Any, start_scheduler: Any
) -> None:
    """Every chip is held and nobody borrows, so a's pending pod (a lender's) finds no room
    and no victim: whichever replicas saw it contend for the Lease, and exactly one leads."""
    tenants = _setup(kube, make)
    other = kube.add_namespace("other")  # in no team
    for name, node, chip in (("a-1", "n1", 0), ("b-1", "n1", 1), ("b-2", "n1", 2)):
        _running(kube, make, name, node, chip)
    for name, node, chip in (("c-1", "n2", 0), ("c-2", "n2", 1)):
        _running(kube, make, name, node, chip)
    devices = "n2-Ascend310P-2,Ascend310P,21527,0:;"
    outsider: Json = make.holder("o-1", "n2", devices, runtime="[]")
    outsider["metadata"]["namespace"] = other
    kube.add_pod(outsider)
    first = start_scheduler(tenants_config=tenants, reclaim_interval=0.1)
    second = start_scheduler(tenants_config=tenants, reclaim_interval=0.1)
    replicas = (first, second)
    for replica in replicas:
        _until(lambda r=replica: _used(r, kube, "c") == 16, "the pods counted")

    def rounds(count: int) -> None:
        for replica in replicas:
            seen = replica.service.reclaimer.rounds
            _until(lambda r=replica, s=seen: r.service.reclaimer.rounds >= s + count, "rounds")

    def leading() -> list[Any]:
        return [r for r in replicas if r.sample("vnpu_scheduler_reclaimer_leader") == 1.0]

    rounds(3)
    assert leading() == []  # nothing needs room: nobody holds the Lease
    pending = kube.add_pod(make.npu_pod("a-2", count=1, namespace=_space(kube, "a")))
    assert _filter(second, pending)["NodeNames"] == []
    rounds(3)
    assert leading() == [second]
    assert _filter(first, pending)["NodeNames"] == []
    rounds(3)
    (leader_,) = leading()
    lease = kube.plain(
        kubernetes.client.CoordinationV1Api(kube.client).read_namespaced_lease(
            "vnpu-reclaimer", kube.namespace
        )
    )
    assert lease["spec"]["holderIdentity"] == leader_.service.reclaimer.lease.identity
    assert all(_state(kube, n) == "running" for n in ("a-1", "b-1", "b-2", "c-1", "c-2"))
    kube.core.delete_namespaced_pod("a-2", _space(kube, "a"))
    rounds(3)
    assert leading() == []  # the need is gone: the Lease is given up


@pytest.mark.parametrize("duration", [1])
def test_a_lease_not_renewed_is_taken_over(kube: Any, duration: int) -> None:
    api = cluster.KubeCluster.connect(kube.kubeconfig)

    async def run(call: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.to_thread(call, *args)

    async def scenario() -> None:
        old = leader.LeaderLease(api, run, kube.namespace, "vnpu-reclaimer", duration)
        new = leader.LeaderLease(api, run, kube.namespace, "vnpu-reclaimer", duration)
        assert await old.hold()
        assert await old.hold()  # renewed
        assert not await new.hold()  # a live holder
        deadline = time.monotonic() + 20
        while not await new.hold():  # old stops renewing: expired after its duration
            assert time.monotonic() < deadline, "never taken over"
            await asyncio.sleep(0.05)
        assert not await old.hold()  # its renewal loses: the Lease is new's now
        assert await new.hold()
        await new.release()
        assert await old.hold()  # released: free at once

    try:
        asyncio.run(scenario())
    finally:
        api.close()
