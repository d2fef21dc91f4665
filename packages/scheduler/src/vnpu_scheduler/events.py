"""Kubernetes Events about pods, written in the background on threads of their own.

``binder`` (NPUAssigned, NPUBindFailed, NPULockTakenOver, NPURequestAdjusted), ``quotagate``
(NPUQuotaExceeded) and the reclaimer (``app`` hands them ``Recorder.record``) tell users what
happened through Events. An Event is worth less than a bind: while kube-apiserver is slow or
down, Event writes must neither take the API threads binds need nor pile up without bound.
(They once shared the bind's thread pool: under overload each took seconds, filled the pool,
and binds waited more than a minute in its queue, long past their deadline.) So Events go
through ``threads`` threads of their own, at most ``backlog`` of them wait, and one more is
dropped and counted in ``vnpu_scheduler_events_dropped_total``, as client-go's event recorder
drops Events when its queue is full. A write that fails is logged and not retried.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import structlog

from vnpu_scheduler import cluster, metrics
from vnpu_service import kubeapi

log = structlog.get_logger(__name__)
Json = dict[str, Any]
EventSink = Callable[[Json, str, str, str], None]
"""pod, type (Normal, Warning), reason, message"""
THREADS = 2
BACKLOG = 256


class Recorder:
    """Records Events on pods from the event loop; ``record`` never waits."""

    def __init__(
        self,
        api: cluster.Cluster,
        stats: metrics.Metrics,
        threads: int = THREADS,
        backlog: int = BACKLOG,
    ) -> None:
        self._api = api
        self._stats = stats
        self._backlog = backlog
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="kube-events")
        self._pending: set[asyncio.Task[None]] = set()

    def record(self, pod: Json, kind: str, reason: str, message: str, name: str = "") -> None:
        """Write the Event in the background, or drop it when ``backlog`` are waiting.

        ``name``: the Event's own name, for an Event several replicas may write: the first
        write wins and the others find it there (409), which is not an error."""
        if len(self._pending) >= self._backlog:
            self._stats.events_dropped.inc()
            return
        loop = asyncio.get_running_loop()

        async def send() -> None:
            try:
                await loop.run_in_executor(
                    self._executor, self._api.record_event, pod, kind, reason, message, name
                )
            except kubeapi.ApiError as exc:
                if not (name and isinstance(exc, kubeapi.Conflict)):  # named: another wrote it
                    log.warning("event_not_recorded", reason=reason, error=str(exc))

        # A context of its own: the Event must not inherit a bind's API deadline.
        task = loop.create_task(send(), context=contextvars.Context())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def drain(self) -> None:
        """Wait for the Events still being written (at shutdown)."""
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
