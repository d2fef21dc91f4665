"""A node's chips and what is in use on each: the allocator's input.

``Node`` describes the hardware as registered (chips, health, server topology, soft-mode
support); ``ChipUsage`` is what the pods bound to the node hold on one chip, built by
``vnpu_core.ledger`` from pod annotations. Both are immutable; the allocator adds usage
by building new values. The scheduler, the planner and the exporter build these.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

from vnpu_core import catalog, topology

ZERO_MEDIA = (0, 0, 0, 0, 0, 0)
NETWORK_PREFIX = "Ascend910"  # common words whose chips HAMi groups by custominfo.NetworkID


@dataclass(frozen=True, slots=True)
class Chip:
    """One physical chip (or A3 die) of a node, as its device plugin registered it.

    ``index`` is the chip's position on the node (0..n-1 over every model's register list),
    the key allocations use; ``number`` is the ``index`` its device plugin registered,
    which the server topology is built from (-1: same as the position).
    """

    index: int
    uuid: str
    model: catalog.ChipModel
    healthy: bool = True
    slots: int = 0  # vNPU slots registered (HAMi `count`); 0 means the model's split count
    memory_mib: int = 0  # registered memory (HAMi `devmem`); 0 means the model's allocatable
    number: int = -1  # registered index (HAMi `index`); -1 means the position
    network_id: int | None = None  # registered custominfo.NetworkID (910 series)
    vnpu_limit: int = field(
        init=False, compare=False
    )  # hard vNPUs at once: slots capped by the hardware

    def __post_init__(self) -> None:
        if self.slots <= 0:
            object.__setattr__(self, "slots", self.model.split_count)
        if self.memory_mib <= 0:
            object.__setattr__(self, "memory_mib", self.model.memory_allocatable_mib)
        object.__setattr__(self, "vnpu_limit", min(self.slots, self.model.max_vnpus))
        if self.number < 0:
            object.__setattr__(self, "number", self.index)


@dataclass(frozen=True, slots=True)
class Node:
    """A node's registered chips, its server layout and whether it runs soft (hami-core) slices."""

    name: str
    chips: tuple[Chip, ...]
    topology: topology.Topology
    soft: bool = False
    _by_uuid: dict[str, Chip] = field(init=False, repr=False, compare=False)
    _by_word: dict[str, tuple[Chip, ...]] = field(init=False, repr=False, compare=False)
    _healthy_by_word: dict[str, tuple[Chip, ...]] = field(init=False, repr=False, compare=False)
    _networks_by_word: dict[str, dict[int, int]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_uuid", {c.uuid: c for c in self.chips})
        by_word: dict[str, list[Chip]] = {}
        for chip in self.chips:
            by_word.setdefault(chip.model.common_word, []).append(chip)
        object.__setattr__(
            self, "_by_word", {word: tuple(chips) for word, chips in by_word.items()}
        )
        healthy = {word: tuple(c for c in chips if c.healthy) for word, chips in by_word.items()}
        object.__setattr__(self, "_healthy_by_word", healthy)
        networks: dict[str, dict[int, int]] = {}
        for word, chips in by_word.items():
            ids = {c.index: c.network_id for c in chips if c.network_id is not None}
            if word.startswith(NETWORK_PREFIX) and len(ids) == len(chips):
                networks[word] = ids
        object.__setattr__(self, "_networks_by_word", networks)

    def chip(self, uuid: str) -> Chip | None:
        return self._by_uuid.get(uuid)

    def chips_of(self, common_word: str) -> tuple[Chip, ...]:
        """The chips of one model, in index order."""
        return self._by_word.get(common_word, ())

    def healthy_chips_of(self, common_word: str) -> tuple[Chip, ...]:
        return self._healthy_by_word.get(common_word, ())

    def network_ids(self, common_word: str) -> dict[int, int] | None:
        """Chip position -> NetworkID for a 910-series model whose every chip registered one.

        HAMi groups multi-chip requests by NetworkID only then (all chips of the node carry
        it and the common word starts with ``Ascend910``); otherwise None.
        """
        return self._networks_by_word.get(common_word)

    def models(self) -> tuple[str, ...]:
        return tuple(sorted({c.model.common_word for c in self.chips}))


def build_node(
    name: str,
    model: catalog.ChipModel,
    chips: int,
    server: topology.ServerKind | None = None,
    soft: bool = False,
    uuid_prefix: str = "",
) -> Node:
    """A node of ``chips`` healthy chips of one model (for the planner, tests and benchmarks)."""
    kind = server or topology.default_kind(model, chips)
    prefix = uuid_prefix or name
    members = tuple(Chip(i, f"{prefix}-{model.common_word}-{i}", model) for i in range(chips))
    return Node(name, members, topology.build(kind, chips), soft)


@dataclass(frozen=True, slots=True)
class ChipUsage:
    """What the pods on a node hold on one chip.

    Hard vNPUs add to ``vnpus``, ``memory_mib``, ``aicore``, ``aicpu`` and ``media``; soft
    slices add to ``soft_slices``, ``memory_mib`` and ``core_percent``; a whole chip sets
    ``exclusive``. ``templates`` names the hard vNPUs in use (for metrics and messages).
    """

    vnpus: int = 0
    memory_mib: int = 0
    aicore: int = 0
    aicpu: int = 0
    media: tuple[int, ...] = ZERO_MEDIA
    soft_slices: int = 0
    core_percent: int = 0
    exclusive: bool = False
    templates: tuple[str, ...] = ()
    idle: bool = field(init=False, compare=False)  # nothing held on the chip

    def __post_init__(self) -> None:
        object.__setattr__(self, "idle", not (self.vnpus or self.soft_slices or self.exclusive))

    def plus(self, other: ChipUsage) -> ChipUsage:
        return ChipUsage(
            self.vnpus + other.vnpus,
            self.memory_mib + other.memory_mib,
            self.aicore + other.aicore,
            self.aicpu + other.aicpu,
            tuple(a + b for a, b in zip(self.media, other.media, strict=True)),
            self.soft_slices + other.soft_slices,
            self.core_percent + other.core_percent,
            self.exclusive or other.exclusive,
            self.templates + other.templates,
        )

    def peak(self, other: ChipUsage) -> ChipUsage:
        """Budget by budget, the larger of two usages (init containers never run beside the rest)."""
        return ChipUsage(
            max(self.vnpus, other.vnpus),
            max(self.memory_mib, other.memory_mib),
            max(self.aicore, other.aicore),
            max(self.aicpu, other.aicpu),
            tuple(max(a, b) for a, b in zip(self.media, other.media, strict=True)),
            max(self.soft_slices, other.soft_slices),
            max(self.core_percent, other.core_percent),
            self.exclusive or other.exclusive,
            tuple(dict.fromkeys(self.templates + other.templates)),
        )

    def covers(self, other: ChipUsage) -> bool:
        """True when this usage takes at least as much as ``other`` in every budget."""
        return self.peak(other).same_budgets(self)

    def same_budgets(self, other: ChipUsage) -> bool:
        """Equal budget by budget (the template names aside)."""
        return (
            self.vnpus,
            self.memory_mib,
            self.aicore,
            self.aicpu,
            self.media,
            self.soft_slices,
            self.core_percent,
            self.exclusive,
        ) == (
            other.vnpus,
            other.memory_mib,
            other.aicore,
            other.aicpu,
            other.media,
            other.soft_slices,
            other.core_percent,
            other.exclusive,
        )


IDLE = ChipUsage()


@functools.cache
def template_usage(template: catalog.Template) -> ChipUsage:
    media = template.media.as_tuple() if template.media else ZERO_MEDIA
    return ChipUsage(
        1, template.memory_mib, template.aicore, template.aicpu, media, templates=(template.name,)
    )


def whole_chip_usage(chip: Chip) -> ChipUsage:
    return ChipUsage(memory_mib=chip.memory_mib, exclusive=True)


def soft_usage(memory_mib: int, core_percent: int, exclusive: bool) -> ChipUsage:
    return ChipUsage(
        memory_mib=memory_mib, soft_slices=1, core_percent=core_percent, exclusive=exclusive
    )


def load_ratio(chip: Chip, usage: ChipUsage, extra: catalog.Template | None = None) -> float:
    """How full a chip is, 0-1: its most used budget (with one more ``extra`` vNPU when given)."""
    if usage.exclusive:
        return 1.0
    model = chip.model
    if usage.soft_slices:
        return max(
            usage.memory_mib / chip.memory_mib,
            usage.core_percent / 100,
            usage.soft_slices / chip.slots,
        )
    if extra is None:
        return max(
            usage.vnpus / chip.vnpu_limit,
            usage.memory_mib / model.memory_capacity_mib,
            usage.aicore / model.aicore,
            usage.aicpu / model.aicpu,
        )
    return max(
        (usage.vnpus + 1) / chip.vnpu_limit,
        (usage.memory_mib + extra.memory_mib) / model.memory_capacity_mib,
        (usage.aicore + extra.aicore) / model.aicore,
        (usage.aicpu + extra.aicpu) / model.aicpu,
    )


def overcommitted(chip: Chip, held: Sequence[ChipUsage]) -> str:
    """Why the holdings of several pods cannot all be on ``chip`` at once ('' if they can).

    A chip held whole has room for nobody else; hard vNPUs and soft slices never share a
    chip; otherwise the sum must fit every budget the allocator checks (media engines aside).
    """
    busy = [h for h in held if not h.idle]
    if len(busy) > 1 and any(h.exclusive for h in busy):
        return f"held whole by one pod and by {len(busy) - 1} other(s)"
    total = IDLE
    for usage in busy:
        total = total.plus(usage)
    if total.vnpus and total.soft_slices:
        return "hard vNPUs and soft slices on the same chip"
    model = chip.model
    limits: tuple[tuple[str, int, int], ...]
    if total.soft_slices:
        limits = (
            ("soft slices", total.soft_slices, chip.slots),
            ("memory MiB", total.memory_mib, chip.memory_mib),
            ("core percent", total.core_percent, 100),
        )
    else:
        limits = (
            ("vNPUs", total.vnpus, chip.vnpu_limit),
            ("memory MiB", total.memory_mib, model.memory_capacity_mib),
            ("AI cores", total.aicore, model.aicore),
            ("AI CPUs", total.aicpu, model.aicpu),
        )
    for what, used, limit in limits:
        if used > limit:
            return f"{used} {what} held, {limit} on the chip"
    return ""
