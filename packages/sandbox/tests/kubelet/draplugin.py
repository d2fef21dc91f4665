"""A minimal DRA driver for the simulated kubelet's tests (``test_dra`` builds them).

Real gRPC servers on unix sockets built from vnpu-kubelet-api's stubs: ``DRAPlugin`` on the
driver's endpoint socket and the plugin ``Registration`` service on a socket it puts in the
kubelet's ``plugins_registry`` directory. Preparing a claim answers one device per claim
(``devices`` says which, per claim name) with the CDI id ``example.com/npu=<device>``, and
writes the CDI spec for it into ``cdi_dir``, as a driver does; every call is recorded.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc

from vnpu_kubelet_api import constants
from vnpu_kubelet_api.dra.v1 import api_pb2 as dra
from vnpu_kubelet_api.dra.v1 import api_pb2_grpc as dra_grpc
from vnpu_kubelet_api.pluginregistration.v1 import api_pb2 as reg
from vnpu_kubelet_api.pluginregistration.v1 import api_pb2_grpc as reg_grpc

CDI_KIND = "example.com/npu"


class DraDriver(dra_grpc.DRAPluginServicer, reg_grpc.RegistrationServicer):
    """A DRA driver named ``name``; ``devices`` maps claim name -> (pool, device)."""

    def __init__(
        self, name: str, endpoint_dir: Path, registry_dir: Path, cdi_dir: Path, pool: str
    ) -> None:
        self.name = name
        self.endpoint = endpoint_dir / f"{name}.sock"
        self.registration = registry_dir / f"{name}-reg.sock"
        self.cdi_dir = cdi_dir
        self.pool = pool
        self.devices: dict[str, str] = {}
        self.prepare_error = ""
        self.unprepare_error = ""
        self.before_prepare: Callable[[dra.NodePrepareResourcesRequest], None] | None = None
        self.prepared: list[dra.Claim] = []
        self.unprepared: list[dra.Claim] = []
        self.statuses: list[reg.RegistrationStatus] = []
        self._lock = threading.Lock()
        self._servers: list[grpc.Server] = []

    # -- lifecycle ----------------------------------------------------------------------

    def serve(self) -> DraDriver:
        """Serve DRAPlugin on the endpoint (not registered yet)."""
        self.endpoint.parent.mkdir(parents=True, exist_ok=True)
        self._servers.append(self._server(self.endpoint, registration=False))
        return self

    def register(self) -> None:
        """Put the registration socket in the registry directory: the kubelet finds it."""
        self.registration.parent.mkdir(parents=True, exist_ok=True)
        self._servers.append(self._server(self.registration, registration=True))

    def _server(self, path: Path, *, registration: bool) -> grpc.Server:
        path.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        if registration:
            reg_grpc.add_RegistrationServicer_to_server(self, server)
        else:
            dra_grpc.add_DRAPluginServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{path}")
        server.start()
        return server

    def stop(self) -> None:
        for server in self._servers:
            server.stop(grace=None).wait()
        self._servers = []
        self.registration.unlink(missing_ok=True)
        self.endpoint.unlink(missing_ok=True)

    def prepared_names(self) -> list[str]:
        with self._lock:
            return [c.name for c in self.prepared]

    def unprepared_names(self) -> list[str]:
        with self._lock:
            return [c.name for c in self.unprepared]

    # -- Registration -------------------------------------------------------------------

    def GetInfo(self, request: reg.InfoRequest, context: grpc.ServicerContext) -> reg.PluginInfo:
        return reg.PluginInfo(
            type=constants.DRA_PLUGIN_TYPE,
            name=self.name,
            endpoint=str(self.endpoint),
            supported_versions=[constants.DRA_PLUGIN_SERVICE_V1],
        )

    def NotifyRegistrationStatus(
        self, request: reg.RegistrationStatus, context: grpc.ServicerContext
    ) -> reg.RegistrationStatusResponse:
        with self._lock:
            self.statuses.append(request)
        return reg.RegistrationStatusResponse()

    # -- DRAPlugin ----------------------------------------------------------------------

    def NodePrepareResources(
        self, request: dra.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra.NodePrepareResourcesResponse:
        if self.before_prepare is not None:
            self.before_prepare(request)
        with self._lock:
            self.prepared.extend(request.claims)
        response = dra.NodePrepareResourcesResponse()
        for claim in request.claims:
            if self.prepare_error:
                response.claims[claim.uid].error = self.prepare_error
                continue
            device = self.devices.get(claim.name, "npu-0")
            self._write_cdi_spec(claim.uid, device)
            response.claims[claim.uid].devices.append(
                dra.Device(
                    request_names=["npu"],
                    pool_name=self.pool,
                    device_name=device,
                    cdi_device_ids=[f"{CDI_KIND}={device}"],
                )
            )
        return response

    def NodeUnprepareResources(
        self, request: dra.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra.NodeUnprepareResourcesResponse:
        with self._lock:
            self.unprepared.extend(request.claims)
        response = dra.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            response.claims[claim.uid].error = self.unprepare_error
            if not self.unprepare_error:
                (self.cdi_dir / f"{self.name}-{claim.uid}.json").unlink(missing_ok=True)
        return response

    def _write_cdi_spec(self, claim_uid: str, device: str) -> None:
        index = device.rsplit("-", 1)[-1]
        spec = {
            "cdiVersion": "0.6.0",
            "kind": CDI_KIND,
            "devices": [
                {
                    "name": device,
                    "containerEdits": {
                        "env": [f"ASCEND_VISIBLE_DEVICES={index}"],
                        "deviceNodes": [{"path": f"/dev/davinci{index}"}],
                    },
                }
            ],
            "containerEdits": {"env": ["ASCEND_RUNTIME_OPTIONS=NODRV"]},
        }
        self.cdi_dir.mkdir(parents=True, exist_ok=True)
        (self.cdi_dir / f"{self.name}-{claim_uid}.json").write_text(json.dumps(spec))
