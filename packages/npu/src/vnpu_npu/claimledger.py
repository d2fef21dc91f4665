"""The DRA driver's claim ledger document: which ResourceClaim device each vNPU and soft slice
the driver prepared belongs to.

One JSON file in the driver's state directory, ``claims.json``, of format
``vnpu-dra-driver-claims/v1``: the envelope and states of ``ledger`` (``{"format",
"records"}`` written whole by ``statefile``; ``intent`` / ``owned``), sorted by chip, vNPU
id, claim UID and device so that equal ledgers are equal files. The owner is a claim, not a
pod container (a claim is shared by every pod in its ``reservedFor`` and outlives each of
them): ``claim_uid``, ``namespace``, ``claim``, the claim's ``request`` and the allocated
``device``; then ``chip`` (physical id), ``chip_uuid``, ``vnpu_id``, ``template``, ``state``
and ``created_at``. Two kinds of record share the file:

* a **vNPU** (``Kind.VNPU``): the vNPU ``vnpu_id`` of ``template`` the driver created for a
  template device. ``intent`` before the create, ``owned`` once it exists. On disk it has
  exactly the fields above, as every writer of this format has written it;
* a **soft slice** (``Kind.SOFT``): a soft device's share of the chip, which hami-vnpu-core
  enforces and nothing on the chip records: ``memory_mib`` (its ``NPU_MEM_QUOTA``) and
  ``core_percent`` (its ``NPU_PRIORITY``), from the claim's ``consumedCapacity``. Always
  ``owned`` (nothing is created); on disk it adds ``"kind": "soft"``, ``memory_mib`` and
  ``core_percent``, with ``vnpu_id`` ``NO_VNPU`` and ``template`` ``""``.

Who reads it, and how a broken record is met:

* the DRA driver (``vnpu_dra_driver.ledger``) writes it and reads it back at start with
  ``read``: strict, the first unusable record raises ``errors.BadRecord`` naming the path and
  its index, since ownership is never guessed;
* the exporter (``vnpu_exporter.claims``) reads it on every refresh with ``scan``, which keeps
  the usable records and returns the unusable ones as errors, to be skipped and counted.

Both check each record with ``record``: every field of its type, a known state and kind,
non-empty claim UID, namespace, claim and device, and what each kind needs (a vNPU: a
template and an id; a soft slice: 1 MiB of memory or more and a core share of 0-100). A file
that does not exist is an empty ledger; one that exists but cannot be read raises
``errors.StateFileError``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from vnpu_npu import errors, ledger, statefile

FILE = "claims.json"
FORMAT = "vnpu-dra-driver-claims/v1"
WHAT = "claim ledger"  # what a message calls the file
NO_VNPU = -1  # the vnpu_id of a soft slice's record
State = ledger.State


class Kind(StrEnum):
    VNPU = "vnpu"  # a vNPU the driver created for a template device
    SOFT = "soft"  # a soft slice of a chip (hami-vnpu-core)


@dataclass(frozen=True, slots=True)
class Record:
    """One vNPU or soft slice prepared for one allocated device of one claim."""

    claim_uid: str
    namespace: str
    claim: str
    request: str
    device: str
    chip: int  # physical id
    chip_uuid: str
    vnpu_id: int  # NO_VNPU for a soft slice
    template: str  # "" for a soft slice
    state: State
    created_at: float  # unix seconds when the record was first written
    kind: Kind = Kind.VNPU
    memory_mib: int = 0  # a soft slice's memory quota; 0 for a vNPU
    core_percent: int = 0  # a soft slice's share of the chip's AI cores; 0 for a vNPU

    @property
    def vnpu(self) -> tuple[int, int]:
        """The vNPU this record is about: (chip, vNPU id)."""
        return (self.chip, self.vnpu_id)

    @property
    def who(self) -> str:
        return f"{self.namespace}/{self.claim}"

    @property
    def soft(self) -> bool:
        return self.kind is Kind.SOFT


def soft_slice(
    claim_uid: str,
    namespace: str,
    claim: str,
    request: str,
    device: str,
    chip: int,
    chip_uuid: str,
    memory_mib: int,
    core_percent: int,
    created_at: float,
) -> Record:
    """The record of a soft slice of ``memory_mib`` and ``core_percent`` of chip ``chip``."""
    return Record(
        claim_uid=claim_uid,
        namespace=namespace,
        claim=claim,
        request=request,
        device=device,
        chip=chip,
        chip_uuid=chip_uuid,
        vnpu_id=NO_VNPU,
        template="",
        state=State.OWNED,
        created_at=created_at,
        kind=Kind.SOFT,
        memory_mib=memory_mib,
        core_percent=core_percent,
    )


def owned(record: Record) -> Record:
    """``record`` with its vNPU made: state ``owned``."""
    return dataclasses.replace(record, state=State.OWNED)


FIELD_TYPES: statefile.FieldTypes = {
    "claim_uid": str,
    "namespace": str,
    "claim": str,
    "request": str,
    "device": str,
    "chip": int,
    "chip_uuid": str,
    "vnpu_id": int,
    "template": str,
    "state": str,
    "created_at": (int, float),
}
"""The fields of every record."""

SOFT_FIELD_TYPES: statefile.FieldTypes = {"kind": str, "memory_mib": int, "core_percent": int}
"""The fields a soft slice's record adds."""

_NAMED = ("claim_uid", "namespace", "claim", "device")


def record(path: Path, index: int, raw: object) -> Record:
    """Record ``index`` of the claim ledger at ``path``; ``errors.BadRecord`` when it is
    unusable."""
    values = statefile.fields(path, index, raw, FIELD_TYPES)
    values["state"] = statefile.member(path, index, values, "state", State)
    values["created_at"] = float(values["created_at"])
    for name in _NAMED:
        _require(path, index, name, bool(values[name]), "is empty")
    kind = Kind.VNPU
    if isinstance(raw, dict) and "kind" in raw:
        named = statefile.fields(path, index, raw, {"kind": str})
        kind = statefile.member(path, index, named, "kind", Kind)
    vnpu_id, template = values["vnpu_id"], values["template"]
    if kind is Kind.VNPU:
        _require(path, index, "template", bool(template), "is empty")
        _require(path, index, "vnpu_id", vnpu_id >= 0, f"is {vnpu_id}, not a vNPU id")
        return Record(**values)
    extra = statefile.fields(path, index, raw, SOFT_FIELD_TYPES)
    memory, cores = extra["memory_mib"], extra["core_percent"]
    soft = "a soft slice's"
    _require(path, index, "vnpu_id", vnpu_id == NO_VNPU, f"is {vnpu_id}, {soft} is {NO_VNPU}")
    _require(path, index, "template", not template, f"is {template!r}, {soft} is ''")
    state = values["state"]
    _require(path, index, "state", state is State.OWNED, f"is {state.value!r}, {soft} is 'owned'")
    _require(path, index, "memory_mib", memory >= 1, f"is {memory}, less than 1 MiB")
    _require(path, index, "core_percent", 0 <= cores <= 100, f"is {cores}, not 0-100")
    return Record(**values, kind=Kind.SOFT, memory_mib=memory, core_percent=cores)


def _require(path: Path, index: int, name: str, holds: bool, problem: str) -> None:
    if not holds:
        raise errors.BadRecord(str(path), index, name, f"records[{index}].{name} {problem}")


@dataclass(frozen=True, slots=True)
class Reading:
    """What ``scan`` found: the usable records, and an error for each record that is not."""

    records: tuple[Record, ...]
    problems: tuple[errors.BadRecord, ...] = ()


def read(path: Path) -> tuple[Record, ...]:
    """Every record of the claim ledger at ``path`` (none when it does not exist).

    ``errors.StateFileError`` when the file is broken, ``errors.BadRecord`` at the first
    unusable record.
    """
    return statefile.parsed(path, FORMAT, WHAT, record)


def scan(path: Path) -> Reading:
    """The usable records of the claim ledger at ``path`` and the problems of the others.

    ``errors.StateFileError`` only when the file as a whole is broken.
    """
    return Reading(*statefile.scanned(path, FORMAT, WHAT, record))


def raw(item: Record) -> dict[str, object]:
    """``item`` as the file holds it: a vNPU's record without the soft slice's fields."""
    values: dict[str, object] = {**dataclasses.asdict(item), "state": item.state.value}
    if item.kind is Kind.SOFT:
        values["kind"] = item.kind.value
    else:
        for name in SOFT_FIELD_TYPES:
            del values[name]
    return values


def ordered(records: Iterable[Record]) -> list[Record]:
    """``records`` in file order: by chip, vNPU id, claim UID and device."""
    return sorted(records, key=lambda r: (r.chip, r.vnpu_id, r.claim_uid, r.device))


def write(path: Path, records: Iterable[Record], *, durable: bool) -> None:
    """Replace the claim ledger at ``path`` with ``records``; ``errors.StateFileError`` on
    failure."""
    statefile.write(path, FORMAT, [raw(r) for r in ordered(records)], durable=durable)
