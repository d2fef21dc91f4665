"""The DRA driver's claim ledger, read (never written) to size soft slices and tie template
devices to vNPU ids.

In DRA mode ``vnpu-dra-driver`` records, for every device it prepares, which ResourceClaim
device it is for: a template device's vNPU id (written before it creates the vNPU) and a soft
device's memory and core share (from the claim's ``consumedCapacity``, which PodResources
does not carry). With ``--dra-state-dir`` the exporter reads that file on the ``ownership``
refresh interval; ``attribution`` then names the exact vNPU of each claim device a container
holds and the size of each soft slice.

The document and its records are ``vnpu_npu.claimledger``'s, the driver's own:
``ClaimLedgerFile`` reads the file anew on every refresh (``vnpu_npu.claimledger.scan``, no
copy kept between refreshes) and checks each record as the driver does. A file that does not
exist (a fresh node, a driver not yet started) is an empty ledger; one that exists but cannot
be read raises ``errors.LedgerError``; a record the driver would refuse is skipped and
counted (``Ledger.skipped``). ``intent`` records count as ``owned`` ones do, since
attribution checks that the vNPU exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from vnpu_exporter import errors
from vnpu_npu import claimledger

FILE = claimledger.FILE
FORMAT = claimledger.FORMAT


@dataclass(frozen=True, slots=True)
class Ledger:
    """The usable records, and how many records were skipped as unreadable."""

    records: tuple[claimledger.Record, ...]
    skipped: int = 0


class Source(Protocol):
    def read(self) -> Ledger: ...


class ClaimLedgerFile:
    """``Source`` over ``state_dir/claims.json``."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE

    def read(self) -> Ledger:
        """The ledger as the file is now; ``errors.LedgerError`` when it cannot be read."""
        found = errors.scan_ledger(claimledger.scan, self.path, FORMAT)
        return Ledger(found.records, len(found.problems))
