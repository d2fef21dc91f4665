"""Admission webhooks beyond the conformance cases: failure policies, timeouts, selectors, rules."""

from __future__ import annotations

import json
from typing import Any

import pytest

Json = dict[str, Any]
PODS = "/api/v1/namespaces/default/pods"
MUTATING = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


def configuration(kind: str, client: Json, **hook: Any) -> Json:
    webhook = {
        "name": "hook.vnpu.test",
        "clientConfig": client,
        "rules": [
            {
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
            }
        ],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        **hook,
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "hooks"},
        "webhooks": [webhook],
    }


@pytest.fixture
def http(fresh_api: Any, make_http: Any) -> Any:
    """A private emulator: webhook configurations here apply to every pod created."""
    return make_http(fresh_api())


def create_pod(http: Any, pod: Any, name: str, **labels: str) -> tuple[int, Json]:
    status, answer = http.json("POST", PODS, pod(name, labels))
    return status, answer


def test_unreachable_webhook_fails_closed_or_is_ignored(
    http: Any, pod: Any, caplog: pytest.LogCaptureFixture
) -> None:
    hook = configuration(
        "ValidatingWebhookConfiguration", {"url": "https://127.0.0.1:1/admit"}, timeoutSeconds=2
    )
    assert http.json("POST", VALIDATING, hook)[0] == 201
    status, answer = create_pod(http, pod, "closed")
    assert (status, answer["reason"]) == (500, "InternalError")
    assert answer["message"].startswith(
        'Internal error occurred: failed calling webhook "hook.vnpu.test": failed to call webhook: Post "https://127.0.0.1:1/admit": '
    )
    assert http.json("GET", f"{PODS}/closed")[0] == 404
    hook["webhooks"][0]["failurePolicy"] = "Ignore"
    current = http.json("GET", f"{VALIDATING}/hooks")[1]
    hook["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    assert http.json("PUT", f"{VALIDATING}/hooks", hook)[0] == 200
    with caplog.at_level("WARNING", logger="vnpu_sandbox.apiserver.admission"):
        assert create_pod(http, pod, "open")[0] == 201
    assert (
        'admission_webhook_ignored webhook=hook.vnpu.test error=failed calling webhook "hook.vnpu.test"'
        in caplog.text
    )


def test_a_slow_webhook_times_out(http: Any, pod: Any, webhook_server: Any) -> None:
    slow = webhook_server(lambda review: {"__sleep__": 2.5})
    http.json(
        "POST",
        MUTATING,
        configuration("MutatingWebhookConfiguration", {"url": slow.url}, timeoutSeconds=1),
    )
    status, answer = create_pod(http, pod, "late")
    assert status == 500
    assert answer["message"].endswith(
        f'failed to call webhook: Post "{slow.url}": context deadline exceeded'
    )


def test_service_references_cannot_be_called(http: Any, pod: Any) -> None:
    service = {"service": {"namespace": "vnpu", "name": "vnpu-scheduler", "path": "/mutate"}}
    status, stored = http.json(
        "POST", MUTATING, configuration("MutatingWebhookConfiguration", service)
    )
    assert status == 201
    assert stored["webhooks"][0]["clientConfig"]["service"]["port"] == 443
    status, answer = create_pod(http, pod, "service")
    assert status == 500
    assert "clientConfig.service cannot be resolved" in answer["message"]
    assert "use clientConfig.url" in answer["message"]


def test_denials_default_to_400_and_explain_themselves(
    http: Any, pod: Any, webhook_server: Any
) -> None:
    silent = webhook_server(lambda review: {"allowed": False})
    http.json(
        "POST", VALIDATING, configuration("ValidatingWebhookConfiguration", {"url": silent.url})
    )
    status, answer = create_pod(http, pod, "silent")
    assert status == 400
    assert (
        answer["message"]
        == 'admission webhook "hook.vnpu.test" denied the request without explanation'
    )
    assert "reason" not in answer


def test_selectors_and_rules_pick_the_requests_sent(
    http: Any, pod: Any, webhook_server: Any
) -> None:
    seen = webhook_server(lambda review: {"allowed": True})
    hook = configuration(
        "ValidatingWebhookConfiguration",
        {"url": seen.url},
        namespaceSelector={
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["default"]}
            ]
        },
        objectSelector={"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]},
    )
    hook["webhooks"][0]["rules"].append(
        {
            "operations": ["*"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["configmaps"],
            "scope": "Cluster",
        }
    )
    http.json("POST", VALIDATING, hook)
    create_pod(http, pod, "checked")
    create_pod(http, pod, "skipped", skip="yes")
    http.json("POST", "/api/v1/namespaces", {"metadata": {"name": "elsewhere"}})
    http.json(
        "POST", "/api/v1/namespaces/elsewhere/pods", dict(pod("other"), metadata={"name": "other"})
    )
    http.json(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        {"metadata": {"name": "namespaced-so-out-of-scope"}},
    )
    assert [r["request"]["name"] for r in seen.reviews] == ["checked"]
    review = seen.reviews[0]
    assert review["apiVersion"] == "admission.k8s.io/v1"
    assert review["request"]["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert review["request"]["oldObject"] is None
    assert review["request"]["object"]["metadata"]["uid"], (
        "validating webhooks see the object as it will be stored"
    )


def test_mutations_are_defaulted_and_chained_in_name_order(
    http: Any, pod: Any, webhook_server: Any, patch_response: Any
) -> None:
    def add_container(review: Json) -> Json:
        return {
            "allowed": True,
            **patch_response(
                [
                    {
                        "op": "add",
                        "path": "/spec/containers/-",
                        "value": {"name": "sidecar", "image": "side:1.0"},
                    }
                ]
            ),
        }

    def label_containers(review: Json) -> Json:
        count = str(len(review["request"]["object"]["spec"]["containers"]))
        return {
            "allowed": True,
            "warnings": ["labelled"],
            **patch_response(
                [{"op": "add", "path": "/metadata/labels/containers", "value": count}]
            ),
        }

    first, second = webhook_server(add_container), webhook_server(label_containers)
    for name, url in (("a-first", first.url), ("b-second", second.url)):
        body = configuration("MutatingWebhookConfiguration", {"url": url})
        body["metadata"]["name"] = name
        assert http.json("POST", MUTATING, body)[0] == 201
    body = pod("chained")
    del body["metadata"]["namespace"]
    status, headers, raw_body = http.request("POST", PODS, body)
    created = json.loads(raw_body)
    assert status == 201
    assert created["metadata"]["labels"]["containers"] == "2"
    sidecar = created["spec"]["containers"][1]
    assert sidecar["imagePullPolicy"] == "IfNotPresent", "patched-in containers get defaults"
    assert headers["warning"] == '299 - "labelled"'
    sent = first.reviews[0]["request"]["object"]["metadata"]
    assert sent["namespace"] == "default", "webhooks see the namespace taken from the URL"
    assert "uid" not in sent, "mutating webhooks run before the object gets its uid"


def test_broken_webhook_answers_are_call_failures(http: Any, pod: Any, webhook_server: Any) -> None:
    wrong = webhook_server(
        lambda review: {"allowed": True, "patch": "bm90IGpzb24=", "patchType": "JSONPatch"}
    )
    http.json("POST", MUTATING, configuration("MutatingWebhookConfiguration", {"url": wrong.url}))
    status, answer = create_pod(http, pod, "broken")
    assert status == 500
    assert (
        'admission webhook "hook.vnpu.test" returned a patch that cannot be applied'
        in answer["message"]
    )


def test_webhook_configurations_are_validated(http: Any) -> None:
    bad = configuration(
        "ValidatingWebhookConfiguration", {}, name="short", timeoutSeconds=99, sideEffects="Some"
    )
    status, answer = http.json("POST", VALIDATING, bad)
    assert (status, answer["reason"]) == (422, "Invalid")
    fields = [c["field"] for c in answer["details"]["causes"]]
    assert fields == [
        "webhooks[0].name",
        "webhooks[0].clientConfig",
        "webhooks[0].sideEffects",
        "webhooks[0].timeoutSeconds",
    ]
