"""The borrowing rule: whether one pod may start now, as far as the teams' shares go.

``check`` answers with a ``Verdict`` (``nominal``, ``borrow``, ``reclaim``, ``over-limit``,
``no-idle``) and the numbers per unit asked (``UnitCheck``): a pod within its team's
nominal starts if the cohort's pool has the room; above it, it borrows only what the other
teams leave idle, up to the team's borrowing limit; a lender's pod that finds the pool full
may reclaim what it is owed. ``UnitCheck`` is the per-unit arithmetic (borrowed above the
nominal, past the limit, short of the pool) that ``vnpu_core.quotas`` applies too, unit by
unit, for its team rule.

The teams, pods and cohort are ``vnpu_core.fairshare``'s. Called by the scheduler
(``vnpu_scheduler.shares``: lenders first), ``vnpu_core.reclaim``, ``vnpu_core.quotas`` and
``benchmarks/bench_fairshare.py``; docs/fair-sharing.md describes the verdicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from vnpu_core import fairshare


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
    def over_limit(self) -> bool:
        """Whether the pod would take the team past its borrowing limit."""
        return self.limit is not None and self.borrowed > self.limit

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

    @property
    def crowded(self) -> bool:
        """Whether the pod would leave less idle than ``reserved`` holds for lenders."""
        return self.cohort_used + self.demand + self.reserved > self.pool


@dataclass(frozen=True, slots=True)
class Admission:
    """``check``'s answer for one pod: the verdict, the numbers per unit and a sentence."""

    pod: fairshare.Pod
    verdict: Verdict
    units: tuple[UnitCheck, ...]

    @property
    def lender(self) -> bool:
        """Whether the team is below its nominal on every unit the pod asks."""
        return _lender(self.units)

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
            limits = ", ".join(f"{c.limit} {c.unit}" for c in units if c.over_limit)
            return f"{who} would borrow {borrowing}; its borrowing limit is {limits}"
        if self.verdict is Verdict.NO_IDLE:
            idle = ", ".join(
                f"{max(0, c.idle)} {c.unit}"
                + (f" ({c.reserved} held for lenders' pods)" if c.reserved else "")
                for c in units
                if c.crowded
            )
            return f"{who} would borrow {borrowing}; the cohort has only {idle} idle"
        idle = ", ".join(f"{c.idle} {c.unit}" for c in units if c.borrowed)
        return f"{who} borrows {borrowing}, from {idle} idle"


def check(
    pod: fairshare.Pod,
    cohort: fairshare.Cohort,
    used: Mapping[str, fairshare.Vector],
    reserved: fairshare.Vector | None = None,
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
    everyone = fairshare.total(used.values())
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
        for u in fairshare.asked(pod.demand)
    )
    return Admission(pod, _verdict(units), units)


def _lender(units: tuple[UnitCheck, ...]) -> bool:
    return all(c.used < c.nominal for c in units)


def _verdict(units: tuple[UnitCheck, ...]) -> Verdict:
    if any(c.over_limit for c in units):
        return Verdict.OVER_LIMIT
    borrows = any(c.borrowed for c in units)
    if not borrows and not any(c.short for c in units):
        return Verdict.NOMINAL
    if borrows and not any(c.crowded for c in units):
        return Verdict.BORROW
    if _lender(units) and any(c.short for c in units) and all(c.short <= c.owed for c in units):
        return Verdict.RECLAIM
    return Verdict.NO_IDLE
