"""URL paths of the Kubernetes REST API, resolved to a resource, namespace, name and subresource.

``routes`` calls ``resolve`` on every request path that is not a discovery document. The
shapes are the real server's: ``/api/v1/<plural>[/<name>[/<sub>]]`` for cluster-scoped
resources and all-namespace lists, ``/api/v1/namespaces/<ns>/<plural>[/<name>[/<sub>]]``
for namespaced ones, the same under ``/apis/<group>/<version>``, the legacy
``/watch/`` prefix after the version, and ``/api/v1/namespaces/<ns>/bindings``. An unknown
path resolves to None, which the server answers with a plain ``404 page not found``.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

from vnpu_sandbox.apiserver import resources


@dataclass(frozen=True)
class Target:
    """What a resource path names; ``namespace`` None means cluster scope or all namespaces."""

    resource: resources.Resource
    namespace: str | None = None
    name: str | None = None
    subresource: str = ""
    legacy_watch: bool = False
    bindings: bool = False


def _group_version(parts: list[str]) -> tuple[str, str, list[str]] | None:
    if len(parts) >= 2 and parts[0] == "api":
        return "", parts[1], parts[2:]
    if len(parts) >= 3 and parts[0] == "apis":
        return parts[1], parts[2], parts[3:]
    return None


def resolve(path: str) -> Target | None:
    parts = [unquote(p) for p in path.strip("/").split("/")]
    found = _group_version(parts)
    if found is None:
        return None
    group, version, rest = found
    legacy_watch = bool(rest) and rest[0] == "watch"
    if legacy_watch:
        rest = rest[1:]
    if not rest or any(not p for p in rest):
        return None
    namespace: str | None = None
    own_subresource = group == "" and len(rest) == 3 and rest[2] in ("status", "finalize")
    if rest[0] == "namespaces" and len(rest) >= 3 and not own_subresource:
        namespace, rest = rest[1], rest[2:]
        if rest == ["bindings"] and not legacy_watch:
            return Target(resources.PODS, namespace, bindings=True)
    resource = resources.lookup(group, version, rest[0])
    if resource is None or len(rest) > 3:
        return None
    if resource.namespaced and namespace is None and len(rest) > 1:
        return None  # /api/v1/pods/<name> does not exist: only the all-namespace list
    if not resource.namespaced and namespace is not None:
        return None
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else ""
    if subresource and (subresource not in resource.subresources or legacy_watch):
        return None
    return Target(resource, namespace, name, subresource, legacy_watch)
