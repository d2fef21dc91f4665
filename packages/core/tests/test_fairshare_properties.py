"""Property tests of fair sharing: reclaim takes only borrowed capacity from other teams, the
queue serves teams within their nominal first, and admission never over-commits the pool."""

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from vnpu_core import borrowing, fairshare, ranking, reclaim
from vnpu_core.borrowing import Verdict
from vnpu_core.fairshare import Pod, Team
from vnpu_core.ranking import Tier

UNITS = ("aicore", "memory")
NODES = ("n0", "n1", "n2")


@st.composite
def cohorts(draw: st.DrawFn) -> fairshare.Cohort:
    teams = []
    for i in range(draw(st.integers(2, 4))):
        nominal = {u: draw(st.integers(0, 64)) for u in UNITS}
        limits = {u: draw(st.integers(0, 32)) for u in UNITS if draw(st.booleans())}
        teams.append(Team(f"t{i}", draw(st.sampled_from([1, 2, 3, 0.5])), nominal, limits))
    nominal = fairshare.total(t.nominal for t in teams)
    capacity = {u: nominal.get(u, 0) + draw(st.integers(-8, 8)) for u in UNITS}
    return fairshare.Cohort(capacity, tuple(teams))


def demands(draw: st.DrawFn) -> dict[str, int]:
    return {u: draw(st.integers(0, 24)) for u in UNITS}


@st.composite
def states(draw: st.DrawFn) -> tuple[fairshare.Cohort, list[Pod], Pod]:
    """A cohort, pods admitted one by one through ``check`` (a state the rules can reach),
    and a pending pod."""
    cohort = draw(cohorts())
    names = [t.name for t in cohort.teams]
    running: list[Pod] = []
    for i in range(draw(st.integers(0, 30))):
        candidate = Pod(
            f"p{i}",
            draw(st.sampled_from(names)),
            demands(draw),
            draw(st.integers(-2, 2)),
            float(draw(st.integers(0, 20))),
            draw(st.sampled_from(NODES)),
        )
        if borrowing.check(candidate, cohort, fairshare.usage(running)).verdict.admitted:
            running.append(candidate)
    pending = Pod("pending", draw(st.sampled_from(names)), demands(draw), 0, 30.0)
    return cohort, running, pending


def fits_on_a_node(pending: Pod, running: Sequence[Pod]) -> reclaim.Fits:
    """Nodes of 48 aicore each: the pod fits once the victims leave enough on one node."""
    held = dict.fromkeys(NODES, 0)
    for pod in running:
        held[pod.node] += pod.demand.get("aicore", 0)

    def fits(victims: Sequence[Pod]) -> bool:
        freed = dict.fromkeys(NODES, 0)
        for victim in victims:
            freed[victim.node] += victim.demand.get("aicore", 0)
        asked = pending.demand.get("aicore", 0)
        return any(48 - held[n] + freed[n] >= asked for n in NODES)

    return fits


def check_victims(cohort: fairshare.Cohort, running: list[Pod], answer: reclaim.Reclaim) -> None:
    pending = answer.pod
    victims = [v.pod for v in answer.victims]
    if not answer.satisfied:
        assert victims == []
        return
    assert len({v.name for v in victims}) == len(victims)
    assert all(v in running for v in victims)
    # Never a pod of the lender's team.
    assert all(v.team != pending.team for v in victims)
    before = fairshare.usage(running)
    after = fairshare.usage(p for p in running if p not in victims)
    units = sorted(answer.needed) or [u for u, a in pending.demand.items() if a > 0]
    for victim in victims:
        team = cohort.team(victim.team)
        for unit in units:
            if victim.demand.get(unit, 0) > 0:
                # Never a borrower below its nominal on what is taken back; so it was borrowing.
                assert after.get(team.name, {}).get(unit, 0) >= team.nominal.get(unit, 0)
                assert before[team.name][unit] > team.nominal.get(unit, 0)
    # Enough is freed: the pod now starts (what it takes above its nominal was idle).
    assert borrowing.check(pending, cohort, after).verdict.admitted


@settings(max_examples=120, deadline=None)
@given(states())
def test_reclaim_takes_only_borrowed_capacity_of_other_teams(
    state: tuple[fairshare.Cohort, list[Pod], Pod],
) -> None:
    cohort, running, pending = state
    answer = reclaim.reclaim(pending, cohort, running)
    check_victims(cohort, running, answer)
    if answer.satisfied and answer.victims:
        # Only as many as needed: without any one victim the pool would lack room.
        for left_out in answer.victims:
            rest = [v.pod for v in answer.victims if v is not left_out]
            freed = fairshare.total(p.demand for p in rest)
            assert any(freed.get(u, 0) < n for u, n in answer.needed.items())
    verdict = borrowing.check(pending, cohort, fairshare.usage(running)).verdict
    if verdict in (Verdict.NO_IDLE, Verdict.OVER_LIMIT):
        assert not answer.satisfied  # only a lender reclaims, and only what it is owed
    if verdict.admitted:
        assert answer.satisfied
        assert answer.victims == ()
    if verdict is Verdict.RECLAIM:
        team = cohort.team(pending.team)
        held = fairshare.usage(running).get(team.name, {})
        assert all(held.get(u, 0) < team.nominal.get(u, 0) for u, a in pending.demand.items() if a)


@settings(max_examples=120, deadline=None)
@given(states())
def test_reclaim_on_a_node_keeps_the_same_rules_and_makes_the_room(
    state: tuple[fairshare.Cohort, list[Pod], Pod],
) -> None:
    cohort, running, pending = state
    fits = fits_on_a_node(pending, running)
    answer = reclaim.reclaim(pending, cohort, running, fits)
    check_victims(cohort, running, answer)
    if answer.satisfied:
        assert fits([v.pod for v in answer.victims])


@settings(max_examples=120, deadline=None)
@given(states(), st.lists(st.tuples(st.integers(0, 3), st.integers(-1, 1)), max_size=12))
def test_a_team_below_its_nominal_always_precedes_a_team_above_it(
    state: tuple[fairshare.Cohort, list[Pod], Pod], extra: list[tuple[int, int]]
) -> None:
    cohort, running, pending = state
    names = [t.name for t in cohort.teams]
    queue = [pending] + [
        Pod(f"q{i}", names[team % len(names)], {"aicore": 4 + i, "memory": i}, priority, float(i))
        for i, (team, priority) in enumerate(extra)
    ]
    used = fairshare.usage(running)
    ranked = ranking.order(queue, cohort, used)
    assert sorted(r.pod.name for r in ranked) == sorted(p.name for p in queue)
    tiers = [r.tier for r in ranked]
    assert tiers == sorted(tiers, key=[Tier.NOMINAL, Tier.BORROWING].index)
    for r in ranked:
        team = cohort.team(r.pod.team)
        held = used.get(team.name, {})
        above = any(
            held.get(u, 0) > team.nominal.get(u, 0) for u, a in r.pod.demand.items() if a > 0
        )
        if above:
            assert r.tier is Tier.BORROWING
    # Inside a tier, each team's own pods keep their queue order (priority, age, name).
    for name in names:
        for tier in Tier:
            mine = [r.pod for r in ranked if r.pod.team == name and r.tier is tier]
            assert mine == sorted(mine, key=lambda p: (-p.priority, p.created, p.name))


@settings(max_examples=120, deadline=None)
@given(cohorts(), st.data())
def test_admission_never_over_commits_the_pool_nor_a_borrowing_limit(
    cohort: fairshare.Cohort, data: st.DataObject
) -> None:
    running: list[Pod] = []
    names = [t.name for t in cohort.teams]
    for i in range(data.draw(st.integers(1, 40))):
        team = data.draw(st.sampled_from(names))
        candidate = Pod(f"p{i}", team, {u: data.draw(st.integers(0, 24)) for u in UNITS})
        answer = borrowing.check(candidate, cohort, fairshare.usage(running))
        if answer.verdict is Verdict.BORROW:
            assert answer.borrowed
        if answer.verdict.admitted:
            running.append(candidate)
        everyone = fairshare.total(p.demand for p in running)
        assert all(everyone.get(u, 0) <= cohort.pool.get(u, 0) for u in everyone if everyone[u])
        for t in cohort.teams:
            held = fairshare.usage(running).get(t.name, {})
            for unit, amount in held.items():
                limit = t.limit(unit)
                if limit is not None:
                    assert amount - t.nominal.get(unit, 0) <= limit
