"""Who can reach which route: the extender on loopback or behind mutual TLS, the webhook and
metrics listeners serving their own routes only.

The attacks are real requests to a running scheduler: ``/bind`` and ``/filter`` sent to the
webhook's HTTPS port and to the metrics port, the extender reached without a client
certificate or with one another CA signed, and the service started on a public address
with nothing guarding the extender (the real process refuses to start).
"""

from __future__ import annotations

import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import fastapi
import httpx
import pytest
import trustme

from vnpu_scheduler import server, settings

LOCK = "hami.io/mutex.lock"
Json = dict[str, Any]


def _files(tmp_path: Path, name: str, certificate: trustme.LeafCert) -> tuple[Path, Path]:
    cert, key = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    certificate.private_key_and_cert_chain_pem.write_to_path(str(cert))
    certificate.private_key_pem.write_to_path(str(key))
    return cert, key


def _bind_body(pod: Json, node: str) -> Json:
    meta = pod["metadata"]
    return {
        "PodName": meta["name"],
        "PodNamespace": meta["namespace"],
        "PodUID": meta["uid"],
        "Node": node,
    }


def test_the_extender_listens_on_loopback_by_default() -> None:
    defaults = settings.Settings()
    assert defaults.host == "127.0.0.1"
    assert defaults.extender_tls is False
    assert defaults.metrics_port is None


def test_a_public_extender_without_mutual_tls_does_not_start(kube: Any) -> None:
    command = [sys.executable, "-m", "vnpu_scheduler", "--kubeconfig", str(kube.kubeconfig)]
    done = subprocess.run(
        [*command, "--host", "0.0.0.0", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=25,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith(
        "vnpu-scheduler: setting host: not a loopback address: whoever reaches it could bind pods"
    )


@pytest.fixture
def node_and_pod(kube: Any, make: Any) -> Json:
    kube.add_node(make.node("n1"))
    created: Json = kube.add_pod(make.npu_pod("job", memory=4000))
    return created


def _untouched(kube: Any) -> None:
    assert not kube.pod("job")["spec"].get("nodeName")
    assert LOCK not in (kube.node("n1")["metadata"].get("annotations") or {})


def test_the_webhook_listener_serves_the_webhook_only(
    kube: Any, start_scheduler: Any, tmp_path: Path, node_and_pod: Json
) -> None:
    authority = trustme.CA()
    cert, key = _files(tmp_path, "tls", authority.issue_cert("127.0.0.1"))
    scheduler = start_scheduler(tls_cert=cert, tls_key=key)
    webhook = scheduler.urls[1]
    assert webhook.startswith("https://")
    context = ssl.create_default_context()
    authority.configure_trust(context)
    with httpx.Client(verify=context, timeout=10) as http:
        bind = http.post(f"{webhook}/bind", json=_bind_body(node_and_pod, "n1"))
        assert bind.status_code == 404
        assert bind.json() == {"Error": "/bind is not served here"}
        pod = {"Pod": node_and_pod, "NodeNames": ["n1"]}
        refused = http.post(f"{webhook}/filter", json=pod)
        assert refused.status_code == 404
        assert refused.json()["Error"] == "/filter is not served here"
        assert http.post(f"{webhook}/prioritize", json=pod).json() == []
        assert http.get(f"{webhook}/metrics").status_code == 404
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "r1", "operation": "CREATE", "object": node_and_pod},
        }
        assert http.post(f"{webhook}/mutate", json=review).json()["response"]["allowed"] is True
    _untouched(kube)
    assert scheduler.sample("vnpu_scheduler_requests_total", verb="bind", outcome="not_served") == 1
    # kube-scheduler's listener still binds
    assert scheduler.post("bind", _bind_body(node_and_pod, "n1")).json() == {"Error": ""}


def test_the_metrics_listener_serves_probes_and_metrics_only(
    kube: Any, start_scheduler: Any, node_and_pod: Json
) -> None:
    scheduler = start_scheduler(metrics_port=0)
    probes = scheduler.urls[-1]
    with httpx.Client(timeout=10) as http:
        assert http.get(f"{probes}/healthz").text == "ok"
        assert http.get(f"{probes}/readyz").status_code == 200
        assert "vnpu_scheduler_requests_total" in http.get(f"{probes}/metrics").text
        bind = http.post(f"{probes}/bind", json=_bind_body(node_and_pod, "n1"))
        assert bind.status_code == 404
        assert bind.json() == {"Error": "/bind is not served here"}
        assert http.post(f"{probes}/mutate", json={}).status_code == 404
    _untouched(kube)


def test_the_extender_behind_mutual_tls_takes_kube_schedulers_certificate_only(
    kube: Any, start_scheduler: Any, tmp_path: Path, node_and_pod: Json
) -> None:
    authority = trustme.CA()
    server_cert, server_key = _files(tmp_path, "server", authority.issue_cert("127.0.0.1"))
    client_ca = tmp_path / "client-ca.crt"
    clients = trustme.CA()
    clients.cert_pem.write_to_path(str(client_ca))

    def client(certificate: trustme.LeafCert | None) -> httpx.Client:
        context = ssl.create_default_context()
        authority.configure_trust(context)
        if certificate is not None:
            certificate.configure_cert(context)
        return httpx.Client(verify=context, timeout=10)

    scheduler = start_scheduler(
        extender_tls_cert=server_cert,
        extender_tls_key=server_key,
        extender_client_ca=client_ca,
        client=client(clients.issue_cert("kube-scheduler")),
    )
    assert scheduler.url.startswith("https://127.0.0.1:")
    body = _bind_body(node_and_pod, "n1")
    for stranger in (None, trustme.CA().issue_cert("kube-scheduler")):
        with client(stranger) as http, pytest.raises(httpx.TransportError):
            http.post(f"{scheduler.url}/bind", json=body)
    with httpx.Client(verify=False, timeout=10) as plain, pytest.raises(httpx.TransportError):
        plain.post(f"{scheduler.url}/bind", json=body)
    _untouched(kube)
    pod = {"Pod": node_and_pod, "NodeNames": ["n1"]}
    assert scheduler.post("filter", pod).json()["NodeNames"] == ["n1"]
    assert scheduler.post("bind", body).json() == {"Error": ""}
    assert kube.pod("job")["spec"]["nodeName"] == "n1"


def test_mutual_tls_lets_the_extender_listen_on_a_public_address(tmp_path: Path) -> None:
    """With client certificates required, a non-loopback address is allowed; without, not."""
    authority = trustme.CA()
    cert, key = _files(tmp_path, "server", authority.issue_cert("vnpu-scheduler"))
    ca = tmp_path / "ca.crt"
    authority.cert_pem.write_to_path(str(ca))
    guarded = settings.Settings(
        host="0.0.0.0", extender_tls_cert=cert, extender_tls_key=key, extender_client_ca=ca
    )
    assert guarded.extender_tls is True
    opened = settings.Settings(host="0.0.0.0", allow_unauthenticated_extender=True)
    assert opened.host == "0.0.0.0"
    with pytest.raises(ValueError, match="extender_client_ca are given together"):
        settings.Settings(host="0.0.0.0", extender_tls_cert=cert, extender_tls_key=key)


def test_every_listener_outlasts_go_clients_idle_connections(tmp_path: Path) -> None:
    """Go's HTTP clients (kube-apiserver calling the webhook, kube-scheduler the extender) keep
    an idle connection 90 s and do not resend a POST the server closed under them: every
    listener keeps idle connections longer, so the client always closes first."""
    authority = trustme.CA()
    cert, key = _files(tmp_path, "server", authority.issue_cert("vnpu-scheduler"))
    config = settings.Settings(
        port=0, webhook_port=0, metrics_port=0, tls_cert=cert, tls_key=key, quotas=False
    )
    bound = server.listeners(fastapi.FastAPI(), config)
    try:
        assert len(bound.servers) == 3  # extender, webhook, metrics
        for listener, _ in bound.servers:
            assert listener.config.timeout_keep_alive > 90
    finally:
        for _, sock in bound.servers:
            sock.close()
