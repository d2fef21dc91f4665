"""Reclaim: the borrowers' pods to evict so that a team below its nominal gets its share back.

``reclaim`` answers for one pending pod of a lender (a team below its nominal on every unit
the pod asks): the victims, what they free, and a reason sentence per victim. Only pods of
other teams are taken, and only capacity their teams borrow (a victim's team stays at or
above its nominal), lowest priority first, then newest, no more than needed; a lender
reclaims no more than it is owed. With ``fits``, the caller's answer to whether the pod fits
a node once the victims are gone, victims are sought one node at a time.

The teams, pods and cohort are ``vnpu_core.fairshare``'s; the numbers per unit (what the
pool lacks, what the lender is owed) are ``vnpu_core.borrowing``'s. Called by the
scheduler's reclaimer (``vnpu_scheduler.reclaimer``) and ``benchmarks/bench_fairshare.py``;
docs/fair-sharing.md describes the rules. Pure: the caller evicts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from vnpu_core import borrowing, fairshare

Fits = Callable[[Sequence[fairshare.Pod]], bool]
"""The caller's answer to "with these pods evicted, does the pending pod fit a node?"."""


def _minus(a: fairshare.Vector, b: fairshare.Vector) -> dict[str, int]:
    out = dict(a)
    for unit, amount in b.items():
        out[unit] = out.get(unit, 0) - amount
    return out


def _amounts(vector: fairshare.Vector) -> str:
    return ", ".join(f"{vector[u]} {u}" for u in sorted(vector)) or "nothing"


@dataclass(frozen=True, slots=True)
class Victim:
    """A pod to evict; ``borrowed`` is what its team held above its nominal, per reclaimed unit,
    with the victims chosen before it already gone."""

    pod: fairshare.Pod
    borrowed: Mapping[str, int]
    reason: str


@dataclass(frozen=True, slots=True)
class Reclaim:
    """``reclaim``'s answer: the victims, what they free, and whether that is enough.

    ``needed`` is the capacity the pool lacks for the pod, per unit (empty when only a
    node lacks the room). When ``satisfied`` is false, ``victims`` is empty: evicting part
    of what is needed would not start the pod.
    """

    pod: fairshare.Pod
    needed: Mapping[str, int]
    freed: Mapping[str, int]
    victims: tuple[Victim, ...]
    satisfied: bool
    reason: str


def _refused(pod: fairshare.Pod, needed: Mapping[str, int], reason: str) -> Reclaim:
    """An answer without victims: evicting part of what is needed would not start the pod."""
    return Reclaim(pod, needed, {}, (), False, reason)


def _victim_key(pod: fairshare.Pod) -> tuple[int, float, str]:
    return (pod.priority, -pod.created, pod.name)  # lowest priority, then newest, first


def _borrowed(
    cohort: fairshare.Cohort,
    held: Mapping[str, fairshare.Vector],
    pod: fairshare.Pod,
    units: Sequence[str],
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


def _enough(needed: fairshare.Vector, freed: fairshare.Vector) -> bool:
    return all(freed.get(u, 0) >= amount for u, amount in needed.items())


def _greedy(
    cohort: fairshare.Cohort,
    held: dict[str, dict[str, int]],
    candidates: Sequence[fairshare.Pod],
    units: Sequence[str],
    chosen: list[fairshare.Pod],
    done: Callable[[Sequence[fairshare.Pod]], bool],
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


def _minimal(
    chosen: list[fairshare.Pod], done: Callable[[Sequence[fairshare.Pod]], bool]
) -> list[fairshare.Pod]:
    """Drop victims, the last chosen first, while the rest still does."""
    kept = list(chosen)
    for pod in reversed(chosen):
        rest = [p for p in kept if p.name != pod.name]
        if done(rest):
            kept = rest
    return kept


def reclaim(
    pod: fairshare.Pod,
    cohort: fairshare.Cohort,
    running: Sequence[fairshare.Pod],
    fits: Fits | None = None,
) -> Reclaim:
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
    held = fairshare.usage(running)
    mine = held.get(lender.name, {})
    admission = borrowing.check(pod, cohort, held)
    needed = {c.unit: c.short for c in admission.units if c.short}
    over = {c.unit: c.borrowed for c in admission.units if c.over_limit}
    if over:
        return _refused(
            pod,
            needed,
            f"team {lender.name} would borrow {_amounts(over)} above its nominal with {pod.name}, "
            "past its borrowing limit",
        )
    fits_now = fits is None or fits(())
    if not needed and fits_now:
        return Reclaim(pod, {}, {}, (), True, "nothing to reclaim: the pool and a node have room")
    if not admission.lender or any(c.short > c.owed for c in admission.units):
        return _refused(
            pod,
            needed,
            f"team {lender.name} is owed {_amounts(admission.owed)} of its "
            f"nominal for {pod.name} ({lender.standing(mine, pod.demand)}); the pool lacks "
            f"{_amounts(needed)}: only what a team below its nominal is owed is reclaimed",
        )
    units = sorted(needed) or fairshare.asked(pod.demand)
    candidates = sorted(
        (
            p
            for p in running
            if p.team != lender.name and any(p.demand.get(u, 0) > 0 for u in units)
        ),
        key=_victim_key,
    )

    def pool_done(victims: Sequence[fairshare.Pod]) -> bool:
        return _enough(needed, fairshare.total(v.demand for v in victims))

    def all_done(victims: Sequence[fairshare.Pod]) -> bool:
        return pool_done(victims) and (fits is None or fits(victims))

    chosen: list[fairshare.Pod] = []
    if fits is None or fits_now:
        work = {team: dict(vector) for team, vector in held.items()}
        if _greedy(cohort, work, candidates, units, chosen, pool_done):
            chosen = _minimal(chosen, all_done)
    else:
        assert fits is not None
        node_fits = fits
        best: tuple[tuple[int, int, str], list[fairshare.Pod]] | None = None
        for node in dict.fromkeys(p.node for p in candidates):
            here: list[fairshare.Pod] = []
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
        freeable = fairshare.total(
            p.demand for p in candidates if _borrowed(cohort, held, p, units)
        )
        what = _amounts(needed) if needed else f"room on one node for {_amounts(pod.demand)}"
        return _refused(
            pod,
            needed,
            f"team {lender.name} needs {what} of its nominal back; the borrowers' pods that "
            f"may be taken hold {_amounts({u: freeable.get(u, 0) for u in units})} and do not free it",
        )
    freed = fairshare.total(v.demand for v in chosen)
    return Reclaim(
        pod,
        needed,
        freed,
        _explain(cohort, held, lender, pod, needed, chosen, units),
        True,
        f"{len(chosen)} pod(s) of borrowing teams give back {_amounts(freed)}",
    )


def _explain(
    cohort: fairshare.Cohort,
    held: Mapping[str, fairshare.Vector],
    lender: fairshare.Team,
    pod: fairshare.Pod,
    needed: fairshare.Vector,
    chosen: Sequence[fairshare.Pod],
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
