"""vnpu's Grafana dashboards, built from the metric definitions, and the command that writes them.

``python -m vnpu_exporter.dashboards [--out DIR] [--check]`` writes (or, with ``--check``,
compares) ``<DIR>/<uid>.json`` for every dashboard in ``DASHBOARDS`` (default DIR:
``deploy/dashboards``). Every query is built from ``metrics`` definitions, so a renamed
metric is a Python error here and a failing test, never a silently empty panel; the tests
also run every query against a real Prometheus scraping the exporter, the scheduler and
the device plugin. The Helm chart packages the generated files.
"""

from __future__ import annotations

from vnpu_exporter import grafana as g
from vnpu_exporter.dashboards import controlplane, node, overview, tenants, workloads

DASHBOARDS = (
    overview.cluster_overview,
    node.node_detail,
    workloads.workloads,
    controlplane.control_plane,
    tenants.tenants,
)


def build() -> list[g.Dashboard]:
    """Every dashboard, in the order the files are listed."""
    return [make() for make in DASHBOARDS]
