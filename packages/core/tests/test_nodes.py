from datetime import datetime, timedelta
from typing import Any

import pytest

from vnpu_core import catalog, nodes, protocol
from vnpu_core.topology import ServerKind

NOW = datetime(2026, 8, 18, 9, 56, 0)
TIMEOUT = timedelta(seconds=60)


def register(word: str, chips: int, **overrides: Any) -> str:
    items = [
        protocol.RegisteredChip(
            id=f"UUID-{i}",
            index=i,
            count=overrides.get("count", 4),
            devmem=overrides.get("devmem", 65536),
            devcore=20,
            type=overrides.get("type", word),
            health=i not in overrides.get("sick", ()),
            network_id=0 if i < 4 else 1,
        )
        for i in range(chips)
    ]
    return protocol.encode_node_register(items)


def node_obj(
    annotations: dict[str, str], allocatable: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": "n1", "annotations": annotations},
        "status": {
            "allocatable": allocatable
            if allocatable is not None
            else {"huawei.com/Ascend910B3": "32"}
        },
    }


def read(obj: dict[str, Any]) -> nodes.NodeRead:
    return nodes.read_node(obj, catalog.BUILTIN, NOW, TIMEOUT)


def test_a_hami_registered_910b3_node() -> None:
    obj = node_obj(
        {
            "hami.io/node-register-Ascend910B3": register("Ascend910B3", 8, sick=(5,)),
            "hami.io/node-handshake-Ascend910B3": "Reported_2026.08.18 09:55:36",
            "hami-vnpu-core": "false",
        }
    )
    result = read(obj)
    assert result.unavailable == ""
    assert result.node is not None
    assert [c.uuid for c in result.node.chips] == [f"UUID-{i}" for i in range(8)]
    assert [c.healthy for c in result.node.chips].count(False) == 1
    assert result.node.topology.kind is ServerKind.MESH_910B_8
    assert not result.node.soft


def test_stale_handshake_makes_the_node_unavailable_with_the_age() -> None:
    obj = node_obj(
        {
            "hami.io/node-register-Ascend910B3": register("Ascend910B3", 8),
            "hami.io/node-handshake-Ascend910B3": "Requesting_2026-08-18 09:50:00",
        }
    )
    result = read(obj)
    assert result.node is None
    assert (
        result.unavailable == "device plugin for Ascend910B3 last reported 360 s ago (limit 60 s)"
    )


@pytest.mark.parametrize(
    ("allocatable", "available"),
    [("1k", True), ("8", True), ("2e1", True), (8, True), ("0", False), ("x", False)],
)
def test_allocatable_counts_are_read_in_any_quantity_form(
    allocatable: object, available: bool
) -> None:
    # kube-apiserver stores an allocatable count of 1000 as 1k.
    obj = node_obj(
        {"hami.io/node-register-Ascend910B3": register("Ascend910B3", 2)},
        allocatable={"huawei.com/Ascend910B3": allocatable},
    )
    assert (read(obj).unavailable == "") is available


def test_no_allocatable_means_unavailable() -> None:
    obj = node_obj(
        {"hami.io/node-register-Ascend910B3": register("Ascend910B3", 2)}, allocatable={}
    )
    assert read(obj).unavailable == "kubelet reports no allocatable huawei.com/Ascend910B3"


def test_no_registration() -> None:
    assert read(node_obj({})).unavailable == "no NPU registered on this node"


def test_malformed_register_names_the_key() -> None:
    result = read(node_obj({"hami.io/node-register-Ascend910B3": "[{"}))
    assert result.node is None
    assert "hami.io/node-register-Ascend910B3" in result.unavailable


def test_server_kind_and_soft_mode_annotations() -> None:
    obj = node_obj(
        {
            "hami.io/node-register-Ascend910B3": register("Ascend910B3", 8),
            "vnpu.io/server": "pcie",
            "hami-vnpu-core": "true",
        }
    )
    result = read(obj)
    assert result.node is not None
    assert result.node.topology.kind is ServerKind.PCIE
    assert result.node.soft
    bad = read(
        node_obj(
            {
                "hami.io/node-register-Ascend910B3": register("Ascend910B3", 8),
                "vnpu.io/server": "ring",
            }
        )
    )
    assert bad.node is not None
    assert bad.node.topology.kind is ServerKind.MESH_910B_8
    assert any("unknown server kind 'ring'" in w for w in bad.warnings)


def test_chip_figures_come_from_the_registration() -> None:
    obj = node_obj(
        {"hami.io/node-register-Ascend910B3": register("Ascend910B3", 2, count=3, devmem=60000)}
    )
    result = read(obj)
    assert result.node is not None
    chip = result.node.chips[0]
    assert (chip.slots, chip.memory_mib, chip.vnpu_limit) == (3, 60000, 3)


def test_a_model_whose_register_lists_no_chip_of_its_type_is_reported_on_a_mixed_node() -> None:
    obj = node_obj(
        {
            "hami.io/node-register-Ascend910B3": register("Ascend910B3", 2),
            # read after the 910B3 entry (catalog order), so chips from it are already counted
            "hami.io/node-register-Ascend910C": register("Ascend910C", 1, type="Ascend910B3"),
        },
        allocatable={"huawei.com/Ascend910B3": "8", "huawei.com/Ascend910C": "4"},
    )
    result = read(obj)
    assert result.node is not None
    assert [c.model.common_word for c in result.node.chips] == ["Ascend910B3", "Ascend910B3"]
    assert "hami.io/node-register-Ascend910C lists no Ascend910C chip" in result.warnings


def listed(word: str, indices: list[int], networks: list[int | None] | None = None) -> str:
    """A HAMi-style register of chips with the given ``index`` values (and NetworkIDs)."""
    items = [
        protocol.RegisteredChip(
            id=f"D-{n}-{position}",
            index=n,
            count=4,
            devmem=65536,
            devcore=20,
            type=word,
            health=True,
            network_id=None if networks is None else networks[position],
        )
        for position, n in enumerate(indices)
    ]
    return protocol.encode_node_register(items)


def test_a3_dies_are_paired_by_their_registered_index_not_their_place_in_the_list() -> None:
    obj = node_obj(
        {"hami.io/node-register-Ascend910C": listed("Ascend910C", [0, 1, 2, 4, 6])},
        allocatable={"huawei.com/Ascend910C": "20"},
    )
    result = read(obj)
    assert result.node is not None
    assert [c.number for c in result.node.chips] == [0, 1, 2, 4, 6]
    assert [c.index for c in result.node.chips] == [0, 1, 2, 3, 4]
    assert result.node.topology.kind is ServerKind.A3_PAIRS
    assert result.node.topology.groups == ((0, 1), (2,), (3,), (4,))  # module = index // 2
    assert result.warnings == ()


def test_a_register_listed_out_of_order_keeps_each_chip_with_its_index() -> None:
    obj = node_obj({"hami.io/node-register-Ascend910A": listed("Ascend910A", [4, 5, 6, 7, 0, 1, 2, 3])},
                   allocatable={"huawei.com/Ascend910A": "8"})  # fmt: skip
    result = read(obj)
    assert result.node is not None
    assert result.node.topology.kind is ServerKind.RING_910A_8
    assert result.node.topology.groups == ((4, 5, 6, 7), (0, 1, 2, 3))


def test_a_910a_server_with_one_chip_left_out_keeps_its_rings() -> None:
    obj = node_obj(
        {"hami.io/node-register-Ascend910A": listed("Ascend910A", [0, 1, 2, 4, 5, 6, 7])},
        allocatable={"huawei.com/Ascend910A": "8"},
    )
    result = read(obj)
    assert result.node is not None
    assert result.node.topology.kind is ServerKind.RING_910A_8
    assert result.node.topology.groups == ((0, 1, 2), (3, 4, 5, 6))


@pytest.mark.parametrize(
    ("indices", "warned"),
    [([0, 0, 0, 0], False), ([0, 1, 1, 3], True)],
)
def test_repeated_indices_fall_back_to_list_order(indices: list[int], warned: bool) -> None:
    obj = node_obj(
        {"hami.io/node-register-Ascend910C": listed("Ascend910C", indices)},
        allocatable={"huawei.com/Ascend910C": "16"},
    )
    result = read(obj)
    assert result.node is not None
    assert [c.number for c in result.node.chips] == [0, 1, 2, 3]
    assert any("both have index 1" in w for w in result.warnings) is warned


@pytest.mark.parametrize(
    ("word", "networks", "expected"),
    [
        ("Ascend910B3", [0, 0, 1, 1], {0: 0, 1: 0, 2: 1, 3: 1}),
        ("Ascend910B3", [0, None, 1, 1], None),  # HAMi groups only when every chip has one
        ("Ascend910B3", None, None),
        ("Ascend310P", [0, 0, 1, 1], None),  # only the 910 series is grouped
    ],
)
def test_network_ids_are_read_when_every_910_chip_registers_one(
    word: str, networks: list[int | None] | None, expected: dict[int, int] | None
) -> None:
    model = catalog.BUILTIN.by_common_word(word)
    assert model is not None
    obj = node_obj(
        {protocol.node_register_key(word): listed(word, [0, 1, 2, 3], networks)},
        allocatable={model.resource_name: "16"},
    )
    result = read(obj)
    assert result.node is not None
    assert result.node.network_ids(word) == expected
