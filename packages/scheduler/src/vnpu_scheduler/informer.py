"""List+watch loops that keep ``cache.ClusterCache`` in step with the API, one thread per resource.

``app`` starts one ``Informer`` for nodes, one for pods and (with quotas on) one for
ResourceQuotas at start-up and stops them at
shutdown. Each lists (replacing the cache's contents), then watches from the list's
revision, applying ADDED/MODIFIED/DELETED and following BOOKMARKs. A watch that ends is
started again from the last revision; a 410 Expired (in the stream or as the answer)
means the revision is too old, so the loop lists again. Errors back off (0.2 s doubling
to 5 s) and never end the loop; ``stop`` closes the open stream so the thread exits at once.
The loop is ``vnpu_service.watch.Reflector`` (the device plugin's pod watch runs it too),
with the ``Informer`` as its handler: the listing, the callbacks, the logs and the metrics.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import structlog

from vnpu_scheduler import cluster, errors, metrics
from vnpu_service import kubeapi, watch

Json = dict[str, Any]
log = structlog.get_logger(__name__)


class Informer:
    """Keeps one resource (``nodes``, ``pods`` or ``resourcequotas``) current.

    It is the ``watch.Handler`` of its ``watch.Reflector``: the methods after ``stop`` are
    called from the informer's thread.
    """

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
        self._reflector = watch.Reflector(self, failures=(errors.SchedulerError, kubeapi.ApiError))
        self._thread = threading.Thread(
            target=self._reflector.run, name=f"informer-{resource}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._reflector.stop()
        self._thread.join(timeout)

    # -- the loop's handler (``watch.Handler``) ------------------------------------------

    def relist(self) -> str:
        if self.resource == "nodes":
            items, version = self._api.list_nodes()
        elif self.resource == "resourcequotas":
            items, version = self._api.list_resource_quotas()
        else:
            items, version = self._api.list_pods()
        self._replace(items)
        log.info("cache_listed", resource=self.resource, items=len(items), revision=version)
        return version

    def watch_from(self, revision: str) -> watch.Stream:
        return self._api.watch(self.resource, revision, self._watch_timeout)

    def upsert(self, obj: Json) -> None:
        self._upsert(obj)

    def remove(self, obj: Json) -> None:
        self._remove(obj)

    def opened(self) -> None:
        """Nothing to note: a failure was logged each time it happened."""

    def ended(self) -> None:
        self._stats.watch_restarts.labels(self.resource, "closed").inc()

    def expired(self) -> None:
        self._stats.watch_restarts.labels(self.resource, "expired").inc()

    def failed(self, error: Exception, retry_in: float) -> None:
        self._stats.watch_restarts.labels(self.resource, "error").inc()
        log.warning("watch_failed", resource=self.resource, error=str(error), retry_in=retry_in)

    def crashed(self, error: Exception, retry_in: float) -> None:
        self._stats.watch_restarts.labels(self.resource, "error").inc()
        log.exception("watch_crashed", resource=self.resource, retry_in=retry_in)
