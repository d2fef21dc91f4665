"""List requests: which revision to read, selectors, and ``limit``/``continue`` pages.

``registry.Registry.list`` calls ``page``. Like kube-apiserver: a plain list reads the
current state (a ``resourceVersion`` newer than the current one is 504 Timeout), with
``resourceVersionMatch=Exact`` it reads that revision, and every page after the first reads
the first page's revision, so paging is a consistent snapshot. Past revisions are rebuilt
from the store's event window; one older than the window is 410 Expired. A continue token is
base64 of ``{"v", "rv", "start"}``, the real server's shape; ``rv: -1`` continues from the
current state (the token a client may use after an Expired page).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from vnpu_sandbox.apiserver import errors, resources, selectors, store

Json = dict[str, Any]

CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this response "
    "to retrieve the remainder of the results. Continuing with the provided token results in an "
    "inconsistent list - objects that were created, modified, or deleted between the time the "
    "first chunk was returned and now may show up in the list."
)
_MATCHES = ("Exact", "NotOlderThan")


@dataclass(frozen=True)
class ListOptions:
    """The list query parameters: ``resourceVersion``, ``resourceVersionMatch``, ``limit``, ``continue``."""

    resource_version: str = ""
    match: str = ""
    limit: int = 0
    continue_token: str = ""

    def check(self) -> None:
        """Refuse combinations the real server refuses (422 Invalid ListOptions)."""
        found: list[errors.FieldError] = []
        if self.match and self.match not in _MATCHES:
            found.append(
                errors.FieldError(
                    "resourceVersionMatch",
                    "NotSupported",
                    self.match,
                    'supported values: "Exact", "NotOlderThan"',
                )
            )
        elif self.match and not self.resource_version:
            found.append(
                errors.FieldError(
                    "resourceVersionMatch",
                    "Forbidden",
                    detail="resourceVersionMatch is forbidden unless resourceVersion is provided",
                )
            )
        elif self.match == "Exact" and self.resource_version == "0":
            found.append(
                errors.FieldError(
                    "resourceVersionMatch",
                    "Forbidden",
                    detail='resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
                )
            )
        if self.continue_token and self.resource_version and self.resource_version != "0":
            found.append(
                errors.FieldError(
                    "resourceVersion",
                    "Forbidden",
                    detail="specifying resource version is not allowed when using continue",
                )
            )
        if found:
            raise errors.Invalid("meta.k8s.io", "ListOptions", "", found)


def continue_token(revision: int, start: tuple[str, str]) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": revision, "start": "/".join(start) + "\x00"})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _parse_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        revision = int(raw["rv"])
        namespace, _, name = str(raw["start"]).rstrip("\x00").partition("/")
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise errors.BadRequest(f"continue key is not valid: {exc}") from exc
    return revision, (namespace, name)


def _revision(text: str) -> int:
    if not text.isdigit():
        raise errors.BadRequest(
            f'resourceVersion: Invalid value: "{text}": must be a non-negative integer'
        )
    return int(text)


def _too_large(wanted: int, current: int) -> errors.Timeout:
    cause = {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
    return errors.Timeout(
        f"Too large resource version: {wanted}, current: {current}",
        {"causes": [cause], "retryAfterSeconds": 1},
    )


def _read(
    objects: store.Store, resource: resources.Resource, namespace: str | None, options: ListOptions
) -> tuple[int, list[Json], tuple[str, str] | None]:
    """The revision served, the objects at it (sorted by key), and the key to start after."""
    if options.continue_token:
        revision, start = _parse_continue(options.continue_token)
        if revision < 0:
            return objects.revision, objects.items(resource.key, namespace), start
        try:
            return revision, objects.snapshot(resource.key, namespace, revision), start
        except errors.Expired as exc:
            raise errors.Expired(CONTINUE_EXPIRED, continue_token(-1, start)) from exc
    if options.match == "Exact":
        revision = _revision(options.resource_version)
        return revision, objects.snapshot(resource.key, namespace, revision), None
    if (
        options.resource_version
        and (wanted := _revision(options.resource_version)) > objects.revision
    ):
        raise _too_large(wanted, objects.revision)
    return objects.revision, objects.items(resource.key, namespace), None


def page(
    objects: store.Store,
    resource: resources.Resource,
    namespace: str | None,
    selector: selectors.Selector,
    options: ListOptions,
) -> Json:
    """One list response: ``<Kind>List`` with the revision and, if cut short, a continue token."""
    options.check()
    revision, items, start = _read(objects, resource, namespace, options)
    if start is not None:
        items = [o for o in items if store.object_key(o) > start]
    matching = [o for o in items if selector.matches(o)]
    metadata: Json = {"resourceVersion": str(revision)}
    if 0 < options.limit < len(matching):
        remaining = len(matching) - options.limit
        matching = matching[: options.limit]
        metadata["continue"] = continue_token(revision, store.object_key(matching[-1]))
        if not selector.labels and not selector.fields:
            metadata["remainingItemCount"] = remaining
    return {
        "kind": resource.list_kind,
        "apiVersion": resource.api_version,
        "metadata": metadata,
        "items": [
            {k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in matching
        ],
    }
