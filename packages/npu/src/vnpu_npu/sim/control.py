"""Fault, load and container-use injection into a simulated node.

Tests, the sandbox and people (through ``python -m vnpu_npu.sim``) call
these to make a simulated chip misbehave or look busy; both simulated backends (the
Python one and the stand-in libdcmi.so) see the change on their next call. Each function
is one locked update of the state file.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any

from vnpu_npu import backend, errors
from vnpu_npu.sim import state, store


def _edit_status(
    sim_dir: str | os.PathLike[str],
    phy_id: int,
    edit: Callable[[state.StatusRecord], state.StatusRecord],
) -> None:
    def change(current: state.State) -> tuple[state.State, None]:
        if current.chip(phy_id) is None:
            phys = ", ".join(str(c.phy) for c in current.chips)
            raise errors.SimError(str(sim_dir), "chip", phy_id, f"no such chip (chips: {phys})")
        return current.with_status(edit(current.status_of(phy_id))), None

    store.Store(sim_dir).update(change)


def _status_change(sim_dir: str | os.PathLike[str], phy_id: int, **values: Any) -> None:
    _edit_status(sim_dir, phy_id, lambda record: dataclasses.replace(record, **values))


def inject_fault(
    sim_dir: str | os.PathLike[str],
    phy_id: int,
    *,
    health: backend.Health | None = None,
    codes: Sequence[int] = (),
    gone: bool = False,
) -> None:
    """Give chip ``phy_id`` a health, active fault codes, or drop it off the bus (``gone``).

    Codes are added to those already active; ``health`` defaults to CRITICAL when codes
    are given without one, as a real fault raises an alarm.
    """

    def edit(record: state.StatusRecord) -> state.StatusRecord:
        values: dict[str, Any] = {}
        if codes:
            values["codes"] = tuple(dict.fromkeys((*record.codes, *codes)))
        if health is not None or codes:
            values["health"] = int(health if health is not None else backend.Health.CRITICAL)
        if gone:
            values["gone"] = True
        return dataclasses.replace(record, **values)

    _edit_status(sim_dir, phy_id, edit)


def clear_fault(sim_dir: str | os.PathLike[str], phy_id: int) -> None:
    """Chip ``phy_id`` recovers: health OK, no codes, back on the bus."""
    _status_change(sim_dir, phy_id, health=0, codes=(), gone=False)


def set_load(
    sim_dir: str | os.PathLike[str],
    phy_id: int,
    *,
    aicore_percent: int | None = None,
    memory_mib: int | None = None,
    temperature: int | None = None,
    power_watts: float | None = None,
) -> None:
    """Synthetic load of a whole chip: AI core percent, memory used, temperature, power."""
    values: dict[str, Any] = {}
    if aicore_percent is not None:
        values["aicore"] = _percent(sim_dir, aicore_percent)
    if memory_mib is not None:
        values["memory"] = int(_non_negative(sim_dir, "memory", memory_mib))
    if temperature is not None:
        values["temp"] = temperature
    if power_watts is not None:
        values["power_dw"] = round(_non_negative(sim_dir, "power", power_watts) * 10)
    _status_change(sim_dir, phy_id, **values)


def set_vnpu_load(
    sim_dir: str | os.PathLike[str],
    vnpu_id: int,
    *,
    aicore_percent: int | None = None,
    memory_mib: int | None = None,
    in_use: bool | None = None,
) -> None:
    """Load of one vNPU, and whether a container holds it (a held vNPU cannot be destroyed)."""

    def change(current: state.State) -> tuple[state.State, None]:
        record = next((v for v in current.vnpus if v.id == vnpu_id), None)
        if record is None:
            ids = ", ".join(str(v.id) for v in current.vnpus) or "none"
            raise errors.SimError(str(sim_dir), "vnpu", vnpu_id, f"no such vNPU (vNPUs: {ids})")
        values: dict[str, Any] = {}
        if aicore_percent is not None:
            values["aicore"] = _percent(sim_dir, aicore_percent)
        if memory_mib is not None:
            values["memory"] = int(_non_negative(sim_dir, "memory", memory_mib))
        if in_use is not None:
            values["used"] = in_use
        others = tuple(v for v in current.vnpus if v.id != vnpu_id)
        return current.with_vnpus((*others, dataclasses.replace(record, **values))), None

    store.Store(sim_dir).update(change)


def _percent(sim_dir: str | os.PathLike[str], value: int) -> int:
    if not 0 <= value <= 100:
        raise errors.SimError(str(sim_dir), "aicore", value, "must be a percent 0-100")
    return value


def _non_negative(sim_dir: str | os.PathLike[str], field: str, value: float) -> float:
    if value < 0:
        raise errors.SimError(str(sim_dir), field, value, "must be >= 0")
    return value
