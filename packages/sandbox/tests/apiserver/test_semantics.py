"""Server semantics clients rely on, checked through the kubernetes client and raw HTTP."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

Json = dict[str, Any]
PODS = "/api/v1/namespaces/default/pods"


def test_list_resource_version_starts_a_watch_that_misses_nothing(
    core: k8s.CoreV1Api, pod: Any, unique: Any
) -> None:
    label = unique("rv")
    listed = core.list_namespaced_pod("default", label_selector=f"suite={label}")
    names = [unique("w") for _ in range(3)]
    for name in names:
        core.create_namespaced_pod("default", pod(name, {"suite": label}))
    seen = [
        (event["type"], event["object"].metadata.name)
        for event in k8s_watch.Watch().stream(
            core.list_namespaced_pod,
            "default",
            label_selector=f"suite={label}",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=1,
        )
    ]
    assert seen == [("ADDED", n) for n in names]


def test_python_watch_raises_410_for_an_expired_version(client_for: Any, fresh_api: Any) -> None:
    api = k8s.CoreV1Api(client_for(fresh_api(event_window=2)))
    for number in range(4):
        api.create_namespaced_config_map("default", {"metadata": {"name": f"c{number}"}})
    with pytest.raises(k8s.ApiException) as caught:
        list(
            k8s_watch.Watch().stream(
                api.list_namespaced_config_map, "default", resource_version="1", timeout_seconds=1
            )
        )
    assert caught.value.status == 410


def test_watch_without_a_version_starts_with_the_current_objects(
    raw: Any, unique: Any, pod: Any
) -> None:
    label = unique("initial")
    for name in (unique("a"), unique("b")):
        raw.json("POST", PODS, pod(name, {"suite": label}))
    events = raw.watch(f"{PODS}?watch=1&labelSelector=suite%3D{label}&timeoutSeconds=1")
    assert [e["type"] for e in events] == ["ADDED", "ADDED"]
    assert (
        raw.watch(
            f"{PODS}?watch=1&resourceVersion=0&labelSelector=suite%3D{label}&timeoutSeconds=1"
        )
        == events
    )


def test_selector_watches_see_objects_enter_and_leave(raw: Any, unique: Any, pod: Any) -> None:
    name = unique("mover")
    status, created = raw.json("POST", PODS, pod(name, {"stage": "one"}))
    assert status == 201
    start = created["metadata"]["resourceVersion"]
    path = f"{PODS}/{name}"
    raw.json(
        "PATCH",
        path,
        {"metadata": {"labels": {"stage": "two", "tag": name}}},
        content_type="application/merge-patch+json",
    )
    raw.json(
        "PATCH",
        path,
        {"metadata": {"labels": {"stage": "three"}}},
        content_type="application/merge-patch+json",
    )
    events = raw.watch(
        f"{PODS}?watch=true&resourceVersion={start}&labelSelector=stage%3Dtwo,tag%3D{name}&timeoutSeconds=1"
    )
    assert [e["type"] for e in events] == ["ADDED", "DELETED"]
    deleted = events[1]["object"]
    assert deleted["metadata"]["labels"]["stage"] == "two", (
        "a DELETED for a filter change carries the previous state"
    )
    assert int(deleted["metadata"]["resourceVersion"]) > int(
        events[0]["object"]["metadata"]["resourceVersion"]
    )


def test_legacy_watch_path_watches_one_object(raw: Any, unique: Any, pod: Any) -> None:
    name, other = unique("legacy"), unique("other")
    status, created = raw.json("POST", PODS, pod(name))
    assert status == 201
    raw.json("POST", PODS, pod(other))
    raw.json(
        "PATCH",
        f"{PODS}/{name}",
        {"metadata": {"labels": {"x": "y"}}},
        content_type="application/merge-patch+json",
    )
    events = raw.watch(
        f"/api/v1/watch/namespaces/default/pods/{name}?resourceVersion={created['metadata']['resourceVersion']}&timeoutSeconds=1"
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("MODIFIED", name)]


def test_bookmarks_carry_only_the_current_revision(fresh_api: Any, make_http: Any) -> None:
    http = make_http(fresh_api(bookmark_interval=0.2))
    events = http.watch(
        "/api/v1/namespaces/default/pods?watch=true&resourceVersion=1&allowWatchBookmarks=true&timeoutSeconds=1"
    )
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert len(bookmarks) >= 2
    assert bookmarks[0]["object"]["kind"] == "Pod"
    assert list(bookmarks[0]["object"]["metadata"]) == ["resourceVersion"]


def test_no_op_updates_keep_the_resource_version(core: k8s.CoreV1Api, unique: Any) -> None:
    name = unique("noop")
    created = core.create_namespaced_config_map(
        "default", {"metadata": {"name": name}, "data": {"a": "1"}}
    )
    again = core.patch_namespaced_config_map(name, "default", {"data": {"a": "1"}})
    assert again.metadata.resource_version == created.metadata.resource_version
    changed = core.patch_namespaced_config_map(name, "default", {"data": {"a": "2"}})
    assert int(changed.metadata.resource_version) > int(created.metadata.resource_version)


def test_status_is_a_subresource_of_pods_and_nodes(
    core: k8s.CoreV1Api, pod: Any, unique: Any
) -> None:
    name = unique("status")
    created = core.create_namespaced_pod("default", pod(name))
    assert created.metadata.generation == 1
    status_patch = {
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    }
    running = core.patch_namespaced_pod_status(name, "default", status_patch)
    assert running.status.phase == "Running"
    assert [c.type for c in running.status.conditions] == ["Ready"]
    ignored = core.patch_namespaced_pod(
        name, "default", {"status": {"phase": "Failed"}, "metadata": {"labels": {"a": "b"}}}
    )
    assert ignored.status.phase == "Running", "the main resource keeps the status"
    assert ignored.metadata.labels == {"a": "b"}
    merged = core.patch_namespaced_pod_status(
        name, "default", {"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}
    )
    assert sorted(c.type for c in merged.status.conditions) == ["PodScheduled", "Ready"], (
        "conditions merge by type"
    )
    tolerated = core.patch_namespaced_pod(
        name, "default", {"spec": {"tolerations": [{"key": "k", "operator": "Exists"}]}}
    )
    assert tolerated.metadata.generation == 2, "spec changes bump the generation"

    node = unique("node")
    core.create_node({"metadata": {"name": node}})
    capacity = {
        "status": {
            "capacity": {"huawei.com/Ascend910": "8"},
            "allocatable": {"huawei.com/Ascend910": "8"},
        }
    }
    patched = core.patch_node_status(node, capacity)
    assert patched.status.capacity == {"huawei.com/Ascend910": "8"}
    more = core.patch_node_status(node, {"status": {"capacity": {"cpu": "4"}}})
    assert more.status.capacity == {"huawei.com/Ascend910": "8", "cpu": "4"}
    fetched = core.read_node(node)
    fetched.status.capacity = {}
    fetched.metadata.labels = {"role": "npu"}
    replaced = core.replace_node(node, fetched)
    assert replaced.status.capacity == {"huawei.com/Ascend910": "8", "cpu": "4"}
    assert replaced.metadata.labels == {"role": "npu"}


def test_leases_use_optimistic_concurrency(client_for: Any, api: str, unique: Any) -> None:
    leases = k8s.CoordinationV1Api(client_for(api))
    name = unique("lease")
    body = {"metadata": {"name": name}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
    created = leases.create_namespaced_lease("kube-node-lease", body)
    created.spec.holder_identity = "b"
    leases.replace_namespaced_lease(name, "kube-node-lease", created)
    created.spec.holder_identity = "c"
    with pytest.raises(k8s.ApiException) as caught:
        leases.replace_namespaced_lease(name, "kube-node-lease", created)
    assert caught.value.status == 409
    status = json.loads(caught.value.body)
    assert status["details"] == {"name": name, "group": "coordination.k8s.io", "kind": "leases"}
    assert leases.read_namespaced_lease(name, "kube-node-lease").spec.holder_identity == "b"


def test_generate_name_and_dry_run(raw: Any, unique: Any, pod: Any) -> None:
    prefix = unique("gen") + "-"
    body = pod("")
    body["metadata"] = {"generateName": prefix}
    status, created = raw.json("POST", PODS, body)
    assert status == 201
    assert created["metadata"]["name"].startswith(prefix)
    assert len(created["metadata"]["name"]) == len(prefix) + 5
    name = unique("dry")
    status, dry = raw.json("POST", PODS + "?dryRun=All", pod(name))
    assert status == 201
    assert dry["metadata"]["name"] == name
    assert raw.json("GET", f"{PODS}/{name}")[0] == 404


def test_pages_are_consistent_and_expire_with_the_event_window(
    fresh_api: Any, make_http: Any
) -> None:
    http = make_http(fresh_api(event_window=50))
    for number in range(6):
        http.json(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            {"metadata": {"name": f"page-{number}"}},
        )
    status, first = http.json("GET", "/api/v1/namespaces/default/configmaps?limit=4")
    assert status == 200
    assert [i["metadata"]["name"] for i in first["items"]] == [f"page-{n}" for n in range(4)]
    assert first["metadata"]["remainingItemCount"] == 2
    http.json("DELETE", "/api/v1/namespaces/default/configmaps/page-5")
    http.json("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "page-9"}})
    token = first["metadata"]["continue"]
    status, second = http.json(
        "GET", f"/api/v1/namespaces/default/configmaps?limit=4&continue={token}"
    )
    assert [i["metadata"]["name"] for i in second["items"]] == ["page-4", "page-5"], (
        "the page shows the first page's snapshot"
    )
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert "continue" not in second["metadata"]
    for number in range(60):
        http.json(
            "PATCH",
            "/api/v1/namespaces/default/configmaps/page-0",
            {"data": {"n": str(number)}},
            content_type="application/merge-patch+json",
        )
    status, expired = http.json(
        "GET", f"/api/v1/namespaces/default/configmaps?limit=4&continue={token}"
    )
    assert (status, expired["reason"]) == (410, "Expired")
    assert expired["message"].startswith("The provided continue parameter is too old")
    status, rest = http.json(
        "GET",
        f"/api/v1/namespaces/default/configmaps?limit=4&continue={expired['metadata']['continue']}",
    )
    assert status == 200
    assert [i["metadata"]["name"] for i in rest["items"]] == ["page-4", "page-9"], (
        "the offered token continues from now"
    )


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (
            "resourceVersionMatch=Exact",
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
        ),
        (
            "resourceVersion=1&resourceVersionMatch=Latest",
            'resourceVersionMatch: Unsupported value: "Latest": supported values: "Exact", "NotOlderThan"',
        ),
        (
            "resourceVersion=0&resourceVersionMatch=Exact",
            'resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
        ),
    ],
)
def test_list_options_the_real_server_refuses(raw: Any, query: str, message: str) -> None:
    status, answer = raw.json("GET", f"/api/v1/namespaces/default/configmaps?{query}")
    assert (status, answer["reason"]) == (422, "Invalid")
    assert answer["message"] == f'ListOptions.meta.k8s.io "" is invalid: {message}'


def test_exact_reads_show_a_past_revision(raw: Any, unique: Any) -> None:
    name = unique("exact")
    _, created = raw.json(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        {"metadata": {"name": name}, "data": {"v": "1"}},
    )
    raw.json(
        "PATCH",
        f"/api/v1/namespaces/default/configmaps/{name}",
        {"data": {"v": "2"}},
        content_type="application/merge-patch+json",
    )
    revision = created["metadata"]["resourceVersion"]
    _, past = raw.json(
        "GET",
        f"/api/v1/namespaces/default/configmaps?resourceVersion={revision}&resourceVersionMatch=Exact&fieldSelector=metadata.name%3D{name}",
    )
    assert past["metadata"]["resourceVersion"] == revision
    assert [i["data"] for i in past["items"]] == [{"v": "1"}]


def test_namespace_deletion_removes_its_contents(
    core: k8s.CoreV1Api, pod: Any, unique: Any, raw: Any
) -> None:
    namespace = unique("ns")
    core.create_namespace({"metadata": {"name": namespace}})
    assert core.read_namespace(namespace).metadata.labels == {
        "kubernetes.io/metadata.name": namespace
    }
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "held", "finalizers": ["vnpu.test/hold"]}}
    )
    core.create_namespaced_pod(namespace, dict(pod("p"), metadata={"name": "p"}))
    status, terminating = raw.json("DELETE", f"/api/v1/namespaces/{namespace}")
    assert status == 200
    assert terminating["status"]["phase"] == "Terminating", (
        "the answer is the namespace, as the real server's"
    )
    status, refused = raw.json(
        "POST", f"/api/v1/namespaces/{namespace}/configmaps", {"metadata": {"name": "late"}}
    )
    assert (status, refused["reason"]) == (403, "Forbidden")
    assert (
        refused["message"]
        == f"unable to create new content in namespace {namespace} because it is being terminated"
    )
    assert core.list_namespaced_pod(namespace).items == []
    core.patch_namespaced_config_map(
        "held", namespace, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["vnpu.test/hold"]}}
    )
    with pytest.raises(k8s.ApiException) as caught:
        core.read_namespace(namespace)
    assert caught.value.status == 404


def test_delete_preconditions_and_collection(core: k8s.CoreV1Api, unique: Any) -> None:
    label = unique("coll")
    for number in range(3):
        core.create_namespaced_config_map(
            "default", {"metadata": {"name": f"{label}-{number}", "labels": {"suite": label}}}
        )
    with pytest.raises(k8s.ApiException) as caught:
        core.delete_namespaced_config_map(
            f"{label}-0",
            "default",
            body=k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid="nope")),
        )
    assert caught.value.status == 409
    assert (
        "the UID in the precondition (nope) does not match the UID in record"
        in json.loads(caught.value.body)["message"]
    )
    core.delete_collection_namespaced_config_map("default", label_selector=f"suite={label}")
    assert core.list_namespaced_config_map("default", label_selector=f"suite={label}").items == []


def test_tables_and_metadata_only_answers(raw: Any, unique: Any, pod: Any) -> None:
    name = unique("table")
    raw.json("POST", PODS, pod(name))
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    _, _, body = raw.request(
        "GET", f"{PODS}?fieldSelector=metadata.name%3D{name}", headers={"Accept": accept}
    )
    table = json.loads(body)
    assert (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    assert [c["name"] for c in table["columnDefinitions"]][:5] == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
    ]
    assert table["rows"][0]["cells"][:4] == [name, "0/1", "Pending", 0]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    accept = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
    _, _, body = raw.request(
        "GET", f"{PODS}?fieldSelector=metadata.name%3D{name}", headers={"Accept": accept}
    )
    partial = json.loads(body)
    assert partial["kind"] == "PartialObjectMetadataList"
    assert partial["items"][0]["metadata"]["name"] == name
    assert "spec" not in partial["items"][0]


def test_discovery_documents(raw: Any) -> None:
    status, version = raw.json("GET", "/version")
    assert status == 200
    assert version["major"] == "1"
    assert raw.json("GET", "/api")[1]["versions"] == ["v1"]
    groups = {g["name"] for g in raw.json("GET", "/apis")[1]["groups"]}
    assert groups == {"apps", "coordination.k8s.io", "admissionregistration.k8s.io"}
    core = {r["name"]: r for r in raw.json("GET", "/api/v1")[1]["resources"]}
    assert {
        "pods",
        "pods/status",
        "pods/binding",
        "nodes",
        "nodes/status",
        "namespaces",
        "configmaps",
        "events",
    } <= set(core)
    assert core["pods"]["shortNames"] == ["po"]
    assert core["pods/binding"]["verbs"] == ["create"]
    leases = raw.json("GET", "/apis/coordination.k8s.io/v1")[1]
    assert [r["name"] for r in leases["resources"]] == ["leases"]
    assert raw.json("GET", "/apis/coordination.k8s.io")[1]["preferredVersion"]["version"] == "v1"


def test_graceful_deletion_can_only_be_shortened(raw: Any, unique: Any, pod: Any) -> None:
    name = unique("shorten")
    raw.json("POST", PODS, pod(name, nodeName="node-s"))
    path = f"{PODS}/{name}"
    _, first = raw.json("DELETE", path + "?gracePeriodSeconds=20")
    assert first["metadata"]["deletionGracePeriodSeconds"] == 20
    _, longer = raw.json("DELETE", path + "?gracePeriodSeconds=60")
    assert longer["metadata"]["deletionGracePeriodSeconds"] == 20
    assert longer["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    _, shorter = raw.json(
        "DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 5}
    )
    assert shorter["metadata"]["deletionGracePeriodSeconds"] == 5
    status, gone = raw.json("DELETE", path + "?gracePeriodSeconds=0")
    assert status == 200
    assert gone["kind"] == "Pod"
    assert raw.json("GET", path)[0] == 404


def test_finished_pods_are_deleted_at_once(core: k8s.CoreV1Api, pod: Any, unique: Any) -> None:
    name = unique("done")
    core.create_namespaced_pod("default", pod(name, nodeName="node-d"))
    core.patch_namespaced_pod_status(name, "default", {"status": {"phase": "Succeeded"}})
    deleted = core.delete_namespaced_pod(name, "default")
    assert deleted.metadata.deletion_grace_period_seconds == 0
    assert core.list_namespaced_pod("default", field_selector=f"metadata.name={name}").items == []


def test_timestamps_move_with_the_clock(raw: Any, unique: Any, pod: Any) -> None:
    before = time.time()
    _, created = raw.json("POST", PODS, pod(unique("time")))
    stamp = (
        time.mktime(time.strptime(created["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ"))
        - time.timezone
    )
    assert before - 2 <= stamp <= time.time() + 1
