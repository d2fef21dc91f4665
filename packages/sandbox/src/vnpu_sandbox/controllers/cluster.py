"""The controller manager's calls to the Kubernetes API, through the official ``kubernetes`` client.

``informer`` lists and watches through :class:`Cluster`; the controllers and the garbage
collector create, patch and delete through it. Objects go in and out as plain JSON dicts,
exactly as the server sends them: requests are built and sent by the client's own
``ApiClient`` (``param_serialize`` and ``call_api``: its configuration, credentials and
connection pool), but not through the typed models, whose round trip would drop fields
they do not know (a pod template is copied into pods verbatim). Every failure becomes
``errors.ApiError`` with the HTTP status (0 when the server did not answer) and the
server's message.

Each successful write records the resourceVersion it produced per kind (``written``), so
the manager can wait until its informers have seen its own writes before the next sync.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import urllib3
from kubernetes import client
from kubernetes.client import exceptions

from vnpu_sandbox.controllers import errors

log = logging.getLogger(__name__)

Json = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


@dataclass(frozen=True)
class Kind:
    """One resource the controllers use: where it is served and what its objects say they are."""

    plural: str
    api_version: str
    kind: str

    @property
    def prefix(self) -> str:
        return (
            f"/apis/{self.api_version}" if "/" in self.api_version else f"/api/{self.api_version}"
        )

    def path(self, namespace: str | None = None, name: str = "", subresource: str = "") -> str:
        where = f"/namespaces/{namespace}" if namespace else ""
        tail = "/".join(p for p in (name, subresource) if p)
        return f"{self.prefix}{where}/{self.plural}" + (f"/{tail}" if tail else "")


DEPLOYMENTS = Kind("deployments", "apps/v1", "Deployment")
REPLICASETS = Kind("replicasets", "apps/v1", "ReplicaSet")
PODS = Kind("pods", "v1", "Pod")
EVENTS = Kind("events", "v1", "Event")


def revision(obj: Json | None) -> int:
    """An object's resourceVersion as a number (0 when absent or not numeric)."""
    text = str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")
    return int(text) if text.isdigit() else 0


def _message(status: int, body: bytes) -> str:
    text = body.decode("utf-8", errors="replace")
    try:
        document = json.loads(text)
    except ValueError:
        return text[:300]
    if isinstance(document, dict) and document.get("message"):
        return str(document["message"])
    return text[:300] or f"HTTP {status}"


class WatchStream:
    """One open watch: iterate :meth:`events`; :meth:`close` ends it from any thread."""

    def __init__(self, kind: Kind, response: urllib3.BaseHTTPResponse) -> None:
        self._kind = kind
        self._response = response
        self._closed = threading.Lock()

    def events(self) -> Iterator[tuple[str, Json]]:
        """(type, object) pairs, BOOKMARK included; an ``ERROR`` event raises ``ApiError``."""
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
                            "watch",
                            self._kind.plural,
                            int(obj.get("code") or 0),
                            str(obj.get("message", "")),
                        )
                    yield kind, obj
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise errors.ApiError("watch", self._kind.plural, 0, str(exc)) from exc

    def close(self) -> None:
        if not self._closed.acquire(blocking=False):
            return  # closed already (by the reader, or by another thread)
        try:
            self._response.shutdown()
        except (
            AttributeError,
            ValueError,
            RuntimeError,
            OSError,
            urllib3.exceptions.HTTPError,
        ) as exc:
            # urllib3 refuses to shut down a stream that ended and gave its connection back
            log.debug("watch_shutdown_failed kind=%s error=%s", self._kind.plural, exc)
        self._response.release_conn()


class Cluster:
    """The API calls of the controller manager, JSON in and out; safe to share between threads."""

    def __init__(self, api_client: client.ApiClient, request_timeout: float = 10.0) -> None:
        self.api_client = api_client
        self._timeout = request_timeout
        self._lock = threading.Lock()
        self._written: dict[str, int] = {}
        self.answers = 0
        """How many requests the server has answered (with any status): proof it is there."""

    # --- transport ----------------------------------------------------------------------

    def _send(
        self,
        verb: str,
        target: str,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: object = None,
        content_type: str = "",
        timeout: float | tuple[float, float] | None = None,
    ) -> urllib3.BaseHTTPResponse:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        elif body is not None:
            headers["Content-Type"] = "application/json"
        try:
            request = self.api_client.param_serialize(
                method=method,
                resource_path=path,
                query_params=query or None,
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            answer = self.api_client.call_api(*request, _request_timeout=timeout or self._timeout)
        except exceptions.ApiException as exc:
            raise errors.ApiError(verb, target, int(exc.status or 0), str(exc.reason)) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise errors.ApiError(verb, target, 0, str(exc)) from exc
        with self._lock:
            self.answers += 1
        response = cast(urllib3.BaseHTTPResponse, answer.response)
        if not 200 <= answer.status <= 299:
            try:
                data = response.data
            except (urllib3.exceptions.HTTPError, OSError):
                data = b""
            finally:
                response.release_conn()
            raise errors.ApiError(verb, target, int(answer.status), _message(answer.status, data))
        return response

    def _json(self, verb: str, target: str, method: str, path: str, **kwargs: Any) -> Json:
        response = self._send(verb, target, method, path, **kwargs)
        try:
            document = json.loads(response.data)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise errors.ApiError(verb, target, 0, str(exc)) from exc
        except ValueError as exc:
            raise errors.ApiError(verb, target, 200, f"not JSON: {exc}") from exc
        finally:
            response.release_conn()
        if not isinstance(document, dict):
            raise errors.ApiError(
                verb, target, 200, f"expected a JSON object, got {document!r:.80}"
            )
        return document

    def _wrote(self, kind: Kind, obj: Json) -> Json:
        number = revision(obj)
        with self._lock:
            if number > self._written.get(kind.plural, 0):
                self._written[kind.plural] = number
        return obj

    def written(self, kind: Kind) -> int:
        """The newest resourceVersion this client's writes of ``kind`` produced."""
        with self._lock:
            return self._written.get(kind.plural, 0)

    # --- reads --------------------------------------------------------------------------

    def list(self, kind: Kind) -> tuple[list[Json], str]:
        """Every object of ``kind`` in all namespaces, and the list's resourceVersion."""
        document = self._json("list", kind.plural, "GET", kind.path())
        items = [i for i in document.get("items") or [] if isinstance(i, dict)]
        for item in items:  # list items carry no kind; the controllers' copies should
            item.setdefault("apiVersion", kind.api_version)
            item.setdefault("kind", kind.kind)
        return items, str((document.get("metadata") or {}).get("resourceVersion", ""))

    def watch(self, kind: Kind, resource_version: str, timeout_seconds: int) -> WatchStream:
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        response = self._send(
            "watch",
            kind.plural,
            "GET",
            kind.path(),
            query=query,
            timeout=(self._timeout, timeout_seconds + self._timeout),
        )
        return WatchStream(kind, response)

    def get(self, kind: Kind, namespace: str, name: str) -> Json | None:
        """The live object, or None when there is none (a read that bypasses the caches)."""
        try:
            return self._json(
                "get", f"{kind.plural} {namespace}/{name}", "GET", kind.path(namespace, name)
            )
        except errors.ApiError as exc:
            if exc.not_found:
                return None
            raise

    # --- writes -------------------------------------------------------------------------

    def create(self, kind: Kind, namespace: str, body: Json) -> Json:
        metadata = body.get("metadata") or {}
        name = metadata.get("name") or f"{metadata.get('generateName', '')}*"
        created = self._json(
            "create", f"{kind.plural} {namespace}/{name}", "POST", kind.path(namespace), body=body
        )
        return self._wrote(kind, created)

    def patch(
        self,
        kind: Kind,
        namespace: str,
        name: str,
        patch: Json,
        *,
        subresource: str = "",
        content_type: str = MERGE_PATCH,
    ) -> Json:
        where = f"{kind.plural} {namespace}/{name}" + (f"/{subresource}" if subresource else "")
        patched = self._json(
            "patch",
            where,
            "PATCH",
            kind.path(namespace, name, subresource),
            body=patch,
            content_type=content_type,
        )
        return self._wrote(kind, patched)

    def replace_status(self, kind: Kind, obj: Json, status: Json) -> None:
        """Give ``obj`` the status ``status`` if it has another: a merge patch of the status
        subresource that also clears the fields only the old status had. An object gone
        meanwhile is no error (its deletion is an event of its own)."""
        before = obj.get("status") or {}
        if status == before:
            return
        metadata = obj.get("metadata") or {}
        patch = {"status": {**{k: None for k in before if k not in status}, **status}}
        try:
            self.patch(
                kind,
                str(metadata.get("namespace", "")),
                str(metadata["name"]),
                patch,
                subresource="status",
            )
        except errors.ApiError as exc:
            if not exc.not_found:
                raise

    def delete(
        self,
        kind: Kind,
        namespace: str,
        name: str,
        *,
        uid: str = "",
        propagation: str = "",
    ) -> Json | None:
        """Delete with the object's own grace period; None when it was already gone.

        ``uid`` makes the delete conditional on the object still being that one;
        ``propagation`` is the DeleteOptions ``propagationPolicy``.
        """
        options: Json = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            options["preconditions"] = {"uid": uid}
        if propagation:
            options["propagationPolicy"] = propagation
        try:
            answer = self._json(
                "delete",
                f"{kind.plural} {namespace}/{name}",
                "DELETE",
                kind.path(namespace, name),
                body=options,
            )
        except errors.ApiError as exc:
            if exc.not_found:
                return None
            raise
        if answer.get("kind") == "Status":
            return answer
        return self._wrote(kind, answer)
