"""Budget checks of one chip and the words that explain a shortage.

A hard vNPU needs a vNPU slot, memory, AI cores, AI CPUs and media engines free on one chip
that nobody holds whole or shares in soft mode; a soft slice needs memory, core percent and
a slot on a chip without hard vNPUs. ``template_short``/``soft_short`` name the first short
budget; ``explain_*`` turn the shortages of every usable chip into one sentence for a
person, naming the best chip, and ``pin_note`` adds to it that the pod pins its template
(``vnpu.io/template``) and which other template the node could have offered. Used by
``vnpu_core.allocator``.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from enum import StrEnum

from vnpu_core import catalog, inventory, protocol, requests
from vnpu_core.inventory import ChipUsage


class Reason(StrEnum):
    """Why a node cannot take a pod; values are stable and used as metric labels."""

    NO_DEVICE = "no-device"
    TOO_MANY_CHIPS = "too-many-chips"
    COUNT_NOT_ALLOWED = "count-not-allowed"
    UNHEALTHY = "unhealthy"
    UUID_FILTER = "uuid-filter"
    MODE_MISMATCH = "mode-mismatch"
    NO_FREE_CHIP = "no-free-chip"
    TOPOLOGY = "topology"
    CHIP_IN_USE = "chip-in-use"
    VNPU_SLOTS = "vnpu-slots"
    MEMORY = "memory"
    AICORE = "aicore"
    AICPU = "aicpu"
    MEDIA = "media"
    CORE_PERCENT = "core-percent"


def template_short(
    chip: inventory.Chip, used: ChipUsage, template: catalog.Template
) -> Reason | None:
    """The first budget of ``chip`` too short for ``template`` on top of ``used``, or None."""
    model = chip.model
    if used.exclusive or used.soft_slices:
        return Reason.CHIP_IN_USE
    if used.vnpus >= chip.vnpu_limit:
        return Reason.VNPU_SLOTS
    if used.memory_mib + template.memory_mib > model.memory_capacity_mib:
        return Reason.MEMORY
    if used.aicore + template.aicore > model.aicore:
        return Reason.AICORE
    if used.aicpu + template.aicpu > model.aicpu:
        return Reason.AICPU
    headroom = model.media_headroom.get(template.name)
    if headroom is not None and not all(map(operator.le, used.media, headroom)):
        return Reason.MEDIA
    return None


def soft_exclusive(chip: inventory.Chip, request: requests.ContainerRequest) -> bool:
    """A soft slice of all cores or all memory takes the chip for itself."""
    return request.core_percent >= 100 or request.memory_mib >= chip.memory_mib


def soft_short(
    chip: inventory.Chip, used: ChipUsage, request: requests.ContainerRequest
) -> Reason | None:
    if used.exclusive or used.vnpus:
        return Reason.CHIP_IN_USE
    if soft_exclusive(chip, request) and not used.idle:
        return Reason.CHIP_IN_USE
    if used.soft_slices >= chip.slots:
        return Reason.VNPU_SLOTS
    if used.memory_mib + request.memory_mib > chip.memory_mib:
        return Reason.MEMORY
    if used.core_percent >= 100 or used.core_percent + request.core_percent > 100:
        return Reason.CORE_PERCENT
    return None


def _plural(n: int, one: str, many: str) -> str:
    return one if n == 1 else f"{n} {many}"


def _template_message(
    word: str, chip: inventory.Chip, used: ChipUsage, template: catalog.Template, reason: Reason
) -> str:
    model = chip.model
    i = chip.number  # the chip as its device plugin numbered it
    name = template.name
    if reason is Reason.CHIP_IN_USE:
        how = "whole" if used.exclusive else "in soft mode"
        return f"{word}: no chip free for {name} (best chip {i} is held {how})"
    if reason is Reason.VNPU_SLOTS:
        limit = chip.vnpu_limit
        return f"{word}: no chip with a vNPU slot free for {name} (asked 1, best chip {i} has {limit - used.vnpus} of {limit})"
    if reason is Reason.MEMORY:
        cap = model.memory_capacity_mib
        return (
            f"{word}: no chip with {template.memory_mib} MiB free for {name} "
            f"(asked {template.memory_mib} MiB, best chip {i} has {cap - used.memory_mib} of {cap} MiB)"
        )
    if reason is Reason.AICORE:
        want, total, have = template.aicore, model.aicore, used.aicore
        phrase = _plural(want, "an AI core", "AI cores")
        return f"{word}: no chip with {phrase} free for {name} (asked {want}, best chip {i} has {total - have} of {total})"
    if reason is Reason.AICPU:
        want, total, have = template.aicpu, model.aicpu, used.aicpu
        phrase = _plural(want, "an AI CPU", "AI CPUs")
        return f"{word}: no chip with {phrase} free for {name} (asked {want}, best chip {i} has {total - have} of {total})"
    assert model.media is not None
    assert template.media is not None
    for engine, have, want, cap in zip(
        catalog.MEDIA_ENGINES,
        used.media,
        template.media.as_tuple(),
        model.media.as_tuple(),
        strict=True,
    ):
        if have + want > cap:
            return (
                f"{word}: no chip with the media engines free for {name} "
                f"(asked {engine} {want}, best chip {i} has {cap - have} of {cap})"
            )
    return f"{word}: no chip with the media engines free for {name}"


def _free_share(chip: inventory.Chip, used: ChipUsage, reason: Reason) -> float:
    """How much of the short budget is still free (0-1), to rank chips for the message."""
    model = chip.model
    if reason is Reason.VNPU_SLOTS:
        return 1 - used.vnpus / chip.vnpu_limit
    if reason is Reason.MEMORY:
        return 1 - used.memory_mib / model.memory_capacity_mib
    if reason is Reason.AICORE:
        return 1 - used.aicore / model.aicore
    if reason is Reason.AICPU:
        return 1 - used.aicpu / model.aicpu
    return 0.0


def explain_vnpu(
    chips: Sequence[inventory.Chip],
    working: Mapping[int, ChipUsage],
    request: requests.ContainerRequest,
) -> tuple[Reason, str]:
    """The reason no chip takes any of the request's templates, phrased around the best chip."""
    word = request.model.common_word
    ranked: list[tuple[int, float, int, inventory.Chip, catalog.Template, Reason]] = []
    order = list(Reason)
    for chip in chips:
        used = working[chip.index]
        for template in request.templates:
            reason = template_short(chip, used, template)
            assert reason is not None  # only called when nothing fits
            # Prefer the chip whose blocking budget comes latest (it got furthest), then most free.
            ranked.append(
                (
                    -order.index(reason),
                    -_free_share(chip, used, reason),
                    chip.index,
                    chip,
                    template,
                    reason,
                )
            )
    _, _, _, chip, template, reason = min(ranked, key=lambda r: r[:3])
    return reason, _template_message(word, chip, working[chip.index], template, reason)


def pin_note(
    chips: Sequence[inventory.Chip],
    working: Mapping[int, ChipUsage],
    request: requests.ContainerRequest,
) -> str:
    """``; vir04 is pinned by vnpu.io/template, vir04_3c would fit chip 0`` for a pinned request.

    The other template named is one of equal memory (what the request would get without the
    pin) that fits a chip here, so a person sees that the node only offers another template.
    """
    (pinned,) = request.templates
    note = f"; {pinned.name} is pinned by {protocol.TEMPLATE_KEY}"
    for template in request.model.templates:
        if template.name == pinned.name or template.memory_mib != pinned.memory_mib:
            continue
        for chip in chips:
            if template_short(chip, working[chip.index], template) is None:
                return f"{note}, {template.name} would fit chip {chip.number}"
    return note


def explain_soft(
    chips: Sequence[inventory.Chip],
    working: Mapping[int, ChipUsage],
    request: requests.ContainerRequest,
    fitting: int,
) -> tuple[Reason, str]:
    word = request.model.common_word
    asked = f"{request.memory_mib} MiB and {request.core_percent}% of the cores"
    if fitting:
        return (
            Reason.CORE_PERCENT if request.core_percent else Reason.MEMORY,
            f"{word}: {request.count} chips with {asked} free needed, {fitting} have it",
        )
    order = list(Reason)
    ranked = []
    for chip in chips:
        used = working[chip.index]
        reason = soft_short(chip, used, request)
        assert reason is not None
        ranked.append((-order.index(reason), chip.index, chip, used, reason))
    _, _, chip, used, reason = min(ranked, key=lambda r: r[:2])
    i = chip.number  # the chip as its device plugin numbered it
    if reason is Reason.CHIP_IN_USE:
        held = "whole" if used.exclusive else ("by hard vNPUs" if used.vnpus else "in part")
        return (
            reason,
            f"{word}: no chip free for a soft slice of {asked} (best chip {i} is held {held})",
        )
    if reason is Reason.VNPU_SLOTS:
        return (
            reason,
            f"{word}: no chip with a slot free for a soft slice (best chip {i} has 0 of {chip.slots})",
        )
    if reason is Reason.MEMORY:
        free = chip.memory_mib - used.memory_mib
        return reason, (
            f"{word}: no chip with {request.memory_mib} MiB free for a soft slice "
            f"(asked {request.memory_mib} MiB, best chip {i} has {free} of {chip.memory_mib} MiB)"
        )
    free_pct = max(0, 100 - used.core_percent)
    return reason, (
        f"{word}: no chip with {request.core_percent}% of the cores free for a soft slice "
        f"(asked {request.core_percent}%, best chip {i} has {free_pct}% of 100%)"
    )
