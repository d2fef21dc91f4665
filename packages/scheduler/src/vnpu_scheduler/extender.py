"""The filter and prioritize verbs: one allocator fit per candidate node, explained for a person.

``app`` calls ``Extender.filter`` and ``Extender.prioritize`` with parsed ``wire.ExtenderArgs``.
Each candidate node's ``cache.NodeState`` gives the inventory and usage; ``judge`` turns it
into a ``Verdict``: the node fits (with a 0-10 score), or a reason code and a sentence that
goes into ``FailedNodes`` (eviction could help) or ``FailedAndUnresolvableNodes`` (it never
could: no such chip, unavailable node, unknown usage, a request no chip can take, a
pod its NPU quotas hold back: ``quota``, the refusal ``app`` computes). The pod
is parsed and rounded here, whether or not the webhook ran. Fit results are remembered on
the node state per request shape, so prioritize after filter, and identical pods, cost a
dictionary lookup until that node changes. After each filter of an NPU pod, ``observe``
hears the outcome (``tenancy.Outcome``: some node fits, only room is short, quota, or no
node could ever take it) and the candidate nodes, for the reclaimer.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vnpu_core import allocator, requests
from vnpu_core import errors as core_errors
from vnpu_scheduler import cache, gang, inflight, metrics, tenancy, wire

Json = dict[str, Any]
Observer = Callable[[Json, tenancy.Outcome, tuple[str, ...]], None]  # pod, outcome, nodes
FIT = "fit"
UNAVAILABLE = "node-unavailable"
USAGE_UNKNOWN = "usage-unknown"
UNKNOWN_NODE = "unknown-node"
BAD_REQUEST = "bad-request"
QUOTA = "quota"
# A bind to a locked node waits for its device plugin's Allocate; while the lock is held (or
# this replica has binds queued for the node) it scores this much lower, so pods scheduled
# meanwhile spread to nodes that can bind at once instead of queueing behind one lock.
LOCK_PENALTY = 5
RECENT_PODS = 4096


@dataclass(frozen=True, slots=True)
class Verdict:
    """One node's answer for one pod."""

    fits: bool
    score: int
    reason: str  # FIT, a budgets.Reason value, or one of the codes above
    message: str = ""
    unresolvable: bool = False


def request_key(pod: requests.PodRequest, policy: requests.Policy) -> tuple[Any, ...]:
    """Everything about a pod that can change a fit's outcome or score (not container names)."""
    shapes = tuple(
        (
            r.init,
            r.model.common_word,
            r.count,
            r.memory_mib,
            r.core_percent,
            r.whole,
            r.soft,
            tuple(t.name for t in r.templates),
            r.pinned,
        )
        for r in pod.requests
    )
    lists = tuple(
        tuple(sorted((word, tuple(sorted(uuids))) for word, uuids in (table or {}).items()))
        for table in (pod.use_uuids, pod.no_use_uuids)
    )
    return (policy, pod.soft, pod.chip_policy, pod.node_policy, shapes, lists)


class MemoKey:
    """A ``request_key`` with its hash computed once: one filter looks it up on every node."""

    __slots__ = ("_hash", "value")

    def __init__(self, value: tuple[Any, ...]) -> None:
        self.value = value
        self._hash = hash(value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, MemoKey) and self.value == other.value)


def judge(
    state: cache.NodeState | None,
    name: str,
    pod: requests.PodRequest,
    policy: requests.Policy,
    key: MemoKey | None = None,
    ahead: inflight.Ahead = (),
) -> Verdict:
    """Whether ``pod`` fits the node in ``state``; ``key`` (``request_key``) enables the memo.

    ``ahead``: binds in flight to the node, fitted first (``key`` must then name them)."""
    if state is None:
        return Verdict(False, 0, UNKNOWN_NODE, f"node {name} is not known to vnpu-scheduler yet")
    if key is not None:
        known: Verdict | None = state.memo.get(key)
        if known is not None:
            return known
    verdict = _judge(state, pod, policy, tuple(r for _, r in ahead))
    if key is not None:
        if len(state.memo) >= cache.MEMO_LIMIT:
            state.memo.clear()
        state.memo[key] = verdict
    return verdict


def _judge(
    state: cache.NodeState,
    pod: requests.PodRequest,
    policy: requests.Policy,
    ahead: Sequence[requests.PodRequest] = (),
) -> Verdict:
    """``judge`` without the memo."""
    node = state.read.node
    if node is None:
        return Verdict(False, 0, UNAVAILABLE, f"NPUs unavailable: {state.read.unavailable}", True)
    if state.usage.problems:
        problem = state.usage.problems[0]
        error = problem.error
        return Verdict(
            False,
            0,
            USAGE_UNKNOWN,
            f"chip usage unknown: pod {problem.pod} has an unreadable {error.key} "
            f"({error.problem} at {error.fragment!r})",
            True,
        )
    usage = allocator.assume(node, state.usage.usage, ahead, policy) if ahead else state.usage.usage
    outcome = allocator.fit(node, usage, pod, policy)
    if isinstance(outcome, allocator.Rejection):
        return Verdict(False, 0, outcome.reason.value, outcome.message, outcome.unresolvable)
    return Verdict(True, outcome.score, FIT)


class Extender:
    """Filter and prioritize over the node cache."""

    def __init__(
        self,
        nodes: cache.ClusterCache,
        policy: requests.Policy,
        stats: metrics.Metrics,
        memo: bool = True,
        busy: Callable[[str], bool] = lambda _: False,
        quota: Callable[[Json, requests.PodRequest], str] = lambda _pod, _request: "",
        observe: Observer = lambda *_: None,
        *,
        in_flight: inflight.InFlight | None = None,
        reservation_seconds: float = 0.0,
    ) -> None:
        self._busy = busy
        self._reservation_seconds = reservation_seconds
        self.reserved: Callable[[Json, str], None] = lambda _pod, _node: None
        """Called with a gang member and the node the filter reserved for it (the app writes
        the annotation other replicas read)."""
        self._in_flight = in_flight or inflight.InFlight()
        self._quota = quota
        self._observe = observe
        self._recent: collections.OrderedDict[tuple[str, str], Json] = collections.OrderedDict()
        self._keys: dict[tuple[Any, ...], MemoKey] = {}
        self._cache = nodes
        self._policy = policy
        self._stats = stats
        self._memo = memo

    def _key(self, value: tuple[Any, ...]) -> MemoKey:
        """The one ``MemoKey`` object per request shape, so memo lookups compare by identity."""
        key = self._keys.get(value)
        if key is None:
            if len(self._keys) >= cache.MEMO_LIMIT:
                self._keys.clear()
            key = self._keys[value] = MemoKey(value)
        return key

    def _ahead_key(self, key: MemoKey | None, ahead: inflight.Ahead) -> MemoKey | None:
        """The memo key of a request fitted behind the binds ``ahead`` (by their pods)."""
        if key is None:
            return None
        return self._key((*key.value, "behind", *(who for who, _ in ahead)))

    def recent(self, namespace: str, name: str) -> Json | None:
        """The pod as kube-scheduler last sent it to this replica (for the bind that follows)."""
        return self._recent.get((namespace, name))

    def _remember(self, pod: Json) -> None:
        meta = pod.get("metadata") or {}
        key = (str(meta.get("namespace") or "default"), str(meta.get("name")))
        self._recent[key] = pod
        self._recent.move_to_end(key)
        if len(self._recent) > RECENT_PODS:
            self._recent.popitem(last=False)

    def _verdicts(
        self, args: wire.ExtenderArgs, quota: bool = True
    ) -> tuple[requests.PodRequest | None, dict[str, tuple[Verdict, cache.NodeState | None]]]:
        """The pod's request and a verdict per candidate node; no request when the pod asks
        for no NPU (every node passes) or its request cannot be read (every node refuses).

        ``quota`` applies the quota check (the filter's; prioritize scores only the nodes the
        filter passed, and the bind checks the quota again)."""
        self._remember(args.Pod)
        names = wire.candidate_names(args)
        try:
            pod = requests.from_pod(args.Pod, self._cache.catalog)
        except core_errors.RequestError as exc:
            refused = Verdict(False, 0, BAD_REQUEST, str(exc), True)
            return None, dict.fromkeys(names, (refused, None))
        if not pod.wants_npu:
            return None, {}
        key = self._key(request_key(pod, self._policy)) if self._memo else None
        states: Mapping[str, cache.NodeState | None]
        if args.Nodes is not None:
            states = {
                str(n["metadata"]["name"]): self._cache.state_of_object(n) for n in args.Nodes.items
            }
        else:
            states = self._cache.states(names)
        in_flight = self._in_flight.by_node(inflight.name_of(args.Pod))
        found = {}
        for name in names:
            state = states.get(name)
            ahead = in_flight.get(name, ())
            memo = self._ahead_key(key, ahead) if ahead else key
            found[name] = (judge(state, name, pod, self._policy, memo, ahead), state)
        if not quota or all(not v.fits and v.unresolvable for v, _ in found.values()):
            return pod, found  # no node could ever take it: that is the explanation, not a quota
        held_back = self._quota(args.Pod, pod)
        if held_back:  # no node can help, and evicting other namespaces' pods would not either
            verdict = Verdict(False, 0, QUOTA, held_back, True)
            return pod, {name: (verdict, state) for name, (_, state) in found.items()}
        return pod, found

    def filter(self, args: wire.ExtenderArgs) -> Json:
        request, verdicts = self._verdicts(args)
        names = wire.candidate_names(args)
        if not verdicts:
            self._stats.filter_outcomes.labels(FIT).inc(len(names))
            return wire.filter_result(args, names, {}, {})
        passed: list[str] = []
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        counts: collections.Counter[str] = collections.Counter()
        for name, (verdict, _) in verdicts.items():
            counts[verdict.reason] += 1
            if verdict.fits:
                passed.append(name)
            elif verdict.unresolvable:
                unresolvable[name] = verdict.message
            else:
                failed[name] = verdict.message
        for reason, count in counts.items():
            self._stats.filter_outcomes.labels(reason).inc(count)
        if passed:
            outcome = tenancy.Outcome.FIT
        elif failed:
            outcome = tenancy.Outcome.CAPACITY
        elif QUOTA in counts:
            outcome = tenancy.Outcome.QUOTA
        else:
            outcome = tenancy.Outcome.UNRESOLVABLE
        self._observe(args.Pod, outcome, tuple(names))
        group = gang.group_of(args.Pod)
        if group and passed and request is not None and self._reservation_seconds > 0:
            passed = [self._reserve(args.Pod, request, group, passed, verdicts)]
        return wire.filter_result(args, passed, failed, unresolvable)

    def _reserve(
        self,
        pod: Json,
        request: requests.PodRequest,
        group: str,
        passed: list[str],
        verdicts: Mapping[str, tuple[Verdict, cache.NodeState | None]],
    ) -> str:
        """Place a gang member on one node and keep its request there until its bind
        (``gang``): the node where most of its group is reserved (its collectives stay on
        one node), then the best score, then the name."""
        members = self._in_flight.members(group)
        node = max(sorted(passed), key=lambda n: (members.get(n, 0), verdicts[n][0].score))
        self._in_flight.reserve(
            node, inflight.name_of(pod), request, group, self._reservation_seconds
        )
        self._stats.gang_reservations.inc()
        self.reserved(pod, node)
        return node

    def prioritize(self, args: wire.ExtenderArgs) -> list[Json]:
        """0-10 per node; a node busy with a bind scores LOCK_PENALTY lower."""
        _, verdicts = self._verdicts(args, quota=False)
        if not verdicts:
            return wire.priority_list(dict.fromkeys(wire.candidate_names(args), 0))
        scores = {}
        for name, (verdict, state) in verdicts.items():
            held = (state is not None and state.locked) or self._busy(name)
            scores[name] = max(0, verdict.score - LOCK_PENALTY) if held else verdict.score
        return wire.priority_list(scores)
