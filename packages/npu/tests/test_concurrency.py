"""Several processes on one simulated node: the device plugin and the exporter share a directory.

Worker processes (the simulated backend, the DCMI backend on the stand-in library, or one
of each) race to create vNPUs on one chip while this process lists it. The lock and the
atomic replace must keep every budget: exactly as many vNPUs as the chip holds, never a
listing with more, never a torn file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vnpu_npu.sim import backend as sim_backend

WORKER = """
import os, sys, time
from pathlib import Path
from vnpu_npu import errors

kind, sim_dir, library, name, mode, rounds = sys.argv[1:7]
if kind == "sim":
    from vnpu_npu.sim import backend
    npu = backend.SimBackend(sim_dir)
else:
    os.environ["VNPU_SIM_DIR"] = sim_dir
    from vnpu_npu.dcmi import backend
    npu = backend.DcmiBackend(library)
Path(sim_dir, "ready." + name).touch()
while not Path(sim_dir, "go").exists():
    time.sleep(0.001)
created = 0
for _ in range(int(rounds)):
    try:
        vnpu_id = npu.create_vnpu(0, "vir01" if mode == "fill" else "vir04")
    except errors.TemplateRefused:
        continue
    except errors.DriverError as exc:
        # Refused, but room was freed before the backend asked the chip why: retryable.
        if not exc.retryable:
            raise
        continue
    created += 1
    if mode == "churn":
        npu.destroy_vnpu(0, vnpu_id)
print(created)
"""


def _race(
    sim_dir: Path, kinds: tuple[str, ...], library: str, mode: str, rounds: int, limit: int
) -> list[int]:
    """Run one worker per kind against chip 0 while listing it here; returns each one's creates."""
    lister = sim_backend.SimBackend(sim_dir)
    env = {k: v for k, v in os.environ.items() if k != "VNPU_SIM_DIR"}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, kind, str(sim_dir), library, f"w{i}", mode, str(rounds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i, kind in enumerate(kinds)
    ]
    try:
        deadline = time.monotonic() + 20
        while not all((sim_dir / f"ready.w{i}").exists() for i in range(len(kinds))):
            assert time.monotonic() < deadline, "workers did not start"
            assert all(w.poll() is None for w in workers), [w.communicate() for w in workers]
            time.sleep(0.01)
        (sim_dir / "go").touch()
        listings = 0
        while any(w.poll() is None for w in workers):
            vnpus = lister.vnpus(0)
            ids = [v.vnpu_id for v in vnpus]
            assert len(vnpus) <= limit, f"over-committed: {vnpus}"
            assert len(set(ids)) == len(ids)
            listings += 1
        outputs = [w.communicate(timeout=10) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.communicate()
    for w, (_, err) in zip(workers, outputs, strict=True):
        assert w.returncode == 0, err
    assert listings > 0
    return [int(out) for out, _ in outputs]


@pytest.mark.parametrize("kinds", [("sim", "sim"), ("dcmi", "dcmi"), ("sim", "dcmi")])
def test_racing_creates_fill_the_chip_exactly(
    kinds: tuple[str, str], node: Path, stand_in: dict[str, Path]
) -> None:
    created = _race(node, kinds, str(stand_in["current"]), "fill", rounds=7, limit=7)

    assert sum(created) == 7
    vnpus = sim_backend.SimBackend(node).vnpus(0)
    assert [v.vnpu_id for v in vnpus] == list(range(100, 107))


def test_create_destroy_churn_never_over_commits(node: Path, stand_in: dict[str, Path]) -> None:
    kinds = ("sim", "dcmi", "dcmi")  # three workers, room for two vir04: someone is refused
    created = _race(node, kinds, str(stand_in["current"]), "churn", rounds=25, limit=2)

    assert 0 < sum(created) <= 75
    assert sim_backend.SimBackend(node).vnpus(0) == ()
