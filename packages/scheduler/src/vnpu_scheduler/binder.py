"""The bind verb: place a pod on its node's chips and write it, never over-committing a chip.

``app`` calls ``Binder.bind`` with ``wire.ExtenderBindingArgs``. The critical section runs
under the node lock (``nodelock``), so binds to one node are serialised across every
replica: the pods bound to the node are read straight from the API (a LIST with
``fieldSelector=spec.nodeName=<node>``, which shows another replica's binds before any
watch does), usage is rebuilt with the ledger, the pod is fitted with the allocator, and
one Binding carries ``spec.nodeName`` and the HAMi/Volcano annotations. The lock is then
left for the device plugin, which releases it after Allocate; on any failure before the
Binding succeeded it is released here. Transient API failures are retried with backoff;
whatever cannot be resolved raises ``errors.BindError``, leaving the pod unbound. A pod
already bound to the node is answered as bound (idempotent). Events record each outcome.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import structlog

from vnpu_core import allocator, binding, ledger, nodes, requests
from vnpu_core import errors as core_errors
from vnpu_scheduler import cache, cluster, errors, metrics, nodelock, wire
from vnpu_service import kubeapi

Json = dict[str, Any]
Runner = Callable[..., Awaitable[Any]]
log = structlog.get_logger(__name__)


def _uid(pod: Json) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def describe(assignment: allocator.Assignment) -> str:
    """The chips a pod got, for its event: ``main: Ascend310P chip 2 (vir02)``."""
    parts = []
    for container in assignment.containers:
        if not container.grants:
            continue
        chips = []
        for grant in container.grants:
            what = grant.template or ("soft slice" if grant.soft else "whole")
            chips.append(f"{grant.common_word} chip {grant.chip} ({what})")
        parts.append(f"{container.container}: {', '.join(chips)}")
    return "; ".join(parts) or "no chips"


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
    ) -> None:
        self._api = api
        self._cache = nodes_cache
        self._locks = locks
        self._run = run
        self._stats = stats
        self._policy = policy
        self._timeout = handshake_timeout
        self._attempts = attempts
        self._release_after_bind = release_after_bind
        self._recent = recent
        self._background: set[asyncio.Task[None]] = set()

    async def bind(self, args: wire.ExtenderBindingArgs) -> str:
        """Bind the pod; a description of what it got. Raises BindError or kubeapi.ApiError.

        The pod is the copy kube-scheduler sent to filter or prioritize when this replica
        saw it (the Binding's UID precondition and the API's "already assigned" check make
        a stale copy safe), else it is read from the API.
        """
        namespace, name, node = args.PodNamespace, args.PodName, args.Node
        who = f"{namespace}/{name}"
        pod = self._recent(namespace, name)
        if pod is None or (args.PodUID and _uid(pod) != args.PodUID):
            try:
                pod = await self._retry(self._api.get_pod, namespace, name)
            except kubeapi.NotFound as exc:
                raise errors.BindError(who, node, "pod-gone", f"pod {who} does not exist") from exc
        uid = _uid(pod)
        if args.PodUID and uid and args.PodUID != uid:
            raise errors.BindError(
                who, node, "uid-mismatch", f"pod {who} has UID {uid}, the bind is for {args.PodUID}"
            )
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            raise errors.BindError(who, node, "pod-deleting", f"pod {who} is being deleted")
        try:
            return await self._place(pod, node, who)
        except errors.BindError as exc:
            self._stats.binds.labels("refused").inc()
            self.event(pod, "Warning", "NPUBindFailed", f"Not bound to node {node}: {exc.message}")
            raise
        except kubeapi.ApiError as exc:
            self._stats.binds.labels("failed").inc()
            self.event(pod, "Warning", "NPUBindFailed", f"Not bound to node {node}: {exc}")
            raise

    def _already(self, node: str, bound: str, who: str) -> str:
        if bound != node:
            raise errors.BindError(
                who, node, "bound-elsewhere", f"pod {who} is already bound to node {bound}"
            )
        self._stats.binds.labels("already_bound").inc()
        return f"already bound to {node}"

    async def _place(self, pod: Json, node: str, who: str) -> str:
        namespace, name = who.split("/", 1)
        bound = (pod.get("spec") or {}).get("nodeName") or self._cache.bound_node(_uid(pod))
        if bound:
            return self._already(node, bound, who)
        try:
            request = requests.from_pod(pod, self._cache.catalog)
        except core_errors.RequestError as exc:
            raise errors.BindError(who, node, "bad-request", str(exc)) from exc
        if not request.wants_npu:
            elsewhere = await self._post_binding(pod, node, {})
            if elsewhere:
                return self._already(node, elsewhere, who)
            self._stats.binds.labels("bound").inc()
            return "no NPU requested"
        steps = [time.perf_counter()]
        async with self._locks.queue(node):
            steps.append(time.perf_counter())
            cached = self._cache.node_object(node)
            locked = await self._locks.acquire(node, namespace, name, cached)
            steps.append(time.perf_counter())
            try:
                assignment = await self._assign(locked, request, who)
                steps.append(time.perf_counter())
                annotations = binding.bind_annotations(assignment, int(time.time()))
                elsewhere = await self._post_binding(pod, node, annotations)
                steps.append(time.perf_counter())
            except BaseException:
                await asyncio.shield(self._locks.release(node, namespace, name))
                raise
            if elsewhere or self._release_after_bind:
                await self._locks.release(node, namespace, name)
        if elsewhere:
            return self._already(node, elsewhere, who)
        queued, locking, fitting, writing = (b - a for a, b in itertools.pairwise(steps))
        log.debug("bind_steps", queued=queued, lock=locking, fit=fitting, binding=writing)
        placed = copy.deepcopy(pod)
        placed.setdefault("spec", {})["nodeName"] = node
        placed.setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)
        self._cache.assume(placed)
        self._stats.binds.labels("bound").inc()
        text = describe(assignment)
        self.event(pod, "Normal", "NPUAssigned", f"Assigned to node {node}: {text}")
        return text

    async def _assign(
        self, obj: Json, request: requests.PodRequest, who: str
    ) -> allocator.Assignment:
        """Fit the pod on the node's usage as the API shows it now (under the node lock).

        ``obj`` is the node as our lock write left it; the pods come from a fresh LIST.
        """
        node = str((obj.get("metadata") or {}).get("name"))
        pods, _ = await self._retry(self._api.list_pods, node)
        models = self._cache.catalog
        read = nodes.read_node(obj, models, datetime.now(), self._timeout)
        if read.node is None:
            raise errors.BindError(who, node, "node-unavailable", read.unavailable)
        usage = ledger.node_usage(pods, node, models)
        if usage.problems:
            problem = usage.problems[0]
            raise errors.BindError(
                who,
                node,
                "usage-unknown",
                f"chip usage unknown: pod {problem.pod} has an unreadable {problem.error.key} "
                f"({problem.error.problem})",
            )
        outcome = allocator.fit(read.node, usage.usage, request, self._policy)
        if isinstance(outcome, allocator.Rejection):
            self._stats.bind_conflicts.labels("fit").inc()
            raise errors.BindError(who, node, outcome.reason.value, outcome.message)
        return outcome

    async def _post_binding(self, pod: Json, node: str, annotations: dict[str, str]) -> str:
        """POST the Binding; '' when it bound the pod, else the node it was already bound to.

        An outage is retried; if a retried POST then meets "already assigned" and the pod
        carries exactly our annotations, the earlier try went through and its answer was lost.
        """
        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        who = f"{namespace}/{name}"
        retried = False
        for attempt in range(self._attempts):
            try:
                await self._run(self._api.bind, namespace, name, _uid(pod), node, annotations)
                return ""
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
                    return ""
                if bound:
                    return bound
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

    def event(self, pod: Json, kind: str, reason: str, message: str) -> None:
        """Record an event on the pod in the background; a failure is only logged."""

        async def send() -> None:
            try:
                await self._run(self._api.record_event, pod, kind, reason, message)
            except kubeapi.ApiError as exc:
                log.warning("event_not_recorded", reason=reason, error=str(exc))

        task = asyncio.get_running_loop().create_task(send())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def drain(self) -> None:
        """Wait for pending events (at shutdown)."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
