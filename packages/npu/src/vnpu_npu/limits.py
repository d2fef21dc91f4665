"""Hardware limits of vNPUs: the id range of each chip and the budget a template lacks.

The simulated backend enforces these on create; the DCMI backend uses them to explain a
create the driver refused (which budget, how much is free). Budget figures come from
``vnpu_core.catalog`` and the check itself from ``vnpu_core.budgets``, so the scheduler,
the simulated chip and the explanation of a real refusal all agree.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from vnpu_core import budgets, catalog, inventory
from vnpu_npu import errors

ID_BASE = 100
ID_STRIDE = 16  # each physical chip owns 16 ids: [phy*16+100, phy*16+115]
_310P_IDS = 8  # 310P uses the first 8 of them: [phy*16+100, phy*16+107]
_310P_NAME = re.compile(r"^(310P\d?|I2\d?)")

NO_TEMPLATE = "template"  # InvalidVnpuRequest.field values
NO_ID = "vnpu_id"


def is_310p(chip_name: str) -> bool:
    """310P chips (Atlas 300I Pro / Duo, 300V) by DCMI chip name, as MindCluster matches them."""
    return bool(_310P_NAME.match(chip_name))


def id_range(chip_name: str, phy_id: int) -> range:
    """The vNPU ids a chip can give out, as npu-smi numbers them."""
    first = phy_id * ID_STRIDE + ID_BASE
    return range(first, first + (_310P_IDS if is_310p(chip_name) else ID_STRIDE))


@dataclass(frozen=True, slots=True)
class Resources:
    """A chip's budgets, either its totals or what its vNPUs take.

    ``media`` follows ``catalog.MEDIA_ENGINES`` order; None where media is not enforced.
    """

    vnpus: int
    memory_mib: int
    aicore: int
    aicpu: int
    media: tuple[int, ...] | None = None

    def plus(self, template: catalog.Template) -> Resources:
        media = self.media
        if media is not None and template.media is not None:
            media = tuple(a + b for a, b in zip(media, template.media.as_tuple(), strict=True))
        return Resources(
            self.vnpus + 1,
            self.memory_mib + template.memory_mib,
            self.aicore + template.aicore,
            self.aicpu + template.aicpu,
            media,
        )


def totals(model: catalog.ChipModel) -> Resources:
    """A chip's budgets as the catalog gives them."""
    media = model.media.as_tuple() if model.media is not None else None
    return Resources(model.max_vnpus, model.memory_capacity_mib, model.aicore, model.aicpu, media)


def used_by(model: catalog.ChipModel, templates: list[str]) -> Resources:
    """What vNPUs of ``templates`` take on a chip of ``model`` (unknown names take nothing)."""
    media = (0,) * len(catalog.MEDIA_ENGINES) if model.media is not None else None
    used = Resources(0, 0, 0, 0, media)
    for name in templates:
        template = model.template(name)
        used = used.plus(template) if template else dataclasses.replace(used, vnpus=used.vnpus + 1)
    return used


@dataclass(frozen=True, slots=True)
class Shortage:
    """The first budget too short: ``asked`` needed, ``free`` of ``total`` left."""

    budget: str
    asked: int
    free: int
    total: int
    engine: str = ""


def shortage(
    model: catalog.ChipModel, total: Resources, used: Resources, template: catalog.Template
) -> Shortage | None:
    """The budget of a chip with ``total`` and ``used`` too short for ``template``, or None."""
    media = catalog.Media(*total.media) if total.media is not None else None
    chip_model = dataclasses.replace(
        model,
        max_vnpus=total.vnpus,
        memory_capacity_mib=total.memory_mib,
        aicore=total.aicore,
        aicpu=total.aicpu,
        media=media,
    )
    chip = inventory.Chip(0, "", chip_model, slots=total.vnpus)
    usage = inventory.ChipUsage(
        vnpus=used.vnpus,
        memory_mib=used.memory_mib,
        aicore=used.aicore,
        aicpu=used.aicpu,
        media=used.media if used.media is not None else inventory.ZERO_MEDIA,
    )
    reason = budgets.template_short(chip, usage, template)
    if reason is None:
        return None
    if reason is budgets.Reason.VNPU_SLOTS:
        return Shortage(reason.value, 1, total.vnpus - used.vnpus, total.vnpus)
    if reason is budgets.Reason.MEMORY:
        return Shortage(
            reason.value, template.memory_mib, total.memory_mib - used.memory_mib, total.memory_mib
        )
    if reason is budgets.Reason.AICORE:
        return Shortage(reason.value, template.aicore, total.aicore - used.aicore, total.aicore)
    if reason is budgets.Reason.AICPU:
        return Shortage(reason.value, template.aicpu, total.aicpu - used.aicpu, total.aicpu)
    assert total.media is not None
    assert template.media is not None
    for engine, have, want, cap in zip(
        catalog.MEDIA_ENGINES, usage.media, template.media.as_tuple(), total.media, strict=True
    ):
        if have + want > cap:
            return Shortage(reason.value, want, cap - have, cap, engine)
    raise AssertionError(f"budgets reported {reason} but no media engine is short")


def refused(
    code: int, function: str, phy_id: int, template: str, short: Shortage
) -> errors.TemplateRefused:
    return errors.TemplateRefused(
        code,
        function,
        phy_id,
        template,
        short.budget,
        short.asked,
        short.free,
        short.total,
        short.engine,
    )
