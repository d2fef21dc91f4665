"""The arithmetic of a Deployment's rollout, and its status: pure functions, no API calls.

``deployments`` (the controller) calls these with the Deployment and its ReplicaSets as the
caches hold them: the ``pod-template-hash`` of a template, ``maxSurge``/``maxUnavailable`` in
pods, how far the new ReplicaSet may grow (``new_replicas``) and how far the old ones may
shrink (``scale_down_targets``) as kube-controller-manager's rolling updater computes them,
and the status with its Available, Progressing and ReplicaFailure conditions (``status``),
with the real reasons and messages.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

from vnpu_sandbox.controllers import ownership

Json = dict[str, Any]

HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
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


def without_hash(template: Json) -> Json:
    """A ReplicaSet's template as its Deployment's was: the hash label taken out."""
    plain = copy.deepcopy(template)
    labels = (plain.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(HASH_LABEL, None)
    return plain


def replicas(obj: Json) -> int:
    """``spec.replicas`` (0 when absent)."""
    return int((obj.get("spec") or {}).get("replicas") or 0)


def observed(obj: Json, field: str) -> int:
    """A count the object's status reports (0 when absent)."""
    return int((obj.get("status") or {}).get(field) or 0)


def revision(obj: Json) -> int:
    """The ``deployment.kubernetes.io/revision`` annotation as a number (0 when absent)."""
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
    desired = replicas(deployment)
    surge = _resolve(rolling.get("maxSurge", "25%"), desired, True)
    unavailable = _resolve(rolling.get("maxUnavailable", "25%"), desired, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, min(unavailable, desired)


def condition(kind: str, state: str, reason: str, message: str, now: float) -> Json:
    stamp = ownership.rfc3339(now)
    return {
        "type": kind,
        "status": state,
        "lastUpdateTime": stamp,
        "lastTransitionTime": stamp,
        "reason": reason,
        "message": message,
    }


def set_condition(conditions: list[Json], wanted: Json) -> list[Json]:
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


def new_replicas(deployment: Json, old: list[Json], new: Json | None) -> int:
    """How many pods the new ReplicaSet may have now (NewRSNewReplicas, rolling update)."""
    desired = replicas(deployment)
    current_new = replicas(new) if new is not None else 0
    surge, _ = surge_and_unavailable(deployment)
    total = sum(replicas(rs) for rs in old) + current_new
    if total >= desired + surge:
        return current_new
    return current_new + min(desired + surge - total, desired - current_new)


def scale_down_targets(deployment: Json, new: Json, old: list[Json]) -> dict[str, int]:
    """What each old ReplicaSet (by uid) may be scaled down to now, keeping
    ``replicas - maxUnavailable`` pods available (reconcileOldReplicaSets): first the pods
    that are not available anyway, then available ones, oldest ReplicaSets first."""
    if sum(replicas(rs) for rs in old) == 0:
        return {}
    _, unavailable = surge_and_unavailable(deployment)
    min_available = replicas(deployment) - unavailable
    new_unavailable = replicas(new) - observed(new, "availableReplicas")
    everyone = [*old, new]
    budget = sum(replicas(rs) for rs in everyone) - min_available - new_unavailable
    if budget <= 0:
        return {}
    targets: dict[str, int] = {}
    for replica_set in old:
        if budget <= 0:
            break
        cut = min(replicas(replica_set) - observed(replica_set, "availableReplicas"), budget)
        if cut > 0:
            targets[ownership.uid(replica_set)] = replicas(replica_set) - cut
            budget -= cut
    room = sum(observed(rs, "availableReplicas") for rs in everyone) - min_available
    for replica_set in old:
        if room <= 0:
            break
        current = targets.get(ownership.uid(replica_set), replicas(replica_set))
        cut = min(room, current)
        if cut > 0:
            targets[ownership.uid(replica_set)] = current - cut
            room -= cut
    return {
        uid: target
        for uid, target in targets.items()
        if target != next(replicas(rs) for rs in old if ownership.uid(rs) == uid)
    }


def complete(deployment: Json, state: Json) -> bool:
    """DeploymentComplete: every replica updated and available, the generation observed."""
    desired = replicas(deployment)
    return (
        int(state.get("updatedReplicas") or 0) == desired
        and int(state.get("replicas") or 0) == desired
        and int(state.get("availableReplicas") or 0) == desired
        and int(state.get("observedGeneration") or 0)
        >= int(ownership.metadata(deployment).get("generation") or 0)
    )


def status(
    deployment: Json, new: Json | None, old: list[Json], *, created: bool, now: float
) -> tuple[Json, float | None]:
    """The Deployment's status from its ReplicaSets (calculateStatus and syncRolloutStatus),
    and in how many seconds the progress deadline falls (None: nothing to wait for).
    ``created`` says the new ReplicaSet was created by this sync."""
    before = deployment.get("status") or {}
    everyone = [*old, *([new] if new is not None else [])]
    desired = replicas(deployment)
    _, unavailable_allowed = surge_and_unavailable(deployment)
    available = sum(observed(rs, "availableReplicas") for rs in everyone)
    counts = {
        "observedGeneration": int(ownership.metadata(deployment).get("generation") or 0),
        "replicas": sum(observed(rs, "replicas") for rs in everyone),
        "updatedReplicas": observed(new, "replicas") if new is not None else 0,
        "readyReplicas": sum(observed(rs, "readyReplicas") for rs in everyone),
        "availableReplicas": available,
        "unavailableReplicas": max(sum(replicas(rs) for rs in everyone) - available, 0),
        "collisionCount": observed(deployment, "collisionCount"),
    }
    state: Json = {k: v for k, v in counts.items() if v}  # all omitempty in Go
    conditions = [c for c in before.get("conditions") or [] if isinstance(c, dict)]
    if available >= desired - unavailable_allowed:
        wanted = condition(
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.",
            now,
        )
    else:
        wanted = condition(
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
            now,
        )
    conditions = set_condition(conditions, wanted)
    conditions, again = _progress(deployment, new, state, conditions, created, now)
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
        conditions = set_condition(
            conditions,
            condition(
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
        state["conditions"] = conditions
    return state, again


def _progress(
    deployment: Json,
    new: Json | None,
    state: Json,
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
        wanted = condition(
            "Progressing",
            "True",
            "NewReplicaSetCreated",
            f'Created new replica set "{ownership.metadata(new)["name"]}"',
            now,
        )
        return set_condition(conditions, wanted), float(deadline)
    finished = (
        current is not None
        and current.get("reason") == "NewReplicaSetAvailable"
        and state.get("replicas", 0) == state.get("updatedReplicas", 0)
    )
    if finished:
        return conditions, None
    before = deployment.get("status") or {}
    if complete(deployment, state):
        wanted = condition(
            "Progressing",
            "True",
            "NewReplicaSetAvailable",
            f"{subject} has successfully progressed.",
            now,
        )
        return set_condition(conditions, wanted), None
    old_before = int(before.get("replicas") or 0) - int(before.get("updatedReplicas") or 0)
    old_now = int(state.get("replicas") or 0) - int(state.get("updatedReplicas") or 0)
    progressed = (
        int(state.get("updatedReplicas") or 0) > int(before.get("updatedReplicas") or 0)
        or old_now < old_before
        or int(state.get("readyReplicas") or 0) > int(before.get("readyReplicas") or 0)
        or int(state.get("availableReplicas") or 0) > int(before.get("availableReplicas") or 0)
    )
    if progressed or current is None:
        wanted = condition(
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
        wanted = condition(
            "Progressing",
            "False",
            "ProgressDeadlineExceeded",
            f"{subject} has timed out progressing.",
            now,
        )
        return set_condition(conditions, wanted), None
    return conditions, since + int(deadline) - now + 0.05
