"""Server topologies: which chip sets a multi-chip pod may get on each kind of Ascend server.

Ascend servers join chips in HCCS rings, meshes, die pairs or cards, and collective
communication only works (or only works well) inside those groups. This module knows the
groups of each server kind, the per-pod chip counts the hardware allows, and picks the
chip set for a request. The allocator calls it for every multi-chip placement and uses
``group_of`` to keep whole groups free for larger requests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from vnpu_core import catalog


class ServerKind(StrEnum):
    """Server layouts; the values are what cluster files and node annotations carry."""

    RING_910A_8 = "910a-8"  # Atlas 800 training: two HCCS rings of 4 (chips 0-3, 4-7)
    RING_910A_4 = "910a-4"  # half server: one ring of 4
    MESH_910B_8 = "910b-8"  # Atlas 800T A2: full mesh of 8
    RINGS_910B_16 = "910b-16"  # 16-chip box: two rings of 8
    A3_PAIRS = "a3-pairs"  # A3: dies paired (0,1), (2,3), ...
    DUO_300I = "300i-duo"  # Atlas 300I Duo: two 310P chips per card
    PCIE = "pcie"  # independent cards, no chip-to-chip groups


_RING_910A = 4  # chips per HCCS ring on 910A servers: numbers 0-3 and 4-7
_RING_16 = 8  # chips per ring in a 16-chip box: numbers 0-7 and 8-15
_PAIR = 2  # dies per A3 module, chips per Atlas 300I Duo card

# Huawei's ring choice for 910A rings of 4: which free count to take from first, per request size.
_RING_ORDER = {1: (1, 3, 2, 4), 2: (2, 4, 3), 4: (4,)}


@dataclass(frozen=True, slots=True)
class Topology:
    """The groups of one server: ``groups[g]`` lists the chip positions of group ``g``.

    ``numbers[p]`` is the registered number of the chip at position ``p`` (its ``index`` in
    the node register); groups are built from the numbers and hold positions.
    """

    kind: ServerKind
    chips: int
    groups: tuple[tuple[int, ...], ...]
    numbers: tuple[int, ...] = ()
    _membership: dict[int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        membership = {i: number for number, group in enumerate(self.groups) for i in group}
        object.__setattr__(self, "_membership", membership)
        if not self.numbers:
            object.__setattr__(self, "numbers", tuple(range(self.chips)))

    def group_of(self, index: int) -> int:
        """The group holding the chip at position ``index``, or -1 for one outside the layout."""
        return self._membership.get(index, -1)

    def allowed_counts(self) -> tuple[int, ...]:
        n = self.chips
        if self.kind in (ServerKind.RING_910A_8, ServerKind.RING_910A_4):
            return tuple(c for c in (1, 2, 4, 8) if c <= n)
        if self.kind is ServerKind.RINGS_910B_16:
            half = max(len(g) for g in self.groups)
            return tuple(c for c in range(1, n + 1) if c <= half or c % 2 == 0)
        if self.kind is ServerKind.A3_PAIRS:
            return tuple(c for c in range(1, n + 1) if c == 1 or c % 2 == 0)
        return tuple(range(1, n + 1))

    def allowed(self, count: int) -> bool:
        return count in self.allowed_counts()

    def describe(self) -> str:
        counts = ", ".join(str(c) for c in self.allowed_counts())
        return f"{self.kind.value} server with {self.chips} chips (allowed counts {counts})"

    def choose(
        self, free: Sequence[int], count: int, networks: Mapping[int, int] | None = None
    ) -> tuple[int, ...] | None:
        """Pick ``count`` chips out of ``free`` (ascending positions) obeying the layout, or None.

        Choices are deterministic and best-fit: the smallest group that can hold the
        request is used first, so whole groups stay free for larger requests. With
        ``networks`` (position -> NetworkID, every chip of the model registered one), a
        multi-chip set is taken inside one NetworkID when the layout allows one there: the
        NetworkID with the fewest free chips that holds the request first, then the lower
        NetworkID. Only when no NetworkID can hold it does the set span NetworkIDs, and
        then only as the layout allows.
        """
        if not self.allowed(count) or len(free) < count:
            return None
        plain = self._choose(free, count)
        if plain is None:  # NetworkIDs only narrow what the layout allows, never widen it
            return None
        if networks is not None and count > 1:
            by_network: dict[int, list[int]] = {}
            for i in free:
                by_network.setdefault(networks.get(i, -1), []).append(i)
            ranked = sorted(by_network.items(), key=lambda item: (len(item[1]), item[0]))
            for _network, members in ranked:
                if len(members) >= count and len(members) < len(free):
                    inside = self._choose(members, count)
                    if inside is not None:
                        return inside
        return plain

    def _choose(self, free: Sequence[int], count: int) -> tuple[int, ...] | None:
        free_set = set(free)
        per_group = [tuple(i for i in group if i in free_set) for group in self.groups]
        if self.kind in (ServerKind.RING_910A_8, ServerKind.RING_910A_4):
            return self._choose_ring(per_group, count)
        if self.kind is ServerKind.RINGS_910B_16:
            if count <= max(len(g) for g in self.groups):
                return _best_fit_group(per_group, count)
            return self._choose_mirrored(free_set, count)
        if self.kind is ServerKind.A3_PAIRS:
            if count == 1:
                return _prefer_broken_groups(per_group, self.groups, 1)
            whole = [
                g
                for g, group in zip(per_group, self.groups, strict=True)
                if g == group and len(g) == 2
            ]
            if len(whole) * 2 < count:
                return None
            return tuple(sorted(i for pair in whole[: count // 2] for i in pair))
        if self.kind is ServerKind.DUO_300I:
            return _prefer_broken_groups(per_group, self.groups, count)
        return tuple(free[:count])

    def _choose_ring(self, per_group: list[tuple[int, ...]], count: int) -> tuple[int, ...] | None:
        if count == len(self.groups) * _RING_910A:
            chosen = [i for g in per_group for i in g]
            return tuple(chosen) if len(chosen) == count else None
        for wanted_free in _RING_ORDER.get(count, ()):
            for group in per_group:
                if len(group) == wanted_free:
                    return group[:count]
        return None

    def _choose_mirrored(self, free_set: set[int], count: int) -> tuple[int, ...] | None:
        """Chips at matching places of both rings: numbers ``n`` and ``n + 8`` go together."""
        if len(self.groups) < 2:
            return None
        first, second = self.groups[0], self.groups[1]
        partner = {self.numbers[i] % _RING_16: i for i in second}
        matched = [
            (i, partner[self.numbers[i] % _RING_16])
            for i in first
            if self.numbers[i] % _RING_16 in partner
            and i in free_set
            and partner[self.numbers[i] % _RING_16] in free_set
        ]
        if len(matched) * 2 < count:
            return None
        taken = matched[: count // 2]
        return tuple(sorted([a for a, _ in taken] + [b for _, b in taken]))

    def short_reason(self, free: Sequence[int], count: int) -> str:
        """Why ``choose`` found nothing, in words for a person."""
        if not self.allowed(count):
            return f"{count} chips is not an allowed count on a {self.describe()}"
        free_set = set(free)
        if self.kind in (ServerKind.RING_910A_8, ServerKind.RING_910A_4) and count < 8:
            best = max(sum(1 for i in g if i in free_set) for g in self.groups)
            return f"{count} chips must sit in one HCCS ring of 4 (best ring has {best} free)"
        if self.kind is ServerKind.RINGS_910B_16:
            if count <= 8:
                best = max(sum(1 for i in g if i in free_set) for g in self.groups)
                return f"{count} chips must sit in one ring of 8 (best ring has {best} free)"
            return f"{count} chips must split evenly over both rings at matching positions"
        if self.kind is ServerKind.A3_PAIRS:
            pairs = sum(1 for g in self.groups if len(g) == 2 and all(i in free_set for i in g))
            return f"{count} dies must take whole die pairs ({pairs} pairs free)"
        return f"{count} whole chips free needed ({len(free)} free)"


def _best_fit_group(per_group: list[tuple[int, ...]], count: int) -> tuple[int, ...] | None:
    fitting = [g for g in per_group if len(g) >= count]
    if not fitting:
        return None
    best = min(fitting, key=len)
    return best[:count]


def _prefer_broken_groups(
    per_group: list[tuple[int, ...]], groups: tuple[tuple[int, ...], ...], count: int
) -> tuple[int, ...] | None:
    """Take chips from groups already partly in use first, then whole groups, lowest index first.

    A group that lacks a member (a die or chip its device plugin did not list) counts as
    broken: it can never serve a pair, so a single chip is best placed there.
    """
    broken = [
        i
        for g, full in zip(per_group, groups, strict=True)
        if g != full or len(full) < _PAIR
        for i in g
    ]
    whole = [
        i
        for g, full in zip(per_group, groups, strict=True)
        if g == full and len(full) >= _PAIR
        for i in g
    ]
    # A single chip fills a broken group; several chips keep cards together (whole groups first).
    chosen = (whole + broken)[:count] if count > 1 else (broken + whole)[:count]
    return tuple(sorted(chosen)) if len(chosen) == count else None


def build(kind: ServerKind, chips: int | Sequence[int]) -> Topology:
    """The topology of a ``kind`` server.

    ``chips`` is either a chip count (the chips are numbered 0..chips-1) or the registered
    number of each chip in position order, e.g. ``(0, 1, 2, 4, 6)`` for an A3 node whose
    dies 3 and 5 are not listed: dies 0 and 1 form a pair, 2, 4 and 6 have no partner.
    """
    numbers = tuple(range(chips)) if isinstance(chips, int) else tuple(chips)
    positions = sorted(range(len(numbers)), key=lambda p: (numbers[p], p))
    size = {
        ServerKind.RING_910A_8: _RING_910A,
        ServerKind.RINGS_910B_16: _RING_16,
        ServerKind.A3_PAIRS: _PAIR,
        ServerKind.DUO_300I: _PAIR,
    }.get(kind)
    if kind in (ServerKind.RING_910A_4, ServerKind.MESH_910B_8):
        groups: tuple[tuple[int, ...], ...] = (tuple(positions),)
    elif size is None:
        groups = tuple((p,) for p in positions)
    else:
        by_group: dict[int, list[int]] = {}
        for p in positions:
            by_group.setdefault(numbers[p] // size, []).append(p)
        groups = tuple(tuple(by_group[g]) for g in sorted(by_group))
    return Topology(kind, len(numbers), tuple(g for g in groups if g), numbers)


def default_kind(model: catalog.ChipModel, chips: int | Sequence[int]) -> ServerKind:
    """The usual server for a node's chips of one model, used when nothing says otherwise.

    ``chips`` is a chip count or the registered chip numbers; with numbers the server's
    size is the highest number plus one, so a node that lists 7 of its 8 910A chips is
    still a ``910a-8``. 910C dies always come in pairs (a die whose partner is not listed
    serves single-die requests only).
    """
    if model.server:
        return ServerKind(model.server)
    size = chips if isinstance(chips, int) else max(chips, default=-1) + 1
    name = model.name
    if name == "910A":
        return {8: ServerKind.RING_910A_8, 4: ServerKind.RING_910A_4}.get(size, ServerKind.PCIE)
    if name.startswith("910B"):
        return {8: ServerKind.MESH_910B_8, 16: ServerKind.RINGS_910B_16}.get(size, ServerKind.PCIE)
    if name.startswith("910C"):
        return ServerKind.A3_PAIRS
    if name.startswith("310P"):
        return ServerKind.DUO_300I if size % 2 == 0 else ServerKind.PCIE
    return ServerKind.PCIE
