"""Pod status documents as the kubelet writes them through the ``pods/status`` subresource.

``podworker`` sends these as JSON merge patches ``{"status": ...}``. Lists (conditions,
container statuses) are always sent whole, so a merge patch and a strategic merge patch give
the same result. Conditions owned by other components (``PodScheduled``, readiness gates,
``DisruptionTarget``) are carried over, and a condition keeps its ``lastTransitionTime`` while
its status does not change, as the kubelet's status manager does. Pure functions.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from vnpu_sandbox.kubelet import resourcename

Json = dict[str, Any]

KUBELET_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
REJECTED_PREFIX = "Pod was rejected: "


def timestamp(moment: datetime | None = None) -> str:
    """RFC 3339 in UTC with second precision, as Kubernetes serialises ``metav1.Time``."""
    return (moment or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _quantity(value: object) -> Decimal | None:
    try:
        return resourcename.quantity(value)
    except ValueError:
        return None


def qos_class(pod: Json) -> str:
    """BestEffort, Burstable or Guaranteed, from cpu and memory requests and limits."""
    spec = pod.get("spec") or {}
    containers = list(spec.get("initContainers") or []) + list(spec.get("containers") or [])
    any_set = False
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        for name in ("cpu", "memory"):
            request, limit = requests.get(name), limits.get(name)
            if request is not None or limit is not None:
                any_set = True
            if limit is None or (request is not None and _quantity(request) != _quantity(limit)):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def merge_conditions(existing: list[Json], updates: list[Json], now: str) -> list[Json]:
    """Existing conditions with ``updates`` applied by type; transition time kept when unchanged."""
    by_type = {str(c.get("type")): dict(c) for c in existing}
    for update in updates:
        old = by_type.get(str(update["type"]))
        merged = {"lastProbeTime": None, **update}
        if old is not None and old.get("status") == update["status"]:
            merged["lastTransitionTime"] = old.get("lastTransitionTime") or now
        else:
            merged["lastTransitionTime"] = now
        by_type[str(update["type"])] = merged
    return list(by_type.values())


def _condition(kind: str, status: bool, reason: str = "", message: str = "") -> Json:
    out: Json = {"type": kind, "status": "True" if status else "False"}
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


def container_id(pod_uid: str, container: str) -> str:
    digest = hashlib.sha256(f"{pod_uid}/{container}".encode()).hexdigest()
    return f"containerd://{digest}"


def _image_id(image: str) -> str:
    return f"{image}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def _container_status(pod_uid: str, container: Json, state: Json, *, ready: bool) -> Json:
    name = str(container.get("name", ""))
    image = str(container.get("image", ""))
    status: Json = {
        "name": name,
        "image": image,
        "imageID": _image_id(image),
        "ready": ready,
        "restartCount": 0,
        "started": "running" in state,
        "state": state,
        "lastState": {},
    }
    if "waiting" not in state:
        status["containerID"] = container_id(pod_uid, name)
    return status


def _meta(pod: Json) -> tuple[str, Json, Json]:
    meta = pod.get("metadata") or {}
    return str(meta.get("uid", "")), pod.get("spec") or {}, pod.get("status") or {}


def running(pod: Json, host_ip: str, pod_ip: str, started: str) -> Json:
    """Every container running and ready; init containers completed (sidecars running)."""
    uid, spec, old = _meta(pod)
    inits = []
    for container in spec.get("initContainers") or []:
        if container.get("restartPolicy") == "Always":
            inits.append(
                _container_status(uid, container, {"running": {"startedAt": started}}, ready=True)
            )
            continue
        done = {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": started}
        done["containerID"] = container_id(uid, str(container.get("name", "")))
        inits.append(_container_status(uid, container, {"terminated": done}, ready=True))
    regular = [
        _container_status(uid, c, {"running": {"startedAt": started}}, ready=True)
        for c in spec.get("containers") or []
    ]
    ip = host_ip if spec.get("hostNetwork") else pod_ip
    conditions = [
        _condition("PodReadyToStartContainers", True),
        _condition("Initialized", True),
        _condition("Ready", True),
        _condition("ContainersReady", True),
    ]
    status: Json = {
        "phase": "Running",
        "conditions": merge_conditions(old.get("conditions") or [], conditions, started),
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": old.get("startTime") or started,
        "qosClass": qos_class(pod),
        "containerStatuses": regular,
    }
    if inits:
        status["initContainerStatuses"] = inits
    return status


def rejected(pod: Json, reason: str, message: str) -> Json:
    """The kubelet's rejectPod: Failed, the admission reason, ``Pod was rejected: <message>``."""
    _, _, old = _meta(pod)
    kept = [c for c in old.get("conditions") or [] if c.get("type") not in KUBELET_CONDITIONS]
    return {
        "phase": "Failed",
        "reason": reason,
        "message": REJECTED_PREFIX + message,
        "qosClass": qos_class(pod),
        "conditions": kept,
    }


def start_failed(
    pod: Json, host_ip: str, container: str, reason: str, message: str, now: str
) -> Json:
    """Admitted but ``container`` cannot be created: Pending, that container waiting with ``reason``."""
    uid, spec, old = _meta(pod)
    statuses = []
    for item in list(spec.get("initContainers") or []) + list(spec.get("containers") or []):
        name = str(item.get("name", ""))
        waiting: Json = (
            {"reason": reason, "message": message}
            if name == container
            else {"reason": "PodInitializing"}
        )
        statuses.append(_container_status(uid, item, {"waiting": waiting}, ready=False))
    names = " ".join(str(c.get("name", "")) for c in spec.get("containers") or [])
    not_ready = f"containers with unready status: [{names}]"
    conditions = [
        _condition("PodReadyToStartContainers", True),
        _condition("Initialized", True),
        _condition("Ready", False, "ContainersNotReady", not_ready),
        _condition("ContainersReady", False, "ContainersNotReady", not_ready),
    ]
    regular_names = {str(c.get("name", "")) for c in spec.get("containers") or []}
    return {
        "phase": "Pending",
        "conditions": merge_conditions(old.get("conditions") or [], conditions, now),
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "startTime": old.get("startTime") or now,
        "qosClass": qos_class(pod),
        "containerStatuses": [s for s in statuses if s["name"] in regular_names],
        "initContainerStatuses": [s for s in statuses if s["name"] not in regular_names],
    }


def creating(pod: Json, host_ip: str, now: str) -> Json:
    """Admitted, containers not created yet (DRA resources not prepared): Pending, every
    container waiting in ``ContainerCreating`` (init containers in ``PodInitializing``), no
    sandbox, as the kubelet reports a pod whose sandbox it could not create yet."""
    uid, spec, old = _meta(pod)
    inits = list(spec.get("initContainers") or [])
    regular = list(spec.get("containers") or [])
    waiting = "PodInitializing" if inits else "ContainerCreating"
    statuses = [
        _container_status(uid, item, {"waiting": {"reason": "PodInitializing"}}, ready=False)
        for item in inits
    ] + [
        _container_status(uid, item, {"waiting": {"reason": waiting}}, ready=False)
        for item in regular
    ]
    names = " ".join(str(c.get("name", "")) for c in regular)
    not_ready = f"containers with unready status: [{names}]"
    incomplete = " ".join(str(c.get("name", "")) for c in inits)
    conditions = [
        _condition("PodReadyToStartContainers", False),
        _condition(
            "Initialized",
            not inits,
            "ContainersNotInitialized" if inits else "",
            f"containers with incomplete status: [{incomplete}]" if inits else "",
        ),
        _condition("Ready", False, "ContainersNotReady", not_ready),
        _condition("ContainersReady", False, "ContainersNotReady", not_ready),
    ]
    regular_names = {str(c.get("name", "")) for c in regular}
    return {
        "phase": "Pending",
        "conditions": merge_conditions(old.get("conditions") or [], conditions, now),
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "startTime": old.get("startTime") or now,
        "qosClass": qos_class(pod),
        "containerStatuses": [s for s in statuses if s["name"] in regular_names],
        "initContainerStatuses": [s for s in statuses if s["name"] not in regular_names],
    }


def completed(pod: Json, exit_code: int, now: str) -> Json:
    """Every container terminated with ``exit_code``: Succeeded when 0, otherwise Failed."""
    uid, spec, old = _meta(pod)
    started_at = old.get("startTime") or now
    reason = "Completed" if exit_code == 0 else "Error"
    statuses = []
    for container in spec.get("containers") or []:
        name = str(container.get("name", ""))
        state = {
            "terminated": {
                "exitCode": exit_code,
                "reason": reason,
                "startedAt": started_at,
                "finishedAt": now,
                "containerID": container_id(uid, name),
            }
        }
        statuses.append(_container_status(uid, container, state, ready=False))
    conditions = [
        _condition("PodReadyToStartContainers", False),
        _condition("Ready", False, "PodCompleted"),
        _condition("ContainersReady", False, "PodCompleted"),
    ]
    return {
        "phase": "Succeeded" if exit_code == 0 else "Failed",
        "conditions": merge_conditions(old.get("conditions") or [], conditions, now),
        "containerStatuses": statuses,
    }
