"""DRA mode's DeviceClasses as the chart renders them, judged by a real kube-apiserver.

kube-apiserver compiles each class's CEL selector and checks the extended resource name, so a
dry-run create of every rendered class is the test of both. The names are the ones the
webhook's DRA mode writes into pods (``vnpu_core.draclasses``).
"""

from __future__ import annotations

from typing import Any

from vnpu_core import catalog, draclasses

ON = {"dra": {"deviceClasses": {"create": True}}}


def test_no_classes_unless_asked(default: Any) -> None:
    assert default.all("DeviceClass") == []


def test_the_classes_are_the_ones_the_webhook_names(render: Any) -> None:
    classes = {c["metadata"]["name"]: c["spec"] for c in render(ON).all("DeviceClass")}
    for model in catalog.BUILTIN:
        wanted = {draclasses.whole_resource(model)}
        wanted |= {draclasses.tier_resource(model, m) for m in draclasses.tiers(model)}
        wanted |= {draclasses.template_resource(model, t) for t in model.templates}
        for resource in wanted:
            spec = classes[draclasses.class_name(resource, model)]
            assert spec["extendedResourceName"] == resource
        word = model.common_word.lower()
        assert "extendedResourceName" not in classes[f"{word}-vnpu.npu.vnpu.io"]
        assert "extendedResourceName" not in classes[f"{word}-soft.npu.vnpu.io"]


def test_a_tier_selects_every_template_of_its_memory(render: Any) -> None:
    classes = {c["metadata"]["name"]: c["spec"] for c in render(ON).all("DeviceClass")}
    (selector,) = classes["ascend310p-6144m.npu.vnpu.io"]["selectors"]
    assert selector["cel"]["expression"] == (
        "device.driver == 'npu.vnpu.io' && device.attributes['npu.vnpu.io'].model == 'Ascend310P'"
        " && device.attributes['npu.vnpu.io'].template in ['vir02', 'vir02_1c']"
    )


def test_kube_apiserver_accepts_every_class(render: Any, kube_plane: Any) -> None:
    for item in render(ON).all("DeviceClass"):
        stored = kube_plane.request(
            "POST", "/apis/resource.k8s.io/v1/deviceclasses?dryRun=All", item
        )
        assert stored["spec"] == item["spec"], item["metadata"]["name"]


def test_the_chart_renders_exactly_the_classes_vnpu_core_builds(render: Any) -> None:
    """The sandbox applies draclasses.device_classes; a cluster installs the chart's."""
    rendered = {c["metadata"]["name"]: c["spec"] for c in render(ON).all("DeviceClass")}
    built = {c["metadata"]["name"]: c["spec"] for c in draclasses.device_classes(catalog.BUILTIN)}
    assert rendered == built
