"""The node lock ``hami.io/mutex.lock``: taken by a bind, released by the device plugin.

``binder`` calls ``acquire`` before it recomputes a pod's assignment and ``release`` when the
bind fails (or right after the Binding with ``--release-lock-after-bind``). The lock value
is ``<RFC3339>,<namespace>,<pod>`` (HAMi's form, so HAMi's and vnpu's plugins find the pod
of their next Allocate from it). It is written with a merge patch carrying the node's
``metadata.resourceVersion``: of two writers only one succeeds, the other gets 409 and
looks again. A lock held by another pod is waited for (woken by the node watch when the
node changes, reading the watch's copy then rather than the API, and reading the API with
backoff up to 2 s as a fallback, up to ``wait`` seconds in all, counted in
``vnpu_scheduler_lock_wait_seconds``) and taken over only when its owner pod is gone, or
when it is older than ``ttl`` and its owner is not still waiting for Allocate (bind-phase
``allocating`` and still Pending: never steal from it, HAMi #3096); an owner-less (Volcano)
lock is taken over only when expired. A lock dated more than ``skew`` in the future was
written by a wrong clock and says nothing about its age: it counts as expired (taken over
under the same rule, never from an owner still waiting for Allocate), and each take-over is
logged, counted and told to ``on_takeover`` (the binder records it as an event on the pod).
Within one replica, binds to the same node queue on an ``asyncio.Lock`` first, so they do
not poll the API against each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import structlog

from vnpu_core import coordination, protocol
from vnpu_core import errors as core_errors
from vnpu_scheduler import cluster, errors, metrics
from vnpu_service import kubeapi

Json = dict[str, Any]
T = TypeVar("T")
Runner = Callable[..., Awaitable[Any]]
log = structlog.get_logger(__name__)
_jitter = random.Random()  # its own generator: the global one belongs to the process
# A bind waiting for a lock is woken by the node watch and reads the watch's copy; these bound
# its fallback reads from the API (a watch that is down or slow), doubling from the first.
LOOK_AGAIN_FIRST = 0.05
LOOK_AGAIN_LAST = 2.0


def _now() -> datetime:
    return datetime.now(UTC).astimezone()


class NodeLocks:
    """Takes and releases node locks through ``api``; ``run`` runs a blocking call in a thread."""

    def __init__(
        self,
        api: cluster.Cluster,
        run: Runner,
        stats: metrics.Metrics,
        ttl: float,
        wait: float,
        attempts: int,
        clock: Callable[[], datetime] = _now,
        skew: float = 30.0,
        watched: Callable[[str], Json | None] = lambda _node: None,
    ) -> None:
        self._api = api
        self._watched = watched  # the node as the watch last delivered it
        self._run = run
        self._stats = stats
        self._ttl = timedelta(seconds=ttl)
        self._skew = timedelta(seconds=skew)
        self._wait = wait
        self._attempts = attempts
        self._clock = clock
        self._local: dict[str, asyncio.Lock] = {}
        self._changed: dict[str, asyncio.Event] = {}
        self._pending: dict[str, int] = {}

    def wake(self, node: str) -> None:
        """The node changed (seen by the watch): a bind waiting for its lock looks again now."""
        event = self._changed.get(node)
        if event is not None:
            event.set()

    @contextlib.asynccontextmanager
    async def queue(self, node: str) -> AsyncIterator[None]:
        """The in-process queue for binds to ``node``: one at a time, the rest wait here."""
        lock = self._local.get(node)
        if lock is None:
            lock = self._local[node] = asyncio.Lock()
        self._pending[node] = self._pending.get(node, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._pending[node] -= 1
            if not self._pending[node]:
                del self._pending[node]

    def busy(self, node: str) -> bool:
        """A bind of this replica is running or queued for ``node``."""
        return node in self._pending

    async def acquire(
        self,
        node: str,
        namespace: str,
        pod: str,
        cached: Json | None = None,
        on_takeover: Callable[[str], None] = lambda _text: None,
    ) -> Json:
        """Hold the lock for ``namespace/pod``; the node object as written. Raises BindError.

        ``cached`` (the watch's copy of the node) saves the first read: if it is out of date
        the write's resourceVersion precondition fails and the node is read afresh.
        ``on_takeover`` hears a sentence for each lock of another taken over.
        """
        who = f"{namespace}/{pod}"
        start = time.monotonic()
        delay = LOOK_AGAIN_FIRST  # between looks at a lock held by another pod
        backoff = 0.005  # after a lost write race
        changed = self._changed.setdefault(node, asyncio.Event())
        while True:
            changed.clear()  # set again by ``wake`` when the watch sees the node change
            try:
                if cached is not None and (cached.get("metadata") or {}).get("resourceVersion"):
                    obj: Json = cached  # without a revision the write would be unconditional
                else:
                    obj = await self._run(self._api.get_node, node)
            except kubeapi.NotFound as exc:
                raise errors.BindError(
                    who, node, "node-gone", f"node {node} does not exist"
                ) from exc
            cached = None
            meta = obj.get("metadata") or {}
            raw = (meta.get("annotations") or {}).get(protocol.NODE_LOCK_KEY)
            now = self._clock()
            holder = ""
            if raw is not None:
                holder = await self._holder(node, who, raw, namespace, pod, now, on_takeover)
            if not holder:
                value = coordination.encode_lock(coordination.NodeLock(now, namespace, pod))
                try:
                    written: Json = await self._run(
                        self._api.patch_node_annotations,
                        node,
                        str(meta.get("resourceVersion") or ""),
                        {protocol.NODE_LOCK_KEY: value},
                    )
                except kubeapi.Conflict:
                    # Someone wrote the node first: read it again after a short, growing pause.
                    self._stats.bind_conflicts.labels("lock").inc()
                    self._stats.bind_retries.inc()
                    await asyncio.sleep(backoff * _jitter.uniform(0.5, 1.0))
                    backoff = min(backoff * 2, 0.2)
                    continue
                self._stats.lock_wait.observe(time.monotonic() - start)
                return written
            waited = time.monotonic() - start
            if waited >= self._wait:
                self._stats.lock_wait.observe(waited)
                raise errors.BindError(
                    who,
                    node,
                    "lock-busy",
                    f"node {node} is locked by {holder} (waited {waited:.1f} s); its device "
                    "plugin has not finished the previous Allocate",
                )
            pause = min(delay, self._wait - waited) * _jitter.uniform(0.5, 1.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), pause)
                cached = self._watched(node)  # woken by the watch: its copy is the news
            delay = min(delay * 2, LOOK_AGAIN_LAST)

    async def _holder(
        self,
        node: str,
        who: str,
        raw: str,
        namespace: str,
        pod: str,
        now: datetime,
        on_takeover: Callable[[str], None],
    ) -> str:
        """Who keeps us from taking the lock now ('' when we may take it)."""
        try:
            lock = coordination.decode_lock(raw)
        except core_errors.ProtocolError as exc:
            raise errors.BindError(
                who,
                node,
                "lock-unreadable",
                f"node {node} has an unreadable {protocol.NODE_LOCK_KEY}={raw!r} "
                f"({exc.problem}); remove the annotation",
            ) from exc
        if lock.owned_by(namespace, pod):
            return ""
        ahead = (lock.time - now).total_seconds()
        future = ahead > self._skew.total_seconds()
        why = "future" if future else "expired"
        expired = future or lock.expired(now, self._ttl)
        if lock.namespace is None or lock.name is None:
            if expired:
                self._took_over(node, who, raw, why, ahead, on_takeover)
                return ""
            return f"an owner-less lock taken at {raw}"
        owner = f"pod {lock.namespace}/{lock.name}"
        try:
            holder: Json = await self._run(self._api.get_pod, lock.namespace, lock.name)
        except kubeapi.NotFound:
            self._took_over(node, who, raw, "owner_gone", ahead, on_takeover)
            return ""
        if not expired:
            return owner
        phase = ((holder.get("metadata") or {}).get("annotations") or {}).get(
            protocol.BIND_PHASE_KEY
        )
        started = (holder.get("status") or {}).get("phase", "Pending") != "Pending"
        if phase == protocol.BindPhase.ALLOCATING.value and not started:
            # Still waiting for Allocate. (A pod whose containers started was allocated,
            # whatever its plugin left in bind-phase.)
            dated = f" (its lock is dated {ahead:.0f} s in the future)" if future else ""
            return f"{owner}, still waiting for Allocate{dated}"
        self._took_over(node, who, raw, why, ahead, on_takeover)
        return ""

    def _took_over(
        self,
        node: str,
        who: str,
        raw: str,
        why: str,
        ahead: float,
        on_takeover: Callable[[str], None],
    ) -> None:
        self._stats.lock_takeovers.labels(why).inc()
        log.warning(
            "node_lock_taken_over", node=node, pod=who, previous=raw, why=why, ahead=round(ahead)
        )
        reasons = {
            "owner_gone": "its owner pod no longer exists",
            "expired": f"it is older than {self._ttl.total_seconds():g} s and its owner is done",
            "future": (
                f"it is dated {ahead:.0f} s in the future (more than the allowed clock skew of "
                f"{self._skew.total_seconds():g} s): a wrong clock wrote it"
            ),
        }
        on_takeover(f"node {node}: took over {protocol.NODE_LOCK_KEY}={raw}: {reasons[why]}")

    async def release(self, node: str, namespace: str, pod: str) -> bool:
        """Remove the lock if ``namespace/pod`` still holds it; False when it did not."""
        for attempt in range(self._attempts):
            try:
                obj: Json = await self._run(self._api.get_node, node)
                meta = obj.get("metadata") or {}
                raw = (meta.get("annotations") or {}).get(protocol.NODE_LOCK_KEY)
                if raw is None:
                    return False
                try:
                    if not coordination.decode_lock(raw).owned_by(namespace, pod):
                        return False
                except core_errors.ProtocolError:
                    return False
                await self._run(
                    self._api.patch_node_annotations,
                    node,
                    str(meta.get("resourceVersion") or ""),
                    {protocol.NODE_LOCK_KEY: None},
                )
                return True
            except kubeapi.NotFound:
                return False
            except kubeapi.ApiError as exc:
                if not exc.retryable:
                    break
                self._stats.bind_retries.inc()
                await asyncio.sleep(0.02 * 2**attempt)
        log.error("node_lock_release_failed", node=node, pod=f"{namespace}/{pod}")
        return False
