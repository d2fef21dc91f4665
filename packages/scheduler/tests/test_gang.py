"""PodGroup members: each filter places the member on one node and reserves its chips there.

kube-scheduler's GangScheduling places every member of a PodGroup before it binds any, and
the extender sees none of the members placed before. Here the filter of each member passes
one node and keeps the member's request there until its bind: the next member, and any other
pod, is fitted behind it, so the members never share chips and each bind finds its chips
free. Other replicas read the reservation from the pod's ``vnpu.io/reserved`` annotation.
"""

from __future__ import annotations

from typing import Any

import pytest

from vnpu_core import requests
from vnpu_scheduler import gang, inflight

WORD = "Ascend910A"
RESERVED = gang.RESERVED_KEY


def _member(make: Any, name: str, group: str = "train", count: int = 1) -> dict[str, Any]:
    pod: dict[str, Any] = make.npu_pod(name, WORD, count=count)
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def _filter(scheduler: Any, kube: Any, name: str, nodes: list[str]) -> dict[str, Any]:
    answer: dict[str, Any] = scheduler.post(
        "filter", {"Pod": kube.pod(name), "NodeNames": nodes}
    ).json()
    return answer


def _bind(scheduler: Any, kube: Any, name: str, node: str) -> str:
    pod = kube.pod(name)
    body = {"PodName": name, "PodNamespace": kube.namespace, "PodUID": pod["metadata"]["uid"]}
    error: str = scheduler.post("bind", body | {"Node": node}).json()["Error"]
    return error


def _node(make: Any, name: str, chips: int) -> dict[str, Any]:
    node: dict[str, Any] = make.node(name, WORD, chips, count=15, devmem=32768, devcore=30)
    return node


def test_members_fill_one_node_then_the_next_and_every_bind_finds_its_chips(
    kube: Any, make: Any, start_scheduler: Any
) -> None:
    # No device plugin here to release each node lock after its Allocate: the binds do.
    scheduler = start_scheduler(release_lock_after_bind=True)
    kube.add_node(_node(make, "n1", 4))
    kube.add_node(_node(make, "n2", 2))
    members = [f"m{i}" for i in range(7)]
    for name in members:
        kube.add_pod(_member(make, name))
    kube.add_pod(make.npu_pod("solo", WORD))

    placed = {}
    for name in members[:6]:
        answer = _filter(scheduler, kube, name, ["n1", "n2"])
        (placed[name],) = answer["NodeNames"]  # one node, the one reserved
    # A gang stays together: the node best-fit picks first (the smaller one, n2) until it
    # is full, then the next.
    assert [placed[m] for m in members[:6]] == ["n2"] * 2 + ["n1"] * 4

    # Six chips are reserved: a seventh member, and any other pod, finds none.
    for name in ("m6", "solo"):
        refused = _filter(scheduler, kube, name, ["n1", "n2"])
        assert refused["NodeNames"] == [], name
        assert set(refused["FailedNodes"]) == {"n1", "n2"}
    # A member filtered again is not fitted behind its own reservation.
    assert _filter(scheduler, kube, "m0", ["n1", "n2"])["NodeNames"] == [placed["m0"]]

    # The other replicas learn the reservations from the pods.
    def written() -> bool:
        return all(
            (kube.pod(m)["metadata"].get("annotations") or {})
            .get(RESERVED, "")
            .startswith(placed[m] + " ")
            for m in members[:6]
        )

    scheduler.wait_for(written)
    assert scheduler.sample("vnpu_scheduler_gang_reservations_total") >= 6

    for name in reversed(members[:6]):  # in any order: each fits behind the others
        assert _bind(scheduler, kube, name, placed[name]) == "", name
    assert not scheduler.service.in_flight.by_node()


def test_a_pod_outside_the_gang_cannot_bind_to_a_reserved_chip(
    kube: Any, make: Any, scheduler: Any
) -> None:
    kube.add_node(_node(make, "n1", 2))
    kube.add_pod(_member(make, "m0"))
    kube.add_pod(make.npu_pod("both", WORD, count=2))
    assert _filter(scheduler, kube, "m0", ["n1"])["NodeNames"] == ["n1"]

    # kube-scheduler may still send it here (its filter ran before, or on another replica).
    error = _bind(scheduler, kube, "both", "n1")
    assert error == (
        f"{WORD}: no 2 free whole chips (asked 2, 1 of 2 chips are free)"
        " (behind 1 reserved gang member(s))"
    )
    assert _bind(scheduler, kube, "m0", "n1") == ""


def test_a_reservation_no_bind_claims_ends_at_its_expiry(
    kube: Any, make: Any, start_scheduler: Any
) -> None:
    scheduler = start_scheduler(lock_wait=1.0, bind_timeout=4.0, gang_reservation=5.0)
    kube.add_node(_node(make, "n1", 1))
    kube.add_pod(_member(make, "m0"))
    kube.add_pod(make.npu_pod("later", WORD))
    assert _filter(scheduler, kube, "m0", ["n1"])["NodeNames"] == ["n1"]
    assert _filter(scheduler, kube, "later", ["n1"])["NodeNames"] == []
    # The gang never bound (too few places for the rest of it): the chip comes back.
    scheduler.wait_for(lambda: _filter(scheduler, kube, "later", ["n1"])["NodeNames"] == ["n1"])


def test_another_replica_fits_behind_the_reservation_it_read_from_the_pod(
    kube: Any, make: Any, start_scheduler: Any
) -> None:
    first, second = start_scheduler(), start_scheduler()
    kube.add_node(_node(make, "n1", 2))
    kube.add_pod(_member(make, "m0"))
    kube.add_pod(make.npu_pod("both", WORD, count=2))
    assert _filter(second, kube, "both", ["n1"])["NodeNames"] == ["n1"]
    assert _filter(first, kube, "m0", ["n1"])["NodeNames"] == ["n1"]
    second.wait_for(lambda: _filter(second, kube, "both", ["n1"])["NodeNames"] == [])
    assert _bind(second, kube, "both", "n1").endswith("(behind 1 reserved gang member(s))")
    assert _bind(second, kube, "m0", "n1") == ""  # the member binds on either replica
    second.wait_for(lambda: not second.service.in_flight.reserved("n1", ""))


def test_reservations_expire_and_end_with_the_bind() -> None:
    now = [100.0]
    record = inflight.InFlight(clock=lambda: now[0])
    request = requests.PodRequest("ns", "m0", (), ())
    record.reserve("n1", "ns/m0", request, "ns/train", 10)
    record.reserve("n2", "ns/m1", request, "ns/train", 20)
    assert record.members("ns/train") == {"n1": 1, "n2": 1}
    assert record.by_node() == {"n1": (("ns/m0", request),), "n2": (("ns/m1", request),)}
    assert record.by_node("ns/m0") == {"n2": (("ns/m1", request),)}
    assert record.reserved("n1", "ns/other") == (("ns/m0", request),)
    now[0] = 110.0
    assert record.by_node() == {"n2": (("ns/m1", request),)}
    with record.holding("n2", "ns/m1", request):  # its bind: counted once, not twice
        assert record.by_node("ns/x") == {"n2": (("ns/m1", request),)}
    assert record.by_node() == {}
    assert record.members("ns/train") == {}


@pytest.mark.parametrize(
    ("value", "expected"),
    [("n1 1700000000", ("n1", 1700000000.0)), ("n1", None), ("n1 soon", None), (7, None)],
)
def test_the_annotation_names_a_node_and_an_expiry(value: object, expected: object) -> None:
    assert gang.decode(value) == expected
    assert gang.decode(gang.encode("n1", 1699999999.2)) == ("n1", 1700000000.0)


def test_only_pods_naming_a_pod_group_are_gang_members() -> None:
    pod = {"metadata": {"namespace": "ml"}, "spec": {"schedulingGroup": {"podGroupName": "g"}}}
    assert gang.group_of(pod) == "ml/g"
    assert gang.group_of({"metadata": {}, "spec": {}}) == ""
    bound = {"spec": {"nodeName": "n1"}, "metadata": {"annotations": {RESERVED: "n1 5"}}}
    assert gang.reserved(bound) is None
