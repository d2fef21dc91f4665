"""Fair sharing of a cluster's NPUs between teams: queue order, borrowing and reclaim.

Teams share one ``Cohort``: the cluster's capacity as a resource vector (a mapping from a
unit name such as ``aicore``, ``memory`` in MiB, ``chips``, ``vnpus`` or a per-model unit
such as ``Ascend310P-aicore`` to a whole number; the module only adds and compares, so any
units work). Each ``Team`` has a weight, a nominal (guaranteed) vector and a per-unit limit
on what it may borrow above that nominal.

- ``order`` ranks pending pods: pods that keep their team within its nominal come first;
  then the lowest weighted dominant share counting the pod (dominant resource fairness:
  the team's largest used/capacity over the units, divided by its weight); ties go to the
  higher priority, then the older pod, then the name.
- ``check`` says whether one pod may start now: within its team's nominal, by borrowing
  (only what the other teams leave idle, up to the limit), or why not.
- ``reclaim`` picks the borrowers' pods to evict so that a team within its nominal gets
  its capacity back, with the numbers and a reason sentence per victim.

Every answer carries the numbers behind it. Pure: the caller turns pods and team
configuration into vectors, places pods on nodes and evicts; the scheduler and
``benchmarks/bench_fairshare.py`` call it. The policy is described in docs/fair-sharing.md.

A team or cohort that cannot be used raises ``FairShareError`` (an ``errors.VnpuError``)
naming the team, the field and the value.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from vnpu_core import errors

Vector = Mapping[str, int]
"""Amounts per unit; a unit that is absent is 0."""

Fits = Callable[[Sequence["Pod"]], bool]
"""The caller's answer to "with these pods evicted, does the pending pod fit a node?"."""


class FairShareError(errors.VnpuError):
    """A team is invalid or unknown: ``field`` (``weight``, ``nominal.aicore``) of ``team``."""

    def __init__(self, team: str, field: str, value: object, problem: str) -> None:
        self.team = team
        self.field = field
        self.value = value
        self.problem = problem
        super().__init__(f"team {team!r}: {field}: {problem} (got {value!r})")


def total(vectors: Iterable[Vector]) -> dict[str, int]:
    """The unit-by-unit sum of ``vectors``."""
    out: dict[str, int] = {}
    for vector in vectors:
        for unit, amount in vector.items():
            out[unit] = out.get(unit, 0) + amount
    return out


def _plus(a: Vector, b: Vector) -> dict[str, int]:
    out = dict(a)
    for unit, amount in b.items():
        out[unit] = out.get(unit, 0) + amount
    return out


def _minus(a: Vector, b: Vector) -> dict[str, int]:
    out = dict(a)
    for unit, amount in b.items():
        out[unit] = out.get(unit, 0) - amount
    return out


def _asked(demand: Vector) -> list[str]:
    return sorted(unit for unit, amount in demand.items() if amount > 0)


def _within(nominal: Vector, used: Vector, demand: Vector) -> bool:
    """Whether ``used`` plus ``demand`` stays within ``nominal`` on every unit asked."""
    return all(used.get(u, 0) + demand[u] <= nominal.get(u, 0) for u in _asked(demand))


def _amounts(vector: Vector) -> str:
    return ", ".join(f"{vector[u]} {u}" for u in sorted(vector)) or "nothing"


@dataclass(frozen=True)
class Team:
    """A team: its weight, its nominal (guaranteed) vector and its borrowing limit.

    ``borrowing_limit`` is per unit, the most the team may hold above its nominal; a unit
    absent from it has no limit (only idle capacity bounds the borrowing), 0 forbids it.
    """

    name: str
    weight: float = 1.0
    nominal: Vector = field(default_factory=dict)
    borrowing_limit: Vector = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (isinstance(self.weight, int | float) and math.isfinite(self.weight)):
            raise FairShareError(self.name, "weight", self.weight, "must be a number")
        if self.weight <= 0:
            raise FairShareError(self.name, "weight", self.weight, "must be above 0")
        for name, vector in (("nominal", self.nominal), ("borrowing_limit", self.borrowing_limit)):
            for unit, amount in vector.items():
                if amount < 0:
                    raise FairShareError(
                        self.name, f"{name}.{unit}", amount, "must not be negative"
                    )

    def limit(self, unit: str) -> int | None:
        """The most the team may borrow above its nominal on ``unit``; None: no limit."""
        return self.borrowing_limit.get(unit)


@dataclass(frozen=True)
class Pod:
    """A pending or running pod as fair sharing sees it: its team and what it holds or asks.

    ``name`` is unique (``namespace/name``); ``created`` is its creation time in seconds on
    any clock; ``node`` is where a running pod runs ("" for a pending one).
    """

    name: str
    team: str
    demand: Vector
    priority: int = 0
    created: float = 0.0
    node: str = ""


@dataclass(frozen=True)
class Cohort:
    """The teams that lend to each other and the cluster's total capacity.

    ``pool`` is what the teams share, per unit: their total nominal, capped by the
    capacity. Capacity that no nominal covers is not lent to anyone.
    """

    capacity: Vector
    teams: tuple[Team, ...]
    pool: dict[str, int] = field(init=False, compare=False)
    _by_name: dict[str, Team] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name: dict[str, Team] = {}
        for team in self.teams:
            if team.name in by_name:
                raise FairShareError(team.name, "name", team.name, "team defined twice")
            by_name[team.name] = team
        object.__setattr__(self, "_by_name", by_name)
        nominal = total(team.nominal for team in self.teams)
        pool = {u: min(amount, self.capacity.get(u, 0)) for u, amount in nominal.items()}
        object.__setattr__(self, "pool", pool)

    def team(self, name: str) -> Team:
        found = self._by_name.get(name)
        if found is None:
            raise FairShareError(name, "team", name, "no such team in the cohort")
        return found


def usage(pods: Iterable[Pod]) -> dict[str, dict[str, int]]:
    """What each team's pods hold, by team name."""
    out: dict[str, dict[str, int]] = {}
    for pod in pods:
        held = out.setdefault(pod.team, {})
        for unit, amount in pod.demand.items():
            held[unit] = held.get(unit, 0) + amount
    return out


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


def dominant_share(used: Vector, capacity: Vector, weight: float = 1.0) -> Share:
    """The largest ``used/capacity`` over the units, divided by ``weight``.

    A unit held but absent from the capacity counts as infinitely used. Ties between units
    go to the first in name order.
    """
    best = Share(0.0, 0.0, "", 0, 0, weight)
    for unit in sorted(used):
        held = used[unit]
        if held <= 0:
            continue
        cap = capacity.get(unit, 0)
        ratio = held / cap if cap > 0 else math.inf
        if ratio > best.ratio:
            best = Share(ratio / weight, ratio, unit, held, cap, weight)
    return best


class Tier(StrEnum):
    """Which group a pending pod is served in: within its team's nominal first."""

    NOMINAL = "nominal"  # the team stays within its nominal with this pod
    BORROWING = "borrowing"  # the pod takes its team above its nominal on some unit


_TIER_RANK = {Tier.NOMINAL: 0, Tier.BORROWING: 1}


@dataclass(frozen=True, slots=True)
class Ranked:
    """One pending pod's place in the queue and the numbers that put it there.

    ``share`` is its team's weighted dominant share with this pod and the team's pods ranked
    before it started.
    """

    pod: Pod
    tier: Tier
    share: Share
    reason: str


def _queue_key(pod: Pod) -> tuple[int, float, str]:
    return (-pod.priority, pod.created, pod.name)


def _standing(team: Team, held: Vector, demand: Vector) -> str:
    parts = [
        f"{u} {held.get(u, 0)}+{demand[u]} of {team.nominal.get(u, 0)}" for u in _asked(demand)
    ]
    return "; ".join(parts) or "asks nothing"


class _Queue:
    """One team's pending pods inside ``order``: the pod it puts forward next, and its tier.

    Usage only grows while ``order`` runs, so a pod found to borrow keeps borrowing: each
    pod is looked at once for whether it fits the nominal.
    """

    def __init__(self, team: Team, pods: list[Pod], held: Vector) -> None:
        self.team = team
        self.fresh = sorted(pods, key=_queue_key, reverse=True)  # the next is at the end
        self.borrowing: collections.deque[Pod] = collections.deque()  # in queue order
        self.held = dict(held)

    def __bool__(self) -> bool:
        return bool(self.fresh or self.borrowing)

    def head(self) -> tuple[Pod, Tier]:
        while self.fresh:
            pod = self.fresh[-1]
            if _within(self.team.nominal, self.held, pod.demand):
                return pod, Tier.NOMINAL
            self.borrowing.append(self.fresh.pop())
        return self.borrowing[0], Tier.BORROWING

    def take(self, pod: Pod, tier: Tier) -> None:
        if tier is Tier.NOMINAL:
            self.fresh.pop()
        else:
            self.borrowing.popleft()
        self.held = _plus(self.held, pod.demand)


def order(pending: Iterable[Pod], cohort: Cohort, used: Mapping[str, Vector]) -> tuple[Ranked, ...]:
    """Rank ``pending`` as if each pod started in turn, on top of what ``used`` holds per team.

    Each team puts forward its first pod in queue order (priority, then age, then name)
    that keeps it within its nominal, or when none does, its first pod. The teams' pods
    compete by (tier, weighted dominant share counting the pod, priority, age, name); the
    winner's demand is added to its team before the next pick (progressive filling). So
    every pod within its team's nominal is ranked before every pod that borrows.
    """
    pods: dict[str, list[Pod]] = {}
    for pod in pending:
        cohort.team(pod.team)
        pods.setdefault(pod.team, []).append(pod)
    queues = [_Queue(cohort.team(n), mine, used.get(n, {})) for n, mine in pods.items()]
    ranked: list[Ranked] = []
    while queues:
        best: tuple[tuple[int, float, int, float, str], _Queue, Pod, Tier, Share] | None = None
        for queue in queues:
            pod, tier = queue.head()
            after = _plus(queue.held, pod.demand)
            share = dominant_share(after, cohort.capacity, queue.team.weight)
            key = (_TIER_RANK[tier], round(share.value, 12), -pod.priority, pod.created, pod.name)
            if best is None or key < best[0]:
                best = (key, queue, pod, tier, share)
        assert best is not None  # queues is not empty
        _, queue, pod, tier, share = best
        where = "within its nominal" if tier is Tier.NOMINAL else "above its nominal"
        reason = (
            f"team {queue.team.name} {where} ({_standing(queue.team, queue.held, pod.demand)}); "
            f"weighted dominant share with the pod {share.describe()}"
        )
        ranked.append(Ranked(pod, tier, share, reason))
        queue.take(pod, tier)
        if not queue:
            queues.remove(queue)
    return tuple(ranked)


class Verdict(StrEnum):
    """Whether a pod may start now, as far as the teams' shares go."""

    NOMINAL = "nominal"  # within its team's nominal, and the cohort has the room
    BORROW = "borrow"  # above the nominal, within the limit, from idle capacity
    RECLAIM = "reclaim"  # within the nominal, but borrowers hold the room: see ``reclaim``
    OVER_LIMIT = "over-limit"  # it would take the team past its borrowing limit
    NO_IDLE = "no-idle"  # it would borrow, and the other teams leave too little idle

    @property
    def admitted(self) -> bool:
        return self in (Verdict.NOMINAL, Verdict.BORROW)


@dataclass(frozen=True, slots=True)
class UnitCheck:
    """One unit of a pod's demand against its team's nominal and the cohort's pool."""

    unit: str
    demand: int
    used: int  # the team holds, before the pod
    nominal: int
    limit: int | None  # borrowing limit above the nominal; None: no limit
    cohort_used: int  # every team holds, before the pod
    pool: int

    @property
    def borrowed(self) -> int:
        """What the team would hold above its nominal with the pod."""
        return max(0, self.used + self.demand - self.nominal)

    @property
    def idle(self) -> int:
        return self.pool - self.cohort_used


@dataclass(frozen=True, slots=True)
class Admission:
    """``check``'s answer for one pod: the verdict, the numbers per unit and a sentence."""

    pod: Pod
    verdict: Verdict
    units: tuple[UnitCheck, ...]
    message: str

    @property
    def borrowed(self) -> dict[str, int]:
        return {c.unit: c.borrowed for c in self.units if c.borrowed}


def check(pod: Pod, cohort: Cohort, used: Mapping[str, Vector]) -> Admission:
    """Whether ``pod`` may start on top of ``used`` (per team), and the numbers why.

    Within the nominal on every unit it asks, the pod starts if the pool has the room and
    otherwise may reclaim. Above it on some unit, it borrows if its team stays within the
    borrowing limit and the pool has the room, i.e. the other teams leave that much idle.
    """
    team = cohort.team(pod.team)
    mine = used.get(team.name, {})
    everyone = total(used.values())
    units = tuple(
        UnitCheck(
            u,
            pod.demand[u],
            mine.get(u, 0),
            team.nominal.get(u, 0),
            team.limit(u),
            everyone.get(u, 0),
            cohort.pool.get(u, 0),
        )
        for u in _asked(pod.demand)
    )
    short = [c for c in units if c.cohort_used + c.demand > c.pool]
    who = f"team {team.name}"
    if all(c.used + c.demand <= c.nominal for c in units):
        standing = "; ".join(f"{c.unit} {c.used}+{c.demand} of {c.nominal}" for c in units)
        if not short:
            return Admission(
                pod, Verdict.NOMINAL, units, f"{who} stays within its nominal ({standing})"
            )
        idle = ", ".join(f"{max(0, c.idle)} {c.unit} idle, {c.demand} asked" for c in short)
        return Admission(
            pod,
            Verdict.RECLAIM,
            units,
            f"{who} is within its nominal ({standing}) but other teams hold the room ({idle})",
        )
    borrowing = "; ".join(
        f"{c.borrowed} {c.unit} above its nominal {c.nominal}" for c in units if c.borrowed
    )
    over = [c for c in units if c.limit is not None and c.borrowed > c.limit]
    if over:
        limits = ", ".join(f"{c.limit} {c.unit}" for c in over)
        message = f"{who} would borrow {borrowing}; its borrowing limit is {limits}"
        return Admission(pod, Verdict.OVER_LIMIT, units, message)
    if short:
        idle = ", ".join(f"{max(0, c.idle)} {c.unit}" for c in short)
        message = f"{who} would borrow {borrowing}; the cohort has only {idle} idle"
        return Admission(pod, Verdict.NO_IDLE, units, message)
    idle = ", ".join(f"{c.idle} {c.unit}" for c in units if c.borrowed)
    return Admission(pod, Verdict.BORROW, units, f"{who} borrows {borrowing}, from {idle} idle")


@dataclass(frozen=True, slots=True)
class Victim:
    """A pod to evict; ``borrowed`` is what its team held above its nominal, per reclaimed unit,
    with the victims chosen before it already gone."""

    pod: Pod
    borrowed: Mapping[str, int]
    reason: str


@dataclass(frozen=True, slots=True)
class Reclaim:
    """``reclaim``'s answer: the victims, what they free, and whether that is enough.

    ``needed`` is the capacity the pool lacks for the pod, per unit (empty when only a
    node lacks the room). When ``satisfied`` is false, ``victims`` is empty: evicting part
    of what is needed would not start the pod.
    """

    pod: Pod
    needed: Mapping[str, int]
    freed: Mapping[str, int]
    victims: tuple[Victim, ...]
    satisfied: bool
    reason: str


def _victim_key(pod: Pod) -> tuple[int, float, str]:
    return (pod.priority, -pod.created, pod.name)  # lowest priority, then newest, first


def _borrowed(
    cohort: Cohort, held: Mapping[str, Vector], pod: Pod, units: Sequence[str]
) -> dict[str, int] | None:
    """What ``pod``'s team borrows on the ``units`` it holds, if evicting it keeps the team at
    or above its nominal on each; None when it may not be taken (or frees none of them)."""
    team = cohort.team(pod.team)
    mine = held.get(team.name, {})
    out: dict[str, int] = {}
    for unit in units:
        take = pod.demand.get(unit, 0)
        if take <= 0:
            continue
        above = mine.get(unit, 0) - team.nominal.get(unit, 0)
        if above < take:
            return None
        out[unit] = above
    return out or None


def _enough(needed: Vector, freed: Vector) -> bool:
    return all(freed.get(u, 0) >= amount for u, amount in needed.items())


def _greedy(
    cohort: Cohort,
    held: dict[str, dict[str, int]],
    candidates: Sequence[Pod],
    units: Sequence[str],
    chosen: list[Pod],
    done: Callable[[Sequence[Pod]], bool],
) -> bool:
    """Add candidates to ``chosen`` in order (updating ``held``) until ``done``."""
    taken = {p.name for p in chosen}
    for pod in candidates:
        if done(chosen):
            return True
        if pod.name in taken or _borrowed(cohort, held, pod, units) is None:
            continue
        chosen.append(pod)
        taken.add(pod.name)
        held[pod.team] = _minus(held[pod.team], pod.demand)
    return done(chosen)


def _minimal(chosen: list[Pod], done: Callable[[Sequence[Pod]], bool]) -> list[Pod]:
    """Drop victims, the last chosen first, while the rest still does."""
    kept = list(chosen)
    for pod in reversed(chosen):
        rest = [p for p in kept if p.name != pod.name]
        if done(rest):
            kept = rest
    return kept


def reclaim(pod: Pod, cohort: Cohort, running: Sequence[Pod], fits: Fits | None = None) -> Reclaim:
    """The borrowers' pods to evict so that ``pod``, within its team's nominal, can start.

    Candidates are the running pods of the other teams that hold a reclaimed unit (the
    units the pool lacks; when it lacks none, the units the pod asks), lowest priority
    first, then newest. A candidate is taken only if its team stays at or above its
    nominal on every reclaimed unit once it is gone, so only borrowed capacity is taken
    back and never from the lender's own team. Taking stops once the pool has the room and,
    with ``fits``, once the caller says the pod fits a node; victims that turn out not to
    be needed are then dropped, the last chosen first.

    With ``fits``, victims are first sought on one node at a time (``Pod.node``): the
    node whose set has the lowest highest priority, then the fewest victims, wins; then
    pods elsewhere are added if the pool still lacks room. ``fits`` must not turn false
    when more pods are evicted.
    """
    lender = cohort.team(pod.team)
    held = usage(running)
    mine = held.get(lender.name, {})
    if not _within(lender.nominal, mine, pod.demand):
        return Reclaim(
            pod,
            {},
            {},
            (),
            False,
            f"team {lender.name} would be above its nominal with {pod.name} "
            f"({_standing(lender, mine, pod.demand)}): only nominal capacity is reclaimed",
        )
    everyone = total(held.values())
    needed = {
        u: everyone.get(u, 0) + pod.demand[u] - cohort.pool.get(u, 0)
        for u in _asked(pod.demand)
        if everyone.get(u, 0) + pod.demand[u] > cohort.pool.get(u, 0)
    }
    fits_now = fits is None or fits(())
    if not needed and fits_now:
        return Reclaim(pod, {}, {}, (), True, "nothing to reclaim: the pool and a node have room")
    units = sorted(needed) or _asked(pod.demand)
    candidates = sorted(
        (
            p
            for p in running
            if p.team != lender.name and any(p.demand.get(u, 0) > 0 for u in units)
        ),
        key=_victim_key,
    )

    def pool_done(victims: Sequence[Pod]) -> bool:
        return _enough(needed, total(v.demand for v in victims))

    def all_done(victims: Sequence[Pod]) -> bool:
        return pool_done(victims) and (fits is None or fits(victims))

    chosen: list[Pod] = []
    if fits is None or fits_now:
        work = {team: dict(vector) for team, vector in held.items()}
        if _greedy(cohort, work, candidates, units, chosen, pool_done):
            chosen = _minimal(chosen, all_done)
    else:
        assert fits is not None
        node_fits = fits
        best: tuple[tuple[int, int, str], list[Pod]] | None = None
        for node in dict.fromkeys(p.node for p in candidates):
            here: list[Pod] = []
            work = {team: dict(vector) for team, vector in held.items()}
            local = [p for p in candidates if p.node == node]
            if not _greedy(cohort, work, local, units, here, node_fits):
                continue
            if not _greedy(cohort, work, candidates, units, here, pool_done):
                continue
            here = _minimal(here, all_done)
            key = (max(p.priority for p in here), len(here), node)
            if best is None or key < best[0]:
                best = (key, here)
        chosen = best[1] if best is not None else []
    if not chosen or not all_done(chosen):
        freeable = total(p.demand for p in candidates if _borrowed(cohort, held, p, units))
        what = _amounts(needed) if needed else f"room on one node for {_amounts(pod.demand)}"
        return Reclaim(
            pod,
            needed,
            {},
            (),
            False,
            f"team {lender.name} needs {what} of its nominal back; the borrowers' pods that "
            f"may be taken hold {_amounts({u: freeable.get(u, 0) for u in units})} and do not free it",
        )
    return Reclaim(
        pod,
        needed,
        total(v.demand for v in chosen),
        _explain(cohort, held, lender, pod, needed, chosen, units),
        True,
        f"{len(chosen)} pod(s) of borrowing teams give back {_amounts(total(v.demand for v in chosen))}",
    )


def _explain(
    cohort: Cohort,
    held: Mapping[str, Vector],
    lender: Team,
    pod: Pod,
    needed: Vector,
    chosen: Sequence[Pod],
    units: Sequence[str],
) -> tuple[Victim, ...]:
    if needed:
        wants = f"team {lender.name} needs {_amounts(needed)} of its nominal back"
    else:
        wants = f"team {lender.name} needs room on one node for {_amounts(pod.demand)} within its nominal"
    work = {team: dict(vector) for team, vector in held.items()}
    victims: list[Victim] = []
    for victim in chosen:
        borrowed = _borrowed(cohort, work, victim, units)
        assert borrowed is not None  # the chosen pods passed this check with fewer taken
        team = cohort.team(victim.team)
        above = " and ".join(
            f"{amount} {unit} above its nominal {team.nominal.get(unit, 0)}"
            for unit, amount in sorted(borrowed.items())
        )
        victims.append(Victim(victim, borrowed, f"team {team.name} borrows {above}; {wants}"))
        work[team.name] = _minus(work[team.name], victim.demand)
    return tuple(victims)
