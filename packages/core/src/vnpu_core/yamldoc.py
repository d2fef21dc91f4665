"""Operator-written YAML, read within bounds; the one YAML loader of vnpu-core.

Every YAML text vnpu reads was written by an operator: the device config (``deviceconfig``),
the tenants config (``tenants``) and the planner's input files (``cli``). ``load`` (one
document) and ``load_all`` (a stream of them) read such text with PyYAML's safe loader (plain
data only), and refuse, each with one ``errors.DocumentError``:

* a text larger than ``max_bytes`` in UTF-8, before any of it is parsed;
* any anchor (``&name``) or alias (``*name``), as soon as the parser meets it, before the
  composer can store or repeat it: none of these files has a use for them, and a few hundred
  bytes of nested aliases (a "billion laughs" document) expand to gigabytes;
* mappings and lists nested deeper than ``max_depth``, counted while the document is
  composed, so neither composing nor constructing recurses past it;
* a key given twice in one mapping (PyYAML would keep the last one silently);
* a scalar Python cannot hold (an integer of more than 4300 digits, a date ``2020-13-45``).

Every error gives the line and column (from 1; none for the size), the text of that line as
``value`` (the byte count, for the size), and the limit that was passed. The loaders turn it
into their own error (``ConfigError``, ``QuotaError``, ``InputFileError``). The callers'
limits: 256 KiB (``MAX_BYTES``) for the device and tenants configs, a quarter of what a
ConfigMap can hold; the planner's own input files allow more (``cli``). 64 levels
(``MAX_DEPTH``) is several times what any of these files needs, as for the scheduler's JSON
bodies.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import yaml

from vnpu_core import errors

MAX_BYTES = 256 * 1024
MAX_DEPTH = 64
_EXCERPT = 200  # characters of the offending line kept as the error's value
_SYNTAX = "YAML syntax error"
_WHY_NO_ALIASES = (
    "anchors (&name) and aliases (*name) are not allowed: these files have no use for them, "
    "and a few hundred bytes of nested aliases expand to gigabytes; write each value out"
)


@dataclass(frozen=True, slots=True)
class Document:
    """One document of a stream and the line (from 1) its content starts on (0: empty)."""

    data: object
    line: int


def load(text: str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> object:
    """The one document of ``text`` (None when it is empty). Raises ``errors.DocumentError``."""
    _check_size(text, max_bytes)
    try:
        loader = _Loader(text, max_depth)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except (yaml.YAMLError, RecursionError) as exc:
        raise _translate(exc, text, max_depth) from exc


def load_all(
    text: str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH
) -> list[Document]:
    """Every document of ``text`` in order. Raises ``errors.DocumentError``."""
    _check_size(text, max_bytes)
    found: list[Document] = []
    try:
        loader = _Loader(text, max_depth)
        try:
            while loader.check_node():
                node = loader.get_node()
                if node is None:
                    found.append(Document(None, 0))
                else:
                    found.append(
                        Document(loader.construct_document(node), node.start_mark.line + 1)
                    )
        finally:
            loader.dispose()
    except (yaml.YAMLError, RecursionError) as exc:
        raise _translate(exc, text, max_depth) from exc
    return found


def oversize(size: int, max_bytes: int = MAX_BYTES) -> errors.DocumentError:
    """The error for a text of ``size`` bytes above ``max_bytes``, for a caller that stops
    reading at the limit rather than holding the whole text."""
    return errors.DocumentError(
        "YAML document too large",
        f"{size} bytes, more than the limit of {max_bytes} bytes",
        size,
        limit=max_bytes,
    )


def _check_size(text: str, max_bytes: int) -> None:
    if len(text) <= max_bytes // 4:
        return  # four bytes per character at most: no need to count
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise oversize(size, max_bytes)


class _Refused(yaml.MarkedYAMLError):
    """Something the loader will not read, at ``problem_mark``; ``limit`` the bound passed."""

    def __init__(
        self, summary: str, detail: str, mark: yaml.Mark | None, limit: int | None
    ) -> None:
        super().__init__(None, None, detail, mark)
        self.summary = summary
        self.limit = limit


class _Loader(yaml.SafeLoader):
    """The safe loader, refusing anchors, aliases, deep nesting, repeated keys, bad scalars."""

    def __init__(self, text: str, max_depth: int) -> None:
        super().__init__(text)
        self._max_depth = max_depth
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]  # stubs: untyped
        mark = event.start_mark if isinstance(event.start_mark, yaml.Mark) else None
        if isinstance(event, yaml.NodeEvent) and event.anchor is not None:
            kind = "alias *" if isinstance(event, yaml.AliasEvent) else "anchor &"
            raise _Refused(f"YAML {kind}{event.anchor} refused", _WHY_NO_ALIASES, mark, None)
        nests = isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent))
        if nests:
            self._depth += 1
            if self._depth > self._max_depth:
                detail = f"more than {self._max_depth} levels of mappings and lists"
                raise _Refused("YAML nested too deeply", detail, mark, self._max_depth)
        try:
            return super().compose_node(parent, index)
        finally:
            if nests:
                self._depth -= 1

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as exc:  # e.g. int("1" * 5000), 2020-13-45
            tag = node.tag.rsplit(":", 1)[-1]
            shown = str(node.value)
            shown = shown if len(shown) <= 40 else f"{shown[:40]}... ({len(shown)} characters)"
            detail = f"{shown!r} cannot be read as {tag}: {exc}"
            raise _Refused("YAML value cannot be read", detail, node.start_mark, None) from exc

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: set[Hashable] = set()
        for key_node, _value in node.value:
            if key_node.tag.endswith(":merge"):
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, Hashable):
                if key in seen:
                    twice = f"key {key!r} is given twice"
                    raise yaml.constructor.ConstructorError(None, None, twice, key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)


def _translate(exc: Exception, text: str, max_depth: int) -> errors.DocumentError:
    if isinstance(exc, _Refused):
        return _located(exc.summary, exc.problem or "", text, exc.problem_mark, exc.limit)
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        detail = ", ".join(part for part in (exc.context, exc.problem) if part) or "malformed"
        return _located(_SYNTAX, detail, text, mark, None)
    if isinstance(exc, yaml.reader.ReaderError):
        position = exc.position
        line = text.count("\n", 0, position)
        column = position - (text.rfind("\n", 0, position) + 1)
        char = exc.character
        shown = f"U+{char:04X}" if isinstance(char, int) else repr(char)
        return errors.DocumentError(
            _SYNTAX,
            f"{shown} is not allowed",
            _line(text, line),
            line=line + 1,
            column=column + 1,
        )
    if isinstance(exc, RecursionError):  # the depth limit should have stopped it first
        detail = f"more than {max_depth} levels of mappings and lists"
        return errors.DocumentError("YAML nested too deeply", detail, "", limit=max_depth)
    return errors.DocumentError(_SYNTAX, str(exc), "")


def _located(
    summary: str, detail: str, text: str, mark: yaml.Mark | None, limit: int | None
) -> errors.DocumentError:
    if mark is None:
        return errors.DocumentError(summary, detail, "", limit=limit)
    return errors.DocumentError(
        summary,
        detail,
        _line(text, mark.line),
        line=mark.line + 1,
        column=mark.column + 1,
        limit=limit,
    )


def _line(text: str, index: int) -> str:
    """Line ``index`` (from 0) of ``text``, cut to a readable length; "" past the end."""
    lines = text.splitlines()
    return lines[index][:_EXCERPT] if 0 <= index < len(lines) else ""
