"""List+watch loops that keep ``cache.ClusterCache`` in step with the API, one thread per resource.

``app`` starts one ``Informer`` for nodes, one for pods and (with quotas on) one for
ResourceQuotas at start-up and stops them at
shutdown. Each lists (replacing the cache's contents), then watches from the list's
revision, applying ADDED/MODIFIED/DELETED and following BOOKMARKs. A watch that ends is
started again from the last revision; a 410 Expired (in the stream or as the answer)
means the revision is too old, so the loop lists again. Errors back off (0.2 s doubling
to 5 s) and never end the loop; ``stop`` closes the open stream so the thread exits at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import structlog

from vnpu_scheduler import cluster, errors, metrics
from vnpu_service import kubeapi

Json = dict[str, Any]
log = structlog.get_logger(__name__)


class Informer:
    """Keeps one resource (``nodes``, ``pods`` or ``resourcequotas``) current."""

    def __init__(
        self,
        resource: str,
        api: cluster.Cluster,
        replace: Callable[[list[Json]], None],
        upsert: Callable[[Json], None],
        remove: Callable[[Json], None],
        stats: metrics.Metrics,
        watch_timeout: int = 300,
    ) -> None:
        self.resource = resource
        self._api = api
        self._replace = replace
        self._upsert = upsert
        self._remove = remove
        self._stats = stats
        self._watch_timeout = watch_timeout
        self._stopping = threading.Event()
        self._stream: cluster.WatchStream | None = None
        self._guard = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"informer-{resource}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        with self._guard:
            stream = self._stream
        if stream is not None:
            stream.close()
        self._thread.join(timeout)

    def _list(self) -> str:
        if self.resource == "nodes":
            items, version = self._api.list_nodes()
        elif self.resource == "resourcequotas":
            items, version = self._api.list_resource_quotas()
        else:
            items, version = self._api.list_pods()
        self._replace(items)
        log.info("cache_listed", resource=self.resource, items=len(items), revision=version)
        return version

    def _run(self) -> None:
        delay = 0.2
        version = ""
        while not self._stopping.is_set():
            try:
                if not version:
                    version = self._list()
                version = self._watch(version)
                delay = 0.2
            except kubeapi.Expired:
                self._stats.watch_restarts.labels(self.resource, "expired").inc()
                version = ""
            except (errors.SchedulerError, kubeapi.ApiError) as exc:
                if self._stopping.is_set():
                    break
                self._stats.watch_restarts.labels(self.resource, "error").inc()
                log.warning("watch_failed", resource=self.resource, error=str(exc), retry_in=delay)
                self._stopping.wait(delay)
                delay = min(delay * 2, 5.0)
            except Exception:  # a bug must not leave the cache silently frozen: list again
                self._stats.watch_restarts.labels(self.resource, "error").inc()
                log.exception("watch_crashed", resource=self.resource, retry_in=delay)
                version = ""
                self._stopping.wait(delay)
                delay = min(delay * 2, 5.0)

    def _watch(self, version: str) -> str:
        """Apply events until the stream ends; the revision to continue from ('' to list again)."""
        stream = self._api.watch(self.resource, version, self._watch_timeout)
        with self._guard:
            self._stream = stream
        if self._stopping.is_set():
            stream.close()
        try:
            for event in stream:
                kind = event.get("type")
                obj = event.get("object")
                if not isinstance(obj, dict):
                    continue
                if kind == "ERROR":
                    code = obj.get("code")
                    if code == 410:
                        raise kubeapi.Expired(410, "Expired", str(obj.get("message", "")))
                    raise kubeapi.Unavailable(
                        int(code or 0), str(obj.get("reason", "")), str(obj.get("message", ""))
                    )
                seen = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                if kind in ("ADDED", "MODIFIED"):
                    self._upsert(obj)
                elif kind == "DELETED":
                    self._remove(obj)
                if seen:
                    version = seen
        finally:
            with self._guard:
                self._stream = None
        if not self._stopping.is_set():
            self._stats.watch_restarts.labels(self.resource, "closed").inc()
        return version
