"""The kubelet's connection to one registered device plugin.

``registration`` opens an :class:`Endpoint` when a plugin registers; ``devicemanager`` owns it
afterwards and makes the admission-time calls through it. An endpoint keeps the plugin's
ListAndWatch stream open on its own thread and reports every device list, and it watches the
plugin's socket file: when the stream ends, or the socket disappears or is replaced, the
endpoint stops and reports its end once. Call failures become ``PluginCallError`` carrying
grpc-go's rendering of the status, because the kubelet quotes that text in pod messages.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from vnpu_kubelet_api import constants
from vnpu_kubelet_api.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from vnpu_sandbox.kubelet import errors

log = logging.getLogger(__name__)

CALL_TIMEOUT_SECONDS = 30.0
"""Deadline of admission-time calls (the kubelet's PreStartContainer deadline; it sets none
on Allocate and GetPreferredAllocation, a simulator should not hang forever)."""


@dataclass(frozen=True)
class Device:
    """One device as the plugin last listed it."""

    id: str
    healthy: bool
    numa_nodes: tuple[int, ...] = ()

    @classmethod
    def from_proto(cls, device: api_pb2.Device) -> Device:
        nodes = tuple(node.ID for node in device.topology.nodes)
        return cls(device.ID, device.health == constants.HEALTHY, nodes)


def socket_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the unix socket at ``path``; None when there is no socket there."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISSOCK(info.st_mode):
        return None
    return info.st_dev, info.st_ino


class Endpoint:
    """A connected plugin: options, the ListAndWatch stream, and the admission calls."""

    def __init__(
        self,
        resource: str,
        socket_path: Path,
        identity: tuple[int, int],
        channel: grpc.Channel,
        options: api_pb2.DevicePluginOptions,
    ) -> None:
        self.resource = resource
        self.socket_path = socket_path
        self.options = options
        self._identity = identity
        self._channel = channel
        self._stub = api_pb2_grpc.DevicePluginStub(channel)
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._call: grpc.RpcContext | None = None
        self._threads: list[threading.Thread] = []

    @classmethod
    def connect(cls, resource: str, socket_path: Path, timeout: float = 10.0) -> Endpoint:
        """Dial the plugin and read its options, as the kubelet does during Register."""
        identity = socket_identity(socket_path)
        if identity is None:
            raise errors.RegistrationError(
                "endpoint",
                socket_path.name,
                f"failed to dial device plugin: no unix socket at {socket_path}",
            )
        channel = grpc.insecure_channel(f"unix://{socket_path}")
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout)
            options = api_pb2_grpc.DevicePluginStub(channel).GetDevicePluginOptions(
                api_pb2.Empty(), timeout=timeout
            )
        except grpc.FutureTimeoutError as exc:
            channel.close()
            raise errors.RegistrationError(
                "endpoint",
                socket_path.name,
                "failed to dial device plugin: context deadline exceeded",
            ) from exc
        except grpc.RpcError as exc:
            channel.close()
            text = errors.PluginCallError.from_rpc(resource, "GetDevicePluginOptions", exc)
            raise errors.RegistrationError(
                "endpoint",
                socket_path.name,
                f"failed to get device plugin options: {text.rpc_text}",
            ) from exc
        return cls(resource, socket_path, identity, channel, options)

    # -- the stream ------------------------------------------------------------------

    def start(
        self,
        on_list: Callable[[Endpoint, list[Device]], None],
        on_end: Callable[[Endpoint], None],
        poll_seconds: float = 0.1,
    ) -> None:
        """Open ListAndWatch; ``on_list`` gets every full list, ``on_end`` is called once at the end."""
        stream = threading.Thread(
            target=self._stream,
            args=(on_list, on_end),
            name=f"listandwatch-{self.resource}",
            daemon=True,
        )
        watch = threading.Thread(
            target=self._watch_socket,
            args=(poll_seconds,),
            name=f"socketwatch-{self.resource}",
            daemon=True,
        )
        self._threads = [stream, watch]
        stream.start()
        watch.start()

    def _stream(
        self, on_list: Callable[[Endpoint, list[Device]], None], on_end: Callable[[Endpoint], None]
    ) -> None:
        try:
            call = self._stub.ListAndWatch(api_pb2.Empty())
            with self._lock:
                self._call = call
            if self._stopped.is_set():
                call.cancel()
            for response in call:
                on_list(self, [Device.from_proto(d) for d in response.devices])
            log.info(
                "list_and_watch_closed resource=%s endpoint=%s", self.resource, self.socket_path
            )
        except grpc.RpcError as exc:
            if not self._stopped.is_set():
                ended = errors.PluginCallError.from_rpc(self.resource, "ListAndWatch", exc)
                log.info("list_and_watch_ended resource=%s error=%s", self.resource, ended.rpc_text)
        except Exception:
            log.exception("list_and_watch_failed resource=%s", self.resource)
        finally:
            self.stop()
            try:
                on_end(self)
            except Exception:
                log.exception("endpoint_end_handler_failed resource=%s", self.resource)

    def _watch_socket(self, poll_seconds: float) -> None:
        while not self._stopped.wait(poll_seconds):
            if socket_identity(self.socket_path) != self._identity:
                log.info(
                    "plugin_socket_gone resource=%s endpoint=%s", self.resource, self.socket_path
                )
                self.stop()
                return

    def stop(self) -> None:
        """Cancel the stream and close the channel; safe to call more than once, from any thread."""
        self._stopped.set()
        with self._lock:
            call = self._call
        if call is not None:
            call.cancel()
        self._channel.close()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def join(self, timeout: float = 2.0) -> None:
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout)

    # -- admission-time calls --------------------------------------------------------

    def _check_running(self) -> None:
        if self.stopped:
            raise errors.AdmissionError(
                self.resource, f"endpoint {self.socket_path} has been stopped"
            )

    def preferred(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        """GetPreferredAllocation for one container; the plugin's first answer, as the kubelet reads it."""
        self._check_running()
        request = api_pb2.PreferredAllocationRequest(
            container_requests=[
                api_pb2.ContainerPreferredAllocationRequest(
                    available_deviceIDs=list(available),
                    must_include_deviceIDs=list(must_include),
                    allocation_size=size,
                )
            ]
        )
        try:
            response = self._stub.GetPreferredAllocation(request, timeout=CALL_TIMEOUT_SECONDS)
        except grpc.RpcError as exc:
            raise errors.PluginCallError.from_rpc(
                self.resource,
                "GetPreferredAllocation",
                exc,
                wrap="device plugin GetPreferredAllocation rpc failed with err: {}",
            ) from exc
        if not response.container_responses:
            return []
        return list(response.container_responses[0].deviceIDs)

    def allocate(self, device_ids: Sequence[str]) -> api_pb2.ContainerAllocateResponse:
        """Allocate for one container (one ContainerAllocateRequest), as the kubelet calls it."""
        self._check_running()
        request = api_pb2.AllocateRequest(
            container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=list(device_ids))]
        )
        try:
            response = self._stub.Allocate(request, timeout=CALL_TIMEOUT_SECONDS)
        except grpc.RpcError as exc:
            raise errors.PluginCallError.from_rpc(self.resource, "Allocate", exc) from exc
        if not response.container_responses:
            raise errors.AdmissionError(
                self.resource, f"no containers return in allocation response {response}"
            )
        return response.container_responses[0]

    def pre_start(self, device_ids: Sequence[str]) -> None:
        self._check_running()
        request = api_pb2.PreStartContainerRequest(devices_ids=list(device_ids))
        try:
            self._stub.PreStartContainer(
                request, timeout=constants.PRE_START_CONTAINER_TIMEOUT_SECONDS
            )
        except grpc.RpcError as exc:
            raise errors.PluginCallError.from_rpc(
                self.resource,
                "PreStartContainer",
                exc,
                wrap="device plugin PreStartContainer rpc failed with err: {}",
            ) from exc
