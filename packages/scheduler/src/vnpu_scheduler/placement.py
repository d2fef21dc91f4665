"""Whether a pod may run on a node at all: nodeSelector, required node affinity, taints.

``binder`` calls ``refusal`` before it takes a node lock, so a bind can never place a pod
where kube-scheduler's own filters (NodeAffinity, TaintToleration, NodeUnschedulable)
would not have: whoever calls ``/bind``, the node must satisfy

* every ``spec.nodeSelector`` label exactly;
* one of the ``nodeSelectorTerms`` of ``requiredDuringSchedulingIgnoredDuringExecution``
  (each term: all its ``matchExpressions`` on labels and ``matchFields`` on
  ``metadata.name``; operators In, NotIn, Exists, DoesNotExist, Gt, Lt);
* a toleration for each of its ``NoSchedule`` and ``NoExecute`` taints, and for
  ``node.kubernetes.io/unschedulable`` when the node is cordoned (``spec.unschedulable``).

The objects have the shapes ``shapes.POD`` and ``shapes.NODE`` describe (the pod from a
checked request or the API, the node from the API). Pure; the answer is a sentence naming
what failed, or '' when the pod may go there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Json = Mapping[str, Any]
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
_HARD_EFFECTS = ("NoSchedule", "NoExecute")


def _labels(node: Json) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get("labels") or {}


def _whole(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _matches(requirement: Json, value: str | None) -> bool:
    """One selector requirement against a label's (or field's) value, None when absent."""
    operator = requirement.get("operator") or ""
    values = requirement.get("values") or []
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(values) == 1:
        have, bound = _whole(value), _whole(str(values[0]))
        if have is None or bound is None:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False  # an unknown operator selects nothing, as kube-scheduler's parser refuses it


def _term_matches(term: Json, node: Json) -> bool:
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False  # an empty term selects no node
    labels = _labels(node)
    name = str((node.get("metadata") or {}).get("name") or "")
    for requirement in expressions:
        if not _matches(requirement, labels.get(str(requirement.get("key") or ""))):
            return False
    for requirement in fields:
        key = requirement.get("key")
        if key != "metadata.name" or not _matches(requirement, name):
            return False
    return True


def _tolerates(tolerations: list[Json], taint: Json) -> bool:
    for toleration in tolerations:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or "Equal"
        if operator == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif (
            operator == "Equal"
            and key == taint.get("key")
            and (toleration.get("value") or "") == (taint.get("value") or "")
        ):
            return True
    return False


def _taints(node: Json) -> list[Json]:
    spec = node.get("spec") or {}
    taints = [t for t in spec.get("taints") or [] if t.get("effect") in _HARD_EFFECTS]
    if spec.get("unschedulable") and not any(t.get("key") == UNSCHEDULABLE_TAINT for t in taints):
        taints.append({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"})
    return taints


def refusal(pod: Json, node: Json) -> str:
    """Why ``pod`` may not run on ``node`` (a sentence), or '' when nothing forbids it."""
    spec = pod.get("spec") or {}
    name = str((node.get("metadata") or {}).get("name") or "")
    labels = _labels(node)
    for key, wanted in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != wanted:
            have = labels.get(key)
            shown = "no such label" if have is None else f"it has {key}={have}"
            return f"node {name} does not match the pod's nodeSelector {key}={wanted} ({shown})"
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if terms is not None and not any(_term_matches(term, node) for term in terms):
        return f"node {name} matches none of the pod's required node affinity terms"
    tolerations = spec.get("tolerations") or []
    for taint in _taints(node):
        if not _tolerates(tolerations, taint):
            key, value, effect = taint.get("key"), taint.get("value") or "", taint.get("effect")
            shown = f"{key}={value}:{effect}" if value else f"{key}:{effect}"
            return f"node {name} has the taint {shown}, which the pod does not tolerate"
    return ""
