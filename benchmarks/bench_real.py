"""The real control plane at scale: pods/s from create to Running on hollow nodes.

Standalone (``--nodes 100 1000`` to choose the sizes; default 100; without the binaries of
``make k8s-bin`` it says so and measures nothing): for each size,
``vnpu-sandbox up --control-plane real`` with one simulated 910B3 node (its kubelet and
device plugin run for real), then N-1 *hollow* nodes, as Kubernetes' own kubemark does:
Node objects whose kubelet and device plugin are played by one process here, through the
API only. Each hollow node carries what the real node's device plugin published (the
``hami.io/node-register-Ascend910B3`` inventory with chip UUIDs of its own, a handshake
renewed every 20 s, the same capacity), renews its Lease in ``kube-node-lease``, and for
each pod bound to it does what the plugin's Allocate and the kubelet would: erases the
pod's to-allocate annotation, writes ``bind-phase: success``, releases the node lock the
pod holds and sets the pod Running. Everything else is real: kube-apiserver with the vnpu
webhooks, kube-controller-manager, kube-scheduler calling vnpu-scheduler as its extender
(filter, prioritize, bind with the node lock), etcd.

Then four pods per node asking ``huawei.com/Ascend910B3: 1`` (half the chips) are created
through the API by 8 threads, timed from the first create until every pod is Running.
Filter and bind latency are vnpu-scheduler's own (its ``request`` log lines, the whole run).
Prints a Markdown section for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes
import standin

from vnpu_core import coordination, protocol
from vnpu_sandbox.platform import controlplane

Json = dict[str, Any]
WORD = "Ascend910B3"
RESOURCE = f"huawei.com/{WORD}"
PODS_PER_NODE = 4
HEARTBEAT_SECONDS = 20.0  # Lease and handshake renewals (kube-controller-manager: 40 s grace)
RUNNING_TIMEOUT = 1200.0
MERGE = "application/merge-patch+json"


def sandbox(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vnpu_sandbox", *args], capture_output=True, text=True, check=False
    )


def client(kubeconfig: Path) -> kubernetes.client.ApiClient:
    config = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kubeconfig), client_configuration=config)
    config.connection_pool_maxsize = 32
    return kubernetes.client.ApiClient(config)


def _read(answer: Any) -> Json:
    document: Json = json.loads(answer.data)
    return document


def _done(answer: Any) -> None:
    answer.drain_conn()
    answer.release_conn()


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _handshake() -> str:
    state = coordination.HandshakeState.REPORTED
    return coordination.encode_handshake(
        coordination.Handshake(state, datetime.now().replace(microsecond=0))
    )


class HollowNodes:
    """Nodes whose kubelet and device plugin are this object, acting through the API."""

    def __init__(self, api: kubernetes.client.ApiClient, template: Json, count: int) -> None:
        self.core = kubernetes.client.CoreV1Api(api)
        self.leases = kubernetes.client.CoordinationV1Api(api)
        self.template = template
        self.names = [f"hollow-{i:04d}" for i in range(count)]
        self.members = set(self.names)
        self.pool = ThreadPoolExecutor(16)
        self.stopping = threading.Event()
        self.served: set[str] = set()
        self.served_lock = threading.Lock()
        self.errors: list[str] = []
        self.threads = [
            threading.Thread(target=self._heartbeats, daemon=True),
            threading.Thread(target=self._pods, daemon=True),
        ]

    # -- the nodes ----------------------------------------------------------------------------

    def _register(self, index: int) -> str:
        """The template node's inventory with this node's own chip UUIDs."""
        key = protocol.node_register_key(WORD)
        chips = protocol.decode_node_register(key, self.template["metadata"]["annotations"][key])
        own = [
            protocol.RegisteredChip(
                id=f"{index:04d}{chip.id[4:]}",
                index=chip.index,
                count=chip.count,
                devmem=chip.devmem,
                devcore=chip.devcore,
                type=chip.type,
                health=chip.health,
                network_id=chip.network_id,
                numa=chip.numa,
                mode=chip.mode,
                vendor=chip.vendor,
            )
            for chip in chips
        ]
        return protocol.encode_node_register(own)

    def _create(self, index: int) -> None:
        name = self.names[index]
        meta = self.template["metadata"]
        annotations = {
            k: v
            for k, v in meta["annotations"].items()
            if k.startswith(("hami.io/node-", "vnpu.io/"))
            and not k.startswith(("hami.io/mutex", "vnpu.io/granted"))
        }
        annotations[protocol.node_register_key(WORD)] = self._register(index)
        annotations[protocol.node_handshake_key(WORD)] = _handshake()
        labels = {**meta.get("labels", {}), "kubernetes.io/hostname": name}
        body = {"metadata": {"name": name, "labels": labels, "annotations": annotations}}
        _done(self.core.create_node(body, _preload_content=False))
        status = json.loads(json.dumps(self.template["status"]))
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for condition in status.get("conditions", []):
            condition["lastHeartbeatTime"] = condition["lastTransitionTime"] = now
        status["addresses"] = [
            {"type": "InternalIP", "address": "127.0.0.1"},
            {"type": "Hostname", "address": name},
        ]
        status.pop("images", None)
        _done(
            self.core.patch_node_status(
                name, {"status": status}, _content_type=MERGE, _preload_content=False
            )
        )
        lease = {
            "metadata": {"name": name, "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": name,
                "leaseDurationSeconds": 40,
                "renewTime": _micro_time(),
            },
        }
        _done(self.leases.create_namespaced_lease("kube-node-lease", lease, _preload_content=False))

    def register(self) -> None:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(self._create, range(len(self.names))))

    def _beat(self, name: str) -> None:
        renew = {"spec": {"renewTime": _micro_time()}}
        _done(
            self.leases.patch_namespaced_lease(
                name, "kube-node-lease", renew, _content_type=MERGE, _preload_content=False
            )
        )
        notes = {"metadata": {"annotations": {protocol.node_handshake_key(WORD): _handshake()}}}
        _done(self.core.patch_node(name, notes, _content_type=MERGE, _preload_content=False))

    def _heartbeats(self) -> None:
        while not self.stopping.wait(HEARTBEAT_SECONDS):
            for error in self.pool.map(self._guarded(self._beat), self.names):
                if error:
                    self.errors.append(error)

    def _guarded(self, work: Any) -> Any:
        def run(*args: Any) -> str:
            try:
                work(*args)
            except Exception as exc:  # a failed beat or Allocate is counted, not fatal
                return f"{work.__name__}{args}: {exc}"
            return ""

        return run

    # -- the pods -----------------------------------------------------------------------------

    def _pods(self) -> None:
        version = ""
        while not self.stopping.is_set():
            try:
                stream = self.core.list_pod_for_all_namespaces(
                    watch=True, resource_version=version or None, timeout_seconds=5,
                    allow_watch_bookmarks=True, _preload_content=False,
                )  # fmt: skip
            except kubernetes.client.exceptions.ApiException as exc:
                self.errors.append(f"watch: {exc.status}")
                version = ""
                time.sleep(1)
                continue
            for line in stream:
                if not line.strip():
                    continue
                event = json.loads(line)
                pod = event["object"]
                if event["type"] == "ERROR":
                    version = ""
                    break
                version = pod["metadata"].get("resourceVersion", version)
                if event["type"] not in ("ADDED", "MODIFIED"):
                    continue
                node = pod["spec"].get("nodeName")
                notes = pod["metadata"].get("annotations") or {}
                if node not in self.members:
                    continue
                if notes.get(protocol.BIND_PHASE_KEY) != protocol.BindPhase.ALLOCATING.value:
                    continue
                uid = pod["metadata"]["uid"]
                with self.served_lock:
                    if uid in self.served:
                        continue
                    self.served.add(uid)
                self.pool.submit(self._guarded(self._allocate), pod)
            stream.release_conn()

    def _allocate(self, pod: Json) -> None:
        meta = pod["metadata"]
        name, namespace, node = meta["name"], meta["namespace"], pod["spec"]["nodeName"]
        granted = {
            "metadata": {
                "annotations": {
                    protocol.to_allocate_key(WORD): "",
                    protocol.BIND_PHASE_KEY: protocol.BindPhase.SUCCESS.value,
                }
            }
        }
        _done(
            self.core.patch_namespaced_pod(
                name, namespace, granted, _content_type=MERGE, _preload_content=False
            )
        )
        standin.release_lock(self.core, node, f",{namespace},{name}")
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        status = {
            "status": {
                "phase": "Running",
                "hostIP": "127.0.0.1",
                "podIP": "127.0.0.1",
                "startTime": now,
                "conditions": [
                    {"type": t, "status": "True", "lastTransitionTime": now}
                    for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
                ],
                "containerStatuses": [
                    {
                        "name": c["name"],
                        "image": c.get("image", ""),
                        "imageID": "",
                        "ready": True,
                        "restartCount": 0,
                        "started": True,
                        "state": {"running": {"startedAt": now}},
                    }
                    for c in pod["spec"]["containers"]
                ],
            }
        }
        _done(
            self.core.patch_namespaced_pod_status(
                name, namespace, status, _content_type=MERGE, _preload_content=False
            )
        )

    @contextlib.contextmanager
    def running(self) -> Iterator[HollowNodes]:
        for thread in self.threads:
            thread.start()
        try:
            yield self
        finally:
            self.stopping.set()
            for thread in self.threads:
                thread.join(timeout=30)
            self.pool.shutdown(wait=True)


def pod(index: int) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"bench-{index:05d}", "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {RESOURCE: "1"}}}],
        },
    }


def phases(core: kubernetes.client.CoreV1Api) -> dict[str, int]:
    listed = _read(
        core.list_namespaced_pod("default", resource_version="0", _preload_content=False)
    )
    counts: dict[str, int] = {}
    for item in listed["items"]:
        phase = (item.get("status") or {}).get("phase", "Pending")
        counts[phase] = counts.get(phase, 0) + 1
    return counts


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def request_latencies(log: Path) -> dict[str, list[float]]:
    """Seconds per verb from vnpu-scheduler's ``request`` log lines."""
    found: dict[str, list[float]] = {}
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if '"request"' not in line:
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if entry.get("event") == "request" and "duration_seconds" in entry:
            found.setdefault(entry.get("verb", ""), []).append(float(entry["duration_seconds"]))
    return found


def cpu_seconds(record: Json) -> dict[str, float]:
    """User + system CPU seconds so far of each process ``up`` started, and of this one."""
    ticks = os.sysconf("SC_CLK_TCK")
    pids = {p["name"]: p["pid"] for p in record.get("processes", [])} | {
        "hollow nodes": os.getpid()
    }
    found = {}
    for name, pid in pids.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[name] = (int(fields[11]) + int(fields[12])) / ticks
    return found


def rss_megabytes(record: Json) -> float:
    total = 0
    for process in record.get("processes", []):
        pid = process.get("pid")
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except (OSError, TypeError):
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


def measure(nodes: int, root: Path) -> Json:
    directory = root / f"n{nodes}"
    cluster = directory.with_suffix(".yaml")
    cluster.write_text("nodes: [{name: a2, chip: 910B3, chips: 8, server: 910b-8}]\n")
    began = time.monotonic()
    up = sandbox(
        "up", "--control-plane", "real", "--cluster", str(cluster), "--dir", str(directory),
        "--no-prometheus", "--no-exporters", "--timeout", "600",
    )  # fmt: skip
    ready = time.monotonic() - began
    if up.returncode != 0:
        raise SystemExit(f"up failed for {nodes} nodes:\n{up.stderr}")
    try:
        api = client(directory / "kubeconfig")
        core = kubernetes.client.CoreV1Api(api)
        template = _read(core.read_node("a2", _preload_content=False))
        hollow = HollowNodes(api, template, nodes - 1)
        began = time.monotonic()
        hollow.register()
        registered = time.monotonic() - began
        record = json.loads((directory / "sandbox.json").read_text())
        with hollow.running():
            time.sleep(5)  # the scheduler's informer and kube-scheduler's cache catch up
            count = nodes * PODS_PER_NODE
            cpu_before = cpu_seconds(record)
            began = time.monotonic()
            with ThreadPoolExecutor(8) as pool:
                list(
                    pool.map(
                        lambda i: _done(
                            core.create_namespaced_pod("default", pod(i), _preload_content=False)
                        ),
                        range(count),
                    )
                )
            created = time.monotonic() - began
            deadline = began + RUNNING_TIMEOUT
            while True:
                counts = phases(core)
                if counts.get("Running", 0) >= count or time.monotonic() > deadline:
                    break
                time.sleep(1.0)
            elapsed = time.monotonic() - began
            cpu = {
                name: spent - cpu_before.get(name, 0.0)
                for name, spent in cpu_seconds(record).items()
            }
            memory = rss_megabytes(record)
        latencies = request_latencies(directory / "logs" / "vnpu-scheduler.log")
    finally:
        sandbox("down", "--dir", str(directory))
    filters = latencies.get("filter", [])
    binds = latencies.get("bind", [])
    return {
        "nodes": nodes,
        "up_seconds": ready,
        "register_seconds": registered,
        "pods": count,
        "running": counts.get("Running", 0),
        "create_seconds": created,
        "seconds": elapsed,
        "pods_per_second": counts.get("Running", 0) / elapsed,
        "filter_p50_ms": 1000 * statistics.median(filters) if filters else 0.0,
        "filter_p99_ms": 1000 * _percentile(filters, 0.99),
        "filters": len(filters),
        "bind_p50_ms": 1000 * statistics.median(binds) if binds else 0.0,
        "bind_p99_ms": 1000 * _percentile(binds, 0.99),
        "binds": len(binds),
        "rss_mb": memory,
        "cpu_seconds": {n: round(c, 1) for n, c in sorted(cpu.items(), key=lambda i: -i[1])},
        "hollow_errors": len(hollow.errors),
        "first_errors": hollow.errors[:3],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[100])
    parser.add_argument("--keep", type=Path, help="keep each sandbox (logs) in this directory")
    args = parser.parse_args()
    try:
        controlplane.binaries()
    except controlplane.ControlPlaneError as exc:
        print(f"## Real control plane at scale (hollow nodes)\n\nNot run: {exc}\n")
        return
    with tempfile.TemporaryDirectory(prefix="vrb") as tmp:
        rows = [measure(n, args.keep or Path(tmp)) for n in args.nodes]
    print("## Real control plane at scale (hollow nodes)\n")
    print(
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python "
        f"{platform.python_version()}. Command: `.venv/bin/python benchmarks/bench_real.py "
        f"--nodes {' '.join(map(str, args.nodes))}`.\n"
    )
    print(
        "| nodes | pods | create | create -> all Running | pods/s | filter p50 | filter p99 "
        "| bind p50 | bind p99 | memory (RSS, control plane and vnpu) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['nodes']} | {r['running']} of {r['pods']} | {r['create_seconds']:.1f} s "
            f"| {r['seconds']:.1f} s | {r['pods_per_second']:.1f} | {r['filter_p50_ms']:.1f} ms "
            f"| {r['filter_p99_ms']:.1f} ms | {r['bind_p50_ms']:.0f} ms | {r['bind_p99_ms']:.0f} ms "
            f"| {r['rss_mb'] / 1024:.1f} GB |"
        )
    print()
    print("```json")
    print(json.dumps(rows, indent=2))
    print("```")


if __name__ == "__main__":
    main()
