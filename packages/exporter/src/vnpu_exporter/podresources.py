"""What the kubelet's PodResources v1 ``List`` says: which container holds which devices.

``kubelet.PodResourcesClient`` (the gRPC side) turns each answer into entries with
``from_response``; ``sampler`` keeps them and ``attribution`` reads them. Two kinds of entry:

* ``ContainerDevices``: device-plugin resources under ``huawei.com/`` (classic mode), the
  device ids of one resource per container;
* ``ClaimDevice``: one device of the DRA driver ``npu.vnpu.io`` (``draclasses.DRIVER``) a
  container holds through a ResourceClaim (the container's ``dynamic_resources``): the claim's
  namespace and name, the pool and device names and the CDI device ids the kubelet passed on.

Devices of other resources and other drivers are left out. No gRPC here: the pure parts
import this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from vnpu_core import draclasses
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


@dataclass(frozen=True, slots=True)
class ClaimDevice:
    """One ``npu.vnpu.io`` device one container holds through the ResourceClaim
    ``claim_namespace/claim`` (a claim shared by several containers appears once for each)."""

    namespace: str
    pod: str
    container: str
    claim_namespace: str
    claim: str
    pool: str
    device: str  # the driver's device name: chip-<phy>-whole, chip-<phy>-<template>-<n>, ...
    cdi_ids: tuple[str, ...] = ()

    @property
    def claim_uid(self) -> str | None:
        """The claim's UID as the driver's CDI device ids carry it; None when they do not."""
        return draclasses.claim_uid(self.cdi_ids, self.device)


Assignment = ContainerDevices | ClaimDevice


class Source(Protocol):
    """Where the kubelet's device assignments come from."""

    def list(self) -> tuple[Assignment, ...]: ...

    def close(self) -> None: ...


def from_response(response: api_pb2.ListPodResourcesResponse) -> tuple[Assignment, ...]:
    """The ``huawei.com/`` devices of a List answer, one entry per container and resource,
    then the ``npu.vnpu.io`` claim devices, one entry per container, claim and device."""
    found: dict[tuple[str, str, str, str], list[str]] = {}
    claimed: dict[ClaimDevice, None] = {}  # ordered, without repeats
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if not devices.resource_name.startswith(RESOURCE_PREFIX):
                    continue
                key = (pod.namespace, pod.name, container.name, devices.resource_name)
                found.setdefault(key, []).extend(devices.device_ids)
            for dynamic in container.dynamic_resources:
                for resource in dynamic.claim_resources:
                    if resource.driver_name != draclasses.DRIVER:
                        continue
                    item = ClaimDevice(
                        pod.namespace,
                        pod.name,
                        container.name,
                        dynamic.claim_namespace or pod.namespace,
                        dynamic.claim_name,
                        resource.pool_name,
                        resource.device_name,
                        tuple(c.name for c in resource.cdi_devices),
                    )
                    claimed[item] = None
    classic: list[Assignment] = [
        ContainerDevices(ns, pod, container, resource, tuple(ids))
        for (ns, pod, container, resource), ids in found.items()
    ]
    return (*classic, *claimed)
