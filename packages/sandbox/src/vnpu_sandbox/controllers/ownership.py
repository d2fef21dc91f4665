"""Who owns what: ownerReferences, label selectors, and adopting or releasing dependents.

The replicaset controller claims pods and the deployment controller claims replicasets
with :func:`claim`, kube-controller-manager's ControllerRefManager rules: an object whose
controller reference names the owner is the owner's while the owner's selector matches it
(released otherwise, by removing the reference); an object with no controller reference
that the selector matches is adopted (the reference added), unless either side is being
deleted. Their event handlers find the owners a dependent's change concerns with
:func:`owners_concerned`; the garbage collector reads references with :func:`references`.
Pod state helpers (active, ready, available) are here too, because both controllers count
pods the same way.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Callable, Mapping
from typing import Any

from vnpu_sandbox.controllers import cluster, errors

Json = dict[str, Any]


def metadata(obj: Json) -> Json:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def uid(obj: Json) -> str:
    return str(metadata(obj).get("uid") or "")


def being_deleted(obj: Json) -> bool:
    return bool(metadata(obj).get("deletionTimestamp"))


def references(obj: Json) -> list[Json]:
    return [r for r in metadata(obj).get("ownerReferences") or [] if isinstance(r, dict)]


def controller_of(obj: Json) -> Json | None:
    """The ownerReference with ``controller: true``, if any."""
    return next((r for r in references(obj) if r.get("controller") is True), None)


def controlled_by(obj: Json, owner: Json) -> bool:
    ref = controller_of(obj)
    return ref is not None and ref.get("uid") == uid(owner)


def reference_to(owner: Json, kind: cluster.Kind) -> Json:
    """The controller reference a dependent of ``owner`` carries."""
    return {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "name": metadata(owner)["name"],
        "uid": uid(owner),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def parse_time(text: object) -> float | None:
    """Seconds since the epoch of an RFC 3339 timestamp (``2024-05-01T10:00:00Z``)."""
    if not isinstance(text, str) or len(text) < 19:
        return None
    try:
        return float(calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def rfc3339(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


# --- label selectors ------------------------------------------------------------------


def selector_matches(selector: object, labels: Mapping[str, str]) -> bool:
    """Match a ``LabelSelector`` (matchLabels, matchExpressions). A missing or empty selector
    selects nothing here: a controller with one would otherwise claim every object."""
    if not isinstance(selector, dict):
        return False
    match_labels = selector.get("matchLabels") or {}
    expressions = [e for e in selector.get("matchExpressions") or [] if isinstance(e, dict)]
    if not match_labels and not expressions:
        return False
    if any(labels.get(key) != value for key, value in match_labels.items()):
        return False
    for expression in expressions:
        key = str(expression.get("key", ""))
        values = [str(v) for v in expression.get("values") or []]
        operator = expression.get("operator")
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


def labels_of(obj: Json) -> dict[str, str]:
    labels = metadata(obj).get("labels")
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


# --- pods -------------------------------------------------------------------------------


def pod_active(pod: Json) -> bool:
    """Counted by its controller: not finished and not being deleted (FilterActivePods)."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not being_deleted(pod)


def ready_since(pod: Json) -> float | None:
    """When the pod's Ready condition last became True, or None when it is not ready."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            if condition.get("status") != "True":
                return None
            return parse_time(condition.get("lastTransitionTime")) or 0.0
    return None


def pod_available(pod: Json, min_ready_seconds: int, now: float) -> bool:
    """Ready for at least ``min_ready_seconds``."""
    since = ready_since(pod)
    if since is None:
        return False
    return min_ready_seconds <= 0 or since + min_ready_seconds <= now


# --- adoption and release ---------------------------------------------------------------


def claim(
    api: cluster.Cluster,
    owner: Json,
    owner_kind: cluster.Kind,
    candidates: list[Json],
    dependent_kind: cluster.Kind,
) -> list[Json]:
    """The candidates ``owner`` controls after adopting matching orphans and releasing
    dependents its selector no longer matches (candidates are in the owner's namespace)."""
    selector = (owner.get("spec") or {}).get("selector")
    owned: list[Json] = []
    for candidate in candidates:
        ref = controller_of(candidate)
        matches = selector_matches(selector, labels_of(candidate))
        name = str(metadata(candidate).get("name"))
        namespace = str(metadata(candidate).get("namespace", ""))
        if ref is not None:
            if ref.get("uid") != uid(owner):
                continue
            if matches:
                owned.append(candidate)
            elif not being_deleted(owner):
                release = {
                    "metadata": {
                        "ownerReferences": [{"$patch": "delete", "uid": uid(owner)}],
                        "uid": uid(candidate),
                    }
                }
                _patch_ignoring_gone(api, dependent_kind, namespace, name, release)
            continue
        if not matches or being_deleted(owner) or being_deleted(candidate):
            continue
        adopt = {
            "metadata": {
                "ownerReferences": [reference_to(owner, owner_kind)],
                "uid": uid(candidate),
            }
        }
        adopted = _patch_ignoring_gone(api, dependent_kind, namespace, name, adopt)
        if adopted is not None:
            owned.append(adopted)
    return owned


def owners_concerned(
    old: Json | None,
    new: Json | None,
    owner_kind: cluster.Kind,
    owners: Callable[[str], list[Json]],
    *,
    adoptable: Callable[[Json], bool] = lambda dependent: True,
) -> list[tuple[str, str]]:
    """The owners, as (namespace, name), that a dependent's event concerns: the controller
    of its old and of its new state when it is an ``owner_kind``, and for a new orphan that
    is ``adoptable``, each of ``owners(namespace)`` whose selector matches it (may adopt it)."""
    concerned: list[tuple[str, str]] = []
    for dependent in (old, new):
        if dependent is None:
            continue
        namespace = str(metadata(dependent).get("namespace", ""))
        ref = controller_of(dependent)
        if ref is not None:
            if ref.get("kind") == owner_kind.kind:
                concerned.append((namespace, str(ref.get("name"))))
        elif dependent is new and adoptable(dependent):
            labels = labels_of(dependent)
            for owner in owners(namespace):
                if selector_matches((owner.get("spec") or {}).get("selector"), labels):
                    concerned.append((namespace, str(metadata(owner).get("name", ""))))
    return concerned


def _patch_ignoring_gone(
    api: cluster.Cluster, kind: cluster.Kind, namespace: str, name: str, patch: Json
) -> Json | None:
    try:
        return api.patch(kind, namespace, name, patch, content_type=cluster.STRATEGIC_MERGE_PATCH)
    except errors.ApiError as exc:
        if exc.not_found:
            return None
        raise
