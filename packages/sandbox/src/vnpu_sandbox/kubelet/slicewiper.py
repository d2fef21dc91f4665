"""The kubelet's wiping of ResourceSlices: a node advertises a driver's devices only while the
driver can prepare them.

The real kubelet's DRA plugin manager deletes every ResourceSlice of its node when it starts
(no driver has registered yet, and one that never comes back must not leave devices that pods
would wait for), and deletes one driver's slices ``delay`` seconds (30) after the driver stopped
being usable, unless it registers again first. A failed delete is retried with the kubelet's
backoff (1 s, doubling, at most 5 min) until it succeeds or the kubelet stops. A driver
publishes again when it registers (vnpu's does at once, and on its resync).
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from vnpu_sandbox.kubelet import errors

log = logging.getLogger(__name__)

WIPING_DELAY_SECONDS = 30.0
_FIRST_RETRY_SECONDS = 1.0
_MAX_RETRY_SECONDS = 300.0


class SliceApi(Protocol):
    def delete_resource_slices(self, node: str, driver: str = "") -> None: ...


class SliceWiper:
    """Deletes the ResourceSlices of ``node`` through ``api`` as the kubelet does."""

    def __init__(self, api: SliceApi, node: str, delay: float = WIPING_DELAY_SECONDS) -> None:
        self._api = api
        self._node = node
        self._delay = delay
        self._pending: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def wipe_all(self) -> None:
        """At start: every slice of the node, now (retried in the background if it fails)."""
        self._stop.clear()
        if not self._wipe(""):
            self._later("", 0.0, _FIRST_RETRY_SECONDS)

    def unregistered(self, driver: str) -> None:
        """``driver`` is no longer usable: wipe its slices after the delay (once)."""
        with self._lock:
            if driver in self._pending:
                return
        self._later(driver, self._delay, _FIRST_RETRY_SECONDS)

    def registered(self, driver: str) -> None:
        """``driver`` is usable again: its pending wipe, if any, is cancelled."""
        with self._lock:
            cancel = self._pending.pop(driver, None)
        if cancel is not None:
            cancel.set()
            log.info("slice_wipe_cancelled node=%s driver=%s", self._node, driver)

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            pending, self._pending = list(self._pending.values()), {}
        for cancel in pending:
            cancel.set()

    def _later(self, driver: str, delay: float, retry: float) -> None:
        cancel = threading.Event()
        with self._lock:
            self._pending[driver] = cancel
        thread = threading.Thread(
            target=self._run, args=(driver, delay, retry, cancel), name="slicewiper", daemon=True
        )
        thread.start()

    def _run(self, driver: str, delay: float, retry: float, cancel: threading.Event) -> None:
        wait = delay
        while not cancel.wait(wait) and not self._stop.is_set():
            if self._wipe(driver):
                break
            wait, retry = retry, min(retry * 2, _MAX_RETRY_SECONDS)
        with self._lock:
            if self._pending.get(driver) is cancel:
                del self._pending[driver]

    def _wipe(self, driver: str) -> bool:
        try:
            self._api.delete_resource_slices(self._node, driver)
        except errors.ApiError as exc:
            log.info("slice_wipe_failed node=%s driver=%s error=%s", self._node, driver or "*", exc)
            return False
        log.info("slices_wiped node=%s driver=%s", self._node, driver or "*")
        return True
