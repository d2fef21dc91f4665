"""The whole sandbox: time to ready, and pods/s from ``kubectl create`` to Running.

Standalone (``make bench`` runs it; ``--nodes 10 100`` to choose the sizes): for each size,
``vnpu-sandbox up`` on that many 310P3 nodes of 8 chips (no Prometheus), then one
``kubectl create -f`` of a List of pods asking for a ``vir01`` each (eight per node), timed
until every pod is Running, then ``vnpu-sandbox down``. Every pod goes through the webhook,
the scheduling driver, vnpu-scheduler's filter/prioritize/bind, the simulated kubelet and the
device plugin's Allocate, which creates its vNPU on a simulated chip. Prints a Markdown
section for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PODS_PER_NODE = 8
READY_TIMEOUT = 600.0
EXPORTERS_UP_TO = 20
"""Larger sandboxes run without exporters: each node agent takes about 90 MB, and 300 of them
would not fit a 24 GiB machine (the exporters are not on the scheduling path)."""


def sandbox(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vnpu_sandbox", *args], capture_output=True, text=True, check=False
    )


def pods_document(count: int) -> str:
    items = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"bench-{i}"},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": "x",
                        "resources": {
                            "limits": {
                                "huawei.com/Ascend310P": "1",
                                "huawei.com/Ascend310P-memory": "3000",
                            }
                        },
                    }
                ]
            },
        }
        for i in range(count)
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def running(kubeconfig: str) -> tuple[int, int]:
    """(Running, Failed) pods in the default namespace."""
    out = subprocess.run(
        ["kubectl", "get", "pods", "-o", "jsonpath={.items[*].status.phase}"],
        env={**os.environ, "KUBECONFIG": kubeconfig},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return out.count("Running"), out.count("Failed")


def measure(nodes: int, root: Path) -> dict[str, float]:
    directory = root / f"n{nodes}"
    cluster = directory.with_suffix(".yaml")
    cluster.write_text(
        f"nodes: [{{name: duo, chip: 310P3, chips: 8, server: 300i-duo, replicas: {nodes}}}]\n"
    )
    exporters = nodes <= EXPORTERS_UP_TO
    began = time.monotonic()
    up = sandbox(
        "up", "--cluster", str(cluster), "--dir", str(directory), "--no-prometheus",
        "--timeout", str(READY_TIMEOUT), *(() if exporters else ("--no-exporters",)),
    )  # fmt: skip
    ready = time.monotonic() - began
    if up.returncode != 0:
        raise SystemExit(f"up failed for {nodes} nodes:\n{up.stderr}")
    kubeconfig = str(directory / "kubeconfig")
    try:
        count = nodes * PODS_PER_NODE
        manifest = directory / "pods.json"
        manifest.write_text(pods_document(count))
        env = {**os.environ, "KUBECONFIG": kubeconfig}
        began = time.monotonic()
        subprocess.run(
            ["kubectl", "create", "--validate=false", "-f", str(manifest)],
            env=env, capture_output=True, check=True,
        )  # fmt: skip
        created = time.monotonic() - began
        deadline = began + 600
        while True:
            done, failed = running(kubeconfig)
            if done + failed >= count or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        elapsed = time.monotonic() - began
    finally:
        sandbox("down", "--dir", str(directory))
    return {
        "nodes": nodes,
        "processes": 4 + (3 if exporters else 2) * nodes,
        "exporters": exporters,
        "ready_seconds": ready,
        "pods": count,
        "running": done,
        "failed": failed,
        "create_seconds": created,
        "seconds": elapsed,
        "pods_per_second": done / elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[10])
    args = parser.parse_args()
    if shutil.which("kubectl") is None:
        raise SystemExit("kubectl is not on PATH")
    with tempfile.TemporaryDirectory(prefix="vsb") as tmp:
        rows = [measure(n, Path(tmp)) for n in args.nodes]
    print("## Sandbox (`vnpu-sandbox up`, pods from kubectl create to Running)\n")
    print(f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}\n")
    print(
        "| nodes | exporters | processes | up to ready | pods | Running | Failed | create "
        "| all Running | pods/s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['nodes']} | {'yes' if r['exporters'] else 'no'} | {r['processes']} "
            f"| {r['ready_seconds']:.1f} s | {r['pods']} "
            f"| {r['running']} | {r['failed']} | {r['create_seconds']:.2f} s "
            f"| {r['seconds']:.1f} s | {r['pods_per_second']:.1f} |"
        )


if __name__ == "__main__":
    main()
