"""The JSON shapes of the Kubernetes objects the scheduler reads, checked before anything reads them.

``wire`` calls ``check`` on every parsed body: the pod of ``ExtenderArgs`` and of an
AdmissionReview against ``POD``, each node of ``Nodes.items`` against ``NODE``. Only the
fields some part of the scheduler (or ``vnpu_core``) reads are described, with the JSON type
their Go type in ``k8s.io/api/core/v1`` decodes from: strings, booleans, integers, maps of
strings, quantities (a string or a number), lists of objects. Other fields are not looked
at, as Go's decoder ignores what its type does not name. ``null`` stands for an absent field
(Go decodes it as the zero value) but not for a map value or a list item.

The first value of the wrong type raises ``errors.BadRequest`` with its JSON path
(``Pod.spec.containers.0.resources.limits["huawei.com/Ascend310P"]``), the value and what was
expected, so the code behind it never meets a number where it expects an object.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vnpu_scheduler import errors

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class Scalar:
    """A JSON string, boolean, integer or quantity (string or number)."""

    kind: str  # "string", "boolean", "integer" or "quantity"


@dataclass(frozen=True, slots=True)
class MapOf:
    """A JSON object whose every value has the shape ``value`` (Go: ``map[string]T``)."""

    value: Shape


@dataclass(frozen=True, slots=True)
class ListOf:
    """A JSON array whose every item has the shape ``item``."""

    item: Shape


@dataclass(frozen=True, slots=True)
class Fields:
    """A JSON object whose named members, when present, have the given shapes (a Go struct)."""

    members: Mapping[str, Shape]


Shape = Scalar | MapOf | ListOf | Fields

TEXT = Scalar("string")
FLAG = Scalar("boolean")
WHOLE = Scalar("integer")
QUANTITY = Scalar("quantity")
LABELS = MapOf(TEXT)

_REQUIREMENT = Fields({"key": TEXT, "operator": TEXT, "values": ListOf(TEXT)})
_TERM = Fields({"matchExpressions": ListOf(_REQUIREMENT), "matchFields": ListOf(_REQUIREMENT)})
_CONTAINER = Fields(
    {
        "name": TEXT,
        "restartPolicy": TEXT,
        "resources": Fields({"limits": MapOf(QUANTITY), "requests": MapOf(QUANTITY)}),
        "securityContext": Fields({"privileged": FLAG}),
    }
)

POD = Fields(
    {
        "apiVersion": TEXT,
        "kind": TEXT,
        "metadata": Fields(
            {
                "name": TEXT,
                "generateName": TEXT,
                "namespace": TEXT,
                "uid": TEXT,
                "resourceVersion": TEXT,
                "deletionTimestamp": TEXT,
                "labels": LABELS,
                "annotations": LABELS,
            }
        ),
        "spec": Fields(
            {
                "containers": ListOf(_CONTAINER),
                "initContainers": ListOf(_CONTAINER),
                "nodeName": TEXT,
                "schedulerName": TEXT,
                "nodeSelector": LABELS,
                "affinity": Fields(
                    {
                        "nodeAffinity": Fields(
                            {
                                "requiredDuringSchedulingIgnoredDuringExecution": Fields(
                                    {"nodeSelectorTerms": ListOf(_TERM)}
                                )
                            }
                        )
                    }
                ),
                "tolerations": ListOf(
                    Fields(
                        {
                            "key": TEXT,
                            "operator": TEXT,
                            "value": TEXT,
                            "effect": TEXT,
                            "tolerationSeconds": WHOLE,
                        }
                    )
                ),
            }
        ),
        "status": Fields({"phase": TEXT}),
    }
)
"""The parts of a v1.Pod that the extender, the binder and the webhook read."""

NODE = Fields(
    {
        "apiVersion": TEXT,
        "kind": TEXT,
        "metadata": Fields(
            {"name": TEXT, "resourceVersion": TEXT, "labels": LABELS, "annotations": LABELS}
        ),
        "spec": Fields(
            {
                "unschedulable": FLAG,
                "taints": ListOf(Fields({"key": TEXT, "value": TEXT, "effect": TEXT})),
            }
        ),
        "status": Fields({"allocatable": MapOf(QUANTITY), "capacity": MapOf(QUANTITY)}),
    }
)
"""The parts of a v1.Node that the node reader and the placement rules read."""


def member(path: str, key: str) -> str:
    """The JSON path of member ``key`` under ``path``: ``a.b``, or ``a["huawei.com/x"]``."""
    if _NAME.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _scalar_ok(kind: str, value: object) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


_EXPECTED = {
    "string": "a string",
    "boolean": "a boolean",
    "integer": "an integer",
    "quantity": "a quantity (a string or a number)",
}


def check(value: object, shape: Shape, path: str, nullable: bool = True) -> None:
    """Raise ``errors.BadRequest`` at the first value under ``path`` that ``shape`` refuses."""
    stack: list[tuple[object, Shape, str, bool]] = [(value, shape, path, nullable)]
    while stack:
        item, want, where, may_be_null = stack.pop()
        if item is None and may_be_null:
            continue
        if isinstance(want, Scalar):
            if not _scalar_ok(want.kind, item):
                raise errors.BadRequest(
                    where, item, f"must be {_EXPECTED[want.kind]}, not {_type_name(item)}"
                )
        elif isinstance(want, ListOf):
            if not isinstance(item, list):
                raise errors.BadRequest(where, item, f"must be an array, not {_type_name(item)}")
            for index in reversed(range(len(item))):
                stack.append((item[index], want.item, f"{where}.{index}", False))
        elif not isinstance(item, dict):
            raise errors.BadRequest(where, item, f"must be an object, not {_type_name(item)}")
        elif isinstance(want, MapOf):
            for key in reversed(list(item)):
                stack.append((item[key], want.value, member(where, key), False))
        else:
            for key in reversed(list(want.members)):
                if key in item:
                    stack.append((item[key], want.members[key], member(where, key), True))


def check_object(value: Any, shape: Shape, path: str) -> None:
    """Like ``check``, but ``value`` itself must be present (an object, not null)."""
    check(value, shape, path, nullable=False)
