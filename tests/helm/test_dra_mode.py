"""The chart in DRA mode (``global.mode: dra``): what it renders instead of classic mode's.

The DRA driver's DaemonSet replaces the device plugin's; the scheduler pods run vnpu-scheduler
alone with ``--mode=dra`` (its webhook), without kube-scheduler, its configuration or its RBAC;
the DeviceClasses are installed whatever ``dra.deviceClasses.create`` says; the exporter stays.
The driver's rendered RBAC is applied to the session's real kube-apiserver, and the driver's own
API calls (``vnpu_dra_driver.cluster`` and ``publisher``) are made as its service account: they
pass, and what the role does not grant is refused.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any, cast

import helm_python as helm
import kubernetes
import pytest

from vnpu_core import catalog, draclasses
from vnpu_dra_driver import chips, cluster, publisher, slices
from vnpu_npu.sim import backend as sim_backend
from vnpu_sandbox.platform import apiplane
from vnpu_service import kubeapi

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "vnpu"
DRA = {"global": {"mode": "dra"}}
Json = dict[str, Any]

DRIVER_RULES = [
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceslices"],
        "verbs": ["create", "get", "list", "watch", "update", "delete"],
    },
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaims"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
]


@pytest.fixture(scope="module")
def dra(render: Any) -> Any:
    return render(DRA)


def _driver(manifests: Any) -> tuple[Json, Json]:
    daemonset = manifests.get("DaemonSet", "vnpu-dra-driver")
    spec = daemonset["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    return spec, container


def _host_paths(spec: Json) -> dict[str, tuple[str, str]]:
    return {
        v["name"]: (v["hostPath"]["path"], v["hostPath"]["type"])
        for v in spec["volumes"]
        if "hostPath" in v
    }


# Values


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"global": {"mode": "DRA"}}, "/global/mode"),
        # The mode is a global (every subchart reads it): a top-level key is refused, named.
        ({"mode": "dra"}, "mode"),
        ({"dra": {"driver": {"backend": "npu-smi"}}}, "/dra/driver/backend"),
        ({"global": {"draDriverStateDir": "var/lib/x"}}, "/global/draDriverStateDir"),
        ({"dra": {"driver": {"interval": 0}}}, "/dra/driver/interval"),
        ({"dra": {"driver": {"serverKind": "dgx"}}}, "/dra/driver/serverKind"),
    ],
)
def test_a_wrong_value_fails_with_the_key_named(render: Any, values: Json, key: str) -> None:
    with pytest.raises(helm.HelmValuesError) as caught:
        render(values)
    assert key in str(caught.value)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"dra": {"driver": {"backend": "sim"}}}, r"dra\.driver\.simDir is required"),
        (
            {"scheduler": {"extender": {"tls": {"enabled": True}}}},
            r"scheduler\.extender\.tls\.enabled: DRA mode .* calls no extender",
        ),
    ],
)
def test_rules_across_keys_fail_with_the_keys_named(
    render: Any, values: Json, message: str
) -> None:
    with pytest.raises(helm.HelmRenderError, match=message):
        render({**DRA, **values})


# The DRA driver


def test_the_driver_runs_serve_with_the_host_paths(dra: Any) -> None:
    spec, container = _driver(dra)
    assert container["image"] == "vnpu-dra-driver:0.1.0"
    assert container["command"] == ["vnpu-dra-driver"]
    assert container["args"] == [
        "serve",
        "--node=$(NODE_NAME)",
        "--dcmi-library=",
        "--kubelet-dir=/var/lib/kubelet",
        "--cdi-dir=/var/run/cdi",
        "--state-dir=/var/lib/vnpu/dra-driver",
        "--interval=30",
        "--reconcile-interval=300",
        "--log-level=info",
    ]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["LD_LIBRARY_PATH"]["value"] == (
        "/usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64/common:"
        "/usr/local/Ascend/driver/lib64/driver:/usr/local/dcmi"
    )
    assert container["securityContext"] == {"privileged": True}
    mounts = {
        m["name"]: (m["mountPath"], m.get("readOnly", False)) for m in container["volumeMounts"]
    }
    hosts = _host_paths(spec)
    expected = {
        # The kubelet dials the endpoint by the path the driver reports: host path = mount path.
        "plugins": ("/var/lib/kubelet/plugins", "DirectoryOrCreate", False),
        "plugins-registry": ("/var/lib/kubelet/plugins_registry", "Directory", False),
        "cdi": ("/var/run/cdi", "DirectoryOrCreate", False),
        "state": ("/var/lib/vnpu/dra-driver", "DirectoryOrCreate", False),
        "dev": ("/dev", "Directory", False),
        "driver": ("/usr/local/Ascend/driver", "Directory", True),
        "dcmi": ("/usr/local/dcmi", "DirectoryOrCreate", True),
    }
    assert set(mounts) == set(hosts) == set(expected)
    for name, (path, kind, read_only) in expected.items():
        assert hosts[name] == (path, kind), name
        assert mounts[name] == (path, read_only), name
    assert spec["serviceAccountName"] == "vnpu-dra-driver"
    assert spec["nodeSelector"] == {"ascend": "on"}
    assert spec["tolerations"] == [{"key": "CriticalAddonsOnly", "operator": "Exists"}]
    assert spec["priorityClassName"] == "system-node-critical"


def test_driver_values_reach_the_daemonset(render: Any) -> None:
    manifests = render(
        {
            "global": {
                "mode": "dra",
                "kubeletRootDir": "/data/kubelet/",
                "image": {"registry": "registry.example/npu", "tag": "dev"},
                "imagePullSecrets": ["regcred"],
                "logLevel": "debug",
                "draDriverStateDir": "/srv/vnpu/claims",
            },
            "dra": {
                "driver": {
                    "backend": "sim",
                    "simDir": "/var/lib/vnpu/sim-node",
                    "model": "310P3",
                    "soft": True,
                    "hamiCoreDir": "/opt/hami-core",
                    "serverKind": "300i-duo",
                    "interval": 5,
                    "reconcileInterval": 60,
                    "cdiDir": "/etc/cdi",
                    "extraArgs": ["--kubeconfig=/etc/k"],
                    "nodeSelector": {"ascend": None, "npu": "yes"},  # null drops a default key
                    "tolerations": [],
                }
            },
        }
    )
    spec, container = _driver(manifests)
    assert container["image"] == "registry.example/npu/vnpu-dra-driver:dev"
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert container["args"] == [
        "serve",
        "--node=$(NODE_NAME)",
        "--sim-dir=/var/lib/vnpu/sim",
        "--model=310P3",
        "--soft",
        "--hami-core-dir=/opt/hami-core",
        "--hami-shared-dir=/usr/local/hami-shared-region",
        "--server=300i-duo",
        "--kubelet-dir=/data/kubelet",
        "--cdi-dir=/etc/cdi",
        "--state-dir=/srv/vnpu/claims",
        "--interval=5",
        "--reconcile-interval=60",
        "--log-level=debug",
        "--kubeconfig=/etc/k",
    ]
    hosts = _host_paths(spec)
    assert hosts["plugins"][0] == "/data/kubelet/plugins"
    assert hosts["plugins-registry"][0] == "/data/kubelet/plugins_registry"
    assert hosts["sim"] == ("/var/lib/vnpu/sim-node", "Directory")
    assert hosts["state"][0] == "/srv/vnpu/claims"
    assert hosts["cdi"][0] == "/etc/cdi"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["plugins"] == "/data/kubelet/plugins"
    assert mounts["sim"] == "/var/lib/vnpu/sim"
    # soft slices: hami-vnpu-core's host directories, at their host paths
    assert hosts["hami-core"] == ("/opt/hami-core", "DirectoryOrCreate")
    assert hosts["hami-shared"] == ("/usr/local/hami-shared-region", "DirectoryOrCreate")
    assert mounts["hami-core"] == "/opt/hami-core"
    assert mounts["hami-shared"] == "/usr/local/hami-shared-region"
    assert spec["nodeSelector"] == {"npu": "yes"}
    assert "tolerations" not in spec


def test_the_driver_role_grants_exactly_what_it_calls(dra: Any) -> None:
    assert dra.get("ClusterRole", "vnpu-dra-driver")["rules"] == DRIVER_RULES
    binding = dra.get("ClusterRoleBinding", "vnpu-dra-driver")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "vnpu-dra-driver",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "vnpu-dra-driver", "namespace": "kube-system"}
    ]
    assert dra.get("ServiceAccount", "vnpu-dra-driver")["metadata"]["namespace"] == "kube-system"


def test_classic_mode_renders_no_driver(default: Any) -> None:
    assert default.find("DaemonSet", "vnpu-dra-driver") is None
    assert default.find("ClusterRole", "vnpu-dra-driver") is None
    assert default.find("ServiceAccount", "vnpu-dra-driver") is None
    rules = default.get("ClusterRole", "vnpu-scheduler")["rules"]
    assert not any("resource.k8s.io" in r["apiGroups"] for r in rules)


# What else DRA mode changes


@pytest.mark.parametrize("create", [False, True])
def test_the_device_classes_are_installed_whatever_create_says(render: Any, create: bool) -> None:
    manifests = render({**DRA, "dra": {"deviceClasses": {"create": create}}})
    rendered = {c["metadata"]["name"]: c["spec"] for c in manifests.all("DeviceClass")}
    classes: list[Any] = list(draclasses.device_classes(catalog.BUILTIN))
    built = {c["metadata"]["name"]: c["spec"] for c in classes}
    assert rendered == built


def test_no_device_plugin(render: Any) -> None:
    manifests = render({**DRA, "devicePlugin": {"serviceMonitor": {"enabled": True}}})
    for kind in ("DaemonSet", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Service"):
        assert manifests.find(kind, "vnpu-device-plugin") is None, kind
    assert manifests.all("ServiceMonitor") == []
    assert not manifests.has_container("device-plugin")
    # Nor is its service account trusted by the admission policies.
    for policy in manifests.all("ValidatingAdmissionPolicy"):
        for condition in policy["spec"]["matchConditions"]:
            assert "vnpu-device-plugin" not in condition["expression"]
            if condition["name"] == "untrusted-requester":
                assert "system:serviceaccount:kube-system:vnpu-scheduler" in condition["expression"]


def test_the_scheduler_is_the_webhook_alone_in_dra_mode(dra: Any) -> None:
    deployment = dra.get("Deployment", "vnpu-scheduler")
    spec = deployment["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["vnpu-scheduler"]
    (container,) = spec["containers"]
    assert container["args"][0] == "--mode=dra"
    assert container["command"] == ["vnpu-scheduler"]
    assert "--webhook-port=8443" in container["args"]
    assert {v["name"] for v in spec["volumes"]} == {"device-config", "tls", "tmp"}
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert "checksum/kube-scheduler-config" not in annotations
    # No kube-scheduler: no configuration, no extender, none of kube-scheduler's RBAC.
    assert dra.find("ConfigMap", "vnpu-scheduler-kube-scheduler") is None
    for kind, name in (
        ("ClusterRoleBinding", "vnpu-scheduler-kube-scheduler"),
        ("ClusterRoleBinding", "vnpu-scheduler-volume-scheduler"),
        ("Role", "vnpu-scheduler-leader-election"),
        ("RoleBinding", "vnpu-scheduler-leader-election"),
        ("RoleBinding", "vnpu-scheduler-auth-reader"),
    ):
        assert dra.find(kind, name) is None, (kind, name)
    # What vnpu-scheduler itself needs stays: its role, the quota locks, its webhooks; and
    # its webhook makes multi-chip and soft-slice pods' claim templates.
    rules = dra.get("ClusterRole", "vnpu-scheduler")["rules"]
    assert {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaimtemplates"],
        "verbs": ["get", "create"],
    } in rules
    assert dra.find("Role", "vnpu-scheduler-quota-locks") is not None
    assert dra.find("MutatingWebhookConfiguration", "vnpu-scheduler") is not None
    assert dra.find("ValidatingWebhookConfiguration", "vnpu-scheduler") is not None
    ports = {p["name"] for p in dra.get("Service", "vnpu-scheduler")["spec"]["ports"]}
    assert ports == {"metrics", "webhook"}


def test_the_exporter_stays(dra: Any) -> None:
    assert {w["metadata"]["name"] for w in dra.workloads()} == {
        "vnpu-scheduler",
        "vnpu-dra-driver",
        "vnpu-exporter",
    }


def test_every_reference_resolves(dra: Any) -> None:
    config_maps = {c["metadata"]["name"] for c in dra.all("ConfigMap")}
    secrets = {s["metadata"]["name"] for s in dra.all("Secret")}
    accounts = {a["metadata"]["name"] for a in dra.all("ServiceAccount")}
    roles = {(r["kind"], r["metadata"]["name"]) for r in dra.docs if r["kind"].endswith("Role")}
    for workload in dra.workloads():
        spec = workload["spec"]["template"]["spec"]
        assert spec["serviceAccountName"] in accounts
        selector = workload["spec"]["selector"]["matchLabels"]
        assert selector.items() <= workload["spec"]["template"]["metadata"]["labels"].items()
        volumes = {v["name"]: v for v in spec["volumes"]}
        for container in spec["containers"]:
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes, (container["name"], mount["name"])
        for volume in volumes.values():
            if "configMap" in volume:
                assert volume["configMap"]["name"] in config_maps
            if "secret" in volume:
                assert volume["secret"]["secretName"] in secrets
    for binding in dra.docs:
        if binding["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            assert (binding["roleRef"]["kind"], binding["roleRef"]["name"]) in roles
            assert all(s["name"] in accounts for s in binding["subjects"])
    for doc in dra.docs:
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "vnpu"


def test_notes_say_dra_mode(dra: Any) -> None:
    assert "Mode: dra" in dra.notes
    assert "DaemonSet vnpu-dra-driver (npu.vnpu.io)" in dra.notes
    assert "vnpu-scheduler --mode=dra" in dra.notes
    assert "device plugin  DaemonSet" not in dra.notes
    assert "deviceshare" not in dra.notes


@pytest.mark.parametrize(
    "values",
    [
        DRA,
        {**DRA, "scheduler": {"enabled": False}, "exporter": {"enabled": False}},
        {
            **DRA,
            "dra": {"driver": {"backend": "sim", "simDir": "/var/lib/vnpu/sim", "soft": True}},
            "exporter": {"serviceMonitor": {"enabled": True}},
        },
    ],
    ids=["dra", "driver-alone", "sim-soft-monitoring"],
)
def test_lint_is_clean(values: Json) -> None:
    report = helm.lint(CHART, values, strict=True, namespace="kube-system", kube_version="v1.37.0")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


# The driver's RBAC on the real kube-apiserver


def _sar(plane: Any, user: str, verb: str, group: str, resource: str) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": ["system:serviceaccounts", "system:authenticated"],
            "resourceAttributes": {"verb": verb, "group": group, "resource": resource},
        },
    }
    answer = plane.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    return bool(answer["status"].get("allowed"))


def test_the_driver_publishes_and_reads_claims_with_its_rendered_rbac(
    render: Any, kube_namespace: Any
) -> None:
    plane = kube_namespace.plane
    namespace = kube_namespace.name
    manifests = render(DRA, namespace=namespace, release="vnpu-rbac")
    account = manifests.get("ServiceAccount", "vnpu-rbac-dra-driver")
    role = manifests.get("ClusterRole", "vnpu-rbac-dra-driver")
    binding = manifests.get("ClusterRoleBinding", "vnpu-rbac-dra-driver")
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    user = f"system:serviceaccount:{namespace}:vnpu-rbac-dra-driver"
    node = "dra-rbac-node"
    api_client = None
    sim = tempfile.TemporaryDirectory(prefix="vnpu-dra-rbac-")
    try:
        plane.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", account)
        plane.request("POST", f"{rbac}/clusterroles", role)
        plane.request("POST", f"{rbac}/clusterrolebindings", binding)
        plane.request("POST", "/api/v1/nodes", {"metadata": {"name": node}})
        # RBAC is not what refuses the rest: the same identity is refused other things.
        assert _sar(plane, user, "update", "resource.k8s.io", "resourceslices")
        assert not _sar(plane, user, "patch", "", "nodes")
        assert not _sar(plane, user, "list", "", "secrets")
        assert not _sar(plane, user, "create", "", "pods")
        assert not _sar(plane, user, "update", "resource.k8s.io", "resourceclaims")
        assert not _sar(plane, user, "create", "resource.k8s.io", "deviceclasses")

        # The driver's own calls, as its service account (the admin impersonating it).
        api_client = kubeapi.client(kube_namespace.kubeconfig)
        cast(Any, api_client).set_default_header("Impersonate-User", user)
        api = cluster.KubeSlices(api_client)
        directory = Path(sim.name)
        pool = publisher.Publisher(api)
        built: tuple[Json, ...] = ()
        for count in (4, 1):  # create the pool, then replace and delete slices
            (directory / "chips.yaml").write_text(f"chip: 310P3\nchips: {count}\n")
            (directory / "state.txt").unlink(missing_ok=True)
            npu = sim_backend.SimBackend(directory)
            try:
                found = chips.read(npu)
                model = catalog.BUILTIN.by_chip_name(found[0].info.model)
                assert model is not None
                built = slices.build(node, found, model)
                pool.publish(node, built)
            finally:
                npu.close()
        stored = api.list_slices(node, draclasses.DRIVER)
        assert sorted(s["metadata"]["name"] for s in stored) == sorted(
            s["metadata"]["name"] for s in built
        )
        assert api.get_claim(namespace, "no-such-claim") is None  # 404, not 403
        # What the role does not grant is refused to the same client.
        core = kubernetes.client.CoreV1Api(api_client)
        with pytest.raises(kubernetes.client.exceptions.ApiException) as refused:
            core.patch_node(node, {"metadata": {"labels": {"x": "y"}}})
        assert refused.value.status == 403
    finally:
        if api_client is not None:
            kubeapi.close(api_client)
        sim.cleanup()
        for path in (
            f"{rbac}/clusterrolebindings/vnpu-rbac-dra-driver",
            f"{rbac}/clusterroles/vnpu-rbac-dra-driver",
        ):
            with contextlib.suppress(apiplane.ApiError):  # not made when a create failed
                plane.request("DELETE", path)
        listed = plane.request(
            "GET", f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName={node}"
        )
        for item in listed.get("items") or []:
            plane.request(
                "DELETE", f"/apis/resource.k8s.io/v1/resourceslices/{item['metadata']['name']}"
            )


def test_the_exporter_reads_the_drivers_claim_ledger_in_dra_mode(render: Any) -> None:
    """The vNPUs' owners are in the DRA driver's claim ledger: its host directory is mounted
    and named to the exporter in place of the device plugin's."""
    values = {"global": {"mode": "dra", "draDriverStateDir": "/srv/vnpu/claims"}}
    manifests = render(values)
    (daemonset,) = [d for d in manifests.all("DaemonSet") if "exporter" in d["metadata"]["name"]]
    spec = daemonset["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert "--dra-state-dir=/var/lib/vnpu/device-plugin-state" in container["args"]
    assert not [a for a in container["args"] if a.startswith("--device-plugin-state-dir")]
    (volume,) = [v for v in spec["volumes"] if v["name"] == "device-plugin-state"]
    assert volume["hostPath"]["path"] == "/srv/vnpu/claims"
