"""A bare real kube-apiserver (with its etcd) for tests and benchmarks, as envtest runs one.

The test suites of every package start one ``ApiPlane`` per test session (the root
``conftest.py`` does, through ``serve``) and give each test a namespace of its own
(``Namespace``, made by ``ApiPlane.namespace``). No controller, scheduler or kubelet runs
beside it: a test starts what it needs (vnpu-scheduler, a simulated kubelet, a device
plugin) and talks to the same binaries an operator's cluster runs, built by ``make k8s-bin``.

    with apiplane.serve(tmp_dir) as plane:
        space = plane.namespace("my-test")        # a namespace and its default ServiceAccount
        kubeconfig = space.kubeconfig              # the admin, with that namespace as default
        ...
        space.clear()                              # what the test made is gone

Nodes are cluster-scoped, so no namespace keeps one test's nodes from another's: ``clear``
deletes every node and every object the test left in the cluster-scoped kinds vnpu's
services read or the chart installs (webhook configurations, admission policies and their
bindings, priority classes), and every object in the test's namespace, so the next test
starts on the cluster the session started with. Tests that
share a plane run one after the other (pytest-xdist would give each worker a plane).

Failures are ``controlplane.ControlPlaneError`` (binaries missing: the message says how to
build them) and ``startup.StartError`` (a process did not start; the end of its log shown).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import ssl
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vnpu_sandbox.platform import certificates, components, controlplane, layout, startup

START_TIMEOUT_SECONDS = 90.0
REQUEST_TIMEOUT_SECONDS = 30.0

_NAMESPACED = (
    "/api/v1/namespaces/{namespace}/pods",
    "/api/v1/namespaces/{namespace}/configmaps",
    "/api/v1/namespaces/{namespace}/secrets",
    "/api/v1/namespaces/{namespace}/resourcequotas",
    "/api/v1/namespaces/{namespace}/limitranges",
    "/api/v1/namespaces/{namespace}/events",
    "/api/v1/namespaces/{namespace}/services",
    "/api/v1/namespaces/{namespace}/serviceaccounts",
    "/apis/apps/v1/namespaces/{namespace}/deployments",
    "/apis/apps/v1/namespaces/{namespace}/replicasets",
    "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
)
"""What ``clear`` empties in a test's namespace (all kinds a vnpu test writes)."""
_CLUSTER = (
    "/api/v1/nodes",
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
    "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
    "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
    "/apis/scheduling.k8s.io/v1/priorityclasses",
    "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
    "/api/v1/namespaces/kube-system/configmaps",
    "/api/v1/namespaces/kube-system/events",
    "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
)
"""The cluster-scoped kinds ``clear`` empties of what was not there when the plane started; and
the node Leases, which belong to the nodes (no garbage collector runs to remove them), and what
vnpu's services keep in ``kube-system`` as the chart installs them (the tenants ConfigMap, the
quota Leases, their events)."""


class ApiError(Exception):
    """kube-apiserver refused a request ``ApiPlane`` made (``status``: the HTTP code)."""

    def __init__(self, what: str, status: int, body: str) -> None:
        self.status = status
        super().__init__(f"{what}: {status} {body[:300]}")


@dataclass(frozen=True, slots=True)
class Namespace:
    """One test's namespace on a shared plane, with a kubeconfig that defaults to it."""

    plane: ApiPlane
    name: str
    kubeconfig: Path

    def clear(self) -> None:
        """Delete what the test made: its namespace's objects, every node, cluster-wide extras."""
        self.plane.clear(self.name)


@dataclass(frozen=True, slots=True)
class ApiPlane:
    """A running kube-apiserver: its URL, the admin's kubeconfig and TLS, its files."""

    url: str
    etcd_url: str
    root: Path
    kubeconfig: Path
    ca: Path
    tls: ssl.SSLContext
    keep: dict[str, frozenset[str]]
    """Per cluster-scoped collection, the names present when the plane became ready (filled
    by ``serve``; ``clear`` deletes the others)."""

    def request(self, method: str, path: str, body: object = None) -> Any:
        """One JSON request as the admin; ``ApiError`` for any answer but 2xx."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        request = urllib.request.Request(self.url + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(
                request, timeout=REQUEST_TIMEOUT_SECONDS, context=self.tls
            ) as answer:
                return json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as exc:
            text = exc.read().decode("utf-8", errors="replace")
            raise ApiError(f"{method} {path}", exc.code, text) from exc

    def compact(self) -> int:
        """Compact etcd at its current revision, as kube-apiserver does every few minutes: a
        watch from an older revision that the watch cache does not hold then gets 410 Gone.
        Returns the revision."""
        key = base64.b64encode(b"\0").decode()
        header = _post_json(f"{self.etcd_url}/v3/kv/range", {"key": key})["header"]
        revision = int(header["revision"])
        _post_json(f"{self.etcd_url}/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        """The admin's kubeconfig with ``namespace`` as its context's default."""
        document = yaml.safe_load(self.kubeconfig.read_text(encoding="utf-8"))
        for context in document["contexts"]:
            context["context"]["namespace"] = namespace
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
        return path

    def namespace(self, name: str) -> Namespace:
        """Create namespace ``name`` with its ``default`` ServiceAccount (which kube-controller-
        manager would make, and without which the ServiceAccount admission refuses pods)."""
        self._create("/api/v1/namespaces", {"metadata": {"name": name}})
        self._create(
            f"/api/v1/namespaces/{name}/serviceaccounts", {"metadata": {"name": "default"}}
        )
        kubeconfig = self.write_kubeconfig(self.root / "kubeconfigs" / f"{name}.yaml", name)
        return Namespace(self, name, kubeconfig)

    def _create(self, path: str, body: dict[str, Any]) -> None:
        try:
            self.request("POST", path, body)
        except ApiError as exc:
            if exc.status != 409:
                raise

    def clear(self, namespace: str) -> None:
        """Delete every object in ``namespace`` of the kinds in ``_NAMESPACED`` (pods at once,
        with no grace period: no kubelet waits to confirm), then the cluster-scoped objects
        made since the plane started. The namespace itself stays: only kube-controller-manager
        could finish deleting it, and an empty namespace costs nothing."""
        for template in _NAMESPACED:
            self._delete_all(template.format(namespace=namespace), set())
        for path in _CLUSTER:
            self._delete_all(path, self.keep.get(path, frozenset()))

    def _delete_all(self, path: str, keep: set[str] | frozenset[str]) -> None:
        found = self.request("GET", path)
        options = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
        for item in found.get("items") or []:
            name = item["metadata"]["name"]
            if name in keep:
                continue
            item_path = f"{path}/{urllib.parse.quote(name)}"
            if item["metadata"].get("finalizers"):
                patch = {"metadata": {"finalizers": None}}
                with contextlib.suppress(ApiError):
                    self._merge_patch(item_path, patch)
            try:
                self.request("DELETE", item_path, options)
            except ApiError as exc:
                if exc.status != 404:
                    raise

    def _merge_patch(self, path: str, body: object) -> None:
        request = urllib.request.Request(
            self.url + path,
            json.dumps(body).encode(),
            {"Content-Type": "application/merge-patch+json"},
            method="PATCH",
        )
        with urllib.request.urlopen(
            request, timeout=REQUEST_TIMEOUT_SECONDS, context=self.tls
        ) as answer:
            answer.read()


def _post_json(url: str, body: object) -> Any:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_SECONDS) as answer:
        return json.loads(answer.read())


@contextlib.contextmanager
def serve(directory: Path | None = None, api_args: Sequence[str] = ()) -> Iterator[ApiPlane]:
    """Start etcd and kube-apiserver on free loopback ports under ``directory`` (a temporary
    one by default); yield the plane once ``/readyz`` answers; stop both on exit.

    ``api_args``: more kube-apiserver flags, for the tests that need a plane of their own
    (``--watch-cache=false``, so that ``compact`` makes old revisions 410 Gone, say)."""
    bins = controlplane.binaries()
    with contextlib.ExitStack() as stack:
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vnpu-api-")))
        where = layout.Layout.at(directory)
        pick = components.PortPicker()
        try:
            ports = controlplane.Ports.choose(pick)
        finally:
            pick.close()
        plane = controlplane.Plane.at(where, ports, bins)
        controlplane.prepare(plane, where, ())
        record = layout.Record(plane.api_url, str(where.kubeconfig), "", [])
        run = startup.Startup(where, record, controlplane.tls_context(plane.pki))
        stack.callback(run.stop_all)
        run.start(controlplane.etcd(plane))
        run.wait_ready(START_TIMEOUT_SECONDS, names=["etcd"])
        server = controlplane.api_server(plane)
        run.start(dataclasses.replace(server, argv=(*server.argv, *api_args)))
        run.wait_ready(START_TIMEOUT_SECONDS, names=["kube-apiserver"])
        assert run.tls is not None
        api = ApiPlane(
            url=plane.api_url,
            etcd_url=f"http://{components.LOOPBACK}:{ports.etcd}",
            root=directory,
            kubeconfig=plane.kubeconfig(controlplane.ADMIN),
            ca=certificates.Pki(plane.pki.root).ca.cert,
            tls=run.tls,
            keep={},
        )
        _wait_for_default_namespace(api)
        api.namespace("default")
        for path in _CLUSTER:
            api.keep[path] = frozenset(
                i["metadata"]["name"] for i in api.request("GET", path)["items"]
            )
        yield api


def _wait_for_default_namespace(api: ApiPlane) -> None:
    """kube-apiserver makes ``default`` and its system priority classes just after ``/readyz``
    first answers; wait for both so the names ``clear`` keeps include them."""
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while True:
        try:
            api.request("GET", "/api/v1/namespaces/default")
            classes = api.request("GET", "/apis/scheduling.k8s.io/v1/priorityclasses")["items"]
            if len(classes) >= 2:
                return
        except ApiError as exc:
            if exc.status != 404:
                raise
        if time.monotonic() > deadline:
            raise startup.StartError("kube-apiserver", "the default namespace never appeared")
        time.sleep(0.1)
