"""Every metric the scheduler exports, with its help text, on a registry passed in.

``app`` counts requests and their durations; ``extender`` counts per-node filter outcomes by
reason code; ``binder`` and ``nodelock`` count conflicts, retries, lock waits and
take-overs; ``deviceconfig`` reports reloads; ``reclaimer`` counts its evictions. ``AllocationCollector`` reads one snapshot of
the node cache per scrape and yields per-chip allocation gauges, and where pods' decision
annotations and their nodes' grant reports disagree. Label values come from
closed vocabularies (verbs, reason codes, outcomes) except ``node``/``chip``/``model`` on the
per-chip gauges, which are bounded by the cluster's size, and ``team``, bounded by the
tenants config.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

import vnpu_scheduler
from vnpu_core import inventory, ledger, quotas

VERBS = ("filter", "prioritize", "bind", "mutate", "validate")
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_RECLAIM_BUCKETS = (1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
LOCK_TAKEOVERS = ("owner_gone", "owner_elsewhere", "bind_abandoned", "expired", "future")
"""Why ``nodelock`` took a node lock over (the ``why`` label of ``lock_takeovers``)."""
_WAIT_BUCKETS = (0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 60.0)


class Metrics:
    """The scheduler's metric objects, registered on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        build = Gauge(
            "vnpu_build_info",
            "Build of this vnpu component; the value is always 1.",
            ["component", "version"],
            registry=registry,
        )
        build.labels("scheduler", vnpu_scheduler.__version__).set(1)
        self.requests = Counter(
            "vnpu_scheduler_requests",
            "HTTP requests served, by verb and outcome (ok, error, bad_request, denied; refused "
            "before the app: too_large, timeout, busy, not_served).",
            ["verb", "outcome"],
            registry=registry,
        )
        self.duration = Histogram(
            "vnpu_scheduler_request_duration_seconds",
            "Time to answer one request, by verb.",
            ["verb"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.filter_outcomes = Counter(
            "vnpu_scheduler_filter_outcomes",
            "Per-node filter results: fit, or the reason code the node was refused with.",
            ["reason"],
            registry=registry,
        )
        self.gang_reservations = Counter(
            "vnpu_scheduler_gang_reservations",
            "Gang members the filter placed on one node and reserved there until their bind "
            "(scheduling.k8s.io PodGroup members).",
            registry=registry,
        )
        self.bind_conflicts = Counter(
            "vnpu_scheduler_bind_conflicts",
            "Conflicts met while binding: lock (node lock write), binding (pod already bound), "
            "fit (the node no longer had room at bind time).",
            ["kind"],
            registry=registry,
        )
        self.bind_retries = Counter(
            "vnpu_scheduler_bind_retries",
            "API writes of a bind retried after a conflict or an outage.",
            registry=registry,
        )
        self.binds = Counter(
            "vnpu_scheduler_binds",
            "Bind results: bound, already_bound, refused, failed.",
            ["result"],
            registry=registry,
        )
        self.lock_wait = Histogram(
            "vnpu_scheduler_lock_wait_seconds",
            "Time a bind waited until it held the node lock (or gave up).",
            buckets=_WAIT_BUCKETS,
            registry=registry,
        )
        self.lock_takeovers = Counter(
            "vnpu_scheduler_lock_takeovers",
            "Node locks taken over: owner_gone, owner_elsewhere (owner bound to another node), "
            "bind_abandoned (owner still unbound --bind-timeout after the lock was first seen: "
            "its bind ended or its replica died), expired (older than --lock-ttl, owner done or "
            "owner-less), future (dated past the clock-skew allowance).",
            ["why"],
            registry=registry,
        )
        for why in LOCK_TAKEOVERS:  # every series from the start, so increase() sees the first
            self.lock_takeovers.labels(why)
        self.config_reloads = Counter(
            "vnpu_scheduler_device_config_reloads",
            "Device-config loads, at start and of each changed content, by result: ok, failed "
            "(rejected: invalid, past a size, depth or alias limit, unreadable, or an error "
            "while loading; the last good config is kept).",
            ["result"],
            registry=registry,
        )
        self.config_ok = Gauge(
            "vnpu_scheduler_device_config_ok",
            "1 when the last device-config load succeeded, 0 when the last good config is kept.",
            registry=registry,
        )
        self.events_dropped = Counter(
            "vnpu_scheduler_events_dropped",
            "Kubernetes Events not written because too many were already waiting (the API is "
            "slow or down).",
            registry=registry,
        )
        self.quota_refusals = Counter(
            "vnpu_scheduler_quota_refusals",
            "Pods held back by an NPU quota, by where (filter, bind, admission) and rule "
            "(resource-quota, team-limit, no-idle-capacity, unreadable-quota; lender-pending: "
            "a borrowing pod waits while a team below its nominal has pods pending).",
            ["verb", "rule"],
            registry=registry,
        )
        self.reclaim_evictions = Counter(
            "vnpu_scheduler_reclaim_evictions",
            "Pods evicted to give borrowed NPU capacity back to a team below its nominal, by "
            "the team of the evicted pod (the borrower).",
            ["team"],
            registry=registry,
        )
        self.reclaim_wait = Histogram(
            "vnpu_scheduler_reclaim_wait_seconds",
            "Per eviction: seconds from the lender's pod first seen pending to the eviction.",
            buckets=_RECLAIM_BUCKETS,
            registry=registry,
        )
        self.reclaim_failures = Counter(
            "vnpu_scheduler_reclaim_eviction_failures",
            "Evictions the API refused or failed: disruption-budget (429, a "
            "PodDisruptionBudget forbids it), api-error (any other failure).",
            ["reason"],
            registry=registry,
        )
        self.reclaimer_leader = Gauge(
            "vnpu_scheduler_reclaimer_leader",
            "1 while this replica holds the vnpu-reclaimer Lease and reclaims, else 0.",
            registry=registry,
        )
        self.watch_restarts = Counter(
            "vnpu_scheduler_watch_restarts",
            "Watches restarted, by resource and cause (expired, closed, error).",
            ["resource", "cause"],
            registry=registry,
        )


@dataclass(frozen=True, slots=True)
class ChipAllocation:
    """One chip's registered capacity and what the pods bound to it hold."""

    node: str
    chip: inventory.Chip
    usage: inventory.ChipUsage


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one scrape reports about the cache."""

    chips: list[ChipAllocation]
    nodes: dict[str, int]  # by state: available, unavailable, usage_unknown
    synced: bool
    reports: dict[str, int] = field(default_factory=dict)  # nodes by grant report: read, ...
    mismatches: dict[str, int] = field(default_factory=dict)  # pods by ledger.Disagreement
    double_assignments: int = 0  # chips whose holders cannot all be on them


_MIB = 1024 * 1024
GRANT_REPORTS = ("read", "absent", "unreadable")


class AllocationCollector(Collector):
    """Cache gauges (per-chip allocation, nodes by state, sync) read once per scrape."""

    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self._snapshot = snapshot

    def describe(self) -> Iterable[Metric]:
        return []  # the families depend on the cluster; skip registration-time collection

    def collect(self) -> Iterator[Metric]:
        labels = ["node", "chip", "index", "model"]
        families = {
            "memory": GaugeMetricFamily(
                "vnpu_scheduler_chip_allocated_memory_bytes",
                "Memory held on the chip by pods bound to its node (vNPU template sizes).",
                labels=labels,
            ),
            "aicore": GaugeMetricFamily(
                "vnpu_scheduler_chip_allocated_aicores",
                "AI cores held on the chip by hard vNPUs and whole-chip pods.",
                labels=labels,
            ),
            "aicpu": GaugeMetricFamily(
                "vnpu_scheduler_chip_allocated_aicpus",
                "AI CPUs held on the chip by hard vNPUs and whole-chip pods.",
                labels=labels,
            ),
            "vnpus": GaugeMetricFamily(
                "vnpu_scheduler_chip_allocated_vnpus",
                "vNPUs (hard templates and soft slices) allocated on the chip.",
                labels=labels,
            ),
            "exclusive": GaugeMetricFamily(
                "vnpu_scheduler_chip_allocated_whole",
                "1 when a pod holds the whole chip.",
                labels=labels,
            ),
            "capacity": GaugeMetricFamily(
                "vnpu_scheduler_chip_memory_bytes",
                "Memory of the chip as its device plugin registered it.",
                labels=labels,
            ),
        }
        snapshot = self._snapshot()
        synced = GaugeMetricFamily(
            "vnpu_scheduler_cache_synced",
            "1 once the node and pod caches have listed the cluster.",
            value=1 if snapshot.synced else 0,
        )
        nodes = GaugeMetricFamily(
            "vnpu_scheduler_nodes",
            "Nodes in the cache by state (available, unavailable, usage_unknown).",
            labels=["state"],
        )
        for state, count in snapshot.nodes.items():
            nodes.add_metric([state], count)
        reports = GaugeMetricFamily(
            "vnpu_scheduler_grant_reports",
            "Nodes by their device plugin's report of what it granted (vnpu.io/granted-<CW>): "
            "read, absent (not vnpu's plugin: usage from pod annotations alone), unreadable.",
            labels=["state"],
        )
        for state in GRANT_REPORTS:
            reports.add_metric([state], snapshot.reports.get(state, 0))
        mismatches = GaugeMetricFamily(
            "vnpu_scheduler_grant_mismatches",
            "Pods whose decision annotations disagree with what their node reports it granted "
            "(annotation_missing, annotation_differs, annotation_unreadable); each is counted as "
            "holding what it was granted.",
            labels=["reason"],
        )
        for reason in ledger.Disagreement:
            mismatches.add_metric([reason.value], snapshot.mismatches.get(reason.value, 0))
        doubles = GaugeMetricFamily(
            "vnpu_scheduler_double_assignments",
            "Chips whose holders (pods' decisions and the node's grants together) cannot all be "
            "on the chip at once: a chip given to two pods.",
            value=snapshot.double_assignments,
        )
        yield synced
        yield nodes
        yield reports
        yield mismatches
        yield doubles
        for item in snapshot.chips:
            chip, used = item.chip, item.usage
            values = [item.node, chip.uuid, str(chip.index), chip.model.common_word]
            whole = used.exclusive and not used.soft_slices
            families["memory"].add_metric(values, used.memory_mib * _MIB)
            families["aicore"].add_metric(values, chip.model.aicore if whole else used.aicore)
            families["aicpu"].add_metric(values, chip.model.aicpu if whole else used.aicpu)
            families["vnpus"].add_metric(values, used.vnpus + used.soft_slices)
            families["exclusive"].add_metric(values, 1 if whole else 0)
            families["capacity"].add_metric(values, chip.memory_mib * _MIB)
        yield from families.values()


@dataclass(frozen=True, slots=True, order=True)
class Unchecked:
    """A pod holding chips against a namespace's NPU quota that no quota check ran for."""

    namespace: str
    pod: str
    reason: str  # quotagate.OTHER_SCHEDULER or a ledger.Disagreement value


@dataclass(frozen=True, slots=True)
class QuotaSnapshot:
    """What one scrape reports about quotas and teams."""

    limits: tuple[quotas.QuotaStanding, ...] = ()
    teams: tuple[quotas.TeamStanding, ...] = ()
    team_pending: dict[tuple[str, str], int] = field(default_factory=dict)  # (team, unit)
    namespaces: dict[tuple[str, str], int] = field(default_factory=dict)  # (ns, unit) used
    namespace_pending: dict[tuple[str, str], int] = field(default_factory=dict)
    aicore_seconds: dict[str, float] = field(default_factory=dict)  # by namespace
    memory_mib_seconds: dict[str, float] = field(default_factory=dict)
    team_of: dict[str, str] = field(default_factory=dict)  # namespace -> team
    weights: dict[str, float] = field(default_factory=dict)  # team -> fair-share weight
    shares: dict[str, float] = field(default_factory=dict)  # team -> weighted dominant share
    tenants_ok: bool = True
    unchecked: tuple[Unchecked, ...] = ()


_TEAM_GAUGES = {
    "used": "What a team's pods hold, by unit.",
    "nominal": "A team's nominal (guaranteed) share, by unit.",
    "limit": "A team's nominal + borrowingLimit, by unit (absent: it may borrow without limit).",
    "borrowed": "What a team holds above its nominal share (idle capacity lent to it), by unit.",
    "pending": "What a team's pods waiting to be bound ask for, by unit.",
}


class QuotaCollector(Collector):
    """Quota and team gauges and the NPU-seconds counters, read once per scrape."""

    def __init__(self, snapshot: Callable[[], QuotaSnapshot]) -> None:
        self._snapshot = snapshot

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        snapshot = self._snapshot()
        quota_labels = ["namespace", "quota", "resource"]
        limit = GaugeMetricFamily(
            "vnpu_scheduler_quota_limit",
            "An NPU limit of a ResourceQuota (MiB, AI cores, chips, vNPUs or devices).",
            labels=quota_labels,
        )
        used = GaugeMetricFamily(
            "vnpu_scheduler_quota_used",
            "What the namespace's bound pods hold of a ResourceQuota's NPU limit.",
            labels=quota_labels,
        )
        for standing in snapshot.limits:
            values = [standing.namespace, standing.quota, standing.resource]
            limit.add_metric(values, standing.limit)
            used.add_metric(values, standing.used)
        unchecked = GaugeMetricFamily(
            "vnpu_scheduler_quota_unchecked_pod",
            "1 for each pod of a namespace under an NPU ResourceQuota that holds chips no quota "
            "check ran for: placed by another scheduler or a preset spec.nodeName "
            "(reason other_scheduler), or granted chips beyond its decision (annotation_*).",
            labels=["namespace", "pod", "reason"],
        )
        for pod in snapshot.unchecked:
            unchecked.add_metric([pod.namespace, pod.pod, pod.reason], 1)
        team = {
            part: GaugeMetricFamily(f"vnpu_scheduler_team_{part}", text, labels=["team", "unit"])
            for part, text in _TEAM_GAUGES.items()
        }
        for held in snapshot.teams:
            slot = (held.team, held.key.name)
            team["used"].add_metric(list(slot), held.used)
            team["nominal"].add_metric(list(slot), held.nominal)
            if held.limit is not None:
                team["limit"].add_metric(list(slot), held.limit)
            team["borrowed"].add_metric(list(slot), held.borrowed)
            team["pending"].add_metric(list(slot), snapshot.team_pending.get(slot, 0))
        weight = GaugeMetricFamily(
            "vnpu_scheduler_team_weight", "A team's fair-share weight.", labels=["team"]
        )
        share = GaugeMetricFamily(
            "vnpu_scheduler_team_dominant_share",
            "A team's weighted dominant share: its largest used / cohort nominal over the units "
            "teams share, divided by its weight (fair sharing evens these out).",
            labels=["team"],
        )
        for name, value in sorted(snapshot.weights.items()):
            weight.add_metric([name], value)
            share.add_metric([name], snapshot.shares.get(name, 0.0))
        namespace_used = GaugeMetricFamily(
            "vnpu_scheduler_namespace_used",
            "What a namespace's bound pods hold, by unit (AI cores, MiB, and per chip model).",
            labels=["namespace", "unit"],
        )
        for (namespace, unit), value in sorted(snapshot.namespaces.items()):
            namespace_used.add_metric([namespace, unit], value)
        namespace_pending = GaugeMetricFamily(
            "vnpu_scheduler_namespace_pending",
            "What a namespace's pods waiting to be bound ask for, by unit.",
            labels=["namespace", "unit"],
        )
        for (namespace, unit), value in sorted(snapshot.namespace_pending.items()):
            namespace_pending.add_metric([namespace, unit], value)
        seconds = {
            "aicore": CounterMetricFamily(
                "vnpu_scheduler_namespace_aicore_seconds",
                "AI-core-seconds held by a namespace's pods (AI cores x seconds).",
                labels=["namespace", "team"],
            ),
            "memory": CounterMetricFamily(
                "vnpu_scheduler_namespace_memory_mib_seconds",
                "Device-memory MiB-seconds held by a namespace's pods.",
                labels=["namespace", "team"],
            ),
        }
        for namespace, total in sorted(snapshot.aicore_seconds.items()):
            labels = [namespace, snapshot.team_of.get(namespace, "")]
            seconds["aicore"].add_metric(labels, total)
            seconds["memory"].add_metric(labels, snapshot.memory_mib_seconds.get(namespace, 0.0))
        yield GaugeMetricFamily(
            "vnpu_scheduler_tenants_config_ok",
            "1 when the tenants config was read (or none is set), 0 while the last good one is kept.",
            value=1 if snapshot.tenants_ok else 0,
        )
        yield limit
        yield used
        yield unchecked
        yield from team.values()
        yield weight
        yield share
        yield namespace_used
        yield namespace_pending
        yield from seconds.values()
