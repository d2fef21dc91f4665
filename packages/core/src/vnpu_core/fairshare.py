"""Fair sharing of a cluster's NPUs between teams: the teams, their pods and the cohort.

Teams share one ``Cohort``: the cluster's capacity as a resource vector (a mapping from a
unit name such as ``aicore``, ``memory`` in MiB, ``chips``, ``vnpus`` or a per-model unit
such as ``Ascend310P-aicore`` to a whole number; the modules only add and compare, so any
units work). Each ``Team`` has a weight, a nominal (guaranteed) vector and a per-unit limit
on what it may borrow above that nominal. A ``Pod`` is what one pending or running pod
asks or holds, for its team.

This module holds those types and the vector sums the policy is made of; the policy is in
three modules that build on it:

- ``vnpu_core.ranking`` (``order``) ranks pending pods: teams below their nominal
  (lenders) first, then by weighted dominant share;
- ``vnpu_core.borrowing`` (``check``) says whether one pod may start now: within its
  team's nominal, by borrowing what the other teams leave idle, or why not;
- ``vnpu_core.reclaim`` (``reclaim``) picks the borrowers' pods to evict so that a lender
  gets the capacity it is owed back.

Pure: the caller turns pods and team configuration into vectors, places pods on nodes and
evicts. The scheduler (``vnpu_scheduler.shares``, ``quotagate``, ``reclaimer``) and
``benchmarks/bench_fairshare.py`` use it; the policy is described in docs/fair-sharing.md.

A team or cohort that cannot be used raises ``FairShareError`` (an ``errors.VnpuError``)
naming the team, the field and the value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from vnpu_core import errors

Vector = Mapping[str, int]
"""Amounts per unit; a unit that is absent is 0."""


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


def asked(demand: Vector) -> list[str]:
    """The units ``demand`` asks for (amount above 0), in name order."""
    return sorted(unit for unit, amount in demand.items() if amount > 0)


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

    def standing(self, held: Vector, demand: Vector) -> str:
        """What the team holds plus what ``demand`` asks, against the nominal, per unit asked."""
        parts = [
            f"{u} {held.get(u, 0)}+{demand[u]} of {self.nominal.get(u, 0)}" for u in asked(demand)
        ]
        return "; ".join(parts) or "asks nothing"


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
