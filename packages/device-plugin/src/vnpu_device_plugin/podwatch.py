"""Prompt reclaim: a watch of the node's pods that frees a pod's vNPUs as soon as it is done.

A scheduler counts a pod's space free once the pod is gone from the API, so its vNPUs must
not wait for the reconciler's next pass. ``PodWatch`` runs two threads:

* **the watch**: watches the pods bound to this node (``spec.nodeName=<node>``) from the
  revision of the start-up pass's pod list, so nothing between the two is missed. A pod
  DELETED, or Succeeded or Failed, is noted for the worker (an init container's own vNPU,
  once it has terminated, is left to the periodic pass and to an Allocate that needs the
  room). The loop is ``vnpu_service.watch.Reflector``, with ``PodWatch`` as its handler: the
  watch is opened again when it ends (the API's timeout); a 410 Expired lists again; an
  error is logged once (``pod_watch_broken``, then ``pod_watch_restored``) and retried with
  backoff (0.2 s doubling to 5 s). Each new list asks the reconciler for a full pass, since
  deletions may have been missed meanwhile.
* **the worker** takes the noted pods, all that arrived together in one go, and reclaims
  through ``reclaim`` (``watch`` trigger) under the allocation lock: the same checks as
  the periodic pass (the UID decides; kubelet must no longer list the containers with
  their devices; never a vNPU a container holds). What had to be kept (kubelet still
  lists it, PodResources does not answer, the driver says in use) is tried again after
  0.1 s, doubling to 5 s, until the reconciler's interval has passed; from then on the
  periodic pass has it.

``plugin`` starts it after the first reconciler pass and stops it before the reconciler.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from vnpu_device_plugin import cluster, metrics, reclaim
from vnpu_service import watch

log = structlog.get_logger(__name__)
Json = dict[str, Any]

FIRST_RETRY = 0.1  # seconds before a kept vNPU is tried again, doubling
MAX_RETRY = 5.0
WATCH_TIMEOUT = 300  # seconds one watch request lasts (the API closes it; it is reopened)


@dataclass
class _Noted:
    """A pod whose vNPUs may be reclaimed: its last state (``pod``) or None once deleted."""

    pod: Json | None
    due: float
    delay: float
    since: float


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


class PodWatch:
    """Watches ``node``'s pods and reclaims their vNPUs through ``reclaimer`` under ``lock``.

    It is the ``watch.Handler`` of its ``watch.Reflector``: the methods under "the watch"
    are called from the watch thread.
    """

    def __init__(
        self,
        api: cluster.Cluster,
        node: str,
        reclaimer: reclaim.Reclaimer,
        stats: metrics.Metrics,
        *,
        lock: threading.Lock,
        resync: Callable[[], None],
        give_up: float,
        timeout: int = WATCH_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._node = node
        self._reclaimer = reclaimer
        self._stats = stats
        self._lock = lock
        self._resync = resync
        self._give_up = give_up
        self._timeout = timeout
        self._clock = clock
        self._noted: dict[str, _Noted] = {}
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._reflector = watch.Reflector(self, stopping=self._stopping)
        self._broken = False
        self.watching = self._reflector.watching  # set while a watch is open (tests wait for it)
        self._threads: list[threading.Thread] = []

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, revision: str = "") -> None:
        """Watch from ``revision`` (the start-up pass's pod list), or list first when ""."""
        self._threads = [
            threading.Thread(
                target=self._reflector.run,
                args=(revision,),
                name="vnpu-dp-podwatch",
                daemon=True,
            ),
            threading.Thread(target=self._work_loop, name="vnpu-dp-reclaim", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._reflector.stop()  # sets ``_stopping``, which the worker waits on too
        with self._changed:
            self._changed.notify_all()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []

    # -- the watch (``watch.Handler``) -------------------------------------------------

    def relist(self) -> str:
        _pods, revision = self._api.list_pods_and_revision(self._node)
        self._resync()  # what happened while nobody watched: a full pass finds it
        return revision

    def watch_from(self, revision: str) -> watch.Stream:
        return self._api.watch_pods(self._node, revision, self._timeout)

    def upsert(self, obj: Json) -> None:
        self._note(obj, deleted=False)

    def remove(self, obj: Json) -> None:
        self._note(obj, deleted=True)

    def opened(self) -> None:
        if self._broken:
            self._broken = False
            log.info("pod_watch_restored", node=self._node)

    def ended(self) -> None:
        """Nothing to note: the watch is opened again from the last revision."""

    def expired(self) -> None:
        self._stats.pod_watch_restarts.labels("expired").inc()
        log.info("pod_watch_expired", node=self._node)

    def failed(self, error: Exception, retry_in: float) -> None:
        self._broke(str(error), retry_in)

    def crashed(self, error: Exception, retry_in: float) -> None:
        log.exception("pod_watch_crashed", node=self._node)
        self._broke(repr(error), retry_in)

    def _broke(self, error: str, delay: float) -> None:
        self._stats.pod_watch_restarts.labels("error").inc()
        if not self._broken:
            self._broken = True
            log.warning(
                "pod_watch_broken",
                node=self._node,
                error=error,
                retry_in=delay,
                effect="vNPUs of deleted pods wait for an Allocate that needs them or the periodic pass",
            )
        else:
            log.debug("pod_watch_still_broken", node=self._node, error=error, retry_in=delay)

    def _note(self, pod: Json, *, deleted: bool) -> None:
        uid = _uid(pod)
        if not uid:
            return
        state: Json | None = None
        if not deleted:
            if not reclaim.finished(pod):
                return
            state = pod
        now = self._clock()
        with self._changed:
            noted = self._noted.get(uid)
            if noted is not None and noted.pod is not None and reclaim.finished(noted.pod):
                state = noted.pod if state is None else state  # finished says more than gone
            elif noted is not None and noted.pod is None:
                state = None  # a deleted pod stays deleted
            since = noted.since if noted is not None else now
            self._noted[uid] = _Noted(state, now, FIRST_RETRY, since)
            self._changed.notify_all()

    # -- the worker --------------------------------------------------------------------

    def _work_loop(self) -> None:
        while not self._stopping.is_set():
            ready = self._next()
            if not ready:
                continue
            owners = reclaim.Owners(
                {uid: n.pod for uid, n in ready.items() if n.pod is not None},
                frozenset(uid for uid, n in ready.items() if n.pod is None),
            )
            try:
                with self._lock:
                    waiting = self._reclaimer.reclaim(owners, reclaim.Trigger.WATCH).waiting
            except Exception:  # a bug must not stop the worker; the periodic pass still runs
                log.exception("watch_reclaim_failed", pods=sorted(ready))
                waiting = set(ready)
            self._after(ready, waiting)

    def _next(self) -> dict[str, _Noted]:
        """The noted pods that are due, waiting until one is (empty when stopping)."""
        with self._changed:
            while not self._stopping.is_set():
                now = self._clock()
                ready = {uid: n for uid, n in self._noted.items() if n.due <= now}
                if ready:
                    return ready
                soonest = min((n.due for n in self._noted.values()), default=None)
                self._changed.wait(None if soonest is None else soonest - now)
        return {}

    def _after(self, tried: Mapping[str, _Noted], waiting: set[str]) -> None:
        """Forget what was reclaimed; try again later what had to be kept."""
        now = self._clock()
        with self._changed:
            for uid, noted in tried.items():
                if self._noted.get(uid) is not noted:
                    continue  # a newer event came in meanwhile: that one decides
                if uid not in waiting:
                    del self._noted[uid]
                elif now - noted.since >= self._give_up:
                    del self._noted[uid]
                    log.info("watch_reclaim_left_to_periodic_pass", pod_uid=uid)
                else:
                    noted.due = now + noted.delay
                    noted.delay = min(noted.delay * 2, MAX_RETRY)
