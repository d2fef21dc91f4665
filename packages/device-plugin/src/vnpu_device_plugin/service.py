"""The kubelet's DevicePlugin gRPC service (v1beta1): a thin layer over the plugin's parts.

* ``GetDevicePluginOptions``: GetPreferredAllocation on, PreStartContainer off.
* ``ListAndWatch``: the full device list at once and again on every health change
  (``health.Board``); the stream ends when the server stops or the board closes.
* ``GetPreferredAllocation`` and ``Allocate``: ``allocations``. Errors become gRPC
  statuses: bad input ``INVALID_ARGUMENT``, no identifiable pod ``FAILED_PRECONDITION``,
  a refused vNPU ``RESOURCE_EXHAUSTED``, the API unreachable ``UNAVAILABLE``, anything
  unexpected ``INTERNAL`` (logged once with its traceback). Each Allocate ends in one log
  line with the pod, chips, vNPUs, result and ``duration_seconds``, and is counted.
* ``PreStartContainer``: nothing to do.

``registration`` serves it on the plugin's socket.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import structlog

from vnpu_device_plugin import allocations, devices, errors, health, metrics
from vnpu_kubelet_api.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from vnpu_service import kubeapi

log = structlog.get_logger(__name__)
_WAKE_SECONDS = 0.5  # how often an idle ListAndWatch stream checks that it is still wanted


def _status(error: errors.DevicePluginError | kubeapi.ApiError) -> grpc.StatusCode:
    if isinstance(error, errors.AllocateError):
        return grpc.StatusCode[error.code]
    if isinstance(error, kubeapi.ApiError):
        return grpc.StatusCode.UNAVAILABLE
    return grpc.StatusCode.INTERNAL


def _result(error: errors.DevicePluginError | kubeapi.ApiError) -> str:
    if isinstance(error, errors.AllocateError):
        return error.result
    if isinstance(error, kubeapi.ApiError):
        return "api_error"
    return "failed"


class DevicePluginService(api_pb2_grpc.DevicePluginServicer):
    """The v1beta1 DevicePlugin service for one inventory."""

    def __init__(
        self,
        inventory: devices.Inventory,
        board: health.Board,
        served: allocations.Allocations,
        stats: metrics.Metrics,
    ) -> None:
        self._inventory = inventory
        self._board = board
        self._allocations = served
        self._stats = stats

    def GetDevicePluginOptions(
        self, request: api_pb2.Empty, context: grpc.ServicerContext
    ) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=True
        )

    def ListAndWatch(
        self, request: api_pb2.Empty, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.ListAndWatchResponse]:
        seen, healthy = self._board.snapshot()
        log.info("list_and_watch_opened", resource=self._inventory.resource_name)
        yield devices.device_list(self._inventory, healthy)
        while context.is_active() and not self._board.closed:
            version = self._board.wait(seen, _WAKE_SECONDS)
            if version == seen or self._board.closed:
                continue
            seen, healthy = self._board.snapshot()
            yield devices.device_list(self._inventory, healthy)
        log.info("list_and_watch_closed", resource=self._inventory.resource_name)

    def GetPreferredAllocation(
        self, request: api_pb2.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> api_pb2.PreferredAllocationResponse:
        try:
            return self._allocations.preferred(request)
        except Exception:
            log.exception("preferred_allocation_crashed")
            context.abort(
                grpc.StatusCode.INTERNAL, "GetPreferredAllocation failed; see the plugin log"
            )
            raise  # abort raises; this keeps type checkers aware

    def Allocate(
        self, request: api_pb2.AllocateRequest, context: grpc.ServicerContext
    ) -> api_pb2.AllocateResponse:
        start = time.perf_counter()
        ids = [list(c.devices_ids) for c in request.container_requests]
        try:
            response, served = self._allocations.allocate(request)
        except (errors.DevicePluginError, kubeapi.ApiError) as exc:
            elapsed = time.perf_counter() - start
            self._stats.allocations.labels(_result(exc)).inc()
            self._stats.allocate_duration.labels("failed").observe(elapsed)
            log.warning(
                "allocate",
                result=_result(exc),
                reason=getattr(exc, "reason", None),
                candidates=list(getattr(exc, "candidates", ())),
                devices=ids,
                error=str(exc),
                duration_seconds=elapsed,
            )
            context.abort(_status(exc), str(exc))
            raise
        except Exception as exc:
            elapsed = time.perf_counter() - start
            self._stats.allocations.labels("failed").inc()
            self._stats.allocate_duration.labels("failed").observe(elapsed)
            log.exception("allocate_crashed", devices=ids, duration_seconds=elapsed)
            context.abort(grpc.StatusCode.INTERNAL, f"Allocate failed unexpectedly: {exc}")
            raise
        elapsed = time.perf_counter() - start
        self._stats.allocations.labels("success").inc()
        self._stats.allocate_duration.labels("success").observe(elapsed)
        log.info(
            "allocate",
            result="success",
            pod=served.pod,
            containers=list(served.containers),
            chips=list(served.chips),
            vnpus=list(served.vnpus),
            pod_done=served.done,
            duration_seconds=round(elapsed, 6),
        )
        return response

    def PreStartContainer(
        self, request: api_pb2.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> api_pb2.PreStartContainerResponse:
        return api_pb2.PreStartContainerResponse()
