"""DRA mode's names: the driver, the DeviceClasses and the extended resources they serve.

In DRA mode kube-scheduler allocates the npu.vnpu.io driver's devices itself. A pod asks for
them through an extended resource that a DeviceClass serves (``extendedResourceName``), so the
pods users write today keep working once the webhook has renamed their resources:

* whole chips: ``huawei.com/<CW>``, unchanged (class ``<cw>.npu.vnpu.io``);
* a hard vNPU of a memory tier: ``npu.vnpu.io/<cw>-<memory>m`` (class ``<cw>-<memory>m``): the
  templates of the model with that memory (``vir02`` or ``vir02_1c`` for 6144 MiB on a 310P),
  as classic mode's rounding gives them;
* one template, for a pod that pins it (``vnpu.io/template``): ``npu.vnpu.io/<cw>-<template>``.

The chart's DeviceClasses (``deploy/helm/vnpu/templates/deviceclasses.yaml``) are made with the
same names from the device config; tests/helm checks that they agree. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from vnpu_core import catalog

DRIVER = "npu.vnpu.io"
WHOLE = "whole"
SOFT = "soft"
CDI_KIND = f"{DRIVER}/claim"
"""The CDI kind of the driver's devices: ``npu.vnpu.io/claim=<claim uid>-<device>``."""

Kind = Literal["whole", "template", "soft"]
_DEVICE = re.compile(r"chip-(0|[1-9][0-9]*)-([a-z0-9-]+)")


@dataclass(frozen=True, slots=True)
class Device:
    """What a device name of the driver stands for: chip ``phy`` whole, placement ``number``
    of a template (``dashed``: its name with dashes, ``vir05-1c-16g``), or a soft slice."""

    phy: int
    kind: Kind
    dashed: str = ""
    number: int = 0

    def template(self, model: catalog.ChipModel) -> catalog.Template | None:
        """The template of ``model`` this device is a placement of (None: not one of its)."""
        return next((t for t in model.templates if _dashed(t.name) == self.dashed), None)


def _dashed(name: str) -> str:
    return name.lower().replace("_", "-")


def device_name(phy: int, kind: str, number: int | None = None) -> str:
    """A DNS-label device name: ``chip-0-whole``, ``chip-0-vir05-1c-16g-2``, ``chip-0-soft``."""
    base = f"chip-{phy}-{_dashed(kind)}"
    return base if number is None else f"{base}-{number}"


def parse_device(name: str) -> Device | None:
    """What a device name of the driver says; None when it is not one (the grammar only: the
    chip and the template are for the reader to check against its node and model)."""
    matched = _DEVICE.fullmatch(name)
    if matched is None:
        return None
    phy, rest = int(matched.group(1)), matched.group(2)
    if rest in (WHOLE, SOFT):
        return Device(phy, "whole" if rest == WHOLE else "soft")
    dashed, _sep, number = rest.rpartition("-")
    if not dashed or not number.isdigit():
        return None
    return Device(phy, "template", dashed, int(number))


def cdi_id(claim_uid: str, device: str) -> str:
    """The fully qualified CDI device name of ``device`` in a claim's spec."""
    return f"{CDI_KIND}={claim_uid}-{device}"


def claim_uid(cdi_ids: Iterable[str], device: str) -> str | None:
    """The claim UID in the driver's CDI device ids of ``device``; None when none carries one."""
    suffix = f"-{device}"
    for given in cdi_ids:
        kind, sep, name = given.partition("=")
        if sep and kind == CDI_KIND and name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return None


def _word(model: catalog.ChipModel) -> str:
    return model.common_word.lower()


def _template(template: catalog.Template) -> str:
    return _dashed(template.name)


def whole_resource(model: catalog.ChipModel) -> str:
    return model.resource_name


def tier_resource(model: catalog.ChipModel, memory_mib: int) -> str:
    return f"{DRIVER}/{_word(model)}-{memory_mib}m"


def template_resource(model: catalog.ChipModel, template: catalog.Template) -> str:
    return f"{DRIVER}/{_word(model)}-{_template(template)}"


def class_name(resource: str, model: catalog.ChipModel) -> str:
    """The DeviceClass serving ``resource``."""
    if resource == model.resource_name:
        return f"{_word(model)}.{DRIVER}"
    return f"{resource.removeprefix(DRIVER + '/')}.{DRIVER}"


def tiers(model: catalog.ChipModel) -> dict[int, tuple[str, ...]]:
    """The model's memory tiers: memory (MiB) -> the templates of that memory, in order."""
    found: dict[int, tuple[str, ...]] = {}
    for template in model.templates:
        found[template.memory_mib] = (*found.get(template.memory_mib, ()), template.name)
    return found


def _class(
    model: catalog.ChipModel, name: str, select: str, resource: str = ""
) -> dict[str, object]:
    expression = (
        f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].model == "
        f"'{model.common_word}' && {select}"
    )
    spec: dict[str, object] = {"selectors": [{"cel": {"expression": expression}}]}
    if resource:
        spec["extendedResourceName"] = resource
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": f"{name}.{DRIVER}"},
        "spec": spec,
    }


def device_classes(models: catalog.Catalog) -> list[dict[str, object]]:
    """The DeviceClasses of ``models``, as the chart renders them (tests/helm compares)."""
    template = f"device.attributes['{DRIVER}'].template"
    out = []
    for model in models:
        word = _word(model)
        served = [(whole_resource(model), f"{template} == '{WHOLE}'")]
        served += [
            (template_resource(model, t), f"{template} == '{t.name}'") for t in model.templates
        ]
        for memory, names in sorted(tiers(model).items()):
            listed = ", ".join(f"'{n}'" for n in names)
            served.append((tier_resource(model, memory), f"{template} in [{listed}]"))
        for resource, select in served:
            name = class_name(resource, model).removesuffix(f".{DRIVER}")
            out.append(_class(model, name, select, resource))
        out.append(_class(model, f"{word}-vnpu", f"!({template} in ['{WHOLE}', '{SOFT}'])"))
        out.append(_class(model, f"{word}-soft", f"{template} == '{SOFT}'"))
    return out


def served_resources(model: catalog.ChipModel) -> tuple[str, ...]:
    """Every extended resource the DeviceClasses of ``model`` serve: the whole chip, each
    template, each memory tier."""
    return (
        whole_resource(model),
        *(template_resource(model, t) for t in model.templates),
        *(tier_resource(model, memory) for memory in sorted(tiers(model))),
    )


def fill_scoring(models: Iterable[catalog.ChipModel]) -> dict[str, object]:
    """kube-scheduler's NodeResourcesFit configuration that places a pod on the node whose
    NPUs of its kind are fullest (MostAllocated over the served resources), as classic mode's
    best-fit does: with DRAExtendedResource it counts a resource's devices allocated on the
    node against those the node publishes. Without it nodes tie and the first filtered wins
    (docs/benchmarks.md, "Packing")."""
    names = [name for model in models for name in served_resources(model)]
    strategy = {"type": "MostAllocated", "resources": [{"name": n, "weight": 1} for n in names]}
    return {"name": "NodeResourcesFit", "args": {"scoringStrategy": strategy}}
