"""Device plugin Allocate latency with the simulated NPU backend, as kubelet sees it.

Standalone (``make bench`` runs it): starts a private kube-apiserver and its etcd on
loopback (``apiplane.serve``, the binaries ``make k8s-bin`` builds), writes a simulated node
of four 310P3 chips in a temporary directory, runs the real plugin in process (gRPC on a
unix socket, the Kubernetes client over HTTPS) and calls its socket the way kubelet does:
GetPreferredAllocation, then Allocate, one pod at a time. Each pod is created and bound with
the scheduler's annotations before the clock starts; the timed part is one gRPC call.
Finished pods are reclaimed between rounds (not timed). Prints a Markdown section for
docs/benchmarks.md.
"""

from __future__ import annotations

import logging
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import kubernetes
import structlog
import yaml

from vnpu_core import coordination, protocol
from vnpu_device_plugin import plugin, settings
from vnpu_kubelet_api.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from vnpu_sandbox.kubelet import apiclient
from vnpu_sandbox.platform import apiplane, controlplane

CALLS = 200
RECLAIM_EVERY = 20
CW = "Ascend310P"
NODE = "bench-node"


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


class Bench:
    def __init__(self, root: Path, kubeconfig: Path, mode: str, prefix: str) -> None:
        self.root = root
        self.prefix = prefix
        sim = root / "sim"
        sim.mkdir(parents=True)
        (sim / "chips.yaml").write_text(
            yaml.safe_dump({"chip": "310P3", "chips": 4, "server": "300i-duo", "seed": "bench"}),
            encoding="utf-8",
        )
        options = settings.Settings(
            node_name=NODE,
            backend=settings.BackendKind.SIM,
            sim_dir=sim,
            device_plugin_dir=root / "dp",
            pod_resources_socket=root / "pr.sock",
            kubeconfig=kubeconfig,
            state_dir=root / "state",
            vnpu_mode=settings.VnpuMode(mode),
            metrics_host="127.0.0.1",
            metrics_port=0,
            reconcile_interval=3600,
            allocate_wait=1.0,
        )
        self.client = apiclient.client_from_kubeconfig(str(kubeconfig))
        self.core = kubernetes.client.CoreV1Api(self.client)
        self.plugin = plugin.Plugin(options)
        self.plugin.start()
        socket = options.device_plugin_dir / self.plugin.inventory.socket_name
        self.channel = grpc.insecure_channel(f"unix://{socket}")
        self.stub = api_pb2_grpc.DevicePluginStub(self.channel)
        self.uuids = [c.uuid for c in self.plugin.inventory.chips]
        self.number = 0

    def close(self) -> None:
        self.channel.close()
        self.plugin.stop()
        apiclient.close_client(self.client)

    def place(self, chip: int, template: str | None, memory: int, lock: str) -> str:
        self.number += 1
        name = f"{self.prefix}-{self.number}"
        self.core.create_namespaced_pod(
            "default",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {
                    "containers": [
                        {
                            "name": "c0",
                            "image": "x",
                            "resources": {"limits": {f"huawei.com/{CW}": "1"}},
                        }
                    ]
                },
            },
        )
        if lock != "none":
            now = datetime.now(UTC).astimezone()
            owner = ("default", name) if lock == "owner" else (None, None)
            value = coordination.encode_lock(coordination.NodeLock(now, *owner))
            self.core.patch_node(
                NODE,
                {"metadata": {"annotations": {protocol.NODE_LOCK_KEY: value}}},
                _content_type="application/merge-patch+json",
            )
        uuid = self.uuids[chip]
        devices = protocol.encode_devices([[protocol.DeviceEntry(uuid, CW, memory, 0)]])
        runtime = protocol.encode_runtime(
            [protocol.RuntimeInfo(uuid, template, memory if template else 0, 0)]
        )
        stamp = str(int(time.time()))
        notes = {
            protocol.to_allocate_key(CW): devices,
            protocol.allocated_key(CW): devices,
            protocol.runtime_key(CW): runtime,
            protocol.VGPU_NODE_KEY: NODE,
            protocol.BIND_TIME_KEY: stamp,
            protocol.BIND_PHASE_KEY: "allocating",
        }
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "annotations": notes},
            "target": {"kind": "Node", "name": NODE},
        }
        self.core.create_namespaced_pod_binding(name, "default", binding, _preload_content=False)
        return name

    def finish(self, name: str) -> None:
        self.core.patch_namespaced_pod_status(
            name,
            "default",
            {"status": {"phase": "Succeeded"}},
            _content_type="application/merge-patch+json",
        )

    def run(self, template: str | None, memory: int, lock: str) -> dict[str, list[float]]:
        timings: dict[str, list[float]] = {"preferred": [], "allocate": []}
        for call in range(CALLS):
            chip = call % 4
            name = self.place(chip, template, memory, lock)
            available = [f"{u}-{i}" for u in self.uuids for i in range(7)]
            started = time.perf_counter()
            preferred = self.stub.GetPreferredAllocation(
                api_pb2.PreferredAllocationRequest(
                    container_requests=[
                        api_pb2.ContainerPreferredAllocationRequest(
                            available_deviceIDs=available, allocation_size=1
                        )
                    ]
                ),
                timeout=10,
            )
            between = time.perf_counter()
            ids = list(preferred.container_responses[0].deviceIDs)
            self.stub.Allocate(
                api_pb2.AllocateRequest(
                    container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=ids)]
                ),
                timeout=10,
            )
            done = time.perf_counter()
            timings["preferred"].append(between - started)
            timings["allocate"].append(done - between)
            self.finish(name)
            if (call + 1) % RECLAIM_EVERY == 0:
                self.reclaim()
        self.reclaim()
        return timings

    def reclaim(self) -> None:
        """Reclaim the finished pods' vNPUs and delete the pods, as the pod GC would."""
        self.plugin.reconciler.run_once()
        for number in range(self.number - RECLAIM_EVERY + 1, self.number + 1):
            name = f"{self.prefix}-{number}"
            try:
                self.core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
            except kubernetes.client.exceptions.ApiException as exc:
                if exc.status != 404:
                    raise


def _scenario(
    kubeconfig: Path, mode: str, prefix: str, run: Callable[[Bench], dict[str, list[float]]]
) -> Any:
    root = Path(tempfile.mkdtemp(prefix="vdpb-", dir="/tmp"))
    bench = Bench(root, kubeconfig, mode, prefix)
    try:
        return run(bench)
    finally:
        bench.close()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    # The plugin's per-call log lines would bury the table; warnings still show.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    rows = []
    with apiplane.serve() as plane:
        api = apiclient.client_from_kubeconfig(str(plane.kubeconfig))
        kubernetes.client.CoreV1Api(api).create_node(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}
        )
        apiclient.close_client(api)
        cases = [
            ("managed", "vir01 vNPU created, HAMi lock (owner named)", "vir01", 3072, "owner"),
            ("managed", "vir01 vNPU created, Volcano lock (bare)", "vir01", 3072, "bare"),
            ("managed", "whole chip, no lock", None, 21527, "none"),
            ("runtime", "vir01 for the runtime (nothing created)", "vir01", 3072, "owner"),
        ]
        for number, (mode, what, template, memory, lock) in enumerate(cases):
            timings = _scenario(
                plane.kubeconfig,
                mode,
                f"s{number}",
                lambda b, t=template, m=memory, k=lock: b.run(t, m, k),
            )
            allocate = [t * 1000 for t in timings["allocate"]]
            preferred = [t * 1000 for t in timings["preferred"]]
            rows.append(
                f"| {mode} | {what} | {statistics.median(allocate):.1f} | "
                f"{_percentile(allocate, 0.99):.1f} | {max(allocate):.1f} | "
                f"{statistics.median(preferred):.1f} | {_percentile(preferred, 0.99):.1f} |"
            )
    print("## Device plugin Allocate\n")
    print(
        f"{CALLS} pods per row, one at a time, over the plugin's unix socket (milliseconds); "
        f"kube-apiserver {controlplane.KUBERNETES_VERSION} on loopback.\n"
    )
    print("| mode | pod | Allocate p50 | p99 | max | GetPreferredAllocation p50 | p99 |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
