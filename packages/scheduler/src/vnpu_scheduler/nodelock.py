"""The node lock ``hami.io/mutex.lock``: taken by a bind, released by the device plugin.

``binder`` calls ``acquire`` before it recomputes a pod's assignment and ``release`` when the
bind fails (or right after the Binding with ``--release-lock-after-bind``); ``app`` feeds
``saw`` every node the watch delivers. The lock value is ``<RFC3339>,<namespace>,<pod>``
(HAMi's form, so HAMi's and vnpu's plugins find the pod of their next Allocate from it). It
is written with a merge patch carrying the node's ``metadata.resourceVersion``: of two
writers only one succeeds, the other gets 409 and looks again. A lock held by another pod is
waited for (woken by the node watch when the node changes, reading the watch's copy then
rather than the API, and reading the API with backoff up to 2 s as a fallback, up to
``wait`` seconds in all, counted in ``vnpu_scheduler_lock_wait_seconds``). Within one
replica, binds to the same node queue on an ``asyncio.Lock`` first, so they do not poll the
API against each other.

A lock of another pod is taken over (logged, counted by ``why``, told to ``on_takeover``,
which the binder records as an event on the pod) only when nobody can need it any more:

* ``owner_gone``: its owner pod does not exist.
* ``owner_elsewhere``: its owner is bound to another node; it is never allocated here, and
  a bind of it to this node still running fails at its Binding.
* ``bind_abandoned``: its owner is unbound and not in bind-phase ``allocating``, and this
  replica has seen that exact lock value for ``bind_timeout`` seconds (or the lock is dated
  more than ``bind_timeout`` + ``skew`` ago). The bind that wrote it has then ended on every
  replica, alive or crashed: each bind started before its lock was written and sends no
  Binding (nor lock write) after its deadline, ``bind_timeout`` minus the 2 s kept for rolling
  back (``cluster.in_time``). So a bind killed mid-way (kill -9 before its Binding) blocks
  its node for ``bind_timeout``, not ``ttl``. Every replica must run the same
  ``--bind-timeout``: a replica with a longer one could still be binding.
* ``expired``: older than ``ttl``, and its owner is not still waiting for Allocate
  (bind-phase ``allocating`` and still Pending: never steal from it, HAMi #3096).
* ``future``: dated more than ``skew`` in the future, so written by a wrong clock and saying
  nothing about its age: it counts as expired, under the same rule.

Failure modes the rules answer:

* Owner bound to this node but not yet allocated: never ``bind_abandoned`` (the device plugin
  finds its pod by the lock's owner); only ``expired`` once its Allocate is done.
* Clock skew between replicas: the lock's time was written by another replica's clock, so
  ``bind_abandoned`` is judged by when *this* replica first saw that exact value, on its own
  monotonic clock: seeing it comes after it was written, whatever the clocks say. The
  sightings come from the node watch (its list too) and from every read a bind makes; a
  value seen to change or vanish is timed anew. The date is used only with the ``skew``
  margin the ``future`` rule already trusts, for a replica that first sees an old lock.
* A slow but live bind on another replica: bounded by its deadline, as above. A replica
  frozen (SIGSTOP, a paused VM) for more than those 2 s between its last deadline check and
  sending its Binding could still race a take-over; nothing in the Binding can fence it.
* A HAMi scheduler's bind has no deadline vnpu knows of. HAMi marks its pod ``allocating``
  before its Binding, so such an owner is left to the ``ttl`` rules; only a HAMi bind stalled
  for ``bind_timeout`` between its lock write and that mark would lose its lock.
* Volcano's bare lock names no pod: whether its bind ended cannot be told, so it is taken
  over only when expired (``ttl``, or ``future``).
* A lock released and written again with the same value (same pod, same second) while this
  replica's watch missed the gap would keep the first sighting; a pod's second bind comes
  after kube-scheduler's backoff of at least a second, so its value differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
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


class Sightings:
    """When this replica first saw each node's current lock value, on its monotonic clock.

    Fed from the node watch's thread and from the event loop, hence its own lock. A node seen
    without a lock, or with another value, forgets the old one: a value written anew is timed
    anew. One entry per locked node.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._first: dict[str, tuple[str, float]] = {}

    def saw(self, node: str, obj: Json | None) -> float:
        """Note ``obj`` (None: the node is gone); when its lock value was first seen (now if new)."""
        raw = None
        if obj is not None:
            raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(protocol.NODE_LOCK_KEY)
        now = time.monotonic()
        with self._guard:
            if raw is None:
                self._first.pop(node, None)
                return now
            seen = self._first.get(node)
            if seen is None or seen[0] != raw:
                self._first[node] = (raw, now)
                return now
            return seen[1]


@dataclass(frozen=True, slots=True)
class _Blocker:
    """What keeps a bind from taking the lock now."""

    holder: str  # who holds it, for the refusal: "pod default/x, still waiting for Allocate"
    because: str = "its device plugin has not finished the previous Allocate"
    ready: float = math.inf  # seconds until it may be taken over if nothing changes


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
        bind_timeout: float = 25.0,
    ) -> None:
        self._api = api
        self._watched = watched  # the node as the watch last delivered it
        self._run = run
        self._stats = stats
        self._ttl = timedelta(seconds=ttl)
        self._skew = timedelta(seconds=skew)
        self._bind_timeout = bind_timeout
        self._sightings = Sightings()
        self._wait = wait
        self._attempts = attempts
        self._clock = clock
        self._local: dict[str, asyncio.Lock] = {}
        self._changed: dict[str, asyncio.Event] = {}
        self._pending: dict[str, int] = {}

    def saw(self, node: str, obj: Json | None) -> None:
        """The watch delivered ``obj`` for ``node`` (None: deleted); any thread may call it."""
        self._sightings.saw(node, obj)

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
            first_seen = self._sightings.saw(node, obj)
            now = self._clock()
            blocker = None
            if raw is not None:
                blocker = await self._holder(
                    node, who, raw, (namespace, pod), now, first_seen, on_takeover
                )
            if blocker is None:
                value = coordination.encode_lock(coordination.NodeLock(now, namespace, pod))
                try:
                    # Never written once the bind's deadline has passed (see the module's
                    # docstring): a late write would outlive the bind that made it.
                    written: Json = await self._run(
                        cluster.in_time(self._api.patch_node_annotations),
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
                self._sightings.saw(node, written)
                self._stats.lock_wait.observe(time.monotonic() - start)
                return written
            waited = time.monotonic() - start
            if waited >= self._wait:
                self._stats.lock_wait.observe(waited)
                raise errors.BindError(
                    who,
                    node,
                    "lock-busy",
                    f"node {node} is locked by {blocker.holder} (waited {waited:.1f} s); "
                    f"{blocker.because}",
                )
            # Look again no later than when the lock may be taken over.
            pause = min(delay, self._wait - waited) * _jitter.uniform(0.5, 1.0)
            pause = min(pause, blocker.ready)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), pause)
                cached = self._watched(node)  # woken by the watch: its copy is the news
            delay = min(delay * 2, LOOK_AGAIN_LAST)

    async def _holder(
        self,
        node: str,
        who: str,
        raw: str,
        mine: tuple[str, str],
        now: datetime,
        first_seen: float,
        on_takeover: Callable[[str], None],
    ) -> _Blocker | None:
        """What keeps ``mine`` (namespace, pod) from taking the lock now; None when it may."""
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
        if lock.owned_by(*mine):
            return None
        ahead = (lock.time - now).total_seconds()
        future = ahead > self._skew.total_seconds()
        expired = future or lock.expired(now, self._ttl)
        ttl, skew = self._ttl.total_seconds(), self._skew.total_seconds()
        why, because = "expired", f"it is older than {ttl:g} s and its owner is done"
        if future:
            why = "future"
            because = (
                f"it is dated {ahead:.0f} s in the future (more than the allowed clock skew of "
                f"{skew:g} s): a wrong clock wrote it"
            )

        def took(reason: str, text: str, **seen: float) -> None:
            """Count and log the take-over (``reason``: ``metrics.LOCK_TAKEOVERS``), tell it."""
            self._stats.lock_takeovers.labels(reason).inc()
            log.warning(
                "node_lock_taken_over",
                node=node,
                pod=who,
                previous=raw,
                why=reason,
                ahead=round(ahead),
                **seen,
            )
            on_takeover(f"node {node}: took over {protocol.NODE_LOCK_KEY}={raw}: {text}")

        if lock.namespace is None or lock.name is None:
            if expired:
                took(why, because)
                return None
            return _Blocker(f"an owner-less lock taken at {raw}")
        owner = f"pod {lock.namespace}/{lock.name}"
        try:
            holder: Json = await self._run(self._api.get_pod, lock.namespace, lock.name)
        except kubeapi.NotFound:
            took("owner_gone", "its owner pod no longer exists")
            return None
        bound = str((holder.get("spec") or {}).get("nodeName") or "")
        if bound and bound != node:
            took("owner_elsewhere", f"its owner pod is bound to node {bound}, never allocated here")
            return None
        phase = ((holder.get("metadata") or {}).get("annotations") or {}).get(
            protocol.BIND_PHASE_KEY
        )
        allocating = phase == protocol.BindPhase.ALLOCATING.value
        if expired:
            started = (holder.get("status") or {}).get("phase", "Pending") != "Pending"
            if allocating and not started:
                # Still waiting for Allocate. (A pod whose containers started was allocated,
                # whatever its plugin left in bind-phase.)
                dated = f" (its lock is dated {ahead:.0f} s in the future)" if future else ""
                return _Blocker(f"{owner}, still waiting for Allocate{dated}")
            took(why, because)
            return None
        if bound or allocating:
            # Bound here and not yet allocated (the plugin finds it by this lock), or marked
            # by a HAMi bind, whose deadline is not ours to know: only the ttl frees it.
            return _Blocker(owner)
        # Unbound: the bind that wrote the lock failed, is still running, or died with its
        # replica. It has surely ended once this replica has seen the lock for bind_timeout
        # (the lock is written after its bind started), or once the lock's own date is that
        # far behind by this replica's clock, plus the clock skew allowed.
        seen = time.monotonic() - first_seen
        limit = self._bind_timeout
        by_sight, by_date = limit - seen, ahead + limit + skew
        if by_sight <= 0 or by_date <= 0:
            how = (
                f"the lock was seen for {seen:.0f} s, more than --bind-timeout {limit:g} s"
                if by_sight <= 0
                else f"the lock is dated {-ahead:.0f} s ago, more than --bind-timeout {limit:g} s "
                f"plus the allowed clock skew of {skew:g} s"
            )
            text = f"its owner pod is not bound and the bind that took the lock has ended ({how})"
            took("bind_abandoned", text, seen=round(seen, 1))
            return None
        left = min(by_sight, by_date)
        return _Blocker(
            f"{owner}, not bound yet",
            "its bind may still be running; if the pod stays unbound the lock is taken over "
            f"in {left:.0f} s",
            left + 0.02,  # look again just after that
        )

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
