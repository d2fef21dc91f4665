"""What the scheduler decided for a pod on this node, read from its annotations.

A scheduler (vnpu's, HAMi's, or Volcano's deviceshare) leaves on the pod, per chip model:
``hami.io/<CW>-devices-to-allocate`` (one entry per container, devices as
``UUID,Type,mem,cores:``; the plugin empties an entry once it served the container),
``hami.io/<CW>-devices-allocated`` (the same, never erased) and ``huawei.com/<CW>`` (the
template, or soft-mode memory and cores, of each device). ``read`` turns them into a
``PodPlan``: the containers still to serve, in order, each with its chips, the container's
name and what each device is (whole chip, hard vNPU template, soft slice). Anything it
cannot serve raises ``errors.BadAnnotation`` naming the key; a namespace, pod name, UID or
container name the plugin will not put in a path raises ``errors.InvalidName``. ``finder`` and
``allocations`` call it.

**A decision never gives less memory than asked** (``_check_size``). What a container asks
is its ``huawei.com/<CW>-memory`` limit, else its request, read as HAMi and Volcano read it
(the number, in MiB, times the model's memory factor; ``4Gi`` is 4294967296), and what the
decision's own memory figure says. A hard vNPU's template must have at least both; a whole
chip serves anything up to the chip's memory (an ask between the allocatable memory and the
capacity gets a whole chip, as HAMi's and vnpu's rounding give it); a soft slice's quota
must be more than 0 and at least the ask (up to the allocatable memory, all a chip gives a
slice) and the decision's figure; and an ask above the chip's memory is never served.
Anything else raises ``errors.DecisionTooSmall`` (a ``BadAnnotation``): nothing is created
and the pod fails as for any annotation it cannot serve. This is what stops Volcano's
``trimMemory`` result for an oversize request (memory 0, template ``vir01`` or none) from
becoming a vNPU: memory 0 with no template reads as a whole chip (HAMi's "whole card"; the
vnpu scheduler's ledger reads it the same way), and the container's own ask tells it apart
from Volcano's oversize 0, which it refuses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vnpu_core import catalog, protocol, quantities
from vnpu_core import errors as core_errors
from vnpu_device_plugin import devices, errors, names
from vnpu_npu import backend

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a container: a whole chip, a hard vNPU of ``template``, or a soft slice."""

    chip: backend.ChipInfo
    template: str | None  # hard vNPU template; None for a whole chip or a soft slice
    memory_mib: int
    cores: int


@dataclass(frozen=True, slots=True)
class ContainerPlan:
    """A container entry still to serve: its position in the annotation and its devices."""

    index: int
    container: str  # the pod's container name ("#<index>" when the annotation does not say)
    init: bool  # a run-to-completion init container
    devices: tuple[Device, ...]

    @property
    def chip_uuids(self) -> tuple[str, ...]:
        return tuple(sorted(d.chip.uuid for d in self.devices))


@dataclass(frozen=True, slots=True)
class PodPlan:
    namespace: str
    name: str
    uid: str
    resource_version: str
    soft: bool  # the pod asked for hami-vnpu-core soft slices
    to_allocate: str  # the annotation's current value
    pending: tuple[ContainerPlan, ...]
    started: bool = False  # some of its containers were served already (kubelet is admitting it)

    @property
    def who(self) -> str:
        return f"{self.namespace}/{self.name}"


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def has_pending(pod: Mapping[str, Any], common_word: str) -> bool:
    """Whether the pod's to-allocate annotation for ``common_word`` still names a device."""
    return bool(_annotations(pod).get(protocol.to_allocate_key(common_word), "").strip(";"))


def others_pending(pod: Mapping[str, Any], common_word: str) -> bool:
    """Whether another chip model's plugin still has containers of this pod to serve."""
    ours = protocol.to_allocate_key(common_word)
    return any(
        key != ours and key.startswith("hami.io/") and key.endswith("-devices-to-allocate")
        and value.strip(";")
        for key, value in _annotations(pod).items()
    )  # fmt: skip


def _requests(container: Mapping[str, Any], resource: str) -> bool:
    resources = container.get("resources") or {}
    for part in ("limits", "requests"):
        if str((resources.get(part) or {}).get(resource, "0")) not in ("0", ""):
            return True
    return False


_Slot = tuple[str, bool, Mapping[str, Any]]  # container name, run-to-completion init?, its spec


def _names(pod: Mapping[str, Any], who: str, resource: str, entries: int) -> list[_Slot]:
    """(name, run-to-completion init?, spec) per annotation position, when the layout is
    recognisable.

    HAMi lists every container (init containers first, empty entries kept); Volcano lists
    only the containers that ask for the device. Anything else gives no names. Every
    container name must be a DNS-1123 label (``errors.InvalidName``): it goes into a path.
    """
    spec = pod.get("spec") or {}
    every = [
        (
            names.label(who, f"spec.initContainers[{i}].name", c.get("name")),
            c.get("restartPolicy") != "Always",
            c,
        )
        for i, c in enumerate(spec.get("initContainers") or [])
    ] + [
        (names.label(who, f"spec.containers[{i}].name", c.get("name")), False, c)
        for i, c in enumerate(spec.get("containers") or [])
    ]
    if entries == len(every):
        return every
    asking = [slot for slot in every if _requests(slot[2], resource)]
    return asking if entries == len(asking) else []


@dataclass(frozen=True, slots=True)
class _Ask:
    """What a container's ``-memory`` resource asks: ``mib`` as HAMi and Volcano read it (None
    when the value is not a quantity), ``written`` the value as the pod spec has it."""

    resource: str
    written: object
    mib: int | None


def _asked(container: Mapping[str, Any], model: catalog.ChipModel) -> _Ask | None:
    """The container's ``-memory`` limit, else its request; None when it gives neither or 0.

    HAMi and Volcano take the quantity's value (``Quantity.Value()``, rounded up) as MiB and
    multiply it by the memory factor, so ``4Gi`` asks 4294967296 MiB; vnpu's webhook refuses
    such a value, but a pod another scheduler placed may carry it.
    """
    resources = container.get("resources") or {}
    resource = model.memory_resource
    for part in ("limits", "requests"):
        values = resources.get(part) or {}
        if resource in values:
            written = values[resource]
            break
    else:
        return None
    try:
        value = quantities.parse(written.strip() if isinstance(written, str) else written).value
    except core_errors.QuantityError:
        return _Ask(resource, written, None)
    if value <= 0:
        return None  # no memory given: a whole chip, as HAMi's scheduler and Volcano read it
    return _Ask(resource, written, math.ceil(value) * model.memory_factor)


def _decode(pod: str, key: str, value: str) -> protocol.Containers:
    try:
        return protocol.decode_devices(key, value)
    except core_errors.ProtocolError as exc:
        raise errors.BadAnnotation(pod, key, value, exc.problem) from exc


def _runtime(pod: str, key: str, value: str | None) -> tuple[protocol.RuntimeInfo, ...]:
    if value is None:
        return ()
    try:
        return protocol.decode_runtime(key, value)
    except core_errors.ProtocolError as exc:
        raise errors.BadAnnotation(pod, key, value, f"{exc.problem} (at {exc.fragment})") from exc


def round_template(model: catalog.ChipModel, memory_mib: int) -> str | None:
    """The template a memory figure rounds to (HAMi's trimMemory), None for a whole chip."""
    if memory_mib <= 0 or memory_mib >= model.memory_allocatable_mib:
        return None
    for template in model.templates:
        if template.memory_mib >= memory_mib:
            return template.name
    return None


def read(pod: Mapping[str, Any], inventory: devices.Inventory) -> PodPlan:
    """The pod's plan for this node's chip model; ``errors.BadAnnotation`` names what is wrong.

    The pod's namespace, name, UID and container names are checked first (``names``):
    ``errors.InvalidName`` names the field and the value.
    """
    meta = pod.get("metadata") or {}
    who = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    namespace = names.label(who, "metadata.namespace", meta.get("namespace"))
    name = names.subdomain(who, "metadata.name", meta.get("name"))
    uid = names.uid(who, "metadata.uid", meta.get("uid"))
    word = inventory.common_word
    notes = _annotations(pod)
    key = protocol.to_allocate_key(word)
    value = notes.get(key, "")
    pending_entries = _decode(who, key, value)
    allocated_key = protocol.allocated_key(word)
    original = notes.get(allocated_key)
    layout = _decode(who, allocated_key, original) if original is not None else pending_entries
    runtime_key = protocol.runtime_key(word)
    infos = _runtime(who, runtime_key, notes.get(runtime_key))
    soft = notes.get(protocol.VNPU_MODE_KEY) == protocol.SOFT_MODE_VALUE
    if soft and not inventory.soft:
        raise errors.BadAnnotation(
            who,
            protocol.VNPU_MODE_KEY,
            protocol.SOFT_MODE_VALUE,
            f"node {inventory.node} does not run hami-vnpu-core",
        )
    containers = _names(pod, who, inventory.resource_name, len(layout))
    offsets = _device_offsets(layout)
    pending = []
    for index, entry in enumerate(pending_entries):
        if not entry:
            continue
        found = []  # (entry, the annotation its size comes from, device)
        for n, d in enumerate(entry):
            info = _info(infos, offsets, index, n, d)
            sized_by_info = info is not None and bool(info.memory_mib if soft else info.template)
            device = _device(who, key, runtime_key, inventory, d, info, soft)
            found.append((d, runtime_key if sized_by_info else key, device))
        devices_ = tuple(device for _, _, device in found)
        kinds = {d.template is not None for d in devices_}
        if len(kinds) > 1:
            raise errors.BadAnnotation(
                who, runtime_key, notes.get(runtime_key), "a container mixes whole chips and vNPUs"
            )
        if index < len(containers):
            container, init, container_spec = containers[index]
            ask = _asked(container_spec, inventory.model)
        else:  # the layout does not say which container this is: only the decision is checked
            container, init, ask = f"#{index}", False, None
        for d, source, device in found:
            _check_size(who, container, inventory.model, d, device, soft, source, ask)
        pending.append(ContainerPlan(index, container, init, devices_))
    return PodPlan(
        namespace,
        name,
        uid,
        str(meta.get("resourceVersion", "")),
        soft,
        value,
        tuple(pending),
        started=sum(1 for e in layout if e) > len(pending),
    )


def _device_offsets(layout: protocol.Containers) -> list[int]:
    """Position of each container's first device among all devices (runtime info order)."""
    offsets, total = [], 0
    for entry in layout:
        offsets.append(total)
        total += len(entry)
    return offsets


def _info(
    infos: Sequence[protocol.RuntimeInfo],
    offsets: Sequence[int],
    index: int,
    number: int,
    entry: protocol.DeviceEntry,
) -> protocol.RuntimeInfo | None:
    """The runtime info of a device: by position when it lines up, else by UUID (HAMi's map)."""
    if index < len(offsets) and offsets[index] + number < len(infos):
        candidate = infos[offsets[index] + number]
        if candidate.uuid == entry.uuid:
            return candidate
    found = [i for i in infos if i.uuid == entry.uuid]
    return found[-1] if found else None


def _device(
    who: str,
    key: str,
    runtime_key: str,
    inventory: devices.Inventory,
    entry: protocol.DeviceEntry,
    info: protocol.RuntimeInfo | None,
    soft: bool,
) -> Device:
    if entry.type != inventory.common_word:
        raise errors.BadAnnotation(
            who, key, entry.type, f"device type is not {inventory.common_word}"
        )
    chip = inventory.chip(entry.uuid)
    if chip is None:
        raise errors.BadAnnotation(
            who, key, entry.uuid, f"not a {inventory.common_word} chip of node {inventory.node}"
        )
    if soft:
        memory = info.memory_mib if info is not None and info.memory_mib else entry.memory_mib
        cores = info.core if info is not None and info.core else entry.cores
        return Device(chip, None, memory, cores)
    template = info.template if info is not None else None
    if template is None:
        template = round_template(inventory.model, entry.memory_mib)
    if template is not None and inventory.model.template(template) is None:
        known = ", ".join(t.name for t in inventory.model.templates) or "none"
        raise errors.BadAnnotation(
            who, runtime_key, template, f"not a {inventory.model.name} template (known: {known})"
        )
    return Device(chip, template, entry.memory_mib, entry.cores)


def _check_size(
    who: str,
    container: str,
    model: catalog.ChipModel,
    entry: protocol.DeviceEntry,
    device: Device,
    soft: bool,
    key: str,
    ask: _Ask | None,
) -> None:
    """Refuse a device that gives less memory than the container or its decision asks.

    The rule and why are in the module docstring; ``key`` is the annotation the device's
    size comes from (the error's ``key``; its ``value`` is the template or the memory).
    """
    chip_mib, allocatable = model.memory_capacity_mib, model.memory_allocatable_mib
    word = model.common_word
    one = f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word} chip"
    chip = f"{one} has {chip_mib} MiB"
    template = model.template(device.template) if device.template is not None else None
    value: object
    if soft:
        given, what, value = (
            device.memory_mib,
            f"a soft slice of {device.memory_mib} MiB",
            device.memory_mib,
        )
    elif template is not None:
        given, what = template.memory_mib, f"template {template.name} ({template.memory_mib} MiB)"
        value = template.name
    else:  # a whole chip serves anything up to the chip's memory
        given, what, value = chip_mib, "a whole chip", entry.memory_mib

    def refused(problem: str, asked_mib: int | None) -> errors.DecisionTooSmall:
        return errors.DecisionTooSmall(
            who,
            container,
            key,
            value,
            problem,
            template=template.name if template is not None else None,
            given_mib=given,
            asked_mib=asked_mib,
            chip_mib=chip_mib,
        )

    if ask is not None and ask.mib is None:
        raise refused(
            f"{ask.resource} {ask.written!r} is not a quantity, so {what} cannot be checked "
            f"against what it asks; {chip}",
            None,
        )
    if soft and device.memory_mib <= 0:
        # No scheduler sizes a soft slice at 0 (HAMi, Volcano and vnpu give one that names no
        # memory the chip's allocatable memory), and an NPU_MEM_QUOTA of 0 is no size to hand
        # hami-vnpu-core: refused rather than read as "unlimited" or guessed.
        raise refused(
            f"a soft slice of 0 MiB has no memory quota (a soft pod that names no memory gets "
            f"the chip's {allocatable} MiB); {chip}",
            ask.mib if ask is not None else None,
        )
    short: list[tuple[int, str]] = []  # (MiB, whose figure) the device falls short of
    if ask is not None and ask.mib is not None:
        factor = model.memory_factor
        detail = f" ({ask.resource}: {ask.written} × memory factor {factor})" if factor != 1 else ""
        # A whole chip gives all a chip gives (up to its capacity), a soft slice up to the
        # allocatable memory; a template exactly its own.
        needed = min(ask.mib, allocatable) if soft else ask.mib
        if given < needed or ask.mib > chip_mib:
            short.append((ask.mib, f"the {ask.mib} MiB asked{detail}"))
    if given < entry.memory_mib:
        short.append((entry.memory_mib, f"the {entry.memory_mib} MiB its decision accounts"))
    if not short:
        return
    asked_mib, whose = max(short)
    if given < asked_mib:
        raise refused(f"{what} is smaller than {whose}; {chip}", asked_mib)
    raise refused(f"{whose} is more than {one} has ({chip_mib} MiB)", asked_mib)
