"""The Kubernetes API as the device plugin uses it: the one module that imports the client.

``Cluster`` is the port; ``KubeCluster`` implements it with the official ``kubernetes``
client. Calls return plain dicts as the API sends them (``_preload_content=False`` and
``json.loads``: ``vnpu_core`` reads dicts, and it is much faster than the client's model
classes). The client's ``ApiException`` and urllib3's transport errors are translated
here, and only here, into ``errors.ApiError`` subclasses. ``retrying`` repeats a call the
API could not answer (5xx, 429, no connection) with bounded exponential backoff; a 409 is
the caller's to handle, since only it knows what to re-read.

Callers: ``finder`` and ``allocation`` (pods, the node lock), ``publisher`` (node
annotations), ``reconciler`` (the node's pods).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

import kubernetes
import urllib3
from kubernetes.client import exceptions as kube_exceptions

from vnpu_device_plugin import errors

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

    def patch_pod_annotations(
        self,
        namespace: str,
        name: str,
        annotations: dict[str, str | None],
        resource_version: str = "",
    ) -> Json: ...


def translate(exc: Exception, what: str) -> errors.ApiError:
    """The ``errors.ApiError`` for a client or transport failure while doing ``what``."""
    if isinstance(exc, kube_exceptions.ApiException):
        status = int(exc.status or 0)
        reason, message = str(exc.reason or ""), ""
        try:
            body = json.loads(exc.body or "{}")
            reason = str(body.get("reason") or reason)
            message = str(body.get("message") or "")
        except (ValueError, AttributeError, TypeError):
            message = str(exc.body or "")[:200]
        message = f"{what}: {message or reason}"
        if status == 404:
            return errors.NotFound(status, reason, message)
        if status == 409:
            return errors.Conflict(status, reason, message)
        if status in (400, 422):
            return errors.Invalid(status, reason, message)
        if status == 429 or status >= 500 or status == 0:
            return errors.Unavailable(status, reason, message)
        return errors.ApiError(status, reason, message)
    return errors.Unavailable(0, type(exc).__name__, f"{what}: {exc}")


def retrying(
    call: Callable[[], T],
    attempts: int,
    *,
    first_delay: float = 0.05,
    on_retry: Callable[[errors.ApiError], None] | None = None,
) -> T:
    """``call()``, repeated on ``errors.Unavailable`` up to ``attempts`` times in all.

    Waits ``first_delay`` seconds before the second try and doubles it each time (0.05,
    0.1, 0.2, 0.4 s: under a second for five tries). The last failure is raised.
    """
    delay = first_delay
    for attempt in range(attempts):
        try:
            return call()
        except errors.Unavailable as exc:
            if attempt + 1 >= attempts:
                raise
            if on_retry is not None:
                on_retry(exc)
            time.sleep(delay)
            delay *= 2
    raise AssertionError("attempts must be at least 1")


def client_for(kubeconfig: Path | None) -> kubernetes.client.ApiClient:
    """An API client from ``kubeconfig``, or from the pod's service account when None."""
    configuration = kubernetes.client.Configuration()
    if kubeconfig is None:
        _untyped(kubernetes.config.load_incluster_config)(client_configuration=configuration)
    else:
        _untyped(kubernetes.config.load_kube_config)(
            config_file=str(kubeconfig), client_configuration=configuration
        )
    return kubernetes.client.ApiClient(configuration)


class KubeCluster:
    """``Cluster`` over the official client; ``timeout`` is per call, in seconds."""

    def __init__(self, api_client: kubernetes.client.ApiClient, timeout: float = 10.0) -> None:
        self._client = api_client
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._timeout = timeout

    def close(self) -> None:
        _untyped(self._client.close)()

    def _call(self, what: str, run: Callable[[], Any]) -> Json:
        try:
            response = run()
            try:
                data = response.data
            finally:
                response.release_conn()
        except (kube_exceptions.ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise translate(exc, what) from exc
        try:
            document = json.loads(data)
        except ValueError as exc:
            raise errors.Unavailable(0, "BadResponse", f"{what}: not JSON: {exc}") from exc
        if not isinstance(document, dict):
            raise errors.Unavailable(0, "BadResponse", f"{what}: not a JSON object")
        return document

    def get_node(self, name: str) -> Json:
        return self._call(
            f"get node {name}",
            lambda: self._core.read_node(
                name, _preload_content=False, _request_timeout=self._timeout
            ),
        )

    def patch_node_annotations(
        self, name: str, annotations: dict[str, str | None], resource_version: str = ""
    ) -> Json:
        body = _annotation_patch(annotations, resource_version)
        return self._call(
            f"patch node {name}",
            lambda: self._core.patch_node(
                name,
                body,
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )

    def get_pod(self, namespace: str, name: str) -> Json:
        return self._call(
            f"get pod {namespace}/{name}",
            lambda: self._core.read_namespaced_pod(
                name, namespace, _preload_content=False, _request_timeout=self._timeout
            ),
        )

    def list_pods(self, node: str) -> list[Json]:
        listed = self._call(
            f"list pods on {node}",
            lambda: self._core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node}",
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )
        return list(listed.get("items") or [])

    def patch_pod_annotations(
        self,
        namespace: str,
        name: str,
        annotations: dict[str, str | None],
        resource_version: str = "",
    ) -> Json:
        body = _annotation_patch(annotations, resource_version)
        return self._call(
            f"patch pod {namespace}/{name}",
            lambda: self._core.patch_namespaced_pod(
                name,
                namespace,
                body,
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )


def _untyped(function: Any) -> Callable[..., Any]:
    """The client's loaders and close carry no annotations; call them as what they are."""
    return cast(Callable[..., Any], function)


def _annotation_patch(annotations: dict[str, str | None], resource_version: str) -> Json:
    """A merge patch of annotations (None deletes a key), conditional on ``resource_version``."""
    metadata: Json = {"annotations": dict(annotations)}
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {"metadata": metadata}
