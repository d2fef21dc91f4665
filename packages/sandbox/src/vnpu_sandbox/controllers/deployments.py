"""The deployment controller: one ReplicaSet per pod template, rolled out by the strategy.

The manager calls :meth:`DeploymentController.sync` for a Deployment whenever it, or a
ReplicaSet it owns or could adopt, changes (and, for Recreate, when one of its pods goes).
A sync claims the ReplicaSets (``ownership.claim``), finds the one whose template is the
Deployment's (the *new* one; the others are *old*) and acts as kube-controller-manager does:

* **RollingUpdate** creates the new ReplicaSet if needed (named ``<deployment>-<hash>``, the
  hash of the template in label ``pod-template-hash``), scales it up as far as ``maxSurge``
  allows, scales old ones down as far as ``maxUnavailable`` allows, counting available pods;
* **Recreate** scales every old ReplicaSet to 0, waits until none of their pods is left, then
  creates or scales up the new one;
* once the rollout is complete, old ReplicaSets beyond ``revisionHistoryLimit`` are deleted.

It keeps the ``deployment.kubernetes.io/revision``, ``desired-replicas`` and
``max-replicas`` annotations, and writes ``status`` (replicas, updatedReplicas,
readyReplicas, availableReplicas, unavailableReplicas, observedGeneration, and the
Available and Progressing conditions with the real reasons and messages) when it changed.
A paused Deployment, or one being deleted, only gets its status. Not done: proportional
scaling of several active ReplicaSets in the middle of a rollout (the rolling rules converge
without it), rollback annotations, and ``kubectl rollout undo`` of a paused Deployment.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from vnpu_sandbox.controllers import cluster, errors, informer, ownership, recorder, workqueue

log = logging.getLogger(__name__)

Json = dict[str, Any]

TOPIC = "deployment"
HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
_NOT_COPIED = ("kubectl.kubernetes.io/last-applied-configuration",)
_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def template_hash(template: Json, collision_count: int = 0) -> str:
    """The ``pod-template-hash`` of a pod template: FNV-1a (32 bits) over the template and
    the collision count, its decimal digits spelled with the safe alphabet (``5d59d67564``)."""
    data = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    if collision_count:
        data += str(collision_count).encode()
    value = 2166136261
    for byte in data:
        value = ((value ^ byte) * 16777619) & 0xFFFFFFFF
    return "".join(_SAFE_ALPHABET[ord(c) % len(_SAFE_ALPHABET)] for c in str(value))


def _without_hash(template: Json) -> Json:
    plain = copy.deepcopy(template)
    labels = (plain.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(HASH_LABEL, None)
    return plain


def _replicas(obj: Json) -> int:
    return int((obj.get("spec") or {}).get("replicas") or 0)


def _status(obj: Json, field: str) -> int:
    return int((obj.get("status") or {}).get(field) or 0)


def _revision(obj: Json) -> int:
    text = str((ownership.metadata(obj).get("annotations") or {}).get(REVISION) or "")
    return int(text) if text.isdigit() else 0


def _resolve(value: object, total: int, round_up: bool) -> int:
    """An IntOrString of the rolling update: a count, or a percentage of ``total``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value)
    if not text.endswith("%") or not text[:-1].isdigit():
        return 0
    share = int(text[:-1]) * total / 100
    return math.ceil(share) if round_up else math.floor(share)


def surge_and_unavailable(deployment: Json) -> tuple[int, int]:
    """``maxSurge`` and ``maxUnavailable`` in pods (never both 0: then 1 may be unavailable)."""
    spec = deployment.get("spec") or {}
    strategy = spec.get("strategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return 0, 0
    rolling = strategy.get("rollingUpdate") or {}
    desired = _replicas(deployment)
    surge = _resolve(rolling.get("maxSurge", "25%"), desired, True)
    unavailable = _resolve(rolling.get("maxUnavailable", "25%"), desired, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, min(unavailable, desired)


def _condition(kind: str, status: str, reason: str, message: str, now: float) -> Json:
    stamp = ownership.rfc3339(now)
    return {
        "type": kind,
        "status": status,
        "lastUpdateTime": stamp,
        "lastTransitionTime": stamp,
        "reason": reason,
        "message": message,
    }


def _set_condition(conditions: list[Json], wanted: Json) -> list[Json]:
    """SetDeploymentCondition: same status and reason keeps the old one; same status keeps
    its lastTransitionTime."""
    current = next((c for c in conditions if c.get("type") == wanted["type"]), None)
    if current is not None and (current.get("status"), current.get("reason")) == (
        wanted["status"],
        wanted["reason"],
    ):
        return conditions
    if current is not None and current.get("status") == wanted["status"]:
        wanted = {**wanted, "lastTransitionTime": current.get("lastTransitionTime")}
    return [c for c in conditions if c.get("type") != wanted["type"]] + [wanted]


class DeploymentController:
    """ReplicaSets for Deployments, read from the informers' caches and written through ``api``."""

    def __init__(
        self,
        api: cluster.Cluster,
        deployments: informer.Informer,
        replica_sets: informer.Informer,
        pods: informer.Informer,
        events: recorder.Recorder,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._api = api
        self._deployments = deployments
        self._replica_sets = replica_sets
        self._pods = pods
        self._events = events
        self._clock = clock

    def watch(self, queue: workqueue.WorkQueue) -> None:
        """Queue the Deployments that the informers' events concern."""

        def on_deployment(event_type: str, old: Json | None, new: Json | None) -> None:
            namespace, name = informer.key_of(new or old or {})
            queue.add((TOPIC, namespace, name))

        def on_replica_set(event_type: str, old: Json | None, new: Json | None) -> None:
            for replica_set in (old, new):
                if replica_set is None:
                    continue
                namespace = str(ownership.metadata(replica_set).get("namespace", ""))
                ref = ownership.controller_of(replica_set)
                if ref is not None:
                    if ref.get("kind") == "Deployment":
                        queue.add((TOPIC, namespace, str(ref.get("name"))))
                elif replica_set is new:
                    labels = ownership.labels_of(replica_set)
                    for candidate in self._deployments.items(namespace):
                        selector = (candidate.get("spec") or {}).get("selector")
                        if ownership.selector_matches(selector, labels):
                            queue.add((TOPIC, namespace, informer.key_of(candidate)[1]))

        def on_pod(event_type: str, old: Json | None, new: Json | None) -> None:
            if event_type != "DELETED" or old is None:
                return  # only Recreate waits for pods, and only for them to go
            ref = ownership.controller_of(old)
            if ref is None or ref.get("kind") != "ReplicaSet":
                return
            namespace = str(ownership.metadata(old).get("namespace", ""))
            replica_set = self._replica_sets.get(namespace, str(ref.get("name")))
            owner = ownership.controller_of(replica_set) if replica_set else None
            if owner is not None and owner.get("kind") == "Deployment":
                queue.add((TOPIC, namespace, str(owner.get("name"))))

        self._deployments.add_handler(on_deployment)
        self._replica_sets.add_handler(on_replica_set)
        self._pods.add_handler(on_pod)

    # --- the sync ---------------------------------------------------------------------------

    def sync(self, namespace: str, name: str) -> float | None:
        """Move one Deployment's rollout a step; seconds until it needs another look."""
        deployment = self._deployments.get(namespace, name)
        if deployment is None:
            return None  # gone: the garbage collector deletes its ReplicaSets
        owned = ownership.claim(
            self._api,
            deployment,
            cluster.DEPLOYMENTS,
            self._replica_sets.items(namespace),
            cluster.REPLICASETS,
        )
        new, old = self._split(deployment, owned)
        spec = deployment.get("spec") or {}
        if ownership.being_deleted(deployment) or spec.get("paused"):
            return self._write_status(deployment, new, old, created=False)
        created = False
        if (spec.get("strategy") or {}).get("type") == "Recreate":
            active_old = [rs for rs in old if _replicas(rs) > 0]
            if active_old:
                for replica_set in active_old:
                    self._scale(deployment, replica_set, 0)
                return self._write_status(deployment, new, old, created=False)
            if self._old_pods_running(new, old):
                return self._write_status(deployment, new, old, created=False)
            if new is None:
                new = self._create(deployment, old, _replicas(deployment))
                created = new is not None
            else:
                new = self._update_annotations(deployment, new, old)
            if new is not None and _replicas(new) != _replicas(deployment):
                new = self._scale(deployment, new, _replicas(deployment))
        else:
            if new is None:
                new = self._create(deployment, old, self._new_replicas(deployment, old, None))
                created = new is not None
            else:
                new = self._update_annotations(deployment, new, old)
            if new is not None and self._reconcile_new(deployment, new, old) is None:
                self._reconcile_old(deployment, new, old)
        if new is not None:
            self._keep_revision(deployment, new)
        return self._write_status(deployment, new, old, created=created)

    def _split(self, deployment: Json, owned: list[Json]) -> tuple[Json | None, list[Json]]:
        """The ReplicaSet whose template is the Deployment's (the oldest such), and the rest."""
        template = (deployment.get("spec") or {}).get("template") or {}
        by_age = sorted(
            owned,
            key=lambda rs: (
                str(ownership.metadata(rs).get("creationTimestamp") or ""),
                str(ownership.metadata(rs).get("name")),
            ),
        )
        new = next(
            (
                rs
                for rs in by_age
                if _without_hash((rs.get("spec") or {}).get("template") or {}) == template
            ),
            None,
        )
        return new, [rs for rs in by_age if rs is not new]

    def _old_pods_running(self, new: Json | None, old: list[Json]) -> bool:
        """Recreate waits while an old ReplicaSet reports pods or any of its pods is left."""
        if not old:
            return False
        if any(_status(rs, "replicas") > 0 for rs in old):
            return True
        old_uids = {ownership.uid(rs) for rs in old}
        namespace = str(ownership.metadata(old[0]).get("namespace", ""))
        for pod in self._pods.items(namespace):
            ref = ownership.controller_of(pod)
            if ref is None or ref.get("uid") not in old_uids:
                continue
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                return True
        return False

    # --- replica sets -------------------------------------------------------------------------

    def _annotations(self, deployment: Json, revision: int) -> dict[str, str]:
        surge, _ = surge_and_unavailable(deployment)
        desired = _replicas(deployment)
        copied = {
            k: str(v)
            for k, v in (ownership.metadata(deployment).get("annotations") or {}).items()
            if k not in _NOT_COPIED and not k.startswith("deployment.kubernetes.io/")
        }
        return {
            **copied,
            REVISION: str(revision),
            DESIRED_REPLICAS: str(desired),
            MAX_REPLICAS: str(desired + surge),
        }

    def _create(self, deployment: Json, old: list[Json], replicas: int) -> Json | None:
        meta = ownership.metadata(deployment)
        namespace, name = str(meta.get("namespace", "")), str(meta["name"])
        spec = deployment.get("spec") or {}
        collisions = _status(deployment, "collisionCount")
        hashed = template_hash(spec.get("template") or {}, collisions)
        template = copy.deepcopy(spec.get("template") or {})
        template.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = hashed
        selector = copy.deepcopy(spec.get("selector") or {})
        selector.setdefault("matchLabels", {})[HASH_LABEL] = hashed
        revision = max((_revision(rs) for rs in old), default=0) + 1
        body: Json = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{name}-{hashed}",
                "namespace": namespace,
                "labels": dict(template["metadata"]["labels"]),
                "annotations": self._annotations(deployment, revision),
                "ownerReferences": [ownership.reference_to(deployment, cluster.DEPLOYMENTS)],
            },
            "spec": {"replicas": replicas, "selector": selector, "template": template},
        }
        if spec.get("minReadySeconds"):
            body["spec"]["minReadySeconds"] = spec["minReadySeconds"]
        try:
            created = self._api.create(cluster.REPLICASETS, namespace, body)
        except errors.ApiError as exc:
            if not exc.conflict:
                raise
            existing = self._api.get(cluster.REPLICASETS, namespace, body["metadata"]["name"])
            if (
                existing is not None
                and ownership.controlled_by(existing, deployment)
                and _without_hash((existing.get("spec") or {}).get("template") or {})
                == spec.get("template")
            ):
                return existing  # ours already; the cache had not seen it yet
            # A ReplicaSet of that name with another template: hash again with a new count.
            self._api.patch(
                cluster.DEPLOYMENTS,
                namespace,
                name,
                {"status": {"collisionCount": collisions + 1}},
                subresource="status",
            )
            raise
        if replicas > 0:
            self._events.record(
                deployment,
                cluster.DEPLOYMENTS,
                "ScalingReplicaSet",
                f"Scaled up replica set {body['metadata']['name']} to {replicas}",
            )
        return created

    def _update_annotations(self, deployment: Json, new: Json, old: list[Json]) -> Json:
        """The new ReplicaSet carries the newest revision (a template rolled back to gets the
        next number again), the desired/max replicas and the Deployment's minReadySeconds."""
        revision = max(max((_revision(rs) for rs in old), default=0) + 1, _revision(new))
        wanted = self._annotations(deployment, revision)
        current = ownership.metadata(new).get("annotations") or {}
        patch: Json = {}
        if any(current.get(k) != v for k, v in wanted.items()):
            patch["metadata"] = {"annotations": wanted}
        min_ready = (deployment.get("spec") or {}).get("minReadySeconds") or None
        if ((new.get("spec") or {}).get("minReadySeconds") or None) != min_ready:
            patch["spec"] = {"minReadySeconds": min_ready}
        if not patch:
            return new
        meta = ownership.metadata(new)
        return self._api.patch(
            cluster.REPLICASETS, str(meta.get("namespace", "")), str(meta["name"]), patch
        )

    def _scale(self, deployment: Json, replica_set: Json, replicas: int) -> Json:
        before = _replicas(replica_set)
        surge, _ = surge_and_unavailable(deployment)
        desired = _replicas(deployment)
        meta = ownership.metadata(replica_set)
        patch = {
            "metadata": {
                "annotations": {
                    DESIRED_REPLICAS: str(desired),
                    MAX_REPLICAS: str(desired + surge),
                }
            },
            "spec": {"replicas": replicas},
        }
        scaled = self._api.patch(
            cluster.REPLICASETS, str(meta.get("namespace", "")), str(meta["name"]), patch
        )
        if replicas != before:
            direction = "up" if replicas > before else "down"
            self._events.record(
                deployment,
                cluster.DEPLOYMENTS,
                "ScalingReplicaSet",
                f"Scaled {direction} replica set {meta['name']} to {replicas}",
            )
        return scaled

    def _new_replicas(self, deployment: Json, old: list[Json], new: Json | None) -> int:
        """How many pods the new ReplicaSet may have now (NewRSNewReplicas, rolling update)."""
        desired = _replicas(deployment)
        current_new = _replicas(new) if new is not None else 0
        surge, _ = surge_and_unavailable(deployment)
        total = sum(_replicas(rs) for rs in old) + current_new
        if total >= desired + surge:
            return current_new
        return current_new + min(desired + surge - total, desired - current_new)

    def _reconcile_new(self, deployment: Json, new: Json, old: list[Json]) -> Json | None:
        """Scale the new ReplicaSet towards ``replicas``; the scaled one, or None if unchanged."""
        desired, current = _replicas(deployment), _replicas(new)
        if current == desired:
            return None
        if current > desired:
            return self._scale(deployment, new, desired)
        wanted = self._new_replicas(deployment, old, new)
        if wanted == current:
            return None
        return self._scale(deployment, new, wanted)

    def _reconcile_old(self, deployment: Json, new: Json, old: list[Json]) -> None:
        """Scale old ReplicaSets down while at least replicas - maxUnavailable stay available."""
        if sum(_replicas(rs) for rs in old) == 0:
            return
        _, unavailable = surge_and_unavailable(deployment)
        min_available = _replicas(deployment) - unavailable
        new_unavailable = _replicas(new) - _status(new, "availableReplicas")
        everyone = [*old, new]
        budget = sum(_replicas(rs) for rs in everyone) - min_available - new_unavailable
        if budget <= 0:
            return
        scaled_down: dict[str, int] = {}
        # Unhealthy replicas first: old pods that are not available cost no availability.
        for replica_set in old:
            if budget <= 0:
                break
            spare = _replicas(replica_set) - _status(replica_set, "availableReplicas")
            cut = min(spare, budget)
            if cut > 0:
                scaled_down[ownership.uid(replica_set)] = _replicas(replica_set) - cut
                budget -= cut
        available = sum(_status(rs, "availableReplicas") for rs in everyone)
        room = available - min_available
        for replica_set in old:
            if room <= 0:
                break
            current = scaled_down.get(ownership.uid(replica_set), _replicas(replica_set))
            cut = min(room, current)
            if cut > 0:
                scaled_down[ownership.uid(replica_set)] = current - cut
                room -= cut
        for replica_set in old:
            target = scaled_down.get(ownership.uid(replica_set))
            if target is not None and target != _replicas(replica_set):
                self._scale(deployment, replica_set, target)

    def _keep_revision(self, deployment: Json, new: Json) -> None:
        revision = str(_revision(new))
        annotations = ownership.metadata(deployment).get("annotations") or {}
        if revision == "0" or annotations.get(REVISION) == revision:
            return
        meta = ownership.metadata(deployment)
        self._api.patch(
            cluster.DEPLOYMENTS,
            str(meta.get("namespace", "")),
            str(meta["name"]),
            {"metadata": {"annotations": {REVISION: revision}}},
        )

    def _clean_up(self, deployment: Json, old: list[Json]) -> None:
        """Delete old, empty ReplicaSets beyond ``revisionHistoryLimit`` (oldest first)."""
        limit = (deployment.get("spec") or {}).get("revisionHistoryLimit")
        limit = 10 if limit is None else int(limit)
        empty = [
            rs
            for rs in old
            if _replicas(rs) == 0
            and _status(rs, "replicas") == 0
            and not ownership.being_deleted(rs)
        ]
        if len(empty) <= limit:
            return
        empty.sort(
            key=lambda rs: (_revision(rs), str(ownership.metadata(rs).get("creationTimestamp")))
        )
        for replica_set in empty[: len(empty) - limit]:
            meta = ownership.metadata(replica_set)
            self._api.delete(
                cluster.REPLICASETS,
                str(meta.get("namespace", "")),
                str(meta["name"]),
                uid=ownership.uid(replica_set),
            )

    # --- status -------------------------------------------------------------------------------

    def _write_status(
        self, deployment: Json, new: Json | None, old: list[Json], *, created: bool
    ) -> float | None:
        """Write the status computed from the ReplicaSets; when to look again (the deadline)."""
        now = self._clock()
        before = deployment.get("status") or {}
        everyone = [*old, *([new] if new is not None else [])]
        desired = _replicas(deployment)
        _, unavailable_allowed = surge_and_unavailable(deployment)
        available = sum(_status(rs, "availableReplicas") for rs in everyone)
        counts = {
            "observedGeneration": int(ownership.metadata(deployment).get("generation") or 0),
            "replicas": sum(_status(rs, "replicas") for rs in everyone),
            "updatedReplicas": _status(new, "replicas") if new is not None else 0,
            "readyReplicas": sum(_status(rs, "readyReplicas") for rs in everyone),
            "availableReplicas": available,
            "unavailableReplicas": max(sum(_replicas(rs) for rs in everyone) - available, 0),
            "collisionCount": _status(deployment, "collisionCount"),
        }
        status: Json = {k: v for k, v in counts.items() if v}
        conditions = [c for c in before.get("conditions") or [] if isinstance(c, dict)]
        if available >= desired - unavailable_allowed:
            wanted = _condition(
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.",
                now,
            )
        else:
            wanted = _condition(
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
                now,
            )
        conditions = _set_condition(conditions, wanted)
        conditions, again = self._progress(deployment, new, status, conditions, created, now)
        failure = next(
            (
                c
                for rs in everyone
                for c in (rs.get("status") or {}).get("conditions") or []
                if c.get("type") == "ReplicaFailure" and c.get("status") == "True"
            ),
            None,
        )
        if failure is not None:
            conditions = _set_condition(
                conditions,
                _condition(
                    "ReplicaFailure",
                    "True",
                    str(failure.get("reason")),
                    str(failure.get("message")),
                    now,
                ),
            )
        else:
            conditions = [c for c in conditions if c.get("type") != "ReplicaFailure"]
        if conditions:
            status["conditions"] = conditions
        if (
            new is not None
            and self._complete(deployment, status)
            and not ownership.being_deleted(deployment)
        ):
            self._clean_up(deployment, old)
        if status != before:
            meta = ownership.metadata(deployment)
            patch = {"status": {**{k: None for k in before if k not in status}, **status}}
            try:
                self._api.patch(
                    cluster.DEPLOYMENTS,
                    str(meta.get("namespace", "")),
                    str(meta["name"]),
                    patch,
                    subresource="status",
                )
            except errors.ApiError as exc:
                if not exc.not_found:
                    raise
        return again

    def _complete(self, deployment: Json, status: Json) -> bool:
        desired = _replicas(deployment)
        return (
            int(status.get("updatedReplicas") or 0) == desired
            and int(status.get("replicas") or 0) == desired
            and int(status.get("availableReplicas") or 0) == desired
            and int(status.get("observedGeneration") or 0)
            >= int(ownership.metadata(deployment).get("generation") or 0)
        )

    def _progress(
        self,
        deployment: Json,
        new: Json | None,
        status: Json,
        conditions: list[Json],
        created: bool,
        now: float,
    ) -> tuple[list[Json], float | None]:
        """The Progressing condition (syncRolloutStatus), and when the deadline falls."""
        deadline = (deployment.get("spec") or {}).get("progressDeadlineSeconds")
        if deadline is None:
            return [c for c in conditions if c.get("type") != "Progressing"], None
        subject = (
            f'ReplicaSet "{ownership.metadata(new)["name"]}"'
            if new is not None
            else f'Deployment "{ownership.metadata(deployment)["name"]}"'
        )
        current = next((c for c in conditions if c.get("type") == "Progressing"), None)
        if created and new is not None:
            wanted = _condition(
                "Progressing",
                "True",
                "NewReplicaSetCreated",
                f'Created new replica set "{ownership.metadata(new)["name"]}"',
                now,
            )
            return _set_condition(conditions, wanted), float(deadline)
        finished = (
            current is not None
            and current.get("reason") == "NewReplicaSetAvailable"
            and status.get("replicas", 0) == status.get("updatedReplicas", 0)
        )
        if finished:
            return conditions, None
        before = deployment.get("status") or {}
        if self._complete(deployment, status):
            wanted = _condition(
                "Progressing",
                "True",
                "NewReplicaSetAvailable",
                f"{subject} has successfully progressed.",
                now,
            )
            return _set_condition(conditions, wanted), None
        old_before = int(before.get("replicas") or 0) - int(before.get("updatedReplicas") or 0)
        old_now = int(status.get("replicas") or 0) - int(status.get("updatedReplicas") or 0)
        progressed = (
            int(status.get("updatedReplicas") or 0) > int(before.get("updatedReplicas") or 0)
            or old_now < old_before
            or int(status.get("readyReplicas") or 0) > int(before.get("readyReplicas") or 0)
            or int(status.get("availableReplicas") or 0) > int(before.get("availableReplicas") or 0)
        )
        if progressed or current is None:
            wanted = _condition(
                "Progressing", "True", "ReplicaSetUpdated", f"{subject} is progressing.", now
            )
            if current is not None and current.get("status") == "True":
                wanted["lastTransitionTime"] = current.get("lastTransitionTime")
            conditions = [c for c in conditions if c.get("type") != "Progressing"] + [wanted]
            return conditions, float(deadline)
        if current.get("reason") == "ProgressDeadlineExceeded":
            return conditions, None
        since = ownership.parse_time(current.get("lastUpdateTime")) or now
        if since + int(deadline) < now:
            wanted = _condition(
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                f"{subject} has timed out progressing.",
                now,
            )
            return _set_condition(conditions, wanted), None
        return conditions, since + int(deadline) - now + 0.05
