"""vnpu-scheduler end to end: filter+prioritize latency at 100 and 1,000 nodes, binds per second.

Everything runs on this machine over loopback, each part in its own process: kube-apiserver
and its etcd (``apiplane.serve``, the binaries ``make k8s-bin`` builds), the scheduler
(``python -m vnpu_scheduler``, as deployed) and a client that calls the extender verbs the
way kube-scheduler does. Nodes have 8 Ascend910B3 chips each, 30-80 % filled by running pods
(vNPUs and whole chips) read through the ledger.

Filter+prioritize: one pod (one vir05_1c_16g) against every node (``NodeNames`` form),
then prioritize over the nodes that passed, timed at the client. Two runs: with the fit
memo (the default: a node's verdict for a request shape is kept until the node changes)
and with ``--no-fit-memo`` (every call fits every node: the worst case, e.g. right
after every node changed).

Binds per second, at both sizes: 400 pending pods placed the way kube-scheduler places them,
one scheduling loop (filter, prioritize, pick the best node) handing binds to 16 parallel
threads (deciding a pod only while one is free), with a stand-in for the device plugin that,
through the API only, marks each bound pod's Allocate done and releases the node lock it
owns (no real plugin runs here).

The scheduler refuses a node whose plugin last wrote its handshake more than
``--handshake-timeout`` (60 s) ago; plugins write it every 30 s. So every node's handshake is
written (untimed) before each scheduler starts, and every 30 s by the stand-in while binds run.

Nodes are made as they are once their kubelet has reported: Ready, without the
``node.kubernetes.io/not-ready`` taint kube-apiserver puts on a new node (kube-controller-manager
lifts it in a cluster; none runs here, so the benchmark does, before the clock starts).

Run: ``.venv/bin/python benchmarks/bench_scheduler.py`` (both sizes, a few minutes);
``--nodes 100`` for the smaller size only.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import json
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import kubernetes
import standin

from vnpu_core import protocol
from vnpu_sandbox.platform import apiplane, controlplane

Json = dict[str, Any]
WORD = "Ascend910B3"
CHIPS = 8
ROUNDS = 200
BIND_PODS = 400
BIND_THREADS = 16
MERGE_PATCH = "application/merge-patch+json"
NOT_READY = "node.kubernetes.io/not-ready"
REPORT_SECONDS = 30.0
"""How often a device plugin writes its node's handshake (HAMi's interval)."""


def handshake() -> str:
    return time.strftime("Reported_%Y.%m.%d %H:%M:%S")


def node_object(name: str) -> Json:
    chips = [
        protocol.RegisteredChip(f"{name}-{i}", i, 4, 65536, 20, WORD, True, 0 if i < 4 else 1)
        for i in range(CHIPS)
    ]
    stamp = handshake()
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {
                protocol.node_register_key(WORD): protocol.encode_node_register(chips),
                protocol.node_handshake_key(WORD): stamp,
            },
        },
        "status": {
            "allocatable": {f"huawei.com/{WORD}": str(CHIPS * 4)},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def holder_object(name: str, node: str, rng: random.Random) -> Json | None:
    """One running pod holding a random 30-80 % of the node's chips."""
    devices: list[str] = []
    runtime: list[Json] = []
    for i in rng.sample(range(CHIPS), rng.randint(2, 6)):
        uuid = f"{node}-{i}"
        kind = rng.choice(["whole", "vir05_1c_16g", "vir10_3c_32g", "vir05_1c_16g"])
        if kind == "whole":
            devices.append(f"{uuid},{WORD},65536,0:")
            runtime.append({"UUID": uuid})
            continue
        memory = 16384 if kind == "vir05_1c_16g" else 32768
        for _ in range(rng.randint(1, 2) if memory == 16384 else 1):
            devices.append(f"{uuid},{WORD},{memory},0:")
            runtime.append({"UUID": uuid, "temp": kind, "memory": memory})
    if not devices:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "annotations": {
                protocol.allocated_key(WORD): "".join(devices) + ";",
                protocol.runtime_key(WORD): json.dumps(runtime, separators=(",", ":")),
                protocol.VGPU_NODE_KEY: node,
                protocol.BIND_PHASE_KEY: "success",
            },
        },
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "app"}]},
    }


def pending_pod(name: str) -> Json:
    limits = {f"huawei.com/{WORD}": "1", f"huawei.com/{WORD}-memory": "16000"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "vnpu-scheduler",  # what the webhook sets; /bind refuses other pods
            "containers": [{"name": "main", "image": "app", "resources": {"limits": limits}}],
        },
    }


class Cluster:
    def __init__(self, kubeconfig: Path) -> None:
        config = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(config_file=str(kubeconfig), client_configuration=config)
        config.connection_pool_maxsize = 32
        self.client = kubernetes.client.ApiClient(config)
        self.core = kubernetes.client.CoreV1Api(self.client)

    def create(self, objects: list[Json]) -> list[Json]:
        def one(obj: Json) -> Json:
            if obj["kind"] == "Node":
                answer = self.core.create_node(obj, _preload_content=False)
                node: Json = json.loads(answer.data)
                taints = node["spec"].get("taints") or []
                kept = [t for t in taints if t["key"] != NOT_READY]
                if len(kept) == len(taints):
                    return node
                body = {"spec": {"taints": kept or None}}
                answer = self.core.patch_node(
                    obj["metadata"]["name"], body, _content_type=MERGE_PATCH, _preload_content=False
                )
            else:
                answer = self.core.create_namespaced_pod("default", obj, _preload_content=False)
            document: Json = json.loads(answer.data)
            return document

        with ThreadPoolExecutor(8) as pool:
            return list(pool.map(one, objects))

    def report(self, names: list[str]) -> None:
        """Write the handshake of every node in ``names`` now, as each node's plugin does."""
        body = {"metadata": {"annotations": {protocol.node_handshake_key(WORD): handshake()}}}

        def one(name: str) -> None:
            answer = self.core.patch_node(
                name, body, _content_type=MERGE_PATCH, _preload_content=False
            )
            answer.drain_conn()
            answer.release_conn()

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(one, names))


class PluginStandIn:
    """Plays the device plugins' part through the API: Allocate done, node lock released,
    every node's handshake written every ``REPORT_SECONDS``.

    A real cluster has one plugin per node working in parallel, so bound pods are served
    by a pool of workers rather than one after the other.
    """

    def __init__(self, kubeconfig: Path, names: list[str]) -> None:
        self.cluster = Cluster(kubeconfig)
        self.names = names
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.reporter = threading.Thread(target=self.report, daemon=True)
        self.workers = ThreadPoolExecutor(16)

    def start(self) -> None:
        self.thread.start()
        self.reporter.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=5)
        self.reporter.join(timeout=REPORT_SECONDS)

    def report(self) -> None:
        while not self.stopping.wait(REPORT_SECONDS):
            self.cluster.report(self.names)

    def run(self) -> None:
        """Watch every pod from the version of a first list; a watch refused for a version
        kube-apiserver no longer holds (410 Gone) lists again, so no bind goes unserved."""
        core = self.cluster.core
        version = self.catch_up()
        while not self.stopping.is_set():
            stream = core.list_pod_for_all_namespaces(
                watch=True, resource_version=version, timeout_seconds=1,
                allow_watch_bookmarks=True, _preload_content=False,
            )  # fmt: skip
            for line in stream:
                if not line.strip():
                    continue
                event = json.loads(line)
                if event["type"] == "ERROR":
                    version = self.catch_up()
                    break
                pod = event["object"]
                version = pod["metadata"]["resourceVersion"]
                if event["type"] == "MODIFIED":
                    self.consider(pod)
            stream.release_conn()
        self.workers.shutdown(wait=True)

    def catch_up(self) -> str:
        """Serve every pod now waiting for its Allocate; the version of that list."""
        answer = self.cluster.core.list_pod_for_all_namespaces(_preload_content=False)
        listed: Json = json.loads(answer.data)
        for pod in listed["items"]:
            self.consider(pod)
        version: str = listed["metadata"]["resourceVersion"]
        return version

    def consider(self, pod: Json) -> None:
        """Hand ``pod`` to a worker if the scheduler has bound it and awaits its Allocate."""
        notes = pod["metadata"].get("annotations") or {}
        node = pod["spec"].get("nodeName")
        if node and notes.get(protocol.BIND_PHASE_KEY) == "allocating":
            self.workers.submit(self.allocate, pod["metadata"]["name"], node)

    def allocate(self, name: str, node: str) -> None:
        done = {"metadata": {"annotations": {protocol.BIND_PHASE_KEY: "success"}}}
        answer = self.cluster.core.patch_namespaced_pod(
            name, "default", done, _content_type=MERGE_PATCH, _preload_content=False
        )
        answer.drain_conn()
        answer.release_conn()
        standin.release_lock(self.cluster.core, node, f",default,{name}")


@contextlib.contextmanager
def scheduler(kubeconfig: Path, log: Path, *flags: str) -> Iterator[str]:
    command = [
        sys.executable, "-m", "vnpu_scheduler", "--kubeconfig", str(kubeconfig),
        "--host", "127.0.0.1", "--port", "0", *flags,
    ]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = ""
        deadline = time.monotonic() + 60
        while not url:
            for line in log.read_text().splitlines():
                if '"listening"' in line:
                    url = json.loads(line)["urls"][0]
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"scheduler did not start: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        with httpx.Client() as client:
            while client.get(f"{url}/readyz").status_code != 200:
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def latency(url: str, pod: Json, names: list[str]) -> dict[str, float]:
    filters: list[float] = []
    totals: list[float] = []
    fitting = 0
    with httpx.Client(timeout=30) as client:
        for _ in range(ROUNDS):
            start = time.perf_counter()
            result = client.post(
                f"{url}/filter", json={"Pod": pod, "Nodes": None, "NodeNames": names}
            ).json()
            middle = time.perf_counter()
            fitting = len(result["NodeNames"])
            client.post(
                f"{url}/prioritize",
                json={"Pod": pod, "Nodes": None, "NodeNames": result["NodeNames"]},
            ).raise_for_status()
            end = time.perf_counter()
            filters.append(middle - start)
            totals.append(end - start)
    return {
        "filter_p50": statistics.median(filters) * 1000,
        "filter_p99": percentile(filters, 0.99) * 1000,
        "total_p50": statistics.median(totals) * 1000,
        "total_p99": percentile(totals, 0.99) * 1000,
        "fitting": fitting,
    }


def binds_per_second(
    url: str, kubeconfig: Path, cluster: Cluster, names: list[str]
) -> tuple[float, int, list[float]]:
    """Like kube-scheduler: one scheduling loop (filter, prioritize, pick) and binds in parallel.

    The loop decides the next pod only while a bind thread is free: kube-scheduler sends each
    bind the moment it has decided, so the extender counts every decided pod among its binds
    in flight; a decision queued behind busy threads would be invisible to it, and the loop
    would place pods on nodes those queued binds are about to fill. A refused bind sends the
    pod back to the queue (at most three tries). Returns the bind rate, the pods bound and the
    filter latencies seen by the scheduling loop (seconds).
    """
    pods = cluster.create([pending_pod(f"job-{len(names)}-{i:04d}") for i in range(BIND_PODS)])
    stand_in = PluginStandIn(kubeconfig, names)
    stand_in.start()
    local = threading.local()

    def bind(pod: Json, node: str) -> bool:
        if not hasattr(local, "client"):
            local.client = httpx.Client(timeout=60)
        meta = pod["metadata"]
        body = {
            "PodName": meta["name"],
            "PodNamespace": "default",
            "PodUID": meta["uid"],
            "Node": node,
        }
        answer: bool = local.client.post(f"{url}/bind", json=body).json()["Error"] == ""
        return answer

    rng = random.Random(5)
    filters: list[float] = []
    queue = collections.deque((pod, 0) for pod in pods)
    running: dict[Future[bool], tuple[Json, int]] = {}
    placed = 0
    start = time.perf_counter()
    with ThreadPoolExecutor(BIND_THREADS) as binders, httpx.Client(timeout=60) as client:
        while queue or running:
            if queue and len(running) < BIND_THREADS:
                pod, tries = queue.popleft()
                args = {"Pod": pod, "Nodes": None, "NodeNames": names}
                began = time.perf_counter()
                fitting = client.post(f"{url}/filter", json=args).json()["NodeNames"]
                filters.append(time.perf_counter() - began)
                if fitting:
                    scores = client.post(
                        f"{url}/prioritize", json={**args, "NodeNames": fitting}
                    ).json()
                    best = max(entry["Score"] for entry in scores)
                    node = rng.choice([e["Host"] for e in scores if e["Score"] == best])
                    running[binders.submit(bind, pod, node)] = (pod, tries)
            elif running:
                concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in [f for f in running if f.done()]:
                pod, tries = running.pop(future)
                if future.result():
                    placed += 1
                elif tries < 2:
                    queue.append((pod, tries + 1))
    elapsed = time.perf_counter() - start
    stand_in.stop()
    return placed / elapsed, placed, filters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000])
    args = parser.parse_args()
    rows: list[str] = []
    bind_rows: list[str] = []
    rng = random.Random(11)
    with tempfile.TemporaryDirectory() as scratch, apiplane.serve(Path(scratch) / "api") as plane:
        folder = Path(scratch)
        kubeconfig = plane.kubeconfig
        cluster = Cluster(kubeconfig)
        names: list[str] = []
        for size in sorted(args.nodes):
            new = [f"node-{i:04d}" for i in range(len(names), size)]
            cluster.create([node_object(n) for n in new])
            holders = [holder_object(f"run-{n}", n, rng) for n in new]
            cluster.create([h for h in holders if h is not None])
            names.extend(new)
            probe = cluster.create([pending_pod(f"probe-{size}")])[0]
            for memo in (True, False):
                flags = () if memo else ("--no-fit-memo",)
                cluster.report(names)
                with scheduler(kubeconfig, folder / f"s-{size}-{memo}.log", *flags) as url:
                    got = latency(url, probe, names)
                mode = "memo (default)" if memo else "no memo (every node fitted)"
                rows.append(
                    f"| {size:,} x {CHIPS} | {mode} | {got['filter_p50']:.1f} | {got['filter_p99']:.1f} "
                    f"| {got['total_p50']:.1f} | {got['total_p99']:.1f} | {got['fitting']} |"
                )
            cluster.report(names)
            with scheduler(kubeconfig, folder / f"s-bind-{size}.log") as url:
                rate, placed, filters = binds_per_second(url, kubeconfig, cluster, names)
            bind_rows.append(
                f"| {size:,} x {CHIPS} | {BIND_THREADS} | {placed} of {BIND_PODS} | {rate:.0f} "
                f"| {statistics.median(filters) * 1000:.1f} | {percentile(filters, 0.99) * 1000:.1f} |"
            )
    print("## Scheduler extender: filter+prioritize latency and binds per second\n")
    sizes = " ".join(str(n) for n in sorted(args.nodes))
    print(
        f"Machine: {platform.machine()}, Python {platform.python_version()}; kube-apiserver "
        f"{controlplane.KUBERNETES_VERSION}, scheduler process and client on one host over "
        f"loopback. Command: `.venv/bin/python benchmarks/bench_scheduler.py --nodes {sizes}`.\n"
    )
    print(
        f"Latency, {ROUNDS} calls each, one vir05_1c_16g pod, nodes 30-80 % used, client-side ms:\n"
    )
    print(
        "| nodes | fit results | filter p50 | filter p99 | filter+prioritize p50 | filter+prioritize p99 | nodes that fit |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    print(
        "\nBinds end to end: one scheduling loop (filter, prioritize, pick) as kube-scheduler "
        "runs it, binds in parallel threads, a plugin stand-in releasing node locks; filter "
        "latency as the scheduling loop saw it while binds changed nodes (ms):\n"
    )
    print("| nodes | bind threads | pods bound | binds/s | filter p50 | filter p99 |")
    print("|---|---:|---:|---:|---:|---:|")
    print("\n".join(bind_rows))


if __name__ == "__main__":
    main()
