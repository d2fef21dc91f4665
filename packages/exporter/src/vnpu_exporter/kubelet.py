"""The kubelet's PodResources v1 socket: a gRPC client of ``PodResourcesLister.List``.

``sampler`` calls ``PodResourcesClient.list`` on the ``pod_resources`` refresh interval. The
client dials the unix socket once; gRPC reconnects by itself when the kubelet restarts and
re-creates the socket (mount the socket's directory, not the file, for that to work in a
pod). Every gRPC failure becomes ``errors.PodResourcesError`` naming the socket and the
status code.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from vnpu_exporter import errors, podresources
from vnpu_kubelet_api.podresources.v1 import api_pb2, api_pb2_grpc


class PodResourcesClient:
    """A PodResourcesLister client on ``socket_path``; each call waits at most ``timeout`` s."""

    def __init__(self, socket_path: Path, timeout: float = 5.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._channel = grpc.insecure_channel(f"unix://{socket_path}")
        self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)

    def list(self) -> tuple[podresources.Assignment, ...]:
        try:
            response = self._stub.List(api_pb2.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.RpcError as exc:
            # The raised object is also a grpc.Call, which carries the status code and text.
            code, details = getattr(exc, "code", None), getattr(exc, "details", None)
            name = code().name if callable(code) else "UNKNOWN"
            text = details() if callable(details) else str(exc)
            raise errors.PodResourcesError(str(self.socket_path), name, text or "") from exc
        return podresources.from_response(response)

    def close(self) -> None:
        self._channel.close()
