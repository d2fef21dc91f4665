"""The pod worker's DRA calls and their retries, as the kubelet's pod sync makes them.

The pod worker asks ``prepare`` before a pod's containers start and ``unprepare`` after they
stop. A call that fails is tried again ``retry`` seconds later (the kubelet pod worker's 10 s
back-off): ``due`` says which pods' turn has come and ``next_wait`` how long the worker may
sleep. A failed prepare is told once as a ``FailedPrepareDynamicResources`` Event per
distinct message (the event recorder would aggregate repeats); a pod whose unprepare is still
due holds its final delete (the kubelet's podResourcesAreReclaimed). Worker thread only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from vnpu_sandbox.kubelet import dramanager, errors

log = logging.getLogger(__name__)
Json = dict[str, Any]


def _uid(pod: Json) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))


def _key(pod: Json) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


class DraSync:
    """Prepare and unprepare through ``dra`` (None: no DRA), retried every ``retry`` s;
    ``event(pod, reason, message)`` records an Event on the pod."""

    def __init__(
        self,
        dra: dramanager.DraManager | None,
        retry: float,
        event: Callable[[Json, str, str], None],
    ) -> None:
        self._dra = dra
        self._retry = max(retry, 0.05)
        self._event = event
        self._prepare_due: dict[str, float] = {}
        """Pods whose claims must be prepared (again), by UID -> when."""
        self._unprepare_due: dict[str, tuple[Json, float]] = {}
        """Pods whose claims must be unprepared (again): UID -> (pod, when)."""
        self._told: dict[str, str] = {}

    def uses_claims(self, pod: Json) -> bool:
        return self._dra is not None and dramanager.uses_claims(pod)

    def prepare(self, pod: Json) -> bool:
        """Prepare the pod's claims; False (and a retry scheduled) when that fails."""
        uid = _uid(pod)
        if not self.uses_claims(pod):
            return True
        assert self._dra is not None
        try:
            self._dra.prepare(pod)
        except errors.DraError as exc:
            self._prepare_due[uid] = time.monotonic() + self._retry
            message = f"Failed to prepare dynamic resources: {exc}"
            log.info("pod_prepare_failed pod=%s error=%s", _key(pod), exc)
            if self._told.get(uid) != message:
                self._told[uid] = message
                self._event(pod, "FailedPrepareDynamicResources", message)
            return False
        self._prepare_due.pop(uid, None)
        self._told.pop(uid, None)
        return True

    def prepare_again(self, uid: str) -> None:
        """A running pod adopted after a restart: its claims are prepared again at once."""
        self._prepare_due[uid] = 0.0

    def unprepare(self, pod: Json) -> None:
        """Unprepare the pod's claims now, or schedule a retry when that fails; whatever was
        due for the pod's prepare is dropped."""
        uid = _uid(pod)
        self._prepare_due.pop(uid, None)
        self._told.pop(uid, None)
        if self._dra is None or not self._dra.needs_unprepare(uid):
            self._unprepare_due.pop(uid, None)
            return
        try:
            self._dra.unprepare(pod)
        except errors.DraError as exc:
            log.warning("pod_unprepare_failed pod=%s error=%s", _key(pod), exc)
            self._unprepare_due[uid] = (pod, time.monotonic() + self._retry)
            return
        self._unprepare_due.pop(uid, None)

    def unprepare_pending(self, uid: str) -> bool:
        return uid in self._unprepare_due

    def forget_prepare(self, uid: str) -> None:
        self._prepare_due.pop(uid, None)

    def due(self) -> tuple[list[Json], list[str]]:
        """The pods whose unprepare retry has come, and the UIDs whose prepare has."""
        now = time.monotonic()
        unprepare = [pod for pod, when in self._unprepare_due.values() if when <= now]
        prepare = [uid for uid, when in self._prepare_due.items() if when <= now]
        return unprepare, prepare

    def next_wait(self) -> float | None:
        """Seconds until the next retry is due (None: none is)."""
        dues = list(self._prepare_due.values()) + [d for _, d in self._unprepare_due.values()]
        return max(0.0, min(dues) - time.monotonic()) if dues else None
