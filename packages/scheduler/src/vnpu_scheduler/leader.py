"""One replica at a time: a Lease held, renewed and taken over when its holder stops renewing.

``reclaimer`` calls ``LeaderLease.hold`` before each round and acts only when it answers
True, so across replicas one evicts (the quota locks of ``quotalock`` are held for one bind
only; this Lease is held for as long as the replica lives). The Lease (``vnpu-reclaimer``
in ``--lock-namespace``) names the holder (``holderIdentity``: host name and a random
suffix per process) and ``leaseDurationSeconds``:

* no Lease: create it (a race lost to another replica is a 409: not the leader);
* ours: renew it, a compare-and-swap replace of ``renewTime`` on our resourceVersion; a 409
  or 404 means another replica took it over or it was deleted: not the leader this round
  (a deleted Lease is created again on the next);
* another holder's, renewed within its duration: not the leader;
* another holder's, expired (``renewTime`` + duration passed: the holder died or hangs):
  taken over by a compare-and-swap replace.

An API failure answers False (the replica does nothing it was not sure to lead) and is
logged; ``release`` deletes the Lease on shutdown (with our resourceVersion as
precondition), so another replica takes over at once instead of after the duration. The
expiry is read on this replica's clock against the holder's ``renewTime``: clocks that
disagree by more than the duration let two replicas lead at once (as for any Lease).
"""

from __future__ import annotations

import math
import socket
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from vnpu_scheduler import cluster
from vnpu_service import kubeapi

log = structlog.get_logger(__name__)
Json = dict[str, Any]
Runner = Callable[..., Awaitable[Any]]
_MICRO = "%Y-%m-%dT%H:%M:%S.%fZ"


def timestamp() -> str:
    """Now as a Lease's MicroTime (RFC 3339 in UTC with microseconds)."""
    return datetime.now(UTC).strftime(_MICRO)


def expired(lease: Json) -> bool:
    """Whether the Lease's holder has not renewed it within its duration (or it is malformed)."""
    spec = lease.get("spec") or {}
    renewed = spec.get("renewTime") or spec.get("acquireTime")
    duration = spec.get("leaseDurationSeconds")
    if not renewed or not isinstance(duration, int):
        return True
    try:  # RFC 3339 with Z or an offset: the Python client sends ours as +00:00
        when = datetime.fromisoformat(str(renewed))
    except ValueError:
        return True
    if when.tzinfo is None:
        return True
    return datetime.now(UTC) > when + timedelta(seconds=duration)


def _version(lease: Json) -> str:
    return str((lease.get("metadata") or {}).get("resourceVersion") or "")


class LeaderLease:
    """The Lease ``name`` in ``namespace``, held by this process while it renews it."""

    def __init__(
        self, api: cluster.Cluster, run: Runner, namespace: str, name: str, duration: float
    ) -> None:
        self._api = api
        self._run = run
        self.namespace = namespace
        self.name = name
        self._duration = max(1, math.ceil(duration))
        self.identity = f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"
        self._version = ""  # resourceVersion of our Lease while we hold it
        self._acquired = ""

    @property
    def held(self) -> bool:
        return bool(self._version)

    def _body(self, version: str = "") -> Json:
        metadata: Json = {"name": self.name, "namespace": self.namespace}
        if version:
            metadata["resourceVersion"] = version
        now = timestamp()
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self._duration,
                "acquireTime": self._acquired or now,
                "renewTime": now,
            },
        }

    async def hold(self) -> bool:
        """Acquire or renew the Lease; True while this process holds it."""
        try:
            return await self._hold()
        except kubeapi.ApiError as exc:
            log.warning("leader_lease_unknown", lease=self.name, error=str(exc))
            return False

    async def _hold(self) -> bool:
        if self._version:
            try:
                renewed = await self._run(
                    self._api.replace_lease, self.namespace, self.name, self._body(self._version)
                )
            except (kubeapi.Conflict, kubeapi.NotFound):
                self._lost("taken over or deleted")
                return False
            self._version = _version(renewed)
            return True
        self._acquired = ""
        try:
            made = await self._run(self._api.create_lease, self.namespace, self._body())
        except kubeapi.Conflict:
            return await self._take_over()
        except kubeapi.NotFound:
            log.error(
                "leader_lease_namespace_missing",
                lease=self.name,
                namespace=self.namespace,
                effect="nothing is reclaimed until --lock-namespace exists",
            )
            return False
        self._won(made, "")
        return True

    async def _take_over(self) -> bool:
        current = await self._run(self._api.get_lease, self.namespace, self.name)
        if current is None or not expired(current):
            return False  # live holder (or deleted just now: created next round)
        try:
            taken = await self._run(
                self._api.replace_lease, self.namespace, self.name, self._body(_version(current))
            )
        except (kubeapi.Conflict, kubeapi.NotFound):
            return False  # another replica was first
        self._won(taken, str((current.get("spec") or {}).get("holderIdentity") or ""))
        return True

    def _won(self, lease: Json, previous: str) -> None:
        self._version = _version(lease)
        self._acquired = str((lease.get("spec") or {}).get("acquireTime") or "")
        log.info("leader_lease_acquired", lease=self.name, holder=self.identity, previous=previous)

    def _lost(self, why: str) -> None:
        self._version = ""
        log.warning("leader_lease_lost", lease=self.name, holder=self.identity, why=why)

    async def release(self) -> None:
        """Give the Lease up (shutdown): delete it if it is still ours."""
        if not self._version:
            return
        version, self._version = self._version, ""
        try:
            await self._run(self._api.delete_lease, self.namespace, self.name, version)
        except kubeapi.ApiError as exc:  # it expires by itself after its duration
            log.warning("leader_lease_release_failed", lease=self.name, error=str(exc))
