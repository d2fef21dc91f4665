"""HTTP handling: one Starlette endpoint that dispatches every request like kube-apiserver.

``server`` mounts ``Api.handle`` for all paths and methods. It answers discovery and
``/version`` from ``discovery``, resolves resource paths with ``paths``, decodes bodies with
``codec``, runs admission on create, calls ``registry`` for the verb and renders the result
(objects, lists, Tables for kubectl, or a watch stream from ``watch``). Every ``ApiError``
becomes its Status object with the matching HTTP code; an unexpected exception becomes a
500 Status and is logged once; either way the server keeps serving.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse

from vnpu_sandbox.apiserver import (
    admission,
    codec,
    discovery,
    errors,
    lists,
    paths,
    registry,
    scales,
    selectors,
    store,
    strategies,
    tables,
    watch,
)

Json = dict[str, Any]
log = logging.getLogger(__name__)

_HEALTH = ("/healthz", "/livez", "/readyz")


@dataclass(frozen=True)
class WatchLimits:
    """Watch stream settings: default and maximum duration, bookmarks, per-watcher backlog."""

    default_timeout: float = 1800.0
    bookmark_interval: float = 60.0
    queue_limit: int = 10_000


def json_response(
    body: object, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    return Response(data, status_code=status, media_type="application/json", headers=headers)


def error_response(error: errors.ApiError) -> Response:
    return json_response(error.status(), error.code)


def _warning_headers(warnings: list[str]) -> dict[str, str] | None:
    if not warnings:
        return None
    return {"Warning": ", ".join('299 - "' + w.replace('"', "'") + '"' for w in warnings)}


class Api:
    """The request handler over one registry, admission chain and watch settings."""

    def __init__(
        self,
        objects: registry.Registry,
        webhooks: admission.Admission,
        limits: WatchLimits,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.registry = objects
        self.admission = webhooks
        self.limits = limits
        self.clock = clock

    async def handle(self, request: Request) -> Response:
        try:
            return await self._dispatch(request)
        except errors.ApiError as exc:
            return error_response(exc)
        except Exception as exc:  # the server keeps serving; the client gets a Status
            log.exception("request_failed method=%s path=%s", request.method, request.url.path)
            return error_response(errors.InternalError(f"{type(exc).__name__}: {exc}"))

    async def _dispatch(self, request: Request) -> Response:
        path = "/" + request.url.path.strip("/")
        if request.method == "GET":
            document = self._discovery(path, request)
            if document is not None:
                return json_response(document)
            if path in _HEALTH:
                return PlainTextResponse("ok")
        target = paths.resolve(path)
        if target is None:  # /openapi/v2 and /openapi/v3 included: clients fall back
            return PlainTextResponse("404 page not found", status_code=404)
        query = dict(request.query_params)
        method = request.method
        if target.bindings or target.subresource == "binding":
            if method != "POST":
                raise errors.MethodNotAllowed(method)
            return await self._bind(target, request)
        if target.subresource == "eviction":
            if method != "POST":
                raise errors.MethodNotAllowed(method)
            return await self._evict(target, request, query)
        if target.name is None:
            if method == "GET":
                return self._list_or_watch(target, request, query)
            if method == "POST" and not target.legacy_watch:
                return await self._create(target, request, query)
            if method == "DELETE" and not target.legacy_watch:
                return await self._delete_collection(target, request, query)
            raise errors.MethodNotAllowed(method)
        if target.legacy_watch:
            if method != "GET":
                raise errors.MethodNotAllowed(method)
            return self._list_or_watch(
                target, request, {**query, "fieldSelector": _with_name(query, target.name)}
            )
        return await self._item(target, request, query)

    def _discovery(self, path: str, request: Request) -> Json | None:
        if path == "/version":
            return discovery.version()
        if path == "/api":
            return discovery.api_versions(request.url.netloc)
        if path == "/apis":
            return discovery.api_group_list()
        parts = path.strip("/").split("/")
        if parts[0] == "apis" and len(parts) == 2:
            return discovery.api_group(parts[1])
        if parts[0] == "api" and len(parts) == 2:
            return discovery.resource_list("", parts[1])
        if parts[0] == "apis" and len(parts) == 3:
            return discovery.resource_list(parts[1], parts[2])
        return None

    # --- reads ----------------------------------------------------------------------------

    def _namespace(self, target: paths.Target) -> str:
        return target.namespace or ""

    def _render(self, target: paths.Target, request: Request, obj: Json) -> Response:
        output = codec.negotiate(request.headers.get("accept"))
        if output.form == "table":
            include = request.query_params.get("includeObject", "Metadata")
            return json_response(
                tables.to_table(
                    target.resource,
                    [obj],
                    now=self.clock(),
                    api_version=output.api_version,
                    include_object=include,
                )
            )
        if output.form == "metadata":
            return json_response(
                {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": output.api_version,
                    "metadata": obj["metadata"],
                }
            )
        return json_response(obj)

    def _selector(self, target: paths.Target, query: dict[str, str]) -> selectors.Selector:
        return selectors.Selector.parse(
            query.get("labelSelector", ""), query.get("fieldSelector", ""), target.resource
        )

    def _list_or_watch(
        self, target: paths.Target, request: Request, query: dict[str, str]
    ) -> Response:
        selector = self._selector(target, query)
        output = codec.negotiate(request.headers.get("accept"))
        if target.legacy_watch or query.get("watch") in ("true", "1"):
            return self._watch(target, request, query, selector, output)
        limit = query.get("limit", "0") or "0"
        if not limit.isdigit():
            raise errors.BadRequest(
                f'limit: Invalid value: "{limit}": must be a non-negative integer'
            )
        options = lists.ListOptions(
            resource_version=query.get("resourceVersion", ""),
            match=query.get("resourceVersionMatch", ""),
            limit=int(limit),
            continue_token=query.get("continue", ""),
        )
        listed = self.registry.list(target.resource, target.namespace, selector, options)
        if output.form == "table":
            include = query.get("includeObject", "Metadata")
            return json_response(
                tables.to_table(
                    target.resource,
                    [
                        dict(
                            item, kind=target.resource.kind, apiVersion=target.resource.api_version
                        )
                        for item in listed["items"]
                    ],
                    now=self.clock(),
                    api_version=output.api_version,
                    include_object=include,
                    list_metadata=listed["metadata"],
                )
            )
        if output.form == "metadata":
            items = [
                {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": output.api_version,
                    "metadata": i["metadata"],
                }
                for i in listed["items"]
            ]
            return json_response(
                {
                    "kind": "PartialObjectMetadataList",
                    "apiVersion": output.api_version,
                    "metadata": listed["metadata"],
                    "items": items,
                }
            )
        return json_response(listed)

    def _watch(
        self,
        target: paths.Target,
        request: Request,
        query: dict[str, str],
        selector: selectors.Selector,
        output: codec.Output,
    ) -> Response:
        timeout = self.limits.default_timeout
        if query.get("timeoutSeconds"):
            text = query["timeoutSeconds"]
            if not text.isdigit():
                raise errors.BadRequest(
                    f'timeoutSeconds: Invalid value: "{text}": must be a non-negative integer'
                )
            timeout = float(text) or timeout
        render = watch.plain_line
        if output.form == "table":
            include = query.get("includeObject", "Metadata")

            def render(event: store.Event, event_type: str, obj: Json) -> bytes:
                table = tables.to_table(
                    target.resource,
                    [obj],
                    now=self.clock(),
                    api_version=output.api_version,
                    include_object=include,
                )
                return (
                    json.dumps(
                        {"type": event_type, "object": table}, separators=(",", ":")
                    ).encode()
                    + b"\n"
                )

        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        stream = watch.open_stream(
            self.registry.store,
            target.resource,
            target.namespace,
            selector,
            query.get("resourceVersion", ""),
            timeout=timeout,
            bookmark_interval=self.limits.bookmark_interval if bookmarks else None,
            render=render,
            queue_limit=self.limits.queue_limit,
        )
        return StreamingResponse(
            stream, media_type="application/json", headers={"Cache-Control": "no-cache, private"}
        )

    # --- writes ---------------------------------------------------------------------------

    def _dry_run(self, query: dict[str, str]) -> bool:
        value = query.get("dryRun", "")
        if value not in ("", "All"):
            raise errors.BadRequest(
                f'dryRun: Unsupported value: "{value}": supported values: "All"'
            )
        return value == "All"

    async def _create(
        self, target: paths.Target, request: Request, query: dict[str, str]
    ) -> Response:
        resource = target.resource
        if resource.namespaced and target.namespace is None:
            raise errors.MethodNotAllowed(request.method)
        dry_run = self._dry_run(query)
        body = codec.read_object(
            await request.body(),
            request.headers.get("content-type"),
            resource.api_version,
            resource.kind,
        )
        namespace = self._namespace(target)
        self.registry.scope(resource, namespace, body)
        strategies.defaults(resource, body)
        name = str(body["metadata"].get("name", ""))
        attributes = admission.Request(resource, namespace, name, "CREATE", body, dry_run=dry_run)
        outcome = await self.admission.mutate(attributes)
        prepared = self.registry.prepare_create(resource, namespace, outcome.obj)
        warnings = outcome.warnings
        warnings += await self.admission.validate(
            admission.Request(
                resource,
                namespace,
                prepared["metadata"]["name"],
                "CREATE",
                prepared,
                dry_run=dry_run,
            )
        )
        created = self.registry.insert(resource, prepared, dry_run)
        return json_response(created, 201, _warning_headers(warnings))

    async def _item(
        self, target: paths.Target, request: Request, query: dict[str, str]
    ) -> Response:
        resource, name, namespace = target.resource, str(target.name), self._namespace(target)
        method = request.method
        if target.subresource == "scale":
            return await self._scale(target, request, query)
        if method == "GET":
            return self._render(target, request, self.registry.get(resource, namespace, name))
        if method == "PUT":
            body = codec.read_object(
                await request.body(),
                request.headers.get("content-type"),
                resource.api_version,
                resource.kind,
            )
            updated = self.registry.update(
                resource, namespace, name, body, target.subresource, self._dry_run(query)
            )
            return json_response(updated)
        if method == "PATCH":
            content_type, patch = codec.read_patch(
                await request.body(), request.headers.get("content-type")
            )
            patched = self.registry.patch(
                resource,
                namespace,
                name,
                content_type,
                patch,
                target.subresource,
                self._dry_run(query),
            )
            return json_response(patched)
        if method == "DELETE" and not target.subresource:
            options = codec.read_delete_options(await request.body(), query)
            return json_response(
                self.registry.delete(resource, namespace, name, options, self._dry_run(query))
            )
        raise errors.MethodNotAllowed(method)

    async def _scale(
        self, target: paths.Target, request: Request, query: dict[str, str]
    ) -> Response:
        """``.../deployments|replicasets/<name>/scale``: an autoscaling/v1 Scale in and out."""
        resource, name, namespace = target.resource, str(target.name), self._namespace(target)
        if request.method == "GET":
            return json_response(self.registry.get_scale(resource, namespace, name))
        if request.method == "PUT":
            body = codec.read_object(
                await request.body(),
                request.headers.get("content-type"),
                scales.API_VERSION,
                scales.KIND,
            )
            return json_response(
                self.registry.update_scale(resource, namespace, name, body, self._dry_run(query))
            )
        if request.method == "PATCH":
            content_type, patch = codec.read_patch(
                await request.body(), request.headers.get("content-type")
            )
            return json_response(
                self.registry.patch_scale(
                    resource, namespace, name, content_type, patch, self._dry_run(query)
                )
            )
        raise errors.MethodNotAllowed(request.method)

    async def _delete_collection(
        self, target: paths.Target, request: Request, query: dict[str, str]
    ) -> Response:
        selector = self._selector(target, query)
        options = codec.read_delete_options(await request.body(), query)
        return json_response(
            self.registry.delete_collection(
                target.resource, target.namespace, selector, options, self._dry_run(query)
            )
        )

    async def _bind(self, target: paths.Target, request: Request) -> Response:
        binding = codec.read_object(
            await request.body(), request.headers.get("content-type"), "v1", "Binding"
        )
        name = target.name or str(binding["metadata"].get("name") or "")
        if not name:
            raise errors.Invalid(
                "",
                "Binding",
                "",
                [
                    errors.FieldError(
                        "metadata.name", "Required", detail="name or generateName is required"
                    )
                ],
            )
        return json_response(self.registry.bind(self._namespace(target), name, binding), 201)

    async def _evict(
        self, target: paths.Target, request: Request, query: dict[str, str]
    ) -> Response:
        """``pods/<name>/eviction``: a policy/v1 Eviction deletes the pod gracefully (no
        PodDisruptionBudget is consulted: the emulator serves none)."""
        eviction = codec.read_object(
            await request.body(), request.headers.get("content-type"), "policy/v1", "Eviction"
        )
        raw = eviction.get("deleteOptions")
        options = codec.delete_options(raw if isinstance(raw, dict) else {}, {})
        dry_run = self._dry_run(query) or (isinstance(raw, dict) and raw.get("dryRun") == ["All"])
        name = str(target.name)
        given = str(eviction["metadata"].get("name") or "")
        answer = self.registry.evict(self._namespace(target), name, given, options, dry_run)
        return json_response(answer, 201)


def _with_name(query: dict[str, str], name: str) -> str:
    pinned = "metadata.name=" + name.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")
    existing = query.get("fieldSelector", "")
    return f"{existing},{pinned}" if existing else pinned
