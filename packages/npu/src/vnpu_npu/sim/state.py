"""The simulated node's state and its text form, shared with the stand-in libdcmi.so.

``state.txt`` holds one record per line: a record word, then ``key=value`` fields
separated by single spaces (values never contain spaces). The Python simulated backend
and the C stand-in library both read and write it (``sim.store`` does the locking)::

    format 1
    config 4f1c0a9e2b7d3c55
    chip phy=0 card=0 device=0 logic=0 name=310P3 type=Ascend version=V1 model=310P3 aicore=8 aicpu=7 memory=24576 memkind=ddr vnpus=7 idbase=100 idcount=8 uuid=... bdf=0000:01:00.0 media=12,12,16,8,3,0
    template name=vir01 aicore=1 aicpu=1 memory=3072 media=1,1,2,1,0,0
    status phy=0 health=0 gone=0 codes=- temp=45 power_dw=120 aicore=0 memory=0
    vnpu id=100 phy=0 template=vir01 used=0 aicore=0 memory=0

``media`` lists engine counts in ``vnpu_core.catalog.MEDIA_ENGINES`` order, or ``-`` when
not enforced; ``codes`` is ``-`` or comma-separated 8-digit hex fault codes;
``power_dw`` is in tenths of a watt (DCMI's unit); memory figures are MiB. The C library
rewrites only ``vnpu`` lines (it copies every other line as it is), so records it does not
know survive its writes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vnpu_npu import backend, errors, faults

FORMAT = 1
STATE_FILE = "state.txt"


@dataclass(frozen=True, slots=True)
class ChipRecord:
    phy: int
    card: int
    device: int
    logic: int
    name: str
    type: str
    version: str
    model: str
    aicore: int
    aicpu: int
    memory: int
    memkind: backend.MemoryKind
    vnpus: int
    idbase: int
    idcount: int
    uuid: str
    bdf: str
    media: tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class TemplateRecord:
    name: str
    aicore: int
    aicpu: int
    memory: int
    media: tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class StatusRecord:
    phy: int
    health: int = 0
    gone: bool = False
    codes: tuple[int, ...] = ()
    temp: int = 45
    power_dw: int = 0
    aicore: int = 0
    memory: int = 0


@dataclass(frozen=True, slots=True)
class VnpuRecord:
    id: int
    phy: int
    template: str
    used: bool = False
    aicore: int = 0
    memory: int = 0


@dataclass(frozen=True, slots=True)
class State:
    config: str
    chips: tuple[ChipRecord, ...]
    templates: tuple[TemplateRecord, ...]
    status: tuple[StatusRecord, ...]
    vnpus: tuple[VnpuRecord, ...] = ()

    def chip(self, phy: int) -> ChipRecord | None:
        return next((c for c in self.chips if c.phy == phy), None)

    def status_of(self, phy: int) -> StatusRecord:
        return next((s for s in self.status if s.phy == phy), StatusRecord(phy))

    def template(self, name: str) -> TemplateRecord | None:
        return next((t for t in self.templates if t.name == name), None)

    def vnpus_on(self, phy: int) -> tuple[VnpuRecord, ...]:
        return tuple(sorted((v for v in self.vnpus if v.phy == phy), key=lambda v: v.id))

    def with_status(self, record: StatusRecord) -> State:
        others = tuple(s for s in self.status if s.phy != record.phy)
        return dataclasses.replace(
            self, status=tuple(sorted((*others, record), key=lambda s: s.phy))
        )

    def with_vnpus(self, vnpus: tuple[VnpuRecord, ...]) -> State:
        return dataclasses.replace(self, vnpus=tuple(sorted(vnpus, key=lambda v: v.id)))


_RECORDS: dict[str, type[Any]] = {
    "chip": ChipRecord,
    "template": TemplateRecord,
    "status": StatusRecord,
    "vnpu": VnpuRecord,
}


def _render_value(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if value is None:
        return "-"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) if value else "-"
    return str(value)


def _render_record(word: str, record: Any) -> str:
    fields = []
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if f.name == "codes":
            text = ",".join(faults.format_code(c) for c in value) or "-"
        else:
            text = _render_value(value)
        fields.append(f"{f.name}={text}")
    return " ".join([word, *fields])


def render(state: State) -> str:
    lines = [f"format {FORMAT}", f"config {state.config}"]
    lines += [_render_record("chip", c) for c in state.chips]
    lines += [_render_record("template", t) for t in state.templates]
    lines += [_render_record("status", s) for s in state.status]
    lines += [_render_record("vnpu", v) for v in state.vnpus]
    return "\n".join(lines) + "\n"


def _int_tuple(text: str) -> tuple[int, ...] | None:
    return None if text == "-" else tuple(int(v) for v in text.split(","))


def _converter(name: str, annotation: str) -> Callable[[str], object]:
    if name == "codes":
        return lambda text: (
            () if text == "-" else tuple(faults.parse_code(c) for c in text.split(","))
        )
    if annotation == "bool":
        return lambda text: {"0": False, "1": True}[text]
    if annotation == "int":
        return int
    if annotation == "backend.MemoryKind":
        return backend.MemoryKind
    if "tuple" in annotation:
        return _int_tuple
    return str


# Per record word: field name -> converter from its text, built once from the dataclasses.
_FIELDS: dict[str, dict[str, Callable[[str], object]]] = {
    word: {f.name: _converter(f.name, str(f.type)) for f in dataclasses.fields(cls)}
    for word, cls in _RECORDS.items()
}


def parse(text: str, source: str = STATE_FILE) -> State:
    """The state in ``text``; SimError names the line and field that do not parse."""
    config = ""
    found: dict[str, list[Any]] = {word: [] for word in _RECORDS}
    seen_format = False
    for number, line in enumerate(text.splitlines(), start=1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        word, rest = words[0], words[1:]
        if word == "format":
            if rest != [str(FORMAT)]:
                raise errors.SimError(
                    source, f"line {number}", line, f"this code reads format {FORMAT}"
                )
            seen_format = True
        elif word == "config":
            config = rest[0] if rest else ""
        elif word in _RECORDS:
            found[word].append(_parse_record(source, number, word, rest))
    if not seen_format:
        raise errors.SimError(source, "format", None, f"no 'format {FORMAT}' line")
    return State(
        config,
        tuple(sorted(found["chip"], key=lambda c: c.phy)),
        tuple(found["template"]),
        tuple(sorted(found["status"], key=lambda s: s.phy)),
        tuple(sorted(found["vnpu"], key=lambda v: v.id)),
    )


def _parse_record(source: str, number: int, word: str, tokens: list[str]) -> Any:
    cls = _RECORDS[word]
    converters = _FIELDS[word]
    values: dict[str, object] = {}
    for token in tokens:
        key, sep, raw = token.partition("=")
        if not sep:
            raise errors.SimError(
                source, f"line {number}: {word}.{key}", token, "fields are key=value"
            )
        convert = converters.get(key)
        if convert is None:
            continue  # a newer writer's field: ignore it, keep reading
        try:
            values[key] = convert(raw)
        except (ValueError, KeyError) as exc:
            where = f"line {number}: {word}.{key}"
            raise errors.SimError(source, where, raw, f"cannot read: {exc}") from exc
    try:
        return cls(**values)
    except TypeError as exc:
        raise errors.SimError(
            source, f"line {number}: {word}", " ".join(tokens), f"missing fields: {exc}"
        ) from exc
