"""The NPU quotas the scheduler enforces, kept current, and the check filter, bind and webhook ask.

``QuotaBook`` holds every namespace's ResourceQuotas (an ``informer.Informer`` over
``resourcequotas`` calls ``replace``/``upsert``/``remove``, each read by
``vnpu_core.quotas.read_resource_quota``) and the teams of the tenants ConfigMap
(``--tenants-config namespace/name``, read by ``poll_tenants`` every
``config_poll_seconds``; ``vnpu_core.tenants``). ``refusals`` is ``vnpu_core.quotas.check``
over them, with the usage the caller passes (the cache's ``namespace_usage`` in the filter,
a fresh LIST in the bind).

Failure behaviour: a ResourceQuota that cannot be read refuses the pods of its namespace
with a refusal that names its field and value (only cluster administrators write quotas;
applying none of it would let the namespace past the limit they meant). A tenants config
that cannot be read keeps the last good teams (none at start) and is shown by ``/readyz``,
``vnpu_scheduler_tenants_config_ok`` and the log. A ConfigMap that does not exist means no
teams.

``Demand`` remembers the asks of NPU pods the filter has seen and that are not bound yet,
with what the last filter answered for each (``Pending``): the pending demand the metrics
report by namespace and team, the lenders the filter lets go first (``quotagate``) and the
pods the reclaimer gets capacity back for (``reclaimer``). ``Meter`` integrates usage
over time into AI-core-seconds and MiB-seconds.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import structlog

from vnpu_core import catalog, errors, holdings, quotas, requests, tenants
from vnpu_core.holdings import Amount

log = structlog.get_logger(__name__)
Json = dict[str, Any]
PENDING_SECONDS = 600.0  # a pod the filter has not seen for this long no longer counts as demand


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A ResourceQuota whose NPU limits cannot be read: its namespace's pods are refused."""

    quota: str  # namespace/name
    error: errors.QuotaError

    @property
    def message(self) -> str:
        return f"quota {self.quota} cannot be read, so its limits cannot be applied: {self.error}"


UNREADABLE = "unreadable-quota"  # the rule of a refusal by a ResourceQuota that cannot be read


@dataclass(frozen=True, slots=True)
class Refused:
    """One reason a pod does not fit its quotas: the rule (``quotas.Rule`` or UNREADABLE)."""

    rule: str
    message: str


@dataclass(frozen=True, slots=True)
class TenantsStatus:
    source: str  # namespace/name, or '' when no tenants config is set
    loaded: bool
    error: str = ""


class QuotaBook:
    """ResourceQuotas by namespace and the teams, read from the API; thread-safe."""

    def __init__(self, models: catalog.Catalog, tenants_config: str = "") -> None:
        self._models = models
        self._lock = threading.Lock()
        self._quotas: dict[str, dict[str, quotas.ResourceQuota | Unreadable]] = {}
        self._teams = tenants.NONE
        self._source = tenants_config
        self._tenants_text: object = None
        self._status = TenantsStatus(tenants_config, not tenants_config)
        self.synced = threading.Event()

    # --- ResourceQuotas (informer callbacks) ---------------------------------------------

    def set_catalog(self, models: catalog.Catalog) -> None:
        with self._lock:
            self._models = models

    def replace(self, items: Iterable[Json]) -> None:
        with self._lock:
            self._quotas = {}
            for obj in items:
                self._put(obj)
        self.synced.set()

    def upsert(self, obj: Json) -> None:
        with self._lock:
            self._put(obj)

    def remove(self, obj: Json) -> None:
        namespace, name = _name(obj)
        with self._lock:
            self._quotas.get(namespace, {}).pop(name, None)

    def _put(self, obj: Json) -> None:
        namespace, name = _name(obj)
        try:
            read: quotas.ResourceQuota | Unreadable = quotas.read_resource_quota(obj, self._models)
        except errors.QuotaError as exc:
            read = Unreadable(f"{namespace}/{name}", exc)
            log.error("resource_quota_unreadable", quota=read.quota, error=str(exc))
        self._quotas.setdefault(namespace, {})[name] = read

    # --- the tenants config -----------------------------------------------------------------

    @property
    def teams(self) -> tenants.Tenants:
        return self._teams

    @property
    def tenants_status(self) -> TenantsStatus:
        return self._status

    def set_tenants(self, obj: Json | None) -> bool:
        """Use the tenants ConfigMap as read now (None: it does not exist); False when unreadable."""
        text = None if obj is None else (obj.get("data") or {}).get(tenants.CONFIG_KEY)
        if text == self._tenants_text and self._status.loaded:
            return True
        try:
            teams = tenants.NONE if obj is None else tenants.from_config_map(obj, self._models)
        except errors.QuotaError as exc:
            if str(exc) != self._status.error:
                log.error("tenants_config_rejected", source=self._source, error=str(exc))
            self._status = TenantsStatus(self._source, self._status.loaded, str(exc))
            return False
        self._teams = teams
        self._tenants_text = text
        self._status = TenantsStatus(self._source, True)
        log.info("tenants_config_loaded", source=self._source, teams=len(teams.teams))
        return True

    # --- the check ----------------------------------------------------------------------------

    def of_namespace(self, namespace: str) -> tuple[quotas.ResourceQuota | Unreadable, ...]:
        with self._lock:
            return tuple(self._quotas.get(namespace, {}).values())

    def applied(self) -> list[quotas.ResourceQuota]:
        """Every readable, unscoped ResourceQuota (for the metrics)."""
        with self._lock:
            found = [q for by_name in self._quotas.values() for q in by_name.values()]
        return [q for q in found if isinstance(q, quotas.ResourceQuota) and not q.scoped]

    def scope(self, namespace: str) -> tuple[str, ...]:
        """The namespaces whose usage the check of a pod in ``namespace`` reads: its team's
        (every team's when the team rule may look at the cohort), or the namespace alone."""
        team = self._teams.team_of(namespace)
        if team is None:
            return (namespace,)
        return tuple(sorted({ns for t in self._teams.teams for ns in t.namespaces}))

    def limited(self, namespace: str) -> bool:
        """True when a pod of ``namespace`` has any quota or team to answer to."""
        return bool(self.of_namespace(namespace)) or self._teams.team_of(namespace) is not None

    def refusals(
        self, ask: Amount, namespace: str, usage: Mapping[str, Amount]
    ) -> tuple[Refused, ...]:
        """Why ``ask`` does not fit the quotas of ``namespace`` (empty: it fits)."""
        held = self.of_namespace(namespace)
        found = [Refused(UNREADABLE, q.message) for q in held if isinstance(q, Unreadable)]
        readable = [q for q in held if isinstance(q, quotas.ResourceQuota)]
        checked = quotas.check(ask, namespace, usage, readable, self._teams)
        return tuple(found) + tuple(Refused(r.rule.value, r.message) for r in checked)


def _name(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


class Outcome(StrEnum):
    """What the last filter answered for a pending pod (``Pending.outcome``)."""

    UNSEEN = ""  # no filter has finished for it yet (prioritize alone, or still running)
    FIT = "fit"  # some node fits
    CAPACITY = "capacity"  # no node fits, and some lack only room: evicting could help
    QUOTA = "quota"  # its NPU quotas, or lenders first, hold it back
    UNRESOLVABLE = "unresolvable"  # no node could take it, whatever was evicted


@dataclass(frozen=True, slots=True)
class Pending:
    """An NPU pod the filter saw and that is not bound yet: its ask and its last filter.

    ``first_seen`` and ``filtered`` are ``time.monotonic`` seconds; ``created`` is the pod's
    creationTimestamp in seconds since the epoch (0 when absent); ``nodes`` the candidate
    nodes of the last filter; ``pod`` the object kube-scheduler sent (never modify it).
    """

    uid: str
    namespace: str
    name: str
    ask: Amount
    priority: int = 0
    created: float = 0.0
    first_seen: float = 0.0
    last_seen: float = 0.0
    outcome: Outcome = Outcome.UNSEEN
    filtered: float = 0.0
    nodes: tuple[str, ...] = ()
    request: requests.PodRequest | None = None
    pod: Mapping[str, Any] | None = None

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}"


class Demand:
    """Asks of NPU pods the filter saw and that are not bound yet, by pod UID.

    ``app`` drops a pod once the watch shows it bound or gone (``done``, ``retain``); a pod
    the filter has not seen for PENDING_SECONDS drops out by itself.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._asks: dict[str, Pending] = {}

    def seen(
        self,
        uid: str,
        namespace: str,
        ask: Amount,
        pod: Mapping[str, Any] | None = None,
        request: requests.PodRequest | None = None,
    ) -> None:
        if not uid:
            return
        now = time.monotonic()
        meta = (pod or {}).get("metadata") or {}
        spec = (pod or {}).get("spec") or {}
        priority = spec.get("priority")
        with self._lock:
            known = self._asks.get(uid)
            self._asks[uid] = Pending(
                uid,
                namespace,
                str(meta.get("name") or ""),
                ask,
                priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
                epoch_seconds(meta.get("creationTimestamp")),
                known.first_seen if known is not None else now,
                now,
                known.outcome if known is not None else Outcome.UNSEEN,
                known.filtered if known is not None else 0.0,
                known.nodes if known is not None else (),
                request,
                pod,
            )

    def filtered(self, uid: str, outcome: Outcome, nodes: tuple[str, ...]) -> None:
        """Record what the filter just answered for the pod (seen before by ``seen``)."""
        with self._lock:
            known = self._asks.get(uid)
            if known is not None:
                self._asks[uid] = dataclasses.replace(
                    known, outcome=outcome, filtered=time.monotonic(), nodes=nodes
                )

    def done(self, uid: str) -> None:
        with self._lock:
            self._asks.pop(uid, None)

    def retain(self, uids: Iterable[str]) -> None:
        """Keep only the pods in ``uids`` (after a re-list: the pending pods that exist)."""
        keep = set(uids)
        with self._lock:
            for uid in [u for u in self._asks if u not in keep]:
                del self._asks[uid]

    def pending(self, bound: Iterable[str] = ()) -> list[Pending]:
        """Every pending pod; pods in ``bound`` or unseen for PENDING_SECONDS drop out."""
        now = time.monotonic()
        with self._lock:
            for uid in list(bound):
                self._asks.pop(uid, None)
            for uid, known in list(self._asks.items()):
                if now - known.last_seen > PENDING_SECONDS:
                    del self._asks[uid]
            return list(self._asks.values())

    def uids(self) -> list[str]:
        with self._lock:
            return list(self._asks)


def epoch_seconds(stamp: object) -> float:
    """An RFC 3339 timestamp (``creationTimestamp``) in seconds since the epoch; 0 if unreadable."""
    if not isinstance(stamp, str) or not stamp:
        return 0.0
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


class Meter:
    """AI-core-seconds and MiB-seconds by namespace: the integral of usage over time.

    ``advance`` adds the usage last seen times the time since; it is called on every scrape
    and every filter, so a change is counted from the next of those after it happened.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: tuple[float, dict[str, Amount]] | None = None
        self.aicore_seconds: dict[str, float] = {}
        self.memory_mib_seconds: dict[str, float] = {}

    def advance(self, usage: Mapping[str, Amount]) -> None:
        now = time.monotonic()
        aicore = holdings.Key(holdings.ALL_MODELS, holdings.Unit.AICORE)
        memory = holdings.Key(holdings.ALL_MODELS, holdings.Unit.MEMORY)
        with self._lock:
            if self._last is not None:
                since, held = self._last
                elapsed = now - since
                for namespace, amount in held.items():
                    self.aicore_seconds[namespace] = (
                        self.aicore_seconds.get(namespace, 0.0) + amount[aicore] * elapsed
                    )
                    self.memory_mib_seconds[namespace] = (
                        self.memory_mib_seconds.get(namespace, 0.0) + amount[memory] * elapsed
                    )
            self._last = (now, dict(usage))

    def totals(self) -> tuple[dict[str, float], dict[str, float]]:
        with self._lock:
            return dict(self.aicore_seconds), dict(self.memory_mib_seconds)
