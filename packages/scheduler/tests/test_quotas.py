"""NPU quotas through the running scheduler against kube-apiserver: filter, bind, admission.

ResourceQuotas and the tenants ConfigMap are created through the API as an operator would;
the scheduler reads them by list+watch and polling. Two scheduler processes binding at once
never take a namespace past its quota. The namespaces the quotas and teams are about are the
test's own extra ones (``Kube.add_namespace``), so their names carry the test's.
"""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import kubernetes
import pytest

from vnpu_core import catalog, holdings, protocol

Json = dict[str, Any]
MEMORY = "limits.huawei.com/Ascend310P-memory"


def _quota(kube: Any, namespace: str, hard: dict[str, str], name: str = "npu") -> None:
    body = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"hard": hard},
    }
    kube.core.create_namespaced_resource_quota(namespace, body)


def _namespace(kube: Any, suffix: str) -> str:
    name: str = kube.add_namespace(suffix)
    return name


def _holder(make: Any, name: str, namespace: str, devices: str, runtime: str) -> Json:
    pod: Json = make.holder(name, "n1", devices, runtime=runtime)
    pod["metadata"]["namespace"] = namespace
    return pod


def _vir02(chip: int) -> tuple[str, str]:
    uuid = f"n1-Ascend310P-{chip}"
    return f"{uuid},Ascend310P,6144,0:;", f'[{{"UUID":"{uuid}","temp":"vir02","memory":6144}}]'


def _filter(scheduler: Any, pod: Json, nodes: list[str]) -> Json:
    answer: Json = scheduler.post("filter", {"Pod": pod, "NodeNames": nodes}).json()
    return answer


def test_a_pod_over_its_namespace_quota_is_refused_naming_the_quota(
    kube: Any, make: Any, scheduler: Any
) -> None:
    team = _namespace(kube, "team-a")
    kube.add_node(make.node("n1", chips=4))
    devices, runtime = _vir02(0)
    kube.add_pod(_holder(make, "running", team, devices, runtime))
    _quota(kube, team, {MEMORY: "16384"})

    def counted() -> bool:
        usage = scheduler.service.cache.namespace_usage().get(team, holdings.ZERO)
        return scheduler.service.quotas.book.limited(team) and bool(usage)

    scheduler.wait_for(counted)
    fits = make.npu_pod("fits", count=1, memory=6000, namespace=team)
    assert _filter(scheduler, fits, ["n1"])["NodeNames"] == ["n1"]  # 6144 + 6144 <= 16384
    big = make.npu_pod("big", count=1, memory=12000, namespace=team)
    answer = _filter(scheduler, big, ["n1"])
    assert answer["NodeNames"] == []
    message = answer["FailedAndUnresolvableNodes"]["n1"]
    assert message == (
        f"quota {team}/npu limits.huawei.com/Ascend310P-memory: "
        "used 6144 + asked 12288 > limit 16384 MiB"
    )
    # Another namespace is not limited by it.
    other = make.npu_pod("other", count=1, memory=12000)
    assert _filter(scheduler, other, ["n1"])["NodeNames"] == ["n1"]
    text = scheduler.http.get(f"{scheduler.url}/metrics").text
    labels = f'namespace="{team}",quota="{team}/npu",resource="{MEMORY}"'
    assert f"vnpu_scheduler_quota_limit{{{labels}}} 16384.0" in text
    assert f"vnpu_scheduler_quota_used{{{labels}}} 6144.0" in text
    assert 'vnpu_scheduler_quota_refusals_total{rule="resource-quota",verb="filter"} 1.0' in text


def test_pods_placed_around_the_scheduler_count_and_are_named_by_the_metrics(
    kube: Any, make: Any, scheduler: Any
) -> None:
    """A pod with a preset nodeName (left to default-scheduler) counts against the quota and is
    named as unchecked; the pod vnpu placed is not, nor a rogue pod in a namespace without an
    NPU quota."""
    team = _namespace(kube, "capped")
    free = _namespace(kube, "free")
    kube.add_node(make.node("n1", chips=4))
    placed = _holder(make, "placed", team, *_vir02(0))
    placed["spec"]["schedulerName"] = "vnpu-scheduler"
    kube.add_pod(placed)
    kube.add_pod(_holder(make, "rogue", team, *_vir02(1)))
    kube.add_pod(_holder(make, "elsewhere", free, *_vir02(2)))
    _quota(kube, team, {MEMORY: "6144"})
    labels = f'namespace="{team}",quota="{team}/npu",resource="{MEMORY}"'

    seen: list[str] = []

    def scraped() -> bool:
        seen.append(scheduler.http.get(f"{scheduler.url}/metrics").text)
        return f"vnpu_scheduler_quota_used{{{labels}}} 12288.0" in seen[-1]

    scheduler.wait_for(scraped)
    text = seen[-1]
    assert f"vnpu_scheduler_quota_limit{{{labels}}} 6144.0" in text
    unchecked = [
        line for line in text.splitlines() if line.startswith("vnpu_scheduler_quota_unchecked_pod{")
    ]
    assert unchecked == [
        f'vnpu_scheduler_quota_unchecked_pod{{namespace="{team}",pod="rogue",'
        'reason="other_scheduler"} 1.0'
    ]


def test_a_multi_chip_pod_counts_memory_times_chips(kube: Any, make: Any, scheduler: Any) -> None:
    train = _namespace(kube, "train")
    kube.add_node(make.node("n1", chips=8, word="Ascend910B3"))
    model = catalog.BUILTIN.by_common_word("Ascend910B3")
    assert model is not None
    per_chip = model.memory_allocatable_mib
    _quota(kube, train, {"limits.huawei.com/Ascend910B3-memory": str(3 * per_chip)})
    scheduler.wait_for(lambda: scheduler.service.quotas.book.limited(train))
    two = make.npu_pod("two", "Ascend910B3", count=2, namespace=train)
    assert _filter(scheduler, two, ["n1"])["NodeNames"] == ["n1"]
    four = make.npu_pod("four", "Ascend910B3", count=4, namespace=train)
    message = _filter(scheduler, four, ["n1"])["FailedAndUnresolvableNodes"]["n1"]
    assert f"used 0 + asked {4 * per_chip} > limit {3 * per_chip} MiB" in message


def test_the_webhook_denies_a_request_that_alone_exceeds_the_quota(
    kube: Any, make: Any, scheduler: Any
) -> None:
    small = _namespace(kube, "small")
    _quota(kube, small, {"limits.vnpu.io/aicore": "4"})
    scheduler.wait_for(lambda: scheduler.service.quotas.book.limited(small))
    pod = make.pod("greedy", count=2, namespace=small)  # two whole 310P chips: 16 AI cores
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u1", "operation": "CREATE", "namespace": small, "object": pod},
    }
    answer = scheduler.post("validate", review).json()["response"]
    assert answer["allowed"] is False
    assert "alone exceeds its NPU quota" in answer["status"]["message"]
    assert (
        "limits.vnpu.io/aicore: used 0 + asked 16 > limit 4 AI cores" in answer["status"]["message"]
    )
    fine = make.pod("fine", count=1, memory=3000, namespace=small)  # vir01: 1 AI core
    review["request"]["object"] = fine
    assert scheduler.post("validate", review).json()["response"]["allowed"] is True


def test_an_unreadable_quota_holds_its_namespace_back_and_nothing_else(
    kube: Any, make: Any, scheduler: Any
) -> None:
    typo = _namespace(kube, "typo")
    kube.add_node(make.node("n1", chips=2))
    _quota(kube, typo, {"limits.vnpu.io/aicores": "4"})  # no such unit
    scheduler.wait_for(lambda: scheduler.service.quotas.book.limited(typo))
    pod = make.npu_pod("p", count=1, memory=3000, namespace=typo)
    message = _filter(scheduler, pod, ["n1"])["FailedAndUnresolvableNodes"]["n1"]
    assert f"quota {typo}/npu cannot be read" in message
    assert 'spec.hard["limits.vnpu.io/aicores"]' in message
    assert _filter(scheduler, make.npu_pod("q", count=1, memory=3000), ["n1"])["NodeNames"] == [
        "n1"
    ]
    assert scheduler.http.get(f"{scheduler.url}/readyz").status_code == 200


def _tenants(kube: Any, text: str) -> str:
    """Write the tenants ConfigMap to the test's namespace; its ``namespace/name``."""
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "vnpu-tenants", "namespace": kube.namespace},
        "data": {"tenants.yaml": text},
    }
    try:
        kube.core.create_namespaced_config_map(kube.namespace, body)
    except kubernetes.client.exceptions.ApiException:
        kube.core.replace_namespaced_config_map("vnpu-tenants", kube.namespace, body)
    return f"{kube.namespace}/vnpu-tenants"


TEAMS = """\
teams:
  - name: vision
    namespaces: [VISION]
    weight: 1
    nominal: {aicore: 8}
    borrowingLimit: {aicore: 8}
  - name: speech
    namespaces: [SPEECH]
    weight: 1
    nominal: {aicore: 8}
"""


def _teams(kube: Any) -> str:
    """``TEAMS`` with the test's namespaces for the two teams."""
    text = TEAMS.replace("VISION", kube.namespaced("vision"))
    return text.replace("SPEECH", kube.namespaced("speech"))


def test_teams_borrow_idle_capacity_up_to_their_limit(
    kube: Any, make: Any, start_scheduler: Any
) -> None:
    vision, speech = _namespace(kube, "vision"), _namespace(kube, "speech")
    kube.add_node(make.node("n1", chips=4))
    scheduler = start_scheduler(tenants_config=_tenants(kube, _teams(kube)))
    assert scheduler.service.quotas.book.teams.team_of(vision) is not None
    whole = make.npu_pod("whole", count=1, namespace=vision)  # 8 AI cores: its nominal
    assert _filter(scheduler, whole, ["n1"])["NodeNames"] == ["n1"]
    # vision holds one whole chip; a second borrows speech's idle nominal: allowed.
    kube.add_pod(_holder(make, "held", vision, "n1-Ascend310P-0,Ascend310P,21527,0:;", "[]"))
    scheduler.wait_for(lambda: bool(scheduler.service.cache.namespace_usage().get(vision)))
    assert _filter(scheduler, whole, ["n1"])["NodeNames"] == ["n1"]
    # Beyond nominal + borrowingLimit (16): refused by the team limit.
    three = make.npu_pod("three", count=2, namespace=vision)
    message = _filter(scheduler, three, ["n1"])["FailedAndUnresolvableNodes"]["n1"]
    assert "team vision aicore: used 8 + asked 16 > limit 16 AI cores" in message
    # speech uses its nominal: nothing idle is left to lend.
    kube.add_pod(_holder(make, "sp", speech, "n1-Ascend310P-1,Ascend310P,21527,0:;", "[]"))
    scheduler.wait_for(lambda: bool(scheduler.service.cache.namespace_usage().get(speech)))
    message = _filter(scheduler, whole, ["n1"])["FailedAndUnresolvableNodes"]["n1"]
    assert "borrows idle capacity only" in message
    text = scheduler.http.get(f"{scheduler.url}/metrics").text
    assert 'vnpu_scheduler_team_used{team="vision",unit="aicore"} 8.0' in text
    assert 'vnpu_scheduler_team_nominal{team="vision",unit="aicore"} 8.0' in text
    assert 'vnpu_scheduler_team_limit{team="vision",unit="aicore"} 16.0' in text
    assert 'vnpu_scheduler_team_pending{team="vision",unit="aicore"}' in text
    assert 'vnpu_scheduler_team_weight{team="vision"} 1.0' in text
    # vision holds 8 of the cohort's 16 nominal AI cores, at weight 1.
    assert 'vnpu_scheduler_team_dominant_share{team="vision"} 0.5' in text
    assert (
        f'vnpu_scheduler_namespace_aicore_seconds_total{{namespace="{vision}",team="vision"}}'
        in text
    )


def test_a_bad_tenants_edit_keeps_the_last_good_teams(
    kube: Any, make: Any, start_scheduler: Any
) -> None:
    scheduler = start_scheduler(tenants_config=_tenants(kube, _teams(kube)))
    bad = _teams(kube).replace("weight: 1\n    nominal: {aicore: 8}\n", "weight: -1\n", 1)
    _tenants(kube, bad)

    def rejected() -> bool:
        return bool(scheduler.service.quotas.book.tenants_status.error)

    scheduler.wait_for(rejected)
    status = scheduler.service.quotas.book.tenants_status
    assert "weight" in status.error
    assert (
        scheduler.service.quotas.book.teams.team_of(kube.namespaced("vision")) is not None
    )  # kept
    ready = scheduler.http.get(f"{scheduler.url}/readyz").json()
    assert "weight" in ready["quotas"]["last_tenants_error"]
    assert (
        "vnpu_scheduler_tenants_config_ok 0.0"
        in scheduler.http.get(f"{scheduler.url}/metrics").text
    )


def _schedule(client: httpx.Client, url: str, pod: Json, nodes: list[str]) -> str:
    meta = pod["metadata"]
    for _ in range(3):
        fitting = client.post(f"{url}/filter", json={"Pod": pod, "NodeNames": nodes}).json()
        names = fitting["NodeNames"]
        if not names:
            return ""
        body = {
            "PodName": meta["name"],
            "PodNamespace": meta["namespace"],
            "PodUID": meta["uid"],
            "Node": random.Random(meta["name"]).choice(names),
        }
        if client.post(f"{url}/bind", json=body).json()["Error"] == "":
            return body["Node"]
    return ""


def test_two_replicas_binding_at_once_never_pass_the_quota(
    kube: Any, make: Any, plugin: Any, replicas: list[str]
) -> None:
    """40 pods of vir02 (6144 MiB) in a namespace whose quota holds 10 of them, bound by two
    scheduler processes at once on six roomy nodes: exactly 10 are bound."""
    busy = _namespace(kube, "busy")
    nodes = [f"node-{i}" for i in range(6)]
    for name in nodes:
        kube.add_node(make.node(name, chips=8))
    _quota(kube, busy, {MEMORY: str(10 * 6144)})
    created = [
        kube.add_pod(make.npu_pod(f"job-{i:02d}", count=1, memory=6000, namespace=busy))
        for i in range(40)
    ]
    with httpx.Client() as client:
        for url in replicas:  # both have seen the quota before the first filter
            tries = 0
            while f"{busy}/npu" not in client.get(f"{url}/metrics").text:
                tries += 1
                assert tries < 200, "the quota never reached a replica"
                time.sleep(0.05)

    def run(index: int) -> str:
        with httpx.Client(timeout=60) as client:
            return _schedule(client, replicas[index % 2], created[index], nodes)

    with ThreadPoolExecutor(16) as pool:
        placed = list(pool.map(run, range(len(created))))
    bound = [p for p in placed if p]
    assert len(bound) == 10
    pods = kube.core.list_namespaced_pod(busy).items
    on_nodes = [p for p in pods if p.spec.node_name]
    assert len(on_nodes) == 10
    memory = 0
    for pod in on_nodes:
        key = protocol.allocated_key("Ascend310P")
        devices = protocol.decode_devices(key, pod.metadata.annotations[key])
        memory += sum(d.memory_mib for c in devices for d in c)
    assert memory == 10 * 6144


@pytest.mark.parametrize("replicas", [["--no-quotas"]], indirect=True)
def test_quotas_can_be_turned_off(kube: Any, make: Any, replicas: list[str]) -> None:
    free = _namespace(kube, "free")
    kube.add_node(make.node("n1", chips=2))
    _quota(kube, free, {MEMORY: "1"})
    pod = kube.add_pod(make.npu_pod("p", count=1, memory=3000, namespace=free))
    with httpx.Client() as client:
        answer = client.post(f"{replicas[0]}/filter", json={"Pod": pod, "NodeNames": ["n1"]})
        assert answer.json()["NodeNames"] == ["n1"]
        assert "vnpu_scheduler_quota_limit" not in client.get(f"{replicas[0]}/metrics").text
