"""Property tests: accepted asks never pass a limit; pods count memory x devices; a bound pod
holds exactly what its request asked."""

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vnpu_core import (
    allocator,
    binding,
    catalog,
    errors,
    holdings,
    inventory,
    quotas,
    requests,
    tenants,
)
from vnpu_core.holdings import ALL_MODELS, Amount, Key, Unit

KEYS = [
    Key(ALL_MODELS, Unit.AICORE),
    Key(ALL_MODELS, Unit.CHIPS),
    Key("Ascend310P", Unit.MEMORY),
    Key("Ascend910B3", Unit.DEVICES),
]
NAMESPACES = ["a", "b", "c", "d"]


@st.composite
def setup(draw: st.DrawFn) -> tuple[list[quotas.ResourceQuota], tenants.Tenants]:
    resource_quotas = [
        quotas.ResourceQuota(
            ns,
            f"q{i}",
            tuple(
                quotas.Limit(key.name, key, draw(st.integers(0, 40)))
                for key in draw(st.lists(st.sampled_from(KEYS), max_size=3, unique=True))
            ),
        )
        for i, ns in enumerate(draw(st.lists(st.sampled_from(NAMESPACES), max_size=5)))
    ]
    teams = []
    owners = draw(st.lists(st.sampled_from(["t1", "t2", None]), min_size=4, max_size=4))
    for name in ("t1", "t2"):
        members = tuple(ns for ns, owner in zip(NAMESPACES, owners, strict=True) if owner == name)
        if not members:
            continue
        nominal = draw(st.dictionaries(st.sampled_from(KEYS), st.integers(0, 30), max_size=3))
        borrowing = draw(st.dictionaries(st.sampled_from(KEYS), st.integers(0, 10), max_size=3))
        teams.append(tenants.Team(name, members, 1.0, nominal, borrowing))
    return resource_quotas, tenants.Tenants(tuple(teams))


asks = st.lists(
    st.tuples(
        st.sampled_from(NAMESPACES),
        st.dictionaries(st.sampled_from(KEYS), st.integers(1, 12), min_size=1, max_size=3),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(setup(), asks)
def test_accepted_asks_never_pass_a_limit(
    sources: tuple[list[quotas.ResourceQuota], tenants.Tenants],
    sequence: list[tuple[str, dict[Key, int]]],
) -> None:
    resource_quotas, teams = sources
    usage: dict[str, Amount] = {}
    for namespace, values in sequence:
        ask = Amount(values)
        refusals = quotas.check(ask, namespace, usage, resource_quotas, teams)
        for refusal in refusals:
            assert refusal.used + refusal.asked > refusal.limit
            assert refusal.asked == ask[refusal.key]
        if refusals:
            continue
        usage[namespace] = usage.get(namespace, holdings.ZERO).plus(ask)
        for standing in quotas.quota_standings(resource_quotas, usage):
            assert standing.used <= standing.limit, standing
        team = teams.team_of(namespace)
        if team is None:
            continue
        by_team = quotas.team_usage(teams, usage)
        cohort = holdings.total(by_team.values())
        for team_standing in quotas.team_standings(teams, usage):
            if team_standing.limit is not None:
                assert team_standing.used <= team_standing.limit, team_standing
        for key in teams.units():
            if ask[key] and by_team[team.name][key] > team.nominal.get(key, 0):
                # It borrowed just now: only from capacity the cohort left idle.
                assert cohort[key] <= teams.cohort_nominal(key)


MODELS = [m for m in catalog.BUILTIN if not m.super_pod]


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(MODELS),
    st.integers(1, 8),
    st.booleans(),
    st.integers(1, 100),
    st.integers(0, 100),
)
def test_multi_device_pods_count_memory_times_devices(
    model: catalog.ChipModel, count: int, soft: bool, memory_percent: int, core: int
) -> None:
    limits: dict[str, object] = {model.resource_name: count}
    if soft:
        limits[model.memory_resource] = model.memory_allocatable_mib * memory_percent // 100 or 1
        limits[model.core_resource] = core
    obj = {
        "metadata": {
            "name": "p",
            "annotations": {"huawei.com/vnpu-mode": "hami-core"} if soft else {},
        },
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }
    (container,) = requests.from_pod(obj, catalog.BUILTIN).requests
    held = holdings.of_request(requests.from_pod(obj, catalog.BUILTIN))
    word = model.common_word
    for model_key in (word, ALL_MODELS):
        assert held[Key(model_key, Unit.MEMORY)] == container.memory_mib * count
        assert held[Key(model_key, Unit.DEVICES)] == count
        assert held[Key(model_key, Unit.CHIPS)] == (0 if soft else count)
    per_chip = -(-core * model.aicore // 100) if soft else model.aicore
    assert held[Key(word, Unit.AICORE)] == per_chip * count


@st.composite
def bound_pods(draw: st.DrawFn) -> tuple[inventory.Node, dict[str, Any]]:
    model = draw(st.sampled_from(MODELS))
    soft = draw(st.booleans())
    node = inventory.build_node("n1", model, 8, soft=soft)

    def limits() -> dict[str, object]:
        found: dict[str, object] = {model.resource_name: draw(st.sampled_from([1, 1, 2, 4]))}
        if draw(st.booleans()):
            found[model.memory_resource] = draw(st.integers(1, model.memory_capacity_mib))
        if soft and draw(st.booleans()):
            found[model.core_resource] = draw(st.integers(0, 100))
        return found

    spec: dict[str, Any] = {
        "containers": [
            {"name": f"c{i}", "resources": {"limits": limits()}}
            for i in range(draw(st.integers(1, 2)))
        ]
    }
    if draw(st.booleans()):
        init: dict[str, Any] = {"name": "init", "resources": {"limits": limits()}}
        if draw(st.booleans()):
            init["restartPolicy"] = "Always"
        spec["initContainers"] = [init]
    annotations = {"huawei.com/vnpu-mode": "hami-core"} if soft else {}
    return node, {
        "metadata": {"name": "p", "namespace": "ns", "annotations": annotations},
        "spec": spec,
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bound_pods())
def test_a_bound_pod_holds_what_it_asked(case: tuple[inventory.Node, dict[str, Any]]) -> None:
    node, obj = case
    try:
        request = requests.from_pod(obj, catalog.BUILTIN)
    except errors.RequestError:
        return
    outcome = allocator.fit(node, {}, request)
    if isinstance(outcome, allocator.Rejection):
        return
    obj["metadata"]["annotations"].update(binding.bind_annotations(outcome, 1))
    obj["spec"]["nodeName"] = node.name
    assert holdings.of_bound_pod(obj, catalog.BUILTIN) == holdings.of_request(request)
