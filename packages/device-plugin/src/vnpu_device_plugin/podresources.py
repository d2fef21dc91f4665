"""The kubelet's PodResources view: which pods' containers still hold devices of our resource.

A pod deleted from the API (``--force --grace-period=0``) may still have running
containers; kubelet keeps listing it, with its devices, until they are gone. ``reclaim``
asks here before it treats a vNPU owner as gone, and ``custody`` before any vNPU is
destroyed, so a live container's vNPU is never destroyed. Kubelet lists the pod it is
admitting too (it adds a pod to its pods before admitting it), which is how ``finder``
tells which of several pods an Allocate is for. Three parts:

* ``Reader`` asks kubelet's ``List`` and gives a ``Listing`` (device ids of our resource per
  pod and per container), or None when the socket is missing or does not answer: then
  nothing can be proven, and owners that are gone from the API keep their vNPUs until a
  later try. It logs the outage once, and once more when kubelet answers again.
* ``Handouts`` remembers which device ids this plugin's Allocate answered for each pod's
  regular containers (in memory; a restart forgets it). PodResources names pods by
  namespace and name only, so a pod deleted and created again with the same name would
  look alive: the device ids decide which of the two kubelet lists.
* ``Handouts.held`` is the check itself: does kubelet still list the owner's containers
  with the devices it got?

``plugin`` builds one ``Reader`` and one ``Handouts``; ``allocations`` records handouts and
``reclaim`` asks ``held``, both under the plugin's allocation lock; ``finder``, ``holdings``
and ``custody`` read the ``Reader``.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import structlog

from vnpu_device_plugin import ledger
from vnpu_kubelet_api.podresources.v1 import api_pb2, api_pb2_grpc

log = structlog.get_logger(__name__)
TIMEOUT = 2.0


Containers = Mapping[str, frozenset[str]]  # container name -> device ids of our resource


@dataclass(frozen=True)
class Listing:
    """What one ``List`` answered: for each active pod, the device ids of our resource it holds.

    Every active pod is a key, with or without devices: PodResources does not list
    run-to-completion init containers, which may own a vNPU too. Kubelet adds a pod to the
    pods it lists before it admits it, so the pod whose Allocate is running is listed, with
    the devices of the containers allocated so far. ``containers`` has the same pods by
    container (one map per pod kubelet lists under the name: a pod deleted and created again
    may be listed twice for a while).
    """

    pods: Mapping[tuple[str, str], frozenset[str]]  # (namespace, name) -> device ids
    containers: Mapping[tuple[str, str], tuple[Containers, ...]] = field(default_factory=dict)

    def lists(self, namespace: str, name: str) -> bool:
        return (namespace, name) in self.pods

    def devices(self, namespace: str, name: str) -> frozenset[str]:
        return self.pods.get((namespace, name), frozenset())

    def holders(self, chip_uuid: str) -> list[tuple[str, str, str, frozenset[str]]]:
        """(namespace, pod, container, device ids) of every listed container holding device
        ids of the chip ``chip_uuid`` (ids are ``<chip uuid>-<n>``)."""
        found = []
        for (namespace, name), pods in sorted(self.containers.items()):
            for containers in pods:
                for container, ids in sorted(containers.items()):
                    here = frozenset(i for i in ids if i.rpartition("-")[0] == chip_uuid)
                    if here:
                        found.append((namespace, name, container, here))
        return found


def read(socket: Path, resource: str) -> Listing:
    """kubelet's answer; ``OSError`` when the socket is missing, ``grpc.RpcError`` on failure."""
    if not socket.exists():
        raise FileNotFoundError(f"no socket at {socket}")
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        return _list(api_pb2_grpc.PodResourcesListerStub(channel), resource)


def _list(stub: api_pb2_grpc.PodResourcesListerStub, resource: str) -> Listing:
    listed = stub.List(api_pb2.ListPodResourcesRequest(), timeout=TIMEOUT)
    pods: dict[tuple[str, str], frozenset[str]] = {}
    by_container: dict[tuple[str, str], tuple[Containers, ...]] = {}
    for pod in listed.pod_resources:
        containers = {
            container.name: frozenset(
                device_id
                for devices in container.devices
                if devices.resource_name == resource
                for device_id in devices.device_ids
            )
            for container in pod.containers
        }
        ids = frozenset().union(*containers.values())
        key = (pod.namespace, pod.name)
        pods[key] = pods.get(key, frozenset()) | ids  # a name twice: both pods' devices
        by_container[key] = (*by_container.get(key, ()), containers)
    return Listing(pods, by_container)


def still_listed(
    listing: Listing | None, namespace: str, name: str, device_ids: Collection[str]
) -> bool:
    """Whether kubelet may still run pod ``namespace/name`` that got ``device_ids``.

    True when kubelet does not answer (``listing`` None); False when it does not list the
    name; when it does, True while it lists one of the ids (all of them unknown: the name
    is enough), since a pod created again under the name gets other ids.
    """
    if listing is None:
        return True
    if not listing.lists(namespace, name):
        return False
    if not device_ids:
        return True
    return bool(set(device_ids) & listing.devices(namespace, name))


class Reader:
    """Reads ``socket`` for ``resource``; logs an outage once, and its end.

    The channel is kept between calls (a new one costs about 2 ms, more than the call; an
    Allocate asks on every call) and made again when the socket file is another one (kubelet
    restarted) or a call failed, so a reconnect backoff never outlasts kubelet's return.
    """

    def __init__(self, socket: Path, resource: str) -> None:
        self.socket = socket
        self.resource = resource
        self._down = False
        self._guard = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._stub: api_pb2_grpc.PodResourcesListerStub | None = None
        self._identity: tuple[int, int] | None = None

    def _current(self) -> api_pb2_grpc.PodResourcesListerStub:
        stat = self.socket.stat()  # FileNotFoundError when kubelet is not there
        identity = (stat.st_dev, stat.st_ino)
        with self._guard:
            if self._stub is None or identity != self._identity:
                self._drop_locked()
                self._channel = grpc.insecure_channel(f"unix://{self.socket}")
                self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)
                self._identity = identity
            return self._stub

    def _drop_locked(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = self._stub = self._identity = None

    def close(self) -> None:
        with self._guard:
            self._drop_locked()

    def listing(self) -> Listing | None:
        """What kubelet lists now, or None when it cannot say."""
        try:
            found = _list(self._current(), self.resource)
        except (OSError, ValueError, grpc.RpcError) as exc:  # ValueError: closed by another call
            with self._guard:
                self._drop_locked()
            problem = str(exc.code()) if isinstance(exc, grpc.RpcError) else str(exc)
            with self._guard:
                first, self._down = not self._down, True
            if first:
                log.warning(
                    "pod_resources_unavailable",
                    socket=str(self.socket),
                    error=problem,
                    effect="no vNPU is destroyed until kubelet answers; an Allocate that more "
                    "than one pod could be for is refused",
                )
            return None
        with self._guard:
            recovered, self._down = self._down, False
        if recovered:
            log.info("pod_resources_available", socket=str(self.socket))
        return found


class Handouts:
    """Device ids this plugin gave each pod's regular containers (``record``), and who has each now."""

    def __init__(self) -> None:
        self._by_pod: dict[str, frozenset[str]] = {}
        self._holder: dict[str, str] = {}  # device id -> the pod UID it was last given to
        self._guard = threading.Lock()

    def record(self, pod_uid: str, device_ids: Iterable[str]) -> None:
        """An Allocate gave ``device_ids`` to regular containers of pod ``pod_uid``."""
        ids = frozenset(device_ids)
        with self._guard:
            self._by_pod[pod_uid] = self._by_pod.get(pod_uid, frozenset()) | ids
            for device_id in ids:
                self._holder[device_id] = pod_uid

    def keep_only(self, pod_uids: Iterable[str]) -> None:
        """Forget the pods not named (no record of theirs is left to judge)."""
        keep = set(pod_uids)
        with self._guard:
            for uid in [u for u in self._by_pod if u not in keep]:
                del self._by_pod[uid]

    def given(self, pod_uid: str) -> frozenset[str]:
        """The device ids pod ``pod_uid`` got and no later pod got after it."""
        with self._guard:
            ids = self._by_pod.get(pod_uid, frozenset())
            return frozenset(i for i in ids if self._holder.get(i) == pod_uid)

    def held(self, record: ledger.Record, listing: Listing | None) -> bool:
        """Whether kubelet may still run the record's containers (True when it cannot be told).

        Not listed by name: not held. Listed, and this plugin gave the pod device ids in
        this run: held while kubelet lists one of those ids under that name (a pod of the
        same name that got other ids is another pod). Listed, ids unknown (given before a
        restart, or to init containers only, which PodResources does not show): held.
        """
        if listing is None:
            return True
        if not listing.lists(record.namespace, record.pod):
            return False
        with self._guard:
            known = bool(self._by_pod.get(record.pod_uid))
        if not known:
            return True
        return bool(self.given(record.pod_uid) & listing.devices(record.namespace, record.pod))
