"""Quantities and pod requests, read as kube-scheduler reads them (table-driven)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from vnpu_sandbox.scheduling import errors, podrequests, quantities

Json = dict[str, Any]
GI = 2**30


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Decimal(1)),
        (2, Decimal(2)),
        (0.5, Decimal("0.5")),
        ("500m", Decimal("0.5")),
        ("1.5", Decimal("1.5")),
        (".5", Decimal("0.5")),
        ("+3", Decimal(3)),
        ("3k", Decimal(3000)),
        ("1e3", Decimal(1000)),
        ("5E-1", Decimal("0.5")),
        ("1E", Decimal(10**18)),  # exa, not an exponent
        ("1Gi", Decimal(GI)),
        ("1.5Gi", Decimal(GI + GI // 2)),
        ("128974848", Decimal(128974848)),
        ("129M", Decimal(129_000_000)),
        ("123Mi", Decimal(123 * 2**20)),
        ("100u", Decimal("0.0001")),
        ("250n", Decimal("2.5E-7")),
        (" 2 ", Decimal(2)),
    ],
)
def test_quantity_forms(text: object, value: Decimal) -> None:
    assert quantities.parse(text) == value


@pytest.mark.parametrize(
    "text", ["", "abc", "1e", "1Ki2", "1 Gi", "--1", "1.2.3", "Gi", True, None, [1]]
)
def test_not_quantities(text: object) -> None:
    with pytest.raises(ValueError, match="is not a quantity"):
        quantities.parse(text)


@pytest.mark.parametrize(
    ("text", "milli", "whole"),
    [
        ("1", 1000, 1),
        ("100m", 100, 1),
        ("0.1", 100, 1),
        ("1.5", 1500, 2),
        ("1n", 1, 1),
        ("0", 0, 0),
    ],
)
def test_rounding_is_up(text: str, milli: int, whole: int) -> None:
    assert quantities.milli(text) == milli
    assert quantities.whole(text) == whole


def pod(containers: list[Json], init: list[Json] | None = None, **spec: object) -> Json:
    def container(requests: Json) -> Json:
        restart = requests.pop("restartPolicy", None)
        body: Json = {"name": "c", "resources": {"requests": requests}}
        if restart:
            body["restartPolicy"] = restart
        return body

    return {
        "spec": {
            "containers": [container(dict(c)) for c in containers],
            "initContainers": [container(dict(c)) for c in init or []],
            **spec,
        }
    }


@pytest.mark.parametrize(
    ("name", "body", "cpu", "memory", "scalars"),
    [
        ("sum of containers", pod([{"cpu": "1"}, {"cpu": "500m", "memory": "1Gi"}]), 1500, GI, {}),
        ("init container larger", pod([{"cpu": "1"}], [{"cpu": "3"}]), 3000, 0, {}),
        ("init container smaller", pod([{"cpu": "2"}], [{"cpu": "1"}]), 2000, 0, {}),
        (
            "sidecar adds to the sum and to later init containers",
            pod([{"cpu": "1"}], [{"cpu": "1", "restartPolicy": "Always"}, {"cpu": "2500m"}]),
            3500,
            0,
            {},
        ),
        (
            "overhead added",
            pod([{"cpu": "1"}], overhead={"cpu": "250m", "memory": "64Mi"}),
            1250,
            64 * 2**20,
            {},
        ),
        (
            "extended resources and hugepages counted, unknown names dropped",
            pod([{"example.com/chip": "2", "hugepages-2Mi": "4Mi", "bogus": "1"}]),
            0,
            0,
            {"example.com/chip": 2, "hugepages-2Mi": 4 * 2**20},
        ),
    ],
)
def test_demand(name: str, body: Json, cpu: int, memory: int, scalars: dict[str, int]) -> None:
    demand = podrequests.demand(body)
    assert (demand.milli_cpu, demand.memory, dict(demand.scalars)) == (cpu, memory, scalars), name


def test_nonzero_defaults_per_container() -> None:
    demand = podrequests.demand(pod([{}, {"cpu": "1"}, {"memory": "1Gi"}]))
    assert demand.milli_cpu == 1000
    assert demand.nonzero_milli_cpu == 100 + 1000 + 100
    assert demand.nonzero_memory == 2 * 200 * 2**20 + GI
    assert demand.requests_nothing() is False
    assert podrequests.demand(pod([{}])).requests_nothing() is True


def test_host_ports() -> None:
    body = {
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "ports": [
                        {"containerPort": 80, "hostPort": 8080},
                        {
                            "containerPort": 53,
                            "hostPort": 53,
                            "protocol": "UDP",
                            "hostIP": "10.0.0.1",
                        },
                        {"containerPort": 9090},
                    ],
                }
            ]
        }
    }
    ports = podrequests.demand(body).host_ports
    assert ports == (
        podrequests.HostPort("TCP", "0.0.0.0", 8080),
        podrequests.HostPort("UDP", "10.0.0.1", 53),
    )
    assert ports[0].conflicts(podrequests.HostPort("TCP", "10.0.0.2", 8080))
    assert not ports[1].conflicts(podrequests.HostPort("UDP", "10.0.0.2", 53))
    assert not ports[0].conflicts(podrequests.HostPort("UDP", "0.0.0.0", 8080))


def test_a_bad_request_names_the_field() -> None:
    with pytest.raises(errors.PodSpecError) as caught:
        podrequests.demand(pod([{"cpu": "1"}, {"memory": "lots"}]))
    assert caught.value.field == "spec.containers[1].resources.requests.memory"
    assert caught.value.value == "lots"
    assert "'lots' is not a quantity" in str(caught.value)


def test_resource_names_cover_limits_and_init_containers() -> None:
    body = {
        "spec": {
            "containers": [{"name": "c", "resources": {"limits": {"example.com/a": "1"}}}],
            "initContainers": [{"name": "i", "resources": {"requests": {"example.com/b": "1"}}}],
        }
    }
    assert podrequests.resource_names(body) == {"example.com/a", "example.com/b"}


@pytest.mark.parametrize(
    ("name", "extended"),
    [
        ("example.com/chip", True),
        ("huawei.com/Ascend310P", True),
        ("cpu", False),
        ("kubernetes.io/x", False),
    ],
)
def test_extended_resource_names(name: str, extended: bool) -> None:
    assert podrequests.is_extended(name) is extended
