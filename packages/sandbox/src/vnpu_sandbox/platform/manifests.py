"""The configuration documents ``up`` writes: kube-scheduler's, the webhooks', Prometheus's.

Each mirrors what the Helm chart renders for a real cluster (``deploy/helm/vnpu``), with the
sandbox's loopback addresses instead of Services: kube-scheduler reads the chart's
``KubeSchedulerConfiguration`` (a test compares the two), the webhook configurations differ
only in using ``clientConfig.url`` (they too see NPU pods only and fail closed), and
Prometheus scrapes the jobs the alert rules expect (``vnpu-exporter``, ``vnpu-device-plugin``,
``vnpu-scheduler``). The chart's admission policies are not mirrored: ``up --rbac`` applies
them from the rendered chart itself (``controlplane.rbac_documents``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from vnpu_core import catalog, draclasses

Json = dict[str, Any]

SCHEDULER_NAME = "vnpu-scheduler"
EXTENDER_WEIGHT = 10
EXTENDER_TIMEOUT_SECONDS = 30
WEBHOOK_TIMEOUT_SECONDS = 10
WEBHOOK_IGNORE_LABEL = "hami.io/webhook"
WEBHOOK_EXCLUDED_NAMESPACES = ("kube-system",)
NPU_RESOURCE_PREFIX = "huawei.com/"
"""Every NPU resource name starts with it: vnpu's and HAMi's chip models, Huawei's own names."""


def npu_pod_expression(prefix: str = NPU_RESOURCE_PREFIX) -> str:
    """CEL that holds for a pod (``object``) with a container or init container asking for an
    NPU resource in its limits or requests: the webhooks' ``matchConditions``."""
    asks = " || ".join(
        f"(has(c.resources.{kind}) && c.resources.{kind}.exists(r, r.startsWith('{prefix}')))"
        for kind in ("limits", "requests")
    )
    container = f"has(c.resources) && ({asks})"
    return (
        f"object.spec.containers.exists(c, {container}) || (has(object.spec.initContainers)"
        f" && object.spec.initContainers.exists(c, {container}))"
    )


def managed_resources(models: catalog.Catalog = catalog.BUILTIN) -> list[Json]:
    """Every chip model's count, -memory and -core resources, as the chart lists them."""
    out: list[Json] = []
    seen: set[str] = set()
    for model in models:
        count = model.resource_name
        for name, ignored in ((count, False), (f"{count}-memory", True), (f"{count}-core", True)):
            if name not in seen:
                seen.add(name)
                out.append({"name": name, "ignoredByScheduler": ignored})
    return out


def kube_scheduler_config(extender_url: str, scheduler_name: str = SCHEDULER_NAME) -> Json:
    """kube-scheduler's configuration with vnpu-scheduler as filter, prioritizer and binder."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": scheduler_name}],
        "extenders": [
            {
                "urlPrefix": extender_url,
                "filterVerb": "filter",
                "prioritizeVerb": "prioritize",
                "bindVerb": "bind",
                "weight": EXTENDER_WEIGHT,
                "nodeCacheCapable": True,
                "httpTimeout": f"{EXTENDER_TIMEOUT_SECONDS}s",
                "enableHTTPS": False,
                "ignorable": False,
                "managedResources": managed_resources(),
            }
        ],
    }


def plain_scheduler_config() -> Json:
    """kube-scheduler's configuration when a peer places NPU pods: the default profile alone,
    for the pods that name no scheduler (the peer's scheduler runs beside it)."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": "default-scheduler"}],
    }


def dra_scheduler_config(
    models: Sequence[catalog.ChipModel], scheduler_name: str = SCHEDULER_NAME
) -> Json:
    """kube-scheduler's configuration in DRA mode: it allocates NPUs itself, no extender;
    pods that name vnpu's profile and pods that name none are both scheduled, each on the
    node whose NPUs of ``models`` are fullest (``draclasses.fill_scoring``)."""
    scoring = [draclasses.fill_scoring(models)]
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "profiles": [
            {"schedulerName": name, "pluginConfig": scoring}
            for name in ("default-scheduler", scheduler_name)
        ],
    }


def webhook_configurations(scheduler_url: str, ca_bundle: str | None = None) -> list[Json]:
    """The mutating and validating configurations of vnpu-scheduler's admission webhooks.

    Only NPU pods are sent to them, and an NPU pod is refused while they do not answer
    (``failurePolicy: Fail``): it is never created unrounded for the default scheduler.
    ``ca_bundle`` (base64 PEM) is what kube-apiserver verifies an ``https`` URL against.
    """
    documents = []
    for kind, verb in (("Mutating", "mutate"), ("Validating", "validate")):
        webhook: Json = {
            "name": f"{verb}.vnpu.io",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "NoneOnDryRun",
            "failurePolicy": "Fail",
            "timeoutSeconds": WEBHOOK_TIMEOUT_SECONDS,
            "clientConfig": {"url": f"{scheduler_url}/{verb}"}
            | ({"caBundle": ca_bundle} if ca_bundle else {}),
            "rules": [
                {
                    "operations": ["CREATE"],
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "resources": ["pods"],
                    "scope": "Namespaced",
                }
            ],
            "namespaceSelector": {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "NotIn",
                        "values": list(WEBHOOK_EXCLUDED_NAMESPACES),
                    }
                ]
            },
            "objectSelector": {
                "matchExpressions": [
                    {"key": WEBHOOK_IGNORE_LABEL, "operator": "NotIn", "values": ["ignore"]}
                ]
            },
            "matchConditions": [{"name": "npu-pod", "expression": npu_pod_expression()}],
        }
        if kind == "Mutating":
            webhook["reinvocationPolicy"] = "Never"
        documents.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": f"{kind}WebhookConfiguration",
                "metadata": {"name": SCHEDULER_NAME},
                "webhooks": [webhook],
            }
        )
    return documents


def prometheus_config(
    scheduler: str | None,
    device_plugins: Sequence[tuple[str, str]],
    exporters: Sequence[tuple[str, str]],
    rule_files: Iterable[str],
    interval_seconds: int = 5,
) -> Json:
    """Prometheus scraping every part; ``device_plugins``/``exporters`` are (node, host:port),
    ``scheduler`` vnpu-scheduler's (None: it does not run).

    The device plugin's series get the node as a target label; the exporter's carry ``node``
    themselves, and a target label of the same name would rename theirs to ``exported_node``.
    """
    plugin_targets = [{"targets": [at], "labels": {"node": node}} for node, at in device_plugins]

    return {
        "global": {
            "scrape_interval": f"{interval_seconds}s",
            "evaluation_interval": f"{interval_seconds}s",
        },
        "rule_files": list(rule_files),
        "scrape_configs": [
            *(
                [{"job_name": "vnpu-scheduler", "static_configs": [{"targets": [scheduler]}]}]
                if scheduler is not None
                else []
            ),
            {"job_name": "vnpu-device-plugin", "static_configs": plugin_targets},
            {
                "job_name": "vnpu-exporter",
                "static_configs": [{"targets": [at for _, at in exporters]}],
            },
        ],
    }
