"""End to end through the running sandbox: pods share chips, are explained, observed, freed.

Every part runs as its real process (``vnpu-sandbox up``); the test only uses kubectl, HTTP
and the simulated chips' files, as a person trying the platform would.
"""

from __future__ import annotations

import re
import subprocess
import time
import urllib.request
from typing import Any

import pytest

from vnpu_core import granted, protocol
from vnpu_sandbox.platform import kubectl, layout, processes

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
PROMETHEUS = True

PODS = """\
apiVersion: v1
kind: Pod
metadata: {name: ocr}
spec:
  containers:
    - name: ocr
      image: x
      resources: {limits: {huawei.com/Ascend310P: 1, huawei.com/Ascend310P-memory: 2000}}
---
apiVersion: v1
kind: Pod
metadata: {name: asr}
spec:
  containers:
    - name: asr
      image: x
      resources: {limits: {huawei.com/Ascend310P: 1, huawei.com/Ascend310P-memory: 5000}}
---
apiVersion: v1
kind: Pod
metadata: {name: train}
spec:
  containers:
    - name: trainer
      image: x
      resources: {limits: {huawei.com/Ascend910B3: 2}}
---
apiVersion: v1
kind: Pod
metadata: {name: rerank, annotations: {huawei.com/vnpu-mode: hami-core}}
spec:
  containers:
    - name: rerank
      image: x
      resources:
        limits:
          huawei.com/Ascend910B4: 1
          huawei.com/Ascend910B4-memory: 8192
          huawei.com/Ascend910B4-core: 25
---
apiVersion: v1
kind: Pod
metadata: {name: too-big}
spec:
  containers:
    - name: llm
      image: x
      resources: {limits: {huawei.com/Ascend910B3: 16}}
"""
PLACED = {"ocr": "duo", "asr": "duo", "train": "a2", "rerank": "soft"}


def _running(sandbox: Any, names: set[str]) -> dict[str, dict[str, object]] | None:
    pods = sandbox.pods()
    if all(pods.get(n, {}).get("status", {}).get("phase") == "Running" for n in names):
        return pods
    return None


def test_pods_share_chips_and_everything_sees_it(sandbox: Any) -> None:
    sandbox.apply(PODS)
    pods = sandbox.wait_for(
        lambda: _running(sandbox, set(PLACED)),
        "the placeable pods Running",
        60,
        explain=sandbox.describe_pods,
    )

    for name, node in PLACED.items():
        assert pods[name]["spec"]["nodeName"] == node
        assert pods[name]["spec"]["schedulerName"] == "vnpu-scheduler"
    annotations = pods["ocr"]["metadata"]["annotations"]
    allocated = protocol.decode_devices(
        protocol.allocated_key("Ascend310P"), annotations[protocol.allocated_key("Ascend310P")]
    )
    assert [d.memory_mib for d in allocated[0]] == [3072]  # 2000 MiB rounded to vir01
    runtime = annotations[protocol.runtime_key("Ascend310P")]
    assert '"vir01"' in runtime
    # The webhook rounded the request as it will be held.
    limits = pods["asr"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["huawei.com/Ascend310P-memory"] in ("6144", "6144Mi")

    # The simulated chips hold the two vNPUs, the device plugin's ledger owns them.
    templates = sorted(v.template for v in sandbox.vnpus("duo"))
    assert templates == ["vir01", "vir02"]
    assert len(sandbox.ledger_records("duo")) == 2
    assert sandbox.vnpus("a2") == []  # whole chips: no vNPU

    # The impossible pod is explained in kube-scheduler's words with the extender's reasons.
    def refusal() -> str:
        events = sandbox.ctl.items(
            ["get", "events", "--field-selector", "involvedObject.name=too-big"]
        )
        found = [e["message"] for e in events if e.get("reason") == "FailedScheduling"]
        return found[-1] if found else ""

    message = sandbox.wait_for(refusal, "a FailedScheduling event for too-big")
    assert message.startswith("0/3 nodes are available: "), message
    assert "Ascend910B3" in message
    described = sandbox.ctl.run(["describe", "pod", "too-big"])
    assert "FailedScheduling" in described

    # The exporters report the allocations (they refresh every 2 s in the sandbox).
    def exported() -> str | None:
        duo = sandbox.metrics("duo")
        for template in ("vir01", "vir02"):
            if not re.search(
                rf'vnpu_chip_vnpu_templates\{{[^}}]*template="{template}"[^}}]*\}} 1', duo
            ):
                return None
        return duo if re.search(r'vnpu_allocation_info\{[^}]*pod="ocr"', duo) else None

    sandbox.wait_for(exported, "the duo exporter to report both vNPUs and the ocr pod", 30)

    if sandbox.record.prometheus_url is not None:

        def allocations() -> float:
            result = sandbox.promql("sum(vnpu_chip_allocations)")
            return float(result[0]["value"][1]) if result else -1.0

        # ocr, asr: one chip each; train: two chips; rerank: one soft slice.
        sandbox.wait_for(lambda: allocations() == 5, "Prometheus to count 5 allocations", 60)
        by_model = {
            r["metric"]["model"]: float(r["value"][1])
            for r in sandbox.promql("sum by (model) (vnpu_chip_allocated_memory_bytes)")
        }
        assert by_model["Ascend310P"] == (3072 + 6144) * 2**20, by_model

    # Deleting the pods frees every vNPU on the chips and in the ledgers.
    sandbox.ctl.run(["delete", "pod", "ocr", "asr", "train", "rerank", "too-big", "--wait=false"])
    sandbox.wait_for(lambda: not sandbox.vnpus("duo"), "the vNPUs destroyed", 30)
    sandbox.wait_for(lambda: not sandbox.ledger_records("duo"), "the ledger emptied", 30)
    sandbox.wait_for(lambda: not sandbox.pods(), "the pods gone", 30, explain=sandbox.describe_pods)


DEMO_MANIFESTS = {
    "00-web.yaml": """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: web
          image: x
          resources: {limits: {huawei.com/Ascend310P: 1, huawei.com/Ascend310P-memory: 3000}}
""",
    "10-impossible.yaml": """\
apiVersion: v1
kind: Pod
metadata: {name: sixteen}
spec:
  containers:
    - {name: c, image: x, resources: {limits: {huawei.com/Ascend910B3: 16}}}
""",
}


def test_the_demo_scenario_explains_and_counts_what_it_placed(sandbox: Any) -> None:
    manifests = sandbox.directory / "demo"
    manifests.mkdir()
    for name, text in DEMO_MANIFESTS.items():
        (manifests / name).write_text(text, encoding="utf-8")
    played = sandbox.command(
        "demo", "--dir", str(sandbox.directory), "--manifests", str(manifests),
        "--scale", "default/web=3",
    )  # fmt: skip
    assert played.returncode == 0, played.stderr + played.stdout
    out = played.stdout
    assert "Where the pods landed (2 of 3 placed)" in out, out
    assert "Refused (1)" in out
    assert "default/sixteen:\n  0/3 nodes are available: " in out
    assert "0 pods removed, 1 created:" in out
    assert re.search(r"Ascend310P\s+1/4\s", out), out  # three vir01 on one chip
    if sandbox.record.prometheus_url is not None:
        assert "once it has scraped the 3 allocations" in out
        assert "still differs from what was placed" not in out
        assert re.search(r"template=vir01\s+3\n", out), out
    sandbox.ctl.run(["delete", "deployment", "web"])
    sandbox.ctl.run(["delete", "pod", "sixteen", "--wait=false"])
    sandbox.wait_for(
        lambda: not sandbox.pods(), "the demo's pods gone", 30, explain=sandbox.describe_pods
    )
    sandbox.wait_for(lambda: not sandbox.vnpus("duo"), "the demo's vNPUs destroyed", 30)


CHURN_ROUNDS = 20
CHURN_PODS = 8


def _churn_pods(round_: int) -> str:
    """Eight pods for the 910B3 node: whole chips on even rounds, vir10_3c_32g on odd ones."""
    limits = (
        "{huawei.com/Ascend910B3: 1}"
        if round_ % 2 == 0
        else "{huawei.com/Ascend910B3: 1, huawei.com/Ascend910B3-memory: 30000}"
    )
    return "".join(
        f"""---
apiVersion: v1
kind: Pod
metadata: {{name: churn-{round_}-{i}, labels: {{round: "{round_}"}}}}
spec:
  containers: [{{name: c, image: x, resources: {{limits: {limits}}}}}]
"""
        for i in range(CHURN_PODS)
    )


@pytest.mark.timeout(400)
def test_pods_scheduled_into_space_freed_at_the_same_moment_never_fail(sandbox: Any) -> None:
    """Delete eight pods and create eight into their space at once, 20 rounds: none fails.

    Whole-chip rounds need all eight chips, while the vNPUs of the previous round's pods
    still exist on four of them until the device plugin reclaims them.
    """
    sandbox.apply(_churn_pods(0))
    names = {f"churn-0-{i}" for i in range(CHURN_PODS)}
    sandbox.wait_for(
        lambda: _running(sandbox, names), "round 0 Running", 60, explain=sandbox.describe_pods
    )
    for round_ in range(1, CHURN_ROUNDS + 1):
        sandbox.ctl.run(["delete", "pods", "-l", f"round={round_ - 1}", "--wait=false"])
        sandbox.apply(_churn_pods(round_))
        names = {f"churn-{round_}-{i}" for i in range(CHURN_PODS)}

        def settled(names: set[str] = names) -> dict[str, Any] | None:
            pods = sandbox.pods()
            failed = [n for n, p in pods.items() if p.get("status", {}).get("phase") == "Failed"]
            assert not failed, {n: pods[n]["status"] for n in failed}
            return _running(sandbox, names)

        sandbox.wait_for(settled, f"round {round_} Running", 60, explain=sandbox.describe_pods)
    sandbox.ctl.run(["delete", "pods", "-l", f"round={CHURN_ROUNDS}", "--wait=false"])
    sandbox.wait_for(
        lambda: not sandbox.pods(), "the churn pods gone", 30, explain=sandbox.describe_pods
    )
    sandbox.wait_for(lambda: not sandbox.vnpus("a2"), "no vNPU left on a2", 30)


def _scheduler_metric(sandbox: Any, series: str) -> float | None:
    url = f"http://127.0.0.1:{sandbox.record.ports['scheduler']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


WHOLE_NODE = """\
apiVersion: v1
kind: Pod
metadata: {name: holder}
spec:
  containers: [{name: c, image: x, resources: {limits: {huawei.com/Ascend910B3: 8}}}]
"""
ONE_CHIP = """\
apiVersion: v1
kind: Pod
metadata: {name: second}
spec:
  containers: [{name: c, image: x, resources: {limits: {huawei.com/Ascend910B3: 1}}}]
"""


def test_clearing_ones_own_decision_frees_no_chip(sandbox: Any) -> None:
    """A running pod's decision annotations are wiped: its chips stay counted.

    kube-apiserver refuses the wipe from a tenant (the chart's admission policy, which the
    sandbox applies); should the annotations go anyway (the policies turned off, a tool with
    one of vnpu's identities), the scheduler still counts what the node's device plugin
    reports it granted (``vnpu.io/granted-Ascend910B3``), so the next pod is not placed on
    those chips, and the disagreement shows in ``vnpu_scheduler_grant_mismatches``.
    """
    sandbox.apply(WHOLE_NODE)
    pods = sandbox.wait_for(lambda: _running(sandbox, {"holder"}), "holder Running", 60)
    uid = pods["holder"]["metadata"]["uid"]
    key = granted.annotation_key("Ascend910B3")

    def reported() -> int:
        node = sandbox.ctl.json(["get", "node", "a2"])
        value = node["metadata"].get("annotations", {}).get(key, "")
        grants = granted.decode(key, value) if value else {}
        return sum(1 for pods in grants.values() if uid in pods)

    sandbox.wait_for(lambda: reported() == 8, "the 8 chips in the node's grant report", 30)
    decision = [
        k
        for k in pods["holder"]["metadata"]["annotations"]
        if k.startswith(("hami.io/", "huawei.com/"))
    ]
    assert protocol.allocated_key("Ascend910B3") in decision
    wipe = ["annotate", "pod", "holder", *(f"{k}-" for k in decision)]
    with pytest.raises(kubectl.KubectlError) as refused:
        sandbox.ctl.run(wipe)
    assert "ValidatingAdmissionPolicy 'vnpu-decision-annotations'" in str(refused.value)
    assert "may not be removed" in str(refused.value)
    sandbox.as_identity("vnpu-device-plugin").run(wipe)
    series = 'vnpu_scheduler_grant_mismatches{reason="annotation_missing"}'
    sandbox.wait_for(lambda: _scheduler_metric(sandbox, series) == 1.0, "the mismatch counted", 30)

    sandbox.apply(ONE_CHIP)

    def refusal() -> str:
        events = sandbox.ctl.items(
            ["get", "events", "--field-selector", "involvedObject.name=second"]
        )
        found = [e["message"] for e in events if e.get("reason") == "FailedScheduling"]
        return found[-1] if found else ""

    message = sandbox.wait_for(refusal, "a FailedScheduling event for second")
    assert "a2" in message or "0/3 nodes are available" in message, message
    assert not sandbox.pods()["second"]["spec"].get("nodeName")
    assert _scheduler_metric(sandbox, "vnpu_scheduler_double_assignments") == 0.0

    sandbox.ctl.run(["delete", "pod", "holder", "--wait=false"])
    pods = sandbox.wait_for(lambda: _running(sandbox, {"second"}), "second Running", 60)
    assert pods["second"]["spec"]["nodeName"] == "a2"
    sandbox.wait_for(lambda: _scheduler_metric(sandbox, series) == 0.0, "no mismatch left", 30)
    sandbox.ctl.run(["delete", "pod", "second", "--wait=false"])
    sandbox.wait_for(lambda: not sandbox.pods(), "the pods gone", 30, explain=sandbox.describe_pods)


QUOTA = """\
apiVersion: v1
kind: Namespace
metadata: {name: quota-demo}
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: npu, namespace: quota-demo}
spec:
  hard: {limits.huawei.com/Ascend310P-memory: "9216"}
"""


def _quota_pod(name: str, memory: int) -> str:
    return f"""\
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: quota-demo}}
spec:
  containers:
    - name: c
      image: x
      resources: {{limits: {{huawei.com/Ascend310P: 1, huawei.com/Ascend310P-memory: {memory}}}}}
"""


def test_a_namespace_quota_holds_pods_back_and_says_which(sandbox: Any) -> None:
    """9216 MiB of 310P memory: a vir02 and a vir01 run, the next vir01 waits naming the
    quota, and a pod whose request alone is too big is denied at creation."""
    sandbox.apply(QUOTA)
    sandbox.apply(_quota_pod("first", 6000) + "---\n" + _quota_pod("second", 3000))

    def running() -> dict[str, Any] | None:
        pods = sandbox.pods("quota-demo")
        phases = [pods.get(n, {}).get("status", {}).get("phase") for n in ("first", "second")]
        return pods if phases == ["Running", "Running"] else None

    sandbox.wait_for(running, "first and second Running", 60)
    sandbox.apply(_quota_pod("third", 3000))

    def refusal() -> str:
        events = sandbox.ctl.items(
            ["get", "events", "-n", "quota-demo", "--field-selector", "involvedObject.name=third"]
        )
        found = [e["message"] for e in events if e.get("reason") == "NPUQuotaExceeded"]
        return found[-1] if found else ""

    message = sandbox.wait_for(refusal, "an NPUQuotaExceeded event for third")
    assert "quota quota-demo/npu limits.huawei.com/Ascend310P-memory: used 9216 + asked 3072" in (
        message
    )
    described = sandbox.ctl.run(["describe", "pod", "third", "-n", "quota-demo"])
    assert "FailedScheduling" in described
    assert "quota-demo/npu" in described
    assert not sandbox.pods("quota-demo")["third"]["spec"].get("nodeName")

    path = sandbox.directory / "too-big.yaml"
    path.write_text(_quota_pod("too-big", 12000), encoding="utf-8")
    denied = subprocess.run(
        [str(sandbox.bins["kubectl"]), "--kubeconfig", str(sandbox.record.kubeconfig), "apply",
         "-f", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert denied.returncode != 0
    assert "alone exceeds its NPU quota" in denied.stderr

    sandbox.ctl.run(["delete", "pod", "first", "-n", "quota-demo", "--wait=false"])
    pods = sandbox.wait_for(
        lambda: (
            (p := sandbox.pods("quota-demo")).get("third", {}).get("status", {}).get("phase")
            == "Running"
            and p
        ),
        "third Running once first is gone",
        60,
    )
    assert pods["third"]["spec"]["nodeName"] == "duo"
    sandbox.ctl.run(["delete", "pods", "--all", "-n", "quota-demo", "--wait=false"])
    sandbox.wait_for(lambda: not sandbox.pods("quota-demo"), "the quota pods gone", 30)


TEAMS = """\
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-b}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: vnpu-scheduler-tenants, namespace: kube-system}
data:
  tenants.yaml: |
    teams:
      - {name: a, namespaces: [team-a], nominal: {Ascend910B3-chips: 4}}
      - {name: b, namespaces: [team-b], nominal: {Ascend910B3-chips: 4}}
"""


def _team_pods(namespace: str, count: int, start: int = 0) -> str:
    return "".join(
        f"""---
apiVersion: v1
kind: Pod
metadata: {{name: job-{i}, namespace: {namespace}}}
spec:
  terminationGracePeriodSeconds: 0
  containers: [{{name: c, image: x, resources: {{limits: {{huawei.com/Ascend910B3: 1}}}}}}]
"""
        for i in range(start, start + count)
    )


def _phases(sandbox: Any, namespace: str) -> dict[str, str]:
    return {n: p.get("status", {}).get("phase", "") for n, p in sandbox.pods(namespace).items()}


def test_a_team_below_its_nominal_gets_borrowed_chips_back(sandbox: Any) -> None:
    """b borrows a's idle nominal (six of a2's eight chips); when a's four pods arrive, two
    fit and the scheduler evicts b's two newest pods for the other two."""
    sandbox.apply(TEAMS)
    sandbox.apply(_team_pods("team-b", 4))
    time.sleep(1.1)  # creation times have whole seconds: job-4 and job-5 are the newest
    sandbox.apply(_team_pods("team-b", 2, start=4))
    sandbox.wait_for(
        lambda: list(_phases(sandbox, "team-b").values()).count("Running") == 6 or None,
        "b's six pods Running",
        60,
    )
    sandbox.apply(_team_pods("team-a", 4))
    sandbox.wait_for(
        lambda: list(_phases(sandbox, "team-a").values()).count("Running") == 4 or None,
        "a's four pods Running",
        120,
    )
    left = _phases(sandbox, "team-b")
    assert sorted(n for n, phase in left.items() if phase == "Running") == [
        f"job-{i}" for i in range(4)
    ]
    events = sandbox.ctl.items(["get", "events", "-n", "team-b"])
    reclaimed = [e for e in events if e.get("reason") == "NPUCapacityReclaimed"]
    assert sorted(e["involvedObject"]["name"] for e in reclaimed) == ["job-4", "job-5"]
    assert all("to team a" in e["message"] for e in reclaimed), reclaimed
    for namespace in ("team-a", "team-b"):
        sandbox.ctl.run(["delete", "pods", "--all", "-n", namespace, "--wait=false"])
    sandbox.ctl.run(["delete", "configmap", "vnpu-scheduler-tenants", "-n", "kube-system"])
    sandbox.wait_for(
        lambda: not sandbox.pods("team-a") and not sandbox.pods("team-b"), "the team pods gone", 60
    )


def test_second_up_on_a_live_directory_is_refused(sandbox: Any) -> None:
    again = sandbox.command("up", "--dir", str(sandbox.directory))
    assert again.returncode == 1
    assert "already running" in again.stderr
    status = sandbox.command("status", "--dir", str(sandbox.directory))
    assert status.returncode == 0, status.stdout
    assert "Ready, NPUs published" in status.stdout


def test_down_stops_every_process_and_nothing_else(sandbox: Any) -> None:
    record = layout.read(layout.Layout.at(sandbox.directory))
    assert record is not None
    assert all(processes.alive(p) for p in record.processes)
    stopped = sandbox.command("down", "--dir", str(sandbox.directory))
    assert stopped.returncode == 0, stopped.stderr
    assert not [p.name for p in record.processes if processes.alive(p)]
    assert layout.read(layout.Layout.at(sandbox.directory)) is None
    again = sandbox.command("down", "--dir", str(sandbox.directory))
    assert "nothing to stop" in again.stdout
