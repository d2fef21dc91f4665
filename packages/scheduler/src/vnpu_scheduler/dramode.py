"""The webhook's DRA mode: the NPU requests users write today, as what DRA allocates.

In DRA mode kube-scheduler allocates the npu.vnpu.io driver's devices itself, through the
extended resources the chart's DeviceClasses serve (``vnpu_core.draclasses``). ``webhook``
asks this module how to rewrite each container that the request parser read:

* one whole chip: ``huawei.com/<CW>: 1`` stays (its class serves it); ``-memory`` and ``-core``
  go, as no class serves them;
* a hard vNPU: ``huawei.com/<CW>`` and ``-memory`` become one ``npu.vnpu.io/<cw>-<memory>m``
  (the templates of the rounded memory tier, as classic mode rounds), or, for a pod that pins
  a template (``vnpu.io/template``), ``npu.vnpu.io/<cw>-<template>``;
* several whole chips and soft slices, which an extended resource cannot say (the server's
  ring, mesh or die-pair rule; an amount of memory), become a pod claim from a
  ResourceClaimTemplate that ``vnpu_core.draclaims`` builds; the webhook makes sure the
  template exists in the pod's namespace (``claimtemplates``) before it lets the pod in.

Each rewrite is returned as an admission warning too. Pure: JSON-patch operations in, out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vnpu_core import draclaims, draclasses, requests

Json = dict[str, Any]
_LABEL = 63  # a pod's claim name is a DNS label


def _pointer(*parts: object) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _target(request: requests.PodRequest, item: requests.ContainerRequest) -> dict[str, str]:
    model = item.model
    if item.whole:
        return {draclasses.whole_resource(model): str(item.count)}
    if request.template is not None:
        return {draclasses.template_resource(model, item.templates[0]): "1"}
    return {draclasses.tier_resource(model, item.memory_mib): "1"}


def _claim(item: requests.ContainerRequest) -> draclaims.Claim | str | None:
    """The claim template ``item`` needs (None: an extended resource says it), or a denial."""
    if item.soft:
        return draclaims.soft_slices(item.model, item.count, item.memory_mib, item.core_percent)
    if item.whole and item.count > 1:
        return draclaims.whole_chips(item.model, item.count)
    return None


@dataclass(frozen=True, slots=True)
class Conversion:
    """What the webhook does with a pod in DRA mode: the JSON patch, the warnings, the
    ResourceClaimTemplates the pod names (to exist in its namespace first), or a denial."""

    patch: list[Json] = field(default_factory=list)
    said: tuple[str, ...] = ()
    claims: tuple[draclaims.Claim, ...] = ()
    denial: str = ""


def _pod_claim_name(container: str, used: set[str]) -> str:
    """``npu-<container>``, or a numbered name when that is too long or taken (a DNS label)."""
    name = f"npu-{container}"
    number = 0
    while len(name) > _LABEL or name in used:
        number += 1
        name = f"npu-{number}"
    used.add(name)
    return name


def _appended(path: tuple[object, ...], present: bool, entry: Json) -> Json:
    """An ``add`` of ``entry`` to the list at ``path``, making the list when it is absent."""
    if present:
        return {"op": "add", "path": _pointer(*path, "-"), "value": entry}
    return {"op": "add", "path": _pointer(*path), "value": [entry]}


def _renamed(
    resources: Mapping[str, Any], where: tuple[object, ...], ours: tuple[str, ...], target: Json
) -> list[Json]:
    """Patch operations turning ``ours`` into ``target`` in limits and requests."""
    patch: list[Json] = []
    for kind in ("limits", "requests"):
        values = resources.get(kind) or {}
        if not any(name in values for name in ours):
            continue
        for name in ours:
            if name in values and name not in target:
                patch.append({"op": "remove", "path": _pointer(*where, kind, name)})
        for name, value in target.items():
            if str(values.get(name)) != value:
                patch.append({"op": "add", "path": _pointer(*where, kind, name), "value": value})
    return patch


def _has_claims(spec: Mapping[str, Any], place: tuple[str, int] | None) -> bool:
    if place is None:
        return False
    section, index = place
    return bool(((spec.get(section) or [])[index].get("resources") or {}).get("claims"))


def convert(spec: Mapping[str, Any], request: requests.PodRequest) -> Conversion:
    """How ``request`` becomes what DRA allocates, for the pod ``spec`` it was read from."""
    places: dict[str, tuple[str, int]] = {}
    for section in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(section) or []):
            places.setdefault(str(container.get("name", "")), (section, index))
    patch: list[Json] = []
    said: list[str] = []
    claims: list[draclaims.Claim] = []
    has_claims = bool(spec.get("resourceClaims"))
    used = {str(c.get("name", "")) for c in spec.get("resourceClaims") or []}
    with_claims = {c for c, _ in request.containers if _has_claims(spec, places.get(c))}
    for item in request.requests:
        model = item.model
        section, index = places[item.container]
        container = (spec.get(section) or [])[index]
        resources = container.get("resources") or {}
        where = ("spec", section, index, "resources")
        ours = (model.resource_name, model.memory_resource, model.core_resource)
        claim = _claim(item)
        if isinstance(claim, str):
            return Conversion(denial=f"container {item.container!r}: {claim}")
        if claim is None:
            target = _target(request, item)
            patch += _renamed(resources, where, ours, target)
            (resource,) = target
            if resource != model.resource_name:
                said.append(
                    f"container {item.container!r}: DRA mode: {model.resource_name} and "
                    f"{model.memory_resource} are asked as {resource}: 1 (DeviceClass "
                    f"{draclasses.class_name(resource, model)}: {item.shape})"
                )
            continue
        patch += _renamed(resources, where, ours, {})
        name = _pod_claim_name(item.container, used)
        entry = {"name": name, "resourceClaimTemplateName": claim.name}
        patch.append(_appended(("spec", "resourceClaims"), has_claims, entry))
        has_claims = True
        listed = item.container in with_claims
        patch.append(_appended((*where, "claims"), listed, {"name": name}))
        with_claims.add(item.container)
        claims.append(claim)
        said.append(
            f"container {item.container!r}: DRA mode: {item.shape} of {model.common_word} "
            f"asked with ResourceClaimTemplate {claim.name} (pod claim {name!r})"
        )
        said += [f"container {item.container!r}: {line}" for line in claim.said]
    return Conversion(patch, tuple(said), tuple(claims))
