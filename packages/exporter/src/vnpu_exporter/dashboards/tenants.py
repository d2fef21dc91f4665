"""The tenants dashboard: each team's use against its nominal and limit, borrowing, demand, quotas.

Built by ``vnpu_exporter.dashboards.build`` from the scheduler's quota and team metrics as
``metrics.SCHEDULER`` lists them. Two scheduler replicas export the same cluster state, so
every gauge is taken with ``max`` over the replicas before it is summed or divided; the
refusal counters are per replica (each counts the requests it answered) and are summed.
"""

from __future__ import annotations

from vnpu_exporter import grafana as g
from vnpu_exporter import metrics as m

TEAM = "~$team"
AICORE = "~(.+-)?aicore"  # aicore, and per chip model: Ascend310P-aicore
MEMORY = "~(.+-)?memory"  # MiB, summed over every device
RANGE = "$__range"  # the dashboard's time range: consumption over what is shown
HOUR = 3600


def _team(definition: m.Definition, **unit: str) -> str:
    """One replica's copy of a team gauge of the selected teams (and ``unit=`` units)."""
    return f"max by (team, unit) ({g.series(definition, team=TEAM, **unit)})"


def _against_nominal(title: str, unit: str, grafana_unit: str, what: str) -> g.Panel:
    return g.Panel(
        title,
        (
            g.Query(_team(m.SCHED_TEAM_USED, unit=unit), "{{team}} {{unit}} used"),
            g.Query(_team(m.SCHED_TEAM_NOMINAL, unit=unit), "{{team}} {{unit}} nominal"),
            g.Query(_team(m.SCHED_TEAM_LIMIT, unit=unit), "{{team}} {{unit}} limit"),
        ),
        unit=grafana_unit,
        description=f"{what} a team's pods hold, its nominal (guaranteed) share and its limit "
        "(nominal + borrowingLimit; no line: it may borrow without limit). Units are for every "
        "chip model together or for one (Ascend310P-...), as the tenants config names them.",
    )


def _hours(definition: m.Definition, by: str) -> str:
    """What ``definition`` (a per-namespace seconds counter) grew by over the range, in hours."""
    grown = f"increase({g.series(definition, team=TEAM)}[{RANGE}])"
    return f"sum by ({by}) (max by (namespace, team) ({grown})) / {HOUR}"


def _quota(definition: m.Definition) -> str:
    return f"max by (namespace, quota, resource) ({g.series(definition)})"


def tenants() -> g.Dashboard:
    teams = g.Row(
        "Teams",
        (
            _against_nominal("AI cores: used, nominal, limit", AICORE, "short", "AI cores"),
            _against_nominal("Memory: used, nominal, limit", MEMORY, "mbytes", "Device memory"),
            g.Panel(
                "Borrowed (held above nominal)",
                (g.Query(_team(m.SCHED_TEAM_BORROWED), "{{team}} {{unit}}"),),
                description="Idle capacity lent to a team: what it holds above its nominal share. "
                "A team within its nominal may reclaim it.",
                stacked=True,
            ),
            g.Panel(
                "Pending demand",
                (g.Query(_team(m.SCHED_TEAM_PENDING), "{{team}} {{unit}}"),),
                description="What a team's pods that the filter has seen and that are not bound "
                "yet ask for. Demand that lasts while the team is below its nominal means "
                "reclaim is not working or capacity is fragmented.",
            ),
            g.Panel(
                "Weighted dominant share",
                (
                    g.Query(f"max by (team) ({_team(m.SCHED_TEAM_SHARE)})", "{{team}}"),
                    g.Query(
                        f"max by (team) ({_team(m.SCHED_TEAM_USED)}"
                        f" / ({_team(m.SCHED_TEAM_NOMINAL)} > 0))",
                        "{{team}} of its nominal",
                    ),
                ),
                unit="percentunit",
                description="A team's largest use over the units teams share, as a part of the "
                "cohort (every team's nominal together), divided by its weight "
                "(vnpu_scheduler_team_weight): the number fair sharing evens out between "
                "backlogged teams. Beside it, the largest used/nominal (1 = at its guarantee, "
                "above = borrowing).",
                width=24,
            ),
        ),
    )
    consumption = g.Row(
        "Consumption over the time range",
        (
            g.Panel(
                "AI-core-hours per team",
                (g.Query(_hours(m.SCHED_AICORE_SECONDS, "team"), "{{team}}", instant=True),),
                "bargauge",
                description="AI cores held x hours, over the dashboard's time range. An empty "
                "team is the namespaces in no team.",
            ),
            g.Panel(
                "MiB-hours per team",
                (g.Query(_hours(m.SCHED_MEMORY_MIB_SECONDS, "team"), "{{team}}", instant=True),),
                "bargauge",
                description="Device-memory MiB held x hours, over the dashboard's time range.",
            ),
            g.Panel(
                "NPU-hours per namespace",
                (
                    g.Query(_hours(m.SCHED_AICORE_SECONDS, "namespace, team")),
                    g.Query(_hours(m.SCHED_MEMORY_MIB_SECONDS, "namespace, team")),
                ),
                "table",
                description="AI-core-hours (A) and MiB-hours (B) per namespace and its team, over "
                "the dashboard's time range.",
                width=24,
            ),
        ),
    )
    quotas = g.Row(
        "ResourceQuotas and refusals",
        (
            g.Panel(
                "ResourceQuota use (used / limit)",
                (
                    g.Query(
                        f"{_quota(m.SCHED_QUOTA_USED)} / ({_quota(m.SCHED_QUOTA_LIMIT)} > 0)",
                        "{{namespace}}/{{quota}} {{resource}}",
                        instant=True,
                    ),
                ),
                "bargauge",
                unit="percentunit",
                description="How full each NPU limit of each ResourceQuota is (the scheduler "
                "enforces them; kube-apiserver does not count the limits.* NPU names).",
            ),
            g.Panel(
                "ResourceQuota use versus limit",
                (g.Query(_quota(m.SCHED_QUOTA_USED)), g.Query(_quota(m.SCHED_QUOTA_LIMIT))),
                "table",
                description="Used (A) and limit (B) per namespace, ResourceQuota and NPU resource "
                "(MiB, AI cores, chips, vNPUs or devices).",
            ),
            g.Panel(
                "Pending demand per namespace",
                (
                    g.Query(
                        f"max by (namespace, unit) ({g.series(m.SCHED_NAMESPACE_PENDING)})",
                        "{{namespace}} {{unit}}",
                    ),
                ),
            ),
            g.Panel(
                "Quota refusals by rule",
                (
                    g.Query(
                        f"sum by (verb, rule) ({g.rate(m.SCHED_QUOTA_REFUSALS)})",
                        "{{rule}} ({{verb}})",
                    ),
                ),
                unit="ops",
                stacked=True,
                description="Pods held back by an NPU quota, by the rule that refused them "
                "(resource-quota, team-limit, no-idle-capacity, ...) and where: filter, bind or "
                "admission.",
            ),
            g.Panel(
                "Tenants config",
                (g.Query(f"min({g.series(m.SCHED_TENANTS_OK)})", "tenants config ok"),),
                "stat",
                description="0 when a scheduler replica rejected the tenants ConfigMap and keeps "
                "the last good one; its log says why.",
                width=24,
                height=4,
            ),
        ),
    )
    return g.Dashboard(
        "vnpu-tenants",
        "vnpu / Tenants",
        "How teams share the NPUs: use against nominal and limit, borrowing, pending demand, "
        "NPU-hours consumed, ResourceQuota use and quota refusals.",
        (teams, consumption, quotas),
        (g.Variable("team", m.SCHED_TEAM_NOMINAL, "team"),),
    )
