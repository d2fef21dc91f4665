"""The Kubernetes API as the DRA driver uses it: the one module that imports the client.

``SliceApi`` is the port ``publisher`` writes through and ``ClaimApi`` the one ``prepare``
reads ResourceClaims through; ``KubeSlices`` implements both with the
official ``kubernetes`` client built by ``vnpu_service.kubeapi.client``. Calls send and
return plain dicts (``_preload_content=False``, read by ``kubeapi.fetch``), and every
failure arrives as a ``vnpu_service.kubeapi.ApiError`` subclass: ``Conflict`` when a
resourceVersion precondition failed, ``NotFound`` when the object is gone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, cast

import kubernetes

from vnpu_service import kubeapi

Json = dict[str, Any]


class SliceApi(Protocol):
    """What the publisher reads and writes: the node (its uid) and the driver's slices."""

    def get_node(self, name: str) -> Json: ...

    def list_slices(self, node: str, driver: str) -> list[Json]: ...

    def create_slice(self, body: Json) -> Json: ...

    def replace_slice(self, name: str, body: Json) -> Json: ...

    def delete_slice(self, name: str, resource_version: str) -> None: ...


class ClaimApi(Protocol):
    """What the kubelet plugin reads: a ResourceClaim by namespace and name."""

    def get_claim(self, namespace: str, name: str) -> Json | None: ...


class KubeSlices:
    """``SliceApi`` and ``ClaimApi`` over the official client; ``timeout`` is per call, in seconds."""

    def __init__(self, api_client: kubernetes.client.ApiClient, timeout: float = 10.0) -> None:
        self._client = api_client
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._resource = kubernetes.client.ResourceV1Api(api_client)
        self._timeout = timeout

    @classmethod
    def connect(cls, kubeconfig: Path | None, timeout: float = 10.0) -> KubeSlices:
        """A client from ``kubeconfig`` (the pod's service account when None); raises
        ``kubeapi.ConfigError`` naming the source."""
        return cls(kubeapi.client(kubeconfig), timeout)

    def close(self) -> None:
        kubeapi.close(self._client)

    def get_node(self, name: str) -> Json:
        return kubeapi.fetch(
            lambda: self._core.read_node(
                name, _preload_content=False, _request_timeout=self._timeout
            ),
            f"get node {name}",
        )

    def list_slices(self, node: str, driver: str) -> list[Json]:
        """The ResourceSlices ``driver`` published for ``node``, by field selector."""
        listed = kubeapi.fetch(
            lambda: self._resource.list_resource_slice(
                field_selector=f"spec.nodeName={node},spec.driver={driver}",
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
            f"list resourceslices of {driver} on {node}",
        )
        return list(listed.get("items") or [])

    def create_slice(self, body: Json) -> Json:
        name = body["metadata"]["name"]
        return kubeapi.fetch(
            lambda: self._resource.create_resource_slice(
                cast(Any, body), _preload_content=False, _request_timeout=self._timeout
            ),
            f"create resourceslice {name}",
        )

    def replace_slice(self, name: str, body: Json) -> Json:
        """Replace ``name`` with ``body``; its ``metadata.resourceVersion`` makes it conditional."""
        return kubeapi.fetch(
            lambda: self._resource.replace_resource_slice(
                name, cast(Any, body), _preload_content=False, _request_timeout=self._timeout
            ),
            f"replace resourceslice {name}",
        )

    def delete_slice(self, name: str, resource_version: str) -> None:
        """Delete ``name`` if it is still at ``resource_version`` (any version when empty)."""
        options: Json = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if resource_version:
            options["preconditions"] = {"resourceVersion": resource_version}
        kubeapi.fetch(
            lambda: self._resource.delete_resource_slice(
                name,
                body=cast(Any, options),
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
            f"delete resourceslice {name}",
        )

    def get_claim(self, namespace: str, name: str) -> Json | None:
        """The ResourceClaim ``namespace/name`` as stored, or None when it does not exist."""
        try:
            return kubeapi.fetch(
                lambda: self._resource.read_namespaced_resource_claim(
                    name, namespace, _preload_content=False, _request_timeout=self._timeout
                ),
                f"get resourceclaim {namespace}/{name}",
            )
        except kubeapi.NotFound:
            return None
