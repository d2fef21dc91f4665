"""Which pod an Allocate is for: kubelet does not say, so the plugin works it out, or refuses.

Kubelet's Allocate carries device ids only. The scheduler's decision is on the pod, so the
plugin has to identify the pod kubelet is admitting, and a wrong guess gives one pod
another's chips (HAMi #15, #781, #3076, #3096). The rule, in order:

1. **The lock owner.** When ``hami.io/mutex.lock`` names a pod (HAMi's and vnpu's
   schedulers write ``<time>,<namespace>,<pod>``) that is waiting here and whose next
   container needs as many devices as kubelet asks for, it is that pod.
2. **Steered match.** Otherwise, among the pods bound to this node in bind-phase
   ``allocating`` with containers left to serve (a bare Volcano lock names nobody): those
   whose next container needs that many devices *on the chips of kubelet's ids*.
   ``GetPreferredAllocation`` steered kubelet to those chips, so this is a strong match.
3. **Count match.** Failing that, and only when no lock owner is waiting, a pod whose
   next container needs that many devices.

Among several matches the first in kubelet's admission order wins (``admission_order``):
a pod already partly served (kubelet admits one pod at a time, container by container),
then binding order (the order pods reach kubelet), then creation time (how kubelet sorts
pods that reach it together). HAMi takes the first pod in API list order. Creation order
alone would be wrong for pods bound apart, which kubelet admits in the order they were
bound; so binding order comes first and creation only breaks ties.

A pod whose annotations cannot be read is only named when it is certain (the lock owner,
or the only pod waiting); then Allocate fails that pod with the annotation's key. When
nothing matches, the finder reads the API again until ``wait`` seconds have passed (the
Binding may not be visible yet), then raises ``errors.PodNotIdentified`` with what it saw.
Without an owner lock two waiting pods with the same device count are told apart only by
this order: a node shared by schedulers that do not lock can still be served wrongly.
``allocations`` calls ``find`` for Allocate and ``guess`` for GetPreferredAllocation.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from vnpu_core import coordination, protocol
from vnpu_core import errors as core_errors
from vnpu_device_plugin import cluster, devices, errors, metrics, podplan
from vnpu_device_plugin.npu import backend
from vnpu_service import kubeapi

log = structlog.get_logger(__name__)
Json = dict[str, Any]


def _who(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


@dataclass(frozen=True)
class Found:
    """The pod an Allocate is for; ``broken`` when its annotations cannot be served."""

    pod: Json
    plan: podplan.PodPlan | None
    broken: errors.BadAnnotation | None = None
    how: str = ""  # lock-owner, steered, count, only-pod

    @property
    def who(self) -> str:
        return _who(self.pod)


@dataclass(frozen=True)
class _Candidate:
    pod: Json
    plan: podplan.PodPlan | None
    broken: errors.BadAnnotation | None

    @property
    def who(self) -> str:
        return _who(self.pod)

    @property
    def order(self) -> tuple[bool, int, int, str, str, str]:
        """Kubelet's admission order, as well as the pod shows it (see ``admission_order``)."""
        return admission_order(self.pod, self.plan is not None and self.plan.started)


_LAST = 2**63


def admission_order(pod: Mapping[str, Any], started: bool) -> tuple[bool, int, int, str, str, str]:
    """The order kubelet admits waiting pods in, as far as the API can tell.

    A pod some of whose containers were served already comes first: kubelet admits one
    pod at a time, container by container. Then the order pods reached kubelet, which is
    the order they were bound (``hami.io/bind-time``, then the Binding's resourceVersion:
    a waiting pod is not written after its Binding); kubelet sorts only pods that reach
    it together by creation time, which comes next, then the name.
    """
    meta = pod.get("metadata") or {}
    notes: Mapping[str, str] = meta.get("annotations") or {}
    bound = notes.get(protocol.BIND_TIME_KEY, "")
    version = str(meta.get("resourceVersion", ""))
    return (
        not started,
        int(bound) if bound.isdigit() else _LAST,
        int(version) if version.isdigit() else _LAST,
        str(meta.get("creationTimestamp", "")),
        str(meta.get("namespace", "")),
        str(meta.get("name", "")),
    )


def _waiting_here(pod: Mapping[str, Any], node: str, word: str) -> bool:
    """Bound to ``node``, Pending, not being deleted, in bind-phase allocating, devices left."""
    meta = pod.get("metadata") or {}
    notes: Mapping[str, str] = meta.get("annotations") or {}
    return (
        (pod.get("spec") or {}).get("nodeName") == node
        and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
        and not meta.get("deletionTimestamp")
        and notes.get(protocol.BIND_PHASE_KEY) == protocol.BindPhase.ALLOCATING.value
        and notes.get(protocol.VGPU_NODE_KEY, node) == node
        and podplan.has_pending(pod, word)
    )


def _fits(plan: podplan.PodPlan | None, chips: Sequence[Sequence[backend.ChipInfo]]) -> bool:
    """The plan's next containers need as many devices as kubelet asks for, container by container."""
    if plan is None or len(plan.pending) < len(chips):
        return False
    return all(len(c.devices) == len(ids) for c, ids in zip(plan.pending, chips, strict=False))


def _on_chips(plan: podplan.PodPlan | None, chips: Sequence[Sequence[backend.ChipInfo]]) -> bool:
    """Kubelet's ids are on exactly the chips of the plan's next containers."""
    if plan is None:
        return False
    return all(
        c.chip_uuids == tuple(sorted(chip.uuid for chip in ids))
        for c, ids in zip(plan.pending, chips, strict=False)
    )


class Finder:
    """Identifies pods for ``inventory``'s node through ``api``."""

    def __init__(
        self,
        api: cluster.Cluster,
        inventory: devices.Inventory,
        stats: metrics.Metrics,
        *,
        attempts: int,
        wait: float,
    ) -> None:
        self._api = api
        self._inventory = inventory
        self._stats = stats
        self._attempts = attempts
        self._wait = wait

    def _read(self, call: Any) -> Any:
        return cluster.retrying(call, self._attempts, on_retry=self._stats.retried)

    def _candidate(self, pod: Json) -> _Candidate:
        try:
            return _Candidate(pod, podplan.read(pod, self._inventory), None)
        except errors.BadAnnotation as exc:
            return _Candidate(pod, None, exc)

    def _owner(self) -> _Candidate | None:
        """The pod the node lock names, when it is waiting here (one GET of the node and the pod)."""
        node = self._inventory.node
        obj: Json = self._read(lambda: self._api.get_node(node))
        raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(protocol.NODE_LOCK_KEY)
        if raw is None:
            return None
        try:
            lock = coordination.decode_lock(raw)
        except core_errors.ProtocolError as exc:
            log.warning("node_lock_unreadable", node=node, value=raw, error=exc.problem)
            return None
        if lock.namespace is None or lock.name is None:
            return None
        namespace, name = lock.namespace, lock.name
        try:
            pod: Json = self._read(lambda: self._api.get_pod(namespace, name))
        except kubeapi.NotFound:
            return None
        if not _waiting_here(pod, node, self._inventory.common_word):
            return None
        return self._candidate(pod)

    def _waiting(self) -> list[_Candidate]:
        """Every pod waiting here, in admission order (one LIST of the node's pods)."""
        node = self._inventory.node
        word = self._inventory.common_word
        pods: list[Json] = self._read(lambda: self._api.list_pods(node))
        waiting = [self._candidate(p) for p in pods if _waiting_here(p, node, word)]
        waiting.sort(key=lambda c: c.order)
        return waiting

    @staticmethod
    def _by_owner(
        owner: _Candidate | None, chips: Sequence[Sequence[backend.ChipInfo]]
    ) -> Found | None:
        if owner is None:
            return None
        if owner.broken is not None:
            return Found(owner.pod, None, owner.broken, "lock-owner")
        if _fits(owner.plan, chips):
            return Found(owner.pod, owner.plan, None, "lock-owner")
        return None

    def _decide(
        self,
        owner: _Candidate | None,
        waiting: list[_Candidate],
        chips: Sequence[Sequence[backend.ChipInfo]],
    ) -> Found | None:
        steered = [c for c in waiting if _fits(c.plan, chips) and _on_chips(c.plan, chips)]
        if steered:
            return Found(steered[0].pod, steered[0].plan, None, "steered")
        if owner is not None:
            return None  # the lock names a pod still waiting: do not hand its turn to another
        counted = [c for c in waiting if _fits(c.plan, chips)]
        if counted:
            return Found(counted[0].pod, counted[0].plan, None, "count")
        if len(waiting) == 1 and waiting[0].broken is not None:
            return Found(waiting[0].pod, None, waiting[0].broken, "only-pod")
        return None

    def find(self, chips: Sequence[Sequence[backend.ChipInfo]]) -> Found:
        """The pod kubelet's Allocate (devices on ``chips``, per container) is for."""
        deadline = time.monotonic() + self._wait
        pause = 0.05
        while True:
            owner = self._owner()
            found = self._by_owner(owner, chips)
            if found is not None:
                return found
            waiting = self._waiting()
            found = self._decide(owner, waiting, chips)
            if found is not None:
                if found.how == "count":
                    log.warning(
                        "allocate_not_on_scheduled_chips",
                        pod=found.who,
                        kubelet_chips=[[c.phy_id for c in ids] for ids in chips],
                    )
                return found
            if time.monotonic() >= deadline:
                raise errors.PodNotIdentified(
                    self._inventory.node,
                    _why(owner, waiting, chips, self._wait),
                    tuple(c.who for c in waiting),
                )
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 0.5)

    def guess(self, count: int) -> podplan.PodPlan | None:
        """For GetPreferredAllocation (a hint): the plan of the pod whose next container needs
        ``count`` devices (the lock owner first, else the oldest), or None. Never waits."""
        owner = self._owner()
        if owner is not None and owner.plan is not None and _next_needs(owner.plan, count):
            return owner.plan
        for candidate in self._waiting():
            if candidate.plan is not None and _next_needs(candidate.plan, count):
                return candidate.plan
        return None


def _next_needs(plan: podplan.PodPlan, count: int) -> bool:
    return bool(plan.pending) and len(plan.pending[0].devices) == count


def _why(
    owner: _Candidate | None,
    waiting: list[_Candidate],
    chips: Sequence[Sequence[backend.ChipInfo]],
    wait: float,
) -> str:
    asked = " + ".join(str(len(ids)) for ids in chips)
    if owner is not None and owner.plan is not None:
        needs = " + ".join(str(len(c.devices)) for c in owner.plan.pending[: len(chips)])
        return (
            f"the node lock names pod {owner.who}, whose next container needs {needs} device(s), "
            f"but kubelet asks for {asked} (waited {wait:.1f} s)"
        )
    if not waiting:
        return (
            f"no pod bound to this node waits for devices (bind-phase allocating) after {wait:.1f} s; "
            "was the pod scheduled by an NPU-aware scheduler?"
        )
    shown = ", ".join(
        f"{c.who} needs {len(c.plan.pending[0].devices)}" if c.plan else f"{c.who} unreadable"
        for c in waiting[:5]
    )
    return (
        f"kubelet asks for {asked} device(s); no waiting pod matches ({shown}) after {wait:.1f} s"
    )
