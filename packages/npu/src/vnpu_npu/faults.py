"""Fault levels: from DCMI health and fault codes to a handling level and Healthy/Unhealthy.

Huawei's device plugin sorts every fault code into a handling level (its faultCode.json);
the worst level of a chip's active codes decides whether kubelet sees the chip as
Healthy. This module holds a small table of well-known codes, the rule for codes outside
it, and the decision. The device plugin calls ``assess`` on every health poll and the
exporter uses the level for its alert labels.

Rule for codes not in the table (Huawei's): a fault whose severity is at most *minor* is
NotHandleFault, anything worse or of unknown severity is SeparateNPU. A polled code
carries no severity of its own, so the chip's DCMI health (its worst alarm) stands in:
health OK or MINOR makes unknown codes NotHandleFault, MAJOR, CRITICAL or ABSENT makes
them SeparateNPU. A chip that reports MAJOR or worse without any code is treated as one
unknown fault at that severity. A gone chip (``health`` raised ChipGone) gets Huawei's
synthetic card-drop code 0x40F84E00.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from vnpu_npu import backend

CARD_DROP = 0x40F84E00  # synthesised when dcmi_get_device_health answers -8012


class FaultLevel(StrEnum):
    """Handling levels, as Huawei names them; ``rank`` orders them, worst highest."""

    NORMAL = "Normal"
    NOT_HANDLE = "NotHandleFault"
    SUB_HEALTH = "SubHealthFault"
    RESTART_REQUEST = "RestartRequest"
    RESTART_BUSINESS = "RestartBusiness"
    FREE_RESTART_NPU = "FreeRestartNPU"
    RESTART_NPU = "RestartNPU"
    PRE_SEPARATE_NPU = "PreSeparateNPU"
    SEPARATE_NPU = "SeparateNPU"
    MANUALLY_SEPARATE_NPU = "ManuallySeparateNPU"

    @property
    def rank(self) -> int:
        return list(FaultLevel).index(self)


# A few well-known codes (from Huawei's default faultCode.json); everything else follows the rule.
KNOWN_CODES: Mapping[int, FaultLevel] = {
    0x80E21007: FaultLevel.NOT_HANDLE,
    0x80E18400: FaultLevel.NOT_HANDLE,
    0x81078603: FaultLevel.NOT_HANDLE,  # RoCE link down
    0x80E18405: FaultLevel.SUB_HEALTH,
    0x81A3880C: FaultLevel.SUB_HEALTH,
    0x80C98008: FaultLevel.RESTART_REQUEST,
    0x8C204E00: FaultLevel.RESTART_BUSINESS,
    0x8C0E4E00: FaultLevel.FREE_RESTART_NPU,
    CARD_DROP: FaultLevel.RESTART_NPU,
    0x80E24E00: FaultLevel.RESTART_NPU,
    0x8C03A000: FaultLevel.RESTART_NPU,
    0x80E18402: FaultLevel.SEPARATE_NPU,
    0x80E3A201: FaultLevel.SEPARATE_NPU,
}

_HEALTHY_LEVELS = frozenset({FaultLevel.NORMAL, FaultLevel.NOT_HANDLE, FaultLevel.SUB_HEALTH})
_HEALTHY_WHILE_IN_USE = frozenset({FaultLevel.FREE_RESTART_NPU, FaultLevel.PRE_SEPARATE_NPU})


def format_code(code: int) -> str:
    """A fault code as Huawei writes it: 8 upper-case hex digits (``80E18402``)."""
    return f"{code & 0xFFFFFFFF:08X}"


def parse_code(text: str) -> int:
    """A fault code from ``80E18402`` or ``0x80E18402``; ValueError names the bad text."""
    digits = text[2:] if text.lower().startswith("0x") else text
    if not digits or len(digits) > 8 or any(c not in "0123456789abcdefABCDEF" for c in digits):
        raise ValueError(f"fault code {text!r} is not up to 8 hex digits")
    return int(digits, 16)


def level_of(
    code: int, health: backend.Health | None, table: Mapping[int, FaultLevel] = KNOWN_CODES
) -> FaultLevel:
    """The level of one code; ``health`` stands in for its severity (None: unknown)."""
    known = table.get(code)
    if known is not None:
        return known
    if health is not None and health <= backend.Health.MINOR:
        return FaultLevel.NOT_HANDLE
    return FaultLevel.SEPARATE_NPU


@dataclass(frozen=True, slots=True)
class Verdict:
    """A chip's worst fault level, the codes behind it and what to tell kubelet."""

    level: FaultLevel
    codes: tuple[int, ...]
    healthy: bool
    gone: bool = False

    @property
    def kubelet_health(self) -> str:
        return "Healthy" if self.healthy else "Unhealthy"


def assess(
    health: backend.ChipHealth | None,
    *,
    in_use: bool = False,
    grace: bool = True,
    table: Mapping[int, FaultLevel] = KNOWN_CODES,
) -> Verdict:
    """Decide a chip's level and health; ``health`` None means the chip is gone.

    Healthy when the level is Normal, NotHandleFault or SubHealthFault; with ``grace``
    also FreeRestartNPU and PreSeparateNPU while a container uses the chip (``in_use``),
    so a running job is not cut off for a fault that can wait for it to end.
    """
    if health is None:
        codes: tuple[int, ...] = (CARD_DROP,)
        level = level_of(CARD_DROP, None, table)
        return Verdict(level, codes, healthy=False, gone=True)
    codes = health.error_codes
    levels = [level_of(code, health.health, table) for code in codes]
    if not codes and health.health >= backend.Health.MAJOR:
        levels.append(FaultLevel.SEPARATE_NPU)
    elif not codes and health.health == backend.Health.MINOR:
        levels.append(FaultLevel.NOT_HANDLE)
    level = max(levels, key=lambda lv: lv.rank, default=FaultLevel.NORMAL)
    healthy = level in _HEALTHY_LEVELS or (grace and in_use and level in _HEALTHY_WHILE_IN_USE)
    return Verdict(level, codes, healthy)
