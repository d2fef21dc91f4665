"""The node annotations that tell schedulers what this node has, written as HAMi's plugin writes them.

* ``hami.io/node-register-<CW>``: the chips as a JSON array (id, index, count, devmem,
  devcore, type, health, ``custominfo.NetworkID`` on the 910 series), byte for byte as
  HAMi's Go code encodes it (``vnpu_core.protocol``);
* ``hami.io/node-handshake-<CW>``: ``Reported_<local time + offset>``;
* ``hami-vnpu-core``: ``"true"`` when the node runs hami-vnpu-core;
* ``vnpu.io/server``: the server layout, which vnpu's scheduler reads and HAMi and
  Volcano ignore;
* ``vnpu.io/granted-<CW>``: what this plugin granted, per chip and pod (``holdings.encode``;
  the format is ``vnpu_core.granted``), which vnpu's scheduler counts beside the pod
  annotations a tenant can edit.

``Publisher`` writes them on start, whenever ``poke`` is called (a chip's health changed)
and every ``interval`` seconds; after a failed write it tries again ``retry`` seconds later
(HAMi: 30 s and 5 s). One merge patch carries all the keys, so a scheduler never reads an
inventory without its handshake; ``poke`` is also called after every grant and release,
and what changes within ``SETTLE`` seconds of a poke is written in the same patch (a burst
of Allocates is one node write, after their answers, not one each). ``plugin`` runs it in its own thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta

import structlog

from vnpu_core import coordination, granted, nodes, protocol
from vnpu_device_plugin import cluster, devices, health, metrics
from vnpu_service import kubeapi

log = structlog.get_logger(__name__)

SOFT_DEVCORE = 100  # HAMi registers 100 (percent) as a chip's cores in soft mode
SETTLE = 0.1  # seconds a poke waits for more changes before the node is written


def network_id(inventory: devices.Inventory, index: int) -> int | None:
    """HAMi's ``custominfo.NetworkID``: 910 chips 0-3 are 0, 4 and up are 1; 910C dies all 0."""
    word = inventory.common_word
    if not word.startswith("Ascend910"):
        return None
    if inventory.model.super_pod or word.startswith("Ascend910C"):
        return 0
    return 0 if index < 4 else 1


def registered_chips(
    inventory: devices.Inventory, healthy: dict[int, bool]
) -> list[protocol.RegisteredChip]:
    model = inventory.model
    return [
        protocol.RegisteredChip(
            id=chip.uuid,
            index=index,
            count=inventory.slots,
            devmem=model.memory_allocatable_mib,
            devcore=SOFT_DEVCORE if inventory.soft else model.aicore,
            type=inventory.common_word,
            health=healthy.get(chip.phy_id, False),
            network_id=network_id(inventory, index),
        )
        for index, chip in enumerate(inventory.chips)
    ]


def node_annotations(
    inventory: devices.Inventory,
    healthy: dict[int, bool],
    reported: datetime,
    grants: str | None = None,
) -> dict[str, str]:
    """The node annotations for the current health; ``reported`` is naive local time.

    ``grants`` is the ``vnpu.io/granted-<CW>`` value, left out when None.
    """
    word = inventory.common_word
    handshake = coordination.Handshake(coordination.HandshakeState.REPORTED, reported)
    extra = {} if grants is None else {granted.annotation_key(word): grants}
    return extra | {
        protocol.node_register_key(word): protocol.encode_node_register(
            registered_chips(inventory, healthy)
        ),
        protocol.node_handshake_key(word): coordination.encode_handshake(handshake),
        protocol.SOFT_MODE_NODE_KEY: protocol.encode_soft_mode_node(inventory.soft),
        nodes.SERVER_KIND_KEY: inventory.server.value,
    }


class Publisher:
    """Keeps the node annotations current through ``api``."""

    def __init__(
        self,
        api: cluster.Cluster,
        inventory: devices.Inventory,
        board: health.Board,
        stats: metrics.Metrics,
        *,
        interval: float,
        retry: float,
        offset: float,
        attempts: int,
        grants: Callable[[], str] | None = None,
        clock: Callable[[], datetime] = datetime.now,
    ) -> None:
        self._api = api
        self._inventory = inventory
        self._board = board
        self._stats = stats
        self._interval = interval
        self._retry = retry
        self._offset = timedelta(seconds=offset)
        self._attempts = attempts
        self._clock = clock
        self._grants = grants
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_success: datetime | None = None

    def publish(self) -> bool:
        """Write the annotations now; False (logged, counted) when the API refused."""
        values = node_annotations(
            self._inventory,
            self._board.healthy(),
            self._clock() + self._offset,
            self._grants() if self._grants is not None else None,
        )
        node = self._inventory.node
        try:
            cluster.retrying(
                lambda: self._api.patch_node_annotations(node, dict(values)),
                self._attempts,
                on_retry=self._stats.retried,
            )
        except kubeapi.ApiError as exc:
            self._stats.publications.labels("failure").inc()
            log.warning("node_publish_failed", node=node, error=str(exc))
            return False
        self._stats.publications.labels("success").inc()
        self.last_success = self._clock()
        return True

    def poke(self) -> None:
        """Publish again soon (health changed, or something was granted or released)."""
        self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="vnpu-dp-publisher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                ok = self.publish()
            except Exception:  # a bug must not stop the node from being published
                log.exception("node_publish_crashed")
                ok = False
            if self._wake.wait(self._interval if ok else self._retry):
                self._stop.wait(SETTLE)  # a burst of grants (or health changes) is written once

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
