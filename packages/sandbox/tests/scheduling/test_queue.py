"""The scheduling queue's order, backoff and moves, on a fake clock."""

from __future__ import annotations

from typing import Any

import pytest

from vnpu_sandbox.scheduling import queue

Json = dict[str, Any]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def q(clock: Clock) -> queue.SchedulingQueue:
    return queue.SchedulingQueue(1.0, 10.0, 60.0, clock=clock)


def pod(name: str, priority: int = 0, **spec: Any) -> Json:
    return {
        "metadata": {"name": name, "uid": name, "resourceVersion": "1"},
        "spec": {"priority": priority, **spec},
    }


def popped_name(q: queue.SchedulingQueue) -> str | None:
    item = q.pop(timeout=0)
    return None if item is None else str(item.pod["metadata"]["name"])


@pytest.mark.parametrize(
    ("attempts", "seconds"), [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (20, 10.0)]
)
def test_backoff_doubles_to_the_maximum(
    q: queue.SchedulingQueue, attempts: int, seconds: float
) -> None:
    assert q.backoff_seconds(attempts) == seconds


def test_priority_then_arrival(q: queue.SchedulingQueue, clock: Clock) -> None:
    q.add("a", pod("a"))
    clock.now += 1
    q.add("b", pod("b", priority=100))
    clock.now += 1
    q.add("c", pod("c"))
    assert [popped_name(q) for _ in range(4)] == ["b", "a", "c", None]


def test_a_priority_change_reorders(q: queue.SchedulingQueue, clock: Clock) -> None:
    q.add("a", pod("a"))
    clock.now += 1
    q.add("b", pod("b"))
    q.add("b", pod("b", priority=5))
    assert popped_name(q) == "b"


def test_an_error_backs_off_then_returns(q: queue.SchedulingQueue, clock: Clock) -> None:
    q.add("a", pod("a"))
    assert popped_name(q) == "a"
    q.error("a")
    assert popped_name(q) is None
    clock.now += 0.99
    assert popped_name(q) is None
    clock.now += 0.02
    item = q.pop(timeout=0)
    assert item is not None
    assert item.attempts == 2
    q.error("a")
    clock.now += 1.5
    assert popped_name(q) is None, "the second backoff is 2 s"
    clock.now += 0.6
    assert popped_name(q) == "a"


def test_unschedulable_waits_for_a_move(q: queue.SchedulingQueue, clock: Clock) -> None:
    q.add("a", pod("a"))
    q.pop(timeout=0)
    q.unschedulable("a")
    clock.now += 30
    assert popped_name(q) is None, "nothing changed: stays in the pool"
    assert q.counts()["unschedulable"] == 1
    assert q.move_all() == 1
    assert popped_name(q) == "a", "its 1 s backoff is long over"


def test_a_move_during_backoff_goes_to_the_backoff_queue(
    q: queue.SchedulingQueue, clock: Clock
) -> None:
    q.add("a", pod("a"))
    q.pop(timeout=0)
    q.unschedulable("a")
    clock.now += 0.5
    q.move_all()
    assert q.counts()["backoff"] == 1
    assert popped_name(q) is None
    clock.now += 0.6
    assert popped_name(q) == "a"


def test_a_move_while_in_flight_is_not_missed(q: queue.SchedulingQueue, clock: Clock) -> None:
    q.add("a", pod("a"))
    q.pop(timeout=0)
    q.move_all()  # e.g. a node was added while "a" was being tried
    q.unschedulable("a")
    assert q.counts()["backoff"] == 1, "not parked in the pool"


def test_the_pool_is_flushed_after_max_unschedulable(
    q: queue.SchedulingQueue, clock: Clock
) -> None:
    q.add("a", pod("a"))
    q.pop(timeout=0)
    q.unschedulable("a")
    clock.now += 59
    assert popped_name(q) is None
    clock.now += 2
    assert popped_name(q) == "a"


def test_an_update_beyond_status_moves_an_unschedulable_pod(
    q: queue.SchedulingQueue, clock: Clock
) -> None:
    q.add("a", pod("a"))
    q.pop(timeout=0)
    q.unschedulable("a")
    clock.now += 5
    status_only = {**pod("a"), "status": {"conditions": [{"type": "PodScheduled"}]}}
    status_only["metadata"]["resourceVersion"] = "2"
    q.add("a", status_only)
    assert popped_name(q) is None, "our own condition patch does not retry the pod"
    relabelled = pod("a")
    relabelled["metadata"]["labels"] = {"fixed": "yes"}
    q.add("a", relabelled)
    item = q.pop(timeout=0)
    assert item is not None
    assert item.pod["metadata"]["labels"] == {"fixed": "yes"}


def test_a_deleted_pod_is_dropped_wherever_it_is(q: queue.SchedulingQueue, clock: Clock) -> None:
    for name in ("backoff", "pool", "flight"):
        q.add(name, pod(name))
    assert [popped_name(q) for _ in range(3)] == ["backoff", "pool", "flight"]
    q.error("backoff")
    q.unschedulable("pool")
    q.add("active", pod("active"))
    assert q.counts() == {"active": 1, "backoff": 1, "unschedulable": 1, "in_flight": 1}
    for name in ("active", "backoff", "pool", "flight"):
        q.delete(name)
    q.unschedulable("flight")  # the attempt of a deleted pod ends: nothing is requeued
    q.move_all()
    clock.now += 100
    assert popped_name(q) is None
    assert q.counts() == {"active": 0, "backoff": 0, "unschedulable": 0, "in_flight": 0}


def test_done_forgets_and_latest_follows_updates(q: queue.SchedulingQueue) -> None:
    q.add("a", pod("a"))
    q.pop(timeout=0)
    newer = pod("a")
    newer["metadata"]["resourceVersion"] = "9"
    q.add("a", newer)
    latest = q.latest("a")
    assert latest is not None
    assert latest["metadata"]["resourceVersion"] == "9"
    assert q.counts()["in_flight"] == 1, "an update does not requeue a pod being tried"
    q.done("a")
    assert not q.has("a")
    assert q.latest("a") is None


def test_close_ends_pop(q: queue.SchedulingQueue) -> None:
    q.close()
    assert q.pop() is None
