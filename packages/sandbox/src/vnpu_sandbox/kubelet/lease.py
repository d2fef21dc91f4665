"""The node's heartbeat Lease in ``kube-node-lease``, renewed as the kubelet renews it.

``nodestatus.NodeStatusPublisher`` calls :meth:`NodeLease.renew` after each status publish.
A real kubelet keeps a ``coordination.k8s.io/v1`` Lease named after its node, held by the
node, owned by the Node object (so it goes when the Node goes), and renews it every quarter
of its 40 s duration; kube-controller-manager's node lifecycle controller reads it to decide
whether the node is alive. The first renewal creates it; later ones replace it with a fresh
``renewTime`` under its ``resourceVersion`` (a conflict is retried on the next heartbeat).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from vnpu_sandbox.kubelet import apiclient, errors

log = logging.getLogger(__name__)

Json = dict[str, Any]

NAMESPACE = "kube-node-lease"
DURATION_SECONDS = 40


def micro_time(moment: datetime | None = None) -> str:
    """RFC 3339 in UTC with microseconds, as Kubernetes serialises ``metav1.MicroTime``."""
    return (moment or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_object(node: str, node_uid: str | None, now: str) -> Json:
    metadata: Json = {"name": node, "namespace": NAMESPACE}
    if node_uid:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}
        ]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": node,
            "leaseDurationSeconds": DURATION_SECONDS,
            "renewTime": now,
        },
    }


class NodeLease:
    """The Lease of one node."""

    def __init__(self, api: apiclient.KubeApi, node: str) -> None:
        self._api = api
        self._node = node
        self.renewed = 0
        """How many renewals went through (tests and logs read it)."""

    def renew(self, node_uid: str | None) -> None:
        """Create or renew the Lease; raises ``errors.ApiError`` when the server refuses."""
        now = micro_time()
        existing = self._api.get_lease(NAMESPACE, self._node)
        if existing is None:
            self._api.put_lease(NAMESPACE, lease_object(self._node, node_uid, now), create=True)
        else:
            renewed = lease_object(self._node, node_uid, now)
            kept = existing.get("metadata") or {}
            renewed["metadata"]["resourceVersion"] = kept.get("resourceVersion")
            if "ownerReferences" in kept:
                renewed["metadata"]["ownerReferences"] = kept["ownerReferences"]
            self._api.put_lease(NAMESPACE, renewed, create=False)
        self.renewed += 1

    def try_renew(self, node_uid: str | None) -> None:
        """``renew``, logging instead of raising: a missed renewal is retried next heartbeat."""
        try:
            self.renew(node_uid)
        except errors.ApiError as exc:
            log.warning("node_lease_renew_failed node=%s error=%s", self._node, exc)
