"""The real Kubernetes control plane of ``vnpu-sandbox up`` (and of ``apiplane`` for tests).

``up`` calls ``binaries`` first (the pinned etcd, kube-apiserver, kube-controller-manager and
kube-scheduler that ``make k8s-bin`` builds into the cache), then ``prepare`` for the
certificates and one kubeconfig per identity, then starts ``etcd``, ``api_server``,
``bootstrap`` (RBAC for vnpu's services, the webhook configurations), ``controller_manager``
and ``scheduler`` in that order before the vnpu services and simulated nodes.

Who is who, as kube-apiserver's x509 authenticator reads the client certificates:

* kubectl and ``up`` itself: ``vnpu-sandbox-admin`` in ``system:masters``;
* each simulated kubelet: ``system:node:<node>`` in ``system:nodes``, so the Node
  authorizer and the NodeRestriction admission plugin judge everything it writes;
* kube-controller-manager and kube-scheduler: their built-in users, with the default RBAC
  (the controllers run with service-account credentials, as kubeadm sets them up);
* vnpu-scheduler, the device plugins and the exporters: the service accounts the chart
  creates (``system:serviceaccount:kube-system:vnpu-<part>``), with the chart's own RBAC
  objects when ``up --rbac`` names the rendered chart, else bound to ``cluster-admin``.

With ``up --rbac`` the chart's ValidatingAdmissionPolicies and their bindings are applied too,
so kube-apiserver refuses what the chart makes it refuse on a real cluster (NPU pods with
``spec.nodeName``, decision annotations written by anyone but vnpu's service accounts).

Failures are ``ControlPlaneError`` (binaries missing: the message says how to build them).
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vnpu_sandbox.platform import certificates, clusterfile, components, layout

KUBERNETES_VERSION = "v1.37.2"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
BIN_ENV = "VNPU_K8S_BIN"
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
FEATURE_GATES = "--feature-gates=GenericWorkload=true"
"""Gang scheduling (beta, off by default in 1.37): Workload and PodGroup objects, the pods'
``spec.schedulingGroup`` and kube-scheduler's GangScheduling plugin. Every component of the
control plane runs with the same gates, as a cluster must (docs/operator-guide.md)."""
GANG_API = "--runtime-config=scheduling.k8s.io/v1beta1=true"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
ADMISSION_PLUGINS = (
    "NodeRestriction",
    "ResourceQuota",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
)
NAMESPACE = "kube-system"
SERVICES = ("vnpu-scheduler", "vnpu-device-plugin", "vnpu-exporter")
"""vnpu's parts that talk to the API, by the service-account names the chart gives them."""
ADMIN = "admin"
FRONT_PROXY = "front-proxy-client"
"""The aggregator's client identity; kube-controller-manager and kube-scheduler read its CA
from ``extension-apiserver-authentication`` and complain, every few seconds, when it is not there."""


class ControlPlaneError(Exception):
    """The real control plane cannot be started (binaries missing, an API call refused)."""


def cache_dir(version: str = KUBERNETES_VERSION) -> Path:
    """Where ``scripts/k8s-bin.sh`` puts the binaries (``$XDG_CACHE_HOME`` respected)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vnpu" / "k8s" / version / "bin"


def binaries(directory: Path | None = None) -> dict[str, Path]:
    """The control plane's binaries by name; ControlPlaneError names those missing."""
    where = directory or Path(os.environ.get(BIN_ENV) or cache_dir())
    found = {name: where / name for name in BINARIES}
    missing = [name for name, path in found.items() if not os.access(path, os.X_OK)]
    if missing:
        raise ControlPlaneError(
            f"no {', '.join(missing)} in {where}: build them with `make k8s-bin` "
            f"(scripts/k8s-bin.sh, Kubernetes {KUBERNETES_VERSION}), or set {BIN_ENV}"
        )
    return found


@dataclass(frozen=True, slots=True)
class Ports:
    """The control plane's loopback ports."""

    etcd: int
    etcd_peer: int
    api: int
    controller_manager: int
    scheduler: int
    webhook: int

    @classmethod
    def choose(cls, pick: components.PortPicker, api: int = 0) -> Ports:
        return cls(pick(), pick(), pick(api), pick(), pick(), pick())

    def as_dict(self) -> dict[str, int]:
        return {
            "etcd": self.etcd,
            "kube-apiserver": self.api,
            "kube-controller-manager": self.controller_manager,
            "kube-scheduler": self.scheduler,
            "webhook": self.webhook,
        }


def https(port: int, path: str = "") -> str:
    return f"https://{components.LOOPBACK}:{port}{path}"


@dataclass(frozen=True, slots=True)
class Plane:
    """One real control plane's files: certificates, kubeconfigs, etcd data, configuration."""

    root: Path
    ports: Ports
    bins: dict[str, Path]

    @classmethod
    def at(cls, where: layout.Layout, ports: Ports, bins: dict[str, Path]) -> Plane:
        return cls(where.root / "control-plane", ports, bins)

    @property
    def pki(self) -> certificates.Pki:
        return certificates.Pki(self.root / "pki")

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    def kubeconfig(self, name: str) -> Path:
        return self.root / "kubeconfigs" / f"{name}.yaml"

    @property
    def api_url(self) -> str:
        return https(self.ports.api)


def pki_dir(where: layout.Layout) -> Path:
    return where.root / "control-plane" / "pki"


def identities(nodes: Sequence[clusterfile.NodeSpec]) -> dict[str, certificates.Identity]:
    """Every client identity, by the name of its certificate and kubeconfig."""
    sa_groups = ("system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}")
    found = {
        ADMIN: certificates.Identity("vnpu-sandbox-admin", ("system:masters",)),
        "kube-controller-manager": certificates.Identity("system:kube-controller-manager"),
        "kube-scheduler": certificates.Identity("system:kube-scheduler"),
        FRONT_PROXY: certificates.Identity(FRONT_PROXY),
    }
    for service in SERVICES:
        user = f"system:serviceaccount:{NAMESPACE}:{service}"
        found[service] = certificates.Identity(user, sa_groups)
    for node in nodes:
        found[f"node-{node.name}"] = certificates.Identity(
            f"system:node:{node.name}", ("system:nodes",)
        )
    return found


def kubeconfig_document(api_url: str, ca: Path, client: certificates.Pair) -> dict[str, Any]:
    """A kubeconfig for ``api_url`` trusting ``ca``, authenticating with ``client``."""
    name = "vnpu-sandbox"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": name, "cluster": {"server": api_url, "certificate-authority": str(ca)}}
        ],
        "users": [
            {
                "name": name,
                "user": {"client-certificate": str(client.cert), "client-key": str(client.key)},
            }
        ],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }


def prepare(plane: Plane, where: layout.Layout, nodes: Sequence[clusterfile.NodeSpec]) -> None:
    """Certificates, one kubeconfig per identity, and the admin's as the sandbox's kubeconfig."""
    who = identities(nodes)
    pki = certificates.write_pki(plane.pki.root, who)
    for name in who:
        path = plane.kubeconfig(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        document = kubeconfig_document(plane.api_url, pki.ca.cert, pki.client(name))
        path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    where.kubeconfig.write_text(plane.kubeconfig(ADMIN).read_text(encoding="utf-8"))
    plane.etcd_data.mkdir(mode=0o700, parents=True, exist_ok=True)


def tls_context(pki: certificates.Pki) -> ssl.SSLContext:
    """Trust the sandbox's CA and present the admin's client certificate."""
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    admin = pki.client(ADMIN)
    context.load_cert_chain(str(admin.cert), str(admin.key))
    return context


def credentials(plane: Plane) -> components.Credentials:
    """The kubeconfig each vnpu process and simulated kubelet runs with."""

    def kubeconfig(role: str, node: str | None) -> str:
        if role == "kubelet":
            return str(plane.kubeconfig(f"node-{node}"))
        return str(plane.kubeconfig(f"vnpu-{role}"))

    return kubeconfig


def etcd(plane: Plane) -> components.Component:
    client = f"http://{components.LOOPBACK}:{plane.ports.etcd}"
    peer = f"http://{components.LOOPBACK}:{plane.ports.etcd_peer}"
    argv = (
        str(plane.bins["etcd"]),
        "--name=sandbox",
        f"--data-dir={plane.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=sandbox={peer}",
        "--log-level=warn",
        # Nothing here must outlive a crash of the machine; every write waits for fsync otherwise.
        "--unsafe-no-fsync",
    )
    return components.Component("etcd", argv, f"{client}/health")


def api_server(plane: Plane) -> components.Component:
    pki = plane.pki
    argv = (
        str(plane.bins["kube-apiserver"]),
        f"--etcd-servers=http://{components.LOOPBACK}:{plane.ports.etcd}",
        f"--bind-address={components.LOOPBACK}",
        f"--advertise-address={components.LOOPBACK}",
        f"--secure-port={plane.ports.api}",
        f"--tls-cert-file={pki.serving.cert}",
        f"--tls-private-key-file={pki.serving.key}",
        f"--client-ca-file={pki.ca.cert}",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={pki.service_account_public}",
        f"--service-account-signing-key-file={pki.service_account_key}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        f"--requestheader-client-ca-file={pki.ca.cert}",
        f"--requestheader-allowed-names={FRONT_PROXY}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki.client(FRONT_PROXY).cert}",
        f"--proxy-client-key-file={pki.client(FRONT_PROXY).key}",
        "--authorization-mode=Node,RBAC",
        f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
        # The webhook is what refuses privileged NPU containers; the API server lets it judge.
        "--allow-privileged=true",
        # The kubernetes Service's endpoint would be 127.0.0.1, which Endpoints validation
        # refuses; nothing here reaches the API through that Service.
        "--endpoint-reconciler-type=none",
        "--profiling=false",
        FEATURE_GATES,
        GANG_API,
    )
    return components.Component("kube-apiserver", argv, https(plane.ports.api, "/readyz"))


def _secure_serving(plane: Plane, port: int, kubeconfig: Path) -> tuple[str, ...]:
    return (
        f"--bind-address={components.LOOPBACK}",
        f"--secure-port={port}",
        f"--tls-cert-file={plane.pki.serving.cert}",
        f"--tls-private-key-file={plane.pki.serving.key}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
    )


def controller_manager(plane: Plane) -> components.Component:
    kubeconfig = plane.kubeconfig("kube-controller-manager")
    argv = (
        str(plane.bins["kube-controller-manager"]),
        f"--kubeconfig={kubeconfig}",
        *_secure_serving(plane, plane.ports.controller_manager, kubeconfig),
        "--leader-elect=false",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={plane.pki.service_account_key}",
        f"--root-ca-file={plane.pki.ca.cert}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        "--controllers=*",
        "--profiling=false",
        FEATURE_GATES,
    )
    url = https(plane.ports.controller_manager, "/healthz")
    return components.Component("kube-controller-manager", argv, url)


def scheduler_config(plane: Plane, extender: dict[str, Any]) -> dict[str, Any]:
    """The chart's KubeSchedulerConfiguration plus where kube-scheduler finds the API."""
    kubeconfig = str(plane.kubeconfig("kube-scheduler"))
    return {**extender, "clientConnection": {"kubeconfig": kubeconfig}}


def scheduler(
    plane: Plane, config: Path, name: str = "kube-scheduler", port: int | None = None
) -> components.Component:
    """kube-scheduler with ``config``; ``name`` and ``port`` for a second one beside it."""
    kubeconfig = plane.kubeconfig("kube-scheduler")
    secure = port or plane.ports.scheduler
    argv = (
        str(plane.bins["kube-scheduler"]),
        f"--config={config}",
        *_secure_serving(plane, secure, kubeconfig),
        FEATURE_GATES,
    )
    return components.Component(name, argv, https(secure, "/healthz"))


def scheduler_flags(plane: Plane) -> tuple[str, ...]:
    """vnpu-scheduler's webhook listener: HTTPS on loopback with the sandbox's certificate."""
    return (
        "--webhook-host",
        components.LOOPBACK,
        "--webhook-port",
        str(plane.ports.webhook),
        "--tls-cert",
        str(plane.pki.serving.cert),
        "--tls-key",
        str(plane.pki.serving.key),
    )


def ca_bundle(plane: Plane) -> str:
    """The CA as a webhook configuration's ``caBundle`` (base64 of the PEM)."""
    return base64.b64encode(plane.pki.ca.cert.read_bytes()).decode()


RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
ADMISSION_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def rbac_documents(chart: Path | None = None) -> list[dict[str, Any]]:
    """vnpu's service accounts, their rights, and what only they may write.

    With ``chart`` (the chart rendered to YAML, ``make chart OUT=FILE``), its RBAC objects and
    its admission policies with their bindings, as they are, so the real authorizer judges the
    chart's roles and kube-apiserver enforces the chart's policies; without, the service
    accounts bound to cluster-admin and no policy.
    """
    if chart is not None:
        try:
            documents = list(yaml.safe_load_all(chart.read_text(encoding="utf-8")))
        except (OSError, yaml.YAMLError) as exc:
            raise ControlPlaneError(f"--rbac {chart}: cannot read it: {exc}") from exc
        found = [d for d in documents if isinstance(d, dict) and d.get("kind") in RBAC_KINDS]
        if not found:
            raise ControlPlaneError(f"--rbac {chart}: no {', '.join(RBAC_KINDS)} in it")
        policies = [
            d for d in documents if isinstance(d, dict) and d.get("kind") in ADMISSION_KINDS
        ]
        return [*found, *policies]
    subjects = [{"kind": "ServiceAccount", "name": s, "namespace": NAMESPACE} for s in SERVICES]
    accounts = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": s, "namespace": NAMESPACE},
        }
        for s in SERVICES
    ]
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "vnpu-sandbox-services"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": subjects,
    }
    return [*accounts, binding]


def device_config(chart: Path) -> dict[str, Any]:
    """The device ConfigMap of the rendered chart (HAMi's ``hami-scheduler-device``): what
    Volcano's and HAMi's schedulers read the chip models from."""
    try:
        documents = list(yaml.safe_load_all(chart.read_text(encoding="utf-8")))
    except (OSError, yaml.YAMLError) as exc:
        raise ControlPlaneError(f"--rbac {chart}: cannot read it: {exc}") from exc
    for document in documents:
        if not isinstance(document, dict) or document.get("kind") != "ConfigMap":
            continue
        labels = (document.get("metadata") or {}).get("labels") or {}
        if labels.get("app.kubernetes.io/component") == DEVICE_CONFIG_COMPONENT:
            return document
    raise ControlPlaneError(
        f"--rbac {chart}: no device ConfigMap in it (global.deviceConfig.create=false?)"
    )


DEVICE_CONFIG_COMPONENT = "device-config"
"""The chart's component label of its device ConfigMap."""

_RBAC = "/apis/rbac.authorization.k8s.io/v1"
_CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
_COLLECTIONS = {
    "Namespace": "/api/v1/namespaces",
    "ConfigMap": "/api/v1/namespaces/{namespace}/configmaps",
    "CustomResourceDefinition": _CRDS,
    "ServiceAccount": "/api/v1/namespaces/{namespace}/serviceaccounts",
    "ClusterRole": f"{_RBAC}/clusterroles",
    "ClusterRoleBinding": f"{_RBAC}/clusterrolebindings",
    "Role": f"{_RBAC}/namespaces/{{namespace}}/roles",
    "RoleBinding": f"{_RBAC}/namespaces/{{namespace}}/rolebindings",
    "MutatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
    ),
    "ValidatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    ),
    "ValidatingAdmissionPolicy": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
    ),
    "DeviceClass": "/apis/resource.k8s.io/v1/deviceclasses",
}


def create(api_url: str, context: ssl.SSLContext, document: dict[str, Any]) -> None:
    """POST ``document`` to its collection; an object that already exists is left alone."""
    kind = str(document["kind"])
    namespace = (document.get("metadata") or {}).get("namespace") or NAMESPACE
    request = urllib.request.Request(
        api_url + _COLLECTIONS[kind].format(namespace=namespace),
        data=json.dumps(document).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            answer.read()
    except urllib.error.HTTPError as exc:
        if exc.code != 409:
            body = exc.read().decode("utf-8", errors="replace")[:300]
            raise ControlPlaneError(f"cannot create the {kind}: {exc.code} {body}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise ControlPlaneError(f"cannot create the {kind}: {exc}") from exc


def unestablished(
    api_url: str, context: ssl.SSLContext | None, names: Sequence[str]
) -> dict[str, str]:
    """The CRDs kube-apiserver does not serve yet, by name, with why: {} once all are."""
    found = {}
    for name in names:
        try:
            with urllib.request.urlopen(
                f"{api_url}{_CRDS}/{name}", timeout=10, context=context
            ) as answer:
                crd = json.loads(answer.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            found[f"crd/{name}"] = str(exc)
            continue
        conditions = (crd.get("status") or {}).get("conditions") or []
        if not any(
            c.get("type") == "Established" and c.get("status") == "True" for c in conditions
        ):
            found[f"crd/{name}"] = "not Established yet"
    return found
