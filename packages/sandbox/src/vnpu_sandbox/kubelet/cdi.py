"""CDI device names resolved to the container edits a container runtime would apply.

The real kubelet hands CDI device names (``vendor.com/class=name``) to the container runtime,
which reads the CDI spec files of its CDI directories and applies each device's
``containerEdits`` (and the spec's own ``containerEdits``) to the container. The simulated
kubelet starts no container; ``podworker`` calls :func:`resolve` so that what a container
*would* see - its environment above all (``ASCEND_VISIBLE_DEVICES``) - is recorded next to
what device plugins returned (``allocations``).

Spec files are ``*.json``, ``*.yaml`` and ``*.yml`` in the configured directory, read at each
call (a DRA driver writes them while preparing a claim). A name no spec describes stays
unresolved: it is recorded, without edits, and logged (a runtime would refuse to create the
container). Environment entries are applied in device order; a later value of a variable
replaces an earlier one, as the CDI library does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger(__name__)

Json = dict[str, Any]


@dataclass(frozen=True)
class Resolution:
    """What a set of CDI devices does to one container."""

    env: dict[str, str]
    device_nodes: tuple[str, ...]
    """Container paths of the device nodes the edits add."""
    unresolved: tuple[str, ...]


def split_name(name: str) -> tuple[str, str] | None:
    """``vendor.com/class=dev`` -> (``vendor.com/class``, ``dev``); None when malformed."""
    kind, sep, device = name.partition("=")
    if not sep or "/" not in kind or not device:
        return None
    return kind, device


def _load(path: Path) -> Json | None:
    try:
        text = path.read_text(encoding="utf-8")
        document = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        log.warning("cdi_spec_unreadable path=%s error=%s", path, exc)
        return None
    return document if isinstance(document, dict) else None


def read_specs(directory: Path | None) -> list[Json]:
    """Every readable spec in ``directory`` (name order); none when it is unset or missing."""
    if directory is None or not directory.is_dir():
        return []
    paths = sorted(
        p for p in directory.iterdir() if p.suffix in (".json", ".yaml", ".yml") and p.is_file()
    )
    return [spec for spec in (_load(p) for p in paths) if spec is not None]


def _edits(edits: object) -> tuple[list[str], list[str]]:
    if not isinstance(edits, dict):
        return [], []
    env = [str(e) for e in edits.get("env") or [] if isinstance(e, str)]
    nodes = [
        str(n.get("path", ""))
        for n in edits.get("deviceNodes") or []
        if isinstance(n, dict) and n.get("path")
    ]
    return env, nodes


def resolve(names: Sequence[str], specs: Iterable[Json]) -> Resolution:
    """Apply the edits of ``names`` (in order) with the given specs."""
    by_kind: dict[str, list[Json]] = {}
    for spec in specs:
        by_kind.setdefault(str(spec.get("kind", "")), []).append(spec)
    env: dict[str, str] = {}
    nodes: list[str] = []
    unresolved: list[str] = []
    applied_specs: set[int] = set()
    for name in names:
        parts = split_name(name)
        found = None
        if parts is not None:
            kind, device = parts
            found = next(
                (
                    (spec, entry)
                    for spec in by_kind.get(kind, [])
                    for entry in spec.get("devices") or []
                    if isinstance(entry, dict) and entry.get("name") == device
                ),
                None,
            )
        if found is None:
            unresolved.append(name)
            continue
        spec, entry = found
        edit_sets = [entry.get("containerEdits")]
        if id(spec) not in applied_specs:  # a spec's own edits apply once
            applied_specs.add(id(spec))
            edit_sets.insert(0, spec.get("containerEdits"))
        for edits in edit_sets:
            pairs, paths = _edits(edits)
            for pair in pairs:
                key, _sep, value = pair.partition("=")
                env[key] = value
            nodes.extend(p for p in paths if p not in nodes)
    if unresolved:
        log.info("cdi_devices_unresolved names=%s", unresolved)
    return Resolution(env, tuple(nodes), tuple(unresolved))
