"""Errors of the device plugin service (the NPU access layer has its own, in ``npu.errors``).

``finder`` raises ``PodNotIdentified``; ``placement`` raises ``NotPlaced`` for a pod bound
without a decision that it cannot decide for; ``podplan`` raises ``BadAnnotation`` for a pod whose
scheduler annotations cannot be served (``DecisionTooSmall`` when the decision gives a
container less memory than it asks) and ``names`` ``InvalidName`` for a name it will not
put in a path; ``devices`` raises ``UnknownDevice``; ``holdings`` raises ``GrantConflict``;
``lifecycle`` raises ``VnpuFailed``; ``ledger``, ``grants`` and ``statefile`` raise
``LedgerError``. The gRPC servicer (``service``) turns each into a status code::

    DevicePluginError
    ├── SettingsError       a flag, environment value, file or kubeconfig is invalid at start (field, value)
    ├── AllocateError       one Allocate cannot be served (its ``code`` is the gRPC status name)
    │   ├── UnknownDevice   kubelet sent device ids this plugin never advertised  -> INVALID_ARGUMENT
    │   ├── PodNotIdentified not one pod with a decision that fits (reason)       -> FAILED_PRECONDITION
    │   ├── NotPlaced       a pod bound without a decision cannot be placed here (outcome, reason)
    │   │                   -> RESOURCE_EXHAUSTED (no room) / FAILED_PRECONDITION (never fits here,
    │   │                      pod gone) / INVALID_ARGUMENT (malformed request)
    │   ├── BadAnnotation   the pod's annotations cannot be served (key, value)  -> INVALID_ARGUMENT
    │   │   └── DecisionTooSmall the decision gives a container less memory than it asks
    │   │                       (container, template, given_mib, asked_mib, chip_mib) -> INVALID_ARGUMENT
    │   ├── InvalidName     a pod, namespace, container name or UID is malformed (field, value) -> INVALID_ARGUMENT
    │   ├── GrantConflict   the decision takes what this plugin granted a live pod (chip, reason)
    │   │                   -> FAILED_PRECONDITION (chip held) / RESOURCE_EXHAUSTED (over a budget)
    │   └── VnpuFailed      the driver refused or failed a vNPU create           -> RESOURCE_EXHAUSTED / INTERNAL
    └── LedgerError         a state file (ownership ledger, grant book) cannot be read or written (path)

The Kubernetes API's refusals and outages are ``vnpu_service.kubeapi.ApiError`` and its
subclasses (``NotFound``, ``Conflict``, ``Expired``, ``Invalid``, ``Unavailable``):
``cluster`` translates the client's exceptions into them at its boundary, ``cluster.retrying``
repeats calls that met ``Unavailable``, and the servicer answers the rest ``UNAVAILABLE``.

``retryable`` says whether the same call may succeed later without any input changing.
"""

from __future__ import annotations

from typing import Literal, get_args


class DevicePluginError(Exception):
    """Base of every error raised by the device plugin service."""

    retryable = False


class SettingsError(DevicePluginError):
    """A setting is invalid: ``field`` (a flag name without dashes) holds ``value``."""

    def __init__(self, field: str, value: object, problem: str) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        super().__init__(f"{field}: {problem} (got {value!r})")


class AllocateError(DevicePluginError):
    """An Allocate that cannot be served; ``code`` names the gRPC status it is answered with."""

    code = "INTERNAL"
    result = "failed"  # the ``result`` label of vnpu_device_plugin_allocations_total


class UnknownDevice(AllocateError):
    """Kubelet asked for ``device_id``, which is not one of the ids this plugin advertises."""

    code = "INVALID_ARGUMENT"
    result = "invalid_request"

    def __init__(self, device_id: str, problem: str) -> None:
        self.device_id = device_id
        self.problem = problem
        super().__init__(f"device id {device_id!r}: {problem}")


IDENTIFY_REASONS = (
    "no_candidate",  # no pod bound to the node could be the one kubelet admits
    "no_decision",  # the one pod it can be has no decision for this node
    "decision_mismatch",  # the one pod it can be needs other device counts
    "ambiguous",  # several pods could be the one and kubelet's records do not settle it
    "pod_changed",  # the pod changed under the plugin while it was served
)


class PodNotIdentified(AllocateError):
    """The Allocate cannot be tied to one pod with a decision that fits; ``candidates`` are
    the pods that could be the one, ``reason`` one of ``IDENTIFY_REASONS``."""

    code = "FAILED_PRECONDITION"
    result = "pod_not_identified"
    retryable = True

    def __init__(
        self, node: str, problem: str, candidates: tuple[str, ...] = (), *, reason: str
    ) -> None:
        self.node = node
        self.problem = problem
        self.candidates = candidates
        self.reason = reason
        super().__init__(f"node {node}: {problem}")


NotPlacedOutcome = Literal[
    "does_not_fit",  # the allocator finds no room for the pod on this node (reason: which budget)
    "bad_request",  # the pod's request cannot be read, or is not one this plugin can place
    "pod_gone",  # the pod was deleted (or is being deleted) while it was placed
]
NOT_PLACED_OUTCOMES: tuple[NotPlacedOutcome, ...] = get_args(NotPlacedOutcome)


class NotPlaced(AllocateError):
    """Pod ``pod`` was bound to node ``node`` without a device decision, and this plugin could
    not decide for it: ``outcome`` is one of ``NOT_PLACED_OUTCOMES``, ``reason`` the
    allocator's reason code (``vnpu_core.budgets.Reason``: ``aicore``, ``no-free-chip``,
    ...) or the request's field, ``problem`` the sentence (which budget, how much is free).
    ``unresolvable``: the pod can never fit this node (no eviction would help)."""

    result = "not_placed"

    def __init__(
        self,
        node: str,
        pod: str,
        outcome: NotPlacedOutcome,
        reason: str,
        problem: str,
        *,
        unresolvable: bool = False,
    ) -> None:
        self.node = node
        self.pod = pod
        self.outcome = outcome
        self.reason = reason
        self.problem = problem
        if outcome == "bad_request":
            self.code = "INVALID_ARGUMENT"
        elif outcome == "pod_gone" or unresolvable:
            self.code = "FAILED_PRECONDITION"
        else:
            self.code = "RESOURCE_EXHAUSTED"
        super().__init__(
            f"pod {pod} was bound to node {node} without a device decision and the device "
            f"plugin cannot place it there: {problem}"
        )


class BadAnnotation(AllocateError):
    """Pod ``pod`` (namespace/name) carries an annotation ``key`` this plugin cannot serve."""

    code = "INVALID_ARGUMENT"
    result = "bad_annotation"

    def __init__(self, pod: str, key: str, value: object, problem: str) -> None:
        self.pod = pod
        self.key = key
        self.value = value
        self.problem = problem
        shown = repr(value)
        if len(shown) > 120:
            shown = shown[:117] + "..."
        super().__init__(f"pod {pod}: annotation {key}: {problem} (got {shown})")


class DecisionTooSmall(BadAnnotation):
    """The decision for container ``container`` of pod ``pod`` gives less memory than it asks.

    ``template`` is the hard vNPU template the decision names (None for a whole chip or a
    soft slice) and ``given_mib`` what the device gives (a whole chip: the chip's memory);
    ``asked_mib`` is what it had to give at least (the container's ``-memory`` resource or
    the decision's own memory figure; None when there is none to name: a container figure
    that is not a quantity, a soft slice of 0 MiB for a container that names no memory);
    ``chip_mib`` is the chip's memory. ``key`` and ``value`` name the annotation the
    device's size comes from.
    """

    result = "decision_too_small"

    def __init__(
        self,
        pod: str,
        container: str,
        key: str,
        value: object,
        problem: str,
        *,
        template: str | None,
        given_mib: int,
        asked_mib: int | None,
        chip_mib: int,
    ) -> None:
        super().__init__(pod, key, value, problem)
        self.container = container
        self.template = template
        self.given_mib = given_mib
        self.asked_mib = asked_mib
        self.chip_mib = chip_mib
        self.args = (f"pod {pod} container {container}: {problem}",)


class InvalidName(AllocateError):
    """Pod ``pod`` (namespace/name as given) carries ``value`` in ``field``, which breaks ``rule``."""

    code = "INVALID_ARGUMENT"
    result = "invalid_name"

    def __init__(self, pod: str, field: str, value: object, rule: str) -> None:
        self.pod = pod
        self.field = field
        self.value = value
        self.rule = rule
        shown = repr(value)
        if len(shown) > 120:
            shown = shown[:117] + "..."
        super().__init__(f"pod {pod}: {field} {shown} is {rule}")


class GrantConflict(AllocateError):
    """The decision for pod ``pod`` would give away what live pods ``holders`` hold on chip ``chip``.

    ``reason`` is one of ``metrics.CONFLICT_REASONS``: ``held_whole`` (another pod holds the
    chip whole), ``held_shared`` (a whole chip, or another sharing mode, is asked of a chip
    others share), ``over_budget`` (a vNPU or soft slice would go over a budget).
    """

    result = "grant_conflict"

    def __init__(
        self, pod: str, chip: int, reason: str, holders: tuple[str, ...], problem: str
    ) -> None:
        self.pod = pod
        self.chip = chip
        self.reason = reason
        self.holders = holders
        self.problem = problem
        self.code = "RESOURCE_EXHAUSTED" if reason == "over_budget" else "FAILED_PRECONDITION"
        shown = ", ".join(holders[:5]) + (", ..." if len(holders) > 5 else "")
        super().__init__(
            f"pod {pod}: the decision conflicts with what this node granted on chip {chip}: "
            f"{problem} (held by {shown})"
        )


class VnpuFailed(AllocateError):
    """The driver refused (``refused``) or failed to create a ``template`` vNPU on chip ``chip``."""

    result = "vnpu_failed"

    def __init__(self, chip: int, template: str, problem: str, *, refused: bool) -> None:
        self.chip = chip
        self.template = template
        self.problem = problem
        self.refused = refused
        self.code = "RESOURCE_EXHAUSTED" if refused else "INTERNAL"
        super().__init__(f"cannot create a {template} vNPU on chip {chip}: {problem}")


class LedgerError(DevicePluginError):
    """The ownership ledger at ``path`` cannot be read or written."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"ownership ledger {path}: {problem}")
