"""A minimal device plugin for the simulated kubelet's tests (``conftest.make_plugin`` builds them).

A real gRPC server on a unix socket built from vnpu-kubelet-api's stubs: it registers with a
kubelet socket, streams its device list, and answers GetPreferredAllocation, Allocate and
PreStartContainer, recording every request so tests can check what the kubelet sent.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from vnpu_kubelet_api import constants
from vnpu_kubelet_api.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc


class Plugin(api_pb2_grpc.DevicePluginServicer):
    """A device plugin for tests; ``devices`` maps id -> healthy."""

    def __init__(
        self,
        plugin_dir: Path,
        resource: str,
        devices: dict[str, bool],
        *,
        endpoint: str = "",
        preferred: Callable[[list[str], int], list[str]] | None = None,
        pre_start: bool = False,
        allocate_error: str = "",
        pre_start_error: str = "",
        preferred_error: str = "",
        numa: dict[str, int] | None = None,
    ) -> None:
        self.plugin_dir = plugin_dir
        self.resource = resource
        self.endpoint = endpoint or resource.replace("/", "-") + ".sock"
        self.devices = dict(devices)
        self.preferred_fn = preferred
        self.pre_start = pre_start
        self.allocate_error = allocate_error
        self.pre_start_error = pre_start_error
        self.preferred_error = preferred_error
        self.numa = numa or {}
        self.requests: list[tuple[str, Any]] = []
        self.before_allocate: Callable[[], None] | None = None
        """Called at the start of every Allocate (a test can block it to hold the kubelet up)."""
        self._changed = threading.Condition()
        self._version = 0
        self._end_streams = False
        self._server: grpc.Server | None = None

    @property
    def socket(self) -> Path:
        return self.plugin_dir / self.endpoint

    # -- lifecycle --------------------------------------------------------------------

    def serve(self) -> Plugin:
        self.socket.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        api_pb2_grpc.add_DevicePluginServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server
        self._end_streams = False
        return self

    def register(self, *, version: str = constants.VERSION, resource: str | None = None) -> None:
        kubelet = self.plugin_dir / constants.KUBELET_SOCKET_NAME
        with grpc.insecure_channel(f"unix://{kubelet}") as channel:
            api_pb2_grpc.RegistrationStub(channel).Register(
                api_pb2.RegisterRequest(
                    version=version,
                    endpoint=self.endpoint,
                    resource_name=self.resource if resource is None else resource,
                    options=self.options(),
                ),
                timeout=10,
            )

    def stop(self, *, remove_socket: bool = True) -> None:
        self.end_streams()
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None
        if remove_socket:
            self.socket.unlink(missing_ok=True)

    def set_health(self, device_id: str, healthy: bool) -> None:
        with self._changed:
            self.devices[device_id] = healthy
            self._version += 1
            self._changed.notify_all()

    def end_streams(self) -> None:
        with self._changed:
            self._end_streams = True
            self._changed.notify_all()

    def calls(self, method: str) -> list[Any]:
        return [request for name, request in self.requests if name == method]

    # -- the DevicePlugin service -----------------------------------------------------

    def options(self) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions(
            pre_start_required=self.pre_start,
            get_preferred_allocation_available=self.preferred_fn is not None,
        )

    def GetDevicePluginOptions(
        self, request: api_pb2.Empty, context: grpc.ServicerContext
    ) -> api_pb2.DevicePluginOptions:
        return self.options()

    def _list(self) -> api_pb2.ListAndWatchResponse:
        devices = []
        for device_id, healthy in sorted(self.devices.items()):
            device = api_pb2.Device(
                ID=device_id, health=constants.HEALTHY if healthy else constants.UNHEALTHY
            )
            if device_id in self.numa:
                device.topology.nodes.append(api_pb2.NUMANode(ID=self.numa[device_id]))
            devices.append(device)
        return api_pb2.ListAndWatchResponse(devices=devices)

    def ListAndWatch(
        self, request: api_pb2.Empty, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.ListAndWatchResponse]:
        with self._changed:
            seen = self._version
            response = self._list()
        yield response
        while context.is_active():
            with self._changed:
                self._changed.wait_for(self._moved_on(seen), 0.1)
                if self._end_streams:
                    return
                if self._version == seen:
                    continue
                seen = self._version
                response = self._list()
            yield response

    def _moved_on(self, seen: int) -> Callable[[], bool]:
        return lambda: self._version != seen or self._end_streams

    def GetPreferredAllocation(
        self, request: api_pb2.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> api_pb2.PreferredAllocationResponse:
        self.requests.append(("GetPreferredAllocation", request))
        if self.preferred_error:
            context.abort(grpc.StatusCode.UNAVAILABLE, self.preferred_error)
        assert self.preferred_fn is not None
        responses = [
            api_pb2.ContainerPreferredAllocationResponse(
                deviceIDs=self.preferred_fn(list(r.available_deviceIDs), r.allocation_size)
            )
            for r in request.container_requests
        ]
        return api_pb2.PreferredAllocationResponse(container_responses=responses)

    def Allocate(
        self, request: api_pb2.AllocateRequest, context: grpc.ServicerContext
    ) -> api_pb2.AllocateResponse:
        if self.before_allocate is not None:
            self.before_allocate()
        self.requests.append(("Allocate", request))
        if self.allocate_error:
            context.abort(grpc.StatusCode.INTERNAL, self.allocate_error)
        responses = []
        for r in request.container_requests:
            ids = list(r.devices_ids)
            responses.append(
                api_pb2.ContainerAllocateResponse(
                    envs={"VISIBLE_DEVICES": ",".join(ids)},
                    mounts=[
                        api_pb2.Mount(
                            container_path="/opt/lib", host_path="/opt/lib", read_only=True
                        )
                    ],
                    devices=[
                        api_pb2.DeviceSpec(
                            container_path=f"/dev/{i}", host_path=f"/dev/{i}", permissions="rw"
                        )
                        for i in ids
                    ],
                    annotations={"test/devices": ",".join(ids)},
                    cdi_devices=[api_pb2.CDIDevice(name=f"example.com/dev={i}") for i in ids],
                )
            )
        return api_pb2.AllocateResponse(container_responses=responses)

    def PreStartContainer(
        self, request: api_pb2.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> api_pb2.PreStartContainerResponse:
        self.requests.append(("PreStartContainer", request))
        if self.pre_start_error:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, self.pre_start_error)
        return api_pb2.PreStartContainerResponse()
