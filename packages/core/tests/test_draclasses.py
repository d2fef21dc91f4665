"""DRA mode's names: device names read back, CDI ids, and the classes' resources."""

from __future__ import annotations

from typing import Any

import pytest

from vnpu_core import catalog, draclasses

M310P3 = catalog.BUILTIN.by_chip_name("310P3")
M910B3 = catalog.BUILTIN.by_chip_name("910B3")


@pytest.mark.parametrize(
    ("name", "model", "expected"),
    [
        ("chip-0-whole", M310P3, (0, "whole", None)),
        ("chip-13-soft", M910B3, (13, "soft", None)),
        ("chip-2-vir02-3", M310P3, (2, "template", "vir02")),
        ("chip-0-vir02-1c-6", M310P3, (0, "template", "vir02_1c")),
        ("chip-1-vir05-1c-16g-0", M910B3, (1, "template", "vir05_1c_16g")),
        ("chip-0-vir05-1c-16g-0", M310P3, (0, "template", None)),  # not a template of the model
    ],
)
def test_device_names_read_back(name: str, model: Any, expected: tuple[Any, ...]) -> None:
    device = draclasses.parse_device(name)
    assert device is not None
    template = device.template(model)
    assert (device.phy, device.kind, template.name if template else None) == expected
    if template is not None:
        assert draclasses.device_name(device.phy, template.name, device.number) == name


@pytest.mark.parametrize(
    "name",
    ["chip-0-vir02", "chip-01-whole", "chip-0-whole-0x", "Ascend310P-0", "", "chip--1-whole"],
)
def test_names_that_are_not_the_drivers(name: str) -> None:
    device = draclasses.parse_device(name)
    assert device is None or (device.kind == "template" and device.template(M310P3) is None)


@pytest.mark.parametrize(
    ("cdi_ids", "device", "uid"),
    [
        (("npu.vnpu.io/claim=0b5e-4c1f-chip-0-vir02-1",), "chip-0-vir02-1", "0b5e-4c1f"),
        (
            ("other.io/claim=u-chip-0-whole", "npu.vnpu.io/claim=u2-chip-0-whole"),
            "chip-0-whole",
            "u2",
        ),
        (("npu.vnpu.io/claim=u-chip-1-whole",), "chip-0-whole", None),  # another device's
        (("npu.vnpu.io/claim=-chip-0-whole",), "chip-0-whole", None),  # no uid at all
        ((), "chip-0-whole", None),
    ],
)
def test_claim_uid_from_cdi_ids(cdi_ids: tuple[str, ...], device: str, uid: str | None) -> None:
    assert draclasses.claim_uid(cdi_ids, device) == uid
    if uid:
        assert draclasses.cdi_id(uid, device) in cdi_ids


def test_fill_scoring_weighs_every_resource_the_classes_serve() -> None:
    """kube-scheduler scores nodes by the NPUs of the pod's kind (MostAllocated), over the
    resources the DeviceClasses serve: whole chip, each template, each memory tier."""
    model = catalog.BUILTIN.by_common_word("Ascend310P")
    assert model is not None
    served = draclasses.served_resources(model)
    specs: list[Any] = [c["spec"] for c in draclasses.device_classes(catalog.BUILTIN)]
    served_classes = {
        spec["extendedResourceName"]
        for spec in specs
        if "extendedResourceName" in spec
        and "model == 'Ascend310P'" in spec["selectors"][0]["cel"]["expression"]
    }
    assert set(served) == served_classes
    assert served[0] == "huawei.com/Ascend310P"
    assert "npu.vnpu.io/ascend310p-6144m" in served
    entry = draclasses.fill_scoring([model])
    assert entry["name"] == "NodeResourcesFit"
    strategy = entry["args"]["scoringStrategy"]  # type: ignore[index]
    assert strategy["type"] == "MostAllocated"
    assert [r["name"] for r in strategy["resources"]] == list(served)
    assert {r["weight"] for r in strategy["resources"]} == {1}
