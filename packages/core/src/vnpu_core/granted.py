"""What a node's device plugin reports it granted: the vnpu-only ``vnpu.io/granted-<CW>``.

Pod annotations can be edited by whoever may edit the pod; the device plugin's own record
of what it handed out cannot. vnpu's device plugin publishes that record on its node
(``encode``; the format is in docs/protocol.md); the scheduler reads it back (``decode``)
and counts each pod as holding at least what the node says it was granted
(``vnpu_core.ledger.reconcile``). HAMi and Volcano ignore the key.

Value, compact JSON with keys sorted::

    {"chips":{"<chip UUID>":{"<pod UID>":["whole"|"vnpu:<template>"|"soft:<MiB>:<percent>",
                                          "init:..."]}},"v":1}

A holding prefixed ``init:`` is a run-to-completion init container's: it runs alone, never
beside the pod's app containers, so a pod's usage of a chip is its app holdings together
or its largest init holding, budget by budget (``chip_usage``), the rule
``vnpu_core.ledger.pod_usage`` applies to decision annotations. Decoding refuses anything
else with ``errors.ProtocolError(key, fragment, problem)``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from vnpu_core import catalog, errors, inventory, ledger
from vnpu_core.inventory import ChipUsage

ANNOTATION_PREFIX = "vnpu.io/granted-"
VERSION = 1
INIT_PREFIX = "init:"
_MAX_NUMBER = 2**31 - 1

# chip UUID -> pod UID -> what the pod's containers got on that chip
Grants = dict[str, dict[str, tuple["Holding", ...]]]
# pod UID -> chip UUID -> usage
Usage = dict[str, dict[str, ChipUsage]]
Report = Literal["read", "absent", "unreadable"]


def annotation_key(common_word: str) -> str:
    """Node: what this node's device plugin granted of model ``common_word``, per chip and pod."""
    return f"{ANNOTATION_PREFIX}{common_word}"


class Kind(StrEnum):
    WHOLE = "whole"
    VNPU = "vnpu"
    SOFT = "soft"


@dataclass(frozen=True, slots=True)
class Holding:
    """One device one container got on one chip, as published."""

    kind: Kind
    template: str = ""  # a hard vNPU's template
    memory_mib: int = 0  # a soft slice's memory
    cores: int = 0  # a soft slice's core percent
    init: bool = False  # a run-to-completion init container's

    def __str__(self) -> str:
        prefix = INIT_PREFIX if self.init else ""
        if self.kind is Kind.WHOLE:
            return f"{prefix}whole"
        if self.kind is Kind.VNPU:
            return f"{prefix}vnpu:{self.template}"
        return f"{prefix}soft:{self.memory_mib}:{self.cores}"


def encode(grants: Mapping[str, Mapping[str, Sequence[Holding]]]) -> str:
    """The annotation value; chips with nothing granted are left out, holdings sorted."""
    chips = {
        uuid: {uid: sorted(str(h) for h in held) for uid, held in pods.items() if held}
        for uuid, pods in grants.items()
    }
    chips = {uuid: pods for uuid, pods in chips.items() if pods}
    return json.dumps({"v": VERSION, "chips": chips}, separators=(",", ":"), sort_keys=True)


def _number(key: str, text: str, what: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) > _MAX_NUMBER:
        raise errors.ProtocolError(key, text, f"{what} must be a whole number of at most 10 digits")
    return int(text)


def parse_holding(key: str, text: str) -> Holding:
    """One published holding (``whole``, ``vnpu:<t>``, ``soft:<MiB>:<pct>``, ``init:`` prefix)."""
    init = text.startswith(INIT_PREFIX)
    body = text[len(INIT_PREFIX) :] if init else text
    kind, _, rest = body.partition(":")
    if kind == Kind.WHOLE and not rest and body == kind:
        return Holding(Kind.WHOLE, init=init)
    if kind == Kind.VNPU and rest and rest.isascii() and rest.replace("_", "").isalnum():
        return Holding(Kind.VNPU, template=rest, init=init)
    if kind == Kind.SOFT:
        memory, _, cores = rest.partition(":")
        return Holding(
            Kind.SOFT,
            memory_mib=_number(key, memory, "soft-slice memory"),
            cores=_number(key, cores, "soft-slice core percent"),
            init=init,
        )
    raise errors.ProtocolError(
        key, text, "a holding is whole, vnpu:<template> or soft:<MiB>:<percent>, maybe init:"
    )


def decode(key: str, value: str) -> Grants:
    """The grants in one annotation value; ``ProtocolError`` names what cannot be read."""
    try:
        document = json.loads(value)
    except ValueError as exc:
        raise errors.ProtocolError(key, value[:80], f"not JSON: {exc}") from exc
    if not isinstance(document, dict) or set(document) != {"v", "chips"}:
        raise errors.ProtocolError(key, value[:80], 'an object with exactly "v" and "chips"')
    if document["v"] != VERSION or isinstance(document["v"], bool):
        raise errors.ProtocolError(key, str(document["v"]), f"format version must be {VERSION}")
    chips = document["chips"]
    if not isinstance(chips, dict):
        raise errors.ProtocolError(key, str(chips)[:80], '"chips" must be an object')
    grants: Grants = {}
    for uuid, pods in chips.items():
        if not uuid or not isinstance(pods, dict):
            raise errors.ProtocolError(key, uuid, "a chip maps pod UIDs to lists of holdings")
        grants[uuid] = {}
        for uid, held in pods.items():
            if not uid or not isinstance(held, list) or not all(isinstance(h, str) for h in held):
                raise errors.ProtocolError(key, uid, "a pod UID maps to a list of strings")
            grants[uuid][uid] = tuple(parse_holding(key, h) for h in held)
    return grants


def holding_usage(model: catalog.ChipModel, holding: Holding) -> ChipUsage:
    """What one holding takes on a chip of ``model``."""
    if holding.kind is Kind.WHOLE:
        return ChipUsage(memory_mib=model.memory_allocatable_mib, exclusive=True)
    if holding.kind is Kind.VNPU:
        return inventory.template_usage(ledger.template_from_name(model, holding.template))
    exclusive = holding.cores >= 100 or holding.memory_mib >= model.memory_allocatable_mib
    return inventory.soft_usage(holding.memory_mib, holding.cores, exclusive)


def chip_usage(usages: Iterable[tuple[ChipUsage, bool]]) -> ChipUsage:
    """One pod's usage of one chip from ``(usage, init)`` pairs: the app containers together,
    each run-to-completion init container alone (the larger, budget by budget)."""
    pairs = list(usages)
    total = inventory.IDLE
    for usage, init in pairs:
        if not init:
            total = total.plus(usage)
    for usage, init in pairs:
        if init:
            total = total.peak(usage)
    return total


def by_pod(grants: Grants, node: inventory.Node) -> Usage:
    """Pod UID -> chip UUID -> usage, for the chips ``node`` registered.

    A chip the node does not register (a stale publication naming a removed chip) is left
    out: there is nothing left on it to count.
    """
    usage: Usage = {}
    for uuid, pods in grants.items():
        chip = node.chip(uuid)
        if chip is None:
            continue
        for uid, held in pods.items():
            pairs = ((holding_usage(chip.model, h), h.init) for h in held)
            usage.setdefault(uid, {})[uuid] = chip_usage(pairs)
    return usage


def report(
    node: inventory.Node | None, annotations: Mapping[str, str]
) -> tuple[Report, Usage | None]:
    """What a node's device plugin reports it granted (``by_pod``), and how it was read.

    None (``absent`` or ``unreadable``) unless every model the node registers has a
    readable report: without one, a pod whose annotations cannot be read might hold any
    chip of that model.
    """
    if node is None:
        return "absent", None
    found: Grants = {}
    for word in node.models():
        key = annotation_key(word)
        raw = annotations.get(key)
        if raw is None:
            return "absent", None
        try:
            found.update(decode(key, raw))
        except errors.ProtocolError:
            return "unreadable", None
    return "read", by_pod(found, node)


def node_usage(
    pods: Iterable[Mapping[str, Any]],
    node_object: Mapping[str, Any],
    node: inventory.Node,
    models: catalog.Catalog,
) -> ledger.Reconciled:
    """``ledger.reconcile`` of a node's pods (as listed) with the report on ``node_object``."""
    meta = node_object.get("metadata") or {}
    name = str(meta.get("name") or "")
    claims: dict[str, ledger.Claim] = {}
    live: dict[str, str] = {}
    for pod in pods:
        if not ledger.holds_devices(pod, name):
            continue
        pod_meta = pod.get("metadata") or {}
        uid = str(pod_meta.get("uid") or "")
        who = f"{pod_meta.get('namespace', '')}/{pod_meta.get('name', '')}"
        live[uid] = who
        annotations = pod_meta.get("annotations") or {}
        if any(key.endswith(ledger.ALLOCATED_SUFFIX) for key in annotations):
            claims[uid] = ledger.Claim(who, ledger.read_pod(pod, models))
    _, grants = report(node, meta.get("annotations") or {})
    return ledger.reconcile(claims, grants, live, node)
