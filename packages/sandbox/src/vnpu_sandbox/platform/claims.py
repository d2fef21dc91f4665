"""What DRA mode's pods hold, read from the ResourceClaims kube-scheduler allocated.

In DRA mode no pod carries the scheduler's decision annotations (``placements`` reads those):
kube-scheduler writes the allocation into each claim (``status.allocation.devices.results``:
driver, pool = node, device) and the pods it is for into ``status.reservedFor``. The demo
(``demo --mode dra``) reads them here into the same ``placements.Placement`` and
``placements.ModelUse`` rows the classic demo prints. A device name of the ``npu.vnpu.io``
driver says its chip and kind (``vnpu_core.draclasses.parse_device``); the sandbox's record
says each node's chip model and count. For a pod kube-scheduler refused, ``asks`` says what
it asked of the driver once the webhook rewrote it (kube-scheduler's own reason does not:
``cannot allocate all claims``). Pure: callers pass the JSON objects.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vnpu_core import catalog, draclasses, errors, quantities
from vnpu_sandbox.platform import clusterfile, placements

Json = Mapping[str, Any]
MIB = 2**20
NPU_RESOURCES = ("huawei.com/", f"{draclasses.DRIVER}/")


@dataclass(frozen=True, slots=True)
class Held:
    """One device a claim was allocated: chip ``phy`` of ``node`` whole, a vNPU of
    ``template``, or a soft slice of ``memory_mib`` and ``core_percent``."""

    claim: str  # the claim's UID
    device: str
    node: str
    phy: int
    common_word: str
    kind: draclasses.Kind
    memory_mib: int
    template: str = ""
    core_percent: int = 0


def _model(node: clusterfile.NodeSpec | None) -> catalog.ChipModel | None:
    return None if node is None else catalog.BUILTIN.by_common_word(node.common_word)


def _mib(value: object) -> int:
    try:
        return int(quantities.parse(value).value / MIB)
    except errors.QuantityError:
        return 0


def _held(claim: str, result: Json, nodes: Mapping[str, clusterfile.NodeSpec]) -> Held | None:
    """The device of one allocation result; None when it is not a device of the driver."""
    if result.get("driver") != draclasses.DRIVER:
        return None
    node = nodes.get(str(result.get("pool", "")))
    model = _model(node)
    name = str(result.get("device", ""))
    device = draclasses.parse_device(name)
    if node is None or model is None or device is None:
        return None
    where = (claim, name, node.name, device.phy, model.common_word)
    if device.kind == "whole":
        return Held(*where, "whole", model.memory_capacity_mib)
    if device.kind == "soft":
        consumed = result.get("consumedCapacity") or {}
        percent = str(consumed.get("corePercent", "0"))
        cores = int(percent) if percent.isdigit() else 0
        return Held(*where, "soft", _mib(consumed.get("memory", 0)), core_percent=cores)
    template = device.template(model)
    if template is None:
        return None
    return Held(*where, "template", template.memory_mib, template.name)


def held(claims: Iterable[Json], nodes: Sequence[clusterfile.NodeSpec]) -> dict[str, list[Held]]:
    """Pod UID -> the devices its allocated claims hold (a claim shared by pods, for each)."""
    by_name = {node.name: node for node in nodes}
    out: dict[str, list[Held]] = collections.defaultdict(list)
    for claim in claims:
        uid = str((claim.get("metadata") or {}).get("uid", ""))
        status = claim.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        devices = [h for h in (_held(uid, r, by_name) for r in results) if h is not None]
        for reserved in status.get("reservedFor") or []:
            if reserved.get("resource") == "pods" and reserved.get("uid"):
                out[str(reserved["uid"])].extend(devices)
    return dict(out)


def _describe(device: Held) -> str:
    where = f"chip {device.phy}"
    if device.kind == "whole":
        return f"{where}: whole chip"
    if device.kind == "soft":
        return f"{where}: soft slice {device.memory_mib} MiB, {device.core_percent}% cores"
    return f"{where}: {device.template}"


def placement(pod: Json, by_pod: Mapping[str, Sequence[Held]]) -> placements.Placement:
    """Where ``pod`` is and what its claims hold (``chip 2: vir02``), as the classic rows."""
    meta = pod["metadata"]
    devices = sorted(by_pod.get(str(meta.get("uid", "")), ()), key=lambda h: (h.phy, h.template))
    return placements.Placement(
        namespace=meta.get("namespace", ""),
        name=meta["name"],
        phase=(pod.get("status") or {}).get("phase", ""),
        node=(pod.get("spec") or {}).get("nodeName") or "",
        holds=tuple(_describe(d) for d in devices),
    )


def distinct(by_pod: Mapping[str, Sequence[Held]]) -> list[Held]:
    """Every device of every claim, once, however many pods share the claim."""
    return list(dict.fromkeys(h for devices in by_pod.values() for h in devices))


def templates(devices: Iterable[Held]) -> dict[str, int]:
    """How many vNPUs of each template ``devices`` hold."""
    counted = collections.Counter(d.template for d in devices if d.kind == "template")
    return dict(sorted(counted.items()))


def model_use(
    devices: Iterable[Held], nodes: Sequence[clusterfile.NodeSpec]
) -> dict[str, placements.ModelUse]:
    """Per chip model: chips, chips with anything allocated, memory allocated of total."""
    on_chip: dict[tuple[str, int], list[Held]] = collections.defaultdict(list)
    for device in devices:
        on_chip[(device.node, device.phy)].append(device)
    out: dict[str, placements.ModelUse] = {}
    for node in nodes:
        model = _model(node)
        memory = model.memory_capacity_mib if model is not None else 0
        for phy in range(node.chips):
            here = on_chip.get((node.name, phy), [])
            word = node.common_word
            before = out.get(word, placements.ModelUse(word, 0, 0, 0, 0, 0, 0, 0))
            out[word] = placements.ModelUse(
                common_word=word,
                chips=before.chips + 1,
                chips_used=before.chips_used + (1 if here else 0),
                memory_mib=before.memory_mib + memory,
                memory_allocated_mib=before.memory_allocated_mib
                + min(memory, sum(d.memory_mib for d in here)),
                vnpus=before.vnpus + sum(d.kind == "template" for d in here),
                whole_chips=before.whole_chips + sum(d.kind == "whole" for d in here),
                soft_slices=before.soft_slices + sum(d.kind == "soft" for d in here),
            )
    return dict(sorted(out.items()))


def _choices(request: Json, same: Mapping[str, str]) -> str:
    """One request of a claim: ``4 x ascend910a.npu.vnpu.io in one ring``, its alternatives
    (``firstAvailable``) joined by or; ``same``: request or sub-request -> the attribute its
    devices share (a ``matchAttribute`` constraint; "" for one on every request)."""
    name = str(request.get("name", ""))
    choices = request.get("firstAvailable") or [request.get("exactly") or request]
    said: list[str] = []
    for choice in choices:
        count = "all" if choice.get("allocationMode") == "All" else choice.get("count", 1)
        text = f"{count} x {choice.get('deviceClassName', '?')}"
        shared = same.get(f"{name}/{choice.get('name')}") or same.get(name) or same.get("")
        text += f" in one {shared.rpartition('/')[2]}" if shared else ""
        said += [text] if text not in said else []
    return " or ".join(said)


def asks(pod: Json, templates: Iterable[Json]) -> list[str]:
    """What ``pod`` asks of the driver, for a person: its NPU extended resources and its pod
    claims, a claim from one of ``templates`` (ResourceClaimTemplates) with its requests."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    named_here = {
        t["metadata"]["name"]: t
        for t in templates
        if t["metadata"].get("namespace") == meta.get("namespace")
    }
    out = []
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        limits = (container.get("resources") or {}).get("limits") or {}
        out += [f"{k}: {v}" for k, v in sorted(limits.items()) if k.startswith(NPU_RESOURCES)]
    for entry in spec.get("resourceClaims") or []:
        named = entry.get("resourceClaimTemplateName")
        if not named:
            out.append(f"claim {entry.get('resourceClaimName')}")
            continue
        template = named_here.get(named) or {}
        devices = ((template.get("spec") or {}).get("spec") or {}).get("devices") or {}
        same = {
            request: str(constraint["matchAttribute"])
            for constraint in devices.get("constraints") or []
            if constraint.get("matchAttribute")
            for request in constraint.get("requests") or [""]
        }
        wants = "; ".join(_choices(r, same) for r in devices.get("requests") or [])
        out.append(f"a claim from ResourceClaimTemplate {named}" + (f": {wants}" if wants else ""))
    return out


def workload(pod: Json) -> str:
    """``namespace/name`` of what made ``pod``: its Deployment (the ReplicaSet's name without
    the pod template hash), or the pod itself."""
    meta = pod["metadata"]
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind") == "ReplicaSet"]
    name = owners[0]["name"] if owners else meta["name"]
    digest = (meta.get("labels") or {}).get("pod-template-hash", "")
    if owners and digest:
        name = name.removesuffix(f"-{digest}")
    return f"{meta.get('namespace', '')}/{name}"


def asked(pods: Iterable[Json], templates: Iterable[Json]) -> dict[str, str]:
    """Per workload (``workload``), what its first pod asks of the driver (``asks``)."""
    listed = list(templates)
    out: dict[str, str] = {}
    for pod in pods:
        out.setdefault(workload(pod), ", ".join(asks(pod, listed)) or "no NPU")
    return dict(sorted(out.items()))
