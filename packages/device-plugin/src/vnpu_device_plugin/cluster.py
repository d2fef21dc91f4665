"""The Kubernetes API as the device plugin uses it: the one module that imports the client.

``Cluster`` is the port; ``KubeCluster`` implements it with the official ``kubernetes``
client. Calls return plain dicts as the API sends them (``_preload_content=False`` and
``json.loads``: ``vnpu_core`` reads dicts, and it is much faster than the client's model
classes). The client's ``ApiException`` and urllib3's transport errors are translated
here (and, for the watch's stream, in ``vnpu_service.watch``) into
``vnpu_service.kubeapi.ApiError`` subclasses; the client itself is built by
``vnpu_service.kubeapi.client``. ``watch_pods`` opens a watch of the node's pods with
``vnpu_service.watch.open_stream``: a ``watch.Stream`` of its events, one JSON object per
line, which another thread may ``close`` to end the blocked read at once. ``retrying``
repeats a call the API could not answer (5xx, 429, no connection) with bounded exponential
backoff; a 409 is the caller's to handle, since only it knows what to re-read.

Callers: ``finder`` and ``allocation`` (pods, the node lock, events about refused pods),
``publisher`` (node annotations), ``reconciler``, ``reclaim`` and ``holdings`` (the node's
pods), ``podwatch`` (the watch).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

import kubernetes

from vnpu_device_plugin import errors
from vnpu_service import kubeapi, watch

Json = dict[str, Any]
T = TypeVar("T")
MERGE_PATCH = "application/merge-patch+json"


class Cluster(Protocol):
    """What the device plugin reads and writes in the cluster."""

    def get_node(self, name: str) -> Json: ...

    def patch_node_annotations(
        self, name: str, annotations: dict[str, str | None], resource_version: str = ""
    ) -> Json: ...

    def get_pod(self, namespace: str, name: str) -> Json: ...

    def list_pods(self, node: str) -> list[Json]: ...

    def list_pods_and_revision(self, node: str) -> tuple[list[Json], str]: ...

    def watch_pods(self, node: str, revision: str, timeout: int) -> watch.Stream: ...

    def patch_pod_annotations(
        self,
        namespace: str,
        name: str,
        annotations: dict[str, str | None],
        resource_version: str = "",
    ) -> Json: ...

    def create_event(self, namespace: str, event: Json) -> None: ...


def retrying(
    call: Callable[[], T],
    attempts: int,
    *,
    first_delay: float = 0.05,
    on_retry: Callable[[kubeapi.ApiError], None] | None = None,
) -> T:
    """``call()``, repeated on ``kubeapi.Unavailable`` up to ``attempts`` times in all.

    Waits ``first_delay`` seconds before the second try and doubles it each time (0.05,
    0.1, 0.2, 0.4 s: under a second for five tries). The last failure is raised.
    """
    delay = first_delay
    for attempt in range(attempts):
        try:
            return call()
        except kubeapi.Unavailable as exc:
            if attempt + 1 >= attempts:
                raise
            if on_retry is not None:
                on_retry(exc)
            time.sleep(delay)
            delay *= 2
    raise AssertionError("attempts must be at least 1")


class KubeCluster:
    """``Cluster`` over the official client; ``timeout`` is per call, in seconds."""

    def __init__(self, api_client: kubernetes.client.ApiClient, timeout: float = 10.0) -> None:
        self._client = api_client
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._timeout = timeout

    @classmethod
    def connect(cls, kubeconfig: Path | None, timeout: float = 10.0) -> KubeCluster:
        """A client from ``kubeconfig``, or the pod's service account when None."""
        try:
            api_client = kubeapi.client(kubeconfig)
        except kubeapi.ConfigError as exc:
            raise errors.SettingsError("kubeconfig", exc.source, exc.problem) from exc
        return cls(api_client, timeout)

    def close(self) -> None:
        kubeapi.close(self._client)

    def get_node(self, name: str) -> Json:
        return kubeapi.fetch(
            lambda: self._core.read_node(
                name, _preload_content=False, _request_timeout=self._timeout
            ),
            f"get node {name}",
        )

    def patch_node_annotations(
        self, name: str, annotations: dict[str, str | None], resource_version: str = ""
    ) -> Json:
        body = _annotation_patch(annotations, resource_version)
        return kubeapi.fetch(
            lambda: self._core.patch_node(
                name,
                body,
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
            f"patch node {name}",
        )

    def get_pod(self, namespace: str, name: str) -> Json:
        return kubeapi.fetch(
            lambda: self._core.read_namespaced_pod(
                name, namespace, _preload_content=False, _request_timeout=self._timeout
            ),
            f"get pod {namespace}/{name}",
        )

    def list_pods(self, node: str) -> list[Json]:
        return self.list_pods_and_revision(node)[0]

    def list_pods_and_revision(self, node: str) -> tuple[list[Json], str]:
        """The pods bound to ``node`` and the revision of the list (to watch from)."""
        listed = kubeapi.fetch(
            lambda: self._core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node}",
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
            f"list pods on {node}",
        )
        revision = str((listed.get("metadata") or {}).get("resourceVersion") or "")
        return list(listed.get("items") or []), revision

    def watch_pods(self, node: str, revision: str, timeout: int) -> watch.Stream:
        """Changes to the pods bound to ``node`` after ``revision``, for ``timeout`` seconds."""
        return watch.open_stream(
            self._core.list_pod_for_all_namespaces,
            f"watch pods on {node}",
            revision,
            timeout,
            (self._timeout, timeout + self._timeout),
            field_selector=f"spec.nodeName={node}",
        )

    def patch_pod_annotations(
        self,
        namespace: str,
        name: str,
        annotations: dict[str, str | None],
        resource_version: str = "",
    ) -> Json:
        body = _annotation_patch(annotations, resource_version)
        return kubeapi.fetch(
            lambda: self._core.patch_namespaced_pod(
                name,
                namespace,
                body,
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
            f"patch pod {namespace}/{name}",
        )

    def create_event(self, namespace: str, event: Json) -> None:
        """Record a core/v1 Event (``event`` is its body) in ``namespace``."""
        kubeapi.fetch(
            lambda: self._core.create_namespaced_event(
                namespace, cast(Any, event), _preload_content=False, _request_timeout=self._timeout
            ),
            f"create event in {namespace}",
        )


def _annotation_patch(annotations: dict[str, str | None], resource_version: str) -> Json:
    """A merge patch of annotations (None deletes a key), conditional on ``resource_version``."""
    metadata: Json = {"annotations": dict(annotations)}
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {"metadata": metadata}
