"""The cluster overview dashboard: capacity, allocation, use and fragmentation by chip model.

Built by ``vnpu_exporter.dashboards.build``; a panel per question an operator asks about
the fleet, plus why pods wait (the scheduler's refusals by reason).
"""

from __future__ import annotations

from vnpu_exporter import grafana as g
from vnpu_exporter import metrics as m

CHIP_KEYS = "node, chip, uuid, model"
MODEL = "~$model"


def _stat(title: str, expr: str, unit: str = "short", description: str = "") -> g.Panel:
    return g.Panel(title, (g.Query(expr),), "stat", unit, description, width=4, height=4)


def _by_model(title: str, unit: str, description: str, *queries: tuple[str, str]) -> g.Panel:
    return g.Panel(
        title,
        tuple(g.Query(expr, legend) for expr, legend in queries),
        unit=unit,
        description=description,
    )


def cluster_overview() -> g.Dashboard:
    chip = {"model": MODEL}
    busy_cores = f"sum by (model) ({g.series(m.CHIP_AICORES, **chip)} * on ({CHIP_KEYS}) {g.series(m.CHIP_AICORE_UTILIZATION, **chip)})"
    free_memory = f"sum by (model) ({g.series(m.CHIP_MEMORY_TOTAL, **chip)}) - sum by (model) ({g.series(m.CHIP_ALLOCATED_MEMORY, **chip)})"
    headline = g.Row(
        "Fleet",
        (
            _stat("Chips", f"count({g.series(m.CHIP_INFO, **chip)})"),
            _stat(
                "Unhealthy chips",
                f"count({g.series(m.CHIP_HEALTHY, **chip)} == 0) or vector(0)",
                description="Chips the kubelet is told are Unhealthy (fault level above SubHealthFault).",
            ),
            _stat(
                "Allocations",
                f"sum({g.series(m.CHIP_ALLOCATIONS, **chip)})",
                description="Whole chips, vNPUs and soft slices held by pods.",
            ),
            _stat("Hardware vNPUs", f"sum({g.series(m.CHIP_VNPUS, **chip)})"),
            _stat(
                "Unowned vNPUs",
                f"sum({g.series(m.CHIP_UNOWNED_VNPUS, **chip)})",
                description="vNPUs on the driver that no pod's allocation accounts for.",
            ),
            _stat(
                "Stranded memory",
                f"sum({g.series(m.CHIP_STRANDED_MEMORY, **chip)})",
                "bytes",
                "Free chip memory no template of its model can use.",
            ),
        ),
    )
    capacity = g.Row(
        "Capacity, allocated, used (by chip model)",
        (
            _by_model(
                "Memory",
                "bytes",
                "Chip memory: capacity, held by pods (template sizes), and in use on the chips.",
                (f"sum by (model) ({g.series(m.CHIP_MEMORY_TOTAL, **chip)})", "{{model}} capacity"),
                (
                    f"sum by (model) ({g.series(m.CHIP_ALLOCATED_MEMORY, **chip)})",
                    "{{model}} allocated",
                ),
                (f"sum by (model) ({g.series(m.CHIP_MEMORY_USED, **chip)})", "{{model}} used"),
            ),
            _by_model(
                "AI cores",
                "short",
                "AI cores: capacity, held by pods, and busy (chip utilisation x cores).",
                (f"sum by (model) ({g.series(m.CHIP_AICORES, **chip)})", "{{model}} capacity"),
                (
                    f"sum by (model) ({g.series(m.CHIP_ALLOCATED_AICORES, **chip)})",
                    "{{model}} allocated",
                ),
                (busy_cores, "{{model}} busy"),
            ),
            _by_model(
                "Fragmentation: free capacity no template can use",
                "bytes",
                "Stranded memory: free on chips where another budget (vNPU slots, AI cores, AI CPUs, media) is exhausted, against all free memory.",
                (
                    f"sum by (model) ({g.series(m.CHIP_STRANDED_MEMORY, **chip)})",
                    "{{model}} stranded",
                ),
                (free_memory, "{{model}} free"),
            ),
            _by_model(
                "Stranded AI cores",
                "short",
                "Free AI cores on chips where no template fits any more.",
                (f"sum by (model) ({g.series(m.CHIP_STRANDED_AICORES, **chip)})", "{{model}}"),
            ),
            _by_model(
                "Chips by fault level",
                "short",
                "Chips at each of Huawei's fault-handling levels.",
                (f"sum by (level) ({g.series(m.CHIP_FAULT_LEVEL, **chip)}) > 0", "{{level}}"),
            ),
            _by_model(
                "How full the chips are (p50 / max of the most used budget)",
                "percentunit",
                "Per chip, the most used budget of vNPU slots, memory, AI cores and AI CPUs.",
                (
                    f"quantile by (model) (0.5, {g.series(m.CHIP_ALLOCATED_RATIO, **chip)})",
                    "{{model}} median",
                ),
                (
                    f"max by (model) ({g.series(m.CHIP_ALLOCATED_RATIO, **chip)})",
                    "{{model}} fullest",
                ),
            ),
        ),
    )
    scheduling = g.Row(
        "Waiting pods",
        (
            g.Panel(
                "Why pods wait: node refusals by reason",
                (
                    g.Query(
                        f"sum by (reason) ({g.rate(m.SCHED_FILTER_OUTCOMES, reason='!fit')})",
                        "{{reason}}",
                    ),
                ),
                unit="reqps",
                description="Nodes the scheduler turned down per second, by the budget or rule that refused them (vnpu-scheduler filter outcomes).",
                stacked=True,
            ),
            g.Panel(
                "Nodes by scheduler state",
                (g.Query(f"max by (state) ({g.series(m.SCHED_NODES)})", "{{state}}"),),
                description="Nodes the scheduler can place on, cannot (stale handshake, no inventory), or whose usage is unknown.",
            ),
        ),
    )
    return g.Dashboard(
        "vnpu-cluster-overview",
        "vnpu / Cluster overview",
        "Ascend NPU capacity, allocation, use and fragmentation across the cluster.",
        (headline, capacity, scheduling),
        (g.Variable("model", m.CHIP_INFO, "model"),),
    )
