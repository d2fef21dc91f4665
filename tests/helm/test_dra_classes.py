"""DRA mode's DeviceClasses as the chart renders them, judged by a real kube-apiserver.

kube-apiserver compiles each class's CEL selector and checks the extended resource name, so a
dry-run create of every rendered class is the test of both.
"""

from __future__ import annotations

from typing import Any

import pytest

WORDS = (
    "Ascend310P",
    "Ascend910A",
    "Ascend910B1",
    "Ascend910B2",
    "Ascend910B3",
    "Ascend910B4",
    "Ascend910B4-1",
    "Ascend910C",
    "Ascend910C-24",
)


def test_no_classes_unless_asked(default: Any) -> None:
    assert default.all("DeviceClass") == []


def test_three_classes_per_model_and_the_extended_resource(render: Any) -> None:
    classes = {
        c["metadata"]["name"]: c
        for c in render({"dra": {"deviceClasses": {"create": True}}}).all("DeviceClass")
    }
    assert len(classes) == 3 * len(WORDS)
    whole = classes["ascend310p.npu.vnpu.io"]["spec"]
    assert whole["extendedResourceName"] == "huawei.com/Ascend310P"
    (selector,) = whole["selectors"]
    assert selector["cel"]["expression"] == (
        "device.driver == 'npu.vnpu.io' && device.attributes['npu.vnpu.io'].model == 'Ascend310P'"
        " && device.attributes['npu.vnpu.io'].template == 'whole'"
    )
    assert "extendedResourceName" not in classes["ascend310p-vnpu.npu.vnpu.io"]["spec"]
    assert (
        "'soft'"
        in classes["ascend910b4-soft.npu.vnpu.io"]["spec"]["selectors"][0]["cel"]["expression"]
    )


@pytest.mark.parametrize("models", [["Ascend310P"], list(WORDS)])
def test_kube_apiserver_accepts_every_class(
    render: Any, kube_plane: Any, models: list[str]
) -> None:
    values = {"dra": {"deviceClasses": {"create": True, "models": models}}}
    for item in render(values).all("DeviceClass"):
        stored = kube_plane.request(
            "POST", "/apis/resource.k8s.io/v1/deviceclasses?dryRun=All", item
        )
        assert stored["spec"] == item["spec"], item["metadata"]["name"]


def test_a_model_name_that_is_not_a_common_word_stops_the_render(render: Any) -> None:
    with pytest.raises(Exception, match="models"):
        render({"dra": {"deviceClasses": {"create": True, "models": ["npu"]}}})
