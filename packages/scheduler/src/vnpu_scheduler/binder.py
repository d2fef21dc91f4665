"""The bind verb: place a pod on its node's chips and write it, never over-committing a chip.

``app`` calls ``Binder.bind`` with ``wire.ExtenderBindingArgs``. Before anything is written
the bind must be one kube-scheduler could have asked for: the pod exists with the UID the
bind names, is not being deleted, is for this scheduler (``spec.schedulerName``), names an
NPU resource, is not bound yet, and the node satisfies its nodeSelector, required node
affinity and taints (``placement``); anything else is refused with ``errors.BindError``.

The critical section runs under the node lock (``nodelock``), so binds to one node are
serialised across every replica: the pods bound to the node are read straight from the API
(a LIST with ``fieldSelector=spec.nodeName=<node>``, which shows another replica's binds
before any watch does), usage is rebuilt with the ledger, the pod is fitted with the
allocator, and one Binding carries ``spec.nodeName`` and the HAMi/Volcano annotations. The
lock is then left for the device plugin, which releases it after Allocate; on any failure
before the Binding succeeded it is released here. Transient API failures are retried with
backoff; whatever cannot be resolved raises ``errors.BindError``, leaving the pod unbound.
A pod this scheduler already bound to the node is answered as bound (idempotent).

Every bind answers within ``bind_timeout`` (below kube-scheduler's ``httpTimeout``): its
work (queue, lock wait, fit, Binding) must end ``ROLLBACK_SECONDS`` before that, and each
API call under it waits no longer than the time left (``cluster.deadline_at``). The Binding
and the lock write are never sent once that work deadline has passed (``cluster.in_time``),
not even by a call still queued for a pool thread: other replicas rely on it when they take
over the lock of a pod still unbound ``bind_timeout`` after its lock appeared (``nodelock``,
``bind_abandoned``: what frees the node of a replica killed mid-bind). A bind whose work
runs out of time is rolled back in the seconds kept for it: if the Binding was not sent, or
the pod is seen unbound afterwards, the lock it wrote is released and the bind refused; if
the Binding landed after all, the bind succeeded; if that cannot be told (the API does not
answer), the lock is kept and the bind refused, since releasing it under a pod that may be
bound would hand its chips to the next bind (the device plugin frees it once the pod is
served; if the pod is in fact unbound, another bind takes it over). A rollback that itself
cannot finish by ``bind_timeout`` (its calls wait in a full thread pool) is abandoned and the
bind refused, its lock left to the same take-over. Events record each outcome
(``events.Recorder``, on threads of their own: they never wait in the binds' pool).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog

from vnpu_core import allocator, binding, catalog, granted, holdings, nodes, protocol, requests
from vnpu_core import errors as core_errors
from vnpu_scheduler import (
    cache,
    cluster,
    errors,
    events,
    inflight,
    metrics,
    nodelock,
    placement,
    quotalock,
    settings,
    tenancy,
    wire,
)
from vnpu_service import kubeapi

Json = dict[str, Any]
Runner = Callable[..., Awaitable[Any]]
log = structlog.get_logger(__name__)
ROLLBACK_SECONDS = settings.BIND_ROLLBACK_SECONDS
"""The end of a bind's ``bind_timeout`` kept for rolling it back."""


def _uid(pod: Json) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def names_npu(pod: Json, models: catalog.Catalog) -> bool:
    """Whether any container of ``pod`` names a chip model's resource (a count of 0 too)."""
    names: set[str] = set()
    for model in models:
        names.update((model.resource_name, model.memory_resource, model.core_resource))
    spec = pod.get("spec") or {}
    for section in ("initContainers", "containers"):
        for item in spec.get(section) or []:
            resources = item.get("resources") or {}
            for kind in ("limits", "requests"):
                if names.intersection(resources.get(kind) or {}):
                    return True
    return False


@dataclass
class _Progress:
    """What one bind has written so far, for its rollback."""

    locked: bool = False  # the node lock is written for this pod
    binding: asyncio.Task[None] | None = None  # the Binding POST, once sent
    annotations: dict[str, str] | None = None


class Binder:
    """Binds pods through ``api`` under node locks, reading chip models from ``nodes_cache``."""

    def __init__(
        self,
        api: cluster.Cluster,
        nodes_cache: cache.ClusterCache,
        locks: nodelock.NodeLocks,
        run: Runner,
        stats: metrics.Metrics,
        policy: requests.Policy,
        handshake_timeout: timedelta,
        attempts: int = 5,
        release_after_bind: bool = False,
        recent: Callable[[str, str], Json | None] = lambda _namespace, _name: None,
        scheduler_name: str = "vnpu-scheduler",
        deadline: float = 25.0,
        quota: tuple[tenancy.QuotaBook, quotalock.QuotaLocks] | None = None,
        in_flight: inflight.InFlight | None = None,
    ) -> None:
        self._api = api
        self._in_flight = in_flight or inflight.InFlight()
        self._cache = nodes_cache
        self._locks = locks
        self._run = run
        self._stats = stats
        self._policy = policy
        self._timeout = handshake_timeout
        self._attempts = attempts
        self._release_after_bind = release_after_bind
        self._recent = recent
        self._scheduler_name = scheduler_name
        self._deadline = deadline
        self._quota = quota
        self.event: events.EventSink = lambda *_: None  # app sets the event recorder

    async def bind(self, args: wire.ExtenderBindingArgs) -> str:
        """Bind the pod; a description of what it got. Raises BindError or kubeapi.ApiError.

        The pod is the copy kube-scheduler sent to filter or prioritize when this replica
        saw it (the Binding's UID precondition and the API's "already assigned" check make
        a stale copy safe), else it is read from the API.
        """
        who = f"{args.PodNamespace}/{args.PodName}"
        progress = _Progress()
        pod: Json = {"metadata": {"name": args.PodName, "namespace": args.PodNamespace}}
        started = time.monotonic()
        try:
            work = self._deadline - ROLLBACK_SECONDS
            async with asyncio.timeout(work):
                with cluster.deadline_at(started + work):
                    pod = await self._pod(args, who)
                    return await self._place(pod, args.Node, who, progress)
        except TimeoutError:
            pass
        except errors.BindError as exc:
            self._stats.binds.labels("refused").inc()
            self.event(
                pod, "Warning", "NPUBindFailed", f"Not bound to node {args.Node}: {exc.message}"
            )
            raise
        except kubeapi.ApiError as exc:
            self._stats.binds.labels("failed").inc()
            self.event(pod, "Warning", "NPUBindFailed", f"Not bound to node {args.Node}: {exc}")
            raise
        # The rollback too ends by the deadline: its API calls may wait in a full thread pool
        # (an overloaded API server), and kube-scheduler gives up on the bind soon after.
        left = max(started + self._deadline - time.monotonic(), 0.0)
        try:
            async with asyncio.timeout(left):
                with cluster.deadline_at(started + self._deadline):
                    return await self._roll_back(pod, args.Node, who, progress)
        except TimeoutError:
            pass
        message = (
            f"bind of pod {who} to node {args.Node} did not finish in time (--bind-timeout "
            f"{self._deadline:g} s), nor did its rollback: a node lock it took is taken over once "
            "its pod stays unbound for --bind-timeout"
        )
        self._stats.binds.labels("failed").inc()
        log.warning("bind_deadline", pod=who, node=args.Node, outcome="rollback_unfinished")
        self.event(pod, "Warning", "NPUBindFailed", message)
        raise errors.BindError(who, args.Node, "deadline", message)

    async def _pod(self, args: wire.ExtenderBindingArgs, who: str) -> Json:
        """The pod the bind is for, refused unless kube-scheduler could have asked for it."""
        namespace, name, node = args.PodNamespace, args.PodName, args.Node
        pod = self._recent(namespace, name)
        if pod is None or _uid(pod) != args.PodUID:
            try:
                pod = await self._retry(self._api.get_pod, namespace, name)
            except kubeapi.NotFound as exc:
                raise errors.BindError(who, node, "pod-gone", f"pod {who} does not exist") from exc
        uid = _uid(pod)
        if uid != args.PodUID:
            raise errors.BindError(
                who, node, "uid-mismatch", f"pod {who} has UID {uid}, the bind is for {args.PodUID}"
            )
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            raise errors.BindError(who, node, "pod-deleting", f"pod {who} is being deleted")
        spec = pod.get("spec") or {}
        named = spec.get("schedulerName") or "default-scheduler"
        if named != self._scheduler_name:
            raise errors.BindError(
                who,
                node,
                "other-scheduler",
                f"pod {who} is for scheduler {named!r}, not {self._scheduler_name!r}: "
                "vnpu-scheduler binds only its own pods",
            )
        if not names_npu(pod, self._cache.catalog):
            raise errors.BindError(
                who,
                node,
                "no-npu",
                f"pod {who} asks for no NPU resource: vnpu-scheduler binds only pods that do",
            )
        return pod

    def _already(self, node: str, bound: str, who: str, annotations: dict[str, str]) -> str:
        """A pod found bound: success if this scheduler bound it to ``node``, else refused."""
        if bound != node:
            raise errors.BindError(
                who, node, "bound-elsewhere", f"pod {who} is already bound to node {bound}"
            )
        if annotations.get(protocol.VGPU_NODE_KEY) != node:
            raise errors.BindError(
                who,
                node,
                "bound-by-other",
                f"pod {who} is already bound to node {node}, not by vnpu-scheduler "
                f"(no {protocol.VGPU_NODE_KEY}={node})",
            )
        self._stats.binds.labels("already_bound").inc()
        return f"already bound to {node}"

    async def _bound_pod(self, pod: Json) -> tuple[str, dict[str, str]]:
        """The node ``pod`` is bound to ('' if none) and its annotations, as far as is known."""
        bound = str((pod.get("spec") or {}).get("nodeName") or "")
        if not bound and self._cache.bound_node(_uid(pod)):
            meta = pod.get("metadata") or {}
            pod = await self._retry(self._api.get_pod, meta.get("namespace"), meta.get("name"))
            bound = str((pod.get("spec") or {}).get("nodeName") or "")
        return bound, (pod.get("metadata") or {}).get("annotations") or {}

    async def _node_allows(self, pod: Json, node: str, who: str) -> None:
        obj = self._cache.node_object(node)
        if obj is None:
            try:
                obj = await self._retry(self._api.get_node, node)
            except kubeapi.NotFound as exc:
                raise errors.BindError(
                    who, node, "node-gone", f"node {node} does not exist"
                ) from exc
        refused = placement.refusal(pod, obj)
        if refused:
            raise errors.BindError(who, node, "node-constraints", refused)

    async def _place(self, pod: Json, node: str, who: str, progress: _Progress) -> str:
        bound, held = await self._bound_pod(pod)
        if bound:
            return self._already(node, bound, who, held)
        try:
            request = requests.from_pod(pod, self._cache.catalog)
        except core_errors.RequestError as exc:
            raise errors.BindError(who, node, "bad-request", str(exc)) from exc
        await self._node_allows(pod, node, who)
        if not request.wants_npu:
            elsewhere = await self._post_binding(pod, node, {}, progress)
            if elsewhere:
                return self._already(node, elsewhere[0], who, elsewhere[1])
            self._stats.binds.labels("bound").inc()
            return "no NPU requested"
        with self._in_flight.holding(node, who, request):
            return await self._place_npu(pod, node, who, request, progress)

    async def _place_npu(
        self, pod: Json, node: str, who: str, request: requests.PodRequest, progress: _Progress
    ) -> str:
        namespace, name = who.split("/", 1)
        steps = [time.perf_counter()]
        async with self._locks.queue(node):
            steps.append(time.perf_counter())
            cached = self._cache.node_object(node)
            locked = await self._locks.acquire(
                node, namespace, name, cached, lambda text: self._took_over(pod, text)
            )
            progress.locked = True
            steps.append(time.perf_counter())
            try:
                assignment = await self._assign(locked, request, who)
                steps.append(time.perf_counter())
                annotations = binding.bind_annotations(assignment, int(time.time()))
                async with self._within_quota(namespace, request, who, node):
                    elsewhere = await self._post_binding(pod, node, annotations, progress)
                steps.append(time.perf_counter())
            except asyncio.CancelledError:
                raise  # the deadline: the rollback knows whether the Binding went out
            except BaseException:
                await asyncio.shield(self._locks.release(node, namespace, name))
                progress.locked = False
                raise
            if elsewhere or self._release_after_bind:
                await self._locks.release(node, namespace, name)
                progress.locked = False
        if elsewhere:
            return self._already(node, elsewhere[0], who, elsewhere[1])
        queued, locking, fitting, writing = (b - a for a, b in itertools.pairwise(steps))
        log.debug("bind_steps", queued=queued, lock=locking, fit=fitting, binding=writing)
        if request.notes:  # read as HAMi or Volcano read it (a clamped core percentage, ...)
            self.event(pod, "Warning", "NPURequestAdjusted", "; ".join(request.notes))
        return self._bound(pod, node, annotations, binding.describe(assignment))

    @contextlib.asynccontextmanager
    async def _within_quota(
        self, namespace: str, request: requests.PodRequest, who: str, node: str
    ) -> AsyncIterator[None]:
        """Hold the quota lock of the pod's scope and check its quotas on usage read now.

        The usage is a fresh LIST of the scope's namespaces (another replica's binds show
        there before any watch delivers them), plus what pods were granted beyond their
        annotations (the cache's node grant reports). Raises BindError naming the quota.
        """
        if self._quota is None or not self._quota[0].limited(namespace):
            yield
            return
        book, locks = self._quota
        in_team = book.teams.team_of(namespace) is not None
        async with locks.hold(quotalock.TEAMS if in_team else namespace, who):
            scope = book.scope(namespace)
            pods: list[Json] = []
            for member in scope:
                listed, _ = await self._retry(self._api.list_pods, None, member)
                pods.extend(listed)
            usage = holdings.usage_by_namespace(pods, self._cache.catalog).by_namespace
            for member, extra in self._cache.namespace_excess().items():
                if member in scope:
                    usage[member] = usage.get(member, holdings.ZERO).plus(extra)
            refused = book.refusals(holdings.of_request(request), namespace, usage)
            if refused:
                for item in refused:
                    self._stats.quota_refusals.labels("bind", item.rule).inc()
                text = "; ".join(item.message for item in refused)
                raise errors.BindError(who, node, "quota", text)
            yield

    def _bound(self, pod: Json, node: str, annotations: dict[str, str], text: str) -> str:
        """Count the pod at once (before the watch delivers it), record the event."""
        placed = copy.deepcopy(pod)
        placed.setdefault("spec", {})["nodeName"] = node
        placed.setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)
        self._cache.assume(placed)
        self._stats.binds.labels("bound").inc()
        self.event(pod, "Normal", "NPUAssigned", f"Assigned to node {node}: {text}")
        return text

    def _took_over(self, pod: Json, text: str) -> None:
        self.event(pod, "Warning", "NPULockTakenOver", text)

    async def _roll_back(self, pod: Json, node: str, who: str, progress: _Progress) -> str:
        """The deadline passed: undo what this bind wrote, unless its Binding landed after all."""
        namespace, name = who.split("/", 1)
        limit = f"did not finish in time (--bind-timeout {self._deadline:g} s)"
        outcome = "unknown"
        if progress.binding is not None:
            try:
                await asyncio.wait_for(asyncio.shield(progress.binding), ROLLBACK_SECONDS / 2)
                outcome = "bound"
            except TimeoutError:
                outcome = "unknown"
            except (kubeapi.ApiError, errors.BindError):
                outcome = await self._seen_bound(namespace, name, node, progress.annotations)
        else:
            outcome = "not_sent"
        if outcome == "bound" and progress.annotations is not None:
            log.warning("bind_landed_after_deadline", pod=who, node=node)
            return self._bound(pod, node, progress.annotations, "bound after the deadline")
        self._stats.binds.labels("failed").inc()
        if outcome == "unknown":
            message = (
                f"bind of pod {who} to node {node} {limit}, and whether its Binding landed "
                "cannot be told: the node lock is kept (the device plugin frees it once the pod is "
                "served; if the pod stays unbound, another bind takes it over)"
            )
        else:
            released = await self._locks.release(node, namespace, name)
            undone = "; the node lock it took was released" if released else ""
            message = f"bind of pod {who} to node {node} {limit}; nothing was bound{undone}"
        log.warning("bind_deadline", pod=who, node=node, outcome=outcome)
        self.event(pod, "Warning", "NPUBindFailed", message)
        raise errors.BindError(who, node, "deadline", message)

    async def _seen_bound(
        self, namespace: str, name: str, node: str, annotations: dict[str, str] | None
    ) -> str:
        """'bound' when the pod shows our Binding, 'not_sent' when it shows none, else 'unknown'."""
        try:
            now: Json = await self._run(self._api.get_pod, namespace, name)
        except kubeapi.NotFound:
            return "not_sent"
        except kubeapi.ApiError:
            return "unknown"
        bound = (now.get("spec") or {}).get("nodeName") or ""
        held = (now.get("metadata") or {}).get("annotations") or {}
        if bound == node and all(held.get(k) == v for k, v in (annotations or {}).items()):
            return "bound"
        return "not_sent" if not bound else "unknown"

    async def _assign(
        self, obj: Json, request: requests.PodRequest, who: str
    ) -> allocator.Assignment:
        """Fit the pod on the node's usage as the API shows it now (under the node lock).

        ``obj`` is the node as our lock write left it (with its device plugin's grant report);
        the pods come from a fresh LIST. Each pod counts as at least what it was granted.
        """
        node = str((obj.get("metadata") or {}).get("name"))
        pods, _ = await self._retry(self._api.list_pods, node)
        models = self._cache.catalog
        read = nodes.read_node(obj, models, datetime.now(), self._timeout)
        if read.node is None:
            raise errors.BindError(who, node, "node-unavailable", read.unavailable)
        usage = granted.node_usage(pods, obj, read.node, models).ledger
        if usage.problems:
            problem = usage.problems[0]
            raise errors.BindError(
                who,
                node,
                "usage-unknown",
                f"chip usage unknown: pod {problem.pod} has an unreadable {problem.error.key} "
                f"({problem.error.problem})",
            )
        held = usage.usage
        listed = {inflight.name_of(p) for p in pods}  # bound already: counted by the list
        reserved = [(w, r) for w, r in self._in_flight.reserved(node, who) if w not in listed]
        if reserved:  # gang members placed here and not bound yet come first (``gang``)
            held = allocator.assume(read.node, held, [r for _, r in reserved], self._policy)
        outcome = allocator.fit(read.node, held, request, self._policy)
        if isinstance(outcome, allocator.Rejection):
            self._stats.bind_conflicts.labels("fit").inc()
            behind = f" (behind {len(reserved)} reserved gang member(s))" if reserved else ""
            raise errors.BindError(who, node, outcome.reason.value, outcome.message + behind)
        return outcome

    async def _post_binding(
        self, pod: Json, node: str, annotations: dict[str, str], progress: _Progress
    ) -> tuple[str, dict[str, str]] | None:
        """POST the Binding; None when it bound the pod, else where the pod already was.

        The answer for an already bound pod is its node and annotations. An outage is
        retried; if a retried POST then meets "already assigned" and the pod carries exactly
        our annotations, the earlier try went through and its answer was lost. Each POST runs
        as a task of its own, so a bind cut short by its deadline can still learn its result.
        """
        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        who = f"{namespace}/{name}"
        retried = False
        progress.annotations = annotations
        for attempt in range(self._attempts):
            try:
                call = self._run(
                    cluster.in_time(self._api.bind), namespace, name, _uid(pod), node, annotations
                )
                progress.binding = asyncio.ensure_future(call)
                await asyncio.shield(progress.binding)
                return None
            except kubeapi.Unavailable:
                if attempt + 1 == self._attempts:
                    raise
                retried = True
                self._stats.bind_retries.inc()
                await asyncio.sleep(0.05 * 2**attempt)
            except kubeapi.NotFound as exc:
                raise errors.BindError(who, node, "pod-gone", f"pod {who} was deleted") from exc
            except kubeapi.Conflict as exc:
                self._stats.bind_conflicts.labels("binding").inc()
                try:
                    now: Json = await self._retry(self._api.get_pod, namespace, name)
                except kubeapi.NotFound:
                    raise errors.BindError(who, node, "pod-gone", f"pod {who} was deleted") from exc
                held = (now.get("metadata") or {}).get("annotations") or {}
                bound = str((now.get("spec") or {}).get("nodeName") or "")
                if (
                    retried
                    and bound == node
                    and all(held.get(k) == v for k, v in annotations.items())
                ):
                    return None
                if bound:
                    return bound, held
                raise errors.BindError(who, node, "binding-conflict", exc.message) from exc
        raise AssertionError("unreachable")

    async def _retry(self, call: Callable[..., Any], *args: Any) -> Any:
        """Run a blocking API call, retrying outages (not conflicts) with backoff."""
        for attempt in range(self._attempts):
            try:
                return await self._run(call, *args)
            except kubeapi.Unavailable:
                if attempt + 1 == self._attempts:
                    raise
                self._stats.bind_retries.inc()
                await asyncio.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")
