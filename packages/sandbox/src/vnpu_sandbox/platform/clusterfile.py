"""The sandbox's cluster file: which simulated nodes to start, read by ``vnpu_core.planfiles``.

The file is the one ``vnpu plan --cluster`` reads (nodes with a chip model, a chip count, a
server layout, a mode and replicas), so one file plans a cluster and runs it. ``up`` calls
``read``; each node becomes a ``NodeSpec``: what the simulated chips, the kubelet and the
device plugin of that node are started with.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from vnpu_core import catalog, errors, planfiles


class ClusterFileError(Exception):
    """The cluster file cannot be read or names a bad value (the message says which)."""


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One simulated node: its name, chip model (catalog key), chip count, server and mode."""

    name: str
    model: str
    common_word: str
    chips: int
    server: str
    soft: bool

    @property
    def resource(self) -> str:
        """The extended resource the node's device plugin advertises (``huawei.com/<CW>``)."""
        return f"huawei.com/{self.common_word}"


def read(path: Path) -> tuple[NodeSpec, ...]:
    """The nodes of the cluster file at ``path``. Raises ClusterFileError naming the problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ClusterFileError(f"cluster file {path}: cannot read it: {exc}") from exc
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ClusterFileError(f"cluster file {path}: not valid YAML: {exc}") from exc
    try:
        cluster = planfiles.read_cluster(document, str(path), catalog.BUILTIN)
    except errors.InputFileError as exc:
        raise ClusterFileError(str(exc)) from exc
    return tuple(
        NodeSpec(
            name=node.name,
            model=node.chips[0].model.name,
            common_word=node.chips[0].model.common_word,
            chips=len(node.chips),
            server=node.topology.kind.value,
            soft=node.soft,
        )
        for node in cluster.nodes
    )


def to_json(node: NodeSpec) -> dict[str, Any]:
    """The node as the sandbox record keeps it."""
    return asdict(node)


def from_json(raw: dict[str, Any]) -> NodeSpec:
    """A node read back from the sandbox record (KeyError/TypeError/ValueError when malformed)."""
    return NodeSpec(
        name=str(raw["name"]),
        model=str(raw["model"]),
        common_word=str(raw["common_word"]),
        chips=int(raw["chips"]),
        server=str(raw["server"]),
        soft=bool(raw["soft"]),
    )
