"""A small Grafana dashboard model: panels, rows, template variables, and their JSON.

``dashboards`` describes vnpu's dashboards with these classes; ``render`` turns one into
the JSON Grafana imports (schema version 39, a ``datasource`` variable for the Prometheus
data source, panels laid out left to right, top to bottom). PromQL is built from
``metrics.Definition`` objects with ``series``/``rate``/``quantile`` so a query cannot name a
metric that does not exist; ``queries`` lists every query for the tests that run them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from vnpu_exporter import metrics

RATE_WINDOW = "$__rate_interval"
_GRID_WIDTH = 24


def matchers(**labels: str) -> str:
    """``{a=~"x",b="y"}``: a value starting with ``~`` or ``!`` picks ``=~`` or ``!=``."""
    parts = []
    for name, value in labels.items():
        if value.startswith("~"):
            parts.append(f'{name}=~"{value[1:]}"')
        elif value.startswith("!"):
            parts.append(f'{name}!="{value[1:]}"')
        else:
            parts.append(f'{name}="{value}"')
    return "{" + ",".join(parts) + "}" if parts else ""


def series(definition: metrics.Definition, **labels: str) -> str:
    """A gauge's (or counter's) selector, e.g. ``vnpu_chip_healthy{node=~"$node"}``."""
    return definition.samples[0] + matchers(**labels)


def rate(definition: metrics.Definition, **labels: str) -> str:
    """``rate(<counter>_total{...}[$__rate_interval])``."""
    if definition.kind is not metrics.Kind.COUNTER:
        raise ValueError(f"rate() of {definition.name}: not a counter")
    return f"rate({definition.samples[0]}{matchers(**labels)}[{RATE_WINDOW}])"


def quantile(q: float, definition: metrics.Definition, by: str = "", **labels: str) -> str:
    """``histogram_quantile(q, sum by (le, <by>) (rate(<hist>_bucket{...}[...])))``."""
    if definition.kind is not metrics.Kind.HISTOGRAM:
        raise ValueError(f"quantile of {definition.name}: not a histogram")
    keys = ", ".join(["le", *([by] if by else [])])
    bucket = f"{definition.name}_bucket{matchers(**labels)}[{RATE_WINDOW}]"
    return f"histogram_quantile({q}, sum by ({keys}) (rate({bucket})))"


@dataclass(frozen=True, slots=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(frozen=True, slots=True)
class Panel:
    """One panel; ``kind`` is a Grafana panel type (timeseries, stat, table, bargauge)."""

    title: str
    queries: tuple[Query, ...]
    kind: str = "timeseries"
    unit: str = "short"
    description: str = ""
    width: int = 12
    height: int = 8
    stacked: bool = False


@dataclass(frozen=True, slots=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True, slots=True)
class Variable:
    """A query variable: label values of ``label`` on ``definition``."""

    name: str
    definition: metrics.Definition
    label: str
    multi: bool = True


@dataclass(frozen=True, slots=True)
class Dashboard:
    uid: str
    title: str
    description: str
    rows: tuple[Row, ...]
    variables: tuple[Variable, ...] = ()
    tags: tuple[str, ...] = field(default=("vnpu",))

    def panels(self) -> Iterator[Panel]:
        for row in self.rows:
            yield from row.panels

    def queries(self) -> Iterator[tuple[Panel, Query]]:
        for panel in self.panels():
            for query in panel.queries:
                yield panel, query


_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def _target(query: Query, ref: str, table: bool) -> dict[str, Any]:
    return {
        "datasource": _DATASOURCE,
        "expr": query.expr,
        "format": "table" if table else "time_series",
        "instant": query.instant or table,
        "legendFormat": query.legend or "__auto",
        "range": not (query.instant or table),
        "refId": ref,
    }


def _panel(panel: Panel, ident: int, x: int, y: int) -> dict[str, Any]:
    table = panel.kind == "table"
    refs = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    custom: dict[str, Any] = {}
    if panel.kind == "timeseries":
        custom = {"stacking": {"mode": "normal" if panel.stacked else "none"}, "fillOpacity": 10}
    options: dict[str, Any] = {}
    if panel.kind == "timeseries":
        options = {"legend": {"displayMode": "table", "placement": "right", "showLegend": True}}
    elif panel.kind in ("stat", "bargauge"):
        options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}
    return {
        "datasource": _DATASOURCE,
        "description": panel.description,
        "fieldConfig": {"defaults": {"custom": custom, "unit": panel.unit}, "overrides": []},
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "id": ident,
        "options": options,
        "targets": [_target(q, refs[i], table) for i, q in enumerate(panel.queries)],
        "title": panel.title,
        "transformations": [{"id": "merge", "options": {}}]
        if table and len(panel.queries) > 1
        else [],
        "type": panel.kind,
    }


def _variable(variable: Variable) -> dict[str, Any]:
    query = f"label_values({variable.definition.samples[0]}, {variable.label})"
    return {
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "datasource": _DATASOURCE,
        "definition": query,
        "includeAll": True,
        "allValue": ".*",
        "multi": variable.multi,
        "name": variable.name,
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2,
        "sort": 1,
        "type": "query",
    }


def render(dashboard: Dashboard) -> dict[str, Any]:
    """The dashboard as Grafana's JSON model."""
    panels: list[dict[str, Any]] = []
    ident, y = 1, 0
    for row in dashboard.rows:
        panels.append(
            {
                "collapsed": False,
                "gridPos": {"h": 1, "w": _GRID_WIDTH, "x": 0, "y": y},
                "id": ident,
                "panels": [],
                "title": row.title,
                "type": "row",
            }
        )
        ident, y, x, line = ident + 1, y + 1, 0, 0
        for panel in row.panels:
            if x + panel.width > _GRID_WIDTH:
                x, y, line = 0, y + line, 0
            panels.append(_panel(panel, ident, x, y))
            ident, x, line = ident + 1, x + panel.width, max(line, panel.height)
        y += line
    datasource = {
        "current": {},
        "hide": 0,
        "includeAll": False,
        "label": "Prometheus",
        "name": "datasource",
        "options": [],
        "query": "prometheus",
        "refresh": 1,
        "type": "datasource",
    }
    return {
        "annotations": {"list": []},
        "description": dashboard.description,
        "editable": True,
        "graphTooltip": 1,
        "links": [],
        "panels": panels,
        "refresh": "30s",
        "schemaVersion": 39,
        "tags": list(dashboard.tags),
        "templating": {"list": [datasource, *(_variable(v) for v in dashboard.variables)]},
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "",
        "title": dashboard.title,
        "uid": dashboard.uid,
        "version": 1,
    }


def dumps(dashboard: Dashboard) -> str:
    """The JSON text written to ``deploy/dashboards/<uid>.json`` (stable: sorted keys)."""
    return json.dumps(render(dashboard), indent=2, sort_keys=True) + "\n"


def all_queries(dashboards: Sequence[Dashboard]) -> list[tuple[Dashboard, Panel, Query]]:
    return [(d, p, q) for d in dashboards for p, q in d.queries()]
