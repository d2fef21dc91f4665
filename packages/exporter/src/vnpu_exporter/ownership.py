"""The device plugin's vNPU ownership ledger, read (never written) to tie vNPU ids to pods.

In managed mode ``vnpu-device-plugin`` creates every vNPU itself and records, before it
answers the kubelet, which pod container owns it: ``<state dir>/ledger.json``, format
``vnpu-device-plugin-ledger/v1``, replaced atomically on every change. With
``--device-plugin-state-dir`` the exporter reads that file on the ``ownership`` refresh
interval; ``attribution`` then names the exact vNPU of each container even when several
pods hold the same template on one chip.

The document and its records are ``vnpu_npu.ledger``'s, the plugin's own: ``LedgerFile``
reads the file anew on every refresh (``vnpu_npu.ledger.scan``, no copy kept between
refreshes, so each change the plugin makes is seen at the next one) and checks each record
as the plugin does. Where the plugin refuses a ledger with one broken record, the exporter
skips and counts it (``Ledger.skipped``), as it does a record with an empty namespace, pod,
container or template, which no container can be tied to. Of each record it keeps
``namespace``, ``pod``, ``container``, ``chip`` (physical id), ``vnpu_id`` and ``template``.
A ledger that does not exist yet (a fresh node, a plugin not yet started) is an empty one;
one that exists but cannot be read raises ``errors.LedgerError``. Without the ledger,
attribution falls back to matching templates on each chip.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from vnpu_exporter import errors
from vnpu_npu import ledger as npu_ledger

FILE = npu_ledger.FILE
FORMAT = npu_ledger.FORMAT


@dataclass(frozen=True, slots=True)
class Record:
    """One owner of one vNPU."""

    namespace: str
    pod: str
    container: str
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


def _usable(record: npu_ledger.Record) -> bool:
    return all((record.namespace, record.pod, record.container, record.template))


class LedgerFile:
    """``Source`` over ``state_dir/ledger.json``."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE

    def read(self) -> Ledger:
        """The ledger as the file is now; ``errors.LedgerError`` when it cannot be read."""
        found = errors.scan_ledger(npu_ledger.scan, self.path, FORMAT)
        usable = tuple(r for r in found.records if _usable(r))
        records = tuple(
            Record(r.namespace, r.pod, r.container, r.chip, r.vnpu_id, r.template) for r in usable
        )
        return Ledger(records, len(found.problems) + len(found.records) - len(usable))
