"""The kubelet's PodResources v1 ``List``: which container holds which device ids.

``sampler`` calls ``PodResourcesClient.list`` on the ``pod_resources`` refresh interval;
``attribution`` reads the result. Only resources under ``huawei.com/`` are kept. The client
dials the unix socket once; gRPC reconnects by itself when the kubelet restarts and
re-creates the socket (mount the socket's directory, not the file, for that to work in a
pod). Every gRPC failure becomes ``errors.PodResourcesError`` naming the socket and the
status code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grpc

from vnpu_exporter import errors
from vnpu_kubelet_api.podresources.v1 import api_pb2, api_pb2_grpc

RESOURCE_PREFIX = "huawei.com/"


@dataclass(frozen=True, slots=True)
class ContainerDevices:
    """The device ids of one resource the kubelet gave one container."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]


class Source(Protocol):
    """Where the kubelet's device assignments come from."""

    def list(self) -> tuple[ContainerDevices, ...]: ...

    def close(self) -> None: ...


def from_response(response: api_pb2.ListPodResourcesResponse) -> tuple[ContainerDevices, ...]:
    """The ``huawei.com/`` devices of a List answer, one entry per container and resource."""
    found: dict[tuple[str, str, str, str], list[str]] = {}
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if not devices.resource_name.startswith(RESOURCE_PREFIX):
                    continue
                key = (pod.namespace, pod.name, container.name, devices.resource_name)
                found.setdefault(key, []).extend(devices.device_ids)
    return tuple(
        ContainerDevices(ns, pod, container, resource, tuple(ids))
        for (ns, pod, container, resource), ids in found.items()
    )


class PodResourcesClient:
    """A PodResourcesLister client on ``socket_path``; each call waits at most ``timeout`` s."""

    def __init__(self, socket_path: Path, timeout: float = 5.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._channel = grpc.insecure_channel(f"unix://{socket_path}")
        self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)

    def list(self) -> tuple[ContainerDevices, ...]:
        try:
            response = self._stub.List(api_pb2.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.RpcError as exc:
            # The raised object is also a grpc.Call, which carries the status code and text.
            code, details = getattr(exc, "code", None), getattr(exc, "details", None)
            name = code().name if callable(code) else "UNKNOWN"
            text = details() if callable(details) else str(exc)
            raise errors.PodResourcesError(str(self.socket_path), name, text or "") from exc
        return from_response(response)

    def close(self) -> None:
        self._channel.close()
