"""The exporter's own instruments: build info, read errors, refresh and scrape durations.

``__main__`` (or a test) builds one ``Telemetry`` on the service's registry and hands it to
``sampler`` (which counts failed reads and times refreshes) and ``collector`` (which times
scrapes). Names, help texts and buckets come from ``metrics``. Error counters start at zero
for every usual reason of every group, so ``rate()`` and ``increase()`` answer 0, not nothing,
before the first failure.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

import vnpu_exporter
from vnpu_exporter import metrics

Group = metrics.Group
Reason = metrics.ErrorReason

_NPU_REASONS = (Reason.CHIP_GONE, Reason.DRIVER)
REASONS_BY_GROUP: dict[Group, tuple[Reason, ...]] = {
    **dict.fromkeys(
        (
            Group.INVENTORY,
            Group.HEALTH,
            Group.SENSORS,
            Group.UTILIZATION,
            Group.MEMORY,
            Group.VNPUS,
        ),
        _NPU_REASONS,
    ),
    Group.PODS: (Reason.API, Reason.BAD_ANNOTATION),
    Group.POD_RESOURCES: (Reason.RPC,),
    Group.OWNERSHIP: (Reason.LEDGER,),
}
"""The usual reasons each group fails with, created at zero (with ``stale``); others on first use."""


class Telemetry:
    """Instruments registered on ``registry``; ``prepare`` zeroes the series of the groups in use."""

    def __init__(self, registry: CollectorRegistry) -> None:
        build = Gauge(
            metrics.BUILD_INFO.name,
            metrics.BUILD_INFO.help,
            metrics.BUILD_INFO.labels,
            registry=registry,
        )
        build.labels("exporter", vnpu_exporter.__version__).set(1)
        self.read_errors = Counter(
            metrics.READ_ERRORS.name,
            metrics.READ_ERRORS.help,
            metrics.READ_ERRORS.labels,
            registry=registry,
        )
        self.refresh_duration = Histogram(
            metrics.REFRESH_DURATION.name,
            metrics.REFRESH_DURATION.help,
            metrics.REFRESH_DURATION.labels,
            buckets=metrics.REFRESH_DURATION.buckets,
            registry=registry,
        )
        self.last_refresh = Gauge(
            metrics.LAST_REFRESH.name,
            metrics.LAST_REFRESH.help,
            metrics.LAST_REFRESH.labels,
            registry=registry,
        )
        self.scrape_duration = Histogram(
            metrics.SCRAPE_DURATION.name,
            metrics.SCRAPE_DURATION.help,
            buckets=metrics.SCRAPE_DURATION.buckets,
            registry=registry,
        )

    def prepare(self, groups: tuple[Group, ...]) -> None:
        """Create every series of ``groups`` at zero (the sampler calls this once)."""
        for group in groups:
            for reason in (*REASONS_BY_GROUP[group], Reason.STALE):
                self.read_errors.labels(group.value, reason.value)
            self.refresh_duration.labels(group.value)
            self.last_refresh.labels(group.value).set(0)

    def failed(self, group: Group, reason: Reason, count: int = 1) -> None:
        self.read_errors.labels(group.value, reason.value).inc(count)

    def refreshed(self, group: Group, seconds: float, finished_at: float | None) -> None:
        """A refresh took ``seconds``; ``finished_at`` (Unix time) when it read anything."""
        self.refresh_duration.labels(group.value).observe(seconds)
        if finished_at is not None:
            self.last_refresh.labels(group.value).set(finished_at)
