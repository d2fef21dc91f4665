"""List+watch of one resource on a thread, feeding a handler: the driver's informers.

``scheduler`` starts one :class:`Informer` for pods and one for nodes. Each lists once
(:meth:`Handler.replace` gets every object), then watches from the list's resourceVersion and
passes every ``ADDED`` / ``MODIFIED`` / ``DELETED`` event to :meth:`Handler.event`, in order.
A watch that ends (its ``timeoutSeconds``) is opened again from the last resourceVersion seen
(BOOKMARKs included); 410 Expired lists again. Any other failure (API unreachable, a 5xx, a
broken stream) is logged once per streak with the error and retried after a pause that grows
from 0.2 s to 5 s; a handler that raises is logged with its traceback and the informer goes on.
Nothing here ever ends the process. :meth:`Informer.stop` closes the open watch at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from vnpu_sandbox.scheduling import cluster, errors, logs

log = logging.getLogger(__name__)

Json = dict[str, Any]

WATCH_SECONDS = 300
FIRST_PAUSE = 0.2
MAX_PAUSE = 5.0


class Handler(Protocol):
    def replace(self, items: list[Json]) -> None: ...

    def event(self, kind: str, obj: Json) -> None: ...


class Informer:
    """Keeps ``handler`` in step with one resource until :meth:`stop`."""

    def __init__(
        self,
        resource: str,
        lister: Callable[[], tuple[list[Json], str]],
        watcher: Callable[[str, int], cluster.Watch],
        handler: Handler,
        *,
        watch_seconds: int = WATCH_SECONDS,
    ) -> None:
        self.resource = resource
        self._list = lister
        self._watch = watcher
        self._handler = handler
        self._watch_seconds = watch_seconds
        self._stop = threading.Event()
        self._open: cluster.Watch | None = None
        self._lock = threading.Lock()
        self.synced = threading.Event()
        """Set once the first list has been handed to the handler."""
        self._thread = threading.Thread(target=self._run, name=f"informer-{resource}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._lock:
            if self._open is not None:
                self._open.close()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _deliver(self, fn: Callable[..., None], what: str, *args: object) -> None:
        try:
            fn(*args)
        except Exception:  # a bug in a handler must not stop the informer
            log.exception(
                "informer_handler_failed",
                extra=logs.fields(resource=self.resource, event_type=what),
            )

    def _run(self) -> None:
        version = ""
        failures = 0
        while not self._stop.is_set():
            try:
                if not version:
                    items, version = self._list()
                    self._deliver(self._handler.replace, "list", items)
                    self.synced.set()
                version = self._watch_once(version)
                if failures:
                    log.info(
                        "informer_recovered",
                        extra=logs.fields(resource=self.resource, failures=failures),
                    )
                failures = 0
            except errors.ApiError as exc:
                if self._stop.is_set():
                    return
                if exc.expired:
                    log.info(
                        "informer_relist",
                        extra=logs.fields(resource=self.resource, reason=exc.message),
                    )
                    version = ""
                    continue
                if failures == 0:
                    log.warning(
                        "informer_failed",
                        extra=logs.fields(resource=self.resource, error=str(exc), retrying=True),
                    )
                failures += 1
                self._stop.wait(min(MAX_PAUSE, FIRST_PAUSE * 2 ** (failures - 1)))

    def _watch_once(self, version: str) -> str:
        stream = self._watch(version, self._watch_seconds)
        with self._lock:
            if self._stop.is_set():
                stream.close()
                return version
            self._open = stream
        try:
            for kind, obj in stream.events():
                if self._stop.is_set():
                    break
                seen = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                if kind != "BOOKMARK":
                    self._deliver(self._handler.event, kind, kind, obj)
                version = seen or version
        finally:
            with self._lock:
                self._open = None
            stream.close()
        return version
