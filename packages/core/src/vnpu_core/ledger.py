"""Per-chip usage of a node, rebuilt from the pods bound to it.

The durable record of who holds what is on the pods themselves, as HAMi and Volcano keep
it: ``hami.io/<CW>-devices-allocated`` (which chip, how much memory and cores per
container) plus the template names in ``huawei.com/<CW>``. Pods count from the moment
they are bound until they are gone: terminating pods still count, succeeded and failed
pods do not. Init containers count with peak semantics until they have all finished.
The scheduler's cache, the planner and the exporter call ``node_usage``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from vnpu_core import catalog, errors, inventory, protocol
from vnpu_core.inventory import ChipUsage

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
ALLOCATED_SUFFIX = "-devices-allocated"  # the decision annotations: hami.io/<CW>-devices-allocated
_TEMPLATE_NAME = re.compile(r"^vir(\d+)(?:_(\d+)c)?(?:_(\d+)g)?")


@dataclass(frozen=True, slots=True)
class Problem:
    """A pod whose annotations could not be read; its chips' usage is unknown."""

    pod: str  # namespace/name
    error: errors.ProtocolError


@dataclass(frozen=True, slots=True)
class Ledger:
    """Usage by chip UUID, and the pods whose usage could not be read."""

    usage: dict[str, ChipUsage]
    problems: tuple[Problem, ...] = ()


def holds_devices(pod: Mapping[str, Any], node: str | None = None) -> bool:
    """True while a pod bound to ``node`` (any node when None) still holds what it was given."""
    spec = pod.get("spec") or {}
    bound = spec.get("nodeName")
    if not bound or (node is not None and bound != node):
        return False
    return (pod.get("status") or {}).get("phase") not in FINISHED_PHASES


def template_from_name(model: catalog.ChipModel, name: str) -> catalog.Template:
    """The catalog's template, or one read from the name's grammar (``vir<cores>[_<cpus>c][_<GB>g]``)."""
    known = model.template(name)
    if known is not None:
        return known
    match = _TEMPLATE_NAME.match(name)
    if match is None:
        # An unknown name: assume the worst case, a whole chip's worth.
        return catalog.Template(name, model.memory_capacity_mib, model.aicore, model.aicpu)
    cores = int(match.group(1))
    cpus = int(match.group(2)) if match.group(2) else 1
    memory = (
        int(match.group(3)) * 1024
        if match.group(3)
        else model.memory_capacity_mib * cores // model.aicore
    )
    return catalog.Template(name, memory, cores, cpus)


def entry_usage(
    model: catalog.ChipModel, entry: protocol.DeviceEntry, template: str | None, soft: bool
) -> ChipUsage:
    """What one device entry holds on its chip."""
    allocatable = model.memory_allocatable_mib
    if soft:
        exclusive = entry.cores >= 100 or entry.memory_mib >= allocatable
        return inventory.soft_usage(entry.memory_mib, entry.cores, exclusive)
    if template:
        return inventory.template_usage(template_from_name(model, template))
    if entry.memory_mib == 0 or entry.memory_mib >= allocatable:
        return ChipUsage(memory_mib=max(entry.memory_mib, allocatable), exclusive=True)
    # No template recorded (an older writer): the template the memory rounds to.
    for candidate in model.templates:
        if candidate.memory_mib >= entry.memory_mib:
            return inventory.template_usage(candidate)
    return ChipUsage(memory_mib=allocatable, exclusive=True)


def _init_done(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    plain = [
        c.get("name")
        for c in spec.get("initContainers") or []
        if c.get("restartPolicy") != "Always"
    ]
    if not plain:
        return True
    statuses = {
        s.get("name"): s for s in (pod.get("status") or {}).get("initContainerStatuses") or []
    }
    for name in plain:
        terminated = ((statuses.get(name) or {}).get("state") or {}).get("terminated") or {}
        if terminated.get("exitCode") != 0:
            return False
    return True


def _init_flags(pod: Mapping[str, Any]) -> list[bool]:
    """For each container in annotation order: does it run alone before the others?"""
    spec = pod.get("spec") or {}
    flags = [c.get("restartPolicy") != "Always" for c in spec.get("initContainers") or []]
    return flags + [False] * len(spec.get("containers") or [])


@dataclass(frozen=True, slots=True)
class Device:
    """One device entry of a pod's decision annotations, read: its container and what it holds."""

    container: int  # the container's position in annotation order (init containers first)
    runs_alone: bool  # a run-to-completion init container's, counted while init runs
    model: catalog.ChipModel
    uuid: str
    usage: ChipUsage


def devices(pod: Mapping[str, Any], models: catalog.Catalog) -> list[Device]:
    """Every device entry that still counts, model by model, in annotation order.

    Entries of run-to-completion init containers are left out once they have all finished.
    Raises ProtocolError on a malformed annotation. ``pod_usage`` sums these chip by chip;
    ``vnpu_core.holdings`` counts them in quota units.
    """
    annotations: Mapping[str, str] = (pod.get("metadata") or {}).get("annotations") or {}
    soft = annotations.get(protocol.VNPU_MODE_KEY) == protocol.SOFT_MODE_VALUE
    flags = _init_flags(pod)
    init_done = _init_done(pod)
    found: list[Device] = []
    for model in models:
        key = protocol.allocated_key(model.common_word)
        raw = annotations.get(key)
        if not raw:
            continue
        containers = protocol.decode_devices(key, raw)
        templates = _templates(annotations, model)
        position = 0
        for number, entries in enumerate(containers):
            runs_alone = flags[number] if number < len(flags) else False
            for entry in entries:
                template = _template_for(templates, position, entry.uuid)
                position += 1
                if runs_alone and init_done:
                    continue
                held = entry_usage(model, entry, template, soft)
                found.append(Device(number, runs_alone, model, entry.uuid, held))
    return found


def pod_usage(pod: Mapping[str, Any], models: catalog.Catalog) -> dict[str, ChipUsage]:
    """What one pod holds, by chip UUID. Raises ProtocolError on a malformed annotation."""
    regular: dict[str, ChipUsage] = {}
    alone: dict[tuple[str, int], dict[str, ChipUsage]] = {}
    for device in devices(pod, models):
        if device.runs_alone:
            target = alone.setdefault((device.model.common_word, device.container), {})
        else:
            target = regular
        target[device.uuid] = target.get(device.uuid, inventory.IDLE).plus(device.usage)
    for init_usage in alone.values():
        for uuid, held in init_usage.items():
            regular[uuid] = regular.get(uuid, inventory.IDLE).peak(held)
    return regular


def _templates(
    annotations: Mapping[str, str], model: catalog.ChipModel
) -> tuple[protocol.RuntimeInfo, ...]:
    key = protocol.runtime_key(model.common_word)
    raw = annotations.get(key)
    return protocol.decode_runtime(key, raw) if raw else ()


def _template_for(infos: tuple[protocol.RuntimeInfo, ...], position: int, uuid: str) -> str | None:
    """Runtime info lists one element per device in the same order; fall back to the UUID."""
    if position < len(infos) and infos[position].uuid == uuid:
        return infos[position].template
    for info in infos:
        if info.uuid == uuid:
            return info.template
    return None


def read_pod(pod: Mapping[str, Any], models: catalog.Catalog) -> dict[str, ChipUsage] | Problem:
    """``pod_usage``, or the Problem naming the pod when its annotations cannot be read."""
    try:
        return pod_usage(pod, models)
    except errors.ProtocolError as exc:
        meta = pod.get("metadata") or {}
        return Problem(f"{meta.get('namespace', '')}/{meta.get('name', '')}", exc)


def add(into: dict[str, ChipUsage], held: Mapping[str, ChipUsage]) -> None:
    """Add one pod's usage (by chip UUID) to a node's running total."""
    for uuid, chip_usage in held.items():
        into[uuid] = into.get(uuid, inventory.IDLE).plus(chip_usage)


def node_usage(pods: Iterable[Mapping[str, Any]], node: str, models: catalog.Catalog) -> Ledger:
    """Usage of every chip of ``node`` from the pods bound to it; unreadable pods are listed."""
    usage: dict[str, ChipUsage] = {}
    problems: list[Problem] = []
    for pod in pods:
        if not holds_devices(pod, node):
            continue
        held = read_pod(pod, models)
        if isinstance(held, Problem):
            problems.append(held)
        else:
            add(usage, held)
    return Ledger(usage, tuple(problems))


# --- what the pods claim against what the node granted ---------------------------------------


class Disagreement(StrEnum):
    """How a pod's decision annotations and its node's grants (``vnpu_core.granted``) differ."""

    ANNOTATION_MISSING = "annotation_missing"  # a live pod holds grants its annotations do not show
    ANNOTATION_DIFFERS = "annotation_differs"  # its annotations show less than was granted
    ANNOTATION_UNREADABLE = "annotation_unreadable"  # unreadable: counted as what was granted


@dataclass(frozen=True, slots=True)
class Mismatch:
    pod: str  # namespace/name
    reason: Disagreement
    chips: tuple[str, ...]  # the chip UUIDs concerned
    uid: str = ""


@dataclass(frozen=True, slots=True)
class Claim:
    """One pod bound to the node: who it is and what its decision annotations say it holds."""

    pod: str  # namespace/name
    held: dict[str, ChipUsage] | Problem


@dataclass(frozen=True, slots=True)
class Reconciled:
    """Usage counted from both sides, and where they disagree or a chip is held twice."""

    ledger: Ledger
    mismatches: tuple[Mismatch, ...] = ()
    clashes: tuple[tuple[str, str], ...] = ()  # (chip UUID, why its holders cannot coexist)


def _short(held: Mapping[str, ChipUsage], grant: Mapping[str, ChipUsage]) -> tuple[str, ...]:
    """The chips where ``held`` shows less than ``grant`` in some budget."""
    return tuple(
        sorted(uuid for uuid, g in grant.items() if not held.get(uuid, inventory.IDLE).covers(g))
    )


def _peak(held: Mapping[str, ChipUsage], grant: Mapping[str, ChipUsage]) -> dict[str, ChipUsage]:
    merged = dict(held)
    for uuid, g in grant.items():
        merged[uuid] = merged.get(uuid, inventory.IDLE).peak(g)
    return merged


def reconcile(
    claims: Mapping[str, Claim],
    grants: Mapping[str, Mapping[str, ChipUsage]] | None,
    live: Mapping[str, str],
    node: inventory.Node | None,
) -> Reconciled:
    """A node's usage from its pods' claims (by pod UID) and what its device plugin granted.

    ``grants`` is ``vnpu_core.granted.by_pod`` of every model the node registers, or None
    when the node does not report (HAMi's or Volcano's device plugin). Each pod counts as
    holding, budget by budget, the larger of what its annotations claim and what it was
    granted, so editing its own annotations frees nothing. A pod the node granted that
    claims nothing counts as its grants (a pod that is gone but still granted too: the
    device plugin refuses to grant over it until it sees it end); when it is still
    ``live`` (UID -> namespace/name of the node's bound, unfinished pods), that is a
    mismatch. An unreadable pod counts as its grants when the node reports, and as unknown
    (``Ledger.problems``: the node cannot be used) only when it does not. ``clashes``
    lists the chips whose holders, counted so, cannot coexist (``inventory.overcommitted``).
    """
    usage: dict[str, ChipUsage] = {}
    problems: list[Problem] = []
    mismatches: list[Mismatch] = []
    holders: dict[str, list[ChipUsage]] = {}
    reported = grants or {}

    def count(held: Mapping[str, ChipUsage]) -> None:
        add(usage, held)
        for uuid, chip_usage in held.items():
            if not chip_usage.idle:
                holders.setdefault(uuid, []).append(chip_usage)

    for uid, claim in claims.items():
        grant = reported.get(uid, {})
        if isinstance(claim.held, Problem):
            if grants is None:
                problems.append(claim.held)
                continue
            reason = Disagreement.ANNOTATION_UNREADABLE
            mismatches.append(Mismatch(claim.pod, reason, tuple(sorted(grant)), uid))
            count(grant)
            continue
        short = _short(claim.held, grant)
        if short:
            mismatches.append(Mismatch(claim.pod, Disagreement.ANNOTATION_DIFFERS, short, uid))
        count(_peak(claim.held, grant))
    for uid, grant in reported.items():
        if uid in claims:
            continue
        count(grant)
        if uid in live:
            chips = tuple(sorted(grant))
            mismatches.append(Mismatch(live[uid], Disagreement.ANNOTATION_MISSING, chips, uid))
    clashes: list[tuple[str, str]] = []
    if node is not None:
        for uuid, held in sorted(holders.items()):
            chip = node.chip(uuid)
            why = inventory.overcommitted(chip, held) if chip is not None and len(held) > 1 else ""
            if why:
                clashes.append((uuid, why))
    return Reconciled(Ledger(usage, tuple(problems)), tuple(mismatches), tuple(clashes))
