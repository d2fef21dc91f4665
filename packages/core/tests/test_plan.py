"""The planner over parsed documents: reading both files, placement, rejections, whole chips."""

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vnpu_core import allocator, catalog, errors, inventory, plan, planfiles, topology
from vnpu_core.budgets import Reason
from vnpu_core.requests import Policy
from vnpu_core.topology import ServerKind

MODELS = catalog.BUILTIN


def node(name: str, chip: str = "310P3", chips: int = 2, **extra: object) -> dict[str, object]:
    return {"name": name, "chip": chip, "chips": chips, **extra}


def limits(word: str, count: int = 1, memory: int | None = None) -> dict[str, object]:
    found: dict[str, object] = {f"huawei.com/{word}": count}
    if memory is not None:
        found[f"huawei.com/{word}-memory"] = memory
    return found


def pod(
    name: str, word: str = "Ascend310P", count: int = 1, memory: int | None = None, **meta: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **meta},
        "spec": {
            "containers": [{"name": "main", "resources": {"limits": limits(word, count, memory)}}]
        },
    }


def controller(kind: str, name: str, spec: dict[str, Any], **resources: object) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "c", "resources": {"limits": resources}}]}}
    return {"kind": kind, "metadata": {"name": name}, "spec": {**spec, "template": template}}


def run(
    nodes: list[dict[str, object]], documents: list[Any], policy: Policy = Policy.DEFAULT
) -> plan.Plan:
    cluster = planfiles.read_cluster({"nodes": nodes}, "cluster.yaml", MODELS)
    workload = planfiles.read_workload(documents, "workload.yaml", MODELS)
    return plan.place(cluster, workload, MODELS, policy)


def where(made: plan.Plan) -> list[tuple[str, str, tuple[int, ...]]]:
    return [
        (p.pod, p.assignment.node, tuple(g.chip for c in p.assignment.containers for g in c.grants))
        for p in made.placements
    ]


# --- placement ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        # Best fit packs: the first pod breaks a tie by node name, the rest follow it while
        # chip 0 has AI cores left (two vir04-sized vNPUs per 310P3 chip), then chip 1.
        (Policy.DEFAULT, [("p1", "a", (0,)), ("p2", "a", (0,)), ("p3", "a", (1,))]),
        (Policy.BINPACK, [("p1", "a", (0,)), ("p2", "a", (0,)), ("p3", "a", (1,))]),
        # Spread: the emptier node wins, an equal score goes to the first name.
        (Policy.SPREAD, [("p1", "a", (0,)), ("p2", "b", (0,)), ("p3", "a", (1,))]),
    ],
)
def test_pods_are_placed_in_file_order_on_the_best_scoring_node(
    policy: Policy, expected: list[tuple[str, str, tuple[int, ...]]]
) -> None:
    nodes = [node("b"), node("a")]  # file order is not name order
    documents = [pod("p1", memory=12000), pod("p2", memory=12000), pod("p3", memory=12000)]
    made = run(nodes, documents, policy)
    assert where(made) == expected
    assert made.policy is policy


def test_usage_is_read_back_from_the_bind_annotations() -> None:
    # One 310P3 chip holds 7 vir01 (7 vNPU slots); the 8th only fits if usage were lost.
    made = run([node("solo", chips=1)], [pod(f"p{i}", memory=3072) for i in range(8)])
    assert [p.pod for p in made.placements] == [f"p{i}" for i in range(7)]
    assert [(r.pod, r.reason) for r in made.refusals] == [("p7", Reason.VNPU_SLOTS)]
    report = made.nodes[0]
    assert (report.pods, report.vnpus, report.chips_used, report.whole_chips) == (7, 7, 1, 0)


def test_templates_of_equal_memory_follow_the_ai_cpu_budget() -> None:
    # vir04 takes 4 of 7 AI CPUs: the second 12 GiB pod on the chip gets vir04_3c instead.
    made = run([node("solo", chips=1)], [pod("a", memory=12000), pod("b", memory=12000)])
    templates = [p.assignment.containers[0].grants[0].template for p in made.placements]
    assert templates == ["vir04", "vir04_3c"]


@pytest.mark.parametrize(
    ("annotations", "templates", "refused"),
    [
        # Unpinned, the second replica shares chip 0 as vir04_3c.
        ({}, ["vir04", "vir04_3c", "vir04"], ()),
        # Pinned, every replica gets vir04; with no chip left for it the third is refused.
        (
            {"vnpu.io/template": "vir04"},
            ["vir04", "vir04"],
            (
                "0/1 nodes are available: 1 Ascend310P: no chip with 4 AI CPUs free for vir04 "
                "(asked 4, best chip 0 has 3 of 7); vir04 is pinned by vnpu.io/template, "
                "vir04_3c would fit chip 0.",
            ),
        ),
    ],
)
def test_a_pinned_deployment_gets_its_template_on_every_replica(
    annotations: dict[str, str], templates: list[str], refused: tuple[str, ...]
) -> None:
    document = controller("Deployment", "chat", {"replicas": 3}, **limits("Ascend310P", 1, 12288))
    document["spec"]["template"]["metadata"] = {"annotations": annotations}
    made = run([node("solo", chips=2)], [document])
    got = [p.assignment.containers[0].grants[0].template for p in made.placements]
    assert got == templates
    assert {p.pinned for p in made.placements} == {annotations.get("vnpu.io/template")}
    assert tuple(r.message for r in made.refusals) == refused


def test_memory_in_any_decimal_quantity_form_is_that_many_mib() -> None:
    # What a manifest says and what kube-apiserver stores (3000 as 3k) plan alike.
    forms = ["3000", "3k", "3e3", "3000000m", "6k", "6e3"]
    documents = [pod(f"p{i}", memory=form) for i, form in enumerate(forms)]
    made = run([node("solo", chips=1)], documents)
    memory = [p.assignment.containers[0].grants[0].memory_mib for p in made.placements]
    assert memory == [3072, 3072, 3072, 3072, 6144, 6144]
    assert made.refusals == ()


def test_rejection_names_every_reason_most_common_first() -> None:
    nodes = [node("duo-a"), node("duo-b"), node("mesh", chip="910B3", chips=8)]
    made = run(nodes, [pod("big", word="Ascend910B3", count=16)])
    (refusal,) = made.refusals
    # The node that has the model tells why; nodes without it only fill the count.
    assert refusal.reason is Reason.TOO_MANY_CHIPS
    assert refusal.message == (
        "0/3 nodes are available: "
        "2 Ascend910B3: node has no Ascend910B3 chip (it has: Ascend310P), "
        "1 Ascend910B3: asked 16 chips, node has 8 usable of 8."
    )
    assert made.summary.placed == 0


def rejection(name: str, reason: Reason, message: str) -> allocator.Rejection:
    return allocator.Rejection(name, reason, message)


@pytest.mark.parametrize(
    ("rejections", "reason", "message"),
    [
        ([rejection("n1", Reason.MEMORY, "m1")], Reason.MEMORY, "0/1 nodes are available: 1 m1."),
        (
            [
                rejection("n3", Reason.MEMORY, "m3"),
                rejection("n2", Reason.AICORE, "c2"),
                rejection("n1", Reason.MEMORY, "m1"),
            ],
            Reason.MEMORY,
            "0/3 nodes are available: 2 m1, 1 c2.",  # the first node by name speaks for a group
        ),
        (
            [rejection("n1", Reason.AICORE, "c1"), rejection("n2", Reason.NO_DEVICE, "d2")],
            Reason.AICORE,  # a node with the model speaks for the pod, even when outnumbered
            "0/2 nodes are available: 1 d2, 1 c1.",
        ),
        (
            [rejection("n1", Reason.NO_DEVICE, "d1"), rejection("n2", Reason.NO_DEVICE, "d2")],
            Reason.NO_DEVICE,  # no node has the model at all
            "0/2 nodes are available: 2 d1.",
        ),
    ],
)
def test_refusal_reason_wording(
    rejections: list[allocator.Rejection], reason: Reason, message: str
) -> None:
    assert plan.refusal_reason(rejections, len(rejections)) == (reason, message)


def test_soft_pods_only_go_to_soft_nodes_and_hard_vnpus_avoid_them() -> None:
    soft_meta = {"annotations": {"huawei.com/vnpu-mode": "hami-core"}}
    documents = [
        pod("slice", word="Ascend910B4", memory=8192, **soft_meta),
        pod("vnpu", word="Ascend910B4", memory=8192),
    ]
    made = run(
        [node("hard", chip="910B4", chips=8), node("soft", chip="910B4", chips=8, mode="soft")],
        documents,
    )
    assert where(made) == [("slice", "soft", (0,)), ("vnpu", "hard", (0,))]
    assert [(n.name, n.soft_slices, n.vnpus) for n in made.nodes] == [
        ("hard", 0, 1),
        ("soft", 1, 0),
    ]


# One 310P3 request: (chip count, memory MiB or None for whole chips).
_REQUESTS = st.sampled_from([(1, 3000), (1, 6000), (1, 12000), (1, None), (2, None)])


@settings(max_examples=60, deadline=None)
@given(wanted=st.lists(_REQUESTS, min_size=1, max_size=30), policy=st.sampled_from(list(Policy)))
def test_the_plan_never_over_commits_a_chip(
    wanted: list[tuple[int, int | None]], policy: Policy
) -> None:
    documents = [pod(f"p{i}", count=c, memory=m) for i, (c, m) in enumerate(wanted)]
    made = run([node("duo-a", chips=4), node("duo-b", chips=2)], documents, policy)
    assert made.summary.placed + made.summary.rejected == len(wanted)
    model = MODELS.by_common_word("Ascend310P")
    assert model is not None
    held: dict[tuple[str, int], list[str | None]] = {}
    for p in made.placements:
        for c in p.assignment.containers:
            for g in c.grants:
                held.setdefault((p.assignment.node, g.chip), []).append(g.template)
    for key, templates in held.items():
        if None in templates:  # a whole chip is held by exactly one container
            assert templates == [None], key
            continue
        used = [model.template(t) for t in templates if t is not None]
        assert len(used) <= model.max_vnpus, key
        assert sum(t.memory_mib for t in used if t) <= model.memory_capacity_mib, key
        assert sum(t.aicore for t in used if t) <= model.aicore, key
        assert sum(t.aicpu for t in used if t) <= model.aicpu, key
    assert made.summary.chips_used == len(held)


# --- the whole-chip comparison ------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "documents", "expected"),
    [
        # 4 vir01 share one chip; without sharing they take 4 chips of the same node.
        ([node("a", chips=4)], [pod(f"p{i}", memory=3000) for i in range(4)], (4, 4, 1, 0)),
        # 10 single-chip pods on 4-chip nodes: two more copies of the node are needed.
        ([node("a", chips=4)], [pod(f"p{i}", memory=3000) for i in range(10)], (10, 10, 3, 2)),
        # Multi-chip pods keep their count; a 4-chip pod needs a whole ring of a 910A box.
        (
            [node("t", chip="910A", chips=8)],
            [
                pod("w1", word="Ascend910A", count=4),
                pod("w2", word="Ascend910A", count=4),
                pod("w3", word="Ascend910A", count=2),
            ],
            (10, 3, 2, 1),
        ),
        # A pod that fits no empty node is left out of the count.
        ([node("a", chips=2)], [pod("huge", count=3), pod("p", memory=3000)], (1, 1, 1, 0)),
        # Soft slices become whole chips too, on hard copies of the node.
        (
            [node("s", chip="910B4", chips=8, mode="soft")],
            [
                pod(
                    f"r{i}",
                    word="Ascend910B4",
                    memory=4096,
                    annotations={"huawei.com/vnpu-mode": "hami-core"},
                )
                for i in range(3)
            ],
            (3, 3, 1, 0),
        ),
    ],
)
def test_whole_chip_need(
    nodes: list[dict[str, object]], documents: list[Any], expected: tuple[int, int, int, int]
) -> None:
    s = run(nodes, documents).summary
    assert (
        s.whole_chip_chips,
        s.whole_chip_pods,
        s.whole_chip_nodes,
        s.whole_chip_extra_nodes,
    ) == expected


def test_summary_counts_chips_used_against_the_cluster() -> None:
    made = run(
        [node("a", chips=4), node("b", chips=4)], [pod(f"p{i}", memory=3000) for i in range(9)]
    )
    s = made.summary
    # Seven vir01 fill chip 0 (seven vNPU slots); the next two go to a second chip.
    assert (s.pods, s.placed, s.rejected, s.chips_used, s.chips_total) == (9, 9, 0, 2, 8)
    assert s.whole_chip_chips == 9


# --- reading the workload ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("document", "names"),
    [
        (
            controller("Deployment", "web", {"replicas": 3}, **limits("Ascend310P")),
            ["web-0", "web-1", "web-2"],
        ),
        (controller("Deployment", "web", {}, **limits("Ascend310P")), ["web-0"]),
        (
            controller("StatefulSet", "db", {"replicas": 2}, **limits("Ascend310P")),
            ["db-0", "db-1"],
        ),
        (controller("ReplicaSet", "rs", {"replicas": 1}, **limits("Ascend310P")), ["rs-0"]),
        (
            controller("Job", "train", {"parallelism": 4}, **limits("Ascend310P")),
            ["train-0", "train-1", "train-2", "train-3"],
        ),
        (
            controller(
                "Job", "train", {"parallelism": 4, "completions": 2}, **limits("Ascend310P")
            ),
            ["train-0", "train-1"],
        ),
        (controller("Job", "once", {}, **limits("Ascend310P")), ["once-0"]),
        ({"kind": "List", "items": [pod("x"), pod("y")]}, ["x", "y"]),
        (pod("single"), ["single"]),
    ],
)
def test_workload_expansion(document: dict[str, Any], names: list[str]) -> None:
    workload = planfiles.read_workload([None, document, None], "w.yaml", MODELS)
    assert [p.request.name for p in workload.pods] == names
    assert all(p.obj["kind"] == "Pod" for p in workload.pods)
    assert workload.notes == ()


def test_template_annotations_and_namespace_reach_every_pod() -> None:
    document = controller("Deployment", "r", {"replicas": 2}, **limits("Ascend910B4", 1, 4096))
    document["metadata"]["namespace"] = "ml"
    document["spec"]["template"]["metadata"] = {
        "annotations": {"huawei.com/vnpu-mode": "hami-core"}
    }
    pods = planfiles.read_workload([document], "w.yaml", MODELS).pods
    assert [(p.request.namespace, p.request.name, p.request.soft) for p in pods] == [
        ("ml", "r-0", True),
        ("ml", "r-1", True),
    ]


def test_notes_for_skipped_kinds_pods_without_npus_and_zero_replicas() -> None:
    documents = [
        {"kind": "Service", "metadata": {"name": "svc"}},
        controller("Deployment", "cpu-only", {"replicas": 2}, cpu="1"),
        controller("Deployment", "parked", {"replicas": 0}, **limits("Ascend310P")),
    ]
    workload = planfiles.read_workload(documents, "w.yaml", MODELS)
    assert workload.pods == ()
    assert workload.notes == (
        "documents[0]: Service svc skipped (the planner reads Pod, Deployment, ReplicaSet, StatefulSet, Job and List)",
        "documents[1]: Deployment cpu-only asks for no NPU; not planned",
        "documents[2]: Deployment parked runs no pods (scaled to 0)",
    )


def bad_pod_spec(**container: object) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "main", **container}]},
    }


@pytest.mark.parametrize(
    ("documents", "path", "value", "problem"),
    [
        (["just text"], "documents[0]", "just text", "must be a mapping"),
        ([{"metadata": {"name": "x"}}], "documents[0].kind", None, "must be a non-empty string"),
        (
            [{"kind": "Pod", "metadata": {}}],
            "documents[0].metadata.name",
            None,
            "must be a non-empty string",
        ),
        (
            [controller("Deployment", "d", {"replicas": "3"})],
            "documents[0].spec.replicas",
            "3",
            "must be an integer from 0 to 1000",
        ),
        (
            [controller("Job", "j", {"parallelism": -1})],
            "documents[0].spec.parallelism",
            -1,
            "must be an integer from 0 to 1000",
        ),
        (
            [{"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}],
            "documents[0].spec.containers",
            [],
            "must list a container",
        ),
        (
            [bad_pod_spec(resources={"limits": ["huawei.com/Ascend310P"]})],
            "documents[0].spec.containers[0].resources.limits",
            ["huawei.com/Ascend310P"],
            "must be a mapping",
        ),
        (
            [pod("p", memory="4Gi")],
            'documents[0].spec.containers[0].resources.limits["huawei.com/Ascend310P-memory"]',
            "4Gi",
            "pod p container main: write MiB as a plain integer, e.g. 4096",
        ),
        (
            [pod("p", memory="4096Mi")],
            'documents[0].spec.containers[0].resources.limits["huawei.com/Ascend310P-memory"]',
            "4096Mi",
            "pod p container main: write MiB as a plain integer, e.g. 4096",
        ),
        (
            [pod("p", memory="1500m")],
            'documents[0].spec.containers[0].resources.limits["huawei.com/Ascend310P-memory"]',
            "1500m",
            "pod p container main: write MiB as a plain integer, e.g. 4096",
        ),
        (
            [pod("p", memory=30000)],
            'documents[0].spec.containers[0].resources.limits["huawei.com/Ascend310P-memory"]',
            30000,
            "pod p container main: is larger than one Ascend310P chip (24576 MiB)",
        ),
        (
            [pod("p", annotations={"hami.io/gpu-scheduler-policy": "fastest"})],
            'documents[0].metadata.annotations["hami.io/gpu-scheduler-policy"]',
            "fastest",
            "pod p: unknown policy 'fastest'; use one of binpack, spread, best-fit",
        ),
        (
            [pod("p", memory=12288, annotations={"vnpu.io/template": "vir09"})],
            'documents[0].metadata.annotations["vnpu.io/template"]',
            "vir09",
            "pod p: unknown template; valid templates for Ascend310P (MiB/AI cores/AI CPUs): "
            "vir01 3072/1/1, vir02 6144/2/2, vir02_1c 6144/2/1, vir04 12288/4/4, vir04_3c 12288/4/3",
        ),
        (
            [pod("p", memory=9000, annotations={"vnpu.io/template": "vir02"})],
            'documents[0].metadata.annotations["vnpu.io/template"]',
            "vir02",
            "pod p container main: vir02 has 6144 MiB, less than huawei.com/Ascend310P-memory=9000 "
            "asks; valid templates for Ascend310P with at least 9000 MiB (MiB/AI cores/AI CPUs): "
            "vir04 12288/4/4, vir04_3c 12288/4/3",
        ),
        (
            [pod("p", annotations={"x": 1})],
            'documents[0].metadata.annotations["x"]',
            1,
            "must be a string",
        ),
        (
            [bad_pod_spec(resources={"limits": {"huawei.com/Ascend910": 1}})],
            'documents[0].spec.containers[0].resources.limits["huawei.com/Ascend910"]',
            "huawei.com/Ascend910",
            "pod p container main: unknown NPU resource; known chips: Ascend310P, Ascend910A, Ascend910B1, Ascend910B2, Ascend910B3, Ascend910B4, Ascend910B4-1, Ascend910C, Ascend910C-24",
        ),
        (
            [pod("p"), pod("p")],
            "documents[1].metadata.name",
            "p",
            "pod default/p also comes from documents[0]",
        ),
        (
            [{"kind": "List", "items": [pod("ok"), 7]}],
            "documents[0].items[1]",
            7,
            "must be a mapping",
        ),
    ],
)
def test_bad_workload_names_path_and_value(
    documents: list[Any], path: str, value: object, problem: str
) -> None:
    with pytest.raises(errors.InputFileError) as caught:
        planfiles.read_workload(documents, "workload.yaml", MODELS)
    exc = caught.value
    assert (exc.file, exc.path, exc.value, exc.problem) == ("workload.yaml", path, value, problem)


def test_request_error_is_chained() -> None:
    with pytest.raises(errors.InputFileError) as caught:
        planfiles.read_workload([pod("p", memory="4Gi")], "w.yaml", MODELS)
    assert isinstance(caught.value.__cause__, errors.RequestError)


# --- reading the cluster -----------------------------------------------------------------


def test_cluster_replicas_models_and_assumed_servers() -> None:
    cluster = planfiles.read_cluster(
        {
            "nodes": [
                node("duo", chip="Ascend310P", chips=8, replicas=2),
                node("mesh", chip="910B3", chips=8, server="910b-8"),
                node("ring", chip="910A", chips=4),
                node("soft", chip="910B4", chips=2, mode="soft"),
            ]
        },
        "c.yaml",
        MODELS,
    )
    shapes = [
        (n.name, n.chips[0].model.name, len(n.chips), n.topology.kind.value, n.soft)
        for n in cluster.nodes
    ]
    assert shapes == [
        ("duo-0", "310P3", 8, "300i-duo", False),
        ("duo-1", "310P3", 8, "300i-duo", False),
        ("mesh", "910B3", 8, "910b-8", False),
        ("ring", "910A", 4, "910a-4", False),
        ("soft", "910B4", 2, "pcie", True),
    ]
    assert cluster.notes == (
        "nodes[0] duo-0..duo-1: no server given; assumed 300i-duo for 8 310P3 chips",
        "nodes[2] ring: no server given; assumed 910a-4 for 4 910A chips",
        "nodes[3] soft: no server given; assumed pcie for 2 910B4 chips",
    )


@pytest.mark.parametrize(
    ("document", "path", "value", "problem"),
    [
        (None, "nodes", None, "the file must be a mapping with a nodes: list"),
        ({"nodes": []}, "nodes", [], "must list at least one node"),
        ({"nodes": [node("a")], "extra": 1}, "extra", 1, "unknown key; the file has only nodes:"),
        ({"nodes": ["a"]}, "nodes[0]", "a", "must be a mapping"),
        ({"nodes": [{"name": "a", "chips": 2}]}, "nodes[0].chip", None, "is required"),
        (
            {"nodes": [node("a", colour="red")]},
            "nodes[0].colour",
            "red",
            "unknown key; use name, chip, chips, server, mode, replicas",
        ),
        (
            {"nodes": [node("a", chip="910Z")]},
            "nodes[0].chip",
            "910Z",
            "unknown chip model; use one of 310P3, 910A, 910B1, 910B2, 910B3, 910B4, 910B4-1, 910C, 910C-24",
        ),
        ({"nodes": [node("a", chips=0)]}, "nodes[0].chips", 0, "must be an integer from 1 to 64"),
        (
            {"nodes": [node("a", chips="8")]},
            "nodes[0].chips",
            "8",
            "must be an integer from 1 to 64",
        ),
        (
            {"nodes": [node("a", chips=True)]},
            "nodes[0].chips",
            True,
            "must be an integer from 1 to 64",
        ),
        (
            {"nodes": [node("a", server="dgx")]},
            "nodes[0].server",
            "dgx",
            "unknown server kind; use one of 910a-8, 910a-4, 910b-8, 910b-16, a3-pairs, 300i-duo, pcie",
        ),
        (
            {"nodes": [node("a", server=["910b-8"])]},
            "nodes[0].server",
            ["910b-8"],
            "unknown server kind; use one of 910a-8, 910a-4, 910b-8, 910b-16, a3-pairs, 300i-duo, pcie",
        ),
        (
            {"nodes": [node("a", chips=8, server="910a-8")]},
            "nodes[0].server",
            "910a-8",
            "a 910a-8 server holds 910A chips, not 310P3",
        ),
        (
            {"nodes": [node("a", chip="910B3", chips=4, server="910b-8")]},
            "nodes[0].chips",
            4,
            "a 910b-8 server has 8 chips",
        ),
        (
            {"nodes": [node("a", chips=3, server="300i-duo")]},
            "nodes[0].chips",
            3,
            "a 300i-duo server has its chips in pairs",
        ),
        (
            {"nodes": [node("a", mode="shared")]},
            "nodes[0].mode",
            "shared",
            "must be hard (vNPU templates) or soft (hami-core)",
        ),
        (
            {"nodes": [node("a", replicas=0)]},
            "nodes[0].replicas",
            0,
            "must be an integer from 1 to 1000",
        ),
        ({"nodes": [node("Node_A")]}, "nodes[0].name", "Node_A", "must be a lowercase DNS name"),
        (
            {"nodes": [node("a", replicas=2), node("a-1")]},
            "nodes[1].name",
            "a-1",
            "node name repeats nodes[0]",
        ),
    ],
)
def test_bad_cluster_names_path_and_value(
    document: object, path: str, value: object, problem: str
) -> None:
    with pytest.raises(errors.InputFileError) as caught:
        planfiles.read_cluster(document, "cluster.yaml", MODELS)
    exc = caught.value
    assert (exc.file, exc.path, exc.value, exc.problem) == ("cluster.yaml", path, value, problem)


def test_find_model_accepts_model_name_common_word_and_chip_name() -> None:
    for key, name in [("310P3", "310P3"), ("Ascend310P", "310P3"), ("Ascend910", "910C")]:
        found = planfiles.find_model(MODELS, key)
        assert found is not None
        assert found.name == name
    assert planfiles.find_model(MODELS, "310P") is None


def test_identical_empty_nodes_are_answered_alike_and_uuid_lists_still_count() -> None:
    nodes = [node(f"duo-{i}") for i in range(4)]
    # An empty node stands for the others of its shape: the rejection counts all four.
    made = run(nodes, [pod("big", count=3)])
    assert made.refusals[0].message.startswith("0/4 nodes are available: 4 Ascend310P:")
    # A UUID list picks one chip on the last node: every node must really be asked.
    pinned = pod(
        "pinned", memory=3000, annotations={"hami.io/use-Ascend310P-uuid": "duo-3-Ascend310P-1"}
    )
    made = run(nodes, [pinned, pod("free", memory=3000)])
    assert where(made) == [("pinned", "duo-3", (1,)), ("free", "duo-3", (1,))]


# --- peers' readings in the plan ----------------------------------------------------------


def test_memory_zero_is_planned_as_the_webhook_admits_it() -> None:
    made = run([node("a", chips=1)], [pod("p", memory=0)])
    (placed,) = made.placements
    (grant,) = placed.assignment.containers[0].grants
    assert grant.template == "vir01"


def test_super_pod_vnpu_pods_take_a_die_pair_when_nothing_is_shared() -> None:
    a3 = MODELS.by_common_word("Ascend910C")
    assert a3 is not None
    models = MODELS.replace([dataclasses.replace(a3, super_pod=True)])
    cluster = planfiles.read_cluster({"nodes": [node("a", "910C", 4)]}, "c.yaml", models)
    documents = [pod("v", "Ascend910C", 1, 16000), pod("w", "Ascend910C", 1)]
    workload = planfiles.read_workload(documents, "w.yaml", models)
    made = plan.place(cluster, workload, models, Policy.DEFAULT)
    assert [len(p.assignment.containers[0].grants) for p in made.placements] == [1, 2]
    # Without sharing each pod takes a whole die pair: 4 dies on the one node.
    assert (made.summary.whole_chip_chips, made.summary.whole_chip_extra_nodes) == (4, 0)


def test_whole_chip_copies_keep_registered_numbers_and_network_ids() -> None:
    a3 = MODELS.by_common_word("Ascend910C")
    assert a3 is not None
    numbers = [0, 1, 2, 4, 6]  # one complete module: dies 0 and 1
    chips = tuple(inventory.Chip(i, f"d{n}", a3, number=n) for i, n in enumerate(numbers))
    a = inventory.Node("a", chips, topology.build(ServerKind.A3_PAIRS, numbers))
    workload = planfiles.read_workload(
        [pod("p1", "Ascend910C", 2), pod("p2", "Ascend910C", 2)], "w.yaml", MODELS
    )
    pods = list(workload.pods)
    # The first pair fits the node; the second needs a fresh copy of it, which again has
    # only dies 0 and 1 as a module (position-numbered copies would pair dies 2 and 4).
    assert plan.whole_chip_need([a], pods, MODELS, Policy.DEFAULT) == (4, 2, 2, 1)
