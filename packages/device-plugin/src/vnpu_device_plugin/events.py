"""Events the device plugin records on pods, as ``kubectl describe pod`` shows them.

``allocations`` records a Warning when it fails a pod it identified (``GrantConflict``,
``InvalidName``, ``DecisionTooSmall``); ``placement`` records a Normal event when it decided
for a pod bound without a decision (``PlacedByDevicePlugin``) and a Warning when it could
not (``NotPlacedByDevicePlugin``). Every event names the plugin as its source
(``vnpu-device-plugin``, host: the node). Best effort: an event the API refuses is logged
(``event_not_recorded``) and the caller goes on, since the answer to kubelet says it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

import structlog

from vnpu_device_plugin import cluster
from vnpu_service import kubeapi

log = structlog.get_logger(__name__)
SOURCE = "vnpu-device-plugin"
MESSAGE_LIMIT = 1024  # characters of an event's message kept


def body(
    pod: Mapping[str, Any],
    node: str,
    kind: Literal["Normal", "Warning"],
    reason: str,
    message: str,
    now: datetime,
) -> dict[str, Any]:
    """A core/v1 Event about ``pod`` (a dict as the API returns it), from this node's plugin."""
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta.get('name', 'pod')}.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": namespace,
            "name": meta.get("name"),
            "uid": meta.get("uid"),
        },
        "reason": reason,
        "message": message[:MESSAGE_LIMIT],
        "type": kind,
        "source": {"component": SOURCE, "host": node},
        "reportingComponent": SOURCE,
        "reportingInstance": node,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def record(
    api: cluster.Cluster,
    node: str,
    pod: Mapping[str, Any],
    kind: Literal["Normal", "Warning"],
    reason: str,
    message: str,
) -> None:
    """Create the event (``body``) in the pod's namespace; a refusal is only logged."""
    event = body(pod, node, kind, reason, message, datetime.now(UTC))
    try:
        api.create_event(str(event["metadata"]["namespace"]), event)
    except kubeapi.ApiError as exc:
        log.warning("event_not_recorded", reason=reason, error=str(exc))
