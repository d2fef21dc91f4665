"""A simulated kubelet for one node, as a library: start it, stop it, restart it, finish its pods.

The ``vnpu-sandbox kubelet`` command and in-process users (tests) build a :class:`Kubelet`
from a :class:`KubeletConfig` and an API client of the official ``kubernetes`` package, made
from a kubeconfig that names the node's identity (``system:node:node-a``)::

    from vnpu_sandbox.kubelet import apiclient, kubelet, nodestatus

    config = kubelet.KubeletConfig(nodestatus.NodeIdentity("node-a"), device_plugin_dir=...)
    with kubelet.Kubelet(config, apiclient.client_from_kubeconfig(path)) as node:
        ...  # plugins register on <device_plugin_dir>/kubelet.sock; pods bound to node-a run
        node.complete_pod("default", "job-1")

Start-up follows the kubelet: remove stale sockets from the device plugin directory, read the
device checkpoint, register the Node, serve Registration and PodResources, watch the plugin
registration directory for DRA drivers, then take the pods.
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from kubernetes import client

from vnpu_kubelet_api import constants
from vnpu_sandbox.kubelet import (
    allocations,
    apiclient,
    devicemanager,
    dramanager,
    draplugins,
    errors,
    nodestatus,
    podresources,
    podworker,
    registration,
    slicewiper,
    statusmanager,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KubeletConfig:
    node: nodestatus.NodeIdentity
    device_plugin_dir: Path = Path(constants.DEVICE_PLUGIN_PATH)
    """Where kubelet.sock is served and plugins put their sockets."""
    pod_resources_socket: Path = Path(constants.POD_RESOURCES_SOCKET)
    state_dir: Path | None = None
    """Where pod allocation records are written as JSON (none when unset)."""
    heartbeat_seconds: float = 10.0
    """Node status refresh period when nothing changes; 0 turns the heartbeat off."""
    plugin_grace_seconds: float = devicemanager.DEFAULT_GRACE_SECONDS
    """How long a vanished plugin's resource stays on the node with 0 allocatable."""
    pod_resources_get: bool = True
    """Serve PodResources ``Get`` (off: answer like a kubelet without KubeletPodResourcesGet)."""
    watch_timeout_seconds: int = 300
    """Server-side timeout of one pod watch request (the watch is reopened after it)."""
    plugin_dial_seconds: float = 10.0
    """How long Register waits for a plugin's socket to answer."""
    status_sync_seconds: float = statusmanager.SYNC_SECONDS
    """How often pod status writes and final deletes that have not landed are sent again
    (the kubelet status manager's 10 s)."""
    plugins_registry_dir: Path | None = None
    """Where DRA drivers put their registration sockets; default ``plugins_registry`` next to
    the device plugin directory (``/var/lib/kubelet/plugins_registry/`` on a node)."""
    cdi_dir: Path | None = None
    """CDI spec files used to resolve CDI device names to container edits; default ``cdi``
    next to the device plugin directory."""
    dra_retry_seconds: float = 10.0
    """How long after a failed NodePrepareResources / NodeUnprepareResources (or a claim not
    ready) the kubelet tries again (the kubelet pod worker's 10 s back-off)."""
    dra_wiping_delay_seconds: float = slicewiper.WIPING_DELAY_SECONDS
    """How long after a DRA driver stopped being usable its ResourceSlices are deleted, unless
    it registers again (the kubelet's 30 s); every slice of the node goes at start."""
    register_timeout_seconds: float = 0.0
    """How long registering the Node is retried while the API answers nothing, 429 or 5xx
    (0: not at all). A kubelet retries forever; a loaded kube-apiserver times creates out
    while many nodes start."""


REGISTER_BACKOFF_SECONDS = (0.2, 0.5, 1.0, 2.0)


class Kubelet:
    """One simulated node; thread-safe, usable as a context manager."""

    def __init__(self, config: KubeletConfig, api_client: client.ApiClient) -> None:
        self.config = config
        self._plugin_dir = config.device_plugin_dir.resolve()
        self._api = apiclient.KubeApi(api_client)
        self.devices = devicemanager.DeviceManager(
            self._plugin_dir, self._changed, config.plugin_grace_seconds
        )
        self.records = allocations.AllocationStore(config.state_dir)
        self._publisher = nodestatus.NodeStatusPublisher(
            self._api, config.node, self.devices.capacity, config.heartbeat_seconds
        )
        self._statuses = statusmanager.StatusManager(
            self._api, config.node.name, config.status_sync_seconds
        )
        self._wiper = slicewiper.SliceWiper(
            self._api, config.node.name, config.dra_wiping_delay_seconds
        )
        self.drivers = draplugins.Drivers(self._wiper)
        self.dra = dramanager.DraManager(self._api, self.drivers)
        self._worker = podworker.PodWorker(
            self._api,
            config.node,
            self.devices,
            self.records,
            self._statuses,
            config.watch_timeout_seconds,
            self.dra,
            self.cdi_dir,
            config.dra_retry_seconds,
        )
        self._plugin_watcher: draplugins.PluginWatcher | None = None
        self._registration: registration.RegistrationServer | None = None
        self._pod_resources: podresources.PodResourcesServer | None = None
        self._running = False

    @property
    def name(self) -> str:
        return self.config.node.name

    @property
    def kubelet_socket(self) -> Path:
        return self._plugin_dir / constants.KUBELET_SOCKET_NAME

    @property
    def plugins_registry_dir(self) -> Path:
        return (
            self.config.plugins_registry_dir or self._plugin_dir.parent / "plugins_registry"
        ).resolve()

    @property
    def cdi_dir(self) -> Path:
        return (self.config.cdi_dir or self._plugin_dir.parent / "cdi").resolve()

    def _changed(self) -> None:
        self._publisher.poke()

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, sync_timeout: float = 10.0) -> None:
        """Bring the node up; returns once the pods already bound to it have been handled.

        A failure (API unreachable, directory not writable) stops what was started and raises.
        """
        self._running = True
        try:
            self._plugin_dir.mkdir(parents=True, exist_ok=True)
            registration.remove_sockets(self._plugin_dir)
            had_checkpoint = self.devices.restore()
            self._register(reset_extended=not had_checkpoint)
            self._publisher.start()
            self._serve()
            self._statuses.start()
            self._worker.start()
        except BaseException:
            self.stop()
            raise
        if not self._worker.synced.wait(sync_timeout):
            log.warning("pods_not_synced node=%s timeout_seconds=%s", self.name, sync_timeout)
        log.info("kubelet_started node=%s plugin_dir=%s", self.name, self._plugin_dir)

    def _register(self, reset_extended: bool) -> None:
        """Register the Node, retrying what retrying can fix until the register timeout."""
        deadline = time.monotonic() + self.config.register_timeout_seconds
        for attempt in itertools.count():
            try:
                self._publisher.register(reset_extended=reset_extended)
                return
            except errors.ApiError as exc:
                if not exc.temporary or time.monotonic() >= deadline:
                    raise
                pause = REGISTER_BACKOFF_SECONDS[min(attempt, len(REGISTER_BACKOFF_SECONDS) - 1)]
                log.warning(
                    "node_register_retry node=%s attempt=%d error=%s", self.name, attempt + 1, exc
                )
                time.sleep(pause)

    def _serve(self) -> None:
        self._registration = registration.RegistrationServer(
            self._plugin_dir, self.devices, self.config.plugin_dial_seconds
        )
        self._registration.start()
        self._pod_resources = podresources.PodResourcesServer(
            self.config.pod_resources_socket,
            self.devices,
            self._worker.active_pods,
            self.config.pod_resources_get,
            self.dra,
        )
        self._pod_resources.start()
        self._wiper.wipe_all()  # no driver has registered yet: none of its devices is usable
        self._plugin_watcher = draplugins.PluginWatcher(self.plugins_registry_dir, self.drivers)
        self._plugin_watcher.start()

    def _unserve(self) -> None:
        if self._plugin_watcher is not None:
            self._plugin_watcher.stop()
            self._plugin_watcher = None
            self.drivers.clear()
        self._wiper.stop()
        if self._registration is not None:
            self._registration.stop()
            self._registration = None
        if self._pod_resources is not None:
            self._pod_resources.stop()
            self._pod_resources = None

    def restart(self) -> None:
        """A kubelet restart: new sockets, every plugin forgotten, device assignments kept.

        Every socket in the device plugin directory is removed (plugins see their socket vanish
        and must register again), Registration and PodResources get new servers, and device
        plugin resources drop to 0 until their plugins re-register. DRA drivers are forgotten
        and registered again from the sockets still in ``plugins_registry`` (which the kubelet
        does not remove); prepared claims are kept (the kubelet's DRA checkpoint). Pods keep
        running.
        """
        self._unserve()
        registration.remove_sockets(self._plugin_dir)
        self.devices.forget_endpoints()
        self._serve()
        log.info("kubelet_restarted node=%s", self.name)

    def stop(self) -> None:
        """Stop serving and watching; the Node and its pods stay in the API as they are."""
        if not self._running:
            return
        self._running = False
        self._worker.stop()
        self._statuses.stop()
        self._unserve()
        self.devices.close()
        self._publisher.stop()
        log.info("kubelet_stopped node=%s", self.name)

    def __enter__(self) -> Kubelet:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # -- what tests and the sandbox read or do -----------------------------------------

    def complete_pod(self, namespace: str, name: str, exit_code: int = 0) -> None:
        """Every container of the running pod exits with ``exit_code`` (0: Succeeded, else Failed).

        Its devices are freed. ``PodNotFoundError`` when no such pod is running on this node.
        """
        self._worker.complete(namespace, name, exit_code)

    def allocation(self, namespace: str, name: str) -> allocations.PodAllocation | None:
        """What the device plugins gave the pod's containers; None when it holds no devices."""
        return self.records.get(namespace, name)

    def capacity(self) -> dict[str, tuple[int, int]]:
        """Device plugin resources: name -> (capacity, allocatable), as published on the Node."""
        return self.devices.capacity()

    def publish_node_status(self) -> None:
        """Patch the Node status now (the publisher does it on change and on the heartbeat)."""
        self._publisher.publish()
