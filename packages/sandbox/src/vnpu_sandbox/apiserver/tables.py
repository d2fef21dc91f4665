"""Server-side printing: the ``Table`` objects ``kubectl get`` asks for, one row per object.

``routes`` answers with ``to_table`` when a GET or watch request's ``Accept`` header asks for
``as=Table`` (kubectl always does), so ``kubectl get pods`` prints READY, STATUS, NODE and
the rest as it does against a real cluster. Columns and cell wording follow the real
server's printers for the types served here; ages are rendered as kubectl shows them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from vnpu_sandbox.apiserver import resources, selectors

Json = dict[str, Any]
Row = list[Any]


def human_duration(seconds: float) -> str:
    """Age text as kubectl prints it: 5s, 3m20s, 15m, 2h10m, 3d4h, 2y30d..."""
    if seconds < -1:
        return "<invalid>"
    seconds = max(int(seconds), 0)
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        rest = seconds % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        rest = hours % 24
        return f"{days}d{rest}h" if rest else f"{days}d"
    if days < 730:
        return f"{days}d"
    years, rest = days // 365, days % 365
    return f"{years}y{rest}d" if days < 2920 and rest else f"{years}y"


def _age(timestamp: object, now: float) -> str:
    if not isinstance(timestamp, str) or not timestamp:
        return "<unknown>"
    try:
        then = datetime.strptime(timestamp[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return "<unknown>"
    return human_duration(now - then.timestamp())


def _column(name: str, kind: str = "string", priority: int = 0, fmt: str = "") -> Json:
    return {"name": name, "type": kind, "format": fmt, "description": name, "priority": priority}


def _name(obj: Json) -> str:
    return str(obj["metadata"]["name"])


def _created(obj: Json, now: float) -> str:
    return _age(obj["metadata"].get("creationTimestamp"), now)


def _pod_status(pod: Json) -> str:
    status = pod.get("status") or {}
    reason = str(status.get("reason") or status.get("phase") or "Unknown")
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        waiting, terminated = state.get("waiting") or {}, state.get("terminated") or {}
        if waiting.get("reason"):
            reason = str(waiting["reason"])
        elif terminated.get("reason"):
            reason = str(terminated["reason"])
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    return reason


def _pod_row(pod: Json, now: float) -> Row:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    return [
        _name(pod),
        f"{ready}/{len(spec.get('containers') or [])}",
        _pod_status(pod),
        restarts,
        _created(pod, now),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        "<none>",
    ]


def _node_row(node: Json, now: float) -> Row:
    status = node.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    state = "Unknown" if ready is None else "Ready" if ready.get("status") == "True" else "NotReady"
    if (node.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    prefix = "node-role.kubernetes.io/"
    labels = node["metadata"].get("labels") or {}
    roles = sorted(k[len(prefix) :] for k in labels if k.startswith(prefix))
    info = status.get("nodeInfo") or {}
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    return [
        _name(node),
        state,
        ",".join(roles) or "<none>",
        _created(node, now),
        info.get("kubeletVersion") or "",
        addresses.get("InternalIP") or "<none>",
        addresses.get("ExternalIP") or "<none>",
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


def _event_row(event: Json, now: float) -> Row:
    involved = event.get("involvedObject") or {}
    source = event.get("source") or {}
    last = (
        event.get("lastTimestamp")
        or event.get("eventTime")
        or event["metadata"].get("creationTimestamp")
    )
    first = (
        event.get("firstTimestamp")
        or event.get("eventTime")
        or event["metadata"].get("creationTimestamp")
    )
    return [
        _age(last, now),
        event.get("type") or "",
        event.get("reason") or "",
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        involved.get("fieldPath") or "",
        ", ".join(str(v) for v in (source.get("component"), source.get("host")) if v)
        or event.get("reportingComponent")
        or "",
        str(event.get("message") or "").strip(),
        _age(first, now),
        int(event.get("count") or 1),
        _name(event),
    ]


def _workload_cells(obj: Json) -> Row:
    """CONTAINERS, IMAGES and SELECTOR, the wide columns of deployments and replicasets."""
    spec = obj.get("spec") or {}
    template = (spec.get("template") or {}).get("spec") or {}
    containers = [c for c in template.get("containers") or [] if isinstance(c, dict)]
    return [
        ",".join(str(c.get("name", "")) for c in containers),
        ",".join(str(c.get("image", "")) for c in containers),
        selectors.label_selector_text(spec.get("selector")),
    ]


def _deployment_row(deployment: Json, now: float) -> Row:
    spec, status = deployment.get("spec") or {}, deployment.get("status") or {}
    return [
        _name(deployment),
        f"{int(status.get('readyReplicas') or 0)}/{int(spec.get('replicas') or 0)}",
        int(status.get("updatedReplicas") or 0),
        int(status.get("availableReplicas") or 0),
        _created(deployment, now),
        *_workload_cells(deployment),
    ]


def _replica_set_row(replica_set: Json, now: float) -> Row:
    spec, status = replica_set.get("spec") or {}, replica_set.get("status") or {}
    return [
        _name(replica_set),
        int(spec.get("replicas") or 0),
        int(status.get("replicas") or 0),
        int(status.get("readyReplicas") or 0),
        _created(replica_set, now),
        *_workload_cells(replica_set),
    ]


def _quota_row(quota: Json, now: float) -> Row:
    """AGE, then ``name: used/hard`` of each resource of ``status.hard``, limits apart."""
    status = quota.get("status") or {}
    hard, used = status.get("hard") or {}, status.get("used") or {}
    requests: list[str] = []
    limits: list[str] = []
    for name in sorted(hard):
        column = limits if name.split(".", 1)[0] == "limits" and "." in name else requests
        column.append(f"{name}: {used.get(name, '0')}/{hard[name]}")
    return [_name(quota), _created(quota, now), ", ".join(requests), ", ".join(limits)]


_NAME = _column("Name", fmt="name")
_WIDE_WORKLOAD = [
    _column("Containers", priority=1),
    _column("Images", priority=1),
    _column("Selector", priority=1),
]
_AGE = _column("Age")
_PRINTERS: dict[str, tuple[list[Json], Callable[[Json, float], Row]]] = {
    "Pod": (
        [
            _NAME,
            _column("Ready"),
            _column("Status"),
            _column("Restarts", "integer"),
            _AGE,
            _column("IP", priority=1),
            _column("Node", priority=1),
            _column("Nominated Node", priority=1),
            _column("Readiness Gates", priority=1),
        ],
        _pod_row,
    ),
    "Node": (
        [
            _NAME,
            _column("Status"),
            _column("Roles"),
            _AGE,
            _column("Version"),
            _column("Internal-IP", priority=1),
            _column("External-IP", priority=1),
            _column("OS-Image", priority=1),
            _column("Kernel-Version", priority=1),
            _column("Container-Runtime", priority=1),
        ],
        _node_row,
    ),
    "Namespace": (
        [_NAME, _column("Status"), _AGE],
        lambda o, now: [_name(o), (o.get("status") or {}).get("phase", ""), _created(o, now)],
    ),
    "ConfigMap": (
        [_NAME, _column("Data", "integer"), _AGE],
        lambda o, now: [
            _name(o),
            len(o.get("data") or {}) + len(o.get("binaryData") or {}),
            _created(o, now),
        ],
    ),
    "Event": (
        [
            _column("Last Seen"),
            _column("Type"),
            _column("Reason"),
            _column("Object"),
            _column("Subobject", priority=1),
            _column("Source", priority=1),
            _column("Message"),
            _column("First Seen", priority=1),
            _column("Count", "integer", priority=1),
            _column("Name", priority=1, fmt="name"),
        ],
        _event_row,
    ),
    "Deployment": (
        [
            _NAME,
            _column("Ready"),
            _column("Up-to-date", "integer"),
            _column("Available", "integer"),
            _AGE,
            *_WIDE_WORKLOAD,
        ],
        _deployment_row,
    ),
    "ReplicaSet": (
        [
            _NAME,
            _column("Desired", "integer"),
            _column("Current", "integer"),
            _column("Ready", "integer"),
            _AGE,
            *_WIDE_WORKLOAD,
        ],
        _replica_set_row,
    ),
    "ResourceQuota": ([_NAME, _AGE, _column("Request"), _column("Limit")], _quota_row),
    "Lease": (
        [_NAME, _column("Holder"), _AGE],
        lambda o, now: [
            _name(o),
            (o.get("spec") or {}).get("holderIdentity") or "",
            _created(o, now),
        ],
    ),
}
_WEBHOOKS = (
    [_NAME, _column("Webhooks", "integer"), _AGE],
    lambda o, now: [_name(o), len(o.get("webhooks") or []), _created(o, now)],
)


def _row_object(obj: Json, include: str, api_version: str) -> Json | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": api_version, "metadata": obj["metadata"]}


def to_table(
    resource: resources.Resource,
    objects: list[Json],
    *,
    now: float,
    api_version: str = "meta.k8s.io/v1",
    include_object: str = "Metadata",
    list_metadata: Json | None = None,
) -> Json:
    """A ``meta.k8s.io`` Table of ``objects`` with the real printer's columns for the kind."""
    columns, printer = _PRINTERS.get(resource.kind, _WEBHOOKS)
    rows = []
    for obj in objects:
        row: Json = {"cells": printer(obj, now)}
        shown = _row_object(obj, include_object, api_version)
        if shown is not None:
            row["object"] = shown
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": api_version,
        "metadata": list_metadata or {},
        "columnDefinitions": columns,
        "rows": rows,
    }
