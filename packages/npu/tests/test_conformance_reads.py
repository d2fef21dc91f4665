"""Conformance, read side: every backend enumerates, reports health, sensors and memory alike.

Each test runs three times (``kind``): the simulated backend, the DCMI backend on the
stand-in libdcmi.so, and the DCMI backend on the old-driver build of it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from vnpu_npu import backend, errors, faults
from vnpu_npu.sim import control

UUID = re.compile(r"^[0-9A-F]{8}(-[0-9A-F]{8}){4}$")
BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def test_conforms_to_the_protocol(
    open_backend: Callable[[Path], backend.Backend], node: Path
) -> None:
    assert isinstance(open_backend(node), backend.Backend)


def test_enumerates_310p_duo_chips(
    open_backend: Callable[[Path], backend.Backend], node: Path
) -> None:
    chips = open_backend(node).chips()

    assert [c.phy_id for c in chips] == [0, 1, 2, 3]
    assert [(c.card_id, c.device_id) for c in chips] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [c.logic_id for c in chips] == [0, 1, 2, 3]
    for chip in chips:
        assert UUID.match(chip.uuid), chip.uuid
        assert BDF.match(chip.bdf), chip.bdf
        assert (chip.chip_name, chip.model, chip.model_name) == (
            "310P3",
            "310P3",
            "310P3-Ascend-V1",
        )
        assert (chip.aicore, chip.memory_mib) == (8, 24576)
        assert chip.memory_kind is backend.MemoryKind.DDR
    assert len({c.uuid for c in chips}) == 4
    assert len({c.bdf for c in chips}) == 4


def test_enumerates_910b_chips_one_per_card(
    open_backend: Callable[[Path], backend.Backend], make_node: Callable[..., Path]
) -> None:
    chips = open_backend(make_node(chip="910B3", chips=8, server="910b-8")).chips()

    assert [c.card_id for c in chips] == list(range(8))
    assert {(c.model, c.aicore, c.memory_mib) for c in chips} == {("910B3", 20, 65536)}
    assert {c.memory_kind for c in chips} == {backend.MemoryKind.HBM}


def test_logic_ids_map_to_physical_ids(
    open_backend: Callable[[Path], backend.Backend], make_node: Callable[..., Path]
) -> None:
    sim_dir = make_node(overrides={0: {"logic": 3}, 3: {"logic": 0}})
    chips = open_backend(sim_dir).chips()

    assert [(c.phy_id, c.logic_id) for c in chips] == [(0, 3), (1, 1), (2, 2), (3, 0)]


def test_uuid_comes_from_the_seed_and_overrides(
    open_backend: Callable[[Path], backend.Backend], make_node: Callable[..., Path]
) -> None:
    uuid = "185011D4-21104518-A0C4ED94-14CC040A-56102003"
    first = open_backend(make_node("a", overrides={1: {"uuid": uuid}})).chips()
    again = open_backend(make_node("b", overrides={1: {"uuid": uuid}})).chips()
    other = open_backend(make_node("c", seed="another-node")).chips()

    assert first[1].uuid == uuid
    assert [c.uuid for c in first] == [c.uuid for c in again]
    assert {c.uuid for c in first}.isdisjoint(c.uuid for c in other)


def test_healthy_chip_has_no_codes(
    open_backend: Callable[[Path], backend.Backend], node: Path
) -> None:
    npu = open_backend(node)

    assert npu.health(0) == backend.ChipHealth(backend.Health.OK, ())
    assert faults.assess(npu.health(0)).healthy


def test_injected_fault_shows_and_clears(
    open_backend: Callable[[Path], backend.Backend], node: Path
) -> None:
    npu = open_backend(node)
    control.inject_fault(node, 2, health=backend.Health.CRITICAL, codes=[0x80E18402])

    health = npu.health(2)
    assert health == backend.ChipHealth(backend.Health.CRITICAL, (0x80E18402,))
    verdict = faults.assess(health)
    assert (verdict.level, verdict.healthy) == (faults.FaultLevel.SEPARATE_NPU, False)
    assert npu.health(1).health is backend.Health.OK

    control.clear_fault(node, 2)
    assert npu.health(2) == backend.ChipHealth(backend.Health.OK, ())


def test_several_codes_keep_their_order(
    open_backend: Callable[[Path], backend.Backend], node: Path
) -> None:
    npu = open_backend(node)
    control.inject_fault(node, 0, health=backend.Health.MINOR, codes=[0x80E21007, 0x81078603])
    control.inject_fault(node, 0, codes=[0x80C98008])

    assert npu.health(0) == backend.ChipHealth(
        backend.Health.CRITICAL, (0x80E21007, 0x81078603, 0x80C98008)
    )


def test_gone_chip_stays_listed_reads_fail_and_it_recovers(
    open_backend: Callable[[Path], backend.Backend], node: Path
) -> None:
    npu = open_backend(node)
    before = npu.chips()
    control.inject_fault(node, 1, gone=True)

    with pytest.raises(errors.ChipGone) as caught:
        npu.health(1)
    assert (caught.value.code, caught.value.chip, caught.value.retryable) == (-8012, 1, True)
    assert faults.assess(None).codes == (faults.CARD_DROP,)
    for read in (npu.temperature, npu.aicore_percent, npu.memory, npu.vnpus):
        with pytest.raises(errors.ChipGone):
            read(1)
    with pytest.raises(errors.ChipGone):
        npu.create_vnpu(1, "vir01")
    assert [(c.phy_id, c.uuid) for c in npu.chips()] == [(c.phy_id, c.uuid) for c in before]
    assert npu.health(3).health is backend.Health.OK

    control.clear_fault(node, 1)
    assert npu.health(1) == backend.ChipHealth(backend.Health.OK, ())
    assert npu.temperature(1) == 45


def test_unknown_chip_is_gone(open_backend: Callable[[Path], backend.Backend], node: Path) -> None:
    with pytest.raises(errors.ChipGone) as caught:
        open_backend(node).health(9)
    assert caught.value.code == -8008
    assert "chip 9" in str(caught.value)


def test_temperature_power_and_aicore_units(
    open_backend: Callable[[Path], backend.Backend], node: Path
) -> None:
    npu = open_backend(node)
    control.set_load(node, 0, temperature=71, power_watts=23.4, aicore_percent=55)

    assert npu.temperature(0) == 71
    assert npu.aicore_percent(0) == 55
    # 310P reports its card's power: chips 0 and 1 share card 0 (12.0 W by default).
    assert npu.power(0) == backend.Power(35.4, backend.PowerScope.CARD)
    assert npu.power(1) == backend.Power(35.4, backend.PowerScope.CARD)
    assert npu.power(2) == backend.Power(24.0, backend.PowerScope.CARD)


def test_a_card_missing_a_chip_gives_no_power(
    open_backend: Callable[[Path], backend.Backend], node: Path
) -> None:
    npu = open_backend(node)
    control.inject_fault(node, 1, gone=True)

    with pytest.raises(errors.ChipGone):
        npu.power(0)
    assert npu.power(2).watts == 24.0


def test_910_power_is_the_chip_s_in_tenths_of_a_watt(
    open_backend: Callable[[Path], backend.Backend], make_node: Callable[..., Path]
) -> None:
    sim_dir = make_node(chip="910B3", chips=2, server="pcie", overrides={1: {"power": 215.5}})
    npu = open_backend(sim_dir)

    assert npu.power(1) == backend.Power(215.5, backend.PowerScope.CHIP)
    assert npu.power(0) == backend.Power(90.0, backend.PowerScope.CHIP)


def test_ddr_memory_of_310p(
    open_backend: Callable[[Path], backend.Backend], node: Path, kind: str
) -> None:
    npu = open_backend(node)
    source = "memory_info" if kind == "dcmi-old" else "memory_info_v3"
    assert npu.memory(0) == backend.Memory(backend.MemoryKind.DDR, 24576, 0, source)

    control.set_load(node, 0, memory_mib=6144)  # a whole percent: exact even through the v1 call
    assert npu.memory(0).used_mib == 6144

    control.set_load(node, 0, memory_mib=1000)
    # The legacy call reports whole percent only: 1000 MiB of 24576 reads as 4 %.
    expected = 24576 * 4 // 100 if kind == "dcmi-old" else 1000
    assert npu.memory(0).used_mib == expected


def test_hbm_memory_of_910(
    open_backend: Callable[[Path], backend.Backend], make_node: Callable[..., Path]
) -> None:
    sim_dir = make_node(chip="910B4", chips=1, server="pcie")
    npu = open_backend(sim_dir)
    assert npu.memory(0) == backend.Memory(backend.MemoryKind.HBM, 32768, 0, "hbm_info")

    control.set_load(sim_dir, 0, memory_mib=3000)
    assert npu.memory(0).used_mib == 3000


def test_chip_memory_counts_vnpu_processes(
    open_backend: Callable[[Path], backend.Backend], node: Path
) -> None:
    npu = open_backend(node)
    vnpu_id = npu.create_vnpu(0, "vir02")
    control.set_load(node, 0, memory_mib=6144)
    control.set_vnpu_load(node, vnpu_id, memory_mib=6144)

    assert npu.memory(0).used_mib == 12288
