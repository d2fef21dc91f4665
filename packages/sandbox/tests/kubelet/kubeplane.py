"""The real kube-apiserver as the kubelet tests meet it: node identities, pods, a stoppable plane.

``conftest`` uses these helpers for its fixtures:

* ``node_kubeconfig`` makes the kubeconfig a simulated kubelet runs with on a plane: a client
  certificate for ``system:node:<node>`` in ``system:nodes``, signed by the plane's CA, so the
  Node authorizer and the NodeRestriction admission plugin judge every request the kubelet
  makes, as on a real cluster (the sandbox's ``up`` gives its kubelets the same identity);
* ``Pods`` creates and reads the pods of the test's namespace as the admin;
* ``Outages`` kills and restarts the kube-apiserver or etcd of a private plane
  (``apiplane.serve`` in a directory of the test's own), on the same ports and data, for the
  tests that show what the kubelet does while the API is away.
"""

from __future__ import annotations

import datetime
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client

from vnpu_sandbox.platform import apiplane, certificates, layout, processes

READY_TIMEOUT_SECONDS = 60.0


def _client_certificate(
    pki: certificates.Pki, user: str, group: str, pair: certificates.Pair
) -> None:
    authority = x509.load_pem_x509_certificate(pki.ca.cert.read_bytes())
    signer = serialization.load_pem_private_key(pki.ca.key.read_bytes(), password=None)
    assert isinstance(signer, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, group),
            x509.NameAttribute(NameOID.COMMON_NAME, user),
        ]
    )
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(authority.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(signer, hashes.SHA256())
    )
    pair.cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    pair.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    pair.key.chmod(0o600)


def node_kubeconfig(plane: apiplane.ApiPlane, node: str, directory: Path) -> Path:
    """A kubeconfig for ``plane`` that authenticates as the kubelet of ``node``."""
    directory.mkdir(parents=True, exist_ok=True)
    pair = certificates.Pair(directory / f"{node}.crt", directory / f"{node}.key")
    pki = certificates.Pki(plane.ca.parent)
    _client_certificate(pki, f"system:node:{node}", "system:nodes", pair)
    path = plane.write_kubeconfig(directory / f"{node}.yaml")
    document: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    for user in document["users"]:
        user["user"] = {"client-certificate": str(pair.cert), "client-key": str(pair.key)}
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


class Pods:
    """The pods of one namespace, as the admin creates and reads them."""

    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        self.core = core
        self.namespace = namespace

    def create(self, node: str, name: str, limits: dict[str, str], **spec: Any) -> None:
        """A pod bound to ``node`` (as a scheduler's binding leaves it), one container."""
        container = {"name": "main", "image": "busybox", "resources": {"limits": limits}}
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [container], **spec},
        }
        self.core.create_namespaced_pod(self.namespace, body)

    def get(self, name: str) -> client.V1Pod | None:
        try:
            pod: client.V1Pod = self.core.read_namespaced_pod(name, self.namespace)
        except client.exceptions.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return pod

    def status(self, name: str) -> client.V1PodStatus | None:
        pod = self.get(name)
        return pod.status if pod is not None else None

    def phase(self, name: str) -> str | None:
        status = self.status(name)
        return status.phase if status is not None else None

    def delete(self, name: str) -> str:
        """A graceful delete (the pod's own grace period); returns the pod's new resourceVersion."""
        pod: client.V1Pod = self.core.delete_namespaced_pod(name, self.namespace)
        assert pod.metadata is not None
        return str(pod.metadata.resource_version)


def answers(url: str, context: ssl.SSLContext) -> bool:
    """Whether ``url`` answers 200 now."""
    try:
        with urllib.request.urlopen(url, timeout=2.0, context=context) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


class Outages:
    """Kill and start again the processes of a private plane, as a crash and a restart would.

    The processes are found in the record ``apiplane.serve`` keeps in the plane's directory;
    a restarted one runs the same command line (same ports, same etcd data). ``close`` stops
    what this object started, kube-apiserver before etcd, before ``serve`` stops the rest.
    """

    def __init__(self, plane: apiplane.ApiPlane) -> None:
        self.plane = plane
        record = layout.read(layout.Layout.at(plane.root))
        assert record is not None, f"no sandbox record in {plane.root}"
        self._current = {p.name: p for p in record.processes}
        self._started: list[tuple[processes.Process, subprocess.Popen[bytes]]] = []

    def running(self, name: str) -> bool:
        return processes.alive(self._current[name])

    def kill(self, name: str) -> None:
        """Kill ``name`` (``kube-apiserver`` or ``etcd``), as a crash would, and wait until it
        has exited (kube-apiserver's own shutdown after SIGTERM takes many seconds)."""
        process = self._current[name]
        assert processes.alive(process), f"{name} is not running"
        os.kill(process.pid, signal.SIGKILL)
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while processes.alive(process):
            assert time.monotonic() < deadline, f"{name} still running after SIGKILL"
            time.sleep(0.02)

    def start(self, name: str) -> None:
        """Run ``name`` again with its command line; return once the API answers ``/readyz``."""
        old = self._current[name]
        process, child = processes.spawn(name, old.argv, Path(old.log))
        self._current[name] = process
        self._started.append((process, child))
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while not answers(f"{self.plane.url}/readyz", self.plane.tls):
            assert child.poll() is None, f"{name} exited with {child.returncode}: see {old.log}"
            assert time.monotonic() < deadline, f"{name} not ready after {READY_TIMEOUT_SECONDS} s"
            time.sleep(0.1)

    def close(self) -> None:
        processes.stop([process for process, _ in self._started])
        for _, child in self._started:
            child.wait(timeout=15)
