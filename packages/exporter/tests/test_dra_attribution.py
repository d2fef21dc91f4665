"""Soft slices and unknown devices in DRA mode's attribution."""

from __future__ import annotations

from typing import Any

from vnpu_exporter import attribution, podresources


def test_soft_slices_and_unknown_devices(kit: Any, node310: Any) -> None:
    """A soft slice is attributed without a size (PodResources does not carry it); a device of
    a chip the node lacks, or a name the driver does not publish, is left out."""
    c = node310.chips()

    def device(pod: str, name: str) -> podresources.ClaimDevice:
        return podresources.ClaimDevice("ml", pod, "main", "ml", f"{pod}-npu", "npu-node-1", name)

    found = attribution.attribute(
        kit.NODE,
        c,
        {},
        [],
        [device("s", "chip-3-soft"), device("gone", "chip-9-whole"), device("odd", "chip-0-gpu")],
    )
    (soft,) = found.allocations
    assert (soft.owner.pod, soft.phy, soft.kind, soft.memory_mib, soft.aicores) == (
        "s",
        3,
        attribution.Kind.SOFT,
        0,
        0,
    )
    assert found.usage[c[3].uuid].soft_slices == 1
