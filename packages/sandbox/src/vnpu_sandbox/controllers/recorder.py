"""Events the controllers record about what they did, as ``kubectl describe`` shows them.

The replicaset controller records SuccessfulCreate, SuccessfulDelete and FailedCreate on
its ReplicaSets, the deployment controller ScalingReplicaSet on its Deployments, with the
real controllers' reasons, wording and source component. An event that cannot be written
is logged at debug level and dropped: events are a courtesy, never a reason to fail a sync.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from vnpu_sandbox.controllers import cluster, errors, ownership

log = logging.getLogger(__name__)

Json = dict[str, Any]


class Recorder:
    """Writes core v1 Events on behalf of one component (``replicaset-controller``...)."""

    def __init__(
        self, api: cluster.Cluster, component: str, clock: Callable[[], float] = time.time
    ) -> None:
        self._api = api
        self.component = component
        self._clock = clock

    def record(
        self, obj: Json, kind: cluster.Kind, reason: str, message: str, *, warning: bool = False
    ) -> None:
        meta = ownership.metadata(obj)
        namespace = str(meta.get("namespace") or "default")
        now = self._clock()
        stamp = ownership.rfc3339(now)
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta.get('name')}.{time.time_ns():x}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": kind.api_version,
                "kind": kind.kind,
                "namespace": namespace,
                "name": meta.get("name"),
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "type": "Warning" if warning else "Normal",
            "source": {"component": self.component},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "reportingComponent": self.component,
            "reportingInstance": "",
        }
        try:
            self._api.create(cluster.EVENTS, namespace, event)
        except errors.ApiError as exc:
            log.debug(
                "event_not_recorded reason=%s object=%s error=%s", reason, meta.get("name"), exc
            )
