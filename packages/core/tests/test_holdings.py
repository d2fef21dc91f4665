"""What a pod holds in quota units, from its request and from its decision annotations."""

from typing import Any

import pytest

from vnpu_core import allocator, binding, catalog, errors, holdings, inventory, requests
from vnpu_core.holdings import ALL_MODELS, Key, Unit

SOFT = {"huawei.com/vnpu-mode": "hami-core"}


def pod(
    containers: list[dict[str, object]],
    init: list[dict[str, object]] | None = None,
    annotations: dict[str, str] | None = None,
    namespace: str = "ml",
    name: str = "p",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {"name": f"c{i}", "resources": {"limits": limits}}
            for i, limits in enumerate(containers)
        ]
    }
    if init is not None:
        spec["initContainers"] = [
            {"name": f"i{i}", **({} if "restartPolicy" not in c else {"restartPolicy": "Always"}),
             "resources": {"limits": {k: v for k, v in c.items() if k != "restartPolicy"}}}
            for i, c in enumerate(init)
        ]  # fmt: skip
    return {
        "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations or {})},
        "spec": spec,
    }


def asked(obj: dict[str, Any]) -> dict[str, int]:
    return holdings.of_request(requests.from_pod(obj, catalog.BUILTIN)).names()


P310 = "huawei.com/Ascend310P"
B3 = "huawei.com/Ascend910B3"


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            pod([{P310: 1, f"{P310}-memory": 4000}]),
            {"aicore": 2, "memory": 6144, "vnpus": 1, "devices": 1},
            id="vnpu-template-memory-and-cores",
        ),
        pytest.param(
            pod([{B3: 2}]),
            {"aicore": 40, "memory": 131072, "chips": 2, "devices": 2},
            id="whole-chips-times-count",
        ),
        pytest.param(
            pod([{B3: 2, f"{B3}-memory": 32768, f"{B3}-core": 30}], annotations=SOFT),
            {"aicore": 12, "memory": 65536, "devices": 2},
            id="multi-device-soft-memory-times-count",
        ),
        pytest.param(
            pod([{P310: 1, f"{P310}-memory": 1000, f"{P310}-core": 33}], annotations=SOFT),
            {"aicore": 3, "memory": 1000, "devices": 1},
            id="soft-cores-rounded-up",
        ),
        pytest.param(
            pod([{B3: 2}], init=[{B3: 4}]),
            {"aicore": 80, "memory": 262144, "chips": 4, "devices": 4},
            id="init-larger-than-app-peaks",
        ),
        pytest.param(
            pod([{B3: 2}], init=[{B3: 1, f"{B3}-memory": 16000}]),
            {"aicore": 40, "memory": 131072, "chips": 2, "vnpus": 1, "devices": 2},
            id="init-peak-unit-by-unit",
        ),
        pytest.param(
            pod([{B3: 2}], init=[{B3: 1, "restartPolicy": "Always"}]),
            {"aicore": 60, "memory": 196608, "chips": 3, "devices": 3},
            id="sidecar-counts-beside-app",
        ),
        pytest.param(
            pod([{B3: 1}], init=[{B3: 1}, {B3: 3}]),
            {"aicore": 60, "memory": 196608, "chips": 3, "devices": 3},
            id="largest-init-container",
        ),
        pytest.param(pod([{}]), {}, id="no-npu"),
    ],
)
def test_what_a_request_holds_for_all_models(obj: dict[str, Any], expected: dict[str, int]) -> None:
    names = asked(obj)
    assert {k: v for k, v in names.items() if "-" not in k} == expected


def test_every_amount_has_per_model_and_all_model_keys() -> None:
    names = asked(pod([{P310: 1, f"{P310}-memory": 4000}, {B3: 1}]))
    assert names["Ascend310P-memory"] == 6144
    assert names["Ascend910B3-memory"] == 65536
    assert names["memory"] == 6144 + 65536
    assert names["Ascend910B3-chips"] == names["chips"] == 1
    assert "Ascend310P-chips" not in names


def test_peak_of_init_keeps_per_model_keys_exact() -> None:
    # The init container holds a 310P vNPU, the app a 910B3 chip: both keys peak on their own.
    names = asked(pod([{B3: 1}], init=[{P310: 1, f"{P310}-memory": 12000}]))
    assert names["Ascend310P-memory"] == 12288
    assert names["Ascend910B3-memory"] == 65536
    assert names["memory"] == 65536  # never both at once
    assert names["devices"] == 1


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("aicore", Key(ALL_MODELS, Unit.AICORE)),
        ("Ascend310P-memory", Key("Ascend310P", Unit.MEMORY)),
        ("Ascend910B4-1-chips", Key("Ascend910B4-1", Unit.CHIPS)),
        ("devices", Key(ALL_MODELS, Unit.DEVICES)),
        ("-aicore", None),
        ("cores", None),
        ("Ascend310P-", None),
        ("", None),
    ],
)
def test_unit_names(name: str, key: Key | None) -> None:
    assert holdings.parse_key(name) == key
    if key is not None:
        assert key.name == name


@pytest.mark.parametrize(
    ("value", "number"),
    [(16384, 16384), ("16384", 16384), ("16k", 16000), ("2e3", 2000), (" 8 ", 8), ("0", 0)],
)
def test_amounts_in_decimal_forms(value: object, number: int) -> None:
    assert holdings.parse_amount("src", "path", value) == number


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("16Gi", "binary suffixes"),
        ("1.5", "whole number"),
        ("1500m", "whole number"),
        (-1, "negative"),
        ("-2k", "negative"),
        (True, "whole number"),
        ("lots", "not a quantity"),
        (None, "string or a number"),
    ],
)
def test_bad_amounts_name_source_path_and_value(value: object, problem: str) -> None:
    with pytest.raises(errors.QuotaError) as caught:
        holdings.parse_amount("ResourceQuota ml/npu", 'spec.hard["x"]', value)
    assert caught.value.source == "ResourceQuota ml/npu"
    assert caught.value.path == 'spec.hard["x"]'
    assert caught.value.value == value
    assert problem in caught.value.problem


def test_amount_arithmetic() -> None:
    a = holdings.Amount({Key("", Unit.CHIPS): 2, Key("", Unit.AICORE): 0})
    b = holdings.Amount({Key("", Unit.CHIPS): 3, Key("", Unit.MEMORY): 5})
    assert a.keys() == (Key("", Unit.CHIPS),)  # zeros are dropped
    assert a.plus(b).names() == {"chips": 5, "memory": 5}
    assert b.minus(a).names() == {"chips": 1, "memory": 5}
    assert a.minus(b) == holdings.ZERO
    assert a.peak(b) == b
    assert a.times(3)[Key("", Unit.CHIPS)] == 6
    assert holdings.total([a, b, a]).names() == {"chips": 7, "memory": 5}
    assert not holdings.ZERO


def bind(obj: dict[str, Any], node: inventory.Node) -> dict[str, Any]:
    request = requests.from_pod(obj, catalog.BUILTIN)
    outcome = allocator.fit(node, {}, request)
    assert isinstance(outcome, allocator.Assignment), outcome
    obj["metadata"]["annotations"].update(binding.bind_annotations(outcome, 1))
    obj["spec"]["nodeName"] = node.name
    obj["status"] = {"phase": "Running"}
    return obj


MODELS = {m.common_word: m for m in catalog.BUILTIN}
DUO = inventory.build_node("duo", MODELS["Ascend310P"], 8)
MESH = inventory.build_node("mesh", MODELS["Ascend910B3"], 8)
SOFT_MESH = inventory.build_node("soft", MODELS["Ascend910B3"], 8, soft=True)


@pytest.mark.parametrize(
    ("obj", "node"),
    [
        (pod([{P310: 1, f"{P310}-memory": 4000}]), DUO),
        (pod([{P310: 1, f"{P310}-memory": 4000}, {P310: 1, f"{P310}-memory": 9000}]), DUO),
        (pod([{B3: 4}]), MESH),
        (pod([{B3: 2}], init=[{B3: 4}]), MESH),
        (pod([{B3: 1}], init=[{B3: 1, "restartPolicy": "Always"}]), MESH),
        (pod([{B3: 2, f"{B3}-memory": 32768, f"{B3}-core": 30}], annotations=SOFT), SOFT_MESH),
    ],
)
def test_a_bound_pod_holds_what_it_asked(obj: dict[str, Any], node: inventory.Node) -> None:
    ask = holdings.of_request(requests.from_pod(obj, catalog.BUILTIN))
    assert holdings.of_bound_pod(bind(obj, node), catalog.BUILTIN) == ask


def test_finished_init_containers_no_longer_count() -> None:
    obj = bind(pod([{B3: 1}], init=[{B3: 4}]), MESH)
    assert holdings.of_bound_pod(obj, catalog.BUILTIN).names()["chips"] == 4
    obj["status"]["initContainerStatuses"] = [
        {"name": "i0", "state": {"terminated": {"exitCode": 0}}}
    ]
    assert holdings.of_bound_pod(obj, catalog.BUILTIN).names()["chips"] == 1


def test_usage_by_namespace_counts_bound_unfinished_pods() -> None:
    a = bind(pod([{B3: 2}], namespace="ml", name="a"), MESH)
    b = bind(pod([{B3: 1}], namespace="ml", name="b"), MESH)
    c = bind(pod([{B3: 1}], namespace="cv", name="c"), MESH)
    done = bind(pod([{B3: 4}], namespace="cv", name="done"), MESH)
    done["status"] = {"phase": "Succeeded"}
    pending = pod([{B3: 8}], namespace="cv", name="pending")
    broken = bind(pod([{B3: 1}], namespace="ml", name="broken"), MESH)
    broken["metadata"]["annotations"]["hami.io/Ascend910B3-devices-allocated"] = "x"
    usage = holdings.usage_by_namespace([a, b, c, done, pending, broken], catalog.BUILTIN)
    assert usage.of("ml").names()["chips"] == 3
    assert usage.of("cv").names()["chips"] == 1
    assert usage.of("other") == holdings.ZERO
    assert [p.pod for p in usage.problems] == ["ml/broken"]
