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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vnpu_core import catalog, protocol
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


def _names(pod: Mapping[str, Any], who: str, resource: str, entries: int) -> list[tuple[str, bool]]:
    """(name, run-to-completion init?) per annotation position, when the layout is recognisable.

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
        return [(name, init) for name, init, _ in every]
    asking = [(name, init) for name, init, c in every if _requests(c, resource)]
    return asking if entries == len(asking) else []


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
        devices_ = tuple(
            _device(who, key, runtime_key, inventory, d, _info(infos, offsets, index, n, d), soft)
            for n, d in enumerate(entry)
        )
        kinds = {d.template is not None for d in devices_}
        if len(kinds) > 1:
            raise errors.BadAnnotation(
                who, runtime_key, notes.get(runtime_key), "a container mixes whole chips and vNPUs"
            )
        container, init = containers[index] if index < len(containers) else (f"#{index}", False)
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
