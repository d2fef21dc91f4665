"""Gangs on the real control plane: two PodGroups competing for one node, all or nothing.

kube-scheduler (``GenericWorkload`` on, as ``vnpu-sandbox up`` runs it) places a PodGroup's
members together and binds none until ``minCount`` are placed; vnpu-scheduler reserves each
member's chips at its filter, so the members never share chips and a gang that does not fit
holds nothing (docs/scheduler.md, "Gangs"). Gang A takes part of the node; gang B, larger than
what is left, waits whole with no member bound, no decision written and no vNPU made; once A
is deleted, B runs whole. Once with whole 910A chips, once with 310P3 vNPUs.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

CLUSTER = """\
nodes:
  - {name: train, chip: 910A, chips: 8, server: 910a-8}
  - {name: duo, chip: 310P3, chips: 2, server: 300i-duo}
"""
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
ROOT = Path(__file__).resolve().parents[2]
VOLCANO = ROOT / "examples" / "volcano"
Json = dict[str, Any]
DECIDED = "-devices-allocated"


def _gang(name: str, size: int, limits: dict[str, str], annotations: dict[str, str]) -> str:
    """A PodGroup of ``size`` pods with ``minCount`` = ``size``, each asking ``limits``."""
    docs: list[Json] = [
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": size}}},
        }
    ]
    for i in range(size):
        container = {"name": "main", "image": "ascend/train", "resources": {"limits": limits}}
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-{i}",
                    "namespace": "default",
                    "annotations": annotations,
                },
                "spec": {"schedulingGroup": {"podGroupName": name}, "containers": [container]},
            }
        )
    return yaml.safe_dump_all(docs)


def _members(sandbox: Any, gang: str) -> dict[str, Json]:
    return {n: p for n, p in sandbox.pods().items() if n.startswith(f"{gang}-")}


def _running(sandbox: Any, gang: str, size: int) -> bool:
    pods = _members(sandbox, gang)
    return len(pods) == size and all(
        (p.get("status") or {}).get("phase") == "Running" for p in pods.values()
    )


def _holding(pod: Json) -> bool:
    """Bound, or carrying a decision: what holding a chip starts with."""
    annotations = pod["metadata"].get("annotations") or {}
    return bool(pod["spec"].get("nodeName")) or any(k.endswith(DECIDED) for k in annotations)


def _refused_as_a_gang(sandbox: Any, gang: str) -> bool:
    """kube-scheduler tried the whole group and found too few places."""
    events = sandbox.ctl.items(["get", "events", "-n", "default"])
    return any(
        e["involvedObject"].get("name", "").startswith(f"{gang}-")
        and e.get("reason") == "FailedScheduling"
        and "cannot be satisfied" in e.get("message", "")
        for e in events
    )


def _chips(pods: dict[str, Json], word: str) -> list[str]:
    """The chips (UUID) of every member's decision, one entry per device."""
    found = []
    for pod in pods.values():
        value = pod["metadata"]["annotations"][f"hami.io/{word}{DECIDED}"]
        found += [d.split(",")[0] for d in value.replace(";", ":").split(":") if d]
    return found


def _compete(
    sandbox: Any,
    prefix: str,
    limits: dict[str, str],
    size_a: int,
    size_b: int,
    waiting: Any = lambda: None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Json]:
    """Gang A runs; gang B waits holding nothing (``waiting()`` checks more while it waits);
    B runs whole once A is deleted. B's members, running."""
    explain = sandbox.describe_pods
    a, b = f"{prefix}-a", f"{prefix}-b"
    sandbox.apply(_gang(a, size_a, limits, annotations or {}))
    sandbox.wait_for(lambda: _running(sandbox, a, size_a), "gang A running", explain=explain)

    sandbox.apply(_gang(b, size_b, limits, annotations or {}))
    sandbox.wait_for(lambda: _refused_as_a_gang(sandbox, b), "gang B tried", explain=explain)
    for _ in range(5):  # and a while after: kube-scheduler retries it
        members = _members(sandbox, b)
        assert len(members) == size_b
        assert not [n for n, p in members.items() if _holding(p)], explain()
        waiting()
        time.sleep(1)

    sandbox.ctl.run(["delete", "pod", "--wait=false", *_members(sandbox, a)])
    sandbox.wait_for(lambda: _running(sandbox, b, size_b), "gang B running", explain=explain)
    return _members(sandbox, b)


def test_a_gang_of_whole_chips_runs_whole_or_holds_nothing(sandbox: Any) -> None:
    """8 x 910A: gang A (4 of 1 chip) runs; gang B (6 of 1 chip) waits holding nothing; B runs
    whole once A is deleted, one chip each."""
    members = _compete(sandbox, "whole", {"huawei.com/Ascend910A": "1"}, 4, 6)
    chips = _chips(members, "Ascend910A")
    assert len(chips) == len(set(chips)) == 6, chips


def test_a_gang_of_vnpus_runs_whole_or_holds_nothing(sandbox: Any) -> None:
    """2 x 310P3 hold 6 vir02 (3 a chip: 7 AI CPUs, 2 each): gang A (4 x vir02) runs; gang B
    (4 x vir02) waits holding nothing, and no vNPU is made for it; B runs whole once A is
    deleted."""
    limits = {"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "6144"}
    pin = {"vnpu.io/template": "vir02"}  # not vir02_1c, which 6144 MiB may round to too

    def only_a() -> None:
        assert sorted(v.template for v in sandbox.vnpus("duo")) == ["vir02"] * 4

    members = _compete(sandbox, "vnpu", limits, 4, 4, waiting=only_a, annotations=pin)
    assert len(members) == 4
    sandbox.wait_for(  # A's vNPUs destroyed, B's made
        lambda: (
            sorted(v.template for v in sandbox.vnpus("duo")) == ["vir02"] * 4
            and not any(r["pod"].startswith("vnpu-a-") for r in sandbox.ledger_records("duo"))
        ),
        "B's four vir02 and no more on the node",
        explain=lambda: f"{sandbox.vnpus('duo')}\n{sandbox.ledger_records('duo')}",
    )


def _vnpu(*args: str) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).with_name("vnpu")), *args]  # the installed command
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_the_volcano_job_converted_runs_its_four_workers_as_a_gang(sandbox: Any) -> None:
    """``vnpu convert`` of examples/volcano/job.yaml (minAvailable 4, Volcano's generic
    huawei.com/Ascend910), applied as it prints it: four workers, one 910A chip each, one
    gang; what has no counterpart is listed on stderr."""
    converted = _vnpu("convert", str(VOLCANO / "job.yaml"), "--model", "910A")
    assert converted.returncode == 0, converted.stderr
    listed = converted.stderr.splitlines()
    assert any("spec.plugins.ssh: not converted" in line for line in listed), listed
    assert any("spec.queue: not converted" in line for line in listed), listed
    sandbox.ctl.run(["create", "namespace", "train"])
    sandbox.ctl.run(["apply", "-f", str(sandbox.write(converted.stdout))])
    group = sandbox.ctl.json(["get", "podgroup", "-n", "train", "resnet"])
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}

    def workers() -> dict[str, Json]:
        pods = sandbox.pods("train")
        running = [p for p in pods.values() if (p.get("status") or {}).get("phase") == "Running"]
        return pods if len(running) == 4 else {}

    pods = sandbox.wait_for(
        workers, "four workers running", explain=lambda: sandbox.describe_pods("train")
    )
    for pod in pods.values():
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": "resnet"}
        assert pod["spec"]["schedulerName"] == "vnpu-scheduler"
    chips = _chips(pods, "Ascend910A")
    assert len(set(chips)) == 4, chips
    sandbox.ctl.run(["delete", "namespace", "train", "--wait=false"])


def test_pods_written_for_volcano_are_told_what_vnpu_reads(sandbox: Any) -> None:
    """examples/volcano/pods.yaml: ``huawei.com/npu``, and ``schedulerName: volcano`` with
    vnpu's resource. kubectl prints the webhook's warning at apply; each pod gets one Event
    naming the fix; neither is placed."""
    path = str(VOLCANO / "pods.yaml")
    done = subprocess.run(
        [sandbox.ctl.binary, "apply", "-f", path],
        env=sandbox.ctl.env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (
        "Warning: container 'main' asks for huawei.com/npu, which vnpu does not schedule"
        in done.stderr
    )
    assert "Warning: spec.schedulerName is 'volcano'" in done.stderr
    for name, said in (
        ("generic", "`vnpu convert`"),
        ("volcano-infer", "remove spec.schedulerName"),
    ):

        def told(pod: str = name) -> list[Json]:
            events = sandbox.ctl.items(
                ["get", "events", "--field-selector", f"involvedObject.name={pod}"]
            )
            return [e for e in events if e.get("reason") == "NPURequestNotForVnpu"]

        (event,) = sandbox.wait_for(told, f"the event on {name}", explain=sandbox.describe_pods)
        assert said in event["message"]
        described = sandbox.ctl.run(["describe", "pod", name])
        assert "NPURequestNotForVnpu" in described
        assert not sandbox.pods()[name]["spec"].get("nodeName")
    sandbox.ctl.run(["delete", "-f", path, "--wait=false"])


@pytest.fixture(autouse=True)
def _clean(sandbox: Any) -> Any:
    yield
    sandbox.ctl.run(["delete", "pods,podgroups", "--all", "-n", "default", "--wait=false"])
