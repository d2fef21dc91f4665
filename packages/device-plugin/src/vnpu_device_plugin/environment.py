"""What a container is given: the environment and mounts of each mode, as Ascend's runtime reads them.

The container runtime (Huawei's ascend-docker-runtime, RuntimeClass ``ascend``) turns
these variables into device nodes, so the contract is the variables:

| what | managed mode (default) | runtime mode (HAMi's) |
|---|---|---|
| whole chips | ``ASCEND_VISIBLE_DEVICES=<physical ids>`` | the same |
| hard vNPU | ``ASCEND_VISIBLE_DEVICES=<vNPU ids>``, ``ASCEND_RUNTIME_OPTIONS=VIRTUAL`` (the plugin created them) | ``ASCEND_VISIBLE_DEVICES=<physical id>``, ``ASCEND_VNPU_SPECS=<template>`` (the runtime creates it) |
| soft slice (pod annotation ``huawei.com/vnpu-mode: hami-core``) | hami-vnpu-core's variables and mounts, below | the same |

Soft slices, as HAMi's plugin hands them out: ``ASCEND_VISIBLE_DEVICES=<physical ids>``,
``NPU_MEM_QUOTA`` (MiB) and ``NPU_PRIORITY`` of the first device,
``NPU_GLOBAL_SHM_PATH=/hami-shared-region/<first physical id>_global_registry``,
``NPU_LOCAL_SHM_PATH=/hami-vnpu-shmem/vnpu_local_shmem``; read-only mounts of npu-smi,
the driver's install info, libraries and version, the hami-vnpu-core directory and its
``ld.so.preload`` over ``/etc/ld.so.preload``; read-write mounts of the shared region and
of a per-container directory ``<hami-core dir>/containers/<pod uid>_<container>``.

Pure: ``allocations`` calls ``response`` once per container with the vNPU ids it created.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vnpu_device_plugin import podplan, settings
from vnpu_kubelet_api.deviceplugin.v1beta1 import api_pb2
from vnpu_npu import runtime

VISIBLE_DEVICES = runtime.VISIBLE_DEVICES
RUNTIME_OPTIONS = runtime.RUNTIME_OPTIONS
VIRTUAL = runtime.VIRTUAL
VNPU_SPECS = "ASCEND_VNPU_SPECS"
MEM_QUOTA = runtime.MEM_QUOTA
PRIORITY = runtime.PRIORITY
GLOBAL_SHM_PATH = runtime.GLOBAL_SHM_PATH
LOCAL_SHM_PATH = runtime.LOCAL_SHM_PATH
SHARED_MOUNT = runtime.SHARED_MOUNT
CORE_MOUNT = runtime.CORE_MOUNT
LOCAL_MOUNT = runtime.LOCAL_MOUNT
_DRIVER_FILES = runtime.DRIVER_FILES


@dataclass(frozen=True, slots=True)
class SoftPaths:
    """Host directories of hami-vnpu-core."""

    core_dir: Path
    shared_dir: Path

    def container_dir(self, pod_uid: str, container: str) -> Path:
        return self.core_dir / "containers" / f"{pod_uid}_{container}"


def _phys(container: podplan.ContainerPlan) -> str:
    return ",".join(str(d.chip.phy_id) for d in container.devices)


def _mount(container_path: str, host_path: Path | str, read_only: bool) -> api_pb2.Mount:
    return api_pb2.Mount(
        container_path=container_path, host_path=str(host_path), read_only=read_only
    )


def soft(
    plan: podplan.PodPlan, container: podplan.ContainerPlan, paths: SoftPaths
) -> api_pb2.ContainerAllocateResponse:
    first = container.devices[0]
    envs = {
        VISIBLE_DEVICES: _phys(container),
        MEM_QUOTA: str(first.memory_mib),
        PRIORITY: str(first.cores),
        GLOBAL_SHM_PATH: f"{SHARED_MOUNT}/{first.chip.phy_id}_global_registry",
        LOCAL_SHM_PATH: f"{LOCAL_MOUNT}/vnpu_local_shmem",
    }
    mounts = [_mount(path, path, True) for path in _DRIVER_FILES]
    mounts += [
        _mount(CORE_MOUNT, paths.core_dir, True),
        _mount(runtime.PRELOAD, paths.core_dir / "ld.so.preload", True),
        _mount(SHARED_MOUNT, paths.shared_dir, False),
        _mount(LOCAL_MOUNT, paths.container_dir(plan.uid, container.container), False),
    ]
    return api_pb2.ContainerAllocateResponse(envs=envs, mounts=mounts)


def response(
    mode: settings.VnpuMode,
    plan: podplan.PodPlan,
    container: podplan.ContainerPlan,
    vnpu_ids: Sequence[int],
    paths: SoftPaths,
) -> api_pb2.ContainerAllocateResponse:
    """The answer for one container; ``vnpu_ids`` are the vNPUs created for it (managed mode)."""
    if plan.soft:
        return soft(plan, container, paths)
    templates = [d.template for d in container.devices if d.template is not None]
    if not templates:
        return api_pb2.ContainerAllocateResponse(envs={VISIBLE_DEVICES: _phys(container)})
    if mode is settings.VnpuMode.MANAGED:
        if len(vnpu_ids) != len(container.devices):
            raise ValueError(f"{len(container.devices)} vNPUs needed, {len(vnpu_ids)} given")
        return api_pb2.ContainerAllocateResponse(
            envs={VISIBLE_DEVICES: ",".join(str(i) for i in vnpu_ids), RUNTIME_OPTIONS: VIRTUAL}
        )
    return api_pb2.ContainerAllocateResponse(
        envs={VISIBLE_DEVICES: _phys(container), VNPU_SPECS: templates[0]}
    )
