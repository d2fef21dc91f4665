"""Claim templates for what an extended resource cannot say: multi-chip sets and soft slices."""

from __future__ import annotations

import pytest

from vnpu_core import catalog, draclaims, topology

Kind = topology.ServerKind


def _model(word: str) -> catalog.ChipModel:
    model = catalog.BUILTIN.by_common_word(word)
    assert model is not None
    return model


@pytest.mark.parametrize(
    ("kind", "count", "expected"),
    [
        (Kind.RING_910A_8, 2, "group"),
        (Kind.RING_910A_8, 4, "group"),
        (Kind.RING_910A_8, 8, "any"),
        (Kind.RING_910A_4, 4, "any"),
        (Kind.MESH_910B_8, 5, "any"),
        (Kind.RINGS_910B_16, 8, "group"),
        (Kind.RINGS_910B_16, 16, "any"),
        (Kind.A3_PAIRS, 2, "group"),
        (Kind.DUO_300I, 2, "any"),
        (Kind.PCIE, 3, "any"),
    ],
)
def test_the_rule_each_layout_has_for_a_count(kind: Kind, count: int, expected: str) -> None:
    assert draclaims.rule(kind, count) == expected


@pytest.mark.parametrize(
    ("kind", "count", "words"),
    [
        (Kind.RING_910A_8, 3, "give 1, 2, 4 or 8 chips"),
        (Kind.RINGS_910B_16, 10, "at matching positions"),
        (Kind.A3_PAIRS, 4, "whole die pairs"),
        (Kind.A3_PAIRS, 3, "1 die or an even number"),
        (Kind.MESH_910B_8, 9, "have 8 chips"),
    ],
)
def test_what_a_layout_cannot_give_says_why(kind: Kind, count: int, words: str) -> None:
    assert words in draclaims.rule(kind, count)


def test_four_910a_chips_stay_in_one_ring_where_the_server_has_rings() -> None:
    claim = draclaims.whole_chips(_model("Ascend910A"), 4)
    assert isinstance(claim, draclaims.Claim)
    devices = claim.body["spec"]["spec"]["devices"]
    (request,) = devices["requests"]
    options = {o["name"]: o for o in request["firstAvailable"]}
    assert set(options) == {"ring", "any"}
    assert all(o["count"] == 4 for o in options.values())
    assert all(o["deviceClassName"] == "ascend910a.npu.vnpu.io" for o in options.values())
    ring = options["ring"]["selectors"][0]["cel"]["expression"]
    assert ring == "device.attributes['npu.vnpu.io'].server in ['910a-8']"
    assert "'910a-4', 'pcie'" in options["any"]["selectors"][0]["cel"]["expression"]
    assert devices["constraints"] == [
        {"requests": ["npu/ring"], "matchAttribute": "npu.vnpu.io/ring"}
    ]
    assert claim.said == ()
    assert claim.name.startswith("vnpu-ascend910a-4x-")
    assert claim.body["metadata"]["name"] == claim.name


def test_a_count_some_layouts_refuse_leaves_those_servers_out_and_says_so() -> None:
    claim = draclaims.whole_chips(_model("Ascend910A"), 3)
    assert isinstance(claim, draclaims.Claim)
    (option,) = claim.body["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"]
    assert option["selectors"][0]["cel"]["expression"].endswith("in ['pcie']")
    assert "constraints" not in claim.body["spec"]["spec"]["devices"]
    assert len(claim.said) == 2
    assert all("such servers are not offered" in line for line in claim.said)


def test_a_count_no_layout_of_the_model_can_keep_is_refused() -> None:
    refusal = draclaims.whole_chips(_model("Ascend910C"), 4)
    assert isinstance(refusal, str)
    assert refusal.startswith("4 whole chips of Ascend910C: ")
    assert "whole die pairs" in refusal


def test_the_name_follows_the_content() -> None:
    model = _model("Ascend910A")
    first, again = draclaims.whole_chips(model, 2), draclaims.whole_chips(model, 2)
    other = draclaims.whole_chips(model, 4)
    assert isinstance(first, draclaims.Claim)
    assert isinstance(again, draclaims.Claim)
    assert isinstance(other, draclaims.Claim)
    assert first.name == again.name != other.name


def test_soft_slices_ask_memory_and_core_share_of_the_soft_class() -> None:
    claim = draclaims.soft_slices(_model("Ascend310P"), 1, 4096, 30)
    devices = claim.body["spec"]["spec"]["devices"]
    assert devices["requests"] == [
        {
            "name": "npu",
            "exactly": {
                "deviceClassName": "ascend310p-soft.npu.vnpu.io",
                "count": 1,
                "capacity": {"requests": {"memory": "4096Mi", "corePercent": "30"}},
            },
        }
    ]
    assert "constraints" not in devices
    assert claim.name.startswith("vnpu-ascend310p-soft-1x4096m-30c-")


def test_soft_slices_on_several_chips_take_distinct_chips() -> None:
    claim = draclaims.soft_slices(_model("Ascend310P"), 2, 4096, 0)
    assert claim.body["spec"]["spec"]["devices"]["constraints"] == [
        {"requests": ["npu"], "distinctAttribute": "npu.vnpu.io/chip"}
    ]
