"""The binding cycle: a pool of workers binding the pods the scheduling cycle placed.

``driver`` calls :meth:`Binder.submit` at the end of a successful cycle, after assuming the pod
on its node in the cache, and goes on with the next pod while the bind runs, as kube-scheduler
binds in a goroutine. A worker binds through the first extender that has a ``bindVerb`` and is
interested in the pod (an ``ignorable`` one that fails is skipped), else with a ``pods/binding``
of its own (kube-scheduler's DefaultBinder). Then:

* success: the ``Scheduled`` event, and the queue forgets the pod; the cache keeps it assumed
  until the watch shows it bound;
* failure: the assumed pod is forgotten and the unschedulable pods are moved (what it held is
  free again); unless the watch meanwhile showed it bound (an answer lost after the Binding) or
  it was deleted, it gets a ``FailedScheduling`` event with the error, the ``SchedulerError``
  condition, and the backoff queue.

:meth:`Binder.close` waits (bounded) for the binds in flight.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Sequence

from vnpu_sandbox.scheduling import cache, cluster, errors, extender, logs, queue, report

log = logging.getLogger(__name__)


class Binder:
    def __init__(
        self,
        cache_: cache.Cache,
        queue_: queue.SchedulingQueue,
        api: cluster.Cluster,
        extenders: Sequence[extender.Extender],
        reporter: report.Reporter,
        workers: int,
    ) -> None:
        self._cache = cache_
        self._queue = queue_
        self._api = api
        self._extenders = list(extenders)
        self._reporter = reporter
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="bind")
        self._in_flight: set[concurrent.futures.Future[None]] = set()
        self._lock = threading.Lock()

    def submit(self, popped: queue.Popped, node: str) -> None:
        future = self._pool.submit(self._bind, popped, node)
        with self._lock:
            self._in_flight.add(future)
        future.add_done_callback(self._finished)

    def close(self, timeout: float) -> None:
        with self._lock:
            pending = set(self._in_flight)
        concurrent.futures.wait(pending, timeout=timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _finished(self, future: concurrent.futures.Future[None]) -> None:
        with self._lock:
            self._in_flight.discard(future)

    def _bind(self, popped: queue.Popped, node: str) -> None:
        pod = popped.pod
        metadata = pod.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "default")
        name = str(metadata.get("name") or "")
        started = time.monotonic()
        binder = next((e for e in self._extenders if e.is_binder and e.interested(pod)), None)
        by = "api" if binder is None else binder.name
        try:
            if binder is not None:
                try:
                    binder.bind(namespace, name, popped.uid, node)
                except errors.ExtenderError as exc:
                    if not binder.spec.ignorable:
                        raise
                    log.info(
                        "extender_skipped",
                        extra=logs.fields(
                            pod=report.key(pod), extender=binder.name, verb="bind", error=str(exc)
                        ),
                    )
                    binder, by = None, "api"
            if binder is None:
                self._api.bind(namespace, name, popped.uid, node)
        except (errors.ExtenderError, errors.ApiError) as exc:
            self._failed(popped, node, by, str(exc), started)
            return
        except Exception as exc:  # never lose the pod to a bug in a bind worker
            log.exception("bind_crashed", extra=logs.fields(pod=report.key(pod), node=node))
            self._failed(popped, node, by, f"internal error: {exc!r}", started)
            return
        self._reporter.scheduled(pod, node)
        self._queue.done(popped.uid)
        now = time.monotonic()
        log.info(
            "pod_bound",
            extra=logs.fields(
                pod=report.key(pod),
                node=node,
                binder=by,
                attempt=popped.attempts,
                duration_seconds=round(now - started, 6),
                since_first_attempt_seconds=round(now - popped.first_attempt, 6),
            ),
        )

    def _failed(
        self, popped: queue.Popped, node: str, by: str, message: str, started: float
    ) -> None:
        self._cache.forget(popped.uid)
        self._queue.move_all()  # what the assumed pod held is free again
        log.warning(
            "bind_failed",
            extra=logs.fields(
                pod=report.key(popped.pod),
                node=node,
                binder=by,
                error=message,
                duration_seconds=round(time.monotonic() - started, 6),
            ),
        )
        if self._cache.is_bound(popped.uid) or not self._queue.has(popped.uid):
            self._queue.done(popped.uid)  # bound after all (a lost answer), or deleted meanwhile
            return
        self._reporter.failed(
            self._queue.latest(popped.uid) or popped.pod, message, report.SCHEDULER_ERROR
        )
        self._queue.error(popped.uid)
