"""The controller manager: informers, one work queue, one worker, three controllers.

``command`` (``vnpu-sandbox controllers``) and the tests build a :class:`ControllerManager`
from an API client, ``start`` it and ``stop`` it. It runs an informer thread per kind
(deployments, replicasets, pods) and one worker thread that, once every cache has listed,
takes items from the queue and calls the deployment controller, the replicaset controller or
the garbage collector. One worker means no two syncs ever race; after each sync the worker
waits (at most ``settle_seconds``) until the informers have seen the sync's own writes, so the
next sync never acts on a cache that misses them (what client-go's "expectations" are for).

Failures never end the process. A sync that fails is retried with a per-object exponential
backoff (up to ``max_backoff`` seconds). Each failure is logged once: a server that does not
answer is reported once for the whole manager (``api_unreachable``, then ``api_reachable``
when a call succeeds again), any other error once per object until its sync succeeds
(``sync_failed``, then ``sync_recovered``); conflicts (409), which a fresh read resolves, are
only logged at debug level.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kubernetes import client

from vnpu_sandbox.controllers import (
    cluster,
    deployments,
    errors,
    garbagecollector,
    informer,
    recorder,
    replicasets,
    workqueue,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settings:
    """How the manager runs. Times are in seconds."""

    request_timeout: float = 10.0
    """Longest wait for one API call's answer."""
    watch_timeout: int = 300
    """Watches are reopened this often (the server ends each one after it)."""
    max_backoff: float = 30.0
    """Longest wait before retrying a failed sync or a failed list/watch."""
    settle_seconds: float = 2.0
    """Longest wait, after a sync, for the informers to see the sync's own writes."""


class ControllerManager:
    """The deployment and replicaset controllers and the garbage collector over one client."""

    def __init__(
        self,
        api_client: client.ApiClient,
        settings: Settings = Settings(),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.api = cluster.Cluster(api_client, settings.request_timeout)
        self.stopping = threading.Event()
        self.queue = workqueue.WorkQueue(limit=settings.max_backoff)
        self._unreachable = False
        self._answers_then = 0
        self._state_lock = threading.Lock()
        self.informers = {
            kind.kind: informer.Informer(
                self.api,
                kind,
                self.stopping,
                watch_timeout=settings.watch_timeout,
                max_backoff=settings.max_backoff,
                on_failure=self._informer_failed,
                on_recovery=lambda plural: self._reachable(),
            )
            for kind in (cluster.DEPLOYMENTS, cluster.REPLICASETS, cluster.PODS)
        }
        pods = self.informers["Pod"]
        replica_sets = self.informers["ReplicaSet"]
        self.replica_sets = replicasets.ReplicaSetController(
            self.api,
            replica_sets,
            pods,
            recorder.Recorder(self.api, "replicaset-controller", clock),
            clock,
        )
        self.deployments = deployments.DeploymentController(
            self.api,
            self.informers["Deployment"],
            replica_sets,
            pods,
            recorder.Recorder(self.api, "deployment-controller", clock),
            clock,
        )
        self.garbage = garbagecollector.GarbageCollector(self.api, self.informers)
        self._syncs: dict[str, Callable[[str, str], float | None]] = {
            replicasets.TOPIC: self.replica_sets.sync,
            deployments.TOPIC: self.deployments.sync,
        }
        for topic, kind in self.garbage.topics.items():
            self._syncs[topic] = self._collector_for(kind)
        self.replica_sets.watch(self.queue)
        self.deployments.watch(self.queue)
        self.garbage.watch(self.queue)
        self._threads: list[threading.Thread] = []

    def _collector_for(self, kind: cluster.Kind) -> Callable[[str, str], float | None]:
        return lambda namespace, name: self.garbage.sync(kind, namespace, name)

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        for kind, cache in self.informers.items():
            thread = threading.Thread(target=cache.run, name=f"informer-{kind}", daemon=True)
            thread.start()
            self._threads.append(thread)
        worker = threading.Thread(target=self._work, name="controllers-worker", daemon=True)
        worker.start()
        self._threads.append(worker)

    def wait_synced(self, timeout: float) -> bool:
        """True once every informer has listed (False after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        return all(
            cache.synced.wait(max(deadline - time.monotonic(), 0))
            for cache in self.informers.values()
        )

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the worker and the informers (open watches are closed), then return."""
        self.stopping.set()
        self.queue.close()
        for cache in self.informers.values():
            cache.close()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(deadline - time.monotonic(), 0.1))

    # --- the worker -----------------------------------------------------------------------

    def _work(self) -> None:
        while not self.stopping.is_set():
            if not all(cache.synced.wait(0.2) for cache in self.informers.values()):
                continue
            item = self.queue.get(timeout=0.5)
            if item is None:
                continue
            self._process(item)

    def _process(self, item: workqueue.Item) -> None:
        topic, namespace, name = item
        sync = self._syncs.get(topic)
        if sync is None:
            return
        try:
            again = sync(namespace, name)
        except errors.ApiError as exc:
            self._sync_failed(item, exc)
        except Exception:  # a bug in one sync must not stop the others
            if self.queue.failures(item) == 0:
                log.exception("sync_crashed controller=%s object=%s/%s", topic, namespace, name)
            self.queue.retry(item)
        else:
            self._reachable()
            if self.queue.failures(item):
                log.info("sync_recovered controller=%s object=%s/%s", topic, namespace, name)
                self.queue.forget(item)
            if again is not None:
                self.queue.add_after(item, again)
        finally:
            self._settle()

    def _sync_failed(self, item: workqueue.Item, exc: errors.ApiError) -> None:
        topic, namespace, name = item
        first = self.queue.retry(item) == 1
        if exc.unreachable:
            self._report_unreachable(exc)
        elif exc.conflict:
            log.debug(
                "sync_conflict controller=%s object=%s/%s error=%s", topic, namespace, name, exc
            )
        elif first:
            log.warning(
                "sync_failed controller=%s object=%s/%s error=%s", topic, namespace, name, exc
            )
        else:
            log.debug(
                "sync_failed_again controller=%s object=%s/%s error=%s", topic, namespace, name, exc
            )

    def _settle(self) -> None:
        """Wait until each informer has seen this manager's latest write of its kind."""
        deadline = time.monotonic() + self.settings.settle_seconds
        for cache in self.informers.values():
            written = self.api.written(cache.kind)
            if written and not cache.wait_for(written, max(deadline - time.monotonic(), 0)):
                log.debug("cache_behind kind=%s revision=%d", cache.kind.plural, written)

    # --- reporting failures once --------------------------------------------------------------

    def _informer_failed(self, plural: str, exc: errors.ApiError) -> None:
        if exc.unreachable:
            self._report_unreachable(exc)
        else:
            log.warning("watch_failed kind=%s error=%s", plural, exc)

    def _report_unreachable(self, exc: errors.ApiError) -> None:
        with self._state_lock:
            first, self._unreachable = not self._unreachable, True
            self._answers_then = self.api.answers
        if first:
            log.warning("api_unreachable error=%s (retrying with backoff)", exc)

    def _reachable(self) -> None:
        """Report the end of an outage, once the server has answered a request since."""
        with self._state_lock:
            back = self._unreachable and self.api.answers > self._answers_then
            if back:
                self._unreachable = False
        if back:
            log.info("api_reachable")
