"""DRA mode of ``bench_packing.py``: a trace's pods placed by kube-scheduler on KWOK nodes.

``DraRun`` starts ``scale_cluster.Cluster`` in ``dra`` mode (etcd, kube-apiserver,
kube-controller-manager, a bare kube-scheduler, KWOK and vnpu's DeviceClasses; with
``ScoredCluster``'s ``most_allocated``, kube-scheduler scores nodes by the NPU extended
resources with MostAllocated instead of its default scoring), creates one
KWOK node per node of the planner's cluster (same names, no chip resource) and publishes
each node's pool as the DRA driver builds it (``vnpu_dra_driver.slices.build`` of the
node's chip model, chip count and server layout, written by the driver's own
``publisher.Publisher``). ``place`` then creates the trace's pods one at a time, each as
vnpu's webhook admits it in DRA mode (``vnpu_scheduler.dramode.convert``: a vNPU request
becomes ``npu.vnpu.io/<cw>-<memory>m`` or the pinned ``npu.vnpu.io/<cw>-<template>``, one
whole chip stays ``huawei.com/<CW>``, several become a pod claim from a ResourceClaimTemplate,
created in the namespace first as the webhook does), and waits until kube-scheduler binds it
or marks it
unschedulable; an unschedulable pod is deleted at once, so that it cannot take room later
that a later pod of the trace got in the planner. ``allocations`` reads every
ResourceClaim's devices back (which chip of which node each pod got). ``clear`` deletes the
pods and waits for their claims to go, so the next replay starts on empty nodes. ``stop``
holds SIGTERM and SIGINT back until every process is stopped.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import kubernetes
import scale_cluster
import scale_dra
import urllib3

from vnpu_core import draclasses, inventory, planfiles
from vnpu_dra_driver import cluster as dra_cluster
from vnpu_dra_driver import publisher, slices
from vnpu_scheduler import dramode

Json = dict[str, Any]
NAMESPACE = "bench-packing"
IMAGE = "registry.k8s.io/pause:3.10"
POD_TIMEOUT = 60.0
"""Seconds a pod may take to be bound or found unschedulable."""
CLEAR_TIMEOUT = 180.0


class PackingError(Exception):
    """The DRA run cannot go on (a node not Ready, a pod neither bound nor refused)."""


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGTERM and SIGINT held back while stopping: one arriving then would end the stop
    half way (etcd left running); it takes effect, with its own handler, once done."""
    pending: list[int] = []
    wanted = (signal.SIGTERM, signal.SIGINT)
    previous = {number: signal.signal(number, lambda n, _f: pending.append(n)) for number in wanted}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if pending:
            signal.raise_signal(pending[0])


# -- the nodes ---------------------------------------------------------------------------------


def kwok_node(index: int, node: inventory.Node) -> Json:
    """A KWOK Node named as the planner's node; its chips are only in its ResourceSlices."""
    resources = {"cpu": "192", "memory": "1536Gi", "pods": "110"}
    model = node.chips[0].model
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "annotations": {scale_cluster.KWOK_SELECTOR[0]: scale_cluster.KWOK_SELECTOR[1]},
            "labels": {
                "kubernetes.io/hostname": node.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "vnpu.io/chip-model": model.name,
            },
        },
        "spec": {"podCIDR": f"10.{index // 256 % 256}.{index % 256}.0/24"},
        "status": {"capacity": resources, "allocatable": resources},
    }


def pool(node: inventory.Node) -> tuple[Json, ...]:
    """The node's ResourceSlices as its driver would publish them (``scale_dra.chips``: the
    chips ``vnpu-npu-sim init`` would give)."""
    model = node.chips[0].model
    chips = scale_dra.chips(node.name, model, len(node.chips))
    return slices.build(node.name, chips, model, server=node.topology.kind)


# -- the pods ----------------------------------------------------------------------------------


def _unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def _apply(document: Json, operations: Sequence[Json]) -> Json:
    """The JSON patch's ``add`` and ``remove`` operations (all the webhook writes) applied."""
    out = copy.deepcopy(document)
    for operation in operations:
        *parents, last = [_unescape(p) for p in operation["path"].split("/")[1:]]
        target: Any = out
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if operation["op"] == "remove":
            del target[int(last) if isinstance(target, list) else last]
        elif operation["op"] == "add" and isinstance(target, list):
            target.insert(len(target) if last == "-" else int(last), operation["value"])
        elif operation["op"] == "add":
            target[last] = operation["value"]
        else:
            raise ValueError(f"unexpected patch operation {operation['op']!r}")
    return out


def admitted(pod: planfiles.WorkloadPod, prefix: str) -> tuple[Json, list[Json]]:
    """The pod as vnpu's webhook admits it in DRA mode, in the benchmark's namespace, its
    name after ``prefix`` (each trace has its own, so no event of an earlier one is mistaken
    for a later pod's), and the ResourceClaimTemplates it names (several whole chips: a pod
    claim kept to the server's layout), which the webhook creates in the namespace first."""
    spec = copy.deepcopy(dict(pod.obj["spec"]))
    conversion = dramode.convert(spec, pod.request)
    if conversion.denial:
        raise PackingError(f"{pod.request.name}: the webhook would refuse it: {conversion.denial}")
    spec = _apply({"spec": spec}, conversion.patch)["spec"]
    for container in spec.get("containers") or []:
        container["image"] = IMAGE
    spec["terminationGracePeriodSeconds"] = 0
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{prefix}{pod.request.name}", "namespace": NAMESPACE},
        "spec": spec,
    }
    return body, [dict(claim.body) for claim in conversion.claims]


class Outcomes:
    """A watch of the namespace's pods: which node each was bound to, or that it was found
    unschedulable (kube-scheduler's message kept)."""

    def __init__(self, api: kubernetes.client.ApiClient) -> None:
        self.core = kubernetes.client.CoreV1Api(api)
        self.bound: dict[str, str] = {}
        self.refused: dict[str, str] = {}
        self.changed = threading.Condition()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)

    def _see(self, pod: Json) -> None:
        name = pod["metadata"]["name"]
        node = (pod.get("spec") or {}).get("nodeName")
        with self.changed:
            if node:
                self.bound[name] = node
            for condition in (pod.get("status") or {}).get("conditions") or []:
                if (
                    condition.get("type") == "PodScheduled"
                    and condition.get("status") == "False"
                    and condition.get("reason") == "Unschedulable"
                ):
                    self.refused[name] = str(condition.get("message", ""))
            self.changed.notify_all()

    def _run(self) -> None:
        version = ""
        while not self.stopping.is_set():
            try:
                if not version:
                    answer = self.core.list_namespaced_pod(NAMESPACE, _preload_content=False)
                    listed = json.loads(answer.data)
                    for pod in listed["items"]:
                        self._see(pod)
                    version = listed["metadata"]["resourceVersion"]
                stream = self.core.list_namespaced_pod(
                    NAMESPACE, watch=True, resource_version=version, timeout_seconds=60,
                    allow_watch_bookmarks=True, _preload_content=False, _request_timeout=90,
                )  # fmt: skip
            except (kubernetes.client.exceptions.ApiException, urllib3.exceptions.HTTPError):
                version = ""
                time.sleep(0.2)
                continue
            try:
                for event in scale_cluster.iter_events(stream):
                    if event["type"] == "ERROR":
                        version = ""
                        break
                    version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._see(event["object"])
            except (urllib3.exceptions.HTTPError, ValueError):
                version = ""
            finally:
                stream.release_conn()

    def wait(self, name: str, timeout: float) -> str | None:
        """``bound`` or ``refused`` once the pod is one of them; None after ``timeout``."""
        with self.changed:
            self.changed.wait_for(lambda: name in self.bound or name in self.refused, timeout)
            if name in self.bound:
                return "bound"
            return "refused" if name in self.refused else None


# -- the run -----------------------------------------------------------------------------------


@dataclasses.dataclass
class ScoredCluster(scale_cluster.Cluster):
    """``scale_cluster.Cluster`` whose kube-scheduler, given ``most_allocated`` resources,
    scores nodes with NodeResourcesFit's MostAllocated strategy over them alone (instead of
    LeastAllocated over CPU and memory): for DRA-backed extended resources it counts the
    devices of the resource's DeviceClass allocated on the node (DRAExtendedResource)."""

    most_allocated: tuple[str, ...] = ()

    def scheduler_config(self) -> Json:
        config = super().scheduler_config()
        if self.most_allocated:
            strategy = {
                "type": "MostAllocated",
                "resources": [{"name": name, "weight": 1} for name in self.most_allocated],
            }
            config["profiles"][0]["pluginConfig"] = [
                {"name": "NodeResourcesFit", "args": {"scoringStrategy": strategy}}
            ]
        return config


def extended_resources(pods: Sequence[planfiles.WorkloadPod]) -> tuple[str, ...]:
    """The extended resources the admitted pods ask (what ``ScoredCluster`` may score)."""
    found: dict[str, None] = {}
    for pod in pods:
        body, _templates = admitted(pod, "")
        for container in body["spec"].get("containers") or []:
            for name in (container.get("resources") or {}).get("limits") or {}:
                if "/" in name:
                    found[name] = None
    return tuple(sorted(found))


class DraRun:
    """One control plane with KWOK nodes for the cluster; ``start``, ``place``..., ``stop``.

    ``most_allocated``: kube-scheduler scores these resources with MostAllocated
    (``ScoredCluster``); empty: its default scoring."""

    def __init__(
        self, root: Path, nodes: Sequence[inventory.Node], most_allocated: Sequence[str] = ()
    ) -> None:
        self.nodes = list(nodes)
        self.cluster = ScoredCluster(root, "dra", most_allocated=tuple(most_allocated))
        self.name = "dra, NPU MostAllocated" if most_allocated else "dra, default scoring"
        self.api: kubernetes.client.ApiClient | None = None
        self.outcomes: Outcomes | None = None
        self.templates: set[str] = set()  # the ResourceClaimTemplates created

    def start(self) -> Json:
        began = time.monotonic()
        self.cluster.start()
        api = self.api = self.cluster.client(16)
        core = kubernetes.client.CoreV1Api(api)
        scale_cluster._done(
            core.create_namespace({"metadata": {"name": NAMESPACE}}, _preload_content=False)
        )
        for index, node in enumerate(self.nodes):
            scale_cluster._done(core.create_node(kwok_node(index, node), _preload_content=False))
        self._wait(
            "the default ServiceAccount and every node Ready", lambda: self._ready(core), 300
        )
        writer = publisher.Publisher(dra_cluster.KubeSlices(api, scale_dra.CALL_TIMEOUT))
        scale_dra._quiet()
        published = 0
        for node in self.nodes:
            built = pool(node)
            writer.publish(node.name, built)
            published += len(built)
        self._wait(
            f"{published} ResourceSlices listed",
            lambda: scale_dra.count_slices(api) >= published,
            60,
        )
        time.sleep(2)  # kube-scheduler's informers see the last slices
        self.outcomes = Outcomes(api)
        self.outcomes.thread.start()
        return {"up_seconds": round(time.monotonic() - began, 1), "resource_slices": published}

    def _ready(self, core: kubernetes.client.CoreV1Api) -> bool:
        try:
            core.read_namespaced_service_account("default", NAMESPACE, _preload_content=False)
        except kubernetes.client.exceptions.ApiException:
            return False
        listed = json.loads(core.list_node(_preload_content=False).data)["items"]
        ready = {
            item["metadata"]["name"]
            for item in listed
            for condition in (item.get("status") or {}).get("conditions") or []
            if condition.get("type") == "Ready" and condition.get("status") == "True"
        }
        return all(node.name in ready for node in self.nodes)

    @staticmethod
    def _wait(what: str, check: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise PackingError(f"{what}: not after {timeout:g} s")
            time.sleep(0.5)

    def place(self, pods: Sequence[planfiles.WorkloadPod], prefix: str) -> Json:
        """Each pod created in turn and waited for; the refused ones deleted again."""
        assert self.api is not None
        assert self.outcomes is not None
        core = kubernetes.client.CoreV1Api(self.api)
        resource = kubernetes.client.ResourceV1Api(self.api)
        seconds: list[float] = []
        refused: dict[str, str] = {}
        for pod in pods:
            body, templates = admitted(pod, prefix)
            for template in templates:
                if template["metadata"]["name"] not in self.templates:
                    self._template(resource, template)
            name = body["metadata"]["name"]
            began = time.monotonic()
            scale_cluster._done(core.create_namespaced_pod(NAMESPACE, body, _preload_content=False))
            outcome = self.outcomes.wait(name, POD_TIMEOUT)
            seconds.append(time.monotonic() - began)
            if outcome is None:
                raise PackingError(
                    f"pod {name}: neither bound nor unschedulable after {POD_TIMEOUT:g} s"
                )
            if outcome == "refused":
                refused[name] = self.outcomes.refused[name]
                scale_cluster._done(
                    core.delete_namespaced_pod(name, NAMESPACE, _preload_content=False)
                )
        return {"seconds": seconds, "refused": refused, "bound": dict(self.outcomes.bound)}

    def _template(self, resource: kubernetes.client.ResourceV1Api, body: Json) -> None:
        try:
            scale_cluster._done(
                resource.create_namespaced_resource_claim_template(
                    NAMESPACE, body, _preload_content=False
                )
            )
        except kubernetes.client.exceptions.ApiException as exc:
            if exc.status != 409:
                raise PackingError(
                    f"ResourceClaimTemplate {body['metadata']['name']}: {exc}"
                ) from exc
        self.templates.add(body["metadata"]["name"])

    def allocations(self) -> dict[str, list[tuple[str, str]]]:
        """Pod name -> the (node, device) pairs its claims were allocated."""
        assert self.api is not None
        resource = kubernetes.client.ResourceV1Api(self.api)
        answer = resource.list_namespaced_resource_claim(NAMESPACE, _preload_content=False)
        found: dict[str, list[tuple[str, str]]] = {}
        for claim in json.loads(answer.data)["items"]:
            status = claim.get("status") or {}
            results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
            owners = [
                r["name"] for r in status.get("reservedFor") or [] if r.get("resource") == "pods"
            ]
            owners = owners or [o["name"] for o in claim["metadata"].get("ownerReferences") or []]
            for owner in owners:
                found.setdefault(owner, []).extend(
                    (r["pool"], r["device"])
                    for r in results
                    if r.get("driver") == draclasses.DRIVER
                )
        return found

    def clear(self) -> None:
        """Delete every pod of the namespace and wait until no claim is left."""
        assert self.api is not None
        assert self.outcomes is not None
        core = kubernetes.client.CoreV1Api(self.api)
        resource = kubernetes.client.ResourceV1Api(self.api)
        scale_cluster._done(
            core.delete_collection_namespaced_pod(
                NAMESPACE, grace_period_seconds=0, _preload_content=False
            )
        )

        def empty() -> bool:
            pods = json.loads(core.list_namespaced_pod(NAMESPACE, _preload_content=False).data)
            claims = json.loads(
                resource.list_namespaced_resource_claim(NAMESPACE, _preload_content=False).data
            )
            return not pods["items"] and not claims["items"]

        self._wait("every pod and claim of the first trace gone", empty, CLEAR_TIMEOUT)
        with self.outcomes.changed:
            self.outcomes.bound.clear()
            self.outcomes.refused.clear()

    def stop(self) -> None:
        if self.outcomes is not None:
            self.outcomes.stopping.set()
        with signals_deferred():
            self.cluster.stop()
