"""The demo scenario in DRA mode: ``vnpu-sandbox demo --mode dra`` on ``up --mode dra``.

kube-scheduler allocates the npu.vnpu.io driver's devices; the demo reads what each pod holds
from the ResourceClaims, prints kube-scheduler's own reason for a pod that does not fit and
what the webhook made of each workload's request, scales a Deployment down (the driver
destroys the vNPUs of the pods deleted) and compares Prometheus's figures with what it placed.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
MODE = "dra"
PROMETHEUS = True
CLUSTER = """\
nodes:
  - {name: duo, chip: 310P3, chips: 2, server: 300i-duo}
  - {name: train, chip: 910A, chips: 8, server: 910a-8}
"""

# Two 310P3 chips hold four vNPUs of the 12288 MiB tier (vir04 + vir04_3c on each: 8 AI
# cores, 7 AI CPUs): the fifth replica does not fit, whichever order they are placed in.
DEMO_MANIFESTS = {
    "00-web.yaml": """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 5
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: web
          image: x
          resources: {limits: {huawei.com/Ascend310P: 1, huawei.com/Ascend310P-memory: 12000}}
""",
    "10-pinned.yaml": """\
apiVersion: v1
kind: Pod
metadata: {name: notebook, annotations: {vnpu.io/template: vir16}}
spec:
  containers:
    - name: jupyter
      image: x
      resources: {limits: {huawei.com/Ascend910A: 1, huawei.com/Ascend910A-memory: 16384}}
""",
    "20-whole.yaml": """\
apiVersion: v1
kind: Pod
metadata: {name: trainer}
spec:
  containers:
    - {name: c, image: x, resources: {limits: {huawei.com/Ascend910A: 1}}}
""",
}


def test_the_dra_demo_places_explains_and_counts_from_the_claims(sandbox: Any) -> None:
    manifests = sandbox.directory / "demo-dra"
    manifests.mkdir()
    for name, text in DEMO_MANIFESTS.items():
        (manifests / name).write_text(text, encoding="utf-8")
    played = sandbox.command(
        "demo", "--dir", str(sandbox.directory), "--mode", "dra", "--manifests", str(manifests),
        "--scale", "default/web=3",
    )  # fmt: skip
    assert played.returncode == 0, played.stderr + played.stdout
    out = played.stdout
    assert "DRA mode: kube-scheduler allocates the devices of driver npu.vnpu.io" in out, out
    assert re.search(r"default/web\s+npu\.vnpu\.io/ascend310p-12288m: 1\n", out), out
    assert re.search(r"default/notebook\s+npu\.vnpu\.io/ascend910a-vir16: 1\n", out), out
    assert re.search(r"default/trainer\s+huawei\.com/Ascend910A: 1\n", out), out
    assert "Where the pods landed (6 of 7 placed)" in out, out
    assert re.search(r"default/notebook\s+Running\s+chip \d: vir16\n", out), out
    assert re.search(r"default/trainer\s+Running\s+chip \d: whole chip\n", out), out
    assert "Refused (1)" in out
    refusal = (
        r"default/web-[a-z0-9]+-[a-z0-9]+:\n  0/2 nodes are available: 2 cannot allocate all claims"
    )
    assert re.search(refusal, out), out
    assert "  it asks for npu.vnpu.io/ascend310p-12288m: 1\n" in out
    # The pending replica goes first, then one running: its vNPU is destroyed by the driver.
    assert "2 pods removed, 0 created:" in out
    assert re.search(r"Ascend310P\s+2/2\s+36 of 48 GiB \(75%\)\s+3 vNPUs, 0 whole", out), out
    assert re.search(r"Ascend910A\s+2/8\s+.*1 vNPUs, 1 whole", out), out
    sandbox.wait_for(lambda: len(sandbox.vnpus("duo")) == 3, "three vNPUs left on duo", 30)
    if sandbox.record.prometheus_url is not None:
        assert "once it has scraped the 5 allocations" in out
        assert "still differs from what was placed" not in out
        assert re.search(r"template=vir16\s+1\n", out), out
    sandbox.ctl.run(["delete", "deployment", "web"])
    sandbox.ctl.run(["delete", "pod", "notebook", "trainer", "--wait=false"])
    sandbox.wait_for(
        lambda: not sandbox.pods(), "the demo's pods gone", 60, explain=sandbox.describe_pods
    )
    sandbox.wait_for(lambda: not sandbox.vnpus("duo"), "the web vNPUs destroyed", 30)
    sandbox.wait_for(lambda: not sandbox.vnpus("train"), "the notebook's vNPU destroyed", 30)
