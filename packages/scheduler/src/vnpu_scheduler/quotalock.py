"""Quota locks: Leases that serialise, across replicas, the binds of pods under the same quotas.

Two replicas binding two pods of one namespace at once could each read the namespace's
usage, each see room for one more pod, and both bind. The binder therefore holds the
quota lock of the pod's scope while it re-reads usage, checks the quotas and writes the
Binding (``tenancy.QuotaBook.scope``): the Lease ``vnpu-quota.<namespace>`` for a namespace
in no team, and one Lease ``vnpu-quota-teams`` for every namespace in a team, since the
team rule reads the whole cohort. The lock is the innermost one a bind takes (after the
node lock), and nothing is waited for while it is held but API calls, so locks cannot
deadlock.

``hold`` creates the Lease (``holderIdentity`` this replica and pod, ``leaseDurationSeconds``
the bind timeout) in ``--lock-namespace``; while another holder's Lease is live it polls
every 50 ms until the caller's deadline (``cluster.deadline_at``); a Lease whose
``renewTime`` + duration has passed (its holder died mid-bind) is taken over by a
compare-and-swap replace. The Lease is deleted on the way out, with its resourceVersion as
precondition, so a lock taken over meanwhile is never deleted by the old holder.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import structlog

from vnpu_scheduler import cluster, errors, leader
from vnpu_service import kubeapi

log = structlog.get_logger(__name__)
Json = dict[str, Any]
Runner = Callable[..., Awaitable[Any]]
POLL_SECONDS = 0.05
TEAMS = "teams"  # the scope of every namespace in a team


def lease_name(scope: str) -> str:
    return "vnpu-quota-teams" if scope == TEAMS else f"vnpu-quota.{scope}"


class QuotaLocks:
    """Quota Leases in ``namespace``, held at most ``duration`` seconds by a live holder."""

    def __init__(self, api: cluster.Cluster, run: Runner, namespace: str, duration: float) -> None:
        self._api = api
        self._run = run
        self._namespace = namespace
        self._duration = max(1, math.ceil(duration))
        self._replica = uuid.uuid4().hex[:8]

    def _body(self, name: str, holder: str, version: str = "") -> Json:
        metadata: Json = {"name": name, "namespace": self._namespace}
        if version:
            metadata["resourceVersion"] = version
        now = leader.timestamp()
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": self._duration,
                "acquireTime": now,
                "renewTime": now,
            },
        }

    @contextlib.asynccontextmanager
    async def hold(self, scope: str, who: str) -> AsyncIterator[None]:
        """Hold the quota lock of ``scope`` for pod ``who``. Raises BindError when the
        deadline passes first (the caller's ``asyncio.timeout`` cancels the wait)."""
        name = lease_name(scope)
        holder = f"{self._replica}/{who}"
        version = await self._acquire(name, holder, who)
        try:
            yield
        finally:
            await asyncio.shield(self._release(name, version))

    async def _acquire(self, name: str, holder: str, who: str) -> str:
        while True:
            try:
                made = await self._run(
                    self._api.create_lease, self._namespace, self._body(name, holder)
                )
                return str((made.get("metadata") or {}).get("resourceVersion") or "")
            except kubeapi.Conflict:
                pass  # someone holds it
            except kubeapi.NotFound as exc:
                raise errors.BindError(
                    who,
                    "",
                    "quota-lock",
                    f"the quota lock cannot be taken: namespace {self._namespace} "
                    "(--lock-namespace) does not exist",
                ) from exc
            current = await self._run(self._api.get_lease, self._namespace, name)
            if current is not None and leader.expired(current):
                version = str((current.get("metadata") or {}).get("resourceVersion") or "")
                try:
                    taken = await self._run(
                        self._api.replace_lease,
                        self._namespace,
                        name,
                        self._body(name, holder, version),
                    )
                except kubeapi.Conflict:
                    continue  # another replica took it over first
                gone = (current.get("spec") or {}).get("holderIdentity")
                log.warning("quota_lock_taken_over", lease=name, previous=gone, pod=who)
                return str((taken.get("metadata") or {}).get("resourceVersion") or "")
            await asyncio.sleep(POLL_SECONDS)

    async def _release(self, name: str, version: str) -> None:
        try:
            await self._run(self._api.delete_lease, self._namespace, name, version)
        except kubeapi.ApiError as exc:  # expires by itself after leaseDurationSeconds
            log.warning("quota_lock_release_failed", lease=name, error=str(exc))
