"""The control plane dashboard: scheduler latency and refusals, device plugin allocations and vNPUs.

Built by ``vnpu_exporter.dashboards.build`` from the scheduler's and the device plugin's
metric names as ``metrics.SCHEDULER`` and ``metrics.DEVICE_PLUGIN`` list them (the tests
check those lists against the services' own registries).
"""

from __future__ import annotations

from vnpu_exporter import grafana as g
from vnpu_exporter import metrics as m


def control_plane() -> g.Dashboard:
    scheduler = g.Row(
        "Scheduler",
        (
            g.Panel(
                "Requests by verb and outcome",
                (
                    g.Query(
                        f"sum by (verb, outcome) ({g.rate(m.SCHED_REQUESTS)})",
                        "{{verb}} {{outcome}}",
                    ),
                ),
                unit="reqps",
            ),
            g.Panel(
                "Latency p50 / p99 by verb",
                (
                    g.Query(g.quantile(0.5, m.SCHED_DURATION, "verb"), "{{verb}} p50"),
                    g.Query(g.quantile(0.99, m.SCHED_DURATION, "verb"), "{{verb}} p99"),
                ),
                unit="s",
            ),
            g.Panel(
                "Filter refusals by reason",
                (
                    g.Query(
                        f"sum by (reason) ({g.rate(m.SCHED_FILTER_OUTCOMES, reason='!fit')})",
                        "{{reason}}",
                    ),
                ),
                unit="reqps",
                stacked=True,
            ),
            g.Panel(
                "Binds by result",
                (g.Query(f"sum by (result) ({g.rate(m.SCHED_BINDS)})", "{{result}}"),),
                unit="reqps",
            ),
            g.Panel(
                "Bind conflicts",
                (g.Query(f"sum by (kind) ({g.rate(m.SCHED_BIND_CONFLICTS)})", "{{kind}}"),),
                unit="reqps",
            ),
            g.Panel(
                "Node lock wait p99",
                (g.Query(g.quantile(0.99, m.SCHED_LOCK_WAIT), "p99"),),
                unit="s",
            ),
            g.Panel(
                "Pods vs. what nodes granted",
                (
                    g.Query(f"max({g.series(m.SCHED_DOUBLE_ASSIGNMENTS)})", "chips given twice"),
                    g.Query(
                        f"max by (reason) ({g.series(m.SCHED_GRANT_MISMATCHES)})", "{{reason}}"
                    ),
                    g.Query(
                        f"max({g.series(m.SCHED_GRANT_REPORTS, state='unreadable')})",
                        "nodes with an unreadable report",
                    ),
                ),
                description="Above 0, a tenant edited a pod's decision or a pod was bound past "
                "the scheduler; each pod is counted as what its node granted. The scheduler "
                "logs grant_mismatch with the pods.",
            ),
            g.Panel(
                "Cache and config",
                (
                    g.Query(f"min({g.series(m.SCHED_SYNCED)})", "cache synced"),
                    g.Query(f"min({g.series(m.SCHED_CONFIG_OK)})", "device config ok"),
                ),
                "stat",
            ),
        ),
    )
    plugin = g.Row(
        "Device plugins",
        (
            g.Panel(
                "Allocate by result",
                (g.Query(f"sum by (result) ({g.rate(m.PLUGIN_ALLOCATIONS)})", "{{result}}"),),
                unit="reqps",
            ),
            g.Panel(
                "Allocate latency p99",
                (g.Query(g.quantile(0.99, m.PLUGIN_ALLOCATE_DURATION, "result"), "{{result}}"),),
                unit="s",
            ),
            g.Panel(
                "vNPUs created, destroyed, reclaimed",
                (
                    g.Query(f"sum({g.rate(m.PLUGIN_CREATED)})", "created"),
                    g.Query(
                        f"sum by (reason) ({g.rate(m.PLUGIN_DESTROYED)})", "destroyed ({{reason}})"
                    ),
                    g.Query(
                        f"sum by (reason) ({g.rate(m.PLUGIN_RECLAIMED)})", "reclaimed ({{reason}})"
                    ),
                ),
                unit="ops",
            ),
            g.Panel(
                "vNPUs owned (ledger)",
                (g.Query(f"sum by (instance) ({g.series(m.PLUGIN_OWNED)})", "{{instance}}"),),
            ),
            g.Panel(
                "Chips advertised by health",
                (g.Query(f"sum by (health) ({g.series(m.PLUGIN_CHIPS)})", "{{health}}"),),
                stacked=True,
            ),
            g.Panel(
                "Health transitions",
                (g.Query(f"sum by (to) ({g.rate(m.PLUGIN_HEALTH_TRANSITIONS)})", "to {{to}}"),),
                unit="ops",
            ),
            g.Panel(
                "Registrations and node publications",
                (
                    g.Query(
                        f"sum by (result) ({g.rate(m.PLUGIN_REGISTRATIONS)})",
                        "registration {{result}}",
                    ),
                    g.Query(
                        f"sum by (result) ({g.rate(m.PLUGIN_PUBLICATIONS)})",
                        "publication {{result}}",
                    ),
                ),
                unit="ops",
            ),
            g.Panel(
                "Kubernetes API retries",
                (g.Query(f"sum({g.rate(m.PLUGIN_API_RETRIES)})", "retries"),),
                unit="ops",
            ),
        ),
    )
    return g.Dashboard(
        "vnpu-control-plane",
        "vnpu / Scheduler and device plugins",
        "Health of vnpu's control plane: scheduler latency and refusals, device plugin allocations and vNPU lifecycle.",
        (scheduler, plugin),
    )
