"""JSON the way Go's ``encoding/json`` writes it, and typed readers that name the bad field.

HAMi and Volcano are Go programs; the JSON annotations vnpu shares with them
(``hami.io/node-register-<CW>``, ``huawei.com/<CW>``) must be byte-identical to what
``json.Marshal`` produces and must be read with Go's integer widths. ``vnpu_core.protocol``
is the only caller. Every reader raises ``errors.ProtocolError(key, path, problem)`` with a
JSON path such as ``[2].devmem`` so the message says which element and field is wrong.

Objects are read as Go reads JSON into a struct: a key names a field when it equals the
field's name ignoring case (Unicode simple case folding, so ``"ID"``, ``"Id"`` and
``"id"`` all set ``id``, and U+017F, the long s, stands for ``s``), and when several keys
name one field the last one in the document wins. Keys of a JSON object read into a Go
map (``custominfo``) are compared exactly, as Go does; an object field given several
times is the merge of its objects in document order (Go decodes into the map it already
has), and ``null`` empties it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from vnpu_core import errors

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# json.Marshal escapes these inside strings (HTML safety and JavaScript line separators);
# Python's json.dumps does not. They can only occur inside strings, so translating the
# whole document is safe. Control characters are escaped identically by both.
_GO_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def dumps(document: object) -> str:
    """Serialise like ``json.Marshal``: compact, non-ASCII kept as UTF-8, key order as given."""
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    return text.translate(_GO_ESCAPES)


def int_problem(value: object, high: int) -> str | None:
    """Why ``value`` is not an integer in 0..high (bools excluded), or None when it is."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"must be an integer, got {value!r}"
    if not 0 <= value <= high:
        return f"must be between 0 and {high}, got {value}"
    return None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class Object(dict[str, Any]):
    """A JSON object as parsed: the last value of each exact key, and every pair in order."""

    __slots__ = ("_folded", "pairs")

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__(pairs)
        self.pairs = pairs
        self._folded: dict[str, tuple[str, Any]] | None = None

    def folded(self) -> dict[str, tuple[str, Any]]:
        """Folded key -> the last ``(key, value)`` with that folded key (built once)."""
        if self._folded is None:
            self._folded = {fold(key): (key, value) for key, value in self.pairs}
        return self._folded


def _fold_char(char: str) -> str:
    """One character as Go folds it: the smallest character of its simple case-fold set."""
    if char.isascii():
        return char.upper()
    seen = {char}
    todo = [char]
    while todo:
        current = todo.pop()
        for other in (current.upper(), current.lower(), current.casefold()):
            if len(other) == 1 and other not in seen:
                seen.add(other)
                todo.append(other)
    return min(seen)


def fold(name: str) -> str:
    """``name`` folded so that ``fold(a) == fold(b)`` exactly when Go's decoder matches them."""
    if name.isascii():
        return name.upper()
    return "".join(_fold_char(c) for c in name)


def members(item: dict[str, Any], name: str) -> Iterator[tuple[str, Any]]:
    """Every ``(key, value)`` of ``item`` that Go reads into the struct field ``name``, in order."""
    pairs = item.pairs if isinstance(item, Object) else list(item.items())
    wanted = fold(name)
    for key, value in pairs:
        if key == name or fold(key) == wanted:
            yield key, value


def member(item: dict[str, Any], name: str) -> tuple[str, Any] | None:
    """The ``(key, value)`` Go keeps for the struct field ``name``: the last matching key."""
    if isinstance(item, Object):
        return item.folded().get(fold(name))
    found = None
    for pair in members(item, name):
        found = pair
    return found


def load_array(key: str, value: str) -> list[Any]:
    """Parse ``value`` as a JSON array (Go rejects NaN and Infinity, so do we)."""
    try:
        document = json.loads(value, parse_constant=_reject_constant, object_pairs_hook=Object)
    except json.JSONDecodeError as exc:
        fragment = value[exc.pos : exc.pos + 40]
        raise errors.ProtocolError(key, fragment, f"not JSON: {exc.msg}") from exc
    except (ValueError, RecursionError) as exc:
        raise errors.ProtocolError(key, value[:40], f"not JSON: {exc}") from exc
    if not isinstance(document, list):
        raise errors.ProtocolError(key, value[:40], "must be a JSON array")
    return document


def obj(key: str, path: str, raw: object) -> dict[str, Any]:
    """``raw`` as a JSON object."""
    if not isinstance(raw, dict):
        raise errors.ProtocolError(key, path, f"must be a JSON object, got {raw!r}")
    return raw


def integer(key: str, path: str, raw: object, high: int) -> int:
    """``raw`` as an integer in 0..high; a JSON float such as ``1.0`` is refused, as Go does."""
    problem = int_problem(raw, high)
    if problem is not None:
        raise errors.ProtocolError(key, path, problem)
    assert isinstance(raw, int)
    return raw


def string(key: str, path: str, raw: object) -> str:
    """``raw`` as a string."""
    if not isinstance(raw, str):
        raise errors.ProtocolError(key, path, f"must be a string, got {raw!r}")
    return raw


def boolean(key: str, path: str, raw: object) -> bool:
    """``raw`` as ``true`` or ``false``."""
    if not isinstance(raw, bool):
        raise errors.ProtocolError(key, path, f"must be true or false, got {raw!r}")
    return raw
