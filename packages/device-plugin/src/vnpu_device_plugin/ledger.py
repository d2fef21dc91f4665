"""The vNPU ownership ledger: which pod container each vNPU this plugin created belongs to.

One JSON file, ``<state dir>/ledger.json``, whose document (format, record fields, the checks
a record must pass) is ``vnpu_npu.ledger``'s, and so the exporter's and the DRA driver's too.
It is rewritten whole on every change (``vnpu_npu.statefile``): the new text goes to
``ledger.json.tmp`` and is renamed over the old file, so after a crash the file is either
the old or the new version, never half of one. ``Ledger`` keeps the records in memory
(``statefile.Store``) and refuses at start, with the path and the record's index, a record
it cannot read. Adding records is also durable (file and directory fsync'ed before ``add``
returns), since a record must exist before its vNPU does. Turning an intent into ``owned``
and removing records only narrow what the ledger claims: if a power cut loses one, the
reconciler finds the same answer again from the driver (an intent whose vNPU exists is
owned; a record whose vNPU is gone is dropped), so those writes skip the fsyncs and keep
Allocate fast. ``lifecycle`` writes an ``intent`` record (pod, container, chip, the vNPU id
it is about to use, template) *before* it creates the vNPU and turns it into ``owned`` once
the vNPU exists; the ``reconciler`` reads it after a restart and on every pass. So every
vNPU the plugin ever created is named here, even one created just before a crash: an
intent whose vNPU exists is owned by that pod, an intent whose vNPU does not exist is
dropped.

An init container and the app container that reuses its vNPU (same chip and template)
each get a record for the same vNPU; it is destroyed only when every owner is done.
"""

from __future__ import annotations

from pathlib import Path

from vnpu_device_plugin import statefile
from vnpu_npu import ledger as npu_ledger

FILE = npu_ledger.FILE
FORMAT = npu_ledger.FORMAT

State = npu_ledger.State  # intent: about to create the vNPU; owned: it exists
Record = npu_ledger.Record  # one owner of one vNPU


class Ledger(statefile.Store[Record]):
    """The ledger file of ``state_dir``; thread-safe. Raises ``errors.LedgerError``."""

    def __init__(self, state_dir: Path) -> None:
        super().__init__(state_dir / FILE)

    def _read(self) -> tuple[Record, ...]:
        return npu_ledger.read(self.path)

    def _write(self, records: tuple[Record, ...], *, durable: bool) -> None:
        npu_ledger.write(self.path, records, durable=durable)

    def owners(self, chip: int, vnpu_id: int) -> tuple[Record, ...]:
        with self._lock:
            return tuple(r for r in self._records if r.vnpu == (chip, vnpu_id))

    def of_container(self, pod_uid: str, container: str) -> tuple[Record, ...]:
        with self._lock:
            return tuple(r for r in self._records if r.owner == (pod_uid, container))

    def add(self, *records: Record) -> None:
        """Append records and write the file (durable when this returns)."""
        with self._lock:
            self._commit(self._records + records, durable=True)

    def replace(self, old: Record, new: Record) -> None:
        """Put ``new`` in place of ``old`` (not fsync'ed: see the module docstring)."""
        with self._lock:
            self._commit(tuple(new if r == old else r for r in self._records), durable=False)

    def remove(self, *records: Record) -> None:
        """Forget records (not fsync'ed: see the module docstring)."""
        self._drop(set(records))
