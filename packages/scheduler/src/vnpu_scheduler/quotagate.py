"""Where the NPU quotas meet the verbs: the filter's and the webhook's checks, and what is reported.

``app`` builds one ``QuotaGate`` over the ``tenancy.QuotaBook`` and the node cache and hands
its methods to the parts that need them:

* ``filter_refusal`` (``extender``): a pod whose ask (``holdings.of_request``) does not fit
  its namespace's ResourceQuotas or its team's share, on the usage the cache holds now
  (``ClusterCache.namespace_usage``), is refused on every node as unresolvable, with one
  sentence per quota; each distinct refusal of a pod is also recorded once as a Warning
  event ``NPUQuotaExceeded``. The bind checks again under the quota lock (``binder``).
* ``admission_refusal`` (``webhook``): the request alone, on no usage at all, passes a
  limit: it could never be bound, so it is denied at creation.
* ``poll_tenants``: reads the tenants ConfigMap into the book (``app`` calls it every
  ``config_poll_seconds``).
* ``snapshot`` (``metrics.QuotaCollector``, once per scrape): every ResourceQuota limit
  with its use, every team's use, nominal, limit, borrowed and pending demand, and the
  AI-core-seconds and MiB-seconds consumed by namespace and team (``tenancy.Meter``).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import structlog

from vnpu_core import holdings, quotas, requests
from vnpu_scheduler import cache, cluster, metrics, tenancy
from vnpu_service import kubeapi

log = structlog.get_logger(__name__)
Json = dict[str, Any]
EVENTS_REMEMBERED = 4096
EventSink = Callable[[Json, str, str, str], None]  # pod, type, reason, message


class QuotaGate:
    """The quota checks of filter and admission, the tenants poll and the quota metrics."""

    def __init__(
        self,
        book: tenancy.QuotaBook,
        nodes: cache.ClusterCache,
        stats: metrics.Metrics,
    ) -> None:
        self.book = book
        self._cache = nodes
        self._stats = stats
        self.event: EventSink = lambda *_: None  # app sets the binder's event recorder
        self.demand = tenancy.Demand()
        self.meter = tenancy.Meter()
        self._told: collections.OrderedDict[tuple[str, str], None] = collections.OrderedDict()

    def filter_refusal(self, pod: Json, request: requests.PodRequest) -> str:
        """Why the pod's quotas hold it back now ('' when they do not)."""
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        ask = holdings.of_request(request)
        self.demand.seen(str(meta.get("uid") or ""), namespace, ask)
        if not self.book.limited(namespace):
            return ""
        usage = self._cache.namespace_usage()
        self.meter.advance(usage)
        refused = self.book.refusals(ask, namespace, usage)
        if not refused:
            return ""
        for item in refused:
            self._stats.quota_refusals.labels("filter", item.rule).inc()
        message = "; ".join(item.message for item in refused)
        self._tell(pod, message)
        return message

    def _tell(self, pod: Json, message: str) -> None:
        """One ``NPUQuotaExceeded`` event per pod and distinct refusal."""
        key = (str((pod.get("metadata") or {}).get("uid") or ""), message)
        if key in self._told:
            return
        self._told[key] = None
        if len(self._told) > EVENTS_REMEMBERED:
            self._told.popitem(last=False)
        self.event(pod, "Warning", "NPUQuotaExceeded", f"Held back by its NPU quota: {message}")

    def admission_refusal(self, namespace: str, request: requests.PodRequest) -> str:
        """Why the request alone, with nothing else in use, passes one of its limits ('' if not)."""
        if not self.book.limited(namespace):
            return ""
        refused = self.book.refusals(holdings.of_request(request), namespace, {})
        for item in refused:
            self._stats.quota_refusals.labels("admission", item.rule).inc()
        return "; ".join(item.message for item in refused)

    def poll_tenants(self, api: cluster.Cluster) -> None:
        """Read the tenants ConfigMap named by the book (blocking; run in the API pool)."""
        source = self.book.tenants_status.source
        if not source:
            return
        namespace, name = source.split("/", 1)
        try:
            found = api.get_config_map(namespace, name)
        except kubeapi.ApiError as exc:
            log.warning("tenants_config_unread", source=source, error=str(exc))
            return
        self.book.set_tenants(found)

    def snapshot(self) -> metrics.QuotaSnapshot:
        usage = self._cache.namespace_usage()
        self.meter.advance(usage)
        teams = self.book.teams
        bound = [uid for uid in self.demand.uids() if self._cache.bound_node(uid)]
        pending = self.demand.by_namespace(bound)
        team_of = {ns: t.name for t in teams.teams for ns in t.namespaces}
        team_pending: dict[tuple[str, str], int] = {}
        for namespace, ask in pending.items():
            team = team_of.get(namespace)
            if team is None:
                continue
            for key in teams.units():
                if ask[key]:
                    slot = (team, key.name)
                    team_pending[slot] = team_pending.get(slot, 0) + ask[key]
        aicore, memory = self.meter.totals()
        return metrics.QuotaSnapshot(
            limits=quotas.quota_standings(self.book.applied(), usage),
            teams=quotas.team_standings(teams, usage),
            team_pending=team_pending,
            namespaces=_by_unit(usage),
            namespace_pending=_by_unit(pending),
            aicore_seconds=aicore,
            memory_mib_seconds=memory,
            team_of=team_of,
            tenants_ok=not self.book.tenants_status.error,
        )


def _by_unit(amounts: dict[str, holdings.Amount]) -> dict[tuple[str, str], int]:
    """(namespace, unit name) -> amount, for the all-models AI cores and memory and every
    per-model unit."""
    return {
        (namespace, key.name): value
        for namespace, amount in amounts.items()
        for key, value in amount.values.items()
        if key.model or key.unit in (holdings.Unit.AICORE, holdings.Unit.MEMORY)
    }
