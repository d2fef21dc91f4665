"""Property tests: whatever the request sequence, no chip budget is ever over-committed and
every multi-chip placement obeys its server's topology."""

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vnpu_core import allocator, binding, catalog, errors, inventory, ledger, requests, topology
from vnpu_core.topology import ServerKind

MODELS = list(catalog.BUILTIN)
SOFT = {"huawei.com/vnpu-mode": "hami-core"}


@st.composite
def scenario(draw: st.DrawFn) -> tuple[inventory.Node, list[tuple[str, dict[str, Any]]]]:
    model = draw(st.sampled_from(MODELS))
    chips = draw(st.sampled_from([1, 2, 4, 8, 16]))
    kind = draw(st.sampled_from([None, *ServerKind]))
    if kind in (ServerKind.RING_910A_8, ServerKind.RINGS_910B_16) and chips < 2:
        kind = None
    soft = draw(st.booleans())
    # Registered numbers with gaps (chips left out of the register list), and NetworkIDs.
    span = chips + draw(st.sampled_from([0, 0, 1, 3]))
    numbers = sorted(draw(st.permutations(range(span)))[:chips])
    networks = draw(
        st.one_of(st.none(), st.lists(st.integers(0, 2), min_size=chips, max_size=chips))
    )
    members = tuple(
        inventory.Chip(
            i,
            f"n1-{model.common_word}-{i}",
            model,
            number=numbers[i],
            network_id=None if networks is None else networks[i],
        )
        for i in range(chips)
    )
    layout = topology.build(kind or topology.default_kind(model, numbers), numbers)
    node = inventory.Node("n1", members, layout, soft)
    steps: list[tuple[str, dict[str, Any]]] = []
    for number in range(draw(st.integers(1, 25))):
        if steps and draw(st.integers(0, 4)) == 0:
            steps.append(("finish", {"index": draw(st.integers(0, len(steps) - 1))}))
            continue
        count = draw(st.sampled_from([1, 1, 1, 2, 3, 4, 8]))
        memory = draw(st.one_of(st.none(), st.integers(1, model.memory_capacity_mib)))
        limits: dict[str, object] = {model.resource_name: count}
        if memory is not None:
            limits[model.memory_resource] = memory
        pod_soft = soft and draw(st.booleans())
        if pod_soft and draw(st.booleans()):
            limits[model.core_resource] = draw(st.integers(0, 100))
        pod: dict[str, Any] = {
            "metadata": {
                "name": f"p{number}",
                "namespace": "ns",
                "annotations": dict(SOFT) if pod_soft else {},
            },
            "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
        }
        if draw(st.integers(0, 5)) == 0:
            pod["spec"]["initContainers"] = [
                {"name": "init", "resources": {"limits": {model.resource_name: 1}}}
            ]
        steps.append(("place", pod))
    return node, steps


def check_budgets(node: inventory.Node, pods: list[dict[str, Any]]) -> None:
    usage = ledger.node_usage(pods, node.name, catalog.BUILTIN).usage
    holders: dict[str, int] = {}
    for pod in pods:
        if ledger.holds_devices(pod, node.name):
            for uuid in ledger.pod_usage(pod, catalog.BUILTIN):
                holders[uuid] = holders.get(uuid, 0) + 1
    for chip in node.chips:
        used = usage.get(chip.uuid, inventory.IDLE)
        model = chip.model
        if used.exclusive:
            # A chip held whole belongs to one pod (whose init container may differ from its app).
            assert holders[chip.uuid] == 1, (chip.index, used)
            continue
        assert not (used.vnpus and used.soft_slices), (chip.index, used)
        assert used.vnpus <= chip.vnpu_limit, (chip.index, used)
        assert used.aicore <= model.aicore, (chip.index, used)
        assert used.aicpu <= model.aicpu, (chip.index, used)
        if used.soft_slices:
            assert used.memory_mib <= chip.memory_mib, (chip.index, used)
            assert used.core_percent <= 100, (chip.index, used)
            assert used.soft_slices <= chip.slots, (chip.index, used)
        else:
            assert used.memory_mib <= model.memory_capacity_mib, (chip.index, used)
        if model.media is not None:
            for have, cap in zip(used.media, model.media.as_tuple(), strict=True):
                assert have <= cap, (chip.index, used)


def check_topology(layout: topology.Topology, chips: list[int]) -> None:
    """The hardware's rules, stated on the registered numbers (not on list positions)."""
    count = len(chips)
    if count < 2:
        return
    assert layout.allowed(count), (layout.kind, chips)
    numbers = [layout.numbers[i] for i in chips]
    if layout.kind is ServerKind.RING_910A_8 and count <= 4:
        assert len({n // 4 for n in numbers}) == 1, numbers
    if layout.kind is ServerKind.RINGS_910B_16:
        if count <= max(len(g) for g in layout.groups):
            assert len({n // 8 for n in numbers}) == 1, numbers
        else:
            first = sorted(n for n in numbers if n < 8)
            second = sorted(n - 8 for n in numbers if n >= 8)
            assert first == second, numbers
    if layout.kind is ServerKind.A3_PAIRS:
        for n in numbers:
            assert n ^ 1 in numbers, numbers  # whole modules: dies 2k and 2k+1 together


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario())
def test_no_budget_is_ever_over_committed(
    case: tuple[inventory.Node, list[tuple[str, dict[str, Any]]]],
) -> None:
    node, steps = case
    placed: list[dict[str, Any]] = []
    for action, payload in steps:
        if action == "finish":
            if placed:
                placed[payload["index"] % len(placed)]["status"] = {"phase": "Succeeded"}
            continue
        try:
            request = requests.from_pod(payload, catalog.BUILTIN)
        except errors.RequestError:
            continue
        current = ledger.node_usage(placed, node.name, catalog.BUILTIN)
        outcome = allocator.fit(node, current.usage, request)
        if isinstance(outcome, allocator.Rejection):
            assert outcome.message.startswith(request.requests[0].model.common_word)
            continue
        assert 0 <= outcome.score <= 10
        for container in outcome.containers:
            check_topology(node.topology, [g.chip for g in container.grants])
        payload["metadata"]["annotations"].update(binding.bind_annotations(outcome, 1))
        payload["spec"]["nodeName"] = node.name
        placed.append(payload)
        after = ledger.node_usage(placed, node.name, catalog.BUILTIN)
        assert not after.problems
        check_budgets(node, placed)


@settings(max_examples=100, deadline=None)
@given(scenario())
def test_the_same_input_gives_the_same_answer(
    case: tuple[inventory.Node, list[tuple[str, dict[str, Any]]]],
) -> None:
    node, steps = case
    for action, payload in steps:
        if action != "place":
            continue
        try:
            request = requests.from_pod(payload, catalog.BUILTIN)
        except errors.RequestError:
            continue
        assert allocator.fit(node, {}, request) == allocator.fit(node, {}, request)
