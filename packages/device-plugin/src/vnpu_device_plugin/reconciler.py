"""Keeping the driver's vNPUs, the ownership ledger and the pods in the API in agreement.

Run at start (after a restart or a crash) and every ``interval`` seconds, under the
allocation lock so no Allocate is half done while it looks. One pass:

1. **Ledger against driver.** An ``intent`` whose vNPU exists (the plugin died after
   creating it) becomes ``owned``; an intent whose vNPU does not exist (died before) is
   dropped, and so is an ``owned`` record whose vNPU someone else destroyed.
2. **Owned vNPUs**, through ``reclaim`` (the code path the pod watch and Allocate use too):
   a vNPU is destroyed when every owner is done: its pod is gone from the API (and
   kubelet's PodResources no longer lists its containers with their devices), or
   Succeeded/Failed, or the owner is an init container that has terminated. Never while
   the driver says a container holds it: that one waits for the next pass. Never while
   kubelet's PodResources lists a running container it may be given to, whatever the
   ledger and the grant book say, nor while PodResources does not answer (``custody``).
3. **Unowned vNPUs** (made by the runtime, an operator, or lost with a ledger): destroyed
   only after ``grace`` seconds unowned and idle, never while the grant book names it for
   a pod, and only on a chip where no running pod has a vNPU the ledger does not account
   for (it may be that pod's): by its annotations, or by the grant book (runtime-mode
   vNPUs, soft slices).
4. hami-vnpu-core per-container directories of pods that are gone are removed.

It also remembers which chips live pods use (``busy``), which the health judgement
needs, and the revision of its pod list (``revision``), from which the pod watch starts.
``plugin`` runs it in its own thread; ``poke`` asks for a pass soon (after a failed
Allocate, and when the pod watch lists again and may have missed deletions).
"""

from __future__ import annotations

import dataclasses
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from vnpu_core import coordination, protocol
from vnpu_core import errors as core_errors
from vnpu_core import ledger as core_ledger
from vnpu_device_plugin import (
    cluster,
    devices,
    environment,
    ledger,
    metrics,
    nodelock,
    reclaim,
)
from vnpu_npu import backend
from vnpu_npu import errors as npu_errors
from vnpu_service import kubeapi

log = structlog.get_logger(__name__)
Json = dict[str, Any]


@dataclass
class Pass:
    """What one pass did (for logs and tests)."""

    reclaimed: list[tuple[int, int, str]] = field(default_factory=list)  # chip, vNPU, reason
    dropped: list[ledger.Record] = field(default_factory=list)
    recovered: list[ledger.Record] = field(default_factory=list)
    kept_in_use: list[tuple[int, int]] = field(default_factory=list)
    kept_listed: list[tuple[int, int]] = field(default_factory=list)  # kubelet lists the owner
    withheld: list[tuple[int, int, str]] = field(default_factory=list)  # chip, vNPU, reason
    pods_read: bool = False


class Reconciler:
    """Reconciles ``inventory``'s chips; owned vNPUs are reclaimed through ``reclaimer``."""

    def __init__(
        self,
        npu: backend.Backend,
        inventory: devices.Inventory,
        book: ledger.Ledger,
        reclaimer: reclaim.Reclaimer,
        api: cluster.Cluster,
        stats: metrics.Metrics,
        *,
        lock: threading.Lock,
        grace: float,
        interval: float,
        paths: environment.SoftPaths | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._npu = npu
        self._inventory = inventory
        self._book = book
        self._reclaimer = reclaimer
        self._api = api
        self._stats = stats
        self._lock = lock
        self._grace = grace
        self._interval = interval
        self._paths = paths
        self._clock = clock
        self._unowned_since: dict[tuple[int, int], float] = {}
        self.busy: frozenset[int] = frozenset()
        self.revision = ""  # of the last pod list; the pod watch starts from the first one
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> Pass:
        report = Pass()
        with self._lock:
            try:
                pods, self.revision = cluster.retrying(
                    lambda: self._api.list_pods_and_revision(self._inventory.node),
                    2,
                    on_retry=self._stats.retried,
                )
            except kubeapi.ApiError as exc:
                log.warning("reconcile_without_pods", error=str(exc))
                pods = None
            driver = self._driver()
            self._settle(driver, report)
            if pods is not None:
                report.pods_read = True
                held = self._held(pods)
                outcome = self._reclaimer.reclaim(
                    reclaim.Owners.listed(pods), reclaim.Trigger.PERIODIC, driver=driver
                )
                report.reclaimed += outcome.reclaimed
                report.kept_in_use += outcome.kept_in_use
                report.kept_listed += outcome.kept_listed
                report.withheld += outcome.withheld
                self._reclaim_unowned(driver, held, report)
                self._clean_soft_dirs(pods)
                self.busy = frozenset(self._busy_chips(held))
                self._release_stale_lock()
            self._stats.vnpus_owned.set(len({r.vnpu for r in self._book.records()}))
        if report.reclaimed or report.dropped or report.recovered:
            log.info(
                "reconciled",
                reclaimed=report.reclaimed,
                dropped=[(r.chip, r.vnpu_id, r.state.value) for r in report.dropped],
                recovered=[(r.chip, r.vnpu_id) for r in report.recovered],
            )
        return report

    def _driver(self) -> dict[int, dict[int, backend.VnpuInfo]]:
        """vNPUs by chip and id, for the chips that answer."""
        found = {}
        for chip in self._inventory.chips:
            try:
                found[chip.phy_id] = {v.vnpu_id: v for v in self._npu.vnpus(chip.phy_id)}
            except npu_errors.NpuError as exc:
                log.warning("vnpus_unreadable", chip=chip.phy_id, error=str(exc))
        return found

    def _settle(self, driver: Mapping[int, Mapping[int, backend.VnpuInfo]], report: Pass) -> None:
        for record in self._book.records():
            vnpus = driver.get(record.chip)
            if vnpus is None:
                continue  # the chip does not answer: nothing is known about its vNPUs
            info = vnpus.get(record.vnpu_id)
            if info is None or info.template != record.template:
                self._book.remove(record)
                report.dropped.append(record)
            elif record.state is ledger.State.INTENT:
                owned = dataclasses.replace(record, state=ledger.State.OWNED)
                self._book.replace(record, owned)
                report.recovered.append(owned)

    def _held(self, pods: list[Json]) -> list[tuple[str, protocol.DeviceEntry]] | None:
        """(pod uid, device) of every device live pods hold here; None when one is unreadable."""
        key = protocol.allocated_key(self._inventory.common_word)
        held = []
        for pod in pods:
            if not core_ledger.holds_devices(pod, self._inventory.node):
                continue
            meta = pod.get("metadata") or {}
            value = (meta.get("annotations") or {}).get(key, "")
            try:
                entries = protocol.decode_devices(key, value)
            except core_errors.ProtocolError:
                return None
            held += [(str(meta.get("uid")), device) for entry in entries for device in entry]
        return held

    def _claimed_chips(self, held: list[tuple[str, protocol.DeviceEntry]] | None) -> set[int]:
        """Chips where a live pod has a vNPU or soft slice the ledger does not account for."""
        if held is None:
            return {c.phy_id for c in self._inventory.chips}  # cannot tell: claim them all
        recorded = {(r.pod_uid, r.chip) for r in self._book.records()}
        allocatable = self._inventory.model.memory_allocatable_mib
        claimed = set()
        for uid, device in held:
            chip = self._inventory.chip(device.uuid)
            if (
                chip is not None
                and device.memory_mib < allocatable
                and (uid, chip.phy_id) not in recorded
            ):
                claimed.add(chip.phy_id)
        return claimed

    def _reclaim_unowned(
        self,
        driver: Mapping[int, Mapping[int, backend.VnpuInfo]],
        held: list[tuple[str, protocol.DeviceEntry]] | None,
        report: Pass,
    ) -> None:
        owned = {r.vnpu for r in self._book.records()}
        now = self._clock()
        present = {(chip, i) for chip, vnpus in driver.items() for i in vnpus}
        for gone in set(self._unowned_since) - present:
            del self._unowned_since[gone]
        claimed = self._claimed_chips(held) | self._reclaimer.claimed_chips()
        for chip, vnpus in driver.items():
            for vnpu_id, info in vnpus.items():
                where = (chip, vnpu_id)
                if where in owned:
                    self._unowned_since.pop(where, None)
                    continue
                if info.container_used:
                    self._unowned_since[where] = now  # in use: the grace starts over
                    continue
                since = self._unowned_since.setdefault(where, now)
                if now - since < self._grace or chip in claimed:
                    continue
                outcome = reclaim.Outcome()
                if self._reclaimer.granted_elsewhere(chip, vnpu_id):
                    self._reclaimer.withhold(chip, vnpu_id, "granted_to_live_pod", (), outcome)
                    continue
                destroyed = self._reclaimer.destroy(
                    chip, vnpu_id, "unowned", reclaim.Trigger.PERIODIC, outcome
                )
                report.reclaimed += outcome.reclaimed
                report.kept_in_use += outcome.kept_in_use
                report.withheld += outcome.withheld
                if destroyed:
                    self._unowned_since.pop(where, None)

    def _clean_soft_dirs(self, pods: list[Json]) -> None:
        if self._paths is None or not self._inventory.soft:
            return
        root = self._paths.core_dir / "containers"
        if not root.is_dir():
            return
        live = {
            str((p.get("metadata") or {}).get("uid"))
            for p in pods
            if core_ledger.holds_devices(p, self._inventory.node)
        }
        for directory in root.iterdir():
            uid = directory.name.split("_", 1)[0]
            if directory.is_dir() and "_" in directory.name and uid not in live:
                shutil.rmtree(directory, ignore_errors=True)
                log.info("soft_dir_removed", path=str(directory))

    def _busy_chips(self, held: list[tuple[str, protocol.DeviceEntry]] | None) -> set[int]:
        """Chips the scheduler gave to pods that still hold them (all of them when unreadable)."""
        if held is None:
            return {c.phy_id for c in self._inventory.chips}
        uuids = {device.uuid for _uid, device in held}
        return {c.phy_id for c in self._inventory.chips if c.uuid in uuids}

    def _release_stale_lock(self) -> None:
        """Remove a lock whose owner no longer needs it: gone, finished, or served here."""

        def stale(lock: coordination.NodeLock) -> bool:
            if lock.namespace is None or lock.name is None:
                return False  # Volcano's: it names nobody, so nothing says it is stale
            namespace, name = lock.namespace, lock.name
            try:
                pod = cluster.retrying(
                    lambda: self._api.get_pod(namespace, name), 2, on_retry=self._stats.retried
                )
            except kubeapi.NotFound:
                return True
            if (pod.get("status") or {}).get("phase") in core_ledger.FINISHED_PHASES:
                return True
            phase = ((pod.get("metadata") or {}).get("annotations") or {}).get(
                protocol.BIND_PHASE_KEY
            )
            bound_here = (pod.get("spec") or {}).get("nodeName") == self._inventory.node
            return bound_here and phase in ("success", "failed")

        try:
            nodelock.release(self._api, self._inventory.node, stale, attempts=2, stats=self._stats)
        except kubeapi.ApiError as exc:
            log.warning("stale_lock_not_checked", error=str(exc))

    def poke(self) -> None:
        """Run a pass soon (an Allocate failed, or the pod watch may have missed events)."""
        self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="vnpu-dp-reconciler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.run_once()
            except Exception:  # a bug must not stop reconciling for good
                log.exception("reconcile_failed")

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
