import pytest

from vnpu_core import catalog, topology
from vnpu_core.topology import ServerKind


@pytest.mark.parametrize(
    ("word", "split"),
    [
        ("Ascend310P", 7),
        ("Ascend910A", 15),
        ("Ascend910B2", 8),
        ("Ascend910B3", 4),
        ("Ascend910B4", 4),
        ("Ascend910B4-1", 4),
        ("Ascend910C", 4),
    ],
)
def test_split_count_matches_what_hami_advertises(word: str, split: int) -> None:
    model = catalog.BUILTIN.by_common_word(word)
    assert model is not None
    assert model.split_count == split


def test_every_template_fits_its_chip_alone() -> None:
    for model in catalog.BUILTIN:
        for template in model.templates:
            assert template.memory_mib <= model.memory_capacity_mib, (model.name, template.name)
            assert template.aicore <= model.aicore, (model.name, template.name)
            assert template.aicpu <= model.aicpu, (model.name, template.name)


def test_910b4_1_carries_its_own_64g_templates_not_910b4s() -> None:
    b4 = catalog.BUILTIN.by_common_word("Ascend910B4")
    b41 = catalog.BUILTIN.by_common_word("Ascend910B4-1")
    assert b4 is not None
    assert b41 is not None
    assert [t.memory_mib for t in b4.templates] == [8192, 16384]
    assert [t.memory_mib for t in b41.templates] == [16384, 32768]


def test_lookups_by_resource_and_chip_name() -> None:
    model = catalog.BUILTIN.by_resource("huawei.com/Ascend310P-memory")
    assert model is not None
    assert model.name == "310P3"
    assert catalog.BUILTIN.by_resource("huawei.com/Ascend910B4") is not catalog.BUILTIN.by_resource(
        "huawei.com/Ascend910B4-1"
    )
    die24 = catalog.BUILTIN.by_chip_name("Ascend910", aicore=24)
    assert die24 is not None
    assert die24.common_word == "Ascend910C-24"
    die20 = catalog.BUILTIN.by_chip_name("Ascend910", aicore=20)
    assert die20 is not None
    assert die20.common_word == "Ascend910C"
    assert catalog.BUILTIN.by_chip_name("999X") is None


def test_templates_are_kept_in_rounding_order() -> None:
    model = catalog.ChipModel(
        "x",
        "x",
        "X",
        8,
        7,
        100,
        100,
        7,
        (catalog.Template("big", 50, 4, 4), catalog.Template("small", 10, 1, 1)),
    )
    assert [t.name for t in model.templates] == ["small", "big"]
    assert model.resource_name == "huawei.com/X"
    assert model.memory_resource == "huawei.com/X-memory"


@pytest.mark.parametrize(
    ("kind", "chips", "allowed"),
    [
        (ServerKind.RING_910A_8, 8, (1, 2, 4, 8)),
        (ServerKind.RING_910A_4, 4, (1, 2, 4)),
        (ServerKind.MESH_910B_8, 8, (1, 2, 3, 4, 5, 6, 7, 8)),
        (ServerKind.RINGS_910B_16, 16, (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16)),
        (ServerKind.A3_PAIRS, 16, (1, 2, 4, 6, 8, 10, 12, 14, 16)),
        (ServerKind.DUO_300I, 4, (1, 2, 3, 4)),
    ],
)
def test_allowed_counts(kind: ServerKind, chips: int, allowed: tuple[int, ...]) -> None:
    assert topology.build(kind, chips).allowed_counts() == allowed


@pytest.mark.parametrize(
    ("free", "count", "chosen"),
    [
        # Huawei's ring order: one chip from a ring with 1 free, then 3, then 2, then 4.
        ((0, 1, 2, 3, 7), 1, (7,)),
        ((0, 1, 2, 3, 5, 6, 7), 1, (5,)),
        ((0, 1, 2, 3, 6, 7), 1, (6,)),
        # Two chips: a ring with exactly 2 free first.
        ((0, 1, 2, 3, 6, 7), 2, (6, 7)),
        ((0, 1, 2, 3, 4, 5, 6), 2, (0, 1)),
        # Four chips only from one whole ring; never split across rings.
        ((0, 1, 2, 4, 5, 6), 4, None),
        ((1, 2, 3, 4, 5, 6, 7), 4, (4, 5, 6, 7)),
        ((0, 1, 2, 3, 4, 5, 6, 7), 8, (0, 1, 2, 3, 4, 5, 6, 7)),
        ((0, 1, 2, 3, 4, 5, 6), 3, None),
    ],
)
def test_910a_ring_choice(
    free: tuple[int, ...], count: int, chosen: tuple[int, ...] | None
) -> None:
    assert topology.build(ServerKind.RING_910A_8, 8).choose(free, count) == chosen


def test_16_chip_box_splits_large_requests_at_matching_positions() -> None:
    box = topology.build(ServerKind.RINGS_910B_16, 16)
    free = (0, 1, 2, 3, 4, 9, 10, 11, 12, 13, 14)
    assert box.choose(free, 10) is None  # only positions 1-4 are free in both rings
    assert box.choose(free, 8) is None  # no ring has 8 free
    assert box.choose(free, 6) == (9, 10, 11, 12, 13, 14)
    all_free = tuple(range(16))
    assert box.choose(all_free, 10) == (0, 1, 2, 3, 4, 8, 9, 10, 11, 12)


def test_a3_even_requests_take_whole_pairs_and_singles_fill_broken_pairs() -> None:
    a3 = topology.build(ServerKind.A3_PAIRS, 8)
    assert a3.choose((1, 2, 3, 4, 5, 6, 7), 4) == (2, 3, 4, 5)
    assert a3.choose((1, 2, 3, 4, 5, 6, 7), 1) == (1,)
    assert a3.choose((1, 3, 5, 7), 2) is None
    assert not a3.allowed(3)


def test_duo_cards_keep_pairs_together() -> None:
    duo = topology.build(ServerKind.DUO_300I, 4)
    assert duo.choose((0, 2, 3), 1) == (0,)
    assert duo.choose((0, 2, 3), 2) == (2, 3)


def test_short_reasons_are_for_people() -> None:
    ring = topology.build(ServerKind.RING_910A_8, 8)
    assert (
        ring.short_reason((0, 1, 2, 4, 5, 6), 4)
        == "4 chips must sit in one HCCS ring of 4 (best ring has 3 free)"
    )
    assert "not an allowed count" in ring.short_reason(tuple(range(8)), 3)


@pytest.mark.parametrize(
    ("name", "chips", "kind"),
    [
        ("910A", 8, ServerKind.RING_910A_8),
        ("910A", 4, ServerKind.RING_910A_4),
        ("910B3", 8, ServerKind.MESH_910B_8),
        ("910B2", 16, ServerKind.RINGS_910B_16),
        ("910C", 16, ServerKind.A3_PAIRS),
        ("310P3", 4, ServerKind.DUO_300I),
        ("310P3", 1, ServerKind.PCIE),
    ],
)
def test_default_server_kinds(name: str, chips: int, kind: ServerKind) -> None:
    model = next(m for m in catalog.BUILTIN if m.name == name)
    assert topology.default_kind(model, chips) is kind
