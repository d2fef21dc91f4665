"""Packing: a planner trace placed by classic best-fit and by kube-scheduler's DRA allocation.

Standalone (``make bench`` runs it with its defaults: 6 nodes, 90 pods, both orders; without
the binaries of ``make k8s-bin`` and ``make kwok-bin`` it prints the classic side only)::

    .venv/bin/python benchmarks/bench_packing.py
    .venv/bin/python benchmarks/bench_packing.py --nodes 8 --pods 160 --order shuffled --json

The trace is ``bench_plan``'s generated one: half the nodes 8-chip 310P3 Atlas 300I Duo
servers, half 8-chip 910B3 mesh servers; five equal Deployments: ``ocr`` (vir01), ``asr``
(6000 MiB: the vir02 tier), ``chat`` (12000 MiB: the vir04 tier) on 310P3, ``embed``
(vir05_1c_16g) and ``llm`` (2 whole chips) on 910B3. It is replayed in two orders: ``file``
(the Deployments one after the other, as ``vnpu plan`` reads them) and ``shuffled`` (the same
pods in a seeded random order: arrivals of the five services interleaved).

* classic: ``vnpu_core.plan.place``, the allocator placing the pods in order as vnpu-scheduler
  does (best-fit, the default policy; spread is shown beside it);
* dra: the real control plane on KWOK nodes of the same names and chips, each with the pool
  the DRA driver publishes, and kube-scheduler (default configuration, no extender)
  allocating; each pod is created as vnpu's webhook admits it in DRA mode and waited for
  until it is bound or unschedulable (``packing_dra``).

Counted for each: pods placed, pods refused, chips used (distinct chips holding at least one
allocation), per node and chip what it holds. Prints a Markdown section for
docs/benchmarks.md, or with ``--json`` one JSON object. The control plane is stopped on the
way out, on failure and on SIGTERM too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import bench_plan
import packing_dra
import scale_cluster

from vnpu_core import catalog, draclasses, inventory, plan, planfiles, requests, yamldoc
from vnpu_sandbox.platform import controlplane

Json = dict[str, Any]
DEFAULT_NODES = 6
DEFAULT_PODS = 90
DEFAULT_SEED = 7
DEFAULT_REPLAYS = 3
ORDERS = ("file", "shuffled")
SCORINGS = ("default", "npu-most-allocated")
POLICIES = (requests.Policy.DEFAULT, requests.Policy.SPREAD)
Chip = tuple[str, int]  # node, chip index


def log(text: str) -> None:
    print(f"bench_packing: {text}", file=sys.stderr, flush=True)


# -- the trace ---------------------------------------------------------------------------------


def trace(directory: Path, nodes: int, pods: int) -> tuple[planfiles.Cluster, planfiles.Workload]:
    """``bench_plan``'s generated cluster and workload, read as ``vnpu plan`` reads them."""
    cluster_path, workload_path = bench_plan._generated(directory, nodes, pods)
    text = Path(cluster_path).read_text(encoding="utf-8")
    cluster = planfiles.read_cluster(yamldoc.load(text), cluster_path, catalog.BUILTIN)
    documents = yamldoc.load_all(Path(workload_path).read_text(encoding="utf-8"))
    workload = planfiles.read_workload(
        [d.data for d in documents], workload_path, catalog.BUILTIN, [d.line for d in documents]
    )
    return cluster, workload


def ordered(workload: planfiles.Workload, order: str, seed: int) -> list[planfiles.WorkloadPod]:
    pods = list(workload.pods)
    if order == "shuffled":
        random.Random(seed).shuffle(pods)
    return pods


def service(pod: str) -> str:
    """``ocr-12`` -> ``ocr`` (a trace pod's Deployment)."""
    return pod.rsplit("-", 1)[0]


# -- the two schedulers ------------------------------------------------------------------------


def classic(
    cluster: planfiles.Cluster, pods: Sequence[planfiles.WorkloadPod], policy: requests.Policy
) -> Json:
    made = plan.place(cluster, planfiles.Workload(tuple(pods)), catalog.BUILTIN, policy)
    held: dict[Chip, list[str]] = {}
    for placement in made.placements:
        for container in placement.assignment.containers:
            for grant in container.grants:
                chip = (placement.assignment.node, grant.chip)
                held.setdefault(chip, []).append(grant.template or draclasses.WHOLE)
    nodes = {p.pod: p.assignment.node for p in made.placements}
    refused = [r.pod for r in made.refusals]
    return result(f"classic {policy.value}", len(pods), nodes, refused, held)


def dra(run: packing_dra.DraRun, pods: Sequence[planfiles.WorkloadPod], prefix: str) -> Json:
    """One replay of the trace on the DRA cluster (whose nodes are empty)."""
    placed = run.place(pods, prefix)
    models = {node.name: node.chips[0].model for node in run.nodes}
    held: dict[Chip, list[str]] = {}
    for _pod, devices in sorted(run.allocations().items()):
        for node, name in devices:
            device = draclasses.parse_device(name)
            if device is None:
                continue
            template = device.template(models[node]) if device.kind == "template" else None
            held.setdefault((node, device.phy), []).append(
                template.name if template is not None else device.kind
            )
    # only this replay's pods: a late event of an earlier replay's pod is not counted
    nodes = {
        name.removeprefix(prefix): node
        for name, node in placed["bound"].items()
        if name.startswith(prefix)
    }
    refused = [name.removeprefix(prefix) for name in placed["refused"] if name.startswith(prefix)]
    found = result(run.name, len(pods), nodes, refused, held)
    seconds = sorted(placed["seconds"])
    found["seconds_per_pod_p50"] = round(seconds[len(seconds) // 2], 3) if seconds else None
    found["seconds_per_pod_max"] = round(seconds[-1], 3) if seconds else None
    found["refusal_messages"] = sorted(set(placed["refused"].values()))[:3]
    return found


def result(
    scheduler: str,
    pods: int,
    nodes: dict[str, str],
    refused: Iterable[str],
    held: dict[Chip, list[str]],
) -> Json:
    refused = list(refused)
    return {
        "scheduler": scheduler,
        "pods": pods,
        "placed": len(nodes),
        "refused": len(refused),
        "refused_by_service": dict(sorted(Counter(service(p) for p in refused).items())),
        "chips_used": len(held),
        "pods_by_node": dict(sorted(Counter(nodes.values()).items())),
        "chips": {f"{node}/{chip}": sorted(what) for (node, chip), what in sorted(held.items())},
    }


# -- output ------------------------------------------------------------------------------------


def models_of(cluster: planfiles.Cluster) -> list[str]:
    return list(dict.fromkeys(n.chips[0].model.name for n in cluster.nodes))


def chips_by_model(row: Json, cluster: planfiles.Cluster) -> str:
    model = {n.name: n.chips[0].model.name for n in cluster.nodes}
    counted = Counter(model[key.split("/")[0]] for key in row["chips"])
    return "/".join(f"{counted[m]}" for m in models_of(cluster))


def chip_map(row: Json, node: inventory.Node) -> str:
    """One node's chips in a line: ``-`` empty, else what it holds (``4 vir05_1c_16g``)."""
    cells = []
    for chip in node.chips:
        held = Counter(row["chips"].get(f"{node.name}/{chip.index}", []))
        cells.append(" + ".join(f"{n} {what}" for what, n in sorted(held.items())) or "-")
    return " | ".join(cells)


def _refused(row: Json) -> str:
    return ", ".join(f"{s} {n}" for s, n in row["refused_by_service"].items()) or "none"


def markdown(
    args: argparse.Namespace, cluster: planfiles.Cluster, runs: Json, command: str, up: Json
) -> str:
    sizes = Counter(n.chips[0].model.name for n in cluster.nodes)
    chips = sum(len(n.chips) for n in cluster.nodes)
    lines = [
        "## Packing: classic best-fit against kube-scheduler's DRA allocation "
        "(`benchmarks/bench_packing.py`)\n",
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python "
        f"{platform.python_version()}; Kubernetes {controlplane.KUBERNETES_VERSION}, KWOK "
        f"{scale_cluster.KWOK_VERSION}; {datetime.now(UTC):%Y-%m-%d}. Command: `{command}`.\n",
        f"Cluster: {', '.join(f'{n} x {m} (8 chips)' for m, n in sizes.items())}: {chips} chips; "
        f"trace: {args.pods} pods of bench_plan's five services; shuffle seed {args.seed}; "
        f"{args.replays} replays per DRA row (one figure each).\n",
        f"| order | scheduler | pods placed of {args.pods} | refused by service "
        f"| chips used ({'/'.join(models_of(cluster))}) |",
        "|---|---|---:|---|---:|",
    ]
    for order, by_scheduler in runs.items():
        for scheduler, replays in by_scheduler.items():
            used = [f"{r['chips_used']} ({chips_by_model(r, cluster)})" for r in replays]
            lines.append(
                f"| {order} | {scheduler} | {', '.join(str(r['placed']) for r in replays)} "
                f"| {'; '.join(_refused(r) for r in replays)} | {', '.join(used)} |"
            )
    for order, by_scheduler in runs.items():
        lines.append(
            f"\nWhat each chip holds, order `{order}` (chips 0-7 of each node; DRA: its first replay):\n"
        )
        lines.append("```")
        for scheduler, replays in by_scheduler.items():
            if scheduler == "classic spread":
                continue
            lines.append(f"{scheduler}:")
            for node in cluster.nodes:
                count = replays[0]["pods_by_node"].get(node.name, 0)
                lines.append(f"  {node.name:6} {count:3} pods  {chip_map(replays[0], node)}")
        lines.append("```")
    timed = [
        r for s in runs.values() for rs in s.values() for r in rs if "seconds_per_pod_p50" in r
    ]
    if timed:
        p50 = sorted(r["seconds_per_pod_p50"] for r in timed)[len(timed) // 2]
        top = max(r["seconds_per_pod_max"] for r in timed)
        lines.append(
            f"\nDRA: each control plane and KWOK up in {', '.join(str(u) for u in up['up_seconds'])} s, "
            f"{up['resource_slices']} ResourceSlices; create -> bound or unschedulable: p50 {p50} s "
            f"per pod (median of the replays), max {top} s. Refused pods' message: "
            f"{'; '.join(sorted({m for r in timed for m in r['refusal_messages']}))}"
        )
    lines.append("\n```json")
    for order, by_scheduler in runs.items():
        for replays in by_scheduler.values():
            for row in replays:
                shown = {k: v for k, v in row.items() if k not in ("chips", "refusal_messages")}
                lines.append(json.dumps({"order": order, **shown}))
    lines.append("```")
    return "\n".join(lines)


# -- main --------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--nodes",
        type=int,
        default=DEFAULT_NODES,
        help=f"nodes, half of each kind (default {DEFAULT_NODES})",
    )
    parser.add_argument(
        "--pods", type=int, default=DEFAULT_PODS, help=f"pods (default {DEFAULT_PODS})"
    )
    parser.add_argument("--order", choices=(*ORDERS, "both"), default="both", help="default: both")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the shuffled order's seed")
    parser.add_argument(
        "--replays",
        type=int,
        default=DEFAULT_REPLAYS,
        help=f"DRA replays of each order and scoring (default {DEFAULT_REPLAYS}): kube-scheduler "
        "breaks ties between nodes at random",
    )
    parser.add_argument(
        "--scoring",
        choices=(*SCORINGS, "both"),
        default="both",
        help="kube-scheduler's scoring in DRA mode: default, npu-most-allocated "
        "(NodeResourcesFit MostAllocated over the pods' NPU resources) or both (default)",
    )
    parser.add_argument("--keep", type=Path, help="run the control planes in this directory, kept")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if not 2 <= args.nodes <= 200:
        parser.error(f"--nodes {args.nodes}: from 2 to 200")
    if not 5 <= args.pods <= 5000:
        parser.error(f"--pods {args.pods}: from 5 to 5000")
    if not 1 <= args.replays <= 50:
        parser.error(f"--replays {args.replays}: from 1 to 50")
    return args


def replay_dra(
    args: argparse.Namespace,
    root: Path,
    cluster: planfiles.Cluster,
    workload: planfiles.Workload,
    runs: Json,
    up: Json,
) -> None:
    """Every DRA row: one control plane per scoring, each order replayed ``--replays`` times."""
    scorings = SCORINGS if args.scoring == "both" else (args.scoring,)
    for scoring in scorings:
        scored = packing_dra.extended_resources(workload.pods) if scoring != "default" else ()
        run = packing_dra.DraRun(root / f"dra-{scoring}", cluster.nodes, scored)
        try:
            log(f"{run.name}: starting the control plane, KWOK and the DeviceClasses")
            started = run.start()
            up.setdefault("up_seconds", []).append(started["up_seconds"])
            up["resource_slices"] = started["resource_slices"]
            number = 0
            for order in runs:
                pods = ordered(workload, order, args.seed)
                for replay in range(args.replays):
                    if number:
                        run.clear()
                    log(f"{run.name}: order {order}, replay {replay + 1}: {len(pods)} pods")
                    row = dra(run, pods, f"{order[0]}{replay}-")
                    runs[order].setdefault(run.name, []).append(row)
                    number += 1
        finally:
            log(f"{run.name}: stopping")
            run.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # control planes stop on the way out
    command = " ".join(["benchmarks/bench_packing.py", *(sys.argv[1:] if argv is None else argv)])
    orders = ORDERS if args.order == "both" else (args.order,)
    runs: Json = {}
    up: Json = {}
    with tempfile.TemporaryDirectory(prefix="vnpu-packing-") as tmp:
        cluster, workload = trace(Path(tmp), args.nodes, args.pods)
        for order in orders:
            pods = ordered(workload, order, args.seed)
            runs[order] = {
                f"classic {policy.value}": [classic(cluster, pods, policy)] for policy in POLICIES
            }
        try:
            controlplane.binaries()
            scale_cluster.kwok_files()
        except (controlplane.ControlPlaneError, scale_cluster.ScaleError) as exc:
            log(f"the DRA side not run: {exc}")
        else:
            try:
                replay_dra(args, args.keep or Path(tmp), cluster, workload, runs, up)
            except (packing_dra.PackingError, scale_cluster.ScaleError) as exc:
                log(f"dra: {exc}")
                return 1
    if args.json:
        document = {"nodes": args.nodes, "pods": args.pods, "seed": args.seed, **up, "runs": runs}
        print(json.dumps(document))
    else:
        print(markdown(args, cluster, runs, f".venv/bin/python {command}", up))
    return 0


if __name__ == "__main__":
    sys.exit(main())
