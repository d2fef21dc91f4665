"""What the kubelet's PodResources v1 ``List`` says: which container holds which device ids.

``kubelet.PodResourcesClient`` (the gRPC side) turns each answer into ``ContainerDevices``
with ``from_response``; ``sampler`` keeps them and ``attribution`` reads them. Only
resources under ``huawei.com/`` are kept. No gRPC here: the pure parts import this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from vnpu_kubelet_api.podresources.v1 import api_pb2

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
