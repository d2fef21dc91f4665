"""The scheduler pod as the chart renders it, run for real against kube-apiserver.

The vnpu-scheduler container's command and args are run as a process (only the listen ports,
which the test machine chooses, and the kubeconfig, which replaces the pod's service account,
are changed); its mounted files are the rendered device ConfigMap and TLS Secret. Then the
test does what kube-scheduler and the API server would: it calls the extender at the
rendered urlPrefix with the rendered verbs for a pod asking for a managed resource, and the
webhook over HTTPS, verifying the server certificate with the rendered caBundle for the
Service's DNS name.

The API is the session's kube-apiserver: each test's pods go in a namespace of its own, and
what the scheduler and the test write in kube-system (the rendered lock namespace) is deleted
when the test ends.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import kubernetes
import pytest
import yaml

from vnpu_core import coordination, protocol
from vnpu_sandbox.platform import apiplane, components

SERVICE_HOST = "vnpu-scheduler.kube-system.svc"
SYSTEM = "kube-system"
NOT_READY = "node.kubernetes.io/not-ready"
Json = dict[str, Any]


def _node(name: str) -> Json:
    chips = [
        protocol.RegisteredChip(f"{name}-chip-{i}", i, 7, 21527, 8, "Ascend310P", True, None)
        for i in range(2)
    ]
    stamp = coordination.encode_handshake(
        coordination.Handshake(
            coordination.HandshakeState.REPORTED, datetime.now().replace(microsecond=0)
        )
    )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {
                protocol.node_register_key("Ascend310P"): protocol.encode_node_register(chips),
                protocol.node_handshake_key("Ascend310P"): stamp,
            },
        },
        "status": {
            "capacity": {"huawei.com/Ascend310P": "14"},
            "allocatable": {"huawei.com/Ascend310P": "14"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def _create_ready_node(core: kubernetes.client.CoreV1Api, node: Json) -> None:
    """Create ``node`` (its status says Ready) as it is once its kubelet has reported.
    kube-apiserver taints every new node ``not-ready:NoSchedule`` and kube-controller-manager's
    node lifecycle controller lifts the taint when the node is Ready; no controller runs here,
    so this lifts it."""
    created = core.create_node(node)
    taints = created.spec.taints or []
    kept = [t for t in taints if t.key != NOT_READY]
    if len(kept) != len(taints):
        body = {"spec": {"taints": core.api_client.sanitize_for_serialization(kept) or None}}
        core.patch_node(
            node["metadata"]["name"], body, _content_type="application/merge-patch+json"
        )


class SystemObjects:
    """What appears in kube-system while a test runs (the rendered lock namespace, where the
    scheduler keeps its Leases, and the rendered tenants ConfigMap), deleted when it ends: the
    session's other tests find kube-system as it was."""

    KINDS = ("leases", "configmaps", "events")

    def __init__(self, plane: Any) -> None:
        self.plane = plane
        self.before = {kind: self._names(kind) for kind in self.KINDS}

    def _path(self, kind: str) -> str:
        group = "/apis/coordination.k8s.io/v1" if kind == "leases" else "/api/v1"
        return f"{group}/namespaces/{SYSTEM}/{kind}"

    def _names(self, kind: str) -> set[str]:
        found = self.plane.request("GET", self._path(kind))["items"]
        return {item["metadata"]["name"] for item in found}

    def clear(self) -> None:
        for kind in self.KINDS:
            for name in sorted(self._names(kind) - self.before[kind]):
                with contextlib.suppress(apiplane.ApiError):  # gone meanwhile
                    self.plane.request("DELETE", f"{self._path(kind)}/{name}")


def _pod(name: str, memory: int, routed: bool = True, namespace: str = "default") -> Json:
    """A pod asking for a 310P vNPU; ``routed``: with the schedulerName the webhook sets."""
    pod: Json = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "ascend/app",
                    "resources": {
                        "limits": {
                            "huawei.com/Ascend310P": "1",
                            "huawei.com/Ascend310P-memory": str(memory),
                        }
                    },
                }
            ],
        },
    }
    if routed:
        pod["spec"]["schedulerName"] = "vnpu-scheduler"
    return pod


@dataclass(frozen=True)
class ScheduledPod:
    """The running scheduler process and what the chart rendered around it."""

    namespace: str  # the test's, where its pods go
    url_prefix: str  # the rendered urlPrefix, on the port the test chose
    webhook_port: int
    ca_pem: bytes  # the rendered caBundle
    extender: Json  # the rendered extender entry
    http_port: int
    metrics_port: int


@pytest.fixture
def scheduler_pod(
    default, tmp_path: Path, kube_namespace: Any
) -> Iterator[tuple[ScheduledPod, kubernetes.client.CoreV1Api]]:
    with _running(default, tmp_path, kube_namespace) as running:
        yield running


@contextlib.contextmanager
def _running(
    manifests,
    tmp_path: Path,
    space: Any,
    before: Callable[[kubernetes.client.ApiClient], None] = lambda _: None,
) -> Iterator[tuple[ScheduledPod, kubernetes.client.CoreV1Api]]:
    """The rendered vnpu-scheduler container as a process on the API of ``space`` (the test's
    ``apiplane.Namespace``); ``before`` fills the API first."""
    spec, container = manifests.container("vnpu-scheduler")
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    # Materialise the ConfigMap and Secret volumes as the kubelet would.
    local: dict[str, Path] = {}
    for path, name in mounts.items():
        volume = volumes[name]
        target = tmp_path / name
        target.mkdir()
        local[path] = target
        if "configMap" in volume:
            data = manifests.get("ConfigMap", volume["configMap"]["name"])["data"]
            for key, text in data.items():
                (target / key).write_text(text, encoding="utf-8")
        elif "secret" in volume:
            data = manifests.get("Secret", volume["secret"]["secretName"])["data"]
            for key, text in data.items():
                (target / key).write_bytes(base64.b64decode(text))
    http_port, webhook_port, metrics_port = components.free_ports(3)
    args: list[str] = []
    rendered_port = None
    rendered_host = None
    for arg in container["args"]:
        flag, _, value = arg.partition("=")
        if flag == "--port":
            rendered_port = int(value)
            arg = f"--port={http_port}"  # noqa: PLW2901
        elif flag == "--webhook-port":
            arg = f"--webhook-port={webhook_port}"  # noqa: PLW2901
        elif flag == "--metrics-port":
            arg = f"--metrics-port={metrics_port}"  # noqa: PLW2901
        elif flag in ("--webhook-host", "--metrics-host"):
            arg = f"{flag}=127.0.0.1"  # noqa: PLW2901
        elif flag == "--host":
            rendered_host = value  # kept as rendered: the extender's own address

        else:
            for path, target in local.items():
                if value.startswith(path + "/"):
                    arg = f"{flag}={target / value[len(path) + 1 :]}"  # noqa: PLW2901
        args.append(arg)
    config = yaml.safe_load(
        manifests.get("ConfigMap", "vnpu-scheduler-kube-scheduler")["data"]["config.yaml"]
    )
    extender = config["extenders"][0]
    url = urlsplit(extender["urlPrefix"])
    assert url.port == rendered_port, "kube-scheduler calls the port vnpu-scheduler listens on"
    assert url.hostname == rendered_host == "127.0.0.1", "the extender is reachable in the pod only"
    url_prefix = f"{url.scheme}://{url.hostname}:{http_port}{url.path}"
    secret = manifests.get("Secret", "vnpu-scheduler-tls")
    ca_pem = base64.b64decode(secret["data"]["ca.crt"])
    program = shutil.which(container["command"][0], path=str(Path(sys.executable).parent))
    assert program is not None, "the vnpu-scheduler console script is installed"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("VNPU_")}
    kubeconfig = space.kubeconfig
    client = kubernetes.config.new_client_from_config(str(kubeconfig))
    core = kubernetes.client.CoreV1Api(client)
    system = SystemObjects(space.plane)
    process: subprocess.Popen[bytes] | None = None
    log = (tmp_path / "scheduler.log").open("w")
    try:
        _create_ready_node(core, _node("npu-1"))
        before(client)
        process = subprocess.Popen(
            [program, *args, f"--kubeconfig={kubeconfig}"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
        )
        deadline = time.monotonic() + 25
        while True:
            assert process.poll() is None, (tmp_path / "scheduler.log").read_text()
            try:
                # the kubelet's readiness probe, on the port the pod declares for it
                if (
                    httpx.get(f"http://127.0.0.1:{metrics_port}/readyz", timeout=2).status_code
                    == 200
                ):
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "vnpu-scheduler did not become ready"
            time.sleep(0.1)
        yield (
            ScheduledPod(
                space.name, url_prefix, webhook_port, ca_pem, extender, http_port, metrics_port
            ),
            core,
        )
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=15)
        log.close()
        system.clear()
        client.close()


def test_extender_verbs_answer_at_the_rendered_url(scheduler_pod):
    pod, core = scheduler_pod
    created = core.create_namespaced_pod(
        pod.namespace, _pod("infer", 4000, namespace=pod.namespace)
    )
    body = kubernetes.client.ApiClient().sanitize_for_serialization(created)
    extender = pod.extender
    # Only pods asking for a managed resource reach the extender: this one does.
    managed = {r["name"] for r in extender["managedResources"]}
    assert "huawei.com/Ascend310P" in managed
    with httpx.Client(timeout=10) as http:
        filtered = http.post(
            f"{pod.url_prefix}/{extender['filterVerb']}", json={"Pod": body, "NodeNames": ["npu-1"]}
        )
        assert filtered.status_code == 200
        assert filtered.json()["NodeNames"] == ["npu-1"], filtered.json()
        scored = http.post(
            f"{pod.url_prefix}/{extender['prioritizeVerb']}",
            json={"Pod": body, "NodeNames": ["npu-1"]},
        )
        assert scored.status_code == 200
        assert scored.json()[0]["Host"] == "npu-1"
        bound = http.post(
            f"{pod.url_prefix}/{extender['bindVerb']}",
            json={
                "PodName": "infer",
                "PodNamespace": pod.namespace,
                "PodUID": created.metadata.uid,
                "Node": "npu-1",
            },
        )
        assert bound.status_code == 200
        assert bound.json() == {"Error": ""}
    stored = core.read_namespaced_pod("infer", pod.namespace)
    assert stored.spec.node_name == "npu-1"
    assert stored.metadata.annotations[protocol.allocated_key("Ascend310P")]


def _review(pod: Json) -> Json:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "review-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default",
            "operation": "CREATE",
            "object": pod,
        },
    }


def test_webhook_serves_the_rendered_certificate(scheduler_pod):
    pod, _ = scheduler_pod
    context = ssl.create_default_context(cadata=pod.ca_pem.decode())
    url = f"https://127.0.0.1:{pod.webhook_port}/mutate"
    with httpx.Client(verify=context, timeout=10) as http:
        answer = http.post(
            url,
            json=_review(_pod("hooked", 4000, routed=False)),
            extensions={"sni_hostname": SERVICE_HOST},
        )
    assert answer.status_code == 200
    response = answer.json()["response"]
    assert response["allowed"] is True
    patch = json.loads(base64.b64decode(response["patch"]))
    changed = {op["path"]: op.get("value") for op in patch}
    assert changed["/spec/schedulerName"] == "vnpu-scheduler"
    assert "6144" in json.dumps(patch)  # 4000 MiB rounds up to the vir02 template
    # The certificate is for the Service's name, not for any name.
    with (
        httpx.Client(verify=context, timeout=10) as http,
        pytest.raises(httpx.ConnectError, match=r"(?i)certificate|hostname"),
    ):
        http.post(
            url, json=_review(_pod("other", 4000)), extensions={"sni_hostname": "elsewhere.example"}
        )


def test_metrics_are_served_on_the_port_the_service_monitor_scrapes(scheduler_pod, default):
    pod, _ = scheduler_pod
    service = default.get("Service", "vnpu-scheduler")
    scraped = next(p for p in service["spec"]["ports"] if p["name"] == "metrics")
    assert scraped["targetPort"] == "metrics"
    answer = httpx.get(f"http://127.0.0.1:{pod.metrics_port}/metrics", timeout=10)
    assert answer.status_code == 200
    assert "vnpu_scheduler_requests_total" in answer.text


def test_the_pod_ports_serve_no_extender_verb(scheduler_pod):
    """Only the loopback port binds: the metrics and webhook ports refuse the verbs unread."""
    pod, core = scheduler_pod
    created = core.create_namespaced_pod(
        pod.namespace, _pod("probe", 4000, namespace=pod.namespace)
    )
    body = {
        "PodName": "probe",
        "PodNamespace": pod.namespace,
        "PodUID": created.metadata.uid,
        "Node": "npu-1",
    }
    context = ssl.create_default_context(cadata=pod.ca_pem.decode())
    with httpx.Client(verify=context, timeout=10) as http:
        answer = http.post(
            f"https://127.0.0.1:{pod.webhook_port}/bind",
            json=body,
            extensions={"sni_hostname": SERVICE_HOST},
        )
        assert answer.status_code == 404
    answer = httpx.post(f"http://127.0.0.1:{pod.metrics_port}/bind", json=body, timeout=10)
    assert answer.status_code == 404
    assert answer.json() == {"Error": "/bind is not served here"}
    assert core.read_namespaced_pod("probe", pod.namespace).spec.node_name is None


def test_quotas_and_teams_work_as_rendered(render, tmp_path, kube_namespace):
    """With inline teams the scheduler loads the rendered tenants ConfigMap through the API,
    binds under its quota lock and holds back a pod its namespace's ResourceQuota has no room for."""
    team = {
        "name": "vision",
        "namespaces": ["vision"],
        "nominal": {"Ascend310P-memory": 12288},
        "borrowingLimit": {"Ascend310P-memory": 0},
    }
    manifests = render({"scheduler": {"tenants": {"teams": [team]}}})
    config_map = manifests.get("ConfigMap", "vnpu-scheduler-tenants")

    def before(client: kubernetes.client.ApiClient) -> None:
        core = kubernetes.client.CoreV1Api(client)
        core.create_namespaced_config_map(config_map["metadata"]["namespace"], config_map)
        hard = {"limits.huawei.com/Ascend310P-memory": "6144"}
        core.create_namespaced_resource_quota(
            kube_namespace.name, {"metadata": {"name": "npu"}, "spec": {"hard": hard}}
        )

    with _running(manifests, tmp_path, kube_namespace, before) as (pod, core):
        ready = httpx.get(f"http://127.0.0.1:{pod.metrics_port}/readyz", timeout=10).json()
        assert ready["quotas"]["tenants_config"] == "kube-system/vnpu-scheduler-tenants"
        assert ready["quotas"]["tenants_loaded"] is True
        metrics = httpx.get(f"http://127.0.0.1:{pod.metrics_port}/metrics", timeout=10).text
        assert (
            'vnpu_scheduler_team_nominal{team="vision",unit="Ascend310P-memory"} 12288' in metrics
        )
        extender = pod.extender
        with httpx.Client(timeout=10) as http:
            first = core.create_namespaced_pod(  # holds 6144
                pod.namespace, _pod("first", 4000, namespace=pod.namespace)
            )
            body = kubernetes.client.ApiClient().sanitize_for_serialization(first)
            filtered = http.post(
                f"{pod.url_prefix}/{extender['filterVerb']}",
                json={"Pod": body, "NodeNames": ["npu-1"]},
            )
            assert filtered.json()["NodeNames"] == ["npu-1"], filtered.json()
            bound = http.post(
                f"{pod.url_prefix}/{extender['bindVerb']}",
                json={
                    "PodName": "first",
                    "PodNamespace": pod.namespace,
                    "PodUID": first.metadata.uid,
                    "Node": "npu-1",
                },
            )
            assert bound.json() == {"Error": ""}  # under the Lease vnpu-quota.<namespace>
            second = core.create_namespaced_pod(
                pod.namespace, _pod("second", 4000, namespace=pod.namespace)
            )
            body = kubernetes.client.ApiClient().sanitize_for_serialization(second)
            refused = http.post(
                f"{pod.url_prefix}/{extender['filterVerb']}",
                json={"Pod": body, "NodeNames": ["npu-1"]},
            )
        assert not refused.json().get("NodeNames"), refused.json()
        assert f"quota {pod.namespace}/npu limits.huawei.com/Ascend310P-memory" in refused.text
        assert core.read_namespaced_pod("first", pod.namespace).spec.node_name == "npu-1"
