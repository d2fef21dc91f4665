"""Table-driven tests of the controllers' pure parts: rollout arithmetic and status, the
scale-down order, selectors and the work queue."""

from __future__ import annotations

from typing import Any

import pytest

from vnpu_sandbox.controllers import ownership, replicasets, rollout, workqueue

Json = dict[str, Any]


def _deployment(replicas: int, surge: object = 1, unavailable: object = 1, **status: Any) -> Json:
    return {
        "metadata": {"name": "d", "generation": 2},
        "spec": {
            "replicas": replicas,
            "progressDeadlineSeconds": 600,
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable},
            },
        },
        "status": status,
    }


def _rs(uid: str, replicas: int, available: int = 0, *, ready: int | None = None) -> Json:
    return {
        "metadata": {"name": f"d-{uid}", "uid": uid},
        "spec": {"replicas": replicas},
        "status": {
            "replicas": replicas,
            "readyReplicas": available if ready is None else ready,
            "availableReplicas": available,
        },
    }


""" + open("/tmp/pure_tests.py").read() + """


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param([_rs("a", 4, 4)], None, 1, id="first-step-uses-the-surge"),
        pytest.param([_rs("a", 3, 3)], _rs("b", 2), 2, id="at-the-surge-limit"),
        pytest.param([_rs("a", 0)], _rs("b", 2), 4, id="old-gone-grow-to-desired"),
        pytest.param([], _rs("b", 4, 4), 4, id="nothing-left-to-do"),
    ],
)
def test_new_replica_set_grows_within_the_surge(
    old: list[Json], new: Json | None, expected: int
) -> None:
    assert rollout.new_replicas(_deployment(4), old, new) == expected


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param([_rs("a", 4, 4)], _rs("b", 1), {"a": 3}, id="one-may-go"),
        pytest.param([_rs("a", 3, 3)], _rs("b", 2), {}, id="new-pods-not-ready-yet"),
        pytest.param([_rs("a", 3, 3)], _rs("b", 2, 2), {"a": 1}, id="new-pods-ready"),
        pytest.param(
            [_rs("a", 2, 0), _rs("b", 3, 3)], _rs("c", 0), {"a": 0}, id="unhealthy-go-first"
        ),
        pytest.param(
            [_rs("a", 2, 0), _rs("b", 2, 2)], _rs("c", 1), {"a": 1}, id="unhealthy-within-budget"
        ),
        pytest.param([_rs("a", 0)], _rs("b", 4, 4), {}, id="nothing-old"),
    ],
)
def test_old_replica_sets_shrink_within_the_unavailability(
    old: list[Json], new: Json, expected: dict[str, int]
) -> None:
    assert rollout.scale_down_targets(_deployment(4), new, old) == expected


def test_status_and_conditions_follow_the_rollout() -> None:
    deployment = _deployment(2)
    created, _ = rollout.status(deployment, _rs("b", 1), [_rs("a", 2, 2)], created=True, now=1e9)
    assert created["replicas"] == 3
    assert created["updatedReplicas"] == 1
    assert created["availableReplicas"] == 2
    assert created["unavailableReplicas"] == 1
    conditions = {c["type"]: c for c in created["conditions"]}
    assert conditions["Available"]["reason"] == "MinimumReplicasAvailable"
    assert conditions["Progressing"]["reason"] == "NewReplicaSetCreated"
    assert conditions["Progressing"]["message"] == 'Created new replica set "d-b"'
    deployment["status"] = created
    done, again = rollout.status(
        deployment, _rs("b", 2, 2), [_rs("a", 0)], created=False, now=1e9 + 5
    )
    assert again is None
    progressing = next(c for c in done["conditions"] if c["type"] == "Progressing")
    assert progressing["reason"] == "NewReplicaSetAvailable"
    assert progressing["message"] == 'ReplicaSet "d-b" has successfully progressed.'
    assert "unavailableReplicas" not in done  # zero counts are omitted, as in Go
    assert rollout.complete(deployment, done)


def test_a_rollout_without_progress_times_out() -> None:
    deployment = _deployment(2)
    stuck = rollout.condition("Progressing", "True", "ReplicaSetUpdated", "x", 1000.0)
    deployment["status"] = {
        "observedGeneration": 2,
        "replicas": 3,
        "updatedReplicas": 1,
        "readyReplicas": 2,
        "availableReplicas": 2,
        "conditions": [stuck],
    }
    old, new = [_rs("a", 2, 2)], _rs("b", 1)
    waiting, again = rollout.status(deployment, new, old, created=False, now=1300.0)
    assert again == pytest.approx(300.05)
    late, again = rollout.status(deployment, new, old, created=False, now=1601.0)
    progressing = next(c for c in late["conditions"] if c["type"] == "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "ProgressDeadlineExceeded")
    assert progressing["message"] == 'ReplicaSet "d-b" has timed out progressing.'
    assert again is None
    waited = next(c for c in waiting["conditions"] if c["type"] == "Progressing")
    assert waited["reason"] == "ReplicaSetUpdated"


def _pod(
    name: str,
    *,
    node: str = "",
    phase: str = "Pending",
    ready_at: str = "",
    created: str = "2024-01-01T00:00:00Z",
    restarts: int = 0,
) -> Json:
    conditions = (
        [{"type": "Ready", "status": "True", "lastTransitionTime": ready_at}] if ready_at else []
    )
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"nodeName": node} if node else {},
        "status": {
            "phase": phase,
            "conditions": conditions,
            "containerStatuses": [{"restartCount": restarts}],
        },
    }


def test_pods_to_delete_sort_first() -> None:
    pods = [
        _pod("ready-old", node="n", phase="Running", ready_at="2024-01-01T00:00:00Z"),
        _pod("ready-new", node="n", phase="Running", ready_at="2024-02-01T00:00:00Z"),
        _pod("restarted", node="n", phase="Running", ready_at="2024-01-01T00:00:00Z", restarts=3),
        _pod("running", node="n", phase="Running"),
        _pod("unknown", node="n", phase="Unknown"),
        _pod("pending", node="n"),
        _pod("unassigned-old"),
        _pod("unassigned-new", created="2024-03-01T00:00:00Z"),
    ]
    ordered = [p["metadata"]["name"] for p in sorted(pods, key=replicasets.deletion_order)]
    assert ordered == [
        "unassigned-new",
        "unassigned-old",
        "pending",
        "unknown",
        "running",
        "ready-new",
        "restarted",
        "ready-old",
    ]


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ({"matchLabels": {"app": "a"}}, {"app": "a", "x": "y"}, True),
        ({"matchLabels": {"app": "a"}}, {"app": "b"}, False),
        (
            {"matchExpressions": [{"key": "t", "operator": "In", "values": ["1", "2"]}]},
            {"t": "2"},
            True,
        ),
        ({"matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "t", "operator": "Exists"}]}, {}, False),
        ({"matchExpressions": [{"key": "t", "operator": "DoesNotExist"}]}, {}, True),
        ({"matchExpressions": [{"key": "t", "operator": "Near"}]}, {"t": "1"}, False),
        ({}, {"app": "a"}, False),  # an empty selector claims nothing
        (None, {"app": "a"}, False),
    ],
)
def test_selectors(selector: object, labels: dict[str, str], expected: bool) -> None:
    assert ownership.selector_matches(selector, labels) is expected


def test_work_queue_deduplicates_delays_and_backs_off() -> None:
    now = [100.0]
    queue = workqueue.WorkQueue(base=1.0, limit=4.0, clock=lambda: now[0])
    item = ("t", "ns", "a")
    queue.add_after(item, 10)
    queue.add(item)  # sooner wins
    queue.add(item)
    assert len(queue) == 1
    assert queue.get(timeout=0) == item
    assert queue.get(timeout=0) is None
    assert [queue.retry(item) for _ in range(2)] == [1, 2]
    assert queue.get(timeout=0) is None  # due in 2 s (1, then 2: the later add does not win)
    now[0] += 1.0
    assert queue.get(timeout=0) == item
    for _ in range(5):
        queue.retry(item)
    assert queue.failures(item) == 7
    now[0] += 4.0  # capped at the limit
    assert queue.get(timeout=0) == item
    queue.forget(item)
    assert queue.failures(item) == 0
    queue.close()
    queue.add(item)
    assert queue.get(timeout=1) is None
