"""vnpu's device plugin and exporter under Volcano's own scheduler (the operator guide's
"Topology 2"), as users run it today.

``vnpu-sandbox up --scheduler volcano`` runs vc-scheduler and vc-controller-manager built
from Volcano's pinned source (``make peers-bin``), with the RBAC and configuration of
Volcano's chart rendered with ``deploy/peers/volcano-values.yaml`` (deviceshare in HAMi mode,
the settings the operator guide gives) and vnpu's chart rendered with
``deploy/helm/vnpu/values-volcano.yaml``. vnpu-scheduler does not run: Volcano decides which
chip and template each pod gets, vnpu's device plugin creates what it decided and refuses what
the hardware or the pod's own request does not allow.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from vnpu_core import protocol

CLUSTER = """\
nodes:
  - {name: duo, chip: 310P3, chips: 4, server: 300i-duo}
  - {name: train, chip: 910A, chips: 8, server: 910a-8}
"""
PEER = "volcano"
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
Json = dict[str, Any]

ROOT = Path(__file__).resolve().parents[2]
CW = "Ascend310P"
TRAIN_CW = "Ascend910A"
NODES = ("duo", "train")


def _pod(name: str, limits: dict[str, int], namespace: str = "default") -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulerName": "volcano",
            "containers": [
                {"name": "main", "image": "ascend/infer", "resources": {"limits": limits}}
            ],
        },
    }


def _apply(sandbox: Any, *documents: Json) -> None:
    sandbox.apply(yaml.safe_dump_all(documents))


def test_the_seed_pod_runs_on_a_vnpu_and_the_exporter_counts_it(sandbox: Any) -> None:
    _apply(sandbox, _pod("seed", {f"huawei.com/{CW}": 1, f"huawei.com/{CW}-memory": 4096}))
    pods = sandbox.wait_for(
        lambda: sandbox.running({"seed"}), "seed Running", 60, explain=sandbox.describe_pods
    )
    seed = pods["seed"]
    assert seed["spec"]["nodeName"] == "duo"
    annotations = seed["metadata"]["annotations"]
    # Volcano decided it: 4096 MiB rounded up to vir02 (6144 MiB), in HAMi's annotations.
    allocated = protocol.decode_devices(
        protocol.allocated_key(CW), annotations[protocol.allocated_key(CW)]
    )
    assert [d.memory_mib for d in allocated[0]] == [6144]
    assert '"vir02"' in annotations[protocol.runtime_key(CW)]
    assert [v.template for v in sandbox.vnpus("duo")] == ["vir02"]
    assert len(sandbox.ledger_records("duo")) == 1

    def exported() -> str | None:
        text = sandbox.metrics("duo")
        counted = re.search(r'vnpu_chip_vnpu_templates\{[^}]*template="vir02"[^}]*\} 1', text)
        owner = re.search(r'vnpu_allocation_info\{[^}]*pod="seed"', text)
        return text if counted and owner else None

    sandbox.wait_for(exported, "the duo exporter to count the seed's vNPU", 30)
    sandbox.delete_pods(NODES)
    sandbox.wait_for(
        lambda: "vnpu_allocation_info{" not in sandbox.metrics("duo"),
        "the exporter back to zero",
        30,
    )


def test_vnpus_pack_to_the_chip_budget_and_the_next_one_waits(sandbox: Any) -> None:
    # 310P3: 21527 MiB allocatable per chip; vir02 is 6144 MiB: three per chip, twelve on four.
    pods = [
        _pod(f"infer-{i}", {f"huawei.com/{CW}": 1, f"huawei.com/{CW}-memory": 6144})
        for i in range(13)
    ]
    _apply(sandbox, *pods[:12])
    names = {p["metadata"]["name"] for p in pods[:12]}
    sandbox.wait_for(
        lambda: sandbox.running(names),
        "12 vir02 pods Running",
        120,
        explain=sandbox.describe_pods,
    )
    per_chip: dict[int, int] = {}
    for vnpu in sandbox.vnpus("duo"):
        assert vnpu.template == "vir02"
        per_chip[vnpu.phy_id] = per_chip.get(vnpu.phy_id, 0) + 1
    assert sorted(per_chip.values()) == [3, 3, 3, 3], per_chip
    _apply(sandbox, pods[12])

    def unschedulable() -> bool:
        pod = sandbox.pods().get("infer-12", {})
        conditions = pod.get("status", {}).get("conditions") or []
        return any(
            c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions
        )

    sandbox.wait_for(unschedulable, "infer-12 unschedulable", 60, explain=sandbox.describe_pods)
    assert not sandbox.pods()["infer-12"]["spec"].get("nodeName")
    assert len(sandbox.vnpus("duo")) == 12
    sandbox.delete_pods(NODES)


def test_a_request_larger_than_any_chip_is_never_given_a_vnpu(sandbox: Any) -> None:
    # Volcano rounds 30000 MiB (more than a 310P3's 24576) to 0 MiB with the smallest template.
    _apply(sandbox, _pod("huge", {f"huawei.com/{CW}": 1, f"huawei.com/{CW}-memory": 30000}))

    def refused() -> str:
        pod = sandbox.pods().get("huge", {})
        if pod.get("status", {}).get("phase") != "Failed":
            return ""
        return str(pod["status"].get("message", ""))

    message = sandbox.wait_for(refused, "huge Failed", 60, explain=sandbox.describe_pods)
    assert "30000" in message, message
    assert "24576" in message, message
    events = sandbox.ctl.items(["get", "events", "--field-selector", "involvedObject.name=huge"])
    assert any("30000" in (e.get("message") or "") for e in events), events
    assert sandbox.vnpus("duo") == []
    assert sandbox.ledger_records("duo") == []
    sandbox.delete_pods(NODES)


def test_whole_chips_are_kept_to_one_ring(sandbox: Any) -> None:
    _apply(sandbox, _pod("pair", {f"huawei.com/{TRAIN_CW}": 2}))
    pods = sandbox.wait_for(
        lambda: sandbox.running({"pair"}), "pair Running", 60, explain=sandbox.describe_pods
    )
    annotations = pods["pair"]["metadata"]["annotations"]
    devices = protocol.decode_devices(
        protocol.allocated_key(TRAIN_CW), annotations[protocol.allocated_key(TRAIN_CW)]
    )[0]
    assert len(devices) == 2
    assert sandbox.vnpus("train") == []  # whole chips: no vNPU
    sandbox.delete_pods(NODES)


def _volcano_job(name: str, workers: int) -> Json:
    """The seed's Volcano Job: ``workers`` workers of one 910A chip, all or none."""
    container = {
        "name": "trainer",
        "image": "ascend/train",
        "resources": {"limits": {f"huawei.com/{TRAIN_CW}": 1}},
    }
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": workers,
            "queue": "default",
            "tasks": [
                {
                    "name": "worker",
                    "replicas": workers,
                    "template": {"spec": {"restartPolicy": "OnFailure", "containers": [container]}},
                }
            ],
        },
    }


def _job_pods(sandbox: Any, job: str) -> list[Json]:
    return [
        p
        for p in sandbox.pods().values()
        if p["metadata"].get("annotations", {}).get("volcano.sh/job-name") == job
    ]


def test_the_seed_volcano_job_runs_as_a_gang_and_a_larger_one_waits_whole(sandbox: Any) -> None:
    _apply(sandbox, _volcano_job("resnet", 4))

    def all_running() -> list[Json]:
        pods = _job_pods(sandbox, "resnet")
        running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
        return running if len(running) == 4 else []

    running = sandbox.wait_for(
        all_running, "resnet 4/4 Running", 120, explain=sandbox.describe_pods
    )
    chips = set()
    for pod in running:
        annotations = pod["metadata"]["annotations"]
        devices = protocol.decode_devices(
            protocol.allocated_key(TRAIN_CW), annotations[protocol.allocated_key(TRAIN_CW)]
        )[0]
        chips |= {d.uuid for d in devices}
    assert len(chips) == 4  # one chip each

    # Six workers on the four chips left: the gang binds nothing until chips free up.
    _apply(sandbox, _volcano_job("bert", 6))
    sandbox.wait_for(
        lambda: len(_job_pods(sandbox, "bert")) == 6, "bert's 6 pods created", 60,
        explain=sandbox.describe_pods,
    )  # fmt: skip

    def gang_refused() -> bool:
        events = sandbox.ctl.items(["get", "events", "-n", "default"])
        return any(
            e.get("involvedObject", {}).get("kind") == "PodGroup"
            and "bert" in e.get("involvedObject", {}).get("name", "")
            and e.get("reason") in ("Unschedulable", "FailedScheduling")
            for e in events
        )

    sandbox.wait_for(gang_refused, "Volcano to report bert's gang unschedulable", 60,
                     explain=sandbox.describe_pods)  # fmt: skip
    assert not [p for p in _job_pods(sandbox, "bert") if p["spec"].get("nodeName")]

    sandbox.ctl.run(["delete", "jobs.batch.volcano.sh", "resnet", "--wait=false"])

    def bert_running() -> bool:
        pods = _job_pods(sandbox, "bert")
        return len(pods) == 6 and all(p.get("status", {}).get("phase") == "Running" for p in pods)

    sandbox.wait_for(bert_running, "bert 6/6 Running once resnet is gone", 120,
                     explain=sandbox.describe_pods)  # fmt: skip
    sandbox.ctl.run(["delete", "jobs.batch.volcano.sh", "bert", "--wait=false"])
    sandbox.delete_pods(NODES)


def test_a_restart_of_volcanos_scheduler_with_npu_pods_pending_loses_no_pod(sandbox: Any) -> None:
    """What Volcano does with NPU pods pending across its own restart, and what the operator
    guide tells the operator to do about it (docs/operator-guide.md, Topology 2).

    vc-scheduler turns its deviceshare plugin on at its first session, after it has read the
    pods and nodes: until each node's next update it binds NPU pods by count alone, with no
    device decision (vnpu's device plugin decides for those, ``placeUndecided``), and it
    counts a pod's ``huawei.com/<CW>-memory`` as a resource no node has, so a vNPU pod seen
    before then stays Pending ("overused") until the pod changes. The guide's command marks
    the pending pods once the nodes have reported again; Volcano then places them.
    """
    scheduler = sandbox.stop("volcano-scheduler")
    vnpu_pods = [
        _pod(f"waiting-{i}", {f"huawei.com/{CW}": 1, f"huawei.com/{CW}-memory": 6144})
        for i in range(3)
    ]
    chip_pods = [_pod(f"chip-{i}", {f"huawei.com/{TRAIN_CW}": 1}) for i in range(2)]
    _apply(sandbox, *vnpu_pods, *chip_pods)
    assert not [p for p in sandbox.pods().values() if p["spec"].get("nodeName")]
    before = _handshakes(sandbox)
    sandbox.start(scheduler)

    # Whole chips: bound at once without a decision, placed by vnpu's device plugin.
    chips = {p["metadata"]["name"] for p in chip_pods}
    running = sandbox.wait_for(
        lambda: sandbox.running(chips), "the whole-chip pods Running", 60,
        explain=sandbox.describe_pods,
    )  # fmt: skip
    placed = sandbox.ctl.items(["get", "events", "--field-selector", "reason=PlacedByDevicePlugin"])
    assert {e["involvedObject"]["name"] for e in placed} == chips
    for name in chips:
        assert len(_devices(running[name], TRAIN_CW)) == 1

    # vNPUs: pending until marked once every node has reported since the restart.
    sandbox.wait_for(
        lambda: all(_handshakes(sandbox)[n] != before[n] for n in before),
        "every node's next report", 60,
    )  # fmt: skip
    names = {p["metadata"]["name"] for p in vnpu_pods}
    assert not sandbox.running(names)
    sandbox.ctl.run([*RESYNC, f"vnpu.io/resync={time.time_ns()}", "--overwrite"])
    running = sandbox.wait_for(
        lambda: sandbox.running(names), "the vNPU pods Running once marked", 60,
        explain=sandbox.describe_pods,
    )  # fmt: skip
    for name in names:
        assert [d.memory_mib for d in _devices(running[name], CW)] == [6144], name
    assert sorted(v.template for v in sandbox.vnpus("duo")) == ["vir02"] * 3
    sandbox.delete_pods(NODES)


RESYNC = ["annotate", "pods", "--all-namespaces", "--field-selector=status.phase=Pending"]
"""The operator guide's command after a restart of vc-scheduler (Topology 2), but the value."""


def _handshakes(sandbox: Any) -> dict[str, str]:
    key = {"duo": protocol.node_handshake_key(CW), "train": protocol.node_handshake_key(TRAIN_CW)}
    nodes = sandbox.ctl.items(["get", "nodes"])
    return {
        n["metadata"]["name"]: n["metadata"]
        .get("annotations", {})
        .get(key[n["metadata"]["name"]], "")
        for n in nodes
    }


def _devices(pod: Json, cw: str) -> list[protocol.DeviceEntry]:
    annotations = pod["metadata"]["annotations"]
    decoded = protocol.decode_devices(
        protocol.allocated_key(cw), annotations[protocol.allocated_key(cw)]
    )
    return list(decoded[0])


def test_the_operator_guide_gives_the_configuration_these_tests_run() -> None:
    values = yaml.safe_load((ROOT / "deploy" / "peers" / "volcano-values.yaml").read_text())
    ran = yaml.safe_load(values["custom"]["scheduler_config_override"])
    guide = (ROOT / "docs" / "operator-guide.md").read_text(encoding="utf-8")
    section = guide.split("## Topology 2:", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```yaml\n(.*?)```", section, flags=re.DOTALL)
    assert [yaml.safe_load(b) for b in blocks] == [ran]
    deviceshare = next(p for p in ran["tiers"][1]["plugins"] if p["name"] == "deviceshare")
    assert deviceshare["arguments"]["deviceshare.NodeLockEnable"] is False
