"""Conformance of the API emulator, run twice: through the kubernetes client and through kubectl.

Each test uses only the ``driver`` operations, so the same assertions hold for both
clients; objects carry a per-test label so tests share one emulator safely.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

Json = dict[str, Any]


@pytest.fixture
def suite() -> str:
    return uuid.uuid4().hex[:10]


def configmap(name: str, suite: str, **extra: Any) -> Json:
    metadata = {"name": name, "namespace": "default", "labels": {"suite": suite}, **extra}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"k": "v"}}


def test_create_get_and_list_with_label_and_field_selectors(
    driver: Any, pod: Any, suite: str
) -> None:
    a, b, c = (f"sel-{n}-{suite}" for n in "abc")
    driver.create(pod(a, {"suite": suite, "app": "web", "tier": "front"}))
    driver.create(pod(b, {"suite": suite, "app": "web", "tier": "back"}))
    driver.create(pod(c, {"suite": suite, "app": "db"}))
    got = driver.get("pods", a)
    assert got["metadata"]["uid"]
    assert int(got["metadata"]["resourceVersion"]) > 0
    assert datetime.fromisoformat(got["metadata"]["creationTimestamp"]).tzinfo is not None
    assert got["status"]["phase"] == "Pending"
    assert got["spec"]["schedulerName"] == "default-scheduler"

    def names(labels: str = "", fields: str = "", **kwargs: Any) -> list[str]:
        return list(
            driver.names(
                "pods",
                labels=f"suite={suite}" + (f",{labels}" if labels else ""),
                fields=fields,
                **kwargs,
            )
        )

    assert names() == [a, b, c]
    assert names("app=web") == [a, b]
    assert names("app==db") == [c]
    assert names("app!=web") == [c]
    assert names("tier in (front)") == [a]
    assert names("tier notin (front)") == [b, c]
    assert names("tier") == [a, b]
    assert names("!tier") == [c]
    driver.bind(b, "node-sel", {})
    assert names(fields="spec.nodeName=node-sel") == [b]
    assert names(fields="spec.nodeName!=node-sel") == [a, c]
    assert names(fields="spec.nodeName=") == [a, c]
    assert names(fields="status.phase=Pending,metadata.name=" + a) == [a]
    assert names(fields="status.phase!=Pending") == []
    assert names(fields="metadata.namespace=default", all_namespaces=True) == [a, b, c]


def test_unsupported_field_selector_is_a_bad_request(driver: Any, rejected: Any) -> None:
    with pytest.raises(rejected) as caught:
        driver.names("pods", fields="spec.foo=bar")
    assert caught.value.reason == "BadRequest"
    # kubectl prefixes the server's message with what it was looking for
    assert caught.value.message.endswith("field label not supported: spec.foo")


def test_stale_resource_version_conflicts_and_duplicates_are_refused(
    driver: Any, rejected: Any, suite: str
) -> None:
    name = f"stale-{suite}"
    first = driver.create(configmap(name, suite))
    driver.annotate("configmaps", name, "touched", "yes")
    stale = dict(first, data={"k": "changed"})
    with pytest.raises(rejected) as caught:
        driver.replace(stale)
    assert caught.value.reason == "Conflict"
    assert caught.value.message == (
        f'Operation cannot be fulfilled on configmaps "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    current = driver.get("configmaps", name)
    replaced = driver.replace(dict(current, data={"k": "changed"}))
    assert replaced["data"] == {"k": "changed"}
    assert int(replaced["metadata"]["resourceVersion"]) > int(
        current["metadata"]["resourceVersion"]
    )
    with pytest.raises(rejected) as caught:
        driver.create(configmap(name, suite))
    assert (caught.value.reason, caught.value.message) == (
        "AlreadyExists",
        f'configmaps "{name}" already exists',
    )
    with pytest.raises(rejected) as caught:
        driver.get("configmaps", f"missing-{suite}")
    assert (caught.value.reason, caught.value.message) == (
        "NotFound",
        f'configmaps "missing-{suite}" not found',
    )


def _events(raw: bytes) -> list[Json]:
    return [json.loads(line) for line in raw.decode().splitlines() if line.strip()]


def test_watch_delivers_added_modified_deleted_from_a_resource_version(
    driver: Any, suite: str
) -> None:
    listed = json.loads(
        driver.raw_get(f"/api/v1/namespaces/default/configmaps?labelSelector=suite%3D{suite}")
    )
    start = listed["metadata"]["resourceVersion"]
    name = f"watched-{suite}"
    driver.create(configmap(name, suite))
    driver.create(configmap(f"other-{suite}", "someone-else"))
    driver.annotate("configmaps", name, "step", "two")
    driver.delete("configmaps", name)
    events = _events(
        driver.raw_get(
            f"/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={start}&labelSelector=suite%3D{suite}&timeoutSeconds=1"
        )
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", name),
        ("MODIFIED", name),
        ("DELETED", name),
    ]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions)
    assert len(set(versions)) == 3
    assert events[1]["object"]["metadata"]["annotations"] == {"step": "two"}


def test_watch_from_a_version_older_than_the_window_gets_410(
    driver: Any, fresh_api: Any, tmp_path: Path
) -> None:
    url = fresh_api(event_window=3)
    small = driver.on(url, Path(tempfile.mkdtemp(dir=tmp_path)))
    try:
        start = json.loads(small.raw_get("/api/v1/namespaces/default/configmaps"))["metadata"][
            "resourceVersion"
        ]
        for number in range(5):
            small.create(configmap(f"churn-{number}", "window"))
        events = _events(
            small.raw_get(
                f"/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={start}&timeoutSeconds=1"
            )
        )
        assert len(events) == 1
        assert events[0]["type"] == "ERROR"
        status = events[0]["object"]
        assert (status["kind"], status["status"], status["code"], status["reason"]) == (
            "Status",
            "Failure",
            410,
            "Expired",
        )
        assert status["message"].startswith(f"too old resource version: {start} (")
        latest = json.loads(small.raw_get("/api/v1/namespaces/default/configmaps"))["metadata"][
            "resourceVersion"
        ]
        assert (
            _events(
                small.raw_get(
                    f"/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={latest}&timeoutSeconds=1"
                )
            )
            == []
        )
    finally:
        small.close()


def test_binding_sets_the_node_and_copies_annotations_in_one_write(
    driver: Any, pod: Any, rejected: Any, suite: str
) -> None:
    name = f"bind-{suite}"
    created = driver.create(pod(name, {"suite": suite}))
    before = created["metadata"]["resourceVersion"]
    annotations = {"hami.io/vgpu-node": "node-a", "hami.io/bind-phase": "allocating"}
    driver.bind(name, "node-a", annotations)
    bound = driver.get("pods", name)
    assert bound["spec"]["nodeName"] == "node-a"
    assert annotations.items() <= bound["metadata"]["annotations"].items()
    assert {"type": "PodScheduled", "status": "True"}.items() <= bound["status"]["conditions"][
        0
    ].items()
    events = _events(
        driver.raw_get(
            f"/api/v1/namespaces/default/pods?watch=true&resourceVersion={before}&fieldSelector=metadata.name%3D{name}&timeoutSeconds=1"
        )
    )
    assert [e["type"] for e in events] == ["MODIFIED"]
    assert events[0]["object"]["spec"]["nodeName"] == "node-a"
    with pytest.raises(rejected) as caught:
        driver.bind(name, "node-b", {})
    assert caught.value.reason == "Conflict"
    assert (
        caught.value.message
        == f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is already assigned to node "node-a"'
    )


def _webhook_config(
    kind: str, name: str, url: str, ca_bundle: str, selector: Json, **extra: Any
) -> Json:
    client: Json = {"url": url}
    if ca_bundle:
        client["caBundle"] = ca_bundle
    hook = {
        "name": name,
        "clientConfig": client,
        "rules": [
            {
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
            }
        ],
        "objectSelector": {"matchLabels": selector},
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 5,
        **extra,
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": f"{name.split('.', maxsplit=1)[0]}-{uuid.uuid4().hex[:6]}"},
        "webhooks": [hook],
    }


def test_mutating_webhook_over_https_patches_created_pods(
    driver: Any, pod: Any, raw: Any, webhook_server: Any, patch_response: Any, suite: str
) -> None:
    def decide(review: Json) -> Json:
        return {
            "allowed": True,
            **patch_response(
                [
                    {"op": "add", "path": "/metadata/labels/mutated", "value": "yes"},
                    {
                        "op": "add",
                        "path": "/metadata/annotations",
                        "value": {"vnpu.test/by": "webhook"},
                    },
                ]
            ),
        }

    hook = webhook_server(decide, https=True)
    config = _webhook_config(
        "MutatingWebhookConfiguration",
        "mutate.vnpu.test",
        hook.url,
        hook.ca_bundle,
        {"hook": suite},
    )
    driver.create(config)
    try:
        created = driver.create(pod(f"mutated-{suite}", {"hook": suite}))
        assert created["metadata"]["labels"]["mutated"] == "yes"
        assert created["metadata"]["annotations"] == {"vnpu.test/by": "webhook"}
        untouched = driver.create(pod(f"plain-{suite}", {"suite": suite}))
        assert "mutated" not in untouched["metadata"]["labels"]
        assert len(hook.reviews) == 1
        request = hook.reviews[0]["request"]
        assert (request["operation"], request["namespace"], request["kind"]["kind"]) == (
            "CREATE",
            "default",
            "Pod",
        )
        assert request["object"]["metadata"]["name"] == f"mutated-{suite}"
    finally:
        raw.request(
            "DELETE",
            f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{config['metadata']['name']}",
        )


def test_validating_webhook_over_http_denies_with_the_webhooks_message(
    driver: Any, pod: Any, raw: Any, webhook_server: Any, rejected: Any, suite: str
) -> None:
    def decide(review: Json) -> Json:
        labels = review["request"]["object"]["metadata"].get("labels") or {}
        if "forbidden" in labels:
            return {
                "allowed": False,
                "status": {
                    "code": 403,
                    "reason": "Forbidden",
                    "message": "pods labelled forbidden are refused",
                },
            }
        return {"allowed": True}

    hook = webhook_server(decide)
    config = _webhook_config(
        "ValidatingWebhookConfiguration", "deny.vnpu.test", hook.url, "", {"hook": suite}
    )
    driver.create(config)
    try:
        with pytest.raises(rejected) as caught:
            driver.create(pod(f"denied-{suite}", {"hook": suite, "forbidden": "yes"}))
        assert caught.value.reason == "Forbidden"
        assert (
            caught.value.message
            == 'admission webhook "deny.vnpu.test" denied the request: pods labelled forbidden are refused'
        )
        with pytest.raises(rejected):
            driver.get("pods", f"denied-{suite}")
        allowed = driver.create(pod(f"allowed-{suite}", {"hook": suite}))
        assert allowed["metadata"]["uid"]
        assert (
            hook.reviews[-1]["request"]["object"]["metadata"]["uid"] == allowed["metadata"]["uid"]
        )
    finally:
        raw.request(
            "DELETE",
            f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{config['metadata']['name']}",
        )


def test_finalizers_keep_a_deleted_object_until_they_are_removed(
    driver: Any, rejected: Any, suite: str
) -> None:
    name = f"final-{suite}"
    driver.create(configmap(name, suite, finalizers=["vnpu.test/hold"]))
    driver.delete("configmaps", name)
    held = driver.get("configmaps", name)
    assert held["metadata"]["deletionTimestamp"]
    assert held["metadata"]["finalizers"] == ["vnpu.test/hold"]
    driver.merge_patch("configmaps", name, {"metadata": {"finalizers": None}})
    with pytest.raises(rejected) as caught:
        driver.get("configmaps", name)
    assert caught.value.reason == "NotFound"


def test_bound_pods_wait_for_their_grace_period_unless_deleted_with_grace_zero(
    driver: Any, pod: Any, rejected: Any, suite: str
) -> None:
    name = f"grace-{suite}"
    driver.create(pod(name, {"suite": suite}))
    driver.bind(name, "node-g", {})
    driver.delete("pods", name)
    terminating = driver.get("pods", name)
    assert terminating["metadata"]["deletionTimestamp"]
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == 30
    driver.delete("pods", name, grace=0)
    with pytest.raises(rejected):
        driver.get("pods", name)
    unbound = f"unbound-{suite}"
    driver.create(pod(unbound, {"suite": suite}))
    driver.delete("pods", unbound)
    with pytest.raises(rejected):
        driver.get("pods", unbound)
