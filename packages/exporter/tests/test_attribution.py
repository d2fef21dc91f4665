"""Who holds what: allocations from pod annotations, tied to driver vNPUs, per namespace."""

from __future__ import annotations

from typing import Any

import pytest

from vnpu_exporter import attribution, metrics, ownership, podresources
from vnpu_npu.sim import control

GiB = 1024**3
MiB = 1024**2


def _allocs(exp: Any) -> dict[tuple[str, str, str], dict[str, str]]:
    """vnpu_allocation_info samples by (pod, container, chip)."""
    return {
        (s["pod"], s["container"], s["chip"]): s for s, _ in exp.samples("vnpu_allocation_info")
    }


def test_whole_chip_vnpu_and_soft_slice_with_their_owners(kit: Any, node310: Any) -> None:
    c = node310.chips()
    vnpu = node310.create_vnpu(1, "vir02")
    control.set_vnpu_load(node310.sim_dir, vnpu, aicore_percent=40, memory_mib=2048, in_use=True)
    control.set_load(node310.sim_dir, 0, aicore_percent=90, memory_mib=8000)
    pods = kit.StaticPods(
        [
            kit.pod("train", [[kit.Device(c[0])]], namespace="ml"),
            kit.pod("infer", [[kit.Device(c[1], "vir02")]], namespace="web"),
            kit.pod("soft", [[kit.Device(c[2], None, 4096, 30)]], namespace="web", soft=True),
        ]
    )
    exp = kit.Exporter(node310, pods).refresh()
    found = _allocs(exp)
    assert set(found) == {("train", "c0", "0"), ("infer", "c0", "1"), ("soft", "c0", "2")}
    whole = found[("train", "c0", "0")]
    assert (whole["kind"], whole["template"], whole["vnpu"], whole["namespace"]) == (
        "whole",
        "",
        "",
        "ml",
    )
    hard = found[("infer", "c0", "1")]
    assert (hard["kind"], hard["template"], hard["vnpu"], hard["attribution"]) == (
        "vnpu",
        "vir02",
        str(vnpu),
        "unique",
    )
    soft = found[("soft", "c0", "2")]
    assert (soft["kind"], soft["template"]) == ("soft", "")

    def value(name: str, labels: dict[str, str]) -> float | None:
        keys = (
            "node",
            "chip",
            "uuid",
            "model",
            "kind",
            "template",
            "vnpu",
            "namespace",
            "pod",
            "container",
        )
        return exp.value(name, **{k: labels[k] for k in keys})

    assert value("vnpu_allocation_memory_limit_bytes", whole) == 24 * GiB
    assert value("vnpu_allocation_memory_used_bytes", whole) == 8000 * MiB
    assert value("vnpu_allocation_aicore_utilization_ratio", whole) == pytest.approx(0.9)
    assert value("vnpu_allocation_aicores", whole) == 8
    assert value("vnpu_allocation_aicore_share_ratio", whole) == 1
    assert value("vnpu_allocation_memory_limit_bytes", hard) == 6144 * MiB
    assert (
        value("vnpu_allocation_memory_used_bytes", hard) == 2048 * MiB
    )  # the vNPU's own activity (310P)
    assert value("vnpu_allocation_aicore_utilization_ratio", hard) == pytest.approx(0.4)
    assert value("vnpu_allocation_aicore_share_ratio", hard) == pytest.approx(2 / 8)
    assert value("vnpu_allocation_memory_limit_bytes", soft) == 4096 * MiB
    assert value("vnpu_allocation_aicores", soft) == pytest.approx(8 * 0.3)
    # the chip's only allocation: the soft slice uses what the chip uses
    assert value("vnpu_allocation_aicore_utilization_ratio", soft) == 0
    # per chip
    labels = kit.chip_labels(c[1])
    assert exp.value("vnpu_chip_allocations", **labels, kind="vnpu") == 1
    assert exp.value("vnpu_chip_allocated_memory_bytes", **labels) == 6144 * MiB
    assert exp.value("vnpu_chip_allocated_aicores", **labels) == 2
    assert exp.value("vnpu_chip_unowned_vnpus", **labels, template="vir02") == 0
    assert exp.value("vnpu_chip_allocated_ratio", **kit.chip_labels(c[0])) == 1


def test_namespace_view_allocated_versus_used(kit: Any, node310: Any) -> None:
    c = node310.chips()
    a = node310.create_vnpu(0, "vir04")
    b = node310.create_vnpu(0, "vir02")
    control.set_vnpu_load(node310.sim_dir, a, aicore_percent=50, memory_mib=1000, in_use=True)
    control.set_vnpu_load(node310.sim_dir, b, aicore_percent=0, memory_mib=0, in_use=True)
    pods = kit.StaticPods(
        [
            kit.pod("a", [[kit.Device(c[0], "vir04")]], namespace="team"),
            kit.pod("b", [[kit.Device(c[0], "vir02")]], namespace="team"),
            kit.pod("w", [[kit.Device(c[3])]], namespace="other"),
        ]
    )
    exp = kit.Exporter(node310, pods).refresh()
    team = {"node": kit.NODE, "namespace": "team", "model": "Ascend310P"}
    assert exp.value("vnpu_namespace_allocated_memory_bytes", **team) == (12288 + 6144) * MiB
    assert exp.value("vnpu_namespace_used_memory_bytes", **team) == 1000 * MiB
    assert exp.value("vnpu_namespace_allocated_aicores", **team) == 6
    assert exp.value("vnpu_namespace_used_aicores", **team) == pytest.approx(4 * 0.5)
    assert exp.value("vnpu_namespace_allocations", **team, kind="vnpu") == 2
    assert exp.value("vnpu_namespace_allocations", **team, kind="whole") == 0
    assert exp.value("vnpu_namespace_unmeasured_allocations", **team) == 0
    other = {"node": kit.NODE, "namespace": "other", "model": "Ascend310P"}
    assert exp.value("vnpu_namespace_allocations", **other, kind="whole") == 1


def test_910_vnpus_are_unmeasured_not_zero(kit: Any, node910: Any) -> None:
    c = node910.chips()
    node910.create_vnpu(0, "vir05_1c_16g")
    exp = kit.Exporter(
        node910, kit.StaticPods([kit.pod("p", [[kit.Device(c[0], "vir05_1c_16g")]])])
    ).refresh()
    (labels,) = [s for s, _ in exp.samples("vnpu_allocation_info")]
    assert labels["attribution"] == "unique"
    assert exp.samples("vnpu_allocation_memory_used_bytes") == []
    assert exp.samples("vnpu_allocation_aicore_utilization_ratio") == []
    ns = {"node": kit.NODE, "namespace": "default", "model": "Ascend910B3"}
    assert exp.value("vnpu_namespace_unmeasured_allocations", **ns) == 1


def test_two_pods_with_one_template_on_a_chip_are_ambiguous_without_the_ledger(
    kit: Any, node310: Any
) -> None:
    c = node310.chips()
    first = node310.create_vnpu(0, "vir02")
    second = node310.create_vnpu(0, "vir02")
    pods = kit.StaticPods(
        [kit.pod("x", [[kit.Device(c[0], "vir02")]]), kit.pod("y", [[kit.Device(c[0], "vir02")]])]
    )
    exp = kit.Exporter(node310, pods).refresh()
    found = _allocs(exp)
    assert {v["attribution"] for v in found.values()} == {"ambiguous"}
    assert {v["vnpu"] for v in found.values()} == {""}
    assert exp.samples("vnpu_allocation_aicore_utilization_ratio") == []  # no guessing
    # with the device plugin's ledger each pod gets its own vNPU
    ledger = kit.StaticLedger(
        [
            ownership.Record("default", "x", "c0", 0, second, "vir02"),
            ownership.Record("default", "y", "c0", 0, first, "vir02"),
        ]
    )
    exp = kit.Exporter(node310, pods, ledger=ledger).refresh()
    found = _allocs(exp)
    assert found[("x", "c0", "0")]["vnpu"] == str(second)
    assert found[("y", "c0", "0")]["vnpu"] == str(first)
    assert {v["attribution"] for v in found.values()} == {"ledger"}


def test_the_vnpu_a_container_holds_wins_over_an_idle_one(kit: Any, node310: Any) -> None:
    c = node310.chips()
    node310.create_vnpu(0, "vir02")
    held = node310.create_vnpu(0, "vir02")
    control.set_vnpu_load(node310.sim_dir, held, in_use=True)
    exp = kit.Exporter(
        node310, kit.StaticPods([kit.pod("x", [[kit.Device(c[0], "vir02")]])])
    ).refresh()
    (labels,) = [s for s, _ in exp.samples("vnpu_allocation_info")]
    assert (labels["vnpu"], labels["attribution"]) == (str(held), "unique")
    assert exp.value("vnpu_chip_unowned_vnpus", **kit.chip_labels(c[0]), template="vir02") == 1


def test_leaked_and_missing_vnpus(kit: Any, node310: Any) -> None:
    c = node310.chips()
    node310.create_vnpu(1, "vir04")  # nobody holds it: leaked
    exp = kit.Exporter(
        node310, kit.StaticPods([kit.pod("x", [[kit.Device(c[0], "vir02")]])])
    ).refresh()
    assert exp.value("vnpu_chip_unowned_vnpus", **kit.chip_labels(c[1]), template="vir04") == 1
    (labels,) = [s for s, _ in exp.samples("vnpu_allocation_info")]
    assert labels["attribution"] == "missing"  # allocated, but no vir02 exists on chip 0


def test_api_down_means_no_allocations_and_no_false_leaks(kit: Any, node310: Any) -> None:
    c = node310.chips()
    node310.create_vnpu(0, "vir02")
    pods = kit.StaticPods([kit.pod("x", [[kit.Device(c[0], "vir02")]])])
    exp = kit.Exporter(node310, pods).refresh()
    assert exp.value("vnpu_chip_unowned_vnpus", **kit.chip_labels(c[0]), template="vir02") == 0
    pods.failure = kit.API_DOWN
    exp.refresh()
    assert exp.samples("vnpu_allocation_info") == []
    assert exp.samples("vnpu_chip_unowned_vnpus") == []  # unknown, not "leaked"
    assert exp.samples("vnpu_chip_allocated_memory_bytes") == []
    assert exp.samples("vnpu_namespace_allocated_memory_bytes") == []
    assert exp.value("vnpu_chip_vnpus", **kit.chip_labels(c[0])) == 1  # the driver's view stays
    assert exp.errors(metrics.Group.PODS, metrics.ErrorReason.API) == 1


def test_a_malformed_annotation_skips_that_pod_and_counts_it(kit: Any, node310: Any) -> None:
    c = node310.chips()
    bad = kit.pod("bad", [[kit.Device(c[0])]])
    bad["metadata"]["annotations"]["hami.io/Ascend310P-devices-allocated"] = "not,a,device;"
    exp = kit.Exporter(
        node310, kit.StaticPods([bad, kit.pod("good", [[kit.Device(c[1])]])])
    ).refresh()
    assert {s["pod"] for s, _ in exp.samples("vnpu_allocation_info")} == {"good"}
    assert exp.value("vnpu_exporter_unreadable_pods", node=kit.NODE) == 1
    assert exp.errors(metrics.Group.PODS, metrics.ErrorReason.BAD_ANNOTATION) == 1


def test_finished_pods_and_finished_init_containers_hold_nothing(kit: Any, node310: Any) -> None:
    c = node310.chips()
    pods = kit.StaticPods(
        [
            kit.pod("done", [[kit.Device(c[0])]], phase="Succeeded"),
            kit.pod("elsewhere", [[kit.Device(c[0])]], node="other-node"),
            kit.pod("init-running", [[kit.Device(c[1])], [kit.Device(c[2])]], init=1),
            kit.pod(
                "init-done",
                [[kit.Device(c[3], "vir01")], [kit.Device(c[3], "vir02")]],
                init=1,
                init_finished=True,
            ),
        ]
    )
    exp = kit.Exporter(node310, pods).refresh()
    held = {(s["pod"], s["container"], s["chip"]) for s, _ in exp.samples("vnpu_allocation_info")}
    assert held == {
        ("init-running", "c0", "1"),
        ("init-running", "c1", "2"),
        ("init-done", "c1", "3"),
    }


def test_kubelet_only_whole_chips_from_huawei_device_ids(kit: Any, node310: Any) -> None:
    devices = kit.StaticDevices(
        [
            podresources.ContainerDevices(
                "plain", "legacy", "main", "huawei.com/Ascend310P", ("Ascend310P-2",)
            ),
            podresources.ContainerDevices(
                "plain", "slots", "main", "huawei.com/Ascend310P", ("SOMEUUID-1",)
            ),
        ]
    )
    exp = kit.Exporter(node310, kit.StaticPods([]), devices).refresh()
    (labels,) = [s for s, _ in exp.samples("vnpu_allocation_info")]
    assert (labels["pod"], labels["chip"], labels["kind"]) == ("legacy", "2", "whole")
    assert exp.value("vnpu_chip_allocated_ratio", **kit.chip_labels(node310.chips()[2])) == 1


@pytest.mark.parametrize(
    ("templates", "stranded_memory", "stranded_cores"),
    [
        ([], 0, 0),  # an empty chip is not fragmented: a whole-chip pod can take it
        (["vir02"], 0, 0),  # room for more
        (["vir01"] * 7, 24576 - 7 * 3072, 1),  # all 7 vNPU slots taken: 3 GiB and 1 core stranded
        (["vir04", "vir02_1c", "vir01", "vir01"], 0, 0),  # every budget full: nothing free
        (["vir04", "vir02", "vir01"], 24576 - 21504, 1),  # all 7 AI CPUs taken, 1 core left
        (["vir04_3c", "vir02", "vir01"], 0, 0),  # 1 core, 1 AI CPU, 3 GiB left: a vir01 fits
    ],
)
def test_stranded_capacity(
    kit: Any, node310: Any, templates: list[str], stranded_memory: int, stranded_cores: int
) -> None:
    c = node310.chips()
    items = [kit.pod(f"p{i}", [[kit.Device(c[0], t)]]) for i, t in enumerate(templates)]
    exp = kit.Exporter(node310, kit.StaticPods(items)).refresh()
    labels = kit.chip_labels(c[0])
    assert exp.value("vnpu_chip_stranded_memory_bytes", **labels) == stranded_memory * MiB
    assert exp.value("vnpu_chip_stranded_aicores", **labels) == stranded_cores


def test_attribute_returns_unknown_without_pods() -> None:
    assert attribution.attribute("n", (), {}, None, None) is attribution.UNKNOWN


def test_pods_are_read_again_when_the_api_changes_them(kit: Any, node310: Any) -> None:
    c = node310.chips()
    first = kit.pod("p", [[kit.Device(c[0])]])
    first["metadata"]["resourceVersion"] = "1"
    memo = attribution.PodMemo()
    found = attribution.attribute(kit.NODE, c, {}, [first], None, memo=memo)
    assert [a.phy for a in found.allocations] == [0]
    moved = kit.pod("p", [[kit.Device(c[1])]])
    moved["metadata"]["resourceVersion"] = "1"  # same version: the earlier reading stands
    assert [
        a.phy for a in attribution.attribute(kit.NODE, c, {}, [moved], None, memo=memo).allocations
    ] == [0]
    moved["metadata"]["resourceVersion"] = "2"
    assert [
        a.phy for a in attribution.attribute(kit.NODE, c, {}, [moved], None, memo=memo).allocations
    ] == [1]
    # fewer chips: readings that name physical ids start over
    assert (
        attribution.attribute(kit.NODE, c[2:], {}, [moved], None, memo=memo).allocations[0].phy
        is None
    )
