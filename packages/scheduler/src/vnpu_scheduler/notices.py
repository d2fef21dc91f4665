"""Pods that ask for NPUs in a way vnpu will not place: what to tell their owners.

Two kinds would otherwise wait silently, Pending with at best "Insufficient huawei.com/npu":

* a container asking for an NPU resource vnpu does not schedule: Volcano's and MindCluster's
  ``huawei.com/npu``, ``huawei.com/npu-core``, the generic ``huawei.com/Ascend910``, or a chip
  model the device config does not name;
* a pod asking for vnpu's NPU resources that names another scheduler (``schedulerName:
  volcano``): vnpu-scheduler never sees it, and it waits for that scheduler.

``webhook`` returns these as admission warnings (kubectl prints them); ``app`` records each as
one Event on the pod once it exists (``kubectl describe pod`` shows it), both naming the fix.
Pure: the callers pass the pod and the chip models.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vnpu_core import catalog, requests
from vnpu_core import errors as core_errors

PREFIX = "huawei.com/"
REASON = "NPURequestNotForVnpu"
DEFAULT_SCHEDULER = "default-scheduler"
Json = Mapping[str, Any]


def _containers(pod: Json) -> list[Json]:
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def _asked(container: Json) -> set[str]:
    resources = container.get("resources") or {}
    return {
        str(name)
        for section in ("limits", "requests")
        for name in (resources.get(section) or {})
        if str(name).startswith(PREFIX)
    }


def _words(models: catalog.Catalog) -> str:
    names = [m.resource_name for m in models]
    return ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")


def notices(pod: Json, models: catalog.Catalog, scheduler_name: str) -> tuple[str, ...]:
    """What keeps vnpu from placing ``pod``, one sentence each with the fix; () when nothing."""
    found: list[str] = []
    for container in _containers(pod):
        unknown = sorted(n for n in _asked(container) if models.by_resource(n) is None)
        for name in unknown:
            found.append(
                f"container {container.get('name', '')!r} asks for {name}, which vnpu does not "
                f"schedule: vnpu reads huawei.com/<chip model> ({_words(models)}), with "
                "huawei.com/<chip model>-memory for a vNPU; `vnpu convert` rewrites Volcano "
                "and HAMi manifests (docs/convert.md)"
            )
    named = str((pod.get("spec") or {}).get("schedulerName") or "")
    if named in ("", DEFAULT_SCHEDULER, scheduler_name):
        return tuple(found)
    try:
        wants = requests.from_pod(pod, models).wants_npu
    except core_errors.RequestError:
        wants = True  # a malformed request still asks for NPUs
    if wants:
        found.append(
            f"spec.schedulerName is {named!r}: vnpu-scheduler does not place this pod, which "
            f"asks for vnpu's NPU resources, and it waits for {named} (Pending for good if "
            f"{named} does not run in this cluster); remove spec.schedulerName and vnpu's "
            f"webhook sets {scheduler_name} (`vnpu convert` does it for Volcano manifests)"
        )
    return tuple(found)
