"""The DRA driver's claim ledger document: vNPU and soft-slice records, read strictly or
tolerantly, written in the format every writer of ``vnpu-dra-driver-claims/v1`` has used."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from vnpu_npu import claimledger, errors

VNPU_FIELDS = {
    "claim_uid", "namespace", "claim", "request", "device", "chip", "chip_uuid", "vnpu_id",
    "template", "state", "created_at",
}  # fmt: skip
"""The fields of a vNPU record on disk, as the first writer of the format wrote them."""


def _vnpu(vnpu_id: int = 100, device: str = "chip-0-vir02-0", chip: int = 0) -> claimledger.Record:
    return claimledger.Record(
        "uid-a", "ml", "infer", "npu", device, chip, "U0", vnpu_id, "vir02",
        claimledger.State.INTENT, 1.5,
    )  # fmt: skip


def _soft(device: str = "chip-1-soft", memory: int = 2048, cores: int = 30) -> claimledger.Record:
    return claimledger.soft_slice(
        claim_uid="uid-s",
        namespace="ml",
        claim="shared",
        request="npu",
        device=device,
        chip=1,
        chip_uuid="U1",
        memory_mib=memory,
        core_percent=cores,
        created_at=2.0,
    )


def _file(directory: Path, records: list[object]) -> Path:
    path = directory / claimledger.FILE
    document = {"format": claimledger.FORMAT, "records": records}
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def _raw(record: claimledger.Record, **changes: Any) -> dict[str, Any]:
    return {**claimledger.raw(record), **changes}


def test_a_written_ledger_reads_back_sorted_whatever_the_order_given(tmp_path: Path) -> None:
    path = tmp_path / claimledger.FILE
    records = [_soft(), _vnpu(101, "chip-0-vir02-1"), _vnpu(100), _vnpu(102, chip=1)]
    claimledger.write(path, records, durable=True)
    expected = (records[2], records[1], records[0], records[3])  # chip, then vNPU id
    assert claimledger.read(path) == expected
    assert claimledger.scan(path) == claimledger.Reading(expected)
    first = path.read_bytes()
    claimledger.write(path, reversed(records), durable=False)
    assert path.read_bytes() == first  # equal ledgers are equal files


def test_a_vnpu_record_is_written_as_it_always_was(tmp_path: Path) -> None:
    path = tmp_path / claimledger.FILE
    claimledger.write(path, [_vnpu()], durable=False)
    document = json.loads(path.read_text(encoding="utf-8"))
    assert document == {
        "format": "vnpu-dra-driver-claims/v1",
        "records": [
            {
                "claim_uid": "uid-a",
                "namespace": "ml",
                "claim": "infer",
                "request": "npu",
                "device": "chip-0-vir02-0",
                "chip": 0,
                "chip_uuid": "U0",
                "vnpu_id": 100,
                "template": "vir02",
                "state": "intent",
                "created_at": 1.5,
            }
        ],
    }
    assert set(document["records"][0]) == VNPU_FIELDS


def test_a_soft_slice_record_adds_its_kind_memory_and_core_share(tmp_path: Path) -> None:
    path = tmp_path / claimledger.FILE
    claimledger.write(path, [_soft()], durable=False)
    (raw,) = json.loads(path.read_text(encoding="utf-8"))["records"]
    assert set(raw) == VNPU_FIELDS | {"kind", "memory_mib", "core_percent"}
    assert (raw["kind"], raw["memory_mib"], raw["core_percent"]) == ("soft", 2048, 30)
    assert (raw["vnpu_id"], raw["template"], raw["state"]) == (-1, "", "owned")
    (found,) = claimledger.read(path)
    assert found == _soft()
    assert (found.soft, found.kind, found.who) == (True, claimledger.Kind.SOFT, "ml/shared")


def test_a_record_without_a_kind_is_a_vnpu(tmp_path: Path) -> None:
    path = _file(tmp_path, [_raw(_vnpu()), _raw(_vnpu(101, "chip-0-vir02-1"), kind="vnpu")])
    first, second = claimledger.read(path)
    assert first == _vnpu()
    assert (second.kind, second.soft, second.vnpu) == (claimledger.Kind.VNPU, False, (0, 101))


def test_a_ledger_that_does_not_exist_is_empty(tmp_path: Path) -> None:
    assert claimledger.read(tmp_path / claimledger.FILE) == ()
    assert claimledger.scan(tmp_path / claimledger.FILE) == claimledger.Reading(())


def test_created_at_may_be_written_as_a_whole_number(tmp_path: Path) -> None:
    (found,) = claimledger.read(_file(tmp_path, [_raw(_vnpu(), created_at=2)]))
    assert found.created_at == 2.0
    assert isinstance(found.created_at, float)


def test_owned_keeps_everything_but_the_state() -> None:
    intent = _vnpu()
    assert claimledger.owned(intent) == dataclasses.replace(intent, state=claimledger.State.OWNED)


BROKEN: list[tuple[object, str, str]] = [
    ("junk", "", "records[1] is not an object"),
    (_raw(_vnpu(), chip="zero"), "chip", "records[1].chip is missing or not a <class 'int'>"),
    (_raw(_vnpu(), vnpu_id=True), "vnpu_id", "records[1].vnpu_id is missing or not a"),
    ({"claim_uid": "u"}, "namespace", "records[1].namespace is missing"),
    (_raw(_vnpu(), state="gone"), "state", "records[1].state 'gone' is unknown"),
    (_raw(_vnpu(), claim=""), "claim", "records[1].claim is empty"),
    (_raw(_vnpu(), claim_uid=""), "claim_uid", "records[1].claim_uid is empty"),
    (_raw(_vnpu(), template=""), "template", "records[1].template is empty"),
    (_raw(_vnpu(), vnpu_id=-1), "vnpu_id", "records[1].vnpu_id is -1, not a vNPU id"),
    (_raw(_vnpu(), kind="mig"), "kind", "records[1].kind 'mig' is unknown"),
    (_raw(_soft(), memory_mib="2Gi"), "memory_mib", "records[1].memory_mib is missing or not"),
    (_raw(_vnpu(), kind="soft"), "memory_mib", "records[1].memory_mib is missing or not"),
    (_raw(_soft(), vnpu_id=100), "vnpu_id", "records[1].vnpu_id is 100, a soft slice's is -1"),
    (_raw(_soft(), template="vir02"), "template", "records[1].template is 'vir02', a soft"),
    (_raw(_soft(), state="intent"), "state", "records[1].state is 'intent', a soft slice's"),
    (_raw(_soft(), memory_mib=0), "memory_mib", "records[1].memory_mib is 0, less than 1 MiB"),
    (_raw(_soft(), core_percent=101), "core_percent", "records[1].core_percent is 101, not"),
    (_raw(_soft(), core_percent=-1), "core_percent", "records[1].core_percent is -1, not"),
]


@pytest.mark.parametrize(("raw", "field", "problem"), BROKEN)
def test_read_refuses_the_first_broken_record_with_path_and_index(
    tmp_path: Path, raw: object, field: str, problem: str
) -> None:
    path = _file(tmp_path, [_raw(_vnpu()), raw, "also junk"])
    with pytest.raises(errors.BadRecord) as caught:
        claimledger.read(path)
    assert (caught.value.path, caught.value.index, caught.value.field) == (str(path), 1, field)
    assert caught.value.problem.startswith(problem)


def test_scan_keeps_the_good_records_and_returns_the_others_problems(tmp_path: Path) -> None:
    good = [_raw(_vnpu()), _raw(_soft())]
    path = _file(tmp_path, [good[0], *(raw for raw, _, _ in BROKEN), good[1]])
    found = claimledger.scan(path)
    assert found.records == (_vnpu(), _soft())
    assert [p.index for p in found.problems] == list(range(1, len(BROKEN) + 1))
    assert [p.field for p in found.problems] == [field for _, field, _ in BROKEN]


def test_a_file_of_another_format_is_refused_whole(tmp_path: Path) -> None:
    path = tmp_path / claimledger.FILE
    path.write_text('{"format": "vnpu-device-plugin-ledger/v1", "records": []}', encoding="utf-8")
    with pytest.raises(errors.WrongFormat, match="not a claim ledger of format") as caught:
        claimledger.scan(path)
    assert caught.value.found == "vnpu-device-plugin-ledger/v1"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(errors.StateFileError, match="start with an empty claim ledger"):
        claimledger.read(path)
