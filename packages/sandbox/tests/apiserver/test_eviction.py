"""The pods/eviction subresource: a policy/v1 Eviction deletes the pod as a DELETE would."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client as k8s

Json = dict[str, Any]
PODS = "/api/v1/namespaces/default/pods"


def _eviction(name: str, **delete_options: Any) -> Json:
    body: Json = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
    if delete_options:
        body["deleteOptions"] = delete_options
    return body


def test_evicting_a_pod_on_a_node_starts_its_graceful_deletion(
    raw: Any, pod: Any, unique: Any
) -> None:
    name = unique("evict")
    raw.json("POST", PODS, pod(name, nodeName="node-e", terminationGracePeriodSeconds=20))
    status, answer = raw.json("POST", f"{PODS}/{name}/eviction", _eviction(name))
    assert status == 201
    assert answer == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }
    _, terminating = raw.json("GET", f"{PODS}/{name}")
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == 20
    assert terminating["metadata"]["deletionTimestamp"]
    # Evicting again while it terminates changes nothing and still succeeds.
    assert raw.json("POST", f"{PODS}/{name}/eviction", _eviction(name))[0] == 201
    _, again = raw.json("GET", f"{PODS}/{name}")
    assert again["metadata"]["resourceVersion"] == terminating["metadata"]["resourceVersion"]
    raw.json("DELETE", f"{PODS}/{name}?gracePeriodSeconds=0")
    assert raw.json("GET", f"{PODS}/{name}")[0] == 404


def test_an_eviction_honours_its_delete_options(raw: Any, pod: Any, unique: Any) -> None:
    name = unique("evict-now")
    created = raw.json("POST", PODS, pod(name, nodeName="node-e"))[1]
    wrong = _eviction(name, preconditions={"uid": "not-the-uid"})
    status, refused = raw.json("POST", f"{PODS}/{name}/eviction", wrong)
    assert status == 409
    assert refused["reason"] == "Conflict"
    right = _eviction(name, gracePeriodSeconds=0, preconditions={"uid": created["metadata"]["uid"]})
    assert raw.json("POST", f"{PODS}/{name}/eviction", right)[0] == 201
    assert raw.json("GET", f"{PODS}/{name}")[0] == 404


def test_evicting_a_missing_pod_is_404_and_a_wrong_name_400(
    raw: Any, pod: Any, unique: Any
) -> None:
    status, missing = raw.json("POST", f"{PODS}/nobody/eviction", _eviction("nobody"))
    assert status == 404
    assert missing["message"] == 'pods "nobody" not found'
    name = unique("evict-name")
    raw.json("POST", PODS, pod(name))
    status, mismatch = raw.json("POST", f"{PODS}/{name}/eviction", _eviction("someone-else"))
    assert status == 400
    assert mismatch["message"] == "name in URL does not match name in Eviction object"
    assert raw.json("GET", f"{PODS}/{name}/eviction")[0] == 405
    status, _ = raw.json("POST", f"{PODS}/{name}/eviction", {"apiVersion": "v1", "kind": "Pod"})
    assert status == 400
    assert raw.json("GET", f"{PODS}/{name}")[0] == 200  # none of these touched it


@pytest.mark.parametrize("dry_run", ["query", "body"])
def test_a_dry_run_eviction_deletes_nothing(raw: Any, pod: Any, unique: Any, dry_run: str) -> None:
    name = unique("evict-dry")
    raw.json("POST", PODS, pod(name))
    if dry_run == "query":
        path, body = f"{PODS}/{name}/eviction?dryRun=All", _eviction(name)
    else:
        path, body = f"{PODS}/{name}/eviction", _eviction(name, dryRun=["All"])
    assert raw.json("POST", path, body)[0] == 201
    assert raw.json("GET", f"{PODS}/{name}")[0] == 200


def test_the_python_client_evicts_and_discovery_lists_the_subresource(
    core: k8s.CoreV1Api, raw: Any, pod: Any, unique: Any
) -> None:
    name = unique("evict-client")
    core.create_namespaced_pod("default", pod(name))  # never scheduled: deleted at once
    response = core.create_namespaced_pod_eviction(
        name, "default", _eviction(name), _preload_content=False
    )
    assert response.status == 201
    assert json.loads(response.data)["status"] == "Success"
    assert raw.json("GET", f"{PODS}/{name}")[0] == 404
    resources = {r["name"]: r for r in raw.json("GET", "/api/v1")[1]["resources"]}
    entry = resources["pods/eviction"]
    assert (entry["group"], entry["version"], entry["kind"]) == ("policy", "v1", "Eviction")
    assert entry["verbs"] == ["create"]
