"""The simulated backend: the ``Backend`` protocol over a directory of simulated chips.

``SimBackend(DIR)`` reads ``DIR/chips.yaml`` (``sim.config``), creates or refreshes
``DIR/state.txt`` (``sim.store``) and answers every call from that file, so several
processes (a node's device plugin and exporter, the CLI, the stand-in libdcmi.so) see one
node. It behaves like the driver: a create checks the template budgets of
``vnpu_core.catalog`` and the chip's vNPU id range and fails with the code the stand-in
library returns for the same case; a gone chip answers -8012. The device plugin and the
exporter use it for a simulated node (``--sim-dir DIR``); the sandbox runs whole clusters on it.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from vnpu_core import catalog
from vnpu_npu import backend, errors, limits
from vnpu_npu.sim import config, state, store

_FN_CREATE = "dcmi_create_vdevice"
_FN_DESTROY = "dcmi_set_destroy_vdevice"


class SimBackend:
    """A simulated node; see the module docstring."""

    def __init__(self, sim_dir: str | os.PathLike[str]) -> None:
        self.sim_dir = Path(sim_dir)
        self.store = store.Store(self.sim_dir)
        if (self.sim_dir / config.CHIPS_FILE).exists():
            self.store.ensure(config.load(self.sim_dir))
        else:
            self.store.read()  # a state file alone will do; fails clearly when both are missing

    # -- reading -----------------------------------------------------------------------

    def _chip(self, current: state.State, phy_id: int, function: str) -> state.ChipRecord:
        chip = current.chip(phy_id)
        if chip is None:
            raise errors.ChipGone(errors.DEVICE_NOT_EXIST, function, phy_id, "no such chip")
        if current.status_of(phy_id).gone:
            raise errors.ChipGone(errors.NOT_READY, function, phy_id)
        return chip

    def chips(self) -> tuple[backend.ChipInfo, ...]:
        current = self.store.read()
        return tuple(_info(chip) for chip in current.chips)

    def health(self, phy_id: int) -> backend.ChipHealth:
        current = self.store.read()
        self._chip(current, phy_id, "dcmi_get_device_health")
        status = current.status_of(phy_id)
        return backend.ChipHealth(backend.Health.from_raw(status.health), status.codes)

    def temperature(self, phy_id: int) -> int:
        current = self.store.read()
        self._chip(current, phy_id, "dcmi_get_device_temperature")
        return current.status_of(phy_id).temp

    def power(self, phy_id: int) -> backend.Power:
        current = self.store.read()
        chip = self._chip(current, phy_id, "dcmi_get_device_power_info")
        if chip.memkind is backend.MemoryKind.DDR:  # 310P: the card's power, as its MCU reports it
            on_card = [current.status_of(c.phy) for c in current.chips if c.card == chip.card]
            if any(s.gone for s in on_card):  # the MCU gives no reading for a card missing a chip
                raise errors.ChipGone(errors.NOT_READY, "dcmi_mcu_get_power_info", phy_id)
            tenths = sum(s.power_dw for s in on_card)
            return backend.Power(tenths / 10, backend.PowerScope.CARD)
        return backend.Power(current.status_of(phy_id).power_dw / 10, backend.PowerScope.CHIP)

    def aicore_percent(self, phy_id: int) -> int:
        current = self.store.read()
        self._chip(current, phy_id, "dcmi_get_device_utilization_rate")
        return current.status_of(phy_id).aicore

    def memory(self, phy_id: int) -> backend.Memory:
        current = self.store.read()
        chip = self._chip(current, phy_id, "dcmi_get_device_hbm_info")
        source = "hbm_info" if chip.memkind is backend.MemoryKind.HBM else "memory_info_v3"
        return backend.Memory(chip.memkind, chip.memory, _memory_used(current, chip), source)

    def vnpus(self, phy_id: int) -> tuple[backend.VnpuInfo, ...]:
        current = self.store.read()
        chip = self._chip(current, phy_id, "dcmi_get_device_info")
        result = []
        for v in current.vnpus_on(phy_id):
            template = current.template(v.template)
            reports_use = chip.memkind is backend.MemoryKind.DDR
            result.append(
                backend.VnpuInfo(
                    v.id,
                    phy_id,
                    v.template,
                    v.used,
                    template.aicore if template else 0,
                    template.memory if template else 0,
                    min(v.memory, template.memory if template else 0) if reports_use else None,
                )
            )
        return tuple(result)

    def vnpu_usage(self, phy_id: int, vnpu_id: int) -> backend.VnpuUsage:
        function = "dcmi_get_device_info"
        current = self.store.read()
        chip = self._chip(current, phy_id, function)
        if chip.memkind is not backend.MemoryKind.DDR:
            raise errors.NotSupported(
                errors.NOT_SUPPORTED, function, phy_id, "vNPU activity is 310P only"
            )
        record = next((v for v in current.vnpus_on(phy_id) if v.id == vnpu_id), None)
        if record is None:
            raise errors.VnpuNotFound(errors.INVALID_PARAMETER, function, phy_id, vnpu_id)
        template = current.template(record.template)
        total_kib = (template.memory if template else 0) * 1024
        free_kib = max(0, total_kib - record.memory * 1024)
        return backend.VnpuUsage(vnpu_id, record.aicore, total_kib, free_kib)

    # -- vNPU lifecycle ------------------------------------------------------------------

    def create_vnpu(self, phy_id: int, template: str, vnpu_id: int | None = None) -> int:
        def change(current: state.State) -> tuple[state.State, int]:
            chip = self._chip(current, phy_id, _FN_CREATE)
            new_id = check_create(current, chip, template, vnpu_id)
            record = state.VnpuRecord(new_id, phy_id, template)
            return current.with_vnpus((*current.vnpus, record)), new_id

        return self.store.update(change)

    def destroy_vnpu(self, phy_id: int, vnpu_id: int) -> None:
        def change(current: state.State) -> tuple[state.State, None]:
            self._chip(current, phy_id, _FN_DESTROY)
            record = next((v for v in current.vnpus_on(phy_id) if v.id == vnpu_id), None)
            if record is None:
                raise errors.VnpuNotFound(errors.INVALID_PARAMETER, _FN_DESTROY, phy_id, vnpu_id)
            if record.used:
                raise errors.VnpuInUse(errors.RESOURCE_OCCUPIED, _FN_DESTROY, phy_id, vnpu_id)
            return current.with_vnpus(tuple(v for v in current.vnpus if v != record)), None

        self.store.update(change)

    def close(self) -> None:
        """Nothing is held between calls; present for the protocol."""


def check_create(
    current: state.State, chip: state.ChipRecord, template_name: str, vnpu_id: int | None
) -> int:
    """The id a create of ``template_name`` gets on ``chip``, or the driver's refusal."""
    phy = chip.phy
    template = current.template(template_name)
    if template is None:
        known = ", ".join(t.name for t in current.templates)
        raise errors.InvalidVnpuRequest(
            errors.INVALID_PARAMETER,
            _FN_CREATE,
            phy,
            limits.NO_TEMPLATE,
            template_name,
            f"not a template of {chip.name} ({known})",
        )
    ids = range(chip.idbase, chip.idbase + chip.idcount)
    taken = {v.id for v in current.vnpus_on(phy)}
    if vnpu_id is not None and vnpu_id not in ids:
        raise errors.InvalidVnpuRequest(
            errors.INVALID_PARAMETER,
            _FN_CREATE,
            phy,
            limits.NO_ID,
            vnpu_id,
            f"chip {phy} gives out ids {ids.start}-{ids.stop - 1}",
        )
    if vnpu_id is not None and vnpu_id in taken:
        raise errors.InvalidVnpuRequest(
            errors.RESOURCE_OCCUPIED, _FN_CREATE, phy, limits.NO_ID, vnpu_id, "id already in use"
        )
    total = limits.Resources(chip.vnpus, chip.memory, chip.aicore, chip.aicpu, chip.media)
    used = limits.Resources(0, 0, 0, 0, (0,) * len(chip.media) if chip.media else None)
    for v in current.vnpus_on(phy):
        held = current.template(v.template)
        used = (
            used.plus(_template(held)) if held else dataclasses.replace(used, vnpus=used.vnpus + 1)
        )
    short = limits.shortage(_model(chip), total, used, _template(template))
    if short is not None:
        raise limits.refused(errors.RESOURCE_OCCUPIED, _FN_CREATE, phy, template_name, short)
    if vnpu_id is not None:
        return vnpu_id
    free = [i for i in ids if i not in taken]
    if not free:  # every id taken although budgets allow: the id range is the limit
        raise errors.InvalidVnpuRequest(
            errors.RESOURCE_OCCUPIED, _FN_CREATE, phy, limits.NO_ID, None, "no free vNPU id"
        )
    return free[0]


def _template(record: state.TemplateRecord) -> catalog.Template:
    media = catalog.Media(*record.media) if record.media is not None else None
    return catalog.Template(record.name, record.memory, record.aicore, record.aicpu, media)


def _model(chip: state.ChipRecord) -> catalog.ChipModel:
    found = catalog.BUILTIN.by_chip_name(chip.model) or catalog.BUILTIN.by_chip_name(chip.name)
    if found is not None:
        return found
    return catalog.ChipModel(
        chip.model,
        chip.name,
        chip.model,
        chip.aicore,
        chip.aicpu,
        chip.memory,
        chip.memory,
        chip.vnpus,
    )


def _memory_used(current: state.State, chip: state.ChipRecord) -> int:
    """Chip load plus what its vNPUs' processes use, capped at the chip's memory."""
    used = current.status_of(chip.phy).memory + sum(v.memory for v in current.vnpus_on(chip.phy))
    return min(used, chip.memory)


def _info(chip: state.ChipRecord) -> backend.ChipInfo:
    found = catalog.BUILTIN.by_chip_name(chip.name, chip.aicore)
    return backend.ChipInfo(
        card_id=chip.card,
        device_id=chip.device,
        logic_id=chip.logic,
        phy_id=chip.phy,
        uuid=chip.uuid,
        chip_name=chip.name,
        chip_type=chip.type,
        chip_version=chip.version,
        model=found.name if found else "",
        aicore=chip.aicore,
        memory_mib=chip.memory,
        memory_kind=chip.memkind,
        bdf=chip.bdf,
    )
