"""Publishing a node's pool: make the API hold exactly the ResourceSlices ``slices`` built.

The node agent calls ``Publisher.publish`` at start, when a chip's health changes and on
every resync. One call lists the driver's slices of the node and compares them with what
was built (quantities by value, taint timestamps ignored). When they match, nothing is
written. Otherwise the pool moves to the next generation: every built slice is created or
replaced (conditionally on the resourceVersion listed) with the new ``spec.pool.generation``
and slices that should not exist are deleted. So a slice someone else edited, deleted or
added is put back on the next call, and consumers that follow the highest generation never
mix old and new slices.

Every slice carries the ``slices.LABELS`` and an ownerReference to its Node, so the
garbage collector removes the pool with the node. A write that loses a race (409, 404)
starts the call over from a fresh list, up to ``attempts`` times; other API failures
become ``errors.PublishError`` with ``retryable`` from ``vnpu_service.kubeapi``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import structlog

from vnpu_core import errors as core_errors
from vnpu_core import quantities
from vnpu_dra_driver import cluster, errors, slices
from vnpu_service import kubeapi

Json = dict[str, Any]
log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one ``publish`` did: the pool generation now in the API and the slices written."""

    generation: int
    created: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.deleted)


class Publisher:
    """Writes pools through ``api`` (``cluster.SliceApi``) for driver ``driver``."""

    def __init__(
        self, api: cluster.SliceApi, driver: str = slices.DRIVER, attempts: int = 5
    ) -> None:
        self._api = api
        self._driver = driver
        self._attempts = attempts

    def publish(self, node: str, built: Sequence[Json]) -> Outcome:
        """Make the API hold ``built`` (``slices.build``'s output) for ``node``.

        The generation in ``built`` is ignored: the publisher keeps the pool's current one
        when nothing differs and takes the next one when anything does.
        """
        for _ in range(self._attempts):
            try:
                return self._sync(node, built)
            except (kubeapi.Conflict, kubeapi.NotFound) as exc:
                log.info("slices_write_raced", node=node, reason=exc.reason)
            except kubeapi.ApiError as exc:
                raise errors.PublishError(node, str(exc), retryable=exc.retryable) from exc
        raise errors.PublishError(
            node, f"other writers kept changing the pool ({self._attempts} tries)", retryable=True
        )

    def _sync(self, node: str, built: Sequence[Json]) -> Outcome:
        try:
            owner = _owner(self._api.get_node(node))
        except kubeapi.NotFound as exc:
            raise errors.PublishError(
                node, "the Node does not exist (yet)", retryable=True
            ) from exc
        existing = {s["metadata"]["name"]: s for s in self._api.list_slices(node, self._driver)}
        current = max((_generation(s) for s in existing.values()), default=0)
        wanted = [_owned(s, owner) for s in built]
        names = [s["metadata"]["name"] for s in wanted]
        unchanged = current > 0 and set(existing) == set(names)
        if unchanged and all(_same(existing[s["metadata"]["name"]], s, current) for s in wanted):
            return Outcome(current)
        generation = current + 1
        created: list[str] = []
        updated: list[str] = []
        for body in wanted:
            body["spec"]["pool"]["generation"] = generation
            name = body["metadata"]["name"]
            old = existing.get(name)
            if old is None:
                self._api.create_slice(body)
                created.append(name)
            else:
                body["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
                _keep_taint_times(body, old)
                self._api.replace_slice(name, body)
                updated.append(name)
        deleted = sorted(set(existing) - set(names))
        for name in deleted:
            self._api.delete_slice(name, existing[name]["metadata"].get("resourceVersion", ""))
        outcome = Outcome(generation, tuple(created), tuple(updated), tuple(deleted))
        log.info(
            "slices_published",
            node=node,
            generation=generation,
            created=len(created),
            updated=len(updated),
            deleted=len(deleted),
        )
        return outcome


def _owner(node: Json) -> Json:
    metadata = node.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "name": metadata.get("name", ""),
        "uid": metadata.get("uid", ""),
        "controller": True,
    }


def _owned(built: Json, owner: Json) -> Json:
    body = copy.deepcopy(built)
    body["metadata"]["ownerReferences"] = [dict(owner)]
    return body


def _generation(found: Json) -> int:
    return int(((found.get("spec") or {}).get("pool") or {}).get("generation") or 0)


def _same(found: Json, wanted: Json, generation: int) -> bool:
    """Whether the API's slice says what ``wanted`` says at ``generation``."""
    metadata = found.get("metadata") or {}
    labels = metadata.get("labels") or {}
    if any(labels.get(k) != v for k, v in wanted["metadata"]["labels"].items()):
        return False
    owners = [(o.get("kind"), o.get("uid")) for o in metadata.get("ownerReferences") or []]
    if [(o["kind"], o["uid"]) for o in wanted["metadata"]["ownerReferences"]] != owners:
        return False
    spec = copy.deepcopy(wanted["spec"])
    spec["pool"]["generation"] = generation
    return bool(comparable(found.get("spec") or {}) == comparable(spec))


def comparable(value: Any, key: str = "") -> Any:
    """A slice's spec as compared: quantities as numbers (the API stores ``24576Mi`` as
    ``24Gi``), taints without ``timeAdded`` (the API fills it in)."""
    if isinstance(value, dict):
        return {k: comparable(v, k) for k, v in value.items()}
    if isinstance(value, list):
        if key == "taints":
            return [comparable({k: v for k, v in t.items() if k != "timeAdded"}) for t in value]
        if key == "validValues":
            return [_number(v) for v in value]
        return [comparable(v) for v in value]
    if key in ("value", "default", "min", "max", "step") and isinstance(value, str):
        return _number(value)
    return value


def _number(value: object) -> Fraction | object:
    try:
        return quantities.parse(value).value
    except core_errors.QuantityError:
        return value


def _keep_taint_times(body: Json, old: Json) -> None:
    """Carry each unchanged taint's ``timeAdded`` over, so a rewrite does not restart it."""
    times: dict[tuple[str, str, str, str], str] = {}
    for device in _devices(old):
        for taint in device.get("taints") or []:
            if taint.get("timeAdded"):
                key = (device["name"], taint["key"], taint.get("value", ""), taint["effect"])
                times[key] = taint["timeAdded"]
    for device in _devices(body):
        for taint in device.get("taints") or []:
            key = (device["name"], taint["key"], taint.get("value", ""), taint["effect"])
            if key in times:
                taint["timeAdded"] = times[key]


def _devices(found: Json) -> Iterable[Json]:
    return (found.get("spec") or {}).get("devices") or []
