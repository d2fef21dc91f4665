"""The DCMI backend: the ``Backend`` protocol on Ascend's libdcmi.so.

Chips are enumerated card by card (``dcmi_get_card_list``, else the older
``dcmi_get_card_num_list``) and remembered by physical id, so later calls find their
card and device ids; a chip that drops off keeps its last enumeration. Older drivers lack
some calls, and each read falls back in turn: fault codes from
``dcmi_get_device_errorcode_v2`` to v1, memory from ``dcmi_get_device_hbm_info`` (910) to
``dcmi_get_device_memory_info_v3`` (310P) to the legacy ``dcmi_get_memory_info``.

The driver only answers a refused create with a code, so ``create_vnpu`` asks the chip
what is free (``dcmi_get_device_info`` 52/1 and 52/2) and names the budget the template
lacks (``limits``), exactly as the simulated backend reports it. The device plugin
constructs this backend on real nodes; the exporter reads through it.
"""

from __future__ import annotations

import ctypes
from ctypes import byref, c_int, c_uint

from vnpu_core import catalog
from vnpu_npu import backend, errors, limits
from vnpu_npu.dcmi import library, structs

_CREATE = "dcmi_create_vdevice"
_DESTROY = "dcmi_set_destroy_vdevice"
_INFO = "dcmi_get_device_info"


class DcmiBackend:
    """The driver through ctypes; ``library_path`` overrides the search for libdcmi.so."""

    def __init__(self, library_path: str | None = None) -> None:
        self.lib = library.Library(library_path)
        self._chips: dict[int, backend.ChipInfo] = {}

    # -- enumeration ---------------------------------------------------------------------

    def chips(self) -> tuple[backend.ChipInfo, ...]:
        found: dict[int, backend.ChipInfo] = {}
        previous = {(c.card_id, c.device_id): c for c in self._chips.values()}
        for card in self._card_list():
            count = c_int()
            self.lib.call("dcmi_get_device_num_in_card", card, byref(count))
            for device in range(count.value):
                try:
                    info = self._read_chip(card, device)
                except errors.ChipGone:
                    info_or_none = previous.get((card, device))
                    if info_or_none is None:
                        continue
                    info = info_or_none
                found[info.phy_id] = info
        self._chips = found
        return tuple(found[phy] for phy in sorted(found))

    def _card_list(self) -> list[int]:
        count = c_int()
        cards = (c_int * structs.MAX_CARDS)()
        name = (
            "dcmi_get_card_list" if self.lib.has("dcmi_get_card_list") else "dcmi_get_card_num_list"
        )
        self.lib.call(name, byref(count), cards, structs.MAX_CARDS)
        return list(cards[: min(count.value, structs.MAX_CARDS)])

    def _read_chip(self, card: int, device: int) -> backend.ChipInfo:
        logic, phy = c_int(), c_uint()
        self.lib.call("dcmi_get_device_logic_id", byref(logic), card, device)
        self.lib.call("dcmi_get_device_phyid_from_logicid", logic.value, byref(phy))
        chip = phy.value
        info = structs.ChipInfo()
        self.lib.call("dcmi_get_device_chip_info", card, device, byref(info), chip=chip)
        pcie = structs.PcieInfoAll()
        self.lib.call("dcmi_get_device_pcie_info_v2", card, device, byref(pcie), chip=chip)
        die = structs.DieId()
        self.lib.call(
            "dcmi_get_device_die_v2", card, device, structs.DIE_VDIE, byref(die), chip=chip
        )
        name, aicore = structs.text(info.chip_name), int(info.aicore_cnt)
        model = catalog.BUILTIN.by_chip_name(name, aicore)
        try:
            memory = self._memory(card, device, chip, name)
        except errors.ChipGone:  # listed but not answering: the catalog's figure stands in
            kind = backend.MemoryKind.DDR if limits.is_310p(name) else backend.MemoryKind.HBM
            memory = backend.Memory(kind, model.memory_capacity_mib if model else 0, 0, "catalog")
        return backend.ChipInfo(
            card_id=card,
            device_id=device,
            logic_id=logic.value,
            phy_id=chip,
            uuid=backend.format_uuid(tuple(die.soc_die)),
            chip_name=name,
            chip_type=structs.text(info.chip_type),
            chip_version=structs.text(info.chip_ver),
            model=model.name if model else "",
            aicore=aicore,
            memory_mib=memory.total_mib,
            memory_kind=memory.kind,
            bdf=backend.format_bdf(pcie.domain, pcie.bdf_busid, pcie.bdf_deviceid, pcie.bdf_funcid),
        )

    def _address(self, phy_id: int) -> backend.ChipInfo:
        if phy_id not in self._chips:
            self.chips()
        info = self._chips.get(phy_id)
        if info is None:
            raise errors.ChipGone(
                errors.DEVICE_NOT_EXIST, "dcmi_get_card_list", phy_id, "no such chip"
            )
        return info

    # -- reads -----------------------------------------------------------------------------

    def health(self, phy_id: int) -> backend.ChipHealth:
        chip = self._address(phy_id)
        raw = c_uint()
        self.lib.call(
            "dcmi_get_device_health", chip.card_id, chip.device_id, byref(raw), chip=phy_id
        )
        return backend.ChipHealth(backend.Health.from_raw(raw.value), self._error_codes(chip))

    def _error_codes(self, chip: backend.ChipInfo) -> tuple[int, ...]:
        count = c_int()
        codes = (c_uint * structs.ERROR_CODE_LEN)()
        args = (chip.card_id, chip.device_id, byref(count), codes)
        try:
            self.lib.call(
                "dcmi_get_device_errorcode_v2", *args, structs.ERROR_CODE_LEN, chip=chip.phy_id
            )
        except errors.NotSupported:
            width = c_int()
            self.lib.call("dcmi_get_device_errorcode", *args, byref(width), chip=chip.phy_id)
        return tuple(codes[: max(0, min(count.value, structs.ERROR_CODE_LEN))])

    def temperature(self, phy_id: int) -> int:
        chip = self._address(phy_id)
        value = c_int()
        self.lib.call(
            "dcmi_get_device_temperature", chip.card_id, chip.device_id, byref(value), chip=phy_id
        )
        return value.value

    def power(self, phy_id: int) -> backend.Power:
        """Chip power; 310P reports its card's (the MCU's), as npu-exporter does."""
        chip = self._address(phy_id)
        tenths = c_int()
        if limits.is_310p(chip.chip_name):
            self.lib.call("dcmi_mcu_get_power_info", chip.card_id, byref(tenths), chip=phy_id)
            return backend.Power(tenths.value / 10, backend.PowerScope.CARD)
        self.lib.call(
            "dcmi_get_device_power_info", chip.card_id, chip.device_id, byref(tenths), chip=phy_id
        )
        return backend.Power(tenths.value / 10, backend.PowerScope.CHIP)

    def aicore_percent(self, phy_id: int) -> int:
        chip = self._address(phy_id)
        value = c_uint()
        args = (chip.card_id, chip.device_id, structs.UTIL_AICORE, byref(value))
        self.lib.call("dcmi_get_device_utilization_rate", *args, chip=phy_id)
        return int(value.value)

    def memory(self, phy_id: int) -> backend.Memory:
        chip = self._address(phy_id)
        return self._memory(chip.card_id, chip.device_id, phy_id, chip.chip_name)

    def _memory(self, card: int, device: int, phy_id: int, chip_name: str) -> backend.Memory:
        ddr = backend.MemoryKind.DDR
        readers = ["memory_info_v3", "memory_info"]
        if not limits.is_310p(chip_name):
            readers.insert(0, "hbm_info")
        unsupported: errors.NotSupported | None = None
        for reader in readers:
            try:
                if reader == "hbm_info":
                    hbm = structs.HbmInfo()
                    self.lib.call("dcmi_get_device_hbm_info", card, device, byref(hbm), chip=phy_id)
                    return backend.Memory(
                        backend.MemoryKind.HBM, hbm.memory_size, hbm.memory_usage, reader
                    )
                if reader == "memory_info_v3":
                    v3 = structs.MemoryInfoV3()
                    self.lib.call(
                        "dcmi_get_device_memory_info_v3", card, device, byref(v3), chip=phy_id
                    )
                    used = max(0, v3.memory_size - v3.memory_available)
                    return backend.Memory(ddr, v3.memory_size, used, reader)
                v1 = structs.MemoryInfoV1()
                self.lib.call("dcmi_get_memory_info", card, device, byref(v1), chip=phy_id)
                return backend.Memory(
                    ddr, v1.memory_size, v1.memory_size * v1.utiliza // 100, reader
                )
            except errors.NotSupported as exc:
                unsupported = exc
        assert unsupported is not None
        raise unsupported

    # -- vNPUs -------------------------------------------------------------------------------

    def _query(self, chip: backend.ChipInfo, sub: int, buffer: ctypes.Structure) -> None:
        size = c_uint(ctypes.sizeof(buffer))
        args = (
            chip.card_id,
            chip.device_id,
            structs.MAIN_CMD_VDEV_MNG,
            sub,
            byref(buffer),
            byref(size),
        )
        self.lib.call(_INFO, *args, chip=chip.phy_id)

    def _vnpu_ids(self, chip: backend.ChipInfo) -> tuple[structs.SocTotalResource, list[int]]:
        total = structs.SocTotalResource()
        self._query(chip, structs.VDEV_TOTAL, total)
        return total, sorted(total.vdev_id[: min(total.vdev_num, structs.SOC_SPLIT_MAX)])

    def vnpus(self, phy_id: int) -> tuple[backend.VnpuInfo, ...]:
        chip = self._address(phy_id)
        result = []
        for vnpu_id in self._vnpu_ids(chip)[1]:
            query = structs.VdevQuery(vdev_id=vnpu_id)
            self._query(chip, structs.VDEV_QUERY, query)
            info = query.query_info
            try:
                usage: backend.VnpuUsage | None = self.vnpu_usage(phy_id, vnpu_id)
            except errors.NotSupported:
                usage = None
            result.append(
                backend.VnpuInfo(
                    vnpu_id,
                    phy_id,
                    info.name.decode("utf-8", "replace"),
                    bool(info.is_container_used),
                    round(info.computing.aic),
                    int(info.computing.memory_size),
                    usage.memory_used_kib // 1024 if usage else None,
                )
            )
        return tuple(result)

    def vnpu_usage(self, phy_id: int, vnpu_id: int) -> backend.VnpuUsage:
        chip = self._address(phy_id)
        query = structs.VdevQuery(vdev_id=vnpu_id)
        try:
            self._query(chip, structs.VDEV_ACTIVITY, query)
        except (errors.ChipGone, errors.NotSupported):
            raise
        except errors.DriverError as exc:
            if vnpu_id not in self._vnpu_ids(chip)[1]:
                raise errors.VnpuNotFound(exc.code, _INFO, phy_id, vnpu_id) from exc
            raise
        computing = query.query_info.computing
        return backend.VnpuUsage(
            vnpu_id,
            int(computing.vdev_aicore_utilization),
            int(computing.vdev_memory_total),
            int(computing.vdev_memory_free),
        )

    def create_vnpu(self, phy_id: int, template: str, vnpu_id: int | None = None) -> int:
        chip = self._address(phy_id)
        name = template.encode()
        if not 0 < len(name) < structs.NAME_LEN:
            problem = f"template names are 1-{structs.NAME_LEN - 1} bytes"
            raise errors.InvalidVnpuRequest(
                errors.INVALID_PARAMETER, _CREATE, phy_id, limits.NO_TEMPLATE, template, problem
            )
        request = structs.CreateVdevRes(
            vdev_id=structs.AUTO if vnpu_id is None else vnpu_id,
            vfg_id=structs.AUTO,
            template_name=name,
        )
        out = structs.CreateVdevOut()
        try:
            self.lib.call(
                _CREATE, chip.card_id, chip.device_id, byref(request), byref(out), chip=phy_id
            )
        except (errors.ChipGone, errors.NotSupported):
            raise
        except errors.DriverError as exc:
            raise self._explain_create(exc, chip, template, vnpu_id) from exc
        return int(out.vdev_id)

    def _explain_create(
        self, exc: errors.DriverError, chip: backend.ChipInfo, name: str, vnpu_id: int | None
    ) -> errors.DriverError:
        """The specific refusal behind a failed create, found by asking the chip."""
        phy, code = chip.phy_id, exc.code
        model = catalog.BUILTIN.by_chip_name(chip.chip_name, chip.aicore)
        template = model.template(name) if model else None
        if model is not None and template is None and code == errors.INVALID_PARAMETER:
            known = ", ".join(t.name for t in model.templates)
            return errors.InvalidVnpuRequest(
                code,
                _CREATE,
                phy,
                limits.NO_TEMPLATE,
                name,
                f"not a template of {chip.chip_name} ({known})",
            )
        ids = limits.id_range(chip.chip_name, phy)
        if vnpu_id is not None and vnpu_id not in ids:
            problem = f"chip {phy} gives out ids {ids.start}-{ids.stop - 1}"
            return errors.InvalidVnpuRequest(code, _CREATE, phy, limits.NO_ID, vnpu_id, problem)
        total, existing = self._vnpu_ids(chip)
        if vnpu_id is not None and vnpu_id in existing:
            return errors.InvalidVnpuRequest(
                code, _CREATE, phy, limits.NO_ID, vnpu_id, "id already in use"
            )
        if model is not None and template is not None:
            free = structs.SocFreeResource()
            self._query(chip, structs.VDEV_FREE, free)
            has_media = model.media is not None
            totals = _resources(model.max_vnpus, total.computing, total.media, has_media)
            left = _resources(
                model.max_vnpus - len(existing), free.computing, free.media, has_media
            )
            short = limits.shortage(model, totals, _minus(totals, left), template)
            if short is not None:
                return limits.refused(code, _CREATE, phy, name, short)
        if vnpu_id is None and all(i in existing for i in ids):
            return errors.InvalidVnpuRequest(
                code, _CREATE, phy, limits.NO_ID, None, "no free vNPU id"
            )
        return exc

    def destroy_vnpu(self, phy_id: int, vnpu_id: int) -> None:
        chip = self._address(phy_id)
        if vnpu_id == structs.DESTROY_ALL:  # the driver reads 65535 as "all vNPUs of the chip"
            raise errors.VnpuNotFound(errors.INVALID_PARAMETER, _DESTROY, phy_id, vnpu_id)
        try:
            self.lib.call(_DESTROY, chip.card_id, chip.device_id, vnpu_id, chip=phy_id)
        except (errors.ChipGone, errors.NotSupported):
            raise
        except errors.DriverError as exc:
            if vnpu_id not in self._vnpu_ids(chip)[1]:
                raise errors.VnpuNotFound(exc.code, _DESTROY, phy_id, vnpu_id) from exc
            if exc.code == errors.RESOURCE_OCCUPIED:
                raise errors.VnpuInUse(exc.code, _DESTROY, phy_id, vnpu_id) from exc
            raise

    def close(self) -> None:
        """DCMI has no per-client state to release; the library stays loaded for the process."""
        self._chips = {}


def _resources(
    vnpus: int, computing: structs.ComputingResource, media: structs.MediaResource, has_media: bool
) -> limits.Resources:
    engines = tuple(round(getattr(media, e)) for e in catalog.MEDIA_ENGINES) if has_media else None
    return limits.Resources(
        vnpus,
        int(computing.memory_size),
        round(computing.aic),
        int(computing.device_aicpu),
        engines,
    )


def _minus(total: limits.Resources, free: limits.Resources) -> limits.Resources:
    media = None
    if total.media is not None and free.media is not None:
        media = tuple(t - f for t, f in zip(total.media, free.media, strict=True))
    return limits.Resources(
        total.vnpus - free.vnpus,
        total.memory_mib - free.memory_mib,
        total.aicore - free.aicore,
        total.aicpu - free.aicpu,
        media,
    )
