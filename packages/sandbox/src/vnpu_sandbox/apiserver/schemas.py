"""JSON types of the fields the emulator reads, checked as the real server's typed decoding does.

kube-apiserver decodes every body into Go structs, so ``"spec": "x"`` or ``"limits": [1]``
is a 400 before anything else runs. The emulator keeps objects as JSON; ``codec`` (create
and update bodies), ``registry`` (patch results) and ``admission`` (mutated objects) call
``check`` so that a wrongly typed field the server, kubectl or a client reads is refused the
same way instead of failing later, after ``without_nulls`` has dropped null members (the
zero value in Go; a null list item where an object or string is expected is refused, which
Go would have decoded to a zero value). Fields the emulator never reads are stored unchecked.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from vnpu_sandbox.apiserver import errors

OBJECT, ARRAY, STRING, INTEGER, BOOLEAN = "object", "array", "string", "integer", "boolean"
_GO_TYPES = {
    OBJECT: "map[string]interface {}",
    ARRAY: "[]interface {}",
    STRING: "string",
    INTEGER: "int64",
    BOOLEAN: "bool",
}

_META: tuple[tuple[str, str], ...] = (
    ("metadata", OBJECT),
    ("metadata.name", STRING),
    ("metadata.generateName", STRING),
    ("metadata.namespace", STRING),
    ("metadata.uid", STRING),
    ("metadata.resourceVersion", STRING),
    ("metadata.labels", OBJECT),
    ("metadata.annotations", OBJECT),
    ("metadata.finalizers", ARRAY),
    ("metadata.finalizers[]", STRING),
    ("metadata.ownerReferences", ARRAY),
    ("metadata.ownerReferences[]", OBJECT),
    ("metadata.generation", INTEGER),
    ("metadata.deletionGracePeriodSeconds", INTEGER),
    ("metadata.creationTimestamp", STRING),
    ("metadata.deletionTimestamp", STRING),
)
_CONTAINERS = tuple(
    (f"spec.{group}{field}", kind)
    for group in ("containers", "initContainers", "ephemeralContainers")
    for field, kind in (
        ("", ARRAY),
        ("[]", OBJECT),
        ("[].name", STRING),
        ("[].image", STRING),
        ("[].resources", OBJECT),
        ("[].resources.limits", OBJECT),
        ("[].resources.requests", OBJECT),
        ("[].ports", ARRAY),
        ("[].ports[]", OBJECT),
        ("[].env", ARRAY),
        ("[].env[]", OBJECT),
    )
)
_SHAPES: dict[str, tuple[tuple[str, str], ...]] = {
    "Pod": (
        ("spec", OBJECT),
        *_CONTAINERS,
        ("spec.nodeName", STRING),
        ("spec.schedulerName", STRING),
        ("spec.restartPolicy", STRING),
        ("spec.serviceAccountName", STRING),
        ("spec.hostNetwork", BOOLEAN),
        ("spec.terminationGracePeriodSeconds", INTEGER),
        ("spec.activeDeadlineSeconds", INTEGER),
        ("spec.priority", INTEGER),
        ("spec.tolerations", ARRAY),
        ("spec.tolerations[]", OBJECT),
        ("spec.schedulingGates", ARRAY),
        ("status", OBJECT),
        ("status.phase", STRING),
        ("status.podIP", STRING),
        ("status.nominatedNodeName", STRING),
        ("status.conditions", ARRAY),
        ("status.conditions[]", OBJECT),
        ("status.containerStatuses", ARRAY),
        ("status.conditions[].type", STRING),
        ("status.conditions[].status", STRING),
        ("status.reason", STRING),
        ("status.containerStatuses[]", OBJECT),
        ("status.containerStatuses[].ready", BOOLEAN),
        ("status.containerStatuses[].restartCount", INTEGER),
        ("status.containerStatuses[].state", OBJECT),
        ("status.containerStatuses[].state.waiting", OBJECT),
        ("status.containerStatuses[].state.waiting.reason", STRING),
        ("status.containerStatuses[].state.terminated", OBJECT),
        ("status.containerStatuses[].state.terminated.reason", STRING),
    ),
    "Node": (
        ("spec", OBJECT),
        ("spec.unschedulable", BOOLEAN),
        ("spec.taints", ARRAY),
        ("spec.taints[]", OBJECT),
        ("status", OBJECT),
        ("status.capacity", OBJECT),
        ("status.allocatable", OBJECT),
        ("status.conditions", ARRAY),
        ("status.conditions[]", OBJECT),
        ("status.conditions[].type", STRING),
        ("status.conditions[].status", STRING),
        ("status.addresses", ARRAY),
        ("status.addresses[]", OBJECT),
        ("status.addresses[].type", STRING),
        ("status.addresses[].address", STRING),
        ("status.nodeInfo", OBJECT),
        *(
            (f"status.nodeInfo.{f}", STRING)
            for f in ("kubeletVersion", "osImage", "kernelVersion", "containerRuntimeVersion")
        ),
    ),
    "Namespace": (
        ("spec", OBJECT),
        ("spec.finalizers", ARRAY),
        ("status", OBJECT),
        ("status.phase", STRING),
    ),
    "ConfigMap": (("data", OBJECT), ("binaryData", OBJECT), ("immutable", BOOLEAN)),
    "Event": (
        ("involvedObject", OBJECT),
        *(
            (f"involvedObject.{f}", STRING)
            for f in ("kind", "name", "namespace", "uid", "fieldPath")
        ),
        ("source", OBJECT),
        ("source.component", STRING),
        ("source.host", STRING),
        ("lastTimestamp", STRING),
        ("firstTimestamp", STRING),
        ("eventTime", STRING),
        ("reason", STRING),
        ("message", STRING),
        ("type", STRING),
        ("count", INTEGER),
    ),
    "Lease": (
        ("spec", OBJECT),
        ("spec.holderIdentity", STRING),
        ("spec.leaseDurationSeconds", INTEGER),
        ("spec.leaseTransitions", INTEGER),
    ),
    "Binding": (("target", OBJECT), ("target.name", STRING), ("target.kind", STRING)),
    "ResourceQuota": (
        ("spec", OBJECT),
        ("spec.hard", OBJECT),
        ("spec.scopes", ARRAY),
        ("spec.scopes[]", STRING),
        ("spec.scopeSelector", OBJECT),
        ("status", OBJECT),
        ("status.hard", OBJECT),
        ("status.used", OBJECT),
    ),
}
_WEBHOOKS = (
    ("webhooks", ARRAY),
    ("webhooks[]", OBJECT),
    ("webhooks[].name", STRING),
    ("webhooks[].clientConfig", OBJECT),
    ("webhooks[].clientConfig.url", STRING),
    ("webhooks[].clientConfig.caBundle", STRING),
    ("webhooks[].clientConfig.service", OBJECT),
    ("webhooks[].rules", ARRAY),
    ("webhooks[].rules[]", OBJECT),
    *(
        (f"webhooks[].rules[].{f}", ARRAY)
        for f in ("operations", "apiGroups", "apiVersions", "resources")
    ),
    *(
        (f"webhooks[].{selector}{field}", kind)
        for selector in ("namespaceSelector", "objectSelector")
        for field, kind in (
            ("", OBJECT),
            (".matchLabels", OBJECT),
            (".matchExpressions", ARRAY),
            (".matchExpressions[]", OBJECT),
            (".matchExpressions[].key", STRING),
            (".matchExpressions[].operator", STRING),
            (".matchExpressions[].values", ARRAY),
        )
    ),
    ("webhooks[].failurePolicy", STRING),
    ("webhooks[].timeoutSeconds", INTEGER),
    ("webhooks[].admissionReviewVersions", ARRAY),
)
_SHAPES["MutatingWebhookConfiguration"] = _WEBHOOKS
_SHAPES["ValidatingWebhookConfiguration"] = _WEBHOOKS
_WORKLOAD = (
    ("spec", OBJECT),
    ("spec.replicas", INTEGER),
    ("spec.minReadySeconds", INTEGER),
    ("spec.selector", OBJECT),
    ("spec.selector.matchLabels", OBJECT),
    ("spec.selector.matchExpressions", ARRAY),
    ("spec.selector.matchExpressions[]", OBJECT),
    ("spec.selector.matchExpressions[].key", STRING),
    ("spec.selector.matchExpressions[].operator", STRING),
    ("spec.selector.matchExpressions[].values", ARRAY),
    ("spec.template", OBJECT),
    ("spec.template.metadata", OBJECT),
    ("spec.template.metadata.labels", OBJECT),
    ("spec.template.metadata.annotations", OBJECT),
    ("spec.template.spec", OBJECT),
    *((f"spec.template.{path}", kind) for path, kind in _CONTAINERS),
    ("spec.template.spec.restartPolicy", STRING),
    ("spec.template.spec.schedulerName", STRING),
    ("spec.template.spec.nodeName", STRING),
    ("spec.template.spec.terminationGracePeriodSeconds", INTEGER),
    ("status", OBJECT),
    *(
        (f"status.{field}", INTEGER)
        for field in (
            "replicas",
            "readyReplicas",
            "availableReplicas",
            "updatedReplicas",
            "fullyLabeledReplicas",
            "observedGeneration",
            "collisionCount",
        )
    ),
    ("status.conditions", ARRAY),
    ("status.conditions[]", OBJECT),
    ("status.conditions[].type", STRING),
    ("status.conditions[].status", STRING),
)
_SHAPES["ReplicaSet"] = _WORKLOAD
_SHAPES["Deployment"] = (
    *_WORKLOAD,
    ("spec.strategy", OBJECT),
    ("spec.strategy.type", STRING),
    ("spec.strategy.rollingUpdate", OBJECT),
    ("spec.revisionHistoryLimit", INTEGER),
    ("spec.progressDeadlineSeconds", INTEGER),
    ("spec.paused", BOOLEAN),
)
_SHAPES["Scale"] = (("spec", OBJECT), ("spec.replicas", INTEGER))
# Maps whose values must be strings, beyond the object's own labels and annotations.
_STRING_MAPS = (
    "spec.template.metadata.labels",
    "spec.template.metadata.annotations",
    "spec.selector.matchLabels",
)


def _type_of(value: object) -> str:
    if isinstance(value, bool):
        return BOOLEAN
    if isinstance(value, int):
        return INTEGER
    if isinstance(value, str):
        return STRING
    if isinstance(value, list):
        return ARRAY
    if value is None:
        return "null"
    return OBJECT if isinstance(value, dict) else "number"


# How Go's decoder names the JSON value it could not store.
_JSON_NAMES = {
    "null": "null",
    BOOLEAN: "bool",
    INTEGER: "number",
    "number": "number",
    STRING: "string",
    ARRAY: "array",
    OBJECT: "object",
}


def _values(node: Any, parts: list[str]) -> Iterator[Any]:
    """Every value at a dotted path; ``name[]`` steps into each item of a list."""
    if not parts:
        yield node
        return
    part, rest = parts[0], parts[1:]
    each = part.endswith("[]")
    key = part[:-2] if each else part
    if not isinstance(node, dict) or node.get(key) is None:
        return
    value = node[key]
    if each:
        if isinstance(value, list):
            for item in value:
                yield from _values(item, rest)
    else:
        yield from _values(value, rest)


def without_nulls(value: Any) -> Any:
    """``value`` with every ``null`` member of an object removed, as a Go decode and encode
    round trip leaves it (a null struct field is the zero value, which is omitted)."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def _refuse(
    kind: str, api_version: str, value: object, field: str, expected: str
) -> errors.BadRequest:
    version = api_version.rsplit("/", 1)[-1]
    return errors.BadRequest(
        f'{kind} in version "{version}" cannot be handled as a {kind}: json: cannot unmarshal '
        f"{_JSON_NAMES[_type_of(value)]} into Go struct field {kind}.{field} of type {_GO_TYPES[expected]}"
    )


def check(kind: str, api_version: str, obj: dict[str, Any]) -> None:
    """Raise ``BadRequest`` for the first field whose JSON type the real struct would refuse."""
    for path, expected in (*_META, *_SHAPES.get(kind, ())):
        parts = path.replace("[].", "[]/").replace(".", "/").split("/")
        for value in _values(obj, parts):
            if _type_of(value) != expected:  # a null left here is a list item: refused
                raise _refuse(kind, api_version, value, path.replace("[]", ""), expected)
    metadata = obj.get("metadata")
    for field in ("labels", "annotations"):
        strings = metadata.get(field) if isinstance(metadata, dict) else None
        for value in (strings or {}).values():
            if not isinstance(value, str):
                raise _refuse(kind, api_version, value, f"metadata.{field}", STRING)
    if kind in ("Deployment", "ReplicaSet"):
        for path in _STRING_MAPS:
            for strings in _values(obj, path.split(".")):
                for value in (strings or {}).values():
                    if not isinstance(value, str):
                        raise _refuse(kind, api_version, value, path, STRING)
