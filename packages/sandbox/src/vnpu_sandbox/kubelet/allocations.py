"""What each started pod got from its device plugins and DRA drivers, readable by tests and the sandbox.

``podworker`` records a :class:`PodAllocation` when it starts a pod (device plugin answers,
then the CDI devices of its prepared ResourceClaims, then the environment those CDI devices
set, resolved from the CDI spec files by ``cdi``) and removes it when the pod's devices are
freed; :meth:`Kubelet.allocation <vnpu_sandbox.kubelet.kubelet.Kubelet.allocation>`
reads it in process. With a state directory, each record is also written to
``<state dir>/pods/<namespace>_<name>.json`` (camelCase keys, the plugin's answer as sent), so
other processes - the sandbox CLI, a shell - can see the environment, mounts, device nodes,
annotations and CDI devices a container would have been started with. Nothing is written to
the pod object: the real kubelet never annotates pods, and the vnpu annotations belong to the
scheduler and the device plugin.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vnpu_sandbox.kubelet import cdi, checkpoint

Json = dict[str, Any]


@dataclass(frozen=True)
class Mount:
    container_path: str
    host_path: str
    read_only: bool


@dataclass(frozen=True)
class DeviceNode:
    container_path: str
    host_path: str
    permissions: str


@dataclass(frozen=True)
class ResourceAllocation:
    """One plugin's Allocate answer for one container."""

    resource: str
    device_ids: tuple[str, ...]
    envs: dict[str, str]
    mounts: tuple[Mount, ...]
    devices: tuple[DeviceNode, ...]
    annotations: dict[str, str]
    cdi_devices: tuple[str, ...]

    @classmethod
    def from_entry(cls, entry: checkpoint.Entry) -> ResourceAllocation:
        response = entry.response
        return cls(
            resource=entry.resource,
            device_ids=entry.ids(),
            envs=dict(sorted(response.envs.items())),
            mounts=tuple(
                Mount(m.container_path, m.host_path, m.read_only) for m in response.mounts
            ),
            devices=tuple(
                DeviceNode(d.container_path, d.host_path, d.permissions) for d in response.devices
            ),
            annotations=dict(sorted(response.annotations.items())),
            cdi_devices=tuple(c.name for c in response.cdi_devices),
        )

    def to_json(self) -> Json:
        return {
            "resource": self.resource,
            "deviceIDs": list(self.device_ids),
            "envs": self.envs,
            "mounts": [
                {
                    "containerPath": m.container_path,
                    "hostPath": m.host_path,
                    "readOnly": m.read_only,
                }
                for m in self.mounts
            ],
            "devices": [
                {
                    "containerPath": d.container_path,
                    "hostPath": d.host_path,
                    "permissions": d.permissions,
                }
                for d in self.devices
            ],
            "annotations": self.annotations,
            "cdiDevices": list(self.cdi_devices),
        }


@dataclass(frozen=True)
class ClaimDevice:
    driver: str
    pool: str
    device: str


@dataclass(frozen=True)
class ClaimAllocation:
    """What one prepared ResourceClaim gives a container (the requests it names)."""

    claim: str
    devices: tuple[ClaimDevice, ...]
    cdi_devices: tuple[str, ...]

    def to_json(self) -> Json:
        return {
            "claim": self.claim,
            "devices": [
                {"driver": d.driver, "pool": d.pool, "device": d.device} for d in self.devices
            ],
            "cdiDevices": list(self.cdi_devices),
        }


@dataclass(frozen=True)
class ContainerAllocation:
    name: str
    resources: tuple[ResourceAllocation, ...]
    claims: tuple[ClaimAllocation, ...] = ()
    cdi: cdi.Resolution = field(default_factory=lambda: cdi.Resolution({}, (), ()))
    """The edits of :attr:`cdi_devices` found in the CDI spec files."""

    @property
    def cdi_devices(self) -> tuple[str, ...]:
        """Every CDI device the runtime would inject: device plugins' first, then claims'."""
        plugin = [
            c for r in sorted(self.resources, key=lambda r: r.resource) for c in r.cdi_devices
        ]
        return tuple(plugin + [c for claim in self.claims for c in claim.cdi_devices])

    @property
    def env(self) -> dict[str, str]:
        """The environment the container would get: the plugins' envs (resources in name order,
        later wins), then what its CDI devices set (CDI edits apply last)."""
        merged: dict[str, str] = {}
        for allocation in sorted(self.resources, key=lambda r: r.resource):
            merged.update(allocation.envs)
        merged.update(self.cdi.env)
        return merged

    def device_ids(self, resource: str) -> tuple[str, ...]:
        return next((r.device_ids for r in self.resources if r.resource == resource), ())


@dataclass(frozen=True)
class PodAllocation:
    namespace: str
    name: str
    uid: str
    node: str
    containers: tuple[ContainerAllocation, ...]
    """Every container that got devices, init containers first, in spec order."""

    @classmethod
    def from_entries(
        cls,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        entries: Iterable[checkpoint.Entry],
        claims: Mapping[str, tuple[ClaimAllocation, ...]] | None = None,
        cdi_specs: Iterable[Json] = (),
    ) -> PodAllocation:
        """Records of the containers that got devices or claims, CDI devices resolved."""
        by_container: dict[str, list[ResourceAllocation]] = {}
        for entry in entries:
            by_container.setdefault(entry.container, []).append(
                ResourceAllocation.from_entry(entry)
            )
        for container in claims or {}:
            by_container.setdefault(container, [])
        specs = list(cdi_specs)
        containers = []
        for container, resources in by_container.items():
            record = ContainerAllocation(
                container, tuple(resources), (claims or {}).get(container, ())
            )
            if record.cdi_devices:
                record = ContainerAllocation(
                    container,
                    record.resources,
                    record.claims,
                    cdi.resolve(record.cdi_devices, specs),
                )
            containers.append(record)
        return cls(namespace, name, uid, node, tuple(containers))

    def container(self, name: str) -> ContainerAllocation | None:
        return next((c for c in self.containers if c.name == name), None)

    def to_json(self) -> Json:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "node": self.node,
            "containers": [
                {
                    "name": c.name,
                    "env": c.env,
                    "resources": [r.to_json() for r in c.resources],
                    "claims": [claim.to_json() for claim in c.claims],
                    "cdiDevices": list(c.cdi_devices),
                    "cdiDeviceNodes": list(c.cdi.device_nodes),
                    "cdiUnresolved": list(c.cdi.unresolved),
                }
                for c in self.containers
            ],
        }


class AllocationStore:
    """Records by ``namespace/name``, mirrored to JSON files when a state directory is given."""

    def __init__(self, state_dir: Path | None) -> None:
        self._dir = state_dir / "pods" if state_dir is not None else None
        self._records: dict[tuple[str, str], PodAllocation] = {}
        self._lock = threading.Lock()
        if self._dir is not None:
            self._dir.mkdir(parents=True, exist_ok=True)

    def _path(self, namespace: str, name: str) -> Path | None:
        return self._dir / f"{namespace}_{name}.json" if self._dir is not None else None

    def put(self, record: PodAllocation) -> None:
        with self._lock:
            self._records[(record.namespace, record.name)] = record
        path = self._path(record.namespace, record.name)
        if path is not None:
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps(record.to_json(), indent=2, sort_keys=True) + "\n")
            os.replace(tmp, path)

    def remove(self, namespace: str, name: str) -> None:
        with self._lock:
            self._records.pop((namespace, name), None)
        path = self._path(namespace, name)
        if path is not None:
            path.unlink(missing_ok=True)

    def get(self, namespace: str, name: str) -> PodAllocation | None:
        with self._lock:
            return self._records.get((namespace, name))

    def all(self) -> list[PodAllocation]:
        with self._lock:
            return list(self._records.values())
