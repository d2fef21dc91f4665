"""What a claim's allocation asks of this node, checked before anything is made. Pure.

``prepare`` maps each allocation result to its chip and kind (``devices``) and then refuses
the whole claim when:

* one request mixes whole chips, vNPUs and soft slices (``check_kinds``): one container's
  ``ASCEND_VISIBLE_DEVICES`` holds either physical or vNPU ids;
* one device is allocated twice (``check_once``), two shares of one soft device;
* a device does not fit the node's mode (``check_modes``): a soft device of a node that is
  not in soft mode, a whole chip or vNPU of one that is, or a soft slice whose
  ``consumedCapacity`` asks memory outside 1 MiB..the chip's allocatable memory or a core
  share outside 0-100.

Each refusal is an ``errors.DeviceError`` (``CapacityError`` for a value) naming the claim and
the device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from vnpu_core import catalog, quantities
from vnpu_core import errors as core_errors
from vnpu_dra_driver import devices, errors, slices

Json = dict[str, Any]
Target = tuple[str, Json, devices.Target]  # request, allocation result, what the device is
_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class SoftAsk:
    """What a soft device's allocation result asks of its chip."""

    memory_mib: int
    core_percent: int


def check_kinds(who: str, targets: Sequence[Target]) -> None:
    """Refuse a request whose devices mix whole chips, vNPUs and soft slices."""
    kinds: dict[str, devices.Target] = {}
    for request, _result, target in targets:
        first = kinds.setdefault(request, target)
        if first.kind != target.kind:
            raise errors.DeviceError(
                who,
                target.device,
                f"request {request!r} mixes {first.kind} ({first.device}) and {target.kind}",
            )


def check_once(who: str, targets: Sequence[Target]) -> None:
    """Refuse a claim that holds one device twice: its CDI device, its record and its
    container's ``ASCEND_VISIBLE_DEVICES`` name a device once."""
    seen: dict[str, str] = {}
    for request, _result, target in targets:
        if target.device in seen:
            raise errors.DeviceError(
                who,
                target.device,
                f"allocated twice (requests {seen[target.device]!r} and {request!r}): a claim"
                " takes one slice of a chip",
            )
        seen[target.device] = request


def check_modes(
    who: str, targets: Sequence[Target], model: catalog.ChipModel, *, soft: bool
) -> dict[str, SoftAsk]:
    """What each soft device asks, checked; a device that does not fit the node's mode
    (``soft``: soft slices only; else whole chips and vNPUs only) is refused."""
    found: dict[str, SoftAsk] = {}
    for _request, result, target in targets:
        if target.kind == "soft":
            found[target.device] = _soft_ask(who, result, target, model, soft=soft)
        elif soft:
            what = "a whole chip" if target.kind == "whole" else f"a {target.template} vNPU"
            raise errors.DeviceError(
                who,
                target.device,
                f"{what} of chip {target.phy}, which is in soft mode: this node shares its"
                " chips as soft slices only",
            )
    return found


def _soft_ask(
    who: str, result: Json, target: devices.Target, model: catalog.ChipModel, *, soft: bool
) -> SoftAsk:
    """The memory and core share ``result`` consumes of its chip (the device's requestPolicy
    defaults when it names none), checked against the chip."""
    consumed = result.get("consumedCapacity") or {}
    if not isinstance(consumed, dict):
        raise errors.DeviceError(who, target.device, f"consumedCapacity is not a map: {consumed!r}")
    allocatable = model.memory_allocatable_mib
    memory = consumed.get(slices.MEMORY, slices.mib(allocatable))
    cores = consumed.get(slices.CORE_PERCENT, "0")
    if not soft:
        raise errors.DeviceError(
            who,
            target.device,
            f"a soft slice ({slices.MEMORY} {memory}, {slices.CORE_PERCENT} {cores}) of"
            f" chip {target.phy}, which is not in soft mode: this node shares its chips"
            " whole and as vNPUs",
        )
    memory_bytes = _quantity(who, target, slices.MEMORY, memory)
    if memory_bytes % _MIB:
        raise errors.CapacityError(
            who, target.device, slices.MEMORY, memory, "not a whole number of MiB"
        )
    memory_mib = int(memory_bytes // _MIB)
    if not 1 <= memory_mib <= allocatable:
        raise errors.CapacityError(
            who,
            target.device,
            slices.MEMORY,
            memory,
            f"not within 1Mi..{slices.mib(allocatable)}, the allocatable memory of chip"
            f" {target.phy}",
        )
    share = _quantity(who, target, slices.CORE_PERCENT, cores)
    if share.denominator != 1 or not 0 <= share <= 100:
        raise errors.CapacityError(
            who, target.device, slices.CORE_PERCENT, cores, "not a whole percentage 0-100"
        )
    return SoftAsk(memory_mib, int(share))


def _quantity(who: str, target: devices.Target, name: str, value: object) -> Fraction:
    """Consumed capacity ``name`` = ``value`` as an exact number; ``errors.CapacityError``
    when it is not a quantity."""
    try:
        return quantities.parse(value).value
    except core_errors.QuantityError as exc:
        raise errors.CapacityError(who, target.device, name, value, str(exc)) from exc
