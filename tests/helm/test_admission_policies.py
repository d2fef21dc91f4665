"""The admission policies as the chart renders them, and the values that shape them.

What the policies refuse is shown against a real kube-apiserver in
``test_admission_enforced.py``; here: which objects are rendered for which values, whom they
exempt, that every binding names a rendered policy, and that the webhooks and the policies
agree on what an NPU pod is.
"""

from __future__ import annotations

import json
from pathlib import Path

import helm_python as helm
import pytest
import yaml

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "vnpu"
SCHEDULER = "system:serviceaccount:kube-system:vnpu-scheduler"
DEVICE_PLUGIN = "system:serviceaccount:kube-system:vnpu-device-plugin"
VOLCANO = "system:serviceaccount:volcano-system:volcano-scheduler"
POLICIES = ("vnpu-npu-pods", "vnpu-decision-annotations")


def _trusted(policy) -> list[str]:
    """The user names a policy's untrusted-requester condition exempts."""
    (condition,) = [
        c for c in policy["spec"]["matchConditions"] if c["name"] == "untrusted-requester"
    ]
    expression = condition["expression"]
    prefix, suffix = "!(request.userInfo.username in ", ")"
    assert expression.startswith(prefix), expression
    assert expression.endswith(suffix), expression
    names: list[str] = json.loads(expression[len(prefix) : -len(suffix)])
    return names


def _messages(policy) -> str:
    """The CEL that builds a policy's messages (its validations and the variables they use)."""
    spec = policy["spec"]
    return json.dumps([spec["validations"], spec.get("variables", [])])


def test_two_policies_each_with_its_binding(default):
    policies = {p["metadata"]["name"]: p for p in default.all("ValidatingAdmissionPolicy")}
    bindings = {b["metadata"]["name"]: b for b in default.all("ValidatingAdmissionPolicyBinding")}
    assert set(policies) == set(bindings) == set(POLICIES)
    for name, binding in bindings.items():
        assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
        # No matchResources: every namespace, kube-system included.
        assert "matchResources" not in binding["spec"]
    for policy in policies.values():
        assert policy["spec"]["failurePolicy"] == "Fail"
        assert _trusted(policy) == [SCHEDULER, DEVICE_PLUGIN]


def test_what_each_policy_looks_at(default):
    npu = default.get("ValidatingAdmissionPolicy", "vnpu-npu-pods")["spec"]
    assert npu["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
    ]
    assert [c["name"] for c in npu["matchConditions"]] == ["untrusted-requester", "npu-pod"]
    nodename, skip = npu["validations"]
    assert nodename["expression"] == "!has(object.spec.nodeName) || object.spec.nodeName == ''"
    assert "request.namespace in []" in skip["expression"]
    decisions = default.get("ValidatingAdmissionPolicy", "vnpu-decision-annotations")["spec"]
    assert decisions["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["pods", "pods/status"],
        },
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods/binding"],
        },
    ]
    # Every pod, NPU or not: a forged decision on any pod makes chips look held.
    assert [c["name"] for c in decisions["matchConditions"]] == ["untrusted-requester"]
    assert [v["expression"] for v in decisions["validations"]] == [
        "variables.written.size() == 0",
        "variables.removed.size() == 0",
        "request.operation != 'UPDATE' || variables.where != '' || "
        "variables.annotations[?'vnpu.io/template'] == variables.before[?'vnpu.io/template']",
    ]
    for policy in (npu, decisions):
        for validation in policy["validations"]:
            assert validation["reason"] == "Forbidden"
            assert validation["message"]  # shown if the message expression cannot be evaluated
    for name in POLICIES:  # who may do it
        assert f"vnpu's scheduler and device plugin ({SCHEDULER}, {DEVICE_PLUGIN})" in _messages(
            default.get("ValidatingAdmissionPolicy", name)
        )


def test_the_webhooks_and_the_policy_agree_on_npu_pods(default):
    policy = default.get("ValidatingAdmissionPolicy", "vnpu-npu-pods")
    (npu_pod,) = [c for c in policy["spec"]["matchConditions"] if c["name"] == "npu-pod"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        (hook,) = default.get(kind, "vnpu-scheduler")["webhooks"]
        assert hook["failurePolicy"] == "Fail"
        assert hook["matchConditions"] == [npu_pod]


def test_the_identities_follow_release_namespace_and_values(render):
    manifests = render(
        {"admissionPolicy": {"trustedUsers": ["system:serviceaccount:hami:hami-scheduler"]}},
        namespace="npu-system",
        release="acme",
    )
    expected = [
        "system:serviceaccount:npu-system:acme-vnpu-scheduler",
        "system:serviceaccount:npu-system:acme-vnpu-device-plugin",
        "system:serviceaccount:hami:hami-scheduler",
    ]
    for name in ("acme-vnpu-npu-pods", "acme-vnpu-decision-annotations"):
        policy = manifests.get("ValidatingAdmissionPolicy", name)
        assert _trusted(policy) == expected
        who = "admissionPolicy.trustedUsers (system:serviceaccount:hami:hami-scheduler)"
        assert who in _messages(policy)
    # The service account the scheduler's pods really run as is the one exempted.
    spec, _ = manifests.container("vnpu-scheduler")
    assert spec["serviceAccountName"] == "acme-vnpu-scheduler"
    spec, _ = manifests.container("device-plugin")
    assert spec["serviceAccountName"] == "acme-vnpu-device-plugin"


def test_under_volcano_volcanos_scheduler_is_trusted_and_no_label_rule(render):
    volcano = yaml.safe_load((CHART / "values-volcano.yaml").read_text(encoding="utf-8"))
    manifests = render(volcano)
    npu = manifests.get("ValidatingAdmissionPolicy", "vnpu-npu-pods")
    decisions = manifests.get("ValidatingAdmissionPolicy", "vnpu-decision-annotations")
    for policy in (npu, decisions):
        assert _trusted(policy) == [DEVICE_PLUGIN, VOLCANO]
    # No vnpu webhook, so its skip label skips nothing: only the spec.nodeName rule is left.
    assert [v["expression"] for v in npu["spec"]["validations"]] == [
        "!has(object.spec.nodeName) || object.spec.nodeName == ''"
    ]
    assert f"vnpu's device plugin ({DEVICE_PLUGIN}) and the identities" in _messages(npu)


@pytest.mark.parametrize(
    ("values", "label_rule"),
    [
        ({"scheduler": {"webhook": {"enabled": False}}}, False),
        ({"scheduler": {"webhook": {"ignoreLabel": "vnpu.io/webhook"}}}, True),
    ],
    ids=["no-webhook", "own-label"],
)
def test_the_label_rule_follows_the_webhook(render, values, label_rule):
    npu = render(values).get("ValidatingAdmissionPolicy", "vnpu-npu-pods")["spec"]
    assert len(npu["validations"]) == (2 if label_rule else 1)
    markers = next(v for v in npu["variables"] if v["name"] == "skipMarkers")["expression"]
    if label_rule:
        # Both label keys: the webhook itself also lets hami.io/webhook through.
        assert '["vnpu.io/webhook","hami.io/webhook"]' in markers


def test_namespaces_that_may_skip_the_webhook(render):
    manifests = render({"admissionPolicy": {"ignoreLabelNamespaces": ["legacy", "batch"]}})
    npu = manifests.get("ValidatingAdmissionPolicy", "vnpu-npu-pods")["spec"]
    skip = npu["validations"][1]
    assert skip["expression"].endswith('request.namespace in ["legacy","batch"]')
    assert "admissionPolicy.ignoreLabelNamespaces (legacy, batch)" in skip["messageExpression"]


def test_warn_and_audit_instead_of_deny(render):
    manifests = render({"admissionPolicy": {"validationActions": ["Warn", "Audit"]}})
    for binding in manifests.all("ValidatingAdmissionPolicyBinding"):
        assert binding["spec"]["validationActions"] == ["Warn", "Audit"]
    with pytest.raises(helm.HelmRenderError, match=r"admissionPolicy\.validationActions: Deny"):
        render({"admissionPolicy": {"validationActions": ["Deny", "Warn"]}})


def test_turned_off(render):
    manifests = render({"admissionPolicy": {"enabled": False}})
    assert manifests.all("ValidatingAdmissionPolicy") == []
    assert manifests.all("ValidatingAdmissionPolicyBinding") == []
    assert "admissionPolicy.enabled=false" in manifests.notes


def test_notes_say_what_is_refused(default):
    assert "vnpu-npu-pods and vnpu-decision-annotations (Deny)" in default.notes


def test_the_chart_needs_the_kubernetes_that_has_them():
    """ValidatingAdmissionPolicy v1 and webhook matchConditions are GA in Kubernetes 1.30:
    `helm install` on an older cluster stops with the chart's kubeVersion named."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert chart["kubeVersion"] == ">=1.30.0-0"
