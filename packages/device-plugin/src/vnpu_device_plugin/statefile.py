"""The plugin's state files: a JSON document of records, replaced whole and never half written.

``ledger`` (the vNPU ownership ledger) and ``grants`` (the grant book) each keep one file in
the state directory: ``{"format": <format>, "records": [...]}``. ``write`` puts the new text
in ``<file>.tmp`` and renames it over the old file, so after a crash the file is either the
old or the new version; with ``durable`` the file and its directory are fsync'ed before it
returns, and ``sync`` does the same later for a file written without it. ``read`` gives the raw records of a file of the expected format, or nothing when
the file does not exist; a file that cannot be read, is not UTF-8, is not JSON or is of
another format raises ``errors.LedgerError`` naming the path and saying how to start over.
Ownership is never guessed from a file that cannot be read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from vnpu_device_plugin import errors


def read(path: Path, fmt: str, what: str) -> list[object]:
    """The raw records of ``path``, a ``what`` (for messages); [] when it does not exist.

    ``errors.LedgerError`` when the file is broken.
    """
    where = str(path)
    start_over = f"move it aside to start with an empty {what}"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise errors.LedgerError(where, f"cannot read: {exc}") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise errors.LedgerError(
            where, f"not UTF-8 text (byte {exc.start} is {data[exc.start]:#04x}); {start_over}"
        ) from exc
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise errors.LedgerError(where, f"not JSON ({exc}); {start_over}") from exc
    if not isinstance(document, dict) or document.get("format") != fmt:
        raise errors.LedgerError(where, f"not a {what} of format {fmt}")
    records = document.get("records")
    if not isinstance(records, list):
        raise errors.LedgerError(where, "records is not a list")
    return records


def write(path: Path, fmt: str, records: Sequence[object], *, durable: bool) -> None:
    """Replace ``path`` with ``records``; ``errors.LedgerError`` when it cannot be written."""
    text = json.dumps({"format": fmt, "records": list(records)}, indent=1, sort_keys=True) + "\n"
    temporary = path.with_name(path.name + ".tmp")
    try:
        with temporary.open("w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            if durable:
                os.fsync(out.fileno())
        os.replace(temporary, path)
        if durable:
            directory = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
    except OSError as exc:
        raise errors.LedgerError(str(path), f"cannot write: {exc}") from exc


def sync(path: Path) -> None:
    """fsync ``path`` and its directory; ``errors.LedgerError`` when that fails."""
    try:
        handle = os.open(path, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    except OSError as exc:
        raise errors.LedgerError(str(path), f"cannot sync: {exc}") from exc
