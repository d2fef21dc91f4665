"""Pod admission as the kubelet's resource allocator does it, for one pod at a time.

``podworker`` calls :func:`allocate` for each new pod, in :func:`admission_order`, then (once
the pod's ResourceClaims are prepared) :func:`pre_start`; :func:`admit` does both. Admission reads
the pod's container limits (init containers first, then regular containers; limits because
extended resources cannot be overcommitted), asks the device manager for the devices, then runs
PreStartContainer where a plugin asked for it. The outcome says what the pod status becomes:

* :class:`Admitted` - the pod starts and runs;
* :class:`Rejected` - phase Failed, reason ``UnexpectedAdmissionError``, message
  ``Pod was rejected: Allocate failed due to <error>, which is unexpected``;
* :class:`StartFailed` - admitted, but a container cannot start (a failed PreStartContainer):
  the pod stays Pending with that container waiting in ``CreateContainerConfigError``.

Resources no plugin ever registered are not device plugin resources: the kubelet leaves them
to the scheduler (cluster-level extended resources such as ``huawei.com/Ascend310P-memory``),
and so does this admission.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from vnpu_sandbox.kubelet import checkpoint, devicemanager, errors, resourcename

UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"
CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"

Json = dict[str, Any]


@dataclass(frozen=True)
class Admitted:
    entries: tuple[checkpoint.Entry, ...]


@dataclass(frozen=True)
class Rejected:
    reason: str
    message: str
    """The kubelet's admission message, without the ``Pod was rejected: `` prefix of the status."""


@dataclass(frozen=True)
class StartFailed:
    container: str
    message: str


Outcome = Admitted | Rejected | StartFailed


def admission_order(pod: Json) -> tuple[datetime, str, str]:
    """Sort key: creation time, then name (then namespace, so the order is total)."""
    meta = pod.get("metadata") or {}
    stamp = meta.get("creationTimestamp") or ""
    try:
        created = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        created = datetime.min.replace(tzinfo=UTC)
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    return created, str(meta.get("name", "")), str(meta.get("namespace", ""))


def pod_request(pod: Json) -> devicemanager.PodRequest:
    """The device manager's view of a pod; ``AdmissionError`` names a limit that is not a count."""
    spec = pod.get("spec") or {}
    containers: list[devicemanager.ContainerRequest] = []
    for kind, init in (("initContainers", True), ("containers", False)):
        for index, container in enumerate(spec.get(kind) or []):
            limits: dict[str, int] = {}
            raw_limits = ((container.get("resources") or {}).get("limits")) or {}
            for resource, value in raw_limits.items():
                try:
                    limits[str(resource)] = resourcename.device_count(value)
                except ValueError as exc:
                    raise errors.AdmissionError(
                        str(resource),
                        f"spec.{kind}[{index}].resources.limits[{resource}]: {exc}",
                    ) from exc
            containers.append(
                devicemanager.ContainerRequest(
                    name=str(container.get("name", "")),
                    limits=limits,
                    init=init,
                    restartable=init and container.get("restartPolicy") == "Always",
                )
            )
    uid = str((pod.get("metadata") or {}).get("uid", ""))
    return devicemanager.PodRequest(uid, tuple(containers))


def rejection(error: errors.AdmissionError) -> Rejected:
    return Rejected(
        UNEXPECTED_ADMISSION_ERROR, f"Allocate failed due to {error}, which is unexpected"
    )


def allocate(pod: Json, devices: devicemanager.DeviceManager) -> Admitted | Rejected:
    """Admission proper: allocate the pod's devices (the kubelet's admit handler)."""
    try:
        return Admitted(tuple(devices.allocate(pod_request(pod))))
    except errors.AdmissionError as exc:
        return rejection(exc)


def pre_start(pod: Json, devices: devicemanager.DeviceManager) -> StartFailed | None:
    """PreStartContainer for every assignment that asks for it, as containers would start."""
    uid = str((pod.get("metadata") or {}).get("uid", ""))
    for entry in devices.entries(uid):
        try:
            devices.pre_start(entry)
        except errors.AdmissionError as exc:
            return StartFailed(entry.container, str(exc))
    return None


def admit(pod: Json, devices: devicemanager.DeviceManager) -> Outcome:
    """Allocate the pod's devices and run its PreStartContainer calls."""
    outcome = allocate(pod, devices)
    if isinstance(outcome, Rejected):
        return outcome
    return pre_start(pod, devices) or outcome
