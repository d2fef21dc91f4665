"""Where pods landed and how full the chips are, read from the objects the API holds.

The demo prints these and the end-to-end tests compare them with the exporter's series and
Prometheus's answers. Everything comes from what the platform itself wrote: the chips each
device plugin registered (``hami.io/node-register-<CW>``) and the decision the scheduler
bound into each pod (``vnpu_core.ledger.read_pod``). Pure: callers pass the JSON objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vnpu_core import catalog, errors, inventory, ledger, protocol

Json = Mapping[str, Any]
MODELS = catalog.BUILTIN


@dataclass(frozen=True, slots=True)
class Chip:
    """A registered chip: node, enumeration index, model (common word), memory capacity."""

    node: str
    index: int
    common_word: str
    memory_mib: int


@dataclass(frozen=True, slots=True)
class Placement:
    """One pod: where it is, what it holds (``chip 2: vir02``), or why it waits."""

    namespace: str
    name: str
    phase: str
    node: str
    holds: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ModelUse:
    """Allocation of one chip model over the cluster."""

    common_word: str
    chips: int
    chips_used: int
    memory_mib: int
    memory_allocated_mib: int
    vnpus: int
    whole_chips: int
    soft_slices: int


def chips(nodes: Iterable[Json]) -> dict[str, Chip]:
    """Every chip the nodes registered, by UUID (unreadable registers are skipped)."""
    found: dict[str, Chip] = {}
    for node in nodes:
        name = node["metadata"]["name"]
        for key, value in (node["metadata"].get("annotations") or {}).items():
            if not key.startswith(protocol.node_register_key("")):
                continue
            try:
                registered = protocol.decode_node_register(key, value)
            except errors.ProtocolError:
                continue
            for chip in registered:
                model = MODELS.by_common_word(chip.type)
                # The register's devmem is HAMi's figure, the most one pod gets (21527 on a
                # 310P); the chip's memory, as every table and metric shows it, is its capacity.
                memory = model.memory_capacity_mib if model is not None else chip.devmem
                found[chip.id] = Chip(name, chip.index, chip.type, memory)
    return found


def _describe(chip: Chip | None, usage: inventory.ChipUsage) -> str:
    where = f"chip {chip.index}" if chip is not None else "unknown chip"
    if usage.exclusive:
        return f"{where}: whole chip"
    if usage.soft_slices:
        return f"{where}: soft slice {usage.memory_mib} MiB, {usage.core_percent}% cores"
    return f"{where}: " + "+".join(usage.templates or ("vNPU",))


def placement(pod: Json, by_uuid: Mapping[str, Chip]) -> Placement:
    meta = pod["metadata"]
    held = ledger.read_pod(pod, MODELS)
    holds: tuple[str, ...]
    if isinstance(held, ledger.Problem):
        holds = (f"unreadable decision: {held.error}",)
    else:
        ordered = sorted(held.items(), key=lambda kv: getattr(by_uuid.get(kv[0]), "index", -1))
        holds = tuple(_describe(by_uuid.get(uuid), usage) for uuid, usage in ordered)
    return Placement(
        namespace=meta.get("namespace", ""),
        name=meta["name"],
        phase=(pod.get("status") or {}).get("phase", ""),
        node=(pod.get("spec") or {}).get("nodeName") or "",
        holds=holds,
    )


def model_use(pods: Iterable[Json], nodes: Iterable[Json]) -> dict[str, ModelUse]:
    """Per chip model: chips, chips with anything allocated, memory allocated of total."""
    by_uuid = chips(nodes)
    usage: dict[str, inventory.ChipUsage] = {}
    for pod in pods:
        if not ledger.holds_devices(pod):
            continue
        held = ledger.read_pod(pod, MODELS)
        if not isinstance(held, ledger.Problem):
            ledger.add(usage, held)
    out: dict[str, ModelUse] = {}
    for uuid, chip in by_uuid.items():
        used = usage.get(uuid, inventory.IDLE)
        before = out.get(chip.common_word, ModelUse(chip.common_word, 0, 0, 0, 0, 0, 0, 0))
        out[chip.common_word] = ModelUse(
            common_word=chip.common_word,
            chips=before.chips + 1,
            chips_used=before.chips_used + (0 if used.idle else 1),
            memory_mib=before.memory_mib + chip.memory_mib,
            memory_allocated_mib=before.memory_allocated_mib
            + (chip.memory_mib if used.exclusive else used.memory_mib),
            vnpus=before.vnpus + used.vnpus,
            whole_chips=before.whole_chips + (1 if used.exclusive else 0),
            soft_slices=before.soft_slices + used.soft_slices,
        )
    return dict(sorted(out.items()))
