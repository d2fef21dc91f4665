"""Binds this replica has accepted but not yet written: what they will take, node by node.

kube-scheduler binds asynchronously: while one pod's bind waits for its node's lock, the
next pods are filtered already. The cache cannot count a bind that has not written its
decision yet, so without this record every pod filtered meanwhile would see the waiting
binds' chips as free, and binds past the node's capacity would queue behind the lock only
to fail. The extender fits each pod behind the binds in flight to the node
(``vnpu_core.allocator.assume``); a bind's entry goes when the bind ends, by which time the
cache counts a bound pod (it assumes it before the watch delivers it). The bind itself still
fits under the node lock on a fresh list of the node's pods, so this record improves
placement and never decides what is safe.

Read by filter threads while the event loop's binds write it, hence the lock.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from vnpu_core import requests

Ahead = tuple[tuple[str, requests.PodRequest], ...]
"""Binds in flight to one node: (namespace/name, request), in the order they arrived."""


class InFlight:
    """The pod requests of the binds in flight, by node, in the order they arrived."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_node: dict[str, dict[str, requests.PodRequest]] = {}

    @contextlib.contextmanager
    def holding(self, node: str, pod: str, request: requests.PodRequest) -> Iterator[None]:
        """Count ``request`` of pod ``pod`` (namespace/name) on ``node`` while the block runs."""
        with self._lock:
            self._by_node.setdefault(node, {})[pod] = request
        try:
            yield
        finally:
            with self._lock:
                waiting = self._by_node.get(node)
                if waiting is not None and waiting.get(pod) is request:
                    del waiting[pod]
                    if not waiting:
                        del self._by_node[node]

    def by_node(self, pod: str = "") -> dict[str, Ahead]:
        """The binds in flight as (pod, request) for each node that has some, but pod ``pod``'s
        own (a retry): one look for a whole filter, whatever its number of nodes."""
        with self._lock:
            found = {
                node: tuple((who, r) for who, r in waiting.items() if who != pod)
                for node, waiting in self._by_node.items()
            }
        return {node: ahead for node, ahead in found.items() if ahead}
