"""Teams that share the cluster's NPUs: their namespaces, fair-share weight, nominal and borrowing.

The config is YAML text under one key (``tenants.yaml``) of a ConfigMap, no CRD::

    teams:
      - name: vision
        namespaces: [vision, vision-dev]
        weight: 2                    # fair-share weight, default 1
        nominal:                     # guaranteed share, in unit names (vnpu_core.holdings)
          Ascend310P-aicore: 32
          Ascend310P-memory: 98304
        borrowingLimit:              # how far above nominal, from idle capacity
          Ascend310P-aicore: 16      # absent: unlimited; 0: no borrowing

Every team belongs to one cohort, the cluster: a team may use more than its nominal only
while the cohort as a whole stays within the sum of every team's nominal (idle capacity is
lent), and never more than nominal + borrowingLimit. The rule is applied by
``vnpu_core.quotas.check``; docs/quotas.md describes the format.

``load`` reads the text, ``from_config_map`` a ConfigMap dict as the API returns it, and
``read`` a document already parsed; each raises ``errors.QuotaError`` naming the source, the
path inside the document (``teams[1].nominal.memory``) and the value. Called by the
scheduler (when the ConfigMap changes) and by ``vnpu plan --tenants``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vnpu_core import catalog, errors, holdings, yamldoc

CONFIG_KEY = "tenants.yaml"
MAX_BYTES = yamldoc.MAX_BYTES  # of the YAML text, in UTF-8
_TOP_KEYS = ("teams",)
_TEAM_KEYS = ("name", "namespaces", "weight", "nominal", "borrowingLimit")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True, slots=True)
class Team:
    """A group of namespaces with a weight, a nominal share and a borrowing limit per unit."""

    name: str
    namespaces: tuple[str, ...]
    weight: float = 1.0
    nominal: Mapping[holdings.Key, int] = field(default_factory=dict)
    borrowing_limit: Mapping[holdings.Key, int] = field(default_factory=dict)  # absent: unlimited

    def limit(self, key: holdings.Key) -> int | None:
        """Nominal + borrowingLimit of ``key``; None when the team may borrow without limit."""
        borrowing = self.borrowing_limit.get(key)
        return None if borrowing is None else self.nominal.get(key, 0) + borrowing


@dataclass(frozen=True)
class Tenants:
    """Every team of the cluster (one cohort), looked up by namespace."""

    teams: tuple[Team, ...] = ()
    _by_namespace: dict[str, Team] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_namespace = {ns: team for team in self.teams for ns in team.namespaces}
        object.__setattr__(self, "_by_namespace", by_namespace)

    def team_of(self, namespace: str) -> Team | None:
        return self._by_namespace.get(namespace)

    def team(self, name: str) -> Team | None:
        return next((t for t in self.teams if t.name == name), None)

    def units(self) -> tuple[holdings.Key, ...]:
        """The keys some team names in its nominal or borrowingLimit: the ones the team rule covers."""
        found = {k for t in self.teams for k in (*t.nominal, *t.borrowing_limit)}
        return tuple(sorted(found))

    def cohort_nominal(self, key: holdings.Key) -> int:
        """The sum of every team's nominal of ``key``: what the cohort may use before anyone
        borrows beyond idle capacity."""
        return sum(t.nominal.get(key, 0) for t in self.teams)


NONE = Tenants()


@dataclass(frozen=True, slots=True)
class _Reader:
    source: str
    models: catalog.Catalog

    def fail(self, path: str, value: object, problem: str) -> errors.QuotaError:
        return errors.QuotaError(self.source, path, value, problem)

    def keys(self, path: str, value: Mapping[Any, Any], allowed: tuple[str, ...]) -> None:
        for key in value:
            if key not in allowed:
                where = f"{path}.{key}" if path else str(key)
                raise self.fail(where, value[key], f"unknown key; use {', '.join(allowed)}")

    def amounts(self, path: str, raw: object) -> dict[holdings.Key, int]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            raise self.fail(path, raw, "must be a mapping of unit names to amounts")
        found: dict[holdings.Key, int] = {}
        for name, value in raw.items():
            at = f"{path}.{name}"
            key = holdings.parse_key(name) if isinstance(name, str) else None
            if key is None:
                units = ", ".join(u.value for u in holdings.Unit)
                raise self.fail(at, name, f"unknown unit; use {units}, or <chip>-<unit>")
            if key.model and self.models.by_common_word(key.model) is None:
                known = ", ".join(m.common_word for m in self.models)
                raise self.fail(at, name, f"unknown chip model {key.model!r}; known: {known}")
            found[key] = holdings.parse_amount(self.source, at, value)
        return found


def _weight(read: _Reader, path: str, raw: object) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise read.fail(path, raw, "must be a positive number")
    if not math.isfinite(raw) or raw <= 0:
        raise read.fail(path, raw, "must be a positive number")
    return float(raw)


def _namespaces(read: _Reader, path: str, raw: object) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw:
        raise read.fail(path, raw, "must list at least one namespace")
    names: list[str] = []
    for i, item in enumerate(raw):
        if not isinstance(item, str) or not _DNS_LABEL.match(item):
            raise read.fail(f"{path}[{i}]", item, "must be a namespace name (a DNS label)")
        if item in names:
            raise read.fail(f"{path}[{i}]", item, "is listed twice")
        names.append(item)
    return tuple(names)


def read(
    document: object, source: str = CONFIG_KEY, models: catalog.Catalog = catalog.BUILTIN
) -> Tenants:
    """The teams of a parsed config document (None or empty: no teams). Raises QuotaError."""
    reader = _Reader(source, models)
    if document is None:
        return NONE
    if not isinstance(document, dict):
        raise reader.fail("(document)", document, "must be a mapping with a teams: list")
    reader.keys("", document, _TOP_KEYS)
    entries = document.get("teams")
    if entries is None:
        return NONE
    if not isinstance(entries, list):
        raise reader.fail("teams", entries, "must be a list of teams")
    teams: list[Team] = []
    owners: dict[str, str] = {}  # namespace -> path of the team that has it
    names: dict[str, str] = {}
    for i, entry in enumerate(entries):
        at = f"teams[{i}]"
        if not isinstance(entry, dict):
            raise reader.fail(at, entry, "must be a mapping")
        reader.keys(at, entry, _TEAM_KEYS)
        name = entry.get("name")
        if not isinstance(name, str) or not _DNS_LABEL.match(name):
            raise reader.fail(f"{at}.name", name, "must be a team name (a DNS label)")
        if name in names:
            raise reader.fail(f"{at}.name", name, f"team name repeats {names[name]}")
        names[name] = at
        namespaces = _namespaces(reader, f"{at}.namespaces", entry.get("namespaces"))
        for j, namespace in enumerate(namespaces):
            if namespace in owners:
                path = f"{at}.namespaces[{j}]"
                raise reader.fail(path, namespace, f"namespace is already in {owners[namespace]}")
            owners[namespace] = f"team {name} ({at})"
        weight = _weight(reader, f"{at}.weight", entry.get("weight", 1))
        nominal = reader.amounts(f"{at}.nominal", entry.get("nominal"))
        borrowing = reader.amounts(f"{at}.borrowingLimit", entry.get("borrowingLimit"))
        teams.append(Team(name, namespaces, weight, nominal, borrowing))
    return Tenants(tuple(teams))


def load(text: str, source: str = CONFIG_KEY, models: catalog.Catalog = catalog.BUILTIN) -> Tenants:
    """The teams of a config's YAML text. Raises QuotaError (YAML errors name line and column;
    anchors, aliases, a text above ``MAX_BYTES`` and deep nesting are refused, ``yamldoc``)."""
    try:
        document = yamldoc.load(text, max_bytes=MAX_BYTES)
    except errors.DocumentError as exc:
        shown = exc.value.strip() if isinstance(exc.value, str) else exc.value
        problem = f"{exc.summary}: {exc.detail}"
        raise errors.QuotaError(source, exc.where or "(document)", shown, problem) from exc
    return read(document, source, models)


def from_config_map(obj: Mapping[str, Any], models: catalog.Catalog = catalog.BUILTIN) -> Tenants:
    """The teams of a ConfigMap dict (its ``data["tenants.yaml"]``; absent: no teams)."""
    meta = obj.get("metadata") or {}
    source = f"ConfigMap {meta.get('namespace', '')}/{meta.get('name', '')} {CONFIG_KEY}"
    text = (obj.get("data") or {}).get(CONFIG_KEY)
    if text is None:
        return NONE
    if not isinstance(text, str):
        raise errors.QuotaError(source, f'data["{CONFIG_KEY}"]', text, "must be a string")
    return load(text, source, models)
