"""The fast renderer says exactly what client_python would, in both formats."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text
from prometheus_client.registry import Collector

from vnpu_exporter import exposition, metrics

ODD = metrics.Definition(
    "vnpu_test_odd", metrics.Kind.GAUGE, 'Help with "quotes", a \\ and\na newline.', ("a", "b")
)
PLAIN = metrics.Definition("vnpu_test_plain", metrics.Kind.GAUGE, "No labels.")


class _Tables(Collector):
    def collect(self) -> Any:
        odd = exposition.GaugeTable(ODD)
        odd.add(["x", 'quote " here'], 1)
        odd.add(["back\\slash", "new\nline"], 2.5)
        odd.add(["", "big"], 25769803776)
        odd.add(["nan", ""], float("nan"))
        odd.add(["inf", ""], float("inf"))
        odd.add(["minus", ""], -0.125)
        plain = exposition.GaugeTable(PLAIN)
        plain.add([], 7)
        empty = exposition.GaugeTable(metrics.CHIP_VNPUS)
        return [odd, plain, empty]

    def describe(self) -> Any:
        return []


def _samples(families: Any) -> list[tuple[str, tuple[tuple[str, str], ...], str]]:
    return sorted(
        (s.name, tuple(sorted(s.labels.items())), repr(s.value))
        for f in families
        for s in f.samples
    )


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(_Tables())
    errors = metrics.READ_ERRORS
    Counter(errors.name, errors.help, errors.labels, registry=registry).labels(
        "health", "stale"
    ).inc()
    return registry


def test_text_format_matches_client_python(registry: CollectorRegistry) -> None:
    body, content_type = exposition.render(registry)
    assert content_type.startswith("text/plain; version=0.0.4")
    ours = list(parse_text(body.decode()))
    theirs = list(parse_text(generate_latest(registry).decode()))
    assert _samples(ours) == _samples(theirs)
    assert {f.name: f.documentation for f in ours} == {f.name: f.documentation for f in theirs}
    assert "# TYPE vnpu_chip_vnpus gauge" in body.decode()  # an empty family still declares itself


def test_openmetrics_format_matches_client_python(registry: CollectorRegistry) -> None:
    body, content_type = exposition.render(registry, "application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")
    assert body.count(b"# EOF") == 1
    ours = list(parse_openmetrics(body.decode()))
    theirs = list(parse_openmetrics(openmetrics.generate_latest(registry).decode()))
    assert _samples(ours) == _samples(theirs)


def test_samples_are_readable_through_client_python(registry: CollectorRegistry) -> None:
    assert registry.get_sample_value("vnpu_test_odd", {"a": "x", "b": 'quote " here'}) == 1
    assert registry.get_sample_value("vnpu_test_plain") == 7
    table = exposition.GaugeTable(PLAIN)
    with pytest.raises(ValueError, match="add"):
        table.samples = [object()]  # type: ignore[list-item]
