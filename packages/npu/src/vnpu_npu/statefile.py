"""Node-local state files: a JSON document of records, replaced whole and never half written.

A node agent keeps what must survive its restarts in files of its state directory, each
``{"format": <format>, "records": [...]}``: the device plugin its vNPU ownership ledger
(``ledger``, the format of which lives in this package too) and its grant book. ``write``
puts the new text in ``<file>.tmp`` and renames it over the old file, so after a crash the
file is either the old or the new version; with ``durable`` the file and its directory are
fsync'ed before it returns, and ``sync`` does the same later for a file written without it.

``read`` gives the raw records of a file of the expected format, or nothing when the file
does not exist; a file that cannot be read, is not UTF-8, is not JSON or is of another
format raises ``errors.StateFileError`` (``WrongFormat`` for the last) naming the path and
saying how to start over. ``fields`` and ``member`` check one raw record (each field of its
type, each enum value a known one) and raise ``errors.BadRecord`` naming its index. Nothing
here caches: every ``read`` reads the file as it is now, so a reader in another process (the
exporter) sees each replacement the writer makes.
"""

from __future__ import annotations

import enum
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from vnpu_npu import errors

E = TypeVar("E", bound=enum.Enum)
R = TypeVar("R")
FieldTypes = Mapping[str, type | tuple[type, ...]]


def read(path: Path, fmt: str, what: str) -> list[object]:
    """The raw records of ``path``, a ``what`` (for messages); [] when it does not exist.

    ``errors.StateFileError`` when the file is broken.
    """
    where = str(path)
    start_over = f"move it aside to start with an empty {what}"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise errors.StateFileError(where, f"cannot read: {exc}") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise errors.StateFileError(
            where, f"not UTF-8 text (byte {exc.start} is {data[exc.start]:#04x}); {start_over}"
        ) from exc
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise errors.StateFileError(where, f"not JSON ({exc}); {start_over}") from exc
    if not isinstance(document, dict) or document.get("format") != fmt:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise errors.WrongFormat(where, fmt, found, f"not a {what} of format {fmt}")
    records = document.get("records")
    if not isinstance(records, list):
        raise errors.StateFileError(where, "records is not a list")
    return records


def parsed(
    path: Path, fmt: str, what: str, parse: Callable[[Path, int, object], R]
) -> tuple[R, ...]:
    """Every record of the file, each read by ``parse(path, index, raw)``; the first unusable
    one raises its ``errors.BadRecord``."""
    return tuple(parse(path, i, raw) for i, raw in enumerate(read(path, fmt, what)))


def scanned(
    path: Path, fmt: str, what: str, parse: Callable[[Path, int, object], R]
) -> tuple[tuple[R, ...], tuple[errors.BadRecord, ...]]:
    """The usable records of the file and the ``errors.BadRecord`` of each of the others;
    ``errors.StateFileError`` only when the file as a whole is broken."""
    records: list[R] = []
    problems: list[errors.BadRecord] = []
    for i, raw in enumerate(read(path, fmt, what)):
        try:
            records.append(parse(path, i, raw))
        except errors.BadRecord as exc:
            problems.append(exc)
    return tuple(records), tuple(problems)


def fields(path: Path, index: int, raw: object, types: FieldTypes) -> dict[str, Any]:
    """The fields ``types`` names of record ``index`` of ``path``, each of its type (a bool
    passes only as a bool); ``errors.BadRecord`` when the record is not an object or a field is
    missing or of another type. Fields ``types`` does not name are left out."""
    where = f"records[{index}]"
    if not isinstance(raw, dict):
        raise errors.BadRecord(str(path), index, "", f"{where} is not an object")
    for name, kind in types.items():
        value = raw.get(name)
        wrong_bool = isinstance(value, bool) and kind is not bool
        if value is None or wrong_bool or not isinstance(value, kind):
            raise errors.BadRecord(
                str(path), index, name, f"{where}.{name} is missing or not a {kind}: {value!r}"
            )
    return {name: raw[name] for name in types}


def member(path: Path, index: int, values: Mapping[str, object], name: str, kind: type[E]) -> E:
    """Field ``name`` of record ``index`` of ``path`` as a ``kind``; ``errors.BadRecord`` when
    it is not the value of one."""
    try:
        return kind(values[name])
    except ValueError as exc:
        raise errors.BadRecord(
            str(path), index, name, f"records[{index}].{name} {values[name]!r} is unknown"
        ) from exc


def write(path: Path, fmt: str, records: Sequence[object], *, durable: bool) -> None:
    """Replace ``path`` with ``records``; ``errors.StateFileError`` when it cannot be written."""
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
            _sync_directory(path)
    except OSError as exc:
        raise errors.StateFileError(str(path), f"cannot write: {exc}") from exc


def sync(path: Path) -> None:
    """fsync ``path`` and its directory; ``errors.StateFileError`` when that fails."""
    try:
        handle = os.open(path, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)
        _sync_directory(path)
    except OSError as exc:
        raise errors.StateFileError(str(path), f"cannot sync: {exc}") from exc


def _sync_directory(path: Path) -> None:
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
