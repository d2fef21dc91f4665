"""The kubelet's PodResources v1 service on its own node-local socket.

``kubelet`` starts a :class:`PodResourcesServer` next to the Registration server; the exporter
(and anything else that maps devices to pods) reads it. Answers are shaped like the kubelet's:

* ``List`` - every active pod (being admitted or admitted, not finished, not deleted: the
  kubelet adds a pod to its pod manager before admitting it) with each regular container
  (and each sidecar init container); a container's devices come as one ``ContainerDevices``
  per device id and NUMA node, with ``topology`` only when the plugin reported one;
* ``GetAllocatableResources`` - the healthy devices of every connected plugin, same shape;
* ``Get`` - one pod by namespace and name; an unknown pod is an ``UNKNOWN`` error
  ``pod <name> in namespace <namespace> not found``, and with ``get_enabled=False`` every call
  fails with ``PodResources API Get method disabled``, both as the kubelet answers.

* ``dynamic_resources`` of a container - one ``DynamicResource`` per prepared ResourceClaim
  the container references, with a ``ClaimResource`` (CDI devices, driver, pool, device) per
  device of the requests it names, from ``dramanager``'s claim cache.

CPU ids and memory are always empty: the simulator has no CPU or memory managers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from vnpu_kubelet_api.podresources.v1 import api_pb2, api_pb2_grpc
from vnpu_sandbox.kubelet import checkpoint, devicemanager, dramanager, pluginclient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ActivePod:
    uid: str
    namespace: str
    name: str
    containers: tuple[str, ...]
    """Regular containers, then sidecar init containers, in spec order."""
    pod: dict[str, Any] = field(default_factory=dict, compare=False)
    """The pod object as last seen (its claims)."""


def _devices(resource: str, by_node: Iterable[tuple[str, str]]) -> list[api_pb2.ContainerDevices]:
    out = []
    for node, device_id in sorted(by_node, key=lambda item: (item[1], item[0])):
        entry = api_pb2.ContainerDevices(resource_name=resource, device_ids=[device_id])
        if node != checkpoint.NO_TOPOLOGY:
            entry.topology.nodes.append(api_pb2.NUMANode(ID=int(node)))
        out.append(entry)
    return out


def entry_devices(entries: Iterable[checkpoint.Entry]) -> list[api_pb2.ContainerDevices]:
    out = []
    for entry in sorted(entries, key=lambda e: e.resource):
        pairs = [(node, i) for node, ids in entry.device_ids.items() for i in ids]
        out.extend(_devices(entry.resource, pairs))
    return out


def dynamic_resources(
    claims: Iterable[dramanager.ContainerClaim],
) -> list[api_pb2.DynamicResource]:
    out = []
    for claim in claims:
        resources = []
        for device in claim.devices:
            resource = api_pb2.ClaimResource(
                cdi_devices=[api_pb2.CDIDevice(name=c) for c in device.cdi_device_ids],
                driver_name=device.driver,
                pool_name=device.pool,
                device_name=device.device,
            )
            if device.share_id is not None:
                resource.share_id = device.share_id
            resources.append(resource)
        out.append(
            api_pb2.DynamicResource(
                claim_name=claim.claim, claim_namespace=claim.namespace, claim_resources=resources
            )
        )
    return out


def device_list(
    resource: str, devices: Iterable[pluginclient.Device]
) -> list[api_pb2.ContainerDevices]:
    pairs = [
        (node, d.id)
        for d in devices
        for node in ([str(n) for n in d.numa_nodes] or [checkpoint.NO_TOPOLOGY])
    ]
    return _devices(resource, pairs)


class _Servicer(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, owner: PodResourcesServer) -> None:
        self._owner = owner

    def List(
        self, request: api_pb2.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.ListPodResourcesResponse:
        pods = [self._owner.pod_resources(pod) for pod in self._owner.active_pods()]
        return api_pb2.ListPodResourcesResponse(pod_resources=pods)

    def GetAllocatableResources(
        self, request: api_pb2.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.AllocatableResourcesResponse:
        devices = []
        for resource, listed in self._owner.devices.allocatable().items():
            devices.extend(device_list(resource, listed))
        return api_pb2.AllocatableResourcesResponse(devices=devices)

    def Get(
        self, request: api_pb2.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.GetPodResourcesResponse:
        if not self._owner.get_enabled:
            context.abort(grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled")
        found = next(
            (
                pod
                for pod in self._owner.active_pods()
                if pod.namespace == request.pod_namespace and pod.name == request.pod_name
            ),
            None,
        )
        if found is None:
            context.abort(
                grpc.StatusCode.UNKNOWN,
                f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
            )
        return api_pb2.GetPodResourcesResponse(pod_resources=self._owner.pod_resources(found))


class PodResourcesServer:
    """A gRPC server for PodResourcesLister v1 on ``socket_path``."""

    def __init__(
        self,
        socket_path: Path,
        devices: devicemanager.DeviceManager,
        active_pods: Callable[[], list[ActivePod]],
        get_enabled: bool = True,
        dra: dramanager.DraManager | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.devices = devices
        self.dra = dra
        self.active_pods = active_pods
        self.get_enabled = get_enabled
        self._server: grpc.Server | None = None

    def pod_resources(self, pod: ActivePod) -> api_pb2.PodResources:
        entries = self.devices.entries(pod.uid)
        containers = [
            api_pb2.ContainerResources(
                name=name,
                devices=entry_devices(e for e in entries if e.container == name),
                dynamic_resources=dynamic_resources(
                    self.dra.container_claims(pod.pod, name) if self.dra is not None else ()
                ),
            )
            for name in pod.containers
        ]
        return api_pb2.PodResources(name=pod.name, namespace=pod.namespace, containers=containers)

    def start(self) -> None:
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="podresources")
        )
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Servicer(self), server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server
        log.info("pod_resources_serving socket=%s", self.socket_path)

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop(grace=None).wait()
        self.socket_path.unlink(missing_ok=True)
