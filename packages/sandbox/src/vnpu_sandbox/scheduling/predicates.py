"""The built-in node filters of kube-scheduler's default profile, with its reason texts.

``scheduler`` reads the pending pod once per cycle (:func:`pod_facts`) and calls :func:`check`
for every node; ``priorities`` reuses the toleration and node-affinity matching. The filters
run in the default profile's order and the first that refuses a node decides its
:class:`Status`, as in kube-scheduler:

1. NodeUnschedulable: ``spec.unschedulable`` unless the pod tolerates
   ``node.kubernetes.io/unschedulable:NoSchedule`` -> ``node(s) were unschedulable``;
2. TaintToleration: the first ``NoSchedule``/``NoExecute`` taint the pod does not tolerate
   (a node that is not Ready carries the not-ready taint, see ``nodeinfo``) ->
   ``node(s) had untolerated taint {key: value}``;
3. NodeAffinity: ``spec.nodeSelector`` and required node affinity (``matchExpressions`` with
   In, NotIn, Exists, DoesNotExist, Gt, Lt; ``matchFields`` on ``metadata.name``) ->
   ``node(s) didn't match Pod's node affinity/selector``;
4. NodePorts: a host port already taken -> ``node(s) didn't have free ports for the requested
   pod ports``;
5. NodeResourcesFit: pods, cpu, memory, ephemeral-storage and every requested extended
   resource except the extenders' ``ignoredByScheduler`` ones -> ``Too many pods``,
   ``Insufficient cpu``, ``Insufficient <resource>`` (one reason per resource short).

The first three are unresolvable (preemption cannot help), the last two are not. Pure code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vnpu_sandbox.scheduling import nodeinfo, podrequests

Json = dict[str, Any]

UNSCHEDULABLE_REASON = "node(s) were unschedulable"
AFFINITY_REASON = "node(s) didn't match Pod's node affinity/selector"
PORTS_REASON = "node(s) didn't have free ports for the requested pod ports"
TOO_MANY_PODS = "Too many pods"


@dataclass(frozen=True)
class Status:
    """Why a node was refused: kube-scheduler's reason texts, and whether preemption could help."""

    reasons: tuple[str, ...]
    unresolvable: bool


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: nodeinfo.Taint) -> bool:
        """``Toleration.ToleratesTaint``: empty effect or key match all, Exists ignores the value."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        return self.operator == "Exists"


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Term:
    """One ``NodeSelectorTerm``: every expression and every field requirement must hold."""

    expressions: tuple[Requirement, ...]
    fields: tuple[Requirement, ...]


@dataclass(frozen=True)
class PodFacts:
    """What the filters and scores read of the pending pod, read once per cycle."""

    demand: podrequests.Demand
    tolerations: tuple[Toleration, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    required: tuple[Term, ...] | None = None
    preferred: tuple[tuple[int, Term], ...] = ()


def _requirements(items: object) -> tuple[Requirement, ...]:
    found = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            values = item.get("values") or []
            found.append(
                Requirement(
                    str(item.get("key") or ""),
                    str(item.get("operator") or ""),
                    tuple(str(v) for v in values) if isinstance(values, list) else (),
                )
            )
    return tuple(found)


def _term(item: object) -> Term:
    if not isinstance(item, dict):
        return Term((), ())
    return Term(_requirements(item.get("matchExpressions")), _requirements(item.get("matchFields")))


def pod_facts(pod: Json, demand: podrequests.Demand) -> PodFacts:
    spec = pod.get("spec") or {}
    tolerations = tuple(
        Toleration(
            str(t.get("key") or ""),
            str(t.get("operator") or "Equal"),
            str(t.get("value") or ""),
            str(t.get("effect") or ""),
        )
        for t in spec.get("tolerations") or []
        if isinstance(t, dict)
    )
    selector = spec.get("nodeSelector") or {}
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required_doc = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    required = None
    if isinstance(required_doc, dict):
        required = tuple(_term(t) for t in required_doc.get("nodeSelectorTerms") or [])
    preferred = []
    for item in node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []:
        if isinstance(item, dict) and isinstance(item.get("weight"), int):
            preferred.append((int(item["weight"]), _term(item.get("preference"))))
    return PodFacts(
        demand=demand,
        tolerations=tolerations,
        node_selector=tuple(sorted((str(k), str(v)) for k, v in selector.items()))
        if isinstance(selector, dict)
        else (),
        required=required,
        preferred=tuple(preferred),
    )


def tolerated(tolerations: tuple[Toleration, ...], taint: nodeinfo.Taint) -> bool:
    return any(t.tolerates(taint) for t in tolerations)


def _integer(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _holds(requirement: Requirement, value: str | None) -> bool:
    """One requirement against a label's value (None: the label is absent)."""
    operator, values = requirement.operator, requirement.values
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt"):
        if value is None or len(values) != 1:
            return False
        have, want = _integer(value), _integer(values[0])
        if have is None or want is None:
            return False
        return have > want if operator == "Gt" else have < want
    return False  # an unknown operator: the term is invalid and matches nothing


def term_matches(term: Term, facts: nodeinfo.NodeFacts) -> bool:
    """A term with no requirement matches nothing; ``matchFields`` knows ``metadata.name`` only."""
    if not term.expressions and not term.fields:
        return False
    for requirement in term.expressions:
        if not _holds(requirement, facts.labels.get(requirement.key)):
            return False
    for requirement in term.fields:
        if requirement.key != "metadata.name" or requirement.operator not in ("In", "NotIn"):
            return False
        if not _holds(requirement, facts.name):
            return False
    return True


def affinity_matches(pod: PodFacts, facts: nodeinfo.NodeFacts) -> bool:
    for key, value in pod.node_selector:
        if facts.labels.get(key) != value:
            return False
    if pod.required is not None:
        return any(term_matches(term, facts) for term in pod.required)
    return True


def _fit_reasons(
    demand: podrequests.Demand, info: nodeinfo.NodeInfo, ignored: frozenset[str]
) -> list[str]:
    """NodeResourcesFit's ``fitsRequest``: one reason per resource that is short."""
    assert info.facts is not None
    allocatable = info.facts.allocatable
    reasons = []
    if info.pod_count + 1 > allocatable.pods:
        reasons.append(TOO_MANY_PODS)
    if demand.requests_nothing():
        return reasons
    if demand.milli_cpu > 0 and demand.milli_cpu > allocatable.milli_cpu - info.milli_cpu:
        reasons.append("Insufficient cpu")
    if demand.memory > 0 and demand.memory > allocatable.memory - info.memory:
        reasons.append("Insufficient memory")
    if (
        demand.ephemeral_storage > 0
        and demand.ephemeral_storage > allocatable.ephemeral_storage - info.ephemeral_storage
    ):
        reasons.append("Insufficient ephemeral-storage")
    for name in sorted(demand.scalars):
        amount = demand.scalars[name]
        if amount == 0 or (podrequests.is_extended(name) and name in ignored):
            continue
        if amount > allocatable.scalars.get(name, 0) - info.scalars.get(name, 0):
            reasons.append(f"Insufficient {name}")
    return reasons


def check(
    pod: PodFacts, info: nodeinfo.NodeInfo, ignored: frozenset[str] = frozenset()
) -> Status | None:
    """None when ``info`` passes every filter, else the first refusing filter's status."""
    facts = info.facts
    assert facts is not None, "only nodes whose Node object is known are checked"
    if facts.unschedulable and not tolerated(
        pod.tolerations, nodeinfo.Taint(nodeinfo.UNSCHEDULABLE, "", "NoSchedule")
    ):
        return Status((UNSCHEDULABLE_REASON,), True)
    for taint in facts.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not tolerated(pod.tolerations, taint):
            return Status((f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}",), True)
    if not affinity_matches(pod, facts):
        return Status((AFFINITY_REASON,), True)
    for port in pod.demand.host_ports:
        if any(port.conflicts(used) for used in info.used_ports):
            return Status((PORTS_REASON,), False)
    reasons = _fit_reasons(pod.demand, info, ignored)
    if reasons:
        return Status(tuple(reasons), False)
    return None
