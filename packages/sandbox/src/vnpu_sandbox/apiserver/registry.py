"""What each verb does to stored objects, with kube-apiserver's semantics.

``routes`` calls one method per request after decoding it: ``get``, ``list`` (paged by
``lists``), ``prepare_create`` then ``insert`` (admission runs between the two, as in the real
server), ``update`` and ``patch`` (optimistic concurrency on ``metadata.resourceVersion``,
no-op writes keep the revision), ``get_scale``/``update_scale``/``patch_scale`` (the
``/scale`` subresource), ``delete`` (finalizers, the ``foregroundDeletion`` or ``orphan``
finalizer a propagation policy asks for, pod grace periods, namespaces emptied before they
go), ``bind`` (``pods/binding``: node name, Binding annotations and the PodScheduled
condition in one write) and ``evict`` (``pods/eviction``: a graceful delete). Dependents
are not deleted here: that is the garbage collector's
work (``vnpu-sandbox controllers``), as in a real cluster. All of it is synchronous and runs on the event loop.
"""

from __future__ import annotations

import copy
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from vnpu_sandbox.apiserver import (
    errors,
    lists,
    patches,
    resources,
    scales,
    schemas,
    selectors,
    store,
    strategies,
)

Json = dict[str, Any]

BUILTIN_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_UNDELETABLE_NAMESPACES = ("default", "kube-system", "kube-public")
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class DeleteOptions:
    grace_period: int | None = None
    uid: str | None = None
    resource_version: str | None = None
    propagation: str | None = None
    """``Foreground``, ``Background`` or ``Orphan``; None leaves the object's finalizers alone."""


# The finalizer each propagation policy puts on the object (the garbage collector's part).
_PROPAGATION_FINALIZERS = {"Foreground": "foregroundDeletion", "Orphan": "orphan"}


def _patched(content_type: str, old: Json, patch: object) -> Json:
    """``patch`` applied to ``old``, nulls dropped; 400 or 422 when it cannot be."""
    try:
        patched: Json = schemas.without_nulls(patches.apply(content_type, old, patch))
    except patches.PatchError as exc:
        if exc.bad_request:
            raise errors.BadRequest(str(exc)) from exc
        raise errors.PatchFailed(str(exc)) from exc
    return patched


def _set_propagation(metadata: Json, policy: str | None) -> None:
    """Put the finalizer of ``policy`` on an object being deleted (and drop the other one),
    as the real server does before the garbage collector takes over."""
    if policy is None:
        return
    known = _PROPAGATION_FINALIZERS.values()
    finalizers = [f for f in metadata.get("finalizers") or [] if f not in known]
    if policy in _PROPAGATION_FINALIZERS:
        finalizers.append(_PROPAGATION_FINALIZERS[policy])
    if finalizers:
        metadata["finalizers"] = finalizers
    else:
        metadata.pop("finalizers", None)


def _parse_time(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def _pod_grace(pod: Json, requested: int | None) -> int:
    """The grace period a new pod deletion gets (the real pod strategy's rules)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    grace = (
        requested if requested is not None else int(spec.get("terminationGracePeriodSeconds") or 0)
    )
    if not spec.get("nodeName") or status.get("phase") in ("Failed", "Succeeded"):
        return 0  # never scheduled or already finished: nothing to wait for
    return 1 if grace < 0 else grace


class Registry:
    """The verbs over a ``store.Store``; ``clock`` gives seconds since the epoch."""

    def __init__(self, objects: store.Store, clock: Callable[[], float] = time.time) -> None:
        self.store = objects
        self.clock = clock

    def bootstrap(self) -> None:
        """Create the namespaces every cluster has, where missing."""
        for name in BUILTIN_NAMESPACES:
            if self.store.get(resources.NAMESPACES.key, "", name) is None:
                body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
                self.insert(
                    resources.NAMESPACES, self.prepare_create(resources.NAMESPACES, "", body)
                )

    # --- reads ------------------------------------------------------------------------

    def get(self, resource: resources.Resource, namespace: str, name: str) -> Json:
        obj = self.store.get(resource.key, namespace if resource.namespaced else "", name)
        if obj is None:
            raise errors.NotFound(resource.group, resource.plural, name)
        return obj

    def list(
        self,
        resource: resources.Resource,
        namespace: str | None,
        selector: selectors.Selector,
        options: lists.ListOptions,
    ) -> Json:
        return lists.page(self.store, resource, namespace, selector, options)

    # --- create -----------------------------------------------------------------------

    def _check_namespace(self, namespace: str) -> None:
        ns = self.store.get(resources.NAMESPACES.key, "", namespace)
        if ns is None:
            raise errors.NotFound("", "namespaces", namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise errors.Forbidden(
                f"unable to create new content in namespace {namespace} because it is being terminated",
                {
                    "name": namespace,
                    "kind": "namespaces",
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": f"namespace {namespace} is being terminated",
                            "field": "metadata.namespace",
                        }
                    ],
                },
            )

    def scope(self, resource: resources.Resource, namespace: str, body: Json) -> None:
        """Put a new object in the request's namespace (or none), as the real server does
        before admission; the namespace must exist and not be terminating."""
        metadata = body.setdefault("metadata", {})
        if resource.namespaced:
            if metadata.get("namespace") and metadata["namespace"] != namespace:
                raise errors.BadRequest(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            metadata["namespace"] = namespace
            self._check_namespace(namespace)
        else:
            metadata.pop("namespace", None)

    def prepare_create(self, resource: resources.Resource, namespace: str, body: Json) -> Json:
        """Name, namespace, uid, timestamps and server-set fields of a new object; validates it."""
        obj = copy.deepcopy(body)
        self.scope(resource, namespace, obj)
        metadata = obj["metadata"]
        if metadata.get("resourceVersion"):
            raise errors.BadRequest("resourceVersion should not be set on objects to be created")
        if not metadata.get("name") and metadata.get("generateName"):
            suffix = "".join(random.choices(_NAME_ALPHABET, k=5))
            metadata["name"] = f"{metadata['generateName']}{suffix}"
        for field in (
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "managedFields",
        ):
            metadata.pop(field, None)
        metadata["uid"] = str(uuid.uuid4())
        metadata["creationTimestamp"] = rfc3339(self.clock())
        metadata["generation"] = 1
        strategies.validate_create(resource, obj)
        strategies.prepare_create(resource, obj)
        return obj

    def insert(self, resource: resources.Resource, obj: Json, dry_run: bool = False) -> Json:
        """Store a prepared object (``AlreadyExists`` if the name is taken)."""
        if dry_run:
            if self.store.get(resource.key, *store.object_key(obj)) is not None:
                raise errors.AlreadyExists(resource.group, resource.plural, obj["metadata"]["name"])
            return obj
        return self.store.add(resource, obj)

    # --- update and patch ---------------------------------------------------------------

    def update(
        self,
        resource: resources.Resource,
        namespace: str,
        name: str,
        body: Json,
        subresource: str = "",
        dry_run: bool = False,
    ) -> Json:
        old = self.get(resource, namespace, name)
        new = copy.deepcopy(body)
        metadata = new.setdefault("metadata", {})
        if metadata.get("name", name) != name:
            raise errors.BadRequest(
                f"the name of the object ({metadata['name']}) does not match the name on the URL ({name})"
            )
        if resource.namespaced and metadata.get("namespace", namespace) != namespace:
            raise errors.BadRequest(
                f"the namespace of the object ({metadata['namespace']}) does not match the namespace on the request ({namespace})"
            )
        wanted = metadata.get("resourceVersion")
        if wanted and str(wanted) != old["metadata"]["resourceVersion"]:
            if not str(wanted).isdigit():
                raise errors.BadRequest(
                    f'metadata.resourceVersion: Invalid value: "{wanted}": must be a non-negative integer'
                )
            raise errors.Conflict(resource.group, resource.plural, name, errors.STALE_OBJECT)
        new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
        strategies.defaults(resource, new)
        strategies.prepare_update(resource, old, new, subresource)
        strategies.validate_update(resource, old, new, subresource)
        return self._write(resource, old, new, dry_run)

    def patch(
        self,
        resource: resources.Resource,
        namespace: str,
        name: str,
        content_type: str,
        patch: object,
        subresource: str = "",
        dry_run: bool = False,
    ) -> Json:
        old = self.get(resource, namespace, name)
        patched = _patched(content_type, old, patch)
        if not isinstance(patched.get("metadata"), dict):
            raise errors.PatchFailed(
                "metadata: the patch removed or replaced the object's metadata"
            )
        schemas.check(resource.kind, resource.api_version, patched)
        return self.update(resource, namespace, name, patched, subresource, dry_run)

    # --- scale (deployments and replicasets) ----------------------------------------------

    def get_scale(self, resource: resources.Resource, namespace: str, name: str) -> Json:
        return scales.scale_of(self.get(resource, namespace, name))

    def update_scale(
        self,
        resource: resources.Resource,
        namespace: str,
        name: str,
        scale: Json,
        dry_run: bool = False,
    ) -> Json:
        """Set ``spec.replicas`` from a Scale; its resourceVersion, if any, must be current."""
        metadata = scale.get("metadata") or {}
        if metadata.get("name", name) != name:
            raise errors.BadRequest(
                f"the name of the object ({metadata['name']}) does not match the name on the URL ({name})"
            )
        replicas = scales.wanted_replicas(scale, name)
        body = copy.deepcopy(self.get(resource, namespace, name))
        body["spec"]["replicas"] = replicas
        if metadata.get("resourceVersion"):
            body["metadata"]["resourceVersion"] = metadata["resourceVersion"]
        else:
            body["metadata"].pop("resourceVersion", None)
        return scales.scale_of(self.update(resource, namespace, name, body, "", dry_run))

    def patch_scale(
        self,
        resource: resources.Resource,
        namespace: str,
        name: str,
        content_type: str,
        patch: object,
        dry_run: bool = False,
    ) -> Json:
        """Apply a patch to the current Scale, then set what it asks for."""
        patched = _patched(content_type, self.get_scale(resource, namespace, name), patch)
        schemas.check(scales.KIND, scales.API_VERSION, patched)
        return self.update_scale(resource, namespace, name, patched, dry_run)

    def _write(self, resource: resources.Resource, old: Json, new: Json, dry_run: bool) -> Json:
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if new == old:
            return old
        if dry_run:
            return new
        metadata = new["metadata"]
        if (
            metadata.get("deletionTimestamp")
            and not metadata.get("finalizers")
            and not metadata.get("deletionGracePeriodSeconds")
        ):
            gone = self.store.remove(resource, old, new)
            self._after_removal(resource, gone)
            return gone
        return self.store.modify(resource, old, new)

    # --- delete -----------------------------------------------------------------------

    def delete(
        self,
        resource: resources.Resource,
        namespace: str,
        name: str,
        options: DeleteOptions,
        dry_run: bool = False,
    ) -> Json:
        """Delete now, or mark for deletion; returns the response body the real server sends."""
        old = self.get(resource, namespace, name)
        metadata = old["metadata"]
        if options.uid is not None and options.uid != metadata.get("uid"):
            raise errors.Conflict(
                resource.group,
                resource.kind,
                name,
                f"the UID in the precondition ({options.uid}) does not match the UID in record ({metadata.get('uid')}). The object might have been deleted and then recreated",
            )
        if (
            options.resource_version is not None
            and options.resource_version != metadata["resourceVersion"]
        ):
            raise errors.Conflict(
                resource.group,
                resource.kind,
                name,
                f"the ResourceVersion in the precondition ({options.resource_version}) does not match the ResourceVersion in record ({metadata['resourceVersion']}). The object might have been modified",
            )
        if resource is resources.NAMESPACES:
            return self._delete_namespace(old, dry_run)
        new = copy.deepcopy(old)
        marked = new["metadata"]
        _set_propagation(marked, options.propagation)
        now = self.clock()
        requested = options.grace_period
        if requested is not None and requested < 0:
            requested = 1  # negative periods count as one second, as in the real server
        if resource is resources.PODS and metadata.get("deletionTimestamp"):
            current = int(metadata.get("deletionGracePeriodSeconds") or 0)
            if current and (requested is None or requested >= current):
                return old  # graceful deletion already pending with a shorter or equal period
            if current and requested is not None:
                started = _parse_time(metadata["deletionTimestamp"]) - current
                marked["deletionTimestamp"] = rfc3339(started + requested)
                marked["deletionGracePeriodSeconds"] = requested
        elif resource is resources.PODS:
            grace = _pod_grace(old, requested)
            marked["deletionTimestamp"] = rfc3339(now + grace)
            marked["deletionGracePeriodSeconds"] = grace
            marked["generation"] = int(marked.get("generation", 1)) + 1
        elif marked.get("finalizers"):
            if not metadata.get("deletionTimestamp"):
                marked["deletionTimestamp"] = rfc3339(now)
                marked["generation"] = int(marked.get("generation", 1)) + 1
            marked["deletionGracePeriodSeconds"] = 0
        if dry_run:
            return new
        if marked.get("finalizers") or marked.get("deletionGracePeriodSeconds"):
            return self._write(resource, old, new, dry_run)
        if new != old and resource is resources.PODS:
            old = self.store.modify(resource, old, new)
        gone = self.store.remove(resource, old)
        self._after_removal(resource, gone)
        if resource.returns_deleted_object:
            return gone
        details = errors.resource_details(resource.group, resource.plural, name)
        details["uid"] = metadata.get("uid")
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": details,
        }

    def _delete_namespace(self, namespace: Json, dry_run: bool) -> Json:
        name = namespace["metadata"]["name"]
        if name in _UNDELETABLE_NAMESPACES:
            raise errors.Forbidden(
                f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                errors.resource_details("", "namespaces", name),
            )
        if namespace["metadata"].get("deletionTimestamp") or dry_run:
            return namespace
        terminating = copy.deepcopy(namespace)
        terminating["metadata"]["deletionTimestamp"] = rfc3339(self.clock())
        terminating["metadata"]["deletionGracePeriodSeconds"] = 0
        terminating["status"] = {"phase": "Terminating"}
        result = self.store.modify(resources.NAMESPACES, namespace, terminating)
        for resource in resources.RESOURCES:
            if resource.namespaced:
                for obj in self.store.items(resource.key, name):
                    if not obj["metadata"].get("deletionTimestamp") or resource is resources.PODS:
                        self.delete(
                            resource, name, obj["metadata"]["name"], DeleteOptions(grace_period=0)
                        )
        return self._finish_namespace(name) or result

    def _finish_namespace(self, name: str) -> Json | None:
        """Remove a terminating namespace once nothing is left in it (the namespace controller)."""
        namespace = self.store.get(resources.NAMESPACES.key, "", name)
        if namespace is None or not namespace["metadata"].get("deletionTimestamp"):
            return None
        if any(self.store.count(r.key, name) for r in resources.RESOURCES if r.namespaced):
            return None
        if namespace["metadata"].get("finalizers"):
            return None
        finished = copy.deepcopy(namespace)
        finished["spec"] = {"finalizers": []}
        return self.store.remove(resources.NAMESPACES, namespace, finished)

    def _after_removal(self, resource: resources.Resource, gone: Json) -> None:
        if resource.namespaced:
            self._finish_namespace(gone["metadata"]["namespace"])

    def delete_collection(
        self,
        resource: resources.Resource,
        namespace: str | None,
        selector: selectors.Selector,
        options: DeleteOptions,
        dry_run: bool = False,
    ) -> Json:
        listed = self.list(resource, namespace, selector, lists.ListOptions())
        for item in listed["items"]:
            meta = item["metadata"]
            try:
                self.delete(resource, meta.get("namespace", ""), meta["name"], options, dry_run)
            except errors.NotFound:
                continue
        return listed

    # --- eviction ---------------------------------------------------------------------

    def evict(
        self, namespace: str, name: str, given: str, options: DeleteOptions, dry_run: bool = False
    ) -> Json:
        """``pods/eviction``: delete the pod as a DELETE with ``options`` would (gracefully when
        it is on a node), answering the Success Status kube-apiserver sends with its 201."""
        if given != name:
            raise errors.BadRequest("name in URL does not match name in Eviction object")
        self.delete(resources.PODS, namespace, name, options, dry_run)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    # --- binding ----------------------------------------------------------------------

    def bind(self, namespace: str, name: str, binding: Json) -> Json:
        """Assign a pod to a node: ``spec.nodeName``, annotations and PodScheduled in one write."""
        metadata = binding.get("metadata") or {}
        if metadata.get("name") and metadata["name"] != name:
            raise errors.BadRequest("name in URL does not match name in Binding object")
        target: Json = binding["target"] if isinstance(binding.get("target"), dict) else {}
        found: list[errors.FieldError] = []
        if target.get("kind") not in (None, "", "Node"):
            found.append(
                errors.FieldError(
                    "target.kind", "Invalid", target.get("kind"), "must be empty or 'Node'"
                )
            )
        if not target.get("name"):
            found.append(errors.FieldError("target.name", "Required"))
        if found:
            raise errors.Invalid("", "Binding", name, found)
        pod = self.get(resources.PODS, namespace, name)
        why = None
        if metadata.get("uid") and metadata["uid"] != pod["metadata"]["uid"]:
            why = f"pod {name} has UID {pod['metadata']['uid']}, the binding is for UID {metadata['uid']}"
        elif pod["metadata"].get("deletionTimestamp"):
            why = f"pod {name} is being deleted, cannot be assigned to a host"
        elif pod["spec"].get("nodeName"):
            why = f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"'
        if why:
            raise errors.Conflict("", "pods/binding", name, why)
        bound = copy.deepcopy(pod)
        bound["spec"]["nodeName"] = target["name"]
        annotations = metadata.get("annotations") or {}
        if annotations:
            bound["metadata"].setdefault("annotations", {}).update(annotations)
        conditions = bound.setdefault("status", {}).setdefault("conditions", [])
        scheduled = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if scheduled is None:
            conditions.append(
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": rfc3339(self.clock()),
                }
            )
        elif scheduled.get("status") != "True":
            scheduled.update(status="True", lastTransitionTime=rfc3339(self.clock()))
            scheduled.pop("reason", None)
            scheduled.pop("message", None)
        self.store.modify(resources.PODS, pod, bound)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }
