"""The workloads dashboard: what each namespace and pod holds on NPUs and what it uses.

Built by ``vnpu_exporter.dashboards.build``; for quota, chargeback and finding idle vNPUs.
"""

from __future__ import annotations

from vnpu_exporter import grafana as g
from vnpu_exporter import metrics as m

NS = "~$namespace"


def workloads() -> g.Dashboard:
    ns = {"namespace": NS}
    pod_keys = "namespace, pod"
    namespaces = g.Row(
        "Namespaces: allocated versus used",
        (
            g.Panel(
                "Memory",
                (
                    g.Query(
                        f"sum by (namespace) ({g.series(m.NAMESPACE_ALLOCATED_MEMORY, **ns)})",
                        "{{namespace}} allocated",
                    ),
                    g.Query(
                        f"sum by (namespace) ({g.series(m.NAMESPACE_USED_MEMORY, **ns)})",
                        "{{namespace}} used",
                    ),
                ),
                unit="bytes",
                description="Allocated counts template sizes (what quota and chargeback see); used counts measured allocations only.",
            ),
            g.Panel(
                "AI cores",
                (
                    g.Query(
                        f"sum by (namespace) ({g.series(m.NAMESPACE_ALLOCATED_AICORES, **ns)})",
                        "{{namespace}} allocated",
                    ),
                    g.Query(
                        f"sum by (namespace) ({g.series(m.NAMESPACE_USED_AICORES, **ns)})",
                        "{{namespace}} busy",
                    ),
                ),
                description="Held AI cores, and held x utilisation for measured allocations.",
            ),
            g.Panel(
                "Allocations by kind",
                (
                    g.Query(
                        f"sum by (namespace, kind) ({g.series(m.NAMESPACE_ALLOCATIONS, **ns)})",
                        "{{namespace}} {{kind}}",
                    ),
                ),
                stacked=True,
            ),
            g.Panel(
                "Unmeasured allocations",
                (
                    g.Query(
                        f"sum by (namespace) ({g.series(m.NAMESPACE_UNMEASURED, **ns)})",
                        "{{namespace}}",
                    ),
                ),
                description="Allocations whose use the driver does not report (910 vNPUs, shared soft slices): not in the used figures.",
            ),
        ),
    )
    pods = g.Row(
        "Pods",
        (
            g.Panel(
                "Pods: allocated versus used",
                (
                    g.Query(f"sum by ({pod_keys}) ({g.series(m.ALLOCATION_MEMORY_LIMIT, **ns)})"),
                    g.Query(f"sum by ({pod_keys}) ({g.series(m.ALLOCATION_MEMORY_USED, **ns)})"),
                    g.Query(f"sum by ({pod_keys}) ({g.series(m.ALLOCATION_AICORES, **ns)})"),
                    g.Query(
                        f"avg by ({pod_keys}) ({g.series(m.ALLOCATION_AICORE_UTILIZATION, **ns)})"
                    ),
                ),
                "table",
                description="Memory limit and use, AI cores held and their mean utilisation, per pod.",
                width=24,
            ),
            g.Panel(
                "AI core utilisation per allocation",
                (
                    g.Query(
                        g.series(m.ALLOCATION_AICORE_UTILIZATION, **ns),
                        "{{namespace}}/{{pod}} {{container}} {{kind}} {{template}}",
                    ),
                ),
                unit="percentunit",
            ),
            g.Panel(
                "Memory used per allocation",
                (
                    g.Query(
                        f"{g.series(m.ALLOCATION_MEMORY_USED, **ns)} / {g.series(m.ALLOCATION_MEMORY_LIMIT, **ns)}",
                        "{{namespace}}/{{pod}} {{container}}",
                    ),
                ),
                unit="percentunit",
            ),
            g.Panel(
                "Idle allocations (no AI core use now)",
                (g.Query(f"{g.series(m.ALLOCATION_AICORE_UTILIZATION, **ns)} == 0"),),
                "table",
                description="Whole chips and vNPUs held but not computing; the alert fires when this lasts.",
                width=24,
            ),
        ),
    )
    return g.Dashboard(
        "vnpu-workloads",
        "vnpu / Workloads",
        "What each namespace and pod holds on Ascend NPUs and what it uses: quota, chargeback, idle vNPUs.",
        (namespaces, pods),
        (g.Variable("namespace", m.ALLOCATION_INFO, "namespace"),),
    )
