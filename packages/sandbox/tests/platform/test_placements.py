"""The demo's allocation table: one memory figure per chip, the one Prometheus reports."""

from __future__ import annotations

from typing import Any

from vnpu_core import catalog, protocol
from vnpu_sandbox.platform import placements

MODEL = catalog.BUILTIN.by_common_word("Ascend310P")
assert MODEL is not None
WORD = MODEL.common_word


def _node(name: str, chips: int) -> dict[str, Any]:
    registered = [
        protocol.RegisteredChip(
            id=f"{name}-chip-{i}",
            index=i,
            count=MODEL.split_count,
            devmem=MODEL.memory_allocatable_mib,
            devcore=MODEL.aicore,
            type=WORD,
            health=True,
            network_id=None,
        )
        for i in range(chips)
    ]
    value = protocol.encode_node_register(registered)
    return {"metadata": {"name": name, "annotations": {protocol.node_register_key(WORD): value}}}


def _pod(name: str, node: str, *devices: protocol.DeviceEntry) -> dict[str, Any]:
    decision = protocol.encode_devices([list(devices)])
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "annotations": {protocol.allocated_key(WORD): decision},
        },
        "spec": {"nodeName": node, "containers": [{"name": "main"}]},
        "status": {"phase": "Running"},
    }


def test_chip_memory_is_the_capacity_and_a_whole_chip_takes_all_of_it() -> None:
    nodes = [_node("n1", 2)]
    pods = [
        _pod(
            "whole", "n1", protocol.DeviceEntry("n1-chip-0", WORD, MODEL.memory_allocatable_mib, 8)
        ),
        _pod("vnpu", "n1", protocol.DeviceEntry("n1-chip-1", WORD, 6144, 2)),
    ]
    (use,) = placements.model_use(pods, nodes).values()
    # 2 x 24576 MiB, as vnpu_chip_memory_total_bytes sums it, not the 21527 a pod gets of each.
    assert use.memory_mib == 2 * MODEL.memory_capacity_mib == 49152
    # The whole chip is all of its memory, as vnpu_chip_allocated_memory_bytes counts it.
    assert use.memory_allocated_mib == MODEL.memory_capacity_mib + 6144
    assert (use.chips, use.chips_used, use.whole_chips, use.vnpus) == (2, 2, 1, 1)
