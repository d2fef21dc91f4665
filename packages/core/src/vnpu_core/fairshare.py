"""Fair sharing of a cluster's NPUs between teams: queue order, borrowing and reclaim.

Teams share one ``Cohort``: the cluster's capacity as a resource vector (a mapping from a
unit name such as ``aicore``, ``memory`` in MiB, ``chips``, ``vnpus`` or a per-model unit
such as ``Ascend310P-aicore`` to a whole number; the module only adds and compares, so any
units work). Each ``Team`` has a weight, a nominal (guaranteed) vector and a per-unit limit
on what it may borrow above that nominal.

- ``order`` ranks pending pods: pods of teams below their nominal (lenders) come first;
  then the lowest weighted dominant share counting the pod (dominant resource fairness:
  the team's largest used/capacity over the units, divided by its weight); ties go to the
  higher priority, then the older pod, then the name.
- ``check`` says whether one pod may start now: within its team's nominal, by borrowing
  (only what the other teams leave idle, up to the limit), or why not.
- ``reclaim`` picks the borrowers' pods to evict so that a team below its nominal gets
  the capacity it is owed back, with the numbers and a reason sentence per victim.

Every answer carries the numbers behind it. Pure: the caller turns pods and team
configuration into vectors, places pods on nodes and evicts. Written for the scheduler's
queue; ``benchmarks/bench_fairshare.py`` drives it in a simulated cluster. The policy is described in docs/fair-sharing.md.

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


def _below(nominal: Vector, used: Vector, demand: Vector) -> bool:
    """Whether ``used`` is below ``nominal`` on every unit ``demand`` asks: the team is a lender
    for this pod (what it holds of those units is guaranteed, and some is still owed)."""
    return all(used.get(u, 0) < nominal.get(u, 0) for u in _asked(demand))


def _owed(nominal: Vector, used: Vector, demand: Vector) -> dict[str, int]:
    """The part of ``demand`` that lies within the team's nominal, per unit asked."""
    return {u: min(demand[u], max(0, nominal.get(u, 0) - used.get(u, 0))) for u in _asked(demand)}


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

    pod: Pod
    tier: Tier
    share: Share
    team: Team
    held: Vector

    @property
    def reason(self) -> str:
        where = "below its nominal" if self.tier is Tier.NOMINAL else "at or above its nominal"
        return (
            f"team {self.team.name} {where} ({_standing(self.team, self.held, self.pod.demand)}); "
            f"weighted dominant share with the pod {self.share.describe()}"
        )


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
            if _below(self.team.nominal, self.held, pod.demand):
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
    for which it is below its nominal (a lender), or when none is, its first pod. The teams' pods
    compete by (tier, weighted dominant share counting the pod, priority, age, name); the
    winner's demand is added to its team before the next pick (progressive filling). So
    every pod of a team below its nominal is ranked before every pod of a team at or above it.
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
        ranked.append(Ranked(pod, tier, share, queue.team, queue.held))
        queue.take(pod, tier)
        if not queue:
            queues.remove(queue)
    return tuple(ranked)


class Verdict(StrEnum):
    """Whether a pod may start now, as far as the teams' shares go."""

    NOMINAL = "nominal"  # within its team's nominal, and the cohort has the room
    BORROW = "borrow"  # (partly) above the nominal, within the limit, from idle capacity
    RECLAIM = "reclaim"  # its team is below its nominal and borrowers hold what it is owed
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
    reserved: int = 0  # idle, but held for what waiting lender pods are owed

    @property
    def borrowed(self) -> int:
        """What the team would hold above its nominal with the pod."""
        return max(0, self.used + self.demand - self.nominal)

    @property
    def owed(self) -> int:
        """The part of the demand within the team's nominal."""
        return min(self.demand, max(0, self.nominal - self.used))

    @property
    def idle(self) -> int:
        return self.pool - self.cohort_used

    @property
    def short(self) -> int:
        """What the pool lacks for the pod (0 when it has the room)."""
        return max(0, self.cohort_used + self.demand - self.pool)


@dataclass(frozen=True, slots=True)
class Admission:
    """``check``'s answer for one pod: the verdict, the numbers per unit and a sentence."""

    pod: Pod
    verdict: Verdict
    units: tuple[UnitCheck, ...]

    @property
    def borrowed(self) -> dict[str, int]:
        return {c.unit: c.borrowed for c in self.units if c.borrowed}

    @property
    def owed(self) -> dict[str, int]:
        """The part of the demand within the team's nominal: what a waiting lender pod holds
        back from borrowers (``check``'s ``reserved``)."""
        return {c.unit: c.owed for c in self.units if c.owed}

    @property
    def message(self) -> str:
        who = f"team {self.pod.team}"
        units = self.units
        standing = "; ".join(f"{c.unit} {c.used}+{c.demand} of {c.nominal}" for c in units)
        if self.verdict is Verdict.NOMINAL:
            return f"{who} stays within its nominal ({standing})"
        if self.verdict is Verdict.RECLAIM:
            idle = ", ".join(
                f"{max(0, c.idle)} {c.unit} idle, {c.demand} asked, {c.owed} of it owed"
                for c in units
                if c.short
            )
            return f"{who} is below its nominal ({standing}) but borrowers hold the room ({idle})"
        borrowing = "; ".join(
            f"{c.borrowed} {c.unit} above its nominal {c.nominal}" for c in units if c.borrowed
        )
        if self.verdict is Verdict.OVER_LIMIT:
            limits = ", ".join(
                f"{c.limit} {c.unit}" for c in units if c.limit is not None and c.borrowed > c.limit
            )
            return f"{who} would borrow {borrowing}; its borrowing limit is {limits}"
        if self.verdict is Verdict.NO_IDLE:
            idle = ", ".join(
                f"{max(0, c.idle)} {c.unit}"
                + (f" ({c.reserved} held for lenders' pods)" if c.reserved else "")
                for c in units
                if c.cohort_used + c.demand + c.reserved > c.pool
            )
            return f"{who} would borrow {borrowing}; the cohort has only {idle} idle"
        idle = ", ".join(f"{c.idle} {c.unit}" for c in units if c.borrowed)
        return f"{who} borrows {borrowing}, from {idle} idle"


def check(
    pod: Pod, cohort: Cohort, used: Mapping[str, Vector], reserved: Vector | None = None
) -> Admission:
    """Whether ``pod`` may start on top of ``used`` (per team), and the numbers why.

    Within the nominal on every unit it asks, the pod starts if the pool has the room.
    Above it on some unit, it borrows if its team stays within the borrowing limit and the
    pool has the room, i.e. the other teams leave that much idle. When the pool lacks room
    and the team is below its nominal on every unit the pod asks (a lender), the pod may
    reclaim, as long as the pool lacks no more than the part of the pod within the nominal:
    what is borrowed above it still comes only from idle capacity.

    ``reserved`` is idle capacity the caller holds for lenders' pods that could not start
    yet (in a scheduling pass, the sum of their ``Admission.owed``): a borrowing pod must
    leave it idle, so it does not take what a lender is waiting for.
    """
    held_back = reserved or {}
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
            held_back.get(u, 0),
        )
        for u in _asked(pod.demand)
    )
    if any(c.limit is not None and c.borrowed > c.limit for c in units):
        return Admission(pod, Verdict.OVER_LIMIT, units)
    borrows = any(c.borrowed for c in units)
    if not borrows and not any(c.short for c in units):
        return Admission(pod, Verdict.NOMINAL, units)
    if borrows and not any(c.cohort_used + c.demand + c.reserved > c.pool for c in units):
        return Admission(pod, Verdict.BORROW, units)
    lender = all(c.used < c.nominal for c in units)
    if lender and any(c.short for c in units) and all(c.short <= c.owed for c in units):
        return Admission(pod, Verdict.RECLAIM, units)
    return Admission(pod, Verdict.NO_IDLE, units)


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
    """The borrowers' pods to evict so that ``pod``, of a team below its nominal, can start.

    The team must be below its nominal on every unit the pod asks, and the pool may lack
    no more than the part of the pod within that nominal (what the team is owed); what the
    pod takes above the nominal has to be idle already.

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
    everyone = total(held.values())
    needed = {
        u: everyone.get(u, 0) + pod.demand[u] - cohort.pool.get(u, 0)
        for u in _asked(pod.demand)
        if everyone.get(u, 0) + pod.demand[u] > cohort.pool.get(u, 0)
    }
    owed = _owed(lender.nominal, mine, pod.demand)
    over = {
        u: mine.get(u, 0) + pod.demand[u] - lender.nominal.get(u, 0)
        for u in _asked(pod.demand)
        if (limit := lender.limit(u)) is not None
        and mine.get(u, 0) + pod.demand[u] - lender.nominal.get(u, 0) > limit
    }
    if over:
        return Reclaim(
            pod,
            needed,
            {},
            (),
            False,
            f"team {lender.name} would borrow {_amounts(over)} above its nominal with {pod.name}, "
            "past its borrowing limit",
        )
    fits_now = fits is None or fits(())
    if not needed and fits_now:
        return Reclaim(pod, {}, {}, (), True, "nothing to reclaim: the pool and a node have room")
    if not _below(lender.nominal, mine, pod.demand) or any(n > owed[u] for u, n in needed.items()):
        return Reclaim(
            pod,
            needed,
            {},
            (),
            False,
            f"team {lender.name} is owed {_amounts({u: a for u, a in owed.items() if a})} of its "
            f"nominal for {pod.name} ({_standing(lender, mine, pod.demand)}); the pool lacks "
            f"{_amounts(needed)}: only what a team below its nominal is owed is reclaimed",
        )
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
