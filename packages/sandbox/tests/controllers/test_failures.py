"""What the controller manager does when the API fails: refused pods are retried with a
backoff and reported once; an API server that goes away and comes back is waited for."""

from __future__ import annotations

import base64
import http.server
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from vnpu_sandbox.apiserver import harness
from vnpu_sandbox.controllers import manager
from vnpu_sandbox.kubelet import apiclient

from .conftest import FAST, deployment_manifest, replica_set_manifest, wait_until

Json = dict[str, Any]


class Gate:
    """An admission webhook on loopback for pod creation: while closed it denies; open, it
    allows, and as a mutating webhook it sets ``schedulerName`` as the vnpu webhook does."""

    def __init__(self) -> None:
        self.open = False
        self.calls = 0
        gate = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                gate.calls += 1
                answer: Json = {"uid": review["request"]["uid"], "allowed": gate.open}
                if not gate.open:
                    answer["status"] = {"code": 403, "message": "no pods today"}
                elif self.path == "/mutate":
                    operations = [
                        {"op": "replace", "path": "/spec/schedulerName", "value": "vnpu-scheduler"}
                    ]
                    answer["patchType"] = "JSONPatch"
                    answer["patch"] = base64.b64encode(json.dumps(operations).encode()).decode()
                body = json.dumps(
                    {
                        "apiVersion": review["apiVersion"],
                        "kind": "AdmissionReview",
                        "response": answer,
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/validate"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def configuration(self, kind: str = "ValidatingWebhookConfiguration") -> Json:
        url = (
            self.url if kind.startswith("Validating") else self.url.replace("/validate", "/mutate")
        )
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": "pod-gate"},
            "webhooks": [
                {
                    "name": "gate.example.com",
                    "clientConfig": {"url": url},
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
                }
            ],
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def gate() -> Iterator[Gate]:
    opened = Gate()
    yield opened
    opened.close()


def test_refused_pods_are_retried_with_backoff_and_reported_once(
    controllers: manager.ControllerManager,
    api_client: k8s.ApiClient,
    apps: k8s.AppsV1Api,
    core: k8s.CoreV1Api,
    gate: Gate,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="vnpu_sandbox.controllers")
    k8s.AdmissionregistrationV1Api(api_client).create_validating_webhook_configuration(
        gate.configuration()
    )
    apps.create_namespaced_replica_set("default", replica_set_manifest("gated", 2))
    wait_until(lambda: gate.calls >= 4, what="several refused creates")

    def failing() -> Any:
        status = apps.read_namespaced_replica_set("gated", "default").status
        return status.conditions and status.conditions[0]

    condition = wait_until(failing)
    assert (condition.type, condition.status, condition.reason) == (
        "ReplicaFailure",
        "True",
        "FailedCreate",
    )
    assert 'admission webhook "gate.example.com" denied the request: no pods today' in (
        condition.message
    )
    refused = core.list_namespaced_event("default", field_selector="reason=FailedCreate").items
    assert refused
    assert refused[0].type == "Warning"
    calls_before = gate.calls
    gate.open = True
    wait_until(lambda: len(core.list_namespaced_pod("default").items) == 2)
    wait_until(lambda: not apps.read_namespaced_replica_set("gated", "default").status.conditions)
    # The sync that cleared the condition logs its recovery once it returns, a moment later.
    wait_until(
        lambda: any(r.getMessage().startswith("sync_recovered ") for r in caplog.records),
        what="the recovery logged",
    )
    warnings = [r for r in caplog.records if r.getMessage().startswith("sync_failed ")]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "replicaset object=default/gated" in warnings[0].getMessage()
    # Backoff: a handful of tries while the gate was shut, not one per millisecond.
    assert calls_before < 40


def test_pods_of_a_deployment_pass_the_mutating_webhooks(
    controllers: manager.ControllerManager,
    api_client: k8s.ApiClient,
    apps: k8s.AppsV1Api,
    core: k8s.CoreV1Api,
    gate: Gate,
) -> None:
    gate.open = True
    k8s.AdmissionregistrationV1Api(api_client).create_mutating_webhook_configuration(
        gate.configuration("MutatingWebhookConfiguration")
    )
    apps.create_namespaced_deployment("default", deployment_manifest("mutated", 2))
    pods = wait_until(
        lambda: (
            len(core.list_namespaced_pod("default").items) == 2
            and core.list_namespaced_pod("default").items
        )
    )
    assert {p.spec.scheduler_name for p in pods} == {"vnpu-scheduler"}
    (replica_set,) = apps.list_namespaced_replica_set("default").items
    # Only the pods are mutated: the template keeps the default scheduler.
    assert replica_set.spec.template.spec.scheduler_name == "default-scheduler"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_an_api_server_that_goes_and_comes_back_is_waited_for(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="vnpu_sandbox.controllers")
    port, state = _free_port(), tmp_path / "state.json"
    first = harness.serve(port=port, state_file=state)
    url = first.__enter__()
    own = apiclient.client_for_host(url)
    running = manager.ControllerManager(own, FAST)
    running.start()
    theirs = apiclient.client_for_host(url)
    apps, core = k8s.AppsV1Api(theirs), k8s.CoreV1Api(theirs)
    try:
        assert running.wait_synced(5)
        apps.create_namespaced_deployment("default", deployment_manifest("survivor", 1))
        wait_until(lambda: len(core.list_namespaced_pod("default").items) == 1)
        first.__exit__(None, None, None)
        wait_until(
            lambda: any("api_unreachable" in r.getMessage() for r in caplog.records),
            what="the outage to be noticed",
        )
        with harness.serve(port=port, state_file=state):
            apps.patch_namespaced_deployment_scale("survivor", "default", {"spec": {"replicas": 3}})
            wait_until(lambda: len(core.list_namespaced_pod("default").items) == 3, timeout=8)
            wait_until(lambda: any(r.getMessage() == "api_reachable" for r in caplog.records))
            running.stop()  # before this server goes too
    finally:
        running.stop()
        apiclient.close_client(own)
        apiclient.close_client(theirs)
    outages = [r for r in caplog.records if "api_unreachable" in r.getMessage()]
    assert len(outages) == 1
    assert all(t.is_alive() is False for t in running._threads)


def test_the_worker_waits_for_every_cache(
    api_url: str, apps: k8s.AppsV1Api, wait: Callable[..., Any]
) -> None:
    apps.create_namespaced_deployment("default", deployment_manifest("early", 1))
    own = apiclient.client_for_host(api_url)
    running = manager.ControllerManager(own, FAST)
    running.start()
    try:
        wait(lambda: apps.list_namespaced_replica_set("default").items)
        # One ReplicaSet, not one per sync that ran before the caches had listed.
        assert len(apps.list_namespaced_replica_set("default").items) == 1
    finally:
        running.stop()
        apiclient.close_client(own)
