"""The fair-share queue order: which pending pod of which team goes next, and why.

``order`` ranks pending pods: pods of teams below their nominal (lenders) come first; then
the lowest weighted dominant share counting the pod (dominant resource fairness: the team's
largest used/capacity over the units, divided by its weight, ``dominant_share``); ties go
to the higher priority, then the older pod, then the name. Every ``Ranked`` entry carries
its tier, the share and the team's standing against its nominal.

The teams, pods and cohort are ``vnpu_core.fairshare``'s. Called by the scheduler
(``vnpu_scheduler.shares`` for lenders first, ``reclaimer`` to pick the lenders to help) and
``benchmarks/bench_fairshare.py``; docs/fair-sharing.md describes the order.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from vnpu_core import fairshare


@dataclass(frozen=True, slots=True)
class Share:
    """A team's weighted dominant share: ``ratio`` (= ``used``/``capacity`` of ``unit``) / ``weight``."""

    value: float
    ratio: float
    unit: str  # the dominant unit; "" when the team holds nothing
    used: int
    capacity: int
    weight: float

    def describe(self) -> str:
        if not self.unit:
            return f"0 (holds nothing, weight {self.weight:g})"
        return (
            f"{self.value:.4f} ({self.unit} {self.used}/{self.capacity} = {self.ratio:.4f}, "
            f"weight {self.weight:g})"
        )


def dominant_share(
    used: fairshare.Vector, capacity: fairshare.Vector, weight: float = 1.0
) -> Share:
    """The largest ``used/capacity`` over the units, divided by ``weight``.

    A unit held but absent from the capacity counts as infinitely used. Ties between units
    go to the first in name order.
    """
    top, top_unit = 0.0, ""
    for unit, held in used.items():
        if held <= 0:
            continue
        cap = capacity.get(unit, 0)
        ratio = held / cap if cap > 0 else math.inf
        if ratio > top or (ratio == top and unit < top_unit):
            top, top_unit = ratio, unit
    if not top_unit:
        return Share(0.0, 0.0, "", 0, 0, weight)
    return Share(top / weight, top, top_unit, used[top_unit], capacity.get(top_unit, 0), weight)


class Tier(StrEnum):
    """Which group a pending pod is served in: teams below their nominal first."""

    NOMINAL = "nominal"  # its team is below its nominal on every unit the pod asks
    BORROWING = "borrowing"  # its team is at or above its nominal on some unit the pod asks


_TIER_RANK = {Tier.NOMINAL: 0, Tier.BORROWING: 1}


@dataclass(frozen=True, slots=True)
class Ranked:
    """One pending pod's place in the queue and the numbers that put it there.

    ``share`` is its team's weighted dominant share with this pod and the team's pods ranked
    before it started; ``team`` and ``held`` (what the team holds before the pod) give the
    standing against the nominal; ``reason`` says it in a sentence.
    """

    pod: fairshare.Pod
    tier: Tier
    share: Share
    team: fairshare.Team
    held: fairshare.Vector

    @property
    def reason(self) -> str:
        where = "below its nominal" if self.tier is Tier.NOMINAL else "at or above its nominal"
        return (
            f"team {self.team.name} {where} ({self.team.standing(self.held, self.pod.demand)}); "
            f"weighted dominant share with the pod {self.share.describe()}"
        )


def _queue_key(pod: fairshare.Pod) -> tuple[int, float, str]:
    return (-pod.priority, pod.created, pod.name)


def _below(nominal: fairshare.Vector, used: fairshare.Vector, demand: fairshare.Vector) -> bool:
    """Whether ``used`` is below ``nominal`` on every unit ``demand`` asks: the team is a lender
    for this pod (what it holds of those units is guaranteed, and some is still owed)."""
    return all(used.get(u, 0) < nominal.get(u, 0) for u in fairshare.asked(demand))


class _Queue:
    """One team's pending pods inside ``order``: the pod it puts forward next, and its tier.

    Usage only grows while ``order`` runs, so a pod found to borrow keeps borrowing: each
    pod is looked at once for whether it fits the nominal.
    """

    def __init__(
        self, team: fairshare.Team, pods: list[fairshare.Pod], held: fairshare.Vector
    ) -> None:
        self.team = team
        self.fresh = sorted(pods, key=_queue_key, reverse=True)  # the next is at the end
        self.borrowing: collections.deque[fairshare.Pod] = collections.deque()  # in queue order
        self.held = dict(held)

    def __bool__(self) -> bool:
        return bool(self.fresh or self.borrowing)

    def head(self) -> tuple[fairshare.Pod, Tier]:
        while self.fresh:
            pod = self.fresh[-1]
            if _below(self.team.nominal, self.held, pod.demand):
                return pod, Tier.NOMINAL
            self.borrowing.append(self.fresh.pop())
        return self.borrowing[0], Tier.BORROWING

    def take(self, pod: fairshare.Pod, tier: Tier) -> None:
        if tier is Tier.NOMINAL:
            self.fresh.pop()
        else:
            self.borrowing.popleft()
        self.held = fairshare.total((self.held, pod.demand))


def order(
    pending: Iterable[fairshare.Pod],
    cohort: fairshare.Cohort,
    used: Mapping[str, fairshare.Vector],
) -> tuple[Ranked, ...]:
    """Rank ``pending`` as if each pod started in turn, on top of what ``used`` holds per team.

    Each team puts forward its first pod in queue order (priority, then age, then name)
    for which it is below its nominal (a lender), or when none is, its first pod. The teams' pods
    compete by (tier, weighted dominant share counting the pod, priority, age, name); the
    winner's demand is added to its team before the next pick (progressive filling). So
    every pod of a team below its nominal is ranked before every pod of a team at or above it.
    """
    pods: dict[str, list[fairshare.Pod]] = {}
    for pod in pending:
        cohort.team(pod.team)
        pods.setdefault(pod.team, []).append(pod)
    queues = [_Queue(cohort.team(n), mine, used.get(n, {})) for n, mine in pods.items()]
    ranked: list[Ranked] = []
    while queues:
        best: tuple[tuple[int, float, int, float, str], _Queue, fairshare.Pod, Tier, Share] | None
        best = None
        for queue in queues:
            pod, tier = queue.head()
            after = fairshare.total((queue.held, pod.demand))
            share = dominant_share(after, cohort.capacity, queue.team.weight)
            key = (_TIER_RANK[tier], round(share.value, 12), -pod.priority, pod.created, pod.name)
            if best is None or key < best[0]:
                best = (key, queue, pod, tier, share)
        assert best is not None  # queues is not empty
        _, queue, pod, tier, share = best
        ranked.append(Ranked(pod, tier, share, queue.team, queue.held))
        queue.take(pod, tier)
        if not queue:
            queues.remove(queue)
    return tuple(ranked)
