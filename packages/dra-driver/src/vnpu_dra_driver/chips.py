"""Reading a node's chips for publishing: the backend's chips, each with its health.

The node agent calls ``read`` before every ``slices.build``. A chip whose health read says
it is gone (``ChipGone``) is kept, with health None, so that ``slices`` taints its devices
NoExecute instead of dropping them: pods that hold it learn it failed. Any other driver
failure propagates (``vnpu_npu.errors.NpuError``); the caller keeps the last pool.
"""

from __future__ import annotations

from vnpu_dra_driver import slices
from vnpu_npu import backend, errors


def read(npu: backend.Backend) -> tuple[slices.Chip, ...]:
    """Every chip of ``npu`` with its health, ordered by physical id."""
    found: list[slices.Chip] = []
    for info in npu.chips():
        health: backend.ChipHealth | None
        try:
            health = npu.health(info.phy_id)
        except errors.ChipGone:
            health = None
        found.append(slices.Chip(info, health))
    return tuple(sorted(found, key=lambda c: c.info.phy_id))
