"""The DRA and plugin registration stubs import, round-trip and work over a real unix socket."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from vnpu_kubelet_api import constants
from vnpu_kubelet_api.dra.v1 import api_pb2 as dra
from vnpu_kubelet_api.dra.v1 import api_pb2_grpc as dra_grpc
from vnpu_kubelet_api.pluginregistration.v1 import api_pb2 as reg
from vnpu_kubelet_api.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from vnpu_kubelet_api.podresources.v1 import api_pb2 as pr


def test_prepare_response_round_trips() -> None:
    response = dra.NodePrepareResourcesResponse()
    response.claims["uid-1"].devices.append(
        dra.Device(
            request_names=["npu"],
            pool_name="node-a",
            device_name="npu-0",
            cdi_device_ids=["huawei.com/npu=npu-0"],
            share_id="s1",
        )
    )
    response.claims["uid-2"].error = "no such device"
    back = dra.NodePrepareResourcesResponse.FromString(response.SerializeToString())
    assert back == response
    assert list(back.claims["uid-1"].devices[0].cdi_device_ids) == ["huawei.com/npu=npu-0"]
    assert back.claims["uid-1"].devices[0].HasField("share_id")
    assert back.claims["uid-2"].error == "no such device"


def test_wire_numbers_are_upstream() -> None:
    """Field numbers decide wire compatibility with Go drivers and kubelets."""
    claim = dra.Claim.DESCRIPTOR.fields_by_name
    assert (claim["namespace"].number, claim["uid"].number, claim["name"].number) == (1, 2, 3)
    device = dra.Device.DESCRIPTOR.fields_by_name
    assert [device[n].number for n in ("request_names", "pool_name", "device_name")] == [1, 2, 3]
    assert (device["cdi_device_ids"].number, device["share_id"].number) == (4, 5)
    assert dra.NodePrepareResourceResponse.DESCRIPTOR.fields_by_name["error"].number == 2
    assert dra.NodeUnprepareResourceResponse.DESCRIPTOR.fields_by_name["error"].number == 1
    info = reg.PluginInfo.DESCRIPTOR.fields_by_name
    assert [info[n].number for n in ("type", "name", "endpoint", "supported_versions")] == [
        1,
        2,
        3,
        4,
    ]
    dynamic = pr.ContainerResources.DESCRIPTOR.fields_by_name["dynamic_resources"]
    assert dynamic.number == 5
    resource = pr.ClaimResource.DESCRIPTOR.fields_by_name
    assert [resource[n].number for n in ("cdi_devices", "driver_name", "pool_name")] == [1, 2, 3]
    assert (resource["device_name"].number, resource["share_id"].number) == (4, 5)
    names = pr.DynamicResource.DESCRIPTOR.fields_by_name
    assert (names["claim_name"].number, names["claim_namespace"].number) == (2, 3)


def test_pod_resources_dynamic_resource_round_trips() -> None:
    container = pr.ContainerResources(
        name="main",
        dynamic_resources=[
            pr.DynamicResource(
                claim_name="npu",
                claim_namespace="default",
                claim_resources=[
                    pr.ClaimResource(
                        cdi_devices=[pr.CDIDevice(name="huawei.com/npu=npu-0")],
                        driver_name="npu.vnpu.io",
                        pool_name="node-a",
                        device_name="npu-0",
                    )
                ],
            )
        ],
    )
    back = pr.ContainerResources.FromString(container.SerializeToString())
    assert back.dynamic_resources[0].claim_resources[0].cdi_devices[0].name == (
        "huawei.com/npu=npu-0"
    )
    assert not back.dynamic_resources[0].claim_resources[0].HasField("share_id")


class Driver(dra_grpc.DRAPluginServicer, reg_grpc.RegistrationServicer):
    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.statuses: list[reg.RegistrationStatus] = []

    def GetInfo(self, request: reg.InfoRequest, context: grpc.ServicerContext) -> reg.PluginInfo:
        return reg.PluginInfo(
            type=constants.DRA_PLUGIN_TYPE,
            name="npu.vnpu.io",
            endpoint=self.endpoint,
            supported_versions=[constants.DRA_PLUGIN_SERVICE_V1],
        )

    def NotifyRegistrationStatus(
        self, request: reg.RegistrationStatus, context: grpc.ServicerContext
    ) -> reg.RegistrationStatusResponse:
        self.statuses.append(request)
        return reg.RegistrationStatusResponse()

    def NodePrepareResources(
        self, request: dra.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra.NodePrepareResourcesResponse:
        response = dra.NodePrepareResourcesResponse()
        for claim in request.claims:
            response.claims[claim.uid].devices.append(
                dra.Device(
                    request_names=["npu"],
                    pool_name="node-a",
                    device_name=f"{claim.name}-dev",
                    cdi_device_ids=[f"huawei.com/npu={claim.name}"],
                )
            )
        return response

    def NodeUnprepareResources(
        self, request: dra.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra.NodeUnprepareResourcesResponse:
        response = dra.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            response.claims[claim.uid].error = "" if claim.namespace else "namespace: empty"
        return response


@pytest.fixture
def driver() -> Iterator[tuple[Driver, grpc.Channel]]:
    with tempfile.TemporaryDirectory(prefix="kdra") as tmp:
        socket = str(Path(tmp) / "dra.sock")
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        servicer = Driver(socket)
        dra_grpc.add_DRAPluginServicer_to_server(servicer, server)
        reg_grpc.add_RegistrationServicer_to_server(servicer, server)
        server.add_insecure_port("unix://" + socket)
        server.start()
        try:
            with grpc.insecure_channel("unix://" + socket) as chan:
                yield servicer, chan
        finally:
            server.stop(grace=None)


def test_registration_over_a_socket(driver: tuple[Driver, grpc.Channel]) -> None:
    servicer, channel = driver
    stub = reg_grpc.RegistrationStub(channel)
    info = stub.GetInfo(reg.InfoRequest(), timeout=5)
    assert (info.type, info.name) == ("DRAPlugin", "npu.vnpu.io")
    assert list(info.supported_versions) == ["v1.DRAPlugin"]
    stub.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True), timeout=5)
    assert servicer.statuses[0].plugin_registered


def test_prepare_and_unprepare_over_a_socket(driver: tuple[Driver, grpc.Channel]) -> None:
    _servicer, channel = driver
    stub = dra_grpc.DRAPluginStub(channel)
    claim = dra.Claim(namespace="default", uid="u1", name="npu-claim")
    prepared = stub.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=[claim]), timeout=5)
    assert list(prepared.claims["u1"].devices[0].cdi_device_ids) == ["huawei.com/npu=npu-claim"]
    raw = channel.unary_unary(
        "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources",
        request_serializer=dra.NodeUnprepareResourcesRequest.SerializeToString,
        response_deserializer=dra.NodeUnprepareResourcesResponse.FromString,
    )
    answer = raw(dra.NodeUnprepareResourcesRequest(claims=[claim, dra.Claim(uid="u2")]), timeout=5)
    assert answer.claims["u1"].error == ""
    assert answer.claims["u2"].error == "namespace: empty"
