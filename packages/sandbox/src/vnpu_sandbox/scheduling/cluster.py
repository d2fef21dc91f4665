"""The driver's calls to the Kubernetes API, through the official ``kubernetes`` client.

``informer`` lists and watches pods and nodes with :class:`Cluster`; ``scheduler`` binds pods
and patches their ``PodScheduled`` condition; ``events`` creates and patches Events. The client
itself is built by the simulated kubelet's ``apiclient`` helpers (kubeconfig or bare URL); this
module only makes the calls. Objects go in and out as plain JSON dicts
(``_preload_content=False``), exactly as the server sends them. Every failure becomes
``errors.ApiError`` with the HTTP status (0 when the server did not answer) and the server's
message; a watch ``ERROR`` event becomes one too (410 when the resourceVersion expired).

Pods are listed and watched without the finished ones (``status.phase!=Succeeded,
status.phase!=Failed``, the field selector kube-scheduler's pod informer uses): a pod that
finishes arrives as ``DELETED``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

import urllib3
from kubernetes import client
from kubernetes.client import exceptions

from vnpu_sandbox.kubelet import apiclient
from vnpu_sandbox.scheduling import errors, logs

log = logging.getLogger(__name__)

Json = dict[str, Any]
T = TypeVar("T")

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
UNFINISHED_PODS = "status.phase!=Succeeded,status.phase!=Failed"
LIST_PAGE = 500


def _call(verb: str, target: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except exceptions.ApiException as exc:
        raise errors.ApiError(
            verb, target, int(exc.status or 0), apiclient.status_message(exc)
        ) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise errors.ApiError(verb, target, 0, str(exc)) from exc


def _json(response: object, target: str) -> Json:
    raw = cast(urllib3.BaseHTTPResponse, response)
    try:
        document = json.loads(raw.data)
    except ValueError as exc:
        raise errors.ApiError("decode", target, 200, f"not JSON: {exc}") from exc
    finally:
        raw.release_conn()
    if not isinstance(document, dict):
        raise errors.ApiError(
            "decode", target, 200, f"expected a JSON object, got {document!r:.80}"
        )
    return document


def widen_pool(api_client: client.ApiClient, size: int) -> None:
    """Keep up to ``size`` connections to the API server (the client's default is 5 per core).

    The bind workers, the event writer and the two watches use the client at once; with too
    small a pool urllib3 throws connections away after each call and warns every time. Call it
    before the first request: the pool is created with the first call.
    """
    api_client.configuration.connection_pool_maxsize = size
    api_client.rest_client.pool_manager.connection_pool_kw["maxsize"] = size


class Watch:
    """One open watch stream: iterate :meth:`events`; :meth:`close` ends it from any thread."""

    def __init__(self, resource: str, response: urllib3.BaseHTTPResponse) -> None:
        self.resource = resource
        self._response = response

    def events(self) -> Iterator[tuple[str, Json]]:
        """(type, object) pairs in order; an ``ERROR`` event raises ``ApiError``."""
        buffer = bytearray()
        try:
            for segment in self._response.stream(amt=None, decode_content=False):
                buffer.extend(segment)
                start = 0
                while (newline := buffer.find(b"\n", start)) != -1:
                    line = bytes(buffer[start:newline])
                    start = newline + 1
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    kind, obj = str(event.get("type", "")), event.get("object") or {}
                    if kind == "ERROR":
                        raise errors.ApiError(
                            "watch",
                            self.resource,
                            int(obj.get("code") or 0),
                            str(obj.get("message", "")),
                        )
                    yield kind, obj
                del buffer[:start]
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise errors.ApiError("watch", self.resource, 0, str(exc)) from exc

    def close(self) -> None:
        try:
            self._response.shutdown()
        except (
            AttributeError,
            OSError,
            ValueError,
            RuntimeError,
            urllib3.exceptions.HTTPError,
        ) as exc:
            # urllib3 refuses a second shutdown (ValueError) or one after release (RuntimeError)
            log.debug(
                "watch_shutdown_failed", extra=logs.fields(resource=self.resource, error=str(exc))
            )
        self._response.release_conn()


class Cluster:
    """The API calls of the scheduling driver, JSON dicts in and out."""

    def __init__(self, api_client: client.ApiClient, request_timeout: float = 10.0) -> None:
        self.api_client = api_client
        self._core = client.CoreV1Api(api_client)
        self._timeout = request_timeout

    # --- list and watch -------------------------------------------------------------------

    def _list(
        self, resource: str, fn: Callable[..., object], **selectors: str
    ) -> tuple[list[Json], str]:
        items: list[Json] = []
        token: str | None = None

        def page_from(token: str | None) -> Json:
            return _json(
                fn(
                    limit=LIST_PAGE,
                    _continue=token,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                    **selectors,
                ),
                resource,
            )

        while True:
            page = _call("list", resource, lambda: page_from(token))  # noqa: B023 - called at once
            items.extend(item for item in page.get("items") or [] if isinstance(item, dict))
            metadata = page.get("metadata") or {}
            token = metadata.get("continue") or None
            if not token:
                return items, str(metadata.get("resourceVersion") or "")

    def _watch(
        self, resource: str, fn: Callable[..., object], version: str, timeout: int, **selectors: str
    ) -> Watch:
        response = _call(
            "watch",
            resource,
            lambda: fn(
                watch=True,
                resource_version=version or None,
                timeout_seconds=timeout,
                allow_watch_bookmarks=True,
                _preload_content=False,
                _request_timeout=(self._timeout, timeout + self._timeout),
                **selectors,
            ),
        )
        return Watch(resource, cast(urllib3.BaseHTTPResponse, response))

    def list_pods(self) -> tuple[list[Json], str]:
        """Every unfinished pod of every namespace, and the list's resourceVersion."""
        return self._list(
            "pods", self._core.list_pod_for_all_namespaces, field_selector=UNFINISHED_PODS
        )

    def watch_pods(self, version: str, timeout: int) -> Watch:
        return self._watch(
            "pods",
            self._core.list_pod_for_all_namespaces,
            version,
            timeout,
            field_selector=UNFINISHED_PODS,
        )

    def list_nodes(self) -> tuple[list[Json], str]:
        return self._list("nodes", self._core.list_node)

    def watch_nodes(self, version: str, timeout: int) -> Watch:
        return self._watch("nodes", self._core.list_node, version, timeout)

    # --- writes ---------------------------------------------------------------------------

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """POST ``pods/binding`` as kube-scheduler's DefaultBinder does."""
        body = client.V1Binding(
            api_version="v1",
            kind="Binding",
            metadata=client.V1ObjectMeta(name=name, namespace=namespace, uid=uid),
            target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        target = f"pod {namespace}/{name}/binding"
        _call(
            "create",
            target,
            lambda: _json(
                self._core.create_namespaced_pod_binding(
                    name, namespace, body, _preload_content=False, _request_timeout=self._timeout
                ),
                target,
            ),
        )

    def patch_pod_status(self, namespace: str, name: str, patch: Json) -> Json:
        """A strategic merge patch of ``pods/<name>/status`` (conditions merge by type)."""
        target = f"pod {namespace}/{name}/status"
        return _call(
            "patch",
            target,
            lambda: _json(
                self._core.patch_namespaced_pod_status(
                    name,
                    namespace,
                    patch,
                    _content_type=STRATEGIC_MERGE_PATCH,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                ),
                target,
            ),
        )

    def create_event(self, namespace: str, event: Json) -> Json:
        target = f"event in {namespace}"
        return _call(
            "create",
            target,
            lambda: _json(
                self._core.create_namespaced_event(
                    namespace,
                    cast(Any, event),  # the client sends a dict as it is, camelCase keys and all
                    _preload_content=False,
                    _request_timeout=self._timeout,
                ),
                target,
            ),
        )

    def patch_event(self, namespace: str, name: str, patch: Json) -> Json:
        target = f"event {namespace}/{name}"
        return _call(
            "patch",
            target,
            lambda: _json(
                self._core.patch_namespaced_event(
                    name,
                    namespace,
                    patch,
                    _content_type=STRATEGIC_MERGE_PATCH,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                ),
                target,
            ),
        )
