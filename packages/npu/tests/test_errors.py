"""DCMI return codes become errors that name the call, the chip and the documented meaning."""

from __future__ import annotations

import pytest

from vnpu_npu import errors


@pytest.mark.parametrize(
    ("code", "cls", "meaning", "retryable"),
    [
        (-8001, errors.DriverError, "invalid parameter", False),
        (-8002, errors.DriverError, "operation not permitted", False),
        (-8005, errors.DriverError, "inner error", False),
        (-8006, errors.DriverError, "timeout", True),
        (-8007, errors.DriverError, "invalid device id", False),
        (-8008, errors.ChipGone, "device does not exist", True),
        (-8009, errors.DriverError, "ioctl failed", True),
        (-8012, errors.ChipGone, "not ready", True),
        (-8013, errors.NotSupported, "not supported in container", False),
        (-8017, errors.DriverError, "upgrading", True),
        (-8020, errors.DriverError, "resource occupied", True),
        (-8022, errors.DriverError, "partition not right", False),
        (-8023, errors.DriverError, "config info does not exist", False),
        (-8255, errors.NotSupported, "not supported", False),
        (-99998, errors.NotSupported, "function missing from this libdcmi.so", False),
        (-8100, errors.DriverError, "unknown code", False),
    ],
)
def test_translate(code: int, cls: type[errors.DriverError], meaning: str, retryable: bool) -> None:
    exc = errors.translate(code, "dcmi_get_device_health", chip=3)

    assert type(exc) is cls
    assert (exc.code, exc.function, exc.chip, exc.meaning) == (
        code,
        "dcmi_get_device_health",
        3,
        meaning,
    )
    assert exc.retryable is retryable
    assert str(exc) == f"dcmi_get_device_health on chip 3 failed with {code} ({meaning})"


def test_every_documented_code_has_a_meaning() -> None:
    documented = [-8001, -8002, -8003, -8004, -8005, -8006, -8007, -8008, -8009, -8010, -8011]
    documented += [-8012, -8013, -8014, -8015, -8016, -8017, -8020, -8022, -8023, -8255]
    assert all(errors.meaning(code) != "unknown code" for code in documented)


def test_errors_share_one_root() -> None:
    for cls in (
        errors.LibraryError,
        errors.SimError,
        errors.DriverError,
        errors.NotSupported,
        errors.ChipGone,
        errors.VnpuNotFound,
        errors.VnpuInUse,
        errors.InvalidVnpuRequest,
        errors.TemplateRefused,
        errors.StateFileError,
        errors.WrongFormat,
        errors.BadRecord,
    ):
        assert issubclass(cls, errors.NpuError)


def test_template_refused_carries_the_budget() -> None:
    exc = errors.TemplateRefused(-8020, "dcmi_create_vdevice", 0, "vir04", "media", 2, 1, 3, "venc")

    assert (exc.template, exc.budget, exc.engine, exc.asked, exc.free, exc.total) == (
        "vir04",
        "media",
        "venc",
        2,
        1,
        3,
    )
    assert "vir04 needs 2 media (venc), chip has 1 of 3 free" in str(exc)
    assert not exc.retryable  # resource occupied, but only a destroy makes room


def test_invalid_request_names_field_and_value() -> None:
    exc = errors.InvalidVnpuRequest(-8001, "dcmi_create_vdevice", 1, "vnpu_id", 140, "out of range")

    assert (exc.field, exc.value) == ("vnpu_id", 140)
    assert "vnpu_id=140: out of range" in str(exc)


def test_library_and_sim_errors_name_what_failed() -> None:
    lib = errors.LibraryError(("/a/libdcmi.so", "/b/libdcmi.so"), "not found")
    assert str(lib) == "libdcmi.so: not found (tried /a/libdcmi.so, /b/libdcmi.so)"
    sim = errors.SimError("chips.yaml", "overrides.2.health", "bad", "use ok, minor")
    assert (sim.file, sim.field, sim.value) == ("chips.yaml", "overrides.2.health", "bad")
    assert str(sim) == "chips.yaml: overrides.2.health: use ok, minor (got 'bad')"
    assert not lib.retryable
    assert not sim.retryable
