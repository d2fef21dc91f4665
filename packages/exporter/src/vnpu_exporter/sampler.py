"""Background reads of the driver, the kubelet and the API, one thread per refresh group.

A scrape never calls the driver: ``collector`` asks ``Sampler.snapshot`` for the latest
readings, which each group's thread refreshes on its own interval (``metrics.Group``), so a
slow DCMI call delays only its own group. Rules for what a scrape may see:

* a read that fails is counted in ``vnpu_exporter_read_errors_total{group,reason}`` and its
  value is left out of the readings: the previous value is dropped, never shown again;
* a group whose last refresh finished longer ago than ``stale_factor`` x its interval (its
  thread is stuck in a call) is left out whole, and counted once as ``stale``;
* a chip that dropped off the bus is not a missing value: its health reads as gone.

``__main__`` starts the threads; tests call ``refresh`` / ``refresh_all`` directly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog

from vnpu_core import catalog, ledger
from vnpu_exporter import claims, errors, metrics, ownership, podresources, pods, telemetry
from vnpu_npu import backend, claimledger
from vnpu_npu import errors as npu_errors
from vnpu_service import kubeapi

log = structlog.get_logger(__name__)

Group = metrics.Group
Reason = metrics.ErrorReason
Json = dict[str, Any]
T = TypeVar("T")

DEFAULT_INTERVALS: Mapping[Group, float] = {
    Group.INVENTORY: 60.0,
    Group.HEALTH: 5.0,
    Group.SENSORS: 5.0,
    Group.UTILIZATION: 5.0,
    Group.MEMORY: 10.0,
    Group.VNPUS: 10.0,
    Group.PODS: 10.0,
    Group.POD_RESOURCES: 10.0,
    Group.OWNERSHIP: 10.0,
}
"""Seconds between refreshes (npu-exporter reads utilisation every 1 s and hbm every 60 s)."""

RETRY_AFTER = 5.0
"""Seconds before a group whose whole read failed tries again, when its interval is longer."""

STARTUP_GRACE = 60.0
"""Seconds after start in which a group that has never been read fails at info level, not as a
warning: on a fresh node the exporter starts beside the kubelet and the device plugin, whose
sockets and files appear a moment later. Each failure is counted all the same."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one scrape reports: the fresh readings only. A missing key is a missing value."""

    chips: tuple[backend.ChipInfo, ...] | None = None  # None: the inventory is unknown
    health: Mapping[int, backend.ChipHealth | None] = field(default_factory=dict)  # None: gone
    temperature: Mapping[int, int] = field(default_factory=dict)
    power: Mapping[int, backend.Power] = field(default_factory=dict)
    aicore_percent: Mapping[int, int] = field(default_factory=dict)
    memory: Mapping[int, backend.Memory] = field(default_factory=dict)
    vnpus: Mapping[int, tuple[backend.VnpuInfo, ...]] = field(default_factory=dict)
    vnpu_usage: Mapping[int, backend.VnpuUsage] = field(default_factory=dict)  # by vNPU id
    pods: tuple[Json, ...] | None = None  # None: unknown (API failed or not configured)
    pod_resources: tuple[podresources.Assignment, ...] | None = None
    ownership: tuple[ownership.Record, ...] | None = None  # None: no ledger, or unreadable
    claims: tuple[claimledger.Record, ...] | None = None  # DRA driver's; None: none or unreadable


@dataclass(frozen=True, slots=True)
class Ledgers:
    """One refresh of the ``ownership`` group: each ledger configured (None: not configured)."""

    owners: tuple[ownership.Record, ...] | None = None
    claims: tuple[claimledger.Record, ...] | None = None


@dataclass(frozen=True, slots=True)
class _Result:
    value: Any
    finished: float  # monotonic


def reason_of(exc: Exception) -> Reason:
    """The error-counter reason for a failed read."""
    if isinstance(exc, npu_errors.ChipGone):
        return Reason.CHIP_GONE
    if isinstance(exc, npu_errors.NotSupported):
        return Reason.NOT_SUPPORTED
    if isinstance(exc, npu_errors.LibraryError):
        return Reason.LIBRARY
    if isinstance(exc, npu_errors.SimError):
        return Reason.SIMULATION
    if isinstance(exc, npu_errors.NpuError):
        return Reason.DRIVER
    if isinstance(exc, kubeapi.ApiError):
        return Reason.API
    if isinstance(exc, errors.PodResourcesError):
        return Reason.RPC
    if isinstance(exc, errors.LedgerError):
        return Reason.LEDGER
    return Reason.UNEXPECTED


class Sampler:
    """Refreshes every group of one node and keeps the latest result of each."""

    def __init__(
        self,
        npu: backend.Backend,
        node: str,
        instruments: telemetry.Telemetry,
        *,
        pod_source: pods.Source | None = None,
        pod_resources: podresources.Source | None = None,
        ledger_source: ownership.Source | None = None,
        claim_source: claims.Source | None = None,
        models: catalog.Catalog = catalog.BUILTIN,
        intervals: Mapping[Group, float] = DEFAULT_INTERVALS,
        stale_factor: float = 3.0,
        retry_after: float = RETRY_AFTER,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.npu = npu
        self.node = node
        self.telemetry = instruments
        self.pod_source = pod_source
        self.pod_resources = pod_resources
        self.ledger_source = ledger_source
        self.claim_source = claim_source
        self.models = models
        self.intervals = {**DEFAULT_INTERVALS, **intervals}
        self.stale_factor = stale_factor
        self.retry_after = retry_after
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._results: dict[Group, _Result | None] = {}
        self._stale_counted: set[Group] = set()
        self._no_usage: set[int] = set()  # chips whose driver lacks the vNPU activity query
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.groups = tuple(
            g
            for g in Group
            if (g is not Group.PODS or pod_source is not None)
            and (g is not Group.POD_RESOURCES or pod_resources is not None)
            and (g is not Group.OWNERSHIP or ledger_source is not None or claim_source is not None)
        )
        self._finished: dict[Group, float] = {}  # monotonic end of each group's last refresh
        self._started_at = clock()
        self._answered: set[Group] = set()  # groups read once at least
        instruments.prepare(self.groups)

    # -- refreshing -------------------------------------------------------------------------

    def refresh(self, group: Group) -> bool:
        """Read ``group`` once and keep the result; False when the whole read failed."""
        started = self._clock()
        try:
            value = self._read(group)
        except Exception as exc:  # every failure of a source ends here, counted
            reason = reason_of(exc)
            if reason is Reason.UNEXPECTED:
                log.exception("read_failed_unexpectedly", group=group.value)
            elif group not in self._answered and started - self._started_at < STARTUP_GRACE:
                # Starting beside the kubelet or the plugin: its socket may not be there yet.
                log.info("read_not_ready", group=group.value, reason=reason.value, error=str(exc))
            else:
                log.warning("read_failed", group=group.value, reason=reason.value, error=str(exc))
            self.telemetry.failed(group, reason)
            value = None
        finished = self._clock()
        if value is not None:
            self._answered.add(group)
        with self._lock:
            self._results[group] = _Result(value, finished) if value is not None else None
            self._finished[group] = finished
            self._stale_counted.discard(group)
        self.telemetry.refreshed(
            group, finished - started, self._wall() if _read_anything(value) else None
        )
        return value is not None

    def refresh_all(self) -> None:
        for group in self.groups:
            self.refresh(group)

    def _chips(self) -> tuple[backend.ChipInfo, ...]:
        with self._lock:
            result = self._results.get(Group.INVENTORY)
        return result.value if result is not None else ()

    def _per_chip(self, group: Group, read: Callable[[int], T]) -> dict[int, T]:
        found: dict[int, T] = {}
        for chip in self._chips():
            try:
                found[chip.phy_id] = read(chip.phy_id)
            except npu_errors.NpuError as exc:
                self.telemetry.failed(group, reason_of(exc))
        return found

    def _read(self, group: Group) -> Any:
        if group is Group.INVENTORY:
            return self.npu.chips()
        if group is Group.HEALTH:
            return self._health()
        if group is Group.SENSORS:
            return (
                self._per_chip(group, self.npu.temperature),
                self._per_chip(group, self.npu.power),
            )
        if group is Group.UTILIZATION:
            return self._per_chip(group, self.npu.aicore_percent)
        if group is Group.MEMORY:
            return self._per_chip(group, self.npu.memory)
        if group is Group.VNPUS:
            return self._vnpus()
        if group is Group.PODS:
            return self._pods()
        if group is Group.OWNERSHIP:
            return self._ledgers()
        assert self.pod_resources is not None
        return self.pod_resources.list()

    def _ledgers(self) -> Ledgers:
        """Both ledgers, whichever are configured; one that cannot be read fails the group
        (a node runs the device plugin or the DRA driver, so there is one in practice)."""
        owners: tuple[ownership.Record, ...] | None = None
        claim_records: tuple[claimledger.Record, ...] | None = None
        skipped = 0
        if self.ledger_source is not None:
            found = self.ledger_source.read()
            owners, skipped = found.records, skipped + found.skipped
        if self.claim_source is not None:
            book = self.claim_source.read()
            claim_records, skipped = book.records, skipped + book.skipped
        if skipped:
            self.telemetry.failed(Group.OWNERSHIP, Reason.LEDGER, skipped)
        return Ledgers(owners, claim_records)

    def _pods(self) -> tuple[Json, ...]:
        assert self.pod_source is not None
        listed = tuple(self.pod_source.list(self.node))
        problems = ledger.node_usage(listed, self.node, self.models).problems
        for problem in problems:
            log.warning("pod_annotation_unreadable", pod=problem.pod, error=str(problem.error))
        if problems:
            self.telemetry.failed(Group.PODS, Reason.BAD_ANNOTATION, len(problems))
        return listed

    def _health(self) -> dict[int, backend.ChipHealth | None]:
        found: dict[int, backend.ChipHealth | None] = {}
        for chip in self._chips():
            try:
                found[chip.phy_id] = self.npu.health(chip.phy_id)
            except npu_errors.ChipGone:
                self.telemetry.failed(Group.HEALTH, Reason.CHIP_GONE)
                found[chip.phy_id] = None  # known: the chip is gone
            except npu_errors.NpuError as exc:
                self.telemetry.failed(Group.HEALTH, reason_of(exc))
        return found

    def _vnpus(
        self,
    ) -> tuple[dict[int, tuple[backend.VnpuInfo, ...]], dict[int, backend.VnpuUsage]]:
        listed = self._per_chip(Group.VNPUS, self.npu.vnpus)
        usage: dict[int, backend.VnpuUsage] = {}
        for phy, vnpus in listed.items():
            for vnpu in vnpus:
                if phy in self._no_usage:
                    break
                try:
                    usage[vnpu.vnpu_id] = self.npu.vnpu_usage(phy, vnpu.vnpu_id)
                except npu_errors.NotSupported:
                    # Expected on the 910 family: its use is unmeasured, not a failure.
                    log.info("vnpu_activity_not_supported", chip=phy)
                    self._no_usage.add(phy)
                except npu_errors.VnpuNotFound:
                    pass  # destroyed between the list and the query: gone, nothing to report
                except npu_errors.NpuError as exc:
                    self.telemetry.failed(Group.VNPUS, reason_of(exc))
        return listed, usage

    # -- threads ----------------------------------------------------------------------------

    def start(self) -> None:
        """Read the inventory once, then refresh every group in its own daemon thread."""
        self.refresh(Group.INVENTORY)
        for group in self.groups:
            thread = threading.Thread(
                target=self._run, args=(group,), name=f"vnpu-exporter-{group.value}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def _run(self, group: Group) -> None:
        interval = self.intervals[group]
        if group is Group.INVENTORY and self._stop.wait(interval):
            return  # start() has just read the inventory
        while True:
            started = self._clock()
            # A group that failed whole (the inventory, the API) tries again sooner.
            wait = interval if self.refresh(group) else min(interval, self.retry_after)
            if self._stop.wait(max(0.0, wait - (self._clock() - started))):
                return

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the threads to end and wait a little; a thread stuck in a call stays behind."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        self._threads.clear()

    def stale_limit(self, group: Group) -> float:
        return self.intervals[group] * self.stale_factor

    def stuck(self) -> list[str]:
        """Groups whose refresh has not finished within their stale limit (a hung call)."""
        if not self._threads:
            return []
        now = self._clock()
        with self._lock:
            last = dict(self._finished)
        return [
            g.value
            for g in self.groups
            if now - last.get(g, self._started_at) > self.stale_limit(g) + self.intervals[g]
        ]

    def close(self) -> None:
        """Close the Kubernetes and PodResources clients (after ``stop``)."""
        for source in (self.pod_source, self.pod_resources):
            if source is not None:
                source.close()

    # -- reading ----------------------------------------------------------------------------

    def _fresh(self, group: Group, now: float) -> Any:
        result = self._results.get(group)
        if result is None:
            return None
        if now - result.finished > self.stale_limit(group):
            if group not in self._stale_counted:
                self._stale_counted.add(group)
                self.telemetry.failed(group, Reason.STALE)
                log.warning("readings_stale", group=group.value, age=now - result.finished)
            return None
        return result.value

    def snapshot(self) -> Snapshot:
        """The fresh readings of every group."""
        now = self._clock()
        with self._lock:
            chips = self._fresh(Group.INVENTORY, now)
            health = self._fresh(Group.HEALTH, now) or {}
            sensors: tuple[dict[int, int], dict[int, backend.Power]]
            sensors = self._fresh(Group.SENSORS, now) or ({}, {})
            aicore = self._fresh(Group.UTILIZATION, now) or {}
            memory = self._fresh(Group.MEMORY, now) or {}
            vnpus: tuple[dict[int, tuple[backend.VnpuInfo, ...]], dict[int, backend.VnpuUsage]]
            vnpus = self._fresh(Group.VNPUS, now) or ({}, {})
            pod_list = self._fresh(Group.PODS, now)
            devices = self._fresh(Group.POD_RESOURCES, now)
            ledgers: Ledgers = self._fresh(Group.OWNERSHIP, now) or Ledgers()
        return Snapshot(
            chips,
            health,
            sensors[0],
            sensors[1],
            aicore,
            memory,
            vnpus[0],
            vnpus[1],
            pod_list,
            devices,
            ledgers.owners,
            ledgers.claims,
        )


def _read_anything(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, dict) for v in value):
        return any(value)
    if isinstance(value, dict):
        return bool(value)
    return True
