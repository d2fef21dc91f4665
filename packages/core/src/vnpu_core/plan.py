"""The capacity planner behind ``vnpu plan``: place a workload's pods on a cluster.

``place`` takes the nodes and pods read by ``vnpu_core.planfiles`` and schedules the pods
in file order the way kube-scheduler does with the vnpu extender as its only extender:
``allocator.fit`` on every node, the highest score wins, ties go to the first node name.
A placement is recorded by writing the bind annotations (``binding.bind_annotations``)
and ``spec.nodeName`` onto the simulated pod and rebuilding that node's usage with
``ledger.node_usage``, so the plan goes through the same wire path as a real cluster. A
pod no node takes gets the most common reason code and a kube-scheduler style message.

``place`` then runs the workload again with every NPU container turned into whole chips,
on hard-mode copies of the cluster's nodes plus as many fresh copies of its node shapes
as needed: the chips the same workload holds without sharing. Pure and deterministic;
``vnpu_core.cli`` renders the ``Plan``.

With quotas (ResourceQuota objects among the workload's manifests, or teams from
``vnpu_core.tenants``), each pod's ask (``holdings.of_request``) is checked first with
``quotas.check`` against what the pods placed so far hold (read back from their bind
annotations with ``holdings.of_bound_pod``), as the scheduler's filter does; a refused pod
is not placed. ``Plan.quota`` then reports, per team and unit and per ResourceQuota limit,
what the workload asked, the nominal and the limit, what it holds, what it borrows, and
whether every pod fitted.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vnpu_core import (
    allocator,
    binding,
    budgets,
    catalog,
    holdings,
    inventory,
    ledger,
    planfiles,
    protocol,
    quotas,
    requests,
    tenants,
)


@dataclass(frozen=True, slots=True)
class Placement:
    pod: str
    namespace: str
    assignment: allocator.Assignment
    pinned: str | None = None  # the template the pod pins (``vnpu.io/template``)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A pod no node takes: the most common reason code and a kube-scheduler style message."""

    pod: str
    namespace: str
    reason: budgets.Reason
    message: str


@dataclass(frozen=True, slots=True)
class NodeReport:
    """What one node holds at the end of the plan."""

    name: str
    model: str
    server: str
    soft: bool
    chips: int
    chips_used: int
    whole_chips: int
    vnpus: int
    soft_slices: int
    pods: int


@dataclass(frozen=True, slots=True)
class Summary:
    """Totals of the plan, and what the same workload needs with whole-chip scheduling."""

    pods: int
    placed: int
    rejected: int
    chips_used: int
    chips_total: int
    whole_chip_chips: int
    whole_chip_pods: int
    whole_chip_nodes: int
    whole_chip_extra_nodes: int
    over_quota: int = 0  # pods a quota refused (not placed, not in ``rejected``)


@dataclass(frozen=True, slots=True)
class QuotaRefusal:
    """A pod a quota refused, with every limit its ask would pass."""

    pod: str
    namespace: str
    refusals: tuple[quotas.Refusal, ...]

    @property
    def message(self) -> str:
        return "; ".join(r.message for r in self.refusals)


@dataclass(frozen=True, slots=True)
class TeamRow:
    """One team and unit: what the workload asked, nominal, limit, held, borrowed, fitted."""

    team: str
    unit: str
    asked: int  # every pod of the team's namespaces in the workload, placed or not
    nominal: int
    limit: int | None  # nominal + borrowingLimit; None: no borrowing limit
    used: int  # what the placed pods hold
    borrowed: int  # used above nominal
    fits: bool  # no pod refused by this team and unit


@dataclass(frozen=True, slots=True)
class QuotaRow:
    """One ResourceQuota limit: what the workload asked in its namespace, the limit, held."""

    quota: str  # namespace/name
    resource: str
    asked: int
    limit: int
    used: int
    fits: bool


@dataclass(frozen=True, slots=True)
class QuotaReport:
    refused: tuple[QuotaRefusal, ...]
    teams: tuple[TeamRow, ...]
    quotas: tuple[QuotaRow, ...]


@dataclass(frozen=True, slots=True)
class Plan:
    policy: requests.Policy
    placements: tuple[Placement, ...]
    refusals: tuple[Refusal, ...]
    nodes: tuple[NodeReport, ...]
    summary: Summary
    notes: tuple[str, ...]
    quota: QuotaReport | None = None  # None when no quota was given


# --- placement --------------------------------------------------------------------------


class _Simulation:
    """Nodes, the pods bound to each, and each node's usage as the ledger reads it back."""

    def __init__(self, nodes: Sequence[inventory.Node], models: catalog.Catalog) -> None:
        self.models = models
        self.nodes: dict[str, inventory.Node] = {}
        self.bound: dict[str, list[dict[str, Any]]] = {}
        self.usage: dict[str, dict[str, inventory.ChipUsage]] = {}
        for node in nodes:
            self.add(node)

    def add(self, node: inventory.Node) -> None:
        self.nodes[node.name] = node
        self.bound[node.name] = []
        self.usage[node.name] = {}

    def fit(
        self, request: requests.PodRequest, policy: requests.Policy
    ) -> tuple[allocator.Assignment | None, list[allocator.Rejection]]:
        """The winning assignment (highest score, then node name) and every node's rejection.

        Empty nodes of one shape give the same answer, so only the first by name is asked:
        a later one cannot win a tie, and its rejection is the first one's under its name.
        Pods with UUID lists are asked on every node (the lists name single chips).
        """
        best: allocator.Assignment | None = None
        rejections: list[allocator.Rejection] = []
        by_shape: dict[tuple[object, ...], allocator.Rejection | None] = {}
        shared = not (request.use_uuids or request.no_use_uuids)
        for name in sorted(self.nodes):
            node = self.nodes[name]
            shape = _shape_key(node) if shared and not self.bound[name] else None
            if shape is not None and shape in by_shape:
                first = by_shape[shape]
                if first is not None:
                    rejections.append(dataclasses.replace(first, node=name))
                continue
            outcome = allocator.fit(node, self.usage[name], request, policy)
            if isinstance(outcome, allocator.Rejection):
                rejections.append(outcome)
            elif best is None or outcome.score > best.score:
                best = outcome
            if shape is not None:
                by_shape[shape] = outcome if isinstance(outcome, allocator.Rejection) else None
        return best, rejections

    def bind(self, pod: Mapping[str, Any], assignment: allocator.Assignment) -> dict[str, Any]:
        """Write the bind annotations and nodeName onto a copy of the pod; re-read the node."""
        bound = copy.deepcopy(dict(pod))
        bound["metadata"].setdefault("annotations", {}).update(
            binding.bind_annotations(assignment, 0)
        )
        bound["spec"]["nodeName"] = assignment.node
        pods = self.bound[assignment.node]
        pods.append(bound)
        read = ledger.node_usage(pods, assignment.node, self.models)
        if read.problems:  # our own annotations must always read back
            raise RuntimeError(f"bind annotations did not read back: {read.problems[0].error}")
        self.usage[assignment.node] = read.usage
        return bound

    def report(self, name: str) -> NodeReport:
        node = self.nodes[name]
        held = [self.usage[name].get(c.uuid, inventory.IDLE) for c in node.chips]
        return NodeReport(
            name=name,
            model=node.chips[0].model.name,
            server=node.topology.kind.value,
            soft=node.soft,
            chips=len(node.chips),
            chips_used=sum(1 for u in held if not u.idle),
            whole_chips=sum(1 for u in held if u.exclusive and not u.soft_slices),
            vnpus=sum(u.vnpus for u in held),
            soft_slices=sum(u.soft_slices for u in held),
            pods=len(self.bound[name]),
        )


def _shape_key(node: inventory.Node) -> tuple[object, ...]:
    """What an empty node's answer depends on: its chips, their health, server and mode."""
    chips = tuple(
        (c.model.common_word, c.healthy, c.slots, c.memory_mib, c.network_id) for c in node.chips
    )
    return (chips, node.topology, node.soft)


def refusal_reason(
    rejections: Sequence[allocator.Rejection], nodes: int
) -> tuple[budgets.Reason, str]:
    """The telling reason code and a kube-scheduler style summary of every node's reason.

    Nodes are grouped by reason code, largest group first; each group shows the message of
    its first node by name: ``0/3 nodes are available: 2 <message>, 1 <message>.`` The code
    is the largest group's, except that nodes without the chip model only decide it when
    no node has the model: why the right nodes refused is what a person needs to see.
    """
    groups: dict[budgets.Reason, list[allocator.Rejection]] = {}
    for rejection in sorted(rejections, key=lambda r: r.node):
        groups.setdefault(rejection.reason, []).append(rejection)
    order = list(budgets.Reason)
    ranked = sorted(groups.items(), key=lambda item: (-len(item[1]), order.index(item[0])))
    parts = ", ".join(f"{len(group)} {group[0].message}" for _, group in ranked)
    telling: list[budgets.Reason] = [
        code for code, _ in ranked if code is not budgets.Reason.NO_DEVICE
    ]
    return (telling or [ranked[0][0]])[0], f"0/{nodes} nodes are available: {parts}."


def _whole_chip_request(request: requests.PodRequest) -> requests.PodRequest:
    """The same pod without sharing: every NPU container takes ``count`` whole chips."""
    whole = tuple(
        dataclasses.replace(
            r,
            count=requests.super_pod_count(r.model, r.container, r.count)[0],
            whole=True,
            soft=False,
            templates=(),
            pinned=False,
            core_percent=0,
            memory_mib=r.model.memory_allocatable_mib,
        )
        for r in request.requests
    )
    return dataclasses.replace(
        request, requests=whole, soft=False, use_uuids=None, no_use_uuids=None
    )


def _without_soft_mode(pod: Mapping[str, Any]) -> dict[str, Any]:
    plain = copy.deepcopy(dict(pod))
    plain["metadata"].get("annotations", {}).pop(protocol.VNPU_MODE_KEY, None)
    return plain


def _shape(node: inventory.Node, name: str) -> inventory.Node:
    """An empty hard-mode node called ``name`` with the chips and server of ``node``.

    The chips keep their registered numbers and NetworkIDs, so the copy has the same rings,
    pairs and NetworkID groups as the original.
    """
    chips = tuple(
        dataclasses.replace(c, uuid=f"{name}-{c.model.common_word}-{c.index}", healthy=True)
        for c in node.chips
    )
    return inventory.Node(name, chips, node.topology, soft=False)


def whole_chip_need(
    nodes: Sequence[inventory.Node],
    pods: Sequence[planfiles.WorkloadPod],
    models: catalog.Catalog,
    policy: requests.Policy,
) -> tuple[int, int, int, int]:
    """Chips held, pods placed, nodes used and nodes added when nothing is shared.

    The pods are placed in order on hard-mode copies of the cluster's nodes; when no node
    takes a pod, a fresh copy of each distinct node shape is tried and the best one added.
    A pod that fits no empty shape is left out (it fits nowhere with or without sharing).
    """
    simulation = _Simulation([_shape(n, n.name) for n in nodes], models)
    shapes: dict[tuple[object, ...], inventory.Node] = {}
    for node in nodes:
        numbers = tuple((c.number, c.network_id) for c in node.chips)
        key = (node.chips[0].model.name, node.topology.kind.value, numbers)
        shapes.setdefault(key, node)
    added = 0
    placed = 0
    for pod in pods:
        request = _whole_chip_request(pod.request)
        best, _ = simulation.fit(request, policy)
        if best is None:
            trial = _Simulation(
                [_shape(n, f"{n.name}+{added + 1}") for n in shapes.values()], models
            )
            best, _ = trial.fit(request, policy)
            if best is None:
                continue
            simulation.add(trial.nodes[best.node])
            added += 1
        simulation.bind(_without_soft_mode(pod.obj), best)
        placed += 1
    reports = [simulation.report(name) for name in simulation.nodes]
    chips = sum(r.whole_chips for r in reports)
    used = sum(1 for r in reports if r.pods)
    return chips, placed, used, added


def _quota_report(
    refused: Sequence[QuotaRefusal],
    asked: Mapping[str, holdings.Amount],
    usage: Mapping[str, holdings.Amount],
    resource_quotas: Sequence[quotas.ResourceQuota],
    teams: tenants.Tenants,
) -> QuotaReport:
    failed = {(r.rule, r.quota, r.resource) for q in refused for r in q.refusals}
    by_team = quotas.team_usage(teams, asked)
    named = {t.name: {*t.nominal, *t.borrowing_limit} for t in teams.teams}
    team_rows = tuple(
        TeamRow(
            s.team,
            s.key.name,
            by_team[s.team][s.key],
            s.nominal,
            s.limit,
            s.used,
            s.borrowed,
            not any((rule, s.team, s.key.name) in failed for rule in quotas.Rule),
        )
        for s in quotas.team_standings(teams, usage)
        if s.key in named[s.team] or s.used or by_team[s.team][s.key]
    )
    quota_rows = tuple(
        QuotaRow(
            s.quota,
            s.resource,
            asked.get(s.namespace, holdings.ZERO)[s.key],
            s.limit,
            s.used,
            (quotas.Rule.RESOURCE_QUOTA, s.quota, s.resource) not in failed,
        )
        for s in quotas.quota_standings(resource_quotas, usage)
    )
    return QuotaReport(tuple(refused), team_rows, quota_rows)


def place(
    cluster: planfiles.Cluster,
    workload: planfiles.Workload,
    models: catalog.Catalog,
    policy: requests.Policy = requests.Policy.DEFAULT,
    teams: tenants.Tenants | None = None,
) -> Plan:
    """Schedule the workload's pods in order on the cluster and compare with whole chips.

    With ``teams`` or ResourceQuotas in the workload, each pod must pass ``quotas.check``
    before it is placed, and the plan carries a ``QuotaReport``.
    """
    simulation = _Simulation(cluster.nodes, models)
    placements: list[Placement] = []
    refusals: list[Refusal] = []
    with_quota = teams is not None or bool(workload.quotas)
    cohort = teams or tenants.NONE
    asked: dict[str, holdings.Amount] = {}
    usage: dict[str, holdings.Amount] = {}
    over_quota: list[QuotaRefusal] = []
    for pod in workload.pods:
        request = pod.request
        namespace = request.namespace
        if with_quota:
            ask = holdings.of_request(request)
            asked[namespace] = asked.get(namespace, holdings.ZERO).plus(ask)
            refused = quotas.check(ask, namespace, usage, workload.quotas, cohort)
            if refused:
                over_quota.append(QuotaRefusal(request.name, namespace, refused))
                continue
        best, rejections = simulation.fit(request, policy)
        if best is None:
            reason, message = refusal_reason(rejections, len(cluster.nodes))
            refusals.append(Refusal(request.name, namespace, reason, message))
            continue
        bound = simulation.bind(pod.obj, best)
        placements.append(Placement(request.name, namespace, best, request.template))
        if with_quota:
            held = holdings.of_bound_pod(bound, models)
            usage[namespace] = usage.get(namespace, holdings.ZERO).plus(held)
    nodes = tuple(simulation.report(n.name) for n in cluster.nodes)
    chips, whole_pods, whole_nodes, extra = whole_chip_need(
        cluster.nodes, workload.pods, models, policy
    )
    summary = Summary(
        pods=len(workload.pods),
        placed=len(placements),
        rejected=len(refusals),
        chips_used=sum(r.chips_used for r in nodes),
        chips_total=sum(r.chips for r in nodes),
        whole_chip_chips=chips,
        whole_chip_pods=whole_pods,
        whole_chip_nodes=whole_nodes,
        whole_chip_extra_nodes=extra,
        over_quota=len(over_quota),
    )
    notes = cluster.notes + workload.notes
    report = (
        _quota_report(over_quota, asked, usage, workload.quotas, cohort) if with_quota else None
    )
    return Plan(policy, tuple(placements), tuple(refusals), nodes, summary, notes, report)
