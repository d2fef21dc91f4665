import dataclasses
from typing import Any

import pytest

from vnpu_core import catalog, errors, requests
from vnpu_core.requests import Policy


def pod(
    *containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (), **annotations: str
) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "annotations": dict(annotations)},
        "spec": {"initContainers": list(init), "containers": list(containers)},
    }


def ctr(name: str = "main", **limits: object) -> dict[str, Any]:
    return {
        "name": name,
        "resources": {
            "limits": {f"huawei.com/{k.replace('_', '-')}": v for k, v in limits.items()}
        },
    }


def parse(p: dict[str, Any]) -> requests.PodRequest:
    return requests.from_pod(p, catalog.BUILTIN)


@pytest.mark.parametrize(
    ("memory", "shape", "rounded"),
    [
        ("2000", "vir01", 3072),
        ("3072", "vir01", 3072),
        ("3500", "vir02", 6144),
        (9000, "vir04", 12288),
        ("13000", "1 whole chip", 21527),
        ("24576", "1 whole chip", 21527),
        (None, "1 whole chip", 21527),
    ],
)
def test_310p_memory_rounds_like_hami(memory: object, shape: str, rounded: int) -> None:
    limits: dict[str, object] = {"Ascend310P": "1"}
    if memory is not None:
        limits["Ascend310P_memory"] = memory
    (request,) = parse(pod(ctr(**limits))).requests
    assert request.shape == shape
    assert request.memory_mib == rounded


@pytest.mark.parametrize("memory", ["22000", "24576"])
def test_memory_above_a_pods_share_of_a_chip_gets_the_whole_chip_with_a_note(memory: str) -> None:
    request = parse(pod(ctr(Ascend310P=1, Ascend310P_memory=memory)))
    (item,) = request.requests
    assert item.whole
    assert item.memory_mib == 21527
    (note,) = request.notes
    assert note.startswith(
        f"container 'main': huawei.com/Ascend310P-memory={memory} is more than one Ascend310P "
        "gives a pod (21527 MiB of the chip's 24576 MiB)"
    )


def test_memory_up_to_a_pods_share_of_a_chip_has_no_note() -> None:
    assert parse(pod(ctr(Ascend310P=1, Ascend310P_memory=21527))).notes == ()


def test_rounding_keeps_same_memory_variants_in_preference_order() -> None:
    (request,) = parse(pod(ctr(Ascend310P=1, Ascend310P_memory=5000))).requests
    assert [t.name for t in request.templates] == ["vir02", "vir02_1c"]


@pytest.mark.parametrize(
    ("limits", "resource", "value", "words"),
    [
        (
            {"Ascend310P": 1, "Ascend310P_memory": "4Gi"},
            "huawei.com/Ascend310P-memory",
            "4Gi",
            "e.g. 4096",
        ),
        (
            {"Ascend310P": 1, "Ascend310P_memory": "24577"},
            "huawei.com/Ascend310P-memory",
            24577,
            "24576 MiB",
        ),
        ({"Ascend310P": "1.5"}, "huawei.com/Ascend310P", "1.5", "plain integer"),
        (
            {"Ascend310P_memory": "4096"},
            "huawei.com/Ascend310P-memory",
            "4096",
            "add huawei.com/Ascend310P: 1",
        ),
        (
            {"Ascend910B3": 2, "Ascend910B3_memory": 16000},
            "huawei.com/Ascend910B3-memory",
            16000,
            "single-chip",
        ),
        (
            {"Ascend310P": 1, "Ascend310P_core": 50},
            "huawei.com/Ascend310P-core",
            50,
            "huawei.com/vnpu-mode",
        ),
        ({"Ascend310P": True}, "huawei.com/Ascend310P", True, "plain integer"),
    ],
)
def test_bad_requests_name_container_resource_and_value(
    limits: dict[str, object], resource: str, value: object, words: str
) -> None:
    with pytest.raises(errors.RequestError) as caught:
        parse(pod(ctr("worker", **limits)))
    assert caught.value.container == "worker"
    assert caught.value.resource == resource
    assert caught.value.value == value
    assert words in str(caught.value)


def test_multi_chip_hard_requests_are_whole_chips() -> None:
    (request,) = parse(pod(ctr(Ascend910B3=4))).requests
    assert request.whole
    assert request.count == 4
    (big,) = parse(pod(ctr(Ascend910B3=2, Ascend910B3_memory=65536))).requests
    assert big.whole


def test_soft_mode_keeps_raw_memory_and_cores() -> None:
    p = pod(
        ctr(Ascend310P=1, Ascend310P_memory=4096, Ascend310P_core=30),
        **{"huawei.com/vnpu-mode": "hami-core"},
    )
    request = parse(p)
    assert request.soft
    (slice_,) = request.requests
    assert (slice_.soft, slice_.memory_mib, slice_.core_percent) == (True, 4096, 30)
    assert request.notes == ()


def test_init_containers_run_alone_but_sidecars_count_as_regular() -> None:
    sidecar = ctr("proxy", Ascend310P=1, Ascend310P_memory=3000)
    sidecar["restartPolicy"] = "Always"
    p = pod(
        ctr("app", Ascend310P=1), init=(ctr("setup", Ascend310P=1, Ascend310P_memory=3000), sidecar)
    )
    request = parse(p)
    assert request.containers == (("setup", True), ("proxy", True), ("app", False))
    assert [(r.container, r.init) for r in request.requests] == [
        ("setup", True),
        ("proxy", False),
        ("app", False),
    ]


def test_uuid_lists_and_policies_come_from_annotations() -> None:
    p = pod(
        ctr(Ascend310P=1),
        **{
            "hami.io/use-Ascend310P-uuid": "u1, u2",
            "hami.io/no-use-Ascend310P-uuid": "u3",
            "hami.io/gpu-scheduler-policy": "topology-aware,spread",
            "hami.io/node-scheduler-policy": "binpack",
        },
    )
    request = parse(p)
    assert request.use_uuids == {"Ascend310P": frozenset({"u1", "u2"})}
    assert request.no_use_uuids == {"Ascend310P": frozenset({"u3"})}
    assert request.chip_policy is Policy.SPREAD
    assert request.node_policy is Policy.BINPACK


@pytest.mark.parametrize(
    ("key", "value"),
    [("hami.io/gpu-scheduler-policy", "fastest"), ("huawei.com/vnpu-mode", "soft")],
)
def test_bad_pod_annotations_are_refused_with_key_and_value(key: str, value: str) -> None:
    with pytest.raises(errors.RequestError) as caught:
        parse(pod(ctr(Ascend310P=1), **{key: value}))
    assert caught.value.resource == key
    assert caught.value.value == value


def test_pods_without_npu_requests_want_nothing() -> None:
    request = parse(pod({"name": "web", "resources": {"limits": {"cpu": "1"}}}))
    assert not request.wants_npu
    assert request.containers == (("web", False),)


def test_memory_factor_scales_the_request() -> None:
    base = catalog.BUILTIN.by_common_word("Ascend310P")
    assert base is not None
    doubled = catalog.BUILTIN.replace([dataclasses.replace(base, memory_factor=2)])
    (request,) = requests.from_pod(pod(ctr(Ascend310P=1, Ascend310P_memory=2000)), doubled).requests
    assert request.shape == "vir02"


@pytest.mark.parametrize(
    ("memory", "count", "shape", "rounded"),
    [
        # kube-apiserver stores 3000 as 3k and 32000 as 32k; every decimal form is the number.
        ("3000", "1", "vir05_1c_16g", 16384),
        ("3k", "1", "vir05_1c_16g", 16384),
        ("3e3", "1", "vir05_1c_16g", 16384),
        ("3E3", "1", "vir05_1c_16g", 16384),
        ("32000", "1", "vir10_3c_32g", 32768),
        ("32k", "1", "vir10_3c_32g", 32768),
        ("32e3", "1", "vir10_3c_32g", 32768),
        ("0.032M", "1", "vir10_3c_32g", 32768),
        ("2.5e3", "1", "vir05_1c_16g", 16384),
        ("32000000m", "1", "vir10_3c_32g", 32768),
        (32000.0, 1.0, "vir10_3c_32g", 32768),
        (None, "2e0", "2 whole chips", 65536),
        (None, "2000m", "2 whole chips", 65536),
    ],
)
def test_memory_and_count_accept_every_whole_number_form(
    memory: object, count: object, shape: str, rounded: int
) -> None:
    limits: dict[str, object] = {"Ascend910B3": count}
    if memory is not None:
        limits["Ascend910B3_memory"] = memory
    (request,) = parse(pod(ctr(**limits))).requests
    assert request.shape == shape
    assert request.memory_mib == rounded


def test_soft_core_percent_accepts_decimal_forms() -> None:
    p = pod(
        ctr(Ascend310P="1", Ascend310P_memory="4k", Ascend310P_core="5e1"),
        **{"huawei.com/vnpu-mode": "hami-core"},
    )
    (slice_,) = parse(p).requests
    assert (slice_.memory_mib, slice_.core_percent) == (4000, 50)


@pytest.mark.parametrize(
    ("limits", "resource", "value", "words"),
    [
        # Binary units would be read as that many MiB by HAMi and Volcano: refused.
        ({"Ascend310P": 1, "Ascend310P_memory": "4096Mi"}, "memory", "4096Mi", "e.g. 4096"),
        ({"Ascend310P": 1, "Ascend310P_memory": "4Ki"}, "memory", "4Ki", "e.g. 4096"),
        ({"Ascend310P": 1, "Ascend310P_memory": "2.5"}, "memory", "2.5", "e.g. 4096"),
        ({"Ascend310P": 1, "Ascend310P_memory": "1500m"}, "memory", "1500m", "e.g. 4096"),
        ({"Ascend310P": 1, "Ascend310P_memory": "2.5e-3"}, "memory", "2.5e-3", "e.g. 4096"),
        ({"Ascend310P": 1, "Ascend310P_memory": "5e-1"}, "memory", "5e-1", "e.g. 4096"),
        ({"Ascend310P": 1, "Ascend310P_memory": 2.5}, "memory", 2.5, "e.g. 4096"),
        ({"Ascend310P": 1, "Ascend310P_memory": "4GB"}, "memory", "4GB", "e.g. 4096"),
        ({"Ascend310P": 1, "Ascend310P_memory": "-3k"}, "memory", "-3k", "between 0 and"),
        ({"Ascend310P": 1, "Ascend310P_memory": "3e10"}, "memory", "3e10", "between 0 and"),
        ({"Ascend310P": "1Ki"}, "count", "1Ki", "plain integer"),
        ({"Ascend310P": "1500m"}, "count", "1500m", "plain integer"),
        ({"Ascend310P": "1e-3"}, "count", "1e-3", "plain integer"),
        ({"Ascend310P": 1, "Ascend310P_core": "0.5"}, "core", "0.5", "plain integer"),
        ({"Ascend310P": 1, "Ascend310P_core": "1Ki"}, "core", "1Ki", "plain integer"),
    ],
)
def test_binary_units_and_fractions_are_refused_naming_the_value(
    limits: dict[str, object], resource: str, value: object, words: str
) -> None:
    names = {
        "memory": "huawei.com/Ascend310P-memory",
        "count": "huawei.com/Ascend310P",
        "core": "huawei.com/Ascend310P-core",
    }
    annotations = {"huawei.com/vnpu-mode": "hami-core"} if resource == "core" else {}
    with pytest.raises(errors.RequestError) as caught:
        parse(pod(ctr("worker", **limits), **annotations))
    assert caught.value.container == "worker"
    assert caught.value.resource == names[resource]
    assert caught.value.value == value
    assert words in str(caught.value)
    assert str(caught.value).startswith(f"container 'worker': {names[resource]}={value}: ")


# --- read as HAMi and Volcano read it (docs/protocol.md, "Differences from HAMi and Volcano") ---

SOFT = {"huawei.com/vnpu-mode": "hami-core"}


def super_pod() -> catalog.Catalog:
    a3 = catalog.BUILTIN.by_common_word("Ascend910C")
    assert a3 is not None
    return catalog.BUILTIN.replace([dataclasses.replace(a3, super_pod=True)])


@pytest.mark.parametrize(
    ("limits", "annotations", "admission", "shape", "memory", "note"),
    [
        # HAMi's webhook trims 0 to the first template with memory >= 0: the smallest one.
        ({"Ascend310P": 1, "Ascend310P_memory": 0}, {}, True, "vir01", 3072, "vir01 (3072 MiB)"),
        ({"Ascend910B3": 1, "Ascend910B3_memory": "0"}, {}, True, "vir05_1c_16g", 16384, "HAMi's webhook"),
        # HAMi's filter and Volcano: memory 0 means 100 % of the chip, a whole chip.
        ({"Ascend310P": 1, "Ascend310P_memory": 0}, {}, False, "1 whole chip", 21527, "no memory given"),
        ({"Ascend910B3": 1, "Ascend910B3_memory": 0}, {}, False, "1 whole chip", 65536, "Volcano"),
        # Several chips with memory 0: whole chips in both readings (Volcano accepts it).
        ({"Ascend910B3": 2, "Ascend910B3_memory": 0}, {}, True, "2 whole chips", 65536, "a whole chip"),
        ({"Ascend910B3": 2, "Ascend910B3_memory": 0}, {}, False, "2 whole chips", 65536, "a whole chip"),
        # Soft mode: the raw quota, and 0 is the whole chip's memory (100 %) in both readings.
        ({"Ascend310P": 1, "Ascend310P_memory": 0}, SOFT, True, "1x soft slice of 21527 MiB/0%", 21527, "the whole chip's memory"),
        ({"Ascend310P": 1, "Ascend310P_memory": 0}, SOFT, False, "1x soft slice of 21527 MiB/0%", 21527, "the whole chip's memory"),
    ],
)  # fmt: skip
def test_memory_zero_is_read_as_each_peer_component_reads_it(
    limits: dict[str, object],
    annotations: dict[str, str],
    admission: bool,
    shape: str,
    memory: int,
    note: str,
) -> None:
    request = requests.from_pod(
        pod(ctr(**limits), **annotations), catalog.BUILTIN, admission=admission
    )
    (item,) = request.requests
    assert (item.shape, item.memory_mib) == (shape, memory)
    (said,) = request.notes
    assert said.startswith("container 'main': huawei.com/")
    assert "=0" in said
    assert note in said


def test_memory_zero_at_admission_ignores_the_memory_factor() -> None:
    base = catalog.BUILTIN.by_common_word("Ascend310P")
    assert base is not None
    doubled = catalog.BUILTIN.replace([dataclasses.replace(base, memory_factor=2)])
    p = pod(ctr(Ascend310P=1, Ascend310P_memory=0))
    (item,) = requests.from_pod(p, doubled, admission=True).requests
    assert (item.shape, item.memory_mib) == ("vir01", 3072)


def test_memory_zero_without_templates_is_a_whole_chip_even_at_admission() -> None:
    base = catalog.BUILTIN.by_common_word("Ascend310P")
    assert base is not None
    bare = catalog.BUILTIN.replace([dataclasses.replace(base, templates=())])
    p = pod(ctr(Ascend310P=1, Ascend310P_memory=0))
    (item,) = requests.from_pod(p, bare, admission=True).requests
    assert item.whole


@pytest.mark.parametrize(
    ("core", "read", "noted"),
    [(100, 100, False), (101, 100, True), (150, 100, True), ("1k", 100, True), (0, 0, False)],
)
def test_core_percent_above_100_is_clamped_as_hami_does(
    core: object, read: int, noted: bool
) -> None:
    request = parse(pod(ctr(Ascend310P=1, Ascend310P_memory=4096, Ascend310P_core=core), **SOFT))
    (item,) = request.requests
    assert item.core_percent == read
    if noted:
        (said,) = request.notes
        assert "huawei.com/Ascend310P-core=" in said
        assert "read as 100" in said
    else:
        assert request.notes == ()


@pytest.mark.parametrize(
    ("use", "no_use", "allow", "deny"),
    [
        ("", None, None, None),
        ("  ", None, None, None),
        (" , ,", None, None, None),
        (None, "", None, None),
        (None, " \t", None, None),
        ("u1, ,u2", "", frozenset({"u1", "u2"}), None),
        ("", "u3", None, frozenset({"u3"})),
    ],
)
def test_empty_or_blank_uuid_lists_are_no_constraint(
    use: str | None, no_use: str | None, allow: frozenset[str] | None, deny: frozenset[str] | None
) -> None:
    annotations = {}
    if use is not None:
        annotations["hami.io/use-Ascend310P-uuid"] = use
    if no_use is not None:
        annotations["hami.io/no-use-Ascend310P-uuid"] = no_use
    request = parse(pod(ctr(Ascend310P=1), **annotations))
    assert (request.use_uuids or {}).get("Ascend310P") == allow
    assert (request.no_use_uuids or {}).get("Ascend310P") == deny


@pytest.mark.parametrize(
    ("limits", "annotations", "count", "shape", "noted"),
    [
        ({"Ascend910C": 1}, {}, 2, "2 whole chips", True),
        ({"Ascend910C": 1, "Ascend910C_memory": 65536}, {}, 2, "2 whole chips", True),
        ({"Ascend910C": 2}, {}, 2, "2 whole chips", False),
        ({"Ascend910C": 4}, {}, 4, "4 whole chips", False),
        # A vNPU is carved out of one die: it is not doubled.
        ({"Ascend910C": 1, "Ascend910C_memory": 16000}, {}, 1, "vir05_1c_16g", False),
        # Soft slices are not paired (HAMi schedules odd split-mode requests too).
        ({"Ascend910C": 1, "Ascend910C_memory": 8000}, SOFT, 1, "1x soft slice of 8000 MiB/0%", False),
        ({"Ascend910C": 3, "Ascend910C_memory": 8000}, SOFT, 3, "3x soft slice of 8000 MiB/0%", False),
    ],
)  # fmt: skip
def test_super_pod_single_die_requests_take_a_die_pair(
    limits: dict[str, object], annotations: dict[str, str], count: int, shape: str, noted: bool
) -> None:
    for admission in (True, False):
        request = requests.from_pod(
            pod(ctr(**limits), **annotations), super_pod(), admission=admission
        )
        (item,) = request.requests
        assert (item.count, item.shape) == (count, shape)
        assert any("takes a die pair" in n for n in request.notes) is noted


@pytest.mark.parametrize("count", [3, 5, "7"])
def test_super_pod_odd_die_counts_are_refused(count: object) -> None:
    with pytest.raises(errors.RequestError) as caught:
        requests.from_pod(pod(ctr("worker", Ascend910C=count)), super_pod())
    assert caught.value.resource == "huawei.com/Ascend910C"
    assert caught.value.value == int(str(count))
    assert "1 or an even number" in str(caught.value)


def test_without_super_pod_910c_counts_are_kept() -> None:
    (one,) = parse(pod(ctr(Ascend910C=1))).requests
    (three,) = parse(pod(ctr(Ascend910C=3))).requests
    assert (one.count, three.count) == (1, 3)


# --- template pinning (vnpu.io/template) -------------------------------------------------

PIN = "vnpu.io/template"
PIN_FIELD = "metadata.annotations[vnpu.io/template]"
VALID_310P = (
    "valid templates for Ascend310P (MiB/AI cores/AI CPUs): vir01 3072/1/1, vir02 6144/2/2, "
    "vir02_1c 6144/2/1, vir04 12288/4/4, vir04_3c 12288/4/3"
)


@pytest.mark.parametrize(
    ("limits", "pin", "admission", "template", "memory"),
    [
        # The pin takes the place of the templates of equal memory (vir04, then vir04_3c).
        ({"Ascend310P": 1, "Ascend310P_memory": 12288}, "vir04", False, "vir04", 12288),
        ({"Ascend310P": 1, "Ascend310P_memory": 12288}, "vir04_3c", False, "vir04_3c", 12288),
        ({"Ascend310P": 1, "Ascend310P_memory": 5000}, "vir02_1c", False, "vir02_1c", 6144),
        # Less memory than the template has rounds up to the template's memory.
        ({"Ascend310P": 1, "Ascend310P_memory": "3k"}, "vir04", False, "vir04", 12288),
        # Memory 0 at admission is the pinned template, not the smallest one.
        ({"Ascend310P": 1, "Ascend310P_memory": 0}, "vir04", True, "vir04", 12288),
        # A name two models share is the template of the model the pod asks for.
        ({"Ascend910A": 1, "Ascend910A_memory": 4000}, "vir04", False, "vir04", 4369),
    ],
)
def test_a_pin_is_the_one_template_and_sets_the_memory(
    limits: dict[str, object], pin: str, admission: bool, template: str, memory: int
) -> None:
    p = pod(ctr(**limits), **{PIN: pin})
    request = requests.from_pod(p, catalog.BUILTIN, admission=admission)
    (item,) = request.requests
    assert [t.name for t in item.templates] == [template]
    assert (item.pinned, item.memory_mib, item.count, item.whole) == (True, memory, 1, False)
    assert request.template == pin


def test_the_pin_reaches_every_npu_container_and_unpinned_pods_stay_as_they_were() -> None:
    p = pod(
        ctr("app", Ascend310P=1, Ascend310P_memory=9000),
        ctr("side", Ascend310P=1, Ascend310P_memory=2000),
        init=(ctr("setup", Ascend310P=1, Ascend310P_memory=3000),),
        **{PIN: "vir04"},
    )
    request = parse(p)
    assert [(r.container, r.shape, r.pinned) for r in request.requests] == [
        ("setup", "vir04", True),
        ("app", "vir04", True),
        ("side", "vir04", True),
    ]
    (plain,) = parse(pod(ctr(Ascend310P=1, Ascend310P_memory=9000))).requests
    assert ([t.name for t in plain.templates], plain.pinned) == (["vir04", "vir04_3c"], False)
    assert parse(pod(ctr(Ascend310P=1))).template is None


def test_a_pin_on_a_pod_without_npu_does_nothing() -> None:
    request = parse(pod({"name": "web", "resources": {"limits": {"cpu": "1"}}}, **{PIN: "vir04"}))
    assert (request.wants_npu, request.template) == (False, None)


@pytest.mark.parametrize(
    ("annotations", "containers", "container", "message"),
    [
        (
            {PIN: "vir09"},
            [ctr(Ascend310P=1, Ascend310P_memory=4000)],
            "(pod)",
            f"{PIN_FIELD}=vir09: unknown template; {VALID_310P}",
        ),
        (
            {PIN: "vir05_1c_16g"},
            [ctr(Ascend310P=1, Ascend310P_memory=4000)],
            "(pod)",
            f"{PIN_FIELD}=vir05_1c_16g: a template of Ascend910B3, Ascend910B4-1, Ascend910C, "
            f"not of Ascend310P, which the pod asks for; {VALID_310P}",
        ),
        (
            {PIN: "vir02"},
            [ctr(Ascend310P=1, Ascend310P_memory=9000)],
            "main",
            f"{PIN_FIELD}=vir02: container 'main': vir02 has 6144 MiB, less than "
            "huawei.com/Ascend310P-memory=9000 asks; valid templates for Ascend310P with at "
            "least 9000 MiB (MiB/AI cores/AI CPUs): vir04 12288/4/4, vir04_3c 12288/4/3",
        ),
        (
            {PIN: "vir04"},
            [ctr(Ascend310P=1, Ascend310P_memory=20000)],
            "main",
            f"{PIN_FIELD}=vir04: container 'main': vir04 has 12288 MiB, less than "
            "huawei.com/Ascend310P-memory=20000 asks; no Ascend310P template has 20000 MiB "
            "(the largest, vir04, has 12288 MiB): leave the pin out for a whole chip",
        ),
        (
            {PIN: "vir04"},
            [ctr(Ascend310P=1)],
            "main",
            f"{PIN_FIELD}=vir04: container 'main': asks for a whole chip (no "
            "huawei.com/Ascend310P-memory); vir04 is one vNPU: set huawei.com/Ascend310P-memory "
            "to at most 12288",
        ),
        (
            {PIN: "vir04"},
            [ctr(Ascend310P=2)],
            "main",
            f"{PIN_FIELD}=vir04: container 'main': huawei.com/Ascend310P=2 asks for whole chips; "
            "vir04 is one vNPU on one chip: ask for huawei.com/Ascend310P: 1",
        ),
        (
            {PIN: "vir04", "huawei.com/vnpu-mode": "hami-core"},
            [ctr(Ascend310P=1, Ascend310P_memory=4000)],
            "(pod)",
            f"{PIN_FIELD}=vir04: a pinned template is a hard vNPU and the pod asks for soft "
            "slices (huawei.com/vnpu-mode: hami-core): drop one of the two",
        ),
        (
            {PIN: "vir04"},
            [ctr(Ascend310P=1, Ascend310P_memory=4000, Ascend310P_core=40)],
            "main",
            f"{PIN_FIELD}=vir04: container 'main': huawei.com/Ascend310P-core=40 is a soft-mode "
            "core percentage; vir04 brings its own 4 AI cores: leave huawei.com/Ascend310P-core out",
        ),
        (
            {PIN: "vir04"},
            [ctr("a", Ascend310P=1, Ascend310P_memory=4000), ctr("b", Ascend910A=1, Ascend910A_memory=4000)],
            "(pod)",
            f"{PIN_FIELD}=vir04: a pin serves the NPU containers of one chip model and the pod "
            "asks for Ascend310P and Ascend910A: split the pod or leave the pin out",
        ),
    ],
)  # fmt: skip
def test_a_pin_that_cannot_serve_the_pod_is_refused_naming_field_value_and_templates(
    annotations: dict[str, str], containers: list[dict[str, Any]], container: str, message: str
) -> None:
    with pytest.raises(errors.PinError) as caught:
        requests.from_pod(pod(*containers, **annotations), catalog.BUILTIN, admission=True)
    assert str(caught.value) == message
    assert caught.value.field == PIN_FIELD
    assert (caught.value.container, caught.value.resource) == (container, PIN)
    assert caught.value.value == annotations[PIN]
    assert isinstance(caught.value, errors.RequestError)  # every caller already handles it


def test_a_pin_with_memory_zero_outside_admission_is_a_whole_chip_and_refused() -> None:
    p = pod(ctr(Ascend310P=1, Ascend310P_memory=0), **{PIN: "vir04"})
    with pytest.raises(errors.PinError, match=r"huawei.com/Ascend310P-memory=0 is no memory"):
        parse(p)
    admitted = requests.from_pod(p, catalog.BUILTIN, admission=True)
    assert [r.shape for r in admitted.requests] == ["vir04"]
    assert admitted.notes == (
        "container 'main': huawei.com/Ascend310P-memory=0 rounds to the pinned template vir04 "
        "(12288 MiB)",
    )
