"""The driver's picture of the cluster: every node, and every pod counted on one (bound or assumed).

The informers' handlers in ``scheduler`` write to it (:meth:`Cache.set_node`,
:meth:`Cache.set_pod`, ...); the scheduling cycle reads it while holding :attr:`Cache.lock`
and marks its decision with :meth:`Cache.assume`, so the next cycle counts the pod on its node
before the Binding is written. A bind that fails calls :meth:`Cache.forget`; the watch event
that shows the pod bound replaces the assumed entry (:meth:`Cache.set_pod`), as in
kube-scheduler's cache. Pods bound to a node the driver has not seen are kept on a placeholder
:class:`~vnpu_sandbox.scheduling.nodeinfo.NodeInfo` until the Node arrives.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from vnpu_sandbox.scheduling import nodeinfo, podrequests

Json = dict[str, Any]


@dataclass(frozen=True)
class Placement:
    node: str
    assumed: bool
    generation: object = None


class Cache:
    """Nodes by name and pod placements by UID; every method takes :attr:`lock` itself."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._nodes: dict[str, nodeinfo.NodeInfo] = {}
        self._placed: dict[str, Placement] = {}

    # --- nodes ----------------------------------------------------------------------------

    def set_node(self, node: Json) -> bool:
        """Store a Node revision; True when it is new or changed in a way that may help a pod."""
        facts = nodeinfo.parse_node(node)
        with self.lock:
            info = self._nodes.setdefault(facts.name, nodeinfo.NodeInfo(facts.name))
            before = info.facts
            info.facts = facts
            return before is None or before.relevant() != facts.relevant()

    def delete_node(self, name: str) -> None:
        with self.lock:
            info = self._nodes.get(name)
            if info is None:
                return
            if info.pods:
                info.facts = None
            else:
                del self._nodes[name]

    def replace_nodes(self, nodes: Iterable[Json]) -> bool:
        """A fresh list of every Node: store them, forget the others; True if anything changed."""
        changed = False
        with self.lock:
            seen = set()
            for node in nodes:
                changed = self.set_node(node) or changed
                seen.add(str(node["metadata"]["name"]))
            for name in [n for n, info in self._nodes.items() if info.facts and n not in seen]:
                self.delete_node(name)
                changed = True
        return changed

    def nodes(self) -> list[nodeinfo.NodeInfo]:
        """The nodes whose Node object is known, in the order they were first seen."""
        with self.lock:
            return [info for info in self._nodes.values() if info.facts is not None]

    def node(self, name: str) -> nodeinfo.NodeInfo | None:
        with self.lock:
            return self._nodes.get(name)

    # --- pods -----------------------------------------------------------------------------

    def _place(self, uid: str, placement: Placement, demand: podrequests.Demand) -> None:
        previous = self._placed.get(uid)
        if previous is not None and previous.node != placement.node:
            self._unplace(uid)
        self._nodes.setdefault(placement.node, nodeinfo.NodeInfo(placement.node)).add(uid, demand)
        self._placed[uid] = placement

    def _unplace(self, uid: str) -> Placement | None:
        placement = self._placed.pop(uid, None)
        if placement is None:
            return None
        info = self._nodes.get(placement.node)
        if info is not None:
            info.remove(uid)
            if info.facts is None and not info.pods:
                del self._nodes[placement.node]
        return placement

    def needs_demand(self, uid: str, node: str, generation: object) -> bool:
        """False when the bound pod ``uid`` is already counted on ``node`` for this generation."""
        with self.lock:
            placement = self._placed.get(uid)
            return not (
                placement is not None
                and not placement.assumed
                and placement.node == node
                and placement.generation == generation
            )

    def set_pod(
        self, uid: str, node: str, demand: podrequests.Demand, generation: object = None
    ) -> None:
        """Count a bound pod on ``node``; an assumed entry for it is replaced."""
        with self.lock:
            self._place(uid, Placement(node, False, generation), demand)

    def delete_pod(self, uid: str) -> bool:
        """Stop counting ``uid`` (deleted or finished); True if it was counted."""
        with self.lock:
            return self._unplace(uid) is not None

    def assume(self, uid: str, node: str, demand: podrequests.Demand) -> None:
        """Count a pod on the node the cycle chose, until the bind's outcome is known."""
        with self.lock:
            self._place(uid, Placement(node, True), demand)

    def forget(self, uid: str) -> None:
        """Drop an assumed pod whose bind failed (a pod seen bound meanwhile stays)."""
        with self.lock:
            placement = self._placed.get(uid)
            if placement is not None and placement.assumed:
                self._unplace(uid)

    def is_assumed(self, uid: str) -> bool:
        """True while the pod is counted on the node a cycle chose and no watch event showed it bound."""
        with self.lock:
            placement = self._placed.get(uid)
            return placement is not None and placement.assumed

    def is_bound(self, uid: str) -> bool:
        """True once a watch event showed the pod with a node (not merely assumed)."""
        with self.lock:
            placement = self._placed.get(uid)
            return placement is not None and not placement.assumed

    def placed(self) -> dict[str, Placement]:
        with self.lock:
            return dict(self._placed)
