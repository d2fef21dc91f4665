"""vnpu's device plugin and exporter under HAMi's own scheduler and webhook (the operator
guide's "Topology 3"), as users run them today.

``vnpu-sandbox up --scheduler hami`` runs HAMi's extender (``hami-scheduler``, built from
HAMi's pinned source by ``make peers-bin``) and the kube-scheduler of HAMi's chart, with the
RBAC, kube-scheduler configuration and webhook of HAMi's chart rendered with
``deploy/peers/hami-values.yaml``, and vnpu's chart rendered with
``deploy/helm/vnpu/values-hami.yaml`` (vnpu's device ConfigMap, loaded unchanged by HAMi).
vnpu-scheduler does not run: HAMi's webhook routes NPU pods that name no scheduler to
``hami-scheduler`` and rounds their memory to a template; HAMi's extender decides the chips;
vnpu's device plugin creates what it decided and refuses what the chip cannot hold.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from vnpu_core import protocol
from vnpu_npu.sim import backend as sim_backend
from vnpu_sandbox.platform import kubectl, layout

CLUSTER = """\
nodes:
  - {name: duo, chip: 310P3, chips: 4, server: 300i-duo}
  - {name: train, chip: 910A, chips: 8, server: 910a-8}
"""
PEER = "hami"
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
Json = dict[str, Any]

CW = "Ascend310P"
TRAIN_CW = "Ascend910A"
NODES = ("duo", "train")
NO_WEBHOOK = {"hami.io/webhook": "ignore"}
"""The label HAMi's webhook skips a pod for (the chart's objectSelector)."""


def _pod(
    name: str, limits: dict[str, int], scheduler: str | None = None, labels: Json | None = None
) -> Json:
    spec: Json = {
        "containers": [{"name": "main", "image": "ascend/infer", "resources": {"limits": limits}}]
    }
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    metadata: Json = {"name": name, "namespace": "default"}
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _apply(sandbox: Any, *documents: Json) -> None:
    sandbox.apply(yaml.safe_dump_all(documents))


def _devices(pod: Json, cw: str) -> list[protocol.DeviceEntry]:
    annotations = pod["metadata"]["annotations"]
    return list(
        protocol.decode_devices(
            protocol.allocated_key(cw), annotations[protocol.allocated_key(cw)]
        )[0]
    )


def test_the_seed_pod_is_routed_rounded_and_runs_on_a_vnpu(sandbox: Any) -> None:
    _apply(sandbox, _pod("seed", {f"huawei.com/{CW}": 1, f"huawei.com/{CW}-memory": 4096}))
    pods = sandbox.wait_for(
        lambda: sandbox.running({"seed"}), "seed Running", 60, explain=sandbox.describe_pods
    )
    seed = pods["seed"]
    # HAMi's webhook routed it and rounded 4096 MiB up to vir02's 6144.
    assert seed["spec"]["schedulerName"] == "hami-scheduler"
    limits = seed["spec"]["containers"][0]["resources"]["limits"]
    assert limits[f"huawei.com/{CW}-memory"] == "6144"
    assert [d.memory_mib for d in _devices(seed, CW)] == [6144]
    assert [v.template for v in sandbox.vnpus("duo")] == ["vir02"]

    def exported() -> bool:
        text = sandbox.metrics("duo")
        return bool(re.search(r'vnpu_allocation_info\{[^}]*pod="seed"', text))

    sandbox.wait_for(exported, "the duo exporter to count the seed's vNPU", 30)
    sandbox.delete_pods(NODES)
    sandbox.wait_for(
        lambda: "vnpu_allocation_info{" not in sandbox.metrics("duo"),
        "the exporter back to zero",
        30,
    )


def test_vnpus_pack_to_the_chip_budget_and_the_next_one_waits(sandbox: Any) -> None:
    pods = [
        _pod(f"infer-{i}", {f"huawei.com/{CW}": 1, f"huawei.com/{CW}-memory": 6144})
        for i in range(13)
    ]
    _apply(sandbox, *pods[:12])
    names = {p["metadata"]["name"] for p in pods[:12]}
    sandbox.wait_for(
        lambda: sandbox.running(names), "12 vir02 pods Running", 120,
        explain=sandbox.describe_pods,
    )  # fmt: skip
    per_chip: dict[int, int] = {}
    for vnpu in sandbox.vnpus("duo"):
        per_chip[vnpu.phy_id] = per_chip.get(vnpu.phy_id, 0) + 1
    assert sorted(per_chip.values()) == [3, 3, 3, 3], per_chip
    _apply(sandbox, pods[12])

    def refused() -> str:
        events = sandbox.ctl.items(
            ["get", "events", "--field-selector", "involvedObject.name=infer-12"]
        )
        found = [e["message"] for e in events if e.get("reason") == "FailedScheduling"]
        return found[-1] if found else ""

    sandbox.wait_for(refused, "infer-12 refused by kube-scheduler", 60)
    assert not sandbox.pods()["infer-12"]["spec"].get("nodeName")
    assert len(sandbox.vnpus("duo")) == 12
    sandbox.delete_pods(NODES)


def test_a_request_larger_than_the_chip_is_refused_at_creation(sandbox: Any) -> None:
    path = sandbox.write(
        yaml.safe_dump(_pod("huge", {f"huawei.com/{CW}": 1, f"huawei.com/{CW}-memory": 30000}))
    )
    with pytest.raises(kubectl.KubectlError, match="30000"):
        sandbox.ctl.run(["apply", "-f", str(path)])
    assert "huge" not in sandbox.pods()
    assert sandbox.vnpus("duo") == []


def test_without_hamis_webhook_the_device_plugin_holds_the_chip_budget(sandbox: Any) -> None:
    # Not rounded by the webhook, 4000 MiB is what HAMi accounts per pod (five fit a chip's
    # 21527 in its view), while it writes the template that holds it, vir02 (6144 MiB: three
    # fit the chip). vnpu's device plugin refuses what the chip cannot hold: no over-commit.
    pods = [
        _pod(f"raw-{i}", {f"huawei.com/{CW}": 1, f"huawei.com/{CW}-memory": 4000},
             scheduler="hami-scheduler", labels=NO_WEBHOOK)
        for i in range(15)
    ]  # fmt: skip
    _apply(sandbox, *pods)

    def settled() -> dict[str, str]:
        phases = {n: p.get("status", {}).get("phase", "") for n, p in sandbox.pods().items()}
        done = all(phase in ("Running", "Failed") for phase in phases.values())
        return phases if len(phases) == 15 and done else {}

    phases = sandbox.wait_for(settled, "the 15 pods Running or Failed", 120,
                              explain=sandbox.describe_pods)  # fmt: skip
    per_chip: dict[int, int] = {}
    for vnpu in sandbox.vnpus("duo"):
        assert vnpu.template == "vir02"
        per_chip[vnpu.phy_id] = per_chip.get(vnpu.phy_id, 0) + 1
    assert max(per_chip.values()) <= 3, per_chip
    running = [n for n, phase in phases.items() if phase == "Running"]
    assert len(running) == sum(per_chip.values())
    assert len(running) <= 12
    sandbox.delete_pods(NODES)


def test_whole_chips_are_kept_to_one_ring(sandbox: Any) -> None:
    _apply(sandbox, _pod("pair", {f"huawei.com/{TRAIN_CW}": 2}))
    pods = sandbox.wait_for(
        lambda: sandbox.running({"pair"}), "pair Running", 60, explain=sandbox.describe_pods
    )
    chips = sim_backend.SimBackend(layout.Layout.at(sandbox.directory).node("train").sim).chips()
    phy = {chip.uuid: chip.phy_id for chip in chips}
    rings = {phy[d.uuid] // 4 for d in _devices(pods["pair"], TRAIN_CW)}
    assert len(rings) == 1, rings  # 910A: HCCS rings of chips 0-3 and 4-7
    assert sandbox.vnpus("train") == []
    sandbox.delete_pods(NODES)


def test_a_restart_of_hamis_scheduler_with_npu_pods_pending_loses_no_pod(sandbox: Any) -> None:
    extender = sandbox.stop("hami-scheduler")
    # While HAMi's extender is down, kube-scheduler's filter calls fail and the pods wait.
    # (Its webhook, served by the same process, fails open: a pod that names no scheduler is
    # admitted unrouted then; these name hami-scheduler and ask a template's memory.)
    pods = [
        _pod(f"waiting-{i}", {f"huawei.com/{CW}": 1, f"huawei.com/{CW}-memory": 6144},
             scheduler="hami-scheduler")
        for i in range(4)
    ]  # fmt: skip
    _apply(sandbox, *pods)

    def waiting() -> bool:
        events = sandbox.ctl.items(["get", "events", "--field-selector", "reason=FailedScheduling"])
        return any(e["involvedObject"]["name"].startswith("waiting-") for e in events)

    sandbox.wait_for(
        waiting, "kube-scheduler failing to reach HAMi", 60, explain=sandbox.describe_pods
    )
    assert not [p for p in sandbox.pods().values() if p["spec"].get("nodeName")]
    sandbox.start(extender)
    names = {p["metadata"]["name"] for p in pods}
    running = sandbox.wait_for(
        lambda: sandbox.running(names), "the 4 pods Running after the restart", 120,
        explain=sandbox.describe_pods,
    )  # fmt: skip
    for name in names:
        assert [d.memory_mib for d in _devices(running[name], CW)] == [6144]
    assert len(sandbox.vnpus("duo")) == 4
    sandbox.delete_pods(NODES)


ROOT = Path(__file__).resolve().parents[2]


def test_the_operator_guide_installs_hami_with_the_values_these_tests_use() -> None:
    guide = (ROOT / "docs" / "operator-guide.md").read_text(encoding="utf-8")
    section = guide.split("## Topology 3:", 1)[1].split("\n## ", 1)[0]
    assert "-f deploy/peers/hami-values.yaml" in section
    assert "-f deploy/helm/vnpu/values-hami.yaml" in section
    values = yaml.safe_load((ROOT / "deploy" / "helm" / "vnpu" / "values-hami.yaml").read_text())
    assert (
        "system:serviceaccount:kube-system:hami-scheduler"
        in values["admissionPolicy"]["trustedUsers"]
    )
