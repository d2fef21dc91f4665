"""The ownership ledger's document: one writer's records read back strictly or tolerantly."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from vnpu_npu import errors, ledger


def _record(vnpu_id: int = 100, container: str = "c", chip: int = 0) -> ledger.Record:
    return ledger.Record(
        "uid", "ns", "p", container, False, chip, "U", vnpu_id, "vir01", ledger.State.INTENT, 1.5
    )


def _raw(record: ledger.Record, **changes: Any) -> dict[str, Any]:
    return {**dataclasses.asdict(record), "state": record.state.value, **changes}


def _file(directory: Path, records: list[object]) -> Path:
    path = directory / ledger.FILE
    path.write_text(json.dumps({"format": ledger.FORMAT, "records": records}), encoding="utf-8")
    return path


def test_a_written_ledger_reads_back_sorted_whatever_the_order_given(tmp_path: Path) -> None:
    path = tmp_path / ledger.FILE
    records = [_record(101, chip=1), _record(100, "d"), _record(100, "c")]
    ledger.write(path, records, durable=True)
    assert ledger.read(path) == (records[2], records[1], records[0])
    first = path.read_bytes()
    ledger.write(path, reversed(records), durable=False)
    assert path.read_bytes() == first  # equal ledgers are equal files
    assert json.loads(first)["records"][0] == _raw(records[2])
    assert ledger.scan(path) == ledger.Reading((records[2], records[1], records[0]))


def test_a_ledger_that_does_not_exist_is_empty(tmp_path: Path) -> None:
    assert ledger.read(tmp_path / ledger.FILE) == ()
    assert ledger.scan(tmp_path / ledger.FILE) == ledger.Reading(())


def test_created_at_may_be_written_as_a_whole_number(tmp_path: Path) -> None:
    path = _file(tmp_path, [_raw(_record(), created_at=2)])
    (found,) = ledger.read(path)
    assert found.created_at == 2.0
    assert isinstance(found.created_at, float)


BROKEN: list[tuple[object, str, str]] = [
    ("junk", "", "records[1] is not an object"),
    (_raw(_record(), chip="zero"), "chip", "records[1].chip is missing or not a <class 'int'>"),
    (_raw(_record(), chip=True), "chip", "records[1].chip is missing or not a <class 'int'>"),
    (_raw(_record(), init=1), "init", "records[1].init is missing or not a <class 'bool'>"),
    ({"pod_uid": "u"}, "namespace", "records[1].namespace is missing"),
    (_raw(_record(), state="gone"), "state", "records[1].state 'gone' is unknown"),
]


@pytest.mark.parametrize(("raw", "field", "problem"), BROKEN)
def test_read_refuses_the_first_broken_record_with_path_and_index(
    tmp_path: Path, raw: object, field: str, problem: str
) -> None:
    path = _file(tmp_path, [_raw(_record(100)), raw, "also junk"])
    with pytest.raises(errors.BadRecord) as caught:
        ledger.read(path)
    assert (caught.value.path, caught.value.index, caught.value.field) == (str(path), 1, field)
    assert caught.value.problem.startswith(problem)


def test_scan_keeps_the_good_records_and_returns_the_others_problems(tmp_path: Path) -> None:
    good = [_raw(_record(100)), _raw(_record(101), state="owned")]
    path = _file(tmp_path, [good[0], *(raw for raw, _, _ in BROKEN), good[1]])
    found = ledger.scan(path)
    assert found.records == (
        _record(100),
        dataclasses.replace(_record(101), state=ledger.State.OWNED),
    )
    assert [p.index for p in found.problems] == list(range(1, len(BROKEN) + 1))
    assert [p.field for p in found.problems] == [field for _, field, _ in BROKEN]


def test_scan_still_refuses_a_file_that_is_not_a_ledger(tmp_path: Path) -> None:
    path = tmp_path / ledger.FILE
    path.write_text('{"format": "vnpu-device-plugin-grants/v1", "records": []}', encoding="utf-8")
    with pytest.raises(errors.WrongFormat, match="not a ledger of format") as caught:
        ledger.scan(path)
    assert caught.value.found == "vnpu-device-plugin-grants/v1"
    path.write_bytes(b"\xc3\x28")
    with pytest.raises(errors.StateFileError, match="move it aside to start with an empty ledger"):
        ledger.scan(path)


def test_a_record_names_its_vnpu_owner_and_pod() -> None:
    record = _record(116, "main", chip=1)
    assert (record.vnpu, record.owner, record.who) == ((1, 116), ("uid", "main"), "ns/p")
