"""Operator YAML read within bounds: anchors and aliases, depth and size refused by every loader."""

from __future__ import annotations

import io
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from vnpu_core import cli, deviceconfig, errors, tenants, yamldoc

# A "billion laughs" document: nine levels of ten aliases each, 10**9 strings once expanded
# (and far more memory once anything walks or prints them), in under 400 bytes.
BOMB = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g,*g]
vnpus: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""
ALIASES = "anchors (&name) and aliases (*name) are not allowed"


def test_the_bomb_is_a_few_hundred_bytes() -> None:
    assert len(BOMB.encode()) == 376
    assert BOMB.count("*") == 80


def _peak_bytes_of(call: Callable[[], object]) -> tuple[Exception, int]:
    """What ``call`` raised, and the most memory Python held meanwhile."""
    tracing = tracemalloc.is_tracing()
    if tracing:
        tracemalloc.reset_peak()
    else:
        tracemalloc.start()
    try:
        call()
    except Exception as exc:  # the caller checks which
        raised = exc
    else:
        raise AssertionError("nothing was raised")
    finally:
        _, peak = tracemalloc.get_traced_memory()
        if not tracing:
            tracemalloc.stop()
    return raised, peak


def test_device_config_refuses_the_bomb_at_its_first_anchor_without_expanding_it() -> None:
    raised, peak = _peak_bytes_of(lambda: deviceconfig.load(BOMB, "device-config.yaml"))
    assert isinstance(raised, errors.ConfigError)
    assert raised.path == "(document)"
    assert raised.value == BOMB.splitlines()[0]
    assert raised.problem.startswith("YAML anchor &a refused at line 1, column 4: ")
    assert ALIASES in raised.problem
    assert "no use" in raised.problem
    assert peak < 2 * 1024 * 1024  # expanded and printed, the value would take gigabytes


def test_tenants_config_refuses_the_bomb() -> None:
    with pytest.raises(errors.QuotaError) as caught:
        tenants.load(BOMB.replace("vnpus:", "teams:"), "ConfigMap vnpu/tenants tenants.yaml")
    assert caught.value.path == "line 1, column 4"
    assert caught.value.problem.startswith("YAML anchor &a refused: ")
    assert ALIASES in caught.value.problem


def test_planner_refuses_the_bomb_with_exit_2(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("nodes: [{name: a, chip: 310P3, chips: 2}]\n")
    workload = tmp_path / "workload.yaml"
    workload.write_text("kind: Pod\n---\n" + BOMB)
    out, err = io.StringIO(), io.StringIO()
    status = cli.main(
        ["plan", "--cluster", str(cluster), "--workload", str(workload)], stdout=out, stderr=err
    )
    assert (status, out.getvalue()) == (2, "")
    assert err.getvalue().startswith(
        f"vnpu plan: {workload}: line 3, column 4: YAML anchor &a refused: {ALIASES}"
    )


# fmt: off
REFUSALS: list[tuple[str, str, str, int, int, object, int | None]] = [
    # (id, text, summary, line, column, value, limit)
    ("alias", "a: 1\nb: *x\n", "YAML alias *x refused", 2, 4, "b: *x", None),
    ("anchor-unused", "a: &x 1\n", "YAML anchor &x refused", 1, 4, "a: &x 1", None),
    ("anchor-on-a-list", "- &x [1, 2]\n", "YAML anchor &x refused", 1, 3, "- &x [1, 2]", None),
    ("merge-key", "base: &b {x: 1}\nmine: {<<: *b}\n", "YAML anchor &b refused", 1, 7, "base: &b {x: 1}", None),
    ("too-deep-flow", "a: " + "[" * 64 + "]" * 64, "YAML nested too deeply", 1, 67, "a: " + "[" * 64 + "]" * 64, 64),
    ("too-deep-block", "".join(f"{'  ' * i}k{i}:\n" for i in range(65)) + "  " * 65 + "v: 1\n", "YAML nested too deeply", 65, 129, "  " * 64 + "k64:", 64),
    ("key-twice", "a: 1\nb: 2\na: 3\n", "YAML syntax error", 3, 1, "a: 3", None),
    ("key-twice-as-written-otherwise", "{1: a, 0x1: b}\n", "YAML syntax error", 1, 8, "{1: a, 0x1: b}", None),
    ("date-that-is-not", "when: 2020-13-45\n", "YAML value cannot be read", 1, 7, "when: 2020-13-45", None),
    ("integer-too-long", "n: " + "7" * 5000, "YAML value cannot be read", 1, 4, "n: " + "7" * 197, None),
    ("control-character", "a: b\x07\n", "YAML syntax error", 1, 5, "a: b\x07", None),
    ("syntax", "a: [1, 2\n", "YAML syntax error", 2, 1, "", None),
]
# fmt: on


@pytest.mark.parametrize(
    ("text", "summary", "line", "column", "value", "limit"),
    [case[1:] for case in REFUSALS],
    ids=[case[0] for case in REFUSALS],
)
def test_refusals_name_what_where_and_the_limit(
    text: str, summary: str, line: int, column: int, value: object, limit: int | None
) -> None:
    with pytest.raises(errors.DocumentError) as caught:
        yamldoc.load(text)
    assert caught.value.summary == summary
    assert (caught.value.line, caught.value.column) == (line, column)
    assert caught.value.value == value
    assert caught.value.limit == limit
    assert str(caught.value).startswith(f"{summary} at line {line}, column {column}: ")


def test_the_depth_limit_is_inclusive() -> None:
    nested: object = yamldoc.load("[" * 64 + "]" * 64)
    depth = 0
    while isinstance(nested, list):
        depth += 1
        nested = nested[0] if nested else None
    assert depth == 64


def test_the_depth_error_says_the_limit() -> None:
    with pytest.raises(errors.DocumentError) as caught:
        yamldoc.load("[" * 10 + "]" * 10, max_depth=9)
    assert caught.value.detail == "more than 9 levels of mappings and lists"
    assert caught.value.limit == 9


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("a: " + "x" * 7, False),  # 10 bytes: at the limit
        ("a: " + "x" * 8, True),  # 11 bytes
        ("a: " + "é" * 4, True),  # 7 characters but 11 bytes: the limit is in bytes
    ],
)
def test_the_size_limit_counts_utf8_bytes(text: str, refused: bool) -> None:
    if not refused:
        assert yamldoc.load(text, max_bytes=10) == {"a": text[3:]}
        return
    with pytest.raises(errors.DocumentError) as caught:
        yamldoc.load(text, max_bytes=10)
    size = len(text.encode())
    assert caught.value.summary == "YAML document too large"
    assert caught.value.detail == f"{size} bytes, more than the limit of 10 bytes"
    assert caught.value.value == size
    assert caught.value.limit == 10
    assert caught.value.where == ""


def test_an_oversize_device_config_is_refused_before_it_is_parsed() -> None:
    # Past the limit by one byte, and malformed from the first line: only the size is reported.
    text = "vnpus: [\n" + "#" * (deviceconfig.MAX_BYTES - 9) + "\n"
    assert len(text.encode()) == deviceconfig.MAX_BYTES + 1
    with pytest.raises(errors.ConfigError) as caught:
        deviceconfig.load(text, "device-config.yaml")
    assert caught.value.path == "(document)"
    assert caught.value.value == deviceconfig.MAX_BYTES + 1
    assert caught.value.problem == (
        f"YAML document too large: {deviceconfig.MAX_BYTES + 1} bytes, "
        f"more than the limit of {deviceconfig.MAX_BYTES} bytes"
    )


def test_a_device_config_at_the_limit_loads() -> None:
    head = "vnpus: []\n"
    text = head + "#" * (deviceconfig.MAX_BYTES - len(head) - 1) + "\n"
    assert len(text.encode()) == deviceconfig.MAX_BYTES
    assert deviceconfig.load(text).catalog == deviceconfig.load(head).catalog


def test_oversize_is_the_error_load_gives() -> None:
    made = deviceconfig.oversize(10**9, "device-config.yaml")
    assert made.path == "(document)"
    assert made.value == 10**9
    assert str(made) == (
        "device-config.yaml: (document): YAML document too large: 1000000000 bytes, "
        f"more than the limit of {deviceconfig.MAX_BYTES} bytes (got 1000000000)"
    )


def test_an_oversize_tenants_config_is_refused() -> None:
    text = "teams: []\n" + "#" * tenants.MAX_BYTES
    with pytest.raises(errors.QuotaError) as caught:
        tenants.load(text, "ConfigMap vnpu/tenants tenants.yaml")
    assert caught.value.path == "(document)"
    assert caught.value.value == len(text)
    assert "more than the limit of 262144 bytes" in caught.value.problem


def test_a_too_deep_device_config_names_the_line_and_the_limit() -> None:
    text = "vnpus:\n  configs:\n  - templates: " + "[" * 70 + "]" * 70 + "\n"
    with pytest.raises(errors.ConfigError) as caught:
        deviceconfig.load(text, "device-config.yaml")
    assert caught.value.path == "(document)"
    assert caught.value.value == text.splitlines()[2][:200]
    assert caught.value.problem == (
        "YAML nested too deeply at line 3, column 76: more than 64 levels of mappings and lists"
    )


def test_planner_refuses_a_device_config_file_above_the_limit_unread(tmp_path: Path) -> None:
    config = tmp_path / "device-config.yaml"
    config.write_text("vnpus: []\n" + "#" * deviceconfig.MAX_BYTES * 2)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("nodes: [{name: a, chip: 310P3, chips: 2}]\n")
    workload = tmp_path / "workload.yaml"
    workload.write_text("kind: Pod\n")
    argv = ["plan", "--cluster", str(cluster), "--workload", str(workload)]
    out, err = io.StringIO(), io.StringIO()
    assert cli.main([*argv, "--device-config", str(config)], stdout=out, stderr=err) == 2
    size = config.stat().st_size
    assert err.getvalue() == (
        f"vnpu plan: {config}: (file): YAML document too large: {size} bytes, more than the "
        f"limit of {deviceconfig.MAX_BYTES} bytes (got {size})\n"
    )


def test_load_all_gives_each_document_with_its_line_and_refuses_anchors_in_any() -> None:
    found = yamldoc.load_all("# note\n---\na: 1\n---\n---\n- x\n")
    assert [(d.data, d.line) for d in found] == [({"a": 1}, 3), (None, 5), (["x"], 6)]
    with pytest.raises(errors.DocumentError) as caught:
        yamldoc.load_all("a: 1\n---\nb: &x 2\n")
    assert (caught.value.summary, caught.value.line) == ("YAML anchor &x refused", 3)


def test_plain_data_still_loads() -> None:
    text = "a: [1, 2.5, true, null, '&not-an-anchor', \"*nor-an-alias\"]\nb: {c: 2020-01-02}\n"
    data = yamldoc.load(text)
    assert isinstance(data, dict)
    assert data["a"] == [1, 2.5, True, None, "&not-an-anchor", "*nor-an-alias"]
    assert yamldoc.load("") is None
