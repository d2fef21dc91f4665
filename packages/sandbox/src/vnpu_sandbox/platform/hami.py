"""HAMi's scheduler beside the sandbox, for ``vnpu-sandbox up --scheduler hami`` (the operator
guide's "Topology 3": vnpu's device plugin and exporter under HAMi's scheduler and webhook).

HAMi's chart runs one pod of two containers: a kube-scheduler whose profile
``hami-scheduler`` calls HAMi's extender (filter, bind), and the extender itself, which also
serves HAMi's mutating webhook. ``up`` calls ``peers.build`` and ``Ports.choose``; ``bringup``
creates ``install_documents`` (HAMi's service account, roles and ConfigMaps from its chart
rendered with ``deploy/peers/hami-values.yaml``, and the webhook configuration on loopback),
calls ``prepare`` (the device configuration file from vnpu's device ConfigMap, kube-scheduler's
configuration from the chart's, the service account's token) and starts ``components_``: both
containers' commands as the chart's Deployment gives them, each as the chart's service
account, in-cluster (``peers.in_cluster``), on loopback ports with the sandbox's serving
certificate. Ready: both answer ``/healthz`` and ``problems`` is empty (HAMi has registered
every node: it writes ``Requesting_<time>`` in the node's handshake annotation when it reads
the node's chips; vnpu's device plugin writes ``Reported_<time>`` back at its next report).

What the sandbox changes of the chart, and why:

* HAMi's chart always renders a ConfigMap ``hami-scheduler-device``, vnpu's device
  ConfigMap's name: it is left out, vnpu's is the one HAMi reads;
* the chart's Helm hook objects (the Jobs that make the webhook certificate and patch its
  ``caBundle``, and their accounts) are left out: the webhook is served with the sandbox's
  certificate and registered with the sandbox CA;
* the extender reads the device configuration from a file only, once, at start (the chart
  mounts the ConfigMap's key): ``prepare`` writes vnpu's ConfigMap's key to a file;
* the addresses: loopback ports for the extender (HTTPS: extender verbs, webhook, health),
  its metrics and kube-scheduler's secure port, instead of the Service's.

Failures are ``peers.PeerError``.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vnpu_core import protocol
from vnpu_sandbox.platform import certificates, clusterfile, components, layout, peers, probes

Json = dict[str, Any]

PEER = "hami"
BINARIES = ("hami-scheduler",)
NAMESPACE = "kube-system"
RELEASE = "hami"
SCHEDULER_NAME = "hami-scheduler"
"""The profile HAMi's webhook routes NPU pods to (the chart's ``schedulerName``)."""
DEPLOYMENT = f"{RELEASE}-scheduler"
"""The chart's Deployment, service account and kube-scheduler ConfigMap."""
KUBE_SCHEDULER = "kube-scheduler"
EXTENDER = "vgpu-scheduler-extender"
"""The chart's names of the Deployment's two containers."""
CONFIG_KEY = "config.yaml"
DEVICE_CONFIG_KEY = "device-config.yaml"
HOOK = "helm.sh/hook"
REGISTERED = "Requesting_"
"""What HAMi writes in a node's handshake annotation when it has read the node's chips."""
_OWN_FLAGS = (
    "--http_bind", "--cert_file", "--key_file", "--metrics-bind-address",
    "--device-config-file", "--config",
)  # fmt: skip
"""Flags of the chart's that the sandbox sets itself (paths and loopback ports)."""


@dataclass(frozen=True, slots=True)
class Ports:
    """HAMi's loopback ports: the extender (HTTPS), its metrics, kube-scheduler's secure port."""

    extender: int
    metrics: int
    kube_scheduler: int

    @classmethod
    def choose(cls, pick: components.PortPicker) -> Ports:
        return cls(pick(), pick(), pick())

    def as_dict(self) -> dict[str, int]:
        return {
            "hami-scheduler": self.extender,
            "hami-scheduler-metrics": self.metrics,
            "hami-kube-scheduler": self.kube_scheduler,
        }


@dataclass(frozen=True, slots=True)
class Hami:
    """One sandbox's HAMi: its build, its rendered chart, ports and files."""

    build: peers.Build
    chart: list[Json]
    ports: Ports
    root: Path

    @classmethod
    def at(cls, where: layout.Layout, built: peers.Build, chart: list[Json], ports: Ports) -> Hami:
        return cls(built, chart, ports, where.root / PEER)

    @property
    def device_config(self) -> Path:
        return self.root / DEVICE_CONFIG_KEY

    @property
    def scheduler_config(self) -> Path:
        return self.root / "kube-scheduler.yaml"

    @property
    def extender_url(self) -> str:
        return f"https://{components.LOOPBACK}:{self.ports.extender}"

    @property
    def account(self) -> peers.Account:
        return peers.Account(NAMESPACE, DEPLOYMENT, self.root / "accounts")


def _kept(document: Json, device_config: str) -> bool:
    metadata = document.get("metadata") or {}
    if HOOK in (metadata.get("annotations") or {}):
        return False
    return not (document.get("kind") == "ConfigMap" and metadata.get("name") == device_config)


def install_documents(hami: Hami, ca_bundle: str, device_config: str) -> list[Json]:
    """What the sandbox creates of HAMi's chart: its accounts, roles and ConfigMaps but the
    one named ``device_config`` (vnpu's), no Helm hook, and its webhook configuration with
    ``clientConfig.url`` on the extender's loopback port and the sandbox CA."""
    kept = [d for d in hami.chart if _kept(d, device_config)]
    documents = peers.install_documents(kept, NAMESPACE)
    for document in kept:
        if document.get("kind") != "MutatingWebhookConfiguration":
            continue
        webhooks = []
        for webhook in document.get("webhooks") or []:
            path = ((webhook.get("clientConfig") or {}).get("service") or {}).get("path", "")
            config = {"url": f"{hami.extender_url}{path}", "caBundle": ca_bundle}
            webhooks.append({**webhook, "clientConfig": config})
        documents.append({**document, "webhooks": webhooks})
    if not any(d.get("kind") == "MutatingWebhookConfiguration" for d in documents):
        raise peers.PeerError("HAMi's chart renders no webhook (scheduler.admissionWebhook)")
    return documents


def scheduler_configuration(hami: Hami) -> Json:
    """The chart's KubeSchedulerConfiguration with the extender on its loopback port (the
    API is reached in-cluster, as in the chart's pod)."""
    text = peers.config_map(hami.chart, DEPLOYMENT, CONFIG_KEY)
    try:
        config: Json = yaml.safe_load(text)
        for extender in config.get("extenders") or []:
            extender["urlPrefix"] = hami.extender_url
    except (yaml.YAMLError, AttributeError, TypeError) as exc:
        raise peers.PeerError(f"the chart's ConfigMap {DEPLOYMENT}: {exc}") from exc
    return config


def prepare(
    hami: Hami, ca: Path, api_url: str, context: ssl.SSLContext, device_config: Json
) -> None:
    """The device configuration file (vnpu's ConfigMap's key), kube-scheduler's
    configuration, and the service account's files with a fresh token."""
    hami.root.mkdir(parents=True, exist_ok=True)
    text = (device_config.get("data") or {}).get(DEVICE_CONFIG_KEY)
    if not isinstance(text, str):
        raise peers.PeerError(f"vnpu's device ConfigMap has no {DEVICE_CONFIG_KEY}")
    hami.device_config.write_text(text, encoding="utf-8")
    document = yaml.safe_dump(scheduler_configuration(hami), sort_keys=False)
    hami.scheduler_config.write_text(document, encoding="utf-8")
    peers.prepare_account(hami.account, ca)
    peers.request_token(hami.account, api_url, context)


def components_(
    hami: Hami, api_port: int, serving: certificates.Pair, kube_scheduler: Path
) -> list[components.Component]:
    """HAMi's extender, then its kube-scheduler (``kube_scheduler``: the sandbox's binary, the
    version the chart's image tag names), as the chart's Deployment runs them."""
    loopback = components.LOOPBACK
    extender = peers.container(hami.chart, DEPLOYMENT, EXTENDER)
    # The chart's pod environment: its own name and namespace (HAMi labels its pod by them).
    env = ["POD_NAME=hami-scheduler-sandbox", f"POD_NAMESPACE={NAMESPACE}"]
    env += [e for e in peers.environment(extender) if not e.startswith("POD_")]
    argv = (
        str(hami.build.binary("hami-scheduler")),
        *peers.arguments(extender, _OWN_FLAGS),
        f"--http_bind={loopback}:{hami.ports.extender}",
        f"--cert_file={serving.cert}",
        f"--key_file={serving.key}",
        f"--metrics-bind-address={loopback}:{hami.ports.metrics}",
        f"--device-config-file={hami.device_config}",
    )
    scheduler = peers.container(hami.chart, DEPLOYMENT, KUBE_SCHEDULER)
    kube = (
        str(kube_scheduler),
        *peers.arguments(scheduler, _OWN_FLAGS),
        f"--config={hami.scheduler_config}",
        f"--bind-address={loopback}",
        f"--secure-port={hami.ports.kube_scheduler}",
        f"--tls-cert-file={serving.cert}",
        f"--tls-private-key-file={serving.key}",
    )
    secure = f"https://{loopback}:{hami.ports.kube_scheduler}/healthz"
    return [
        components.Component(
            "hami-scheduler",
            peers.in_cluster(hami.build, hami.account, api_port, argv, env),
            f"{hami.extender_url}/healthz",
        ),
        components.Component(
            "hami-kube-scheduler",
            peers.in_cluster(hami.build, hami.account, api_port, kube),
            secure,
        ),
    ]


def registered(
    api_url: str,
    context: ssl.SSLContext | None,
    nodes: Sequence[clusterfile.NodeSpec],
    seen: set[str],
) -> dict[str, str]:
    """The nodes HAMi has not registered yet ({node: why}); ``seen`` keeps those it has (its
    mark in the handshake is overwritten by the device plugin's next report)."""
    try:
        listed = probes.get_json(f"{api_url}/api/v1/nodes", context=context)
    except (OSError, ValueError) as exc:
        return {"hami": f"cannot list nodes: {exc}"}
    words = {n.name: n.common_word for n in nodes}
    for item in listed.get("items", []):
        name = item["metadata"]["name"]
        annotations = item["metadata"].get("annotations") or {}
        if name in words:
            handshake = annotations.get(protocol.node_handshake_key(words[name]), "")
            if handshake.startswith(REGISTERED):
                seen.add(name)
    return {n: "HAMi has not read its chips yet" for n in words if n not in seen}
