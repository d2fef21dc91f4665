"""The node cache: every node's inventory and chip usage, recomputed only when something changed.

``informer`` feeds it nodes and pods from list+watch (in its threads); ``extender`` and
``binder`` read ``NodeState`` snapshots from the event loop; ``metrics`` reads all states on
a scrape. A node's state (``nodes.read_node`` plus the usage of the pods bound to it,
each counted as at least what the node's device plugin reports it granted:
``ledger.reconcile``, with the mismatches and chips given twice it finds) is computed on
first use and kept until the node, a pod bound to it or the catalog changes, or until a
device plugin's handshake could turn stale. Within that, the inventory and the grant
report are re-read only when the annotations and allocatable they come from change (not
for a lock or a status update), and each pod's usage is decoded once per revision. Only
pods that carry a ``-devices-allocated`` annotation are kept for their claims; of the
others, which bound pods are live (a pod its node granted chips to but whose annotations
were cleared is a mismatch, not a pod that is gone).

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

from vnpu_core import (
    catalog,
    coordination,
    errors,
    granted,
    holdings,
    inventory,
    ledger,
    nodes,
    protocol,
)

Json = dict[str, Any]
_Report = tuple[granted.Report, granted.Usage | None]
Disagreements = tuple[tuple[ledger.Mismatch, ...], tuple[tuple[str, str], ...]]
ASSUME_SECONDS = 120.0
MEMO_LIMIT = 512
Catalog = catalog.Catalog
_INVENTORY_PREFIX = "hami.io/node-"  # node-register-<CW> and node-handshake-<CW>
_INVENTORY_KEYS = frozenset({protocol.SOFT_MODE_NODE_KEY, nodes.SERVER_KIND_KEY})


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node as the allocator sees it: inventory (or why unavailable) and usage by chip UUID."""

    name: str
    read: nodes.NodeRead
    usage: ledger.Ledger
    version: int
    resource_version: str
    expires: datetime | None  # naive local time at which a fresh handshake turns stale
    locked: bool = False  # the node lock is held (a bind waits for its device plugin)
    report: granted.Report = "absent"  # its device plugin's grant report
    mismatches: tuple[ledger.Mismatch, ...] = ()  # pods whose annotations disagree with it
    clashes: tuple[tuple[str, str], ...] = ()  # chips given twice: (UUID, why)
    # what mismatched pods were granted beyond their annotations, by namespace (for quotas)
    excess: tuple[tuple[str, holdings.Amount], ...] = ()
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Holder:
    """A bound (or assumed) pod that holds chips: where it runs and what it holds, for quotas.

    ``pod`` is the object as the watch delivered it (never modify it).
    """

    key: str  # pod_key: the UID
    namespace: str
    name: str
    node: str
    held: holdings.Amount
    pod: Json

    @property
    def terminating(self) -> bool:
        return bool((self.pod.get("metadata") or {}).get("deletionTimestamp"))


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")


def holds_chips(pod: Mapping[str, Any]) -> bool:
    """A pod bound to a node that records devices, and has not finished."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if not any(key.endswith(ledger.ALLOCATED_SUFFIX) for key in annotations):
        return False
    return ledger.holds_devices(pod)


def _inventory_key(obj: Mapping[str, Any]) -> tuple[Any, ...]:
    """What ``nodes.read_node`` reads from a node object (not the lock, labels or conditions)."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    relevant = tuple(
        sorted(
            (k, v)
            for k, v in annotations.items()
            if k.startswith(_INVENTORY_PREFIX) or k in _INVENTORY_KEYS
        )
    )
    allocatable = ((obj.get("status") or {}).get("allocatable")) or {}
    return relevant, tuple(sorted(allocatable.items()))


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
        self._live: dict[str, tuple[str, str]] = {}  # bound, unfinished: key -> (node, ns/name)
        self._amounts: dict[str, tuple[str, holdings.Amount]] = {}  # key -> (namespace, held)
        self._by_namespace: dict[str, holdings.Amount] = {}  # the sum of _amounts
        self._assumed: dict[str, tuple[Json, float]] = {}
        self._states: dict[str, NodeState] = {}
        self._reads: dict[str, tuple[tuple[Any, ...], nodes.NodeRead, datetime | None]] = {}
        self._decoded: dict[str, tuple[str, dict[str, inventory.ChipUsage] | ledger.Problem]] = {}
        self._granted: dict[str, tuple[tuple[str | None, ...], inventory.Node | None, _Report]] = {}
        self._counter = 0
        self.on_node_change: Callable[[str], None] = lambda _: None
        # (node, mismatches, clashes) when what a node's state finds changed; under the lock
        self.on_disagreement: Callable[[str, Disagreements], None] = lambda *_: None
        self._disagreements: dict[str, Disagreements] = {}
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
            self._reads.clear()
            self._decoded.clear()
            self._granted.clear()
            pods = list(self._pods.items()) + [(k, p) for k, (p, _) in self._assumed.items()]
            self._amounts.clear()
            self._by_namespace.clear()
            for key, pod in pods:
                self._count(key, pod)

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
        self.on_node_change(name)

    def remove_node(self, obj: Json) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        with self._lock:
            self._nodes.pop(name, None)
            self._states.pop(name, None)
            self._reads.pop(name, None)
            self._granted.pop(name, None)
        self.on_node_change(name)

    def bound_node(self, uid: str) -> str:
        """The node a chip-holding pod is bound to as far as the cache knows ('' if unknown)."""
        with self._lock:
            pod = self._pods.get(uid) or (self._assumed.get(uid) or ({}, 0.0))[0]
            return _node_of(pod) if pod else ""

    def node_object(self, name: str) -> Json | None:
        """The node as the watch last delivered it (never modify it)."""
        with self._lock:
            return self._nodes.get(name)

    def names(self) -> list[str]:
        with self._lock:
            return list(self._nodes)

    # --- pods --------------------------------------------------------------------------------

    def replace_pods(self, items: Iterable[Json]) -> None:
        with self._lock:
            self._pods.clear()
            self._by_node.clear()
            self._live.clear()
            self._amounts.clear()
            self._by_namespace.clear()
            for pod in items:
                self._put_pod(pod)
            self._decoded = {k: v for k, v in self._decoded.items() if k in self._pods}
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
                self._uncount(key)

    def assume(self, pod: Json) -> None:
        """A pod just bound by us (``spec.nodeName`` and annotations set on this copy)."""
        with self._lock:
            key = pod_key(pod)
            if key not in self._pods:
                self._assumed[key] = (pod, time.monotonic() + ASSUME_SECONDS)
                self._states.pop(_node_of(pod), None)
                self._count(key, pod)

    def _put_pod(self, pod: Json) -> None:
        key = pod_key(pod)
        node = _node_of(pod)
        if node and key in self._assumed:
            del self._assumed[key]  # the watch caught up with our bind
            self._states.pop(node, None)
            self._uncount(key)
        if ledger.holds_devices(pod):
            meta = pod.get("metadata") or {}
            self._live[key] = (node, f"{meta.get('namespace')}/{meta.get('name')}")
        if not holds_chips(pod):
            return
        self._pods[key] = pod
        self._by_node.setdefault(node, set()).add(key)
        self._states.pop(node, None)
        self._count(key, pod)

    def _count(self, key: str, pod: Json) -> None:
        """Add what the pod's annotations say it holds to its namespace's total."""
        namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
        try:
            held = holdings.of_bound_pod(pod, self._catalog)
        except errors.ProtocolError:
            held = holdings.ZERO  # counted from its node's grant report, if there is one
        self._amounts[key] = (namespace, held)
        self._by_namespace[namespace] = self._by_namespace.get(namespace, holdings.ZERO).plus(held)

    def _uncount(self, key: str) -> None:
        counted = self._amounts.pop(key, None)
        if counted is not None:
            namespace, held = counted
            left = self._by_namespace.get(namespace, holdings.ZERO).minus(held)
            if left:
                self._by_namespace[namespace] = left
            else:
                self._by_namespace.pop(namespace, None)

    def _drop_pod(self, key: str) -> None:
        self._decoded.pop(key, None)
        self._live.pop(key, None)
        self._uncount(key)
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
        read, deadline = self._read(name, obj, now)
        meta = obj.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        report, grants = self._grants(name, read.node, annotations)
        live = {}
        for key in grants or ():
            bound = self._live.get(key)
            if bound is not None and bound[0] == name:
                live[key] = bound[1]
        found = ledger.reconcile(self._claims(name), grants, live, read.node)
        self._counter += 1
        version = str(meta.get("resourceVersion") or "")
        excess = self._excess(read.node, grants or {}, found.mismatches)
        disagreements = (found.mismatches, found.clashes)
        if disagreements != self._disagreements.get(name, ((), ())):
            self._disagreements[name] = disagreements
            self.on_disagreement(name, disagreements)
        return NodeState(
            name,
            read,
            found.ledger,
            self._counter,
            version,
            deadline,
            locked=protocol.NODE_LOCK_KEY in annotations,
            report=report,
            mismatches=found.mismatches,
            clashes=found.clashes,
            excess=excess,
        )

    def _read(self, name: str, obj: Json, now: datetime) -> tuple[nodes.NodeRead, datetime | None]:
        """``nodes.read_node``, reused while the annotations and allocatable it reads are unchanged.

        Most node updates (the lock, kubelet status) leave the inventory as it was; decoding
        the registration again for each of them would dominate the scheduler's CPU.
        """
        key = _inventory_key(obj)
        known = self._reads.get(name)
        if known is not None and known[0] == key and (known[2] is None or now < known[2]):
            return known[1], known[2]
        read = nodes.read_node(obj, self._catalog, now, self._timeout)
        deadline = self._deadline(obj, now)
        self._reads[name] = (key, read, deadline)
        return read, deadline

    def _grants(
        self, name: str, node: inventory.Node | None, annotations: Mapping[str, str]
    ) -> _Report:
        """``granted.report``, decoded again only when the report or the inventory changed."""
        words = node.models() if node is not None else ()
        raws = tuple(annotations.get(granted.annotation_key(word)) for word in words)
        known = self._granted.get(name)
        if known is not None and known[0] == raws and known[1] is node:
            return known[2]
        result = granted.report(node, annotations)
        self._granted[name] = (raws, node, result)
        return result

    def _excess(
        self,
        node: inventory.Node | None,
        grants: granted.Usage,
        mismatches: tuple[ledger.Mismatch, ...],
    ) -> tuple[tuple[str, holdings.Amount], ...]:
        """By namespace, what pods were granted beyond what their annotations show."""
        if node is None:
            return ()
        found = []
        for mismatch in mismatches:
            given = holdings.ZERO
            for uuid, usage in grants.get(mismatch.uid, {}).items():
                chip = node.chip(uuid)
                if chip is not None:
                    given = given.plus(holdings.of_chip_usage(chip.model, usage))
            claimed = self._amounts.get(mismatch.uid, ("", holdings.ZERO))[1]
            extra = given.minus(claimed)
            if extra:
                found.append((mismatch.pod.partition("/")[0], extra))
        return tuple(found)

    def namespace_usage(self) -> dict[str, holdings.Amount]:
        """What every namespace's bound (and assumed) pods hold, in quota units.

        Each pod counts as its decision annotations say, plus what its node reports it was
        granted beyond that (a tenant clearing its own annotations frees no quota).
        """
        excess = self.namespace_excess()
        with self._lock:
            usage = dict(self._by_namespace)
        for namespace, extra in excess.items():
            usage[namespace] = usage.get(namespace, holdings.ZERO).plus(extra)
        return usage

    def namespace_excess(self) -> dict[str, holdings.Amount]:
        """By namespace, what pods were granted beyond what their annotations show."""
        found: dict[str, holdings.Amount] = {}
        for state in self.all_states():
            for namespace, extra in state.excess:
                found[namespace] = found.get(namespace, holdings.ZERO).plus(extra)
        return found

    def holders(self) -> list[Holder]:
        """Every chip-holding pod the cache counts (bound and assumed), with what it holds."""
        with self._lock:
            found = []
            for key, (namespace, held) in self._amounts.items():
                pod = self._pods.get(key) or (self._assumed.get(key) or ({}, 0.0))[0]
                if pod:
                    name = str((pod.get("metadata") or {}).get("name") or "")
                    found.append(Holder(key, namespace, name, _node_of(pod), held, pod))
            return found

    def usage_without(self, name: str, gone: frozenset[str]) -> ledger.Ledger | None:
        """The node's chip usage as if the pods in ``gone`` (pod keys) had left it, from their
        claims and its grant report alike; None when the node is unknown or unavailable."""
        now = self._clock()
        with self._lock:
            state = self._state_locked(name, now)
            if state is None or state.read.node is None:
                return None
            if not gone:
                return state.usage
            annotations = (self._nodes[name].get("metadata") or {}).get("annotations") or {}
            _, grants = self._grants(name, state.read.node, annotations)
            claims = {k: c for k, c in self._claims(name).items() if k not in gone}
            kept = None if grants is None else {k: g for k, g in grants.items() if k not in gone}
            live = {
                key: bound[1]
                for key in kept or ()
                if (bound := self._live.get(key)) is not None and bound[0] == name
            }
            return ledger.reconcile(claims, kept, live, state.read.node).ledger

    def _claims(self, name: str) -> dict[str, ledger.Claim]:
        """What the node's pods claim by their annotations, each decoded once per revision."""
        claims: dict[str, ledger.Claim] = {}
        pods = [(key, self._pods[key], True) for key in self._by_node.get(name, ())]
        pods.extend(
            (key, pod, False) for key, (pod, _) in self._assumed.items() if _node_of(pod) == name
        )
        for key, pod, stored in pods:
            if not ledger.holds_devices(pod, name):
                continue
            held = self._pod_usage(key, pod) if stored else ledger.read_pod(pod, self._catalog)
            meta = pod.get("metadata") or {}
            claims[key] = ledger.Claim(f"{meta.get('namespace')}/{meta.get('name')}", held)
        return claims

    def _pod_usage(self, key: str, pod: Json) -> dict[str, inventory.ChipUsage] | ledger.Problem:
        version = str((pod.get("metadata") or {}).get("resourceVersion") or "")
        known = self._decoded.get(key)
        if known is not None and known[0] == version:
            return known[1]
        held = ledger.read_pod(pod, self._catalog)
        self._decoded[key] = (version, held)
        return held

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
                self._uncount(key)
