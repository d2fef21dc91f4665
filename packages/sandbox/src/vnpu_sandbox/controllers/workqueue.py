"""The manager's queue of work: which object each controller must look at next, and when.

Informer handlers (on their threads) ``add`` items, ``(topic, namespace, name)``, where the
topic names the controller; the worker ``get``s them one at a time. Like client-go's work
queue, an item is queued at most once however many events name it, and a delayed add
(``add_after``: a requeue, a backoff) is brought forward by an earlier one. ``retry``
schedules an item again after a per-item exponential backoff (``base`` doubling up to
``limit`` seconds) and returns how many times in a row it has failed; ``forget`` resets that
count after a success.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable

Item = tuple[str, str, str]
"""(topic, namespace, name): the controller and the object it must sync."""


class WorkQueue:
    """Deduplicated, delayable items for one worker thread; safe to add to from any thread."""

    def __init__(
        self,
        *,
        base: float = 0.005,
        limit: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._base = base
        self._limit = limit
        self._clock = clock
        self._heap: list[tuple[float, int, Item]] = []
        self._due: dict[Item, float] = {}
        self._failures: dict[Item, int] = {}
        self._order = itertools.count()
        self._ready = threading.Condition()
        self._closed = False

    def __len__(self) -> int:
        with self._ready:
            return len(self._due)

    def add(self, item: Item) -> None:
        self.add_after(item, 0.0)

    def add_after(self, item: Item, delay: float) -> None:
        """Queue ``item`` to be handed out in ``delay`` seconds, unless it is due sooner."""
        due = self._clock() + max(delay, 0.0)
        with self._ready:
            if self._closed:
                return
            current = self._due.get(item)
            if current is not None and current <= due:
                return
            self._due[item] = due
            heapq.heappush(self._heap, (due, next(self._order), item))
            self._ready.notify()

    def get(self, timeout: float) -> Item | None:
        """The next due item, or None after ``timeout`` seconds or once the queue is closed."""
        deadline = self._clock() + timeout
        with self._ready:
            while not self._closed:
                now = self._clock()
                while self._heap:
                    due, _, item = self._heap[0]
                    if self._due.get(item) != due:  # superseded by an earlier add
                        heapq.heappop(self._heap)
                        continue
                    if due > now:
                        break
                    heapq.heappop(self._heap)
                    del self._due[item]
                    return item
                wait = deadline - now
                if self._heap:
                    wait = min(wait, self._heap[0][0] - now)
                if wait <= 0 and now >= deadline:
                    return None
                self._ready.wait(max(wait, 0.001))
        return None

    def retry(self, item: Item) -> int:
        """Queue ``item`` again after its backoff; how many times in a row it has failed."""
        with self._ready:
            failures = self._failures.get(item, 0) + 1
            self._failures[item] = failures
        self.add_after(item, min(self._base * 2 ** (failures - 1), self._limit))
        return failures

    def failures(self, item: Item) -> int:
        with self._ready:
            return self._failures.get(item, 0)

    def forget(self, item: Item) -> None:
        with self._ready:
            self._failures.pop(item, None)

    def close(self) -> None:
        """Hand out nothing more; a blocked ``get`` returns None at once."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()
