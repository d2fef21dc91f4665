"""DRA mode on the real control plane: kube-scheduler allocates the npu.vnpu.io driver's devices.

``vnpu-sandbox up --mode dra``: the DeviceClasses, vnpu's webhook in DRA mode, kube-scheduler
without the extender, and on each node the DRA driver (slices, kubelet plugin) instead of the
device plugin. The pods are written as for HAMi; the webhook renames what DRA serves.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from vnpu_sandbox.platform import kubectl, layout

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
MODE = "dra"
CLUSTER = """\
nodes:
  - {name: duo, chip: 310P3, chips: 4, server: 300i-duo}
  - {name: train, chip: 910A, chips: 8, server: 910a-8}
  - {name: soft, chip: 310P3, chips: 2, server: pcie, mode: soft}
"""
Json = dict[str, Any]


def _pod(name: str, limits: dict[str, str], annotations: dict[str, str] | None = None) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}},
        "spec": {
            "containers": [{"name": "main", "image": "ascend/app", "resources": {"limits": limits}}]
        },
    }


def _seen(sandbox: Any, node: str, name: str) -> Json:
    """What the simulated kubelet gave the pod's first container (env, CDI devices)."""
    path = (
        layout.Layout.at(sandbox.directory).node(node).kubelet_state
        / "pods"
        / f"default_{name}.json"
    )
    container: Json = yaml.safe_load(path.read_text(encoding="utf-8"))["containers"][0]
    return container


def _phase(sandbox: Any, name: str, namespace: str = "default") -> str:
    pod = sandbox.pods(namespace).get(name, {})
    return str((pod.get("status") or {}).get("phase", ""))


def test_the_seed_pod_runs_on_a_vnpu_the_driver_made_and_loses_it_when_deleted(
    sandbox: Any,
) -> None:
    """The Volcano article's pod, minus schedulerName: 4096 MiB of a 310P is a 6144 MiB vNPU."""
    sandbox.apply(
        yaml.safe_dump(
            _pod("seed", {"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "4096"})
        )
    )
    sandbox.wait_for(
        lambda: _phase(sandbox, "seed") == "Running",
        "the seed pod running",
        explain=sandbox.describe_pods,
    )
    pod = sandbox.pods()["seed"]
    assert pod["spec"]["nodeName"] == "duo"
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {
        "npu.vnpu.io/ascend310p-6144m": "1"
    }
    (vnpu,) = sandbox.vnpus("duo")
    assert vnpu.template in ("vir02", "vir02_1c")
    seen = _seen(sandbox, "duo", "seed")
    assert seen["env"]["ASCEND_VISIBLE_DEVICES"] == str(vnpu.vnpu_id)
    assert f"/dev/vdavinci{vnpu.vnpu_id}" in seen["cdiDeviceNodes"]

    sandbox.ctl.run(["delete", "pod", "seed"])
    sandbox.wait_for(lambda: sandbox.vnpus("duo") == [], "the seed pod's vNPU destroyed")


def test_twenty_nine_vir01_on_four_310p3_chips_run_twenty_eight(sandbox: Any) -> None:
    """Seven vir01 a chip (7 vNPU slots, 7 AI CPUs): the 29th waits with kube-scheduler's
    reason, and no chip goes over any budget."""
    pods = [
        _pod(f"v{i:02d}", {"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "3000"})
        for i in range(29)
    ]
    sandbox.apply(yaml.safe_dump_all(pods))

    def settled() -> bool:
        phases = [_phase(sandbox, p["metadata"]["name"]) for p in pods]
        return phases.count("Running") == 28

    sandbox.wait_for(settled, "28 vir01 pods running", timeout=180, explain=sandbox.describe_pods)
    waiting = [
        n
        for n, p in sandbox.pods().items()
        if n.startswith("v") and (p.get("status") or {}).get("phase") != "Running"
    ]
    assert len(waiting) == 1
    reasons = sandbox.ctl.items(
        [
            "get",
            "events",
            "--field-selector",
            f"involvedObject.name={waiting[0]},reason=FailedScheduling",
        ]
    )
    assert reasons, sandbox.describe_pods()
    vnpus = sandbox.vnpus("duo")
    assert sorted(v.template for v in vnpus) == ["vir01"] * 28
    per_chip: dict[int, int] = {}
    for v in vnpus:
        per_chip[v.phy_id] = per_chip.get(v.phy_id, 0) + 1
    assert per_chip == {0: 7, 1: 7, 2: 7, 3: 7}
    sandbox.ctl.run(["delete", "pod", *[p["metadata"]["name"] for p in pods], "--wait=false"])
    sandbox.wait_for(lambda: sandbox.vnpus("duo") == [], "the vir01 vNPUs destroyed", timeout=120)


def test_a_four_chip_910a_pod_gets_four_chips_of_one_ring(sandbox: Any) -> None:
    """One whole chip keeps huawei.com/Ascend910A (its DeviceClass serves it); four become a
    claim whose chips share one HCCS ring. With one chip taken, the ring that lacks it has
    three free chips, so the four must be the other ring."""
    sandbox.apply(yaml.safe_dump(_pod("one", {"huawei.com/Ascend910A": "1"})))
    sandbox.wait_for(
        lambda: _phase(sandbox, "one") == "Running",
        "one chip running",
        explain=sandbox.describe_pods,
    )
    assert sandbox.pods()["one"]["spec"]["containers"][0]["resources"]["limits"] == {
        "huawei.com/Ascend910A": "1"
    }
    (taken,) = (
        int(c) for c in _seen(sandbox, "train", "one")["env"]["ASCEND_VISIBLE_DEVICES"].split(",")
    )
    sandbox.apply(yaml.safe_dump(_pod("four", {"huawei.com/Ascend910A": "4"})))
    sandbox.wait_for(
        lambda: _phase(sandbox, "four") == "Running",
        "the four-chip pod running",
        explain=sandbox.describe_pods,
    )
    chips = {
        int(c) for c in _seen(sandbox, "train", "four")["env"]["ASCEND_VISIBLE_DEVICES"].split(",")
    }
    assert len(chips) == 4
    assert {c // 4 for c in chips} == {1 - taken // 4}, (taken, chips)
    assert sandbox.vnpus("train") == []  # whole chips make no vNPU
    sandbox.ctl.run(["delete", "pod", "one", "four"])


def test_soft_slices_share_a_chip_up_to_its_memory(sandbox: Any) -> None:
    """hami-core soft slices become claims on the soft devices' consumable capacity: 8192 MiB
    slices, two to a chip of 21527 MiB on two chips; the fifth waits with kube-scheduler's
    reason. Each container gets its quota and core share, and no vNPU is made."""
    soft = {"huawei.com/vnpu-mode": "hami-core"}
    limits = {
        "huawei.com/Ascend310P": "1",
        "huawei.com/Ascend310P-memory": "8192",
        "huawei.com/Ascend310P-core": "20",
    }
    pods = [_pod(f"s{i}", limits, soft) for i in range(5)]
    sandbox.apply(yaml.safe_dump_all(pods))

    def running() -> list[str]:
        return [
            p["metadata"]["name"]
            for p in pods
            if _phase(sandbox, p["metadata"]["name"]) == "Running"
        ]

    sandbox.wait_for(
        lambda: len(running()) == 4,
        "four soft pods running",
        timeout=120,
        explain=sandbox.describe_pods,
    )
    (waiting,) = {p["metadata"]["name"] for p in pods} - set(running())
    events = sandbox.ctl.items(
        [
            "get",
            "events",
            "--field-selector",
            f"involvedObject.name={waiting},reason=FailedScheduling",
        ]
    )
    assert events, sandbox.describe_pods()
    assert "claim" in events[-1]["message"], events[-1]
    chips: dict[str, int] = {}
    for name in running():
        pod = sandbox.pods()[name]
        assert pod["spec"]["nodeName"] == "soft"
        (claim,) = pod["spec"]["resourceClaims"]
        assert claim["resourceClaimTemplateName"].startswith("vnpu-ascend310p-soft-1x8192m-20c-")
        env = _seen(sandbox, "soft", name)["env"]
        assert env["NPU_MEM_QUOTA"] == "8192"
        assert env["NPU_PRIORITY"] == "20"
        chips[env["ASCEND_VISIBLE_DEVICES"]] = chips.get(env["ASCEND_VISIBLE_DEVICES"], 0) + 1
    assert sorted(chips.values()) == [2, 2]
    assert sandbox.vnpus("soft") == []
    sandbox.ctl.run(["delete", "pod", *[p["metadata"]["name"] for p in pods]])


def test_a_resourcequota_on_the_served_resource_holds_a_namespace_to_its_vnpus(
    sandbox: Any,
) -> None:
    """In DRA mode a pod's vNPU is the extended resource its DeviceClass serves, which
    kube-apiserver's own ResourceQuota counts at creation: the second 6144 MiB vNPU of a
    namespace allowed one is refused there, with the quota's words."""
    sandbox.ctl.run(["create", "namespace", "team-q"])
    sandbox.wait_for(
        lambda: bool(sandbox.ctl.items(["get", "serviceaccounts", "-n", "team-q"])),
        "team-q's default ServiceAccount",
    )
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "npu", "namespace": "team-q"},
        "spec": {"hard": {"requests.npu.vnpu.io/ascend310p-6144m": "1"}},
    }
    sandbox.apply(yaml.safe_dump(quota))
    limits = {"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "4096"}
    first, second = (_pod(name, limits) for name in ("q1", "q2"))
    for pod in (first, second):
        pod["metadata"]["namespace"] = "team-q"

    def quota_counted() -> bool:  # the quota controller has filled in its status
        found = sandbox.ctl.items(["get", "resourcequota", "-n", "team-q"])
        return bool(found and (found[0].get("status") or {}).get("hard"))

    sandbox.wait_for(quota_counted, "the quota's status")
    sandbox.apply(yaml.safe_dump(first))
    with pytest.raises(kubectl.KubectlError) as refused:
        sandbox.apply(yaml.safe_dump(second))
    assert "exceeded quota: npu" in str(refused.value)
    assert "requests.npu.vnpu.io/ascend310p-6144m=1" in str(refused.value)
    sandbox.wait_for(
        lambda: _phase(sandbox, "q1", "team-q") == "Running",
        "q1 running",
        explain=sandbox.describe_pods,
    )
    sandbox.ctl.run(["delete", "namespace", "team-q", "--wait=false"])
    sandbox.wait_for(lambda: sandbox.vnpus("duo") == [], "q1's vNPU destroyed")


def test_the_duo_exporter_names_a_dra_vnpu_pod_and_its_template(sandbox: Any) -> None:
    """The exporter reads PodResources' claim devices and the driver's claim ledger
    (--dra-state-dir): the pod's vNPU shows as vnpu_allocation_info with its pod, template and
    the vNPU id the driver recorded."""
    sandbox.apply(
        yaml.safe_dump(
            _pod("watched", {"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "4096"})
        )
    )
    sandbox.wait_for(
        lambda: _phase(sandbox, "watched") == "Running",
        "the watched pod running",
        explain=sandbox.describe_pods,
    )
    (vnpu,) = sandbox.vnpus("duo")

    def exported() -> str | None:
        for line in sandbox.metrics("duo").splitlines():
            if line.startswith("vnpu_allocation_info{") and 'pod="watched"' in line:
                return line
        return None

    line = sandbox.wait_for(exported, "the duo exporter to report the watched pod", 30)
    for label, value in (
        ("namespace", "default"),
        ("container", "main"),
        ("kind", "vnpu"),
        ("template", vnpu.template),
        ("vnpu", str(vnpu.vnpu_id)),
        ("chip", str(vnpu.phy_id)),
        ("attribution", "ledger"),
    ):
        assert f'{label}="{value}"' in line, line
    assert line.rsplit(" ", 1)[1] in ("1", "1.0"), line

    sandbox.ctl.run(["delete", "pod", "watched"])
    sandbox.wait_for(lambda: sandbox.vnpus("duo") == [], "the watched pod's vNPU destroyed")
