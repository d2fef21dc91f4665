"""NPU access latency: what one backend call costs on a simulated 8-chip 310P3 node.

Both simulated paths are timed: the Python simulated backend and the DCMI backend on the
stand-in libdcmi.so (compiled here with gcc from the test sources). Every call reads the
state file under its lock, as the device plugin and the exporter do on each poll; a
create/destroy pair also rewrites it. Real hardware timings differ (DCMI calls go to the
driver), so these figures only size the simulation's own overhead for the sandbox.
Run: ``.venv/bin/python benchmarks/bench_npu_access.py``.
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from vnpu_npu import backend
from vnpu_npu.dcmi import backend as dcmi_backend
from vnpu_npu.sim import backend as sim_backend

SOURCE = Path(__file__).parent.parent / "packages/npu/tests/stand_in_dcmi.c"
CALLS = 300
ROUNDS = 5


def _time(call: Callable[[], object]) -> float:
    """Best of ROUNDS, microseconds per call."""
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(CALLS):
            call()
        best = min(best, (time.perf_counter() - start) / CALLS)
    return best * 1e6


def _cycle(npu: backend.Backend) -> None:
    npu.destroy_vnpu(3, npu.create_vnpu(3, "vir02"))


def _poll(npu: backend.Backend) -> None:
    """What an exporter scrape reads per chip, for all 8 chips."""
    for phy in range(8):
        npu.health(phy)
        npu.temperature(phy)
        npu.power(phy)
        npu.aicore_percent(phy)
        npu.memory(phy)


def main() -> None:
    gcc = shutil.which("gcc")
    if gcc is None:
        raise SystemExit("gcc is needed to build the stand-in libdcmi.so")
    with tempfile.TemporaryDirectory() as tmp:
        node = Path(tmp) / "node"
        node.mkdir()
        (node / "chips.yaml").write_text("chip: 310P3\nchips: 8\nseed: bench\n")
        library = Path(tmp) / "libdcmi.so"
        subprocess.run(
            [gcc, "-shared", "-fPIC", "-O2", "-o", str(library), str(SOURCE)], check=True
        )
        sim = sim_backend.SimBackend(node)
        for phy in range(8):
            sim.create_vnpu(phy, "vir02")
        os.environ["VNPU_SIM_DIR"] = str(node)
        dcmi = dcmi_backend.DcmiBackend(str(library))
        rows = []
        for label, npu in (("simulated (Python)", sim), ("DCMI on stand-in libdcmi.so", dcmi)):
            rows.append(
                (
                    label,
                    _time(npu.chips),
                    _time(functools.partial(npu.health, 0)),
                    _time(functools.partial(npu.vnpus, 0)),
                    _time(functools.partial(_cycle, npu)),
                    _time(functools.partial(_poll, npu)) / 1000,
                )
            )
    print("## NPU access\n")
    print(
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}. "
        "Command: `.venv/bin/python benchmarks/bench_npu_access.py` (best of "
        f"{ROUNDS} rounds of {CALLS} calls; node: 8 x 310P3, one vir02 per chip, state file in the system temp directory).\n"
    )
    print(
        "| backend | chips() µs | health() µs | vnpus() µs | create+destroy µs | 8-chip poll ms |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for label, *figures in rows:
        print(f"| {label} | " + " | ".join(f"{f:.1f}" for f in figures) + " |")


if __name__ == "__main__":
    main()
