"""npu-exporter's metric names, labels and units, for dashboards built on Huawei's exporter.

``collector`` yields these as well when ``--npu-exporter-compat`` is set. They follow
npu-exporter's Prometheus path (``metrics.COMPAT``): card labels ``id`` (physical id),
``model_name`` (``<chip name>-<type>-<version>``), ``vdie_id`` (the chip UUID),
``pcie_bus_info``, ``namespace``, ``pod_name``, ``container_name``; memory in MB (vNPU memory
in KB), utilisation and temperature as npu-exporter reports them. Two deliberate
differences: a chip shared by several pods carries empty pod labels (npu-exporter writes
``not_displayed_for_multi_pod``), per-pod values being on ``vnpu_allocation_*``; and samples
carry no explicit timestamp. ``npu_chip_info_health_status`` keeps npu-exporter's -1 for a
chip whose health cannot be read, and ``machine_unknown_npu_nums`` counts those chips.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import vnpu_exporter
from vnpu_exporter import exposition, metrics, sampler, usage
from vnpu_npu import backend

Kind = metrics.AllocationKind
_DEFS = {d.name: d for d in metrics.COMPAT}
_KIB = 1024
Add = Callable[[str, list[str], float], None]


def _container_ids(pods: Sequence[Mapping[str, Any]] | None) -> dict[tuple[str, str, str], str]:
    """Container ids from the pods' statuses (``containerd://abc`` -> ``abc``)."""
    found: dict[tuple[str, str, str], str] = {}
    for pod in pods or ():
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        for item in [
            *(status.get("containerStatuses") or []),
            *(status.get("initContainerStatuses") or []),
        ]:
            raw = str(item.get("containerID") or "")
            key = (
                str(meta.get("namespace", "")),
                str(meta.get("name", "")),
                str(item.get("name", "")),
            )
            found[key] = raw.split("://", 1)[-1]
    return found


def families(
    node: str, snapshot: sampler.Snapshot, measured: Sequence[usage.Measured]
) -> Iterator[exposition.GaugeTable]:
    """npu-exporter's families for this snapshot."""
    made: dict[str, exposition.GaugeTable] = {}

    def add(name: str, labels: list[str], value: float) -> None:
        table = made.get(name)
        if table is None:
            table = made[name] = exposition.GaugeTable(_DEFS[name])
        table.add(labels, value)

    add("npu_exporter_version_info", [vnpu_exporter.__version__], 1)
    chips = snapshot.chips or ()
    holders: dict[int, list[usage.Measured]] = defaultdict(list)
    for m in measured:
        if m.allocation.phy is not None:
            holders[m.allocation.phy].append(m)
    ids = _container_ids(snapshot.pods)
    counts = {"healthy": 0, "unhealthy": 0, "unknown": 0}
    for chip in chips:
        held = holders.get(chip.phy_id, [])
        owners = {
            (m.allocation.owner.namespace, m.allocation.owner.pod, m.allocation.owner.container)
            for m in held
        }
        ns, pod, container = next(iter(owners)) if len(owners) == 1 else ("", "", "")
        card = [str(chip.phy_id), chip.model_name, chip.uuid, chip.bdf, ns, pod, container]
        health = snapshot.health.get(chip.phy_id)  # None: unknown or gone, -1 either way
        status = -1 if health is None else (1 if health.health is backend.Health.OK else 0)
        counts[{1: "healthy", 0: "unhealthy", -1: "unknown"}[status]] += 1
        add("npu_chip_info_health_status", card, status)
        add("npu_chip_info_name", [str(chip.phy_id), chip.model_name, *card[2:]], 1)
        if health is not None:
            for slot, code in enumerate(health.error_codes[: metrics.ERROR_CODE_SLOTS]):
                add(f"npu_chip_info_error_code{'' if slot == 0 else f'_{slot}'}", card, code)
        _sensors(add, chip, snapshot, card)
        for owner in sorted(owners):
            labels = [str(chip.phy_id), chip.model_name, chip.uuid, chip.bdf, *owner]
            container_id = ids.get(owner, "")
            add("npu_container_info", [*labels, container_id, "_".join(owner)], 1)
        whole = [m for m in held if m.allocation.kind is Kind.WHOLE]
        if len(held) == 1 and whole:
            _container(add, whole[0], card)
        for m in held:
            _vnpu(add, chip, m, snapshot)
    add("machine_npu_nums", [], len(chips))
    add("machine_healthy_npu_nums", [], counts["healthy"])
    add("machine_unhealthy_npu_nums", [], counts["unhealthy"])
    add("machine_unknown_npu_nums", [], counts["unknown"])
    yield from made.values()


def _sensors(add: Add, chip: backend.ChipInfo, snapshot: sampler.Snapshot, card: list[str]) -> None:
    phy = chip.phy_id
    if phy in snapshot.temperature:
        add("npu_chip_info_temperature", card, snapshot.temperature[phy])
    if phy in snapshot.power:
        add("npu_chip_info_power", card, snapshot.power[phy].watts)
    if phy in snapshot.aicore_percent:
        add("npu_chip_info_utilization", card, snapshot.aicore_percent[phy])
    memory = snapshot.memory.get(phy)
    if memory is not None:
        prefix = "npu_chip_info_hbm_" if memory.kind is backend.MemoryKind.HBM else "npu_chip_info_"
        add(f"{prefix}total_memory", card, memory.total_mib)
        add(f"{prefix}used_memory", card, memory.used_mib)


def _container(add: Add, m: usage.Measured, card: list[str]) -> None:
    """A chip one container holds whole: npu-exporter's container_npu_* series."""
    add("container_npu_total_memory", card, m.allocation.memory_mib)
    if m.memory_used_bytes is not None:
        add("container_npu_used_memory", card, m.memory_used_bytes / (_KIB * _KIB))
    if m.utilization is not None:
        add("container_npu_utilization", card, m.utilization * 100)


def _vnpu(add: Add, chip: backend.ChipInfo, m: usage.Measured, snapshot: sampler.Snapshot) -> None:
    """A vNPU with activity figures (310P): npu-exporter's vnpu_pod_* series."""
    a = m.allocation
    if a.kind is not Kind.VNPU or a.vnpu_id is None:
        return
    usage = snapshot.vnpu_usage.get(a.vnpu_id)
    if usage is None:
        return
    o = a.owner
    labels = [
        str(chip.phy_id),
        chip.model_name,
        str(a.vnpu_id),
        f"{a.aicores:g}",
        o.namespace,
        o.pod,
        o.container,
        "true",
    ]
    add("vnpu_pod_aicore_utilization", labels, usage.aicore_percent)
    add("vnpu_pod_total_memory", labels, usage.memory_total_kib)
    add("vnpu_pod_used_memory", labels, usage.memory_used_kib)
