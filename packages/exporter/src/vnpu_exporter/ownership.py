"""The device plugin's vNPU ownership ledger, read (never written) to tie vNPU ids to pods.

In managed mode ``vnpu-device-plugin`` creates every vNPU itself and records, before it
answers the kubelet, which pod container owns it: ``<state dir>/ledger.json``, format
``vnpu-device-plugin-ledger/v1``, replaced atomically on every change. With
``--device-plugin-state-dir`` the exporter reads that file on the ``ownership`` refresh
interval; ``attribution`` then names the exact vNPU of each container even when several
pods hold the same template on one chip. The fields read are ``namespace``, ``pod``,
``container``, ``chip`` (physical id), ``vnpu_id`` and ``template`` of each record;
anything else in the file is ignored, and a record missing one of these is skipped and
counted. Without the ledger, attribution falls back to matching templates on each chip.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from vnpu_exporter import errors

FILE = "ledger.json"
FORMAT = "vnpu-device-plugin-ledger/v1"
_TEXT_FIELDS = ("namespace", "pod", "container", "template")
_NUMBER_FIELDS = ("chip", "vnpu_id")


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


def parse(text: str, where: str) -> Ledger:
    """The records of a ledger document; LedgerError when the document itself is unusable."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise errors.LedgerError(where, f"not JSON: {exc}") from exc
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise errors.LedgerError(where, f"format is {found!r}, this exporter reads {FORMAT}")
    raw = document.get("records")
    if not isinstance(raw, list):
        raise errors.LedgerError(where, "records is not a list")
    records: list[Record] = []
    skipped = 0
    for item in raw:
        if not isinstance(item, dict):
            skipped += 1
            continue
        texts = [item.get(name) for name in _TEXT_FIELDS]
        numbers = [item.get(name) for name in _NUMBER_FIELDS]
        if not all(isinstance(v, str) and v for v in texts) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in numbers
        ):
            skipped += 1
            continue
        namespace, pod, container, template = (str(v) for v in texts)
        chip, vnpu_id = int(item["chip"]), int(item["vnpu_id"])
        records.append(Record(namespace, pod, container, chip, vnpu_id, template))
    return Ledger(tuple(records), skipped)


class LedgerFile:
    """``Source`` over ``state_dir/ledger.json``."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE

    def read(self) -> Ledger:
        try:
            text = self.path.read_text(encoding="utf-8")
        except OSError as exc:
            raise errors.LedgerError(str(self.path), f"cannot read: {exc}") from exc
        return parse(text, str(self.path))
