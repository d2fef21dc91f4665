"""Kueue beside the sandbox's real control plane, for ``vnpu-sandbox up --kueue``.

``up`` calls ``build`` first (the manager ``make kueue-bin`` builds and the Kueue module it
came from; missing, the message names the command that builds them) and ``Ports.choose`` with
the other ports. ``bringup`` then calls ``prepare`` (Kueue's configuration file and its copy
of the sandbox's serving certificate), creates ``crd_documents`` once kube-apiserver answers,
waits until ``controlplane.unestablished`` is empty, registers ``webhook_configurations``, starts
``component`` and waits, with everything else, until ``problems`` is empty: a Job created now
goes through Kueue's webhooks.

How Kueue runs here:

* its manifests come from the module in the Go module cache, read at run time (nothing of
  Kueue's is committed): the CRDs its ``config/components/crd`` kustomization lists, with the
  conversion webhooks that kustomization's patches add, and the webhook configurations of
  ``config/components/webhook/manifests.yaml``. Every ``clientConfig.service`` becomes a
  ``clientConfig.url`` on loopback with the sandbox CA as ``caBundle``, as vnpu's own webhooks
  are registered (``manifests.webhook_configurations``);
* integrations: ``batch/job`` only. Only the webhooks of Kueue's own kinds and of Jobs are
  registered; those of pods, Deployments, JobSets and the rest would answer as no-ops and
  only add a failure point to every pod. vnpu's webhooks stay the only ones pods meet;
* its ``Configuration`` (``config.kueue.x-k8s.io/v1beta2``): the webhook server on loopback
  with the sandbox's serving certificate (``webhook.certDir``), ``internalCertManagement``
  off, no leader election, health and metrics on loopback ports, the visibility API server
  off (it would need an APIService);
* identity: the sandbox admin's kubeconfig (``system:masters``). Enough for a sandbox; a
  cluster gives Kueue the ClusterRoles of its own manifests;
* with its certificate management off, Kueue v0.17 reads its metrics server's certificate
  from the fixed path ``/etc/kueue/metrics/certs`` (not configurable). The manager runs in a
  mount namespace of its own (``unshare``, a user namespace too when not root) where a
  read-only overlay shows the sandbox's certificate at that path on top of the host's
  ``/etc``, which stays untouched.

Failures are ``KueueError`` (``path``: the file or directory concerned; ``status``: the HTTP
status kube-apiserver answered; each when there is one).
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vnpu_sandbox.platform import certificates, components, layout, mountns

Json = dict[str, Any]

VERSION = "v0.17.0"
BUILD_HINT = f"build it with `make kueue-bin` (scripts/kueue-bin.sh, Kueue {VERSION})"
NAMESPACE = "kueue-system"
NAME_PREFIX = "kueue-"
"""What Kueue's own kustomization (config/default) puts before its objects' names."""
FRAMEWORKS = ("batch/job",)
GROUP = "kueue.x-k8s.io"
QUEUE_LABEL = f"{GROUP}/queue-name"
SERVED = frozenset({("batch", "jobs")})
"""Besides Kueue's own kinds, what the registered webhooks may be about (the integrations)."""
CRD_DIR = Path("config/components/crd")
WEBHOOK_MANIFESTS = Path("config/components/webhook/manifests.yaml")
METRICS_CERTS = Path("kueue/metrics/certs")
"""Where, below ``/etc``, Kueue reads its metrics server's certificate."""
PROBE_JOB = "vnpu-sandbox-kueue-ready"
_CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


class KueueError(Exception):
    """Kueue cannot be run: not built, its manifests unreadable, an API call refused."""

    def __init__(self, problem: str, path: Path | None = None, status: int | None = None) -> None:
        self.problem = problem
        self.path = path
        self.status = status
        super().__init__(problem)


def cache_dir(version: str = VERSION) -> Path:
    """Where ``scripts/kueue-bin.sh`` builds (``$XDG_CACHE_HOME`` respected)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vnpu" / "kueue" / version


@dataclass(frozen=True, slots=True)
class Build:
    """Kueue's manager, the module it was built from, and ``unshare`` to run it with."""

    binary: Path
    module: Path
    unshare: str

    @property
    def crds(self) -> Path:
        return self.module / CRD_DIR

    @property
    def webhooks(self) -> Path:
        return self.module / WEBHOOK_MANIFESTS


def build(root: Path | None = None) -> Build:
    """The Kueue ``make kueue-bin`` built; KueueError names what is missing and the command."""
    where = root or cache_dir()
    binary = where / "bin" / "kueue"
    if not os.access(binary, os.X_OK):
        raise KueueError(f"no kueue in {binary.parent}: {BUILD_HINT}", binary)
    record = where / "module-dir"
    try:
        module = Path(record.read_text(encoding="utf-8").strip())
    except OSError as exc:
        raise KueueError(f"cannot read {record} ({exc.strerror}): {BUILD_HINT}", record) from exc
    if not (module / CRD_DIR / "kustomization.yaml").is_file():
        raise KueueError(
            f"no Kueue CRDs in {module / CRD_DIR} (the Go module cache was cleaned?): {BUILD_HINT}",
            module,
        )
    try:
        return Build(binary, module, mountns.unshare())
    except mountns.MountError as exc:
        raise KueueError(f"Kueue: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Ports:
    """Kueue's loopback ports: webhook server (HTTPS), health probes, metrics (HTTPS)."""

    webhook: int
    health: int
    metrics: int

    @classmethod
    def choose(cls, pick: components.PortPicker) -> Ports:
        return cls(pick(), pick(), pick())

    def as_dict(self) -> dict[str, int]:
        return {
            "kueue-webhook": self.webhook,
            "kueue-health": self.health,
            "kueue-metrics": self.metrics,
        }


@dataclass(frozen=True, slots=True)
class Kueue:
    """One sandbox's Kueue: what runs, on which ports, with which files."""

    build: Build
    ports: Ports
    root: Path

    @classmethod
    def at(cls, where: layout.Layout, built: Build, ports: Ports) -> Kueue:
        return cls(built, ports, where.root / "kueue")

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def cert_dir(self) -> Path:
        """The webhook server's ``certDir`` (``tls.crt``, ``tls.key``)."""
        return self.root / "webhook-certs"

    @property
    def etc_overlay(self) -> Path:
        """What the overlay puts over ``/etc`` in Kueue's mount namespace."""
        return self.root / "etc"

    @property
    def webhook_url(self) -> str:
        return f"https://{components.LOOPBACK}:{self.ports.webhook}"


def configuration(kueue: Kueue) -> Json:
    """Kueue's ``Configuration`` document (fields of its config API v1beta2)."""
    loopback = components.LOOPBACK
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "manageJobsWithoutQueueName": False,
        "leaderElection": {"leaderElect": False},
        "health": {"healthProbeBindAddress": f"{loopback}:{kueue.ports.health}"},
        "metrics": {"bindAddress": f"{loopback}:{kueue.ports.metrics}"},
        "webhook": {"host": loopback, "port": kueue.ports.webhook, "certDir": str(kueue.cert_dir)},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": list(FRAMEWORKS)},
        "featureGates": {"VisibilityOnDemand": False},
    }


def prepare(kueue: Kueue, pki: certificates.Pki) -> None:
    """Write the configuration file and Kueue's copies of the sandbox's serving certificate."""
    overlay = kueue.etc_overlay
    if ":" in str(overlay) or "," in str(overlay):  # overlayfs's separators (mountns.overlay)
        raise KueueError(f"{overlay}: a path with ':' or ',' cannot be mounted over /etc", overlay)
    metrics = kueue.etc_overlay / METRICS_CERTS
    for directory in (kueue.cert_dir, metrics):
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(pki.serving.cert, directory / "tls.crt")
        key = directory / "tls.key"
        descriptor = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as out:
            out.write(pki.serving.key.read_bytes())
    text = yaml.safe_dump(configuration(kueue), sort_keys=False)
    kueue.config.write_text(text, encoding="utf-8")


def component(kueue: Kueue, kubeconfig: Path) -> components.Component:
    """The manager, in a mount namespace where ``/etc/kueue/metrics/certs`` is the sandbox's
    certificate (see the module docstring), ready when its webhook server has started."""
    manager = (str(kueue.build.binary), f"--config={kueue.config}", f"--kubeconfig={kubeconfig}")
    argv = mountns.overlay(kueue.build.unshare, "kueue-etc", kueue.etc_overlay, "/etc", manager)
    return components.Component("kueue", argv, components.url(kueue.ports.health, "/readyz"))


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's loader when PyYAML has it: the Workload CRD alone is 1.4 MB of YAML."""


def _read_yaml(path: Path) -> list[Any]:
    try:
        text = path.read_text(encoding="utf-8")
        return [d for d in yaml.load_all(text, Loader=_LOADER) if d is not None]
    except (OSError, yaml.YAMLError) as exc:
        raise KueueError(f"cannot read Kueue's {path}: {exc}", path) from exc


def _client_config(original: Json, base_url: str, ca_bundle: str) -> Json:
    """A ``clientConfig`` naming a Service, as the same path on ``base_url``."""
    path = (original.get("service") or {}).get("path") or ""
    return {"url": f"{base_url}{path}", "caBundle": ca_bundle}


def crd_documents(built: Build, base_url: str, ca_bundle: str) -> list[Json]:
    """Kueue's CRDs as its kustomization installs them, conversion webhooks on ``base_url``."""
    kustomization = built.crds / "kustomization.yaml"
    found = _read_yaml(kustomization)
    spec: Json = found[0] if found and isinstance(found[0], dict) else {}
    conversions: dict[str, Json] = {}
    for patch in spec.get("patches") or []:
        if not isinstance(patch, dict) or "path" not in patch:
            continue
        for document in _read_yaml(built.crds / str(patch["path"])):
            conversion = (document.get("spec") or {}).get("conversion")
            if conversion is not None:
                conversions[document["metadata"]["name"]] = conversion
    crds = []
    for resource in spec.get("resources") or []:
        for document in _read_yaml(built.crds / str(resource)):
            if document.get("kind") != "CustomResourceDefinition":
                continue
            conversion = conversions.get(document["metadata"]["name"])
            if conversion is not None:
                webhook = dict(conversion.get("webhook") or {})
                webhook["clientConfig"] = _client_config(
                    webhook.get("clientConfig") or {}, base_url, ca_bundle
                )
                document["spec"]["conversion"] = {**conversion, "webhook": webhook}
            crds.append(document)
    if not crds:
        raise KueueError(f"{kustomization} lists no CustomResourceDefinition", kustomization)
    return crds


def _served(webhook: Json) -> bool:
    """Whether every rule of ``webhook`` is about Kueue's kinds or an enabled integration."""
    rules = webhook.get("rules") or []
    return bool(rules) and all(
        all(
            group == GROUP or (group, resource.split("/")[0]) in SERVED
            for group in rule.get("apiGroups") or []
            for resource in rule.get("resources") or []
        )
        for rule in rules
    )


def webhook_configurations(built: Build, base_url: str, ca_bundle: str) -> list[Json]:
    """Kueue's webhook configurations, on ``base_url``, keeping the webhooks ``_served``."""
    documents = []
    for document in _read_yaml(built.webhooks):
        if document.get("kind") not in (
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        ):
            continue
        kept = []
        for webhook in document.get("webhooks") or []:
            if _served(webhook):
                config = _client_config(webhook.get("clientConfig") or {}, base_url, ca_bundle)
                kept.append({**webhook, "clientConfig": config})
        name = NAME_PREFIX + document["metadata"]["name"]
        documents.append({**document, "metadata": {"name": name}, "webhooks": kept})
    if not documents:
        raise KueueError(f"no webhook configuration in {built.webhooks}", built.webhooks)
    return documents


def _send(
    url: str, context: ssl.SSLContext | None, document: Json | None = None, what: str = ""
) -> Json:
    """POST ``document`` (GET without one); the answer, or KueueError with the API's message."""
    request = urllib.request.Request(
        url,
        data=None if document is None else json.dumps(document).encode(),
        headers={"Content-Type": "application/json"},
        method="GET" if document is None else "POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as answer:
            found: Json = json.loads(answer.read())
            return found
    except urllib.error.HTTPError as exc:
        body = exc.read().decode("utf-8", errors="replace")
        try:
            message = str(json.loads(body).get("message", body))
        except ValueError:
            message = body
        raise KueueError(f"{what or url}: {exc.code} {message[:300]}", status=exc.code) from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise KueueError(f"{what or url}: {exc}") from exc


def create_crds(api_url: str, context: ssl.SSLContext | None, crds: Iterable[Json]) -> None:
    """Create every CRD; one that already exists (a 409) is left as it is."""
    for crd in crds:
        name = crd["metadata"]["name"]
        try:
            _send(api_url + _CRDS, context, crd, f"creating the CRD {name}")
        except KueueError as exc:
            if exc.status != 409:
                raise


def probe_job(namespace: str = "default") -> Json:
    """A Job for a queue: what Kueue's mutating webhook suspends at creation."""
    container = {"name": "main", "image": "probe"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": PROBE_JOB,
            "namespace": namespace,
            "labels": {QUEUE_LABEL: "vnpu-sandbox-probe"},
        },
        "spec": {
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }


def problems(api_url: str, context: ssl.SSLContext | None) -> dict[str, str]:
    """Whether Kueue's webhooks answer: a server-side dry run (nothing is stored) of a Job for a
    queue comes back suspended. Empty when they do, else {what: why}."""
    url = f"{api_url}/apis/batch/v1/namespaces/default/jobs?dryRun=All"
    try:
        admitted = _send(url, context, probe_job(), "a Job for a queue")
    except KueueError as exc:
        return {"kueue-webhooks": exc.problem}
    if (admitted.get("spec") or {}).get("suspend") is not True:
        return {"kueue-webhooks": "a Job for a queue is not suspended by Kueue's webhook yet"}
    return {}
