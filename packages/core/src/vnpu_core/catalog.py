"""Chip models and vNPU templates: what each Ascend chip has and what each template takes.

A chip has five budgets that a vNPU template consumes: a vNPU count, memory, AI cores, AI
CPUs and media engines. HAMi and Volcano account memory and a slot count only; vnpu
enforces all five, so template mixes the hardware refuses are never scheduled.

The built-in figures come from Huawei's template tables and HAMi's device config; where
they disagree the choice is documented in docs/catalog.md and every figure can be
overridden by the device-config file (``vnpu_core.deviceconfig``). The allocator, the
request parser, the device plugin's simulated backend and the exporter read this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

MEDIA_ENGINES = ("vpc", "vdec", "jpegd", "jpege", "venc", "pngd")


@dataclass(frozen=True, slots=True)
class Media:
    """Media (DVPP) engine counts: video pre-processing, video decode/encode, JPEG and PNG codecs."""

    vpc: int = 0
    vdec: int = 0
    jpegd: int = 0
    jpege: int = 0
    venc: int = 0
    pngd: int = 0

    def as_tuple(self) -> tuple[int, int, int, int, int, int]:
        return (self.vpc, self.vdec, self.jpegd, self.jpege, self.venc, self.pngd)


NO_MEDIA = Media()


@dataclass(frozen=True, slots=True)
class Template:
    """A hardware vNPU template such as ``vir02`` or ``vir05_1c_16g``.

    ``memory_mib`` is the nominal share the scheduler accounts (HAMi's figure); ``media``
    is None where the per-engine split is not published, and then it is not enforced.
    """

    name: str
    memory_mib: int
    aicore: int
    aicpu: int
    media: Media | None = None


@dataclass(frozen=True, slots=True)
class ChipModel:
    """One Ascend chip model with its budgets, resource names and templates.

    ``name`` is vnpu's model key (``310P3``, ``910B4-1``, ``910C-24``); ``chip_name`` is
    what DCMI reports; ``common_word`` names the Kubernetes resources and annotations.
    Templates are kept in rounding order: ascending memory, then definition order.
    """

    name: str
    chip_name: str
    common_word: str
    aicore: int
    aicpu: int
    memory_capacity_mib: int
    memory_allocatable_mib: int
    max_vnpus: int
    templates: tuple[Template, ...] = ()
    media: Media | None = None
    memory_factor: int = 1
    runtime_class: str = ""
    super_pod: bool = False
    server: str = (
        ""  # usual server kind (a topology.ServerKind value); "" lets the chip count decide
    )
    resource_name: str = ""
    memory_resource: str = ""
    core_resource: str = ""
    # Per template with media: how many of each engine may already be in use for it to fit.
    media_headroom: dict[str, tuple[int, ...]] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        headroom: dict[str, tuple[int, ...]] = {}
        if self.media is not None:
            caps = self.media.as_tuple()
            for template in self.templates:
                if template.media is not None and any(template.media.as_tuple()):
                    wants = template.media.as_tuple()
                    headroom[template.name] = tuple(c - w for c, w in zip(caps, wants, strict=True))
        object.__setattr__(self, "media_headroom", headroom)
        if not self.resource_name:
            object.__setattr__(self, "resource_name", f"huawei.com/{self.common_word}")
        if not self.memory_resource:
            object.__setattr__(self, "memory_resource", f"{self.resource_name}-memory")
        if not self.core_resource:
            object.__setattr__(self, "core_resource", f"{self.resource_name}-core")
        ordered = sorted(self.templates, key=lambda t: t.memory_mib)
        object.__setattr__(self, "templates", tuple(ordered))

    @property
    def split_count(self) -> int:
        """vNPU slots per chip as HAMi's plugin advertises them (kubelet device ids per chip).

        HAMi derives it from the smallest template's memory; vnpu also caps it at the
        hardware's vNPU limit, which gives the same figure for every built-in model.
        """
        if not self.templates:
            return 1
        by_memory = self.memory_allocatable_mib // self.templates[0].memory_mib
        return max(1, min(self.max_vnpus, by_memory))

    def template(self, name: str) -> Template | None:
        for candidate in self.templates:
            if candidate.name == name:
                return candidate
        return None


@dataclass(frozen=True)
class Catalog:
    """The chip models a cluster knows, looked up by common word, chip name or resource name."""

    models: tuple[ChipModel, ...]
    soft_mode_default: bool = False
    _by_word: dict[str, ChipModel] = field(init=False, repr=False, compare=False)
    _by_resource: dict[str, ChipModel] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_word", {m.common_word: m for m in self.models})
        by_resource: dict[str, ChipModel] = {}
        for model in self.models:
            by_resource[model.resource_name] = model
            by_resource[model.memory_resource] = model
            by_resource[model.core_resource] = model
        object.__setattr__(self, "_by_resource", by_resource)

    def __iter__(self) -> Iterator[ChipModel]:
        return iter(self.models)

    def by_common_word(self, common_word: str) -> ChipModel | None:
        return self._by_word.get(common_word)

    def by_resource(self, resource: str) -> ChipModel | None:
        """The model whose count, ``-memory`` or ``-core`` resource is ``resource``."""
        return self._by_resource.get(resource)

    def by_chip_name(self, chip_name: str, aicore: int | None = None) -> ChipModel | None:
        """The model DCMI reports as ``chip_name``; ``aicore`` tells apart dies that share a name."""
        matches = [m for m in self.models if chip_name in (m.chip_name, m.name)]
        if aicore is not None and len(matches) > 1:
            matches = [m for m in matches if m.aicore == aicore] or matches
        return matches[0] if matches else None

    def replace(
        self, models: Iterable[ChipModel], soft_mode_default: bool | None = None
    ) -> Catalog:
        """A catalog where ``models`` replace the built-in entries with the same common word."""
        merged = {m.common_word: m for m in self.models}
        for model in models:
            merged[model.common_word] = model
        soft = self.soft_mode_default if soft_mode_default is None else soft_mode_default
        return Catalog(tuple(merged.values()), soft)


def _t(name: str, memory: int, aicore: int, aicpu: int, media: Media | None = None) -> Template:
    return Template(name, memory, aicore, aicpu, media)


_310P_MEDIA = Media(vpc=12, vdec=12, jpegd=16, jpege=8, venc=3)
_910B_SMALL = (
    _t("vir03_1c_8g", 8192, 3, 1),
    _t("vir06_1c_16g", 16384, 6, 1),
    _t("vir12_3c_32g", 32768, 12, 3),
)
_910B_20CORE_64G = (_t("vir05_1c_16g", 16384, 5, 1), _t("vir10_3c_32g", 32768, 10, 3))

BUILTIN_MODELS: tuple[ChipModel, ...] = (
    ChipModel(
        name="310P3",
        chip_name="310P3",
        common_word="Ascend310P",
        aicore=8,
        aicpu=7,
        memory_capacity_mib=24576,
        memory_allocatable_mib=21527,
        max_vnpus=7,
        media=_310P_MEDIA,
        templates=(
            _t("vir01", 3072, 1, 1, Media(vpc=1, vdec=1, jpegd=2, jpege=1, venc=0)),
            _t("vir02", 6144, 2, 2, Media(vpc=3, vdec=3, jpegd=4, jpege=2, venc=1)),
            _t("vir02_1c", 6144, 2, 1, Media(vpc=3, vdec=3, jpegd=4, jpege=2, venc=0)),
            _t("vir04", 12288, 4, 4, Media(vpc=6, vdec=6, jpegd=8, jpege=4, venc=2)),
            _t("vir04_3c", 12288, 4, 3, Media(vpc=6, vdec=6, jpegd=8, jpege=4, venc=1)),
        ),
    ),
    ChipModel(
        name="910A",
        chip_name="910A",
        common_word="Ascend910A",
        aicore=30,
        aicpu=16,
        memory_capacity_mib=32768,
        memory_allocatable_mib=32768,
        max_vnpus=15,
        templates=(
            _t("vir02", 2184, 2, 1),
            _t("vir04", 4369, 4, 1),
            _t("vir08", 8738, 8, 3),
            _t("vir16", 17476, 16, 7),
        ),
    ),
    ChipModel("910B1", "910B1", "Ascend910B1", 25, 6, 65536, 65536, 16, _910B_SMALL),
    ChipModel("910B2", "910B2", "Ascend910B2", 24, 6, 65536, 65536, 16, _910B_SMALL),
    ChipModel("910B3", "910B3", "Ascend910B3", 20, 6, 65536, 65536, 16, _910B_20CORE_64G),
    ChipModel(
        "910B4",
        "910B4",
        "Ascend910B4",
        20,
        6,
        32768,
        32768,
        16,
        (_t("vir05_1c_8g", 8192, 5, 1), _t("vir10_3c_16g", 16384, 10, 3)),
    ),
    ChipModel("910B4-1", "910B4-1", "Ascend910B4-1", 20, 6, 65536, 65536, 16, _910B_20CORE_64G),
    ChipModel(
        "910C",
        "Ascend910",
        "Ascend910C",
        20,
        6,
        65536,
        65536,
        16,
        _910B_20CORE_64G,
    ),
    ChipModel(
        "910C-24",
        "Ascend910",
        "Ascend910C-24",
        24,
        6,
        65536,
        65536,
        16,
        (_t("vir06_1c_16g", 16384, 6, 1), _t("vir12_3c_32g", 32768, 12, 3)),
    ),
)

BUILTIN = Catalog(BUILTIN_MODELS)
