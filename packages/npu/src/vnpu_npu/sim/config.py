"""``chips.yaml``: what a simulated node has, as a person writes it.

::

    chip: 310P3          # catalog model key or DCMI chip name (required)
    chips: 4             # number of chips, 1-64 (required)
    server: 300i-duo     # topology kind (vnpu_core.topology.ServerKind); decides chips per card
    seed: node-a         # UUID seed; default: the directory's absolute path
    overrides:           # per physical chip id, all keys optional
      2: {health: critical, codes: [80E18402], gone: false, memory: 49152, aicore: 8,
          aicpu: 6, media: {venc: 1}, logic: 3, uuid: 0A-..., bdf: "0000:81:00.0",
          temperature: 60, power: 30.5}

``load`` validates it and names the bad field and value (``overrides.2.health``). The
store (``sim.store``) turns it into the state file both simulated backends read.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vnpu_core import catalog, topology
from vnpu_npu import backend, errors, faults

CHIPS_FILE = "chips.yaml"
MAX_CHIPS = 64
_TOP_KEYS = frozenset({"chip", "chips", "server", "seed", "overrides"})
_HEALTH_NAMES = {h.name.lower(): h for h in backend.Health}
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


@dataclass(frozen=True, slots=True)
class Override:
    """Per-chip settings from ``overrides``; None keeps the model's or the default value."""

    health: backend.Health | None = None
    codes: tuple[int, ...] | None = None
    gone: bool | None = None
    memory_mib: int | None = None
    aicore: int | None = None
    aicpu: int | None = None
    media: Mapping[str, int] | None = None
    logic: int | None = None
    uuid: str | None = None
    bdf: str | None = None
    temperature: int | None = None
    power_watts: float | None = None


@dataclass(frozen=True, slots=True)
class SimConfig:
    model: catalog.ChipModel
    chips: int
    server: topology.ServerKind
    seed: str
    overrides: Mapping[int, Override] = field(default_factory=dict)
    digest: str = ""


def load(sim_dir: Path) -> SimConfig:
    """Read and validate ``sim_dir/chips.yaml``."""
    path = sim_dir / CHIPS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise errors.SimError(str(path), "file", str(path), f"cannot read: {exc}") from exc
    return parse(text, str(path), str(sim_dir.resolve()))


def parse(text: str, source: str, default_seed: str) -> SimConfig:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise errors.SimError(source, "document", text[:40], f"not YAML: {exc}") from exc
    if not isinstance(doc, dict):
        raise errors.SimError(source, "document", doc, "must be a mapping with chip and chips")
    unknown = sorted(str(k) for k in doc if k not in _TOP_KEYS)
    if unknown:
        raise errors.SimError(
            source, unknown[0], doc[unknown[0]], f"unknown key; use {sorted(_TOP_KEYS)}"
        )
    chip = doc.get("chip")
    model = catalog.BUILTIN.by_chip_name(chip) if isinstance(chip, str) else None
    if model is None:
        known = ", ".join(m.name for m in catalog.BUILTIN)
        raise errors.SimError(source, "chip", chip, f"not a known chip model ({known})")
    count = doc.get("chips")
    if type(count) is not int or not 1 <= count <= MAX_CHIPS:
        raise errors.SimError(source, "chips", count, f"must be a whole number 1-{MAX_CHIPS}")
    server_text = doc.get("server")
    if server_text is None:
        server = topology.default_kind(model, count)
    else:
        try:
            server = topology.ServerKind(server_text)
        except ValueError as exc:
            kinds = ", ".join(k.value for k in topology.ServerKind)
            raise errors.SimError(source, "server", server_text, f"use one of {kinds}") from exc
    seed = doc.get("seed", default_seed)
    if not isinstance(seed, str | int):
        raise errors.SimError(source, "seed", seed, "must be a string")
    raw_overrides = doc.get("overrides") or {}
    if not isinstance(raw_overrides, dict):
        raise errors.SimError(source, "overrides", raw_overrides, "must map chip ids to settings")
    overrides: dict[int, Override] = {}
    for phy, settings in raw_overrides.items():
        if type(phy) is not int or not 0 <= phy < count:
            raise errors.SimError(source, f"overrides.{phy}", phy, f"chip id must be 0-{count - 1}")
        overrides[phy] = _override(source, f"overrides.{phy}", settings)
    taken: dict[int, int] = {}
    for phy in range(count):
        override = overrides.get(phy)
        logic = override.logic if override and override.logic is not None else phy
        if logic in taken:
            problem = f"logic id {logic} is also chip {taken[logic]}'s; logic ids must be unique"
            raise errors.SimError(source, f"overrides.{phy}.logic", logic, problem)
        taken[logic] = phy
    digest = hashlib.sha256(f"{seed}\n{text}".encode()).hexdigest()[:16]
    return SimConfig(model, count, server, str(seed), overrides, digest)


def _override(source: str, where: str, settings: Any) -> Override:
    if not isinstance(settings, dict):
        raise errors.SimError(source, where, settings, "must be a mapping of settings")
    values: dict[str, Any] = {}
    for key, value in settings.items():
        path = f"{where}.{key}"
        if key == "health":
            values["health"] = _health(source, path, value)
        elif key == "codes":
            values["codes"] = _codes(source, path, value)
        elif key == "gone":
            if not isinstance(value, bool):
                raise errors.SimError(source, path, value, "must be true or false")
            values["gone"] = value
        elif key in ("memory", "aicore", "aicpu", "logic", "temperature"):
            minimum = 1 if key in ("memory", "aicore") else 0
            if type(value) is not int or value < minimum:
                raise errors.SimError(source, path, value, f"must be a whole number >= {minimum}")
            values["memory_mib" if key == "memory" else key] = value
        elif key == "power":
            if type(value) not in (int, float) or value < 0:
                raise errors.SimError(source, path, value, "must be watts >= 0")
            values["power_watts"] = float(value)
        elif key == "media":
            values["media"] = _media(source, path, value)
        elif key == "uuid":
            try:
                backend.parse_uuid(str(value))
            except ValueError as exc:
                raise errors.SimError(source, path, value, str(exc)) from exc
            values["uuid"] = str(value).upper()
        elif key == "bdf":
            if not isinstance(value, str) or not _BDF.match(value):
                raise errors.SimError(source, path, value, "must look like 0000:61:00.0")
            values["bdf"] = value
        else:
            raise errors.SimError(source, path, value, "unknown setting")
    return Override(**values)


def _health(source: str, path: str, value: Any) -> backend.Health:
    if isinstance(value, str) and value.lower() in _HEALTH_NAMES:
        return _HEALTH_NAMES[value.lower()]
    if type(value) is int and 0 <= value <= 3:
        return backend.Health(value)
    raise errors.SimError(source, path, value, f"use {', '.join(_HEALTH_NAMES)} or 0-3")


def _codes(source: str, path: str, value: Any) -> tuple[int, ...]:
    items = value if isinstance(value, list) else [value]
    codes = []
    for item in items:
        try:
            codes.append(faults.parse_code(str(item)))
        except ValueError as exc:
            raise errors.SimError(
                source, path, item, f"{exc}; quote codes like '80E18402'"
            ) from exc
    return tuple(codes)


def _media(source: str, path: str, value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        raise errors.SimError(
            source, path, value, f"must map engines ({', '.join(catalog.MEDIA_ENGINES)}) to counts"
        )
    media: dict[str, int] = {}
    for engine, count in value.items():
        if engine not in catalog.MEDIA_ENGINES:
            raise errors.SimError(
                source, f"{path}.{engine}", count, f"engines are {', '.join(catalog.MEDIA_ENGINES)}"
            )
        if type(count) is not int or count < 0:
            raise errors.SimError(source, f"{path}.{engine}", count, "must be a whole number >= 0")
        media[engine] = count
    return media
