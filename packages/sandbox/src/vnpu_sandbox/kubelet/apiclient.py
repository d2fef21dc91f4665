"""The simulated kubelet's calls to the Kubernetes API, through the official ``kubernetes`` client.

``nodestatus``, ``lease``, ``podworker``, ``dramanager`` and ``statusmanager`` use :class:`KubeApi`; ``kubelet``
builds it from a kubeconfig file (:func:`client_from_kubeconfig`: in the sandbox each kubelet
has a client certificate for ``system:node:<node>``, so the Node authorizer and NodeRestriction
judge its requests) or, for an API server that asks for no credentials, a URL
(:func:`client_for_host`). Objects go in and out as plain JSON dicts (``_preload_content=False``),
exactly as the server sends them, so the rest of the kubelet reads ``metadata.creationTimestamp``
rather than client models. Patches are JSON merge patches. Every failure becomes
``errors.ApiError`` with the HTTP status (0 when the server did not answer) and the server's message.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

import urllib3
from kubernetes import client, config
from kubernetes.client import exceptions

from vnpu_sandbox.kubelet import errors

log = logging.getLogger(__name__)

Json = dict[str, Any]
T = TypeVar("T")

MERGE_PATCH = "application/merge-patch+json"


def client_from_kubeconfig(path: str, context: str | None = None) -> client.ApiClient:
    """An API client for the cluster of a kubeconfig file (its current context by default)."""
    try:
        api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=path, context=context, persist_config=False
        )
    except (config.ConfigException, OSError, ValueError) as exc:
        raise errors.ApiError("load", f"kubeconfig {path}", 0, str(exc)) from exc
    return api


def close_client(api: client.ApiClient) -> None:
    """Release the client's connection pool (the client's own ``close`` carries no type hints)."""
    api.close()  # type: ignore[no-untyped-call]


def status_message(exc: exceptions.ApiException) -> str:
    """The server's message from an ApiException (its Status body), else the HTTP reason."""
    body: object = exc.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    if isinstance(body, str) and body:
        try:
            status = json.loads(body)
        except ValueError:
            return body[:300]
        if isinstance(status, dict) and status.get("message"):
            return str(status["message"])
        return body[:300]
    return str(exc.reason or "")


def _call(verb: str, target: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except exceptions.ApiException as exc:
        raise errors.ApiError(verb, target, int(exc.status or 0), status_message(exc)) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise errors.ApiError(verb, target, 0, str(exc)) from exc


def _json(response: object) -> Json:
    raw = cast(urllib3.BaseHTTPResponse, response)
    try:
        document = json.loads(raw.data)
    finally:
        raw.release_conn()
    if not isinstance(document, dict):
        raise errors.ApiError(
            "decode", "response", 200, f"expected a JSON object, got {document!r:.80}"
        )
    return document


class PodWatch:
    """One open watch on pods: iterate :meth:`events`; :meth:`close` ends it from any thread."""

    def __init__(self, response: urllib3.BaseHTTPResponse) -> None:
        self._response = response

    def events(self) -> Iterator[tuple[str, Json]]:
        """(type, object) pairs; ``ERROR`` events raise ``ApiError`` (410 when expired)."""
        buffer = bytearray()
        try:
            for segment in self._response.stream(amt=None, decode_content=False):
                buffer.extend(segment)
                while (newline := buffer.find(b"\n")) != -1:
                    line, buffer = bytes(buffer[:newline]), buffer[newline + 1 :]
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    kind, obj = str(event.get("type", "")), event.get("object") or {}
                    if kind == "ERROR":
                        raise errors.ApiError(
                            "watch", "pods", int(obj.get("code") or 0), str(obj.get("message", ""))
                        )
                    yield kind, obj
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise errors.ApiError("watch", "pods", 0, str(exc)) from exc

    def close(self) -> None:
        """End the stream; closing one that has already ended or been closed is not an error.

        urllib3 raises ValueError when the stream is shut down twice and RuntimeError once its
        connection has been released.
        """
        try:
            self._response.shutdown()
        except (
            AttributeError,
            OSError,
            ValueError,
            RuntimeError,
            urllib3.exceptions.HTTPError,
        ) as exc:
            log.debug("watch_shutdown_failed error=%s", exc)
        self._response.release_conn()


class KubeApi:
    """The handful of API calls a kubelet makes, with JSON dicts in and out."""

    def __init__(self, api_client: client.ApiClient, request_timeout: float = 10.0) -> None:
        self.api_client = api_client
        self._core = client.CoreV1Api(api_client)
        self._leases = client.CoordinationV1Api(api_client)
        self._resource = client.ResourceV1Api(api_client)
        self._timeout = request_timeout

    def get_node(self, name: str) -> Json | None:
        try:
            return _call(
                "get",
                f"node {name}",
                lambda: _json(
                    self._core.read_node(
                        name, _preload_content=False, _request_timeout=self._timeout
                    )
                ),
            )
        except errors.ApiError as exc:
            if exc.not_found:
                return None
            raise

    def create_node(self, node: Json) -> Json:
        body = client.V1Node.from_dict(node)
        name = str(node["metadata"]["name"])
        if body is None:
            raise errors.ApiError("create", f"node {name}", 0, "empty node body")
        return _call(
            "create",
            f"node {name}",
            lambda: _json(
                self._core.create_node(body, _preload_content=False, _request_timeout=self._timeout)
            ),
        )

    def patch_node(self, name: str, patch: Json, *, status: bool = False) -> Json:
        method = self._core.patch_node_status if status else self._core.patch_node
        return _call(
            "patch",
            f"node {name}{'/status' if status else ''}",
            lambda: _json(
                method(
                    name,
                    patch,
                    _content_type=MERGE_PATCH,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                )
            ),
        )

    def list_pods(self, node: str) -> tuple[list[Json], str]:
        """Pods bound to ``node`` (all namespaces) and the list's resourceVersion."""
        document = _call(
            "list",
            "pods",
            lambda: _json(
                self._core.list_pod_for_all_namespaces(
                    field_selector=f"spec.nodeName={node}",
                    _preload_content=False,
                    _request_timeout=self._timeout,
                )
            ),
        )
        items = [item for item in document.get("items") or [] if isinstance(item, dict)]
        version = str((document.get("metadata") or {}).get("resourceVersion", ""))
        return items, version

    def watch_pods(self, node: str, resource_version: str, timeout_seconds: int = 300) -> PodWatch:
        response = _call(
            "watch",
            "pods",
            lambda: self._core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node}",
                watch=True,
                resource_version=resource_version or None,
                timeout_seconds=timeout_seconds,
                allow_watch_bookmarks=True,
                _preload_content=False,
                _request_timeout=(self._timeout, timeout_seconds + self._timeout),
            ),
        )
        return PodWatch(cast(urllib3.BaseHTTPResponse, response))

    def patch_pod_status(self, namespace: str, name: str, status: Json, uid: str) -> Json:
        """Merge-patch ``pods/status``; the patch carries ``uid``, so kube-apiserver answers 409
        when the name now belongs to another pod (the kubelet's patches do the same)."""
        return _call(
            "patch",
            f"pod {namespace}/{name}/status",
            lambda: _json(
                self._core.patch_namespaced_pod_status(
                    name,
                    namespace,
                    {"metadata": {"uid": uid}, "status": status},
                    _content_type=MERGE_PATCH,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                )
            ),
        )

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """The kubelet's final delete: grace period 0, only if the pod still has ``uid``."""
        options = client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid)
        )
        _call(
            "delete",
            f"pod {namespace}/{name}",
            lambda: _json(
                self._core.delete_namespaced_pod(
                    name,
                    namespace,
                    grace_period_seconds=0,
                    body=options,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                )
            ),
        )

    def get_resource_claim(self, namespace: str, name: str) -> Json:
        """A ResourceClaim (resource.k8s.io/v1), as the kubelet's DRA manager reads it; the Node
        authorizer lets a kubelet read the claims of the pods bound to its node."""
        return _call(
            "get",
            f"resourceclaim {namespace}/{name}",
            lambda: _json(
                self._resource.read_namespaced_resource_claim(
                    name, namespace, _preload_content=False, _request_timeout=self._timeout
                )
            ),
        )

    def delete_resource_slices(self, node: str, driver: str = "") -> None:
        """Delete the node's ResourceSlices (of ``driver`` only, when named), as the kubelet's
        DRA plugin manager wipes them; the Node authorizer lets a node delete its own."""
        selector = f"spec.nodeName={node}" + (f",spec.driver={driver}" if driver else "")
        _call(
            "delete",
            f"resourceslices {selector}",
            lambda: _json(
                self._resource.delete_collection_resource_slice(
                    field_selector=selector, _preload_content=False, _request_timeout=self._timeout
                )
            ),
        )

    def get_lease(self, namespace: str, name: str) -> Json | None:
        try:
            return _call(
                "get",
                f"lease {namespace}/{name}",
                lambda: _json(
                    self._leases.read_namespaced_lease(
                        name, namespace, _preload_content=False, _request_timeout=self._timeout
                    )
                ),
            )
        except errors.ApiError as exc:
            if exc.not_found:
                return None
            raise

    def put_lease(self, namespace: str, lease: Json, *, create: bool) -> Json:
        """Create the Lease, or replace it (``metadata.resourceVersion`` guards the update)."""
        name = str(lease["metadata"]["name"])
        body = client.V1Lease.from_dict(lease)
        if body is None:
            raise errors.ApiError("create", f"lease {namespace}/{name}", 0, "empty lease body")
        if create:
            return _call(
                "create",
                f"lease {namespace}/{name}",
                lambda: _json(
                    self._leases.create_namespaced_lease(
                        namespace, body, _preload_content=False, _request_timeout=self._timeout
                    )
                ),
            )
        return _call(
            "update",
            f"lease {namespace}/{name}",
            lambda: _json(
                self._leases.replace_namespaced_lease(
                    name, namespace, body, _preload_content=False, _request_timeout=self._timeout
                )
            ),
        )

    def create_event(self, namespace: str, event: Json) -> None:
        body = client.CoreV1Event.from_dict(event)
        if body is None:
            raise errors.ApiError("create", f"event in {namespace}", 0, "empty event body")
        _call(
            "create",
            f"event in {namespace}",
            lambda: _json(
                self._core.create_namespaced_event(
                    namespace, body, _preload_content=False, _request_timeout=self._timeout
                )
            ),
        )
