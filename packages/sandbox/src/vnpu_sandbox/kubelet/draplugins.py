"""DRA drivers: the kubelet's plugin-registration watcher and its clients of each driver.

``kubelet`` runs one :class:`PluginWatcher` on ``<kubelet dir>/plugins_registry/``, as the
kubelet's plugin manager does. Every 0.1 s it looks for unix sockets there; for a new one it
dials the socket, calls ``GetInfo``, accepts a plugin of type ``DRAPlugin`` whose
``supported_versions`` include ``v1.DRAPlugin``, connects to its endpoint (the socket named in
``PluginInfo.endpoint``, the registration socket itself when empty) and answers
``NotifyRegistrationStatus(plugin_registered=true)``. Any other outcome is answered with
``plugin_registered=false`` and the reason, and the socket is tried again after
``retry_seconds`` (the kubelet's reconciler keeps retrying a socket that is still there).
A registration socket that disappears or is replaced unregisters its driver, and its node's
ResourceSlices are wiped 30 s later unless it registers again (``slicewiper``).

:class:`Drivers` is the registry ``dramanager`` asks for a driver by name; a driver that
registers again under the same name replaces the earlier connection.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from vnpu_kubelet_api import constants
from vnpu_kubelet_api.dra.v1 import api_pb2 as dra_pb2
from vnpu_kubelet_api.dra.v1 import api_pb2_grpc as dra_grpc
from vnpu_kubelet_api.pluginregistration.v1 import api_pb2 as reg_pb2
from vnpu_kubelet_api.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from vnpu_sandbox.kubelet import errors, slicewiper

log = logging.getLogger(__name__)

CALL_TIMEOUT_SECONDS = 45.0
"""Deadline of NodePrepareResources / NodeUnprepareResources (the kubelet's default DRA
plugin client timeout)."""
DIAL_TIMEOUT_SECONDS = 5.0
"""Deadline of GetInfo and NotifyRegistrationStatus on a registration socket."""


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino) if stat.S_ISSOCK(info.st_mode) else None


class Driver:
    """A connection to one registered DRA driver's ``DRAPlugin`` endpoint."""

    def __init__(self, name: str, endpoint: Path, registration: Path) -> None:
        self.name = name
        self.endpoint = endpoint
        self.registration = registration
        self._channel = grpc.insecure_channel(f"unix://{endpoint}")
        self._stub = dra_grpc.DRAPluginStub(self._channel)

    def prepare(self, claims: list[dra_pb2.Claim]) -> dra_pb2.NodePrepareResourcesResponse:
        """NodePrepareResources; ``DraError`` with grpc-go's rendering of a failed call."""
        try:
            return self._stub.NodePrepareResources(
                dra_pb2.NodePrepareResourcesRequest(claims=claims), timeout=CALL_TIMEOUT_SECONDS
            )
        except grpc.RpcError as exc:
            raise errors.DraError(f"NodePrepareResources: {_rpc_text(exc)}") from exc

    def unprepare(self, claims: list[dra_pb2.Claim]) -> dra_pb2.NodeUnprepareResourcesResponse:
        try:
            return self._stub.NodeUnprepareResources(
                dra_pb2.NodeUnprepareResourcesRequest(claims=claims),
                timeout=CALL_TIMEOUT_SECONDS,
            )
        except grpc.RpcError as exc:
            raise errors.DraError(f"NodeUnprepareResources: {_rpc_text(exc)}") from exc

    def close(self) -> None:
        self._channel.close()


def _rpc_text(exc: grpc.RpcError) -> str:
    return errors.PluginCallError.from_rpc("", "", exc).rpc_text


class Drivers:
    """Registered DRA drivers by name; thread-safe. With ``wiper``, a driver that unregisters
    has its node's ResourceSlices wiped after the kubelet's delay unless it comes back."""

    def __init__(self, wiper: slicewiper.SliceWiper | None = None) -> None:
        self._drivers: dict[str, Driver] = {}
        self._lock = threading.Lock()
        self._wiper = wiper

    def get(self, name: str) -> Driver:
        """The driver, or ``DraError`` with the kubelet's message when it is not registered."""
        if not name:
            raise errors.DraError("DRA driver name is empty")
        with self._lock:
            driver = self._drivers.get(name)
        if driver is None:
            raise errors.DraError(f"DRA driver {name} is not registered")
        return driver

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._drivers)

    def add(self, driver: Driver) -> None:
        with self._lock:
            old, self._drivers[driver.name] = self._drivers.get(driver.name), driver
        if old is not None:
            old.close()
        if self._wiper is not None:
            self._wiper.registered(driver.name)
        log.info("dra_driver_registered driver=%s endpoint=%s", driver.name, driver.endpoint)

    def remove(self, registration: Path) -> None:
        """Unregister the driver that registered through ``registration`` (if still current)."""
        with self._lock:
            gone = [n for n, d in self._drivers.items() if d.registration == registration]
            drivers = [self._drivers.pop(n) for n in gone]
        for driver in drivers:
            driver.close()
            if self._wiper is not None:
                self._wiper.unregistered(driver.name)
            log.info("dra_driver_unregistered driver=%s", driver.name)

    def clear(self) -> None:
        with self._lock:
            drivers, self._drivers = list(self._drivers.values()), {}
        for driver in drivers:
            driver.close()


@dataclass
class _Socket:
    identity: tuple[int, int]
    registered: bool = False
    retry_at: float = 0.0
    attempts: int = field(default=0)


class PluginWatcher:
    """Polls the registration directory and registers DRA drivers with :class:`Drivers`."""

    def __init__(
        self,
        directory: Path,
        drivers: Drivers,
        on_change: Callable[[], None] | None = None,
        poll_seconds: float = 0.1,
        retry_seconds: float = 1.0,
    ) -> None:
        self.directory = directory
        self._drivers = drivers
        self._on_change = on_change
        self._poll = poll_seconds
        self._retry = retry_seconds
        self._sockets: dict[Path, _Socket] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._stop.clear()
        self._sockets = {}
        self.scan()  # drivers already there are registered before the pods are handled
        self._thread = threading.Thread(target=self._loop, name="pluginwatcher", daemon=True)
        self._thread.start()
        log.info("plugin_watcher_started dir=%s", self.directory)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        for path in list(self._sockets):
            self._drivers.remove(path)
        self._sockets = {}

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.scan()
            except Exception:
                log.exception("plugin_watcher_crashed dir=%s", self.directory)
            self._stop.wait(self._poll)

    def scan(self) -> None:
        """One pass: register new sockets, retry failed ones, unregister vanished ones."""
        seen: dict[Path, tuple[int, int]] = {}
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            entries = []
        for entry in entries:
            identity = _identity(Path(entry.path))
            if identity is not None:
                seen[Path(entry.path)] = identity
        changed = False
        for path, known in list(self._sockets.items()):
            if seen.get(path) != known.identity:
                del self._sockets[path]
                if known.registered:
                    self._drivers.remove(path)
                    changed = True
        now = time.monotonic()
        for path, identity in sorted(seen.items()):
            known = self._sockets.setdefault(path, _Socket(identity))
            if known.registered or now < known.retry_at:
                continue
            known.attempts += 1
            if self._register(path):
                known.registered = True
                changed = True
            else:
                known.retry_at = now + self._retry
        if changed and self._on_change is not None:
            self._on_change()

    def _register(self, path: Path) -> bool:
        with grpc.insecure_channel(f"unix://{path}") as channel:
            stub = reg_grpc.RegistrationStub(channel)
            try:
                info = stub.GetInfo(reg_pb2.InfoRequest(), timeout=DIAL_TIMEOUT_SECONDS)
            except grpc.RpcError as exc:
                log.info("plugin_get_info_failed socket=%s error=%s", path, _rpc_text(exc))
                return False
            problem = self._check(path, info)
            driver = None
            if problem is None:
                endpoint = Path(info.endpoint) if info.endpoint else path
                driver = Driver(info.name, endpoint, path)
            try:
                stub.NotifyRegistrationStatus(
                    reg_pb2.RegistrationStatus(
                        plugin_registered=problem is None, error=problem or ""
                    ),
                    timeout=DIAL_TIMEOUT_SECONDS,
                )
            except grpc.RpcError as exc:
                log.info("plugin_notify_failed socket=%s error=%s", path, _rpc_text(exc))
                if driver is not None:
                    driver.close()
                return False
        if driver is None:
            log.info("plugin_registration_refused socket=%s error=%s", path, problem)
            return False
        self._drivers.add(driver)
        return True

    @staticmethod
    def _check(path: Path, info: reg_pb2.PluginInfo) -> str | None:
        """Why the plugin cannot be registered (the kubelet's wording), or None."""
        if info.type != constants.DRA_PLUGIN_TYPE:
            return f"no handler registered for plugin type: {info.type} at socket {path}"
        if not info.name:
            return "DRA driver name is empty"
        if constants.DRA_PLUGIN_SERVICE_V1 not in info.supported_versions:
            return (
                f"invalid supported gRPC versions of DRA driver plugin {info.name} at endpoint "
                f"{info.endpoint}: none of the supported services {list(info.supported_versions)} "
                f"is {constants.DRA_PLUGIN_SERVICE_V1}"
            )
        if info.endpoint and _identity(Path(info.endpoint)) is None:
            return f"no unix socket at the endpoint {info.endpoint} of DRA driver {info.name}"
        return None
