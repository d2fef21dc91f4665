"""Device-config loading: HAMi's and Volcano's shapes, every error with its path, warnings, merges."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from vnpu_core import catalog, deviceconfig, errors

# What HAMi's chart renders into the hami-scheduler-device ConfigMap: the seven Ascend entries
# with the figures of its reference tables, next to other vendors' sections. 910A has no aiCPU
# anywhere; 910B4-1 carries the 910B4 templates (8 / 16 GB) on the 64 GB part.
HAMI_CHART = """\
nvidia:
  resourceCountName: nvidia.com/gpu
  resourceMemoryName: nvidia.com/gpumem
  resourceCoreName: nvidia.com/gpucores
  defaultMemory: 0
  deviceSplitCount: 10
cambricon:
  resourceCountName: cambricon.com/vmlu
hygon:
  resourceCountName: hygon.com/dcunum
iluvatars:
- chipName: MR-V100
  commonWord: MR-V100
vnpus:
  hamiVnpuCore: false
  configs:
  - chipName: 910A
    commonWord: Ascend910A
    resourceName: huawei.com/Ascend910A
    resourceMemoryName: huawei.com/Ascend910A-memory
    resourceCoreName: huawei.com/Ascend910A-core
    memoryAllocatable: 32768
    memoryCapacity: 32768
    memoryFactor: 1
    aiCore: 30
    runtimeClassName: ""
    overwriteEnv: false
    templates:
      - {name: vir02, memory: 2184, aiCore: 2}
      - {name: vir04, memory: 4369, aiCore: 4}
      - {name: vir08, memory: 8738, aiCore: 8}
      - {name: vir16, memory: 17476, aiCore: 16}
  - chipName: 910B2
    commonWord: Ascend910B2
    resourceName: huawei.com/Ascend910B2
    resourceMemoryName: huawei.com/Ascend910B2-memory
    resourceCoreName: huawei.com/Ascend910B2-core
    memoryAllocatable: 65536
    memoryCapacity: 65536
    memoryFactor: 1
    aiCore: 24
    aiCPU: 6
    runtimeClassName: ""
    overwriteEnv: false
    templates:
      - {name: vir03_1c_8g, memory: 8192, aiCore: 3, aiCPU: 1}
      - {name: vir06_1c_16g, memory: 16384, aiCore: 6, aiCPU: 1}
      - {name: vir12_3c_32g, memory: 32768, aiCore: 12, aiCPU: 3}
  - chipName: 910B3
    commonWord: Ascend910B3
    resourceName: huawei.com/Ascend910B3
    resourceMemoryName: huawei.com/Ascend910B3-memory
    resourceCoreName: huawei.com/Ascend910B3-core
    memoryAllocatable: 65536
    memoryCapacity: 65536
    memoryFactor: 1
    aiCore: 20
    aiCPU: 7
    runtimeClassName: ""
    overwriteEnv: false
    templates:
      - {name: vir05_1c_16g, memory: 16384, aiCore: 5, aiCPU: 1}
      - {name: vir10_3c_32g, memory: 32768, aiCore: 10, aiCPU: 3}
  - chipName: 910B4-1
    commonWord: Ascend910B4-1
    resourceName: huawei.com/Ascend910B4-1
    resourceMemoryName: huawei.com/Ascend910B4-1-memory
    resourceCoreName: huawei.com/Ascend910B4-1-core
    memoryAllocatable: 65536
    memoryCapacity: 65536
    memoryFactor: 1
    aiCore: 20
    aiCPU: 7
    runtimeClassName: ""
    overwriteEnv: false
    templates:
      - {name: vir05_1c_8g, memory: 8192, aiCore: 5, aiCPU: 1}
      - {name: vir10_3c_16g, memory: 16384, aiCore: 10, aiCPU: 3}
  - chipName: 910B4
    commonWord: Ascend910B4
    resourceName: huawei.com/Ascend910B4
    resourceMemoryName: huawei.com/Ascend910B4-memory
    resourceCoreName: huawei.com/Ascend910B4-core
    memoryAllocatable: 32768
    memoryCapacity: 32768
    memoryFactor: 1
    aiCore: 20
    aiCPU: 7
    runtimeClassName: ""
    overwriteEnv: false
    templates:
      - {name: vir05_1c_8g, memory: 8192, aiCore: 5, aiCPU: 1}
      - {name: vir10_3c_16g, memory: 16384, aiCore: 10, aiCPU: 3}
  - chipName: 310P3
    commonWord: Ascend310P
    resourceName: huawei.com/Ascend310P
    resourceMemoryName: huawei.com/Ascend310P-memory
    resourceCoreName: huawei.com/Ascend310P-core
    memoryAllocatable: 21527
    memoryCapacity: 24576
    memoryFactor: 1
    aiCore: 8
    aiCPU: 7
    runtimeClassName: ""
    overwriteEnv: false
    templates:
      - {name: vir01, memory: 3072, aiCore: 1, aiCPU: 1}
      - {name: vir02, memory: 6144, aiCore: 2, aiCPU: 2}
      - {name: vir04, memory: 12288, aiCore: 4, aiCPU: 4}
  - chipName: Ascend910
    commonWord: Ascend910C
    resourceName: huawei.com/Ascend910C
    resourceMemoryName: huawei.com/Ascend910C-memory
    resourceCoreName: huawei.com/Ascend910C-core
    memoryAllocatable: 65536
    memoryCapacity: 65536
    aiCore: 20
    aiCPU: 7
    runtimeClassName: ""
    overwriteEnv: false
    superPod: true
    templates:
      - {name: vir05_1c_16g, memory: 16384, aiCore: 5, aiCPU: 1}
      - {name: vir10_3c_32g, memory: 32768, aiCore: 10, aiCPU: 3}
"""

# Volcano's built-in geometry when the ConfigMap is missing: one 310P entry, legacy bare list,
# templates without aiCPU.
VOLCANO_DEFAULT = """\
vnpus:
- chipName: 310P3
  commonWord: Ascend310P
  resourceName: huawei.com/Ascend310P
  resourceMemoryName: huawei.com/Ascend310P-memory
  memoryAllocatable: 21527
  memoryCapacity: 24576
  aiCore: 8
  aiCPU: 7
  templates:
  - name: vir01
    memory: 3072
    aiCore: 1
  - name: vir02
    memory: 6144
    aiCore: 2
  - name: vir04
    memory: 12288
    aiCore: 4
"""


def _model(loaded: deviceconfig.LoadedConfig, word: str) -> catalog.ChipModel:
    model = loaded.catalog.by_common_word(word)
    assert model is not None, word
    return model


def _builtin(word: str) -> catalog.ChipModel:
    model = catalog.BUILTIN.by_common_word(word)
    assert model is not None, word
    return model


class _WrittenOut(yaml.SafeDumper):
    """Writes a value given twice out twice: the loader refuses anchors and aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _doc(*entries: dict[str, Any], legacy: bool = False, **wrapper: Any) -> str:
    vnpus: Any = list(entries) if legacy else {**wrapper, "configs": list(entries)}
    return yaml.dump({"vnpus": vnpus}, Dumper=_WrittenOut, sort_keys=False)


def _media(media: catalog.Media) -> dict[str, int]:
    return dict(zip(catalog.MEDIA_ENGINES, media.as_tuple(), strict=True))


def _render(model: catalog.ChipModel, vnpu_keys: bool) -> dict[str, Any]:
    """A device-config entry repeating every figure of ``model``."""
    entry: dict[str, Any] = {
        "chipName": model.chip_name,
        "commonWord": model.common_word,
        "resourceName": model.resource_name,
        "resourceMemoryName": model.memory_resource,
        "resourceCoreName": model.core_resource,
        "memoryAllocatable": model.memory_allocatable_mib,
        "memoryCapacity": model.memory_capacity_mib,
        "memoryFactor": model.memory_factor,
        "aiCore": model.aicore,
        "aiCPU": model.aicpu,
        "runtimeClassName": model.runtime_class,
        "overwriteEnv": False,
        "superPod": model.super_pod,
        "templates": [],
    }
    for template in model.templates:
        shown: dict[str, Any] = {
            "name": template.name,
            "memory": template.memory_mib,
            "aiCore": template.aicore,
            "aiCPU": template.aicpu,
        }
        if vnpu_keys and template.media is not None:
            shown["media"] = _media(template.media)
        entry["templates"].append(shown)
    if vnpu_keys:
        entry.update(name=model.name, vnpuLimit=model.max_vnpus, server=model.server)
        if model.media is not None:
            entry["media"] = _media(model.media)
    return entry


# -- HAMi's, Volcano's and the legacy shapes ------------------------------------------------


# What the chart's entries must become: figures from the file, gaps from the built-in models.
# fmt: off
HAMI_EXPECTED = [
    # commonWord, chipName, aiCore, aiCPU, allocatable, capacity, templates, split count
    ("Ascend910A", "910A", 30, 16, 32768, 32768,  # aiCPU: the chart has none, the built-in 16 stays
     [("vir02", 2184, 2, 1), ("vir04", 4369, 4, 1), ("vir08", 8738, 8, 3), ("vir16", 17476, 16, 7)], 15),
    ("Ascend910B2", "910B2", 24, 6, 65536, 65536,
     [("vir03_1c_8g", 8192, 3, 1), ("vir06_1c_16g", 16384, 6, 1), ("vir12_3c_32g", 32768, 12, 3)], 8),
    ("Ascend910B3", "910B3", 20, 7, 65536, 65536,
     [("vir05_1c_16g", 16384, 5, 1), ("vir10_3c_32g", 32768, 10, 3)], 4),
    ("Ascend910B4-1", "910B4-1", 20, 7, 65536, 65536,
     [("vir05_1c_8g", 8192, 5, 1), ("vir10_3c_16g", 16384, 10, 3)], 8),
    ("Ascend910B4", "910B4", 20, 7, 32768, 32768,
     [("vir05_1c_8g", 8192, 5, 1), ("vir10_3c_16g", 16384, 10, 3)], 4),
    ("Ascend310P", "310P3", 8, 7, 21527, 24576,
     [("vir01", 3072, 1, 1), ("vir02", 6144, 2, 2), ("vir04", 12288, 4, 4)], 7),
    ("Ascend910C", "Ascend910", 20, 7, 65536, 65536,
     [("vir05_1c_16g", 16384, 5, 1), ("vir10_3c_32g", 32768, 10, 3)], 4),
]
# fmt: on


@pytest.mark.parametrize(
    ("word", "chip_name", "aicore", "aicpu", "allocatable", "capacity", "templates", "split"),
    HAMI_EXPECTED,
    ids=[row[0] for row in HAMI_EXPECTED],
)
def test_hami_chart_configmap_loads_every_entry(
    word: str,
    chip_name: str,
    aicore: int,
    aicpu: int,
    allocatable: int,
    capacity: int,
    templates: list[tuple[str, int, int, int]],
    split: int,
) -> None:
    loaded = deviceconfig.load(HAMI_CHART, source="device-config.yaml")
    model = _model(loaded, word)
    assert (model.chip_name, model.aicore, model.aicpu) == (chip_name, aicore, aicpu)
    assert (model.memory_allocatable_mib, model.memory_capacity_mib) == (allocatable, capacity)
    assert [(t.name, t.memory_mib, t.aicore, t.aicpu) for t in model.templates] == templates
    assert model.split_count == split
    assert model.resource_name == f"huawei.com/{word}"
    assert model.memory_resource == f"huawei.com/{word}-memory"
    assert model.core_resource == f"huawei.com/{word}-core"
    assert model.super_pod is (word == "Ascend910C")
    # vnpu's own figures the chart does not carry stay the built-in ones.
    assert model.max_vnpus == _builtin(word).max_vnpus
    assert model.name == _builtin(word).name


def test_hami_chart_is_quiet_and_keeps_models_it_does_not_list() -> None:
    loaded = deviceconfig.load(HAMI_CHART, source="device-config.yaml")
    assert loaded.warnings == ()  # nvidia, cambricon, hygon and iluvatars belong to HAMi
    assert loaded.catalog.soft_mode_default is False
    assert _model(loaded, "Ascend910B1") is _builtin("Ascend910B1")
    assert _model(loaded, "Ascend910C-24") is _builtin("Ascend910C-24")
    assert len(loaded.catalog.models) == len(catalog.BUILTIN.models)
    p310 = _model(loaded, "Ascend310P")
    # The chart lists three 310P templates: they replace the five built-in ones, and take
    # their media split from the built-in templates of the same name.
    assert [t.name for t in p310.templates] == ["vir01", "vir02", "vir04"]
    base = _builtin("Ascend310P")
    for template in p310.templates:
        same = base.template(template.name)
        assert same is not None
        assert template.media == same.media
    assert p310.media == base.media


def test_volcano_default_310p_entry_takes_aicpu_and_media_from_the_builtin_templates() -> None:
    loaded = deviceconfig.load(VOLCANO_DEFAULT)
    assert loaded.warnings == ()
    model = _model(loaded, "Ascend310P")
    assert [(t.name, t.memory_mib, t.aicore, t.aicpu) for t in model.templates] == [
        ("vir01", 3072, 1, 1),
        ("vir02", 6144, 2, 2),
        ("vir04", 12288, 4, 4),
    ]
    assert model.core_resource == "huawei.com/Ascend310P-core"  # Volcano derives it too
    assert model.split_count == 7
    assert model.templates[1].media == catalog.Media(vpc=3, vdec=3, jpegd=4, jpege=2, venc=1)


def test_legacy_bare_list_reads_like_the_wrapper() -> None:
    entries = [_render(_builtin(w), vnpu_keys=False) for w in ("Ascend910B3", "Ascend310P")]
    entries[0]["aiCPU"] = 7
    wrapped = deviceconfig.load(_doc(*entries, hamiVnpuCore=False))
    legacy = deviceconfig.load(_doc(*entries, legacy=True))
    assert legacy.catalog == wrapped.catalog
    assert legacy.warnings == wrapped.warnings == ()
    assert _model(legacy, "Ascend910B3").aicpu == 7


def test_hami_vnpu_core_sets_the_soft_mode_default_and_the_legacy_list_keeps_the_base_one() -> None:
    entry = _render(_builtin("Ascend910B3"), vnpu_keys=False)
    assert deviceconfig.load(_doc(entry, hamiVnpuCore=True)).catalog.soft_mode_default is True
    assert deviceconfig.load(_doc(entry)).catalog.soft_mode_default is False
    soft_base = catalog.Catalog(catalog.BUILTIN_MODELS, soft_mode_default=True)
    legacy = deviceconfig.load(_doc(entry, legacy=True), base=soft_base)
    assert legacy.catalog.soft_mode_default is True
    off = deviceconfig.load(_doc(entry, hamiVnpuCore=False), base=soft_base)
    assert off.catalog.soft_mode_default is False
    only_soft = deviceconfig.load("vnpus: {hamiVnpuCore: true}\n")
    assert only_soft.catalog.soft_mode_default is True
    assert only_soft.catalog.models == catalog.BUILTIN.models


# -- round trip -----------------------------------------------------------------------------


@pytest.mark.parametrize("vnpu_keys", [True, False], ids=["with-vnpu-keys", "hami-keys-only"])
@pytest.mark.parametrize("legacy", [False, True], ids=["configs", "legacy-list"])
def test_a_file_repeating_the_builtin_figures_gives_back_the_builtin_catalog(
    vnpu_keys: bool, legacy: bool
) -> None:
    text = _doc(*(_render(m, vnpu_keys) for m in catalog.BUILTIN), legacy=legacy)
    loaded = deviceconfig.load(text, source="device-config.yaml")
    assert loaded.warnings == ()
    assert loaded.catalog == catalog.BUILTIN
    for ours, builtin in zip(loaded.catalog, catalog.BUILTIN, strict=True):
        assert ours == builtin
        assert ours.split_count == builtin.split_count


def test_a_new_model_written_out_in_full_reads_back_identically() -> None:
    model = catalog.ChipModel(
        name="910B5",
        chip_name="910B5",
        common_word="Ascend910B5",
        aicore=30,
        aicpu=8,
        memory_capacity_mib=98304,
        memory_allocatable_mib=96000,
        max_vnpus=12,
        templates=(
            catalog.Template("vir05_1c_16g", 16384, 5, 1, catalog.Media(vpc=1)),
            catalog.Template("vir10_2c_32g", 32768, 10, 2, catalog.NO_MEDIA),
        ),
        media=catalog.Media(vpc=4, vdec=4, jpegd=4, jpege=4, venc=2, pngd=1),
        memory_factor=2,
        runtime_class="ascend",
        super_pod=False,
        server="910b-8",
        resource_name="example.com/b5",
    )
    loaded = deviceconfig.load(_doc(_render(model, vnpu_keys=True)))
    assert loaded.warnings == ()
    assert _model(loaded, "Ascend910B5") == model
    assert loaded.catalog.by_resource("example.com/b5-memory") == model


# -- merge rules ----------------------------------------------------------------------------


def test_an_entry_overrides_only_what_it_gives() -> None:
    loaded = deviceconfig.load(_doc({"commonWord": "Ascend910B3", "aiCPU": 7, "vnpuLimit": 8}))
    base = _builtin("Ascend910B3")
    model = _model(loaded, "Ascend910B3")
    assert (model.aicpu, model.max_vnpus) == (7, 8)
    assert model.templates == base.templates
    assert (model.aicore, model.memory_capacity_mib, model.chip_name) == (20, 65536, "910B3")
    assert model.resource_name == base.resource_name


def test_file_templates_replace_the_list_and_fill_gaps_from_same_named_builtins() -> None:
    loaded = deviceconfig.load(
        _doc(
            {
                "commonWord": "Ascend310P",
                "templates": [
                    {"name": "vir04", "memory": 12000, "aiCore": 4},
                    {"name": "vir02_1c", "memory": 6144, "aiCore": 2, "aiCPU": 2},
                    {"name": "vir01", "memory": 3072, "aiCore": 1, "media": {"vpc": 2}},
                ],
            }
        )
    )
    assert loaded.warnings == ()
    model = _model(loaded, "Ascend310P")
    base = _builtin("Ascend310P")
    assert [t.name for t in model.templates] == ["vir01", "vir02_1c", "vir04"]  # by memory
    vir01, vir02_1c, vir04 = model.templates
    assert vir04.memory_mib == 12000
    assert (vir04.aicpu, vir04.media) == (4, base.templates[3].media)  # from the built-in vir04
    assert vir02_1c.aicpu == 2  # the file's figure wins over the built-in 1
    assert vir01.media == catalog.Media(vpc=2)  # missing engines count as 0
    assert model.max_vnpus == base.max_vnpus


@pytest.mark.parametrize(
    ("name", "aicpu", "media", "warnings"),
    [
        ("vir04_3c_ndvpp", 3, catalog.NO_MEDIA, 2),
        ("vir04_4c_dvpp", 4, catalog.Media(vpc=12, vdec=12, jpegd=16, jpege=8, venc=3), 2),
        ("vir02", 2, None, 0),  # the built-in vir02: nothing read from the name
        ("vir03", 1, None, 1),  # no _<cpus>c: one AI CPU
        ("vir02_2c_6g", 2, None, 1),
    ],
)
def test_unknown_template_without_aicpu_reads_the_name_grammar(
    name: str, aicpu: int, media: catalog.Media | None, warnings: int
) -> None:
    half = name.startswith("vir04")
    template = {"name": name, "memory": 12288 if half else 6144, "aiCore": 4 if half else 2}
    loaded = deviceconfig.load(
        _doc({"commonWord": "Ascend310P", "templates": [template]}), source="cm.yaml"
    )
    (got,) = _model(loaded, "Ascend310P").templates
    assert got.aicpu == aicpu
    if name != "vir02":
        assert got.media == media
    assert len(loaded.warnings) == warnings
    if warnings:
        assert loaded.warnings[0] == (
            f"cm.yaml: vnpus.configs[0].templates[0].aiCPU: not given; {aicpu} taken from "
            f"the template name {name}"
        )


def test_new_model_gets_derived_names_limit_and_defaults() -> None:
    entry = {
        "chipName": "910X",
        "commonWord": "Ascend910X",
        "memoryAllocatable": 60000,
        "memoryCapacity": 65536,
        "aiCore": 24,
        "aiCPU": 6,
        "templates": [
            {"name": "vir12_3c_32g", "memory": 32768, "aiCore": 12, "aiCPU": 3},
            {"name": "vir06_1c_16g", "memory": 16384, "aiCore": 6, "aiCPU": 1},
        ],
    }
    loaded = deviceconfig.load(_doc(entry))
    model = _model(loaded, "Ascend910X")
    assert model.name == "910X"
    assert (model.resource_name, model.memory_resource, model.core_resource) == (
        "huawei.com/Ascend910X",
        "huawei.com/Ascend910X-memory",
        "huawei.com/Ascend910X-core",
    )
    assert model.max_vnpus == 65536 // 16384
    assert [t.name for t in model.templates] == ["vir06_1c_16g", "vir12_3c_32g"]
    assert (model.media, model.memory_factor, model.server, model.super_pod) == (None, 1, "", False)
    assert loaded.catalog.models[: len(catalog.BUILTIN.models)] == catalog.BUILTIN.models
    bare = deviceconfig.load(_doc({**entry, "templates": []}))
    assert _model(bare, "Ascend910X").max_vnpus == 1


def test_resource_name_override_derives_the_memory_and_core_names() -> None:
    loaded = deviceconfig.load(
        _doc({"commonWord": "Ascend910B3", "resourceName": "example.com/b3", "chipName": 910})
    )
    model = _model(loaded, "Ascend910B3")
    assert (model.memory_resource, model.core_resource) == (
        "example.com/b3-memory",
        "example.com/b3-core",
    )
    assert model.chip_name == "910"  # a bare number is read as written, as Go's YAML does
    assert loaded.catalog.by_resource("huawei.com/Ascend910B3") is None
    assert loaded.catalog.by_resource("example.com/b3-core") == model


def test_vnpu_keys_are_carried_and_a_custom_base_is_honoured() -> None:
    base = catalog.Catalog((_builtin("Ascend310P"),))
    loaded = deviceconfig.load(
        _doc(
            {
                "commonWord": "Ascend310P",
                "name": "310P-duo",
                "server": "300i-duo",
                "vnpuLimit": 6,
                "media": {"vpc": 10, "vdec": 10, "jpegd": 16, "jpege": 8, "venc": 3},
            }
        ),
        base=base,
    )
    (model,) = loaded.catalog.models
    assert (model.name, model.server, model.max_vnpus) == ("310P-duo", "300i-duo", 6)
    assert model.media == catalog.Media(vpc=10, vdec=10, jpegd=16, jpege=8, venc=3)


def test_the_documented_full_example_loads_as_the_page_says() -> None:
    page = (Path(__file__).parents[3] / "docs" / "device-config.md").read_text(encoding="utf-8")
    example = page.split("## Full example", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    loaded = deviceconfig.load(example, source="device-config.yaml")
    assert loaded.warnings == ()
    assert loaded.catalog.soft_mode_default is False
    assert _model(loaded, "Ascend910B3").aicpu == 7
    p310 = _model(loaded, "Ascend310P")
    assert len(p310.templates) == 5
    for template in p310.templates[:3]:
        assert template == _builtin("Ascend310P").template(template.name)
    b5 = _model(loaded, "Ascend910B5")
    assert (b5.name, b5.memory_resource, b5.max_vnpus) == (
        "910B5",
        "huawei.com/Ascend910B5-memory",
        8,
    )
    mentioned = {"Ascend910B3", "Ascend310P", "Ascend910B5"}
    for model in catalog.BUILTIN:
        if model.common_word not in mentioned:
            assert _model(loaded, model.common_word) is model


# -- warnings ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ["cm: (document): empty; the default chip models are used unchanged"]),
        ("# nothing yet\n", ["cm: (document): empty; the default chip models are used unchanged"]),
        (
            "nvidia: {deviceSplitCount: 10}\n",
            ["cm: (document): no vnpus key; the default chip models are used unchanged"],
        ),
        (
            "vnpus:\n",
            ["cm: (document): no vnpus key; the default chip models are used unchanged"],
        ),
        (
            "vnpus: []\n",
            ["cm: vnpus: no chip models listed; the default chip models are used unchanged"],
        ),
        (
            "vnpus: {hamiVnpuCore: false}\n",
            [
                "cm: vnpus.configs: no chip models listed; the default chip models are used unchanged"
            ],
        ),
    ],
)
def test_nothing_to_load_gives_the_base_catalog_and_says_so(text: str, expected: list[str]) -> None:
    loaded = deviceconfig.load(text, source="cm")
    assert loaded.catalog is catalog.BUILTIN
    assert list(loaded.warnings) == expected


def test_unknown_keys_are_warned_about_with_their_path_and_ignored() -> None:
    text = textwrap.dedent(
        """\
        nvidia: {}
        metax: {}
        foo: 1
        vnpus:
          hamiVnpuCore: false
          extra: 1
          configs:
          - commonWord: Ascend910B3
            aiCores: 20
            templates:
            - {name: vir05_1c_16g, memory: 16384, aiCore: 5, aiCPU: 1, mem: 3}
        """
    )
    loaded = deviceconfig.load(text)
    assert loaded.warnings == (
        "foo: unknown top-level key, ignored",
        "vnpus.extra: unknown key, ignored",
        "vnpus.configs[0].aiCores: unknown key, ignored",
        "vnpus.configs[0].templates[0].mem: unknown key, ignored",
    )
    assert _model(loaded, "Ascend910B3").aicore == 20


def test_template_media_on_a_chip_without_media_figures_is_flagged() -> None:
    loaded = deviceconfig.load(
        _doc(
            {
                "commonWord": "Ascend910B3",
                "templates": [
                    {"name": "vir05_1c_16g", "memory": 16384, "aiCore": 5, "media": {"vpc": 1}}
                ],
            }
        )
    )
    assert loaded.warnings == (
        "vnpus.configs[0].templates[0].media: the chip has no media figures, so these are not enforced",
    )


def test_a_template_whose_memory_disagrees_with_its_name_is_flagged() -> None:
    # HAMi's chart once gave the 64 GB 910B4-1 the 910B4's 8 / 16 GB figures under the 16 / 32 GB
    # names; the figure is used as written, and the mismatch is pointed out.
    loaded = deviceconfig.load(
        _doc(
            {
                "commonWord": "Ascend910B4-1",
                "templates": [
                    {"name": "vir05_1c_16g", "memory": 8192, "aiCore": 5, "aiCPU": 1},
                    {"name": "vir10_3c_32g", "memory": 32768, "aiCore": 10, "aiCPU": 3},
                ],
            }
        )
    )
    assert loaded.warnings == (
        "vnpus.configs[0].templates[0].memory: 8192 MiB, but the name vir05_1c_16g says 16 GiB; "
        "check the figure",
    )
    assert _model(loaded, "Ascend910B4-1").templates[0].memory_mib == 8192


# -- errors -------------------------------------------------------------------------------

B3 = {"commonWord": "Ascend910B3"}
B3_TEMPLATE = {"name": "vir05_1c_16g", "memory": 16384, "aiCore": 5, "aiCPU": 1}
NEW = {
    "chipName": "910X",
    "commonWord": "Ascend910X",
    "memoryAllocatable": 32768,
    "memoryCapacity": 32768,
    "aiCore": 20,
    "aiCPU": 6,
}


def _t(**changes: Any) -> dict[str, Any]:
    return {**B3_TEMPLATE, **changes}


def _without(entry: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k != key}


# fmt: off
ERROR_CASES: list[tuple[str, str, str, object, str]] = [
    # (id, document, path, value, words in the problem)
    ("memory-quantity", _doc({**B3, "templates": [_t(memory="8G")]}), "vnpus.configs[0].templates[0].memory", "8G", "whole number of MiB"),
    ("memory-float", _doc({**B3, "templates": [_t(memory=8.5)]}), "vnpus.configs[0].templates[0].memory", 8.5, "whole number"),
    ("memory-bool", _doc({**B3, "templates": [_t(memory=True)]}), "vnpus.configs[0].templates[0].memory", True, "whole number"),
    ("memory-quoted-int", _doc({**B3, "memoryCapacity": "65536"}), "vnpus.configs[0].memoryCapacity", "65536", "whole number"),
    ("aicore-zero", _doc({**B3, "aiCore": 0}), "vnpus.configs[0].aiCore", 0, "at least 1"),
    ("allocatable-negative", _doc({**B3, "memoryAllocatable": -1}), "vnpus.configs[0].memoryAllocatable", -1, "at least 1"),
    ("template-aicpu-zero", _doc({**B3, "templates": [_t(aiCPU=0)]}), "vnpus.configs[0].templates[0].aiCPU", 0, "at least 1"),
    ("limit-zero", _doc({**B3, "vnpuLimit": 0}), "vnpus.configs[0].vnpuLimit", 0, "at least 1"),
    ("factor-over-int32", _doc({**B3, "memoryFactor": 2**31}), "vnpus.configs[0].memoryFactor", 2**31, "at most 2147483647"),
    ("allocatable-over-capacity", _doc({**B3, "memoryAllocatable": 70000}), "vnpus.configs[0].memoryAllocatable", 70000, "exceeds memoryCapacity 65536"),
    ("capacity-under-allocatable", _doc({**B3, "memoryCapacity": 30000}), "vnpus.configs[0].memoryCapacity", 30000, "memoryAllocatable 65536 exceeds"),
    ("template-memory-over-capacity", _doc({**B3, "templates": [B3_TEMPLATE, _t(name="vir10_3c_32g", memory=70000)]}), "vnpus.configs[0].templates[1].memory", 70000, "needs 70000 MiB"),
    ("template-aicore-over-chip", _doc({**B3, "templates": [_t(aiCore=21)]}), "vnpus.configs[0].templates[0].aiCore", 21, "needs 21 AI cores, more than the chip's 20"),
    ("template-aicpu-over-chip", _doc({**B3, "templates": [_t(aiCPU=7)]}), "vnpus.configs[0].templates[0].aiCPU", 7, "needs 7 AI CPUs, more than the chip's 6"),
    ("chip-aicore-under-kept-template", _doc({**B3, "aiCore": 8}), "vnpus.configs[0].aiCore", 8, "vir10_3c_32g needs 10 AI cores, more than the chip's 8 (the entry lists no templates"),
    ("aicpu-from-name-over-chip", _doc({**B3, "templates": [_t(name="vir05_8c", aiCPU=None)]}), "vnpus.configs[0].templates[0].aiCPU", 8, "needs 8 AI CPUs, more than the chip's 6"),
    ("chip-aicpu-under-inherited-aicpu", _doc({**B3, "aiCPU": 2, "templates": [_t(name="vir10_3c_32g", memory=32768, aiCore=10, aiCPU=None)]}), "vnpus.configs[0].aiCPU", 2, "needs 3 AI CPUs"),
    ("template-media-over-chip", _doc({"commonWord": "Ascend310P", "templates": [{"name": "vir04", "memory": 12288, "aiCore": 4, "media": {"vpc": 13}}]}), "vnpus.configs[0].templates[0].media.vpc", 13, "needs 13 vpc engines, more than the chip's 12"),
    ("chip-media-under-template", _doc({"commonWord": "Ascend310P", "media": {"vpc": 2, "vdec": 12, "jpegd": 16, "jpege": 8, "venc": 3}}), "vnpus.configs[0].media.vpc", 2, "template vir02 needs 3 vpc engines"),
    ("duplicate-template", _doc({**B3, "templates": [B3_TEMPLATE, B3_TEMPLATE]}), "vnpus.configs[0].templates[1].name", "vir05_1c_16g", "duplicate template name, also templates[0]"),
    ("duplicate-common-word", _doc(B3, {"commonWord": "Ascend310P"}, B3), "vnpus.configs[2].commonWord", "Ascend910B3", "also in vnpus.configs[0]"),
    ("missing-common-word", _doc({"aiCore": 20}), "vnpus.configs[0].commonWord", None, "required"),
    ("new-model-missing-aicpu", _doc(_without(NEW, "aiCPU")), "vnpus.configs[0].aiCPU", None, "Ascend910X is not a known chip model"),
    ("new-model-missing-chip-name", _doc(_without(NEW, "chipName")), "vnpus.configs[0].chipName", None, "required"),
    ("new-model-null-capacity", _doc({**NEW, "memoryCapacity": None}), "vnpus.configs[0].memoryCapacity", None, "required"),
    ("template-missing-memory", _doc({**B3, "templates": [_without(B3_TEMPLATE, "memory")]}), "vnpus.configs[0].templates[0].memory", None, "required"),
    ("template-missing-name", _doc({**B3, "templates": [_without(B3_TEMPLATE, "name")]}), "vnpus.configs[0].templates[0].name", None, "required"),
    ("template-missing-aicore", _doc({**B3, "templates": [_without(B3_TEMPLATE, "aiCore")]}), "vnpus.configs[0].templates[0].aiCore", None, "required"),
    ("template-unknown-name-no-aicpu", _doc({**B3, "templates": [_t(name="small", aiCPU=None)]}), "vnpus.configs[0].templates[0].aiCPU", None, "vir<cores>"),
    ("template-name-zero-cpus", _doc({**B3, "templates": [_t(name="vir02_0c", aiCPU=None)]}), "vnpus.configs[0].templates[0].name", "vir02_0c", "0 AI CPUs"),
    ("template-name-with-comma", _doc({**B3, "templates": [_t(name="vir05,x")]}), "vnpus.configs[0].templates[0].name", "vir05,x", "letters, digits"),
    ("resource-without-domain", _doc({**B3, "resourceName": "Ascend910B3"}), "vnpus.configs[0].resourceName", "Ascend910B3", "<domain>/<name>"),
    ("resource-empty-name", _doc({**B3, "resourceName": "huawei.com/"}), "vnpus.configs[0].resourceName", "huawei.com/", "<domain>/<name>"),
    ("memory-resource-bad", _doc({**B3, "resourceMemoryName": "huawei.com/a/b"}), "vnpus.configs[0].resourceMemoryName", "huawei.com/a/b", "<domain>/<name>"),
    ("resource-kubernetes-io", _doc({**B3, "resourceName": "kubernetes.io/npu"}), "vnpus.configs[0].resourceName", "kubernetes.io/npu", "reserved"),
    ("resource-taken-by-other-model", _doc({**B3, "resourceName": "huawei.com/Ascend910B4"}), "vnpus.configs[0].resourceName", "huawei.com/Ascend910B4", "resourceName of Ascend910B4"),
    ("resource-same-as-memory", _doc({**B3, "resourceCoreName": "huawei.com/Ascend910B3-memory"}), "vnpus.configs[0].resourceCoreName", "huawei.com/Ascend910B3-memory", "this entry's resourceMemoryName"),
    ("runtime-class-bad", _doc({**B3, "runtimeClassName": "Ascend_RT"}), "vnpus.configs[0].runtimeClassName", "Ascend_RT", "DNS subdomain"),
    ("common-word-space", _doc({"commonWord": "Ascend 910"}), "vnpus.configs[0].commonWord", "Ascend 910", "letters, digits"),
    ("common-word-too-long", _doc({**NEW, "commonWord": "A" * 44}), "vnpus.configs[0].commonWord", "A" * 44, "at most 43"),
    ("unknown-server", _doc({**B3, "server": "910x-8"}), "vnpus.configs[0].server", "910x-8", "910b-8"),
    ("unknown-media-engine", _doc({**B3, "media": {"dvpp": 1}}), "vnpus.configs[0].media.dvpp", "dvpp", "unknown media engine"),
    ("media-negative", _doc({**B3, "media": {"vpc": -1}}), "vnpus.configs[0].media.vpc", -1, "at least 0"),
    ("media-not-mapping", _doc({**B3, "media": [1, 2]}), "vnpus.configs[0].media", [1, 2], "mapping"),
    ("chip-name-list", _doc({**B3, "chipName": ["910B3"]}), "vnpus.configs[0].chipName", ["910B3"], "string"),
    ("super-pod-string", _doc({**B3, "superPod": "true"}), "vnpus.configs[0].superPod", "true", "true or false"),
    ("overwrite-env-int", _doc({**B3, "overwriteEnv": 1}), "vnpus.configs[0].overwriteEnv", 1, "true or false"),
    ("soft-default-string", _doc(B3, hamiVnpuCore="yes"), "vnpus.hamiVnpuCore", "yes", "true or false"),
    ("vnpus-scalar", "vnpus: 3\n", "vnpus", 3, "list of chip models"),
    ("configs-mapping", "vnpus: {configs: {commonWord: Ascend310P}}\n", "vnpus.configs", {"commonWord": "Ascend310P"}, "list"),
    ("entry-scalar", "vnpus: {configs: [Ascend310P]}\n", "vnpus.configs[0]", "Ascend310P", "mapping"),
    ("templates-mapping", _doc({**B3, "templates": B3_TEMPLATE}), "vnpus.configs[0].templates", B3_TEMPLATE, "list"),
    ("template-scalar", _doc({**B3, "templates": ["vir05_1c_16g"]}), "vnpus.configs[0].templates[0]", "vir05_1c_16g", "mapping"),
    ("legacy-path", _doc(B3, {**B3, "commonWord": "Ascend310P", "templates": [_t(memory="1G")]}, legacy=True), "vnpus[1].templates[0].memory", "1G", "whole number"),
    ("top-level-list", "- vnpus\n", "(document)", ["vnpus"], "mapping"),
    ("yaml-syntax", "vnpus:\n  configs:\n  - commonWord: [Ascend310P\n", "(document)", "", "YAML syntax error at line 4, column 1"),
    ("yaml-bad-indent", "vnpus:\n  configs:\n - commonWord: Ascend310P\n", "(document)", " - commonWord: Ascend310P", "line 3, column 2"),
    ("yaml-duplicate-key", "vnpus:\n  configs:\n  - commonWord: Ascend310P\n    aiCore: 8\n    aiCore: 4\n", "(document)", "    aiCore: 4", "line 5, column 5: key 'aiCore' is given twice"),
    ("yaml-control-character", "vnpus:\n  a: b\x07\n", "(document)", "  a: b\x07", "line 2, column 7: U+0007 is not allowed"),
    ("yaml-anchor", "vnpus: &v []\n", "(document)", "vnpus: &v []", "YAML anchor &v refused at line 1, column 8: anchors (&name) and aliases (*name) are not allowed"),
    ("yaml-too-deep", "vnpus: " + "[" * 3000 + "]" * 3000 + "\n", "(document)", "vnpus: " + "[" * 193, "YAML nested too deeply at line 1, column 71: more than 64 levels"),
]
# fmt: on


@pytest.mark.parametrize(
    ("document", "path", "value", "words"),
    [case[1:] for case in ERROR_CASES],
    ids=[case[0] for case in ERROR_CASES],
)
def test_invalid_documents_fail_at_the_exact_path_with_the_value(
    document: str, path: str, value: object, words: str
) -> None:
    with pytest.raises(errors.ConfigError) as caught:
        deviceconfig.load(document, source="device-config.yaml")
    assert caught.value.path == path
    assert caught.value.value == value
    assert type(caught.value.value) is type(value)  # 1 is not True, "8" is not 8
    assert words in caught.value.problem
    assert caught.value.source == "device-config.yaml"
    assert str(caught.value).startswith(f"device-config.yaml: {path}: ")


def test_a_syntax_error_keeps_the_yaml_error_as_its_cause() -> None:
    with pytest.raises(errors.ConfigError) as caught:
        deviceconfig.load("vnpus: [\n")
    assert isinstance(caught.value.__cause__, errors.DocumentError)
    assert isinstance(caught.value.__cause__.__cause__, yaml.YAMLError)


def test_a_failed_load_leaves_nothing_behind() -> None:
    with pytest.raises(errors.ConfigError):
        deviceconfig.load(_doc({**B3, "aiCore": "many"}))
    assert deviceconfig.load(HAMI_CHART).warnings == ()
    assert _builtin("Ascend910B3").aicore == 20


# -- any input: a catalog or a ConfigError, nothing else ------------------------------------

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=2**32),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
_KEYS = sorted(deviceconfig.HAMI_ENTRY_KEYS | deviceconfig.VNPU_ENTRY_KEYS)


@settings(max_examples=200, deadline=None)
@given(
    entry_key=st.sampled_from(_KEYS),
    template_key=st.sampled_from(sorted(deviceconfig.TEMPLATE_KEYS)),
    entry_value=_VALUES,
    template_value=_VALUES,
    new_model=st.booleans(),
)
def test_any_value_in_any_key_gives_a_catalog_or_a_config_error(
    entry_key: str, template_key: str, entry_value: object, template_value: object, new_model: bool
) -> None:
    entry: dict[str, Any] = dict(NEW) if new_model else dict(B3)
    entry["templates"] = [_t(**{template_key: template_value})]
    entry[entry_key] = entry_value
    try:
        loaded = deviceconfig.load(_doc(entry))
    except errors.ConfigError as exc:
        failure: errors.ConfigError | None = exc
    else:
        failure = None
    if failure is not None:
        assert failure.path.startswith("vnpus.configs[0]")
        return
    model = loaded.catalog.by_common_word(str(entry["commonWord"]))
    assert model is not None
    for template in model.templates:
        assert template.memory_mib <= model.memory_capacity_mib
        assert template.aicore <= model.aicore
        assert template.aicpu <= model.aicpu
