"""vnpu under the real kube-apiserver, kube-controller-manager and kube-scheduler.

Where both exist, the real one is the judge: kubectl validates against the server's OpenAPI
schema, the Deployment controller makes the pods, kube-scheduler calls vnpu-scheduler as its
extender (filter, prioritize, bind) with the chart's configuration, kube-apiserver calls the
webhooks over TLS and charges the ResourceQuota after they have rounded the request, and the
Node authorizer and NodeRestriction judge every write of the simulated kubelets.
"""

from __future__ import annotations

from typing import Any

import pytest

from vnpu_core import protocol
from vnpu_sandbox.platform import kubectl

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

MEMORY = "huawei.com/Ascend310P-memory"
DEPLOYMENT = """\
apiVersion: v1
kind: Namespace
metadata: {name: docs}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: ocr, namespace: docs}
spec:
  replicas: 2
  selector: {matchLabels: {app: ocr}}
  template:
    metadata: {labels: {app: ocr}}
    spec:
      containers:
        - name: ocr
          image: registry.invalid/ocr:1
          resources: {limits: {huawei.com/Ascend310P: 1, huawei.com/Ascend310P-memory: 2000}}
"""


def _phases(sandbox: Any, namespace: str, label: str) -> dict[str, str]:
    pods = sandbox.ctl.items(["get", "pods", "-n", namespace, "-l", label])
    return {p["metadata"]["name"]: p.get("status", {}).get("phase", "") for p in pods}


def _running(sandbox: Any, namespace: str, label: str, count: int) -> dict[str, str] | None:
    phases = _phases(sandbox, namespace, label)
    if len(phases) == count and set(phases.values()) == {"Running"}:
        return phases
    return None


def test_a_deployment_is_validated_scheduled_through_the_extender_and_scaled(sandbox: Any) -> None:
    # Validation is on: the server's schema refuses an unknown field before anything is made.
    typo = DEPLOYMENT.replace("replicas: 2", "replica: 2")
    with pytest.raises(kubectl.KubectlError, match=r"unknown field \"spec.replica\""):
        sandbox.ctl.run(["apply", "-f", str(sandbox.write(typo))])
    sandbox.ctl.run(["apply", "-f", str(sandbox.write(DEPLOYMENT))])
    sandbox.wait_for(lambda: _running(sandbox, "docs", "app=ocr", 2), "2 ocr pods Running", 90)

    for pod in sandbox.pods("docs").values():
        spec = pod["spec"]
        # The mutating webhook routed the pod and rounded 2000 MiB to the vir01 template.
        assert spec["schedulerName"] == "vnpu-scheduler"
        assert spec["containers"][0]["resources"]["limits"][MEMORY] == "3072"
        assert spec["nodeName"] == "duo"
        # vnpu-scheduler bound it (the extender's bind verb) and recorded its decision.
        assert protocol.allocated_key("Ascend310P") in pod["metadata"]["annotations"]

    # kube-controller-manager scales through the ReplicaSet, up and then down.
    sandbox.ctl.run(["scale", "deployment", "-n", "docs", "ocr", "--replicas=5"])
    sandbox.wait_for(lambda: _running(sandbox, "docs", "app=ocr", 5), "5 ocr pods Running", 90)
    sandbox.ctl.run(["scale", "deployment", "-n", "docs", "ocr", "--replicas=1"])
    sandbox.wait_for(lambda: _running(sandbox, "docs", "app=ocr", 1), "1 ocr pod left", 90)
    deployment = sandbox.ctl.json(["get", "deployment", "-n", "docs", "ocr"])
    assert deployment["status"]["availableReplicas"] == 1

    # Deleting the Deployment leaves its ReplicaSet and pods to the garbage collector.
    sandbox.ctl.run(["delete", "deployment", "-n", "docs", "ocr"])
    sandbox.wait_for(lambda: not _phases(sandbox, "docs", "app=ocr"), "the pods collected", 90)


def test_the_webhook_over_tls_refuses_what_no_chip_can_serve(sandbox: Any) -> None:
    pod = """\
apiVersion: v1
kind: Pod
metadata: {name: huge, namespace: default}
spec:
  containers:
    - name: c
      image: registry.invalid/x:1
      resources: {limits: {huawei.com/Ascend310P: 1, huawei.com/Ascend310P-memory: 999999}}
"""
    with pytest.raises(kubectl.KubectlError) as refused:
        sandbox.ctl.run(["create", "-f", str(sandbox.write(pod))])
    assert 'admission webhook "mutate.vnpu.io" denied the request' in str(refused.value)
    assert MEMORY in str(refused.value)


def test_kube_scheduler_reports_the_extenders_reasons(sandbox: Any) -> None:
    pod = """\
apiVersion: v1
kind: Pod
metadata: {name: sixteen, namespace: default}
spec:
  containers:
    - {name: c, image: registry.invalid/x:1, resources: {limits: {huawei.com/Ascend910B3: 16}}}
"""
    sandbox.ctl.run(["create", "-f", str(sandbox.write(pod))])

    def refusal() -> dict[str, Any] | None:
        events = sandbox.ctl.items(
            ["get", "events", "-n", "default", "--field-selector", "involvedObject.name=sixteen"]
        )
        found = [e for e in events if e.get("reason") == "FailedScheduling"]
        return found[-1] if found else None

    event = sandbox.wait_for(refusal, "kube-scheduler's FailedScheduling event", 60)
    assert event["message"].startswith("0/3 nodes are available: "), event
    assert "Ascend910B3" in event["message"], event
    assert event.get("reportingComponent") == "vnpu-scheduler", event
    assert sandbox.pods("default")["sixteen"]["status"]["phase"] == "Pending"
    sandbox.ctl.run(["delete", "pod", "-n", "default", "sixteen", "--wait=false"])


def test_resource_quota_charges_the_rounded_memory(sandbox: Any) -> None:
    quota = """\
apiVersion: v1
kind: Namespace
metadata: {name: quota}
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: npu, namespace: quota}
spec:
  hard: {requests.huawei.com/Ascend310P-memory: "6144"}
"""
    sandbox.ctl.run(["apply", "-f", str(sandbox.write(quota))])

    def pod(name: str, memory: int) -> str:
        return f"""\
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: quota}}
spec:
  containers:
    - name: c
      image: registry.invalid/x:1
      resources: {{limits: {{huawei.com/Ascend310P: 1, huawei.com/Ascend310P-memory: {memory}}}}}
"""

    def used() -> str:
        status = sandbox.ctl.json(["get", "resourcequota", "-n", "quota", "npu"]).get("status", {})
        return str(status.get("used", {}).get(f"requests.{MEMORY}", ""))

    # The quota controller fills in status before the admission plugin charges anything.
    sandbox.wait_for(lambda: used() == "0", "the quota's status", 30)
    sandbox.ctl.run(["create", "-f", str(sandbox.write(pod("a", 2000)))])
    sandbox.ctl.run(["create", "-f", str(sandbox.write(pod("b", 2000)))])
    assert used() == "6144"  # 2 x 3072 (vir01), not 2 x 2000
    # 1000 MiB more would fit in 6144 unrounded (5000); rounded to 3072 it does not.
    with pytest.raises(kubectl.KubectlError, match="exceeded quota: npu,"):
        sandbox.ctl.run(["create", "-f", str(sandbox.write(pod("c", 1000)))])
    # Kubernetes quotas extended resources by requests only: a limits.<extended> hard limit is
    # accepted, never counted and never enforced by it. vnpu reads it as the real total of the
    # model's memory and enforces it: a request that alone passes it is denied at admission.
    limits = """\
apiVersion: v1
kind: ResourceQuota
metadata: {name: npu-limits, namespace: quota}
spec:
  hard: {limits.huawei.com/Ascend310P-memory: "1"}
"""
    sandbox.ctl.run(["apply", "-f", str(sandbox.write(limits))])
    counted = sandbox.ctl.json(["get", "resourcequota", "-n", "quota", "npu-limits"])
    assert f"limits.{MEMORY}" not in counted.get("status", {}).get("used", {})

    def denied() -> str:
        try:
            sandbox.ctl.run(
                ["create", "--dry-run=server", "-f", str(sandbox.write(pod("d", 1000)))]
            )
        except kubectl.KubectlError as exc:
            return str(exc)
        return ""

    message = sandbox.wait_for(denied, "vnpu's webhook applying npu-limits", 30)
    assert (
        "the request alone exceeds its NPU quota: quota quota/npu-limits "
        "limits.huawei.com/Ascend310P-memory: used 0 + asked 3072 > limit 1 MiB"
    ) in message
    sandbox.ctl.run(["delete", "namespace", "quota", "--wait=false"])


def test_each_kubelet_may_change_only_its_own_node(sandbox: Any) -> None:
    duo = sandbox.as_identity("node-duo")
    # The node's own object it may read and change; another node's it may not.
    duo.run(["annotate", "node", "duo", "vnpu.io/checked=yes", "--overwrite"])
    with pytest.raises(kubectl.KubectlError, match=r"[Ff]orbidden"):
        duo.run(["annotate", "node", "a2", "vnpu.io/checked=yes", "--overwrite"])
    # Nor may it read what is not bound to it, such as a Secret.
    with pytest.raises(kubectl.KubectlError, match=r"[Ff]orbidden"):
        duo.run(["get", "secrets", "-n", "kube-system"])
    leases = sandbox.ctl.items(["get", "leases", "-n", "kube-node-lease"])
    assert {lease["metadata"]["name"] for lease in leases} >= {"duo", "a2", "soft"}


def test_the_charts_admission_policies_refuse_what_would_skip_the_scheduler(sandbox: Any) -> None:
    """``up --rbac`` applied the chart's ValidatingAdmissionPolicies: kube-apiserver itself
    refuses an NPU pod that presets its node, skips the webhook and brings its own decision,
    and a rewrite of a running pod's decision, whoever asks but vnpu's own services (the
    sandbox's admin too); a controller's pods are judged by their template."""
    attack = f"""\
apiVersion: v1
kind: Pod
metadata:
  name: forged
  namespace: default
  labels: {{hami.io/webhook: ignore}}
  annotations: {{{protocol.allocated_key("Ascend310P")}: "chip-0,Ascend310P,3072,1:;"}}
spec:
  nodeName: duo
  containers:
    - {{name: c, image: registry.invalid/x:1, resources: {{limits: {{huawei.com/Ascend310P: 1}}}}}}
"""
    with pytest.raises(kubectl.KubectlError) as refused:
        sandbox.ctl.run(["create", "-f", str(sandbox.write(attack))])
    assert "ValidatingAdmissionPolicy 'vnpu-" in str(refused.value)

    held = (
        DEPLOYMENT.replace("ocr", "held")
        .replace("docs", "held")
        .replace("replicas: 2", "replicas: 1")
    )
    sandbox.ctl.run(["apply", "-f", str(sandbox.write(held))])
    phases = sandbox.wait_for(lambda: _running(sandbox, "held", "app=held", 1), "a held pod", 90)
    (name,) = phases
    # The device plugin answered the scheduler's decision (both are vnpu's: allowed).
    annotations = sandbox.pods("held")[name]["metadata"]["annotations"]
    assert annotations[protocol.BIND_PHASE_KEY] == "success"
    with pytest.raises(kubectl.KubectlError) as refused:
        sandbox.ctl.run(
            [
                "annotate",
                "pod",
                "-n",
                "held",
                name,
                "--overwrite",
                f"{protocol.BIND_PHASE_KEY}=failed",
            ]
        )
    assert "ValidatingAdmissionPolicy 'vnpu-decision-annotations'" in str(refused.value)
    assert f"metadata.annotations[{protocol.BIND_PHASE_KEY}]: failed is refused" in str(
        refused.value
    )

    # A decision in a Deployment's pod template: the ReplicaSet controller is refused and says so.
    template = held.replace("name: held, namespace: held", "name: templated, namespace: held")
    template = template.replace(
        "metadata: {labels: {app: held}}",
        f"metadata: {{labels: {{app: templated}}, annotations: {{{protocol.VGPU_NODE_KEY}: duo}}}}",
    ).replace("app: held", "app: templated")

    def failed_create() -> str:
        events = sandbox.ctl.items(["get", "events", "-n", "held"])
        found = [e["message"] for e in events if e.get("reason") == "FailedCreate"]
        return found[-1] if found else ""

    sandbox.ctl.run(["apply", "-f", str(sandbox.write(template))])
    message = sandbox.wait_for(failed_create, "the ReplicaSet controller refused", 60)
    assert f"metadata.annotations[{protocol.VGPU_NODE_KEY}]: duo is refused" in message
    assert "pod template of its controller" in message
    assert set(_phases(sandbox, "held", "app=templated")) == set()
    sandbox.ctl.run(["delete", "namespace", "held", "--wait=false"])
