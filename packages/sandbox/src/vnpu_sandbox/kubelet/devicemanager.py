"""The simulated kubelet's device manager: plugin endpoints, device health, device assignment.

``registration`` hands it each connected plugin; the endpoints feed it device lists and their
end. ``admission`` asks it for a pod's devices; ``podresources`` and the node status publisher
read it. It follows the kubelet's device manager rule for rule:

* capacity counts every listed device, allocatable only the healthy ones; a plugin whose
  stream ends or whose socket disappears turns all its devices unhealthy and, after the stop
  grace period (the kubelet's 5 minutes by default), the resource is dropped and published
  with capacity 0;
* a container's devices come first from devices its pod's finished init containers held, then
  from the plugin's GetPreferredAllocation answer (in the plugin's order) intersected with the
  free healthy devices, then from the free healthy devices in sorted order; each container
  gets its own Allocate call with one ContainerAllocateRequest;
* assignments are checkpointed to the device plugin directory after every change and survive a
  kubelet restart; a restart forgets every endpoint (capacity 0 until plugins register again).

All pod-facing methods are called from a single admission thread; device updates arrive on
endpoint threads. One lock guards the state; plugin calls are made without holding it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from vnpu_sandbox.kubelet import checkpoint, errors, pluginclient

log = logging.getLogger(__name__)

DEFAULT_GRACE_SECONDS = 300.0
"""How long a stopped plugin's resource stays on the node (the kubelet's endpointStopGracePeriod)."""


@dataclass(frozen=True)
class ContainerRequest:
    """One container as the device manager sees it: its name and its integer limits."""

    name: str
    limits: dict[str, int]
    init: bool = False
    restartable: bool = False
    """An init container with ``restartPolicy: Always`` (a sidecar): keeps its devices."""


@dataclass(frozen=True)
class PodRequest:
    uid: str
    containers: tuple[ContainerRequest, ...]
    """Init containers first, then regular containers, in spec order."""


@dataclass
class _Plugin:
    endpoint: pluginclient.Endpoint | None
    stopped_at: float | None = None
    devices: dict[str, pluginclient.Device] = field(default_factory=dict)

    def healthy(self) -> set[str]:
        return {d.id for d in self.devices.values() if d.healthy and self.endpoint is not None}


class DeviceManager:
    """Plugin registry, health bookkeeping and the kubelet's device-picking algorithm."""

    def __init__(
        self,
        plugin_dir: Path,
        on_change: Callable[[], None],
        grace_seconds: float = DEFAULT_GRACE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._checkpoint_path = plugin_dir / checkpoint.CHECKPOINT_NAME
        self._on_change = on_change
        self._grace = grace_seconds
        self._clock = clock
        self._lock = threading.RLock()
        self._plugins: dict[str, _Plugin] = {}
        self._removed: set[str] = set()
        self._entries: dict[tuple[str, str, str], checkpoint.Entry] = {}
        self._timers: list[threading.Timer] = []
        self._closed = False

    # -- start, restart, stop --------------------------------------------------------

    def restore(self) -> bool:
        """Load the checkpoint: keep assignments, know the resources, forget the endpoints.

        Returns whether there was a readable checkpoint (without one, the kubelet treats the
        node as new and zeroes the extended resources left on an existing Node object).
        """
        try:
            saved = checkpoint.load(self._checkpoint_path)
        except errors.CheckpointError as exc:
            log.error("checkpoint_unreadable error=%s (starting with no assignments)", exc)
            saved = None
        now = self._clock()
        with self._lock:
            if saved is not None:
                self._entries = {(e.pod_uid, e.container, e.resource): e for e in saved.entries}
                for resource in saved.registered:
                    self._plugins.setdefault(resource, _Plugin(None, stopped_at=now))
            self._schedule_expiry()
        self._on_change()
        return saved is not None

    def forget_endpoints(self) -> None:
        """A kubelet restart: every endpoint is gone, devices unknown until plugins register again."""
        now = self._clock()
        with self._lock:
            endpoints = [p.endpoint for p in self._plugins.values() if p.endpoint is not None]
            for plugin in self._plugins.values():
                plugin.endpoint = None
                plugin.stopped_at = now
                plugin.devices = {}
            self._save()
            self._schedule_expiry()
        for endpoint in endpoints:
            endpoint.stop()
        self._on_change()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            endpoints = [p.endpoint for p in self._plugins.values() if p.endpoint is not None]
            timers, self._timers = self._timers, []
        for timer in timers:
            timer.cancel()
        for endpoint in endpoints:
            endpoint.stop()
        for endpoint in endpoints:
            endpoint.join()

    # -- plugin side -----------------------------------------------------------------

    def plugin_connected(self, endpoint: pluginclient.Endpoint) -> None:
        """A plugin registered: it replaces any earlier endpoint of the same resource."""
        with self._lock:
            plugin = self._plugins.setdefault(endpoint.resource, _Plugin(None))
            old, plugin.endpoint, plugin.stopped_at = plugin.endpoint, endpoint, None
            self._removed.discard(endpoint.resource)
        if old is not None:
            old.stop()
        endpoint.start(self._on_list, self._on_end)
        log.info(
            "device_plugin_connected resource=%s endpoint=%s",
            endpoint.resource,
            endpoint.socket_path,
        )

    def _on_list(self, endpoint: pluginclient.Endpoint, devices: list[pluginclient.Device]) -> None:
        with self._lock:
            plugin = self._plugins.get(endpoint.resource)
            if plugin is None or plugin.endpoint is not endpoint or self._closed:
                return
            plugin.devices = {d.id: d for d in devices}
            self._save()
            healthy = len(plugin.healthy())
        log.info(
            "device_list resource=%s total=%d healthy=%d", endpoint.resource, len(devices), healthy
        )
        self._on_change()

    def _on_end(self, endpoint: pluginclient.Endpoint) -> None:
        with self._lock:
            plugin = self._plugins.get(endpoint.resource)
            if plugin is None or plugin.endpoint is not endpoint or self._closed:
                return
            plugin.devices = {
                i: pluginclient.Device(i, False, d.numa_nodes) for i, d in plugin.devices.items()
            }
            plugin.stopped_at = self._clock()
            self._save()
            self._schedule_expiry()
        log.info("device_plugin_disconnected resource=%s (devices unhealthy)", endpoint.resource)
        self._on_change()

    def _schedule_expiry(self) -> None:
        if self._closed:
            return
        timer = threading.Timer(self._grace + 0.05, self._on_change)
        timer.daemon = True
        self._timers = [t for t in self._timers if t.is_alive()] + [timer]
        timer.start()

    # -- node status side ------------------------------------------------------------

    def capacity(self) -> dict[str, tuple[int, int]]:
        """Resource -> (capacity, allocatable); dropped resources are reported as (0, 0)."""
        now = self._clock()
        with self._lock:
            for resource, plugin in list(self._plugins.items()):
                if plugin.stopped_at is not None and now - plugin.stopped_at >= self._grace:
                    del self._plugins[resource]
                    self._removed.add(resource)
                    self._save()
                    log.info("device_plugin_resource_removed resource=%s", resource)
            result = {r: (len(p.devices), len(p.healthy())) for r, p in self._plugins.items()}
            for resource in self._removed:
                result.setdefault(resource, (0, 0))
        return result

    def allocatable(self) -> dict[str, list[pluginclient.Device]]:
        """Healthy devices of every connected plugin, by resource, sorted by id."""
        with self._lock:
            return {
                r: sorted((p.devices[i] for i in p.healthy()), key=lambda d: d.id)
                for r, p in sorted(self._plugins.items())
            }

    # -- pod side --------------------------------------------------------------------

    def entries(self, pod_uid: str) -> list[checkpoint.Entry]:
        """The pod's assignments, in container then resource order of allocation."""
        with self._lock:
            return [e for (uid, _, _), e in self._entries.items() if uid == pod_uid]

    def free_pod(self, pod_uid: str) -> bool:
        """Release every device of the pod; True when it held any."""
        with self._lock:
            keys = [k for k in self._entries if k[0] == pod_uid]
            for key in keys:
                del self._entries[key]
            if keys:
                self._save()
        return bool(keys)

    def in_use(self, resource: str) -> set[str]:
        with self._lock:
            return {i for (_, _, r), e in self._entries.items() if r == resource for i in e.ids()}

    def allocate(self, pod: PodRequest) -> list[checkpoint.Entry]:
        """Give every container of the pod its devices (the kubelet's Allocate, container by container).

        Raises ``AdmissionError`` with the kubelet's wording; assignments made for earlier
        containers stay recorded (the caller frees the pod when it rejects it).
        """
        reusable: dict[str, set[str]] = {}
        made: list[checkpoint.Entry] = []
        for container in pod.containers:
            made.extend(self._allocate_container(pod.uid, container, reusable))
            held = [e for e in self.entries(pod.uid) if e.container == container.name]
            for entry in held:
                if container.init and not container.restartable:
                    reusable.setdefault(entry.resource, set()).update(entry.ids())
                else:
                    reusable.get(entry.resource, set()).difference_update(entry.ids())
        return made

    def pre_start(self, entry: checkpoint.Entry) -> None:
        """PreStartContainer for one assignment when its plugin asked for it (pre_start_required)."""
        with self._lock:
            plugin = self._plugins.get(entry.resource)
            endpoint = plugin.endpoint if plugin is not None else None
        if endpoint is None:
            raise errors.AdmissionError(
                entry.resource,
                f"endpoint not found in cache for a registered resource: {entry.resource}",
            )
        if endpoint.options.pre_start_required:
            endpoint.pre_start(entry.ids())

    def _is_device_plugin_resource(self, resource: str) -> bool:
        return resource in self._plugins or any(r == resource for (_, _, r) in self._entries)

    def _allocate_container(
        self, pod_uid: str, container: ContainerRequest, reusable: dict[str, set[str]]
    ) -> list[checkpoint.Entry]:
        made = []
        for resource, required in sorted(container.limits.items()):
            with self._lock:
                if not self._is_device_plugin_resource(resource):
                    continue
            ids = self._devices_to_allocate(
                pod_uid, container.name, resource, required, reusable.get(resource, set())
            )
            if not ids:
                continue
            with self._lock:
                plugin = self._plugins.get(resource)
                endpoint = plugin.endpoint if plugin is not None else None
            if endpoint is None:
                raise errors.AdmissionError(resource, f"unknown Device Plugin {resource}")
            response = endpoint.allocate(ids)
            with self._lock:
                devices = plugin.devices if plugin is not None else {}
                by_node: dict[str, list[str]] = {}
                for device_id in ids:
                    device = devices.get(device_id)
                    nodes = device.numa_nodes if device is not None and device.numa_nodes else ()
                    for node in [str(n) for n in nodes] or [checkpoint.NO_TOPOLOGY]:
                        by_node.setdefault(node, []).append(device_id)
                entry = checkpoint.Entry(
                    pod_uid,
                    container.name,
                    resource,
                    {node: tuple(v) for node, v in by_node.items()},
                    response,
                )
                self._entries[(pod_uid, container.name, resource)] = entry
                self._save()
            made.append(entry)
        return made

    def _devices_to_allocate(
        self, pod_uid: str, container: str, resource: str, required: int, reusable: set[str]
    ) -> list[str]:
        with self._lock:
            existing = self._entries.get((pod_uid, container, resource))
            needed = required
            if existing is not None:
                needed -= len(existing.ids())
                if needed != 0:
                    raise errors.AdmissionError(
                        resource,
                        f'pod "{pod_uid}" container "{container}" changed request for resource '
                        f'"{resource}" from {len(existing.ids())} to {required}',
                    )
            plugin = self._plugins.get(resource)
            if plugin is None:
                raise errors.AdmissionError(
                    resource, f"cannot allocate unregistered device {resource}"
                )
            healthy = plugin.healthy()
            if not healthy:
                raise errors.AdmissionError(
                    resource,
                    f"no healthy devices present; cannot allocate unhealthy devices {resource}",
                )
            if existing is not None and not healthy.issuperset(existing.ids()):
                raise errors.AdmissionError(
                    resource,
                    "previously allocated devices are no longer healthy; "
                    f"cannot allocate unhealthy devices {resource}",
                )
            if needed == 0:
                return []
            allocated: list[str] = []
            if _take(allocated, sorted(reusable), required):
                return allocated
            available = healthy - self.in_use(resource)
            if len(available) < required - len(allocated):
                raise errors.AdmissionError(
                    resource,
                    f"requested number of devices unavailable for {resource}. "
                    f"Requested: {required - len(allocated)}, Available: {len(available)}",
                )
            endpoint = plugin.endpoint
            ask = endpoint is not None and endpoint.options.get_preferred_allocation_available
        if ask and endpoint is not None:
            preferred = endpoint.preferred(sorted(available | set(allocated)), allocated, required)
            if _take(allocated, [i for i in preferred if i in available], required):
                return allocated
        if _take(allocated, sorted(available), required):
            return allocated
        raise errors.AdmissionError(
            resource,
            "unexpectedly allocated less resources than required. "
            f"Requested: {required}, Got: {len(allocated)}",
        )

    def _save(self) -> None:
        """Write the checkpoint; the caller holds the lock."""
        registered = {
            r: tuple(sorted(p.healthy()))
            for r, p in self._plugins.items()
            if p.endpoint is not None
        }
        registered.update({r: () for r, p in self._plugins.items() if p.endpoint is None})
        state = checkpoint.Checkpoint(tuple(self._entries.values()), registered)
        try:
            checkpoint.save(self._checkpoint_path, state)
        except OSError as exc:
            log.error("checkpoint_write_failed path=%s error=%s", self._checkpoint_path, exc)


def _take(allocated: list[str], candidates: Iterable[str], required: int) -> bool:
    """Append candidates not yet taken until ``required`` are taken; True once there are enough."""
    for device_id in candidates:
        if len(allocated) >= required:
            break
        if device_id not in allocated:
            allocated.append(device_id)
    return len(allocated) >= required
