"""Allocated device names back to what they stand for on this node: a chip and a kind.

``slices`` names the devices it publishes (``chip-<phy>-whole``, ``chip-<phy>-<template>-<n>``
with the template's underscores as dashes, ``chip-<phy>-soft``); ``prepare`` calls ``target``
for each device of a claim's allocation to learn which chip, and which template if any, it
stands for. A name is accepted only if ``slices`` would publish it for this node's chips and
model: the chip exists, the template is one of the model's and ``<n>`` is below the number of
placements the chip has for it. Anything else raises ``errors.DeviceError`` naming the claim
and the device. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from vnpu_core import catalog, draclasses
from vnpu_dra_driver import errors, slices

Kind = draclasses.Kind


@dataclass(frozen=True, slots=True)
class Target:
    """What one allocated device is: chip ``phy`` whole, a vNPU of ``template``, or a soft slice."""

    device: str
    phy: int
    kind: Kind
    template: str | None = None  # the catalog name (``vir05_1c_16g``) when ``kind`` is template


def target(claim: str, device: str, phys: Collection[int], model: catalog.ChipModel) -> Target:
    """The ``Target`` of ``device`` (allocated to ``claim``, ``namespace/name``) on a node whose
    chips are ``phys`` of ``model``; ``errors.DeviceError`` when this node has no such device."""
    named = draclasses.parse_device(device)
    if named is None:
        raise errors.DeviceError(claim, device, "not a device name of this driver")
    if named.phy not in phys:
        raise errors.DeviceError(claim, device, f"this node has no chip {named.phy}")
    if named.kind != "template":
        return Target(device, named.phy, named.kind)
    template = named.template(model)
    if template is None:
        known = ", ".join(t.name for t in model.templates) or "none"
        raise errors.DeviceError(
            claim, device, f"{model.name} has no template {named.dashed!r} (its templates: {known})"
        )
    count = slices.placements(model, template)
    if named.number >= count:
        raise errors.DeviceError(
            claim,
            device,
            f"chip {named.phy} has {count} placements of {template.name}, not {named.number}",
        )
    return Target(device, named.phy, "template", template.name)
