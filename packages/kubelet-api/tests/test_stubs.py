"""The generated stubs work end to end over a real unix socket, on the wire paths a kubelet uses."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from vnpu_kubelet_api import constants
from vnpu_kubelet_api.deviceplugin.v1beta1 import api_pb2 as dp
from vnpu_kubelet_api.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from vnpu_kubelet_api.podresources.v1 import api_pb2 as pr
from vnpu_kubelet_api.podresources.v1 import api_pb2_grpc as pr_grpc


class Plugin(dp_grpc.DevicePluginServicer):
    def GetDevicePluginOptions(
        self, request: dp.Empty, context: grpc.ServicerContext
    ) -> dp.DevicePluginOptions:
        return dp.DevicePluginOptions(get_preferred_allocation_available=True)

    def ListAndWatch(
        self, request: dp.Empty, context: grpc.ServicerContext
    ) -> Iterator[dp.ListAndWatchResponse]:
        yield dp.ListAndWatchResponse(devices=[dp.Device(ID="npu-0", health=constants.HEALTHY)])
        yield dp.ListAndWatchResponse(
            devices=[
                dp.Device(
                    ID="npu-0",
                    health=constants.UNHEALTHY,
                    topology=dp.TopologyInfo(nodes=[dp.NUMANode(ID=1)]),
                )
            ]
        )

    def GetPreferredAllocation(
        self, request: dp.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> dp.PreferredAllocationResponse:
        return dp.PreferredAllocationResponse(
            container_responses=[
                dp.ContainerPreferredAllocationResponse(
                    deviceIDs=list(r.available_deviceIDs)[-r.allocation_size :]
                )
                for r in request.container_requests
            ]
        )

    def Allocate(
        self, request: dp.AllocateRequest, context: grpc.ServicerContext
    ) -> dp.AllocateResponse:
        if not request.container_requests:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "container_requests: empty")
        return dp.AllocateResponse(
            container_responses=[
                dp.ContainerAllocateResponse(
                    envs={"ASCEND_VISIBLE_DEVICES": ",".join(r.devices_ids)},
                    mounts=[dp.Mount(container_path="/usr/local/dcmi", host_path="/opt/dcmi")],
                    devices=[dp.DeviceSpec(container_path="/dev/davinci0", permissions="rw")],
                    annotations={"a": "b"},
                    cdi_devices=[dp.CDIDevice(name="huawei.com/npu=0")],
                )
                for r in request.container_requests
            ]
        )

    def PreStartContainer(
        self, request: dp.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> dp.PreStartContainerResponse:
        return dp.PreStartContainerResponse()


class Lister(pr_grpc.PodResourcesListerServicer):
    def List(
        self, request: pr.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> pr.ListPodResourcesResponse:
        devices = pr.ContainerDevices(resource_name="huawei.com/Ascend910", device_ids=["npu-0"])
        container = pr.ContainerResources(name="main", devices=[devices])
        pod = pr.PodResources(name="p", namespace="default", containers=[container])
        return pr.ListPodResourcesResponse(pod_resources=[pod])

    def GetAllocatableResources(
        self, request: pr.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> pr.AllocatableResourcesResponse:
        return pr.AllocatableResourcesResponse(
            devices=[pr.ContainerDevices(resource_name="r.io/x", device_ids=["a", "b"])]
        )

    def Get(
        self, request: pr.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> pr.GetPodResourcesResponse:
        context.abort(grpc.StatusCode.NOT_FOUND, f"pod {request.pod_name} not found")


@pytest.fixture
def channel() -> Iterator[grpc.Channel]:
    with tempfile.TemporaryDirectory(prefix="kapi") as tmp:
        socket = str(Path(tmp) / "plugin.sock")
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        dp_grpc.add_DevicePluginServicer_to_server(Plugin(), server)
        pr_grpc.add_PodResourcesListerServicer_to_server(Lister(), server)
        server.add_insecure_port("unix://" + socket)
        server.start()
        try:
            with grpc.insecure_channel("unix://" + socket) as chan:
                yield chan
        finally:
            server.stop(grace=None)


def test_device_plugin_round_trip(channel: grpc.Channel) -> None:
    stub = dp_grpc.DevicePluginStub(channel)
    options = stub.GetDevicePluginOptions(dp.Empty(), timeout=5)
    assert options.get_preferred_allocation_available
    assert not options.pre_start_required

    lists = list(stub.ListAndWatch(dp.Empty(), timeout=5))
    assert [d.health for r in lists for d in r.devices] == ["Healthy", "Unhealthy"]
    assert lists[1].devices[0].topology.nodes[0].ID == 1

    preferred = stub.GetPreferredAllocation(
        dp.PreferredAllocationRequest(
            container_requests=[
                dp.ContainerPreferredAllocationRequest(
                    available_deviceIDs=["a", "b", "c"], allocation_size=2
                )
            ]
        ),
        timeout=5,
    )
    assert list(preferred.container_responses[0].deviceIDs) == ["b", "c"]

    response = stub.Allocate(
        dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=["a"])]),
        timeout=5,
    )
    container = response.container_responses[0]
    assert dict(container.envs) == {"ASCEND_VISIBLE_DEVICES": "a"}
    assert container.mounts[0].host_path == "/opt/dcmi"
    assert container.devices[0].permissions == "rw"
    assert container.cdi_devices[0].name == "huawei.com/npu=0"

    stub.PreStartContainer(dp.PreStartContainerRequest(devices_ids=["a"]), timeout=5)


def test_allocate_error_carries_status(channel: grpc.Channel) -> None:
    stub = dp_grpc.DevicePluginStub(channel)
    with pytest.raises(grpc.RpcError) as info:
        stub.Allocate(dp.AllocateRequest(), timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_pod_resources_round_trip(channel: grpc.Channel) -> None:
    stub = pr_grpc.PodResourcesListerStub(channel)
    listed = stub.List(pr.ListPodResourcesRequest(), timeout=5)
    assert listed.pod_resources[0].containers[0].devices[0].device_ids == ["npu-0"]
    allocatable = stub.GetAllocatableResources(pr.AllocatableResourcesRequest(), timeout=5)
    assert list(allocatable.devices[0].device_ids) == ["a", "b"]
    with pytest.raises(grpc.RpcError) as info:
        stub.Get(pr.GetPodResourcesRequest(pod_name="x", pod_namespace="default"), timeout=5)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


def test_registration_uses_the_kubelet_method_path() -> None:
    """A raw call on /v1beta1.Registration/Register reaches the generated servicer."""

    class Kubelet(dp_grpc.RegistrationServicer):
        def __init__(self) -> None:
            self.seen: list[dp.RegisterRequest] = []

        def Register(self, request: dp.RegisterRequest, context: grpc.ServicerContext) -> dp.Empty:
            self.seen.append(request)
            return dp.Empty()

    with tempfile.TemporaryDirectory(prefix="kapi") as tmp:
        socket = str(Path(tmp) / constants.KUBELET_SOCKET_NAME)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        kubelet = Kubelet()
        dp_grpc.add_RegistrationServicer_to_server(kubelet, server)
        server.add_insecure_port("unix://" + socket)
        server.start()
        try:
            with grpc.insecure_channel("unix://" + socket) as chan:
                raw = chan.unary_unary(
                    "/v1beta1.Registration/Register",
                    request_serializer=dp.RegisterRequest.SerializeToString,
                    response_deserializer=dp.Empty.FromString,
                )
                raw(
                    dp.RegisterRequest(
                        version=constants.VERSION,
                        endpoint="npu.sock",
                        resource_name="huawei.com/Ascend910",
                        options=dp.DevicePluginOptions(pre_start_required=True),
                    ),
                    timeout=5,
                )
        finally:
            server.stop(grace=None)
    assert kubelet.seen[0].endpoint == "npu.sock"
    assert kubelet.seen[0].options.pre_start_required
