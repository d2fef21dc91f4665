"""The plugin's state files held in memory: a locked copy of a file's records, written on each change.

``ledger`` (the vNPU ownership ledger) and ``grants`` (the grant book) each keep one file in
the state directory. How a file is written and read is ``vnpu_npu.statefile``'s (the new text
renamed over the old file, so after a crash it is either the old or the new version; fsync'ed
when durable; a broken file refused with its path and how to start over), and the ledger's
document is ``vnpu_npu.ledger``'s. ``Store`` is what both files add to that here: the records
are read once, at start, kept under a lock, and every change writes the whole file before the
new records are kept, so the copy never claims what the file does not. The plugin is the
files' one writer, which is what makes a copy read once enough; a reader in another process
(the exporter) reads the file again on every refresh instead.

Every ``vnpu_npu.errors.StateFileError`` becomes ``errors.LedgerError`` here, with the same
path and problem. Ownership is never guessed from a file that cannot be read.
"""

from __future__ import annotations

import abc
import contextlib
import threading
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Generic, TypeVar

from vnpu_device_plugin import errors
from vnpu_npu import errors as npu_errors
from vnpu_npu import statefile as npu_statefile

R = TypeVar("R")


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except npu_errors.StateFileError as exc:
        raise errors.LedgerError(exc.path, exc.problem) from exc


class Store(abc.ABC, Generic[R]):
    """The records of the state file at ``path``; thread-safe. Raises ``errors.LedgerError``.

    Subclasses say how the file is read and written (``_read``, ``_write``); they change the
    records under ``_lock`` with ``_commit``.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise errors.LedgerError(str(path), f"cannot create the directory: {exc}") from exc
        with _translated():
            self._records = self._read()
        self._commit(self._records, durable=True)  # proves the directory is writable

    @abc.abstractmethod
    def _read(self) -> tuple[R, ...]:
        """Every record of the file (none when it does not exist)."""

    @abc.abstractmethod
    def _write(self, records: tuple[R, ...], *, durable: bool) -> None:
        """Replace the file with ``records``."""

    def _commit(self, records: tuple[R, ...], *, durable: bool) -> None:
        """Write ``records`` and keep them (the caller holds ``_lock``, but at start)."""
        with _translated():
            self._write(records, durable=durable)
        self._records = records

    def _sync(self) -> None:
        """fsync the file and its directory."""
        with _translated():
            npu_statefile.sync(self.path)

    def records(self) -> tuple[R, ...]:
        with self._lock:
            return self._records

    def _drop(self, gone: Collection[R]) -> bool:
        """Forget ``gone`` (not fsync'ed); False when none of them was kept."""
        with self._lock:
            kept = tuple(r for r in self._records if r not in gone)
            if len(kept) == len(self._records):
                return False
            self._commit(kept, durable=False)
        return True
