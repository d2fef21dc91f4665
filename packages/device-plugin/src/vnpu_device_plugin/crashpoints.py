"""Named points inside an Allocate where the process can be made to die, for crash tests.

The vNPU lifecycle must survive the plugin being killed at any moment: between creating a
vNPU and recording it, between recording it and answering the kubelet. Tests prove that
by starting the real ``vnpu-device-plugin`` process with the hidden ``--crash-at POINT``
flag (or ``VNPU_DP_CRASH_AT``): when the code reaches ``POINT`` it exits at once with
``os._exit`` (no cleanup, no flushing, like a SIGKILL), and the test restarts it and
checks the driver, the ledger and the pod. ``lifecycle`` and ``allocation`` call
``reach``; with no point configured it does nothing.
"""

from __future__ import annotations

import os
import sys

AFTER_CREATE = "after-create"  # the vNPU exists in the driver; the ledger does not say so yet
AFTER_LEDGER = "after-ledger"  # the ledger records the vNPU; the pod is not patched yet
AFTER_PATCH = "after-patch"  # the pod annotations are written; kubelet has no answer yet
POINTS = (AFTER_CREATE, AFTER_LEDGER, AFTER_PATCH)
EXIT_STATUS = 86


class CrashPoints:
    """Dies at ``point`` (one of ``POINTS``, or "" for never)."""

    def __init__(self, point: str = "") -> None:
        if point and point not in POINTS:
            raise ValueError(f"crash point {point!r} is not one of {', '.join(POINTS)}")
        self.point = point

    def reach(self, point: str) -> None:
        """Exit the process now if ``point`` is the configured one."""
        if point == self.point:
            sys.stderr.write(f"vnpu-device-plugin: crashing on purpose at {point}\n")
            sys.stderr.flush()
            os._exit(EXIT_STATUS)
