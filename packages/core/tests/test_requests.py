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
        (
            {"Ascend310P": 1, "Ascend310P_memory": "0"},
            "huawei.com/Ascend310P-memory",
            0,
            "must be positive",
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
    with pytest.raises(errors.RequestError, match="percentage"):
        parse(pod(ctr(Ascend310P=1, Ascend310P_core=130), **{"huawei.com/vnpu-mode": "hami-core"}))


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
