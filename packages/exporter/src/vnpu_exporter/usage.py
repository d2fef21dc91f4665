"""What each allocation uses, where the driver reports it.

``collector`` measures every allocation of a snapshot once per scrape; ``compat`` writes the
same measurements in npu-exporter's families.
"""

from __future__ import annotations

from dataclasses import dataclass

from vnpu_exporter import attribution, metrics, sampler

MIB = 1024 * 1024
Kind = metrics.AllocationKind


@dataclass(frozen=True, slots=True)
class Measured:
    """An allocation with what it uses, where the driver reports it."""

    allocation: attribution.Allocation
    memory_used_bytes: float | None
    utilization: float | None


def measure(item: attribution.Allocation, snapshot: sampler.Snapshot, alone: bool) -> Measured:
    """What ``item`` uses: whole chips (and a chip's only soft slice) use what the chip uses;
    a vNPU what the driver's vNPU activity query says (310P); otherwise unmeasured."""
    phy = item.phy
    if phy is None:
        return Measured(item, None, None)
    chip_wide = item.kind is Kind.WHOLE or (item.kind is Kind.SOFT and alone)
    if chip_wide:
        memory = snapshot.memory.get(phy)
        percent = snapshot.aicore_percent.get(phy)
        used = memory.used_mib * MIB if memory is not None else None
        return Measured(item, used, percent / 100 if percent is not None else None)
    if item.kind is Kind.VNPU and item.vnpu_id is not None:
        usage = snapshot.vnpu_usage.get(item.vnpu_id)
        if usage is not None:
            return Measured(item, usage.memory_used_kib * 1024, usage.aicore_percent / 100)
        listed = next((v for v in snapshot.vnpus.get(phy, ()) if v.vnpu_id == item.vnpu_id), None)
        if listed is not None and listed.memory_used_mib is not None:
            return Measured(item, listed.memory_used_mib * MIB, None)
    return Measured(item, None, None)
