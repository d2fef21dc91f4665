"""ResourceClaimTemplates for what an extended resource cannot say, in DRA mode.

``huawei.com/<CW>: N`` served by a DeviceClass gets N whole chips anywhere on a node, and an
extended resource carries no amount of memory. Two requests need a claim instead:

* **several whole chips**, kept to the server's layout as classic mode keeps them
  (``topology``): one request with a ``firstAvailable`` sub-request per kind of rule, each
  selecting the servers it applies to by their ``server`` attribute; a sub-request whose
  rule is "one group" has a ``matchAttribute`` constraint on the group attribute (``ring``,
  ``module``). Servers whose rule for that count no attribute can express (a 910b-16 given
  10 chips must split them over both rings at matching positions; an A3 node gives 4 dies
  as two whole pairs) and servers that do not allow the count are left out, and say so;
* **soft slices**: the model's soft class with ``capacity.requests`` of memory and core
  percent; several chips are kept distinct with a ``distinctAttribute`` on ``chip``.

The template's name is its content's digest after a readable prefix, so a template is
created once per namespace and never changes under a name. Pure.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from vnpu_core import catalog, draclasses, topology

Json = dict[str, Any]
API_VERSION = "resource.k8s.io/v1"
REQUEST = "npu"
MANAGED_BY = "vnpu"

# The device attribute naming a chip's group in each server layout (the driver publishes it);
# a PCIe server has no groups.
GROUP_ATTRIBUTE: Mapping[topology.ServerKind, str] = {
    topology.ServerKind.RING_910A_8: "ring",
    topology.ServerKind.RING_910A_4: "ring",
    topology.ServerKind.RINGS_910B_16: "ring",
    topology.ServerKind.MESH_910B_8: "mesh",
    topology.ServerKind.A3_PAIRS: "module",
    topology.ServerKind.DUO_300I: "card",
}

Rule = Literal["group", "any"]


def rule(kind: topology.ServerKind, count: int) -> Rule | str:
    """How ``count`` whole chips stay within ``kind``'s layout: ``"group"`` (all in one group),
    ``"any"`` (any chips of the node), or why DRA mode cannot give them there."""
    kinds = topology.ServerKind
    if kind is kinds.RING_910A_8:
        if count in (1, 2, 4):
            return "group"
        return "any" if count == 8 else "910a-8 servers give 1, 2, 4 or 8 chips"
    if kind is kinds.RING_910A_4:
        return "any" if count in (1, 2, 4) else "910a-4 servers give 1, 2 or 4 chips"
    if kind is kinds.MESH_910B_8:
        return "any" if count <= 8 else "910b-8 servers have 8 chips"
    if kind is kinds.RINGS_910B_16:
        if count <= 8:
            return "group"
        if count == 16:
            return "any"
        return (
            "910b-16 servers split more than 8 chips evenly over both rings at matching "
            "positions, which a claim constraint cannot say"
        )
    if kind is kinds.A3_PAIRS:
        if count == 2:
            return "group"
        return (
            "a3-pairs servers give more than 2 dies as whole die pairs, which a claim "
            "constraint cannot say"
            if count % 2 == 0
            else "a3-pairs servers give 1 die or an even number"
        )
    return "any"


@dataclass(frozen=True, slots=True)
class Claim:
    """A ResourceClaimTemplate to create in the pod's namespace (``body`` has no namespace)
    and what the webhook tells the user about it."""

    name: str
    body: Json
    said: tuple[str, ...] = ()


def _named(prefix: str, spec: Json) -> Claim:
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]
    name = f"{prefix}-{digest}"
    body = {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": MANAGED_BY}},
        "spec": spec,
    }
    return Claim(name, body)


def _servers(kinds: list[topology.ServerKind]) -> Json:
    listed = ", ".join(f"'{k.value}'" for k in kinds)
    expression = f"device.attributes['{draclasses.DRIVER}'].server in [{listed}]"
    return {"cel": {"expression": expression}}


def _kinds(model: catalog.ChipModel) -> list[topology.ServerKind]:
    """The server layouts ``model``'s chips come in, in ``ServerKind`` order."""
    found = {topology.default_kind(model, size) for size in range(1, 17)}
    return [kind for kind in topology.ServerKind if kind in found]


def whole_chips(model: catalog.ChipModel, count: int) -> Claim | str:
    """The claim for ``count`` whole chips of ``model`` kept to each server's layout, or why
    no server can give them."""
    by_rule: dict[str, list[topology.ServerKind]] = {}
    refused: list[str] = []
    for kind in _kinds(model):
        verdict = rule(kind, count)
        if verdict == "group":
            by_rule.setdefault(GROUP_ATTRIBUTE[kind], []).append(kind)
        elif verdict == "any":
            by_rule.setdefault("any", []).append(kind)
        else:
            refused.append(verdict)
    if not by_rule:
        return f"{count} whole chips of {model.common_word}: " + "; ".join(refused)
    device_class = draclasses.class_name(draclasses.whole_resource(model), model)
    options: list[Json] = []
    constraints: list[Json] = []
    for key, kinds in by_rule.items():
        options.append(
            {
                "name": key,
                "deviceClassName": device_class,
                "count": count,
                "selectors": [_servers(kinds)],
            }
        )
        if key != "any":
            constraints.append(
                {
                    "requests": [f"{REQUEST}/{key}"],
                    "matchAttribute": f"{draclasses.DRIVER}/{key}",
                }
            )
    devices: Json = {"requests": [{"name": REQUEST, "firstAvailable": options}]}
    if constraints:
        devices["constraints"] = constraints
    claim = _named(f"vnpu-{model.common_word.lower()}-{count}x", {"spec": {"devices": devices}})
    said = tuple(f"{count} whole chips: {why}: such servers are not offered" for why in refused)
    return Claim(claim.name, claim.body, said)


def soft_slices(model: catalog.ChipModel, count: int, memory_mib: int, core_percent: int) -> Claim:
    """The claim for ``count`` soft slices of ``memory_mib`` and ``core_percent`` each, one per
    chip, on the soft devices of ``model``."""
    word = model.common_word.lower()
    exactly: Json = {
        "deviceClassName": draclasses.class_name(f"{draclasses.DRIVER}/{word}-soft", model),
        "count": count,
        "capacity": {"requests": {"memory": f"{memory_mib}Mi", "corePercent": str(core_percent)}},
    }
    devices: Json = {"requests": [{"name": REQUEST, "exactly": exactly}]}
    if count > 1:
        devices["constraints"] = [
            {"requests": [REQUEST], "distinctAttribute": f"{draclasses.DRIVER}/chip"}
        ]
    prefix = f"vnpu-{word}-soft-{count}x{memory_mib}m-{core_percent}c"
    return _named(prefix, {"spec": {"devices": devices}})
