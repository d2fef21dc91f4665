"""A node's NPU inventory read from its Kubernetes object, as any scheduler must read it.

Device plugins (vnpu's or HAMi's) publish ``hami.io/node-register-<CW>`` (the chips),
``hami.io/node-handshake-<CW>`` (liveness) and ``hami-vnpu-core`` (soft mode); vnpu's own
plugin adds ``vnpu.io/server`` (the server layout), which other schedulers ignore. This
module turns those into an ``inventory.Node`` (chips numbered by their registered
``index`` for the server layout, with their ``custominfo.NetworkID``), or into the reason
the node cannot take NPU pods right now (no registration, a stale handshake, no allocatable devices, a
malformed annotation). The scheduler's node cache and tests call ``read_node``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from vnpu_core import catalog, coordination, errors, inventory, protocol, quantities, topology

SERVER_KIND_KEY = "vnpu.io/server"


@dataclass(frozen=True, slots=True)
class NodeRead:
    """A node's inventory, or why it is unavailable; warnings are worth logging, not fatal."""

    name: str
    node: inventory.Node | None
    unavailable: str = ""
    warnings: tuple[str, ...] = ()


def _allocatable(obj: Mapping[str, Any], resource: str) -> int:
    """The allocatable count of ``resource``, in any quantity form (the API stores 1000 as 1k)."""
    raw = ((obj.get("status") or {}).get("allocatable") or {}).get(resource)
    if raw is None:
        return 0
    try:
        return int(quantities.parse(raw).value)
    except errors.QuantityError:
        return 0


def _stale(obj: Mapping[str, Any], word: str, now: datetime, timeout: timedelta) -> str:
    """Why the plugin for ``word`` looks dead, or "" when it reported in time."""
    key = protocol.node_handshake_key(word)
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(key)
    if raw is None:
        return ""  # Volcano-era plugins may not write it; allocatable decides then
    handshake = coordination.decode_handshake(key, raw)
    if handshake.state is coordination.HandshakeState.DELETED:
        return f"device plugin for {word} was marked gone ({raw})"
    age = now - handshake.time
    if age > timeout:
        seconds = int(age.total_seconds())
        return f"device plugin for {word} last reported {seconds} s ago (limit {int(timeout.total_seconds())} s)"
    return ""


def read_node(
    obj: Mapping[str, Any], models: catalog.Catalog, now: datetime, handshake_timeout: timedelta
) -> NodeRead:
    """Read a node object (a dict as the API returns it). ``now`` is naive local time."""
    metadata = obj.get("metadata") or {}
    name = str(metadata.get("name", ""))
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    chips: list[inventory.Chip] = []
    warnings: list[str] = []
    problems: list[str] = []
    for model in models:
        key = protocol.node_register_key(model.common_word)
        raw = annotations.get(key)
        if raw is None:
            continue
        try:
            registered = protocol.decode_node_register(key, raw)
            stale = _stale(obj, model.common_word, now, handshake_timeout)
        except errors.ProtocolError as exc:
            problems.append(str(exc))
            continue
        if stale:
            problems.append(stale)
            continue
        if _allocatable(obj, model.resource_name) <= 0:
            problems.append(f"kubelet reports no allocatable {model.resource_name}")
            continue
        before = len(chips)
        listed = [item for item in registered if item.type == model.common_word]
        for item in registered:
            if item.type != model.common_word:
                warnings.append(f"{key}: chip {item.id} has type {item.type!r}, skipped")
        numbers = _numbers(key, listed, warnings)
        for item, number in zip(listed, numbers, strict=True):
            chips.append(
                inventory.Chip(
                    len(chips),
                    item.id,
                    model,
                    item.health,
                    slots=item.count,
                    memory_mib=item.devmem,
                    number=number,
                    network_id=item.network_id,
                )
            )
        if registered and len(chips) == before:
            problems.append(f"{key} lists no {model.common_word} chip")
    if not chips:
        return NodeRead(
            name, None, "; ".join(problems) or "no NPU registered on this node", tuple(warnings)
        )
    warnings.extend(problems)  # other models of a mixed node stay usable
    return NodeRead(name, _node(name, annotations, chips, models, warnings), "", tuple(warnings))


def _numbers(key: str, listed: list[protocol.RegisteredChip], warnings: list[str]) -> list[int]:
    """The registered ``index`` of each chip, or the list positions when two chips share one.

    Rings, pairs and cards are built from these numbers. Two chips with one number cannot
    both sit where the number says, so the positions are used instead (as HAMi does for
    everything but 910C pairs) and a warning names the number; a list without any
    ``index`` (every chip 0) is read by position without a word.
    """
    numbers = [item.index for item in listed]
    if len(listed) > 1 and not any(numbers):
        return list(range(len(listed)))  # a writer that leaves ``index`` out for every chip
    seen: dict[int, str] = {}
    for item in listed:
        if item.index in seen:
            warnings.append(
                f"{key}: chips {seen[item.index]} and {item.id} both have index {item.index}; "
                "topology uses their order in the list instead"
            )
            return list(range(len(listed)))
        seen[item.index] = item.id
    return numbers


def _node(
    name: str,
    annotations: Mapping[str, str],
    chips: list[inventory.Chip],
    models: catalog.Catalog,
    warnings: list[str],
) -> inventory.Node:
    soft = models.soft_mode_default
    raw_soft = annotations.get(protocol.SOFT_MODE_NODE_KEY)
    if raw_soft is not None:
        try:
            soft = protocol.decode_soft_mode_node(raw_soft)
        except errors.ProtocolError as exc:
            warnings.append(f"{exc}; using the cluster default ({soft})")
    kinds = {c.model.common_word for c in chips}
    kind = topology.ServerKind.PCIE
    numbers = [c.number for c in chips]
    if len(kinds) == 1:
        kind = topology.default_kind(chips[0].model, numbers)
    raw_kind = annotations.get(SERVER_KIND_KEY)
    if raw_kind is not None:
        try:
            kind = topology.ServerKind(raw_kind)
        except ValueError:
            known = ", ".join(k.value for k in topology.ServerKind)
            warnings.append(
                f"annotation {SERVER_KIND_KEY}: unknown server kind {raw_kind!r} (known: {known})"
            )
    if len(kinds) > 1:
        numbers = [c.index for c in chips]  # several models: no shared layout, no clashes
    return inventory.Node(name, tuple(chips), topology.build(kind, numbers), soft)
