"""Simulated kubelet timings: plugin registration to node status, pod admission, PodResources.

Standalone (``make bench`` runs it): starts a private kube-apiserver and its etcd on loopback
(``apiplane.serve``, the binaries ``make k8s-bin`` builds), one simulated kubelet, and a
minimal device plugin with 64 devices on unix sockets in a temporary directory; every loop
is bounded. Prints a Markdown section for docs/benchmarks.md.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
from kubernetes import client

from vnpu_kubelet_api import constants
from vnpu_kubelet_api.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from vnpu_kubelet_api.podresources.v1 import api_pb2 as pr
from vnpu_kubelet_api.podresources.v1 import api_pb2_grpc as pr_grpc
from vnpu_sandbox.kubelet import apiclient, kubelet, nodestatus
from vnpu_sandbox.platform import apiplane, controlplane

RESOURCE = "example.com/npu"
DEVICES = 64
PODS = 48
REGISTRATIONS = 5
LIST_CALLS = 200


class Plugin(api_pb2_grpc.DevicePluginServicer):
    def __init__(self) -> None:
        self.stop = threading.Event()

    def GetDevicePluginOptions(
        self, request: api_pb2.Empty, context: grpc.ServicerContext
    ) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions()

    def ListAndWatch(
        self, request: api_pb2.Empty, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.ListAndWatchResponse]:
        yield api_pb2.ListAndWatchResponse(
            devices=[
                api_pb2.Device(ID=f"npu-{i}", health=constants.HEALTHY) for i in range(DEVICES)
            ]
        )
        while context.is_active() and not self.stop.wait(0.1):
            pass

    def Allocate(
        self, request: api_pb2.AllocateRequest, context: grpc.ServicerContext
    ) -> api_pb2.AllocateResponse:
        return api_pb2.AllocateResponse(
            container_responses=[
                api_pb2.ContainerAllocateResponse(envs={"VISIBLE": ",".join(r.devices_ids)})
                for r in request.container_requests
            ]
        )


def wait_for(predicate: Callable[[], bool], timeout: float = 60.0) -> float:
    start = time.perf_counter()
    while not predicate():
        if time.perf_counter() - start > timeout:
            raise TimeoutError("benchmark condition not reached")
        time.sleep(0.002)
    return time.perf_counter() - start


def pod(name: str, node: str) -> client.V1Pod:
    body = client.V1Pod.from_dict(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": node,
                "containers": [
                    {"name": "main", "image": "busybox", "resources": {"limits": {RESOURCE: "1"}}}
                ],
            },
        }
    )
    assert body is not None
    return body


def serve_plugin(plugin: Plugin, socket: Path) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    api_pb2_grpc.add_DevicePluginServicer_to_server(plugin, server)
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    return server


def allocatable(core: client.CoreV1Api) -> str | None:
    status = core.read_node("bench-node").status
    return (status.allocatable or {}).get(RESOURCE) if status else None


def bench_registration(
    node: kubelet.Kubelet, core: client.CoreV1Api, plugin: Plugin
) -> list[tuple[str, str]]:
    socket = node.config.device_plugin_dir / "npu.sock"
    latencies = []
    for _ in range(REGISTRATIONS):
        node.restart()  # removes every socket: the plugin serves again, then registers
        server = serve_plugin(plugin, socket)
        wait_for(lambda: allocatable(core) in (None, "0"))
        start = time.perf_counter()
        with grpc.insecure_channel(f"unix://{node.kubelet_socket}") as channel:
            api_pb2_grpc.RegistrationStub(channel).Register(
                api_pb2.RegisterRequest(
                    version=constants.VERSION, endpoint="npu.sock", resource_name=RESOURCE
                ),
                timeout=10,
            )
        wait_for(lambda: allocatable(core) == str(DEVICES))
        latencies.append(time.perf_counter() - start)
        server.stop(grace=None).wait()
    median = statistics.median(latencies) * 1000
    return [
        (
            f"Register to allocatable={DEVICES} visible in the API (median of {REGISTRATIONS})",
            f"{median:.1f} ms",
        )
    ]


def bench_pods(node: kubelet.Kubelet, core: client.CoreV1Api) -> list[tuple[str, str]]:
    rows = []
    start = time.perf_counter()
    for i in range(PODS):
        core.create_namespaced_pod("default", pod(f"p{i:03d}", "bench-node"))
    created = time.perf_counter() - start

    def all_running() -> bool:
        items = core.list_namespaced_pod("default").items
        return sum(1 for p in items if p.status and p.status.phase == "Running") == PODS

    wait_for(all_running)
    total = time.perf_counter() - start
    rows.append((f"create {PODS} one-device pods (client side only)", f"{created:.2f} s"))
    rows.append(
        (
            f"create to all {PODS} pods Running",
            f"{total:.2f} s ({PODS / total:.0f} pods/s, {total / PODS * 1000:.1f} ms/pod)",
        )
    )
    with grpc.insecure_channel(f"unix://{node.config.pod_resources_socket}") as channel:
        stub = pr_grpc.PodResourcesListerStub(channel)
        listed = stub.List(pr.ListPodResourcesRequest(), timeout=5)
        start = time.perf_counter()
        for _ in range(LIST_CALLS):
            listed = stub.List(pr.ListPodResourcesRequest(), timeout=5)
        per_call = (time.perf_counter() - start) / LIST_CALLS
    assert len(listed.pod_resources) == PODS
    rows.append(
        (f"PodResources List with {PODS} pods (mean of {LIST_CALLS})", f"{per_call * 1000:.2f} ms")
    )
    start = time.perf_counter()
    for i in range(PODS):
        core.delete_namespaced_pod(f"p{i:03d}", "default")
    wait_for(lambda: node.devices.in_use(RESOURCE) == set())
    rows.append(
        (f"delete {PODS} running pods to all devices freed", f"{time.perf_counter() - start:.2f} s")
    )
    return rows


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="vkb", dir="/tmp"))
    plugin = Plugin()
    rows: list[tuple[str, str]] = []
    try:
        with apiplane.serve(work / "api") as plane:
            kubeconfig = str(plane.kubeconfig)
            api = apiclient.client_from_kubeconfig(kubeconfig)
            core = client.CoreV1Api(api)
            config = kubelet.KubeletConfig(
                node=nodestatus.NodeIdentity("bench-node"),
                device_plugin_dir=work / "plugins",
                pod_resources_socket=work / "pr.sock",
                heartbeat_seconds=0,
            )
            with kubelet.Kubelet(config, apiclient.client_from_kubeconfig(kubeconfig)) as node:
                rows += bench_registration(node, core, plugin)
                server = serve_plugin(plugin, work / "plugins" / "npu.sock")
                with grpc.insecure_channel(f"unix://{node.kubelet_socket}") as channel:
                    api_pb2_grpc.RegistrationStub(channel).Register(
                        api_pb2.RegisterRequest(
                            version=constants.VERSION, endpoint="npu.sock", resource_name=RESOURCE
                        ),
                        timeout=10,
                    )
                wait_for(lambda: allocatable(core) == str(DEVICES))
                rows += bench_pods(node, core)
                plugin.stop.set()
                server.stop(grace=None).wait()
            apiclient.close_client(api)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print("## Simulated kubelet\n")
    print(
        f"kube-apiserver {controlplane.KUBERNETES_VERSION}, one kubelet, one plugin with "
        f"{DEVICES} devices; loopback and unix sockets.\n"
    )
    print("| measurement | result |")
    print("|---|---:|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
