"""Fixtures for the API emulator tests: running emulators, clients, kubectl and webhook servers.

Every test talks to a real emulator over loopback HTTP. ``api`` is one emulator shared by
a module (tests use unique names); ``fresh_api`` starts a private one when a test needs
a known revision or a small event window. ``driver`` runs the conformance tests twice:
through the official ``kubernetes`` client and through the kubectl binary (set
``VNPU_TEST_KUBECTL`` to test another kubectl, e.g. Debian's 1.20 package).
"""

from __future__ import annotations

import base64
import http.client
import http.server
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from vnpu_sandbox.apiserver import harness

Json = dict[str, Any]


# --- emulators and raw HTTP -------------------------------------------------------------


class Http:
    """A tiny raw HTTP client for requests the typed client cannot make (bad bodies...)."""

    def __init__(self, url: str) -> None:
        self.url = url
        parsed = urllib.parse.urlparse(url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80

    def request(
        self,
        method: str,
        path: str,
        body: bytes | str | Json | list[Any] | None = None,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
        timeout: float = 10.0,
    ) -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        if isinstance(data, str):
            data = data.encode()
        sent = (
            {"Content-Type": content_type, **(headers or {})}
            if data is not None
            else dict(headers or {})
        )
        try:
            connection.request(method, path, body=data, headers=sent)
            response = connection.getresponse()
            return (
                response.status,
                {k.lower(): v for k, v in response.getheaders()},
                response.read(),
            )
        finally:
            connection.close()

    def json(self, method: str, path: str, body: Any = None, **kwargs: Any) -> tuple[int, Json]:
        status, _, raw = self.request(method, path, body, **kwargs)
        return status, json.loads(raw) if raw else {}

    def watch(self, path: str, timeout: float = 10.0) -> list[Json]:
        """Read a whole watch stream (the request must carry timeoutSeconds) as events."""
        _, _, raw = self.request("GET", path, timeout=timeout)
        return [json.loads(line) for line in raw.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def api() -> Iterator[str]:
    with harness.serve() as url:
        yield url


@pytest.fixture
def fresh_api() -> Callable[..., Any]:
    """Start private emulators with given settings; all stop at the end of the test."""
    stack: list[Any] = []

    def start(**settings: Any) -> str:
        manager = harness.serve(**settings)
        url = manager.__enter__()
        stack.append(manager)
        return url

    yield start
    for manager in reversed(stack):
        manager.__exit__(None, None, None)


@pytest.fixture
def raw(api: str) -> Http:
    return Http(api)


@pytest.fixture
def make_http() -> Callable[[str], Http]:
    return Http


@pytest.fixture
def unique() -> Callable[[str], str]:
    return lambda prefix: f"{prefix}-{uuid.uuid4().hex[:8]}"


def _client(url: str, directory: Path) -> k8s.ApiClient:
    path = harness.write_kubeconfig(directory / "kubeconfig", url)
    return k8s_config.new_client_from_config(config_file=str(path))


@pytest.fixture
def core(api: str, tmp_path: Path) -> Iterator[k8s.CoreV1Api]:
    api_client = _client(api, tmp_path)
    yield k8s.CoreV1Api(api_client)
    api_client.close()


@pytest.fixture
def client_for(tmp_path: Path) -> Iterator[Callable[[str], k8s.ApiClient]]:
    made: list[k8s.ApiClient] = []

    def make(url: str) -> k8s.ApiClient:
        directory = Path(tempfile.mkdtemp(dir=tmp_path))
        made.append(_client(url, directory))
        return made[-1]

    yield make
    for api_client in made:
        api_client.close()


def pod_manifest(name: str, labels: dict[str, str] | None = None, **spec: Any) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}], **spec},
    }


@pytest.fixture
def pod() -> Callable[..., Json]:
    return pod_manifest


# --- the two conformance drivers -----------------------------------------------------------


class Rejected(Exception):
    """The server refused a request: its Status reason and message."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


class PythonDriver:
    """Conformance operations through the official ``kubernetes`` client."""

    name = "python"

    def __init__(self, api_client: k8s.ApiClient, url: str) -> None:
        self.client = api_client
        self.core = k8s.CoreV1Api(api_client)
        self.admission = k8s.AdmissionregistrationV1Api(api_client)
        self.http = Http(url)

    def on(self, url: str, directory: Path) -> PythonDriver:
        """The same kind of driver for another emulator."""
        return PythonDriver(_client(url, directory), url)

    def close(self) -> None:
        self.client.close()

    def _call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except k8s.ApiException as exc:
            status = json.loads(exc.body)
            raise Rejected(status.get("reason", ""), status.get("message", "")) from exc

    def _plain(self, obj: Any) -> Json:
        result: Json = self.client.sanitize_for_serialization(obj)
        return result

    def create(self, manifest: Json) -> Json:
        kind = manifest["kind"]
        if kind == "Pod":
            created = self._call(
                self.core.create_namespaced_pod,
                manifest["metadata"].get("namespace", "default"),
                manifest,
            )
        elif kind == "ConfigMap":
            created = self._call(
                self.core.create_namespaced_config_map,
                manifest["metadata"].get("namespace", "default"),
                manifest,
            )
        elif kind == "MutatingWebhookConfiguration":
            created = self._call(self.admission.create_mutating_webhook_configuration, manifest)
        elif kind == "ValidatingWebhookConfiguration":
            created = self._call(self.admission.create_validating_webhook_configuration, manifest)
        else:
            raise AssertionError(kind)
        return self._plain(created)

    def get(self, resource: str, name: str) -> Json:
        reader = {
            "pods": self.core.read_namespaced_pod,
            "configmaps": self.core.read_namespaced_config_map,
        }[resource]
        return self._plain(self._call(reader, name, "default"))

    def names(
        self, resource: str, labels: str = "", fields: str = "", all_namespaces: bool = False
    ) -> list[str]:
        if all_namespaces:
            lister = {"pods": self.core.list_pod_for_all_namespaces}[resource]
            listed = self._call(lister, label_selector=labels, field_selector=fields)
        else:
            lister = {
                "pods": self.core.list_namespaced_pod,
                "configmaps": self.core.list_namespaced_config_map,
            }[resource]
            listed = self._call(lister, "default", label_selector=labels, field_selector=fields)
        return sorted(item.metadata.name for item in listed.items)

    def replace(self, manifest: Json) -> Json:
        name = manifest["metadata"]["name"]
        if manifest["kind"] == "Pod":
            replaced = self._call(self.core.replace_namespaced_pod, name, "default", manifest)
        else:
            replaced = self._call(
                self.core.replace_namespaced_config_map, name, "default", manifest
            )
        return self._plain(replaced)

    def annotate(self, resource: str, name: str, key: str, value: str) -> None:
        patcher = {
            "pods": self.core.patch_namespaced_pod,
            "configmaps": self.core.patch_namespaced_config_map,
        }[resource]
        self._call(patcher, name, "default", {"metadata": {"annotations": {key: value}}})

    def merge_patch(self, resource: str, name: str, patch: Json) -> None:
        patcher = {
            "pods": self.core.patch_namespaced_pod,
            "configmaps": self.core.patch_namespaced_config_map,
        }[resource]
        self._call(patcher, name, "default", patch, _content_type="application/merge-patch+json")

    def delete(self, resource: str, name: str, grace: int | None = None) -> None:
        deleter = {
            "pods": self.core.delete_namespaced_pod,
            "configmaps": self.core.delete_namespaced_config_map,
        }[resource]
        kwargs = {} if grace is None else {"grace_period_seconds": grace}
        self._call(deleter, name, "default", **kwargs)

    def raw_get(self, path: str) -> bytes:
        status, _, body = self.http.request("GET", path, timeout=15)
        assert status == 200, body
        return body

    def bind(self, name: str, node: str, annotations: dict[str, str]) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "annotations": annotations},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self._call(
            self.core.create_namespaced_pod_binding, name, "default", body, _preload_content=False
        )


def find_kubectl() -> str | None:
    return os.environ.get("VNPU_TEST_KUBECTL") or shutil.which("kubectl")


class KubectlDriver:
    """The same operations through the kubectl binary and a kubeconfig."""

    name = "kubectl"

    def __init__(self, binary: str, kubeconfig: Path, home: Path) -> None:
        self.binary = binary
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(home)}
        self.scratch = home

    def on(self, url: str, directory: Path) -> KubectlDriver:
        """The same kind of driver for another emulator."""
        return KubectlDriver(
            self.binary, harness.write_kubeconfig(directory / "kubeconfig", url), directory
        )

    def close(self) -> None:
        return

    def run(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [self.binary, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=20,
            check=False,
        )
        if check and done.returncode != 0:
            error = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
            reason, message = "", ""
            if error.startswith("Error from server ("):
                reason, _, message = error[len("Error from server (") :].partition("): ")
            elif error.startswith("Error from server: "):
                message = error[len("Error from server: ") :]
            else:
                raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}")
            if message.startswith("error when"):
                message = message.split(": ", 1)[1]
            raise Rejected(reason, message)
        return done

    def _json(self, *args: str, stdin: str | None = None) -> Json:
        result: Json = json.loads(self.run(*args, "-o", "json", stdin=stdin).stdout)
        return result

    def create(self, manifest: Json) -> Json:
        return self._json("create", "--validate=false", "-f", "-", stdin=json.dumps(manifest))

    def get(self, resource: str, name: str) -> Json:
        return self._json("get", resource, name, "-n", "default")

    def names(
        self, resource: str, labels: str = "", fields: str = "", all_namespaces: bool = False
    ) -> list[str]:
        args = ["get", resource, "-o", "name"]
        args += ["--all-namespaces"] if all_namespaces else ["-n", "default"]
        if labels:
            args += ["-l", labels]
        if fields:
            args += ["--field-selector", fields]
        out = self.run(*args).stdout.split()
        return sorted(line.split("/", 1)[1] for line in out)

    def replace(self, manifest: Json) -> Json:
        return self._json("replace", "--validate=false", "-f", "-", stdin=json.dumps(manifest))

    def annotate(self, resource: str, name: str, key: str, value: str) -> None:
        self.run("annotate", resource, name, f"{key}={value}", "-n", "default")

    def merge_patch(self, resource: str, name: str, patch: Json) -> None:
        self.run(
            "patch", resource, name, "-n", "default", "--type", "merge", "-p", json.dumps(patch)
        )

    def delete(self, resource: str, name: str, grace: int | None = None) -> None:
        args = ["delete", resource, name, "-n", "default", "--wait=false"]
        if grace == 0:
            args += ["--grace-period=0", "--force"]
        elif grace is not None:
            args += [f"--grace-period={grace}"]
        self.run(*args)

    def raw_get(self, path: str) -> bytes:
        return self.run("get", "--raw", path).stdout.encode()

    def bind(self, name: str, node: str, annotations: dict[str, str]) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "annotations": annotations},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = self.scratch / f"binding-{name}.json"
        path.write_text(json.dumps(body))
        self.run(
            "create", "--raw", f"/api/v1/namespaces/default/pods/{name}/binding", "-f", str(path)
        )


@pytest.fixture(
    params=[
        "python",
        pytest.param("kubectl", marks=pytest.mark.needs_kubectl),
    ]
)
def driver(
    request: pytest.FixtureRequest, api: str, tmp_path: Path
) -> Iterator[PythonDriver | KubectlDriver]:
    if request.param == "python":
        python = PythonDriver(_client(api, tmp_path), api)
        yield python
        python.close()
        return
    binary = find_kubectl()
    if binary is None:
        pytest.skip("no kubectl on PATH (.ci/run installs Debian's kubernetes-client)")
    kubeconfig = harness.write_kubeconfig(tmp_path / "kubeconfig", api)
    yield KubectlDriver(binary, kubeconfig, tmp_path)


@pytest.fixture
def rejected() -> type[Rejected]:
    return Rejected


# --- admission webhook servers ------------------------------------------------------------


class Webhook:
    """A real admission webhook on loopback (HTTPS with a throwaway CA, or HTTP).

    ``decide(review) -> response`` answers each call; ``reviews`` records what was sent.
    """

    def __init__(self, decide: Callable[[Json], Json], https: bool = False) -> None:
        self.decide = decide
        self.reviews: list[Json] = []
        self.ca_bundle = ""
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.reviews.append(review)
                response = owner.decide(review)
                if response.get("__sleep__"):
                    time.sleep(float(response["__sleep__"]))
                    response = {"allowed": True}
                body = json.dumps(
                    {
                        "apiVersion": review["apiVersion"],
                        "kind": "AdmissionReview",
                        "response": {"uid": review["request"]["uid"], **response},
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
        scheme = "http"
        if https:
            authority = trustme.CA()  # a throwaway CA; its PEM becomes the caBundle
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            authority.issue_cert("127.0.0.1", "localhost").configure_cert(context)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            self.ca_bundle = base64.b64encode(authority.cert_pem.bytes()).decode()
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}/admit"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook_server() -> Iterator[Callable[..., Webhook]]:
    started: list[Webhook] = []

    def start(decide: Callable[[Json], Json], https: bool = False) -> Webhook:
        started.append(Webhook(decide, https))
        return started[-1]

    yield start
    for hook in started:
        hook.close()


def json_patch(operations: list[Json]) -> Json:
    return {
        "patchType": "JSONPatch",
        "patch": base64.b64encode(json.dumps(operations).encode()).decode(),
    }


@pytest.fixture
def patch_response() -> Callable[[list[Json]], Json]:
    return json_patch
