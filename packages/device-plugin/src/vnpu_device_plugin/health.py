"""Chip health: polled from the driver, judged by fault level, shared with every stream.

``HealthMonitor.poll`` asks the backend for each chip's DCMI health and fault codes and
judges them with ``npu.faults.assess`` (Huawei's handling levels: Normal, NotHandleFault
and SubHealthFault are healthy; FreeRestartNPU and PreSeparateNPU too while a container
uses the chip; a chip that dropped off the bus is not). Health follows the driver both
ways: a chip that recovers is advertised healthy again (HAMi only ever degraded it).

The verdicts live on a ``Board``: a version number and a condition variable. Every
ListAndWatch stream (``service``) waits on it and sends the full device list when the
version moves; the publisher is poked to rewrite the node annotations. Nothing blocks
the poller: a stream that is gone simply stops waiting.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

from vnpu_device_plugin import devices, metrics
from vnpu_npu import backend, errors, faults

log = structlog.get_logger(__name__)


class Board:
    """The current health of every chip, by physical id, and a version that moves on change."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._healthy: dict[int, bool] = {}
        self._verdicts: dict[int, faults.Verdict] = {}
        self.version = 0
        self.closed = False

    def set(self, verdicts: dict[int, faults.Verdict]) -> list[tuple[int, bool]]:
        """Record ``verdicts``; the chips whose health flipped (or was first known), as (phy, healthy)."""
        flipped = []
        with self._changed:
            for phy, verdict in verdicts.items():
                before = self._healthy.get(phy)
                self._verdicts[phy] = verdict
                if before is None or before != verdict.healthy:
                    self._healthy[phy] = verdict.healthy
                    flipped.append((phy, verdict.healthy))
            if flipped:
                self.version += 1
                self._changed.notify_all()
        return flipped

    def healthy(self) -> dict[int, bool]:
        with self._changed:
            return dict(self._healthy)

    def verdict(self, phy: int) -> faults.Verdict | None:
        with self._changed:
            return self._verdicts.get(phy)

    def snapshot(self) -> tuple[int, dict[int, bool]]:
        with self._changed:
            return self.version, dict(self._healthy)

    def wait(self, seen: int, timeout: float) -> int:
        """Block until the version differs from ``seen``, the board closes or ``timeout`` passes."""
        with self._changed:
            self._changed.wait_for(lambda: self.version != seen or self.closed, timeout)
            return self.version

    def close(self) -> None:
        """Wake every waiter for good (shutdown)."""
        with self._changed:
            self.closed = True
            self._changed.notify_all()


class HealthMonitor:
    """Polls ``npu`` every ``interval`` seconds and keeps ``board`` up to date."""

    def __init__(
        self,
        npu: backend.Backend,
        inventory: devices.Inventory,
        board: Board,
        stats: metrics.Metrics,
        *,
        in_use: Callable[[int], bool],
        on_change: Callable[[], None],
        interval: float,
    ) -> None:
        self._npu = npu
        self._inventory = inventory
        self._board = board
        self._stats = stats
        self._in_use = in_use
        self._on_change = on_change
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _judge(self, chip: backend.ChipInfo) -> faults.Verdict | None:
        try:
            health = self._npu.health(chip.phy_id)
        except errors.ChipGone:
            return faults.assess(None)
        except errors.NpuError as exc:
            log.warning("chip_health_unreadable", chip=chip.phy_id, error=str(exc))
            known = self._board.verdict(chip.phy_id)
            return known if known is not None else faults.assess(None)
        return faults.assess(health, in_use=self._in_use(chip.phy_id))

    def poll(self) -> None:
        """Read every chip once; publish what changed."""
        verdicts = {}
        for chip in self._inventory.chips:
            verdict = self._judge(chip)
            if verdict is not None:
                verdicts[chip.phy_id] = verdict
        first = not self._board.healthy()
        flipped = self._board.set(verdicts)
        healthy = sum(1 for v in verdicts.values() if v.healthy)
        self._stats.chips.labels("healthy").set(healthy)
        self._stats.chips.labels("unhealthy").set(len(verdicts) - healthy)
        for phy, now_healthy in flipped:
            verdict = verdicts[phy]
            codes = ",".join(faults.format_code(c) for c in verdict.codes)
            if not first:
                self._stats.health_transitions.labels(
                    "healthy" if now_healthy else "unhealthy"
                ).inc()
            log.info(
                "chip_health",
                chip=phy,
                healthy=now_healthy,
                level=verdict.level.value,
                codes=codes,
                gone=verdict.gone,
            )
        if flipped:
            self._on_change()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="vnpu-dp-health", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.poll()
            except Exception:  # a bug must not stop health polling for good
                log.exception("health_poll_failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
