"""The /metrics body: the exporter's gauge tables rendered fast, the rest by client_python.

A node with 16 chips and 112 vNPUs answers about 1,400 series, most with ten labels.
client_python checks and escapes every label name of every sample, which cost more than
everything else in a scrape; ``collector`` and ``compat`` therefore build ``GaugeTable``
families (rows of label values whose names were fixed, and checked, in ``metrics``), and
``render`` writes those rows itself: label values escaped only when they hold ``\\``, ``"``
or a newline, numbers in Go-compatible float syntax. Everything else on the registry (the
``telemetry`` counters and histograms) goes through client_python's own encoder, which also
picks the format (Prometheus text 0.0.4 or OpenMetrics) from the Accept header. ``server``
calls ``render``; a ``GaugeTable`` still lists ordinary ``samples`` for client_python's
readers (``get_sample_value``, ``generate_latest``) when asked.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry, metrics_core
from prometheus_client import exposition as client_exposition
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from vnpu_exporter import metrics

_OPENMETRICS = "application/openmetrics-text"
_EOF = b"# EOF\n"


class GaugeTable(metrics_core.Metric):
    """A gauge family kept as rows of label values in ``definition.labels`` order."""

    def __init__(self, definition: metrics.Definition) -> None:
        self.label_names = definition.labels
        self.rows: list[tuple[Sequence[str], float]] = []
        super().__init__(definition.name, definition.help, "gauge")

    def add(self, values: Sequence[str], value: float) -> None:
        self.rows.append((values, value))

    @property
    def samples(self) -> list[Sample]:
        names = self.label_names
        return [Sample(self.name, dict(zip(names, v, strict=True)), float(x)) for v, x in self.rows]

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        if value:
            raise ValueError("a GaugeTable takes rows through add()")


def _escape(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value)}.0"
    return repr(float(value))


def render_table(table: GaugeTable, openmetrics: bool = False) -> str:
    """One family in the text format (the same lines serve OpenMetrics for gauges)."""
    help_text = table.documentation.replace("\\", "\\\\").replace("\n", "\\n")
    if openmetrics:
        help_text = help_text.replace('"', '\\"')
    name = table.name
    lines = [f"# HELP {name} {help_text}\n# TYPE {name} gauge\n"]
    prefixes = [f'{label}="' for label in table.label_names]
    if not prefixes:
        lines.extend(f"{name} {_number(value)}\n" for _, value in table.rows)
    for values, value in table.rows if prefixes else ():
        inner = '",'.join([p + _escape(v) for p, v in zip(prefixes, values, strict=True)])
        lines.append(f'{name}{{{inner}"}} {_number(value)}\n')
    return "".join(lines)


class _Fixed(Collector):
    def __init__(self, families: Iterable[metrics_core.Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[metrics_core.Metric]:
        return self._families

    def describe(self) -> Iterable[metrics_core.Metric]:
        return []


def render(registry: CollectorRegistry, accept: str = "") -> tuple[bytes, str]:
    """The /metrics body for ``registry`` and its content type, per the Accept header."""
    encoder, content_type = client_exposition.choose_encoder(accept)
    openmetrics = content_type.startswith(_OPENMETRICS)
    tables: list[GaugeTable] = []
    others = CollectorRegistry(auto_describe=False)
    rest: list[metrics_core.Metric] = []
    for family in registry.collect():
        if isinstance(family, GaugeTable):
            tables.append(family)
        else:
            rest.append(family)
    others.register(_Fixed(rest))
    head = encoder(others)
    if openmetrics:
        head = head.removesuffix(_EOF)
    body = "".join(render_table(t, openmetrics) for t in tables).encode()
    return head + body + (_EOF if openmetrics else b""), content_type
