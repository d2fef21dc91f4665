"""The node detail dashboard: every chip of the chosen nodes, its faults, vNPUs and holders.

Built by ``vnpu_exporter.dashboards.build``; also shows the exporter's own health (failed
reads, refresh age, scrape and refresh durations).
"""

from __future__ import annotations

from vnpu_exporter import grafana as g
from vnpu_exporter import metrics as m

NODE = "~$node"


def node_detail() -> g.Dashboard:
    chip = {"node": NODE}
    legend = "{{node}} chip {{chip}}"
    table = (
        g.Query(f"max by (node, chip, uuid, model, chip_name) ({g.series(m.CHIP_INFO, **chip)})"),
        g.Query(g.series(m.CHIP_HEALTHY, **chip)),
        g.Query(g.series(m.CHIP_TEMPERATURE, **chip)),
        g.Query(g.series(m.CHIP_AICORE_UTILIZATION, **chip)),
        g.Query(g.series(m.CHIP_MEMORY_USED, **chip)),
        g.Query(g.series(m.CHIP_VNPUS, **chip)),
    )
    chips = g.Row(
        "Chips",
        (
            g.Panel(
                "Chips",
                table,
                "table",
                description="One line per chip: health, temperature, utilisation, memory in use, vNPUs.",
                width=24,
            ),
            g.Panel(
                "Temperature",
                (g.Query(g.series(m.CHIP_TEMPERATURE, **chip), legend),),
                unit="celsius",
            ),
            g.Panel(
                "Power",
                (g.Query(g.series(m.CHIP_POWER, **chip), legend + " ({{scope}})"),),
                unit="watt",
                description="310P reports its card's power (scope=card).",
            ),
            g.Panel(
                "AI core utilisation",
                (g.Query(g.series(m.CHIP_AICORE_UTILIZATION, **chip), legend),),
                unit="percentunit",
            ),
            g.Panel(
                "Memory used",
                (
                    g.Query(
                        f"{g.series(m.CHIP_MEMORY_USED, **chip)} / {g.series(m.CHIP_MEMORY_TOTAL, **chip)}",
                        legend,
                    ),
                ),
                unit="percentunit",
            ),
        ),
    )
    health = g.Row(
        "Health",
        (
            g.Panel(
                "Fault level",
                (
                    g.Query(
                        f"max by (node, chip, level) ({g.series(m.CHIP_FAULT_LEVEL, **chip)}) > 0",
                        "{{node}} chip {{chip}} {{level}}",
                    ),
                ),
                description="The worst active fault level of each chip.",
            ),
            g.Panel(
                "Active fault codes",
                (g.Query(g.series(m.CHIP_FAULT_CODE, **chip)),),
                "table",
                description="Every active fault code with its handling level.",
            ),
            g.Panel(
                "Chips off the bus",
                (g.Query(f"1 - {g.series(m.CHIP_PRESENT, **chip)}", legend),),
                description="1 when a chip dropped off the bus (DCMI -8012).",
            ),
        ),
    )
    vnpus = g.Row(
        "vNPUs and allocations",
        (
            g.Panel(
                "vNPU templates in use",
                (
                    g.Query(
                        f"sum by (node, chip, template) ({g.series(m.CHIP_VNPU_TEMPLATES, **chip)})",
                        "{{node}} chip {{chip}} {{template}}",
                    ),
                ),
                stacked=True,
            ),
            g.Panel(
                "Allocated versus free (memory)",
                (
                    g.Query(
                        f"{g.series(m.CHIP_ALLOCATED_MEMORY, **chip)} / {g.series(m.CHIP_MEMORY_TOTAL, **chip)}",
                        legend,
                    ),
                ),
                unit="percentunit",
            ),
            g.Panel(
                "Allocations on the node",
                (g.Query(g.series(m.ALLOCATION_INFO, **chip)),),
                "table",
                description="Every whole chip, vNPU and soft slice, with its pod and how its vNPU was identified.",
                width=24,
            ),
        ),
    )
    exporter = g.Row(
        "Exporter",
        (
            g.Panel(
                "Failed reads",
                (
                    g.Query(
                        f"sum by (group, reason) ({g.rate(m.READ_ERRORS, **chip)})",
                        "{{group}} {{reason}}",
                    ),
                ),
                unit="reqps",
                description="Reads that failed; their values are missing from the scrapes.",
            ),
            g.Panel(
                "Seconds since the last refresh",
                (g.Query(f"time() - {g.series(m.LAST_REFRESH)}", "{{instance}} {{group}}"),),
                unit="s",
            ),
            g.Panel(
                "Scrape duration p99",
                (g.Query(g.quantile(0.99, m.SCRAPE_DURATION, "instance"), "{{instance}}"),),
                unit="s",
            ),
            g.Panel(
                "Refresh duration p99",
                (g.Query(g.quantile(0.99, m.REFRESH_DURATION, "group"), "{{group}}"),),
                unit="s",
            ),
        ),
    )
    return g.Dashboard(
        "vnpu-node-detail",
        "vnpu / Node detail",
        "Every chip of the chosen nodes: health, fault codes, sensors, vNPUs and who holds them.",
        (chips, health, vnpus, exporter),
        (g.Variable("node", m.CHIP_INFO, "node"),),
    )
