"""The kubelet's Registration service, served on ``<device plugin dir>/kubelet.sock``.

``kubelet`` starts a :class:`RegistrationServer` at start-up and a new one after a simulated
restart. On ``Register`` it checks the request as the kubelet does - supported version, an
extended resource name - then dials the plugin's socket ``<dir>/<endpoint>``, reads its
options and hands the connected endpoint to the device manager, which opens ListAndWatch.
Only then does ``Register`` answer, so a plugin whose Register succeeded is connected.

A refused registration answers with status ``UNKNOWN`` and the kubelet's message, because the
kubelet returns plain Go errors there; plugins should treat any error as "retry later".
"""

from __future__ import annotations

import json
import logging
import os
import stat
from concurrent import futures
from pathlib import Path

import grpc

from vnpu_kubelet_api import constants
from vnpu_kubelet_api.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from vnpu_sandbox.kubelet import devicemanager, errors, pluginclient, resourcename

log = logging.getLogger(__name__)


def endpoint_path(plugin_dir: Path, endpoint: str) -> Path:
    """The plugin socket for ``endpoint``; ``RegistrationError`` when it leaves the directory."""
    if not endpoint:
        raise errors.RegistrationError("endpoint", endpoint, "the endpoint is empty")
    path = Path(os.path.normpath(plugin_dir / endpoint))
    if endpoint.startswith("/") or plugin_dir not in path.parents:
        raise errors.RegistrationError(
            "endpoint",
            endpoint,
            f"the endpoint {json.dumps(endpoint)} must be a socket file name in {plugin_dir}",
        )
    return path


def remove_sockets(plugin_dir: Path) -> list[Path]:
    """Delete every unix socket in the directory, as the kubelet does when its plugin server starts.

    Other files (the checkpoint) and subdirectories stay. Returns the removed paths.
    """
    removed = []
    for path in sorted(plugin_dir.iterdir()):
        try:
            if stat.S_ISSOCK(path.lstat().st_mode):
                path.unlink()
                removed.append(path)
        except FileNotFoundError:
            continue
    return removed


def check_request(request: api_pb2.RegisterRequest) -> None:
    """Version and resource name checks, with the kubelet's messages."""
    if request.version not in constants.SUPPORTED_VERSIONS:
        supported = json.dumps(list(constants.SUPPORTED_VERSIONS))
        raise errors.RegistrationError(
            "version",
            request.version,
            f"requested API version {json.dumps(request.version)} is not supported by kubelet. "
            f"Supported versions are {supported}",
        )
    problem = resourcename.extended_resource_problem(request.resource_name)
    if problem is not None:
        raise errors.RegistrationError(
            "resource_name",
            request.resource_name,
            f"the ResourceName {json.dumps(request.resource_name)} is invalid: {problem}",
        )


class _Servicer(api_pb2_grpc.RegistrationServicer):
    def __init__(self, server: RegistrationServer) -> None:
        self._server = server

    def Register(
        self, request: api_pb2.RegisterRequest, context: grpc.ServicerContext
    ) -> api_pb2.Empty:
        log.info(
            "register_request resource=%s endpoint=%s version=%s",
            request.resource_name,
            request.endpoint,
            request.version,
        )
        try:
            self._server.register(request)
        except errors.RegistrationError as exc:
            log.info(
                "register_refused resource=%s field=%s value=%r error=%s",
                request.resource_name,
                exc.field,
                exc.value,
                exc,
            )
            context.abort(grpc.StatusCode.UNKNOWN, str(exc))
        return api_pb2.Empty()


class RegistrationServer:
    """A gRPC server for Registration on ``kubelet.sock`` in the device plugin directory."""

    def __init__(
        self, plugin_dir: Path, devices: devicemanager.DeviceManager, dial_timeout: float = 10.0
    ) -> None:
        self.plugin_dir = plugin_dir
        self.socket_path = plugin_dir / constants.KUBELET_SOCKET_NAME
        self._devices = devices
        self._dial_timeout = dial_timeout
        self._server: grpc.Server | None = None

    def register(self, request: api_pb2.RegisterRequest) -> None:
        check_request(request)
        socket = endpoint_path(self.plugin_dir, request.endpoint)
        endpoint = pluginclient.Endpoint.connect(request.resource_name, socket, self._dial_timeout)
        self._devices.plugin_connected(endpoint)

    def start(self) -> None:
        self.socket_path.unlink(missing_ok=True)
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="registration")
        )
        api_pb2_grpc.add_RegistrationServicer_to_server(_Servicer(self), server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server
        log.info("registration_serving socket=%s", self.socket_path)

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop(grace=None).wait()
        self.socket_path.unlink(missing_ok=True)
