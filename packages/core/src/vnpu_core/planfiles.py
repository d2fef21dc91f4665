"""The planner's two input documents: the cluster file and the workload manifests.

``read_cluster`` turns the parsed cluster document (``nodes:`` entries with a chip model,
a chip count, an optional server kind, mode and replica count) into ``inventory.Node``
values. ``read_workload`` expands parsed Kubernetes manifests (Pods, and the pods that
Deployments, ReplicaSets, StatefulSets and Jobs create, also inside a List) into Pod
objects as the API would hold them and parses each one's NPU request with
``requests.from_pod`` as vnpu's webhook admits it (memory 0 is the smallest template); it
reads ResourceQuota objects too (``quotas.read_resource_quota``), for ``vnpu plan``'s quota
report. Both raise ``errors.InputFileError(file, path, value, problem)``
at the first bad value; kinds the planner does not read become notes, not errors.
Pure: ``vnpu_core.cli`` parses the YAML and ``vnpu_core.plan`` places the pods.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vnpu_core import catalog, errors, inventory, quotas, requests, topology

ServerKind = topology.ServerKind

MAX_CHIPS = 64
MAX_REPLICAS = 1000
_NODE_KEYS = ("name", "chip", "chips", "server", "mode", "replicas")
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Server kinds with a fixed chip count, and the chip family each kind is built from.
_FIXED_CHIPS = {
    ServerKind.RING_910A_8: 8,
    ServerKind.RING_910A_4: 4,
    ServerKind.MESH_910B_8: 8,
    ServerKind.RINGS_910B_16: 16,
}
_PAIRED = (ServerKind.A3_PAIRS, ServerKind.DUO_300I)
_FAMILY = {
    ServerKind.RING_910A_8: "910A",
    ServerKind.RING_910A_4: "910A",
    ServerKind.MESH_910B_8: "910B",
    ServerKind.RINGS_910B_16: "910B",
    ServerKind.A3_PAIRS: "910C",
    ServerKind.DUO_300I: "310P",
}
# Workload kinds that create pods from a template, and the field that says how many.
_CONTROLLERS = ("Deployment", "ReplicaSet", "StatefulSet", "Job")
_KINDS = "Pod, Deployment, ReplicaSet, StatefulSet, Job and List"


@dataclass(frozen=True, slots=True)
class Cluster:
    """The nodes of the cluster file, in file order, and what was assumed while reading it."""

    nodes: tuple[inventory.Node, ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class WorkloadPod:
    """One pod the workload creates: the Pod object as the API would hold it, and its request."""

    obj: Mapping[str, Any]
    request: requests.PodRequest


@dataclass(frozen=True, slots=True)
class Workload:
    pods: tuple[WorkloadPod, ...]
    notes: tuple[str, ...] = ()
    quotas: tuple[quotas.ResourceQuota, ...] = ()  # the ResourceQuota objects among the manifests


@dataclass(frozen=True, slots=True)
class _Reader:
    """Checks the values of one input file; every failure names the file, path and value."""

    source: str

    def fail(self, path: str, value: object, problem: str) -> errors.InputFileError:
        return errors.InputFileError(self.source, path, value, problem)

    def integer(self, path: str, value: object, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(path, value, f"must be an integer from {low} to {high}")
        return value

    def text(self, path: str, value: object) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(path, value, "must be a non-empty string")
        return value.strip()

    def mapping(self, path: str, value: object, required: bool = True) -> dict[str, Any]:
        if value is None and not required:
            return {}
        if not isinstance(value, dict):
            raise self.fail(path, value, "must be a mapping")
        return value

    def listing(self, path: str, value: object) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(path, value, "must be a list")
        return value


def find_model(models: catalog.Catalog, key: str) -> catalog.ChipModel | None:
    """A chip model by vnpu model name (``310P3``), common word (``Ascend310P``) or DCMI name."""
    by_name = {m.name: m for m in models}
    return by_name.get(key) or models.by_common_word(key) or models.by_chip_name(key)


def _server(
    read: _Reader, at: str, raw: object, model: catalog.ChipModel, chips: int
) -> ServerKind:
    """The server kind of a node entry (the model's usual one when ``raw`` is None)."""
    if raw is None:
        kind = topology.default_kind(model, chips)
    elif raw not in [k.value for k in ServerKind]:
        known = ", ".join(k.value for k in ServerKind)
        raise read.fail(f"{at}.server", raw, f"unknown server kind; use one of {known}")
    else:
        kind = ServerKind(str(raw))
    family = _FAMILY.get(kind)
    if family and not model.name.startswith(family):
        problem = f"a {kind.value} server holds {family} chips, not {model.name}"
        raise read.fail(f"{at}.server", kind.value, problem)
    fixed = _FIXED_CHIPS.get(kind)
    if fixed is not None and chips != fixed:
        raise read.fail(f"{at}.chips", chips, f"a {kind.value} server has {fixed} chips")
    if kind in _PAIRED and chips % 2:
        raise read.fail(f"{at}.chips", chips, f"a {kind.value} server has its chips in pairs")
    return kind


def read_cluster(document: object, source: str, models: catalog.Catalog) -> Cluster:
    """The nodes of a parsed cluster document. Raises InputFileError naming path and value."""
    read = _Reader(source)
    if not isinstance(document, dict) or "nodes" not in document:
        raise read.fail("nodes", document, "the file must be a mapping with a nodes: list")
    for key in document:
        if key != "nodes":
            raise read.fail(str(key), document[key], "unknown key; the file has only nodes:")
    entries = read.listing("nodes", document["nodes"])
    if not entries:
        raise read.fail("nodes", document["nodes"], "must list at least one node")
    nodes: list[inventory.Node] = []
    notes: list[str] = []
    seen: dict[str, str] = {}
    for i, raw_entry in enumerate(entries):
        at = f"nodes[{i}]"
        entry = read.mapping(at, raw_entry)
        for key in entry:
            if key not in _NODE_KEYS:
                raise read.fail(
                    f"{at}.{key}", entry[key], f"unknown key; use {', '.join(_NODE_KEYS)}"
                )
        for key in ("name", "chip", "chips"):
            if key not in entry:
                raise read.fail(f"{at}.{key}", None, "is required")
        name = read.text(f"{at}.name", entry["name"])
        model = find_model(models, read.text(f"{at}.chip", entry["chip"]))
        if model is None:
            known = ", ".join(m.name for m in models)
            raise read.fail(f"{at}.chip", entry["chip"], f"unknown chip model; use one of {known}")
        chips = read.integer(f"{at}.chips", entry["chips"], 1, MAX_CHIPS)
        kind = _server(read, at, entry.get("server"), model, chips)
        mode = entry.get("mode", "soft" if models.soft_mode_default else "hard")
        if mode not in ("hard", "soft"):
            raise read.fail(f"{at}.mode", mode, "must be hard (vNPU templates) or soft (hami-core)")
        names = [name]
        if "replicas" in entry:
            count = read.integer(f"{at}.replicas", entry["replicas"], 1, MAX_REPLICAS)
            names = [f"{name}-{n}" for n in range(count)]
        for node_name in names:
            if len(node_name) > 253 or not _NODE_NAME.match(node_name):
                raise read.fail(f"{at}.name", node_name, "must be a lowercase DNS name")
            if node_name in seen:
                raise read.fail(f"{at}.name", node_name, f"node name repeats {seen[node_name]}")
            seen[node_name] = at
            nodes.append(inventory.build_node(node_name, model, chips, kind, soft=mode == "soft"))
        if entry.get("server") is None:
            shown = name if len(names) == 1 else f"{names[0]}..{names[-1]}"
            notes.append(
                f"{at} {shown}: no server given; assumed {kind.value} for {chips} {model.name} chips"
            )
    return Cluster(tuple(nodes), tuple(notes))


def _check_pod(read: _Reader, meta_at: str, spec_at: str, meta: object, spec: object) -> None:
    """The shape ``requests.from_pod`` relies on: mappings, lists and string annotations."""
    metadata = read.mapping(meta_at, meta, required=False)
    annotations = read.mapping(f"{meta_at}.annotations", metadata.get("annotations"), False)
    for key, value in annotations.items():
        if not isinstance(value, str):
            raise read.fail(f'{meta_at}.annotations["{key}"]', value, "must be a string")
    body = read.mapping(spec_at, spec)
    if not read.listing(f"{spec_at}.containers", body.get("containers")):
        raise read.fail(f"{spec_at}.containers", body.get("containers"), "must list a container")
    for section in ("initContainers", "containers"):
        for j, item in enumerate(read.listing(f"{spec_at}.{section}", body.get(section))):
            at = f"{spec_at}.{section}[{j}]"
            read.text(f"{at}.name", read.mapping(at, item).get("name"))
            resources = read.mapping(f"{at}.resources", item.get("resources"), required=False)
            for part in ("limits", "requests"):
                read.mapping(f"{at}.resources.{part}", resources.get(part), required=False)


def _resource_paths(spec_at: str, spec: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(container name, resource, path) of every resource a pod spec lists."""
    for section in ("initContainers", "containers"):
        for j, item in enumerate(spec.get(section) or []):
            resources = item.get("resources") or {}
            for part in ("limits", "requests"):
                for key in resources.get(part) or {}:
                    yield (
                        item["name"],
                        str(key),
                        f'{spec_at}.{section}[{j}].resources.{part}["{key}"]',
                    )


def _request_failure(
    read: _Reader,
    pod: str,
    meta_at: str,
    spec_at: str,
    spec: Mapping[str, Any],
    exc: errors.RequestError,
) -> errors.InputFileError:
    """A request error of one pod, at the path of the resource or annotation it names."""
    if exc.container == "(pod)" or isinstance(exc, errors.PinError):
        who = f"pod {pod}" if exc.container == "(pod)" else f"pod {pod} container {exc.container}"
        return read.fail(
            f'{meta_at}.annotations["{exc.resource}"]', exc.value, f"{who}: {exc.problem}"
        )
    paths = [
        p for c, r, p in _resource_paths(spec_at, spec) if (c, r) == (exc.container, exc.resource)
    ]
    path = paths[0] if paths else spec_at
    return read.fail(path, exc.value, f"pod {pod} container {exc.container}: {exc.problem}")


def _copies(read: _Reader, at: str, kind: str, spec: Mapping[str, Any]) -> int:
    """How many pods a workload object runs at once (a Job: parallelism, capped by completions)."""
    if kind == "Job":
        count = read.integer(f"{at}.spec.parallelism", spec.get("parallelism", 1), 0, MAX_REPLICAS)
        if spec.get("completions") is not None:
            done = read.integer(f"{at}.spec.completions", spec["completions"], 0, 2**31 - 1)
            count = min(count, done)
        return count
    return read.integer(f"{at}.spec.replicas", spec.get("replicas", 1), 0, MAX_REPLICAS)


def _objects(
    read: _Reader, documents: Sequence[object], lines: Sequence[int] | None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every manifest object with its path, List items expanded; empty documents skipped."""
    for i, document in enumerate(documents):
        at = f"documents[{i}]" + (f" (line {lines[i]})" if lines and i < len(lines) else "")
        if document is None:
            continue
        obj = read.mapping(at, document)
        if obj.get("kind") != "List":
            yield at, obj
            continue
        for j, item in enumerate(read.listing(f"{at}.items", obj.get("items"))):
            yield f"{at}.items[{j}]", read.mapping(f"{at}.items[{j}]", item)


def read_workload(
    documents: Sequence[object],
    source: str,
    models: catalog.Catalog,
    lines: Sequence[int] | None = None,
    default_namespace: str = "default",
) -> Workload:
    """The pods the manifests create, in file order. Raises InputFileError naming path and value.

    ``lines`` (the line each document starts on) makes paths read ``documents[2] (line 31)``.
    ``default_namespace`` is the namespace of the objects that name none.
    """
    read = _Reader(source)
    pods: list[WorkloadPod] = []
    found_quotas = _resource_quotas(read, documents, lines, default_namespace, models)
    notes: list[str] = []
    seen: dict[tuple[str, str], str] = {}
    meta: object
    spec: object
    for at, obj in _objects(read, documents, lines):
        kind = read.text(f"{at}.kind", obj.get("kind"))
        metadata = read.mapping(f"{at}.metadata", obj.get("metadata"), required=False)
        name = read.text(f"{at}.metadata.name", metadata.get("name"))
        namespace = read.text(
            f"{at}.metadata.namespace", metadata.get("namespace", default_namespace)
        )
        if kind == "Pod":
            meta_at, spec_at, names = f"{at}.metadata", f"{at}.spec", [name]
            meta, spec = metadata, obj.get("spec")
        elif kind in _CONTROLLERS:
            body = read.mapping(f"{at}.spec", obj.get("spec"))
            names = [f"{name}-{n}" for n in range(_copies(read, at, kind, body))]
            template = read.mapping(f"{at}.spec.template", body.get("template"))
            meta_at, spec_at = f"{at}.spec.template.metadata", f"{at}.spec.template.spec"
            meta, spec = template.get("metadata"), template.get("spec")
        else:
            if kind != "ResourceQuota":  # read by _resource_quotas
                notes.append(f"{at}: {kind} {name} skipped (the planner reads {_KINDS})")
            continue
        _check_pod(read, meta_at, spec_at, meta, spec)
        assert isinstance(spec, dict)  # checked just above
        for container, resource, path in _resource_paths(spec_at, spec):
            if resource.startswith("huawei.com/Ascend") and not models.by_resource(resource):
                known = ", ".join(m.common_word for m in models)
                problem = (
                    f"pod {name} container {container}: unknown NPU resource; known chips: {known}"
                )
                raise read.fail(path, resource, problem)
        annotations = dict(read.mapping(meta_at, meta, required=False).get("annotations") or {})
        wanted = 0
        for pod_name in names:
            if (namespace, pod_name) in seen:
                problem = f"pod {namespace}/{pod_name} also comes from {seen[namespace, pod_name]}"
                raise read.fail(f"{at}.metadata.name", name, problem)
            seen[namespace, pod_name] = at
            metadata_out = {
                "name": pod_name,
                "namespace": namespace,
                "annotations": dict(annotations),
            }
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": metadata_out,
                "spec": copy.deepcopy(spec),
            }
            try:
                request = requests.from_pod(pod, models, admission=True)  # as admitted
            except errors.RequestError as exc:
                raise _request_failure(read, pod_name, meta_at, spec_at, spec, exc) from exc
            if request.wants_npu:
                pods.append(WorkloadPod(pod, request))
                wanted += 1
        if not names:
            notes.append(f"{at}: {kind} {name} runs no pods (scaled to 0)")
        elif not wanted:
            notes.append(f"{at}: {kind} {name} asks for no NPU; not planned")
    return Workload(tuple(pods), tuple(notes), found_quotas)


def _resource_quotas(
    read: _Reader,
    documents: Sequence[object],
    lines: Sequence[int] | None,
    default_namespace: str,
    models: catalog.Catalog,
) -> tuple[quotas.ResourceQuota, ...]:
    """The ResourceQuota objects among the manifests; those naming no namespace get the default."""
    found: list[quotas.ResourceQuota] = []
    for at, obj in _objects(read, documents, lines):
        if obj.get("kind") != "ResourceQuota":
            continue
        metadata = read.mapping(f"{at}.metadata", obj.get("metadata"), required=False)
        read.text(f"{at}.metadata.name", metadata.get("name"))
        namespace = read.text(
            f"{at}.metadata.namespace", metadata.get("namespace", default_namespace)
        )
        placed = {**obj, "metadata": {**metadata, "namespace": namespace}}
        try:
            found.append(quotas.read_resource_quota(placed, models))
        except errors.QuotaError as exc:
            raise read.fail(f"{at}.{exc.path}", exc.value, exc.problem) from exc
    return tuple(found)
