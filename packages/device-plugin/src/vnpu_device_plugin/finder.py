"""Which pod an Allocate is for: kubelet does not say, so the plugin works it out, or refuses.

Kubelet's Allocate and GetPreferredAllocation carry device ids only. The scheduler's decision
is on the pod, so the plugin has to identify the pod kubelet is admitting, and a wrong guess
gives one pod another's chips (HAMi #15, #781, #3076, #3096), or gives a pod that has no
decision at all the vNPU of one that has. So the plugin never guesses between pods:

1. **The candidates.** Every pod the API shows bound to this node, Pending, with a container
   of its spec asking for as many devices of the resource as kubelet asks for (or a decision
   whose next container needs that many), that this plugin has neither served in full (the
   grant book names every container of its spec asking for the resource) nor refused. A
   pod without a decision is a candidate, and so is a pod being deleted: kubelet may be
   admitting either. Nothing a tenant can write on its own pod (annotations, bind-phase, the
   node lock) takes it out of the candidates.
2. **Kubelet's own records.** Kubelet admits one pod at a time and adds it to the pods its
   PodResources ``List`` reports before it admits it: a pod waiting its turn is not listed
   yet, a rejected one is not listed any more, an admitted one shows its devices. When
   PodResources answers, only the candidates it lists with a container asking for the
   resource that holds no device yet stay (a candidate whose only containers asking are
   run-to-completion init containers, which PodResources does not show, stays while listed).
3. **One candidate, with a decision that fits.** When exactly one candidate is left, it waits
   here (bind-phase ``allocating``, ``hami.io/vgpu-node`` this node, containers left) and its
   next container(s) need as many devices as kubelet asks for, the Allocate is its (``how``
   says ``kubelet`` when PodResources settled it, ``only-candidate`` when it did not answer).
   Nothing else breaks a tie: not the node lock (it may name another pod than the one
   kubelet admits, HAMi #3096), not the chips GetPreferredAllocation steered kubelet to,
   not an order.

Every other outcome is ``errors.PodNotIdentified`` (``FAILED_PRECONDITION``; kubelet then fails
the pod it admits with ``UnexpectedAdmissionError``) with its ``reason`` and the candidates:

* ``no_candidate``: no pod bound here could be the one, or kubelet lists none of those that
  could: answered at once;
* ``no_decision``: the one candidate has no decision for this node: the API is read again
  until ``wait`` seconds have passed (its decision may not show yet), then refused; another
  pod's decision is never handed to it. When the caller passes ``place`` (the plugin runs
  with ``--place-undecided``), the look that starts after ``wait`` hands the candidate to it
  instead (``placement`` decides what it gets, under the same hold of the lock) and serves
  the pod it returns like any decided pod; ``place`` raising refuses it;
* ``decision_mismatch``: the one candidate's next containers need other device counts than
  kubelet asks for: refused after ``wait``;
* ``ambiguous``: more than one candidate, and kubelet's records do not settle it
  (PodResources does not answer, or lists several): read again until ``wait`` (a refused
  pod's Failed status lands, a decision shows), then refused, naming them all.

The one candidate whose decision cannot be read is found with ``Found.broken``: Allocate fails
that pod with the annotation's key. A pod whose Allocate was answered with an error after it
was identified (``no_decision``, ``decision_mismatch``, a failed serve) is remembered as
refused, since kubelet fails it and never admits it again: so it stops being a candidate
before its Failed status reaches the API. Each look at the API and PodResources, and serving
what it found, run under the caller's lock; the pauses between looks do not, so an Allocate
that waits does not hold up the others. ``allocations`` calls ``find`` for Allocate and
``guess`` for GetPreferredAllocation.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from vnpu_core import protocol
from vnpu_device_plugin import cluster, devices, errors, grants, metrics, podplan, podresources
from vnpu_npu import backend

log = structlog.get_logger(__name__)
Json = dict[str, Any]
T = TypeVar("T")
Unservable = errors.BadAnnotation | errors.InvalidName
Chips = Sequence[Sequence[backend.ChipInfo]]
Place = Callable[[Json, Chips], Json]  # ``placement.Placer.place``: the pod with a decision


def _meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("metadata") or {}


def _who(pod: Mapping[str, Any]) -> str:
    return f"{_meta(pod).get('namespace')}/{_meta(pod).get('name')}"


@dataclass(frozen=True)
class Found:
    """The pod an Allocate is for; ``broken`` when its annotations cannot be served."""

    pod: Json
    plan: podplan.PodPlan | None
    broken: Unservable | None = None
    how: str = ""  # kubelet (PodResources settled it) or only-candidate

    @property
    def who(self) -> str:
        return _who(self.pod)


@dataclass(frozen=True)
class _Candidate:
    pod: Json
    plan: podplan.PodPlan | None  # its decision, when it waits here and can be read
    broken: Unservable | None

    @property
    def who(self) -> str:
        return _who(self.pod)

    @property
    def uid(self) -> str:
        return str(_meta(self.pod).get("uid", ""))

    @property
    def order(self) -> tuple[bool, int, int, str, str, str]:
        """Kubelet's admission order, as well as the pod shows it (see ``admission_order``)."""
        return admission_order(self.pod, self.plan is not None and self.plan.started)

    def shown(self) -> str:
        """The pod and what its decision says, for messages."""
        if self.broken is not None:
            return f"{self.who} (decision unreadable)"
        if self.plan is None:
            return f"{self.who} (no decision)"
        needs = "+".join(str(len(c.devices)) for c in self.plan.pending) or "0"
        return f"{self.who} (decision for {needs} device(s))"


_LAST = 2**63


def admission_order(pod: Mapping[str, Any], started: bool) -> tuple[bool, int, int, str, str, str]:
    """The order kubelet admits waiting pods in, as far as the API can tell.

    Only for the order candidates are shown in and the hint GetPreferredAllocation gives: it
    never decides which pod an Allocate is for. A pod some of whose containers were served
    comes first, then binding order (``hami.io/bind-time``, then the Binding's
    resourceVersion), creation time, and the name.
    """
    meta = _meta(pod)
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
    meta = _meta(pod)
    notes: Mapping[str, str] = meta.get("annotations") or {}
    return (
        (pod.get("spec") or {}).get("nodeName") == node
        and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
        and not meta.get("deletionTimestamp")
        and notes.get(protocol.BIND_PHASE_KEY) == protocol.BindPhase.ALLOCATING.value
        and notes.get(protocol.VGPU_NODE_KEY, node) == node
        and podplan.has_pending(pod, word)
    )


def _asking(pod: Mapping[str, Any], resource: str) -> list[tuple[str, int, bool]]:
    """(name, device count, shown by PodResources) of every container of the pod's spec that
    asks for ``resource``; PodResources shows regular and sidecar containers only."""
    spec = pod.get("spec") or {}
    found = []
    for kind in ("initContainers", "containers"):
        for container in spec.get(kind) or []:
            resources = container.get("resources") or {}
            asked = str((resources.get("limits") or {}).get(resource, "")) or str(
                (resources.get("requests") or {}).get(resource, "")
            )
            if asked.isdigit() and int(asked) > 0:
                shown = kind == "containers" or container.get("restartPolicy") == "Always"
                found.append((str(container.get("name", "")), int(asked), shown))
    return found


def _admitting(pod: Mapping[str, Any], listing: podresources.Listing, resource: str) -> bool:
    """Whether kubelet may be admitting the pod now, by its PodResources listing: listed, and
    some container asking for ``resource`` holds none of its devices yet."""
    namespace, name = str(_meta(pod).get("namespace")), str(_meta(pod).get("name"))
    if not listing.lists(namespace, name):
        return False
    listed = listing.containers.get((namespace, name))
    shown = [n for n, _count, visible in _asking(pod, resource) if visible]
    if not listed or not shown:
        return True  # listed, but what it holds cannot be told
    return any(not all(entry.get(n) for n in shown) for entry in listed)


def _fits(plan: podplan.PodPlan | None, chips: Chips) -> bool:
    """The plan's next containers need as many devices as kubelet asks for, container by container."""
    if plan is None or len(plan.pending) < len(chips):
        return False
    return all(len(c.devices) == len(ids) for c, ids in zip(plan.pending, chips, strict=False))


def _on_chips(plan: podplan.PodPlan, chips: Chips) -> bool:
    """Kubelet's ids are on exactly the chips of the plan's next containers."""
    return all(
        c.chip_uuids == tuple(sorted(chip.uuid for chip in ids))
        for c, ids in zip(plan.pending, chips, strict=False)
    )


def _next_needs(plan: podplan.PodPlan, count: int) -> bool:
    return bool(plan.pending) and len(plan.pending[0].devices) == count


@dataclass(frozen=True)
class _Look:
    """One look at the API and PodResources: what was found, or why nothing was."""

    found: Found | None
    seen: list[_Candidate]  # the API's candidates
    left: list[_Candidate]  # those kubelet's records did not rule out
    kubelet: bool  # PodResources answered
    reason: str  # errors.IDENTIFY_REASONS, when nothing was found


class Finder:
    """Identifies pods for ``inventory``'s node through ``api``, ``kubelet`` (PodResources)
    and ``book`` (the grant book: which pods this plugin served)."""

    def __init__(
        self,
        api: cluster.Cluster,
        inventory: devices.Inventory,
        stats: metrics.Metrics,
        *,
        kubelet: Callable[[], podresources.Listing | None],
        book: grants.Book,
        attempts: int,
        wait: float,
    ) -> None:
        self._api = api
        self._inventory = inventory
        self._stats = stats
        self._kubelet = kubelet
        self._book = book
        self._attempts = attempts
        self._wait = wait
        self._refused: set[str] = set()  # UIDs of pods answered with an error once identified

    def _listed(self) -> list[Json]:
        node = self._inventory.node
        pods: list[Json] = cluster.retrying(
            lambda: self._api.list_pods(node), self._attempts, on_retry=self._stats.retried
        )
        return pods

    def _candidate(self, pod: Json) -> _Candidate:
        if not _waiting_here(pod, self._inventory.node, self._inventory.common_word):
            return _Candidate(pod, None, None)
        try:
            return _Candidate(pod, podplan.read(pod, self._inventory), None)
        except (errors.BadAnnotation, errors.InvalidName) as exc:
            return _Candidate(pod, None, exc)

    def _served_in_full(self, pod: Json, served: Mapping[str, set[str]]) -> bool:
        """The grant book names every container of the pod's spec that asks for the resource."""
        given = served.get(str(_meta(pod).get("uid", "")))
        if not given:
            return False
        return all(n in given for n, _c, _s in _asking(pod, self._inventory.resource_name))

    def _candidates(
        self, count: int, fits: Callable[[_Candidate], bool]
    ) -> tuple[list[_Candidate], list[_Candidate], bool]:
        """The API's candidates for an Allocate of ``count`` devices (first container), and
        those kubelet's records leave; whether PodResources answered."""
        pods = self._listed()
        listing = self._kubelet()
        served: dict[str, set[str]] = {}
        for grant in self._book.records():
            served.setdefault(grant.pod_uid, set()).add(grant.container)
        self._refused &= {str(_meta(p).get("uid", "")) for p in pods}  # forget pods gone
        node, resource = self._inventory.node, self._inventory.resource_name
        seen = []
        for pod in pods:
            if (pod.get("spec") or {}).get("nodeName") != node:
                continue
            if (pod.get("status") or {}).get("phase", "Pending") not in ("Pending", ""):
                continue
            candidate = self._candidate(pod)
            asks = any(c == count for _n, c, _s in _asking(pod, resource)) or fits(candidate)
            if (
                asks
                and candidate.uid not in self._refused
                and not self._served_in_full(pod, served)
            ):
                seen.append(candidate)
        seen.sort(key=lambda c: c.order)
        if listing is None:
            return seen, list(seen), False
        return seen, [c for c in seen if _admitting(c.pod, listing, resource)], True

    def _look(self, chips: Chips) -> _Look:
        count = len(chips[0]) if chips else 0
        seen, left, kubelet = self._candidates(count, lambda c: _fits(c.plan, chips))
        if len(left) != 1:
            return _Look(None, seen, left, kubelet, "ambiguous" if left else "no_candidate")
        return self._settle(left[0], _Look(None, seen, left, kubelet, ""), chips)

    def _settle(self, one: _Candidate, look: _Look, chips: Chips) -> _Look:
        """``look`` with the one candidate left found, or the reason it is not (its decision)."""
        how = "kubelet" if look.kubelet else "only-candidate"
        if one.broken is not None:
            return dataclasses.replace(look, found=Found(one.pod, None, one.broken, how))
        if one.plan is None:
            return dataclasses.replace(look, reason="no_decision")
        if not _fits(one.plan, chips):
            return dataclasses.replace(look, reason="decision_mismatch")
        if not _on_chips(one.plan, chips):
            log.warning(
                "allocate_not_on_scheduled_chips",
                pod=one.who,
                kubelet_chips=[[c.phy_id for c in ids] for ids in chips],
            )
        return dataclasses.replace(look, found=Found(one.pod, one.plan, None, how))

    def _placed(self, look: _Look, chips: Chips, place: Place) -> _Look:
        """``look`` once ``place`` decided for its one candidate, which had no decision (or the
        candidate as ``place`` found it decided meanwhile); a refusal marks it refused."""
        one = look.left[0]
        try:
            pod = place(one.pod, chips)
        except BaseException:
            self._refused.add(one.uid)  # kubelet fails the pod: it will not be admitted again
            raise
        fresh = self._candidate(pod)
        return self._settle(fresh, dataclasses.replace(look, left=[fresh]), chips)

    def find(
        self,
        chips: Chips,
        lock: AbstractContextManager[Any],
        serve: Callable[[Found], T],
        place: Place | None = None,
    ) -> T:
        """``serve`` the pod kubelet's Allocate (devices on ``chips``, per container) is for.

        Each look and ``serve`` run under ``lock``; the pauses between looks do not. Raises
        ``errors.PodNotIdentified`` at once when no pod can be the one, else after ``wait``
        seconds without one candidate whose decision fits. With ``place``, a look that starts
        once ``wait`` seconds have passed and finds the one candidate still without a decision
        hands it to ``place`` under the same hold of ``lock`` and serves the pod it returns
        (``place`` raises when it cannot decide for it).
        """
        start = time.monotonic()
        deadline = start + self._wait
        pause = 0.05
        while True:
            with lock:
                expired = time.monotonic() >= deadline
                look = self._look(chips)
                placing = place is not None and look.reason == "no_decision"
                if placing and expired and place is not None:
                    look = self._placed(look, chips, place)
                if look.found is not None:
                    try:
                        return serve(look.found)
                    except BaseException:
                        self._refused.add(str(_meta(look.found.pod).get("uid", "")))
                        raise
            now = time.monotonic()
            # A pod to place is refused only after a look that started past the deadline
            # has had it placed (or found it decided), never by a look that ended past it.
            if look.reason == "no_candidate" or (expired if placing else now >= deadline):
                if look.reason in ("no_decision", "decision_mismatch"):
                    with lock:  # kubelet fails the pod: it will not be admitted again
                        self._refused.add(look.left[0].uid)
                raise errors.PodNotIdentified(
                    self._inventory.node,
                    _why(look, chips, now - start, self._inventory.resource_name),
                    tuple(c.who for c in (look.left or look.seen)),
                    reason=look.reason,
                )
            time.sleep(min(pause, max(0.0, deadline - now)))
            pause = min(pause * 2, 0.5)

    def guess(self, count: int) -> podplan.PodPlan | None:
        """For GetPreferredAllocation (a hint): the plan of the candidate whose next container
        needs ``count`` devices when kubelet's records leave one such candidate; when
        PodResources does not answer, the first in admission order. Never waits."""
        _seen, left, kubelet = self._candidates(
            count, lambda c: c.plan is not None and _next_needs(c.plan, count)
        )
        decided = [c.plan for c in left if c.plan is not None and _next_needs(c.plan, count)]
        if decided and (len(left) == 1 or not kubelet):
            return decided[0]
        return None


def _why(look: _Look, chips: Chips, waited: float, resource: str) -> str:
    asked = " + ".join(str(len(ids)) for ids in chips)
    after = f"after {waited:.1f} s"
    shown = ", ".join(c.shown() for c in (look.left or look.seen)[:5])
    if look.reason == "no_candidate":
        if not look.seen:
            return (
                f"no pod bound to this node asks for {asked} {resource} and waits for it "
                "(answered at once); was the pod scheduled by an NPU-aware scheduler?"
            )
        return (
            f"kubelet's PodResources lists none of the pods that could be the one ({shown}) "
            f"as being admitted (answered at once)"
        )
    if look.reason == "ambiguous":
        why = (
            "kubelet's PodResources lists them all as being admitted"
            if look.kubelet
            else "kubelet's PodResources does not answer, so nothing tells them apart"
        )
        return (
            f"kubelet asks for {asked} device(s) and {len(look.left)} pods bound to this node "
            f"could be the one ({shown}); {why}; refused rather than guessed, {after}"
        )
    one = look.left[0]
    source = "kubelet is admitting" if look.kubelet else "the only pod that can be the one is"
    if look.reason == "no_decision":
        return (
            f"{source} pod {one.who}, which has no decision for this node (bind-phase "
            f"allocating, {protocol.VGPU_NODE_KEY}) {after}; was it scheduled by an NPU-aware "
            "scheduler?"
        )
    assert one.plan is not None
    needs = " + ".join(str(len(c.devices)) for c in one.plan.pending[: len(chips)])
    return (
        f"{source} pod {one.who}, whose next container needs {needs} device(s), but kubelet "
        f"asks for {asked} ({after})"
    )
