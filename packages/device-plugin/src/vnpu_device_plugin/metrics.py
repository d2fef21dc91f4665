"""Every metric the device plugin exports, in its own registry, with the label values allowed.

``plugin`` builds one ``Metrics`` and hands it to the parts that count; ``monitoring``
serves ``registry`` on ``/metrics``. Names follow Prometheus' rules: prefix
``vnpu_device_plugin_``, base units, counters ending in ``_total``; label values come
from the closed sets below, never from pods or chips.

| metric | labels |
|---|---|
| ``vnpu_device_plugin_allocations_total`` | ``result``: ``ALLOCATION_RESULTS`` |
| ``vnpu_device_plugin_allocate_duration_seconds`` | ``result``: success or failed |
| ``vnpu_device_plugin_vnpus_created_total`` | |
| ``vnpu_device_plugin_vnpus_destroyed_total`` | ``reason``: ``DESTROY_REASONS`` |
| ``vnpu_device_plugin_vnpus_reclaimed_total`` | ``reason``: ``RECLAIM_REASONS`` |
| ``vnpu_device_plugin_vnpus_reclaimed_by_trigger_total`` | ``trigger``: ``RECLAIM_TRIGGERS`` |
| ``vnpu_device_plugin_pod_watch_restarts_total`` | ``reason``: ``WATCH_RESTART_REASONS`` |
| ``vnpu_device_plugin_grant_conflicts_total`` | ``reason``: ``CONFLICT_REASONS`` |
| ``vnpu_device_plugin_placements_total`` | ``result``: ``PLACEMENT_RESULTS`` |
| ``vnpu_device_plugin_reclaims_withheld_total`` | ``reason``: ``WITHHELD_REASONS`` |
| ``vnpu_device_plugin_state_disagreements_total`` | ``reason``: ``DISAGREEMENT_REASONS`` |
| ``vnpu_device_plugin_vnpus_owned`` | |
| ``vnpu_device_plugin_health_transitions_total`` | ``to``: healthy or unhealthy |
| ``vnpu_device_plugin_chips`` | ``health``: healthy or unhealthy |
| ``vnpu_device_plugin_registrations_total`` | ``result``: success or failure |
| ``vnpu_device_plugin_node_publications_total`` | ``result``: success or failure |
| ``vnpu_device_plugin_api_retries_total`` | |
| ``vnpu_build_info`` | ``component``, ``version`` |
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from vnpu_device_plugin import __version__

ALLOCATION_RESULTS = (
    "success",
    "invalid_request",  # unknown device ids, a malformed request
    "pod_not_identified",  # no single pod matches the request
    "bad_annotation",  # the pod's annotations cannot be served; the pod is failed
    "decision_too_small",  # the decision gives a container less memory than it asks
    "invalid_name",  # a namespace, pod or container name or a UID the plugin will not use
    "grant_conflict",  # the decision takes what a live pod holds, or goes over a budget
    "vnpu_failed",  # the driver refused or failed a vNPU create
    "not_placed",  # bound without a decision and not placed here (--place-undecided)
    "api_error",  # the Kubernetes API failed beyond the retries
    "failed",  # anything else
)
DESTROY_REASONS = ("rollback", "reclaimed")
RECLAIM_REASONS = ("owner_gone", "owner_finished", "init_finished", "unowned")
RECLAIM_TRIGGERS = (
    "watch",  # the pod watch saw the owner deleted or finished
    "allocate",  # an Allocate found the chip it must use short of room
    "periodic",  # the reconciler's pass (and the one at start)
)
CONFLICT_REASONS = (
    "held_whole",  # another live pod holds the chip whole
    "held_shared",  # a whole chip (or the other sharing mode) asked of a chip others share
    "over_budget",  # a vNPU or soft slice would go over one of the chip's budgets
)
PLACEMENT_RESULTS = (  # pods bound here without a decision, with --place-undecided
    "placed",  # the plugin wrote a decision for this node on the pod
    "decided_meanwhile",  # a decision showed up while the plugin placed it: that one is served
    "has_decision",  # the pod carries a decision (for another node, or one that cannot be read): left alone
    "does_not_fit",  # no room on this node for the request (the allocator's reason)
    "bad_request",  # the request cannot be read or placed by this plugin
    "pod_gone",  # deleted, or being deleted, meanwhile
    "api_error",  # the Kubernetes API failed beyond the retries
)
WITHHELD_REASONS = (
    "granted_to_live_pod",  # the grant book names the vNPU for a pod that is still live
    "unaccounted_holder",  # kubelet lists a live pod with devices on the chip nothing records
    "owner_alive",  # the owner, looked up by name, is still there with its UID
    "pod_resources_unavailable",  # kubelet's PodResources does not answer: no destroy until it does
)
DISAGREEMENT_REASONS = (
    "unrecorded_holder",  # kubelet lists a running container on the chip the grant book misses
    "granted_to_running_container",  # the grant book gives the vNPU to a container kubelet runs
)
WATCH_RESTART_REASONS = (
    "expired",  # 410: the revision is too old; the pods are listed again
    "error",  # the API failed or could not be reached; retried with backoff
)
_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """The plugin's metrics; a fresh registry unless one is passed in."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.allocations = Counter(
            "vnpu_device_plugin_allocations",
            "Allocate calls by result.",
            ["result"],
            registry=r,
        )
        self.allocate_duration = Histogram(
            "vnpu_device_plugin_allocate_duration_seconds",
            "Time to serve one Allocate call, from request to answer.",
            ["result"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.vnpus_created = Counter(
            "vnpu_device_plugin_vnpus_created",
            "vNPUs this plugin created (managed mode).",
            registry=r,
        )
        self.vnpus_destroyed = Counter(
            "vnpu_device_plugin_vnpus_destroyed",
            "vNPUs this plugin destroyed: rolled back after a failed Allocate, or reclaimed.",
            ["reason"],
            registry=r,
        )
        self.vnpus_reclaimed = Counter(
            "vnpu_device_plugin_vnpus_reclaimed",
            "vNPUs destroyed because nobody needed them any more, by why.",
            ["reason"],
            registry=r,
        )
        self.vnpus_reclaimed_by_trigger = Counter(
            "vnpu_device_plugin_vnpus_reclaimed_by_trigger",
            "vNPUs destroyed because nobody needed them any more, by what started the reclaim.",
            ["trigger"],
            registry=r,
        )
        self.grant_conflicts = Counter(
            "vnpu_device_plugin_grant_conflicts",
            "Allocates refused because the decision takes what this plugin granted a live pod, "
            "or goes over a chip's budget, by why.",
            ["reason"],
            registry=r,
        )
        self.placements = Counter(
            "vnpu_device_plugin_placements",
            "Pods bound to this node without a device decision that the plugin tried to decide "
            "for (--place-undecided), by result.",
            ["result"],
            registry=r,
        )
        self.reclaims_withheld = Counter(
            "vnpu_device_plugin_reclaims_withheld",
            "vNPUs whose recorded owners are done but which were kept because a live container "
            "may still use them, by what said so.",
            ["reason"],
            registry=r,
        )
        self.state_disagreements = Counter(
            "vnpu_device_plugin_state_disagreements",
            "vNPUs kept because kubelet's PodResources lists a running container that may hold "
            "them while the ledger and the grant book say nobody needs them, by what disagreed.",
            ["reason"],
            registry=r,
        )
        self.vnpus_owned = Gauge(
            "vnpu_device_plugin_vnpus_owned",
            "vNPUs the ownership ledger records.",
            registry=r,
        )
        self.health_transitions = Counter(
            "vnpu_device_plugin_health_transitions",
            "Chips that turned healthy or unhealthy.",
            ["to"],
            registry=r,
        )
        self.chips = Gauge(
            "vnpu_device_plugin_chips",
            "Chips advertised to kubelet, by health.",
            ["health"],
            registry=r,
        )
        self.registrations = Counter(
            "vnpu_device_plugin_registrations",
            "Registrations with kubelet, by result.",
            ["result"],
            registry=r,
        )
        self.publications = Counter(
            "vnpu_device_plugin_node_publications",
            "Writes of the node annotations (inventory, handshake), by result.",
            ["result"],
            registry=r,
        )
        self.pod_watch_restarts = Counter(
            "vnpu_device_plugin_pod_watch_restarts",
            "Watches of the node's pods started again after they failed, by why.",
            ["reason"],
            registry=r,
        )
        self.api_retries = Counter(
            "vnpu_device_plugin_api_retries",
            "Kubernetes API calls repeated after an outage or a conflict.",
            registry=r,
        )
        build = Gauge(
            "vnpu_build_info",
            "Build information; always 1.",
            ["component", "version"],
            registry=r,
        )
        build.labels("device-plugin", __version__).set(1)
        for result in ALLOCATION_RESULTS:
            self.allocations.labels(result)
        for reason in DESTROY_REASONS:
            self.vnpus_destroyed.labels(reason)
        for reason in RECLAIM_REASONS:
            self.vnpus_reclaimed.labels(reason)
        for trigger in RECLAIM_TRIGGERS:
            self.vnpus_reclaimed_by_trigger.labels(trigger)
        for reason in CONFLICT_REASONS:
            self.grant_conflicts.labels(reason)
        for result in PLACEMENT_RESULTS:
            self.placements.labels(result)
        for reason in WITHHELD_REASONS:
            self.reclaims_withheld.labels(reason)
        for reason in DISAGREEMENT_REASONS:
            self.state_disagreements.labels(reason)
        for reason in WATCH_RESTART_REASONS:
            self.pod_watch_restarts.labels(reason)
        for state in ("healthy", "unhealthy"):
            self.health_transitions.labels(state)
        for result in ("success", "failure"):
            self.registrations.labels(result)
            self.publications.labels(result)

    def retried(self, _error: object) -> None:
        """Count one repeated API call (``cluster.retrying``'s ``on_retry``)."""
        self.api_retries.inc()
