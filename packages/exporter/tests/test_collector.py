"""The collector on simulated chips: values and units, injected faults and load, missing reads."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from vnpu_exporter import metrics
from vnpu_npu import backend
from vnpu_npu.sim import control

GiB = 1024**3
MiB = 1024**2
Group = metrics.Group
Reason = metrics.ErrorReason


def test_chip_values_and_units(kit: Any, node310: Any) -> None:
    control.set_load(
        node310.sim_dir, 1, aicore_percent=55, memory_mib=1024, temperature=71, power_watts=13.5
    )
    exp = kit.Exporter(node310).refresh()
    chip = node310.chips()[1]
    labels = kit.chip_labels(chip)
    assert (
        exp.value(
            "vnpu_chip_info",
            **labels,
            chip_name="310P3",
            model_name="310P3-Ascend-V1",
            bdf=chip.bdf,
            card="0",
            device="1",
            logic="1",
            memory_kind="ddr",
            backend="sim",
        )
        == 1
    )
    assert exp.value("vnpu_chip_temperature_celsius", **labels) == 71
    assert exp.value("vnpu_chip_aicore_utilization_ratio", **labels) == pytest.approx(0.55)
    assert exp.value("vnpu_chip_memory_total_bytes", **labels) == 24 * GiB
    assert exp.value("vnpu_chip_memory_used_bytes", **labels) == 1024 * MiB
    assert exp.value("vnpu_chip_aicores", **labels) == 8
    # 310P measures the card: chips 0 and 1 share card 0, whose power is the sum of both
    assert exp.value("vnpu_chip_power_watts", **labels, scope="card") == pytest.approx(13.5 + 12)
    assert exp.value("vnpu_chip_present", **labels) == 1
    assert exp.value("vnpu_chip_healthy", **labels) == 1
    assert exp.value("vnpu_chip_fault_level", **labels, level="Normal") == 1
    assert exp.value("vnpu_chip_fault_level", **labels, level="SeparateNPU") == 0


def test_910_power_is_per_chip_and_memory_is_hbm(kit: Any, node910: Any) -> None:
    control.set_load(node910.sim_dir, 3, power_watts=250)
    exp = kit.Exporter(node910).refresh()
    chip = node910.chips()[3]
    labels = kit.chip_labels(chip, "Ascend910B3")
    assert exp.value("vnpu_chip_power_watts", **labels, scope="chip") == 250
    assert exp.value("vnpu_chip_memory_total_bytes", **labels) == 64 * GiB
    assert exp.value("vnpu_chip_aicores", **labels) == 20


@pytest.mark.parametrize(
    ("codes", "health", "level", "healthy"),
    [
        ([0x80E18402], None, "SeparateNPU", 0),  # a known separate-the-chip fault
        ([0x80E18405], backend.Health.MINOR, "SubHealthFault", 1),  # sub-health keeps it usable
        ([0x8C03A000], None, "RestartNPU", 0),
        ([0x12345678], backend.Health.MINOR, "NotHandleFault", 1),  # unknown code, minor alarm
        ([0x12345678], backend.Health.MAJOR, "SeparateNPU", 0),  # unknown code, major alarm
        ([], backend.Health.CRITICAL, "SeparateNPU", 0),  # an alarm without a code
    ],
)
def test_injected_faults_set_level_health_and_codes(
    kit: Any,
    node310: Any,
    codes: list[int],
    health: backend.Health | None,
    level: str,
    healthy: int,
) -> None:
    control.inject_fault(node310.sim_dir, 2, health=health, codes=codes)
    exp = kit.Exporter(node310).refresh()
    labels = kit.chip_labels(node310.chips()[2])
    assert exp.value("vnpu_chip_healthy", **labels) == healthy
    assert exp.value("vnpu_chip_fault_level", **labels, level=level) == 1
    assert sum(v for _, v in exp.samples("vnpu_chip_fault_level") if _["chip"] == "2") == 1
    found = {(s["code"], s["level"]) for s, _ in exp.samples("vnpu_chip_fault_code")}
    assert found == {(f"{c:08X}", level) for c in codes}


def test_fault_clears_and_health_recovers(kit: Any, node310: Any) -> None:
    control.inject_fault(node310.sim_dir, 0, codes=[0x80E18402])
    exp = kit.Exporter(node310).refresh()
    labels = kit.chip_labels(node310.chips()[0])
    assert exp.value("vnpu_chip_healthy", **labels) == 0
    control.clear_fault(node310.sim_dir, 0)
    exp.refresh()
    assert exp.value("vnpu_chip_healthy", **labels) == 1
    assert exp.samples("vnpu_chip_fault_code") == []


def test_a_gone_chip_reads_as_gone_and_its_values_go_missing(kit: Any, node310: Any) -> None:
    control.set_load(node310.sim_dir, 3, temperature=60)
    exp = kit.Exporter(node310).refresh()
    labels = kit.chip_labels(node310.chips()[3])
    assert exp.value("vnpu_chip_temperature_celsius", **labels) == 60
    control.inject_fault(node310.sim_dir, 3, gone=True)
    exp.refresh()
    assert exp.value("vnpu_chip_present", **labels) == 0
    assert exp.value("vnpu_chip_healthy", **labels) == 0
    assert exp.value("vnpu_chip_fault_level", **labels, level="RestartNPU") == 1
    assert exp.value("vnpu_chip_fault_code", **labels, code="40F84E00", level="RestartNPU") == 1
    # the last reading is not repeated, and no zero stands in for it
    assert exp.value("vnpu_chip_temperature_celsius", **labels) is None
    assert exp.value("vnpu_chip_memory_used_bytes", **labels) is None
    assert exp.value("vnpu_chip_aicore_utilization_ratio", **labels) is None
    assert (
        exp.value(
            "vnpu_chip_info",
            **labels,
            chip_name="310P3",
            model_name="310P3-Ascend-V1",
            bdf="0000:04:00.0",
            card="1",
            device="1",
            logic="3",
            memory_kind="ddr",
            backend="sim",
        )
        == 1
    )
    # its card mate still reads, except the card power the MCU cannot give without chip 3
    mate = kit.chip_labels(node310.chips()[2])
    assert exp.value("vnpu_chip_temperature_celsius", **mate) == 45
    assert exp.value("vnpu_chip_power_watts", **mate, scope="card") is None
    assert exp.errors(Group.HEALTH, Reason.CHIP_GONE) == 1
    assert (
        exp.errors(Group.SENSORS, Reason.CHIP_GONE) == 3
    )  # chip 3 twice, chip 2's card power once
    control.clear_fault(node310.sim_dir, 3)
    exp.refresh()
    assert exp.value("vnpu_chip_temperature_celsius", **labels) == 60
    assert exp.value("vnpu_chip_present", **labels) == 1


class FlakyBackend:
    """The simulated node, but chosen calls fail with a driver error or block until released."""

    def __init__(self, inner: backend.Backend) -> None:
        self.inner = inner
        self.fail_temperature = False
        self.block_health = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def temperature(self, phy_id: int) -> int:
        if self.fail_temperature:
            from vnpu_npu import errors

            raise errors.translate(-8005, "dcmi_get_device_temperature", phy_id)
        return self.inner.temperature(phy_id)

    def health(self, phy_id: int) -> backend.ChipHealth:
        if self.block_health.is_set():
            self.release.wait(10)
        return self.inner.health(phy_id)


def test_a_failed_read_is_missing_and_counted_never_stale(kit: Any, node310: Any) -> None:
    flaky = FlakyBackend(node310)
    exp = kit.Exporter(flaky).refresh()
    assert len(exp.samples("vnpu_chip_temperature_celsius")) == 4
    flaky.fail_temperature = True
    exp.refresh()
    assert exp.samples("vnpu_chip_temperature_celsius") == []
    assert exp.errors(Group.SENSORS, Reason.DRIVER) == 4
    assert len(exp.samples("vnpu_chip_power_watts")) == 4  # the same group's other read still works


def test_a_group_stuck_in_a_call_is_dropped_as_stale_and_counted_once(
    kit: Any, node310: Any
) -> None:
    flaky = FlakyBackend(node310)
    exp = kit.Exporter(flaky)
    exp.sampler.intervals[Group.HEALTH] = 1.0
    exp.refresh()
    assert len(exp.samples("vnpu_chip_healthy")) == 4
    flaky.block_health.set()
    worker = threading.Thread(target=exp.sampler.refresh, args=(Group.HEALTH,))
    worker.start()  # blocks inside health() until released
    exp.clock.now += 2.5  # within 3 intervals: still served
    assert len(exp.samples("vnpu_chip_healthy")) == 4
    exp.clock.now += 1.0  # past 3 intervals: dropped
    assert exp.samples("vnpu_chip_healthy") == []
    assert exp.samples("vnpu_chip_healthy") == []
    assert exp.errors(Group.HEALTH, Reason.STALE) == 1
    assert len(exp.samples("vnpu_chip_temperature_celsius")) == 4  # other groups unaffected
    flaky.block_health.clear()
    flaky.release.set()
    worker.join(5)
    assert len(exp.samples("vnpu_chip_healthy")) == 4


def test_scrape_does_not_call_the_driver(kit: Any, node310: Any) -> None:
    flaky = FlakyBackend(node310)
    exp = kit.Exporter(flaky).refresh()
    flaky.block_health.set()  # any health() call would now block for 10 s
    text = exp.text()
    assert "vnpu_chip_healthy" in text
    flaky.block_health.clear()


def test_no_inventory_means_no_chip_metrics(kit: Any, node310: Any) -> None:
    class NoChips(FlakyBackend):
        def chips(self) -> tuple[backend.ChipInfo, ...]:
            from vnpu_npu import errors

            raise errors.LibraryError(("/usr/local/dcmi/libdcmi.so",), "not found")

    exp = kit.Exporter(NoChips(node310)).refresh()
    assert exp.samples("vnpu_chip_info") == []
    assert exp.errors(Group.INVENTORY, Reason.LIBRARY) == 1
    assert exp.value("vnpu_build_info", component="exporter", version="0.1.0") == 1


def test_last_refresh_and_refresh_durations(kit: Any, node310: Any) -> None:
    exp = kit.Exporter(node310).refresh()
    for group in (
        "inventory",
        "health",
        "sensors",
        "utilization",
        "memory",
        "vnpus",
        "pods",
        "pod_resources",
    ):
        assert exp.value("vnpu_exporter_last_refresh_timestamp_seconds", group=group) > 1.7e9
        assert exp.value("vnpu_exporter_refresh_duration_seconds_count", group=group) == 1


def test_a_group_that_failed_whole_tries_again_sooner(kit: Any, node310: Any) -> None:
    exp = kit.Exporter(node310)
    exp.pods.failure = kit.API_DOWN
    exp.sampler.intervals[Group.PODS] = 60.0
    exp.sampler.retry_after = 0.05

    def refreshes() -> float:
        return exp.value("vnpu_exporter_refresh_duration_seconds_count", group="pods") or 0

    pause = threading.Event()
    exp.sampler.start()
    try:
        for _ in range(100):  # failing: every 0.05 s instead of every 60 s
            if refreshes() >= 3:
                break
            pause.wait(0.02)
        assert refreshes() >= 3
        exp.pods.failure = None
        for _ in range(100):
            if exp.sampler.snapshot().pods is not None:
                break
            pause.wait(0.02)
        settled = refreshes()
        pause.wait(0.3)  # read fine: back to the 60 s interval
        assert refreshes() == settled
    finally:
        exp.sampler.stop()
