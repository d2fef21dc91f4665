from collections.abc import Sequence

import pytest

from vnpu_core import borrowing, errors, fairshare, ranking, reclaim
from vnpu_core.borrowing import Verdict
from vnpu_core.fairshare import Pod, Team
from vnpu_core.ranking import Tier


def cohort(*teams: Team, capacity: dict[str, int] | None = None) -> fairshare.Cohort:
    return fairshare.Cohort(capacity or {"aicore": 128, "memory": 512}, teams)


A = Team("a", 1, {"aicore": 64, "memory": 256})
B = Team("b", 1, {"aicore": 64, "memory": 256})
TWO = cohort(A, B)


def pod(
    name: str,
    team: str,
    aicore: int,
    memory: int = 0,
    priority: int = 0,
    created: float = 0.0,
    node: str = "",
) -> Pod:
    demand = {"aicore": aicore, "memory": memory} if memory else {"aicore": aicore}
    return Pod(name, team, demand, priority, created, node)


@pytest.mark.parametrize(
    ("used", "capacity", "weight", "value", "unit"),
    [
        ({}, {"aicore": 10}, 1, 0.0, ""),
        ({"aicore": 5}, {"aicore": 10}, 1, 0.5, "aicore"),
        ({"aicore": 5}, {"aicore": 10}, 2, 0.25, "aicore"),
        ({"aicore": 2, "memory": 300}, {"aicore": 10, "memory": 400}, 1, 0.75, "memory"),
        ({"aicore": 4, "memory": 160}, {"aicore": 10, "memory": 400}, 1, 0.4, "aicore"),  # tie
        ({"chips": 1}, {"aicore": 10}, 1, float("inf"), "chips"),
    ],
)
def test_dominant_share(
    used: dict[str, int], capacity: dict[str, int], weight: float, value: float, unit: str
) -> None:
    share = ranking.dominant_share(used, capacity, weight)
    assert share.value == pytest.approx(value)
    assert share.unit == unit


def test_share_describes_its_numbers() -> None:
    share = ranking.dominant_share({"aicore": 32}, {"aicore": 128}, 2)
    assert share.describe() == "0.1250 (aicore 32/128 = 0.2500, weight 2)"


@pytest.mark.parametrize(
    ("team", "field"),
    [
        (lambda: Team("x", 0), "weight"),
        (lambda: Team("x", -1), "weight"),
        (lambda: Team("x", float("nan")), "weight"),
        (lambda: Team("x", 1, {"aicore": -1}), "nominal.aicore"),
        (lambda: Team("x", 1, {}, {"memory": -5}), "borrowing_limit.memory"),
    ],
)
def test_bad_team_names_the_field(team: object, field: str) -> None:
    with pytest.raises(fairshare.FairShareError) as caught:
        team()  # type: ignore[operator]
    assert caught.value.field == field
    assert caught.value.team == "x"
    assert isinstance(caught.value, errors.VnpuError)


def test_cohort_refuses_a_team_twice_and_names_an_unknown_team() -> None:
    with pytest.raises(fairshare.FairShareError, match="defined twice"):
        cohort(A, A)
    with pytest.raises(fairshare.FairShareError, match="no such team") as caught:
        TWO.team("z")
    assert caught.value.value == "z"


def test_pool_is_the_total_nominal_capped_by_capacity() -> None:
    small = cohort(A, B, capacity={"aicore": 100, "memory": 1024, "chips": 4})
    assert small.pool == {"aicore": 100, "memory": 512}


def test_usage_adds_up_each_teams_pods() -> None:
    held = fairshare.usage([pod("p", "a", 8, 16), pod("q", "a", 4), pod("r", "b", 2)])
    assert held == {"a": {"aicore": 12, "memory": 16}, "b": {"aicore": 2}}


# check: (team a's usage, team b's usage, a's pending aicore, a's borrowing limit) -> verdict
@pytest.mark.parametrize(
    ("used_a", "used_b", "ask", "limit", "verdict", "message"),
    [
        (16, 0, 16, None, Verdict.NOMINAL, "team a stays within its nominal (aicore 16+16 of 64)"),
        (
            60,
            0,
            8,
            None,
            Verdict.BORROW,
            "team a borrows 4 aicore above its nominal 64, from 68 aicore idle",
        ),
        (
            64,
            32,
            16,
            16,
            Verdict.BORROW,
            "team a borrows 16 aicore above its nominal 64, from 32 aicore idle",
        ),
        (64, 32, 17, 16, Verdict.OVER_LIMIT, "its borrowing limit is 16 aicore"),
        (64, 0, 1, 0, Verdict.OVER_LIMIT, "its borrowing limit is 0 aicore"),
        (64, 60, 8, None, Verdict.NO_IDLE, "the cohort has only 4 aicore idle"),
        (
            32,
            96,
            16,
            None,
            Verdict.RECLAIM,
            "borrowers hold the room (0 aicore idle, 16 asked, 16 of it owed)",
        ),
        # Below the nominal, the pod goes 4 above it: it reclaims the 12 it is owed and needs
        # the other 4 idle (here 4 are); with none idle it has to wait.
        (52, 72, 16, None, Verdict.RECLAIM, "16 asked, 12 of it owed"),
        (52, 76, 16, None, Verdict.NO_IDLE, "the cohort has only 0 aicore idle"),
        (64, 64, 8, None, Verdict.NO_IDLE, "team a would borrow 8 aicore above its nominal 64"),
        (48, 64, 16, None, Verdict.NOMINAL, "aicore 48+16 of 64"),
    ],
)
def test_check(
    used_a: int, used_b: int, ask: int, limit: int | None, verdict: Verdict, message: str
) -> None:
    a = Team("a", 1, {"aicore": 64}, {} if limit is None else {"aicore": limit})
    two = cohort(a, Team("b", 1, {"aicore": 64}))
    answer = borrowing.check(
        pod("p", "a", ask), two, {"a": {"aicore": used_a}, "b": {"aicore": used_b}}
    )
    assert answer.verdict is verdict
    assert message in answer.message
    assert answer.verdict.admitted is (verdict in (Verdict.NOMINAL, Verdict.BORROW))
    (unit,) = answer.units
    assert (unit.used, unit.nominal, unit.cohort_used, unit.pool) == (
        used_a,
        64,
        used_a + used_b,
        128,
    )


def test_a_limit_on_one_unit_leaves_the_other_unlimited() -> None:
    a = Team("a", 1, {"aicore": 64, "memory": 256}, {"aicore": 0})
    two = cohort(a, B)
    answer = borrowing.check(
        Pod("p", "a", {"aicore": 8, "memory": 200}), two, {"a": {"aicore": 8, "memory": 200}}
    )
    assert answer.verdict is Verdict.BORROW
    assert answer.borrowed == {"memory": 144}


def test_a_pod_within_nominal_on_one_model_is_not_held_back_by_borrowing_on_another() -> None:
    teams = (
        Team("a", 1, {"310P-aicore": 32, "910B-aicore": 80}),
        Team("b", 1, {"310P-aicore": 32, "910B-aicore": 80}),
    )
    both = fairshare.Cohort({"310P-aicore": 64, "910B-aicore": 160}, teams)
    used = {"a": {"910B-aicore": 120}}
    answer = borrowing.check(Pod("p", "a", {"310P-aicore": 8}), both, used)
    assert answer.verdict is Verdict.NOMINAL
    (ranked,) = ranking.order([Pod("p", "a", {"310P-aicore": 8})], both, used)
    assert ranked.tier is Tier.NOMINAL


def names(ranked: Sequence[ranking.Ranked]) -> list[str]:
    return [r.pod.name for r in ranked]


def test_a_team_within_its_nominal_goes_before_a_borrowing_team_with_a_smaller_share() -> None:
    # b holds less but is above its small nominal; a holds more and stays within its own.
    a = Team("a", 1, {"aicore": 96})
    b = Team("b", 1, {"aicore": 32})
    ranked = ranking.order(
        [pod("b1", "b", 8), pod("a1", "a", 8)],
        cohort(a, b),
        {"a": {"aicore": 64}, "b": {"aicore": 32}},
    )
    assert names(ranked) == ["a1", "b1"]
    assert [r.tier for r in ranked] == [Tier.NOMINAL, Tier.BORROWING]
    assert ranked[0].reason.startswith("team a below its nominal (aicore 64+8 of 96)")
    assert "aicore 40/128" in ranked[1].reason


@pytest.mark.parametrize(
    ("pending", "used", "expected"),
    [
        # Lowest weighted dominant share with the pod first: b (weight 1) holds little.
        ([pod("a1", "a", 8), pod("b1", "b", 8)], {"a": 80, "b": 70}, ["b1", "a1"]),
        # Counting the pod: a's small pod beats b's big one from the same share.
        ([pod("b1", "b", 30), pod("a1", "a", 4)], {"a": 70, "b": 70}, ["a1", "b1"]),
        # Equal shares: the higher priority, then the older, then the name.
        ([pod("a1", "a", 8), pod("b1", "b", 8, priority=5)], {"a": 70, "b": 70}, ["b1", "a1"]),
        (
            [pod("a1", "a", 8, created=9), pod("b1", "b", 8, created=3)],
            {"a": 70, "b": 70},
            ["b1", "a1"],
        ),
        ([pod("b1", "b", 8), pod("a1", "a", 8)], {"a": 70, "b": 70}, ["a1", "b1"]),
        # Progressive filling: the teams take turns as their shares grow.
        (
            [pod(f"a{i}", "a", 10, created=i) for i in range(3)]
            + [pod(f"b{i}", "b", 10, created=i) for i in range(3)],
            {"a": 64, "b": 74},
            ["a0", "b0", "a1", "b1", "a2", "b2"],
        ),
    ],
)
def test_order_among_borrowers(
    pending: list[Pod], used: dict[str, int], expected: list[str]
) -> None:
    a = Team("a", 1, {"aicore": 64})
    b = Team("b", 1, {"aicore": 64})
    held = {team: {"aicore": amount} for team, amount in used.items()}
    ranked = ranking.order(pending, cohort(a, b), held)
    assert names(ranked) == expected
    assert all(r.tier is Tier.BORROWING for r in ranked)


def test_weights_divide_the_share() -> None:
    a = Team("a", 1, {"aicore": 32})
    b = Team("b", 3, {"aicore": 96})
    ranked = ranking.order(
        [pod("a1", "a", 8), pod("b1", "b", 8)],
        cohort(a, b),
        {"a": {"aicore": 40}, "b": {"aicore": 100}},  # 48/128 = 0.375 vs 108/128/3 = 0.28
    )
    assert names(ranked) == ["b1", "a1"]
    assert ranked[0].share.value == pytest.approx(108 / 128 / 3)


def test_a_team_keeps_its_own_queue_order() -> None:
    ranked = ranking.order(
        [pod("small-new", "a", 1, created=5), pod("big-old", "a", 32, created=1)], TWO, {}
    )
    assert names(ranked) == ["big-old", "small-new"]


def test_the_pods_of_one_team_move_from_nominal_to_borrowing_as_it_fills() -> None:
    ranked = ranking.order([pod(f"a{i}", "a", 32, created=i) for i in range(4)], TWO, {})
    assert [r.tier for r in ranked] == [Tier.NOMINAL] * 2 + [Tier.BORROWING] * 2


# reclaim ------------------------------------------------------------------------------------


def running_b(*specs: tuple[str, int, int, float], team: str = "b", node: str = "") -> list[Pod]:
    return [pod(name, team, cores, 0, prio, created, node) for name, cores, prio, created in specs]


def test_reclaim_explains_the_victim_with_the_numbers() -> None:
    running = [
        pod("a-old", "a", 32),
        *running_b(("b1", 64, 0, 1), ("b2", 16, 0, 2), ("b3", 16, 0, 3)),
    ]
    answer = reclaim.reclaim(pod("a-new", "a", 16), TWO, running)
    assert answer.satisfied
    assert answer.needed == {"aicore": 16}
    assert [v.pod.name for v in answer.victims] == ["b3"]  # the newest
    (victim,) = answer.victims
    assert victim.reason == (
        "team b borrows 32 aicore above its nominal 64; team a needs 16 aicore of its nominal back"
    )
    assert victim.borrowed == {"aicore": 32}
    assert answer.freed == {"aicore": 16}


@pytest.mark.parametrize(
    ("running", "ask", "expected"),
    [
        # Lowest priority first, then newest.
        (
            running_b(
                ("hi", 16, 5, 1), ("lo-old", 16, 0, 1), ("lo-new", 16, 0, 2), ("base", 64, 9, 0)
            ),
            16,
            ["lo-new"],
        ),
        (
            running_b(
                ("hi", 16, 5, 1), ("lo-old", 16, 0, 1), ("lo-new", 16, 0, 2), ("base", 64, 9, 0)
            ),
            32,
            ["lo-new", "lo-old"],
        ),
        # Only as many as needed: the small newest pod is not enough, so the next one is added,
        # and then the small one, which frees nothing needed, is dropped again.
        (running_b(("big", 32, 0, 1), ("tiny", 4, 0, 2), ("base", 64, 9, 0)), 16, ["big"]),
        # Never below the nominal: b borrows 8, so its 16-core pod may not go.
        (running_b(("b1", 16, 0, 2), ("base", 56, 0, 1)), 8, []),
    ],
)
def test_reclaim_choice(running: list[Pod], ask: int, expected: list[str]) -> None:
    # a holds the rest of the pool, so what a asks is what b's borrowing keeps from it.
    everything = [*running, pod("a-held", "a", 128 - sum(p.demand["aicore"] for p in running))]
    answer = reclaim.reclaim(pod("a-new", "a", ask), TWO, everything)
    assert [v.pod.name for v in answer.victims] == expected
    assert answer.satisfied is bool(expected)
    assert all(v.pod.team == "b" for v in answer.victims)


def test_reclaim_never_takes_the_lenders_own_pods() -> None:
    # a's own pods are the newest and lowest in priority, but they are a's.
    running = [
        pod("a-old", "a", 24, priority=-5, created=8),
        pod("a-new", "a", 16, priority=-5, created=9),
        *running_b(("b1", 88, 0, 1)),
    ]
    answer = reclaim.reclaim(pod("a-next", "a", 16), TWO, running)
    assert not answer.satisfied  # b1 alone would take b below its nominal
    assert answer.victims == ()
    assert answer.needed == {"aicore": 16}
    assert "the borrowers' pods that may be taken hold 0 aicore" in answer.reason
    running.append(pod("b2", "b", 16, created=0))
    running[2] = pod("b1", "b", 72, created=1)
    answer = reclaim.reclaim(pod("a-next", "a", 16), TWO, running)
    assert [v.pod.name for v in answer.victims] == ["b2"]


@pytest.mark.parametrize(
    ("held", "ask", "why"),
    [
        (
            60,
            8,
            "team a is owed 4 aicore of its nominal for a-new (aicore 60+8 of 64); the pool lacks 8 aicore",
        ),
        (64, 8, "team a is owed nothing of its nominal"),
    ],
)
def test_reclaim_takes_back_no_more_than_the_lender_is_owed(held: int, ask: int, why: str) -> None:
    running = [pod("a-held", "a", held), *running_b(("b1", 8, 0, 1), ("b-base", 120 - held, 0, 0))]
    answer = reclaim.reclaim(pod("a-new", "a", ask), TWO, running)
    assert not answer.satisfied
    assert why in answer.reason
    assert answer.victims == ()


def test_reclaim_with_room_to_spare_evicts_nothing() -> None:
    answer = reclaim.reclaim(pod("a-new", "a", 8), TWO, [pod("b1", "b", 80)])
    assert answer.satisfied
    assert answer.victims == ()


def test_reclaim_takes_from_every_borrower_and_says_so_per_team() -> None:
    three = cohort(A, B, Team("c", 1, {"aicore": 0}), capacity={"aicore": 128})
    running = [
        pod("a-held", "a", 32),
        *running_b(("b1", 16, 0, 5), ("b-base", 64, 0, 0)),
        *running_b(("c1", 16, 0, 1), team="c"),
    ]
    answer = reclaim.reclaim(pod("a-new", "a", 32), three, running)
    assert answer.satisfied
    assert [v.pod.name for v in answer.victims] == ["b1", "c1"]
    assert answer.victims[1].reason.startswith("team c borrows 16 aicore above its nominal 0;")


def on_node(node: str, room: int) -> reclaim.Fits:
    """The pending pod fits once the victims on ``node`` free ``room`` aicore."""

    def fits(victims: Sequence[Pod]) -> bool:
        return sum(v.demand["aicore"] for v in victims if v.node == node) >= room

    return fits


def test_reclaim_seeks_the_room_on_one_node() -> None:
    running = [
        pod("a-held", "a", 48),
        *running_b(("base", 48, 0, 0), node="n0"),
        *running_b(("n1-a", 8, 0, 9), ("n1-b", 8, 0, 1), node="n1"),
        *running_b(("n2-a", 8, 0, 8), ("n2-b", 8, 0, 7), node="n2"),
    ]
    answer = reclaim.reclaim(pod("a-new", "a", 16), TWO, running, on_node("n2", 16))
    assert answer.satisfied
    assert sorted(v.pod.name for v in answer.victims) == ["n2-a", "n2-b"]


def test_reclaim_on_a_node_when_the_pool_has_room_but_no_node_does() -> None:
    running = [
        pod("a-held", "a", 16),
        *running_b(("n1-a", 8, 0, 2), ("n1-b", 8, 0, 1), ("base", 64, 0, 0), node="n1"),
    ]
    answer = reclaim.reclaim(pod("a-new", "a", 16), TWO, running, on_node("n1", 16))
    assert answer.needed == {}
    assert [v.pod.name for v in answer.victims] == ["n1-a", "n1-b"]
    assert answer.victims[0].reason == (
        "team b borrows 16 aicore above its nominal 64; "
        "team a needs room on one node for 16 aicore within its nominal"
    )


def test_reclaim_prefers_the_node_with_the_lower_priority_victims() -> None:
    running = [
        pod("a-held", "a", 48),
        *running_b(("base", 48, 0, 0), node="n0"),
        *running_b(("n1-a", 16, 0, 9), node="n1"),
        *running_b(("n2-a", 16, 3, 9), node="n2"),
    ]
    fits = lambda victims: any(v.node in ("n1", "n2") for v in victims)  # noqa: E731
    answer = reclaim.reclaim(pod("a-new", "a", 16), TWO, running, fits)
    assert [v.pod.name for v in answer.victims] == ["n1-a"]


def test_reclaim_fails_when_no_node_can_be_freed() -> None:
    running = [pod("a-held", "a", 48), *running_b(("b1", 80, 0, 0), node="n1")]
    answer = reclaim.reclaim(pod("a-new", "a", 16), TWO, running, on_node("n1", 16))
    assert not answer.satisfied  # b1 would take b below its nominal
    assert answer.victims == ()


def test_a_pod_of_a_unit_the_team_is_owed_goes_ahead_of_its_own_teams_borrowing_head() -> None:
    teams = (
        Team("a", 1, {"310P-aicore": 32, "910B-aicore": 80}),
        Team("b", 1, {"310P-aicore": 32, "910B-aicore": 80}),
    )
    both = fairshare.Cohort({"310P-aicore": 64, "910B-aicore": 160}, teams)
    ranked = ranking.order(
        [
            Pod("big", "a", {"910B-aicore": 40}, created=1),
            Pod("small", "a", {"310P-aicore": 8}, created=2),
            Pod("b1", "b", {"910B-aicore": 8}),
        ],
        both,
        {"a": {"910B-aicore": 80}, "b": {"910B-aicore": 80, "310P-aicore": 32}},
    )
    assert names(ranked) == ["small", "b1", "big"]
    assert [r.tier for r in ranked] == [Tier.NOMINAL, Tier.BORROWING, Tier.BORROWING]


def test_a_team_below_its_nominal_is_a_lender_even_for_a_pod_that_overshoots() -> None:
    ranked = ranking.order(
        [pod("a1", "a", 32), pod("b1", "b", 4)], TWO, {"a": {"aicore": 60}, "b": {"aicore": 64}}
    )
    assert names(ranked) == ["a1", "b1"]
    assert ranked[0].tier is Tier.NOMINAL


@pytest.mark.parametrize(
    ("reserved", "verdict"),
    [({}, Verdict.BORROW), ({"aicore": 20}, Verdict.BORROW), ({"aicore": 21}, Verdict.NO_IDLE)],
)
def test_a_borrowing_pod_leaves_what_lenders_wait_for(
    reserved: dict[str, int], verdict: Verdict
) -> None:
    used = {"a": {"aicore": 64}, "b": {"aicore": 36}}  # 28 idle, all of it b's nominal
    answer = borrowing.check(pod("p", "a", 8), TWO, used, reserved)
    assert answer.verdict is verdict
    if verdict is Verdict.NO_IDLE:
        assert "only 28 aicore (21 held for lenders' pods) idle" in answer.message


def test_reserved_capacity_does_not_hold_back_a_pod_within_its_nominal() -> None:
    used = {"a": {"aicore": 32}, "b": {"aicore": 36}}
    answer = borrowing.check(pod("p", "a", 8), TWO, used, {"aicore": 60})
    assert answer.verdict is Verdict.NOMINAL
