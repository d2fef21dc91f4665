"""Request bodies in, response media types out, with the real server's decode errors.

``routes`` calls ``read_object`` for create/update/binding bodies (JSON or YAML, the
``kind``/``apiVersion`` defaulted from the URL and checked against it), ``read_patch`` and
``read_delete_options`` for PATCH and DELETE, and ``negotiate`` on the ``Accept`` header to
answer plain objects, ``Table`` (kubectl get) or ``PartialObjectMetadata``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from vnpu_sandbox.apiserver import errors, patches, registry, resources, schemas

Json = dict[str, Any]

MAX_BODY_BYTES = 3 * 1024 * 1024
OBJECT_MEDIA_TYPES = ("application/json", "application/yaml")
_KNOWN_EXTRA_KINDS = {
    ("v1", "Binding"),
    ("v1", "Status"),
    ("v1", "DeleteOptions"),
    ("v1", "List"),
    ("autoscaling/v1", "Scale"),
}
PROPAGATION_POLICIES = ("Foreground", "Background", "Orphan")


def media_type(header: str | None) -> str:
    return (header or "").split(";", 1)[0].strip().lower()


def _summary(body: bytes, limit: int = 30) -> str:
    if not body:
        return "<empty>"
    if body[:1] == b"{":
        text = body[:limit].decode(errors="replace")
        return text + " ..." if len(body) > limit else text
    return body[:limit].hex() + (" ..." if len(body) > limit else "")


def check_size(body: bytes) -> None:
    if len(body) > MAX_BODY_BYTES:
        raise errors.RequestEntityTooLarge(f"limit is {MAX_BODY_BYTES}")


def _parse(body: bytes, content_type: str) -> object:
    if content_type in ("application/yaml", "application/x-yaml", "text/yaml"):
        try:
            return yaml.safe_load(body)
        except yaml.YAMLError as exc:
            raise ValueError(f"error converting YAML to JSON: {exc}") from exc
    return json.loads(body)


def read_object(body: bytes, content_type_header: str | None, api_version: str, kind: str) -> Json:
    """Decode a create/update body that must be ``kind`` in ``api_version``."""
    check_size(body)
    content_type = media_type(content_type_header) or "application/json"
    if content_type not in (*OBJECT_MEDIA_TYPES, "application/x-yaml", "text/yaml", "*/*"):
        raise errors.UnsupportedMediaType(
            f"the body of the request was in an unknown format - accepted media types include: {', '.join(OBJECT_MEDIA_TYPES)}"
        )
    try:
        obj = schemas.without_nulls(_parse(body, content_type))
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.BadRequest(
            f"the object provided is unrecognized (must be of type {kind}): couldn't get version/kind; json parse error: {exc} ({_summary(body)})"
        ) from exc
    if not isinstance(obj, dict):
        shape = "array" if isinstance(obj, list) else "a non-object value"
        raise errors.BadRequest(
            f"the object provided is unrecognized (must be of type {kind}): couldn't get version/kind; json parse error: json: cannot unmarshal {shape} into Go value of type struct ({_summary(body)})"
        )
    given_version = str(obj.get("apiVersion") or api_version)
    given_kind = str(obj.get("kind") or kind)
    if (given_version, given_kind) != (api_version, kind):
        version = given_version.rsplit("/", 1)[-1]
        known = (
            resources.by_kind(given_version, given_kind) is not None
            or (given_version, given_kind) in _KNOWN_EXTRA_KINDS
        )
        if known:
            why = f"converting ({given_version}.{given_kind}) to ({api_version}.{kind}): unknown conversion"
        else:
            why = f'no kind "{given_kind}" is registered for version "{given_version}" in scheme "vnpu-sandbox"'
        raise errors.BadRequest(
            f'{given_kind} in version "{version}" cannot be handled as a {kind}: {why}'
        )
    if not isinstance(obj.get("metadata", {}), dict):
        raise errors.BadRequest(
            f'{kind} in version "{api_version.rsplit("/", 1)[-1]}" cannot be handled as a {kind}: metadata: must be an object, got {errors.quote(obj["metadata"])}'
        )
    obj["apiVersion"], obj["kind"] = api_version, kind
    schemas.check(kind, api_version, obj)
    obj.setdefault("metadata", {})
    return obj


def read_patch(body: bytes, content_type_header: str | None) -> tuple[str, object]:
    """The patch format named by Content-Type and the decoded patch document."""
    check_size(body)
    content_type = media_type(content_type_header)
    if content_type not in patches.SUPPORTED:
        raise errors.UnsupportedMediaType(
            f"the body of the request was in an unknown format - accepted media types include: {', '.join(patches.SUPPORTED)}"
        )
    try:
        return content_type, json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.BadRequest(f"error decoding patch: {exc}") from exc


def _optional_int(value: object, field: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(str(value))
    except ValueError as exc:
        raise errors.BadRequest(
            f"{field}: Invalid value: {errors.quote(value)}: must be an integer"
        ) from exc


def read_delete_options(body: bytes, query: dict[str, str]) -> registry.DeleteOptions:
    """DeleteOptions from the body (if any), else from the query parameters."""
    check_size(body)
    options: Json = {}
    if body.strip():
        try:
            decoded = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise errors.BadRequest(
                f"the object provided is unrecognized (must be of type DeleteOptions): couldn't get version/kind; json parse error: {exc} ({_summary(body)})"
            ) from exc
        if not isinstance(decoded, dict):
            raise errors.BadRequest("DeleteOptions must be a JSON object")
        options = decoded
    return delete_options(options, query)


def delete_options(options: Json, query: dict[str, str]) -> registry.DeleteOptions:
    """DeleteOptions from a decoded document (a DELETE body, an Eviction's ``deleteOptions``)."""
    preconditions: Json = (
        options["preconditions"] if isinstance(options.get("preconditions"), dict) else {}
    )
    grace = options.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
    return registry.DeleteOptions(
        grace_period=_optional_int(grace, "gracePeriodSeconds"),
        uid=preconditions.get("uid"),
        resource_version=preconditions.get("resourceVersion"),
        propagation=_propagation(options, query),
    )


def _propagation(options: Json, query: dict[str, str]) -> str | None:
    """``propagationPolicy``, or ``Orphan``/``Background`` from the older ``orphanDependents``."""
    policy = options.get("propagationPolicy", query.get("propagationPolicy")) or None
    orphan: object = options.get("orphanDependents", query.get("orphanDependents"))
    if isinstance(orphan, str):
        orphan = {"true": True, "false": False}.get(orphan, orphan)
    found: list[errors.FieldError] = []
    if policy is not None and policy not in PROPAGATION_POLICIES:
        found.append(
            errors.FieldError(
                "propagationPolicy",
                "NotSupported",
                policy,
                'supported values: "Foreground", "Background", "Orphan", "nil"',
            )
        )
    elif policy is not None and orphan is not None:
        found.append(
            errors.FieldError(
                "propagationPolicy",
                "Invalid",
                policy,
                "orphanDependents and deletionPropagation cannot be both set",
            )
        )
    if found:
        raise errors.Invalid("meta.k8s.io", "DeleteOptions", "", found)
    if policy is None and isinstance(orphan, bool):
        return "Orphan" if orphan else "Background"
    return None if policy is None else str(policy)


@dataclass(frozen=True)
class Output:
    """How to render a GET or watch answer: the objects, a Table, or metadata only."""

    form: Literal["object", "table", "metadata"]
    api_version: str = ""


def negotiate(accept: str | None) -> Output:
    """Pick the first media type in ``Accept`` this server can produce (406 if none)."""
    if not accept or not accept.strip():
        return Output("object")
    for entry in accept.split(","):
        kind, *raw = (part.strip() for part in entry.split(";"))
        params = dict(p.split("=", 1) for p in raw if "=" in p)
        if kind not in ("application/json", "application/*", "*/*"):
            continue
        shape = params.get("as")
        if shape is None:
            return Output("object")
        version = f"{params.get('g', 'meta.k8s.io')}/{params.get('v', 'v1')}"
        if shape == "Table" and params.get("g") == "meta.k8s.io":
            return Output("table", version)
        if (
            shape in ("PartialObjectMetadata", "PartialObjectMetadataList")
            and params.get("g") == "meta.k8s.io"
        ):
            return Output("metadata", version)
    raise errors.NotAcceptable(
        "only the following media types are accepted: application/json, application/json;as=Table;g=meta.k8s.io;v=v1"
    )
