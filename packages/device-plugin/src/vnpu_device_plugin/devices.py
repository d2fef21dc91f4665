"""The node's chips as the plugin advertises them, and the kubelet device ids that stand for them.

At start ``plugin`` reads the backend's chips once and builds an ``Inventory``: the chip
model (from the device config or the built-in catalog), the chips in enumeration order,
how many device ids each chip gets, the server layout and whether the node runs
hami-vnpu-core. Device ids follow HAMi's ``<chip UUID>-<i>`` (``i`` from 0 to the chip's
vNPU slot count - 1), so the kubelet's capacity is chips x slots, the ids kubelet records
(checkpoint, PodResources) say which chip they are on, and ``GetPreferredAllocation`` can
steer kubelet to the chips the scheduler chose. ``service`` builds the ListAndWatch list
with ``device_list`` and checks Allocate's ids with ``chip_of``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from vnpu_core import catalog, topology
from vnpu_device_plugin import errors
from vnpu_kubelet_api import constants
from vnpu_kubelet_api.deviceplugin.v1beta1 import api_pb2
from vnpu_npu import backend


@dataclass(frozen=True)
class Inventory:
    """This node's chips of one model, as advertised to kubelet and published on the Node."""

    node: str
    model: catalog.ChipModel
    chips: tuple[backend.ChipInfo, ...]  # enumeration order: ``index`` in node-register
    slots: int  # device ids per chip
    server: topology.ServerKind
    soft: bool  # the node runs hami-vnpu-core
    _by_uuid: dict[str, backend.ChipInfo] = field(init=False, repr=False, compare=False)
    _index: dict[int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_uuid", {c.uuid: c for c in self.chips})
        object.__setattr__(self, "_index", {c.phy_id: i for i, c in enumerate(self.chips)})

    @property
    def common_word(self) -> str:
        return self.model.common_word

    @property
    def resource_name(self) -> str:
        return self.model.resource_name

    @property
    def socket_name(self) -> str:
        """Our socket's file name in the device plugin directory."""
        return f"vnpu-{self.common_word}.sock"

    def chip(self, uuid: str) -> backend.ChipInfo | None:
        return self._by_uuid.get(uuid)

    def index_of(self, phy_id: int) -> int:
        """The chip's enumeration index (HAMi's ``index``; not the physical id)."""
        return self._index[phy_id]

    def device_ids(self, chip: backend.ChipInfo) -> tuple[str, ...]:
        return tuple(f"{chip.uuid}-{i}" for i in range(self.slots))

    def chip_of(self, device_id: str) -> backend.ChipInfo:
        """The chip a device id stands for; ``errors.UnknownDevice`` for an id we never advertised."""
        uuid, sep, number = device_id.rpartition("-")
        chip = self._by_uuid.get(uuid) if sep else None
        if chip is None:
            raise errors.UnknownDevice(
                device_id, f"no {self.common_word} chip on {self.node} has it"
            )
        if not number.isdigit() or str(int(number)) != number or int(number) >= self.slots:
            raise errors.UnknownDevice(
                device_id, f"chip {chip.uuid} has device ids -0 to -{self.slots - 1}"
            )
        return chip


def build(
    node: str,
    chips: tuple[backend.ChipInfo, ...],
    models: catalog.Catalog,
    *,
    soft: bool,
    server: topology.ServerKind | None = None,
) -> Inventory:
    """The inventory of ``chips``; ``errors.SettingsError`` when they are absent, unknown or mixed."""
    if not chips:
        raise errors.SettingsError("backend", "no chips", "the NPU backend reports no chip")
    found: dict[str, catalog.ChipModel] = {}
    for chip in chips:
        model = models.by_chip_name(chip.model) if chip.model else None
        model = model or models.by_chip_name(chip.chip_name, chip.aicore)
        if model is None:
            known = ", ".join(m.chip_name for m in models)
            raise errors.SettingsError(
                "device_config",
                chip.chip_name,
                f"chip {chip.phy_id} ({chip.model_name}) matches no chip model; known: {known}",
            )
        found[model.common_word] = model
    if len(found) > 1:
        raise errors.SettingsError(
            "backend",
            sorted(found),
            "chips of several models on one node; one plugin serves one model",
        )
    (model,) = found.values()
    for chip in chips:
        if len(f"{chip.uuid}-{model.split_count - 1}") > constants.DEVICE_ID_MAX_LENGTH:
            raise errors.SettingsError("backend", chip.uuid, "chip UUID too long for a device id")
    kind = server or topology.default_kind(model, len(chips))
    return Inventory(node, model, chips, model.split_count, kind, soft)


def device_list(inventory: Inventory, healthy: Mapping[int, bool]) -> api_pb2.ListAndWatchResponse:
    """Every device id, healthy when its chip is (``healthy`` by physical id; absent: unhealthy)."""
    devices: list[api_pb2.Device] = []
    for chip in inventory.chips:
        health = constants.HEALTHY if healthy.get(chip.phy_id, False) else constants.UNHEALTHY
        devices.extend(api_pb2.Device(ID=i, health=health) for i in inventory.device_ids(chip))
    return api_pb2.ListAndWatchResponse(devices=devices)
