"""The node cache: every node's inventory and chip usage, recomputed only when something changed.

``informer`` feeds it nodes and pods from list+watch (in its threads); ``extender`` and
``binder`` read ``NodeState`` snapshots from the event loop; ``metrics`` reads all states on
a scrape. A node's state (``nodes.read_node`` plus ``ledger.node_usage`` over the pods bound
to it) is computed on first use and kept until the node, a pod bound to it or the catalog
changes, or until a device plugin's handshake could turn stale. Only pods that carry a
``-devices-allocated`` annotation are kept: no other pod holds chips.

After a successful bind, ``assume`` puts the bound copy of the pod in at once, so the next
filter counts its chips before the watch delivers the update. Everything is guarded by one
lock; states are immutable apart from their fit memo, which ``extender`` fills.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from vnpu_core import catalog, coordination, errors, ledger, nodes, protocol

Json = dict[str, Any]
ALLOCATED_SUFFIX = "-devices-allocated"
ASSUME_SECONDS = 120.0
MEMO_LIMIT = 512
Catalog = catalog.Catalog


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node as the allocator sees it: inventory (or why unavailable) and usage by chip UUID."""

    name: str
    read: nodes.NodeRead
    usage: ledger.Ledger
    version: int
    resource_version: str
    expires: datetime | None  # naive local time at which a fresh handshake turns stale
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")


def holds_chips(pod: Mapping[str, Any]) -> bool:
    """A pod bound to a node that records devices, and has not finished."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if not any(key.endswith(ALLOCATED_SUFFIX) for key in annotations):
        return False
    return ledger.holds_devices(pod)


def _node_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


class ClusterCache:
    """Nodes and chip-holding pods of the cluster, with per-node states computed lazily."""

    def __init__(
        self,
        models: catalog.Catalog,
        handshake_timeout: timedelta,
        clock: Callable[[], datetime] = datetime.now,
    ) -> None:
        self._catalog = models
        self._timeout = handshake_timeout
        self._clock = clock  # naive local time, as the handshake annotations are written
        self._lock = threading.Lock()
        self._nodes: dict[str, Json] = {}
        self._pods: dict[str, Json] = {}
        self._by_node: dict[str, set[str]] = {}
        self._assumed: dict[str, tuple[Json, float]] = {}
        self._states: dict[str, NodeState] = {}
        self._counter = 0
        self.nodes_synced = threading.Event()
        self.pods_synced = threading.Event()

    @property
    def catalog(self) -> Catalog:
        return self._catalog

    @property
    def synced(self) -> bool:
        return self.nodes_synced.is_set() and self.pods_synced.is_set()

    def set_catalog(self, models: Catalog) -> None:
        """Use new chip models (a device-config reload): every state is recomputed."""
        with self._lock:
            self._catalog = models
            self._states.clear()

    # --- nodes -------------------------------------------------------------------------------

    def replace_nodes(self, items: Iterable[Json]) -> None:
        with self._lock:
            self._nodes = {str((n.get("metadata") or {}).get("name")): n for n in items}
            self._states.clear()
        self.nodes_synced.set()

    def upsert_node(self, obj: Json) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        with self._lock:
            self._nodes[name] = obj
            self._states.pop(name, None)

    def remove_node(self, obj: Json) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        with self._lock:
            self._nodes.pop(name, None)
            self._states.pop(name, None)

    def names(self) -> list[str]:
        with self._lock:
            return list(self._nodes)

    # --- pods --------------------------------------------------------------------------------

    def replace_pods(self, items: Iterable[Json]) -> None:
        with self._lock:
            self._pods.clear()
            self._by_node.clear()
            for pod in items:
                self._put_pod(pod)
            self._states.clear()
        self.pods_synced.set()

    def upsert_pod(self, pod: Json) -> None:
        with self._lock:
            self._drop_pod(pod_key(pod))
            self._put_pod(pod)

    def remove_pod(self, pod: Json) -> None:
        with self._lock:
            key = pod_key(pod)
            self._drop_pod(key)
            assumed = self._assumed.pop(key, None)
            if assumed is not None:
                self._states.pop(_node_of(assumed[0]), None)

    def assume(self, pod: Json) -> None:
        """A pod just bound by us (``spec.nodeName`` and annotations set on this copy)."""
        with self._lock:
            key = pod_key(pod)
            if key not in self._pods:
                self._assumed[key] = (pod, time.monotonic() + ASSUME_SECONDS)
                self._states.pop(_node_of(pod), None)

    def _put_pod(self, pod: Json) -> None:
        key = pod_key(pod)
        node = _node_of(pod)
        if node and key in self._assumed:
            del self._assumed[key]  # the watch caught up with our bind
            self._states.pop(node, None)
        if not holds_chips(pod):
            return
        self._pods[key] = pod
        self._by_node.setdefault(node, set()).add(key)
        self._states.pop(node, None)

    def _drop_pod(self, key: str) -> None:
        old = self._pods.pop(key, None)
        if old is None:
            return
        node = _node_of(old)
        members = self._by_node.get(node)
        if members is not None:
            members.discard(key)
            if not members:
                del self._by_node[node]
        self._states.pop(node, None)

    # --- states ------------------------------------------------------------------------------

    def state(self, name: str) -> NodeState | None:
        """The node's current state, or None when the node is not in the cache."""
        return self.states([name])[name]

    def states(self, names: Iterable[str]) -> dict[str, NodeState | None]:
        now = self._clock()
        with self._lock:
            self._expire_assumed()
            return {name: self._state_locked(name, now) for name in names}

    def all_states(self) -> list[NodeState]:
        now = self._clock()
        with self._lock:
            self._expire_assumed()
            found = [self._state_locked(name, now) for name in list(self._nodes)]
        return [s for s in found if s is not None]

    def state_of_object(self, obj: Json) -> NodeState:
        """The state of a node object sent in a request: the cached one if it is the same revision."""
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        now = self._clock()
        with self._lock:
            cached = self._state_locked(name, now) if name in self._nodes else None
            if cached is not None and cached.resource_version == str(
                meta.get("resourceVersion") or ""
            ):
                return cached
            return self._compute(name, obj, now)

    def _state_locked(self, name: str, now: datetime) -> NodeState | None:
        state = self._states.get(name)
        if state is not None and (state.expires is None or now < state.expires):
            return state
        obj = self._nodes.get(name)
        if obj is None:
            return None
        state = self._compute(name, obj, now)
        self._states[name] = state
        return state

    def _compute(self, name: str, obj: Json, now: datetime) -> NodeState:
        read = nodes.read_node(obj, self._catalog, now, self._timeout)
        pods = [self._pods[key] for key in self._by_node.get(name, ())]
        pods.extend(pod for pod, _ in self._assumed.values() if _node_of(pod) == name)
        usage = ledger.node_usage(pods, name, self._catalog)
        self._counter += 1
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        return NodeState(name, read, usage, self._counter, version, self._deadline(obj, now))

    def _deadline(self, obj: Json, now: datetime) -> datetime | None:
        """When the earliest handshake that is fresh now turns stale (None: never by itself)."""
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        deadlines = []
        for model in self._catalog:
            key = protocol.node_handshake_key(model.common_word)
            raw = annotations.get(key)
            if raw is None or protocol.node_register_key(model.common_word) not in annotations:
                continue
            try:
                handshake = coordination.decode_handshake(key, raw)
            except errors.ProtocolError:
                continue
            deadline = handshake.time + self._timeout
            if deadline > now:
                deadlines.append(deadline)
        return min(deadlines) if deadlines else None

    def _expire_assumed(self) -> None:
        now = time.monotonic()
        for key, (pod, deadline) in list(self._assumed.items()):
            if deadline < now:
                del self._assumed[key]
                self._states.pop(_node_of(pod), None)
