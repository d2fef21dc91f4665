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
    """A JSON string, boolean, integer or quantity (string or number): the Python types it may be."""

    types: frozenset[type]
    expected: str  # for the message: "a string"


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

TEXT = Scalar(frozenset({str}), "a string")
FLAG = Scalar(frozenset({bool}), "a boolean")
WHOLE = Scalar(frozenset({int}), "an integer")
QUANTITY = Scalar(frozenset({str, int, float}), "a quantity (a string or a number)")
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


class _Wrong(Exception):
    """A value of the wrong type, and the path to it (innermost step first) as it unwinds."""

    def __init__(self, value: object, problem: str) -> None:
        super().__init__(problem)
        self.value = value
        self.problem = problem
        self.steps: list[str | int] = []


def _walk(value: object, shape: Shape) -> None:
    """Raise ``_Wrong`` at the first value ``shape`` refuses (``value`` is not None here).

    Recursion follows the shape (a dozen levels), not the document. Lists and maps of
    scalars are checked in one pass over their types; the path is built only on the way out
    of an error, so a well-formed body costs no string work.
    """
    kind = type(value)
    if type(shape) is Scalar:
        if kind not in shape.types:
            raise _Wrong(value, f"must be {shape.expected}, not {_type_name(value)}")
        return
    if type(shape) is ListOf:
        if kind is not list:
            raise _Wrong(value, f"must be an array, not {_type_name(value)}")
        items: list[Any] = value  # type: ignore[assignment]
        inner = shape.item
        if type(inner) is Scalar and set(map(type, items)) <= inner.types:
            return
        for index, item in enumerate(items):
            try:
                _walk(item, inner)
            except _Wrong as wrong:
                wrong.steps.append(index)
                raise
        return
    if kind is not dict:
        raise _Wrong(value, f"must be an object, not {_type_name(value)}")
    members: dict[str, Any] = value  # type: ignore[assignment]
    if type(shape) is MapOf:
        inner = shape.value
        if type(inner) is Scalar and set(map(type, members.values())) <= inner.types:
            return
        for key, item in members.items():
            try:
                _walk(item, inner)
            except _Wrong as wrong:
                wrong.steps.append(key)
                raise
        return
    assert type(shape) is Fields
    for key, wanted in shape.members.items():
        found = members.get(key)
        if found is None:  # absent and null are the zero value
            continue
        try:
            _walk(found, wanted)
        except _Wrong as wrong:
            wrong.steps.append(key)
            raise


def check(value: object, shape: Shape, path: str, nullable: bool = True) -> None:
    """Raise ``errors.BadRequest`` at the first value under ``path`` that ``shape`` refuses."""
    if value is None and nullable:
        return
    try:
        _walk(value, shape)
    except _Wrong as wrong:
        where = path
        for step in reversed(wrong.steps):
            where = f"{where}.{step}" if isinstance(step, int) else member(where, step)
        raise errors.BadRequest(where, wrong.value, wrong.problem) from None


def check_object(value: Any, shape: Shape, path: str) -> None:
    """Like ``check``, but ``value`` itself must be present (an object, not null)."""
    check(value, shape, path, nullable=False)
