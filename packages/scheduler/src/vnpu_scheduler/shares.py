"""Teams as fair sharing (``vnpu_core.fairshare``) sees them, built from the scheduler's quota state.

``quotagate`` (lenders first, in the filter) and ``reclaimer`` call it. A vector holds the
unit names (``Amount.names()``) of the keys some team names in a nominal or a
borrowingLimit (``tenants.Tenants.units``): the units the team rule covers; other units are
not shared between teams. The cohort's capacity is the sum of every team's nominal, as in
the team rule (``quotas.check``), so the cohort's pool is exactly that sum; whether a pod
fits a node is the allocator's question (``reclaimer``), not the pool's.

``lender_waiting`` is the lenders-first rule: a pod that would take its team above its
nominal waits while another team below its nominal (a lender: ``ranking.order``'s ``nominal``
tier) has pods pending that ask for a unit the pod would borrow. The answer is the sentence the filter
shows, or '' when the pod may go.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from vnpu_core import borrowing, fairshare, quotas, ranking, tenants
from vnpu_core.holdings import Amount, Key
from vnpu_scheduler import tenancy

Vector = dict[str, int]


def cohort(teams: tenants.Tenants) -> fairshare.Cohort:
    """The fairshare cohort of the teams: weights, nominals and borrowing limits by unit name."""
    capacity = {key.name: teams.cohort_nominal(key) for key in teams.units()}
    return fairshare.Cohort(
        capacity,
        tuple(
            fairshare.Team(
                team.name,
                team.weight,
                {key.name: value for key, value in team.nominal.items()},
                {key.name: value for key, value in team.borrowing_limit.items()},
            )
            for team in teams.teams
        ),
    )


def vector(amount: Amount, units: Sequence[Key]) -> Vector:
    """The amount in unit names, on the units the teams share only."""
    names = amount.names()
    return {key.name: names[key.name] for key in units if names.get(key.name)}


def team_usage(teams: tenants.Tenants, usage: Mapping[str, Amount]) -> dict[str, Vector]:
    """What each team holds (``usage`` by namespace), as vectors by team name."""
    units = teams.units()
    return {name: vector(held, units) for name, held in quotas.team_usage(teams, usage).items()}


def pending_pod(teams: tenants.Tenants, pending: tenancy.Pending) -> fairshare.Pod | None:
    """A pending pod as fairshare sees it; None when its namespace is in no team."""
    team = teams.team_of(pending.namespace)
    if team is None:
        return None
    demand = vector(pending.ask, teams.units())
    return fairshare.Pod(pending.label, team.name, demand, pending.priority, pending.created)


def _amounts(vector: Mapping[str, int]) -> str:
    return ", ".join(f"{vector[unit]} {unit}" for unit in sorted(vector))


def lender_waiting(
    pod: fairshare.Pod,
    shared: fairshare.Cohort,
    used: Mapping[str, Vector],
    others: Iterable[fairshare.Pod],
) -> str:
    """Why ``pod`` waits for lenders ('' when it need not): it would borrow on a unit that a
    lender has pods waiting for (``others``, pending pods of any team, ranked by
    ``ranking.order``; the lenders' are those in the ``nominal`` tier)."""
    admission = borrowing.check(pod, shared, used)
    if admission.verdict is not borrowing.Verdict.BORROW:
        return ""  # borrows no idle room: within its nominal, or check does not admit it
    borrowed = [unit for unit in admission.units if unit.borrowed]
    wanted = {unit.unit for unit in borrowed}
    waiting = [p for p in others if p.team != pod.team]
    lenders: dict[str, Vector] = {}
    for ranked in ranking.order(waiting, shared, used):
        if ranked.tier is not ranking.Tier.NOMINAL:
            continue
        asks = {u: n for u, n in ranked.pod.demand.items() if u in wanted and n > 0}
        if asks:
            held = lenders.setdefault(ranked.pod.team, {})
            for unit, amount in asks.items():
                held[unit] = held.get(unit, 0) + amount
    if not lenders:
        return ""
    above = "; ".join(f"{u.borrowed} {u.unit} above its nominal {u.nominal}" for u in borrowed)
    who = " and ".join(
        f"team {team}, below its nominal, has {_amounts(asks)} pending"
        for team, asks in sorted(lenders.items())
    )
    return f"team {pod.team} would borrow {above} while {who}"
