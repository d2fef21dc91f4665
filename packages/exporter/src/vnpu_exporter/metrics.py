"""Every metric name the exporter emits or reads, with its help text, labels and allowed values.

``collector`` and ``compat`` build their families from these definitions only; ``dashboards``
builds every panel query from them, and the tests check the alert rules against them, so a
renamed metric breaks a test instead of a dashboard. ``SCHEDULER`` and ``DEVICE_PLUGIN`` list
the metrics of the other vnpu services that the dashboards and alerts read; the tests check
those against the services' own registries.

Naming follows Prometheus practice: prefix ``vnpu_``, base units (bytes, seconds, ratios
0-1, watts, degrees Celsius), counters end in ``_total`` on the wire (``name`` here is the
family name without it, as client_python takes it). Label values come from the closed
vocabularies in ``VALUES``, except chip identity (bounded by the node's chips), fault codes
(the chip's active codes, a handful at most), templates (the chip model's templates) and
pod/namespace/container identity on the metrics that are about a pod.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from vnpu_npu import backend, faults


class Kind(StrEnum):
    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"


class Group(StrEnum):
    """Refresh groups: each is read on its own interval, in its own thread."""

    INVENTORY = "inventory"  # chip enumeration
    HEALTH = "health"  # DCMI health and fault codes
    SENSORS = "sensors"  # temperature and power
    UTILIZATION = "utilization"  # AI core utilisation
    MEMORY = "memory"  # memory total and used
    VNPUS = "vnpus"  # the driver's vNPUs and their activity
    PODS = "pods"  # the pods bound to this node (Kubernetes API)
    POD_RESOURCES = "pod_resources"  # the kubelet's device assignments (PodResources List)
    OWNERSHIP = "ownership"  # the device plugin's ownership ledger, the DRA driver's claim ledger


class ErrorReason(StrEnum):
    """Why a read failed (``vnpu_exporter_read_errors_total{reason}``)."""

    CHIP_GONE = "chip_gone"  # the chip dropped off the bus or is not ready (-8008/-8012)
    NOT_SUPPORTED = "not_supported"  # this driver or chip lacks the call
    DRIVER = "driver_error"  # any other DCMI failure
    LIBRARY = "library_error"  # libdcmi.so could not be loaded
    SIMULATION = "sim_error"  # the simulated node's files are unusable
    API = "api_error"  # the Kubernetes API refused or did not answer
    RPC = "rpc_error"  # the kubelet's PodResources socket refused or did not answer
    LEDGER = "ledger_error"  # an ownership or claim ledger is unreadable (or a record)
    BAD_ANNOTATION = "bad_annotation"  # a pod's vnpu annotations could not be read
    STALE = "stale"  # a group did not finish a refresh in time; its values were dropped
    UNEXPECTED = "unexpected"  # a bug: logged with its traceback


class AllocationKind(StrEnum):
    """What a container holds on a chip."""

    WHOLE = "whole"  # the whole chip
    VNPU = "vnpu"  # a hardware vNPU of a template
    SOFT = "soft"  # a soft slice (hami-vnpu-core): a memory quota and a core percentage


class Attribution(StrEnum):
    """How an allocation was tied to a driver vNPU (``vnpu_allocation_info{attribution}``)."""

    NOT_APPLICABLE = "none"  # whole chips and soft slices have no vNPU
    LEDGER = "ledger"  # the device plugin's ownership ledger or the DRA claim ledger names it
    UNIQUE = "unique"  # the only allocation and the only vNPU of its template on the chip
    AMBIGUOUS = "ambiguous"  # several of one template on the chip: which vNPU is whose is unknown
    MISSING = "missing"  # no vNPU of the template on the chip (not created yet, or destroyed)
    UNKNOWN = "unknown"  # the chip's vNPU list could not be read


@dataclass(frozen=True, slots=True)
class Definition:
    """One metric family: wire name (counters without ``_total``), type, help and label names."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    unit: str = ""
    buckets: tuple[float, ...] = field(default=(), compare=False)

    @property
    def samples(self) -> tuple[str, ...]:
        """The sample names this family puts on the wire."""
        if self.kind is Kind.COUNTER:
            return (f"{self.name}_total",)
        if self.kind is Kind.HISTOGRAM:
            return tuple(f"{self.name}{s}" for s in ("_bucket", "_sum", "_count"))
        return (self.name,)


def _g(name: str, text: str, labels: tuple[str, ...] = (), unit: str = "") -> Definition:
    return Definition(name, Kind.GAUGE, text, labels, unit)


def _c(name: str, text: str, labels: tuple[str, ...] = ()) -> Definition:
    return Definition(name, Kind.COUNTER, text, labels, "count")


def _h(name: str, text: str, labels: tuple[str, ...], buckets: tuple[float, ...]) -> Definition:
    return Definition(name, Kind.HISTOGRAM, text, labels, "seconds", buckets)


CHIP = ("node", "chip", "uuid", "model")
ALLOCATION = (*CHIP, "kind", "template", "vnpu", "namespace", "pod", "container")
NAMESPACE = ("node", "namespace", "model")

VALUES: dict[str, tuple[str, ...]] = {
    "kind": tuple(k.value for k in AllocationKind),
    "level": tuple(level.value for level in faults.FaultLevel),
    "scope": tuple(s.value for s in backend.PowerScope),
    "memory_kind": tuple(k.value for k in backend.MemoryKind),
    "group": tuple(g.value for g in Group),
    "reason": tuple(r.value for r in ErrorReason),
    "attribution": tuple(a.value for a in Attribution),
    "component": ("exporter",),
}
"""Allowed values of the labels with a closed vocabulary."""

_SCRAPE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_REFRESH_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

# One definition per line: the tables read as tables (the formatter would split each in four).
# fmt: off

# --- the exporter itself ---------------------------------------------------------------------

BUILD_INFO = _g("vnpu_build_info", "Build of this vnpu component; the value is always 1.", ("component", "version"))
SCRAPE_DURATION = _h("vnpu_exporter_scrape_duration_seconds", "Time to build one /metrics answer from the cached readings (earlier scrapes; the current one is not in its own answer).", (), _SCRAPE_BUCKETS)
READ_ERRORS = _c("vnpu_exporter_read_errors", "Reads that failed, by refresh group and reason; the values they would have given are left out, never reported stale or as zero.", ("group", "reason"))
REFRESH_DURATION = _h("vnpu_exporter_refresh_duration_seconds", "Time one refresh of a group took (all its driver, kubelet or API calls).", ("group",), _REFRESH_BUCKETS)
LAST_REFRESH = _g("vnpu_exporter_last_refresh_timestamp_seconds", "Unix time of the last refresh of a group that read at least one value; 0 before the first.", ("group",), "seconds")
UNREADABLE_PODS = _g("vnpu_exporter_unreadable_pods", "Pods bound to this node whose vnpu annotations could not be read; their allocations are not reported.", ("node",))

# --- chips -------------------------------------------------------------------------------------

CHIP_INFO = _g("vnpu_chip_info", "One per chip, value 1; labels name the chip as DCMI reports it, and the backend that reads it (dcmi, or sim for a simulated chip).", (*CHIP, "chip_name", "model_name", "bdf", "card", "device", "logic", "memory_kind", "backend"))
CHIP_PRESENT = _g("vnpu_chip_present", "1 while the chip answers the driver, 0 when it dropped off the bus or is not ready.", CHIP)
CHIP_HEALTHY = _g("vnpu_chip_healthy", "1 when the chip's fault level lets the kubelet use it (Healthy), 0 otherwise.", CHIP)
CHIP_FAULT_LEVEL = _g("vnpu_chip_fault_level", "The chip's worst fault level: 1 for the current level, 0 for every other.", (*CHIP, "level"))
CHIP_FAULT_CODE = _g("vnpu_chip_fault_code", "One per active fault code of the chip (8 hex digits), value 1, with the code's level.", (*CHIP, "code", "level"))
CHIP_TEMPERATURE = _g("vnpu_chip_temperature_celsius", "Chip temperature.", CHIP, "celsius")
CHIP_POWER = _g("vnpu_chip_power_watts", "Power draw; scope=card on 310P, where the whole card is measured.", (*CHIP, "scope"), "watts")
CHIP_AICORE_UTILIZATION = _g("vnpu_chip_aicore_utilization_ratio", "AI core utilisation of the whole chip, 0-1.", CHIP, "ratio")
CHIP_MEMORY_TOTAL = _g("vnpu_chip_memory_total_bytes", "Chip memory (HBM on the 910 family, DDR on 310P).", CHIP, "bytes")
CHIP_MEMORY_USED = _g("vnpu_chip_memory_used_bytes", "Chip memory in use.", CHIP, "bytes")
CHIP_AICORES = _g("vnpu_chip_aicores", "AI cores of the chip.", CHIP)
CHIP_VNPUS = _g("vnpu_chip_vnpus", "Hardware vNPUs the driver has on the chip.", CHIP)
CHIP_VNPU_TEMPLATES = _g("vnpu_chip_vnpu_templates", "Hardware vNPUs on the chip by template.", (*CHIP, "template"))
CHIP_UNOWNED_VNPUS = _g("vnpu_chip_unowned_vnpus", "Hardware vNPUs on the chip that no pod's allocation accounts for, by template (leaked, or not yet destroyed).", (*CHIP, "template"))
CHIP_ALLOCATIONS = _g("vnpu_chip_allocations", "Allocations on the chip from the pods bound to this node, by kind.", (*CHIP, "kind"))
CHIP_ALLOCATED_MEMORY = _g("vnpu_chip_allocated_memory_bytes", "Memory the pods bound to this node hold on the chip (template sizes; the whole chip for a whole-chip pod).", CHIP, "bytes")
CHIP_ALLOCATED_AICORES = _g("vnpu_chip_allocated_aicores", "AI cores the pods bound to this node hold on the chip.", CHIP)
CHIP_ALLOCATED_RATIO = _g("vnpu_chip_allocated_ratio", "How full the chip is, 0-1: its most used budget (vNPU slots, memory, AI cores, AI CPUs, core percent).", CHIP, "ratio")
CHIP_STRANDED_MEMORY = _g("vnpu_chip_stranded_memory_bytes", "Free chip memory that no template of the chip's model can use (another budget is exhausted).", CHIP, "bytes")
CHIP_STRANDED_AICORES = _g("vnpu_chip_stranded_aicores", "Free AI cores that no template of the chip's model can use (another budget is exhausted).", CHIP)

# --- allocations: every whole chip, hard vNPU and soft slice in use ---------------------------

ALLOCATION_INFO = _g("vnpu_allocation_info", "One per whole chip, vNPU or soft slice a container holds, value 1; attribution says how the driver vNPU was found.", (*ALLOCATION, "attribution"))
ALLOCATION_MEMORY_LIMIT = _g("vnpu_allocation_memory_limit_bytes", "Memory the allocation may use: the template's, the soft slice's quota or the whole chip's.", ALLOCATION, "bytes")
ALLOCATION_MEMORY_USED = _g("vnpu_allocation_memory_used_bytes", "Memory the allocation uses, where the driver reports it (whole chips, 310P vNPUs, a chip's only soft slice).", ALLOCATION, "bytes")
ALLOCATION_AICORES = _g("vnpu_allocation_aicores", "AI cores the allocation holds (a soft slice: its core percentage of the chip's).", ALLOCATION)
ALLOCATION_AICORE_SHARE = _g("vnpu_allocation_aicore_share_ratio", "The allocation's share of the chip's AI cores, 0-1.", ALLOCATION, "ratio")
ALLOCATION_AICORE_UTILIZATION = _g("vnpu_allocation_aicore_utilization_ratio", "Utilisation of the allocation's own AI cores, 0-1, where the driver reports it.", ALLOCATION, "ratio")

# --- per namespace: requested (allocated) versus used -----------------------------------------

NAMESPACE_ALLOCATIONS = _g("vnpu_namespace_allocations", "Allocations held by the namespace's pods on this node, by kind.", (*NAMESPACE, "kind"))
NAMESPACE_ALLOCATED_MEMORY = _g("vnpu_namespace_allocated_memory_bytes", "Memory held by the namespace's pods on this node (what quota and chargeback count).", NAMESPACE, "bytes")
NAMESPACE_USED_MEMORY = _g("vnpu_namespace_used_memory_bytes", "Memory the namespace's measured allocations use on this node.", NAMESPACE, "bytes")
NAMESPACE_ALLOCATED_AICORES = _g("vnpu_namespace_allocated_aicores", "AI cores held by the namespace's pods on this node.", NAMESPACE)
NAMESPACE_USED_AICORES = _g("vnpu_namespace_used_aicores", "AI cores busy for the namespace's measured allocations (held cores x utilisation).", NAMESPACE)
NAMESPACE_UNMEASURED = _g("vnpu_namespace_unmeasured_allocations", "The namespace's allocations whose use the driver does not report (not in the used figures).", NAMESPACE)

EXPORTER: tuple[Definition, ...] = (
    BUILD_INFO, SCRAPE_DURATION, READ_ERRORS, REFRESH_DURATION, LAST_REFRESH, UNREADABLE_PODS,
    CHIP_INFO, CHIP_PRESENT, CHIP_HEALTHY, CHIP_FAULT_LEVEL, CHIP_FAULT_CODE, CHIP_TEMPERATURE,
    CHIP_POWER, CHIP_AICORE_UTILIZATION, CHIP_MEMORY_TOTAL, CHIP_MEMORY_USED, CHIP_AICORES,
    CHIP_VNPUS, CHIP_VNPU_TEMPLATES, CHIP_UNOWNED_VNPUS, CHIP_ALLOCATIONS, CHIP_ALLOCATED_MEMORY,
    CHIP_ALLOCATED_AICORES, CHIP_ALLOCATED_RATIO, CHIP_STRANDED_MEMORY, CHIP_STRANDED_AICORES,
    ALLOCATION_INFO, ALLOCATION_MEMORY_LIMIT, ALLOCATION_MEMORY_USED, ALLOCATION_AICORES,
    ALLOCATION_AICORE_SHARE, ALLOCATION_AICORE_UTILIZATION,
    NAMESPACE_ALLOCATIONS, NAMESPACE_ALLOCATED_MEMORY, NAMESPACE_USED_MEMORY,
    NAMESPACE_ALLOCATED_AICORES, NAMESPACE_USED_AICORES, NAMESPACE_UNMEASURED,
)
"""Every family the exporter emits in its own names."""

# --- npu-exporter names (--npu-exporter-compat) -----------------------------------------------

CARD = ("id", "model_name", "vdie_id", "pcie_bus_info", "namespace", "pod_name", "container_name")
VDEV = ("id", "model_name", "v_dev_id", "aicore_count", "namespace", "pod_name", "container_name", "is_virtual")
CONTAINER_INFO_LABELS = ("npuID", "model_name", "vdie_id", "pcie_bus_info", "namespace", "pod_name", "container_name", "containerID", "containerName")
ERROR_CODE_SLOTS = 10  # npu_chip_info_error_code, then _1 ... _9, as npu-exporter's Prometheus path

COMPAT: tuple[Definition, ...] = (
    _g("npu_exporter_version_info", "npu-exporter compatible: exporter version, value 1.", ("exporterVersion",)),
    _g("machine_npu_nums", "npu-exporter compatible: chips on the node."),
    _g("machine_healthy_npu_nums", "npu-exporter compatible: chips whose DCMI health is OK."),
    _g("machine_unhealthy_npu_nums", "npu-exporter compatible: chips whose DCMI health is not OK."),
    _g("machine_unknown_npu_nums", "npu-exporter compatible: chips whose health could not be read."),
    _g("npu_chip_info_health_status", "npu-exporter compatible: 1 DCMI health OK, 0 not OK, -1 unknown.", CARD),
    _g("npu_chip_info_temperature", "npu-exporter compatible: chip temperature, degrees Celsius.", CARD),
    _g("npu_chip_info_power", "npu-exporter compatible: power, watts (card power on 310P).", CARD),
    _g("npu_chip_info_utilization", "npu-exporter compatible: AI core utilisation, percent.", CARD),
    _g("npu_chip_info_name", "npu-exporter compatible: chip name, value 1.", ("id", "name", "vdie_id", "pcie_bus_info", "namespace", "pod_name", "container_name")),
    _g("npu_chip_info_hbm_total_memory", "npu-exporter compatible: HBM total, MB (910 family).", CARD),
    _g("npu_chip_info_hbm_used_memory", "npu-exporter compatible: HBM used, MB (910 family).", CARD),
    _g("npu_chip_info_total_memory", "npu-exporter compatible: DDR total, MB (310P).", CARD),
    _g("npu_chip_info_used_memory", "npu-exporter compatible: DDR used, MB (310P).", CARD),
    *(
        _g(f"npu_chip_info_error_code{'' if i == 0 else f'_{i}'}", f"npu-exporter compatible: active error code number {i + 1}, decimal.", CARD)
        for i in range(ERROR_CODE_SLOTS)
    ),
    _g("npu_container_info", "npu-exporter compatible: a container using a chip, value 1.", CONTAINER_INFO_LABELS),
    _g("container_npu_total_memory", "npu-exporter compatible: memory of a chip one container holds whole, MB.", CARD),
    _g("container_npu_used_memory", "npu-exporter compatible: memory used on a chip one container holds whole, MB.", CARD),
    _g("container_npu_utilization", "npu-exporter compatible: AI core utilisation of a chip one container holds whole, percent.", CARD),
    _g("vnpu_pod_aicore_utilization", "npu-exporter compatible: a vNPU's AI core utilisation, percent (310P).", VDEV),
    _g("vnpu_pod_total_memory", "npu-exporter compatible: a vNPU's memory, KB (310P).", VDEV),
    _g("vnpu_pod_used_memory", "npu-exporter compatible: a vNPU's memory in use, KB (310P).", VDEV),
)
"""npu-exporter's names and labels, emitted as well with ``--npu-exporter-compat``."""

# --- other vnpu services (read by the dashboards and alerts) ---------------------------------

SCHED_REQUESTS = _c("vnpu_scheduler_requests", "HTTP requests served, by verb and outcome.", ("verb", "outcome"))
SCHED_DURATION = _h("vnpu_scheduler_request_duration_seconds", "Time to answer one request, by verb.", ("verb",), ())
SCHED_FILTER_OUTCOMES = _c("vnpu_scheduler_filter_outcomes", "Per-node filter results: fit, or the refusal reason.", ("reason",))
SCHED_BINDS = _c("vnpu_scheduler_binds", "Bind results.", ("result",))
SCHED_BIND_CONFLICTS = _c("vnpu_scheduler_bind_conflicts", "Conflicts met while binding.", ("kind",))
SCHED_LOCK_WAIT = _h("vnpu_scheduler_lock_wait_seconds", "Time a bind waited for the node lock.", (), ())
SCHED_NODES = _g("vnpu_scheduler_nodes", "Nodes in the cache by state.", ("state",))
SCHED_SYNCED = _g("vnpu_scheduler_cache_synced", "1 once the caches have listed the cluster.")
SCHED_CONFIG_OK = _g("vnpu_scheduler_device_config_ok", "1 when the last device-config load succeeded.")
SCHED_GRANT_REPORTS = _g("vnpu_scheduler_grant_reports", "Nodes by their device plugin's grant report: read, absent, unreadable.", ("state",))
SCHED_GRANT_MISMATCHES = _g("vnpu_scheduler_grant_mismatches", "Pods whose decision annotations disagree with what their node granted, by reason.", ("reason",))
SCHED_DOUBLE_ASSIGNMENTS = _g("vnpu_scheduler_double_assignments", "Chips whose holders cannot all be on them at once: a chip given twice.")
SCHED_QUOTA_REFUSALS = _c("vnpu_scheduler_quota_refusals", "Pods held back by an NPU quota, by verb (filter, bind, admission) and rule.", ("verb", "rule"))
SCHED_QUOTA_LIMIT = _g("vnpu_scheduler_quota_limit", "An NPU limit of a ResourceQuota (MiB, AI cores, chips, vNPUs or devices).", ("namespace", "quota", "resource"))
SCHED_QUOTA_USED = _g("vnpu_scheduler_quota_used", "What the namespace's bound pods hold of a ResourceQuota's NPU limit.", ("namespace", "quota", "resource"))
SCHED_TEAM_USED = _g("vnpu_scheduler_team_used", "What a team's pods hold, by unit.", ("team", "unit"))
SCHED_TEAM_NOMINAL = _g("vnpu_scheduler_team_nominal", "A team's nominal (guaranteed) share, by unit.", ("team", "unit"))
SCHED_TEAM_LIMIT = _g("vnpu_scheduler_team_limit", "A team's nominal + borrowingLimit, by unit; absent when it may borrow without limit.", ("team", "unit"))
SCHED_TEAM_BORROWED = _g("vnpu_scheduler_team_borrowed", "What a team holds above its nominal share, by unit.", ("team", "unit"))
SCHED_TEAM_PENDING = _g("vnpu_scheduler_team_pending", "What a team's pods waiting to be bound ask for, by unit.", ("team", "unit"))
SCHED_TEAM_WEIGHT = _g("vnpu_scheduler_team_weight", "A team's fair-share weight.", ("team",))
SCHED_TEAM_SHARE = _g("vnpu_scheduler_team_dominant_share", "A team's weighted dominant share: its largest used / cohort nominal, divided by its weight.", ("team",))
SCHED_NAMESPACE_USED = _g("vnpu_scheduler_namespace_used", "What a namespace's bound pods hold, by unit.", ("namespace", "unit"))
SCHED_NAMESPACE_PENDING = _g("vnpu_scheduler_namespace_pending", "What a namespace's pods waiting to be bound ask for, by unit.", ("namespace", "unit"))
SCHED_AICORE_SECONDS = _c("vnpu_scheduler_namespace_aicore_seconds", "AI-core-seconds held by a namespace's pods; team is empty for a namespace in no team.", ("namespace", "team"))
SCHED_MEMORY_MIB_SECONDS = _c("vnpu_scheduler_namespace_memory_mib_seconds", "Device-memory MiB-seconds held by a namespace's pods; team is empty for a namespace in no team.", ("namespace", "team"))
SCHED_TENANTS_OK = _g("vnpu_scheduler_tenants_config_ok", "1 when the tenants config was read (or none is set), 0 while the last good one is kept.")

SCHEDULER: tuple[Definition, ...] = (
    SCHED_REQUESTS, SCHED_DURATION, SCHED_FILTER_OUTCOMES, SCHED_BINDS, SCHED_BIND_CONFLICTS,
    SCHED_LOCK_WAIT, SCHED_NODES, SCHED_SYNCED, SCHED_CONFIG_OK, SCHED_GRANT_REPORTS,
    SCHED_GRANT_MISMATCHES, SCHED_DOUBLE_ASSIGNMENTS,
    SCHED_QUOTA_REFUSALS, SCHED_QUOTA_LIMIT, SCHED_QUOTA_USED, SCHED_TEAM_USED, SCHED_TEAM_NOMINAL,
    SCHED_TEAM_LIMIT, SCHED_TEAM_BORROWED, SCHED_TEAM_PENDING, SCHED_NAMESPACE_USED,
    SCHED_NAMESPACE_PENDING, SCHED_AICORE_SECONDS, SCHED_MEMORY_MIB_SECONDS, SCHED_TENANTS_OK,
    SCHED_TEAM_WEIGHT, SCHED_TEAM_SHARE,
)
"""Scheduler metrics the dashboards and alerts use (checked against vnpu_scheduler.metrics)."""

PLUGIN_ALLOCATIONS = _c("vnpu_device_plugin_allocations", "Allocate calls by result.", ("result",))
PLUGIN_ALLOCATE_DURATION = _h("vnpu_device_plugin_allocate_duration_seconds", "Time to serve one Allocate call.", ("result",), ())
PLUGIN_CREATED = _c("vnpu_device_plugin_vnpus_created", "vNPUs the plugin created.")
PLUGIN_DESTROYED = _c("vnpu_device_plugin_vnpus_destroyed", "vNPUs the plugin destroyed, by reason.", ("reason",))
PLUGIN_RECLAIMED = _c("vnpu_device_plugin_vnpus_reclaimed", "vNPUs the reconciler destroyed, by reason.", ("reason",))
PLUGIN_OWNED = _g("vnpu_device_plugin_vnpus_owned", "vNPUs the ownership ledger records.")
PLUGIN_HEALTH_TRANSITIONS = _c("vnpu_device_plugin_health_transitions", "Chips that turned healthy or unhealthy.", ("to",))
PLUGIN_CHIPS = _g("vnpu_device_plugin_chips", "Chips advertised to the kubelet, by health.", ("health",))
PLUGIN_REGISTRATIONS = _c("vnpu_device_plugin_registrations", "Registrations with the kubelet, by result.", ("result",))
PLUGIN_PUBLICATIONS = _c("vnpu_device_plugin_node_publications", "Writes of the node annotations (inventory, handshake), by result.", ("result",))
PLUGIN_API_RETRIES = _c("vnpu_device_plugin_api_retries", "Kubernetes API calls repeated after an outage or a conflict.")
PLUGIN_GRANT_CONFLICTS = _c("vnpu_device_plugin_grant_conflicts", "Allocates refused for taking what a live pod holds, or going over a budget, by why.", ("reason",))
PLUGIN_RECLAIMS_WITHHELD = _c("vnpu_device_plugin_reclaims_withheld", "vNPUs kept though their recorded owners are done, by what said a container may use them.", ("reason",))
PLUGIN_STATE_DISAGREEMENTS = _c("vnpu_device_plugin_state_disagreements", "vNPUs kept because kubelet's PodResources lists a running container that may hold them while the ledger and the grant book say nobody needs them, by what disagreed.", ("reason",))

DEVICE_PLUGIN: tuple[Definition, ...] = (
    PLUGIN_ALLOCATIONS, PLUGIN_ALLOCATE_DURATION, PLUGIN_CREATED, PLUGIN_DESTROYED, PLUGIN_RECLAIMED,
    PLUGIN_OWNED, PLUGIN_HEALTH_TRANSITIONS, PLUGIN_CHIPS, PLUGIN_REGISTRATIONS, PLUGIN_PUBLICATIONS,
    PLUGIN_API_RETRIES, PLUGIN_GRANT_CONFLICTS, PLUGIN_RECLAIMS_WITHHELD, PLUGIN_STATE_DISAGREEMENTS,
)
"""Device plugin metrics the dashboards and alerts use (checked against vnpu_device_plugin.metrics)."""

UP = _g("up", "Prometheus: 1 when the last scrape of a target succeeded.")
"""Prometheus's own per-target series, which the alerts read to find an agent that is down."""
# fmt: on


def by_name() -> dict[str, Definition]:
    """Every definition above by family name."""
    return {d.name: d for d in (*EXPORTER, *COMPAT, *SCHEDULER, *DEVICE_PLUGIN, UP)}


def sample_names() -> dict[str, Definition]:
    """Every sample name that may appear on the wire or in a query, with its family."""
    return {sample: d for d in by_name().values() for sample in d.samples}
