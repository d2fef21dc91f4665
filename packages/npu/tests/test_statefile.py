"""State files: written whole by a rename, read back or refused with the path and the reason."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Any

import pytest

from vnpu_npu import errors, statefile

FORMAT = "test-book/v1"


def test_a_written_file_reads_back_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "book.json"
    for durable in (True, False):
        statefile.write(path, FORMAT, [{"a": 1}, {"b": [2]}], durable=durable)
        assert statefile.read(path, FORMAT, "book") == [{"a": 1}, {"b": [2]}]
        assert not (tmp_path / "book.json.tmp").exists()
    statefile.sync(path)
    assert json.loads(path.read_text(encoding="utf-8"))["format"] == FORMAT


def test_a_file_that_does_not_exist_has_no_records(tmp_path: Path) -> None:
    assert statefile.read(tmp_path / "book.json", FORMAT, "book") == []
    assert statefile.read(tmp_path / "absent" / "book.json", FORMAT, "book") == []


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"\xff{}", "not UTF-8 text (byte 0 is 0xff); move it aside to start with an empty book"),
        (b"{", "not JSON (Expecting property name"),
        (b"[" * 100_000, "not JSON"),
        (b'{"format": "other/v1", "records": []}', f"not a book of format {FORMAT}"),
        (b"[1, 2]", f"not a book of format {FORMAT}"),
        (f'{{"format": "{FORMAT}", "records": {{}}}}'.encode(), "records is not a list"),
    ],
)
def test_a_broken_file_is_refused_with_its_path(tmp_path: Path, data: bytes, problem: str) -> None:
    path = tmp_path / "book.json"
    path.write_bytes(data)
    with pytest.raises(errors.StateFileError) as caught:
        statefile.read(path, FORMAT, "book")
    assert caught.value.path == str(path)
    assert problem in caught.value.problem
    assert str(caught.value) == f"{path}: {caught.value.problem}"
    assert not caught.value.retryable


@pytest.mark.parametrize(
    ("data", "found"),
    [(b'{"format": "other/v1"}', "other/v1"), (b"{}", None), (b"[1]", "list"), (b"7", "int")],
)
def test_a_file_of_another_format_says_what_it_found(
    tmp_path: Path, data: bytes, found: object
) -> None:
    path = tmp_path / "book.json"
    path.write_bytes(data)
    with pytest.raises(errors.WrongFormat) as caught:
        statefile.read(path, FORMAT, "book")
    assert (caught.value.expected, caught.value.found) == (FORMAT, found)


def test_what_cannot_be_read_written_or_synced_is_an_error_naming_the_path(
    tmp_path: Path,
) -> None:
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(errors.StateFileError, match="cannot read") as caught:
        statefile.read(tmp_path / "dir.json", FORMAT, "book")
    assert caught.value.path == str(tmp_path / "dir.json")
    gone = tmp_path / "gone" / "book.json"
    with pytest.raises(errors.StateFileError, match="cannot write") as caught:
        statefile.write(gone, FORMAT, [], durable=True)
    assert caught.value.path == str(gone)
    with pytest.raises(errors.StateFileError, match="cannot sync"):
        statefile.sync(gone)


class Colour(enum.StrEnum):
    RED = "red"


TYPES: statefile.FieldTypes = {"name": str, "flag": bool, "count": int, "at": (int, float)}
GOOD = {"name": "n", "flag": False, "count": 3, "at": 1, "extra": "left out"}


@pytest.mark.parametrize(
    ("raw", "field", "problem"),
    [
        (5, "", "records[2] is not an object"),
        ({**GOOD, "name": None}, "name", "records[2].name is missing or not a <class 'str'>: None"),
        ({**GOOD, "flag": 0}, "flag", "records[2].flag is missing or not a <class 'bool'>: 0"),
        ({**GOOD, "count": True}, "count", "records[2].count is missing or not a <class 'int'>"),
        ({**GOOD, "at": "1"}, "at", "records[2].at is missing or not a (<class 'int'>, <class"),
        ({k: v for k, v in GOOD.items() if k != "at"}, "at", "records[2].at is missing"),
    ],
)
def test_a_record_with_a_field_missing_or_of_another_type_is_refused(
    raw: object, field: str, problem: str
) -> None:
    with pytest.raises(errors.BadRecord) as caught:
        statefile.fields(Path("/state/book.json"), 2, raw, TYPES)
    assert (caught.value.path, caught.value.index, caught.value.field) == (
        "/state/book.json",
        2,
        field,
    )
    assert caught.value.problem.startswith(problem)


def test_a_good_record_gives_the_named_fields_and_known_members() -> None:
    values: dict[str, Any] = statefile.fields(Path("b.json"), 0, GOOD, TYPES)
    assert values == {"name": "n", "flag": False, "count": 3, "at": 1}
    values["colour"] = "red"
    assert statefile.member(Path("b.json"), 0, values, "colour", Colour) is Colour.RED
    values["colour"] = "blue"
    with pytest.raises(errors.BadRecord, match=r"records\[0\].colour 'blue' is unknown"):
        statefile.member(Path("b.json"), 0, values, "colour", Colour)
