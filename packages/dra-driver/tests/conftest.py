"""Fixtures for the DRA driver's tests: chips made up for pure tests, simulated nodes, the API.

``made_chips`` gives a node's chips as the backend would enumerate them, without I/O, for
the pure tests of ``slices``. ``sim_node`` makes a simulated node directory (``vnpu_npu.sim``)
for the tests that read chips through a real backend. ``Kube`` is the tests' own view of the
session's real kube-apiserver (the root conftest's ``kube_namespace``), as the admin over
HTTPS: it creates the test's Node (a name of the test's own: nodes and ResourceSlices are
cluster-scoped) and reads, edits and, when the test ends, deletes the node's slices (no
garbage collector runs beside the bare API server to follow their ownerReferences).
"""

from __future__ import annotations

import itertools
import re
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from vnpu_core import catalog
from vnpu_dra_driver import cluster, slices
from vnpu_npu import backend
from vnpu_npu.sim import __main__ as sim_main

Json = dict[str, Any]
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
_nodes = itertools.count(1)


def made_chips(
    model_name: str, count: int, health: dict[int, backend.ChipHealth | None] | None = None
) -> list[slices.Chip]:
    """``count`` chips of ``model_name`` numbered 0.., healthy unless ``health`` says otherwise."""
    m = catalog.BUILTIN.by_chip_name(model_name)
    assert m is not None, model_name
    assert m.name == model_name
    kind = backend.MemoryKind.DDR if m.name.startswith("310P") else backend.MemoryKind.HBM
    chips = []
    for phy in range(count):
        info = backend.ChipInfo(
            card_id=phy // 2,
            device_id=phy % 2,
            logic_id=phy,
            phy_id=phy,
            uuid=backend.format_uuid((0x1000 + phy, 0, 0, 0, phy)),
            chip_name=m.chip_name,
            chip_type="Ascend",
            chip_version="V1",
            model=m.name,
            aicore=m.aicore,
            memory_mib=m.memory_capacity_mib,
            memory_kind=kind,
            bdf=backend.format_bdf(0, 0x10 + phy, 0, 0),
        )
        chips.append(slices.Chip(info, (health or {}).get(phy, slices.HEALTHY)))
    return chips


def sim_node(directory: Path, model_name: str, count: int) -> Path:
    """A simulated node directory with ``count`` chips of ``model_name``."""
    assert sim_main.main([str(directory), "init", "--chip", model_name, "--chips", str(count)]) == 0
    return directory


MakeChips = Callable[..., list[slices.Chip]]


@pytest.fixture
def make_chips() -> MakeChips:
    """``made_chips``: a node's chips, made up."""
    return made_chips


@pytest.fixture
def make_sim_node() -> Callable[[Path, str, int], Path]:
    """``sim_node``: a simulated node directory."""
    return sim_node


class Kube:
    """The test's admin client of the API, with a Node of its own (``node``)."""

    def __init__(self, namespace: Any, node: str) -> None:
        self.plane = namespace.plane
        self.kubeconfig: Path = namespace.kubeconfig
        self.node = node

    def request(self, method: str, path: str, body: object = None) -> Any:
        return self.plane.request(method, path, body)

    def create_node(self) -> Json:
        node: Json = self.request("POST", "/api/v1/nodes", {"metadata": {"name": self.node}})
        return node

    def slices(self, node: str | None = None) -> list[Json]:
        """The node's slices of the driver, sorted by name."""
        selector = f"spec.nodeName={node or self.node},spec.driver={slices.DRIVER}"
        found = self.request("GET", f"{SLICES}?fieldSelector={urllib.parse.quote(selector)}")
        return sorted(found["items"], key=lambda s: s["metadata"]["name"])

    def slice(self, name: str) -> Json:
        found: Json = self.request("GET", f"{SLICES}/{urllib.parse.quote(name)}")
        return found

    def tidy(self) -> None:
        for found in self.slices():
            self.request("DELETE", f"{SLICES}/{urllib.parse.quote(found['metadata']['name'])}")


@pytest.fixture
def kube(kube_namespace: Any, request: pytest.FixtureRequest) -> Iterator[Kube]:
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:30].strip("-")
    client = Kube(kube_namespace, f"dra{next(_nodes)}-{slug}")
    try:
        yield client
    finally:
        client.tidy()


@pytest.fixture
def slice_api(kube: Kube) -> Iterator[cluster.KubeSlices]:
    api = cluster.KubeSlices.connect(kube.kubeconfig)
    try:
        yield api
    finally:
        api.close()
