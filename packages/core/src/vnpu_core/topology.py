"""Server topologies: which chip sets a multi-chip pod may get on each kind of Ascend server.

Ascend servers join chips in HCCS rings, meshes, die pairs or cards, and collective
communication only works (or only works well) inside those groups. This module knows the
groups of each server kind, the per-pod chip counts the hardware allows, and picks the
chip set for a request. The allocator calls it for every multi-chip placement and uses
``group_of`` to keep whole groups free for larger requests.
"""

from __future__ import annotations

from collections.abc import Sequence
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


# Huawei's ring choice for 910A rings of 4: which free count to take from first, per request size.
_RING_ORDER = {1: (1, 3, 2, 4), 2: (2, 4, 3), 4: (4,)}


@dataclass(frozen=True, slots=True)
class Topology:
    """The groups of one server: ``groups[g]`` lists the chip indices of group ``g``."""

    kind: ServerKind
    chips: int
    groups: tuple[tuple[int, ...], ...]
    _membership: dict[int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        membership = {i: number for number, group in enumerate(self.groups) for i in group}
        object.__setattr__(self, "_membership", membership)

    def group_of(self, index: int) -> int:
        """The group holding chip ``index``, or -1 for a chip outside the layout."""
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

    def choose(self, free: Sequence[int], count: int) -> tuple[int, ...] | None:
        """Pick ``count`` chips out of ``free`` (ascending indices) obeying the layout, or None.

        Choices are deterministic and best-fit: the smallest group that can hold the
        request is used first, so whole groups stay free for larger requests.
        """
        if not self.allowed(count) or len(free) < count:
            return None
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
            whole = [g for g, group in zip(per_group, self.groups, strict=True) if g == group]
            if len(whole) * 2 < count:
                return None
            return tuple(sorted(i for pair in whole[: count // 2] for i in pair))
        if self.kind is ServerKind.DUO_300I:
            return _prefer_broken_groups(per_group, self.groups, count)
        return tuple(free[:count])

    def _choose_ring(self, per_group: list[tuple[int, ...]], count: int) -> tuple[int, ...] | None:
        if count == len(self.groups) * 4:
            chosen = [i for g in per_group for i in g]
            return tuple(chosen) if len(chosen) == count else None
        for wanted_free in _RING_ORDER.get(count, ()):
            for group in per_group:
                if len(group) == wanted_free:
                    return group[:count]
        return None

    def _choose_mirrored(self, free_set: set[int], count: int) -> tuple[int, ...] | None:
        first, second = self.groups[0], self.groups[1]
        positions = [
            p
            for p in range(min(len(first), len(second)))
            if first[p] in free_set and second[p] in free_set
        ]
        if len(positions) * 2 < count:
            return None
        taken = positions[: count // 2]
        return tuple(sorted([first[p] for p in taken] + [second[p] for p in taken]))

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
            pairs = sum(1 for g in self.groups if all(i in free_set for i in g))
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
    """Take chips from groups already partly in use first, then whole groups, lowest index first."""
    broken = [i for g, full in zip(per_group, groups, strict=True) if g != full for i in g]
    whole = [i for g, full in zip(per_group, groups, strict=True) if g == full for i in g]
    # A single chip fills a broken group; several chips keep cards together (whole groups first).
    chosen = (whole + broken)[:count] if count > 1 else (broken + whole)[:count]
    return tuple(sorted(chosen)) if len(chosen) == count else None


def build(kind: ServerKind, chips: int) -> Topology:
    """The topology of a ``kind`` server with ``chips`` chips (indices 0..chips-1)."""
    indices = tuple(range(chips))
    if kind is ServerKind.RING_910A_8 or kind is ServerKind.RINGS_910B_16:
        half = (chips + 1) // 2
        groups: tuple[tuple[int, ...], ...] = (indices[:half], indices[half:])
    elif kind in (ServerKind.A3_PAIRS, ServerKind.DUO_300I):
        groups = tuple(indices[i : i + 2] for i in range(0, chips, 2))
    elif kind in (ServerKind.RING_910A_4, ServerKind.MESH_910B_8):
        groups = (indices,)
    else:
        groups = tuple((i,) for i in indices)
    return Topology(kind, chips, tuple(g for g in groups if g))


def default_kind(model: catalog.ChipModel, chips: int) -> ServerKind:
    """The usual server for ``chips`` chips of a model, used when nothing says otherwise."""
    if model.server:
        return ServerKind(model.server)
    name = model.name
    if name == "910A":
        return {8: ServerKind.RING_910A_8, 4: ServerKind.RING_910A_4}.get(chips, ServerKind.PCIE)
    if name.startswith("910B"):
        return {8: ServerKind.MESH_910B_8, 16: ServerKind.RINGS_910B_16}.get(chips, ServerKind.PCIE)
    if name.startswith("910C"):
        return ServerKind.A3_PAIRS if chips % 2 == 0 else ServerKind.PCIE
    if name.startswith("310P"):
        return ServerKind.DUO_300I if chips % 2 == 0 else ServerKind.PCIE
    return ServerKind.PCIE
