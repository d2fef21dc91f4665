"""Reclaim: evict borrowers' pods so that a team below its nominal gets its capacity back.

``app`` starts ``Reclaimer.run`` in its lifespan when quotas are on and a tenants config is
set; every ``--reclaim-interval`` seconds one round runs, on one replica only: the one that
holds the Lease ``vnpu-reclaimer`` (``leader.LeaderLease``, in ``--lock-namespace``). A
replica contends for the Lease only while its own filters have seen a lender's pod that
needs room (or it still waits for pods it evicted to end), and gives it up when that is
over: the pending pods are known to the replica kube-scheduler calls, which need not be the
one that held the Lease before. A round does nothing while there are no teams. Otherwise:

1. **Lenders.** The pending pods (``quotagate.QuotaGate.pending``) of a team whose last
   filter refused them for lack of room only (``tenancy.Outcome.CAPACITY``: not for a
   quota, not for a reason no eviction could help), ranked by ``ranking.order``; only
   lenders' pods (the ``nominal`` tier: their team is below its nominal) are helped.
2. **Victims.** For each lender, ``reclaim.reclaim`` over the running pods of the teams
   (the cache's ``holders``): borrowers' pods only, lowest priority first, never taking a
   team below its nominal and never the lender's own team. Its ``fits`` callback runs the
   allocator (``allocator.fit``) on each node of the lender's last filter that the pod may
   use (``placement.refusal``), with the candidate victims' usage taken off the node
   (``ClusterCache.usage_without``), so the room freed is on one node the lender can use.
3. **Eviction.** Each victim is evicted through the Eviction API (``cluster.evict_pod``,
   which respects PodDisruptionBudgets on a real cluster), gets a Warning event
   ``NPUCapacityReclaimed`` with the reason sentence, is counted
   (``vnpu_scheduler_reclaim_evictions_total{team}``, the wait in
   ``vnpu_scheduler_reclaim_wait_seconds``) and logged (``npu_capacity_reclaimed``).

Bookkeeping, so nothing is evicted twice or more than once per need: a pod evicted by this
replica stays "in flight" until the cache sees it gone; it is never a candidate again, does
not count for its team, and its room stays reserved for its lender (a later lender in the
same round finds its own). A lender waits until every pod evicted for it is gone, and is
helped again only after a filter newer than its last eviction still found no room.
Terminating pods this replica did not evict (deleted by someone, or evicted by a previous
leader) count as gone already: a new leader never evicts again for room that is coming.
A pod whose eviction was refused with 429 (its PodDisruptionBudget) is left alone for
``BLOCKED_ROUNDS`` rounds. Any API failure is logged and counted, and the next round tries
again from what the cache shows then.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from vnpu_core import allocator, fairshare, ranking, reclaim, requests
from vnpu_scheduler import cache, cluster, leader, metrics, placement, quotagate, shares, tenancy
from vnpu_service import kubeapi

log = structlog.get_logger(__name__)
Json = dict[str, Any]
Runner = Callable[..., Awaitable[Any]]
EventSink = Callable[[Json, str, str, str], None]  # pod, type, reason, message
LEASE_NAME = "vnpu-reclaimer"
BLOCKED_ROUNDS = 6  # rounds a pod whose PodDisruptionBudget refused its eviction is skipped
EVENT_REASON = "NPUCapacityReclaimed"


@dataclass(frozen=True, slots=True)
class Plan:
    """One lender's reclaim: the pending pod, ``reclaim.reclaim``'s answer, and the victims' holders."""

    lender: tenancy.Pending
    team: str
    answer: reclaim.Reclaim
    holders: dict[str, cache.Holder]  # by fairshare pod name (namespace/name)


class Reclaimer:
    """The reclaim loop of one replica; acts while it holds ``lease``."""

    def __init__(
        self,
        gate: quotagate.QuotaGate,
        nodes: cache.ClusterCache,
        api: cluster.Cluster,
        run: Runner,
        stats: metrics.Metrics,
        policy: requests.Policy,
        lease: leader.LeaderLease,
        interval: float,
        event: EventSink,
    ) -> None:
        self._gate = gate
        self._cache = nodes
        self._api = api
        self._run = run
        self._stats = stats
        self._policy = policy
        self.lease = lease
        self._interval = interval
        self._event = event
        self._inflight: dict[str, str] = {}  # victim key -> the lender's uid
        self._waiting: dict[str, set[str]] = {}  # lender uid -> its victims not gone yet
        self._evicted_at: dict[str, float] = {}  # lender uid -> monotonic time of eviction
        self._blocked: dict[str, float] = {}  # victim key -> monotonic time it may be tried
        self.rounds = 0  # rounds finished, led or not (for tests and the debug log)

    async def run(self) -> None:
        """Rounds until cancelled; a round that fails is logged and the next one runs."""
        try:
            while True:
                try:
                    await self.round()
                except Exception:
                    log.exception("reclaim_round_failed")
                self.rounds += 1
                await asyncio.sleep(self._interval)
        finally:
            self._stats.reclaimer_leader.set(0)
            await asyncio.shield(self.lease.release())

    async def round(self) -> None:
        if not self._gate.book.teams.teams:
            return
        if not self._waiting and not any(self._eligible(p) for p in self._gate.pending()):
            # Nothing this replica's filters saw needs room: leave the Lease to a replica
            # whose filters did (kube-scheduler may call any one of them).
            if self.lease.held:
                await self.lease.release()
            self._stats.reclaimer_leader.set(0)
            return
        leading = await self.lease.hold()
        self._stats.reclaimer_leader.set(1 if leading else 0)
        if not leading:
            self._inflight.clear()  # the leader's own bookkeeping; another replica acts
            self._waiting.clear()
            return
        for plan in await asyncio.to_thread(self.plan):
            await self._carry_out(plan)

    # --- choosing ---------------------------------------------------------------------------

    def plan(self) -> list[Plan]:
        """The evictions this round: for each lender in queue order, its victims (if any)."""
        teams = self._gate.book.teams
        shared = shares.cohort(teams)
        units = teams.units()
        holders = self._cache.holders()
        present = {h.key for h in holders}
        waiting = self._gate.pending()
        self._forget(present, {p.uid for p in waiting})
        now = time.monotonic()
        running: list[fairshare.Pod] = []
        by_name: dict[str, cache.Holder] = {}
        leaving: dict[str, set[str]] = {}  # node -> keys of pods that count as gone there
        for holder in holders:
            team = teams.team_of(holder.namespace)
            if holder.terminating and holder.key not in self._inflight:
                leaving.setdefault(holder.node, set()).add(holder.key)
            if team is None or holder.terminating or holder.key in self._inflight:
                continue
            if self._blocked.get(holder.key, 0.0) > now:
                continue
            label = f"{holder.namespace}/{holder.name}"
            by_name[label] = holder
            spec = holder.pod.get("spec") or {}
            priority = spec.get("priority")
            stamp = (holder.pod.get("metadata") or {}).get("creationTimestamp")
            created = tenancy.epoch_seconds(stamp)
            running.append(
                fairshare.Pod(
                    label,
                    team.name,
                    shares.vector(holder.held, units),
                    priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
                    created,
                    holder.node,
                )
            )
        lenders: dict[str, tenancy.Pending] = {}
        queue: list[fairshare.Pod] = []
        for pending in waiting:
            pod = shares.pending_pod(teams, pending) if self._eligible(pending) else None
            if pod is not None:
                lenders[pod.name] = pending
                queue.append(pod)
        plans: list[Plan] = []
        for ranked in ranking.order(queue, shared, fairshare.usage(running)):
            if ranked.tier is not ranking.Tier.NOMINAL:
                continue
            lender = lenders[ranked.pod.name]
            fits = self._fits(lender, by_name, leaving)
            answer = reclaim.reclaim(ranked.pod, shared, running, fits)
            if not answer.victims:
                log.debug("reclaim_not_possible", pod=lender.label, reason=answer.reason)
                continue
            taken = {v.pod.name for v in answer.victims}
            running = [p for p in running if p.name not in taken]
            for victim in answer.victims:
                self._inflight[by_name[victim.pod.name].key] = lender.uid  # reserved for it
            plans.append(Plan(lender, ranked.pod.team, answer, by_name))
        return plans

    def _eligible(self, pending: tenancy.Pending) -> bool:
        if pending.outcome is not tenancy.Outcome.CAPACITY or pending.request is None:
            return False
        if pending.uid in self._waiting:
            return False
        evicted = self._evicted_at.get(pending.uid)
        return evicted is None or pending.filtered > evicted

    def _forget(self, present: set[str], pending: set[str]) -> None:
        """Drop what is gone: evicted pods, and lenders whose victims are all gone. A victim
        whose lender is no longer pending (bound elsewhere, deleted) reserves nothing: its
        room counts as free, like any terminating pod's."""
        for key in [
            k for k, uid in self._inflight.items() if k not in present or uid not in pending
        ]:
            del self._inflight[key]
        for uid in list(self._waiting):
            left = self._waiting[uid] & present
            if left:
                self._waiting[uid] = left
            else:
                del self._waiting[uid]
        now = time.monotonic()
        for key in [k for k, until in self._blocked.items() if until <= now]:
            del self._blocked[key]
        for uid in [u for u in self._evicted_at if u not in pending]:
            del self._evicted_at[uid]

    def _fits(
        self,
        lender: tenancy.Pending,
        by_name: dict[str, cache.Holder],
        leaving: dict[str, set[str]],
    ) -> Callable[[Sequence[fairshare.Pod]], bool]:
        """``reclaim.reclaim``'s ``fits``: with these victims gone, does the lender fit one of its nodes?"""
        request = lender.request
        assert request is not None  # checked by _eligible
        usable = [name for name in lender.nodes if self._usable(name, lender.pod)]
        known: dict[tuple[str, frozenset[str]], bool] = {}

        def fits(victims: Sequence[fairshare.Pod]) -> bool:
            on_node: dict[str, set[str]] = {}
            for victim in victims:
                on_node.setdefault(victim.node, set()).add(by_name[victim.name].key)
            for name in usable:
                gone = frozenset(on_node.get(name, set()) | leaving.get(name, set()))
                key = (name, gone)
                if key not in known:
                    known[key] = self._fits_on(name, gone, request)
                if known[key]:
                    return True
            return False

        return fits

    def _usable(self, name: str, pod: Any) -> bool:
        node = self._cache.node_object(name)
        return node is not None and (pod is None or not placement.refusal(pod, node))

    def _fits_on(self, name: str, gone: frozenset[str], request: requests.PodRequest) -> bool:
        state = self._cache.state(name)
        usage = self._cache.usage_without(name, gone)
        if state is None or state.read.node is None or usage is None or usage.problems:
            return False
        outcome = allocator.fit(state.read.node, usage.usage, request, self._policy)
        return isinstance(outcome, allocator.Assignment)

    # --- evicting ---------------------------------------------------------------------------

    async def _carry_out(self, plan: Plan) -> None:
        lender = plan.lender
        evicted: set[str] = set()
        for victim in plan.answer.victims:
            holder = plan.holders[victim.pod.name]
            if await self._evict(plan, victim, holder):
                evicted.add(holder.key)
            else:
                self._inflight.pop(holder.key, None)
        if evicted:
            self._waiting[lender.uid] = evicted
            self._evicted_at[lender.uid] = time.monotonic()

    async def _evict(self, plan: Plan, victim: reclaim.Victim, holder: cache.Holder) -> bool:
        """Evict one victim; True when the API took the eviction (or the pod was gone)."""
        lender = plan.lender
        label = f"{holder.namespace}/{holder.name}"
        try:
            await self._run(self._api.evict_pod, holder.namespace, holder.name, holder.key)
        except (kubeapi.NotFound, kubeapi.Conflict):
            log.info("reclaim_victim_gone", pod=label, lender=lender.label)
            return True  # gone already, or replaced by a pod of the same name
        except kubeapi.ApiError as exc:
            budget = exc.status == 429
            self._stats.reclaim_failures.labels(
                "disruption-budget" if budget else "api-error"
            ).inc()
            if budget:
                self._blocked[holder.key] = time.monotonic() + BLOCKED_ROUNDS * self._interval
            log.warning(
                "reclaim_eviction_failed",
                pod=label,
                lender=lender.label,
                status=exc.status,
                error=str(exc),
                effect="left alone for a while" if budget else "tried again next round",
            )
            return False
        waited = max(0.0, time.monotonic() - lender.first_seen)
        self._stats.reclaim_evictions.labels(victim.pod.team).inc()
        self._stats.reclaim_wait.observe(waited)
        message = (
            f"Evicted to give NPU capacity back to team {plan.team} for pod {lender.label}: "
            f"{victim.reason}"
        )
        self._event(holder.pod, "Warning", EVENT_REASON, message)
        log.info(
            "npu_capacity_reclaimed",
            pod=label,
            node=holder.node,
            team=victim.pod.team,
            lender=lender.label,
            lender_team=plan.team,
            waited_seconds=round(waited, 3),
            reason=victim.reason,
        )
        return True
