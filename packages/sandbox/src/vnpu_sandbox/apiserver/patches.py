"""The three PATCH formats: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge.

``routes`` calls ``apply`` for ``PATCH`` requests; ``admission`` calls ``json_patch`` for the
JSONPatch a mutating webhook returns. Strategic merge follows kube-apiserver for the lists
the real types declare with a patch strategy (containers by name, conditions by type,
addresses by type, finalizers as a set, ...; see ``MERGE_KEYS``) and the directives
``$patch`` (replace, delete, merge), ``$retainKeys``, ``$deleteFromPrimitiveList/<f>`` and
``$setElementOrder/<f>``. Every other list is replaced whole, as in a merge patch.
"""

from __future__ import annotations

import copy
from typing import Any

Json = dict[str, Any]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
SUPPORTED = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH)

# (kind or "*", path of the list) -> merge key; "" marks a list of scalars merged as a set.
MERGE_KEYS: dict[tuple[str, tuple[str, ...]], str] = {
    ("*", ("metadata", "finalizers")): "",
    ("*", ("metadata", "ownerReferences")): "uid",
    ("Pod", ("spec", "containers")): "name",
    ("Pod", ("spec", "initContainers")): "name",
    ("Pod", ("spec", "ephemeralContainers")): "name",
    ("Pod", ("spec", "containers", "env")): "name",
    ("Pod", ("spec", "initContainers", "env")): "name",
    ("Pod", ("spec", "containers", "ports")): "containerPort",
    ("Pod", ("spec", "initContainers", "ports")): "containerPort",
    ("Pod", ("spec", "containers", "volumeMounts")): "mountPath",
    ("Pod", ("spec", "initContainers", "volumeMounts")): "mountPath",
    ("Pod", ("spec", "containers", "volumeDevices")): "devicePath",
    ("Pod", ("spec", "volumes")): "name",
    ("Pod", ("spec", "imagePullSecrets")): "name",
    ("Pod", ("spec", "hostAliases")): "ip",
    ("Pod", ("spec", "topologySpreadConstraints")): "topologyKey",
    ("Pod", ("spec", "schedulingGates")): "name",
    ("Pod", ("spec", "resourceClaims")): "name",
    ("Pod", ("status", "conditions")): "type",
    ("Pod", ("status", "podIPs")): "ip",
    ("Pod", ("status", "hostIPs")): "ip",
    ("Node", ("spec", "podCIDRs")): "",
    ("Node", ("status", "conditions")): "type",
    ("Node", ("status", "addresses")): "type",
    ("Namespace", ("status", "conditions")): "type",
    ("MutatingWebhookConfiguration", ("webhooks",)): "name",
    ("ValidatingWebhookConfiguration", ("webhooks",)): "name",
}


def _workload_keys() -> dict[tuple[str, tuple[str, ...]], str]:
    """Deployments and ReplicaSets: the pod spec's lists under ``spec.template``, conditions."""
    keys: dict[tuple[str, tuple[str, ...]], str] = {}
    for kind in ("Deployment", "ReplicaSet"):
        keys[(kind, ("status", "conditions"))] = "type"
        for (owner, path), key in MERGE_KEYS.items():
            if owner == "Pod" and path[0] == "spec":
                keys[(kind, ("spec", "template", *path))] = key
    return keys


MERGE_KEYS.update(_workload_keys())


class PatchError(ValueError):
    """A patch that cannot be decoded (``bad_request``) or cannot be applied to the object."""

    def __init__(self, message: str, *, bad_request: bool = False) -> None:
        super().__init__(message)
        self.bad_request = bad_request


# --- RFC 6902 ---------------------------------------------------------------------------


def _pointer(path: object) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise PatchError(f"invalid JSON pointer: {path!r}", bad_request=True)
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def _parent(doc: Any, parts: list[str], op: str, path: str) -> tuple[Any, str]:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise PatchError(f"{op} operation does not apply: doc is missing path: {path}")
    return node, parts[-1]


def _index(container: list[Any], token: str, op: str, path: str, *, insert: bool) -> int:
    if insert and token == "-":
        return len(container)
    limit = len(container) if insert else len(container) - 1
    if not token.isdigit() or int(token) > limit:
        raise PatchError(f"{op} operation does not apply: doc is missing path: {path}")
    return int(token)


def _get(doc: Any, path: str, op: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    parent, token = _parent(doc, parts, op, path)
    if isinstance(parent, dict) and token in parent:
        return parent[token]
    if isinstance(parent, list):
        return parent[_index(parent, token, op, path, insert=False)]
    raise PatchError(f"{op} operation does not apply: doc is missing key: {path}: missing value")


def _remove(doc: Any, path: str, op: str) -> Any:
    parts = _pointer(path)
    parent, token = _parent(doc, parts, op, path)
    if isinstance(parent, dict) and token in parent:
        return parent.pop(token)
    if isinstance(parent, list):
        return parent.pop(_index(parent, token, op, path, insert=False))
    raise PatchError(f"{op} operation does not apply: doc is missing key: {path}: missing value")


def _add(doc: Any, path: str, value: Any, op: str, *, replace: bool = False) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent, token = _parent(doc, parts, op, path)
    if isinstance(parent, dict):
        if replace and token not in parent:
            raise PatchError(f"{op} operation does not apply: doc is missing key: {path}")
        parent[token] = value
    elif isinstance(parent, list):
        if replace:
            parent[_index(parent, token, op, path, insert=False)] = value
        else:
            parent.insert(_index(parent, token, op, path, insert=True), value)
    else:
        raise PatchError(f"{op} operation does not apply: doc is missing path: {path}")
    return doc


def json_patch(doc: Any, operations: object) -> Any:
    """Apply an RFC 6902 patch to a deep copy of ``doc`` and return the result."""
    if not isinstance(operations, list):
        kind = type(operations).__name__.replace("dict", "object")
        raise PatchError(
            f"json: cannot unmarshal {kind} into Go value of type jsonpatch.Patch", bad_request=True
        )
    result = copy.deepcopy(doc)
    for number, operation in enumerate(operations):
        if not isinstance(operation, dict):
            raise PatchError(f"operation {number} is not an object", bad_request=True)
        op, path = operation.get("op"), operation.get("path")
        if not isinstance(path, str):
            raise PatchError(f"operation {number} ({op}) is missing its path", bad_request=True)
        if op in ("add", "replace", "test") and "value" not in operation:
            raise PatchError(f"operation {number} ({op}) is missing its value", bad_request=True)
        value = copy.deepcopy(operation.get("value"))
        if op == "add":
            result = _add(result, path, value, "add")
        elif op == "replace":
            result = _add(result, path, value, "replace", replace=True)
        elif op == "remove":
            _remove(result, path, "remove")
        elif op == "test":
            if _get(result, path, "test") != value:
                raise PatchError(f"testing value {path} failed: test failed")
        elif op in ("move", "copy"):
            source = operation.get("from")
            if not isinstance(source, str):
                raise PatchError(f"operation {number} ({op}) is missing from", bad_request=True)
            moved = _remove(result, source, op) if op == "move" else _get(result, source, op)
            result = _add(result, path, copy.deepcopy(moved), op)
        else:
            raise PatchError(f"Unexpected kind: {op}", bad_request=True)
    return result


# --- RFC 7386 ---------------------------------------------------------------------------


def merge_patch(doc: Any, patch: Any) -> Any:
    """Apply a JSON merge patch: objects merge, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- strategic merge --------------------------------------------------------------------


def _merge_key(kind: str, path: tuple[str, ...]) -> str | None:
    return MERGE_KEYS.get((kind, path), MERGE_KEYS.get(("*", path)))


def _strip_directives(value: Any) -> Any:
    """``value`` without strategic-merge directives (``$``-keys and ``$patch`` list items)."""
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value if not _is_directive_item(v)]
    return value


def _is_directive_item(item: Any) -> bool:
    return isinstance(item, dict) and "$patch" in item


def _merge_list(
    kind: str, path: tuple[str, ...], key: str, original: list[Any], patch: list[Any]
) -> list[Any]:
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return [_strip_directives(i) for i in patch if not _is_directive_item(i)]
    if key == "":
        merged = list(original)
        merged.extend(item for item in patch if item not in merged)
        return merged
    merged = [copy.deepcopy(item) for item in original]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(
                f"map: {item} does not contain declared merge key: {key}", bad_request=True
            )
        position = next(
            (
                i
                for i, old in enumerate(merged)
                if isinstance(old, dict) and old.get(key) == item[key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if position is not None:
                merged.pop(position)
        elif position is None:
            merged.append(_strip_directives(item))
        else:
            merged[position] = _merge_map(kind, path, merged[position], item)
    return merged


def _order(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    def identity(item: Any) -> Any:
        return item.get(key) if key and isinstance(item, dict) else item

    wanted = [identity(o) for o in order]
    ranked = sorted(
        enumerate(items),
        key=lambda pair: (
            wanted.index(identity(pair[1])) if identity(pair[1]) in wanted else len(wanted),
            pair[0],
        ),
    )
    return [item for _, item in ranked]


def _merge_map(kind: str, path: tuple[str, ...], original: Any, patch: Json) -> Any:
    directive = patch.get("$patch")
    if directive == "replace":
        return _strip_directives(patch)
    if directive not in (None, "merge", "delete"):
        raise PatchError(f"Unknown patch type: {directive} in map: {patch}", bad_request=True)
    result: Json = copy.deepcopy(original) if isinstance(original, dict) else {}
    orders: dict[str, list[Any]] = {}
    for field, value in patch.items():
        if field.startswith("$setElementOrder/"):
            orders[field.split("/", 1)[1]] = value if isinstance(value, list) else []
        elif field.startswith("$deleteFromPrimitiveList/"):
            name = field.split("/", 1)[1]
            if isinstance(result.get(name), list) and isinstance(value, list):
                result[name] = [v for v in result[name] if v not in value]
        elif field.startswith("$"):
            continue
        elif value is None:
            result.pop(field, None)
        elif isinstance(value, dict):
            if value.get("$patch") == "delete":
                result.pop(field, None)
            else:
                result[field] = _merge_map(kind, (*path, field), result.get(field), value)
        elif isinstance(value, list):
            key = _merge_key(kind, (*path, field))
            old = result.get(field)
            if key is not None and isinstance(old, list):
                result[field] = _merge_list(kind, (*path, field), key, old, value)
            else:
                result[field] = [_strip_directives(v) for v in value if not _is_directive_item(v)]
        else:
            result[field] = value
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    for field, order in orders.items():
        if isinstance(result.get(field), list):
            result[field] = _order(result[field], order, _merge_key(kind, (*path, field)))
    return result


def strategic_merge_patch(doc: Json, patch: object) -> Json:
    """Apply a strategic merge patch to ``doc`` (its ``kind`` picks the merge keys)."""
    if not isinstance(patch, dict):
        raise PatchError("invalid JSON document", bad_request=True)
    merged = _merge_map(str(doc.get("kind", "")), (), doc, patch)
    assert isinstance(merged, dict)
    return merged


def apply(content_type: str, doc: Json, patch: object) -> Json:
    """Apply ``patch`` in the format ``content_type`` names; raises ``PatchError``."""
    if content_type == JSON_PATCH:
        result = json_patch(doc, patch)
    elif content_type == MERGE_PATCH:
        if not isinstance(patch, dict):
            raise PatchError("invalid JSON document", bad_request=True)
        result = merge_patch(doc, patch)
    else:
        result = strategic_merge_patch(doc, patch)
    if not isinstance(result, dict):
        raise PatchError("the patch does not leave an object")
    return result
