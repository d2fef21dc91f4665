"""The kubelet plugin: gRPC ``DRAPlugin`` and plugin ``Registration`` on unix sockets.

``Plugin.start`` serves ``DRAPlugin`` (NodePrepareResources, NodeUnprepareResources) on the
driver's endpoint, ``<kubelet dir>/plugins/npu.vnpu.io/dra.sock``, and then the plugin
registration service on ``<kubelet dir>/plugins_registry/npu.vnpu.io-reg.sock``: the kubelet
watches that directory, dials the new socket, asks ``GetInfo`` (type ``DRAPlugin``, name
``npu.vnpu.io``, the endpoint, ``v1.DRAPlugin``) and reports its verdict through
``NotifyRegistrationStatus``, which is logged and, when it registered the driver, calls
``on_registered`` (``__main__`` publishes the slices again: a kubelet deletes the node's slices
when it starts and when it lost the driver). ``stop`` removes both sockets, so the kubelet
unregisters the driver.

Each claim of a call is answered on its own (keyed by its uid): an ``errors.ClaimError``
(or ``ClaimLedgerError``) becomes that claim's ``error`` (the kubelet retries later), anything unexpected is logged
once with the claim and answered as an internal error. ``__main__`` builds it with a
``prepare.Preparer``.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc
import structlog

from vnpu_dra_driver import errors, prepare, slices
from vnpu_kubelet_api import constants
from vnpu_kubelet_api.dra.v1 import api_pb2 as dra
from vnpu_kubelet_api.dra.v1 import api_pb2_grpc as dra_grpc
from vnpu_kubelet_api.pluginregistration.v1 import api_pb2 as reg
from vnpu_kubelet_api.pluginregistration.v1 import api_pb2_grpc as reg_grpc

log = structlog.get_logger(__name__)
ENDPOINT = "dra.sock"


def endpoint(kubelet_dir: Path, driver: str = slices.DRIVER) -> Path:
    return kubelet_dir / "plugins" / driver / ENDPOINT


def registration(kubelet_dir: Path, driver: str = slices.DRIVER) -> Path:
    return kubelet_dir / "plugins_registry" / f"{driver}-reg.sock"


def _ref(claim: dra.Claim) -> prepare.ClaimRef:
    return prepare.ClaimRef(claim.namespace, claim.name, claim.uid)


class DraService(dra_grpc.DRAPluginServicer):
    """``DRAPlugin`` over a ``prepare.Preparer``."""

    def __init__(self, preparer: prepare.Preparer) -> None:
        self._preparer = preparer

    def NodePrepareResources(
        self, request: dra.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra.NodePrepareResourcesResponse:
        response = dra.NodePrepareResourcesResponse()
        for claim in request.claims:
            answer = response.claims[claim.uid]
            try:
                for device in self._preparer.prepare(_ref(claim)):
                    answer.devices.append(
                        dra.Device(
                            request_names=[device.request],
                            pool_name=device.pool,
                            device_name=device.device,
                            cdi_device_ids=list(device.cdi_ids),
                            share_id=device.share_id,
                        )
                    )
            except errors.DraDriverError as exc:
                log.warning("claim_prepare_failed", claim=_ref(claim).who, error=str(exc))
                del answer.devices[:]
                answer.error = str(exc)
            except Exception as exc:
                log.exception("claim_prepare_internal_error", claim=_ref(claim).who)
                del answer.devices[:]
                answer.error = f"claim {_ref(claim).who}: internal error: {exc}"
        return response

    def NodeUnprepareResources(
        self, request: dra.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra.NodeUnprepareResourcesResponse:
        response = dra.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            answer = response.claims[claim.uid]
            try:
                self._preparer.unprepare(_ref(claim))
            except errors.DraDriverError as exc:
                log.warning("claim_unprepare_failed", claim=_ref(claim).who, error=str(exc))
                answer.error = str(exc)
            except Exception as exc:
                log.exception("claim_unprepare_internal_error", claim=_ref(claim).who)
                answer.error = f"claim {_ref(claim).who}: internal error: {exc}"
        return response


class RegistrationService(reg_grpc.RegistrationServicer):
    """Who the plugin is, for the kubelet's plugin watcher."""

    def __init__(
        self, name: str, endpoint_path: Path, on_registered: Callable[[], None] | None = None
    ) -> None:
        self._name = name
        self._endpoint = endpoint_path
        self._on_registered = on_registered
        self.statuses: list[reg.RegistrationStatus] = []

    def GetInfo(self, request: reg.InfoRequest, context: grpc.ServicerContext) -> reg.PluginInfo:
        return reg.PluginInfo(
            type=constants.DRA_PLUGIN_TYPE,
            name=self._name,
            endpoint=str(self._endpoint),
            supported_versions=[constants.DRA_PLUGIN_SERVICE_V1],
        )

    def NotifyRegistrationStatus(
        self, request: reg.RegistrationStatus, context: grpc.ServicerContext
    ) -> reg.RegistrationStatusResponse:
        self.statuses.append(request)
        if request.plugin_registered:
            log.info("plugin_registered", driver=self._name)
            if self._on_registered is not None:
                self._on_registered()
        else:
            log.error("plugin_registration_refused", driver=self._name, error=request.error)
        return reg.RegistrationStatusResponse()


class Plugin:
    """The two servers of driver ``driver`` under ``kubelet_dir``."""

    def __init__(
        self,
        preparer: prepare.Preparer,
        kubelet_dir: Path,
        driver: str = slices.DRIVER,
        on_registered: Callable[[], None] | None = None,
    ) -> None:
        self.endpoint = endpoint(kubelet_dir, driver)
        self.registration = registration(kubelet_dir, driver)
        self._dra = DraService(preparer)
        self.registrar = RegistrationService(driver, self.endpoint, on_registered)
        self._servers: list[grpc.Server] = []

    def start(self) -> Plugin:
        """Serve the endpoint, then register (the kubelet may dial the endpoint at once)."""
        self._servers.append(self._serve(self.endpoint, registration=False))
        self._servers.append(self._serve(self.registration, registration=True))
        log.info("plugin_serving", endpoint=str(self.endpoint), registration=str(self.registration))
        return self

    def _serve(self, path: Path, *, registration: bool) -> grpc.Server:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        if registration:
            reg_grpc.add_RegistrationServicer_to_server(self.registrar, server)
        else:
            dra_grpc.add_DRAPluginServicer_to_server(self._dra, server)
        server.add_insecure_port(f"unix://{path}")
        server.start()
        return server

    def stop(self) -> None:
        """Stop serving and remove the sockets (registration first: the kubelet lets go)."""
        self.registration.unlink(missing_ok=True)
        for server in reversed(self._servers):
            server.stop(grace=1.0).wait()
        self._servers = []
        self.endpoint.unlink(missing_ok=True)
