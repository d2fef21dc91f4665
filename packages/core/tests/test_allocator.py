import dataclasses
from typing import Any

import pytest

from vnpu_core import allocator, binding, catalog, inventory, ledger, requests, topology
from vnpu_core.budgets import Reason
from vnpu_core.requests import Policy
from vnpu_core.topology import ServerKind


def model(word: str) -> catalog.ChipModel:
    found = catalog.BUILTIN.by_common_word(word)
    assert found is not None
    return found


def node(
    word: str, chips: int, server: ServerKind | None = None, soft: bool = False
) -> inventory.Node:
    return inventory.build_node("n1", model(word), chips, server, soft)


def pod_dict(
    word: str, count: int = 1, memory: int | None = None, name: str = "p", **annotations: str
) -> dict[str, Any]:
    limits: dict[str, object] = {f"huawei.com/{word}": count}
    if memory is not None:
        limits[f"huawei.com/{word}-memory"] = memory
    return {
        "metadata": {"name": name, "namespace": "ns", "annotations": dict(annotations)},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }


class Cluster:
    """One node and the pods bound to it, kept the way the scheduler keeps them: as annotated pods."""

    def __init__(self, n: inventory.Node) -> None:
        self.node = n
        self.pods: list[dict[str, Any]] = []

    def usage(self) -> dict[str, inventory.ChipUsage]:
        result = ledger.node_usage(self.pods, self.node.name, catalog.BUILTIN)
        assert not result.problems
        return result.usage

    def place(
        self, pod: dict[str, Any], policy: Policy = Policy.DEFAULT
    ) -> allocator.Assignment | allocator.Rejection:
        outcome = allocator.fit(
            self.node, self.usage(), requests.from_pod(pod, catalog.BUILTIN), policy
        )
        if isinstance(outcome, allocator.Assignment):
            pod["metadata"]["annotations"].update(binding.bind_annotations(outcome, 1_700_000_000))
            pod["spec"]["nodeName"] = self.node.name
            self.pods.append(pod)
        return outcome


def grants(outcome: allocator.Assignment | allocator.Rejection) -> list[tuple[int, str | None]]:
    assert isinstance(outcome, allocator.Assignment), outcome
    return [(g.chip, g.template) for c in outcome.containers for g in c.grants]


def rejection(outcome: allocator.Assignment | allocator.Rejection) -> allocator.Rejection:
    assert isinstance(outcome, allocator.Rejection), outcome
    return outcome


def test_ai_cpu_is_a_budget_the_peers_do_not_check() -> None:
    # 910B2: 24 AI cores, 6 AI CPUs, 64 GiB. Eight vir03_1c_8g fit memory and cores, but only
    # six AI CPUs exist; HAMi and Volcano would schedule the seventh and it would fail at start.
    cluster = Cluster(node("Ascend910B2", 1, ServerKind.PCIE))
    for i in range(6):
        assert grants(cluster.place(pod_dict("Ascend910B2", memory=8192, name=f"p{i}"))) == [
            (0, "vir03_1c_8g")
        ]
    refused = rejection(cluster.place(pod_dict("Ascend910B2", memory=8192, name="p6")))
    assert refused.reason is Reason.AICPU
    assert (
        refused.message
        == "Ascend910B2: no chip with an AI CPU free for vir03_1c_8g (asked 1, best chip 0 has 0 of 6)"
    )
    assert not refused.unresolvable


def test_310p_downgrades_to_the_3_cpu_variant_when_only_that_fits() -> None:
    cluster = Cluster(node("Ascend310P", 1, ServerKind.PCIE))
    assert grants(cluster.place(pod_dict("Ascend310P", memory=10000, name="a"))) == [(0, "vir04")]
    assert grants(cluster.place(pod_dict("Ascend310P", memory=10000, name="b"))) == [
        (0, "vir04_3c")
    ]
    refused = rejection(cluster.place(pod_dict("Ascend310P", memory=2000, name="c")))
    assert refused.reason is Reason.MEMORY
    assert "best chip 0 has 0 of 24576 MiB" in refused.message


def test_310p_media_engines_are_counted() -> None:
    cluster = Cluster(node("Ascend310P", 1, ServerKind.PCIE))
    # Three vir02 take 3 of the 3 video encoders; a fourth 2-core slice must be the encoder-less vir02_1c.
    for i in range(3):
        assert grants(cluster.place(pod_dict("Ascend310P", memory=6000, name=f"v{i}"))) == [
            (0, "vir02")
        ]
    assert grants(cluster.place(pod_dict("Ascend310P", memory=6000, name="v3"))) == [
        (0, "vir02_1c")
    ]


def test_exact_model_match_is_unresolvable() -> None:
    cluster = Cluster(node("Ascend910B4-1", 8))
    refused = rejection(cluster.place(pod_dict("Ascend910B4", memory=8192)))
    assert refused.reason is Reason.NO_DEVICE
    assert refused.unresolvable
    assert refused.message == "Ascend910B4: node has no Ascend910B4 chip (it has: Ascend910B4-1)"


def test_unhealthy_chips_are_skipped_and_all_unhealthy_is_unresolvable() -> None:
    base = node("Ascend910B3", 2, ServerKind.PCIE)
    sick = inventory.Node(
        "n1",
        (base.chips[0].__class__(0, "u0", model("Ascend910B3"), healthy=False), base.chips[1]),
        base.topology,
    )
    cluster = Cluster(sick)
    assert grants(cluster.place(pod_dict("Ascend910B3"))) == [(1, None)]
    all_sick = inventory.Node(
        "n1",
        tuple(inventory.Chip(c.index, c.uuid, c.model, healthy=False) for c in base.chips),
        base.topology,
    )
    refused = rejection(Cluster(all_sick).place(pod_dict("Ascend910B3")))
    assert refused.reason is Reason.UNHEALTHY
    assert refused.unresolvable


def test_uuid_allow_and_deny_lists() -> None:
    n = node("Ascend310P", 4)
    cluster = Cluster(n)
    allow = {"hami.io/use-Ascend310P-uuid": n.chips[2].uuid}
    assert grants(cluster.place(pod_dict("Ascend310P", memory=3000, name="a", **allow))) == [
        (2, "vir01")
    ]
    deny = {"hami.io/no-use-Ascend310P-uuid": ",".join(c.uuid for c in n.chips)}
    refused = rejection(cluster.place(pod_dict("Ascend310P", memory=3000, name="b", **deny)))
    assert refused.reason is Reason.UUID_FILTER


def test_soft_and_hard_mode_gates() -> None:
    soft_pod = pod_dict("Ascend310P", memory=4096, **{"huawei.com/vnpu-mode": "hami-core"})
    assert rejection(Cluster(node("Ascend310P", 2)).place(soft_pod)).reason is Reason.MODE_MISMATCH
    soft_node = Cluster(node("Ascend310P", 2, soft=True))
    assert (
        rejection(soft_node.place(pod_dict("Ascend310P", memory=3000, name="hard"))).reason
        is Reason.MODE_MISMATCH
    )
    assert grants(soft_node.place(pod_dict("Ascend310P", name="whole"))) == [(0, None)]
    placed = soft_node.place(
        pod_dict("Ascend310P", memory=4096, name="s", **{"huawei.com/vnpu-mode": "hami-core"})
    )
    assert isinstance(placed, allocator.Assignment)
    (grant,) = placed.containers[0].grants
    assert (grant.chip, grant.memory_mib, grant.soft) == (1, 4096, True)


def test_soft_core_percent_budget() -> None:
    cluster = Cluster(node("Ascend310P", 1, ServerKind.PCIE, soft=True))
    soft = {"huawei.com/vnpu-mode": "hami-core"}
    for i, share in enumerate((60, 40)):
        p = pod_dict("Ascend310P", memory=2048, name=f"s{i}", **soft)
        p["spec"]["containers"][0]["resources"]["limits"]["huawei.com/Ascend310P-core"] = share
        assert isinstance(cluster.place(p), allocator.Assignment)
    extra = pod_dict("Ascend310P", memory=1024, name="s2", **soft)
    refused = rejection(cluster.place(extra))
    assert refused.reason is Reason.CORE_PERCENT
    assert "best chip 0 has 0% of 100%" in refused.message


def test_910a_rings_and_counts() -> None:
    cluster = Cluster(node("Ascend910A", 8))
    assert [c for c, _ in grants(cluster.place(pod_dict("Ascend910A", count=1, name="a")))] == [0]
    # Two chips go to a ring with exactly 2 free, else a whole ring, never the ring with 3 left.
    assert [c for c, _ in grants(cluster.place(pod_dict("Ascend910A", count=2, name="b")))] == [
        4,
        5,
    ]
    refused = rejection(cluster.place(pod_dict("Ascend910A", count=4, name="c")))
    assert refused.reason is Reason.TOPOLOGY
    assert (
        refused.message
        == "Ascend910A: 4 chips must sit in one HCCS ring of 4 (best ring has 3 free)"
    )
    assert [c for c, _ in grants(cluster.place(pod_dict("Ascend910A", count=2, name="e")))] == [
        6,
        7,
    ]
    three = rejection(cluster.place(pod_dict("Ascend910A", count=3, name="d")))
    assert three.reason is Reason.COUNT_NOT_ALLOWED
    assert three.unresolvable
    too_many = rejection(Cluster(node("Ascend910A", 4)).place(pod_dict("Ascend910A", count=8)))
    assert too_many.reason is Reason.TOO_MANY_CHIPS


def test_default_policy_keeps_whole_chips_free_spread_does_not() -> None:
    small = [pod_dict("Ascend310P", memory=3000, name=f"s{i}") for i in range(2)]
    for policy, expect_whole in ((Policy.DEFAULT, True), (Policy.SPREAD, False)):
        cluster = Cluster(node("Ascend310P", 2, ServerKind.PCIE))
        for p in small:
            assert isinstance(
                cluster.place(dict(p, metadata=dict(p["metadata"], annotations={})), policy),
                allocator.Assignment,
            )
        whole = cluster.place(pod_dict("Ascend310P", name="w"), policy)
        assert isinstance(whole, allocator.Assignment) is expect_whole, policy


def test_binpack_and_spread_pick_chips_deterministically() -> None:
    for policy, second_chip in ((Policy.BINPACK, 0), (Policy.SPREAD, 1)):
        cluster = Cluster(node("Ascend310P", 2, ServerKind.PCIE))
        assert grants(cluster.place(pod_dict("Ascend310P", memory=3000, name="a"), policy)) == [
            (0, "vir01")
        ]
        assert grants(cluster.place(pod_dict("Ascend310P", memory=3000, name="b"), policy)) == [
            (second_chip, "vir01")
        ]


def test_pod_annotation_overrides_chip_policy() -> None:
    cluster = Cluster(node("Ascend310P", 2, ServerKind.PCIE))
    cluster.place(pod_dict("Ascend310P", memory=3000, name="a"))
    spread = {"hami.io/gpu-scheduler-policy": "spread"}
    assert grants(cluster.place(pod_dict("Ascend310P", memory=3000, name="b", **spread))) == [
        (1, "vir01")
    ]


def test_scores_follow_the_node_policy() -> None:
    empty = Cluster(node("Ascend310P", 2, ServerKind.PCIE))
    busy = Cluster(node("Ascend310P", 2, ServerKind.PCIE))
    busy.place(pod_dict("Ascend310P", memory=12000, name="x"))
    probe = requests.from_pod(pod_dict("Ascend310P", memory=3000, name="probe"), catalog.BUILTIN)
    scores = {}
    for policy in Policy:
        for label, cluster in (("empty", empty), ("busy", busy)):
            outcome = allocator.fit(cluster.node, cluster.usage(), probe, policy)
            assert isinstance(outcome, allocator.Assignment)
            assert 0 <= outcome.score <= 10
            scores[policy, label] = outcome.score
    assert scores[Policy.BINPACK, "busy"] > scores[Policy.BINPACK, "empty"]
    assert scores[Policy.DEFAULT, "busy"] > scores[Policy.DEFAULT, "empty"]
    assert scores[Policy.SPREAD, "busy"] < scores[Policy.SPREAD, "empty"]


def test_init_containers_use_peak_not_sum() -> None:
    # One 310P chip: an init container takes the whole chip, then the app takes a vir04.
    # Summed that is more than the chip; at peak it is the whole chip.
    p = pod_dict("Ascend310P", memory=10000, name="peak")
    p["spec"]["initContainers"] = [
        {"name": "warmup", "resources": {"limits": {"huawei.com/Ascend310P": 1}}}
    ]
    cluster = Cluster(node("Ascend310P", 1, ServerKind.PCIE))
    outcome = cluster.place(p)
    assert isinstance(outcome, allocator.Assignment)
    assert [(c.container, c.init, [g.template for g in c.grants]) for c in outcome.containers] == [
        ("warmup", True, [None]),
        ("main", False, ["vir04"]),
    ]
    # The chip is held whole until the init container has finished ...
    assert cluster.usage()[cluster.node.chips[0].uuid].exclusive
    assert (
        rejection(cluster.place(pod_dict("Ascend310P", memory=3000, name="next"))).reason
        is Reason.CHIP_IN_USE
    )
    # ... and then only the app's vNPU counts.
    p["status"] = {
        "initContainerStatuses": [{"name": "warmup", "state": {"terminated": {"exitCode": 0}}}]
    }
    assert grants(cluster.place(pod_dict("Ascend310P", memory=3000, name="after"))) == [
        (0, "vir01")
    ]


def test_two_containers_share_a_chip_and_annotations_keep_empty_entries() -> None:
    p = {
        "metadata": {"name": "multi", "namespace": "ns", "annotations": {}},
        "spec": {
            "containers": [
                {
                    "name": "a",
                    "resources": {
                        "limits": {"huawei.com/Ascend310P": 1, "huawei.com/Ascend310P-memory": 3000}
                    },
                },
                {"name": "log"},
                {
                    "name": "b",
                    "resources": {
                        "limits": {"huawei.com/Ascend310P": 1, "huawei.com/Ascend310P-memory": 6000}
                    },
                },
            ]
        },
    }
    cluster = Cluster(node("Ascend310P", 2))
    outcome = cluster.place(p)
    assert grants(outcome) == [(0, "vir01"), (0, "vir02")]
    annotations = p["metadata"]["annotations"]
    uuid = cluster.node.chips[0].uuid
    expected = f"{uuid},Ascend310P,3072,0:;;{uuid},Ascend310P,6144,0:;"
    assert annotations["hami.io/Ascend310P-devices-allocated"] == expected
    assert annotations["hami.io/Ascend310P-devices-to-allocate"] == expected
    assert annotations["huawei.com/Ascend310P"] == (
        f'[{{"UUID":"{uuid}","temp":"vir01","memory":3072}},{{"UUID":"{uuid}","temp":"vir02","memory":6144}}]'
    )
    assert annotations["hami.io/bind-phase"] == "allocating"
    assert annotations["hami.io/vgpu-node"] == "n1"
    used = cluster.usage()[uuid]
    assert (used.vnpus, used.memory_mib, used.aicore, used.aicpu) == (2, 9216, 3, 3)


@pytest.mark.parametrize("word", ["Ascend910B3", "Ascend910A", "Ascend910C", "Ascend310P"])
def test_whole_chip_requests_need_idle_chips(word: str) -> None:
    cluster = Cluster(node(word, 2, ServerKind.PCIE))
    memory = model(word).templates[0].memory_mib
    assert isinstance(
        cluster.place(pod_dict(word, memory=memory, name="small")), allocator.Assignment
    )
    refused = rejection(cluster.place(pod_dict(word, count=2, name="big")))
    assert refused.reason is Reason.NO_FREE_CHIP
    assert refused.message == f"{word}: no 2 free whole chips (asked 2, 1 of 2 chips are free)"


def numbered(word: str, numbers: list[int], networks: list[int] | None = None) -> inventory.Node:
    """A node whose chips carry registered numbers (and NetworkIDs), as ``nodes`` reads them."""
    m = model(word)
    chips = tuple(
        inventory.Chip(
            i,
            f"{word}-{n}",
            m,
            number=n,
            network_id=None if networks is None else networks[i],
        )
        for i, n in enumerate(numbers)
    )
    layout = topology.build(topology.default_kind(m, numbers), numbers)
    return inventory.Node("n1", chips, layout)


def test_a3_pairs_follow_registered_dies_when_some_are_not_listed() -> None:
    cluster = Cluster(numbered("Ascend910C", [0, 1, 2, 4, 6]))
    pair = cluster.place(pod_dict("Ascend910C", 2, name="pair"))
    assert grants(pair) == [(0, None), (1, None)]  # dies 0 and 1: module 0
    # Dies 2, 4 and 6 are free but no two of them share a module.
    refused = rejection(cluster.place(pod_dict("Ascend910C", 2, name="pair2")))
    assert refused.reason is Reason.TOPOLOGY
    assert "whole die pairs (0 pairs free)" in refused.message
    single = cluster.place(pod_dict("Ascend910C", 1, name="one"))
    assert grants(single) == [(2, None)]


def test_messages_name_chips_by_their_registered_number() -> None:
    cluster = Cluster(numbered("Ascend310P", [3]))
    cluster.place(pod_dict("Ascend310P", 1, name="whole"))
    refused = rejection(cluster.place(pod_dict("Ascend310P", 1, 3000, name="slice")))
    assert "best chip 3 is held whole" in refused.message


def test_multi_chip_sets_stay_inside_one_network_id_like_hami() -> None:
    hami_networks = [0, 0, 0, 0, 1, 1, 1, 1]  # what HAMi's plugin registers on 8-chip 910 nodes
    cluster = Cluster(numbered("Ascend910B3", list(range(8)), hami_networks))
    cluster.place(pod_dict("Ascend910B3", 1, name="one"))  # chip 0, NetworkID 0
    four = cluster.place(pod_dict("Ascend910B3", 4, name="four"))
    assert [chip for chip, _ in grants(four)] == [4, 5, 6, 7]  # not 1-4 across both
    two = cluster.place(pod_dict("Ascend910B3", 2, name="two"))
    assert [chip for chip, _ in grants(two)] == [1, 2]
    # Without NetworkIDs the mesh takes any free chips.
    plain = Cluster(numbered("Ascend910B3", list(range(8))))
    plain.place(pod_dict("Ascend910B3", 1, name="one"))
    assert [chip for chip, _ in grants(plain.place(pod_dict("Ascend910B3", 4)))] == [1, 2, 3, 4]


def test_a_request_no_network_id_holds_spans_them_as_hami_does() -> None:
    cluster = Cluster(numbered("Ascend910B3", list(range(8)), [0, 0, 0, 0, 1, 1, 1, 1]))
    six = cluster.place(pod_dict("Ascend910B3", 6, name="six"))
    assert [chip for chip, _ in grants(six)] == [0, 1, 2, 3, 4, 5]


def test_super_pod_dies_are_placed_in_pairs() -> None:
    a3 = dataclasses.replace(model("Ascend910C"), super_pod=True)
    models = catalog.BUILTIN.replace([a3])
    chips = tuple(inventory.Chip(i, f"die-{i}", a3) for i in range(4))
    n = inventory.Node("n1", chips, topology.build(ServerKind.A3_PAIRS, 4))
    request = requests.from_pod(pod_dict("Ascend910C", 1), models)
    outcome = allocator.fit(n, {}, request)
    assert grants(outcome) == [(0, None), (1, None)]
    # A one-die whole request that did not come through the parser is refused, not half placed.
    (item,) = request.requests
    odd = dataclasses.replace(request, requests=(dataclasses.replace(item, count=1),))
    refused = rejection(allocator.fit(n, {}, odd))
    assert refused.reason is Reason.COUNT_NOT_ALLOWED
    assert "super pod" in refused.message


def test_assume_places_pods_in_turn_as_their_annotations_would_count_them() -> None:
    """What ``assume`` adds is what the pods hold once bound (ledger from their annotations)."""
    n = node("Ascend910B3", 2, ServerKind.PCIE)
    shapes = [
        pod_dict("Ascend910B3", memory=16384, name="a"),
        pod_dict("Ascend910B3", name="b"),  # a whole chip: the one left
        pod_dict("Ascend910B3", name="c"),  # no whole chip left: left out
        pod_dict("Ascend910B3", memory=16384, name="d"),
    ]
    bound = Cluster(n)
    for pod in shapes:
        bound.place(dict(pod, metadata={**pod["metadata"], "annotations": {}}))
    assert [p["metadata"]["name"] for p in bound.pods] == ["a", "b", "d"]
    asked = [requests.from_pod(p, catalog.BUILTIN) for p in shapes]
    assert allocator.assume(n, {}, asked) == bound.usage()
    # Behind them, the next whole chip does not fit; on the bare node it does.
    after = allocator.assume(n, {}, asked)
    one = requests.from_pod(pod_dict("Ascend910B3", name="e"), catalog.BUILTIN)
    assert rejection(allocator.fit(n, after, one)).reason is Reason.NO_FREE_CHIP
    assert isinstance(allocator.fit(n, {}, one), allocator.Assignment)
    assert allocator.assume(n, {}, []) == {}


# --- template pinning (vnpu.io/template) -------------------------------------------------

PINNED_REFUSAL = (
    "Ascend310P: no chip with 4 AI CPUs free for vir04 (asked 4, best chip 0 has 3 of 7); "
    "vir04 is pinned by vnpu.io/template, vir04_3c would fit chip 0"
)


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        # Unpinned, best fit packs the second replica beside the first: the chip has 3 of its
        # 7 AI CPUs left, so it gets vir04_3c (fewer AI CPUs and media engines).
        ({}, [[(0, "vir04")], [(0, "vir04_3c")], [(1, "vir04")], [(1, "vir04_3c")]]),
        # Pinned to vir04: one per chip, then refused naming the pin.
        (
            {"vnpu.io/template": "vir04"},
            [[(0, "vir04")], [(1, "vir04")], (Reason.AICPU, PINNED_REFUSAL)],
        ),
        # Pinned to vir04_3c: even an idle chip gets vir04_3c, where vir04 would come first.
        (
            {"vnpu.io/template": "vir04_3c"},
            [[(0, "vir04_3c")], [(0, "vir04_3c")], [(1, "vir04_3c")], [(1, "vir04_3c")]],
        ),
    ],
)
def test_replicas_of_one_pod_template_get_the_pinned_template_or_are_refused(
    annotations: dict[str, str], expected: list[object]
) -> None:
    cluster = Cluster(node("Ascend310P", 2))
    outcomes: list[object] = []
    for i in range(len(expected)):
        outcome = cluster.place(pod_dict("Ascend310P", memory=12288, name=f"r{i}", **annotations))
        if isinstance(outcome, allocator.Rejection):
            outcomes.append((outcome.reason, outcome.message))
        else:
            outcomes.append(grants(outcome))
    assert outcomes == expected


@pytest.mark.parametrize(
    ("held", "message"),
    [
        # Only vir04_3c's budgets are left on the chip: the refusal names it.
        (["vir04"], PINNED_REFUSAL),
        # Nothing of 12 GiB fits at all: the pin is named, no other template is offered.
        (
            ["vir04", "vir04_3c"],
            "Ascend310P: no chip with 12288 MiB free for vir04 (asked 12288 MiB, best chip 0 "
            "has 0 of 24576 MiB); vir04 is pinned by vnpu.io/template",
        ),
    ],
)
def test_a_pinned_refusal_names_the_pin_and_what_the_node_could_offer(
    held: list[str], message: str
) -> None:
    cluster = Cluster(node("Ascend310P", 1, ServerKind.PCIE))
    for i, template in enumerate(held):
        placed = cluster.place(
            pod_dict("Ascend310P", memory=12288, name=f"h{i}", **{"vnpu.io/template": template})
        )
        assert grants(placed) == [(0, template)]
    pinned = pod_dict("Ascend310P", memory=12288, name="p", **{"vnpu.io/template": "vir04"})
    refused = rejection(cluster.place(pinned))
    assert refused.message == message
    assert not refused.unresolvable  # freeing the chip would make room
