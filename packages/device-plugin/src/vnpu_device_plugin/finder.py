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
nothing matches and some pod bound here could still become the one (Pending, not served
yet, a container of its spec asking for as many devices of this resource as kubelet does:
its decision may not be visible yet), the finder reads the API again until ``wait``
seconds have passed; when no pod could, it answers at once. Either way it raises
``errors.PodNotIdentified`` with what it saw. The caller's lock is held for each look and
for serving what it found, never while waiting, so an Allocate that waits does not hold
up the others. Without an owner lock two waiting pods with the same device count are told
apart only by this order: a node shared by schedulers that do not lock can still be served
wrongly. ``allocations`` calls ``find`` for Allocate and ``guess`` for
GetPreferredAllocation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from vnpu_core import coordination, protocol
from vnpu_core import errors as core_errors
from vnpu_device_plugin import cluster, devices, errors, metrics, podplan
from vnpu_device_plugin.npu import backend
from vnpu_service import kubeapi

log = structlog.get_logger(__name__)
Json = dict[str, Any]
T = TypeVar("T")
Unservable = errors.BadAnnotation | errors.InvalidName


def _who(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


@dataclass(frozen=True)
class Found:
    """The pod an Allocate is for; ``broken`` when its annotations cannot be served."""

    pod: Json
    plan: podplan.PodPlan | None
    broken: Unservable | None = None
    how: str = ""  # lock-owner, steered, count, only-pod

    @property
    def who(self) -> str:
        return _who(self.pod)


@dataclass(frozen=True)
class _Candidate:
    pod: Json
    plan: podplan.PodPlan | None
    broken: Unservable | None

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


def _asks_for(pod: Mapping[str, Any], resource: str, count: int) -> bool:
    """Some container of the pod's spec (init or not) asks for ``count`` of ``resource``."""
    spec = pod.get("spec") or {}
    for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        resources = container.get("resources") or {}
        for part in ("limits", "requests"):
            if str((resources.get(part) or {}).get(resource, "")) == str(count):
                return True
    return False


def _may_become(pod: Mapping[str, Any], node: str, resource: str, count: int) -> bool:
    """The pod could still be the one an Allocate for ``count`` devices is for, once its
    decision shows: bound here, Pending, not being deleted, not served or failed yet, and
    a container asking for that many devices."""
    meta = pod.get("metadata") or {}
    phase = (meta.get("annotations") or {}).get(protocol.BIND_PHASE_KEY)
    return (
        (pod.get("spec") or {}).get("nodeName") == node
        and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
        and not meta.get("deletionTimestamp")
        and phase not in (protocol.BindPhase.SUCCESS.value, protocol.BindPhase.FAILED.value)
        and _asks_for(pod, resource, count)
    )


@dataclass(frozen=True)
class _Look:
    """One look at the API: what was found, or what was seen instead."""

    found: Found | None
    owner: _Candidate | None
    waiting: list[_Candidate]
    prospects: int  # pods bound here that may still turn out to be the one


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
        except (errors.BadAnnotation, errors.InvalidName) as exc:
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

    def _listed(self) -> list[Json]:
        node = self._inventory.node
        pods: list[Json] = self._read(lambda: self._api.list_pods(node))
        return pods

    def _waiting(self, pods: list[Json] | None = None) -> list[_Candidate]:
        """Every pod waiting here, in admission order (one LIST of the node's pods)."""
        node = self._inventory.node
        word = self._inventory.common_word
        listed = self._listed() if pods is None else pods
        waiting = [self._candidate(p) for p in listed if _waiting_here(p, node, word)]
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

    def _look(self, chips: Sequence[Sequence[backend.ChipInfo]]) -> _Look:
        owner = self._owner()
        found = self._by_owner(owner, chips)
        if found is not None:
            return _Look(found, owner, [], 0)
        pods = self._listed()
        waiting = self._waiting(pods)
        found = self._decide(owner, waiting, chips)
        if found is not None:
            if found.how == "count":
                log.warning(
                    "allocate_not_on_scheduled_chips",
                    pod=found.who,
                    kubelet_chips=[[c.phy_id for c in ids] for ids in chips],
                )
            return _Look(found, owner, waiting, 0)
        node, resource = self._inventory.node, self._inventory.resource_name
        count = len(chips[0]) if chips else 0
        prospects = sum(1 for p in pods if _may_become(p, node, resource, count))
        return _Look(None, owner, waiting, prospects)

    def find(
        self,
        chips: Sequence[Sequence[backend.ChipInfo]],
        lock: AbstractContextManager[Any],
        serve: Callable[[Found], T],
    ) -> T:
        """``serve`` the pod kubelet's Allocate (devices on ``chips``, per container) is for.

        Each look at the API and ``serve`` run under ``lock``; the pauses between looks do
        not. Raises ``errors.PodNotIdentified`` after ``wait`` seconds, or at once when no
        pod bound here could be the one.
        """
        start = time.monotonic()
        deadline = start + self._wait
        pause = 0.05
        while True:
            with lock:
                look = self._look(chips)
                if look.found is not None:
                    return serve(look.found)
            now = time.monotonic()
            if not look.prospects or now >= deadline:
                raise errors.PodNotIdentified(
                    self._inventory.node,
                    _why(look, chips, now - start, self._inventory.resource_name),
                    tuple(c.who for c in look.waiting),
                )
            time.sleep(min(pause, max(0.0, deadline - now)))
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
    look: _Look,
    chips: Sequence[Sequence[backend.ChipInfo]],
    waited: float,
    resource: str,
) -> str:
    owner, waiting = look.owner, look.waiting
    asked = " + ".join(str(len(ids)) for ids in chips)
    if look.prospects:
        after = f"after {waited:.1f} s"
    else:
        after = f"answered at once: no pod bound here asks for {asked} {resource} in its spec"
    if owner is not None and owner.plan is not None:
        needs = " + ".join(str(len(c.devices)) for c in owner.plan.pending[: len(chips)])
        return (
            f"the node lock names pod {owner.who}, whose next container needs {needs} device(s), "
            f"but kubelet asks for {asked} ({after})"
        )
    if not waiting:
        return (
            f"no pod bound to this node waits for devices (bind-phase allocating) {after}; "
            "was the pod scheduled by an NPU-aware scheduler?"
        )
    shown = ", ".join(
        f"{c.who} needs {len(c.plan.pending[0].devices)}" if c.plan else f"{c.who} unreadable"
        for c in waiting[:5]
    )
    return f"kubelet asks for {asked} device(s); no waiting pod matches ({shown}) {after}"
