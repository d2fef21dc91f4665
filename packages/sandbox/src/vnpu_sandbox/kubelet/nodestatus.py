"""The simulated node in the API: its Node object, and a publisher that keeps its status current.

``kubelet`` calls :meth:`NodeStatusPublisher.register` at start-up (create the Node if missing,
add the kubelet's labels if it exists) and then runs the publisher: it patches
``status.capacity``, ``status.allocatable`` and the conditions whenever the device manager
reports a change (:meth:`~NodeStatusPublisher.poke`) and otherwise every heartbeat. Changes are
coalesced: a burst of device updates costs one patch carrying the latest counts. Device plugin
resources appear as ``capacity`` = all listed devices and ``allocatable`` = healthy devices;
a resource dropped after its plugin's grace period stays at 0, as on a real node. Each
publish also renews the node's Lease in ``kube-node-lease`` (``lease``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vnpu_sandbox.kubelet import apiclient, errors, lease, podstatus, resourcename

log = logging.getLogger(__name__)

Json = dict[str, Any]

KUBELET_VERSION = "v1.37.2-sandbox"
"""What the Node reports: the control plane's release (``make k8s-bin``), so no version skew
is seen; the suffix says the kubelet is the sandbox's."""
RETRY_SECONDS = 1.0


@dataclass(frozen=True)
class NodeIdentity:
    """What the node looks like apart from its devices."""

    name: str
    ip: str = "127.0.0.1"
    pod_cidr: str = "10.244.0.0/24"
    cpu: str = "8"
    memory: str = "32Gi"
    max_pods: int = 110
    ephemeral_storage: str = "100Gi"
    labels: Mapping[str, str] = field(default_factory=dict)

    def all_labels(self) -> dict[str, str]:
        base = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": "amd64",
        }
        return {**base, **self.labels}


def _conditions(started: str, now: str) -> list[Json]:
    rows = [
        (
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ]
    return [
        {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": started,
        }
        for kind, status, reason, message in rows
    ]


def status(
    node: NodeIdentity, devices: Mapping[str, tuple[int, int]], started: str, now: str
) -> Json:
    """The node status the kubelet reports: machine resources plus device plugin resources."""
    machine = {
        "cpu": node.cpu,
        "memory": node.memory,
        "pods": str(node.max_pods),
        "ephemeral-storage": node.ephemeral_storage,
    }
    capacity = {**machine, **{r: str(c) for r, (c, _) in devices.items()}}
    allocatable = {**machine, **{r: str(a) for r, (_, a) in devices.items()}}
    return {
        "capacity": capacity,
        "allocatable": allocatable,
        "conditions": _conditions(started, now),
        "addresses": [
            {"type": "InternalIP", "address": node.ip},
            {"type": "Hostname", "address": node.name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": node.name,
            "systemUUID": node.name,
            "bootID": node.name,
            "kernelVersion": "6.1.0-sandbox",
            "osImage": "vnpu sandbox",
            "containerRuntimeVersion": "containerd://sandbox",
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": KUBELET_VERSION,
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


def node_object(node: NodeIdentity, devices: Mapping[str, tuple[int, int]], now: str) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": node.all_labels()},
        "spec": {"podCIDR": node.pod_cidr, "podCIDRs": [node.pod_cidr]},
        "status": status(node, devices, now, now),
    }


class NodeStatusPublisher:
    """Keeps the Node's status in the API in step with the device manager."""

    def __init__(
        self,
        api: apiclient.KubeApi,
        node: NodeIdentity,
        capacity: Callable[[], dict[str, tuple[int, int]]],
        heartbeat_seconds: float = 10.0,
    ) -> None:
        self._api = api
        self._node = node
        self._capacity = capacity
        self._heartbeat = heartbeat_seconds if heartbeat_seconds > 0 else None
        self._started = podstatus.timestamp()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.published = 0
        """How many status patches went through (tests and logs read it)."""
        self._stale: set[str] = set()
        self.lease = lease.NodeLease(api, node.name)

    def register(self, reset_extended: bool = False) -> None:
        """Create the Node, or make sure an existing one carries the kubelet's labels; then publish.

        With ``reset_extended`` (no device checkpoint: a new node), extended resources an
        existing Node still advertises are published as 0 until a plugin reports them again,
        as the kubelet's ``reconcileExtendedResource`` does.
        """
        existing = self._api.get_node(self._node.name)
        if existing is None:
            try:
                self._api.create_node(node_object(self._node, self._capacity(), self._started))
                log.info("node_registered node=%s", self._node.name)
            except errors.ApiError as exc:
                if exc.status != 409:
                    raise
        else:
            self._api.patch_node(self._node.name, {"metadata": {"labels": self._node.all_labels()}})
            if reset_extended:
                capacity = (existing.get("status") or {}).get("capacity") or {}
                self._stale = {
                    str(name)
                    for name in capacity
                    if resourcename.extended_resource_problem(str(name)) is None
                }
            log.info("node_reused node=%s zeroed=%s", self._node.name, sorted(self._stale))
        self.publish()

    def publish(self) -> None:
        now = podstatus.timestamp()
        devices = self._capacity()
        for name in self._stale - devices.keys():
            devices[name] = (0, 0)
        body = status(self._node, devices, self._started, now)
        patched = self._api.patch_node(self._node.name, {"status": body}, status=True)
        self.published += 1
        self.lease.try_renew((patched.get("metadata") or {}).get("uid"))

    def poke(self) -> None:
        """Ask for a publish soon (coalesced with other pokes)."""
        self._wake.set()

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"nodestatus-{self._node.name}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._heartbeat)
            if self._stop.is_set():
                return
            self._wake.clear()
            try:
                self.publish()
            except errors.ApiError as exc:
                log.warning("node_status_publish_failed node=%s error=%s", self._node.name, exc)
                self._wake.set()
                self._stop.wait(RETRY_SECONDS)
            except Exception:
                log.exception("node_status_publish_crashed node=%s", self._node.name)
                self._stop.wait(RETRY_SECONDS)
