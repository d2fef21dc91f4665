"""apps/v1 Deployments and ReplicaSets in the emulator: defaults, validation, generation, the
``/scale`` subresource, discovery, tables, template patches and deletion propagation.

Nothing here runs a controller: these are the server's own rules, which the controllers and
kubectl build on (the controllers' tests are in ``tests/controllers``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from vnpu_sandbox.apiserver import harness

Json = dict[str, Any]
DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
REPLICASETS = "/apis/apps/v1/namespaces/default/replicasets"
TABLE = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}


def deployment(name: str, replicas: int | None = 2, **spec: Any) -> Json:
    body: Json = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
            },
            **spec,
        },
    }
    if replicas is not None:
        body["spec"]["replicas"] = replicas
    return body


def replica_set(name: str, replicas: int = 1) -> Json:
    body = deployment(name, replicas)
    body["kind"] = "ReplicaSet"
    return body


def test_deployment_defaults_are_the_real_servers(raw: Any, unique: Any) -> None:
    name = unique("defaults")
    status, created = raw.json("POST", DEPLOYMENTS, deployment(name, replicas=None))
    assert status == 201, created
    spec = created["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
    }
    assert spec["revisionHistoryLimit"] == 10
    assert spec["progressDeadlineSeconds"] == 600
    template = spec["template"]["spec"]
    assert template["restartPolicy"] == "Always"
    assert template["dnsPolicy"] == "ClusterFirst"
    assert template["schedulerName"] == "default-scheduler"
    assert template["terminationGracePeriodSeconds"] == 30
    assert template["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    assert template["containers"][0]["terminationMessagePath"] == "/dev/termination-log"
    # Pod-only defaults are filled when a pod is created from the template, not here.
    assert "enableServiceLinks" not in template
    assert "priority" not in template
    assert created["status"] == {}
    assert created["metadata"]["generation"] == 1


def test_recreate_strategy_gets_no_rolling_update_and_replica_sets_no_strategy(
    raw: Any, unique: Any
) -> None:
    _, created = raw.json(
        "POST", DEPLOYMENTS, deployment(unique("recreate"), strategy={"type": "Recreate"})
    )
    assert created["spec"]["strategy"] == {"type": "Recreate"}
    status, rs = raw.json("POST", REPLICASETS, replica_set(unique("plain")))
    assert status == 201, rs
    assert rs["spec"]["replicas"] == 1
    assert "strategy" not in rs["spec"]
    assert "revisionHistoryLimit" not in rs["spec"]
    assert rs["status"] == {"replicas": 0}  # not omitempty in Go, and the Python client needs it


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(
            lambda d: d["spec"].pop("selector"),
            '[spec.selector: Required value, spec.template.metadata.labels: Invalid value: map[string]string{"app":"NAME"}: `selector` does not match template `labels`]',
            id="no-selector",
        ),
        pytest.param(
            lambda d: d["spec"]["selector"].update(matchLabels={"app": "other"}),
            'spec.template.metadata.labels: Invalid value: map[string]string{"app":"NAME"}: `selector` does not match template `labels`',
            id="selector-does-not-match",
        ),
        pytest.param(
            lambda d: d["spec"].update(selector={}),
            "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid for deployment",
            id="empty-selector",
        ),
        pytest.param(
            lambda d: d["spec"].update(replicas=-1),
            "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
            id="negative-replicas",
        ),
        pytest.param(
            lambda d: d["spec"]["template"]["spec"].update(restartPolicy="Never"),
            'spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: "Always"',
            id="restart-policy",
        ),
        pytest.param(
            lambda d: d["spec"]["template"]["spec"]["containers"][0].pop("image"),
            "spec.template.spec.containers[0].image: Required value",
            id="no-image",
        ),
        pytest.param(
            lambda d: d["spec"].update(
                strategy={
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"},
                }
            ),
            "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: 0%: may not be 0 when `maxSurge` is 0",
            id="no-surge-no-unavailable",
        ),
        pytest.param(
            lambda d: d["spec"].update(
                strategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "lots"}}
            ),
            "spec.strategy.rollingUpdate.maxSurge: Invalid value: lots: must be an integer or percentage (e.g '5%')",
            id="bad-surge",
        ),
        pytest.param(
            lambda d: d["spec"].update(
                strategy={"type": "Recreate", "rollingUpdate": {"maxSurge": 1}}
            ),
            "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'",
            id="recreate-with-rolling-update",
        ),
        pytest.param(
            lambda d: d["spec"].update(minReadySeconds=700),
            "spec.progressDeadlineSeconds: Invalid value: 600: must be greater than minReadySeconds",
            id="deadline-below-min-ready",
        ),
    ],
)
def test_invalid_deployments_are_refused_with_the_real_wording(
    raw: Any, unique: Any, change: Any, message: str
) -> None:
    name = unique("invalid")
    body = deployment(name)
    change(body)
    status, answer = raw.json("POST", DEPLOYMENTS, body)
    assert status == 422, answer
    assert answer["reason"] == "Invalid"
    assert answer["message"] == f'Deployment.apps "{name}" is invalid: ' + message.replace(
        "NAME", name
    )
    assert answer["details"]["kind"] == "Deployment"
    assert answer["details"]["group"] == "apps"
    status, _ = raw.json("GET", f"{DEPLOYMENTS}/{name}")
    assert status == 404


def test_wrongly_typed_workload_fields_are_400(raw: Any, unique: Any) -> None:
    body = deployment(unique("typed"))
    body["spec"]["replicas"] = "three"
    status, answer = raw.json("POST", DEPLOYMENTS, body)
    assert status == 400
    assert (
        "cannot unmarshal string into Go struct field Deployment.spec.replicas" in answer["message"]
    )
    body = deployment(unique("typed"))
    body["spec"]["template"]["metadata"]["labels"]["n"] = 1
    status, answer = raw.json("POST", DEPLOYMENTS, body)
    assert status == 400
    assert "spec.template.metadata.labels of type string" in answer["message"]


def test_selector_is_immutable_and_generation_follows_the_spec(raw: Any, unique: Any) -> None:
    name = unique("gen")
    _, created = raw.json("POST", DEPLOYMENTS, deployment(name))
    path = f"{DEPLOYMENTS}/{name}"
    merge = {"Content-Type": "application/merge-patch+json"}

    def patch(body: Json, where: str = path) -> tuple[int, Json]:
        status, _, data = raw.request("PATCH", where, json.dumps(body), headers=merge)
        return status, json.loads(data)

    status, labelled = patch({"metadata": {"labels": {"team": "a"}}})
    assert status == 200
    assert labelled["metadata"]["generation"] == 1
    status, scaled = patch({"spec": {"replicas": 5}})
    assert status == 200
    assert scaled["metadata"]["generation"] == 2
    status, reported = patch({"status": {"replicas": 5, "observedGeneration": 2}}, f"{path}/status")
    assert status == 200
    assert reported["metadata"]["generation"] == 2
    assert reported["status"] == {"replicas": 5, "observedGeneration": 2}
    status, ignored = patch({"status": {"replicas": 9}, "spec": {"paused": True}}, f"{path}/status")
    assert status == 200
    assert "paused" not in ignored["spec"]  # /status keeps the spec
    status, kept = patch({"status": {"replicas": 0}})
    assert kept["status"]["replicas"] == 9  # the main resource keeps the status
    wider = {
        "matchLabels": {"app": name},
        "matchExpressions": [{"key": "app", "operator": "Exists"}],
    }
    status, refused = patch({"spec": {"selector": wider}})
    assert status == 422
    assert refused["message"] == (
        f'Deployment.apps "{name}" is invalid: spec.selector: Invalid value: '
        f'v1.LabelSelector{{MatchLabels:map[string]string{{"app":"{name}"}}, '
        'MatchExpressions:[]v1.LabelSelectorRequirement{v1.LabelSelectorRequirement{Key:"app", '
        'Operator:"Exists", Values:[]string(nil)}}}: field is immutable'
    )
    assert created["metadata"]["uid"] == kept["metadata"]["uid"]


def test_scale_subresource_get_put_and_patch(raw: Any, unique: Any) -> None:
    name = unique("scale")
    _, created = raw.json("POST", DEPLOYMENTS, deployment(name, replicas=2))
    path = f"{DEPLOYMENTS}/{name}/scale"
    status, scale = raw.json("GET", path)
    assert status == 200
    assert scale == {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": created["metadata"]["uid"],
            "resourceVersion": created["metadata"]["resourceVersion"],
            "creationTimestamp": created["metadata"]["creationTimestamp"],
        },
        "spec": {"replicas": 2},
        "status": {"replicas": 0, "selector": f"app={name}"},
    }
    scale["spec"]["replicas"] = 4
    status, put = raw.json("PUT", path, scale)
    assert status == 200
    assert put["spec"]["replicas"] == 4
    status, stale = raw.json("PUT", path, scale)  # the old resourceVersion
    assert status == 409
    assert stale["message"].startswith(
        f'Operation cannot be fulfilled on deployments.apps "{name}"'
    )
    status, _, data = raw.request(
        "PATCH",
        path,
        '{"spec":{"replicas":0}}',
        headers={"Content-Type": "application/merge-patch+json"},
    )
    patched = json.loads(data)
    assert status == 200
    assert patched["spec"] == {}
    stored = raw.json("GET", f"{DEPLOYMENTS}/{name}")[1]
    assert stored["spec"]["replicas"] == 0
    assert stored["metadata"]["generation"] == 3
    status, negative = raw.json("PUT", path, {"spec": {"replicas": -2}})
    assert status == 422
    assert negative["message"] == (
        f'Scale.autoscaling "{name}" is invalid: spec.replicas: Invalid value: -2: must be greater than or equal to 0'
    )
    status, _ = raw.json("PUT", path, {"apiVersion": "v1", "kind": "Pod"})
    assert status == 400
    status, _ = raw.json("GET", f"{DEPLOYMENTS}/missing-{name}/scale")
    assert status == 404


def test_replica_set_scale_and_field_selector(raw: Any, unique: Any) -> None:
    name = unique("rs")
    raw.json("POST", REPLICASETS, replica_set(name, 3))
    status, scale = raw.json("GET", f"{REPLICASETS}/{name}/scale")
    assert status == 200
    assert scale["spec"]["replicas"] == 3
    raw.json("PUT", f"{REPLICASETS}/{name}/scale", {"spec": {"replicas": 1}})
    assert raw.json("GET", f"{REPLICASETS}/{name}")[1]["spec"]["replicas"] == 1
    _, listed = raw.json(
        "GET", f"{REPLICASETS}?fieldSelector=status.replicas%3D0,metadata.name%3D{name}"
    )
    assert [i["metadata"]["name"] for i in listed["items"]] == [name]
    status, _ = raw.json("GET", f"{REPLICASETS}?fieldSelector=spec.replicas%3D1")
    assert status == 400


def test_discovery_lists_apps_v1(raw: Any) -> None:
    status, group = raw.json("GET", "/apis/apps")
    assert status == 200
    assert group["preferredVersion"] == {
        "groupVersion": "apps/v1",
        "version": "v1",
    }
    _, listed = raw.json("GET", "/apis/apps/v1")
    entries = {r["name"]: r for r in listed["resources"]}
    assert set(entries) == {
        "deployments",
        "deployments/status",
        "deployments/scale",
        "replicasets",
        "replicasets/status",
        "replicasets/scale",
    }
    assert entries["deployments"]["shortNames"] == ["deploy"]
    assert entries["replicasets"]["shortNames"] == ["rs"]
    assert entries["deployments"]["categories"] == ["all"]
    assert entries["deployments/scale"]["group"] == "autoscaling"
    assert entries["deployments/scale"]["version"] == "v1"
    assert entries["deployments/scale"]["kind"] == "Scale"
    assert entries["replicasets/status"]["kind"] == "ReplicaSet"


def test_tables_have_the_real_columns(raw: Any, unique: Any) -> None:
    name = unique("table")
    body = deployment(name, replicas=3)
    body["spec"]["template"]["spec"]["containers"].append({"name": "side", "image": "envoy:1"})
    raw.json("POST", DEPLOYMENTS, body)
    raw.request(
        "PATCH",
        f"{DEPLOYMENTS}/{name}/status",
        '{"status":{"replicas":3,"readyReplicas":2,"updatedReplicas":3,"availableReplicas":1}}',
        headers={"Content-Type": "application/merge-patch+json"},
    )
    status, _, data = raw.request("GET", f"{DEPLOYMENTS}/{name}", headers=TABLE)
    table = json.loads(data)
    assert status == 200
    assert [(c["name"], c["priority"]) for c in table["columnDefinitions"]] == [
        ("Name", 0),
        ("Ready", 0),
        ("Up-to-date", 0),
        ("Available", 0),
        ("Age", 0),
        ("Containers", 1),
        ("Images", 1),
        ("Selector", 1),
    ]
    cells = table["rows"][0]["cells"]
    assert cells[:4] == [name, "2/3", 3, 1]
    assert cells[5:] == ["main,side", "busybox:1.36,envoy:1", f"app={name}"]
    raw.json("POST", REPLICASETS, replica_set(name, 2))
    _, _, data = raw.request(
        "GET", f"{REPLICASETS}?fieldSelector=metadata.name%3D{name}", headers=TABLE
    )
    table = json.loads(data)
    assert [c["name"] for c in table["columnDefinitions"]][:5] == [
        "Name",
        "Desired",
        "Current",
        "Ready",
        "Age",
    ]
    assert table["rows"][0]["cells"][:4] == [name, 2, 0, 0]


def test_strategic_merge_patch_merges_template_containers_by_name(raw: Any, unique: Any) -> None:
    name = unique("smp")
    body = deployment(name)
    body["spec"]["template"]["spec"]["containers"].append({"name": "side", "image": "envoy:1"})
    raw.json("POST", DEPLOYMENTS, body)
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "$setElementOrder/containers": [{"name": "main"}, {"name": "side"}],
                    "containers": [{"name": "side", "image": "envoy:2"}],
                }
            }
        }
    }
    status, _, data = raw.request(
        "PATCH",
        f"{DEPLOYMENTS}/{name}",
        json.dumps(patch),
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    patched = json.loads(data)
    assert status == 200, patched
    containers = patched["spec"]["template"]["spec"]["containers"]
    assert [(c["name"], c["image"]) for c in containers] == [
        ("main", "busybox:1.36"),
        ("side", "envoy:2"),
    ]
    assert patched["metadata"]["generation"] == 2


@pytest.mark.parametrize(
    ("options", "finalizer"),
    [
        ({"propagationPolicy": "Foreground"}, "foregroundDeletion"),
        ({"propagationPolicy": "Orphan"}, "orphan"),
        ({"orphanDependents": True}, "orphan"),
    ],
)
def test_foreground_and_orphan_deletion_leave_the_object_with_a_finalizer(
    raw: Any, unique: Any, options: Json, finalizer: str
) -> None:
    name = unique("propagate")
    raw.json("POST", DEPLOYMENTS, deployment(name))
    status, answer = raw.json("DELETE", f"{DEPLOYMENTS}/{name}", options)
    assert status == 200
    assert answer["metadata"]["finalizers"] == [finalizer]
    assert answer["metadata"]["deletionTimestamp"]
    stored = raw.json("GET", f"{DEPLOYMENTS}/{name}")[1]
    assert stored["metadata"]["finalizers"] == [finalizer]
    # Deleting again in the background drops the finalizer: the object goes at once.
    status, _ = raw.json("DELETE", f"{DEPLOYMENTS}/{name}", {"propagationPolicy": "Background"})
    assert status == 200
    assert raw.json("GET", f"{DEPLOYMENTS}/{name}")[0] == 404


def test_background_deletion_removes_at_once_and_leaves_dependents(raw: Any, unique: Any) -> None:
    name = unique("background")
    _, owner = raw.json("POST", DEPLOYMENTS, deployment(name))
    dependent = replica_set(name)
    dependent["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": name,
            "uid": owner["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    raw.json("POST", REPLICASETS, dependent)
    status, answer = raw.json("DELETE", f"{DEPLOYMENTS}/{name}?propagationPolicy=Background")
    assert status == 200
    assert answer["status"] == "Success"
    assert raw.json("GET", f"{DEPLOYMENTS}/{name}")[0] == 404
    # The garbage collector (vnpu-sandbox controllers) removes the dependent, not the server.
    assert raw.json("GET", f"{REPLICASETS}/{name}")[0] == 200


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"propagationPolicy": "Sometimes"},
            'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "Sometimes": supported values: "Foreground", "Background", "Orphan", "nil"',
        ),
        (
            {"propagationPolicy": "Orphan", "orphanDependents": False},
            'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Invalid value: "Orphan": orphanDependents and deletionPropagation cannot be both set',
        ),
    ],
)
def test_bad_delete_options_are_422(raw: Any, unique: Any, options: Json, message: str) -> None:
    name = unique("badopts")
    raw.json("POST", DEPLOYMENTS, deployment(name))
    status, answer = raw.json("DELETE", f"{DEPLOYMENTS}/{name}", options)
    assert status == 422
    assert answer["message"] == message
    assert raw.json("GET", f"{DEPLOYMENTS}/{name}")[0] == 200


def test_the_python_client_reads_deployments(client_for: Any, api: str, unique: Any) -> None:
    apps = k8s.AppsV1Api(client_for(api))
    name = unique("typed")
    apps.create_namespaced_deployment("default", deployment(name, replicas=3))
    read = apps.read_namespaced_deployment(name, "default")
    assert read.spec.replicas == 3
    assert read.spec.strategy.rolling_update.max_surge == "25%"
    scale = apps.patch_namespaced_deployment_scale(name, "default", {"spec": {"replicas": 1}})
    assert scale.spec.replicas == 1
    assert scale.status.selector == f"app={name}"
    listed = apps.list_namespaced_deployment("default", label_selector="none=here")
    assert listed.items == []


# --- kubectl ---------------------------------------------------------------------------


def _kubectl() -> str:
    binary = os.environ.get("VNPU_TEST_KUBECTL") or shutil.which("kubectl")
    if binary is None:
        pytest.skip("no kubectl on PATH (.ci/run installs Debian's kubernetes-client)")
    return binary


@pytest.mark.needs_kubectl
def test_kubectl_scales_with_both_verbs_and_prints_the_columns(
    api: str, tmp_path: Path, unique: Any
) -> None:
    binary = _kubectl()
    env = {
        **os.environ,
        "KUBECONFIG": str(harness.write_kubeconfig(tmp_path / "kubeconfig", api)),
        "HOME": str(tmp_path),
    }

    def kubectl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [binary, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=20,
            check=False,
        )

    name = unique("kubectl")
    applied = kubectl("apply", "--validate=false", "-f", "-", stdin=json.dumps(deployment(name)))
    assert applied.returncode == 0, applied.stderr
    patched = kubectl("scale", "deployment", name, "--replicas=4")  # PATCH on /scale
    assert patched.returncode == 0, patched.stderr
    conditional = kubectl("scale", f"deploy/{name}", "--replicas=6", "--current-replicas=4")
    assert conditional.returncode == 0, conditional.stderr  # GET, then PUT of the Scale
    refused = kubectl("scale", f"deploy/{name}", "--replicas=1", "--current-replicas=4")
    assert refused.returncode != 0
    assert "Expected replicas to be 4, was 6" in refused.stderr
    wide = kubectl("get", "deploy", name, "-o", "wide")
    assert wide.returncode == 0, wide.stderr
    header, row = wide.stdout.splitlines()
    assert header.split() == [
        "NAME",
        "READY",
        "UP-TO-DATE",
        "AVAILABLE",
        "AGE",
        "CONTAINERS",
        "IMAGES",
        "SELECTOR",
    ]
    assert row.split()[:4] == [name, "0/6", "0", "0"]
    assert row.split()[5:] == ["main", "busybox:1.36", f"app={name}"]
    invalid = deployment(unique("kubectl-bad"))
    del invalid["spec"]["selector"]
    answer = kubectl("apply", "--validate=false", "-f", "-", stdin=json.dumps(invalid))
    assert answer.returncode != 0
    assert "spec.selector: Required value" in answer.stderr
