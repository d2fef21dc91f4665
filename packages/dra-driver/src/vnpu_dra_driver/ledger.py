"""The claim ledger, kept: which ResourceClaim device each vNPU and soft slice belongs to.

The document (``<state dir>/claims.json``, format ``vnpu-dra-driver-claims/v1``: its records,
their checks, how they are read and written) is ``vnpu_npu.claimledger``'s, which the
exporter reads with the same code. This module keeps the driver's copy in memory and writes
the file whole on each change: durably (file and directory fsync'ed) when a record is added
or replaced, not when one is removed (a lost removal is found again by the reconcile).

``prepare`` writes a vNPU's ``intent`` record naming the vNPU id *before* it creates the vNPU
and turns it into ``owned`` once the vNPU exists, so every vNPU the driver ever created is
named here, even one created just before a crash. A soft slice's record (its memory and core
share) is written ``owned`` before its CDI spec, so that the exporter can size it and the
reconcile can find it. A record that cannot be read stops the driver at start
(``errors.ClaimLedgerError`` naming the path and index): ownership is never guessed. Not
thread-safe by itself: ``prepare`` calls it under its own lock.
"""

from __future__ import annotations

from pathlib import Path

from vnpu_dra_driver import errors
from vnpu_npu import claimledger
from vnpu_npu import errors as npu_errors


def read(path: Path) -> tuple[claimledger.Record, ...]:
    """Every record of the ledger at ``path`` (none when it does not exist)."""
    try:
        return claimledger.read(path)
    except npu_errors.StateFileError as exc:
        raise errors.ClaimLedgerError(str(path), str(exc)) from exc


class Ledger:
    """The claim ledger of ``state_dir``, kept in memory and written whole on each change."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / claimledger.FILE
        state_dir.mkdir(parents=True, exist_ok=True)
        self._records = read(self.path)

    def records(self) -> tuple[claimledger.Record, ...]:
        return self._records

    def of_claim(self, claim_uid: str) -> tuple[claimledger.Record, ...]:
        return tuple(r for r in self._records if r.claim_uid == claim_uid)

    def vnpus(self, chip: int) -> tuple[claimledger.Record, ...]:
        """The vNPU records of chip ``chip`` (soft slices have no vNPU)."""
        return tuple(r for r in self._records if r.chip == chip and not r.soft)

    def owners(self, vnpu: tuple[int, int]) -> tuple[claimledger.Record, ...]:
        """The records naming vNPU ``vnpu`` (chip, vNPU id)."""
        return tuple(r for r in self._records if r.vnpu == vnpu and not r.soft)

    def add(self, record: claimledger.Record) -> None:
        """Add ``record``; durable (file and directory fsync'ed) when this returns."""
        self._commit((*self._records, record), durable=True)

    def replace(self, old: claimledger.Record, new: claimledger.Record) -> None:
        self._commit(tuple(new if r == old else r for r in self._records), durable=True)

    def remove(self, *gone: claimledger.Record) -> None:
        """Forget ``gone`` (not fsync'ed: a lost removal is found again by the reconcile)."""
        drop = set(gone)
        self._commit(tuple(r for r in self._records if r not in drop), durable=False)

    def _commit(self, records: tuple[claimledger.Record, ...], *, durable: bool) -> None:
        try:
            claimledger.write(self.path, records, durable=durable)
        except npu_errors.StateFileError as exc:
            raise errors.ClaimLedgerError(str(self.path), str(exc)) from exc
        self._records = tuple(claimledger.ordered(records))
