"""The built-in filters and scores, node by node, and the FitError text (table-driven)."""

from __future__ import annotations

from typing import Any

import pytest

from vnpu_sandbox.scheduling import messages, nodeinfo, podrequests, predicates, priorities

from .conftest import node_object, pod_object

Json = dict[str, Any]
AFFINITY = "node(s) didn't match Pod's node affinity/selector"
U, R = True, False  # unresolvable, resolvable


def info(name: str = "n1", running: list[Json] | None = None, **options: Any) -> nodeinfo.NodeInfo:
    node = nodeinfo.NodeInfo(name)
    node.facts = nodeinfo.parse_node(node_object(name, **options))
    for index, pod in enumerate(running or []):
        node.add(f"uid-{index}", podrequests.demand(pod))
    return node


def facts(spec: Json | None = None, **options: Any) -> predicates.PodFacts:
    pod = pod_object("p", spec=spec, **options)
    return predicates.pod_facts(pod, podrequests.demand(pod))


def required(*expressions: Json, fields: list[Json] | None = None) -> Json:
    term: Json = {"matchExpressions": list(expressions)}
    if fields:
        term["matchFields"] = fields
    selector = {"nodeSelectorTerms": [term]}
    return {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": selector}}
    }


def expr(key: str, operator: str, *values: str) -> Json:
    return {"key": key, "operator": operator, "values": list(values)}


def tolerate(**toleration: str) -> Json:
    return {"tolerations": [toleration]}


def ports(*host_ports: int) -> Json:
    entries = [{"containerPort": p, "hostPort": p} for p in host_ports]
    return {"containers": [{"name": "c", "image": "x", "ports": entries}]}


def status(unresolvable: bool, *reasons: str) -> predicates.Status:
    return predicates.Status(reasons, unresolvable)


TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
TAINTED = "node(s) had untolerated taint {dedicated: gpu}"
CASES: list[tuple[str, predicates.PodFacts, nodeinfo.NodeInfo, predicates.Status | None]] = [
    ("fits", facts(requests={"cpu": "1"}), info(), None),
    ("cordoned", facts(), info(unschedulable=True), status(U, "node(s) were unschedulable")),
    (
        "cordoned but tolerated",
        facts(tolerate(key="node.kubernetes.io/unschedulable", operator="Exists")),
        info(unschedulable=True),
        None,
    ),
    ("tainted", facts(), info(taints=[TAINT]), status(U, TAINTED)),
    (
        "taint tolerated",
        facts(tolerate(key="dedicated", value="gpu", effect="NoSchedule")),
        info(taints=[TAINT]),
        None,
    ),
    (
        "wrong value",
        facts(tolerate(key="dedicated", value="cpu")),
        info(taints=[TAINT]),
        status(U, TAINTED),
    ),
    (
        "wrong effect",
        facts(tolerate(key="dedicated", operator="Exists", effect="NoExecute")),
        info(taints=[TAINT]),
        status(U, TAINTED),
    ),
    ("tolerates all", facts(tolerate(operator="Exists")), info(taints=[TAINT]), None),
    (
        "PreferNoSchedule passes",
        facts(),
        info(taints=[{"key": "k", "effect": "PreferNoSchedule"}]),
        None,
    ),
    (
        "NoExecute refuses",
        facts(),
        info(taints=[{"key": "k", "effect": "NoExecute"}]),
        status(U, "node(s) had untolerated taint {k: }"),
    ),
    (
        "not ready",
        facts(),
        info(ready="False"),
        status(U, "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"),
    ),
    (
        "unknown",
        facts(),
        info(ready="Unknown"),
        status(U, "node(s) had untolerated taint {node.kubernetes.io/unreachable: }"),
    ),
    (
        "not ready, tolerated",
        facts(tolerate(key="node.kubernetes.io/not-ready", operator="Exists")),
        info(ready="False"),
        None,
    ),
    ("nodeSelector", facts({"nodeSelector": {"zone": "a"}}), info(labels={"zone": "a"}), None),
    (
        "nodeSelector misses",
        facts({"nodeSelector": {"zone": "a"}}),
        info(labels={"zone": "b"}),
        status(U, AFFINITY),
    ),
    ("In", facts(required(expr("zone", "In", "a", "b"))), info(labels={"zone": "b"}), None),
    ("In, no label", facts(required(expr("zone", "In", "a"))), info(), status(U, AFFINITY)),
    ("NotIn, no label", facts(required(expr("zone", "NotIn", "a"))), info(), None),
    (
        "NotIn",
        facts(required(expr("zone", "NotIn", "a"))),
        info(labels={"zone": "a"}),
        status(U, AFFINITY),
    ),
    ("Exists", facts(required(expr("gpu", "Exists"))), info(labels={"gpu": ""}), None),
    (
        "DoesNotExist",
        facts(required(expr("gpu", "DoesNotExist"))),
        info(labels={"gpu": ""}),
        status(U, AFFINITY),
    ),
    ("Gt", facts(required(expr("cores", "Gt", "8"))), info(labels={"cores": "16"}), None),
    (
        "Gt, equal",
        facts(required(expr("cores", "Gt", "16"))),
        info(labels={"cores": "16"}),
        status(U, AFFINITY),
    ),
    ("Lt", facts(required(expr("cores", "Lt", "8"))), info(labels={"cores": "4"}), None),
    (
        "Lt, not a number",
        facts(required(expr("cores", "Lt", "8"))),
        info(labels={"cores": "x"}),
        status(U, AFFINITY),
    ),
    ("matchFields", facts(required(fields=[expr("metadata.name", "In", "n1")])), info(), None),
    (
        "matchFields NotIn",
        facts(required(fields=[expr("metadata.name", "NotIn", "n1")])),
        info(),
        status(U, AFFINITY),
    ),
    ("empty term", facts(required()), info(), status(U, AFFINITY)),
    (
        "selector and affinity",
        facts({"nodeSelector": {"zone": "a"}, **required(expr("disk", "In", "ssd"))}),
        info(labels={"zone": "a"}),
        status(U, AFFINITY),
    ),
    (
        "host port taken",
        facts(ports(80)),
        info(running=[pod_object("web", spec=ports(80))]),
        status(R, "node(s) didn't have free ports for the requested pod ports"),
    ),
    ("host port free", facts(ports(81)), info(running=[pod_object("web", spec=ports(80))]), None),
    ("cpu short", facts(requests={"cpu": "2"}), info(cpu="1500m"), status(R, "Insufficient cpu")),
    (
        "cpu used by others",
        facts(requests={"cpu": "2"}),
        info(cpu="4", running=[pod_object("a", requests={"cpu": "2500m"})]),
        status(R, "Insufficient cpu"),
    ),
    (
        "one reason per short resource",
        facts(requests={"cpu": "9", "memory": "40Gi", "ephemeral-storage": "1Ti"}),
        info(extra={"ephemeral-storage": "100Gi"}),
        status(R, "Insufficient cpu", "Insufficient memory", "Insufficient ephemeral-storage"),
    ),
    (
        "too many pods",
        facts(),
        info(pods="1", running=[pod_object("a")]),
        status(R, "Too many pods"),
    ),
    (
        "too many pods and cpu",
        facts(requests={"cpu": "9"}),
        info(pods="1", running=[pod_object("a")]),
        status(R, "Too many pods", "Insufficient cpu"),
    ),
    (
        "extended resource absent from the node",
        facts(requests={"example.com/chip": "1"}),
        info(),
        status(R, "Insufficient example.com/chip"),
    ),
    (
        "extended resource present",
        facts(requests={"example.com/chip": "2"}),
        info(extra={"example.com/chip": "2"}),
        None,
    ),
    ("ignored by scheduler", facts(requests={"example.com/chip-memory": "4096"}), info(), None),
]


@pytest.mark.parametrize(("name", "pod", "node", "expected"), CASES, ids=[c[0] for c in CASES])
def test_filters(
    name: str, pod: predicates.PodFacts, node: nodeinfo.NodeInfo, expected: predicates.Status | None
) -> None:
    assert predicates.check(pod, node, frozenset({"example.com/chip-memory"})) == expected


def test_unschedulable_comes_before_taints_and_taints_before_affinity() -> None:
    node = info(unschedulable=True, taints=[TAINT], labels={"zone": "b"})
    pod = facts({"nodeSelector": {"zone": "a"}})
    assert predicates.check(pod, node) == status(U, "node(s) were unschedulable")
    node = info(taints=[TAINT], labels={"zone": "b"})
    assert predicates.check(pod, node) == status(U, TAINTED)


def test_removing_a_pod_frees_what_it_held() -> None:
    node = info(cpu="2", running=[pod_object("a", requests={"cpu": "2"}, spec=ports(80))])
    assert predicates.check(facts(ports(80), requests={"cpu": "1"}), node) is not None
    node.remove("uid-0")
    assert (node.milli_cpu, node.pod_count, dict(node.used_ports)) == (0, 0, {})
    assert predicates.check(facts(ports(80), requests={"cpu": "1"}), node) is None


# --- scores ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "capacity", "score"),
    [(0, 100, 100), (25, 100, 75), (100, 100, 0), (120, 100, 0), (5, 0, 0), (1, 3, 66)],
)
def test_least_requested(requested: int, capacity: int, score: int) -> None:
    assert priorities.least_requested(requested, capacity) == score


def test_built_in_totals() -> None:
    pod = facts(requests={"cpu": "1", "memory": "1Gi"})
    empty = info("n1")
    half = info("n2", running=[pod_object("r", requests={"cpu": "4", "memory": "16Gi"})])
    # LeastAllocated (87+96)/2=91 vs (37+46)/2=41; BalancedAllocation 95 both; TaintToleration
    # 100 x 3 both; NodeAffinity 0 both.
    assert priorities.score(pod, [empty, half]) == {"n1": 91 + 95 + 300, "n2": 41 + 95 + 300}


def test_best_effort_pods_score_with_the_non_zero_defaults() -> None:
    node = info(cpu="1", memory="1Gi")
    # 100m of 1000m and 200Mi of 1Gi: (90 + 80) / 2; balanced allocation is skipped.
    assert priorities.least_allocated(facts(), node) == 85
    assert priorities.balanced_allocation(facts(), node) == 0


def test_prefer_no_schedule_taints_and_preferred_affinity() -> None:
    soft = {"key": "spot", "value": "yes", "effect": "PreferNoSchedule"}
    nodes = [
        info("a", taints=[soft], labels={"disk": "ssd"}),
        info("b"),
        info("c", taints=[soft, {**soft, "key": "old"}]),
    ]
    preference = {"preference": {"matchExpressions": [expr("disk", "In", "ssd")]}, "weight": 5}
    pod = facts(
        {
            "affinity": {
                "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [preference]}
            }
        }
    )
    base = {
        n.name: priorities.least_allocated(pod, n) + priorities.balanced_allocation(pod, n)
        for n in nodes
    }
    scores = priorities.score(pod, nodes)
    # Taints: a has 1 of at most 2 -> 50, b 100, c 0 (x3). Affinity: a matches -> 100 (x2).
    assert {n: scores[n] - base[n] for n in scores} == {"a": 150 + 200, "b": 300, "c": 0}


# --- messages -------------------------------------------------------------------------------


def test_histogram_sorts_as_strings() -> None:
    assert messages.histogram(["b"] * 10 + ["a"] * 2 + ["c"]) == ["1 c", "10 b", "2 a"]


def test_fit_error_message() -> None:
    statuses = {
        "n1": status(R, "Insufficient cpu", "Insufficient memory"),
        "n2": status(R, "Insufficient cpu"),
        "n3": status(U, AFFINITY),
    }
    assert messages.unschedulable({"spec": {}}, 4, statuses) == (
        "0/4 nodes are available: 1 Insufficient memory, 1 node(s) didn't match Pod's node "
        "affinity/selector, 2 Insufficient cpu. preemption: 0/4 nodes are available: "
        "2 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling.."
    )


def test_preemption_never() -> None:
    statuses = {"n1": status(R, "Insufficient cpu")}
    assert messages.unschedulable({"spec": {"preemptionPolicy": "Never"}}, 1, statuses) == (
        "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never.."
    )


def test_no_nodes() -> None:
    assert messages.unschedulable({"spec": {}}, 0, {}) == "no nodes available to schedule pods"


def test_long_messages_are_cut_for_events() -> None:
    assert messages.truncate("x" * 10) == "x" * 10
    cut = messages.truncate("y" * 2000)
    assert len(cut) == 1024
    assert cut.endswith("y ...")
