"""The pods bound to this node, from the Kubernetes API: the one module that imports the client.

``sampler`` calls ``Source.list`` on the ``pods`` refresh interval; ``attribution`` reads
the pods' vnpu annotations (``hami.io/<CW>-devices-allocated``, ``huawei.com/<CW>``) and
container names. Pods come back as the plain JSON the API sends (``_preload_content=False``),
which is what ``vnpu_core.ledger`` reads. One LIST with ``fieldSelector=spec.nodeName=<node>``
per refresh: a node holds tens of pods, so a watch would save little and add a stream to
keep alive. The client's exceptions and transport failures become
``vnpu_service.kubeapi.ApiError`` subclasses here; the client is built by
``vnpu_service.kubeapi.client``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, cast

import kubernetes

from vnpu_exporter import errors
from vnpu_service import kubeapi

Json = dict[str, Any]


class Source(Protocol):
    """Where the pods bound to a node come from."""

    def list(self, node: str) -> list[Json]: ...

    def close(self) -> None: ...


class KubePods:
    """``Source`` over the official client; each LIST waits at most ``timeout`` seconds."""

    def __init__(self, api_client: kubernetes.client.ApiClient, timeout: float = 10.0) -> None:
        self._client = api_client
        self._core = kubernetes.client.CoreV1Api(api_client)
        self.timeout = timeout

    @classmethod
    def connect(cls, kubeconfig: Path | None, timeout: float = 10.0) -> KubePods:
        """A client from ``kubeconfig``, or from the in-cluster service account when None."""
        try:
            api_client = kubeapi.client(kubeconfig)
        except kubeapi.ConfigError as exc:
            raise errors.SettingsError("kubeconfig", exc.source, exc.problem) from exc
        return cls(api_client, timeout)

    def list(self, node: str) -> list[Json]:
        what = f"list pods on node {node}"
        listed = kubeapi.fetch(
            lambda: self._core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node}",
                _preload_content=False,
                _request_timeout=self.timeout,
            ),
            what,
        )
        items = listed.get("items")
        if not isinstance(items, list):
            raise kubeapi.Unavailable(0, "BadResponse", f"{what}: the answer has no items list")
        return [cast(Json, item) for item in items if isinstance(item, dict)]

    def close(self) -> None:
        kubeapi.close(self._client)
