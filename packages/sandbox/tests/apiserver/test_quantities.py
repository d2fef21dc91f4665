"""Quantities come back in the form kube-apiserver stores them, on create, update and patch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from vnpu_sandbox.apiserver import quantities

Json = dict[str, Any]
PODS = "/api/v1/namespaces/default/pods"
NODES = "/api/v1/nodes"

# (written, stored): the canonical forms of resource.Quantity, suffix form kept.
FORMS = [
    ("3000", "3k"),
    ("32000", "32k"),
    ("4096", "4096"),
    (4096, "4096"),
    (3000, "3k"),
    ("3e3", "3e3"),  # already canonical in its own (exponent) form
    ("3000e0", "3e3"),
    ("3E3", "3E3"),  # a string the parser finds canonical is kept as written
    ("+5", "+5"),
    ("007", "007"),
    ("1024Mi", "1Gi"),
    ("4096Mi", "4Gi"),
    ("1536Mi", "1536Mi"),
    ("2048Ki", "2Mi"),
    ("1Ki", "1Ki"),
    ("8Ki", "8Ki"),
    ("0.5Ki", "512"),  # below 1024: decimal SI
    ("1.5Gi", "1536Mi"),
    ("100.035Ki", "102435840m"),  # not an integer: decimal SI
    ("9Ei", "9223372036854775807"),  # capped at 2^63-1
    ("1000M", "1G"),
    ("0.001T", "1G"),
    ("1.5", "1500m"),
    (1.5, "1500m"),
    ("1500m", "1500m"),
    ("1000m", "1"),
    ("1.08", "1080m"),
    ("0.1m", "100u"),
    ("0.0000000001", "1n"),  # finer than nano: rounded up
    ("3.001n", "4n"),
    ("1000E", "1e21"),  # past E, decimal SI falls back to an exponent
    ("1000e-12", "1e-9"),
    ("0", "0"),
    ("00", "0"),
    ("0Gi", "0"),
    ("-1024Mi", "-1Gi"),
    (" 2", "2"),
]


@pytest.mark.parametrize(("written", "stored"), FORMS)
def test_canonical_form(written: object, stored: str) -> None:
    assert quantities.canonical(written) == stored


@pytest.mark.parametrize(
    ("written", "problem"),
    [
        ("", quantities.FORMAT_WRONG),
        ("two", quantities.FORMAT_WRONG),
        ("4GB", quantities.FORMAT_WRONG),
        ("1.1.M", quantities.FORMAT_WRONG),
        (True, quantities.FORMAT_WRONG),
        ({"a": 1}, quantities.FORMAT_WRONG),
        ("4K", quantities.BAD_SUFFIX),
        ("1i", quantities.BAD_SUFFIX),
        ("0.1mi", quantities.BAD_SUFFIX),
    ],
)
def test_what_is_no_quantity_is_refused(written: object, problem: str) -> None:
    with pytest.raises(quantities.QuantityError) as caught:
        quantities.canonical(written)
    assert (caught.value.value, caught.value.problem) == (written, problem)


def _pod(name: str, limits: Json, init_limits: Json | None = None) -> Json:
    spec: Json = {"containers": [{"name": "main", "image": "i", "resources": {"limits": limits}}]}
    if init_limits is not None:
        spec["initContainers"] = [
            {"name": "setup", "image": "i", "resources": {"requests": init_limits}}
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def test_pod_resources_are_stored_canonical(raw: Any, unique: Callable[[str], str]) -> None:
    limits = {f"x.io/r{i}": written for i, (written, _) in enumerate(FORMS)}
    expected = {f"x.io/r{i}": stored for i, (_, stored) in enumerate(FORMS)}
    name = unique("quantities")
    status, created = raw.json("POST", PODS, _pod(name, limits, {"huawei.com/Ascend310P": 1}))
    assert status == 201, created
    _, read = raw.json("GET", f"{PODS}/{name}")
    for obj in (created, read):
        (main,) = obj["spec"]["containers"]
        assert main["resources"]["limits"] == expected
        assert main["resources"]["requests"] == expected, "requests copied from limits"
        (setup,) = obj["spec"]["initContainers"]
        assert setup["resources"]["requests"] == {"huawei.com/Ascend310P": "1"}


def test_the_memory_resource_a_webhook_reads_is_canonical(
    raw: Any, unique: Callable[[str], str]
) -> None:
    name = unique("npu")
    limits = {"huawei.com/Ascend910B3": 1, "huawei.com/Ascend910B3-memory": 32000}
    status, created = raw.json("POST", PODS, _pod(name, limits))
    assert status == 201, created
    stored = created["spec"]["containers"][0]["resources"]["limits"]
    assert stored == {"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "32k"}


def test_node_capacity_is_canonical_on_create_update_and_patch(
    raw: Any, unique: Callable[[str], str]
) -> None:
    name = unique("node")
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {
            "capacity": {"huawei.com/Ascend310P": "8000", "memory": "1048576Ki"},
            "allocatable": {"huawei.com/Ascend310P": 8000, "pods": "110"},
        },
    }
    status, created = raw.json("POST", NODES, node)
    assert status == 201, created
    assert created["status"]["capacity"] == {"huawei.com/Ascend310P": "8k", "memory": "1Gi"}
    assert created["status"]["allocatable"] == {"huawei.com/Ascend310P": "8k", "pods": "110"}
    created["status"]["allocatable"]["huawei.com/Ascend310P"] = "7000"
    status, updated = raw.json("PUT", f"{NODES}/{name}/status", created)
    assert status == 200, updated
    assert updated["status"]["allocatable"]["huawei.com/Ascend310P"] == "7k"
    patch = {"status": {"capacity": {"cpu": "96000m"}}}
    status, patched = raw.json(
        "PATCH", f"{NODES}/{name}/status", patch, content_type="application/merge-patch+json"
    )
    assert status == 200, patched
    assert patched["status"]["capacity"]["cpu"] == "96"
    _, read = raw.json("GET", f"{NODES}/{name}")
    assert read["status"] == patched["status"]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("two", quantities.FORMAT_WRONG),
        ("4K", quantities.BAD_SUFFIX),
        (True, quantities.FORMAT_WRONG),
    ],
)
def test_a_pod_with_no_quantity_is_a_bad_request(
    raw: Any, unique: Callable[[str], str], value: object, problem: str
) -> None:
    name = unique("bad")
    status, body = raw.json("POST", PODS, _pod(name, {"huawei.com/Ascend310P": value}))
    assert status == 400
    assert body["reason"] == "BadRequest"
    assert body["message"] == f'Pod in version "v1" cannot be handled as a Pod: {problem}'
    assert raw.json("GET", f"{PODS}/{name}")[0] == 404


def test_a_patch_that_writes_no_quantity_is_refused_and_changes_nothing(
    raw: Any, unique: Callable[[str], str]
) -> None:
    name = unique("patched")
    assert raw.json("POST", PODS, _pod(name, {"cpu": "2"}))[0] == 201
    patch = {"metadata": {"labels": {"a": "b"}}, "spec": {"overhead": {"cpu": "lots"}}}
    status, body = raw.json(
        "PATCH", f"{PODS}/{name}", patch, content_type="application/merge-patch+json"
    )
    assert (status, body["reason"]) == (400, "BadRequest")
    assert quantities.FORMAT_WRONG in body["message"]
    _, read = raw.json("GET", f"{PODS}/{name}")
    assert "labels" not in read["metadata"] or read["metadata"]["labels"] == {}
