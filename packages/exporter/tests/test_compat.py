"""npu-exporter names and labels (--npu-exporter-compat), and the exposition format."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from vnpu_exporter import metrics
from vnpu_npu.sim import control


def _scenario(kit: Any, node: Any, compat: bool) -> Any:
    c = node.chips()
    vnpu = node.create_vnpu(1, "vir02")
    control.set_vnpu_load(node.sim_dir, vnpu, aicore_percent=25, memory_mib=1024, in_use=True)
    node.create_vnpu(2, "vir01")
    node.create_vnpu(2, "vir01")
    control.set_load(node.sim_dir, 0, aicore_percent=70, memory_mib=2048)
    control.inject_fault(node.sim_dir, 3, codes=[0x80E18402, 0x8C03A000])
    pods = kit.StaticPods(
        [
            kit.pod("whole", [[kit.Device(c[0])]], namespace="ml"),
            kit.pod("one", [[kit.Device(c[1], "vir02")]], namespace="ml"),
            kit.pod("a", [[kit.Device(c[2], "vir01")]]),
            kit.pod("b", [[kit.Device(c[2], "vir01")]]),
        ]
    )
    return kit.Exporter(node, pods, compat=compat).refresh()


def test_compat_names_labels_and_units(kit: Any, node310: Any) -> None:
    exp = _scenario(kit, node310, compat=True)
    c = node310.chips()
    card0 = {
        "id": "0",
        "model_name": "310P3-Ascend-V1",
        "vdie_id": c[0].uuid,
        "pcie_bus_info": c[0].bdf,
        "namespace": "ml",
        "pod_name": "whole",
        "container_name": "c0",
    }
    assert exp.value("npu_chip_info_utilization", **card0) == 70  # percent, as npu-exporter
    assert exp.value("npu_chip_info_total_memory", **card0) == 24576  # MB, DDR on 310P
    assert exp.value("npu_chip_info_used_memory", **card0) == 2048
    assert exp.value("npu_chip_info_health_status", **card0) == 1
    assert exp.value("container_npu_utilization", **card0) == 70
    assert exp.value("container_npu_total_memory", **card0) == 24576
    assert (
        exp.value(
            "npu_container_info",
            npuID="0",
            model_name="310P3-Ascend-V1",
            vdie_id=c[0].uuid,
            pcie_bus_info=c[0].bdf,
            namespace="ml",
            pod_name="whole",
            container_name="c0",
            containerID="whole-c0",
            containerName="ml_whole_c0",
        )
        == 1
    )
    # a vNPU: npu-exporter's vnpu_pod_* in percent and KB
    vdev = {
        "id": "1",
        "model_name": "310P3-Ascend-V1",
        "v_dev_id": "116",
        "aicore_count": "2",
        "namespace": "ml",
        "pod_name": "one",
        "container_name": "c0",
        "is_virtual": "true",
    }
    assert exp.value("vnpu_pod_aicore_utilization", **vdev) == 25
    assert exp.value("vnpu_pod_used_memory", **vdev) == 1024 * 1024
    assert exp.value("vnpu_pod_total_memory", **vdev) == 6144 * 1024
    # a chip two pods share: empty pod labels, never npu-exporter's placeholder
    shared = [s for s, _ in exp.samples("npu_chip_info_health_status") if s["id"] == "2"]
    assert shared == [
        {
            "id": "2",
            "model_name": "310P3-Ascend-V1",
            "vdie_id": c[2].uuid,
            "pcie_bus_info": c[2].bdf,
            "namespace": "",
            "pod_name": "",
            "container_name": "",
        }
    ]
    assert len([s for s, _ in exp.samples("npu_container_info") if s["npuID"] == "2"]) == 2
    assert "not_displayed_for_multi_pod" not in exp.text()
    # error codes in decimal, one series per slot
    faulty = {
        "id": "3",
        "model_name": "310P3-Ascend-V1",
        "vdie_id": c[3].uuid,
        "pcie_bus_info": c[3].bdf,
        "namespace": "",
        "pod_name": "",
        "container_name": "",
    }
    assert exp.value("npu_chip_info_error_code", **faulty) == 0x80E18402
    assert exp.value("npu_chip_info_error_code_1", **faulty) == 0x8C03A000
    assert exp.value("npu_chip_info_health_status", **faulty) == 0
    assert exp.value("machine_npu_nums") == 4
    assert exp.value("machine_healthy_npu_nums") == 3
    assert exp.value("machine_unhealthy_npu_nums") == 1
    assert exp.value("machine_unknown_npu_nums") == 0


def test_compat_unknown_health_is_minus_one(kit: Any, node910: Any) -> None:
    control.inject_fault(node910.sim_dir, 5, gone=True)
    exp = kit.Exporter(node910, compat=True).refresh()
    values = {s["id"]: v for s, v in exp.samples("npu_chip_info_health_status")}
    assert values["5"] == -1
    assert exp.value("machine_unknown_npu_nums") == 1
    memory = {s["id"] for s, _ in exp.samples("npu_chip_info_hbm_total_memory")}
    assert memory == {"0", "1", "2", "3", "4", "6", "7"}  # HBM on 910; chip 5 missing, not zero


def test_compat_off_emits_no_npu_exporter_names(kit: Any, node310: Any) -> None:
    exp = _scenario(kit, node310, compat=False)
    text = exp.text()
    for d in metrics.COMPAT:
        assert f"\n{d.name}" not in text
        assert not text.startswith(d.name)


def test_every_emitted_family_is_defined(kit: Any, node310: Any) -> None:
    exp = _scenario(kit, node310, compat=True)
    defined = metrics.by_name()
    for family in exp.registry.collect():
        assert family.name in defined, family.name
        d = defined[family.name]
        assert family.documentation == d.help
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                continue
            labels = set(sample.labels) - {"le"}
            assert labels == set(d.labels), (family.name, labels)
            for label, allowed in metrics.VALUES.items():
                if label in sample.labels:
                    assert sample.labels[label] in allowed, (
                        family.name,
                        label,
                        sample.labels[label],
                    )


def _promtool_lint(promtool: str, text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )


@pytest.mark.needs_prometheus
def test_promtool_accepts_the_exposition(kit: Any, node310: Any, promtool: str) -> None:
    result = _promtool_lint(promtool, _scenario(kit, node310, compat=False).text())
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.needs_prometheus
def test_promtool_only_objects_to_npu_exporter_label_names_in_compat_mode(
    kit: Any, node310: Any, promtool: str
) -> None:
    result = _promtool_lint(promtool, _scenario(kit, node310, compat=True).text())
    problems = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    allowed = {
        "npu_exporter_version_info label names should be written in 'snake_case' not 'camelCase'",
        "npu_container_info label names should be written in 'snake_case' not 'camelCase'",
    }
    assert set(problems) <= allowed, problems


@pytest.mark.parametrize("definition", metrics.EXPORTER, ids=lambda d: d.name)
def test_exporter_names_follow_the_naming_rules(definition: metrics.Definition) -> None:
    assert definition.name.startswith("vnpu_")
    assert not definition.name.endswith("_total")
    units = {
        "bytes": "_bytes",
        "seconds": "_seconds",
        "ratio": "_ratio",
        "celsius": "_celsius",
        "watts": "_watts",
    }
    if definition.unit in units:
        assert (
            definition.name.endswith(units[definition.unit])
            or definition.kind is metrics.Kind.HISTOGRAM
        )
    assert definition.help.endswith(".")
