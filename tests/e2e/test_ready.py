"""Ready means usable: the moment ``vnpu-sandbox up`` returns, an NPU pod applied in ``default``
is admitted (its ServiceAccount exists, vnpu's webhook answers) and scheduled.

The module's sandbox is brought up by the fixture just before the test runs; the test applies
at once, with nothing waited for in between.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

CLUSTER = """\
nodes:
  - {name: one, chip: 310P3, chips: 2, server: 300i-duo}
"""
POD = """\
apiVersion: v1
kind: Pod
metadata: {name: first}
spec:
  containers:
    - name: main
      image: registry.invalid/app:1
      resources: {limits: {huawei.com/Ascend310P: 1, huawei.com/Ascend310P-memory: 4000}}
"""


def test_an_npu_pod_applied_right_after_up_is_admitted_and_runs(sandbox: Any) -> None:
    sandbox.apply(POD)
    pod = sandbox.pods()["first"]
    assert pod["spec"]["schedulerName"] == "vnpu-scheduler"  # the webhook routed it
    running = sandbox.wait_for(
        lambda: sandbox.pods()["first"]["status"].get("phase") == "Running" and sandbox.pods(),
        "the pod Running",
        60,
    )
    assert running["first"]["spec"]["nodeName"] == "one"
    sandbox.ctl.run(["delete", "pod", "first"])
