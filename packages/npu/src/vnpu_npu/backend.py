"""The ``Backend`` protocol: everything vnpu asks of the Ascend driver, and the values it returns.

Two classes implement it: ``dcmi.backend.DcmiBackend`` (libdcmi.so through ctypes) and
``sim.backend.SimBackend`` (a directory of simulated chips). The device plugin uses it to
enumerate chips, watch their health and create or destroy vNPUs; the exporter uses the
read side. Chips are addressed by physical id (``/dev/davinci<phy>``, ``Ascend910-<phy>``).

Units are fixed here, whatever the driver reports: memory in MiB (DCMI's "MB"), vNPU
activity memory in KiB, temperature in degrees Celsius, power in watts (DCMI gives 0.1 W)
and utilisation in whole percent 0-100 as DCMI reports it (the exporter turns it into a
0-1 ratio). Every method raises ``errors.NpuError`` subclasses only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Protocol, runtime_checkable

UUID_WORDS = 5


class Health(IntEnum):
    """DCMI chip health (``dcmi_get_device_health``): the worst active alarm."""

    OK = 0
    MINOR = 1
    MAJOR = 2
    CRITICAL = 3
    ABSENT = 0xFFFFFFFF

    @classmethod
    def from_raw(cls, raw: int) -> Health:
        """The health for a raw DCMI value; values DCMI does not document count as ABSENT."""
        try:
            return cls(raw)
        except ValueError:
            return cls.ABSENT


class MemoryKind(StrEnum):
    """Where a chip's memory figure comes from: HBM on the 910 family, DDR on 310P."""

    HBM = "hbm"
    DDR = "ddr"


class PowerScope(StrEnum):
    """Whether a power reading covers one chip or the whole card (310P reports the card)."""

    CHIP = "chip"
    CARD = "card"


def format_uuid(words: tuple[int, ...]) -> str:
    """A VDIE die id as vnpu's chip UUID: five 8-hex-digit words joined by ``-``."""
    if len(words) != UUID_WORDS:
        raise ValueError(f"a die id has {UUID_WORDS} words, got {len(words)}")
    return "-".join(f"{w & 0xFFFFFFFF:08X}" for w in words)


def parse_uuid(text: str) -> tuple[int, ...]:
    """The five words of a UUID written by ``format_uuid``; ValueError names the bad text."""
    parts = text.split("-")
    if len(parts) != UUID_WORDS or any(len(p) != 8 for p in parts):
        raise ValueError(f"chip UUID {text!r} is not five 8-hex-digit words joined by '-'")
    return tuple(int(p, 16) for p in parts)


def format_bdf(domain: int, bus: int, device: int, function: int) -> str:
    """A PCIe address as ``0000:61:00.0``."""
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


@dataclass(frozen=True, slots=True)
class ChipInfo:
    """One NPU chip (or A3 die) as enumerated.

    ``card_id``/``device_id`` address DCMI calls, ``logic_id`` is what CANN uses,
    ``phy_id`` names ``/dev/davinci<phy>`` and the Kubernetes device. ``model`` is the
    vnpu catalog model key (``310P3``, ``910B3``, ``910C-24``) or "" when unknown.
    ``model_name`` is npu-exporter's ``<name>-<type>-<version>`` label.
    """

    card_id: int
    device_id: int
    logic_id: int
    phy_id: int
    uuid: str
    chip_name: str
    chip_type: str
    chip_version: str
    model: str
    aicore: int
    memory_mib: int
    memory_kind: MemoryKind
    bdf: str

    @property
    def model_name(self) -> str:
        return f"{self.chip_name}-{self.chip_type}-{self.chip_version}"


@dataclass(frozen=True, slots=True)
class ChipHealth:
    """A chip's DCMI health and its active fault codes (hex event ids such as 0x80E18402)."""

    health: Health
    error_codes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Power:
    watts: float
    scope: PowerScope


@dataclass(frozen=True, slots=True)
class Memory:
    """Total and used memory in MiB; ``source`` names the DCMI call that gave it."""

    kind: MemoryKind
    total_mib: int
    used_mib: int
    source: str


@dataclass(frozen=True, slots=True)
class VnpuInfo:
    """A vNPU on a chip: template resources and, where DCMI reports it, memory in use."""

    vnpu_id: int
    phy_id: int
    template: str
    container_used: bool
    aicore: int
    memory_mib: int
    memory_used_mib: int | None = None


@dataclass(frozen=True, slots=True)
class VnpuUsage:
    """One vNPU's activity: AI core percent and memory in KiB (DCMI's vNPU activity query)."""

    vnpu_id: int
    aicore_percent: int
    memory_total_kib: int
    memory_free_kib: int

    @property
    def memory_used_kib(self) -> int:
        return max(0, self.memory_total_kib - self.memory_free_kib)


@runtime_checkable
class Backend(Protocol):
    """What vnpu needs from the Ascend driver. Methods take a chip's physical id."""

    def chips(self) -> tuple[ChipInfo, ...]:
        """Every chip, ordered by physical id. A gone chip stays listed; its reads fail."""
        ...

    def health(self, phy_id: int) -> ChipHealth:
        """DCMI health and active fault codes; ChipGone when the chip dropped off."""
        ...

    def temperature(self, phy_id: int) -> int:
        """Chip temperature in degrees Celsius."""
        ...

    def power(self, phy_id: int) -> Power:
        """Power in watts, of the chip or (310P) of its card."""
        ...

    def aicore_percent(self, phy_id: int) -> int:
        """AI core utilisation of the whole chip, percent 0-100."""
        ...

    def memory(self, phy_id: int) -> Memory:
        """HBM (910) or DDR (310P) total and used, MiB."""
        ...

    def vnpus(self, phy_id: int) -> tuple[VnpuInfo, ...]:
        """The vNPUs on a chip, ordered by vNPU id."""
        ...

    def create_vnpu(self, phy_id: int, template: str, vnpu_id: int | None = None) -> int:
        """Create a vNPU from ``template`` (with ``vnpu_id`` if given); returns its id.

        Raises TemplateRefused when a budget is short, InvalidVnpuRequest for an unknown
        template or an id outside the chip's range or taken.
        """
        ...

    def destroy_vnpu(self, phy_id: int, vnpu_id: int) -> None:
        """Destroy a vNPU; VnpuNotFound for an unknown id, VnpuInUse while a container holds it."""
        ...

    def vnpu_usage(self, phy_id: int, vnpu_id: int) -> VnpuUsage:
        """A vNPU's activity; NotSupported on chips without the query (the 910 family)."""
        ...

    def close(self) -> None:
        """Release what the backend holds; further calls are not allowed."""
        ...
