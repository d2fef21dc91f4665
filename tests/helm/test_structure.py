"""Every rendered document, in every scenario: known kinds, unique names, matching selectors.

The scenarios (conftest.SCENARIOS) cover the defaults, Volcano mode, each component turned
off, the three webhook certificate sources, mutual TLS for the extender, two scheduler
replicas, the monitoring objects, the simulated backend, soft mode, an external device
ConfigMap, inline teams (the tenants ConfigMap) and quotas turned off.
"""

from __future__ import annotations

import re

import pytest

KNOWN = {
    "ConfigMap": "v1",
    "Secret": "v1",
    "Service": "v1",
    "ServiceAccount": "v1",
    "Deployment": "apps/v1",
    "DaemonSet": "apps/v1",
    "ClusterRole": "rbac.authorization.k8s.io/v1",
    "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
    "Role": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
    "MutatingWebhookConfiguration": "admissionregistration.k8s.io/v1",
    "ValidatingWebhookConfiguration": "admissionregistration.k8s.io/v1",
    "ValidatingAdmissionPolicy": "admissionregistration.k8s.io/v1",
    "ValidatingAdmissionPolicyBinding": "admissionregistration.k8s.io/v1",
    "PodDisruptionBudget": "policy/v1",
    "RuntimeClass": "node.k8s.io/v1",
    "ServiceMonitor": "monitoring.coreos.com/v1",
    "PrometheusRule": "monitoring.coreos.com/v1",
    "Issuer": "cert-manager.io/v1",
    "Certificate": "cert-manager.io/v1",
}
CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "RuntimeClass",
}
# Roles Kubernetes itself provides, which the chart binds without creating them.
SYSTEM_ROLES = {
    ("ClusterRole", "system:kube-scheduler"),
    ("ClusterRole", "system:volume-scheduler"),
    ("Role", "extension-apiserver-authentication-reader"),
}
SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

# Which workloads each scenario installs.
WORKLOADS = {"vnpu-scheduler", "vnpu-device-plugin", "vnpu-exporter"}
EXPECTED_WORKLOADS = {
    "volcano": WORKLOADS - {"vnpu-scheduler"},
    "no-scheduler": WORKLOADS - {"vnpu-scheduler"},
    "no-device-plugin": WORKLOADS - {"vnpu-device-plugin"},
    "no-exporter": WORKLOADS - {"vnpu-exporter"},
}


def test_kinds_and_api_versions_are_known(manifests):
    for doc in manifests.docs:
        assert doc["kind"] in KNOWN, f"unexpected kind {doc['kind']}"
        assert doc["apiVersion"] == KNOWN[doc["kind"]], doc["metadata"]["name"]


def test_names_are_unique_and_valid(manifests):
    seen: set[tuple[str, str, str]] = set()
    for doc in manifests.docs:
        meta = doc["metadata"]
        key = (doc["kind"], meta.get("namespace", ""), meta["name"])
        assert key not in seen, f"{key} rendered twice"
        seen.add(key)
        pattern = LABEL if doc["kind"] == "Service" else SUBDOMAIN
        name = meta["name"]
        assert pattern.match(name) or ":" in name, f"{doc['kind']} name {name!r}"
        assert len(name) <= (63 if doc["kind"] == "Service" else 253)


def test_namespaces(manifests):
    for doc in manifests.docs:
        meta = doc["metadata"]
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in meta, f"{doc['kind']} {meta['name']} is cluster-scoped"
        else:
            assert meta.get("namespace") == "kube-system", f"{doc['kind']} {meta['name']}"


def test_namespaced_objects_follow_the_release_namespace(render):
    manifests = render(namespace="npu-system")
    for doc in manifests.docs:
        if doc["kind"] in CLUSTER_SCOPED:
            continue
        expected = (
            "kube-system" if doc["metadata"]["name"].endswith("-auth-reader") else "npu-system"
        )
        assert doc["metadata"]["namespace"] == expected, f"{doc['kind']} {doc['metadata']['name']}"
    hook = manifests.get("MutatingWebhookConfiguration", "vnpu-scheduler")
    assert hook["webhooks"][0]["clientConfig"]["service"]["namespace"] == "npu-system"


def test_every_object_is_labelled(manifests):
    for doc in manifests.docs:
        labels = doc["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/part-of") == "vnpu", doc["metadata"]["name"]
        assert labels.get("app.kubernetes.io/instance") == "vnpu"
        assert labels.get("app.kubernetes.io/managed-by") == "Helm"


def test_components_present(manifests, scenario):
    names = {w["metadata"]["name"] for w in manifests.workloads()}
    assert names == EXPECTED_WORKLOADS.get(scenario, WORKLOADS)
    scheduler = "vnpu-scheduler" in names
    assert (manifests.find("MutatingWebhookConfiguration", "vnpu-scheduler") is not None) == (
        scheduler and scenario != "no-webhook"
    )
    assert (manifests.find("ConfigMap", "vnpu-scheduler-kube-scheduler") is not None) == scheduler
    device_config = manifests.find("ConfigMap", "hami-scheduler-device")
    assert (device_config is None) == (scenario == "external-device-config")


def test_workload_selectors_match_their_pods(manifests):
    for workload in manifests.workloads():
        selector = workload["spec"]["selector"]["matchLabels"]
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), workload["metadata"]["name"]


def _pods_selected(manifests, selector):
    return [
        w
        for w in manifests.workloads()
        if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
    ]


def _port_names(workload):
    spec = workload["spec"]["template"]["spec"]
    return {p["name"]: p["containerPort"] for c in spec["containers"] for p in c.get("ports", [])}


def test_services_select_one_workload_and_its_ports(manifests):
    for service in manifests.all("Service"):
        selected = _pods_selected(manifests, service["spec"]["selector"])
        assert len(selected) == 1, f"Service {service['metadata']['name']} selects {len(selected)}"
        ports = _port_names(selected[0])
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports, f"{service['metadata']['name']}: {port}"


def test_disruption_budget_covers_the_scheduler(manifests):
    for budget in manifests.all("PodDisruptionBudget"):
        selected = _pods_selected(manifests, budget["spec"]["selector"]["matchLabels"])
        assert [w["metadata"]["name"] for w in selected] == ["vnpu-scheduler"]
        assert budget["spec"]["maxUnavailable"] >= 1


def test_service_monitors_find_a_service_port_and_the_alerts_job_name(manifests):
    for monitor in manifests.all("ServiceMonitor"):
        selector = monitor["spec"]["selector"]["matchLabels"]
        services = [
            s
            for s in manifests.all("Service")
            if selector.items() <= s["metadata"]["labels"].items()
        ]
        assert len(services) == 1, monitor["metadata"]["name"]
        service = services[0]
        names = {p["name"] for p in service["spec"]["ports"]}
        for endpoint in monitor["spec"]["endpoints"]:
            assert endpoint["port"] in names
            assert endpoint["path"] == "/metrics"
        # deploy/alerts expects the jobs vnpu-scheduler, vnpu-device-plugin, vnpu-exporter.
        job = service["metadata"]["labels"][monitor["spec"]["jobLabel"]]
        assert job == "vnpu-" + service["metadata"]["labels"]["app.kubernetes.io/component"]
        assert job in {"vnpu-scheduler", "vnpu-device-plugin", "vnpu-exporter"}
        assert monitor["spec"]["namespaceSelector"]["matchNames"] == ["kube-system"]


def test_volumes_resolve(manifests, scenario):
    config_maps = {c["metadata"]["name"] for c in manifests.all("ConfigMap")}
    secrets = {s["metadata"]["name"] for s in manifests.all("Secret")}
    secrets |= {c["spec"]["secretName"] for c in manifests.all("Certificate")}
    if scenario == "external-device-config":
        config_maps.add("hami-device")  # provided by the operator
    if scenario == "user-secret":
        secrets.add("my-tls")
    for workload in manifests.workloads():
        spec = workload["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        for container in spec["containers"]:
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes, f"{container['name']}: {mount['name']}"
        for volume in volumes.values():
            if "configMap" in volume:
                assert volume["configMap"]["name"] in config_maps, volume
            if "secret" in volume:
                assert volume["secret"]["secretName"] in secrets, volume
            if "hostPath" in volume:
                assert volume["hostPath"]["path"].startswith("/"), volume


def test_rbac_references_resolve(manifests):
    accounts = {
        (a["metadata"]["namespace"], a["metadata"]["name"]) for a in manifests.all("ServiceAccount")
    }
    roles = {
        (r["kind"], r["metadata"]["name"])
        for r in manifests.docs
        if r["kind"] in ("Role", "ClusterRole")
    }
    for workload in manifests.workloads():
        spec = workload["spec"]["template"]["spec"]
        assert ("kube-system", spec["serviceAccountName"]) in accounts
    for binding in manifests.docs:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        ref = (binding["roleRef"]["kind"], binding["roleRef"]["name"])
        assert ref in roles or ref in SYSTEM_ROLES, ref
        for subject in binding["subjects"]:
            assert (subject["namespace"], subject["name"]) in accounts, subject


@pytest.mark.parametrize(
    ("component", "rules"),
    [
        (
            "vnpu-scheduler",
            {
                ("", "nodes"): {"get", "list", "watch", "patch"},
                ("", "pods"): {"get", "list", "watch", "patch"},
                ("", "pods/binding"): {"create"},
                ("", "events"): {"create"},
                ("", "configmaps"): {"get", "list", "watch"},
            },
        ),
        (
            "vnpu-device-plugin",
            {
                ("", "nodes"): {"get", "patch"},
                ("", "pods"): {"get", "list", "watch", "patch"},
                ("", "events"): {"create"},
            },
        ),
        ("vnpu-exporter", {("", "pods"): {"list"}}),
    ],
)
def test_cluster_roles_grant_what_the_services_call(default, component, rules):
    role = default.get("ClusterRole", component)
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    for key, verbs in rules.items():
        assert verbs <= granted.get(key, set()), (
            f"{component} lacks {key} {verbs - granted.get(key, set())}"
        )


def test_scheduler_can_elect_a_leader(default):
    role = default.get("Role", "vnpu-scheduler-leader-election")
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "watch", "create", "update"],
        }
    ]


def test_two_replicas_spread_and_keep_a_budget(render):
    manifests = render({"scheduler": {"replicas": 2}})
    deployment = manifests.get("Deployment", "vnpu-scheduler")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    anti = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    term = anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert manifests.get("PodDisruptionBudget", "vnpu-scheduler")["spec"]["maxUnavailable"] == 1


def test_device_plugin_pods_are_node_agents(default):
    daemonset = default.get("DaemonSet", "vnpu-device-plugin")
    spec = daemonset["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"ascend": "on"}
    assert spec["priorityClassName"] == "system-node-critical"
    container = spec["containers"][0]
    assert container["securityContext"]["privileged"] is True
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert host["device-plugins"] == mounts["device-plugins"] == "/var/lib/kubelet/device-plugins"
    assert host["pod-resources"] == "/var/lib/kubelet/pod-resources"
    assert host["driver"] == mounts["driver"] == "/usr/local/Ascend/driver"
    assert host["dcmi"] == mounts["dcmi"] == "/usr/local/dcmi"
    # The ledger must survive restarts: a hostPath, mounted at the path the plugin is given.
    assert host["state"] == mounts["state"] == "/var/lib/vnpu/device-plugin"


def test_kubelet_root_dir_moves_the_host_paths(render):
    manifests = render({"global": {"kubeletRootDir": "/data/kubelet/"}})
    for name in ("vnpu-device-plugin", "vnpu-exporter"):
        spec = manifests.get("DaemonSet", name)["spec"]["template"]["spec"]
        host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
        assert host["pod-resources"] == "/data/kubelet/pod-resources"
        if name == "vnpu-device-plugin":
            assert host["device-plugins"] == "/data/kubelet/device-plugins"


def test_runtime_class_and_pull_secrets(render):
    manifests = render(
        {
            "runtimeClass": {"create": True, "handler": "ascend-rt"},
            "global": {"imagePullSecrets": ["regcred"]},
        }
    )
    runtime = manifests.get("RuntimeClass", "ascend")
    assert runtime["handler"] == "ascend-rt"
    for workload in manifests.workloads():
        assert workload["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]


def test_images_default_to_the_app_version(render):
    manifests = render(
        {
            "global": {"image": {"registry": "registry.example/npu"}},
            "exporter": {"image": {"tag": "dev"}},
        }
    )
    _, scheduler = manifests.container("vnpu-scheduler")
    _, plugin = manifests.container("device-plugin")
    _, exporter = manifests.container("exporter")
    assert scheduler["image"] == "registry.example/npu/vnpu-scheduler:0.1.0"
    assert plugin["image"] == "registry.example/npu/vnpu-device-plugin:0.1.0"
    assert exporter["image"] == "registry.example/npu/vnpu-exporter:dev"
    _, kube_scheduler = manifests.container("kube-scheduler")
    assert kube_scheduler["image"] == "registry.k8s.io/kube-scheduler:v1.31.0"


def test_release_name_prefixes_names(render):
    manifests = render(release="npu")
    names = {w["metadata"]["name"] for w in manifests.workloads()}
    assert names == {"npu-vnpu-scheduler", "npu-vnpu-device-plugin", "npu-vnpu-exporter"}
    overridden = render({"global": {"fullnameOverride": "ascend"}}, release="npu")
    assert {w["metadata"]["name"] for w in overridden.workloads()} == {
        "ascend-scheduler",
        "ascend-device-plugin",
        "ascend-exporter",
    }
    # The device ConfigMap keeps the name HAMi and Volcano look for.
    assert overridden.find("ConfigMap", "hami-scheduler-device") is not None
