"""The tenants config: teams, namespaces, weights, nominal and borrowing limits."""

import pytest

from vnpu_core import errors, tenants
from vnpu_core.holdings import ALL_MODELS, Key, Unit

GOOD = """\
teams:
  - name: vision
    namespaces: [vision, vision-dev]
    weight: 2
    nominal: {Ascend310P-aicore: 32, Ascend310P-memory: 96k}
    borrowingLimit: {Ascend310P-aicore: 16}
  - name: nlp
    namespaces: [nlp]
    nominal: {aicore: "40", chips: 2}
    borrowingLimit: {chips: 0}
"""


def test_a_config_reads_into_teams() -> None:
    read = tenants.load(GOOD)
    vision, nlp = read.teams
    assert vision.namespaces == ("vision", "vision-dev")
    assert vision.weight == 2.0
    assert nlp.weight == 1.0
    cores = Key("Ascend310P", Unit.AICORE)
    assert vision.nominal == {cores: 32, Key("Ascend310P", Unit.MEMORY): 96000}
    assert vision.limit(cores) == 48
    assert vision.limit(Key("Ascend310P", Unit.MEMORY)) is None  # no borrowing limit
    assert nlp.limit(Key(ALL_MODELS, Unit.CHIPS)) == 2  # 0: no borrowing
    assert read.team_of("vision-dev") is vision
    assert read.team_of("other") is None
    assert read.team("nlp") is nlp
    assert read.cohort_nominal(Key(ALL_MODELS, Unit.AICORE)) == 40
    assert [k.name for k in read.units()] == [
        "aicore",
        "chips",
        "Ascend310P-aicore",
        "Ascend310P-memory",
    ]


def test_a_config_map_carries_the_text() -> None:
    config_map = {
        "metadata": {"namespace": "vnpu", "name": "tenants"},
        "data": {"tenants.yaml": GOOD},
    }
    assert len(tenants.from_config_map(config_map).teams) == 2
    assert tenants.from_config_map({"data": {}}) == tenants.NONE


@pytest.mark.parametrize("text", ["", "teams: []", "# nothing\n", "teams:\n"])
def test_empty_configs_have_no_teams(text: str) -> None:
    assert tenants.load(text).teams == ()


def team(extra: str) -> str:
    return f"teams:\n  - name: a\n    namespaces: [a]\n{extra}"


@pytest.mark.parametrize(
    ("text", "path", "value", "problem"),
    [
        ("cohort: x\n", "cohort", "x", "unknown key"),
        ("[1, 2]\n", "(document)", [1, 2], "mapping with a teams"),
        ("teams: {a: 1}\n", "teams", {"a": 1}, "list of teams"),
        ("teams: [x]\n", "teams[0]", "x", "mapping"),
        (team("    quota: 1\n"), "teams[0].quota", 1, "unknown key"),
        ("teams:\n  - namespaces: [a]\n", "teams[0].name", None, "team name"),
        ("teams:\n  - {name: Bad_Name, namespaces: [a]}\n", "teams[0].name", "Bad_Name", "DNS"),
        ("teams:\n  - {name: a}\n", "teams[0].namespaces", None, "at least one namespace"),
        ("teams:\n  - {name: a, namespaces: []}\n", "teams[0].namespaces", [], "at least one"),
        ("teams:\n  - {name: a, namespaces: [A]}\n", "teams[0].namespaces[0]", "A", "namespace"),
        ("teams:\n  - {name: a, namespaces: [x, x]}\n", "teams[0].namespaces[1]", "x", "twice"),
        (
            "teams:\n  - {name: a, namespaces: [x]}\n  - {name: b, namespaces: [y, x]}\n",
            "teams[1].namespaces[1]",
            "x",
            "already in team a (teams[0])",
        ),
        (
            "teams:\n  - {name: a, namespaces: [x]}\n  - {name: a, namespaces: [y]}\n",
            "teams[1].name",
            "a",
            "repeats teams[0]",
        ),
        (team("    weight: 0\n"), "teams[0].weight", 0, "positive"),
        (team("    weight: -1\n"), "teams[0].weight", -1, "positive"),
        (team("    weight: heavy\n"), "teams[0].weight", "heavy", "positive"),
        (team("    weight: .inf\n"), "teams[0].weight", float("inf"), "positive"),
        (team("    weight: true\n"), "teams[0].weight", True, "positive"),
        (team("    nominal: [aicore]\n"), "teams[0].nominal", ["aicore"], "mapping"),
        (
            team("    nominal: {aicores: 1}\n"),
            "teams[0].nominal.aicores",
            "aicores",
            "unknown unit",
        ),
        (
            team("    nominal: {Ascend999-aicore: 1}\n"),
            "teams[0].nominal.Ascend999-aicore",
            "Ascend999-aicore",
            "unknown chip model",
        ),
        (team("    nominal: {aicore: -4}\n"), "teams[0].nominal.aicore", -4, "negative"),
        (team("    nominal: {memory: 16Gi}\n"), "teams[0].nominal.memory", "16Gi", "binary"),
        (
            team("    borrowingLimit: {chips: 1.5}\n"),
            "teams[0].borrowingLimit.chips",
            1.5,
            "whole number",
        ),
        ("teams: [\n", "line 2, column 1", "", "YAML syntax error"),
        ("teams: []\nteams: []\n", "line 2, column 1", "teams: []", "given twice"),
        ("teams: *t\n", "line 1, column 8", "teams: *t", "YAML alias *t refused: anchors"),
    ],
)
def test_bad_configs_name_the_path_and_value(
    text: str, path: str, value: object, problem: str
) -> None:
    with pytest.raises(errors.QuotaError) as caught:
        tenants.load(text, "ConfigMap vnpu/tenants tenants.yaml")
    assert caught.value.source == "ConfigMap vnpu/tenants tenants.yaml"
    assert caught.value.path == path
    assert caught.value.value == value
    assert problem in caught.value.problem, caught.value.problem
