"""ResourceQuota as kube-apiserver serves it: the verbs, canonical quantities, name checks, status.

Over HTTP through the ``kubernetes`` client and raw requests, and through the kubectl binary
(``kubectl apply -f``, ``kubectl get quota``) where one is installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

from vnpu_sandbox.apiserver import harness, quantities, quotas

from .conftest import find_kubectl

QUOTAS = "/api/v1/namespaces/default/resourcequotas"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def quota(name: str, hard: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name},
        "spec": {"hard": hard},
    }


def test_discovery_lists_resource_quotas(raw: Any) -> None:
    core = {r["name"]: r for r in raw.json("GET", "/api/v1")[1]["resources"]}
    main = core["resourcequotas"]
    assert main["kind"] == "ResourceQuota"
    assert main["namespaced"] is True
    assert main["singularName"] == "resourcequota"
    assert main["shortNames"] == ["quota"]
    assert set(main["verbs"]) == {
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    }
    assert core["resourcequotas/status"]["kind"] == "ResourceQuota"
    assert set(core["resourcequotas/status"]["verbs"]) == {"get", "patch", "update"}


def test_the_verbs_through_the_client(core: k8s.CoreV1Api, unique: Any) -> None:
    name = unique("quota")
    created = core.create_namespaced_resource_quota(
        "default",
        quota(
            name,
            {
                "requests.huawei.com/Ascend310P": "4",
                "limits.huawei.com/Ascend310P-memory": "24576",
                "requests.memory": "1024Mi",
                "requests.cpu": "1.5",
                "pods": "3000",
            },
        ),
    )
    # Stored as resource.Quantity encodes them.
    assert created.spec.hard == {
        "requests.huawei.com/Ascend310P": "4",
        "limits.huawei.com/Ascend310P-memory": "24576",
        "requests.memory": "1Gi",
        "requests.cpu": "1500m",
        "pods": "3k",
    }
    assert created.status.hard is None  # a new quota's status is empty
    assert core.read_namespaced_resource_quota(name, "default").spec.hard == created.spec.hard
    listed = core.list_namespaced_resource_quota("default", field_selector=f"metadata.name={name}")
    assert [q.metadata.name for q in listed.items] == [name]
    assert name in {q.metadata.name for q in core.list_resource_quota_for_all_namespaces().items}
    created.spec.hard = {"requests.huawei.com/Ascend310P": "8"}
    replaced = core.replace_namespaced_resource_quota(name, "default", created)
    assert replaced.spec.hard == {"requests.huawei.com/Ascend310P": "8"}
    patched = core.patch_namespaced_resource_quota(
        name, "default", {"spec": {"hard": {"limits.vnpu.io/aicore": "2000m"}}}
    )
    assert patched.spec.hard == {
        "requests.huawei.com/Ascend310P": "8",
        "limits.vnpu.io/aicore": "2",
    }
    deleted = core.delete_namespaced_resource_quota(name, "default")
    assert deleted.metadata.name == name  # the deleted object, as the real server answers
    with pytest.raises(k8s.ApiException) as gone:
        core.read_namespaced_resource_quota(name, "default")
    assert gone.value.status == 404
    assert json.loads(gone.value.body)["message"] == f'resourcequotas "{name}" not found'


def test_json_numbers_are_stored_as_quantity_strings(raw: Any, unique: Any) -> None:
    status, body = raw.json("POST", QUOTAS, quota(unique("numbers"), {"pods": 3000, "cpu": 1.5}))
    assert status == 201, body
    assert body["spec"]["hard"] == {"pods": "3k", "cpu": "1500m"}
    assert body["status"] == {}


def test_a_watch_sees_the_changes(core: k8s.CoreV1Api, unique: Any) -> None:
    name = unique("watched")
    start = core.list_namespaced_resource_quota("default").metadata.resource_version
    seen: list[tuple[str, dict[str, str]]] = []

    def follow() -> None:
        stream = k8s_watch.Watch()
        for event in stream.stream(
            core.list_namespaced_resource_quota,
            "default",
            field_selector=f"metadata.name={name}",
            resource_version=start,
            timeout_seconds=10,
        ):
            seen.append((event["type"], event["object"].spec.hard))
            if event["type"] == "DELETED":
                stream.stop()

    watcher = threading.Thread(target=follow)
    watcher.start()
    core.create_namespaced_resource_quota("default", quota(name, {"pods": "2"}))
    core.patch_namespaced_resource_quota(name, "default", {"spec": {"hard": {"pods": "3"}}})
    core.delete_namespaced_resource_quota(name, "default")
    watcher.join(15)
    assert seen == [
        ("ADDED", {"pods": "2"}),
        ("MODIFIED", {"pods": "3"}),
        ("DELETED", {"pods": "3"}),
    ]


def test_status_is_a_subresource(core: k8s.CoreV1Api, unique: Any) -> None:
    name = unique("status")
    core.create_namespaced_resource_quota(
        "default", quota(name, {"requests.huawei.com/Ascend310P": "4"})
    )
    written = core.patch_namespaced_resource_quota_status(
        name,
        "default",
        {
            "spec": {"hard": {"requests.huawei.com/Ascend310P": "99"}},  # ignored on /status
            "status": {
                "hard": {"requests.huawei.com/Ascend310P": "4"},
                "used": {"requests.huawei.com/Ascend310P": "1000m"},
            },
        },
    )
    assert written.spec.hard == {"requests.huawei.com/Ascend310P": "4"}
    assert written.status.hard == {"requests.huawei.com/Ascend310P": "4"}
    assert written.status.used == {"requests.huawei.com/Ascend310P": "1"}
    # The main resource keeps the status.
    kept = core.patch_namespaced_resource_quota(
        name, "default", {"spec": {"hard": {"requests.huawei.com/Ascend310P": "6"}}, "status": {}}
    )
    assert kept.status.used == {"requests.huawei.com/Ascend310P": "1"}
    assert core.read_namespaced_resource_quota_status(name, "default").spec.hard == {
        "requests.huawei.com/Ascend310P": "6"
    }


@pytest.mark.parametrize(
    "name",
    [
        "requests.huawei.com/Ascend310P",
        "requests.huawei.com/Ascend310P-memory",
        "limits.huawei.com/Ascend310P-memory",
        "limits.vnpu.io/aicore",
        "huawei.com/Ascend910B3",
        "count/pods",
        "count/deployments.apps",
        "requests.storage",
        "services.loadbalancers",
        "hugepages-2Mi",
        "requests.hugepages-1Gi",
        "ephemeral-storage",
    ],
)
def test_resource_names_a_quota_may_hold(raw: Any, unique: Any, name: str) -> None:
    status, body = raw.json("POST", QUOTAS, quota(unique("good"), {name: "2"}))
    assert status == 201, body
    assert body["spec"]["hard"] == {name: "2"}


@pytest.mark.parametrize(
    ("name", "details"),
    [
        ("gpus", [quotas.NOT_STANDARD, quotas.NOT_FOR_QUOTA]),
        ("limit.cpu", [quotas.NOT_STANDARD, quotas.NOT_FOR_QUOTA]),
        ("storage", [quotas.NOT_FOR_QUOTA]),  # a standard resource, but not for quota
        ("requests.huawei.com/Ascend 310P", None),
        ("Huawei.com/Ascend310P", None),
        ("/Ascend310P", None),
    ],
)
def test_bad_resource_names_are_invalid(
    raw: Any, unique: Any, name: str, details: list[str] | None
) -> None:
    quota_name = unique("bad")
    status, body = raw.json("POST", QUOTAS, quota(quota_name, {name: "1"}))
    assert status == 422, body
    assert body["kind"] == "Status"
    assert body["reason"] == "Invalid"
    assert body["details"]["kind"] == "ResourceQuota"
    assert body["details"]["name"] == quota_name
    causes = body["details"]["causes"]
    assert {c["field"] for c in causes} == {f"spec.hard[{name}]"}
    assert {c["reason"] for c in causes} == {"FieldValueInvalid"}
    if details is not None:
        assert [c["message"] for c in causes] == [
            f"Invalid value: {json.dumps(name)}: {d}" for d in details
        ]
    assert body["message"].startswith(f'ResourceQuota "{quota_name}" is invalid: ')
    assert f"spec.hard[{name}]: Invalid value: {json.dumps(name)}" in body["message"]
    assert raw.json("GET", f"{QUOTAS}/{quota_name}")[0] == 404


@pytest.mark.parametrize(
    ("name", "value", "detail"),
    [
        ("pods", "-1", quotas.NEGATIVE),
        ("requests.cpu", "-100m", quotas.NEGATIVE),
        ("pods", "1500m", quotas.NOT_INTEGER),
        ("count/pods", "0.5", quotas.NOT_INTEGER),
        ("limits.huawei.com/Ascend310P", "500m", quotas.NOT_INTEGER),  # an extended resource
        ("huawei.com/Ascend310P", "1n", quotas.NOT_INTEGER),
    ],
)
def test_bad_amounts_are_invalid(raw: Any, unique: Any, name: str, value: str, detail: str) -> None:
    status, body = raw.json("POST", QUOTAS, quota(unique("amount"), {name: value}))
    assert status == 422, body
    (cause,) = body["details"]["causes"]
    stored = quantities.canonical(value)
    assert cause == {
        "reason": "FieldValueInvalid",
        "message": f'Invalid value: "{stored}": {detail}',
        "field": f"spec.hard[{name}]",
    }


@pytest.mark.parametrize(
    ("name", "value"),
    [("requests.cpu", "1500m"), ("requests.huawei.com/Ascend310P", "500m"), ("memory", "0.5Gi")],
)
def test_fractions_are_kept_where_the_resource_allows_them(
    raw: Any, unique: Any, name: str, value: str
) -> None:
    status, body = raw.json("POST", QUOTAS, quota(unique("fraction"), {name: value}))
    assert status == 201, body


def test_every_problem_is_listed_and_an_unparsable_amount_is_a_bad_request(
    raw: Any, unique: Any
) -> None:
    status, body = raw.json("POST", QUOTAS, quota(unique("many"), {"pods": "-1", "gpus": "1"}))
    assert status == 422
    assert [c["field"] for c in body["details"]["causes"]] == [
        "spec.hard[gpus]",
        "spec.hard[gpus]",
        "spec.hard[pods]",
    ]
    # A value that is no quantity does not decode: 400, as with a pod's resources.
    status, body = raw.json("POST", QUOTAS, quota(unique("garbage"), {"pods": "lots"}))
    assert status == 400
    assert body["reason"] == "BadRequest"
    assert body["message"] == (
        'ResourceQuota in version "v1" cannot be handled as a ResourceQuota: '
        f"{quantities.FORMAT_WRONG}"
    )
    status, body = raw.json("POST", QUOTAS, {**quota(unique("typed"), {}), "spec": {"hard": [1]}})
    assert status == 400
    assert "ResourceQuota.spec.hard" in body["message"]


def test_updates_and_status_writes_are_checked_too(raw: Any, unique: Any) -> None:
    name = unique("later")
    assert raw.json("POST", QUOTAS, quota(name, {"pods": "1"}))[0] == 201
    merge = "application/merge-patch+json"
    status, body = raw.json(
        "PATCH", f"{QUOTAS}/{name}", {"spec": {"hard": {"gpus": "1"}}}, content_type=merge
    )
    assert status == 422
    assert {c["field"] for c in body["details"]["causes"]} == {"spec.hard[gpus]"}
    status, body = raw.json(
        "PATCH",
        f"{QUOTAS}/{name}/status",
        {"status": {"hard": {"pods": "1"}, "used": {"pods": "-1"}}},
        content_type=merge,
    )
    assert status == 422
    assert body["details"]["causes"][0]["field"] == "status.used[pods]"


def test_kubectl_tables_show_used_over_hard(raw: Any, unique: Any) -> None:
    name = unique("table")
    raw.json("POST", QUOTAS, quota(name, {"pods": "4", "limits.huawei.com/Ascend310P": "2"}))
    merge = "application/merge-patch+json"
    raw.json(
        "PATCH",
        f"{QUOTAS}/{name}/status",
        {
            "status": {
                "hard": {"pods": "4", "limits.huawei.com/Ascend310P": "2", "requests.cpu": "2"},
                "used": {"pods": "1", "requests.cpu": "500m"},
            }
        },
        content_type=merge,
    )
    status, _, body = raw.request(
        "GET", f"{QUOTAS}?fieldSelector=metadata.name%3D{name}", headers={"Accept": TABLE}
    )
    assert status == 200
    table = json.loads(body)
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Age", "Request", "Limit"]
    (row,) = table["rows"]
    assert row["cells"][0] == name
    assert row["cells"][2:] == [
        "pods: 1/4, requests.cpu: 500m/2",
        "limits.huawei.com/Ascend310P: 0/2",
    ]


QUOTA_YAML = """\
apiVersion: v1
kind: ResourceQuota
metadata:
  name: {name}
spec:
  hard:
    requests.huawei.com/Ascend310P: "4"
    requests.huawei.com/Ascend310P-memory: 24Gi
    limits.vnpu.io/aicore: "8"
"""


@pytest.mark.needs_kubectl
def test_kubectl_applies_and_gets_quotas(api: str, tmp_path: Path, unique: Any) -> None:
    binary = find_kubectl()
    if binary is None:
        pytest.skip("no kubectl on PATH (.ci/run installs Debian's kubernetes-client)")
    env = {
        **os.environ,
        "KUBECONFIG": str(harness.write_kubeconfig(tmp_path / "kubeconfig", api)),
        "HOME": str(tmp_path),
    }

    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [binary, *args], capture_output=True, text=True, env=env, timeout=20, check=False
        )

    name = unique("applied")
    manifest = tmp_path / "quota.yaml"
    manifest.write_text(QUOTA_YAML.format(name=name))
    applied = kubectl("apply", "--validate=false", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.strip() == f"resourcequota/{name} created"
    manifest.write_text(QUOTA_YAML.format(name=name).replace('aicore: "8"', 'aicore: "16"'))
    again = kubectl("apply", "--validate=false", "-f", str(manifest))  # a strategic merge patch
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"resourcequota/{name} configured"
    shown = kubectl("get", "quota", name, "-o", "json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["spec"]["hard"] == {
        "requests.huawei.com/Ascend310P": "4",
        "requests.huawei.com/Ascend310P-memory": "24Gi",
        "limits.vnpu.io/aicore": "16",
    }
    listed = kubectl("get", "quota")
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["NAME", "AGE", "REQUEST", "LIMIT"]
    assert any(row.split()[0] == name for row in rows)
    bad = tmp_path / "bad.yaml"
    bad.write_text(QUOTA_YAML.format(name=unique("bad")).replace("limits.vnpu.io/aicore", "gpus"))
    refused = kubectl("apply", "--validate=false", "-f", str(bad))
    assert refused.returncode != 0
    assert 'spec.hard[gpus]: Invalid value: "gpus": must be a standard resource for quota' in (
        refused.stderr
    )
    deleted = kubectl("delete", "quota", name)
    assert deleted.returncode == 0, deleted.stderr
    assert kubectl("get", "quota", name).returncode != 0
