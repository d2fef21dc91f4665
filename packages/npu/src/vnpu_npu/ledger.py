"""The vNPU ownership ledger's document: which pod container each vNPU an agent created belongs to.

One JSON file in the agent's state directory, ``ledger.json``, of format
``vnpu-device-plugin-ledger/v1``: ``{"format": ..., "records": [<Record>, ...]}``, written
whole by ``statefile`` (a rename over the old file, fsync'ed when ``durable``) and sorted by
chip, vNPU id, pod UID and container so that equal ledgers are equal files. Each record
names one owner of one vNPU: the pod (UID, namespace, name), the container and whether it is
an init container, the chip (physical id and UUID), the vNPU id and template, the state
(``intent``: about to be created; ``owned``: it exists) and when the intent was written.

Who reads it, and how a broken record is met:

* the device plugin (``vnpu_device_plugin.ledger``) writes it and reads it back at start with
  ``read``: strict, the first unusable record raises ``errors.BadRecord`` naming the path and
  its index, since ownership is never guessed;
* the exporter (``vnpu_exporter.ownership``) reads it on every refresh with ``scan``, which
  keeps the usable records and returns the unusable ones as errors, to be skipped and counted;
* the DRA driver keeps its claims' vNPUs in a claim ledger of the same envelope and states
  (``vnpu_dra_driver.ledger``): a claim, not a pod container, owns them there.

Both readers check records with the same ``record``. A ledger file that does not exist is an
empty ledger; one that exists but cannot be read raises ``errors.StateFileError``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from vnpu_npu import errors, statefile

FILE = "ledger.json"
FORMAT = "vnpu-device-plugin-ledger/v1"
WHAT = "ledger"  # what a message calls the file: "move it aside to start with an empty ledger"


class State(StrEnum):
    INTENT = "intent"  # about to create the vNPU; it may or may not exist
    OWNED = "owned"  # the vNPU exists and belongs to the container


@dataclass(frozen=True, slots=True)
class Record:
    """One owner of one vNPU."""

    pod_uid: str
    namespace: str
    pod: str
    container: str
    init: bool  # the owner is an init container (its vNPU may go once it has finished)
    chip: int  # physical id
    chip_uuid: str
    vnpu_id: int
    template: str
    state: State
    created_at: float  # unix seconds when the intent was written

    @property
    def vnpu(self) -> tuple[int, int]:
        """The vNPU this record is about: (chip, vNPU id)."""
        return (self.chip, self.vnpu_id)

    @property
    def owner(self) -> tuple[str, str]:
        return (self.pod_uid, self.container)

    @property
    def who(self) -> str:
        return f"{self.namespace}/{self.pod}"


FIELD_TYPES: statefile.FieldTypes = {
    "pod_uid": str,
    "namespace": str,
    "pod": str,
    "container": str,
    "init": bool,
    "chip": int,
    "chip_uuid": str,
    "vnpu_id": int,
    "template": str,
    "state": str,
    "created_at": (int, float),
}


@dataclass(frozen=True, slots=True)
class Reading:
    """What ``scan`` found: the usable records, and an error for each record that is not."""

    records: tuple[Record, ...]
    problems: tuple[errors.BadRecord, ...] = ()


def record(path: Path, index: int, raw: object) -> Record:
    """Record ``index`` of the ledger at ``path``; ``errors.BadRecord`` when it is unusable."""
    values = statefile.fields(path, index, raw, FIELD_TYPES)
    values["state"] = statefile.member(path, index, values, "state", State)
    values["created_at"] = float(values["created_at"])
    return Record(**values)


def read(path: Path) -> tuple[Record, ...]:
    """Every record of the ledger at ``path`` (none when it does not exist).

    ``errors.StateFileError`` when the file is broken, ``errors.BadRecord`` at the first
    unusable record.
    """
    return statefile.parsed(path, FORMAT, WHAT, record)


def scan(path: Path) -> Reading:
    """The usable records of the ledger at ``path`` and the problems of the others.

    ``errors.StateFileError`` only when the file as a whole is broken.
    """
    return Reading(*statefile.scanned(path, FORMAT, WHAT, record))


def write(path: Path, records: Iterable[Record], *, durable: bool) -> None:
    """Replace the ledger at ``path`` with ``records``; ``errors.StateFileError`` on failure."""
    ordered = sorted(records, key=lambda r: (r.chip, r.vnpu_id, r.pod_uid, r.container))
    raw = [{**dataclasses.asdict(r), "state": r.state.value} for r in ordered]
    statefile.write(path, FORMAT, raw, durable=durable)
