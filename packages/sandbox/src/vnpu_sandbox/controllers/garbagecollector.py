"""The garbage collector for Deployments, ReplicaSets and Pods: ownerReferences honoured.

The API server only marks an object being deleted with a propagation policy: Background
deletes it at once, Foreground gives it the ``foregroundDeletion`` finalizer, Orphan the
``orphan`` finalizer. This collector does the rest, as kube-controller-manager's does:

* a dependent none of whose owners exists any more (checked with a live read, not only the
  cache) is deleted in the background, or in the foreground when an owner being deleted in
  the foreground waits for it and it has dependents of its own; references to owners that
  are gone are removed while another owner remains;
* an owner with ``foregroundDeletion`` has its dependents deleted and loses the finalizer
  (and so is removed) once no dependent with ``blockOwnerDeletion`` is left;
* an owner with ``orphan`` has its reference removed from every dependent, then loses the
  finalizer.

Only owners of the three kinds the manager watches are looked up; a reference to any other
kind is left alone (and keeps its dependent). The manager calls :meth:`sync` with a topic per
kind (``gc-pods``...) when an object with owners, or an owner, changes.
"""

from __future__ import annotations

import logging
from typing import Any

from vnpu_sandbox.controllers import cluster, errors, informer, ownership, workqueue

log = logging.getLogger(__name__)

Json = dict[str, Any]

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"


def topic(kind: cluster.Kind) -> str:
    return f"gc-{kind.plural}"


class GarbageCollector:
    """Deletes dependents whose owners are gone, and finishes foreground and orphan deletions."""

    def __init__(self, api: cluster.Cluster, caches: dict[str, informer.Informer]) -> None:
        self._api = api
        self._caches = caches  # by kind: "Deployment", "ReplicaSet", "Pod"
        self._kinds = {
            c.kind.kind: c.kind for c in caches.values()
        }  # "ReplicaSet" -> cluster.REPLICASETS

    @property
    def topics(self) -> dict[str, cluster.Kind]:
        return {topic(kind): kind for kind in self._kinds.values()}

    def watch(self, queue: workqueue.WorkQueue) -> None:
        """Queue dependents when they or their owners change, and owners being deleted."""
        for cache in self._caches.values():
            cache.add_handler(self._handler(cache.kind, queue))

    def _handler(self, kind: cluster.Kind, queue: workqueue.WorkQueue) -> informer.Handler:
        def on_event(event_type: str, old: Json | None, new: Json | None) -> None:
            obj = new or old or {}
            namespace, name = informer.key_of(obj)
            if new is not None and (ownership.references(new) or self._finalizing(new)):
                queue.add((topic(kind), namespace, name))
            if event_type == "DELETED" or (new is not None and self._finalizing(new)):
                for dependent_kind, dependent in self._dependents(obj):
                    queue.add((topic(dependent_kind), *informer.key_of(dependent)))
            if event_type == "DELETED":
                for ref in ownership.references(obj):  # an owner may be waiting for this one
                    owner_kind = self._kinds.get(str(ref.get("kind")))
                    if owner_kind is not None:
                        queue.add((topic(owner_kind), namespace, str(ref.get("name"))))

        return on_event

    @staticmethod
    def _finalizing(obj: Json) -> bool:
        finalizers = ownership.metadata(obj).get("finalizers") or []
        return ownership.being_deleted(obj) and (FOREGROUND in finalizers or ORPHAN in finalizers)

    def _dependents(self, owner: Json) -> list[tuple[cluster.Kind, Json]]:
        owner_uid = ownership.uid(owner)
        namespace = str(ownership.metadata(owner).get("namespace", ""))
        if not owner_uid:
            return []
        return [
            (cache.kind, obj)
            for cache in self._caches.values()
            for obj in cache.items(namespace)
            if any(r.get("uid") == owner_uid for r in ownership.references(obj))
        ]

    # --- the sync ------------------------------------------------------------------------

    def sync(self, kind: cluster.Kind, namespace: str, name: str) -> float | None:
        obj = self._caches[kind.kind].get(namespace, name)
        if obj is None:
            return None
        if self._finalizing(obj):
            self._finish_deletion(kind, obj)
        elif ownership.references(obj):
            self._check_owners(kind, obj)
        return None

    def _owner_state(self, namespace: str, ref: Json) -> str:
        """``solid``, ``dangling`` (gone, or another object of that name) or ``waiting``
        (being deleted in the foreground)."""
        kind = self._kinds.get(str(ref.get("kind")))
        if kind is None or ref.get("apiVersion") != kind.api_version:
            return "solid"  # a kind this collector does not watch: never collect for it
        name = str(ref.get("name"))
        owner = self._caches[kind.kind].get(namespace, name)
        if owner is None or ownership.uid(owner) != ref.get("uid"):
            owner = self._api.get(kind, namespace, name)  # the cache may lag: ask the server
        if owner is None or ownership.uid(owner) != ref.get("uid"):
            return "dangling"
        finalizers = ownership.metadata(owner).get("finalizers") or []
        if ownership.being_deleted(owner) and FOREGROUND in finalizers:
            return "waiting"
        return "solid"

    def _check_owners(self, kind: cluster.Kind, obj: Json) -> None:
        meta = ownership.metadata(obj)
        namespace, name = str(meta.get("namespace", "")), str(meta["name"])
        states = {
            str(r.get("uid")): self._owner_state(namespace, r) for r in ownership.references(obj)
        }
        if all(state == "solid" for state in states.values()):
            return
        if "solid" in states.values():
            gone = [uid for uid, state in states.items() if state != "solid"]
            patch = {
                "metadata": {
                    "ownerReferences": [{"$patch": "delete", "uid": uid} for uid in gone],
                    "uid": ownership.uid(obj),
                }
            }
            self._patch(kind, namespace, name, patch, cluster.STRATEGIC_MERGE_PATCH)
            return
        if ownership.being_deleted(obj):
            return  # already on its way (its own finalizers, or a grace period)
        waiting = "waiting" in states.values()
        finalizers = meta.get("finalizers") or []
        if waiting and self._dependents(obj):
            policy = "Foreground"
        elif ORPHAN in finalizers:
            policy = "Orphan"
        elif FOREGROUND in finalizers:
            policy = "Foreground"
        else:
            policy = "Background"
        log.debug(
            "garbage_collecting kind=%s object=%s/%s policy=%s",
            kind.plural,
            namespace,
            name,
            policy,
        )
        try:
            self._api.delete(kind, namespace, name, uid=ownership.uid(obj), propagation=policy)
        except errors.ApiError as exc:
            if not exc.conflict:  # 409: another object of that name now: nothing to do
                raise

    def _finish_deletion(self, kind: cluster.Kind, owner: Json) -> None:
        meta = ownership.metadata(owner)
        finalizers = list(meta.get("finalizers") or [])
        owner_uid = ownership.uid(owner)
        dependents = self._dependents(owner)
        if ORPHAN in finalizers:
            for dependent_kind, dependent in dependents:
                dependent_meta = ownership.metadata(dependent)
                patch = {
                    "metadata": {
                        "ownerReferences": [{"$patch": "delete", "uid": owner_uid}],
                        "uid": ownership.uid(dependent),
                    }
                }
                self._patch(
                    dependent_kind,
                    str(dependent_meta.get("namespace", "")),
                    str(dependent_meta["name"]),
                    patch,
                    cluster.STRATEGIC_MERGE_PATCH,
                )
            self._remove_finalizer(kind, owner, ORPHAN)
            return
        blocking = []
        for dependent_kind, dependent in dependents:
            refs = [r for r in ownership.references(dependent) if r.get("uid") == owner_uid]
            if any(r.get("blockOwnerDeletion") for r in refs):
                blocking.append(dependent)
            if not ownership.being_deleted(dependent):
                self._check_owners(dependent_kind, dependent)
        if not blocking:
            self._remove_finalizer(kind, owner, FOREGROUND)

    def _remove_finalizer(self, kind: cluster.Kind, obj: Json, finalizer: str) -> None:
        meta = ownership.metadata(obj)
        remaining = [f for f in meta.get("finalizers") or [] if f != finalizer]
        patch = {
            "metadata": {
                "finalizers": remaining or None,
                "resourceVersion": meta.get("resourceVersion"),
            }
        }
        self._patch(
            kind, str(meta.get("namespace", "")), str(meta["name"]), patch, cluster.MERGE_PATCH
        )

    def _patch(
        self, kind: cluster.Kind, namespace: str, name: str, patch: Json, content_type: str
    ) -> None:
        try:
            self._api.patch(kind, namespace, name, patch, content_type=content_type)
        except errors.ApiError as exc:
            if not exc.not_found:
                raise
