"""What this replica knows will take chips before the cache can count it, node by node.

Two kinds, each a pod's request on a node:

* **Binds in flight.** kube-scheduler binds asynchronously: while one pod's bind waits for
  its node's lock, the next pods are filtered already. The cache cannot count a bind that has
  not written its decision yet, so without this record every pod filtered meanwhile would see
  the waiting binds' chips as free, and binds past the node's capacity would queue behind the
  lock only to fail. A bind's entry goes when the bind ends, by which time the cache counts a
  bound pod (it assumes it before the watch delivers it).
* **Gang reservations** (``gang``): a PodGroup member the filter placed, until its bind, its
  expiry, or its next filter. Made by this replica's filter, or read from the pod's
  ``vnpu.io/reserved`` annotation another replica wrote.

The extender fits each pod behind both (``vnpu_core.allocator.assume``). The bind fits under
the node lock on a fresh list of the node's pods, behind the node's reservations (not the
other binds in flight: those fit after it, under the same lock), so a pod that is not part
of the gang cannot take the chips a placed member is about to bind to.

Read by filter threads while the event loop's binds write it, hence the lock.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from vnpu_core import requests


def name_of(pod: Mapping[str, Any]) -> str:
    """``namespace/name``: how this record names a pod."""
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


Ahead = tuple[tuple[str, requests.PodRequest], ...]
"""What takes chips on one node first: (namespace/name, request), in the order it came."""


@dataclass(frozen=True, slots=True)
class Reservation:
    node: str
    request: requests.PodRequest
    group: str  # namespace/podGroupName
    until: float  # on the monotonic clock


class InFlight:
    """The pod requests of the binds in flight and of the gang reservations, by node."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._by_node: dict[str, dict[str, requests.PodRequest]] = {}
        self._reserved: dict[str, Reservation] = {}  # by namespace/name
        self._clock = clock

    @contextlib.contextmanager
    def holding(self, node: str, pod: str, request: requests.PodRequest) -> Iterator[None]:
        """Count ``request`` of pod ``pod`` (namespace/name) on ``node`` while the block runs.

        The pod's reservation, if any, ends with the block: the bind it was kept for is over."""
        with self._lock:
            self._by_node.setdefault(node, {})[pod] = request
        try:
            yield
        finally:
            with self._lock:
                self._reserved.pop(pod, None)
                waiting = self._by_node.get(node)
                if waiting is not None and waiting.get(pod) is request:
                    del waiting[pod]
                    if not waiting:
                        del self._by_node[node]

    def reserve(
        self, node: str, pod: str, request: requests.PodRequest, group: str, seconds: float
    ) -> None:
        """Keep ``request`` of gang member ``pod`` on ``node`` for ``seconds`` (or until its
        bind ends, or it is reserved again)."""
        with self._lock:
            self._reserved[pod] = Reservation(node, request, group, self._clock() + seconds)

    def release(self, pod: str) -> None:
        """The pod is bound or gone: its reservation ends."""
        with self._lock:
            self._reserved.pop(pod, None)

    def _live(self) -> dict[str, Reservation]:
        now = self._clock()
        expired = [pod for pod, r in self._reserved.items() if r.until <= now]
        for pod in expired:
            del self._reserved[pod]
        return self._reserved

    def by_node(self, pod: str = "") -> dict[str, Ahead]:
        """The reservations, then the binds in flight, as (pod, request) for each node that has
        some, but pod ``pod``'s own (a retry): one look for a whole filter."""
        found: dict[str, list[tuple[str, requests.PodRequest]]] = {}
        with self._lock:
            for who, held in self._live().items():
                if who != pod:
                    found.setdefault(held.node, []).append((who, held.request))
            for node, waiting in self._by_node.items():
                for who, request in waiting.items():
                    if who != pod and who not in self._reserved:
                        found.setdefault(node, []).append((who, request))
        return {node: tuple(ahead) for node, ahead in found.items()}

    def reserved(self, node: str, pod: str) -> Ahead:
        """The reservations on ``node`` but pod ``pod``'s own (what its bind fits behind)."""
        with self._lock:
            return tuple(
                (who, r.request) for who, r in self._live().items() if r.node == node and who != pod
            )

    def members(self, group: str) -> dict[str, int]:
        """How many members of ``group`` are reserved on each node."""
        counted: dict[str, int] = {}
        with self._lock:
            for held in self._live().values():
                if held.group == group:
                    counted[held.node] = counted.get(held.node, 0) + 1
        return counted
