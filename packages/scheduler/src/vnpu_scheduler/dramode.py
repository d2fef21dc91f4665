"""The webhook's DRA mode: the NPU requests users write today, as what DRA allocates.

In DRA mode kube-scheduler allocates the npu.vnpu.io driver's devices itself, through the
extended resources the chart's DeviceClasses serve (``vnpu_core.draclasses``). ``webhook``
asks this module how to rewrite each container that the request parser read:

* whole chips: ``huawei.com/<CW>: N`` stays (its class serves it); ``-memory`` and ``-core``
  go, as no class serves them;
* a hard vNPU: ``huawei.com/<CW>`` and ``-memory`` become one ``npu.vnpu.io/<cw>-<memory>m``
  (the templates of the rounded memory tier, as classic mode rounds), or, for a pod that pins
  a template (``vnpu.io/template``), ``npu.vnpu.io/<cw>-<template>``;
* a soft slice is denied, naming the class a ResourceClaim uses instead: an extended resource
  cannot carry an amount of memory.

Each rewrite is returned as an admission warning too. Pure: JSON-patch operations in, out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vnpu_core import draclasses, requests

Json = dict[str, Any]


def _pointer(*parts: object) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _target(request: requests.PodRequest, item: requests.ContainerRequest) -> dict[str, str]:
    model = item.model
    if item.whole:
        return {draclasses.whole_resource(model): str(item.count)}
    if request.template is not None:
        return {draclasses.template_resource(model, item.templates[0]): "1"}
    return {draclasses.tier_resource(model, item.memory_mib): "1"}


def convert(
    spec: Mapping[str, Any], request: requests.PodRequest
) -> tuple[list[Json], tuple[str, ...], str]:
    """(patch operations, warnings, denial) turning ``request`` into DRA's resources."""
    places: dict[str, tuple[str, int]] = {}
    for section in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(section) or []):
            places.setdefault(str(container.get("name", "")), (section, index))
    patch: list[Json] = []
    said: list[str] = []
    for item in request.requests:
        model = item.model
        if item.soft:
            soft = draclasses.class_name(
                f"{draclasses.DRIVER}/{model.common_word.lower()}-soft", model
            )
            return (
                [],
                (),
                (
                    f"container {item.container!r}: a soft slice in DRA mode is asked with a "
                    f"ResourceClaim of DeviceClass {soft} (docs/dra.md): an extended resource "
                    "cannot carry an amount of memory"
                ),
            )
        target = _target(request, item)
        section, index = places[item.container]
        resources = (spec.get(section) or [])[index].get("resources") or {}
        ours = (model.resource_name, model.memory_resource, model.core_resource)
        for kind in ("limits", "requests"):
            values = resources.get(kind) or {}
            if not any(name in values for name in ours):
                continue
            for name in ours:
                if name in values and name not in target:
                    patch.append(
                        {
                            "op": "remove",
                            "path": _pointer("spec", section, index, "resources", kind, name),
                        }
                    )
            for name, value in target.items():
                if str(values.get(name)) != value:
                    patch.append(
                        {
                            "op": "add",
                            "path": _pointer("spec", section, index, "resources", kind, name),
                            "value": value,
                        }
                    )
        (resource,) = target
        if resource != model.resource_name:
            said.append(
                f"container {item.container!r}: DRA mode: {model.resource_name} and "
                f"{model.memory_resource} are asked as {resource}: 1 (DeviceClass "
                f"{draclasses.class_name(resource, model)}: {item.shape})"
            )
        elif item.count > 1:
            said.append(
                f"container {item.container!r}: DRA mode: {item.count} whole chips of "
                f"{model.common_word} are allocated by kube-scheduler without the server's "
                "ring or mesh rule yet (docs/dra.md)"
            )
    return patch, tuple(said), ""
