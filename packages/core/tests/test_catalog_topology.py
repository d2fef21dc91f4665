import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


# --- registered numbers with gaps, and NetworkID groups ---


@pytest.mark.parametrize(
    ("kind", "numbers", "free", "count", "chosen"),
    [
        # A3 dies 0,1,2,4,6 (3 and 5 not listed): only dies 0 and 1 form a module.
        (ServerKind.A3_PAIRS, (0, 1, 2, 4, 6), (0, 1, 2, 3, 4), 2, (0, 1)),
        (ServerKind.A3_PAIRS, (0, 1, 2, 4, 6), (2, 3, 4), 2, None),
        (ServerKind.A3_PAIRS, (0, 1, 2, 4, 6), (0, 1, 2, 3, 4), 4, None),
        # A single die goes to a die without a partner before it breaks the whole module.
        (ServerKind.A3_PAIRS, (0, 1, 2, 4, 6), (0, 1, 2, 3, 4), 1, (2,)),
        (ServerKind.A3_PAIRS, (2, 3, 6, 7), (0, 1, 2, 3), 4, (0, 1, 2, 3)),
        # 910A with chip 3 left out: the rings are chips 0-2 and 4-7, at positions 0-2 and 3-6.
        (ServerKind.RING_910A_8, (0, 1, 2, 4, 5, 6, 7), tuple(range(7)), 4, (3, 4, 5, 6)),
        (ServerKind.RING_910A_8, (0, 1, 2, 4, 5, 6, 7), (0, 1, 2, 3), 2, (0, 1)),
        (ServerKind.RING_910A_8, (0, 1, 2, 4, 5, 6, 7), (2, 3, 4), 2, (3, 4)),
        # 16-chip box without chip 8: numbers n and n+8 go together, so 1-7 with 9-15.
        (ServerKind.RINGS_910B_16, (*range(8), *range(9, 16)), tuple(range(15)), 10,
         (1, 2, 3, 4, 5, 8, 9, 10, 11, 12)),
        # 300I Duo cards are numbers 2k and 2k+1: card (4, 5) is whole, (2, 3) lacks 3.
        (ServerKind.DUO_300I, (0, 2, 4, 5), (0, 1, 2, 3), 2, (2, 3)),
    ],
)  # fmt: skip
def test_groups_follow_the_registered_numbers(
    kind: ServerKind,
    numbers: tuple[int, ...],
    free: tuple[int, ...],
    count: int,
    chosen: tuple[int, ...] | None,
) -> None:
    assert topology.build(kind, numbers).choose(free, count) == chosen


def test_a3_reasons_count_only_complete_modules() -> None:
    a3 = topology.build(ServerKind.A3_PAIRS, (0, 1, 2, 4, 6))
    assert a3.short_reason((2, 3, 4), 2) == "2 dies must take whole die pairs (0 pairs free)"
    assert a3.groups == ((0, 1), (2,), (3,), (4,))


@pytest.mark.parametrize(
    ("numbers", "kind"),
    [
        ((0, 1, 2, 4, 5, 6, 7), ServerKind.RING_910A_8),  # 7 of 8 chips listed
        ((0, 1, 2, 3), ServerKind.RING_910A_4),
        ((1, 2, 3, 4, 5, 6, 7), ServerKind.RING_910A_8),
        ((0, 1, 2), ServerKind.PCIE),
    ],
)
def test_default_kind_reads_the_server_size_from_the_numbers(
    numbers: tuple[int, ...], kind: ServerKind
) -> None:
    model = next(m for m in catalog.BUILTIN if m.name == "910A")
    assert topology.default_kind(model, numbers) is kind


@pytest.mark.parametrize("numbers", [(0, 1, 2, 4, 6), (0, 1, 2), tuple(range(16))])
def test_910c_dies_are_always_in_pairs(numbers: tuple[int, ...]) -> None:
    model = next(m for m in catalog.BUILTIN if m.name == "910C")
    assert topology.default_kind(model, numbers) is ServerKind.A3_PAIRS


# HAMi's plugin: NetworkID 0 for chips 0-3, 1 for 4 and up (the 910A ring split, on every 910).
HAMI_NETWORKS = {i: 0 if i < 4 else 1 for i in range(8)}


@pytest.mark.parametrize(
    ("free", "count", "chosen"),
    [
        # Inside one NetworkID when one holds the request: the fullest one that does (best fit).
        ((0, 1, 4, 5, 6, 7), 2, (0, 1)),
        ((0, 1, 4, 5, 6, 7), 4, (4, 5, 6, 7)),
        ((0, 1, 2, 4, 5, 6, 7), 3, (0, 1, 2)),
        ((0, 1, 2, 3, 4, 5, 6, 7), 4, (0, 1, 2, 3)),
        # No NetworkID holds it: the set spans them, as HAMi's does.
        ((0, 1, 4, 5, 6, 7), 5, (0, 1, 4, 5, 6)),
        (tuple(range(8)), 8, tuple(range(8))),
        # One chip: NetworkID plays no part.
        ((0, 4, 5), 1, (0,)),
    ],
)
def test_mesh_keeps_multi_chip_sets_inside_one_network_id(
    free: tuple[int, ...], count: int, chosen: tuple[int, ...]
) -> None:
    mesh = topology.build(ServerKind.MESH_910B_8, 8)
    assert mesh.choose(free, count, HAMI_NETWORKS) == chosen


def test_network_ids_never_override_the_layout() -> None:
    # NetworkIDs that cut across the 910A rings: the rings still decide.
    crossing = {0: 0, 1: 0, 2: 1, 3: 1, 4: 0, 5: 0, 6: 1, 7: 1}
    ring = topology.build(ServerKind.RING_910A_8, 8)
    assert ring.choose(tuple(range(8)), 4, crossing) == (0, 1, 2, 3)
    assert ring.choose((0, 1, 4, 5), 2, crossing) == (0, 1)
    a3 = topology.build(ServerKind.A3_PAIRS, 8)
    assert a3.choose((1, 2, 3, 4, 5), 2, {i: i % 2 for i in range(8)}) == (2, 3)


@st.composite
def layouts(
    draw: st.DrawFn,
) -> tuple[topology.Topology, tuple[int, ...], int, dict[int, int]]:
    kind = draw(st.sampled_from(list(ServerKind)))
    chips = draw(st.integers(1, 16))
    span = chips + draw(st.integers(0, 4))
    numbers = tuple(sorted(draw(st.permutations(range(span)))[:chips]))
    free = tuple(i for i in range(chips) if draw(st.booleans()))
    count = draw(st.integers(1, chips))
    networks = {i: draw(st.integers(0, 2)) for i in range(chips)}
    return topology.build(kind, numbers), free, count, networks


@settings(max_examples=300, deadline=None)
@given(layouts())
def test_network_ids_only_narrow_the_choice(
    case: tuple[topology.Topology, tuple[int, ...], int, dict[int, int]],
) -> None:
    layout, free, count, networks = case
    plain = layout.choose(free, count)
    grouped = layout.choose(free, count, networks)
    # Never refuses what the layout allows, never allows what it refuses.
    assert (plain is None) == (grouped is None)
    if grouped is None:
        return
    assert len(grouped) == count
    assert set(grouped) <= set(free)
    assert layout.allowed(count)
    inside = [
        n
        for n in set(networks.values())
        if layout.choose([i for i in free if networks[i] == n], count) is not None
    ]
    if count > 1 and inside:
        assert len({networks[i] for i in grouped}) == 1, (grouped, inside)
