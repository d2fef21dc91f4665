"""The scheduling driver: kube-scheduler's scheduling and binding cycles over the sandbox's API.

``command`` builds one :class:`Driver` and runs it until SIGTERM; tests run it in-process.
The driver wires the parts together:

* two ``informer``\\ s (pods, nodes) keep ``cache`` and ``queue`` current: a pending pod of
  one of the configuration's profiles (no ``spec.nodeName``, no scheduling gates) is queued; a
  bound, unfinished pod is counted on its node; a pod deleted or finished, or a node added or
  changed, moves the unschedulable pods back to the queues;
* one scheduling thread pops a pod at a time and runs a cycle: the built-in filters
  (``predicates``) on every known node, then each interested extender's filter on the
  survivors, then - when more than one node is left - the built-in scores (``priorities``)
  plus each interested extender's score x weight x 10, the best total winning (ties at random,
  seeded by ``--seed``); the pod is then assumed on that node in the cache;
* ``binder``'s pool of workers binds asynchronously, through the interested binder extender or
  with a ``pods/binding`` of its own;
* failures become ``FailedScheduling`` events and the ``PodScheduled`` condition
  (``report``: ``Unschedulable`` or ``SchedulerError``), and every attempt a JSON log line.

The driver holds no NPU knowledge: whatever a pod's NPU request means is the extender's
business. Nothing that goes wrong outside (the API, an extender) stops it.
"""

from __future__ import annotations

import logging
import random
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from vnpu_sandbox.scheduling import (
    binder,
    cache,
    cluster,
    config,
    errors,
    events,
    extender,
    informer,
    logs,
    messages,
    nodeinfo,
    podrequests,
    predicates,
    priorities,
    queue,
    report,
)

log = logging.getLogger(__name__)

Json = dict[str, Any]

MAX_EXTENDER_PRIORITY = 10
EXTENDER_SCALE = priorities.MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY
UNSCHEDULABLE = report.UNSCHEDULABLE
SCHEDULER_ERROR = report.SCHEDULER_ERROR
FINISHED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Settings:
    """How the driver runs; ``config`` is the KubeSchedulerConfiguration."""

    config: config.Config
    seed: int | None = None
    bind_workers: int = 16
    max_unschedulable: float = 60.0
    api_timeout: float = 10.0
    watch_seconds: int = informer.WATCH_SECONDS
    instance: str = socket.gethostname()


def _uid(pod: Json) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


@dataclass
class _Candidates:
    """One cycle's nodes: how many there are, which still fit, why the others do not."""

    total: int = 0
    names: list[str] = field(default_factory=list)
    statuses: dict[str, predicates.Status] = field(default_factory=dict)
    builtin: dict[str, int] = field(default_factory=dict)
    known: dict[str, nodeinfo.NodeFacts] = field(default_factory=dict)

    def facts(self) -> list[nodeinfo.NodeFacts]:
        return [self.known[name] for name in self.names]


class _PodHandler:
    def __init__(self, driver: Driver) -> None:
        self._driver = driver

    def replace(self, items: list[Json]) -> None:
        self._driver.pods_listed(items)

    def event(self, kind: str, obj: Json) -> None:
        self._driver.pod_event(kind, obj)


class _NodeHandler:
    def __init__(self, driver: Driver) -> None:
        self._driver = driver

    def replace(self, items: list[Json]) -> None:
        if self._driver.cache.replace_nodes(items):
            self._driver.queue.move_all()

    def event(self, kind: str, obj: Json) -> None:
        if kind == "DELETED":
            self._driver.cache.delete_node(str((obj.get("metadata") or {}).get("name") or ""))
        elif self._driver.cache.set_node(obj):
            self._driver.queue.move_all()


class Driver:
    """kube-scheduler for the sandbox; :meth:`start` it, :meth:`stop` it."""

    def __init__(self, settings: Settings, api_client: client.ApiClient) -> None:
        self.settings = settings
        self.cache = cache.Cache()
        self.queue = queue.SchedulingQueue(
            settings.config.initial_backoff, settings.config.max_backoff, settings.max_unschedulable
        )
        cluster.widen_pool(api_client, settings.bind_workers + 8)
        self.api = cluster.Cluster(api_client, settings.api_timeout)
        self.extenders = [
            extender.Extender(spec, connections=settings.bind_workers + 2)
            for spec in settings.config.extenders
        ]
        self.recorder = events.Recorder(self.api, settings.instance)
        self.reporter = report.Reporter(self.api, self.recorder)
        self.binder = binder.Binder(
            self.cache, self.queue, self.api, self.extenders, self.reporter, settings.bind_workers
        )
        self._profiles = frozenset(settings.config.profiles)
        self._ignored = settings.config.ignored_resources
        self._random = random.Random(settings.seed)
        self._streaks = logs.Streaks()
        self._stopping = threading.Event()
        self._informers = [
            informer.Informer(
                "nodes",
                self.api.list_nodes,
                self.api.watch_nodes,
                _NodeHandler(self),
                watch_seconds=settings.watch_seconds,
            ),
            informer.Informer(
                "pods",
                self.api.list_pods,
                self.api.watch_pods,
                _PodHandler(self),
                watch_seconds=settings.watch_seconds,
            ),
        ]
        self._thread = threading.Thread(target=self._loop, name="scheduling", daemon=True)

    # --- life cycle -----------------------------------------------------------------------

    def start(self) -> None:
        self.recorder.start()
        for watcher in self._informers:
            watcher.start()
        self._thread.start()

    def synced(self, timeout: float | None = None) -> bool:
        """True once both informers have listed the cluster."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for watcher in self._informers:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not watcher.synced.wait(remaining):
                return False
        return True

    def stop(self, timeout: float = 10.0) -> None:
        """Stop scheduling, wait (bounded) for binds in flight, flush events, close clients."""
        self._stopping.set()
        self.queue.close()
        for watcher in self._informers:
            watcher.stop()
        self._thread.join(timeout)
        self.binder.close(timeout)
        self.recorder.stop(timeout)
        for each in self.extenders:
            each.close()

    # --- informer handlers ----------------------------------------------------------------

    def pods_listed(self, items: list[Json]) -> None:
        seen = set()
        for pod in items:
            seen.add(_uid(pod))
            self._upsert_pod(pod)
        removed = False
        for uid, placement in self.cache.placed().items():
            if uid not in seen and self.cache.delete_pod(uid):
                removed = removed or not placement.assumed
        for uid in self.queue.uids() - seen:
            self.queue.delete(uid)
        if removed:
            self.queue.move_all()

    def pod_event(self, kind: str, pod: Json) -> None:
        if kind == "DELETED":
            self._pod_gone(_uid(pod))
        else:
            self._upsert_pod(pod)

    def _pod_gone(self, uid: str) -> None:
        self.queue.delete(uid)
        if self.cache.delete_pod(uid):
            self.queue.move_all()

    def _upsert_pod(self, pod: Json) -> None:
        uid = _uid(pod)
        spec = pod.get("spec") or {}
        if (pod.get("status") or {}).get("phase") in FINISHED:
            self._pod_gone(uid)
            return
        node = spec.get("nodeName")
        if node:
            self.queue.delete(uid)
            generation = (pod.get("metadata") or {}).get("generation")
            if self.cache.needs_demand(uid, str(node), generation):
                self.cache.set_pod(uid, str(node), self._counted_demand(pod), generation)
            return
        if spec.get("schedulerName") not in self._profiles or spec.get("schedulingGates"):
            self.queue.delete(uid)
            return
        if self.cache.is_assumed(uid) and not self.queue.has(uid):
            return  # bound by us a moment ago; the watch has not shown it yet
        self.queue.add(uid, pod)

    def _counted_demand(self, pod: Json) -> podrequests.Demand:
        try:
            return podrequests.demand(pod)
        except errors.PodSpecError as exc:
            if self._streaks.failed(f"demand {_uid(pod)}"):
                log.warning(
                    "bound_pod_unreadable",
                    extra=logs.fields(
                        pod=report.key(pod),
                        field=exc.field,
                        error=exc.problem,
                        counted_as="one pod, no resources",
                    ),
                )
            return podrequests.Demand()

    # --- the scheduling cycle -------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping.is_set() and not self.synced(0.1):
            pass
        while not self._stopping.is_set():
            popped = self.queue.pop()
            if popped is None:
                return
            started = time.monotonic()
            try:
                self._schedule(popped, started)
            except Exception as exc:  # a bug must cost one attempt, not the driver
                log.exception(
                    "scheduling_cycle_crashed", extra=logs.fields(pod=report.key(popped.pod))
                )
                self._attempt_failed(
                    popped, f"internal error: {exc!r}", SCHEDULER_ERROR, started, {}
                )

    def _schedule(self, popped: queue.Popped, started: float) -> None:
        pod = popped.pod
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            message = self.reporter.skipped(pod)
            self.queue.done(popped.uid)
            self._log_attempt(popped, started, "skipped", reason=message)
            return
        try:
            demand = podrequests.demand(pod)
        except errors.PodSpecError as exc:
            self._attempt_failed(
                popped, f"pod {report.key(pod)}: {exc}", UNSCHEDULABLE, started, {}
            )
            return
        facts = predicates.pod_facts(pod, demand)
        candidates = self._filter(facts)
        counts = {"nodes": candidates.total}
        if candidates.total == 0:
            self._attempt_failed(popped, messages.NO_NODES, UNSCHEDULABLE, started, counts)
            return
        try:
            self._filter_by_extenders(pod, candidates)
        except errors.ExtenderError as exc:
            self._attempt_failed(popped, str(exc), SCHEDULER_ERROR, started, counts)
            return
        names = candidates.names
        if not names:
            message = messages.unschedulable(pod, candidates.total, candidates.statuses)
            self._attempt_failed(popped, message, UNSCHEDULABLE, started, {**counts, "feasible": 0})
            return
        chosen = names[0] if len(names) == 1 else self._select(pod, candidates)
        self.cache.assume(popped.uid, chosen, demand)
        self._log_attempt(popped, started, "scheduled", node=chosen, feasible=len(names), **counts)
        self.binder.submit(popped, chosen)

    def _filter(self, facts: predicates.PodFacts) -> _Candidates:
        """The built-in filters on every node (and the built-in scores), on one snapshot."""
        candidates = _Candidates()
        with self.cache.lock:
            nodes = self.cache.nodes()
            feasible = []
            for info in nodes:
                status = predicates.check(facts, info, self._ignored)
                if status is None:
                    feasible.append(info)
                else:
                    candidates.statuses[info.name] = status
            if len(feasible) > 1:
                candidates.builtin = priorities.score(facts, feasible)
            candidates.known = {i.name: i.facts for i in feasible if i.facts is not None}
        candidates.total = len(nodes)
        candidates.names = [info.name for info in feasible]
        return candidates

    def _filter_by_extenders(self, pod: Json, candidates: _Candidates) -> None:
        """Each interested filter extender in turn narrows ``candidates`` and adds its reasons.

        A failing extender that is ``ignorable`` is skipped; any other failure is raised.
        """
        for each in self.extenders:
            if not candidates.names:
                return
            if not each.is_filter or not each.interested(pod):
                continue
            try:
                result = each.filter(pod, candidates.facts())
            except errors.ExtenderError as exc:
                if not each.spec.ignorable:
                    self._extender_failed(each, "filter", exc)
                    raise
                log.info(
                    "extender_skipped",
                    extra=logs.fields(
                        pod=report.key(pod), extender=each.name, verb="filter", error=str(exc)
                    ),
                )
                continue
            self._extender_ok(each, "filter")
            for name, reason in result.unresolvable.items():
                candidates.statuses[name] = predicates.Status((reason,), True)
            for name, reason in result.failed.items():
                if name not in result.unresolvable:
                    candidates.statuses[name] = predicates.Status((reason,), False)
            candidates.names = list(result.nodes)

    def _select(self, pod: Json, candidates: _Candidates) -> str:
        """The node with the highest total score; ties broken at random among the best."""
        names = candidates.names
        totals = {name: candidates.builtin.get(name, 0) for name in names}
        for each in self.extenders:
            if not each.is_prioritizer or not each.interested(pod):
                continue
            try:
                scores = each.prioritize(pod, candidates.facts())
            except errors.ExtenderError as exc:
                # kube-scheduler ignores a prioritize failure: the extender gives no score.
                self._extender_failed(each, "prioritize", exc)
                continue
            self._extender_ok(each, "prioritize")
            for host, score in scores.items():
                if host in totals:
                    totals[host] += score * each.spec.weight * EXTENDER_SCALE
        best = max(totals.values())
        return self._random.choice([name for name in names if totals[name] == best])

    # --- failures -------------------------------------------------------------------------

    def _attempt_failed(
        self,
        popped: queue.Popped,
        message: str,
        reason: str,
        started: float,
        counts: dict[str, int],
    ) -> None:
        self.reporter.failed(self.queue.latest(popped.uid) or popped.pod, message, reason)
        if reason == UNSCHEDULABLE:
            self.queue.unschedulable(popped.uid)
        else:
            self.queue.error(popped.uid)
        outcome = "unschedulable" if reason == UNSCHEDULABLE else "error"
        self._log_attempt(popped, started, outcome, reason=message, **counts)

    def _extender_failed(
        self, each: extender.Extender, verb: str, exc: errors.ExtenderError
    ) -> None:
        if self._streaks.failed(f"{each.name} {verb}"):
            log.warning(
                "extender_failed",
                extra=logs.fields(extender=each.name, verb=verb, error=str(exc), retrying=True),
            )

    def _extender_ok(self, each: extender.Extender, verb: str) -> None:
        if self._streaks.recovered(f"{each.name} {verb}"):
            log.info("extender_recovered", extra=logs.fields(extender=each.name, verb=verb))

    def _log_attempt(
        self, popped: queue.Popped, started: float, outcome: str, **extra: Any
    ) -> None:
        log.info(
            "scheduling_attempt",
            extra=logs.fields(
                pod=report.key(popped.pod),
                attempt=popped.attempts,
                outcome=outcome,
                duration_seconds=round(time.monotonic() - started, 6),
                **extra,
            ),
        )
