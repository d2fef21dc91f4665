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

from vnpu_core import catalog

DRIVER = "npu.vnpu.io"
WHOLE = "whole"
SOFT = "soft"


def _word(model: catalog.ChipModel) -> str:
    return model.common_word.lower()


def _template(template: catalog.Template) -> str:
    return template.name.replace("_", "-")


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
