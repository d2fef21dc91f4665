"""The claim ledger: which ResourceClaim each vNPU the DRA driver created belongs to.

One JSON file, ``<state dir>/claims.json``, of format ``vnpu-dra-driver-claims/v1``. It has
the shape of ``vnpu_npu.ledger``'s document (``{"format", "records"}`` written whole by
``vnpu_npu.statefile``: renamed over the old file, fsync'ed when a record is added; the same
``intent``/``owned`` states; chip, chip UUID, vNPU id, template and ``created_at`` fields) but
its owner is a claim, not a pod container: ``claim_uid``, ``namespace``, ``claim``, the claim
``request`` and the allocated ``device``. The pod-based record does not fit a claim (a claim
is shared by every pod in its ``reservedFor`` and outlives each of them), and the exporter
reads the pod ledger to attribute vNPUs to pods, which a claim record would mislead.

``prepare`` writes an ``intent`` record naming the vNPU id *before* it creates the vNPU and
turns it into ``owned`` once the vNPU exists, so every vNPU the driver ever created is named
here, even one created just before a crash. A record that cannot be read stops the driver
at start (``errors.ClaimLedgerError`` naming the path and index): ownership is never guessed.
Not thread-safe by itself: ``prepare`` calls it under its own lock.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from vnpu_dra_driver import errors
from vnpu_npu import errors as npu_errors
from vnpu_npu import ledger as npu_ledger
from vnpu_npu import statefile

FILE = "claims.json"
FORMAT = "vnpu-dra-driver-claims/v1"
WHAT = "claim ledger"
State = npu_ledger.State


@dataclass(frozen=True, slots=True)
class Record:
    """One vNPU created for one allocated device of one claim."""

    claim_uid: str
    namespace: str
    claim: str
    request: str
    device: str
    chip: int  # physical id
    chip_uuid: str
    vnpu_id: int
    template: str
    state: npu_ledger.State
    created_at: float  # unix seconds when the intent was written

    @property
    def vnpu(self) -> tuple[int, int]:
        return (self.chip, self.vnpu_id)

    @property
    def who(self) -> str:
        return f"{self.namespace}/{self.claim}"


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


def read(path: Path) -> tuple[Record, ...]:
    """Every record of the ledger at ``path`` (none when it does not exist)."""
    try:
        found = []
        for index, raw in enumerate(statefile.read(path, FORMAT, WHAT)):
            values = statefile.fields(path, index, raw, FIELD_TYPES)
            values["state"] = statefile.member(path, index, values, "state", npu_ledger.State)
            values["created_at"] = float(values["created_at"])
            found.append(Record(**values))
    except npu_errors.StateFileError as exc:
        raise errors.ClaimLedgerError(str(path), str(exc)) from exc
    return tuple(found)


class Ledger:
    """The claim ledger of ``state_dir``, kept in memory and written whole on each change."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE
        state_dir.mkdir(parents=True, exist_ok=True)
        self._records = read(self.path)

    def records(self) -> tuple[Record, ...]:
        return self._records

    def of_claim(self, claim_uid: str) -> tuple[Record, ...]:
        return tuple(r for r in self._records if r.claim_uid == claim_uid)

    def owners(self, vnpu: tuple[int, int]) -> tuple[Record, ...]:
        return tuple(r for r in self._records if r.vnpu == vnpu)

    def add(self, record: Record) -> None:
        """Add ``record``; durable (file and directory fsync'ed) when this returns."""
        self._commit((*self._records, record), durable=True)

    def replace(self, old: Record, new: Record) -> None:
        self._commit(tuple(new if r == old else r for r in self._records), durable=True)

    def remove(self, *gone: Record) -> None:
        """Forget ``gone`` (not fsync'ed: a lost removal is found again by the reconcile)."""
        drop = set(gone)
        self._commit(tuple(r for r in self._records if r not in drop), durable=False)

    def _commit(self, records: tuple[Record, ...], *, durable: bool) -> None:
        ordered = sorted(records, key=lambda r: (r.chip, r.vnpu_id, r.claim_uid, r.device))
        raw = [{**dataclasses.asdict(r), "state": r.state.value} for r in ordered]
        try:
            statefile.write(self.path, FORMAT, raw, durable=durable)
        except npu_errors.StateFileError as exc:
            raise errors.ClaimLedgerError(str(self.path), str(exc)) from exc
        self._records = tuple(ordered)


def owned(record: Record, vnpu_id: int) -> Record:
    return dataclasses.replace(record, vnpu_id=vnpu_id, state=npu_ledger.State.OWNED)
