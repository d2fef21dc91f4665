"""Device-config loading: HAMi's ``vnpus`` YAML turned into a chip catalog.

HAMi, Volcano and vnpu read one document, the ``device-config.yaml`` key of the
``hami-scheduler-device`` ConfigMap. Its ``vnpus`` key holds one entry per chip model,
either wrapped (``{hamiVnpuCore, configs: [...]}``, HAMi 2.9 and later) or as the older
bare list. ``load`` merges the entries over a base catalog (the built-in one unless the
caller passes another) and returns the merged catalog with the warnings a person should
see. Anything invalid raises ``errors.ConfigError`` whose ``path`` names the exact place
in the document (``vnpus.configs[2].templates[0].memory``) and whose ``value`` is what
was found there. The text is parsed by ``yamldoc``, which refuses anchors and aliases, a
document above ``MAX_BYTES`` and nesting deeper than 64 levels before anything is expanded.

Besides HAMi's keys, vnpu reads ``vnpuLimit``, ``media``, ``server`` and ``name``, which
HAMi and Volcano ignore (docs/device-config.md). Core does no I/O: the scheduler, the
device plugin, the exporter and the planner read the file and pass its text to ``load``.

The module is longer than most (about 470 lines): every key is checked where it is read,
and the typed reader, the merge and the template-against-chip checks share the paths they
report, so splitting them would only pass that state around.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from vnpu_core import catalog, errors, topology, yamldoc

DOCUMENT = "(document)"
# Top-level keys HAMi gives other vendors in the same document; they are not ours to judge.
# fmt: off
OTHER_VENDOR_KEYS = frozenset({
    "nvidia", "cambricon", "hygon", "metax", "mthreads", "iluvatar", "iluvatars", "enflame",
    "kunlun", "awsneuron", "amd", "vastai", "biren",
})
WRAPPER_KEYS = frozenset({"hamiVnpuCore", "configs"})
HAMI_ENTRY_KEYS = frozenset({
    "chipName", "commonWord", "resourceName", "resourceMemoryName", "resourceCoreName",
    "memoryAllocatable", "memoryCapacity", "memoryFactor", "aiCore", "aiCPU",
    "runtimeClassName", "overwriteEnv", "superPod", "templates",
})
# fmt: on
VNPU_ENTRY_KEYS = frozenset({"vnpuLimit", "media", "server", "name"})
TEMPLATE_KEYS = frozenset({"name", "memory", "aiCore", "aiCPU", "media"})
REQUIRED_FOR_NEW_MODEL = ("chipName", "memoryAllocatable", "memoryCapacity", "aiCore", "aiCPU")
MAX_BYTES = yamldoc.MAX_BYTES  # the document's size in UTF-8; docs/device-config.md, "Limits"
MAX_FIGURE = 2**31 - 1  # HAMi's annotations and kubelet quantities carry 32-bit integers
# ``hami.io/<commonWord>-devices-to-allocate`` must stay within the 63-character key limit.
MAX_COMMON_WORD = 63 - len("-devices-to-allocate")

_SUBDOMAIN = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_RESOURCE = re.compile(rf"{_SUBDOMAIN}/{_NAME}")
_RUNTIME_CLASS = re.compile(_SUBDOMAIN)
_WORD = re.compile(_NAME)
_TEMPLATE_NAME = re.compile(r"vir(\d+)(?:_(\d+)c)?(?:_(\d+)g)?(?:_(dvpp|ndvpp|m|nm))?")
_SERVER_KINDS = tuple(kind.value for kind in topology.ServerKind)
_MIB = " of MiB, e.g. 8192"

_T = TypeVar("_T")


@dataclass(frozen=True)
class LoadedConfig:
    """The merged catalog and the warnings to log once (each names its place in the document)."""

    catalog: catalog.Catalog
    warnings: tuple[str, ...] = ()


def load(text: str, source: str = "", base: catalog.Catalog = catalog.BUILTIN) -> LoadedConfig:
    """Parse a device-config document and merge its ``vnpus`` entries over ``base``.

    ``source`` (the file name) prefixes every message. Raises ``errors.ConfigError``.
    """
    reader = _Reader(source)
    document = _parse(text, reader)
    if document is None:
        reader.warn(DOCUMENT, "empty; the default chip models are used unchanged")
        return LoadedConfig(base, tuple(reader.warnings))
    top = reader.mapping(document, DOCUMENT, "with a vnpus key")
    for key in top:
        if key != "vnpus" and key not in OTHER_VENDOR_KEYS:
            reader.warn(str(key), "unknown top-level key, ignored")
    vnpus = top.get("vnpus")
    if vnpus is None:
        reader.warn(DOCUMENT, "no vnpus key; the default chip models are used unchanged")
        return LoadedConfig(base, tuple(reader.warnings))

    soft: bool | None = None
    if isinstance(vnpus, list):
        entries, prefix = vnpus, "vnpus"
    elif isinstance(vnpus, dict):
        reader.unknown_keys(vnpus, WRAPPER_KEYS, "vnpus")
        soft = reader.flag(vnpus, "hamiVnpuCore", "vnpus")
        configs = vnpus.get("configs")
        if configs is not None and not isinstance(configs, list):
            reader.fail("vnpus.configs", configs, "must be a list of chip models")
        entries, prefix = configs or [], "vnpus.configs"
    else:
        reader.fail("vnpus", vnpus, "must be a list of chip models or {hamiVnpuCore, configs}")
    if not entries:
        reader.warn(prefix, "no chip models listed; the default chip models are used unchanged")

    models: list[catalog.ChipModel] = []
    paths: dict[str, str] = {}
    for index, raw in enumerate(entries):
        path = f"{prefix}[{index}]"
        model = _entry(reader, raw, path, base)
        word = model.common_word
        if word in paths:
            reader.fail(f"{path}.commonWord", word, f"duplicate commonWord, also in {paths[word]}")
        paths[word] = path
        models.append(model)
    _check_resources(reader, base, models, paths)
    if not models and soft in (None, base.soft_mode_default):
        return LoadedConfig(base, tuple(reader.warnings))
    return LoadedConfig(base.replace(models, soft), tuple(reader.warnings))


def oversize(size: int, source: str = "") -> errors.ConfigError:
    """The error ``load`` raises for a document of ``size`` bytes, above ``MAX_BYTES``: for a
    reader that stops at the limit instead of holding the whole file."""
    return _refused(yamldoc.oversize(size, MAX_BYTES), source)


def _parse(text: str, reader: _Reader) -> object:
    try:
        return yamldoc.load(text, max_bytes=MAX_BYTES)
    except errors.DocumentError as exc:
        raise _refused(exc, reader.source) from exc


def _refused(exc: errors.DocumentError, source: str) -> errors.ConfigError:
    at = f" at {exc.where}" if exc.where else ""
    return errors.ConfigError(
        DOCUMENT, exc.value, f"{exc.summary}{at}: {exc.detail}", source=source
    )


class _Reader:
    """Typed reads from the parsed document; failures name the path, warnings collect."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.warnings: list[str] = []

    def error(self, path: str, value: object, problem: str) -> errors.ConfigError:
        return errors.ConfigError(path, value, problem, source=self.source)

    def fail(self, path: str, value: object, problem: str) -> NoReturn:
        raise self.error(path, value, problem)

    def warn(self, path: str, message: str) -> None:
        where = f"{self.source}: " if self.source else ""
        self.warnings.append(f"{where}{path}: {message}")

    def mapping(self, value: object, path: str, what: str) -> dict[Any, Any]:
        if not isinstance(value, dict):
            self.fail(path, value, f"must be a mapping {what}")
        return value

    def unknown_keys(self, raw: dict[Any, Any], allowed: Iterable[str], path: str) -> None:
        known = frozenset(allowed)
        for key in raw:
            if key not in known:
                self.warn(f"{path}.{key}", "unknown key, ignored")

    def integer(
        self, raw: dict[Any, Any], key: str, path: str, minimum: int = 1, unit: str = ""
    ) -> int | None:
        value = raw.get(key)
        if value is None:
            return None
        where = f"{path}.{key}"
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(where, value, f"must be a whole number{unit}")
        if value < minimum:
            self.fail(where, value, f"must be at least {minimum}")
        if value > MAX_FIGURE:
            self.fail(where, value, f"must be at most {MAX_FIGURE}")
        return value

    def text(self, raw: dict[Any, Any], key: str, path: str) -> str | None:
        value = raw.get(key)
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)  # Go's YAML reads a bare number into a string field as written
        raise self.error(f"{path}.{key}", value, "must be a string")

    def word(self, raw: dict[Any, Any], key: str, path: str, example: str) -> str | None:
        """A name that ends up in annotations, env values or resource names."""
        value = self.text(raw, key, path)
        if value is not None and not _WORD.fullmatch(value):
            self.fail(
                f"{path}.{key}", value, f"must be letters, digits, '-', '_' or '.', e.g. {example}"
            )
        return value

    def flag(self, raw: dict[Any, Any], key: str, path: str) -> bool | None:
        value = raw.get(key)
        if value is not None and not isinstance(value, bool):
            self.fail(f"{path}.{key}", value, "must be true or false")
        return value

    def media(self, raw: dict[Any, Any], key: str, path: str) -> catalog.Media | None:
        if raw.get(key) is None:
            return None
        where = f"{path}.{key}"
        counts = self.mapping(raw[key], where, "of media engine counts, e.g. {vpc: 12, vdec: 12}")
        for engine in counts:
            if engine not in catalog.MEDIA_ENGINES:
                known = ", ".join(catalog.MEDIA_ENGINES)
                self.fail(f"{where}.{engine}", engine, f"unknown media engine; known: {known}")
        figures = {e: self.integer(counts, e, where, minimum=0) or 0 for e in catalog.MEDIA_ENGINES}
        return catalog.Media(**figures)

    def resource(self, raw: dict[Any, Any], key: str, path: str) -> str | None:
        value = self.text(raw, key, path)
        if value is None:
            return None
        domain, _, name = value.partition("/")
        if not _RESOURCE.fullmatch(value) or len(domain) > 253 or len(name) > 63:
            self.fail(f"{path}.{key}", value, "must be <domain>/<name>, e.g. huawei.com/Ascend310P")
        if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
            self.fail(f"{path}.{key}", value, "the kubernetes.io domain is reserved")
        return value


@dataclass(frozen=True, slots=True)
class _Placed:
    """A template of the merged model, with where the file gave it (None: kept from the base)."""

    template: catalog.Template
    path: str | None
    given: frozenset[str]


def _pick(given: _T | None, default: _T) -> _T:
    return default if given is None else given


def _entry(reader: _Reader, value: object, path: str, base: catalog.Catalog) -> catalog.ChipModel:
    raw = reader.mapping(value, path, "describing one chip model")
    reader.unknown_keys(raw, HAMI_ENTRY_KEYS | VNPU_ENTRY_KEYS, path)
    word = reader.word(raw, "commonWord", path, "Ascend910B3")
    if word is None:
        reader.fail(f"{path}.commonWord", None, "required, e.g. Ascend910B3")
    if len(word) > MAX_COMMON_WORD:
        reader.fail(f"{path}.commonWord", word, f"at most {MAX_COMMON_WORD} characters")
    known = base.by_common_word(word)
    if known is None:
        for key in REQUIRED_FOR_NEW_MODEL:
            if raw.get(key) is None:
                reader.fail(f"{path}.{key}", None, f"required: {word} is not a known chip model")
    given = frozenset(key for key, item in raw.items() if item is not None)

    chip_name = reader.word(raw, "chipName", path, "910B3")
    name = reader.word(raw, "name", path, "910B3")
    # A model the base does not know starts blank: the file gives every figure it needs.
    start = known or catalog.ChipModel(chip_name or "", chip_name or "", word, 0, 0, 0, 0, 0)
    capacity = _pick(
        reader.integer(raw, "memoryCapacity", path, unit=_MIB), start.memory_capacity_mib
    )
    allocatable = _pick(
        reader.integer(raw, "memoryAllocatable", path, unit=_MIB), start.memory_allocatable_mib
    )
    aicore = _pick(reader.integer(raw, "aiCore", path), start.aicore)
    aicpu = _pick(reader.integer(raw, "aiCPU", path), start.aicpu)
    factor = _pick(reader.integer(raw, "memoryFactor", path), start.memory_factor)
    limit = reader.integer(raw, "vnpuLimit", path)
    runtime = _pick(reader.text(raw, "runtimeClassName", path), start.runtime_class)
    if runtime and (len(runtime) > 253 or not _RUNTIME_CLASS.fullmatch(runtime)):
        reader.fail(f"{path}.runtimeClassName", runtime, "must be a DNS subdomain, e.g. ascend")
    reader.flag(raw, "overwriteEnv", path)  # read for its type only (docs/device-config.md)
    super_pod = _pick(reader.flag(raw, "superPod", path), start.super_pod)
    server = _pick(reader.text(raw, "server", path), start.server)
    if server and server not in _SERVER_KINDS:
        kinds = ", ".join(_SERVER_KINDS)
        reader.fail(f"{path}.server", server, f"unknown server kind; known: {kinds}")
    media = _pick(reader.media(raw, "media", path), start.media)
    resource = reader.resource(raw, "resourceName", path)
    memory_resource = reader.resource(raw, "resourceMemoryName", path)
    core_resource = reader.resource(raw, "resourceCoreName", path)
    if resource is not None:
        memory_resource = memory_resource or f"{resource}-memory"
        core_resource = core_resource or f"{resource}-core"

    if allocatable > capacity:
        blame = "memoryAllocatable" if "memoryAllocatable" in given else "memoryCapacity"
        figure = allocatable if blame == "memoryAllocatable" else capacity
        too_big = f"memoryAllocatable {allocatable} exceeds memoryCapacity {capacity}"
        reader.fail(f"{path}.{blame}", figure, too_big)
    placed = _templates(reader, raw, path, known, media)
    chip = {"memory": capacity, "aiCore": aicore, "aiCPU": aicpu}
    for item in placed:
        _check_fits(reader, path, given, chip, media, item)
    if limit is None:
        limit = start.max_vnpus or _smallest_split(capacity, placed)
    return catalog.ChipModel(
        name=_pick(name, start.name),
        chip_name=_pick(chip_name, start.chip_name),
        common_word=word,
        aicore=aicore,
        aicpu=aicpu,
        memory_capacity_mib=capacity,
        memory_allocatable_mib=allocatable,
        max_vnpus=limit,
        templates=tuple(item.template for item in placed),
        media=media,
        memory_factor=factor,
        runtime_class=runtime,
        super_pod=super_pod,
        server=server,
        resource_name=_pick(resource, start.resource_name),
        memory_resource=_pick(memory_resource, start.memory_resource),
        core_resource=_pick(core_resource, start.core_resource),
    )


def _smallest_split(capacity: int, placed: list[_Placed]) -> int:
    if not placed:
        return 1
    return max(1, capacity // min(item.template.memory_mib for item in placed))


def _templates(
    reader: _Reader,
    raw: dict[Any, Any],
    path: str,
    known: catalog.ChipModel | None,
    chip_media: catalog.Media | None,
) -> list[_Placed]:
    listed = raw.get("templates")
    if listed is None:
        kept = known.templates if known is not None else ()
        return [_Placed(template, None, frozenset()) for template in kept]
    if not isinstance(listed, list):
        reader.fail(f"{path}.templates", listed, "must be a list of {name, memory, aiCore, aiCPU}")
    placed: list[_Placed] = []
    first: dict[str, int] = {}
    for index, value in enumerate(listed):
        where = f"{path}.templates[{index}]"
        item = _template(reader, value, where, known, chip_media)
        name = item.template.name
        if name in first:
            reader.fail(
                f"{where}.name", name, f"duplicate template name, also templates[{first[name]}]"
            )
        first[name] = index
        placed.append(item)
    return placed


def _template(
    reader: _Reader,
    value: object,
    path: str,
    known: catalog.ChipModel | None,
    chip_media: catalog.Media | None,
) -> _Placed:
    raw = reader.mapping(value, path, "{name, memory, aiCore, aiCPU}")
    reader.unknown_keys(raw, TEMPLATE_KEYS, path)
    name = reader.word(raw, "name", path, "vir05_1c_16g")
    memory = reader.integer(raw, "memory", path, unit=_MIB)
    aicore = reader.integer(raw, "aiCore", path)
    if name is None:
        reader.fail(f"{path}.name", None, "required in every template, e.g. vir05_1c_16g")
    if memory is None:
        reader.fail(f"{path}.memory", None, "required in every template (MiB)")
    if aicore is None:
        reader.fail(f"{path}.aiCore", None, "required in every template")
    aicpu = reader.integer(raw, "aiCPU", path)
    media = reader.media(raw, "media", path)
    given = frozenset(key for key, item in raw.items() if item is not None)
    same = known.template(name) if known is not None else None
    grammar = _TEMPLATE_NAME.fullmatch(name)
    if grammar is not None and grammar.group(3) and memory != int(grammar.group(3)) * 1024:
        says = f"the name {name} says {grammar.group(3)} GiB"
        reader.warn(f"{path}.memory", f"{memory} MiB, but {says}; check the figure")
    if aicpu is None and same is not None:
        aicpu = same.aicpu
    elif aicpu is None:
        if grammar is None:
            reader.fail(
                f"{path}.aiCPU",
                None,
                f"required: {name} is not a known template and its name does not read as "
                "vir<cores>[_<cpus>c][_<GB>g]",
            )
        aicpu = int(grammar.group(2) or 1)
        if aicpu < 1:
            reader.fail(f"{path}.name", name, "the name gives 0 AI CPUs; write aiCPU")
        reader.warn(f"{path}.aiCPU", f"not given; {aicpu} taken from the template name {name}")
    if media is None and same is not None:
        media = same.media
    elif media is None and grammar is not None and grammar.group(4) and chip_media is not None:
        none = grammar.group(4) in ("ndvpp", "nm")
        media = catalog.NO_MEDIA if none else chip_media
        amount = "no" if none else "all the chip's"
        reader.warn(
            f"{path}.media", f"not given; {amount} media engines, from the template name {name}"
        )
    elif media is not None and "media" in given and chip_media is None:
        reader.warn(f"{path}.media", "the chip has no media figures, so these are not enforced")
    return _Placed(catalog.Template(name, memory, aicore, aicpu, media), path, given)


def _check_fits(
    reader: _Reader,
    path: str,
    chip_given: frozenset[str],
    chip: dict[str, int],
    chip_media: catalog.Media | None,
    item: _Placed,
) -> None:
    """Fail when one template needs more of a budget than the whole chip has."""
    template = item.template
    needs = [
        ("memory", "memoryCapacity", template.memory_mib, chip["memory"], "MiB"),
        ("aiCore", "aiCore", template.aicore, chip["aiCore"], "AI cores"),
        ("aiCPU", "aiCPU", template.aicpu, chip["aiCPU"], "AI CPUs"),
    ]
    if template.media is not None and chip_media is not None:
        wanted, have = template.media.as_tuple(), chip_media.as_tuple()
        for engine, want, cap in zip(catalog.MEDIA_ENGINES, wanted, have, strict=True):
            needs.append((f"media.{engine}", f"media.{engine}", want, cap, f"{engine} engines"))
    for key, chip_key, want, cap, noun in needs:
        if want <= cap:
            continue
        root, chip_root = key.split(".")[0], chip_key.split(".")[0]
        blame_template = item.path is not None and (
            root in item.given or chip_root not in chip_given
        )
        problem = f"template {template.name} needs {want} {noun}, more than the chip's {cap}"
        if item.path is None:
            problem += " (the entry lists no templates, so the default ones are kept)"
        if blame_template:
            reader.fail(f"{item.path}.{key}", want, problem)
        reader.fail(f"{path}.{chip_key}", cap, problem)


def _check_resources(
    reader: _Reader, base: catalog.Catalog, models: list[catalog.ChipModel], paths: dict[str, str]
) -> None:
    """Each resource name belongs to one budget of one model, or lookups would be ambiguous."""
    owners: dict[str, tuple[str, str]] = {}
    replaced = {model.common_word for model in models}
    for model in (m for m in base if m.common_word not in replaced):
        for key, name in _resources(model):
            owners.setdefault(name, (model.common_word, key))
    for model in models:
        for key, name in _resources(model):
            owner = owners.get(name)
            if owner is not None:
                word, other = owner
                whose = (
                    f"this entry's {other}" if word == model.common_word else f"{other} of {word}"
                )
                reader.fail(f"{paths[model.common_word]}.{key}", name, f"already the {whose}")
            owners[name] = (model.common_word, key)


def _resources(model: catalog.ChipModel) -> tuple[tuple[str, str], ...]:
    return (
        ("resourceName", model.resource_name),
        ("resourceMemoryName", model.memory_resource),
        ("resourceCoreName", model.core_resource),
    )
