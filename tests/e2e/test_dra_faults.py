"""DRA mode under pressure on the real control plane: gangs, a failed chip, a killed driver.

The sandbox of ``vnpu-sandbox up --mode dra`` (tests/e2e/test_dra.py shows the plain cases).
Here: two gangs competing for one node get kube-scheduler's own all-or-nothing placement; a
chip that fails is tainted by the driver and its pod evicted; a driver killed while a pod is
deleted and another created leaks no vNPU once it is back.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from vnpu_core import catalog
from vnpu_sandbox.platform import layout, processes

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
MODE = "dra"
CLUSTER = """\
nodes:
  - {name: duo, chip: 310P3, chips: 4, server: 300i-duo}
  - {name: train, chip: 910A, chips: 8, server: 910a-8}
"""
Json = dict[str, Any]
VNPU = {"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "6144"}


def _pod(name: str, limits: dict[str, str], group: str = "") -> Json:
    spec: Json = {
        "containers": [{"name": "main", "image": "ascend/app", "resources": {"limits": limits}}]
    }
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def _group(name: str, size: int) -> Json:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": size}}},
    }


def _running(sandbox: Any, names: list[str]) -> bool:
    pods = sandbox.pods()
    return all((pods.get(n, {}).get("status") or {}).get("phase") == "Running" for n in names)


def _sim(directory: Path, *args: str) -> None:
    """``vnpu-npu-sim DIR ...``: inject or clear a fault on a simulated node."""
    command = [str(Path(sys.executable).with_name("vnpu-npu-sim")), str(directory), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr


def _env(sandbox: Any, node: str, name: str) -> dict[str, str]:
    path = (
        layout.Layout.at(sandbox.directory).node(node).kubelet_state
        / "pods"
        / f"default_{name}.json"
    )
    env: dict[str, str] = yaml.safe_load(path.read_text(encoding="utf-8"))["containers"][0]["env"]
    return env


def test_a_gang_that_does_not_fit_holds_nothing_and_runs_whole_later(sandbox: Any) -> None:
    """8 x 910A: gang A (4 of 1 chip) runs; gang B (6 of 1 chip) has no pod bound while A
    holds its chips; B runs whole once A is deleted. kube-scheduler's claim accounting is the
    whole mechanism: no extender in DRA mode."""
    explain = sandbox.describe_pods
    a = [f"ga-{i}" for i in range(4)]
    b = [f"gb-{i}" for i in range(6)]
    whole = {"huawei.com/Ascend910A": "1"}
    sandbox.apply(yaml.safe_dump_all([_group("ga", 4), *(_pod(n, whole, "ga") for n in a)]))
    sandbox.wait_for(lambda: _running(sandbox, a), "gang A running", explain=explain)
    sandbox.apply(yaml.safe_dump_all([_group("gb", 6), *(_pod(n, whole, "gb") for n in b)]))

    def tried() -> bool:
        events = sandbox.ctl.items(["get", "events", "--field-selector", "reason=FailedScheduling"])
        return any(e["involvedObject"]["name"].startswith("gb-") for e in events)

    sandbox.wait_for(tried, "gang B tried", explain=explain)
    pods = sandbox.pods()
    assert not [n for n in b if pods[n]["spec"].get("nodeName")], explain()
    sandbox.ctl.run(["delete", "pod", *a, "--wait=false"])
    sandbox.wait_for(lambda: _running(sandbox, b), "gang B running", timeout=120, explain=explain)
    chips = {_env(sandbox, "train", n)["ASCEND_VISIBLE_DEVICES"] for n in b}
    assert len(chips) == 6, chips
    sandbox.ctl.run(["delete", "pod,podgroup", "--all", "--wait=false"])


def test_a_failed_chip_is_tainted_and_its_pod_evicted(sandbox: Any) -> None:
    sandbox.apply(yaml.safe_dump(_pod("victim", {"huawei.com/Ascend910A": "1"})))
    sandbox.wait_for(
        lambda: _running(sandbox, ["victim"]), "the pod running", explain=sandbox.describe_pods
    )
    chip = _env(sandbox, "train", "victim")["ASCEND_VISIBLE_DEVICES"]
    sim = layout.Layout.at(sandbox.directory).node("train").sim
    _sim(sim, "fault", "--chip", chip, "--health", "critical", "--code", "80E18402")

    def tainted() -> bool:
        slices = sandbox.ctl.items(
            ["get", "resourceslices", "--field-selector", "spec.nodeName=train"]
        )
        return any(
            d.get("taints") and d["name"].startswith(f"chip-{chip}-")
            for s in slices
            for d in s["spec"].get("devices") or []
        )

    sandbox.wait_for(tainted, f"chip {chip}'s devices tainted")
    sandbox.wait_for(
        lambda: "victim" not in sandbox.pods(),
        "the pod on the failed chip evicted",
        timeout=120,
        explain=sandbox.describe_pods,
    )
    # A new pod avoids the chip.
    sandbox.apply(yaml.safe_dump(_pod("after", {"huawei.com/Ascend910A": "1"})))
    sandbox.wait_for(
        lambda: _running(sandbox, ["after"]), "a new pod running", explain=sandbox.describe_pods
    )
    assert _env(sandbox, "train", "after")["ASCEND_VISIBLE_DEVICES"] != chip
    _sim(sim, "fault", "--chip", chip, "--clear")
    sandbox.ctl.run(["delete", "pod", "after", "--wait=false"])


def test_a_driver_killed_while_pods_come_and_go_leaks_no_vnpu(sandbox: Any) -> None:
    sandbox.apply(yaml.safe_dump(_pod("first", VNPU)))
    sandbox.wait_for(
        lambda: _running(sandbox, ["first"]), "the first pod running", explain=sandbox.describe_pods
    )
    assert len(sandbox.vnpus("duo")) == 1
    (driver,) = [p for p in sandbox.record.processes if p.name == "dra-driver-duo"]
    os.kill(driver.pid, signal.SIGKILL)
    # While it is down: the first pod is deleted (its vNPU cannot be destroyed yet) and a
    # second is created (its vNPU cannot be made yet).
    sandbox.ctl.run(["delete", "pod", "first", "--wait=false"])
    sandbox.apply(yaml.safe_dump(_pod("second", VNPU)))
    # Back, for good: the record names the new process, so `down` stops it after the module.
    where = layout.Layout.at(sandbox.directory)
    again, child = processes.spawn(
        "dra-driver-duo", driver.argv, where.logs / "dra-driver-duo.again.log"
    )
    threading.Thread(target=child.wait, daemon=True).start()  # reaped when `down` stops it
    sandbox.record.processes = [again if p is driver else p for p in sandbox.record.processes]
    layout.write(where, sandbox.record)
    sandbox.wait_for(
        lambda: _running(sandbox, ["second"]) and "first" not in sandbox.pods(),
        "the second pod running and the first gone",
        timeout=120,
        explain=sandbox.describe_pods,
    )
    sandbox.wait_for(lambda: len(sandbox.vnpus("duo")) == 1, "one vNPU: the second pod's")
    (vnpu,) = sandbox.vnpus("duo")
    assert _env(sandbox, "duo", "second")["ASCEND_VISIBLE_DEVICES"] == str(vnpu.vnpu_id)
    sandbox.ctl.run(["delete", "pod", "second"])
    sandbox.wait_for(lambda: sandbox.vnpus("duo") == [], "no vNPU left")


def test_a_random_mix_of_template_pods_never_puts_a_chip_over_a_budget(sandbox: Any) -> None:
    """200 pods pinned to random 310P3 templates on four chips: kube-scheduler allocates what
    the counters allow, every allocated pod is prepared (the driver would refuse a vNPU the
    chip has no room for) and no chip goes over its AI cores, AI CPUs, memory, media engines
    or vNPU count."""
    model = catalog.BUILTIN.by_common_word("Ascend310P")
    assert model is not None
    assert model.media is not None
    chooser = random.Random(310)
    pods = []
    for i in range(200):
        template = chooser.choice(model.templates)
        pod = _pod(
            f"mix-{i:03d}",
            {
                "huawei.com/Ascend310P": "1",
                "huawei.com/Ascend310P-memory": str(template.memory_mib),
            },
        )
        pod["metadata"]["annotations"] = {"vnpu.io/template": template.name}
        pods.append(pod)
    sandbox.apply(yaml.safe_dump_all(pods))

    def settled() -> int | None:
        listed = [p for n, p in sandbox.pods().items() if n.startswith("mix-")]
        bound = [p for p in listed if p["spec"].get("nodeName")]
        running = [p for p in bound if (p.get("status") or {}).get("phase") == "Running"]
        return len(running) if len(listed) == 200 and bound and len(running) == len(bound) else None

    first = sandbox.wait_for(
        settled, "the bound mix pods running", timeout=180, explain=sandbox.describe_pods
    )
    time.sleep(
        5
    )  # kube-scheduler keeps trying the rest: nothing more may fit, and nothing else run
    assert settled() == first
    # Every bound pod runs: a vNPU the driver refused (no room on its chip) would hold its pod
    # in ContainerCreating for good. (A first Prepare may fail while the API's node authorizer
    # has not yet linked the new claim to the node; the kubelet retries it, as the real one does.)
    per_chip: dict[int, list[catalog.Template]] = {}
    for vnpu in sandbox.vnpus("duo"):
        template = model.template(vnpu.template)
        assert template is not None
        per_chip.setdefault(vnpu.phy_id, []).append(template)
    assert sum(len(t) for t in per_chip.values()) == first
    for phy, held in per_chip.items():
        assert len(held) <= model.max_vnpus, phy
        assert sum(t.aicore for t in held) <= model.aicore, phy
        assert sum(t.aicpu for t in held) <= model.aicpu, phy
        assert sum(t.memory_mib for t in held) <= model.memory_capacity_mib, phy
        for engine, cap in enumerate(model.media.as_tuple()):
            assert sum((t.media or catalog.NO_MEDIA).as_tuple()[engine] for t in held) <= cap, phy
    sandbox.ctl.run(["delete", "pod", *[p["metadata"]["name"] for p in pods], "--wait=false"])
    sandbox.wait_for(lambda: sandbox.vnpus("duo") == [], "the mix's vNPUs destroyed", timeout=120)
