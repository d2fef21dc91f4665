"""Pure tests of ``slices``: counters, devices, attributes, taints and the API limits."""

from __future__ import annotations

import collections
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vnpu_core import catalog, topology
from vnpu_dra_driver import chips, errors, slices
from vnpu_npu import backend, faults
from vnpu_npu.sim import control

Json = dict[str, Any]
MakeChips = Callable[..., list[slices.Chip]]


def model(name: str) -> catalog.ChipModel:
    found = catalog.BUILTIN.by_chip_name(name)
    assert found is not None, name
    assert found.name == name
    return found


def devices(built: Any) -> list[Json]:
    return [d for s in built for d in s["spec"].get("devices") or []]


def templates(built: Any, phy: int = 0) -> dict[str, int]:
    """Template name -> how many devices of chip ``phy`` carry it."""
    found = [d for d in devices(built) if d["attributes"]["index"]["int"] == phy]
    return dict(collections.Counter(d["attributes"]["template"]["string"] for d in found))


def counter_sets(built: Any) -> dict[str, Json]:
    return {c["name"]: c for s in built for c in s["spec"].get("sharedCounters") or []}


def check_limits(built: Any) -> None:
    """What kube-apiserver and kube-scheduler require of a pool, checked slice by slice."""
    pool = {
        (s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"]) for s in built
    }
    assert pool == {(1, len(built))}
    names = [s["metadata"]["name"] for s in built]
    assert len(set(names)) == len(names)
    sets = counter_sets(built)
    for found in built:
        spec = found["spec"]
        assert not (spec.get("devices") and spec.get("sharedCounters"))
        assert len(spec.get("sharedCounters") or []) <= 8
        assert len(spec.get("devices") or []) <= 64
        for counter_set in spec.get("sharedCounters") or []:
            assert len(counter_set["counters"]) <= 32
    device_names = [d["name"] for d in devices(built)]
    assert len(set(device_names)) == len(device_names)
    for device in devices(built):
        assert len(device["name"]) <= 63
        assert len(device["attributes"]) + len(device.get("capacity") or {}) <= 32
        for used in device.get("consumesCounters") or []:
            assert set(used["counters"]) <= set(sets[used["counterSet"]]["counters"])


def test_310p3_node_of_four_chips(make_chips: MakeChips) -> None:
    built = slices.build("node-a", make_chips("310P3", 4), model("310P3"))
    assert [s["metadata"]["name"] for s in built] == [
        "node-a-npu.vnpu.io-counters-0",
        "node-a-npu.vnpu.io-devices-0",
        "node-a-npu.vnpu.io-devices-1",
    ]
    check_limits(built)
    spec = built[0]["spec"]
    assert spec["driver"] == "npu.vnpu.io"
    assert spec["nodeName"] == "node-a"
    assert spec["pool"] == {"name": "node-a", "generation": 1, "resourceSliceCount": 3}
    counters = counter_sets(built)["chip-0"]["counters"]
    assert {k: v["value"] for k, v in counters.items()} == {
        "aicore": "8",
        "aicpu": "7",
        "memory": "24576Mi",
        "vpc": "12",
        "vdec": "12",
        "jpegd": "16",
        "jpege": "8",
        "venc": "3",
        "vnpus": "7",
    }
    assert sorted(counter_sets(built)) == ["chip-0", "chip-1", "chip-2", "chip-3"]
    assert templates(built, 2) == {
        "whole": 1,
        "vir01": 7,
        "vir02": 3,
        "vir02_1c": 4,
        "vir04": 1,
        "vir04_3c": 2,
    }
    assert len(devices(built)) == 4 * 18
    by_name = {d["name"]: d for d in devices(built)}
    vir02 = by_name["chip-3-vir02-2"]
    assert vir02["attributes"] == {
        "model": {"string": "Ascend310P"},
        "chip": {"string": make_chips("310P3", 4)[3].info.uuid},
        "index": {"int": 3},
        "server": {"string": "300i-duo"},
        "card": {"int": 1},
        "template": {"string": "vir02"},
    }
    assert vir02["capacity"] == {
        "memory": {"value": "6144Mi"},
        "aicore": {"value": "2"},
        "aicpu": {"value": "2"},
    }
    assert vir02["consumesCounters"] == [
        {
            "counterSet": "chip-3",
            "counters": {
                k: {"value": v}
                for k, v in {
                    "aicore": "2",
                    "aicpu": "2",
                    "memory": "6144Mi",
                    "vpc": "3",
                    "vdec": "3",
                    "jpegd": "4",
                    "jpege": "2",
                    "venc": "1",
                    "vnpus": "1",
                }.items()
            },
        }
    ]
    whole = by_name["chip-0-whole"]
    assert whole["consumesCounters"][0]["counters"] == counters
    assert by_name["chip-1-vir04-3c-1"]["attributes"]["template"] == {"string": "vir04_3c"}
    assert all("taints" not in d for d in devices(built))


def test_910a_node_of_eight_chips_in_two_rings(make_chips: MakeChips) -> None:
    built = slices.build("train-1", make_chips("910A", 8), model("910A"))
    check_limits(built)
    assert templates(built, 5) == {"whole": 1, "vir02": 15, "vir04": 7, "vir08": 3, "vir16": 1}
    counters = counter_sets(built)["chip-7"]["counters"]
    assert set(counters) == {"aicore", "aicpu", "memory", "vnpus"}  # no media budgets on 910A
    assert counters["vnpus"] == {"value": "15"}
    rings = {
        d["attributes"]["index"]["int"]: d["attributes"]["ring"]["int"] for d in devices(built)
    }
    assert rings == {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1}
    assert {d["attributes"]["server"]["string"] for d in devices(built)} == {"910a-8"}
    # 27 devices a chip: two chips a slice, one counter slice, four device slices.
    assert [len(s["spec"].get("devices") or []) for s in built] == [0, 54, 54, 54, 54]


def test_910b3_node_is_one_mesh(make_chips: MakeChips) -> None:
    built = slices.build("a2", make_chips("910B3", 8), model("910B3"))
    check_limits(built)
    assert templates(built, 0) == {"whole": 1, "vir05_1c_16g": 4, "vir10_3c_32g": 2}
    assert counter_sets(built)["chip-0"]["counters"]["memory"] == {"value": "65536Mi"}
    assert {d["attributes"]["mesh"]["int"] for d in devices(built)} == {0}
    assert "ring" not in devices(built)[0]["attributes"]


@pytest.mark.parametrize(
    ("kind", "attribute", "groups"),
    [
        (topology.ServerKind.PCIE, None, None),
        (topology.ServerKind.A3_PAIRS, "module", [0, 0, 1, 1]),
        (topology.ServerKind.DUO_300I, "card", [0, 0, 1, 1]),
    ],
)
def test_server_layout_names_the_group(
    make_chips: MakeChips,
    kind: topology.ServerKind,
    attribute: str | None,
    groups: list[int] | None,
) -> None:
    built = slices.build("n", make_chips("310P3", 4), model("310P3"), server=kind)
    wholes = [d for d in devices(built) if d["attributes"]["template"]["string"] == "whole"]
    assert {d["attributes"]["server"]["string"] for d in wholes} == {kind.value}
    keys = {"model", "chip", "index", "server", "template"}
    if attribute is None:
        assert all(set(d["attributes"]) == keys for d in wholes)
    else:
        assert [d["attributes"][attribute]["int"] for d in wholes] == groups


def test_soft_node_has_one_shared_device_per_chip_and_no_counters(make_chips: MakeChips) -> None:
    built = slices.build("soft-1", make_chips("310P3", 4), model("310P3"), soft=True)
    check_limits(built)
    assert [s["metadata"]["name"] for s in built] == ["soft-1-npu.vnpu.io-devices-0"]
    found = devices(built)
    assert [d["name"] for d in found] == [f"chip-{i}-soft" for i in range(4)]
    device = found[0]
    assert device["allowMultipleAllocations"] is True
    assert "consumesCounters" not in device
    assert device["attributes"]["template"] == {"string": "soft"}
    assert device["capacity"]["memory"] == {
        "value": "21527Mi",
        "requestPolicy": {
            "default": "21527Mi",
            "validRange": {"min": "1Mi", "max": "21527Mi", "step": "1Mi"},
        },
    }
    assert device["capacity"]["corePercent"]["value"] == "100"
    assert device["capacity"]["corePercent"]["requestPolicy"]["validRange"]["max"] == "100"


DEGRADED = backend.ChipHealth(backend.Health.MINOR, (0x80E18405,))  # SubHealthFault
FAILED = backend.ChipHealth(backend.Health.CRITICAL, (0x80E18402,))  # SeparateNPU


def test_degraded_and_failed_chips_taint_their_devices_only(make_chips: MakeChips) -> None:
    health = {1: DEGRADED, 2: FAILED, 3: None}  # chip 3 dropped off the bus
    built = slices.build("sick", make_chips("310P3", 4, health), model("310P3"))
    check_limits(built)
    taints: dict[int, set[tuple[str, str, str]]] = collections.defaultdict(set)
    for device in devices(built):
        for taint in device.get("taints") or [{}]:
            taints[device["attributes"]["index"]["int"]].add(
                (taint.get("key", ""), taint.get("value", ""), taint.get("effect", ""))
            )
    assert dict(taints) == {
        0: {("", "", "")},
        1: {("npu.vnpu.io/fault", "SubHealthFault", "NoSchedule")},
        2: {("npu.vnpu.io/fault", "SeparateNPU", "NoExecute")},
        3: {("npu.vnpu.io/fault", "RestartNPU", "NoExecute")},
    }
    # A fault changes the devices' taints, never the shape of the pool.
    healthy = slices.build("sick", make_chips("310P3", 4), model("310P3"))
    assert [d["name"] for d in devices(healthy)] == [d["name"] for d in devices(built)]


def test_soft_devices_are_tainted_too(make_chips: MakeChips) -> None:
    built = slices.build("s", make_chips("310P3", 2, {0: FAILED}), model("310P3"), soft=True)
    assert [d.get("taints", []) and d["taints"][0]["effect"] for d in devices(built)] == [
        "NoExecute",
        [],
    ]


@pytest.mark.parametrize(
    ("level", "effect"),
    [
        (faults.FaultLevel.NORMAL, None),
        (faults.FaultLevel.NOT_HANDLE, None),
        (faults.FaultLevel.SUB_HEALTH, "NoSchedule"),
        (faults.FaultLevel.RESTART_REQUEST, "NoSchedule"),
        (faults.FaultLevel.RESTART_BUSINESS, "NoSchedule"),
        (faults.FaultLevel.FREE_RESTART_NPU, "NoSchedule"),
        (faults.FaultLevel.RESTART_NPU, "NoExecute"),
        (faults.FaultLevel.SEPARATE_NPU, "NoExecute"),
    ],
)
def test_fault_level_to_taint_effect(level: faults.FaultLevel, effect: str | None) -> None:
    codes = [code for code, known in faults.KNOWN_CODES.items() if known is level]
    raw = backend.Health.MINOR if codes else backend.Health.OK
    health = backend.ChipHealth(raw, tuple(codes[:1]))
    assert faults.assess(health).level is level
    assert slices.taint_effect(health) == effect


def test_big_node_is_split_within_the_limits(make_chips: MakeChips) -> None:
    built = slices.build("big", make_chips("910B3", 16, {5: FAILED}), model("910B3"))
    check_limits(built)
    kinds = [s["metadata"]["name"].rsplit("-", 2)[1] for s in built]
    assert kinds == ["counters", "counters", "devices", "devices"]
    assert [len(s["spec"].get("sharedCounters") or []) for s in built[:2]] == [8, 8]
    assert [len(s["spec"]["devices"]) for s in built[2:]] == [63, 49]  # 7 a chip, chips kept whole
    rings = {
        d["attributes"]["index"]["int"]: d["attributes"]["ring"]["int"] for d in devices(built)
    }
    assert rings == {i: i // 8 for i in range(16)}


def test_a_chip_with_more_devices_than_a_slice_holds_fills_slices_of_its_own(
    make_chips: MakeChips,
) -> None:
    many = catalog.ChipModel(
        name="910A",
        chip_name="910A",
        common_word="Ascend910A",
        aicore=200,
        aicpu=16,
        memory_capacity_mib=200 * 1024,
        memory_allocatable_mib=200 * 1024,
        max_vnpus=100,
        templates=(catalog.Template("vir01", 1024, 1, 0),),
    )
    built = slices.build("huge", make_chips("910A", 2), many)
    check_limits(built)
    assert [len(s["spec"].get("devices") or []) for s in built] == [0, 64, 37, 64, 37]


@pytest.mark.parametrize("name", ["310P3", "910A", "910B1", "910B3", "910B4", "910C-24"])
def test_template_devices_are_the_most_one_chip_holds(name: str) -> None:
    m = model(name)
    budgets = slices.chip_counters(m)
    for template in m.templates:
        count = slices.placements(m, template)
        needs = slices.template_needs(m, template)
        assert count >= 1
        assert all(count * amount <= budgets[k] for k, amount in needs.items())
        assert any((count + 1) * amount > budgets[k] for k, amount in needs.items())


def test_same_input_same_slices_whatever_the_chip_order(make_chips: MakeChips) -> None:
    chips_ = make_chips("910A", 8, {3: FAILED})
    first = slices.build("n", chips_, model("910A"), generation=4)
    second = slices.build("n", list(reversed(chips_)), model("910A"), generation=4)
    assert first == second
    assert {s["spec"]["pool"]["generation"] for s in first} == {4}


@pytest.mark.parametrize(
    ("node", "count", "twice", "generation", "field"),
    [
        ("", 1, False, 1, "node"),
        ("n" * 240, 1, False, 1, "node"),
        ("n", 0, False, 1, "chips"),
        ("n", 1, True, 1, "phy_id"),
        ("n", 1, False, 0, "generation"),
    ],
)
def test_input_that_cannot_be_published(
    make_chips: MakeChips, node: str, count: int, twice: bool, generation: int, field: str
) -> None:
    chips_ = make_chips("310P3", count) * (2 if twice else 1)
    with pytest.raises(errors.SliceError) as caught:
        slices.build(node, chips_, model("310P3"), generation=generation)
    assert caught.value.field == field


def test_chips_read_from_a_simulated_node_keep_a_gone_chip(
    make_sim_node: Callable[[Path, str, int], Path], tmp_path: Path
) -> None:
    from vnpu_npu.sim import backend as sim_backend

    directory = make_sim_node(tmp_path / "node", "310P3", 4)
    control.inject_fault(directory, 1, codes=[0x80E18402])
    control.inject_fault(directory, 2, gone=True)
    read = chips.read(sim_backend.SimBackend(directory))
    assert [c.info.phy_id for c in read] == [0, 1, 2, 3]
    assert [slices.taint_effect(c.health) for c in read] == [None, "NoExecute", "NoExecute", None]
    assert read[2].health is None
