"""The DRA driver's claim ledger, read (never written) to tie template devices to vNPU ids.

In DRA mode ``vnpu-dra-driver`` creates the vNPU of every template device it prepares and
records, before it creates it, which ResourceClaim device it is for: ``<state dir>/claims.json``,
format ``vnpu-dra-driver-claims/v1`` (``vnpu_dra_driver.ledger``), replaced atomically on every
change. With ``--dra-state-dir`` the exporter reads that file on the ``ownership`` refresh
interval; ``attribution`` then names the exact vNPU of each claim device a container holds.

The envelope is ``vnpu_npu.statefile``'s, as for the device plugin's ledger (``ownership``),
and it is read the same way: anew on every refresh; a file that does not exist (a fresh node,
a driver not yet started) is an empty ledger; one that exists but cannot be read raises
``errors.LedgerError``; a record that is unusable (a field missing or of another type, an
unknown state, an empty namespace, claim, device or template) is skipped and counted
(``Ledger.skipped``). The exporter does not import the driver (it imports no other vnpu
service): ``FIELD_TYPES`` lists the fields it uses of the driver's records, which carry more.
Of each record it keeps ``claim_uid``, ``namespace``, ``claim``, ``device``, ``chip``
(physical id), ``vnpu_id`` and ``template``; ``intent`` records count as ``owned`` ones do,
since attribution checks that the vNPU exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from vnpu_exporter import errors
from vnpu_npu import errors as npu_errors
from vnpu_npu import ledger as npu_ledger
from vnpu_npu import statefile

FILE = "claims.json"
FORMAT = "vnpu-dra-driver-claims/v1"
WHAT = "claim ledger"

FIELD_TYPES: statefile.FieldTypes = {
    "claim_uid": str,
    "namespace": str,
    "claim": str,
    "device": str,
    "chip": int,
    "vnpu_id": int,
    "template": str,
    "state": str,
}


@dataclass(frozen=True, slots=True)
class Record:
    """The vNPU made for one device of one claim."""

    claim_uid: str
    namespace: str
    claim: str
    device: str
    chip: int  # physical id
    vnpu_id: int
    template: str


@dataclass(frozen=True, slots=True)
class Ledger:
    """The usable records, and how many records were skipped as unreadable."""

    records: tuple[Record, ...]
    skipped: int = 0


class Source(Protocol):
    def read(self) -> Ledger: ...


def _record(path: Path, index: int, raw: object) -> Record | None:
    """Record ``index``; None when it names no claim device; BadRecord when it is broken."""
    values = statefile.fields(path, index, raw, FIELD_TYPES)
    statefile.member(path, index, values, "state", npu_ledger.State)
    del values["state"]
    found = Record(**values)
    return found if all((found.namespace, found.claim, found.device, found.template)) else None


class ClaimLedgerFile:
    """``Source`` over ``state_dir/claims.json``."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE

    def read(self) -> Ledger:
        """The ledger as the file is now; ``errors.LedgerError`` when it cannot be read."""
        try:
            raw = statefile.read(self.path, FORMAT, WHAT)
        except npu_errors.WrongFormat as exc:
            problem = f"format is {exc.found!r}, this exporter reads {FORMAT}"
            raise errors.LedgerError(exc.path, problem) from exc
        except npu_errors.StateFileError as exc:
            raise errors.LedgerError(exc.path, exc.problem) from exc
        records: list[Record] = []
        skipped = 0
        for index, item in enumerate(raw):
            try:
                found = _record(self.path, index, item)
            except npu_errors.BadRecord:
                found = None
            if found is None:
                skipped += 1
            else:
                records.append(found)
        return Ledger(tuple(records), skipped)
