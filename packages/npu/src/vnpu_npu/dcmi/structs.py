"""The DCMI header for ctypes: structures, constants and function signatures.

Field order and C types follow ``dcmi_interface_api.h``; ctypes lays fields out with the
platform's C alignment, and ``unsigned long`` is ``c_ulong`` (8 bytes on the LP64 hosts
Ascend ships). The tests compare every ``sizeof`` here with the C compiler's through the
stand-in library. ``dcmi.library`` applies ``SIGNATURES``; ``dcmi.backend`` fills these.
"""

from __future__ import annotations

import ctypes
from ctypes import (
    POINTER,
    c_char,
    c_float,
    c_int,
    c_uint,
    c_ulong,
    c_ulonglong,
    c_ushort,
    c_void_p,
)

c_ubyte = ctypes.c_ubyte

NAME_LEN = 32
DIE_ID_WORDS = 5
VDEV_NAME_LEN = 16
SOC_SPLIT_MAX = 32
MAX_CARDS = 64
ERROR_CODE_LEN = 128

DIE_VDIE = 1  # enum dcmi_die_type: NDIE=0, VDIE=1
UTIL_MEMORY = 1  # dcmi_get_device_utilization_rate input types
UTIL_AICORE = 2
MAIN_CMD_VDEV_MNG = 52  # enum dcmi_main_cmd
VDEV_QUERY = 0  # sub commands of MAIN_CMD_VDEV_MNG
VDEV_TOTAL = 1
VDEV_FREE = 2
VDEV_ACTIVITY = 5
AUTO = 0xFFFFFFFF  # vdev_id / vfg_id "let the driver choose"
DESTROY_ALL = 65535


class ChipInfo(ctypes.Structure):
    _fields_ = (
        ("chip_type", c_ubyte * NAME_LEN),
        ("chip_name", c_ubyte * NAME_LEN),
        ("chip_ver", c_ubyte * NAME_LEN),
        ("aicore_cnt", c_uint),
    )


class PcieInfoAll(ctypes.Structure):
    _fields_ = (
        ("venderid", c_uint),
        ("subvenderid", c_uint),
        ("deviceid", c_uint),
        ("subdeviceid", c_uint),
        ("domain", c_int),
        ("bdf_busid", c_uint),
        ("bdf_deviceid", c_uint),
        ("bdf_funcid", c_uint),
        ("reserve", c_ubyte * 32),
    )


class DieId(ctypes.Structure):
    _fields_ = (("soc_die", c_uint * DIE_ID_WORDS),)


class HbmInfo(ctypes.Structure):
    _fields_ = (
        ("memory_size", c_ulonglong),  # MB
        ("freq", c_uint),
        ("memory_usage", c_ulonglong),  # MB
        ("temp", c_int),
        ("bandwith_util_rate", c_uint),
    )


class MemoryInfoV3(ctypes.Structure):
    """``struct dcmi_get_memory_info_stru``."""

    _fields_ = (
        ("memory_size", c_ulonglong),  # MB
        ("memory_available", c_ulonglong),  # MB: free + hugepages_free * hugepagesize
        ("freq", c_uint),
        ("hugepagesize", c_ulong),  # KB
        ("hugepages_total", c_ulong),
        ("hugepages_free", c_ulong),
        ("utiliza", c_uint),
        ("reserve", c_ubyte * 60),
    )


class MemoryInfoV1(ctypes.Structure):
    """``struct dcmi_memory_info_stru`` of the legacy ``dcmi_get_memory_info``."""

    _fields_ = (("memory_size", c_ulonglong), ("freq", c_uint), ("utiliza", c_uint))


class BaseResource(ctypes.Structure):
    _fields_ = (
        ("token", c_ulonglong),
        ("token_max", c_ulonglong),
        ("task_timeout", c_ulonglong),
        ("vfg_id", c_uint),
        ("vip_mode", c_ubyte),
        ("reserved", c_ubyte * 31),
    )


class ComputingResource(ctypes.Structure):
    _fields_ = (
        ("aic", c_float),
        ("aiv", c_float),
        ("dsa", c_ushort),
        ("rtsq", c_ushort),
        ("acsq", c_ushort),
        ("cdqm", c_ushort),
        ("c_core", c_ushort),
        ("ffts", c_ushort),
        ("sdma", c_ushort),
        ("pcie_dma", c_ushort),
        ("memory_size", c_ulonglong),  # MB
        ("event_id", c_uint),
        ("notify_id", c_uint),
        ("stream_id", c_uint),
        ("model_id", c_uint),
        ("topic_schedule_aicpu", c_ushort),
        ("host_ctrl_cpu", c_ushort),
        ("host_aicpu", c_ushort),
        ("device_aicpu", c_ushort),
        ("topic_ctrl_cpu_slot", c_ushort),
        ("vdev_aicore_utilization", c_uint),
        ("vdev_memory_total", c_ulonglong),
        ("vdev_memory_free", c_ulonglong),
        ("reserved", c_ubyte * 12),
    )


class MediaResource(ctypes.Structure):
    _fields_ = (
        ("jpegd", c_float),
        ("jpege", c_float),
        ("vpc", c_float),
        ("vdec", c_float),
        ("pngd", c_float),
        ("venc", c_float),
        ("reserved", c_ubyte * 32),
    )


class CreateVdevRes(ctypes.Structure):
    """``struct dcmi_create_vdev_res_stru``: set ids to AUTO to let the driver choose."""

    _fields_ = (
        ("vdev_id", c_uint),
        ("vfg_id", c_uint),
        ("template_name", c_char * NAME_LEN),
        ("reserved", c_ubyte * 64),
    )


class CreateVdevOut(ctypes.Structure):
    _fields_ = (
        ("vdev_id", c_uint),
        ("pcie_bus", c_uint),
        ("pcie_device", c_uint),
        ("pcie_func", c_uint),
        ("vfg_id", c_uint),
        ("reserved", c_ubyte * 32),
    )


class VdevQueryInfo(ctypes.Structure):
    _fields_ = (
        ("name", c_char * VDEV_NAME_LEN),
        ("status", c_uint),
        ("is_container_used", c_uint),
        ("vfid", c_uint),
        ("vfg_id", c_uint),
        ("container_id", c_ulonglong),
        ("base", BaseResource),
        ("computing", ComputingResource),
        ("media", MediaResource),
    )


class VdevQuery(ctypes.Structure):
    """``struct dcmi_vdev_query_stru``: set ``vdev_id`` before sub commands 0 and 5."""

    _fields_ = (("vdev_id", c_uint), ("query_info", VdevQueryInfo))


class SocFreeResource(ctypes.Structure):
    _fields_ = (
        ("vfg_num", c_uint),
        ("vfg_bitmap", c_uint),
        ("base", BaseResource),
        ("computing", ComputingResource),
        ("media", MediaResource),
    )


class SocTotalResource(ctypes.Structure):
    _fields_ = (
        ("vdev_num", c_uint),
        ("vdev_id", c_uint * SOC_SPLIT_MAX),
        ("vfg_num", c_uint),
        ("vfg_bitmap", c_uint),
        ("base", BaseResource),
        ("computing", ComputingResource),
        ("media", MediaResource),
    )


def text(raw: ctypes.Array[c_ubyte] | bytes) -> str:
    """A NUL-terminated C string field as text."""
    data = bytes(raw)
    return data.split(b"\0", 1)[0].decode("utf-8", "replace")


_P_INT = POINTER(c_int)
_P_UINT = POINTER(c_uint)

# argtypes of every function vnpu calls; all return int (0 = success).
SIGNATURES: dict[str, tuple[type, ...]] = {
    "dcmi_init": (),
    "dcmi_get_card_list": (_P_INT, _P_INT, c_int),
    "dcmi_get_card_num_list": (_P_INT, _P_INT, c_int),
    "dcmi_get_device_num_in_card": (c_int, _P_INT),
    "dcmi_get_device_logic_id": (_P_INT, c_int, c_int),
    "dcmi_get_device_phyid_from_logicid": (c_uint, _P_UINT),
    "dcmi_get_device_chip_info": (c_int, c_int, POINTER(ChipInfo)),
    "dcmi_get_device_pcie_info_v2": (c_int, c_int, POINTER(PcieInfoAll)),
    "dcmi_get_device_die_v2": (c_int, c_int, c_int, POINTER(DieId)),
    "dcmi_get_device_health": (c_int, c_int, _P_UINT),
    "dcmi_get_device_errorcode_v2": (c_int, c_int, _P_INT, _P_UINT, c_uint),
    "dcmi_get_device_errorcode": (c_int, c_int, _P_INT, _P_UINT, _P_INT),
    "dcmi_get_device_temperature": (c_int, c_int, _P_INT),
    "dcmi_get_device_power_info": (c_int, c_int, _P_INT),
    "dcmi_mcu_get_power_info": (c_int, _P_INT),
    "dcmi_get_device_utilization_rate": (c_int, c_int, c_int, _P_UINT),
    "dcmi_get_device_hbm_info": (c_int, c_int, POINTER(HbmInfo)),
    "dcmi_get_device_memory_info_v3": (c_int, c_int, POINTER(MemoryInfoV3)),
    "dcmi_get_memory_info": (c_int, c_int, POINTER(MemoryInfoV1)),
    "dcmi_get_device_info": (c_int, c_int, c_int, c_uint, c_void_p, _P_UINT),
    "dcmi_create_vdevice": (c_int, c_int, POINTER(CreateVdevRes), POINTER(CreateVdevOut)),
    "dcmi_set_destroy_vdevice": (c_int, c_int, c_uint),
}
