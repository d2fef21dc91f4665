"""NPU quotas in NPU units, and the check a pod's ask must pass before it is bound.

Two kinds of quota, counted in ``holdings`` units (AI cores, device memory summed over
every device, whole chips, hard vNPUs, devices; per chip model or for all):

* a namespace's ResourceQuota objects, read by ``read_resource_quota`` from the dicts the
  API returns. Of ``spec.hard`` it reads ``limits.huawei.com/<CW>-memory`` (the real total
  MiB of that model, memory x devices), ``requests.huawei.com/<CW>`` (devices of that
  model), ``limits.vnpu.io/<unit>`` (all models) and ``limits.vnpu.io/<CW>-<unit>`` (one
  model), with ``<unit>`` one of ``aicore memory chips vnpus devices``; kube-apiserver
  accepts the ``limits.`` names and never counts them itself. Other entries are ignored;
  a quota with ``spec.scopes`` or ``spec.scopeSelector`` is read but not applied
  (``scoped``), its pod selection is not modelled;
* the teams of ``vnpu_core.tenants``: a team may use up to nominal + borrowingLimit, and
  above its nominal only while the cohort (every team) stays within the sum of all teams'
  nominal (Kueue's rule: idle capacity is lent). Each unit is judged alone with the
  arithmetic of ``borrowing.UnitCheck``; a unit within the nominal is never refused.
  docs/fair-sharing.md says how this differs from ``borrowing.check``'s verdict.

``check(ask, namespace, usage, quotas, teams)`` returns the refusals (empty: the pod
fits), each naming the quota, the resource or unit, used, asked and the limit, with a
``message`` for ``kubectl describe pod``. ``usage`` is what every namespace holds
(``holdings.usage_by_namespace`` of the bound, unfinished pods, plus the asks of pods
assumed bound); only the units the pod asks for are checked, as Kubernetes does.

For metrics: ``quota_standings`` (per ResourceQuota limit: used, limit),
``team_standings`` (per team and unit: used, nominal, limit, borrowed) and ``team_usage``.
The scheduler's filter and bind, its metrics and the planner (``vnpu_core.plan``) call
this module. Pure; reading errors are ``errors.QuotaError(source, path, value, problem)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from vnpu_core import borrowing, catalog, errors, holdings, tenants
from vnpu_core.holdings import Amount, Key, Unit

VNPU_PREFIX = "limits.vnpu.io/"
_PER_MODEL_UNITS = (Unit.AICORE, Unit.MEMORY, Unit.CHIPS, Unit.VNPUS, Unit.DEVICES)


@dataclass(frozen=True, slots=True)
class Limit:
    """One ``spec.hard`` entry vnpu enforces: its resource name, the key it limits, the amount."""

    resource: str  # e.g. limits.huawei.com/Ascend310P-memory
    key: Key
    value: int


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    """The NPU limits of one ResourceQuota object."""

    namespace: str
    name: str
    limits: tuple[Limit, ...]
    scoped: bool = False  # has scopes or a scopeSelector: not applied

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}"


def resource_names(models: catalog.Catalog) -> dict[str, Key]:
    """Every ``spec.hard`` name vnpu reads, and the key each one limits."""
    names = {f"{VNPU_PREFIX}{unit.value}": Key(holdings.ALL_MODELS, unit) for unit in Unit}
    for model in models:
        word = model.common_word
        names[f"limits.{model.memory_resource}"] = Key(word, Unit.MEMORY)
        names[f"requests.{model.resource_name}"] = Key(word, Unit.DEVICES)
        for unit in _PER_MODEL_UNITS:
            names[f"{VNPU_PREFIX}{word}-{unit.value}"] = Key(word, unit)
    return names


def read_resource_quota(
    obj: Mapping[str, Any], models: catalog.Catalog = catalog.BUILTIN
) -> ResourceQuota:
    """The NPU limits of a ResourceQuota dict. Raises QuotaError naming the object, the
    field path and the value; an unknown ``limits.vnpu.io/`` name is an error too."""
    meta = obj.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name") or "")
    source = f"ResourceQuota {namespace}/{name}"
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise errors.QuotaError(source, "spec", spec, "must be a mapping")
    hard = spec.get("hard") or {}
    if not isinstance(hard, Mapping):
        raise errors.QuotaError(source, "spec.hard", hard, "must be a mapping")
    known = resource_names(models)
    limits: list[Limit] = []
    for resource, raw in hard.items():
        path = f'spec.hard["{resource}"]'
        key = known.get(str(resource))
        if key is None:
            if str(resource).startswith(VNPU_PREFIX):
                units = " ".join(u.value for u in Unit)
                problem = f"unknown vnpu quota resource; use {VNPU_PREFIX}[<chip>-]<unit>, unit one of {units}"
                raise errors.QuotaError(source, path, resource, problem)
            continue
        limits.append(Limit(str(resource), key, holdings.parse_amount(source, path, raw)))
    scoped = bool(spec.get("scopes") or spec.get("scopeSelector"))
    return ResourceQuota(namespace, name, tuple(limits), scoped)


# --- the check ---------------------------------------------------------------------------


class Rule(StrEnum):
    """Which rule refused a pod; values are stable and may be used as metric labels."""

    RESOURCE_QUOTA = "resource-quota"  # a namespace's ResourceQuota
    TEAM_LIMIT = "team-limit"  # the team would pass nominal + borrowingLimit
    NO_IDLE_CAPACITY = "no-idle-capacity"  # above nominal, and the cohort has no idle nominal


@dataclass(frozen=True, slots=True)
class Refusal:
    """One limit a pod's ask does not fit: ``used + asked > limit``.

    ``quota`` is the ResourceQuota ``namespace/name`` or the team name; ``resource`` the
    ``spec.hard`` name or the unit name. For NO_IDLE_CAPACITY, used and limit are the
    cohort's usage and the sum of every team's nominal; ``nominal`` is the team's own.
    """

    rule: Rule
    quota: str
    resource: str
    key: Key
    used: int
    asked: int
    limit: int
    nominal: int = 0
    borrowing_limit: int | None = None

    @property
    def message(self) -> str:
        unit = holdings.UNIT_WORDS[self.key.unit]
        over = f"used {self.used} + asked {self.asked} > limit {self.limit} {unit}"
        if self.rule is Rule.RESOURCE_QUOTA:
            return f"quota {self.quota} {self.resource}: {over}"
        if self.rule is Rule.TEAM_LIMIT:
            return (
                f"team {self.quota} {self.resource}: {over} "
                f"(nominal {self.nominal} + borrowingLimit {self.borrowing_limit})"
            )
        return (
            f"team {self.quota} {self.resource}: above its nominal {self.nominal} it borrows "
            f"idle capacity only: cohort used {self.used} + asked {self.asked} > "
            f"nominal {self.limit} {unit} of all teams"
        )


def team_usage(teams: tenants.Tenants, usage: Mapping[str, Amount]) -> dict[str, Amount]:
    """What each team's namespaces hold together, by team name (every team listed)."""
    return {
        team.name: holdings.total(usage.get(ns, holdings.ZERO) for ns in team.namespaces)
        for team in teams.teams
    }


def _quota_refusals(
    ask: Amount, namespace: str, used: Amount, quotas: Iterable[ResourceQuota]
) -> list[Refusal]:
    found: list[Refusal] = []
    for quota in quotas:
        if quota.namespace != namespace or quota.scoped:
            continue
        for limit in quota.limits:
            asked = ask[limit.key]
            if asked and used[limit.key] + asked > limit.value:
                found.append(
                    Refusal(
                        Rule.RESOURCE_QUOTA,
                        quota.label,
                        limit.resource,
                        limit.key,
                        used[limit.key],
                        asked,
                        limit.value,
                    )
                )
    return found


def _team_refusals(
    ask: Amount, team: tenants.Team, teams: tenants.Tenants, usage: Mapping[str, Amount]
) -> list[Refusal]:
    """Unit by unit, ``borrowing.UnitCheck``'s arithmetic: a unit the ask takes above the
    nominal is refused past the borrowing limit, else when the cohort lacks the idle room."""
    by_team = team_usage(teams, usage)
    own = by_team[team.name]
    cohort = holdings.total(by_team.values())
    found: list[Refusal] = []
    for key in teams.units():
        if not ask[key]:
            continue
        unit = borrowing.UnitCheck(
            key.name,
            ask[key],
            own[key],
            team.nominal.get(key, 0),
            team.borrowing_limit.get(key),
            cohort[key],
            teams.cohort_nominal(key),
        )
        if not unit.borrowed:
            continue
        limit = team.limit(key)
        if unit.over_limit and limit is not None:
            refusal = Refusal(
                Rule.TEAM_LIMIT,
                team.name,
                key.name,
                key,
                unit.used,
                unit.demand,
                limit,
                unit.nominal,
                unit.limit,
            )
            found.append(refusal)
        elif unit.short:
            refusal = Refusal(
                Rule.NO_IDLE_CAPACITY,
                team.name,
                key.name,
                key,
                unit.cohort_used,
                unit.demand,
                unit.pool,
                unit.nominal,
            )
            found.append(refusal)
    return found


def check(
    ask: Amount,
    namespace: str,
    usage: Mapping[str, Amount],
    quotas: Iterable[ResourceQuota] = (),
    teams: tenants.Tenants = tenants.NONE,
) -> tuple[Refusal, ...]:
    """Every limit that ``ask`` (``holdings.of_request``) in ``namespace`` would pass.

    ``usage`` maps every namespace to what it holds (the ask not included); ``quotas`` may
    hold the ResourceQuotas of any namespace, those of ``namespace`` apply. A namespace in
    no team is checked against its ResourceQuotas only.
    """
    used = usage.get(namespace, holdings.ZERO)
    found = _quota_refusals(ask, namespace, used, quotas)
    team = teams.team_of(namespace)
    if team is not None:
        found += _team_refusals(ask, team, teams, usage)
    return tuple(found)


# --- standings, for metrics and the planner -----------------------------------------------


@dataclass(frozen=True, slots=True)
class QuotaStanding:
    """How much of one ResourceQuota limit is used."""

    quota: str  # namespace/name
    namespace: str
    resource: str
    key: Key
    used: int
    limit: int


@dataclass(frozen=True, slots=True)
class TeamStanding:
    """A team's use of one unit: against its nominal, its limit, and how much is borrowed."""

    team: str
    key: Key
    used: int
    nominal: int
    limit: int | None  # nominal + borrowingLimit; None: borrowing without limit
    borrowed: int  # used above nominal


def quota_standings(
    quotas: Iterable[ResourceQuota], usage: Mapping[str, Amount]
) -> tuple[QuotaStanding, ...]:
    """Used and limit of every limit of every applied ResourceQuota."""
    return tuple(
        QuotaStanding(
            q.label,
            q.namespace,
            limit.resource,
            limit.key,
            usage.get(q.namespace, holdings.ZERO)[limit.key],
            limit.value,
        )
        for q in quotas
        if not q.scoped
        for limit in q.limits
    )


def team_standings(teams: tenants.Tenants, usage: Mapping[str, Amount]) -> tuple[TeamStanding, ...]:
    """Every team's used, nominal, limit and borrowed for every unit some team names."""
    by_team = team_usage(teams, usage)
    standings: list[TeamStanding] = []
    for team in teams.teams:
        for key in teams.units():
            used = by_team[team.name][key]
            nominal = team.nominal.get(key, 0)
            limit = team.limit(key)
            standings.append(
                TeamStanding(team.name, key, used, nominal, limit, max(0, used - nominal))
            )
    return tuple(standings)


def borrowed(teams: tenants.Tenants, usage: Mapping[str, Amount]) -> dict[str, Amount]:
    """By team, what it uses above its nominal in the units some team names."""
    by_team = team_usage(teams, usage)
    keys = teams.units()
    return {
        team.name: Amount({k: max(0, by_team[team.name][k] - team.nominal.get(k, 0)) for k in keys})
        for team in teams.teams
    }
