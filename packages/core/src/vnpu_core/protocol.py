"""Annotation keys and the codecs of the pod and node annotations vnpu shares with HAMi and Volcano.

The device plugin publishes its chips with ``encode_node_register``, reads a pod's
``decode_devices`` / ``decode_runtime`` in Allocate and writes back
``erase_first_container``; the scheduler reads node inventories and writes its decision
with ``encode_devices`` / ``encode_runtime``; ``vnpu_core.ledger`` rebuilds usage from
``decode_devices`` of ``devices-allocated``. The node lock and the handshake are in
``vnpu_core.coordination``; writing and reading JSON the way Go does is in ``vnpu_core.gojson``.

Encoders write byte for byte what HAMi's Go code writes (``encoding/json`` field order
and ``omitempty``, the ``:``/``;`` device grammar). Decoders accept everything HAMi and
Volcano write and reject the rest with ``errors.ProtocolError(key, fragment, problem)``;
docs/protocol.md lists where they are stricter than the peers. The dataclasses check
their own fields, so an encoder never writes a value a peer cannot read (``ValueError``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from vnpu_core import errors, gojson

# --- keys -------------------------------------------------------------------------------

SOFT_MODE_NODE_KEY = "hami-vnpu-core"
NODE_LOCK_KEY = "hami.io/mutex.lock"
VGPU_NODE_KEY = "hami.io/vgpu-node"
VGPU_TIME_KEY = "hami.io/vgpu-time"
BIND_PHASE_KEY = "hami.io/bind-phase"
BIND_TIME_KEY = "hami.io/bind-time"
PREDICATE_TIME_KEY = "predicate-time"
VNPU_MODE_KEY = "huawei.com/vnpu-mode"
SOFT_MODE_VALUE = "hami-core"
DEVICE_POLICY_KEY = "hami.io/gpu-scheduler-policy"
NODE_POLICY_KEY = "hami.io/node-scheduler-policy"
WEBHOOK_IGNORE_KEY = "hami.io/webhook"
WEBHOOK_IGNORE_VALUE = "ignore"
# Pod, vnpu only: the one hard vNPU template every NPU container of the pod gets (``vir04``);
# parsed and checked in ``vnpu_core.requests``. HAMi and Volcano do not read it.
TEMPLATE_KEY = "vnpu.io/template"


def node_register_key(cw: str) -> str:
    """Node: the chip inventory the device plugin publishes (JSON array)."""
    return f"hami.io/node-register-{cw}"


def node_handshake_key(cw: str) -> str:
    """Node: plugin/scheduler liveness handshake (``vnpu_core.coordination``)."""
    return f"hami.io/node-handshake-{cw}"


def to_allocate_key(cw: str) -> str:
    """Pod: devices still to hand out in Allocate; the plugin erases served containers."""
    return f"hami.io/{cw}-devices-to-allocate"


def allocated_key(cw: str) -> str:
    """Pod: the scheduler's decision, never erased; usage is rebuilt from it."""
    return f"hami.io/{cw}-devices-allocated"


def runtime_key(cw: str) -> str:
    """Pod: per-device runtime info (template, soft-mode memory and core)."""
    return f"huawei.com/{cw}"


def use_uuid_key(cw: str) -> str:
    """Pod: comma list of chip UUIDs the pod may use."""
    return f"hami.io/use-{cw}-uuid"


def no_use_uuid_key(cw: str) -> str:
    """Pod: comma list of chip UUIDs the pod must not use."""
    return f"hami.io/no-use-{cw}-uuid"


# --- shared checks ------------------------------------------------------------------------

_DIGITS = re.compile(r"[0-9]+")


def _token_problem(value: object) -> str | None:
    """Why ``value`` cannot stand as a UUID or type inside the device grammar, or None."""
    if not isinstance(value, str) or not value:
        return f"must be a non-empty string, got {value!r}"
    bad = sorted({c for c in value if c in ",:;" or c.isspace()})
    if bad:
        return f"must not contain {''.join(bad)!r}, got {value!r}"
    return None


def _decimal(text: str, high: int) -> int | None:
    """``text`` as ASCII decimal digits in 0..high (no sign, no spaces), or None."""
    if not _DIGITS.fullmatch(text) or int(text) > high:
        return None
    return int(text)


def _check(field: str, problem: str | None) -> None:
    if problem is not None:
        raise ValueError(f"{field} {problem}")


def _token(key: str, path: str, raw: object) -> str:
    text = gojson.string(key, path, raw)
    problem = _token_problem(text)
    if problem is not None:
        raise errors.ProtocolError(key, path, problem)
    return text


# --- node register ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RegisteredChip:
    """One element of ``hami.io/node-register-<CW>`` (HAMi's ``DeviceInfo``)."""

    id: str  # die UUID
    index: int  # enumeration index 0..n-1 (not the physical ID)
    count: int  # vNPU slots
    devmem: int  # MiB
    devcore: int  # AI cores, or 100 in soft mode
    type: str  # the common word
    health: bool
    network_id: int | None  # custominfo.NetworkID (910 series), None when absent
    numa: int = 0
    mode: str = ""
    vendor: str = ""  # devicevendor

    def __post_init__(self) -> None:
        _check("id", _token_problem(self.id))
        _check("type", _token_problem(self.type))
        _check("index", gojson.int_problem(self.index, gojson.INT64_MAX))
        _check("numa", gojson.int_problem(self.numa, gojson.INT64_MAX))
        for name in ("count", "devmem", "devcore"):
            _check(name, gojson.int_problem(getattr(self, name), gojson.INT32_MAX))
        if self.network_id is not None:
            _check("network_id", gojson.int_problem(self.network_id, gojson.INT64_MAX))
        if not isinstance(self.health, bool):
            raise ValueError(f"health must be a bool, got {self.health!r}")
        if not isinstance(self.mode, str) or not isinstance(self.vendor, str):
            raise ValueError(f"mode and vendor must be strings, got {self.mode!r}, {self.vendor!r}")


def encode_node_register(chips: Sequence[RegisteredChip]) -> str:
    """The JSON array HAMi's plugin writes: Go field order, zero values omitted."""
    elements: list[dict[str, object]] = []
    for chip in chips:
        element: dict[str, object] = {"id": chip.id}
        for name, raw in (
            ("index", chip.index),
            ("count", chip.count),
            ("devmem", chip.devmem),
            ("devcore", chip.devcore),
            ("type", chip.type),
            ("numa", chip.numa),
            ("mode", chip.mode),
            ("health", chip.health),
            ("devicevendor", chip.vendor),
        ):
            if raw:
                element[name] = raw
        if chip.network_id is not None:
            element["custominfo"] = {"NetworkID": chip.network_id}
        elements.append(element)
    return gojson.dumps(elements)


def decode_node_register(key: str, value: str) -> tuple[RegisteredChip, ...]:
    """Chips of a node-register value; unknown fields are ignored, absent ones are zero.

    Field names match in any case (``"ID"``, ``"Count"``), the last of several winning, as
    Go's decoder reads them; ``custominfo`` keys (``NetworkID``) are matched exactly.

    A chip id that appears twice is refused: usage is keyed by id, so a duplicate would
    count one chip's capacity twice.
    """
    chips = tuple(
        _decode_chip(key, f"[{i}]", gojson.obj(key, f"[{i}]", element))
        for i, element in enumerate(gojson.load_array(key, value))
    )
    first: dict[str, int] = {}
    for i, chip in enumerate(chips):
        if chip.id in first:
            raise errors.ProtocolError(
                key, f"[{i}].id", f"{chip.id!r} repeats [{first[chip.id]}].id"
            )
        first[chip.id] = i
    return chips


def _field(item: dict[str, Any], at: str, name: str, default: object) -> tuple[str, Any]:
    """The path and value Go reads into field ``name`` (any case, last key wins), or the default."""
    found = gojson.member(item, name)
    if found is None:
        return f"{at}.{name}", default
    return f"{at}.{found[0]}", found[1]


def _custom_info(key: str, at: str, item: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """``custominfo`` as Go builds the map: every occurrence merged in order, ``null`` empties it."""
    merged: dict[str, Any] | None = None
    path = f"{at}.custominfo"
    for name, raw in gojson.members(item, "custominfo"):
        path = f"{at}.{name}"
        if raw is None:
            merged = None
            continue
        merged = {**(merged or {}), **gojson.obj(key, path, raw)}
    return path, merged


def _decode_chip(key: str, at: str, item: dict[str, Any]) -> RegisteredChip:
    health_at, health_raw = _field(item, at, "health", False)
    health = gojson.boolean(key, health_at, health_raw)
    network_id = None
    custom_at, custom = _custom_info(key, at, item)
    if custom is not None and "NetworkID" in custom:  # a map key: compared exactly
        path = f"{custom_at}.NetworkID"
        network_id = gojson.integer(key, path, custom["NetworkID"], gojson.INT64_MAX)
    number = {}
    for name, high in (
        ("index", gojson.INT64_MAX),
        ("count", gojson.INT32_MAX),
        ("devmem", gojson.INT32_MAX),
        ("devcore", gojson.INT32_MAX),
        ("numa", gojson.INT64_MAX),
    ):
        path, raw = _field(item, at, name, 0)
        number[name] = gojson.integer(key, path, raw, high)
    text = {}
    for name in ("id", "type", "mode", "devicevendor"):
        path, raw = _field(item, at, name, "")
        text[name] = (
            _token(key, path, raw) if name in ("id", "type") else gojson.string(key, path, raw)
        )
    return RegisteredChip(
        id=text["id"],
        index=number["index"],
        count=number["count"],
        devmem=number["devmem"],
        devcore=number["devcore"],
        type=text["type"],
        health=health,
        network_id=network_id,
        numa=number["numa"],
        mode=text["mode"],
        vendor=text["devicevendor"],
    )


# --- devices grammar (devices-to-allocate / devices-allocated) ---------------------------


@dataclass(frozen=True, slots=True)
class DeviceEntry:
    """One device of a container: ``UUID,Type,UsedMemMiB,UsedCores:``."""

    uuid: str
    type: str
    memory_mib: int
    cores: int

    def __post_init__(self) -> None:
        _check("uuid", _token_problem(self.uuid))
        _check("type", _token_problem(self.type))
        _check("memory_mib", gojson.int_problem(self.memory_mib, gojson.INT32_MAX))
        _check("cores", gojson.int_problem(self.cores, gojson.INT32_MAX))


Containers = tuple[tuple[DeviceEntry, ...], ...]


def encode_devices(containers: Sequence[Sequence[DeviceEntry]]) -> str:
    """One ``;``-closed entry per container (init containers first), ``:`` after each device."""
    return "".join(
        "".join(f"{d.uuid},{d.type},{d.memory_mib},{d.cores}:" for d in devices) + ";"
        for devices in containers
    )


def _decode_device(key: str, text: str) -> DeviceEntry:
    fields = text.split(",")
    if len(fields) != 4:
        raise errors.ProtocolError(
            key, text, f"a device has 4 comma-separated fields, got {len(fields)}"
        )
    uuid, kind, memory_text, cores_text = fields
    memory = _decimal(memory_text, gojson.INT32_MAX)
    cores = _decimal(cores_text, gojson.INT32_MAX)
    if memory is None or cores is None:
        name, bad = ("memory", memory_text) if memory is None else ("cores", cores_text)
        raise errors.ProtocolError(
            key, text, f"{name} must be an integer 0..{gojson.INT32_MAX}, got {bad!r}"
        )
    try:
        return DeviceEntry(uuid, kind, memory, cores)
    except ValueError as exc:
        raise errors.ProtocolError(key, text, str(exc)) from exc


def decode_devices(key: str, value: str) -> Containers:
    """Containers of a devices value, empty ones kept; ``""`` is no container at all.

    Every container entry must be closed by ``;`` and every device by ``:``. A value the
    plugin has erased, such as ``;;``, decodes to that many empty containers.
    """
    if value == "":
        return ()
    if not value.endswith(";"):
        raise errors.ProtocolError(
            key, value[value.rfind(";") + 1 :], "container entry not closed by ';'"
        )
    containers: list[tuple[DeviceEntry, ...]] = []
    for entry in value[:-1].split(";"):
        if not entry:
            containers.append(())
            continue
        if not entry.endswith(":"):
            raise errors.ProtocolError(
                key, entry[entry.rfind(":") + 1 :], "device not closed by ':'"
            )
        devices = entry[:-1].split(":")
        if "" in devices:
            raise errors.ProtocolError(key, entry, "empty device between ':'")
        containers.append(tuple(_decode_device(key, d) for d in devices))
    return tuple(containers)


def erase_first_container(
    value: str | Sequence[Sequence[DeviceEntry]], *, key: str = "", count: int = 1
) -> str:
    """The to-allocate value HAMi's plugin writes back after serving ``count`` containers.

    The first ``count`` non-empty container entries become empty. Like the plugin, the
    result carries one more empty entry than the input: HAMi splits on ``;`` and keeps the
    empty tail as a container, so ``X:;`` becomes ``;;``. ``key`` names the annotation in
    errors when ``value`` is a string.
    """
    containers = decode_devices(key, value) if isinstance(value, str) else tuple(map(tuple, value))
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    pending = [i for i, devices in enumerate(containers) if devices]
    if len(pending) < count:
        shown = value if isinstance(value, str) else encode_devices(containers)
        raise errors.ProtocolError(
            key, shown, f"{len(pending)} container(s) left to serve, asked for {count}"
        )
    served = set(pending[:count])
    erased = [() if i in served else devices for i, devices in enumerate(containers)]
    return encode_devices(erased) + ";"


# --- runtime info huawei.com/<CW> ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RuntimeInfo:
    """One element of ``huawei.com/<CW>``: what the plugin needs to start one device."""

    uuid: str
    template: str | None  # hard-mode template name (``temp``), None for whole chips and soft mode
    memory_mib: int  # soft mode memory quota; 0 when absent
    core: int  # soft mode core percentage; 0 when absent

    def __post_init__(self) -> None:
        _check("uuid", _token_problem(self.uuid))
        if self.template is not None and (not isinstance(self.template, str) or not self.template):
            raise ValueError(f"template must be None or a non-empty string, got {self.template!r}")
        _check("memory_mib", gojson.int_problem(self.memory_mib, gojson.INT64_MAX))
        _check("core", gojson.int_problem(self.core, gojson.INT32_MAX))


def encode_runtime(infos: Sequence[RuntimeInfo]) -> str:
    """JSON array in Go field order UUID, temp, memory, core; absent and zero fields omitted."""
    elements: list[dict[str, object]] = []
    for info in infos:
        element: dict[str, object] = {"UUID": info.uuid}
        if info.template is not None:
            element["temp"] = info.template
        if info.memory_mib:
            element["memory"] = info.memory_mib
        if info.core:
            element["core"] = info.core
        elements.append(element)
    return gojson.dumps(elements)


def decode_runtime(key: str, value: str) -> tuple[RuntimeInfo, ...]:
    """Runtime infos; unknown fields are ignored, ``temp`` absent or null means no template.

    Field names match in any case, the last of several winning, as Go reads them.
    """
    infos = []
    for i, element in enumerate(gojson.load_array(key, value)):
        at = f"[{i}]"
        item = gojson.obj(key, at, element)
        temp_at, template = _field(item, at, "temp", None)
        if template is not None:
            template = gojson.string(key, temp_at, template) or None
        memory_at, memory = _field(item, at, "memory", 0)
        core_at, core = _field(item, at, "core", 0)
        infos.append(
            RuntimeInfo(
                uuid=_token(key, *_field(item, at, "UUID", "")),
                template=template,
                memory_mib=gojson.integer(key, memory_at, memory, gojson.INT64_MAX),
                core=gojson.integer(key, core_at, core, gojson.INT32_MAX),
            )
        )
    return tuple(infos)


# --- bind phase, timestamps, soft-mode flag ------------------------------------------------


class BindPhase(StrEnum):
    """``hami.io/bind-phase``: allocating (scheduler Bind) → success | failed (device plugin)."""

    ALLOCATING = "allocating"
    SUCCESS = "success"
    FAILED = "failed"


def decode_bind_phase(value: str) -> BindPhase:
    """The bind phase; any other value is a ProtocolError."""
    try:
        return BindPhase(value)
    except ValueError as exc:
        known = ", ".join(phase.value for phase in BindPhase)
        raise errors.ProtocolError(
            BIND_PHASE_KEY, value, f"bind phase must be one of {known}"
        ) from exc


def encode_timestamp(seconds: int) -> str:
    """``vgpu-time`` / ``bind-time`` / ``predicate-time``: unix seconds in decimal."""
    _check("seconds", gojson.int_problem(seconds, gojson.INT64_MAX))
    return str(seconds)


def decode_timestamp(key: str, value: str) -> int:
    """Unix seconds from a decimal string (ASCII digits only)."""
    seconds = _decimal(value, gojson.INT64_MAX)
    if seconds is None:
        raise errors.ProtocolError(key, value, "must be unix seconds as decimal digits")
    return seconds


def encode_soft_mode_node(enabled: bool) -> str:
    """``hami-vnpu-core`` on the node: ``"true"`` when the node runs hami-vnpu-core."""
    return "true" if enabled else "false"


def decode_soft_mode_node(value: str) -> bool:
    """``"true"`` or ``"false"``; anything else is a ProtocolError."""
    if value not in ("true", "false"):
        raise errors.ProtocolError(SOFT_MODE_NODE_KEY, value, "must be 'true' or 'false'")
    return value == "true"
