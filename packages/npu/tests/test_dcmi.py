"""The DCMI backend's own duties: finding libdcmi.so, ctypes layouts, old-driver fallbacks."""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import pytest

from vnpu_npu import errors
from vnpu_npu.dcmi import backend as dcmi_backend
from vnpu_npu.dcmi import library, structs
from vnpu_npu.sim import backend as sim_backend
from vnpu_npu.sim import control

STRUCTS = [
    structs.ChipInfo,
    structs.PcieInfoAll,
    structs.DieId,
    structs.HbmInfo,
    structs.MemoryInfoV3,
    structs.MemoryInfoV1,
    structs.BaseResource,
    structs.ComputingResource,
    structs.MediaResource,
    structs.CreateVdevRes,
    structs.CreateVdevOut,
    structs.VdevQueryInfo,
    structs.VdevQuery,
    structs.SocFreeResource,
    structs.SocTotalResource,
]


@pytest.fixture
def dcmi_env(node: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    sim_backend.SimBackend(node)
    monkeypatch.setenv("VNPU_SIM_DIR", str(node))
    return node


@pytest.mark.parametrize("struct", STRUCTS, ids=lambda s: s.__name__)
def test_ctypes_layout_matches_the_c_compiler(
    struct: type[ctypes.Structure], stand_in: dict[str, Path]
) -> None:
    lib = ctypes.CDLL(str(stand_in["current"]))
    lib.vnpu_stand_in_sizeof.argtypes = (ctypes.c_char_p,)
    lib.vnpu_stand_in_sizeof.restype = ctypes.c_ulong

    assert ctypes.sizeof(struct) == lib.vnpu_stand_in_sizeof(struct.__name__.encode())


def test_documented_sizes() -> None:
    assert ctypes.sizeof(structs.PcieInfoAll) == 64  # the header says so
    assert ctypes.sizeof(structs.ComputingResource) % 8 == 0


def test_search_order_follows_ld_library_path() -> None:
    found = library.candidates(None, {"LD_LIBRARY_PATH": "/opt/a::/opt/b"})

    assert found == ("/opt/a/libdcmi.so", "/opt/b/libdcmi.so", *library.DEFAULT_PATHS)
    assert library.candidates("/x/libdcmi.so", {"LD_LIBRARY_PATH": "/opt/a"}) == ("/x/libdcmi.so",)


def test_loads_from_ld_library_path(
    dcmi_env: Path, stand_in: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LD_LIBRARY_PATH", f"/nonexistent:{stand_in['current'].parent}")
    npu = dcmi_backend.DcmiBackend()

    assert npu.lib.path == str(stand_in["current"])
    assert len(npu.chips()) == 4


def test_missing_library_names_the_paths_tried(tmp_path: Path) -> None:
    wanted = str(tmp_path / "libdcmi.so")
    with pytest.raises(errors.LibraryError) as caught:
        dcmi_backend.DcmiBackend(wanted)
    assert caught.value.paths == (wanted,)
    assert wanted in str(caught.value)


def test_a_file_that_is_not_a_library_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "libdcmi.so"
    fake.write_text("not an ELF file")
    with pytest.raises(errors.LibraryError, match="cannot load"):
        dcmi_backend.DcmiBackend(str(fake))


def test_failed_init_is_a_driver_error(
    tmp_path: Path, stand_in: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "fresh" / "libdcmi.so"  # a path not initialised yet in this process
    copy.parent.mkdir()
    shutil.copy(stand_in["current"], copy)
    monkeypatch.setenv("VNPU_SIM_DIR", str(tmp_path / "no-node"))

    with pytest.raises(errors.DriverError) as caught:
        dcmi_backend.DcmiBackend(str(copy))
    assert (caught.value.code, caught.value.function) == (-8005, "dcmi_init")


def test_driver_codes_are_translated(dcmi_env: Path, stand_in: dict[str, Path]) -> None:
    lib = library.Library(str(stand_in["current"]))
    count = ctypes.c_int()

    with pytest.raises(errors.DriverError) as caught:
        lib.call("dcmi_get_device_num_in_card", 42, ctypes.byref(count))
    assert (caught.value.code, caught.value.meaning) == (-8007, "invalid device id")
    control.inject_fault(dcmi_env, 0, gone=True)
    health = ctypes.c_uint()
    with pytest.raises(errors.ChipGone):
        lib.call("dcmi_get_device_health", 0, 0, ctypes.byref(health), chip=0)


def test_old_driver_lacks_symbols_and_says_so(dcmi_env: Path, stand_in: dict[str, Path]) -> None:
    old = library.Library(str(stand_in["old"]))
    current = library.Library(str(stand_in["current"]))

    assert set(old.missing) >= {
        "dcmi_get_card_list",
        "dcmi_get_device_errorcode_v2",
        "dcmi_get_device_memory_info_v3",
    }
    assert "dcmi_get_card_list" not in current.missing
    with pytest.raises(errors.NotSupported) as caught:
        old.call("dcmi_get_device_errorcode_v2", chip=0)
    assert (caught.value.code, caught.value.retryable) == (-99998, False)


def test_old_driver_falls_back(dcmi_env: Path, stand_in: dict[str, Path]) -> None:
    npu = dcmi_backend.DcmiBackend(str(stand_in["old"]))
    control.inject_fault(dcmi_env, 3, codes=[0x80E18402, 0x81078603])

    assert [c.phy_id for c in npu.chips()] == [0, 1, 2, 3]  # dcmi_get_card_num_list
    assert npu.health(3).error_codes == (0x80E18402, 0x81078603)  # dcmi_get_device_errorcode
    assert npu.memory(0).source == "memory_info"  # dcmi_get_memory_info


def test_sim_and_dcmi_see_the_same_node(dcmi_env: Path, stand_in: dict[str, Path]) -> None:
    sim = sim_backend.SimBackend(dcmi_env)
    npu = dcmi_backend.DcmiBackend(str(stand_in["current"]))

    assert npu.chips() == sim.chips()
    created = npu.create_vnpu(1, "vir02")
    assert sim.vnpus(1) == npu.vnpus(1)
    sim.destroy_vnpu(1, created)
    assert npu.vnpus(1) == ()


def test_a_chip_gone_before_the_first_enumeration_is_listed(
    dcmi_env: Path, stand_in: dict[str, Path]
) -> None:
    control.inject_fault(dcmi_env, 2, gone=True)
    npu = dcmi_backend.DcmiBackend(str(stand_in["current"]))

    chip = npu.chips()[2]
    assert (chip.phy_id, chip.memory_mib) == (2, 24576)  # memory from the catalog while gone


def test_template_names_longer_than_the_driver_field_are_refused(
    dcmi_env: Path, stand_in: dict[str, Path]
) -> None:
    npu = dcmi_backend.DcmiBackend(str(stand_in["current"]))
    with pytest.raises(errors.InvalidVnpuRequest) as caught:
        npu.create_vnpu(0, "v" * 32)
    assert caught.value.field == "template"
