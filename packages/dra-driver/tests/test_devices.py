"""Allocated device names back to chips and kinds: every name ``slices`` publishes maps back,
and names it would not publish are refused with the claim and the device named."""

from __future__ import annotations

import pytest

from vnpu_core import catalog
from vnpu_dra_driver import devices, errors, slices

from .conftest import made_chips


def model(name: str) -> catalog.ChipModel:
    found = catalog.BUILTIN.by_chip_name(name)
    assert found is not None
    return found


@pytest.mark.parametrize("name", ["310P3", "910B3", "910A"])
def test_every_published_device_maps_back_to_its_chip_and_template(name: str) -> None:
    chips = made_chips(name, 2)
    built = slices.build("n1", chips, model(name))
    published = [d for s in built for d in s["spec"].get("devices") or []]
    for device in published:
        target = devices.target("ns/c", device["name"], {0, 1}, model(name))
        assert target.phy == device["attributes"]["index"]["int"]
        template = device["attributes"]["template"]["string"]
        if template == slices.WHOLE:
            assert (target.kind, target.template) == ("whole", None)
        else:
            assert (target.kind, target.template) == ("template", template)


@pytest.mark.parametrize(
    ("device", "reason"),
    [
        ("chip-0", "not a device name"),
        ("chip-01-whole", "not a device name"),
        ("chip-0-vir02", "not a device name"),
        ("chip-2-whole", "no chip 2"),
        ("chip-0-vir10-3c-32g-0", "no template"),
        ("chip-0-vir01-7", "7 placements of vir01, not 7"),
    ],
)
def test_names_this_node_does_not_publish_are_refused(device: str, reason: str) -> None:
    with pytest.raises(errors.DeviceError) as caught:
        devices.target("ns/c", device, {0, 1}, model("310P3"))
    assert (caught.value.claim, caught.value.device) == ("ns/c", device)
    assert reason in str(caught.value)


def test_a_soft_device_is_the_chip() -> None:
    assert devices.target("ns/c", "chip-1-soft", {1}, model("310P3")) == devices.Target(
        "chip-1-soft", 1, "soft"
    )
