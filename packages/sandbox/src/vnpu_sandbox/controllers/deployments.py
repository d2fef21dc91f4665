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
The arithmetic (the hash, how far to scale, the status and its conditions) is in
``rollout``. A paused Deployment, or one being deleted, only gets its status. Not done:
proportional scaling of several active ReplicaSets in the middle of a rollout (the rolling
rules converge without it) and the deprecated rollback annotations.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from typing import Any

from vnpu_sandbox.controllers import (
    cluster,
    errors,
    informer,
    ownership,
    recorder,
    rollout,
    workqueue,
)

log = logging.getLogger(__name__)

Json = dict[str, Any]

TOPIC = "deployment"
# The Deployment's own annotations that its ReplicaSets do not inherit.
_NOT_COPIED = ("kubectl.kubernetes.io/last-applied-configuration",)


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
            for namespace, name in ownership.owners_concerned(
                old, new, cluster.DEPLOYMENTS, self._deployments.items
            ):
                queue.add((TOPIC, namespace, name))

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
            active_old = [rs for rs in old if rollout.replicas(rs) > 0]
            if active_old:
                for replica_set in active_old:
                    self._scale(deployment, replica_set, 0)
                return self._write_status(deployment, new, old, created=False)
            if self._old_pods_running(new, old):
                return self._write_status(deployment, new, old, created=False)
            if new is None:
                new = self._create(deployment, old, rollout.replicas(deployment))
                created = new is not None
            else:
                new = self._update_annotations(deployment, new, old)
            if new is not None and rollout.replicas(new) != rollout.replicas(deployment):
                new = self._scale(deployment, new, rollout.replicas(deployment))
        else:
            if new is None:
                new = self._create(deployment, old, rollout.new_replicas(deployment, old, None))
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
                if rollout.without_hash((rs.get("spec") or {}).get("template") or {}) == template
            ),
            None,
        )
        return new, [rs for rs in by_age if rs is not new]

    def _old_pods_running(self, new: Json | None, old: list[Json]) -> bool:
        """Recreate waits while an old ReplicaSet reports pods or any of its pods is left."""
        if not old:
            return False
        if any(rollout.observed(rs, "replicas") > 0 for rs in old):
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
        surge, _ = rollout.surge_and_unavailable(deployment)
        desired = rollout.replicas(deployment)
        copied = {
            k: str(v)
            for k, v in (ownership.metadata(deployment).get("annotations") or {}).items()
            if k not in _NOT_COPIED and not k.startswith("deployment.kubernetes.io/")
        }
        return {
            **copied,
            rollout.REVISION: str(revision),
            rollout.DESIRED_REPLICAS: str(desired),
            rollout.MAX_REPLICAS: str(desired + surge),
        }

    def _create(self, deployment: Json, old: list[Json], replicas: int) -> Json | None:
        meta = ownership.metadata(deployment)
        namespace, name = str(meta.get("namespace", "")), str(meta["name"])
        spec = deployment.get("spec") or {}
        collisions = rollout.observed(deployment, "collisionCount")
        hashed = rollout.template_hash(spec.get("template") or {}, collisions)
        template = copy.deepcopy(spec.get("template") or {})
        template.setdefault("metadata", {}).setdefault("labels", {})[rollout.HASH_LABEL] = hashed
        selector = copy.deepcopy(spec.get("selector") or {})
        selector.setdefault("matchLabels", {})[rollout.HASH_LABEL] = hashed
        revision = max((rollout.revision(rs) for rs in old), default=0) + 1
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
                and rollout.without_hash((existing.get("spec") or {}).get("template") or {})
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
        revision = max(
            max((rollout.revision(rs) for rs in old), default=0) + 1, rollout.revision(new)
        )
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
        before = rollout.replicas(replica_set)
        surge, _ = rollout.surge_and_unavailable(deployment)
        desired = rollout.replicas(deployment)
        meta = ownership.metadata(replica_set)
        patch = {
            "metadata": {
                "annotations": {
                    rollout.DESIRED_REPLICAS: str(desired),
                    rollout.MAX_REPLICAS: str(desired + surge),
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

    def _reconcile_new(self, deployment: Json, new: Json, old: list[Json]) -> Json | None:
        """Scale the new ReplicaSet towards ``replicas``; the scaled one, or None if unchanged."""
        desired, current = rollout.replicas(deployment), rollout.replicas(new)
        if current == desired:
            return None
        if current > desired:
            return self._scale(deployment, new, desired)
        wanted = rollout.new_replicas(deployment, old, new)
        if wanted == current:
            return None
        return self._scale(deployment, new, wanted)

    def _reconcile_old(self, deployment: Json, new: Json, old: list[Json]) -> None:
        """Scale old ReplicaSets down as far as ``maxUnavailable`` allows."""
        targets = rollout.scale_down_targets(deployment, new, old)
        for replica_set in old:
            target = targets.get(ownership.uid(replica_set))
            if target is not None:
                self._scale(deployment, replica_set, target)

    def _keep_revision(self, deployment: Json, new: Json) -> None:
        revision = str(rollout.revision(new))
        annotations = ownership.metadata(deployment).get("annotations") or {}
        if revision == "0" or annotations.get(rollout.REVISION) == revision:
            return
        meta = ownership.metadata(deployment)
        self._api.patch(
            cluster.DEPLOYMENTS,
            str(meta.get("namespace", "")),
            str(meta["name"]),
            {"metadata": {"annotations": {rollout.REVISION: revision}}},
        )

    def _clean_up(self, deployment: Json, old: list[Json]) -> None:
        """Delete old, empty ReplicaSets beyond ``revisionHistoryLimit`` (oldest first)."""
        limit = (deployment.get("spec") or {}).get("revisionHistoryLimit")
        limit = 10 if limit is None else int(limit)
        empty = [
            rs
            for rs in old
            if rollout.replicas(rs) == 0
            and rollout.observed(rs, "replicas") == 0
            and not ownership.being_deleted(rs)
        ]
        if len(empty) <= limit:
            return
        empty.sort(
            key=lambda rs: (
                rollout.revision(rs),
                str(ownership.metadata(rs).get("creationTimestamp")),
            )
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
        """Write the status computed from the ReplicaSets (and delete old history once the
        rollout is complete); in how many seconds to look again for the progress deadline."""
        state, again = rollout.status(deployment, new, old, created=created, now=self._clock())
        if (
            new is not None
            and rollout.complete(deployment, state)
            and not ownership.being_deleted(deployment)
        ):
            self._clean_up(deployment, old)
        self._api.replace_status(cluster.DEPLOYMENTS, deployment, state)
        return again
