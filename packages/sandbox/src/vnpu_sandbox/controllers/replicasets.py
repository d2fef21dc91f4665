"""The replicaset controller: keep ``spec.replicas`` pods of each ReplicaSet, and its status.

The manager calls :meth:`ReplicaSetController.sync` for a ReplicaSet whenever it, or a pod it
owns or could adopt, changes. Like kube-controller-manager's controller, a sync claims the
pods (``ownership.claim``), counts the active ones (not finished, not being deleted), then
creates the missing pods from the template (named ``<replicaset>-<5 random characters>``
through ``generateName``, with a controller reference; each create goes through the API
server's admission webhooks like any other) or deletes the surplus in the real order
(:func:`deletion_order`: unassigned before assigned, Pending before Unknown before Running,
not ready before ready, ready for less time, more restarts, newer before older). It then
writes ``status`` (replicas, fullyLabeledReplicas, readyReplicas, availableReplicas,
observedGeneration, and a ReplicaFailure condition while creating or deleting fails) when it
changed. A ReplicaSet being deleted is left alone but for its status. Finished or deleted
pods are replaced on the next sync, which their events trigger.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from typing import Any

from vnpu_sandbox.controllers import cluster, errors, informer, ownership, recorder, workqueue

log = logging.getLogger(__name__)

Json = dict[str, Any]

TOPIC = "replicaset"
_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}


def deletion_order(pod: Json) -> tuple[int, int, int, float, int, float, str]:
    """Sort key: pods that sort first are deleted first when a ReplicaSet scales down."""
    status = pod.get("status") or {}
    assigned = 1 if (pod.get("spec") or {}).get("nodeName") else 0
    phase = _PHASE_RANK.get(str(status.get("phase")), 3)
    since = ownership.ready_since(pod)
    ready = 0 if since is None else 1
    restarts = max(
        (int(c.get("restartCount") or 0) for c in status.get("containerStatuses") or []),
        default=0,
    )
    created = ownership.parse_time(ownership.metadata(pod).get("creationTimestamp")) or 0.0
    return (
        assigned,
        phase,
        ready,
        -(since or 0.0),
        -restarts,
        -created,
        str(ownership.metadata(pod).get("name")),
    )


def pod_from_template(replica_set: Json) -> Json:
    """A new pod of ``replica_set``: its template, ``generateName`` and controller reference."""
    meta = ownership.metadata(replica_set)
    template = (replica_set.get("spec") or {}).get("template") or {}
    template_meta = template.get("metadata") or {}
    pod_meta: Json = {
        "generateName": f"{meta['name']}-",
        "namespace": meta.get("namespace", ""),
        "labels": dict(template_meta.get("labels") or {}),
        "ownerReferences": [ownership.reference_to(replica_set, cluster.REPLICASETS)],
    }
    for field in ("annotations", "finalizers"):
        if template_meta.get(field):
            pod_meta[field] = copy.deepcopy(template_meta[field])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": pod_meta,
        "spec": copy.deepcopy(template.get("spec") or {}),
    }


class ReplicaSetController:
    """Pods for ReplicaSets, read from the informers' caches and written through ``api``."""

    def __init__(
        self,
        api: cluster.Cluster,
        replica_sets: informer.Informer,
        pods: informer.Informer,
        events: recorder.Recorder,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._api = api
        self._replica_sets = replica_sets
        self._pods = pods
        self._events = events
        self._clock = clock

    def watch(self, queue: workqueue.WorkQueue) -> None:
        """Queue the ReplicaSets that the informers' events concern."""

        def on_replica_set(event_type: str, old: Json | None, new: Json | None) -> None:
            namespace, name = informer.key_of(new or old or {})
            queue.add((TOPIC, namespace, name))

        def on_pod(event_type: str, old: Json | None, new: Json | None) -> None:
            for namespace, name in ownership.owners_concerned(
                old,
                new,
                cluster.REPLICASETS,
                self._replica_sets.items,
                adoptable=ownership.pod_active,
            ):
                queue.add((TOPIC, namespace, name))

        self._replica_sets.add_handler(on_replica_set)
        self._pods.add_handler(on_pod)

    def sync(self, namespace: str, name: str) -> float | None:
        """Bring one ReplicaSet's pods and status in line; seconds until it needs another look."""
        replica_set = self._replica_sets.get(namespace, name)
        if replica_set is None:
            return None  # gone: the garbage collector deletes its pods
        spec = replica_set.get("spec") or {}
        owned = ownership.claim(
            self._api,
            replica_set,
            cluster.REPLICASETS,
            self._pods.items(namespace),
            cluster.PODS,
        )
        active = [p for p in owned if ownership.pod_active(p)]
        failure: errors.ApiError | None = None
        failed_verb = ""
        if not ownership.being_deleted(replica_set):
            surplus = len(active) - int(spec.get("replicas") or 0)
            try:
                if surplus < 0:
                    failed_verb = "FailedCreate"
                    self._create(replica_set, -surplus)
                elif surplus > 0:
                    failed_verb = "FailedDelete"
                    self._delete(replica_set, sorted(active, key=deletion_order)[:surplus])
            except errors.ApiError as exc:
                failure = exc
        self._write_status(replica_set, active, failure, failed_verb)
        if failure is not None:
            raise failure
        return self._next_availability(replica_set, active)

    # --- pods -----------------------------------------------------------------------------

    def _create(self, replica_set: Json, count: int) -> None:
        """Create ``count`` pods in growing batches (1, 2, 4, ...), stopping at a failure."""
        namespace = str(ownership.metadata(replica_set).get("namespace", ""))
        batch, left = 1, count
        while left > 0:
            for _ in range(min(batch, left)):
                try:
                    pod = self._api.create(cluster.PODS, namespace, pod_from_template(replica_set))
                except errors.ApiError as exc:
                    if not exc.unreachable:
                        self._events.record(
                            replica_set,
                            cluster.REPLICASETS,
                            "FailedCreate",
                            f"Error creating: {exc.message}",
                            warning=True,
                        )
                    raise
                left -= 1
                self._events.record(
                    replica_set,
                    cluster.REPLICASETS,
                    "SuccessfulCreate",
                    f"Created pod: {ownership.metadata(pod).get('name')}",
                )
            batch *= 2

    def _delete(self, replica_set: Json, victims: list[Json]) -> None:
        for pod in victims:
            meta = ownership.metadata(pod)
            self._api.delete(cluster.PODS, str(meta.get("namespace", "")), str(meta["name"]))
            self._events.record(
                replica_set, cluster.REPLICASETS, "SuccessfulDelete", f"Deleted pod: {meta['name']}"
            )

    # --- status ---------------------------------------------------------------------------

    def _write_status(
        self,
        replica_set: Json,
        active: list[Json],
        failure: errors.ApiError | None,
        failed_verb: str,
    ) -> None:
        spec = replica_set.get("spec") or {}
        old = replica_set.get("status") or {}
        now = self._clock()
        template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        min_ready = int(spec.get("minReadySeconds") or 0)
        counts = {
            "replicas": len(active),
            "fullyLabeledReplicas": sum(
                1
                for p in active
                if all(ownership.labels_of(p).get(k) == v for k, v in template_labels.items())
            ),
            "readyReplicas": sum(1 for p in active if ownership.ready_since(p) is not None),
            "availableReplicas": sum(
                1 for p in active if ownership.pod_available(p, min_ready, now)
            ),
        }
        status: Json = {k: v for k, v in counts.items() if v or k == "replicas"}
        status["observedGeneration"] = int(ownership.metadata(replica_set).get("generation") or 0)
        conditions = [
            c
            for c in old.get("conditions") or []
            if isinstance(c, dict) and c.get("type") != "ReplicaFailure"
        ]
        if failure is not None and not failure.unreachable:
            previous = next(
                (c for c in old.get("conditions") or [] if c.get("type") == "ReplicaFailure"),
                None,
            )
            conditions.append(
                previous
                or {
                    "type": "ReplicaFailure",
                    "status": "True",
                    "lastTransitionTime": ownership.rfc3339(now),
                    "reason": failed_verb,
                    "message": failure.message,
                }
            )
        if conditions:
            status["conditions"] = conditions
        self._api.replace_status(cluster.REPLICASETS, replica_set, status)

    def _next_availability(self, replica_set: Json, active: list[Json]) -> float | None:
        """With minReadySeconds, when the next ready pod becomes available (a status change
        no event announces)."""
        min_ready = int((replica_set.get("spec") or {}).get("minReadySeconds") or 0)
        if min_ready <= 0:
            return None
        now = self._clock()
        waits = [
            since + min_ready - now
            for p in active
            if (since := ownership.ready_since(p)) is not None and since + min_ready > now
        ]
        return min(waits) + 0.05 if waits else None
