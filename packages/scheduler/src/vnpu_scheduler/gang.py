"""Gang members: which pods belong to a PodGroup, and the reservation vnpu keeps for each.

kube-scheduler (``GenericWorkload``, GangScheduling) places a PodGroup's members in one
cycle and binds none until ``minCount`` are placed. It calls the extender's filter once per
member, and the extender cannot see the members kube-scheduler has already placed but not
bound: left alone, each member would be given the same free chips, the binds would find them
taken one after another, and part of the gang would start holding chips while the rest
waits. So the filter places each member itself: it passes one node, the best, and reserves
the member's request there (``inflight.InFlight.reserve``) until its bind, so the next
member (and every other pod) is fitted behind it. Across replicas the reservation travels
in the pod's annotation ``vnpu.io/reserved`` (``<node> <unix expiry>``), which every
replica's pod watch reads. A reservation whose gang never binds (the cycle found too few
places) ends at its expiry, or when the member is filtered again.

Pure: the callers read and write the pods.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

RESERVED_KEY = "vnpu.io/reserved"
"""Pod annotation: ``<node> <expiry as unix seconds>``, written by the filter of a gang member."""

Json = Mapping[str, Any]


def group_of(pod: Json) -> str:
    """``namespace/podGroupName`` of a gang member, '' for any other pod."""
    spec = pod.get("spec") or {}
    group = (spec.get("schedulingGroup") or {}).get("podGroupName")
    if not isinstance(group, str) or not group:
        return ""
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    return f"{namespace}/{group}"


def encode(node: str, expiry: float) -> str:
    return f"{node} {math.ceil(expiry)}"


def decode(value: object) -> tuple[str, float] | None:
    """(node, expiry) of a ``vnpu.io/reserved`` value; None when it is not one."""
    if not isinstance(value, str):
        return None
    parts = value.split()
    if len(parts) != 2 or not parts[1].isdigit():
        return None
    return parts[0], float(parts[1])


def reserved(pod: Json) -> tuple[str, float] | None:
    """The reservation an unbound pod's annotation carries; None when bound or absent."""
    if (pod.get("spec") or {}).get("nodeName"):
        return None
    return decode(((pod.get("metadata") or {}).get("annotations") or {}).get(RESERVED_KEY))
