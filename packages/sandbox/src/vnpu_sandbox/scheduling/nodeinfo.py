"""One node as the scheduling cycle sees it: the Node's scheduling fields and the pods counted on it.

``cache`` keeps a :class:`NodeInfo` per node and adds or removes the :class:`Demand
<vnpu_sandbox.scheduling.podrequests.Demand>` of every pod bound or assumed there, so the
sums (``requested``, ``nonzero_requested``, ``pod_count``, ``used_ports``) are kept up to date
incrementally and a scheduling cycle never walks the pods. ``predicates`` and ``priorities``
read them. The Node object itself is parsed once per revision by :func:`parse_node`.

A Node whose ``Ready`` condition is not ``True`` gets the taint the node lifecycle controller
would add (``node.kubernetes.io/not-ready``, or ``node.kubernetes.io/unreachable`` when the
status is ``Unknown``) with effect ``NoSchedule``, unless the Node already carries it; the
sandbox has no such controller, so the driver reads the condition itself.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from vnpu_sandbox.scheduling import errors, logs, podrequests, quantities

log = logging.getLogger(__name__)

Json = dict[str, Any]

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class Allocatable:
    milli_cpu: int = 0
    memory: int = 0
    ephemeral_storage: int = 0
    pods: int = 0
    scalars: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeFacts:
    """The scheduling fields of one Node revision."""

    name: str
    node: Json
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    ready: str
    allocatable: Allocatable

    def relevant(self) -> tuple[object, ...]:
        """What, when it changes, may make a pending pod fit (kube-scheduler's node-update events)."""
        metadata = self.node.get("metadata") or {}
        return (
            self.labels,
            self.taints,
            self.unschedulable,
            self.ready,
            self.allocatable,
            metadata.get("annotations") or {},
        )


def _quantity(name: str, value: object, node: str) -> int:
    try:
        return quantities.milli(value) if name == podrequests.CPU else quantities.whole(value)
    except ValueError:
        log.warning(
            "node_quantity_unreadable",
            extra=logs.fields(node=node, resource=name, value=str(value), counted_as=0),
        )
        return 0


def _allocatable(values: object, node: str) -> Allocatable:
    if not isinstance(values, dict):
        return Allocatable()
    scalars = {
        str(name): _quantity(str(name), value, node)
        for name, value in values.items()
        if podrequests.is_scalar(str(name))
    }
    return Allocatable(
        milli_cpu=_quantity(podrequests.CPU, values.get(podrequests.CPU, 0), node),
        memory=_quantity(podrequests.MEMORY, values.get(podrequests.MEMORY, 0), node),
        ephemeral_storage=_quantity(
            podrequests.EPHEMERAL_STORAGE, values.get(podrequests.EPHEMERAL_STORAGE, 0), node
        ),
        pods=_quantity(podrequests.PODS, values.get(podrequests.PODS, 0), node),
        scalars=scalars,
    )


def _ready(status: Json) -> str:
    for condition in status.get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            return str(condition.get("status") or "Unknown")
    return "False"


def parse_node(node: Json) -> NodeFacts:
    """The facts of ``node``; unreadable fields read as empty, a nameless node is ``errors.ApiError``."""
    metadata = node.get("metadata") or {}
    name = str(metadata.get("name") or "")
    if not name:
        raise errors.ApiError("decode", "node", 200, "a node without metadata.name")
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    taints = tuple(
        Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
        for t in spec.get("taints") or []
        if isinstance(t, dict)
    )
    ready = _ready(status)
    if ready != "True":
        key = UNREACHABLE if ready == "Unknown" else NOT_READY
        if not any(t.key == key and t.effect == "NoSchedule" for t in taints):
            taints = (*taints, Taint(key, "", "NoSchedule"))
    labels = metadata.get("labels") or {}
    return NodeFacts(
        name=name,
        node=node,
        labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {},
        taints=taints,
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
        allocatable=_allocatable(status.get("allocatable"), name),
    )


class NodeInfo:
    """A node's facts (None until its Node is seen) and the running sums of its pods' demands."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.facts: NodeFacts | None = None
        self.pods: dict[str, podrequests.Demand] = {}
        self.milli_cpu = 0
        self.memory = 0
        self.ephemeral_storage = 0
        self.scalars: Counter[str] = Counter()
        self.nonzero_milli_cpu = 0
        self.nonzero_memory = 0
        self.used_ports: Counter[podrequests.HostPort] = Counter()

    @property
    def pod_count(self) -> int:
        return len(self.pods)

    def _apply(self, demand: podrequests.Demand, sign: int) -> None:
        self.milli_cpu += sign * demand.milli_cpu
        self.memory += sign * demand.memory
        self.ephemeral_storage += sign * demand.ephemeral_storage
        self.nonzero_milli_cpu += sign * demand.nonzero_milli_cpu
        self.nonzero_memory += sign * demand.nonzero_memory
        for name, amount in demand.scalars.items():
            self.scalars[name] += sign * amount
        for port in demand.host_ports:
            self.used_ports[port] += sign
            if self.used_ports[port] <= 0:
                del self.used_ports[port]

    def add(self, uid: str, demand: podrequests.Demand) -> None:
        """Count ``demand`` for the pod ``uid`` (replacing what was counted for it before)."""
        self.remove(uid)
        self.pods[uid] = demand
        self._apply(demand, 1)

    def remove(self, uid: str) -> None:
        previous = self.pods.pop(uid, None)
        if previous is not None:
            self._apply(previous, -1)
