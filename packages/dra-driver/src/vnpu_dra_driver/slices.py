"""A node's NPUs as the ResourceSlices of its DRA pool (resource.k8s.io/v1), built without I/O.

``build`` takes the node name, its chips (``Chip``: the backend's ``ChipInfo`` and health)
and the catalog's ``ChipModel`` and returns the slices of the node's one pool (pool name =
node name) as dicts ready for the API. ``publisher`` writes them; tests and the CLI print them.

The model (docs/dra.md has a worked example):

* one counter set per chip, ``chip-<phy>``, holding the chip's hardware budgets: ``aicore``,
  ``aicpu``, ``memory`` (the chip's capacity figure, MiB), one counter per media engine the
  model has (``vpc``, ``vdec``, ``jpegd``, ``jpege``, ``venc``) and ``vnpus`` (vNPU slots);
* per chip a ``whole`` device consuming all of every counter, and per template as many
  placement devices as the chip could hold of that template alone; each consumes the
  template's budgets and one slot, so kube-scheduler keeps every mix legal;
* on a soft-mode node, per chip one ``soft`` device instead, shared
  (``allowMultipleAllocations``) with consumable ``memory`` and ``corePercent``;
* attributes in the driver's domain (``model``, ``template``, ``chip``, ``index``,
  ``server`` and the chip's group in the server layout: ``ring``, ``mesh``, ``module`` or
  ``card``) and capacities (``memory``, ``aicore``, ``aicpu``) on every device;
* a chip's fault level as a taint on each of its devices (``TAINT_KEY``): NoSchedule while
  it is degraded, NoExecute once it has failed.

API limits are kept by construction: counter sets go in slices of their own, at most
``MAX_COUNTER_SETS`` per slice; devices at most ``MAX_DEVICES`` per slice (the limit for
devices that consume counters or carry taints, used for every slice so that a fault never
reshapes the pool), a chip's devices kept in one slice. Names and order are deterministic,
so the same input gives the same slices.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vnpu_core import catalog, draclaims, draclasses, topology
from vnpu_dra_driver import errors
from vnpu_npu import backend, faults

Json = dict[str, Any]
HEALTHY = backend.ChipHealth(backend.Health.OK)

DRIVER = draclasses.DRIVER
API_VERSION = "resource.k8s.io/v1"
MAX_COUNTER_SETS = 8  # resource/v1 ResourceSliceMaxCounterSets
MAX_DEVICES = 64  # ResourceSliceMaxDevicesWithAdvancedFeatures (counters, taints)
MAX_NAME = 253  # a ResourceSlice name is a DNS subdomain
TAINT_KEY = f"{DRIVER}/fault"
MANAGED_BY = "vnpu-dra-driver"
LABELS = {"app.kubernetes.io/managed-by": MANAGED_BY}

SLOTS = "vnpus"
MEMORY = "memory"
CORE_PERCENT = "corePercent"  # a soft device's consumable share of the chip's AI cores
MEDIA_COUNTERS = ("vpc", "vdec", "jpegd", "jpege", "venc")  # pngd has no budget on any model
WHOLE = draclasses.WHOLE
SOFT = draclasses.SOFT

# The attribute naming a chip's group in each server layout (claims' constraints name it too).
GROUP_ATTRIBUTE = draclaims.GROUP_ATTRIBUTE

# Fault level -> taint effect. Levels that leave the chip usable carry no taint; levels that
# ask for a restart once work ends hold new work back; levels that reset or isolate the chip
# evict what runs there.
NO_TAINT = frozenset({faults.FaultLevel.NORMAL, faults.FaultLevel.NOT_HANDLE})
NO_EXECUTE = frozenset(
    {
        faults.FaultLevel.RESTART_NPU,
        faults.FaultLevel.SEPARATE_NPU,
        faults.FaultLevel.MANUALLY_SEPARATE_NPU,
    }
)


@dataclass(frozen=True, slots=True)
class Chip:
    """One chip as the driver publishes it: what the backend enumerated and its health.

    ``health`` None means the chip dropped off (the backend raised ChipGone).
    """

    info: backend.ChipInfo
    health: backend.ChipHealth | None = HEALTHY


def mib(value: int) -> str:
    """A MiB figure as a Quantity string (``24576Mi``)."""
    return f"{value}Mi"


def chip_counters(model: catalog.ChipModel) -> dict[str, int]:
    """A chip's budgets, counter name -> amount (memory in MiB), in publishing order."""
    budgets = {"aicore": model.aicore, "aicpu": model.aicpu, MEMORY: model.memory_capacity_mib}
    if model.media is not None:
        for engine in MEDIA_COUNTERS:
            amount = getattr(model.media, engine)
            if amount > 0:
                budgets[engine] = amount
    budgets[SLOTS] = model.max_vnpus
    return budgets


def template_needs(model: catalog.ChipModel, template: catalog.Template) -> dict[str, int]:
    """What one vNPU of ``template`` consumes of the counters of ``chip_counters(model)``."""
    needs = {"aicore": template.aicore, "aicpu": template.aicpu, MEMORY: template.memory_mib}
    if model.media is not None and template.media is not None:
        for engine in MEDIA_COUNTERS:
            amount = getattr(template.media, engine)
            if amount > 0:
                needs[engine] = amount
    needs[SLOTS] = 1
    return {name: amount for name, amount in needs.items() if amount > 0}


def placements(model: catalog.ChipModel, template: catalog.Template) -> int:
    """How many vNPUs of ``template`` one chip holds at most: its scarcest budget decides."""
    budgets = chip_counters(model)
    needs = template_needs(model, template)
    return min(budgets.get(name, 0) // amount for name, amount in needs.items())


def taint_effect(health: backend.ChipHealth | None) -> str | None:
    """``NoSchedule``, ``NoExecute`` or None (no taint) for a chip's health (None: gone)."""
    level = faults.assess(health).level
    if level in NO_TAINT:
        return None
    return "NoExecute" if level in NO_EXECUTE else "NoSchedule"


def counter_set_name(chip: backend.ChipInfo) -> str:
    return f"chip-{chip.phy_id}"


def device_name(chip: backend.ChipInfo, kind: str, number: int | None = None) -> str:
    """``draclasses.device_name`` of the chip: ``chip-0-whole``, ``chip-0-vir05-1c-16g-2``."""
    return draclasses.device_name(chip.phy_id, kind, number)


def slice_name(node: str, kind: str, number: int) -> str:
    return f"{node}-{DRIVER}-{kind}-{number}"


def build(
    node: str,
    chips: Iterable[Chip],
    model: catalog.ChipModel,
    *,
    soft: bool = False,
    server: topology.ServerKind | None = None,
    generation: int = 1,
) -> tuple[Json, ...]:
    """The ResourceSlices of ``node``'s pool: counter slices first, then device slices.

    ``soft`` publishes every chip as one shared soft device; ``server`` overrides the layout
    ``topology.default_kind`` picks; ``generation`` is the pool generation every slice
    carries. Raises ``errors.SliceError`` for input that cannot be published.
    """
    ordered = sorted(chips, key=lambda c: c.info.phy_id)
    _check(node, ordered, generation)
    layout = _layout(ordered, model, server)
    counter_sets: list[Json] = []
    device_groups: list[list[Json]] = []
    for position, chip in enumerate(ordered):
        attributes = _chip_attributes(chip.info, model, layout, position)
        effect = taint_effect(chip.health)
        taints = [] if effect is None else [_taint(chip.health, effect)]
        if soft:
            device_groups.append([_soft_device(chip.info, model, attributes, taints)])
        else:
            counter_sets.append(
                {"name": counter_set_name(chip.info), "counters": _counters(chip_counters(model))}
            )
            device_groups.append(_hard_devices(chip.info, model, attributes, taints))
    counter_chunks = [
        counter_sets[i : i + MAX_COUNTER_SETS]
        for i in range(0, len(counter_sets), MAX_COUNTER_SETS)
    ]
    device_chunks = _pack(device_groups)
    count = len(counter_chunks) + len(device_chunks)
    pool = {"name": node, "generation": generation, "resourceSliceCount": count}
    built = [
        _slice(slice_name(node, "counters", i), node, pool, {"sharedCounters": chunk})
        for i, chunk in enumerate(counter_chunks)
    ]
    built += [
        _slice(slice_name(node, "devices", i), node, pool, {"devices": chunk})
        for i, chunk in enumerate(device_chunks)
    ]
    return tuple(built)


def _check(node: str, chips: Sequence[Chip], generation: int) -> None:
    if not node:
        raise errors.SliceError("node", node, "a node name is needed: it names the pool")
    longest = slice_name(node, "counters", max(len(chips), 1))
    if len(longest) > MAX_NAME:
        raise errors.SliceError("node", node, f"slice names would pass {MAX_NAME} characters")
    if not chips:
        raise errors.SliceError("chips", (), "a node without chips publishes no pool")
    if generation < 1:
        raise errors.SliceError("generation", generation, "a pool generation starts at 1")
    seen: set[int] = set()
    for chip in chips:
        if chip.info.phy_id in seen:
            raise errors.SliceError("phy_id", chip.info.phy_id, "two chips share a physical id")
        seen.add(chip.info.phy_id)


def _layout(
    chips: Sequence[Chip], model: catalog.ChipModel, server: topology.ServerKind | None
) -> topology.Topology:
    numbers = [c.info.phy_id for c in chips]
    kind = server if server is not None else topology.default_kind(model, numbers)
    return topology.build(kind, numbers)


def _chip_attributes(
    chip: backend.ChipInfo, model: catalog.ChipModel, layout: topology.Topology, position: int
) -> Json:
    attributes: Json = {
        "model": {"string": model.common_word},
        "chip": {"string": chip.uuid},
        "index": {"int": chip.phy_id},
        "server": {"string": layout.kind.value},
    }
    group_attribute = GROUP_ATTRIBUTE.get(layout.kind)
    group = layout.group_of(position)
    if group_attribute is not None and group >= 0:
        attributes[group_attribute] = {"int": group}
    return attributes


def _hard_devices(
    chip: backend.ChipInfo, model: catalog.ChipModel, attributes: Json, taints: list[Json]
) -> list[Json]:
    budgets = chip_counters(model)
    whole = _device(
        device_name(chip, WHOLE),
        {**attributes, "template": {"string": WHOLE}},
        _capacity(model.memory_capacity_mib, model.aicore, model.aicpu),
        taints,
    )
    whole["consumesCounters"] = [
        {"counterSet": counter_set_name(chip), "counters": _counters(budgets)}
    ]
    devices = [whole]
    for template in model.templates:
        needs = template_needs(model, template)
        for number in range(placements(model, template)):
            device = _device(
                device_name(chip, template.name, number),
                {**attributes, "template": {"string": template.name}},
                _capacity(template.memory_mib, template.aicore, template.aicpu),
                taints,
            )
            device["consumesCounters"] = [
                {"counterSet": counter_set_name(chip), "counters": _counters(needs)}
            ]
            devices.append(device)
    return devices


def _soft_device(
    chip: backend.ChipInfo, model: catalog.ChipModel, attributes: Json, taints: list[Json]
) -> Json:
    """One shared device: slices take memory (MiB steps, all of it by default) and a core
    percentage (none reserved by default: the slice shares the idle cores, as HAMi's 0)."""
    memory = mib(model.memory_allocatable_mib)
    capacity: Json = {
        MEMORY: {
            "value": memory,
            "requestPolicy": {
                "default": memory,
                "validRange": {"min": mib(1), "max": memory, "step": mib(1)},
            },
        },
        CORE_PERCENT: {
            "value": "100",
            "requestPolicy": {
                "default": "0",
                "validRange": {"min": "0", "max": "100", "step": "1"},
            },
        },
    }
    device = _device(
        device_name(chip, SOFT), {**attributes, "template": {"string": SOFT}}, capacity, taints
    )
    device["allowMultipleAllocations"] = True
    return device


def _device(name: str, attributes: Json, capacity: Json, taints: list[Json]) -> Json:
    device: Json = {"name": name, "attributes": attributes, "capacity": capacity}
    if taints:
        device["taints"] = [dict(t) for t in taints]
    return device


def _capacity(memory_mib: int, aicore: int, aicpu: int) -> Json:
    return {
        MEMORY: {"value": mib(memory_mib)},
        "aicore": {"value": str(aicore)},
        "aicpu": {"value": str(aicpu)},
    }


def _counters(amounts: Mapping[str, int]) -> Json:
    return {
        name: {"value": mib(amount) if name == MEMORY else str(amount)}
        for name, amount in amounts.items()
    }


def _taint(health: backend.ChipHealth | None, effect: str) -> Json:
    return {"key": TAINT_KEY, "value": faults.assess(health).level.value, "effect": effect}


def _pack(groups: Sequence[list[Json]]) -> list[list[Json]]:
    """Chips' device lists into slices of at most ``MAX_DEVICES``, a chip's devices together
    (a chip with more devices than that alone fills slices of its own)."""
    chunks: list[list[Json]] = []
    current: list[Json] = []
    for group in groups:
        if len(group) > MAX_DEVICES:
            if current:
                chunks.append(current)
                current = []
            chunks.extend(group[i : i + MAX_DEVICES] for i in range(0, len(group), MAX_DEVICES))
            continue
        if len(current) + len(group) > MAX_DEVICES:
            chunks.append(current)
            current = []
        current.extend(group)
    if current:
        chunks.append(current)
    return chunks


def _slice(name: str, node: str, pool: Json, body: Json) -> Json:
    spec: Json = {"driver": DRIVER, "nodeName": node, "pool": dict(pool), **body}
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": name, "labels": dict(LABELS)},
        "spec": spec,
    }
