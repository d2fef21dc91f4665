"""Conformance, vNPU side: create, list, destroy, budgets and id ranges behave alike on every backend.

A 310P3 chip has 7 vNPU slots, 24576 MiB, 8 AI cores, 7 AI CPUs and media engines
(vpc 12, vdec 12, jpegd 16, jpege 8, venc 3); the templates take what
``vnpu_core.catalog`` says. Refusals must name the same budget with the same figures on
the simulated backend and through the DCMI backend.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from vnpu_npu import backend, errors
from vnpu_npu.sim import control

Open = Callable[[Path], backend.Backend]


def test_create_list_destroy(open_backend: Open, node: Path) -> None:
    npu = open_backend(node)

    first = npu.create_vnpu(0, "vir02")
    second = npu.create_vnpu(0, "vir01")
    assert (first, second) == (100, 101)
    assert npu.vnpus(0) == (
        backend.VnpuInfo(100, 0, "vir02", False, 2, 6144, 0),
        backend.VnpuInfo(101, 0, "vir01", False, 1, 3072, 0),
    )
    assert npu.vnpus(1) == ()

    npu.destroy_vnpu(0, 100)
    assert [v.vnpu_id for v in npu.vnpus(0)] == [101]
    assert npu.create_vnpu(0, "vir04") == 100  # the lowest free id again


def test_each_chip_has_its_own_id_range(open_backend: Open, node: Path) -> None:
    npu = open_backend(node)

    assert npu.create_vnpu(1, "vir01") == 116
    assert npu.create_vnpu(3, "vir01", vnpu_id=155) == 155
    assert npu.create_vnpu(0, "vir01", vnpu_id=107) == 107


@pytest.mark.parametrize("vnpu_id", [99, 108, 116])
def test_310p_ids_outside_the_chip_range_are_refused(
    open_backend: Open, node: Path, vnpu_id: int
) -> None:
    npu = open_backend(node)

    with pytest.raises(errors.InvalidVnpuRequest) as caught:
        npu.create_vnpu(0, "vir01", vnpu_id=vnpu_id)
    assert (caught.value.code, caught.value.field, caught.value.value) == (
        -8001,
        "vnpu_id",
        vnpu_id,
    )
    assert not caught.value.retryable
    assert npu.vnpus(0) == ()


def test_910_chips_give_out_16_ids(open_backend: Open, make_node: Callable[..., Path]) -> None:
    npu = open_backend(make_node(chip="910B3", chips=4, server="pcie"))

    assert npu.create_vnpu(2, "vir05_1c_16g", vnpu_id=147) == 147
    with pytest.raises(errors.InvalidVnpuRequest) as caught:
        npu.create_vnpu(2, "vir05_1c_16g", vnpu_id=148)
    assert caught.value.field == "vnpu_id"


def test_a_taken_id_is_refused(open_backend: Open, node: Path) -> None:
    npu = open_backend(node)
    npu.create_vnpu(0, "vir01", vnpu_id=103)

    with pytest.raises(errors.InvalidVnpuRequest) as caught:
        npu.create_vnpu(0, "vir02", vnpu_id=103)
    assert (caught.value.code, caught.value.field, caught.value.value) == (-8020, "vnpu_id", 103)
    assert [(v.vnpu_id, v.template) for v in npu.vnpus(0)] == [(103, "vir01")]


def test_unknown_template_is_refused(open_backend: Open, node: Path) -> None:
    with pytest.raises(errors.InvalidVnpuRequest) as caught:
        open_backend(node).create_vnpu(0, "vir05_1c_16g")
    assert (caught.value.code, caught.value.field, caught.value.value) == (
        -8001,
        "template",
        "vir05_1c_16g",
    )
    assert "vir01" in str(caught.value)  # the message lists the chip's templates


def _refusal(npu: backend.Backend, chip: int, template: str) -> errors.TemplateRefused:
    before = npu.vnpus(chip)
    with pytest.raises(errors.TemplateRefused) as caught:
        npu.create_vnpu(chip, template)
    assert npu.vnpus(chip) == before, "a refused create must leave the chip as it was"
    assert caught.value.code == -8020
    assert not caught.value.retryable
    return caught.value


def test_vnpu_count_budget(open_backend: Open, node: Path) -> None:
    npu = open_backend(node)
    for _ in range(7):
        npu.create_vnpu(0, "vir01")

    refused = _refusal(npu, 0, "vir01")
    assert (refused.budget, refused.asked, refused.free, refused.total) == ("vnpu-slots", 1, 0, 7)
    assert "vir01" in str(refused)


def test_ai_cpu_budget(open_backend: Open, node: Path) -> None:
    npu = open_backend(node)
    npu.create_vnpu(0, "vir04")  # 4 AI cores, 4 AI CPUs
    npu.create_vnpu(0, "vir02")  # 2 AI cores, 2 AI CPUs

    refused = _refusal(npu, 0, "vir02")  # AI cores would fit (8 of 8); AI CPUs would not (8 of 7)
    assert (refused.budget, refused.asked, refused.free, refused.total) == ("aicpu", 2, 1, 7)
    assert npu.create_vnpu(0, "vir02_1c") == 102  # one AI CPU still fits


def test_memory_budget(open_backend: Open, node: Path) -> None:
    npu = open_backend(node)
    npu.create_vnpu(0, "vir04")
    npu.create_vnpu(0, "vir04_3c")

    refused = _refusal(npu, 0, "vir01")
    assert (refused.budget, refused.asked, refused.free, refused.total) == (
        "memory",
        3072,
        0,
        24576,
    )


def test_ai_core_budget(open_backend: Open, make_node: Callable[..., Path]) -> None:
    npu = open_backend(make_node(overrides={0: {"memory": 49152}}))
    npu.create_vnpu(0, "vir04")
    npu.create_vnpu(0, "vir04_3c")

    refused = _refusal(npu, 0, "vir01")
    assert (refused.budget, refused.asked, refused.free, refused.total) == ("aicore", 1, 0, 8)


def test_media_budget(open_backend: Open, make_node: Callable[..., Path]) -> None:
    npu = open_backend(make_node(overrides={0: {"media": {"venc": 1}}}))

    refused = _refusal(npu, 0, "vir04")  # needs 2 video encoders, the chip has 1
    assert (refused.budget, refused.engine, refused.asked, refused.free, refused.total) == (
        "media",
        "venc",
        2,
        1,
        1,
    )
    assert npu.create_vnpu(0, "vir04_3c") == 100  # one encoder is enough


def test_budgets_are_per_chip(open_backend: Open, node: Path) -> None:
    npu = open_backend(node)
    for _ in range(7):
        npu.create_vnpu(0, "vir01")

    assert npu.create_vnpu(1, "vir04") == 116


def test_destroy_of_an_unknown_id(open_backend: Open, node: Path) -> None:
    npu = open_backend(node)
    npu.create_vnpu(0, "vir01")

    with pytest.raises(errors.VnpuNotFound) as caught:
        npu.destroy_vnpu(0, 101)
    assert (caught.value.vnpu_id, caught.value.chip, caught.value.retryable) == (101, 0, False)
    with pytest.raises(errors.VnpuNotFound):
        npu.destroy_vnpu(1, 100)  # vNPU 100 lives on chip 0
    with pytest.raises(errors.VnpuNotFound):
        npu.destroy_vnpu(0, 65535)  # DCMI's "destroy all" is not a vNPU id
    assert [v.vnpu_id for v in npu.vnpus(0)] == [100]


def test_a_vnpu_in_use_is_not_destroyed(open_backend: Open, node: Path) -> None:
    npu = open_backend(node)
    vnpu_id = npu.create_vnpu(0, "vir02")
    control.set_vnpu_load(node, vnpu_id, in_use=True)

    assert npu.vnpus(0)[0].container_used
    with pytest.raises(errors.VnpuInUse) as caught:
        npu.destroy_vnpu(0, vnpu_id)
    assert (caught.value.code, caught.value.retryable) == (-8020, True)

    control.set_vnpu_load(node, vnpu_id, in_use=False)
    npu.destroy_vnpu(0, vnpu_id)
    assert npu.vnpus(0) == ()


def test_vnpu_usage_on_310p(open_backend: Open, node: Path) -> None:
    npu = open_backend(node)
    vnpu_id = npu.create_vnpu(2, "vir01")
    control.set_vnpu_load(node, vnpu_id, aicore_percent=30, memory_mib=512)

    usage = npu.vnpu_usage(2, vnpu_id)
    assert usage == backend.VnpuUsage(vnpu_id, 30, 3072 * 1024, (3072 - 512) * 1024)
    assert usage.memory_used_kib == 512 * 1024
    assert npu.vnpus(2)[0].memory_used_mib == 512
    with pytest.raises(errors.VnpuNotFound):
        npu.vnpu_usage(2, vnpu_id + 1)


def test_vnpu_usage_is_not_supported_on_910(
    open_backend: Open, make_node: Callable[..., Path]
) -> None:
    npu = open_backend(make_node(chip="910B3", chips=1, server="pcie"))
    vnpu_id = npu.create_vnpu(0, "vir10_3c_32g")

    with pytest.raises(errors.NotSupported) as caught:
        npu.vnpu_usage(0, vnpu_id)
    assert (caught.value.code, caught.value.retryable) == (-8255, False)
    assert npu.vnpus(0) == (backend.VnpuInfo(vnpu_id, 0, "vir10_3c_32g", False, 10, 32768, None),)


def test_910_budgets(open_backend: Open, make_node: Callable[..., Path]) -> None:
    npu = open_backend(make_node(chip="910B3", chips=1, server="pcie"))
    npu.create_vnpu(0, "vir10_3c_32g")
    npu.create_vnpu(0, "vir05_1c_16g")
    npu.create_vnpu(0, "vir05_1c_16g")

    refused = _refusal(npu, 0, "vir05_1c_16g")
    assert (refused.budget, refused.asked, refused.free, refused.total) == (
        "memory",
        16384,
        0,
        65536,
    )
