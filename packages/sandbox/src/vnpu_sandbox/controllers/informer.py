"""List-then-watch caches of one kind in all namespaces, as client-go's informers keep them.

The manager runs one :class:`Informer` per kind (deployments, replicasets, pods) on its own
thread. It lists, then watches from the list's resourceVersion, applies every event to its
cache and calls the registered handlers with ``(type, old, new)`` (``old`` None for ADDED,
``new`` None for DELETED, which carries the last state in ``old``). A watch that ends is
reopened from the last revision seen; a 410 Expired means relist, and a relist reports the
differences from the cache as events, so handlers never miss a change. Any other failure is
retried with a backoff (at most ``max_backoff`` seconds apart); the first failure of a run
of them is reported through ``on_failure``, the next success through ``on_recovery``.

The controllers read the cache (``get``, ``items``) from the worker thread. Objects in it are
shared and must not be changed. ``wait_for(revision)`` blocks until the cache has seen a
revision, which is how the manager makes its own writes visible before the next sync.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from vnpu_sandbox.controllers import cluster, errors

log = logging.getLogger(__name__)

Json = dict[str, Any]
Key = tuple[str, str]
Handler = Callable[[str, Json | None, Json | None], None]
"""Called with the event type (ADDED, MODIFIED, DELETED), the old and the new object."""


def key_of(obj: Json) -> Key:
    metadata = obj.get("metadata") or {}
    return (str(metadata.get("namespace", "")), str(metadata.get("name", "")))


class Informer:
    """The cache of one kind, kept up to date by list and watch, with event handlers."""

    def __init__(
        self,
        api: cluster.Cluster,
        kind: cluster.Kind,
        stop: threading.Event,
        *,
        watch_timeout: int = 300,
        max_backoff: float = 30.0,
        on_failure: Callable[[str, errors.ApiError], None] | None = None,
        on_recovery: Callable[[str], None] | None = None,
    ) -> None:
        self.kind = kind
        self._api = api
        self._stop = stop
        self._watch_timeout = watch_timeout
        self._max_backoff = max_backoff
        self._on_failure = on_failure
        self._on_recovery = on_recovery
        self._handlers: list[Handler] = []
        self._objects: dict[Key, Json] = {}
        self._seen = 0
        self._changed = threading.Condition()
        self._stream: cluster.WatchStream | None = None
        self._stream_lock = threading.Lock()
        self.synced = threading.Event()
        """Set once the first list has been applied."""

    # --- what the controllers read -------------------------------------------------------

    def add_handler(self, handler: Handler) -> None:
        self._handlers.append(handler)

    def get(self, namespace: str, name: str) -> Json | None:
        with self._changed:
            return self._objects.get((namespace, name))

    def items(self, namespace: str | None = None) -> list[Json]:
        """Cached objects (one namespace or all), sorted by namespace and name."""
        with self._changed:
            return [
                self._objects[k]
                for k in sorted(self._objects)
                if namespace is None or k[0] == namespace
            ]

    def wait_for(self, revision: int, timeout: float) -> bool:
        """Block until the cache has applied ``revision`` (or ``timeout`` seconds pass)."""
        with self._changed:
            return self._changed.wait_for(lambda: self._seen >= revision, timeout)

    # --- the list and watch loop ---------------------------------------------------------

    def run(self) -> None:
        """List and watch until ``stop`` is set (the informer's thread)."""
        failures = 0
        while not self._stop.is_set():
            try:
                version = self._relist()
                if failures and self._on_recovery is not None:
                    self._on_recovery(self.kind.plural)
                failures = 0
                while not self._stop.is_set():
                    version = self._watch(version)
            except errors.ApiError as exc:
                if self._stop.is_set():
                    break
                if exc.expired:
                    log.debug("watch_expired kind=%s error=%s", self.kind.plural, exc)
                    continue
                failures += 1
                if failures == 1 and self._on_failure is not None:
                    self._on_failure(self.kind.plural, exc)
                self._stop.wait(min(0.2 * 2 ** (failures - 1), self._max_backoff))
            except Exception:  # a bug here must not leave the cache silently stale
                failures += 1
                if failures == 1:
                    log.exception("informer_failed kind=%s", self.kind.plural)
                self._stop.wait(min(0.2 * 2 ** (failures - 1), self._max_backoff))

    def close(self) -> None:
        """End the open watch (from any thread) so that ``run`` notices ``stop`` at once."""
        with self._stream_lock:
            stream = self._stream
        if stream is not None:
            stream.close()

    def _relist(self) -> str:
        items, version = self._api.list(self.kind)
        fresh = {key_of(item): item for item in items}
        changes: list[tuple[str, Json | None, Json | None]] = []
        with self._changed:
            for key, gone in self._objects.items():
                if key not in fresh:
                    changes.append(("DELETED", gone, None))
            for key, new in fresh.items():
                old = self._objects.get(key)
                if old is None:
                    changes.append(("ADDED", None, new))
                elif cluster.revision(old) != cluster.revision(new):
                    changes.append(("MODIFIED", old, new))
            self._objects = fresh
        for change in changes:
            self._notify(*change)
        self._advance(int(version) if version.isdigit() else 0)
        self.synced.set()
        return version

    def _watch(self, version: str) -> str:
        stream = self._api.watch(self.kind, version, self._watch_timeout)
        with self._stream_lock:
            self._stream = stream
        try:
            for event_type, obj in stream.events():
                if self._stop.is_set():
                    break
                if event_type in ("ADDED", "MODIFIED", "DELETED"):
                    obj.setdefault("apiVersion", self.kind.api_version)
                    obj.setdefault("kind", self.kind.kind)
                    self._apply(event_type, obj)
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                self._advance(cluster.revision(obj))
        finally:
            with self._stream_lock:
                self._stream = None
            stream.close()
        return version

    def _apply(self, event_type: str, obj: Json) -> None:
        key = key_of(obj)
        with self._changed:
            old = self._objects.get(key)
            if event_type == "DELETED":
                self._objects.pop(key, None)
            else:
                self._objects[key] = obj
        if event_type == "DELETED":
            self._notify("DELETED", obj, None)
        else:
            self._notify("ADDED" if old is None else "MODIFIED", old, obj)

    def _notify(self, event_type: str, old: Json | None, new: Json | None) -> None:
        for handler in self._handlers:
            try:
                handler(event_type, old, new)
            except Exception:  # a handler bug must not stop the cache
                log.exception("informer_handler_failed kind=%s", self.kind.plural)

    def _advance(self, revision: int) -> None:
        with self._changed:
            self._seen = max(self._seen, revision)
            self._changed.notify_all()
