"""Exporter scrape latency on a simulated node of 16 chips with 7 vNPUs each (112 pods).

The real sampler refreshes every group in its background threads (at the default intervals,
then every group every second, so scrapes compete with refreshes for the CPU) and the
real HTTP listener answers ``GET /metrics`` over loopback. Each of the 112 vNPUs belongs to
its own pod, annotated as the scheduler binds it and recorded in a device-plugin ledger,
so every scrape also attributes 112 allocations. Timed: the whole HTTP round trip of one
scrape, p50/p99/max, without and with the npu-exporter names.
Run: ``.venv/bin/python benchmarks/bench_exporter.py``.
"""

from __future__ import annotations

import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from prometheus_client import CollectorRegistry

from vnpu_core import protocol
from vnpu_exporter import collector, metrics, ownership, sampler, server, telemetry
from vnpu_npu import ledger
from vnpu_npu.sim import backend as sim_backend
from vnpu_npu.sim import control
from vnpu_service import logs

CHIPS = 16
PER_CHIP = 7
SCRAPES = 400
WARMUP = 20
NODE = "bench-node"


class _Pods:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    def list(self, node: str) -> list[dict[str, Any]]:
        return self.items

    def close(self) -> None:
        pass


def _node(
    directory: Path,
) -> tuple[sim_backend.SimBackend, list[dict[str, Any]], list[ledger.Record]]:
    (directory / "chips.yaml").write_text(f"chip: 310P3\nchips: {CHIPS}\nseed: bench\n")
    npu = sim_backend.SimBackend(directory)
    pods: list[dict[str, Any]] = []
    records: list[ledger.Record] = []
    for chip in npu.chips():
        for n in range(PER_CHIP):
            vnpu = npu.create_vnpu(chip.phy_id, "vir01")
            control.set_vnpu_load(
                directory, vnpu, aicore_percent=10 * n, memory_mib=100 * n, in_use=True
            )
            name = f"job-{chip.phy_id}-{n}"
            annotations = {
                protocol.allocated_key("Ascend310P"): f"{chip.uuid},Ascend310P,3072,0:;",
                protocol.runtime_key("Ascend310P"): json.dumps(
                    [{"UUID": chip.uuid, "temp": "vir01"}]
                ),
            }
            pods.append(
                {
                    "metadata": {
                        "name": name,
                        "namespace": f"team-{n % 4}",
                        "uid": f"uid-{name}",
                        "resourceVersion": "1",
                        "annotations": annotations,
                    },
                    "spec": {"nodeName": NODE, "containers": [{"name": "main"}]},
                    "status": {"phase": "Running"},
                }
            )
            records.append(
                ledger.Record(
                    f"uid-{name}",
                    f"team-{n % 4}",
                    name,
                    "main",
                    False,
                    chip.phy_id,
                    chip.uuid,
                    vnpu,
                    "vir01",
                    ledger.State.OWNED,
                    0.0,
                )
            )
        control.set_load(directory, chip.phy_id, aicore_percent=40, memory_mib=2048)
    return npu, pods, records


def _measure(directory: Path, compat: bool, every: float | None) -> tuple[list[float], int, int]:
    npu, pods, records = _node(directory)
    state = directory / "plugin-state"
    state.mkdir(exist_ok=True)
    ledger.write(state / ledger.FILE, records, durable=False)  # as the device plugin writes it
    registry = CollectorRegistry()
    instruments = telemetry.Telemetry(registry)
    reader = sampler.Sampler(
        npu,
        NODE,
        instruments,
        pod_source=_Pods(pods),
        ledger_source=ownership.LedgerFile(state),
        intervals=dict.fromkeys(metrics.Group, every) if every else sampler.DEFAULT_INTERVALS,
    )
    registry.register(
        collector.NodeCollector(
            reader.snapshot, NODE, backend_name="sim", npu_exporter_compat=compat
        )
    )
    listener = server.MetricsServer(registry, instruments, reader.stuck, "127.0.0.1", 0)
    reader.start()
    listener.start()
    times: list[float] = []
    try:
        with httpx.Client(base_url=listener.url, timeout=10) as http:
            time.sleep(1.5)  # every group has refreshed at least once (each starts with a refresh)
            for i in range(WARMUP + SCRAPES):
                start = time.perf_counter()
                answer = http.get("/metrics")
                took = time.perf_counter() - start
                answer.raise_for_status()
                if i >= WARMUP:
                    times.append(took)
            body = answer.text
    finally:
        listener.stop()
        reader.stop()
    series = sum(1 for line in body.splitlines() if line and not line.startswith("#"))
    allocations = body.count("vnpu_allocation_info{")
    return times, series, allocations


def main() -> None:
    logs.configure("warning")
    print("## Exporter scrape latency\n")
    print(
        f"Machine: {platform.machine()}, Python {platform.python_version()}. Command: `.venv/bin/python benchmarks/bench_exporter.py`"
    )
    print(
        f"({CHIPS} x 310P3 chips, {PER_CHIP} vir01 vNPUs each, one pod per vNPU, ledger attribution; {SCRAPES} scrapes"
    )
    print(
        f"back to back after {WARMUP} warm-up; HTTP over loopback; the sampler's threads refresh meanwhile).\n"
    )
    print("| refresh intervals | mode | series | allocations | p50 ms | p99 ms | max ms |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for every in (None, 1.0):
        for compat in (False, True):
            with tempfile.TemporaryDirectory(prefix="vnpu-bench-exporter-") as scratch:
                times, series, allocations = _measure(Path(scratch), compat, every)
            ms = sorted(t * 1000 for t in times)
            p99 = ms[int(len(ms) * 0.99) - 1]
            mode = "--npu-exporter-compat" if compat else "default"
            intervals = "every group each second" if every else "defaults (5-60 s by group)"
            print(
                f"| {intervals} | {mode} | {series} | {allocations} | {statistics.median(ms):.1f} | {p99:.1f} | {ms[-1]:.1f} |"
            )


if __name__ == "__main__":
    main()
