"""kube-scheduler's texts for a pod that fits nowhere: the FitError and its preemption part.

``scheduler`` calls :func:`unschedulable` with the refusal of every node (built-in filters and
extenders alike) and writes the result into the ``FailedScheduling`` event and the pod's
``PodScheduled`` condition. The shape is ``FitError.Error()``::

    0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match Pod's node
    affinity/selector. preemption: 0/3 nodes are available: 1 No preemption victims found
    for incoming pod, 2 Preemption is not helpful for scheduling..

Reasons are counted per distinct text, formatted ``"<count> <reason>"`` and sorted as
strings (so ``10 x`` sorts before ``2 y``, as in Go). The preemption part is what
DefaultPreemption prints when it finds no victim: a node refused by an unresolvable filter
(or an extender's ``FailedAndUnresolvableNodes``, or not refused at all) is "not helpful", any
other node has "no preemption victims" (the driver does not preempt; see the docs). A pod
with ``preemptionPolicy: Never`` gets ``preemption: not eligible due to
preemptionPolicy=Never.`` instead. The doubled full stop is kube-scheduler's: the preemption
FitError ends in one and the separator adds another. Pure functions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from vnpu_sandbox.scheduling import predicates

NO_NODES = "no nodes available to schedule pods"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
NEVER = "not eligible due to preemptionPolicy=Never."
NOTE_LENGTH_LIMIT = 1024
"""An event's ``message`` is cut to this many characters (kube-scheduler's ``truncateMessage``)."""


def histogram(reasons: Iterable[str]) -> list[str]:
    """``["<count> <reason>", ...]`` per distinct reason, sorted as strings."""
    return sorted(f"{count} {reason}" for reason, count in Counter(reasons).items())


def fit_error(total: int, statuses: Mapping[str, predicates.Status], post_filter: str = "") -> str:
    """``FitError.Error()``: every node's reasons counted, then the post-filter message."""
    message = f"0/{total} nodes are available:"
    counted = histogram(reason for status in statuses.values() for reason in status.reasons)
    if counted:
        message += f" {', '.join(counted)}."
    if post_filter:
        message += f" {post_filter}."
    return message


def preemption(
    pod: Mapping[str, Any], total: int, statuses: Mapping[str, predicates.Status]
) -> str:
    """What DefaultPreemption's PostFilter says when no node can be freed for the pod."""
    if (pod.get("spec") or {}).get("preemptionPolicy") == "Never":
        return f"preemption: {NEVER}"
    verdicts = {
        name: predicates.Status(
            (NOT_HELPFUL if status.unresolvable else NO_VICTIMS,), status.unresolvable
        )
        for name, status in statuses.items()
    }
    for index in range(total - len(verdicts)):
        verdicts[f"(not refused {index})"] = predicates.Status((NOT_HELPFUL,), True)
    return f"preemption: {fit_error(total, verdicts)}"


def unschedulable(
    pod: Mapping[str, Any], total: int, statuses: Mapping[str, predicates.Status]
) -> str:
    """The whole message of a FitError for ``pod`` over ``total`` nodes."""
    if total == 0:
        return NO_NODES
    return fit_error(total, statuses, preemption(pod, total, statuses))


def truncate(message: str) -> str:
    if len(message) <= NOTE_LENGTH_LIMIT:
        return message
    suffix = " ..."
    return message[: NOTE_LENGTH_LIMIT - len(suffix)] + suffix
