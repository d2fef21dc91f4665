"""The vNPU ownership ledger: which pod container each vNPU this plugin created belongs to.

One JSON file, ``<state dir>/ledger.json``, rewritten whole on every change (``statefile``):
the new text goes to ``ledger.json.tmp`` and is renamed over the old file, so after a crash the file is
either the old or the new version, never half of one. Adding records is also durable
(file and directory fsync'ed before ``add`` returns), since a record must exist before
its vNPU does. Turning an intent into ``owned`` and removing records only narrow what the
ledger claims: if a power cut loses one, the reconciler finds the same answer again from
the driver (an intent whose vNPU exists is owned; a record whose vNPU is gone is
dropped), so those writes skip the fsyncs and keep Allocate fast. ``lifecycle`` writes an ``intent`` record (pod, container, chip, the
vNPU id it is about to use, template) *before* it creates the vNPU and turns it into
``owned`` once the vNPU exists; the ``reconciler`` reads it after a restart and on every
pass. So every vNPU the plugin ever created is named here, even one created just before
a crash: an intent whose vNPU exists is owned by that pod, an intent whose vNPU does not
exist is dropped.

An init container and the app container that reuses its vNPU (same chip and template)
each get a record for the same vNPU; it is destroyed only when every owner is done.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from vnpu_device_plugin import errors, statefile

FILE = "ledger.json"
FORMAT = "vnpu-device-plugin-ledger/v1"


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


_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
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


def _record(path: str, index: int, raw: object) -> Record:
    where = f"records[{index}]"
    if not isinstance(raw, dict):
        raise errors.LedgerError(path, f"{where} is not an object")
    for name, kind in _FIELD_TYPES.items():
        value = raw.get(name)
        wrong_bool = isinstance(value, bool) and kind is not bool
        if value is None or wrong_bool or not isinstance(value, kind):
            raise errors.LedgerError(path, f"{where}.{name} is missing or not a {kind}: {value!r}")
    try:
        state = State(raw["state"])
    except ValueError as exc:
        raise errors.LedgerError(path, f"{where}.state {raw['state']!r} is unknown") from exc
    values = {name: raw[name] for name in _FIELD_TYPES}
    values["state"] = state
    values["created_at"] = float(raw["created_at"])
    return Record(**values)


class Ledger:
    """The ledger file of ``state_dir``; thread-safe. Raises ``errors.LedgerError``."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE
        self._lock = threading.Lock()
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise errors.LedgerError(str(self.path), f"cannot create the directory: {exc}") from exc
        self._records = self._load()
        self._write(self._records)  # proves the directory is writable before serving

    def _load(self) -> tuple[Record, ...]:
        raw = statefile.read(self.path, FORMAT, "ledger")
        return tuple(_record(str(self.path), i, item) for i, item in enumerate(raw))

    def _write(self, records: tuple[Record, ...], *, durable: bool = True) -> None:
        ordered = sorted(records, key=lambda r: (r.chip, r.vnpu_id, r.pod_uid, r.container))
        statefile.write(
            self.path,
            FORMAT,
            [{**dataclasses.asdict(r), "state": r.state.value} for r in ordered],
            durable=durable,
        )

    def records(self) -> tuple[Record, ...]:
        with self._lock:
            return self._records

    def owners(self, chip: int, vnpu_id: int) -> tuple[Record, ...]:
        with self._lock:
            return tuple(r for r in self._records if r.vnpu == (chip, vnpu_id))

    def of_container(self, pod_uid: str, container: str) -> tuple[Record, ...]:
        with self._lock:
            return tuple(r for r in self._records if r.owner == (pod_uid, container))

    def add(self, *records: Record) -> None:
        """Append records and write the file (durable when this returns)."""
        with self._lock:
            updated = self._records + records
            self._write(updated)
            self._records = updated

    def replace(self, old: Record, new: Record) -> None:
        """Put ``new`` in place of ``old`` (not fsync'ed: see the module docstring)."""
        with self._lock:
            updated = tuple(new if r == old else r for r in self._records)
            self._write(updated, durable=False)
            self._records = updated

    def remove(self, *records: Record) -> None:
        """Forget records (not fsync'ed: see the module docstring)."""
        gone = set(records)
        with self._lock:
            updated = tuple(r for r in self._records if r not in gone)
            if len(updated) == len(self._records):
                return
            self._write(updated, durable=False)
            self._records = updated
