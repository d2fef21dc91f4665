"""Where the NPU quotas meet the verbs: the filter's and the webhook's checks, and what is reported.

``app`` builds one ``QuotaGate`` over the ``tenancy.QuotaBook`` and the node cache and hands
its methods to the parts that need them:

* ``filter_refusal`` (``extender``): a pod whose ask (``holdings.of_request``) does not fit
  its namespace's ResourceQuotas or its team's share, on the usage the cache holds now
  (``ClusterCache.namespace_usage``), is refused on every node as unresolvable, with one
  sentence per quota; each distinct refusal of a pod is also recorded once as a Warning
  event ``NPUQuotaExceeded``. The bind checks again under the quota lock (``binder``).
  A pod that fits but would borrow is held back the same way while a team below its
  nominal has pods pending for the units it would borrow (lenders first, rule
  ``lender-pending``: ``shares.lender_waiting``); the bind does not check that again.
* ``filtered`` (``extender``, after each filter) records what the filter answered for a
  pending pod in ``demand`` (``tenancy.Pending``), which ``pending`` lists for the
  reclaimer; ``pods_listed``, ``pod_changed`` and ``pod_removed`` (the pod informer, via
  ``app``) drop the pods that are bound, being deleted or gone.
* ``admission_refusal`` (``webhook``): the request alone, on no usage at all, passes a
  limit: it could never be bound, so it is denied at creation.
* ``poll_tenants``: reads the tenants ConfigMap into the book (``app`` calls it every
  ``config_poll_seconds``).
* ``snapshot`` (``metrics.QuotaCollector``, once per scrape): every ResourceQuota limit
  with its use, every team's use, nominal, limit, borrowed and pending demand, the
  AI-core-seconds and MiB-seconds consumed by namespace and team (``tenancy.Meter``), and
  ``unchecked``: the pods in namespaces under an NPU quota that hold chips no quota check
  ran for.

Quotas are checked where vnpu places a pod (filter, bind). A pod that reaches a node some
other way (a preset ``spec.nodeName``, another scheduler, chips its device plugin granted
with no decision on the pod) still counts against its namespace's quota, at least as much
as its node granted (``cache.ClusterCache.namespace_usage``), but nothing refused it: such a
pod can take a namespace past its limit. ``unchecked`` names those pods so that the
``VnpuQuotaExceeded`` alert can say who did. (The chart's admission policies refuse the
preset ``nodeName`` and forged decisions in the first place: docs/security.md.)
"""

from __future__ import annotations

import collections
from typing import Any

import structlog

from vnpu_core import fairshare, holdings, quotas, ranking, requests
from vnpu_scheduler import cache, cluster, events, metrics, shares, tenancy
from vnpu_service import kubeapi

log = structlog.get_logger(__name__)
Json = dict[str, Any]
EVENTS_REMEMBERED = 4096
LENDER_PENDING = "lender-pending"  # the rule of a refusal by lenders first
# A lender's pending pod counts for lenders first unless its own quotas, or nodes that could
# never take it, hold it back: waiting for it would block the borrower for nothing.
LENDING_OUTCOMES = frozenset(
    {tenancy.Outcome.UNSEEN, tenancy.Outcome.FIT, tenancy.Outcome.CAPACITY}
)
OTHER_SCHEDULER = "other_scheduler"
"""``unchecked``'s reason for a pod whose ``spec.schedulerName`` is not vnpu's (the others are
``ledger.Disagreement`` values: chips granted beyond what the pod's decision shows)."""


class QuotaGate:
    """The quota checks of filter and admission, the tenants poll and the quota metrics."""

    def __init__(
        self,
        book: tenancy.QuotaBook,
        nodes: cache.ClusterCache,
        stats: metrics.Metrics,
        scheduler_name: str = "vnpu-scheduler",
    ) -> None:
        self.book = book
        self._cache = nodes
        self._stats = stats
        self._scheduler_name = scheduler_name
        self.event: events.EventSink = lambda *_: None  # app sets the event recorder
        self.demand = tenancy.Demand()
        self.meter = tenancy.Meter()
        self._told: collections.OrderedDict[tuple[str, str], None] = collections.OrderedDict()

    def filter_refusal(self, pod: Json, request: requests.PodRequest) -> str:
        """Why the pod's quotas, or lenders first, hold it back now ('' when they do not)."""
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        uid = str(meta.get("uid") or "")
        ask = holdings.of_request(request)
        self.demand.seen(uid, namespace, ask, pod, request)
        if not self.book.limited(namespace):
            return ""
        usage = self._cache.namespace_usage()
        self.meter.advance(usage)
        refused = self.book.refusals(ask, namespace, usage)
        if not refused:
            refused = self._lenders_first(uid, namespace, ask, usage)
        if not refused:
            return ""
        for item in refused:
            self._stats.quota_refusals.labels("filter", item.rule).inc()
        message = "; ".join(item.message for item in refused)
        self._tell(pod, message)
        return message

    def _lenders_first(
        self, uid: str, namespace: str, ask: holdings.Amount, usage: dict[str, holdings.Amount]
    ) -> tuple[tenancy.Refused, ...]:
        """A pod that would borrow waits while a team below its nominal has pods pending that
        ask for the units it would borrow (``shares.lender_waiting``)."""
        teams = self.book.teams
        team = teams.team_of(namespace)
        if team is None:
            return ()
        pod = fairshare.Pod(uid, team.name, shares.vector(ask, teams.units()))
        others = (  # read only when the pod would borrow
            found
            for waiting in self.pending()
            if waiting.uid != uid and waiting.outcome in LENDING_OUTCOMES
            if (found := shares.pending_pod(teams, waiting)) is not None
        )
        used = shares.team_usage(teams, usage)
        message = shares.lender_waiting(pod, shares.cohort(teams), used, others)
        return (tenancy.Refused(LENDER_PENDING, message),) if message else ()

    def pending(self) -> list[tenancy.Pending]:
        """The pods the filter saw that are still pending (bound ones drop out here)."""
        bound = [uid for uid in self.demand.uids() if self._cache.bound_node(uid)]
        return self.demand.pending(bound)

    def filtered(self, pod: Json, outcome: tenancy.Outcome, nodes: tuple[str, ...]) -> None:
        """What the filter answered for an NPU pod (``extender`` calls it after each filter)."""
        self.demand.filtered(str((pod.get("metadata") or {}).get("uid") or ""), outcome, nodes)

    # --- the pod watch (``app`` routes the pod informer's callbacks here too) -------------

    def pods_listed(self, items: list[Json]) -> None:
        """After a re-list: only pods that exist, unbound and not being deleted, stay pending."""
        self.demand.retain(
            str(meta.get("uid") or "")
            for pod in items
            if not ((meta := pod.get("metadata") or {}).get("deletionTimestamp"))
            and not (pod.get("spec") or {}).get("nodeName")
        )

    def pod_changed(self, pod: Json) -> None:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp") or (pod.get("spec") or {}).get("nodeName"):
            self.demand.done(str(meta.get("uid") or ""))

    def pod_removed(self, pod: Json) -> None:
        self.demand.done(str((pod.get("metadata") or {}).get("uid") or ""))

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
        pending: dict[str, holdings.Amount] = {}
        for waiting in self.pending():
            held = pending.get(waiting.namespace, holdings.ZERO)
            pending[waiting.namespace] = held.plus(waiting.ask)
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
        capacity = shares.cohort(teams).capacity
        by_team = shares.team_usage(teams, usage)
        weighted = {
            t.name: ranking.dominant_share(by_team.get(t.name, {}), capacity, t.weight).value
            for t in teams.teams
        }
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
            weights={t.name: t.weight for t in teams.teams},
            shares=weighted,
            unchecked=self.unchecked(),
        )

    def unchecked(self) -> tuple[metrics.Unchecked, ...]:
        """The pods of namespaces under an NPU ResourceQuota that hold chips vnpu did not
        place: another scheduler's (or a preset ``nodeName``'s), and those granted chips
        beyond what their decision shows."""
        limited = {q.namespace for q in self.book.applied()}
        if not limited:
            return ()
        found: set[metrics.Unchecked] = set()
        for holder in self._cache.holders():
            named = str((holder.pod.get("spec") or {}).get("schedulerName") or "")
            if holder.namespace in limited and named != self._scheduler_name:
                found.add(metrics.Unchecked(holder.namespace, holder.name, OTHER_SCHEDULER))
        for state in self._cache.all_states():
            for mismatch in state.mismatches:
                namespace, _, name = mismatch.pod.partition("/")
                if namespace in limited:
                    found.add(metrics.Unchecked(namespace, name, mismatch.reason.value))
        return tuple(sorted(found))


def _by_unit(amounts: dict[str, holdings.Amount]) -> dict[tuple[str, str], int]:
    """(namespace, unit name) -> amount, for the all-models AI cores and memory and every
    per-model unit."""
    return {
        (namespace, key.name): value
        for namespace, amount in amounts.items()
        for key, value in amount.values.items()
        if key.model or key.unit in (holdings.Unit.AICORE, holdings.Unit.MEMORY)
    }
