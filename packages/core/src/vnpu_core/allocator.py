"""The allocator: does a pod fit a node, on which chips, with which template, and how well.

``fit`` takes a node (``inventory.Node``), what is in use on its chips (by chip UUID, from
``ledger``), a parsed pod (``requests.PodRequest``) and a policy, and returns either an
``Assignment`` (per container: chips and template, memory or cores, plus a 0-10 node
score) or a ``Rejection`` with a reason code and a message that names the short budget,
what was asked and the most that is free. A request pinned to one template
(``vnpu.io/template``) is placed with that template only; its rejection says it is pinned
and which template of equal memory the node could have offered. Pure and deterministic:
the same input gives the same answer. The scheduler's filter/prioritize/bind and the
planner call it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vnpu_core import budgets, catalog, inventory, requests
from vnpu_core.budgets import Reason
from vnpu_core.inventory import ChipUsage
from vnpu_core.requests import Policy

UNRESOLVABLE = frozenset(
    {
        Reason.NO_DEVICE,
        Reason.TOO_MANY_CHIPS,
        Reason.COUNT_NOT_ALLOWED,
        Reason.UNHEALTHY,
        Reason.UUID_FILTER,
        Reason.MODE_MISMATCH,
    }
)


@dataclass(frozen=True, slots=True)
class Grant:
    """One device given to a container: a whole chip, a hard vNPU (``template``) or a soft slice."""

    chip: int
    uuid: str
    common_word: str
    template: str | None
    memory_mib: int
    cores: int = 0
    soft: bool = False


@dataclass(frozen=True, slots=True)
class ContainerAssignment:
    container: str
    init: bool
    grants: tuple[Grant, ...]


@dataclass(frozen=True, slots=True)
class Assignment:
    """Where a pod goes on one node; ``containers`` follows the pod's annotation order."""

    node: str
    containers: tuple[ContainerAssignment, ...]
    score: int


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a pod does not fit a node; ``unresolvable`` means no eviction could help."""

    node: str
    reason: Reason
    message: str

    @property
    def unresolvable(self) -> bool:
        return self.reason in UNRESOLVABLE


def fit(
    node: inventory.Node,
    usage: Mapping[str, ChipUsage],
    pod: requests.PodRequest,
    policy: Policy = Policy.DEFAULT,
) -> Assignment | Rejection:
    """Place every NPU container of ``pod`` on ``node`` on top of ``usage``, or say why not."""
    return _fit(node, usage, pod, policy)[0]


def assume(
    node: inventory.Node,
    usage: Mapping[str, ChipUsage],
    pods: Sequence[requests.PodRequest],
    policy: Policy = Policy.DEFAULT,
) -> dict[str, ChipUsage]:
    """``usage`` with ``pods`` placed on ``node`` one after the other, as ``fit`` places them.

    A pod that does not fit is left out (its bind will fail on its own). For a scheduler's
    binds accepted but not yet written: the next pod is fitted behind them.
    """
    held = dict(usage)
    for pod in pods:
        outcome, working = _fit(node, held, pod, policy)
        if isinstance(outcome, Assignment):
            for chip in node.chips:
                if working[chip.index] != held.get(chip.uuid, inventory.IDLE):
                    held[chip.uuid] = working[chip.index]
    return held


def _fit(
    node: inventory.Node,
    usage: Mapping[str, ChipUsage],
    pod: requests.PodRequest,
    policy: Policy,
) -> tuple[Assignment | Rejection, dict[int, ChipUsage]]:
    """``fit``'s outcome and the usage by chip index with the pod placed (when it fits)."""
    chip_policy = pod.chip_policy or policy
    base = {c.index: usage.get(c.uuid, inventory.IDLE) for c in node.chips}
    working = dict(base)
    grants: dict[str, list[Grant]] = {}
    # Regular containers (and sidecars) run together: their usage adds up.
    for request in pod.requests:
        if request.init:
            continue
        placed = _place(node, working, request, pod, chip_policy)
        if isinstance(placed, Rejection):
            return placed, working
        grants.setdefault(request.container, []).extend(placed)
        for grant, delta in _deltas(node, request, placed):
            working[grant.chip] = working[grant.chip].plus(delta)
    # Init containers run one at a time before the rest: each is placed alone on the node's
    # own usage, and the pod holds, budget by budget, the larger of the two (peak semantics).
    for request in pod.requests:
        if not request.init:
            continue
        scratch = dict(base)
        placed = _place(node, scratch, request, pod, chip_policy)
        if isinstance(placed, Rejection):
            return placed, working
        grants.setdefault(request.container, []).extend(placed)
        for grant, delta in _deltas(node, request, placed):
            working[grant.chip] = working[grant.chip].peak(base[grant.chip].plus(delta))
    containers = tuple(
        ContainerAssignment(name, init, tuple(grants.get(name, ())))
        for name, init in pod.containers
    )
    score = _score(node, base, working, pod, pod.node_policy or policy)
    return Assignment(node.name, containers, score), working


def _deltas(
    node: inventory.Node, request: requests.ContainerRequest, placed: Sequence[Grant]
) -> list[tuple[Grant, ChipUsage]]:
    out: list[tuple[Grant, ChipUsage]] = []
    for grant in placed:
        chip = node.chip(grant.uuid)
        assert chip is not None  # grants name the node's own chips
        if request.soft:
            delta = inventory.soft_usage(
                grant.memory_mib, grant.cores, budgets.soft_exclusive(chip, request)
            )
        elif grant.template is None:
            delta = inventory.whole_chip_usage(chip)
        else:
            template = chip.model.template(grant.template)
            assert template is not None  # the allocator only grants templates of the chip's model
            delta = inventory.template_usage(template)
        out.append((grant, delta))
    return out


def _place(
    node: inventory.Node,
    working: dict[int, ChipUsage],
    request: requests.ContainerRequest,
    pod: requests.PodRequest,
    policy: Policy,
) -> list[Grant] | Rejection:
    word = request.model.common_word
    chips = node.chips_of(word)
    gate = _gate(node, chips, request, pod)
    if isinstance(gate, Rejection):
        return gate
    eligible = gate
    if request.whole:
        free = [c.index for c in eligible if working[c.index].idle]
        chosen = node.topology.choose(free, request.count, node.network_ids(word))
        if chosen is None:
            return _whole_rejection(node, request, free, len(eligible))
        by_index = {c.index: c for c in eligible}
        return [Grant(i, by_index[i].uuid, word, None, by_index[i].memory_mib) for i in chosen]
    if request.soft:
        return _place_soft(node, working, request, eligible, policy)
    return _place_vnpu(node, working, request, eligible, policy)


def _gate(
    node: inventory.Node,
    chips: Sequence[inventory.Chip],
    request: requests.ContainerRequest,
    pod: requests.PodRequest,
) -> Sequence[inventory.Chip] | Rejection:
    """The chips this request may use at all, or a rejection no eviction can fix."""
    word = request.model.common_word
    if not chips:
        have = ", ".join(node.models()) or "none"
        return Rejection(
            node.name, Reason.NO_DEVICE, f"{word}: node has no {word} chip (it has: {have})"
        )
    allow = (pod.use_uuids or {}).get(word)
    deny = (pod.no_use_uuids or {}).get(word, frozenset())
    healthy = node.healthy_chips_of(word)
    if not healthy:
        return Rejection(
            node.name, Reason.UNHEALTHY, f"{word}: all {len(chips)} chips are unhealthy"
        )
    eligible: Sequence[inventory.Chip] = healthy
    if allow is not None or deny:
        eligible = [c for c in healthy if (allow is None or c.uuid in allow) and c.uuid not in deny]
    if not eligible:
        return Rejection(
            node.name,
            Reason.UUID_FILTER,
            f"{word}: no healthy chip passes the pod's use/no-use UUID lists",
        )
    if request.count > len(eligible):
        return Rejection(
            node.name,
            Reason.TOO_MANY_CHIPS,
            f"{word}: asked {request.count} chips, node has {len(eligible)} usable of {len(chips)}",
        )
    if request.soft and not node.soft:
        return Rejection(
            node.name,
            Reason.MODE_MISMATCH,
            f"{word}: pod asks for soft slices (hami-core); node does not share chips that way",
        )
    if node.soft and not request.soft and not request.whole:
        return Rejection(
            node.name,
            Reason.MODE_MISMATCH,
            f"{word}: node shares chips in soft mode (hami-core); hard vNPU {request.shape} is not created there",
        )
    if request.model.super_pod and request.whole and request.count % 2:
        return Rejection(
            node.name,
            Reason.COUNT_NOT_ALLOWED,
            f"{word}: {request.count} dies is not an allowed count in a super pod "
            "(whole dies go in pairs: 2, 4, 6, ...)",
        )
    if request.count > 1 and not node.topology.allowed(request.count):
        return Rejection(
            node.name,
            Reason.COUNT_NOT_ALLOWED,
            f"{word}: {request.count} chips is not an allowed count on a {node.topology.describe()}",
        )
    return eligible


def _whole_rejection(
    node: inventory.Node, request: requests.ContainerRequest, free: list[int], usable: int
) -> Rejection:
    word = request.model.common_word
    n = request.count
    if len(free) < n:
        plural = "s" if n > 1 else ""
        return Rejection(
            node.name,
            Reason.NO_FREE_CHIP,
            f"{word}: no {n} free whole chip{plural} (asked {n}, {len(free)} of {usable} chips are free)",
        )
    return Rejection(node.name, Reason.TOPOLOGY, f"{word}: {node.topology.short_reason(free, n)}")


def _policy_key(
    node: inventory.Node,
    busy_groups: set[int],
    chip: inventory.Chip,
    used: ChipUsage,
    extra: catalog.Template | None,
    policy: Policy,
) -> tuple[float, ...]:
    """Sort key of a chip that fits (smaller is chosen first)."""
    if policy is Policy.BINPACK:
        return (-inventory.load_ratio(chip, used), chip.index)
    if policy is Policy.SPREAD:
        return (inventory.load_ratio(chip, used), chip.index)
    # Best fit: shared chips first, then untouched chips in groups already broken, then whole
    # groups; inside each tier, the chip that ends up fullest.
    if not used.idle:
        tier = 0
    elif node.topology.group_of(chip.index) in busy_groups:
        tier = 1
    else:
        tier = 2
    return (tier, -inventory.load_ratio(chip, used, extra), chip.index)


def _busy_groups(node: inventory.Node, working: dict[int, ChipUsage]) -> set[int]:
    return {node.topology.group_of(i) for i, used in working.items() if not used.idle}


def _place_vnpu(
    node: inventory.Node,
    working: dict[int, ChipUsage],
    request: requests.ContainerRequest,
    eligible: Sequence[inventory.Chip],
    policy: Policy,
) -> list[Grant] | Rejection:
    best: tuple[tuple[float, ...], inventory.Chip, catalog.Template] | None = None
    busy: set[int] | None = None  # groups in use, worked out once an idle chip fits
    for chip in eligible:
        used = working[chip.index]
        for template in request.templates:
            if budgets.template_short(chip, used, template) is None:
                if busy is None and used.idle:
                    busy = _busy_groups(node, working)
                key = _policy_key(node, busy or set(), chip, used, template, policy)
                if best is None or key < best[0]:
                    best = (key, chip, template)
                break
    if best is None:
        reason, message = budgets.explain_vnpu(eligible, working, request)
        if request.pinned:
            message += budgets.pin_note(eligible, working, request)
        return Rejection(node.name, reason, message)
    _, chip, template = best
    return [
        Grant(chip.index, chip.uuid, request.model.common_word, template.name, template.memory_mib)
    ]


def _place_soft(
    node: inventory.Node,
    working: dict[int, ChipUsage],
    request: requests.ContainerRequest,
    eligible: Sequence[inventory.Chip],
    policy: Policy,
) -> list[Grant] | Rejection:
    fitting = [c for c in eligible if budgets.soft_short(c, working[c.index], request) is None]
    word = request.model.common_word
    if len(fitting) < request.count:
        reason, message = budgets.explain_soft(eligible, working, request, len(fitting))
        return Rejection(node.name, reason, message)
    if request.count == 1:
        busy = _busy_groups(node, working)
        chosen_chip = min(
            fitting, key=lambda c: _policy_key(node, busy, c, working[c.index], None, policy)
        )
        chosen: tuple[int, ...] = (chosen_chip.index,)
    else:
        free = [c.index for c in fitting]
        picked = node.topology.choose(free, request.count, node.network_ids(word))
        if picked is None:
            why = node.topology.short_reason(free, request.count)
            return Rejection(node.name, Reason.TOPOLOGY, f"{word}: {why}")
        chosen = picked
    by_index = {c.index: c for c in fitting}
    return [
        Grant(i, by_index[i].uuid, word, None, request.memory_mib, request.core_percent, soft=True)
        for i in chosen
    ]


def _score(
    node: inventory.Node,
    base: dict[int, ChipUsage],
    after: dict[int, ChipUsage],
    pod: requests.PodRequest,
    policy: Policy,
) -> int:
    """0-10: how much this node should be preferred for the pod under ``policy``."""
    total = 0.0
    count = 0
    for word in pod.models():
        for chip in node.chips_of(word):
            count += 1
            used = after[chip.index]
            if not used.idle:
                total += inventory.load_ratio(chip, used)
    if not count:
        return 0
    load = total / count
    if policy is Policy.SPREAD:
        return round(10 * (1 - load))
    score = 10 * load
    if policy is Policy.DEFAULT:
        score -= 2 * _groups_broken(node, base, after)
    return max(0, min(10, round(score)))


def _groups_broken(
    node: inventory.Node, base: dict[int, ChipUsage], after: dict[int, ChipUsage]
) -> int:
    """Groups (rings, cards, pairs) that were wholly free before and are partly used after."""
    broken = 0
    for group in node.topology.groups:
        if all(base[i].idle for i in group):
            now_used = sum(1 for i in group if not after[i].idle)
            if 0 < now_used < len(group):
                broken += 1
    return broken
