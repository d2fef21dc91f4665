"""The built-in node scores added to the extenders' scores, from kube-scheduler's default profile.

``scheduler`` calls :func:`score` with the nodes that passed every filter when more than one
did. Each plugin scores 0-100 per node (after its normalisation), times its default weight:

* NodeResourcesFit, ``LeastAllocated`` on cpu and memory (weight 1 each), plugin weight 1:
  ``(allocatable - requested) * 100 / allocatable`` per resource, averaged, where requested
  counts the pending pod and the pods on the node with the non-zero defaults (100m, 200 MiB);
* NodeResourcesBalancedAllocation, weight 1: ``(1 - |f_cpu - f_mem| / 2) * 100`` with
  ``f = requested / allocatable`` (capped at 1), on real requests; skipped (0) for a pod that
  requests neither cpu nor memory;
* TaintToleration, weight 3: fewer ``PreferNoSchedule`` taints the pod does not tolerate is
  better (normalised, reversed: the node with most such taints scores 0);
* NodeAffinity, weight 2: the sum of the weights of the matching preferred terms, normalised
  so that the best node scores 100.

PodTopologySpread (whose default constraints spread a ReplicaSet's pods), InterPodAffinity
(pod affinity is not read), ImageLocality and VolumeBinding (no images, no volumes in the
sandbox) are not scored. Integer arithmetic as in kube-scheduler. Pure code.
"""

from __future__ import annotations

from collections.abc import Sequence

from vnpu_sandbox.scheduling import nodeinfo, predicates

MAX_NODE_SCORE = 100
FIT_WEIGHT = 1
BALANCED_WEIGHT = 1
TAINT_WEIGHT = 3
AFFINITY_WEIGHT = 2


def least_requested(requested: int, capacity: int) -> int:
    if capacity == 0 or requested > capacity:
        return 0
    return ((capacity - requested) * MAX_NODE_SCORE) // capacity


def least_allocated(pod: predicates.PodFacts, info: nodeinfo.NodeInfo) -> int:
    assert info.facts is not None
    allocatable = info.facts.allocatable
    pairs = [
        (info.nonzero_milli_cpu + pod.demand.nonzero_milli_cpu, allocatable.milli_cpu),
        (info.nonzero_memory + pod.demand.nonzero_memory, allocatable.memory),
    ]
    total = weights = 0
    for requested, capacity in pairs:
        if capacity == 0:
            continue
        total += least_requested(requested, capacity)
        weights += 1
    return total // weights if weights else 0


def balanced_allocation(pod: predicates.PodFacts, info: nodeinfo.NodeInfo) -> int:
    if pod.demand.milli_cpu == 0 and pod.demand.memory == 0:
        return 0
    assert info.facts is not None
    allocatable = info.facts.allocatable
    fractions = [
        min(1.0, (info.milli_cpu + pod.demand.milli_cpu) / allocatable.milli_cpu)
        if allocatable.milli_cpu
        else None,
        min(1.0, (info.memory + pod.demand.memory) / allocatable.memory)
        if allocatable.memory
        else None,
    ]
    present = [f for f in fractions if f is not None]
    deviation = abs(present[0] - present[1]) / 2 if len(present) == 2 else 0.0
    return int((1 - deviation) * MAX_NODE_SCORE)


def _normalise(scores: dict[str, int], reverse: bool) -> dict[str, int]:
    """kube-scheduler's ``DefaultNormalizeScore`` to 0-100."""
    highest = max(scores.values(), default=0)
    if highest == 0:
        return dict.fromkeys(scores, MAX_NODE_SCORE if reverse else 0)
    result = {}
    for name, value in scores.items():
        scaled = MAX_NODE_SCORE * value // highest
        result[name] = MAX_NODE_SCORE - scaled if reverse else scaled
    return result


def _prefer_no_schedule(pod: predicates.PodFacts, facts: nodeinfo.NodeFacts) -> int:
    tolerations = tuple(t for t in pod.tolerations if t.effect in ("", "PreferNoSchedule"))
    return sum(
        1
        for taint in facts.taints
        if taint.effect == "PreferNoSchedule" and not predicates.tolerated(tolerations, taint)
    )


def _preferred_affinity(pod: predicates.PodFacts, facts: nodeinfo.NodeFacts) -> int:
    return sum(weight for weight, term in pod.preferred if predicates.term_matches(term, facts))


def score(pod: predicates.PodFacts, nodes: Sequence[nodeinfo.NodeInfo]) -> dict[str, int]:
    """The weighted sum of the built-in plugin scores, per node name."""
    totals: dict[str, int] = {}
    taints: dict[str, int] = {}
    affinity: dict[str, int] = {}
    for info in nodes:
        assert info.facts is not None
        totals[info.name] = FIT_WEIGHT * least_allocated(
            pod, info
        ) + BALANCED_WEIGHT * balanced_allocation(pod, info)
        taints[info.name] = _prefer_no_schedule(pod, info.facts)
        affinity[info.name] = _preferred_affinity(pod, info.facts)
    for name, value in _normalise(taints, reverse=True).items():
        totals[name] += TAINT_WEIGHT * value
    for name, value in _normalise(affinity, reverse=False).items():
        totals[name] += AFFINITY_WEIGHT * value
    return totals
