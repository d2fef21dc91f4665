"""The scheduling queue: kube-scheduler's activeQ, backoffQ and unschedulable pool, in one lock.

``scheduler``'s pod handler adds, updates and deletes pending pods; its scheduling thread
:meth:`~SchedulingQueue.pop`\\ s one at a time and, after the attempt, hands the pod back:
:meth:`~SchedulingQueue.done` (bound, or gone), :meth:`~SchedulingQueue.unschedulable` (no
node fits) or :meth:`~SchedulingQueue.error` (an extender or API failure). The rules are
kube-scheduler's:

* the active queue is ordered by ``spec.priority`` (highest first), then by the time the pod
  entered the queue or was last tried (earliest first);
* a pod tried ``n`` times waits ``initial * 2**(n-1)`` seconds, at most ``max`` (1 s doubling to
  10 s by default) after its last try before it is tried again: an error sends it to the
  backoff queue at once, an unschedulable pod waits in the unschedulable pool;
* :meth:`~SchedulingQueue.move_all` (a node added or changed, a pod deleted or finished, a bind
  that failed) moves every unschedulable pod to the backoff queue, or straight to the active
  queue when its backoff is over; a move requested while a pod was being tried sends that pod
  to the backoff queue rather than the pool, so the event is not missed;
* a pod stays in the pool at most ``max_unschedulable`` seconds (kube-scheduler: 5 minutes;
  here 60 s by default, see the docs) before it is tried again anyway;
* an update of an unschedulable pod that changes more than its status moves it too; a pod
  deleted while queued is dropped, and one deleted while being tried is not requeued.

Thread-safe; the clock is injectable for tests.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

Json = dict[str, Any]

FLUSH_INTERVAL = 1.0
"""Seconds between checks of the unschedulable pool for pods that waited too long."""


class Where(StrEnum):
    ACTIVE = "active"
    BACKOFF = "backoff"
    UNSCHEDULABLE = "unschedulable"
    IN_FLIGHT = "in_flight"


@dataclass
class _Entry:
    uid: str
    pod: Json
    priority: int
    timestamp: float
    where: Where
    seq: int = 0
    attempts: int = 0
    cycle: int = 0
    first_attempt: float | None = None


@dataclass(frozen=True)
class Popped:
    """A pod handed to the scheduling thread: the object as it was when popped."""

    uid: str
    pod: Json
    attempts: int
    cycle: int
    first_attempt: float


def priority_of(pod: Json) -> int:
    value = (pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _without_status(pod: Json) -> Json:
    metadata = {
        k: v
        for k, v in (pod.get("metadata") or {}).items()
        if k not in ("resourceVersion", "generation", "managedFields")
    }
    return {
        **{k: v for k, v in pod.items() if k not in ("status", "metadata")},
        "metadata": metadata,
    }


def spec_changed(old: Json, new: Json) -> bool:
    """kube-scheduler's ``isPodUpdated``: anything but status and bookkeeping changed."""
    return _without_status(old) != _without_status(new)


class SchedulingQueue:
    def __init__(
        self,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        max_unschedulable: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.max_unschedulable = max_unschedulable
        self._clock = clock
        self._cond = threading.Condition()
        self._entries: dict[str, _Entry] = {}
        self._active: list[tuple[int, float, int, str]] = []
        self._backoff: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._cycle = 0
        self._move_request_cycle = -1
        self._last_flush = clock()
        self._closed = False

    # --- helpers (lock held) --------------------------------------------------------------

    def backoff_seconds(self, attempts: int) -> float:
        duration = self.initial_backoff
        for _ in range(1, attempts):
            duration *= 2
            if duration > self.max_backoff:
                return self.max_backoff
        return min(duration, self.max_backoff)

    def _push_active(self, entry: _Entry) -> None:
        entry.where = Where.ACTIVE
        entry.seq = next(self._seq)
        heapq.heappush(self._active, (-entry.priority, entry.timestamp, entry.seq, entry.uid))
        self._cond.notify_all()

    def _push_backoff(self, entry: _Entry, expiry: float) -> None:
        entry.where = Where.BACKOFF
        entry.seq = next(self._seq)
        heapq.heappush(self._backoff, (expiry, entry.seq, entry.uid))
        self._cond.notify_all()

    def _backoff_or_active(self, entry: _Entry) -> None:
        expiry = entry.timestamp + self.backoff_seconds(entry.attempts)
        if entry.attempts and expiry > self._clock():
            self._push_backoff(entry, expiry)
        else:
            self._push_active(entry)

    def _valid(self, uid: str, seq: int, where: Where) -> _Entry | None:
        entry = self._entries.get(uid)
        if entry is None or entry.where is not where or entry.seq != seq:
            return None
        return entry

    def _flush(self, now: float) -> None:
        while self._backoff and self._backoff[0][0] <= now:
            _, seq, uid = heapq.heappop(self._backoff)
            entry = self._valid(uid, seq, Where.BACKOFF)
            if entry is not None:
                self._push_active(entry)
        if now - self._last_flush >= FLUSH_INTERVAL:
            self._last_flush = now
            for entry in list(self._entries.values()):
                if (
                    entry.where is Where.UNSCHEDULABLE
                    and now - entry.timestamp >= self.max_unschedulable
                ):
                    self._backoff_or_active(entry)

    # --- pods from the informer -----------------------------------------------------------

    def add(self, uid: str, pod: Json) -> None:
        """A pending pod to schedule (or the newer object of one the queue has)."""
        with self._cond:
            if uid in self._entries:
                self._update(uid, pod)
                return
            entry = _Entry(uid, pod, priority_of(pod), self._clock(), Where.ACTIVE)
            self._entries[uid] = entry
            self._push_active(entry)

    def _update(self, uid: str, pod: Json) -> None:
        entry = self._entries[uid]
        old, entry.pod = entry.pod, pod
        priority = priority_of(pod)
        if entry.where is Where.ACTIVE and priority != entry.priority:
            entry.priority = priority
            self._push_active(entry)
        entry.priority = priority
        if entry.where is Where.UNSCHEDULABLE and spec_changed(old, pod):
            self._backoff_or_active(entry)

    def delete(self, uid: str) -> None:
        """The pod is gone, bound elsewhere or no longer ours: forget it wherever it is."""
        with self._cond:
            self._entries.pop(uid, None)

    def has(self, uid: str) -> bool:
        with self._cond:
            return uid in self._entries

    def uids(self) -> set[str]:
        with self._cond:
            return set(self._entries)

    def latest(self, uid: str) -> Json | None:
        """The newest object the informer delivered for a queued or in-flight pod."""
        with self._cond:
            entry = self._entries.get(uid)
            return entry.pod if entry is not None else None

    # --- the scheduling thread ------------------------------------------------------------

    def pop(self, timeout: float | None = None) -> Popped | None:
        """The next pod to try, waiting for one; None when closed (or after ``timeout``)."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while not self._closed:
                now = self._clock()
                self._flush(now)
                while self._active:
                    _, _, seq, uid = heapq.heappop(self._active)
                    entry = self._valid(uid, seq, Where.ACTIVE)
                    if entry is None:
                        continue
                    entry.where = Where.IN_FLIGHT
                    entry.attempts += 1
                    self._cycle += 1
                    entry.cycle = self._cycle
                    if entry.first_attempt is None:
                        entry.first_attempt = now
                    return Popped(
                        entry.uid, entry.pod, entry.attempts, entry.cycle, entry.first_attempt
                    )
                wait = FLUSH_INTERVAL
                if self._backoff:
                    wait = min(wait, max(0.0, self._backoff[0][0] - now))
                if deadline is not None:
                    if now >= deadline:
                        return None
                    wait = min(wait, deadline - now)
                self._cond.wait(wait)
        return None

    def done(self, uid: str) -> None:
        """The pod left the scheduler's hands (bound, or dropped)."""
        with self._cond:
            entry = self._entries.get(uid)
            if entry is not None and entry.where is Where.IN_FLIGHT:
                del self._entries[uid]

    def unschedulable(self, uid: str) -> None:
        """No node fits: wait in the pool for a cluster change (or the backoff queue, see above)."""
        with self._cond:
            entry = self._entries.get(uid)
            if entry is None or entry.where is not Where.IN_FLIGHT:
                return
            entry.timestamp = self._clock()
            if self._move_request_cycle >= entry.cycle:
                self._backoff_or_active(entry)
            else:
                entry.where = Where.UNSCHEDULABLE
                entry.seq = next(self._seq)

    def error(self, uid: str) -> None:
        """The attempt failed for a reason retrying may fix: back off, then try again."""
        with self._cond:
            entry = self._entries.get(uid)
            if entry is None or entry.where is not Where.IN_FLIGHT:
                return
            entry.timestamp = self._clock()
            self._backoff_or_active(entry)

    def move_all(self) -> int:
        """Something changed that may help unschedulable pods; returns how many were moved."""
        with self._cond:
            self._move_request_cycle = self._cycle
            moved = 0
            for entry in list(self._entries.values()):
                if entry.where is Where.UNSCHEDULABLE:
                    self._backoff_or_active(entry)
                    moved += 1
            return moved

    def counts(self) -> dict[str, int]:
        with self._cond:
            counted = dict.fromkeys((w.value for w in Where), 0)
            for entry in self._entries.values():
                counted[entry.where.value] += 1
            return counted

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
