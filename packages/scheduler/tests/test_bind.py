"""Bind: the node lock's rules, refusals that leave no trace, idempotence, events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from vnpu_core import coordination

LOCK = "hami.io/mutex.lock"
MERGE_PATCH = "application/merge-patch+json"
Json = dict[str, Any]


def _lock(owner: tuple[str, str] | None, age_seconds: float = 0) -> str:
    when = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=age_seconds)
    if owner is None:
        return coordination.encode_lock(coordination.NodeLock(when))
    return coordination.encode_lock(coordination.NodeLock(when, owner[0], owner[1]))


def _bind(scheduler: Any, kube: Any, name: str, node: str) -> str:
    pod = kube.pod(name)
    body = {
        "PodName": name,
        "PodNamespace": kube.namespace,
        "PodUID": pod["metadata"]["uid"],
        "Node": node,
    }
    answer = scheduler.post("bind", body)
    assert answer.status_code == 200
    error: str = answer.json()["Error"]
    return error


@pytest.fixture
def node_and_pod(kube: Any, make: Any) -> None:
    kube.add_node(make.node("n1"))
    kube.add_pod(make.npu_pod("job", memory=4000))


def _unbound(kube: Any, name: str = "job") -> None:
    pod = kube.pod(name)
    assert not pod["spec"].get("nodeName")
    assert not any(k.startswith("hami.io/") for k in pod["metadata"].get("annotations") or {})


def test_waits_for_a_pod_still_allocating_then_gives_up(
    kube: Any, make: Any, start_scheduler: Any, node_and_pod: None
) -> None:
    scheduler = start_scheduler(lock_wait=0.3, lock_ttl=1.0)
    kube.add_pod(make.npu_pod("other", annotations={"hami.io/bind-phase": "allocating"}))
    held = _lock((kube.namespace, "other"), age_seconds=600)  # expired, but its owner still waits
    kube.annotate_node("n1", {LOCK: held})
    error = _bind(scheduler, kube, "job", "n1")
    assert error.startswith(
        f"node n1 is locked by pod {kube.namespace}/other, still waiting for Allocate"
    )
    assert kube.node("n1")["metadata"]["annotations"][LOCK] == held
    _unbound(kube)
    assert scheduler.sample("vnpu_scheduler_lock_wait_seconds_count") == 1
    assert scheduler.sample("vnpu_scheduler_binds_total", result="refused") == 1
    scheduler.wait_for(lambda: any(e["reason"] == "NPUBindFailed" for e in kube.events("job")))
    event = next(e for e in kube.events("job") if e["reason"] == "NPUBindFailed")
    assert event["type"] == "Warning"
    assert f"locked by pod {kube.namespace}/other" in event["message"]


def test_a_fresh_lock_of_a_live_pod_is_never_taken(
    kube: Any, make: Any, start_scheduler: Any, node_and_pod: None
) -> None:
    scheduler = start_scheduler(lock_wait=0.2)
    kube.add_pod(make.npu_pod("other", annotations={"hami.io/bind-phase": "success"}))
    kube.annotate_node("n1", {LOCK: _lock((kube.namespace, "other"))})
    error = _bind(scheduler, kube, "job", "n1")
    assert error.startswith(f"node n1 is locked by pod {kube.namespace}/other")
    _unbound(kube)


@pytest.mark.parametrize(
    ("owner", "age", "why"),
    [
        ("gone", 0, "owner_gone"),  # owner pod deleted: taken at once (as HAMi)
        ("elsewhere", 0, "owner_elsewhere"),  # owner bound to n2, waiting for Allocate there
        ("done", 600, "expired"),  # expired and Allocate finished
        ("running", 600, "expired"),  # bind-phase never updated, but it runs
        (None, 600, "expired"),  # owner-less (Volcano) and expired
    ],
)
def test_takes_over_locks_nobody_needs(
    kube: Any,
    make: Any,
    start_scheduler: Any,
    node_and_pod: None,
    owner: str | None,
    age: float,
    why: str,
) -> None:
    scheduler = start_scheduler(lock_ttl=300.0)
    kube.add_pod(make.npu_pod("done", annotations={"hami.io/bind-phase": "success"}))
    kube.add_pod(make.npu_pod("running", annotations={"hami.io/bind-phase": "allocating"}))
    kube.core.patch_namespaced_pod_status(
        "running", kube.namespace, {"status": {"phase": "Running"}}, _content_type=MERGE_PATCH
    )
    elsewhere = make.holder("elsewhere", "n2", "n2-Ascend310P-0,Ascend310P,3072,0:;")
    elsewhere["metadata"]["annotations"]["hami.io/bind-phase"] = "allocating"
    kube.add_pod(elsewhere)
    kube.annotate_node("n1", {LOCK: _lock(None if owner is None else (kube.namespace, owner), age)})
    assert _bind(scheduler, kube, "job", "n1") == ""
    assert kube.node("n1")["metadata"]["annotations"][LOCK].endswith(f",{kube.namespace},job")
    assert scheduler.sample("vnpu_scheduler_lock_takeovers_total", why=why) == 1


def test_fresh_owner_less_lock_is_waited_for(
    kube: Any, start_scheduler: Any, node_and_pod: None
) -> None:
    scheduler = start_scheduler(lock_wait=0.2)
    kube.annotate_node("n1", {LOCK: _lock(None)})
    error = _bind(scheduler, kube, "job", "n1")
    assert error.startswith("node n1 is locked by an owner-less lock taken at ")
    _unbound(kube)


def test_unreadable_lock_is_refused_by_name(kube: Any, scheduler: Any, node_and_pod: None) -> None:
    kube.annotate_node("n1", {LOCK: "yesterday,someone"})
    error = _bind(scheduler, kube, "job", "n1")
    assert error == (
        "node n1 has an unreadable hami.io/mutex.lock='yesterday,someone' "
        "(lock is '<time>' or '<time>,<namespace>,<pod>', got 2 parts); remove the annotation"
    )
    assert kube.node("n1")["metadata"]["annotations"][LOCK] == "yesterday,someone"
    _unbound(kube)


def test_refusal_at_bind_releases_the_lock(kube: Any, make: Any, scheduler: Any) -> None:
    """The cache thought the node free; the API shows it full: refused, lock released."""
    kube.add_node(make.node("n1", chips=1))
    kube.add_pod(make.npu_pod("job", count=1))
    kube.add_pod(make.holder("whole", "n1", "n1-Ascend310P-0,Ascend310P,21527,0:;"))
    error = _bind(scheduler, kube, "job", "n1")
    assert error == "Ascend310P: no 1 free whole chip (asked 1, 0 of 1 chips are free)"
    assert LOCK not in (kube.node("n1")["metadata"].get("annotations") or {})
    _unbound(kube)
    assert scheduler.sample("vnpu_scheduler_bind_conflicts_total", kind="fit") == 1


def test_release_lock_after_bind(kube: Any, start_scheduler: Any, node_and_pod: None) -> None:
    scheduler = start_scheduler(release_lock_after_bind=True)
    assert _bind(scheduler, kube, "job", "n1") == ""
    assert kube.pod("job")["spec"]["nodeName"] == "n1"
    assert LOCK not in (kube.node("n1")["metadata"].get("annotations") or {})


def test_second_bind_waits_for_the_plugin(
    kube: Any, make: Any, start_scheduler: Any, plugin: Any, node_and_pod: None
) -> None:
    """Two binds to one node: the second runs once the plugin released the first's lock."""
    scheduler = start_scheduler(lock_wait=5.0)
    kube.add_pod(make.npu_pod("job2", memory=4000))
    assert _bind(scheduler, kube, "job", "n1") == ""
    assert _bind(scheduler, kube, "job2", "n1") == ""
    first = kube.pod("job")["metadata"]["annotations"]["hami.io/Ascend310P-devices-allocated"]
    second = kube.pod("job2")["metadata"]["annotations"]["hami.io/Ascend310P-devices-allocated"]
    assert first == second == "n1-Ascend310P-0,Ascend310P,6144,0:;"  # best fit packs one chip
    scheduler.wait_for(
        lambda: kube.pod("job2")["metadata"]["annotations"]["hami.io/bind-phase"] == "success"
    )


def test_refusals_name_the_problem(kube: Any, make: Any, scheduler: Any) -> None:
    kube.add_node(make.node("n1"))
    kube.add_node(make.node("n2"))
    kube.add_pod(make.npu_pod("gib", memory="4Gi"))
    assert _bind(scheduler, kube, "gib", "n1") == (
        "container 'main': huawei.com/Ascend310P-memory=4Gi: write MiB as a plain integer, e.g. 4096"
    )
    _unbound(kube, "gib")
    space = kube.namespace
    answer = scheduler.post(
        "bind", {"PodName": "ghost", "PodNamespace": space, "PodUID": "u", "Node": "n1"}
    )
    assert answer.json() == {"Error": f"pod {space}/ghost does not exist"}
    kube.add_pod(make.npu_pod("job", memory=4000))
    answer = scheduler.post(
        "bind", {"PodName": "job", "PodNamespace": space, "PodUID": "other-uid", "Node": "n1"}
    )
    assert answer.json()["Error"].startswith(f"pod {space}/job has UID ")
    assert _bind(scheduler, kube, "job", "n-missing") == "node n-missing does not exist"
    assert _bind(scheduler, kube, "job", "n1") == ""
    assert _bind(scheduler, kube, "job", "n2") == f"pod {space}/job is already bound to node n1"
    assert LOCK not in (kube.node("n2")["metadata"].get("annotations") or {})


def test_pod_naming_zero_chips_is_bound_plainly(kube: Any, make: Any, scheduler: Any) -> None:
    """kube-scheduler sends it (it names a managed resource); it holds no chip and no lock."""
    kube.add_node(make.node("n1"))
    kube.add_pod(make.npu_pod("web", count=0))
    assert _bind(scheduler, kube, "web", "n1") == ""
    assert kube.pod("web")["spec"]["nodeName"] == "n1"
    assert LOCK not in (kube.node("n1")["metadata"].get("annotations") or {})


def test_pod_without_npu_is_refused(kube: Any, make: Any, scheduler: Any) -> None:
    """kube-scheduler never sends it (no managed resource): whoever asks, it is not bound."""
    kube.add_node(make.node("n1"))
    kube.add_pod(make.npu_pod("web", count=None))
    assert _bind(scheduler, kube, "web", "n1") == (
        f"pod {kube.namespace}/web asks for no NPU resource: vnpu-scheduler binds only pods that do"
    )
    _unbound(kube, "web")


def test_assumed_pod_counts_before_the_watch_delivers(kube: Any, make: Any, scheduler: Any) -> None:
    kube.add_node(make.node("n1", chips=1))
    kube.add_pod(make.npu_pod("job", count=1))
    scheduler.wait_for(lambda: scheduler.service.cache.state("n1") is not None)
    assert _bind(scheduler, kube, "job", "n1") == ""
    # Straight after the answer the filter already sees the chip taken (assumed copy).
    state = scheduler.service.cache.state("n1")
    assert state.usage.usage["n1-Ascend310P-0"].exclusive


def test_bind_retried_after_the_pod_was_bound_takes_no_lock(
    kube: Any, make: Any, scheduler: Any, node_and_pod: None
) -> None:
    """kube-scheduler retrying a bind whose answer it lost: answered bound, nothing written."""
    pod = kube.pod("job")
    scheduler.post("filter", {"Pod": pod, "NodeNames": ["n1"]})  # the replica keeps this copy
    assert _bind(scheduler, kube, "job", "n1") == ""
    kube.annotate_node("n1", {LOCK: None})  # the device plugin finished Allocate
    before = kube.pod("job")["metadata"]["annotations"]
    assert _bind(scheduler, kube, "job", "n1") == ""
    assert LOCK not in (kube.node("n1")["metadata"].get("annotations") or {})
    assert kube.pod("job")["metadata"]["annotations"] == before
    assert scheduler.sample("vnpu_scheduler_binds_total", result="already_bound") == 1


def test_pod_deleted_after_filter_is_refused_and_the_lock_released(
    kube: Any, scheduler: Any, node_and_pod: None
) -> None:
    pod = kube.pod("job")
    scheduler.post("filter", {"Pod": pod, "NodeNames": ["n1"]})
    kube.core.delete_namespaced_pod("job", kube.namespace, grace_period_seconds=0)
    body = {
        "PodName": "job",
        "PodNamespace": kube.namespace,
        "PodUID": pod["metadata"]["uid"],
        "Node": "n1",
    }
    assert scheduler.post("bind", body).json() == {"Error": f"pod {kube.namespace}/job was deleted"}
    assert LOCK not in (kube.node("n1")["metadata"].get("annotations") or {})


def test_pod_recreated_under_the_same_name_is_not_bound(
    kube: Any, make: Any, scheduler: Any, node_and_pod: None
) -> None:
    """The Binding carries the UID kube-scheduler filtered: a new pod of that name is not taken."""
    old = kube.pod("job")
    scheduler.post("filter", {"Pod": old, "NodeNames": ["n1"]})
    kube.core.delete_namespaced_pod("job", kube.namespace, grace_period_seconds=0)
    kube.add_pod(make.npu_pod("job", memory=4000))
    body = {
        "PodName": "job",
        "PodNamespace": kube.namespace,
        "PodUID": old["metadata"]["uid"],
        "Node": "n1",
    }
    error = scheduler.post("bind", body).json()["Error"]
    assert "UID" in error
    _unbound(kube)
    assert LOCK not in (kube.node("n1")["metadata"].get("annotations") or {})
