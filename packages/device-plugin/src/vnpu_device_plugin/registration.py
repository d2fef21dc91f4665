"""Serving the plugin's socket and staying registered with kubelet, across kubelet restarts.

``KubeletLink`` serves the DevicePlugin service on ``<device plugin dir>/<socket>`` and
calls kubelet's ``Registration.Register`` (socket first, then Register, as kubelet
requires). Every ``poll`` seconds it checks the two files: when kubelet restarts it removes
every socket in the directory and creates a new ``kubelet.sock``, so our socket vanishing
(or being replaced) or ``kubelet.sock`` changing inode means a restart. Then it stops the
old gRPC server, builds a **new** one (a gRPC server cannot take services after it
started: HAMi #1911) and registers again; with the default 0.2 s poll that takes well
under the 2 s the kubelet restart budget allows. A refused or failed Register is retried
every second. ``plugin`` runs it in its own thread; ``healthy`` feeds ``/healthz``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc
import structlog

from vnpu_device_plugin import errors, metrics
from vnpu_kubelet_api import constants
from vnpu_kubelet_api.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc

log = structlog.get_logger(__name__)

_UNIX_PATH_MAX = 107  # bytes of a unix socket path (sockaddr_un.sun_path less its NUL)
REGISTER_TIMEOUT = 5.0
RETRY_SECONDS = 1.0


def identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of a file, or None when it is not there."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (status.st_dev, status.st_ino)


class KubeletLink:
    """Our gRPC server and our registration with the kubelet of ``plugin_dir``."""

    def __init__(
        self,
        plugin_dir: Path,
        socket_name: str,
        resource: str,
        servicer: api_pb2_grpc.DevicePluginServicer,
        stats: metrics.Metrics,
        *,
        poll: float = 0.2,
        workers: int = 16,
        on_registered: Callable[[], None] = lambda: None,
    ) -> None:
        self.socket = plugin_dir / socket_name
        self.kubelet_socket = plugin_dir / constants.KUBELET_SOCKET_NAME
        self._resource = resource
        self._servicer = servicer
        self._stats = stats
        self._poll = poll
        self._workers = workers
        self._on_registered = on_registered
        self._server: grpc.Server | None = None
        self._pool: futures.ThreadPoolExecutor | None = None
        self._served: tuple[int, int] | None = None  # identity of the socket we serve
        self._registered_with: tuple[int, int] | None = None  # identity of kubelet.sock then
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.registrations = 0

    @property
    def healthy(self) -> bool:
        """Serving our socket and registered with the kubelet.sock that is there now."""
        return (
            self._server is not None
            and self._registered_with is not None
            and identity(self.socket) == self._served
            and identity(self.kubelet_socket) == self._registered_with
        )

    def _serve(self) -> None:
        """Stop any old server and serve on a fresh socket with a new one."""
        self._shutdown(grace=0.5)
        length = len(os.fsencode(self.socket))
        if length > _UNIX_PATH_MAX:
            raise errors.SettingsError(
                "device_plugin_dir",
                str(self.socket.parent),
                f"the plugin socket {self.socket} is {length} bytes; a unix socket path holds at most {_UNIX_PATH_MAX}",
            )
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        self._pool = futures.ThreadPoolExecutor(
            max_workers=self._workers, thread_name_prefix="vnpu-dp-grpc"
        )
        server = grpc.server(self._pool)
        api_pb2_grpc.add_DevicePluginServicer_to_server(self._servicer, server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server
        self._served = identity(self.socket)
        self._registered_with = None
        log.info("plugin_serving", socket=str(self.socket))

    def _shutdown(self, grace: float) -> None:
        """Stop the current server; calls in flight get ``grace`` seconds to finish."""
        if self._server is not None:
            self._server.stop(grace=grace).wait(grace + 2)
            self._server = None
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def reregister(self) -> None:
        """Serve with a new server and register again at the next round (SIGHUP)."""
        self._served = None

    def _register(self) -> bool:
        kubelet = identity(self.kubelet_socket)
        if kubelet is None:
            return False
        request = api_pb2.RegisterRequest(
            version=constants.VERSION,
            endpoint=self.socket.name,
            resource_name=self._resource,
            options=api_pb2.DevicePluginOptions(
                pre_start_required=False, get_preferred_allocation_available=True
            ),
        )
        try:
            with grpc.insecure_channel(f"unix://{self.kubelet_socket}") as channel:
                api_pb2_grpc.RegistrationStub(channel).Register(request, timeout=REGISTER_TIMEOUT)
        except grpc.RpcError as exc:
            self._stats.registrations.labels("failure").inc()
            log.warning(
                "register_failed",
                resource=self._resource,
                error=exc.details() if hasattr(exc, "details") else str(exc),
            )
            return False
        self._registered_with = kubelet
        self.registrations += 1
        self._stats.registrations.labels("success").inc()
        log.info("registered", resource=self._resource, endpoint=self.socket.name)
        self._on_registered()
        return True

    def check(self) -> None:
        """One round: restart the server and register as the files say."""
        if self._server is None or identity(self.socket) != self._served:
            if self._server is not None:
                log.info("plugin_socket_gone", socket=str(self.socket))
            self._serve()
        kubelet = identity(self.kubelet_socket)
        if kubelet is not None and kubelet != self._registered_with:
            if self._registered_with is not None:
                log.info("kubelet_restarted", socket=str(self.kubelet_socket))
                self._serve()
            if not self._register():
                self._stop.wait(RETRY_SECONDS)

    def start(self) -> None:
        self.check()
        self._thread = threading.Thread(target=self._run, name="vnpu-dp-kubelet", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._poll):
            try:
                self.check()
            except Exception:  # keep watching: the next round starts over
                log.exception("kubelet_link_failed")
                self._stop.wait(RETRY_SECONDS)

    def stop(self) -> None:
        """Stop watching and serving; our socket is removed."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._shutdown(grace=1.0)
        if identity(self.socket) == self._served:
            self.socket.unlink(missing_ok=True)
