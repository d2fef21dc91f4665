"""The kubelet's PodResources view: which pods still hold devices of our resource on this node.

A pod deleted from the API (``--force --grace-period=0``) may still have running
containers; kubelet keeps it in PodResources until they are gone. The ``reconciler`` asks
here before it treats a vNPU owner as gone, so it never destroys a vNPU a live container
may use. ``live_pods`` answers None when the socket is missing or does not answer, and
the reconciler then relies on the API and the driver's in-use flag alone.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import structlog

from vnpu_kubelet_api.podresources.v1 import api_pb2, api_pb2_grpc

log = structlog.get_logger(__name__)
TIMEOUT = 2.0


def live_pods(socket: Path) -> set[tuple[str, str]] | None:
    """(namespace, name) of every pod kubelet lists as active; None when it cannot say.

    Every active pod counts, with or without devices in its regular containers: PodResources
    does not list run-to-completion init containers, which may own a vNPU too.
    """
    if not socket.exists():
        return None
    try:
        with grpc.insecure_channel(f"unix://{socket}") as channel:
            listed = api_pb2_grpc.PodResourcesListerStub(channel).List(
                api_pb2.ListPodResourcesRequest(), timeout=TIMEOUT
            )
    except grpc.RpcError as exc:
        log.warning("pod_resources_unavailable", socket=str(socket), error=str(exc.code()))
        return None
    return {(pod.namespace, pod.name) for pod in listed.pod_resources}
