"""Two kube-schedulers, each with its own vnpu-scheduler, racing to bind the same pods.

Both run without leader election, so every pending pod is scheduled by both at once and the
binds collide: the node locks and the bind-time fit must keep every chip within what it has.
The judge is the real API server (one Binding per pod) and the device plugins, which refuse
an Allocate a chip cannot hold (the pod would fail with UnexpectedAdmissionError).
"""

from __future__ import annotations

import collections
import re
import time
import urllib.request
from typing import Any

import pytest

from vnpu_core import catalog, protocol
from vnpu_npu.sim import backend as sim_backend
from vnpu_sandbox.platform import layout

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]

CLUSTER = """\
nodes:
  - {name: duo, chip: 310P3, chips: 4, server: 300i-duo, replicas: 2}
"""
SCHEDULERS = 2
REPLICAS = 40
MODEL = next(m for m in catalog.BUILTIN if m.name == "310P3")
KEY = protocol.allocated_key("Ascend310P")
LOAD = f"""\
apiVersion: v1
kind: Namespace
metadata: {{name: load}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: infer, namespace: load}}
spec:
  replicas: {REPLICAS}
  selector: {{matchLabels: {{app: infer}}}}
  template:
    metadata: {{labels: {{app: infer}}}}
    spec:
      containers:
        - name: infer
          image: registry.invalid/infer:1
          resources: {{limits: {{huawei.com/Ascend310P: 1, huawei.com/Ascend310P-memory: 6000}}}}
"""


def _sample(url: str, series: str) -> float:
    """The value of ``series`` (name and labels as /metrics prints them) at ``url``; 0 if absent."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = re.search(rf"^{re.escape(series)} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def test_two_active_schedulers_never_over_commit_a_chip(sandbox: Any) -> None:
    sandbox.ctl.run(["apply", "-f", str(sandbox.write(LOAD))])
    # A pod refused once may still be placed on a retry (a bind of the other replica failed
    # and freed what it had claimed): settled means the same pods Running 10 s apart.
    last: dict[str, Any] = {"running": None, "at": 0.0}

    def settled() -> list[Any] | None:
        pods = quiet()
        if pods is None:
            last["running"] = None
            return None
        running = sorted(p["metadata"]["name"] for p in pods if p["status"]["phase"] == "Running")
        if running != last["running"]:
            last.update(running=running, at=time.monotonic())
            return None
        return pods if time.monotonic() - last["at"] >= 10 else None

    def quiet() -> list[Any] | None:
        pods = sandbox.ctl.items(["get", "pods", "-n", "load"])
        if len(pods) < REPLICAS:
            return None
        phases = collections.Counter(p.get("status", {}).get("phase") for p in pods)
        pending = [p for p in pods if p.get("status", {}).get("phase") == "Pending"]
        if any(p["spec"].get("nodeName") for p in pending):
            return None  # bound, not Running yet
        events = sandbox.ctl.items(
            ["get", "events", "-n", "load", "--field-selector", "reason=FailedScheduling"]
        )
        refused = {e["involvedObject"]["name"] for e in events}
        if phases["Running"] + len(pending) == REPLICAS and all(
            p["metadata"]["name"] in refused for p in pending
        ):
            return pods
        return None

    pods = sandbox.wait_for(settled, "every pod Running or refused by the schedulers", 240)

    assert not [p for p in pods if p["status"].get("phase") == "Failed"]
    per_chip: dict[str, list[protocol.DeviceEntry]] = collections.defaultdict(list)
    for pod in pods:
        if pod["status"]["phase"] != "Running":
            continue
        for container in protocol.decode_devices(KEY, pod["metadata"]["annotations"][KEY]):
            for device in container:
                per_chip[device.uuid].append(device)
    assert len(per_chip) == 8  # both nodes' chips are in use
    for uuid, devices in per_chip.items():
        # The hard-vNPU budget (vnpu_core.budgets): memory against the chip's capacity, AI
        # cores, the vNPU count; AI CPUs the simulated chip itself enforces at creation.
        assert sum(d.memory_mib for d in devices) <= MODEL.memory_capacity_mib, uuid
        assert sum(d.cores for d in devices) <= MODEL.aicore, uuid
        assert len(devices) <= MODEL.max_vnpus, uuid
    running = [p for p in pods if p["status"]["phase"] == "Running"]
    # 6000 MiB rounds to a 6144 MiB template (vir02 or vir02_1c): at most 4 on a chip.
    assert REPLICAS > len(running) >= 16, len(running)
    # What the device plugins created on the simulated chips is what the pods hold.
    for node in ("duo-0", "duo-1"):
        sim = sim_backend.SimBackend(layout.Layout.at(sandbox.directory).node(node).sim)
        vnpus = [v for chip in sim.chips() for v in sim.vnpus(chip.phy_id)]
        assert len(vnpus) == sum(1 for p in running if p["spec"]["nodeName"] == node), node

    urls = [f"http://127.0.0.1:{sandbox.record.ports[k]}" for k in ("scheduler", "scheduler-2")]

    def bound_by(url: str) -> float:
        return _sample(url, 'vnpu_scheduler_binds_total{result="bound"}')

    def binds_match_running() -> bool:
        # A replica counts its bind once the Binding has landed, which may be just after the
        # pod started; and a pod refused earlier may since have been placed.
        pods = sandbox.ctl.items(["get", "pods", "-n", "load"])
        now = sum(1 for p in pods if p.get("status", {}).get("phase") == "Running")
        return sum(bound_by(url) for url in urls) == now

    sandbox.wait_for(binds_match_running, "the replicas' bind counts to match the pods Running", 30)
    # The race was real: the replicas answered more binds than pods were bound (the loser of a
    # race finds its pod bound by the other, or its chips taken). Which replica wins is up to
    # timing: one may win them all.
    calls = [
        _sample(url, 'vnpu_scheduler_request_duration_seconds_count{verb="bind"}') for url in urls
    ]
    bound = sum(bound_by(url) for url in urls)
    assert sum(calls) > bound, (calls, bound)
