"""The resource types the API emulator serves, and how each one's fields are selected.

One ``Resource`` per served type: its group/version, names, scope, subresources and the
field-selector labels kube-apiserver accepts for it. ``paths`` resolves URLs against this
table, ``discovery`` publishes it, ``store`` keys objects by ``Resource.key`` and
``selectors`` reads field values through ``field_value``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")

_NAMESPACED_META = ("metadata.name", "metadata.namespace")
_POD_FIELDS = (
    *_NAMESPACED_META,
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
_EVENT_FIELDS = (
    *_NAMESPACED_META,
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)
# What an absent field reads as, where the real server's field sets print a zero value.
_ZERO_VALUES = {"spec.hostNetwork": "false", "spec.unschedulable": "false", "status.replicas": "0"}


@dataclass(frozen=True)
class Resource:
    """One served resource type (``pods``, ``leases.coordination.k8s.io``, ...)."""

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    field_labels: tuple[str, ...] = _NAMESPACED_META
    returns_deleted_object: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def has_status(self) -> bool:
        """True where ``/status`` is a subresource: the main resource then keeps old status."""
        return "status" in self.subresources

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


CORE = "v1"

PODS = Resource(
    "",
    CORE,
    "pods",
    "pod",
    "Pod",
    namespaced=True,
    short_names=("po",),
    categories=("all",),
    subresources=("status", "binding", "eviction"),
    field_labels=_POD_FIELDS,
    returns_deleted_object=True,
)
NODES = Resource(
    "",
    CORE,
    "nodes",
    "node",
    "Node",
    namespaced=False,
    short_names=("no",),
    subresources=("status",),
    field_labels=("metadata.name", "spec.unschedulable"),
)
NAMESPACES = Resource(
    "",
    CORE,
    "namespaces",
    "namespace",
    "Namespace",
    namespaced=False,
    short_names=("ns",),
    subresources=("status",),
    field_labels=("metadata.name", "status.phase"),
    returns_deleted_object=True,
)
CONFIGMAPS = Resource(
    "", CORE, "configmaps", "configmap", "ConfigMap", namespaced=True, short_names=("cm",)
)
EVENTS = Resource(
    "",
    CORE,
    "events",
    "event",
    "Event",
    namespaced=True,
    short_names=("ev",),
    field_labels=_EVENT_FIELDS,
)
RESOURCE_QUOTAS = Resource(
    "",
    CORE,
    "resourcequotas",
    "resourcequota",
    "ResourceQuota",
    namespaced=True,
    short_names=("quota",),
    subresources=("status",),
    returns_deleted_object=True,
)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "lease", "Lease", namespaced=True)
DEPLOYMENTS = Resource(
    "apps",
    "v1",
    "deployments",
    "deployment",
    "Deployment",
    namespaced=True,
    short_names=("deploy",),
    categories=("all",),
    subresources=("status", "scale"),
)
REPLICASETS = Resource(
    "apps",
    "v1",
    "replicasets",
    "replicaset",
    "ReplicaSet",
    namespaced=True,
    short_names=("rs",),
    categories=("all",),
    subresources=("status", "scale"),
    field_labels=(*_NAMESPACED_META, "status.replicas"),
)
WORKLOADS = (DEPLOYMENTS, REPLICASETS)
"""The kinds with a pod template, a label selector and a ``/scale`` subresource."""
MUTATING_WEBHOOKS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "mutatingwebhookconfiguration",
    "MutatingWebhookConfiguration",
    namespaced=False,
    field_labels=("metadata.name",),
)
VALIDATING_WEBHOOKS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "validatingwebhookconfiguration",
    "ValidatingWebhookConfiguration",
    namespaced=False,
    field_labels=("metadata.name",),
)

RESOURCES: tuple[Resource, ...] = (
    PODS,
    NODES,
    NAMESPACES,
    CONFIGMAPS,
    EVENTS,
    RESOURCE_QUOTAS,
    DEPLOYMENTS,
    REPLICASETS,
    LEASES,
    MUTATING_WEBHOOKS,
    VALIDATING_WEBHOOKS,
)

_BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}
_BY_KIND = {(r.api_version, r.kind): r for r in RESOURCES}
_BY_KEY = {r.key: r for r in RESOURCES}


def lookup(group: str, version: str, plural: str) -> Resource | None:
    """The resource served at ``/api[s]/<group>/<version>/<plural>``, if any."""
    return _BY_PATH.get((group, version, plural))


def by_kind(api_version: str, kind: str) -> Resource | None:
    """The resource whose objects carry this ``apiVersion`` and ``kind``."""
    return _BY_KIND.get((api_version, kind))


def by_key(key: tuple[str, str]) -> Resource:
    return _BY_KEY[key]


def group_versions() -> Iterator[tuple[str, str]]:
    """Every (group, version) served, core first, in a stable order."""
    seen: list[tuple[str, str]] = []
    for resource in RESOURCES:
        pair = (resource.group, resource.version)
        if pair not in seen:
            seen.append(pair)
    yield from seen


def field_value(obj: Json, label: str) -> str:
    """The string a field selector compares for ``label`` (``spec.nodeName``, ``source``...)."""
    if label == "source":
        source = obj.get("source")
        return str(source.get("component", "")) if isinstance(source, dict) else ""
    node: Any = obj
    for part in label.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if node is None:
        return _ZERO_VALUES.get(label, "")
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)
