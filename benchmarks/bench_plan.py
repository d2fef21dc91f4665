"""Planner speed: `vnpu plan` on the examples and on generated clusters of 50 and 100 nodes.

Times ``cli.make_plan`` (read both files, place every pod through the allocator and the
bind annotations, then the whole-chip comparison), i.e. everything but printing. The
inputs are written to a temporary directory. Run: ``.venv/bin/python benchmarks/bench_plan.py``.
"""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from vnpu_core import cli, requests

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = 3


def _deployment(name: str, replicas: int, word: str, memory: int | None, count: int = 1) -> str:
    memory_line = f", huawei.com/{word}-memory: {memory}" if memory is not None else ""
    return (
        f"kind: Deployment\nmetadata: {{name: {name}}}\nspec:\n  replicas: {replicas}\n"
        f"  template:\n    spec:\n      containers:\n        - name: main\n          resources:\n"
        f"            limits: {{huawei.com/{word}: {count}{memory_line}}}\n---\n"
    )


def _generated(directory: Path, nodes: int, pods: int) -> tuple[str, str]:
    """``nodes`` split over 310P3 Duo and 910B3 mesh servers; ``pods`` over five services."""
    cluster = directory / f"cluster-{nodes}.yaml"
    cluster.write_text(
        "nodes:\n"
        f"  - {{name: duo, chip: 310P3, chips: 8, server: 300i-duo, replicas: {nodes // 2}}}\n"
        f"  - {{name: a2, chip: 910B3, chips: 8, server: 910b-8, replicas: {nodes - nodes // 2}}}\n",
        encoding="utf-8",
    )
    share = pods // 5
    workload = directory / f"workload-{pods}.yaml"
    workload.write_text(
        _deployment("ocr", share, "Ascend310P", 3000)
        + _deployment("asr", share, "Ascend310P", 6000)
        + _deployment("chat", share, "Ascend310P", 12000)
        + _deployment("embed", share, "Ascend910B3", 16000)
        + _deployment("llm", pods - 4 * share, "Ascend910B3", None, count=2),
        encoding="utf-8",
    )
    return str(cluster), str(workload)


def measure(cluster: str, workload: str, policy: str) -> tuple[float, int, int]:
    timings = []
    made = None
    for _ in range(ROUNDS):
        start = time.perf_counter()
        made = cli.make_plan(cluster, workload, requests.Policy(policy), None)
        timings.append(time.perf_counter() - start)
    assert made is not None
    return statistics.median(timings), made.summary.pods, made.summary.placed


def main() -> None:
    print("## Planner: `vnpu plan` end to end (files read, pods placed, whole-chip comparison)\n")
    print(
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}; "
        f"median of {ROUNDS} runs.\n"
    )
    print("| cluster | workload | policy | pods placed | seconds | ms per pod |")
    print("|---|---|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        cases = [
            ("examples (7 nodes)", "examples (57 pods)", str(ROOT / "examples/cluster.yaml"), str(ROOT / "examples/workload.yaml")),
            ("50 nodes", "500 pods", *_generated(Path(tmp), 50, 500)),
            ("100 nodes", "1,000 pods", *_generated(Path(tmp), 100, 1000)),
        ]  # fmt: skip
        for label, work, cluster, workload in cases:
            for policy in ("best-fit", "spread"):
                seconds, pods, placed = measure(cluster, workload, policy)
                print(
                    f"| {label} | {work} | {policy} | {placed} of {pods} | {seconds:.2f} "
                    f"| {seconds / pods * 1000:.2f} |"
                )


if __name__ == "__main__":
    main()
