"""ResourceQuota reading, the quota check with its refusal messages, and the standings."""

from typing import Any

import pytest

from vnpu_core import errors, holdings, quotas, tenants
from vnpu_core.holdings import ALL_MODELS, Amount, Key, Unit

MEM_310P = Key("Ascend310P", Unit.MEMORY)
CORES_310P = Key("Ascend310P", Unit.AICORE)
CHIPS = Key(ALL_MODELS, Unit.CHIPS)


def quota_obj(hard: dict[str, object], name: str = "npu", **spec: object) -> dict[str, Any]:
    return {"metadata": {"namespace": "team-a", "name": name}, "spec": {"hard": hard, **spec}}


def amount(**values: int) -> Amount:
    return Amount({holdings.parse_key(k.replace("_", "-")): v for k, v in values.items()})  # type: ignore[misc]


@pytest.mark.parametrize(
    ("resource", "value", "key", "number"),
    [
        ("limits.huawei.com/Ascend310P-memory", "16384", MEM_310P, 16384),
        ("requests.huawei.com/Ascend910B3", 8, Key("Ascend910B3", Unit.DEVICES), 8),
        ("limits.vnpu.io/aicore", "1k", Key(ALL_MODELS, Unit.AICORE), 1000),
        ("limits.vnpu.io/memory", "64e3", Key(ALL_MODELS, Unit.MEMORY), 64000),
        ("limits.vnpu.io/chips", 4, CHIPS, 4),
        ("limits.vnpu.io/vnpus", "7", Key(ALL_MODELS, Unit.VNPUS), 7),
        ("limits.vnpu.io/devices", "9", Key(ALL_MODELS, Unit.DEVICES), 9),
        ("limits.vnpu.io/Ascend310P-aicore", "16", CORES_310P, 16),
        ("limits.vnpu.io/Ascend910B4-1-chips", "2", Key("Ascend910B4-1", Unit.CHIPS), 2),
        ("limits.vnpu.io/Ascend310P-vnpus", "0", Key("Ascend310P", Unit.VNPUS), 0),
    ],
)
def test_hard_entries_vnpu_reads(resource: str, value: object, key: Key, number: int) -> None:
    read = quotas.read_resource_quota(quota_obj({resource: value, "cpu": "4", "pods": "10"}))
    assert read.label == "team-a/npu"
    assert read.limits == (quotas.Limit(resource, key, number),)
    assert not read.scoped


def test_other_entries_are_ignored_and_scopes_noted() -> None:
    hard = {"requests.huawei.com/Ascend310P-memory": "6144", "limits.huawei.com/AscendX-memory": 1}
    assert quotas.read_resource_quota(quota_obj(hard)).limits == ()
    scoped = quotas.read_resource_quota(
        quota_obj({"limits.vnpu.io/chips": 1}, scopes=["Terminating"])
    )
    assert scoped.scoped


@pytest.mark.parametrize(
    ("obj", "path", "value", "problem"),
    [
        (quota_obj({"limits.vnpu.io/chips": "two"}), 'spec.hard["limits.vnpu.io/chips"]', "two", "quantity"),
        (quota_obj({"limits.vnpu.io/memory": "16Gi"}), 'spec.hard["limits.vnpu.io/memory"]', "16Gi", "binary"),
        (quota_obj({"limits.vnpu.io/aicore": "-1"}), 'spec.hard["limits.vnpu.io/aicore"]', "-1", "negative"),
        (quota_obj({"limits.vnpu.io/aicore": "500m"}), 'spec.hard["limits.vnpu.io/aicore"]', "500m", "whole"),
        (quota_obj({"limits.vnpu.io/cores": "1"}), 'spec.hard["limits.vnpu.io/cores"]', "limits.vnpu.io/cores", "unknown vnpu quota resource"),
        (quota_obj({"limits.vnpu.io/Ascend999-chips": "1"}), 'spec.hard["limits.vnpu.io/Ascend999-chips"]', "limits.vnpu.io/Ascend999-chips", "unknown vnpu quota resource"),
        ({"metadata": {"namespace": "team-a", "name": "npu"}, "spec": {"hard": ["x"]}}, "spec.hard", ["x"], "mapping"),
    ],
)  # fmt: skip
def test_malformed_quotas_name_object_path_and_value(
    obj: dict[str, Any], path: str, value: object, problem: str
) -> None:
    with pytest.raises(errors.QuotaError) as caught:
        quotas.read_resource_quota(obj)
    assert caught.value.source == "ResourceQuota team-a/npu"
    assert caught.value.path == path
    assert caught.value.value == value
    assert problem in caught.value.problem
    assert str(caught.value).startswith(f"ResourceQuota team-a/npu: {path}: ")


QUOTA = quotas.read_resource_quota(
    quota_obj({"limits.huawei.com/Ascend310P-memory": "16384", "limits.vnpu.io/chips": "2"})
)
OTHER_NS = quotas.ResourceQuota("team-b", "npu", (quotas.Limit("limits.vnpu.io/chips", CHIPS, 0),))


@pytest.mark.parametrize(
    ("used", "ask", "messages"),
    [
        pytest.param({}, amount(Ascend310P_memory=8192), [], id="fits"),
        pytest.param(
            {"team-a": amount(Ascend310P_memory=12288)},
            amount(Ascend310P_memory=8192),
            ["quota team-a/npu limits.huawei.com/Ascend310P-memory: used 12288 + asked 8192 > limit 16384 MiB"],
            id="memory-over",
        ),
        pytest.param(
            {"team-a": amount(Ascend310P_memory=8192)}, amount(Ascend310P_memory=8192), [], id="exactly-at-limit"
        ),
        pytest.param(
            {"team-a": amount(chips=2, Ascend310P_memory=99999)},
            amount(Ascend310P_aicore=1),
            [],
            id="only-asked-units-are-checked",
        ),
        pytest.param(
            {"team-a": amount(chips=1), "team-b": amount(chips=50)},
            amount(chips=2, Ascend310P_memory=20000),
            [
                "quota team-a/npu limits.huawei.com/Ascend310P-memory: used 0 + asked 20000 > limit 16384 MiB",
                "quota team-a/npu limits.vnpu.io/chips: used 1 + asked 2 > limit 2 chips",
            ],
            id="two-limits-other-namespace-ignored",
        ),
    ],
)  # fmt: skip
def test_resource_quota_check(used: dict[str, Amount], ask: Amount, messages: list[str]) -> None:
    refusals = quotas.check(ask, "team-a", used, [QUOTA, OTHER_NS])
    assert [r.message for r in refusals] == messages
    assert all(r.rule is quotas.Rule.RESOURCE_QUOTA for r in refusals)


def test_scoped_quotas_are_not_applied() -> None:
    scoped = quotas.ResourceQuota(
        "team-a", "s", (quotas.Limit("limits.vnpu.io/chips", CHIPS, 0),), True
    )
    assert quotas.check(amount(chips=1), "team-a", {}, [scoped]) == ()


TEAMS = tenants.load("""\
teams:
  - name: vision
    namespaces: [vision, vision-dev]
    nominal: {Ascend310P-aicore: 24}
    borrowingLimit: {Ascend310P-aicore: 8}
  - name: nlp
    namespaces: [nlp]
    nominal: {Ascend310P-aicore: 16, chips: 4}
  - name: batch
    namespaces: [batch]
    nominal: {chips: 0}
""")


@pytest.mark.parametrize(
    ("namespace", "used", "ask", "rules", "messages"),
    [
        pytest.param("vision", {}, amount(Ascend310P_aicore=24), [], [], id="within-nominal"),
        pytest.param(
            "vision-dev",
            {"vision": amount(Ascend310P_aicore=20)},
            amount(Ascend310P_aicore=8),
            [],
            [],
            id="borrow-idle-capacity",
        ),
        pytest.param(
            "vision",
            {"vision": amount(Ascend310P_aicore=30)},
            amount(Ascend310P_aicore=4),
            [quotas.Rule.TEAM_LIMIT],
            ["team vision Ascend310P-aicore: used 30 + asked 4 > limit 32 AI cores (nominal 24 + borrowingLimit 8)"],
            id="above-borrowing-limit",
        ),
        pytest.param(
            "vision",
            {"vision": amount(Ascend310P_aicore=24), "nlp": amount(Ascend310P_aicore=14)},
            amount(Ascend310P_aicore=4),
            [quotas.Rule.NO_IDLE_CAPACITY],
            ["team vision Ascend310P-aicore: above its nominal 24 it borrows idle capacity only: "
             "cohort used 38 + asked 4 > nominal 40 AI cores of all teams"],
            id="no-idle-capacity",
        ),
        pytest.param(
            "nlp",
            {"vision": amount(Ascend310P_aicore=32), "nlp": amount(Ascend310P_aicore=2)},
            amount(Ascend310P_aicore=14),
            [],
            [],
            id="within-nominal-even-when-others-borrowed",
        ),
        pytest.param(
            "batch",
            {"nlp": amount(chips=1)},
            amount(chips=3),
            [],
            [],
            id="borrowing-unlimited-when-idle",
        ),
        pytest.param(
            "batch",
            {"nlp": amount(chips=3)},
            amount(chips=2),
            [quotas.Rule.NO_IDLE_CAPACITY],
            ["team batch chips: above its nominal 0 it borrows idle capacity only: "
             "cohort used 3 + asked 2 > nominal 4 chips of all teams"],
            id="zero-nominal-borrows-only-idle",
        ),
        pytest.param(
            "batch",
            {"nlp": amount(chips=3)},
            amount(Ascend310P_memory=1_000_000),
            [],
            [],
            id="units-no-team-names-are-free",
        ),
        pytest.param("elsewhere", {}, amount(chips=1000), [], [], id="namespace-in-no-team"),
    ],
)  # fmt: skip
def test_team_rule(
    namespace: str,
    used: dict[str, Amount],
    ask: Amount,
    rules: list[quotas.Rule],
    messages: list[str],
) -> None:
    refusals = quotas.check(ask, namespace, used, (), TEAMS)
    assert [r.rule for r in refusals] == rules
    assert [r.message for r in refusals] == messages


def test_a_refusal_carries_its_numbers() -> None:
    (refusal,) = quotas.check(
        amount(Ascend310P_aicore=4), "vision", {"vision": amount(Ascend310P_aicore=30)}, (), TEAMS
    )
    assert (refusal.quota, refusal.resource, refusal.key) == (
        "vision",
        "Ascend310P-aicore",
        CORES_310P,
    )
    assert (refusal.used, refusal.asked, refusal.limit, refusal.nominal) == (30, 4, 32, 24)
    assert refusal.borrowing_limit == 8


def test_standings_and_borrowed() -> None:
    usage = {
        "vision": amount(Ascend310P_aicore=20),
        "vision-dev": amount(Ascend310P_aicore=10),
        "nlp": amount(chips=1),
    }
    by_team = quotas.team_usage(TEAMS, usage)
    assert by_team["vision"].names() == {"Ascend310P-aicore": 30}
    assert by_team["batch"] == holdings.ZERO
    standings = {(s.team, s.key.name): s for s in quotas.team_standings(TEAMS, usage)}
    vision = standings["vision", "Ascend310P-aicore"]
    assert (vision.used, vision.nominal, vision.limit, vision.borrowed) == (30, 24, 32, 6)
    nlp = standings["nlp", "chips"]
    assert (nlp.used, nlp.nominal, nlp.limit, nlp.borrowed) == (1, 4, None, 0)
    assert len(standings) == 3 * 2  # every team x every unit some team names
    assert quotas.borrowed(TEAMS, usage)["vision"].names() == {"Ascend310P-aicore": 6}
    (memory, chips) = quotas.quota_standings([QUOTA], {"team-a": amount(chips=1)})
    assert (memory.used, memory.limit, chips.used, chips.limit) == (0, 16384, 1, 2)
    assert (chips.quota, chips.resource) == ("team-a/npu", "limits.vnpu.io/chips")
