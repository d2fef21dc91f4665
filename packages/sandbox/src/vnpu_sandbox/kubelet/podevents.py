"""The kubelet's Warning Events on pods (``kubectl describe pod`` shows them).

One Event per call, named ``<pod>.<nanoseconds in hex>`` as the kubelet's recorder names
them, from source ``kubelet`` on this node. An API without core/v1 events (404 for the
resource itself) turns recording off; any other failure is logged and the pod goes on.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from vnpu_sandbox.kubelet import apiclient, errors, podstatus

log = logging.getLogger(__name__)
Json = dict[str, Any]


class Recorder:
    """Writes Warning Events about pods through ``api`` as node ``node``'s kubelet."""

    def __init__(self, api: apiclient.KubeApi, node: str) -> None:
        self._api = api
        self._node = node
        self._supported = True

    def warning(self, pod: Json, reason: str, message: str) -> None:
        if not self._supported:
            return
        meta = pod.get("metadata") or {}
        now = podstatus.timestamp()
        event = {
            "metadata": {
                "name": f"{meta.get('name')}.{time.time_ns():x}",
                "namespace": meta.get("namespace"),
            },
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": meta.get("namespace"),
                "name": meta.get("name"),
                "uid": meta.get("uid"),
            },
            "reason": reason,
            "message": message,
            "type": "Warning",
            "source": {"component": "kubelet", "host": self._node},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": "kubelet",
            "reportingInstance": self._node,
        }
        try:
            self._api.create_event(str(meta.get("namespace")), event)
        except errors.ApiError as exc:
            if exc.not_found and exc.message.startswith("the server could not find"):
                self._supported = False
            log.info(
                "pod_event_not_recorded pod=%s/%s error=%s",
                meta.get("namespace"),
                meta.get("name"),
                exc,
            )
