"""What a container is told about its NPUs: the Ascend runtime's variables and hami-vnpu-core's
variables, mount points and host files. The device plugin's Allocate answers and the DRA
driver's CDI specs are both written from these, so a pod sees the same in either mode.
"""

from __future__ import annotations

VISIBLE_DEVICES = "ASCEND_VISIBLE_DEVICES"
RUNTIME_OPTIONS = "ASCEND_RUNTIME_OPTIONS"
VIRTUAL = "VIRTUAL"  # the vNPUs in ASCEND_VISIBLE_DEVICES exist: the runtime creates none

# hami-vnpu-core (soft slices)
MEM_QUOTA = "NPU_MEM_QUOTA"
PRIORITY = "NPU_PRIORITY"
GLOBAL_SHM_PATH = "NPU_GLOBAL_SHM_PATH"
LOCAL_SHM_PATH = "NPU_LOCAL_SHM_PATH"
SHARED_MOUNT = "/hami-shared-region"
CORE_MOUNT = "/hami-vnpu-core"
LOCAL_MOUNT = "/hami-vnpu-shmem"
PRELOAD = "/etc/ld.so.preload"
DRIVER_FILES = (
    "/usr/local/bin/npu-smi",
    "/etc/ascend_install.info",
    "/usr/local/Ascend/driver/lib64/driver",
    "/usr/local/Ascend/driver/version.info",
)
"""Host files a soft-slice container gets read-only, at the same paths."""
