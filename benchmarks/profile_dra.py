"""Where kube-scheduler's time goes in ``bench_scale.py --mode dra``, and what vnpu's layout changes.

Runs the dra mode of the scale benchmark (``bench_scale``'s ``prepare`` and ``run_pods`` on a
``scale_cluster.Cluster``: a real control plane, KWOK nodes of 8 Ascend910B3 chips) once per
*variant* and, while the pods are being scheduled, fetches a CPU profile from kube-scheduler's
secure port (``/debug/pprof/profile?seconds=N``, the benchmark's admin client certificate, in
``system:masters``) and, with ``--apiserver``, from kube-apiserver (started for the run without
the control plane's ``--profiling=false``). Each profile is saved under ``--out`` with the text
of ``go tool pprof -top -cum`` and ``-top`` beside it.

A variant changes what vnpu controls, in the benchmark only (nothing of vnpu is edited):

* the ResourceSlices published for each node: a transform of what ``vnpu_dra_driver.slices``
  builds (whole devices in a slice of their own ahead of the placements, fewer placements,
  whole devices only, fewer attributes);
* the DeviceClasses (``vnpu_core.draclasses``; the whole-chip class's CEL selector rewritten);
* how the pod asks: the extended resource ``huawei.com/Ascend910B3: 1`` (served by the
  whole-chip class) or a ResourceClaimTemplate of one whole chip.

Besides ``bench_scale``'s figures each run reports kube-apiserver's requests by verb and
resource over the run (count, mean ms), when the pods' claims went through PreBind's writes as
the benchmark's watches saw them (``Stages``), how many pods each node got, and
kube-scheduler's opportunistic-batching attempts. The ``prune`` variants play a driver that
republishes its node's pool after each allocation without the devices that allocation made
unallocatable (``Pruner``).

``--pairs`` runs the baseline right before each variant (the machine is shared: compare only
runs made back to back), ``--repeat`` times. One JSON line per run on stdout, a Markdown table
at the end::

    .venv/bin/python benchmarks/profile_dra.py --variants baseline --apiserver
    .venv/bin/python benchmarks/profile_dra.py --pairs --repeat 2 \
        --variants whole-first,one-per-template,whole-only,claim-template
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import bench_scale
import kubernetes
import scale_cluster
import scale_dra

from vnpu_core import catalog, draclasses
from vnpu_dra_driver import cluster as dra_cluster
from vnpu_dra_driver import publisher, slices
from vnpu_sandbox.platform import controlplane

Json = dict[str, Any]
DOMAIN = draclasses.DRIVER
OUT = Path(tempfile.gettempdir()) / "vnpu-dra-profile"
TEMPLATE_NAME = "npu-whole"
CLAIM_NAME = "npu"


def log(text: str) -> None:
    print(f"profile_dra: {text}", file=sys.stderr, flush=True)


# -- slice layouts: transforms of what vnpu_dra_driver.slices builds ---------------------------


def _devices_of(built: Sequence[Json]) -> tuple[list[Json], list[Json]]:
    """(the counter slices, every device in slice order) of one node's pool."""
    counters = [s for s in built if s["spec"].get("sharedCounters")]
    devices = [d for s in built for d in s["spec"].get("devices") or []]
    return counters, devices


def _is_whole(device: Json) -> bool:
    return device["attributes"]["template"]["string"] == draclasses.WHOLE


def _repool(node: str, counters: list[Json], groups: list[list[Json]]) -> list[Json]:
    """The pool again: the counter slices, then one device slice per non-empty group, in order
    (slice names sort as listed: the allocator walks a pool's slices by name)."""
    groups = [g for g in groups if g]
    out = [copy.deepcopy(s) for s in counters]
    template = copy.deepcopy(counters[0]) if counters else None
    for i, group in enumerate(groups):
        if template is None:
            body = {
                "apiVersion": slices.API_VERSION,
                "kind": "ResourceSlice",
                "metadata": {"name": "", "labels": dict(slices.LABELS)},
                "spec": {"driver": slices.DRIVER, "nodeName": node, "pool": {"name": node}},
            }
        else:
            body = copy.deepcopy(template)
            body["spec"].pop("sharedCounters", None)
        body["metadata"]["name"] = slices.slice_name(node, "devices", i)
        body["spec"]["devices"] = group
        out.append(body)
    for s in out:
        s["spec"]["pool"] = {"name": node, "generation": 1, "resourceSliceCount": len(out)}
    return out


def layout_baseline(node: str, built: Sequence[Json]) -> list[Json]:
    return [copy.deepcopy(s) for s in built]


def layout_whole_first(node: str, built: Sequence[Json]) -> list[Json]:
    """The 8 whole devices in ``devices-0``, the placements in ``devices-1``."""
    counters, devices = _devices_of(built)
    whole = [d for d in devices if _is_whole(d)]
    rest = [d for d in devices if not _is_whole(d)]
    return _repool(node, counters, [whole, rest])


def layout_one_per_template(node: str, built: Sequence[Json]) -> list[Json]:
    """Whole devices first, then one placement per template and chip (24 devices a node)."""
    counters, devices = _devices_of(built)
    whole = [d for d in devices if _is_whole(d)]
    rest = [d for d in devices if not _is_whole(d) and d["name"].endswith("-0")]
    return _repool(node, counters, [whole, rest])


def layout_whole_only(node: str, built: Sequence[Json]) -> list[Json]:
    """Whole devices only, consuming no counters, no counter sets: 8 devices in one slice."""
    _, devices = _devices_of(built)
    whole = []
    for device in devices:
        if _is_whole(device):
            bare = copy.deepcopy(device)
            bare.pop("consumesCounters", None)
            whole.append(bare)
    return _repool(node, [], [whole])


def layout_whole_only_counters(node: str, built: Sequence[Json]) -> list[Json]:
    """Whole devices only, still consuming their chip's counter set."""
    counters, devices = _devices_of(built)
    return _repool(node, counters, [[d for d in devices if _is_whole(d)]])


LEAN_KEEP = ("model", "template")


def _lean(device: Json) -> Json:
    device = copy.deepcopy(device)
    device["attributes"] = {k: v for k, v in device["attributes"].items() if k in LEAN_KEEP}
    device.pop("capacity", None)
    return device


def layout_lean(node: str, built: Sequence[Json]) -> list[Json]:
    """Baseline order, each device with ``model`` and ``template`` only (no capacity)."""
    counters, devices = _devices_of(built)
    return _repool(node, counters, [[_lean(d) for d in devices]])


def layout_whole_first_lean(node: str, built: Sequence[Json]) -> list[Json]:
    counters, devices = _devices_of(built)
    whole = [_lean(d) for d in devices if _is_whole(d)]
    rest = [_lean(d) for d in devices if not _is_whole(d)]
    return _repool(node, counters, [whole, rest])


def layout_per_chip(node: str, built: Sequence[Json]) -> list[Json]:
    """One device slice per chip (its whole device and placements), counters as built."""
    counters, devices = _devices_of(built)
    chips: dict[str, list[Json]] = {}
    for d in devices:
        chips.setdefault(d["attributes"]["index"]["int"], []).append(d)
    return _repool(node, counters, [chips[k] for k in sorted(chips)])


Layout = Callable[[str, Sequence[Json]], list[Json]]

# -- DeviceClasses ------------------------------------------------------------------------------


def classes_default() -> list[Json]:
    return [dict(c) for c in draclasses.device_classes(catalog.BUILTIN)]


def _rewrite_whole(expression: Callable[[catalog.ChipModel], str]) -> list[Json]:
    """The default classes, the whole-chip class of each model with ``expression``."""
    found = classes_default()
    names = {draclasses.class_name(m.resource_name, m): m for m in catalog.BUILTIN}
    for c in found:
        model = names.get(c["metadata"]["name"])
        if model is not None:
            c["spec"] = dict(c["spec"])
            c["spec"]["selectors"] = [{"cel": {"expression": expression(model)}}]
    return found


def classes_template_first() -> list[Json]:
    """The most selective attribute first: ``template``, then driver and model."""
    return _rewrite_whole(
        lambda m: (
            f"device.attributes['{DOMAIN}'].template == '{draclasses.WHOLE}' && "
            f"device.driver == '{DOMAIN}' && device.attributes['{DOMAIN}'].model == '{m.common_word}'"
        )
    )


def classes_template_only() -> list[Json]:
    """The driver and the template, no model check (one model in the cluster)."""
    return _rewrite_whole(
        lambda m: (
            f"device.driver == '{DOMAIN}' && "
            f"device.attributes['{DOMAIN}'].template == '{draclasses.WHOLE}'"
        )
    )


# -- variants -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    layout: Layout = layout_baseline
    classes: Callable[[], list[Json]] = classes_default
    request: str = "extended"  # or "template": a ResourceClaimTemplate
    prune: bool = False  # republish a node's pool on each allocation (``Pruner``)
    note: str = ""


VARIANTS = {
    v.name: v
    for v in (
        Variant("plain", note="bench_scale's plain mode: no DRA, the chips a node resource"),
        Variant("baseline", note="slices.build as is; pods ask the extended resource"),
        Variant("whole-first", layout_whole_first, note="whole devices in their own slice, first"),
        Variant(
            "one-per-template",
            layout_one_per_template,
            note="whole slice first, one placement per template and chip (24 devices)",
        ),
        Variant("whole-only", layout_whole_only, note="8 whole devices, no counters"),
        Variant(
            "whole-only-counters",
            layout_whole_only_counters,
            note="8 whole devices consuming their counter sets",
        ),
        Variant("lean-attrs", layout_lean, note="baseline, attributes model+template only"),
        Variant("whole-first-lean", layout_whole_first_lean, note="whole-first and lean"),
        Variant("per-chip", layout_per_chip, note="one device slice per chip"),
        Variant(
            "cel-template-first",
            classes=classes_template_first,
            note="whole class: template check first",
        ),
        Variant(
            "cel-template-only",
            classes=classes_template_only,
            note="whole class: driver and template only",
        ),
        Variant("claim-template", request="template", note="pods use a ResourceClaimTemplate"),
        Variant(
            "whole-first-template",
            layout_whole_first,
            request="template",
            note="whole-first and a ResourceClaimTemplate",
        ),
        Variant(
            "prune",
            prune=True,
            note="baseline layout; on each allocation the node's pool is republished "
            "without the devices that allocation made unallocatable",
        ),
        Variant(
            "whole-first-prune",
            layout_whole_first,
            prune=True,
            note="whole-first layout, pruned on each allocation",
        ),
        Variant(
            "whole-first-prune-template",
            layout_whole_first,
            request="template",
            prune=True,
            note="whole-first, pruned, pods use a ResourceClaimTemplate",
        ),
        Variant(
            "whole-only-template",
            layout_whole_only,
            request="template",
            note="whole-only and a ResourceClaimTemplate",
        ),
    )
}


# -- the run ----------------------------------------------------------------------------------


@contextlib.contextmanager
def patched(
    variant: Variant, apiserver_profiling: bool, scheduler_args: Sequence[str] = ()
) -> Iterator[None]:
    """For the duration of one run: the variant's DeviceClasses and slices, and
    kube-apiserver with profiling when asked."""
    classes = variant.classes()
    old_classes = scale_cluster.draclasses
    old_publish = scale_dra.publish
    old_api = controlplane.api_server
    old_scheduler = controlplane.scheduler

    def scheduler(*args: Any, **kwargs: Any) -> Any:
        component = old_scheduler(*args, **kwargs)
        return dataclasses.replace(component, argv=(*component.argv, *scheduler_args))

    class Shim:
        WHOLE = draclasses.WHOLE

        @staticmethod
        def device_classes(_models: object) -> list[Json]:
            return classes

    def api_server(plane: controlplane.Plane) -> Any:
        component = old_api(plane)
        argv = tuple(a for a in component.argv if a != "--profiling=false")
        return dataclasses.replace(component, argv=argv)

    def publish(api: kubernetes.client.ApiClient, names: Sequence[str]) -> Json:
        return publish_layout(api, names, variant.layout)

    scale_cluster.draclasses = Shim
    scale_dra.publish = publish
    if apiserver_profiling:
        controlplane.api_server = api_server
    controlplane.scheduler = scheduler
    try:
        yield
    finally:
        scale_cluster.draclasses = old_classes
        scale_dra.publish = old_publish
        controlplane.api_server = old_api
        controlplane.scheduler = old_scheduler


def publish_layout(api: kubernetes.client.ApiClient, names: Sequence[str], layout: Layout) -> Json:
    """``scale_dra.publish`` with the variant's layout of each node's pool."""
    scale_dra._quiet()
    model = scale_cluster.chip_model()
    writer = publisher.Publisher(dra_cluster.KubeSlices(api, scale_dra.CALL_TIMEOUT))
    shapes: list[tuple[int, int]] = []

    def one(name: str) -> int:
        built = layout(name, slices.build(name, scale_dra.chips(name, model), model))
        devices = sum(len(s["spec"].get("devices") or []) for s in built)
        shapes.append((len(built), devices))
        try:
            writer.publish(name, built)
        except Exception as exc:
            raise scale_cluster.ScaleError(f"the ResourceSlices of {name}: {exc}") from exc
        return len(built)

    began = time.monotonic()
    with ThreadPoolExecutor(scale_dra.PUBLISH_THREADS, thread_name_prefix="slices") as pool:
        written = sum(pool.map(one, names))
    seconds = time.monotonic() - began
    listed = scale_dra.count_slices(api)
    if listed < written:
        raise scale_cluster.ScaleError(f"{written} ResourceSlices written, {listed} listed")
    return {
        "resource_slices": written,
        "slices_publish_seconds": round(seconds, 1),
        "devices_per_node": shapes[0][1] if shapes else 0,
        "slices_per_node": shapes[0][0] if shapes else 0,
    }


def claim_template(model: catalog.ChipModel) -> Json:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": TEMPLATE_NAME},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "chip",
                            "exactly": {
                                "deviceClassName": draclasses.class_name(
                                    model.resource_name, model
                                ),
                                "count": 1,
                            },
                        }
                    ]
                }
            }
        },
    }


def template_pod(name: str) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": bench_scale.IMAGE,
                    "resources": {"claims": [{"name": CLAIM_NAME}]},
                }
            ],
            "resourceClaims": [{"name": CLAIM_NAME, "resourceClaimTemplateName": TEMPLATE_NAME}],
            "terminationGracePeriodSeconds": 0,
        },
    }


class Profiler:
    """CPU profiles of kube-scheduler (and kube-apiserver) from the first pod create until
    ``join``: back-to-back profiles of ``seconds`` each (the last one may run past the pods),
    merged into one file per process with ``go tool pprof -proto``."""

    def __init__(
        self, cluster: scale_cluster.Cluster, stem: Path, seconds: int, apiserver: bool
    ) -> None:
        self.cluster = cluster
        self.stem = stem
        self.seconds = seconds
        self.targets = {
            "kube-scheduler": controlplane.https(cluster.plane.ports.scheduler),
        }
        if apiserver:
            self.targets["kube-apiserver"] = cluster.plane.api_url
        self.started = threading.Event()
        self.stopping = threading.Event()
        self.parts: dict[str, list[Path]] = {name: [] for name in self.targets}
        self.saved: dict[str, str] = {}
        self.errors: dict[str, str] = {}
        self.threads = [
            threading.Thread(target=self._fetch, args=(name, base), daemon=True)
            for name, base in self.targets.items()
        ]
        for thread in self.threads:
            thread.start()

    def _fetch(self, name: str, base: str) -> None:
        self.started.wait()
        url = f"{base.rstrip('/')}/debug/pprof/profile?seconds={self.seconds}"
        while not self.stopping.is_set():
            path = self.stem.parent / f"{self.stem.name}-{name}.part{len(self.parts[name])}"
            try:
                with urllib.request.urlopen(
                    url, timeout=self.seconds + 60, context=self.cluster.tls
                ) as answer:
                    path.write_bytes(answer.read())
            except Exception as exc:  # reported in the run's figures, never fatal
                self.errors[name] = repr(exc)
                return
            self.parts[name].append(path)

    def join(self) -> None:
        self.started.set()  # a run that never created a pod still ends
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=self.seconds + 90)
        for name, parts in self.parts.items():
            if not parts:
                continue
            merged = self.stem.parent / f"{self.stem.name}-{name}.pprof"
            with merged.open("wb") as out:
                done = subprocess.run(
                    ["go", "tool", "pprof", "-proto", *map(str, parts)],
                    stdout=out,
                    stderr=subprocess.PIPE,
                    check=False,
                    timeout=300,
                )
            if done.returncode:
                self.errors[name] = done.stderr.decode(errors="replace")[-300:]
                continue
            for part in parts:
                part.unlink()
            self.saved[name] = str(merged)


def pprof_text(path: str, lines: int) -> None:
    """``go tool pprof -top -cum`` and ``-top`` of ``path``, next to it as .txt."""
    for flags, suffix in ((["-top", "-cum"], "top-cum"), (["-top"], "top")):
        out = Path(path).with_suffix(f".{suffix}.txt")
        done = subprocess.run(
            ["go", "tool", "pprof", *flags, f"-nodecount={lines}", path],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        out.write_text(done.stdout + done.stderr, encoding="utf-8")


class Stages:
    """When each pod's claim went through PreBind's writes, as the benchmark's watches see
    them: the claim created (the extended-resource claim: by kube-scheduler in PreBind; from a
    template: by kube-controller-manager before scheduling), allocated and reserved for the pod
    (PreBind's status update), the pod's claim status written (PreBind's pod status patch, for
    the extended resource), the pod bound (Bind, after PreBind's wait for its claim cache)."""

    def __init__(
        self,
        api: kubernetes.client.ApiClient,
        on_claim: Callable[[Json], None] | None = None,
    ) -> None:
        self.resource = kubernetes.client.ResourceV1Api(api)
        self.on_claim = on_claim
        self.claim_created: dict[str, float] = {}
        self.claim_allocated: dict[str, float] = {}
        self.pod_claim_status: dict[str, float] = {}
        self.pod_bound: dict[str, float] = {}
        self.placed: dict[str, str] = {}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._claims, name="claim-watch", daemon=True)
        self.thread.start()

    def pod_changed(self, pod: Json) -> None:
        now = time.monotonic()
        name = pod["metadata"]["name"]
        status = pod.get("status") or {}
        if status.get("extendedResourceClaimStatus"):
            self.pod_claim_status.setdefault(name, now)
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            self.pod_bound.setdefault(name, now)
            self.placed[name] = node

    def _see(self, claim: Json) -> None:
        now = time.monotonic()
        if self.on_claim is not None:
            self.on_claim(claim)
        owners = claim["metadata"].get("ownerReferences") or []
        pod = next((o["name"] for o in owners if o.get("kind") == "Pod"), None)
        if pod is None:
            return
        self.claim_created.setdefault(pod, now)
        status = claim.get("status") or {}
        if status.get("allocation") and status.get("reservedFor"):
            self.claim_allocated.setdefault(pod, now)

    def _claims(self) -> None:
        version = ""
        while not self.stopping.is_set():
            try:
                if not version:
                    answer = self.resource.list_namespaced_resource_claim(
                        bench_scale.NAMESPACE, _preload_content=False
                    )
                    listed = json.loads(answer.data)
                    for claim in listed["items"]:
                        self._see(claim)
                    version = listed["metadata"]["resourceVersion"]
                stream = self.resource.list_namespaced_resource_claim(
                    bench_scale.NAMESPACE, watch=True, resource_version=version,
                    timeout_seconds=60, allow_watch_bookmarks=True, _preload_content=False,
                    _request_timeout=90,
                )  # fmt: skip
            except Exception:
                version = ""
                time.sleep(0.5)
                continue
            try:
                for event in scale_cluster.iter_events(stream):
                    if event["type"] == "ERROR":
                        version = ""
                        break
                    version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._see(event["object"])
            except Exception:
                pass
            finally:
                stream.release_conn()

    def figures(self) -> Json:
        def gap(start: dict[str, float], end: dict[str, float]) -> Json:
            values = sorted(end[p] - start[p] for p in start if p in end)
            if not values:
                return {}
            return {
                "n": len(values),
                "p50_ms": round(1000 * values[len(values) // 2], 1),
                "p90_ms": round(1000 * values[int(len(values) * 0.9)], 1),
                "mean_ms": round(1000 * sum(values) / len(values), 1),
                "over_1s": sum(v > 1.0 for v in values),
            }

        self.stopping.set()
        found = {
            "claim_created_to_allocated": gap(self.claim_created, self.claim_allocated),
            "claim_allocated_to_pod_status": gap(self.claim_allocated, self.pod_claim_status),
            "pod_status_to_bound": gap(self.pod_claim_status, self.pod_bound),
            "claim_allocated_to_bound": gap(self.claim_allocated, self.pod_bound),
            "claim_created_to_bound": gap(self.claim_created, self.pod_bound),
        }
        per_node: dict[str, int] = {}
        for node in self.placed.values():
            per_node[node] = per_node.get(node, 0) + 1
        spread: dict[int, int] = {}
        for count in per_node.values():
            spread[count] = spread.get(count, 0) + 1
        return {
            "prebind_stages": {k: v for k, v in found.items() if v},
            "nodes_by_pods": dict(sorted(spread.items())),  # pods on a node -> nodes
        }


def prune(node: str, built: Sequence[Json], whole: set[int], parts: set[int]) -> list[Json]:
    """``built`` without the devices no claim can get any more: the placements of a chip
    whose whole device is allocated, the whole device of a chip holding a placement."""
    counters = [s for s in built if s["spec"].get("sharedCounters")]
    groups = []
    for piece in built:
        kept = []
        for device in piece["spec"].get("devices") or []:
            chip = device["attributes"]["index"]["int"]
            if _is_whole(device) and chip in parts:
                continue
            if not _is_whole(device) and chip in whole:
                continue
            kept.append(device)
        groups.append(kept)
    return _repool(node, counters, groups)


class Pruner:
    """What vnpu's driver could do when its node's allocations change (it sees the claims):
    republish the pool (``publisher.Publisher``: every slice rewritten at the next pool
    generation) without the devices that cannot be allocated any more, so that kube-scheduler
    does not evaluate their selectors for every pod on a node whose chips are taken. One
    publish at a time per node; allocations seen meanwhile are folded into the next one."""

    def __init__(self, api: kubernetes.client.ApiClient, layout: Layout, threads: int = 8) -> None:
        self.writer = publisher.Publisher(dra_cluster.KubeSlices(api, scale_dra.CALL_TIMEOUT))
        self.layout = layout
        self.model = scale_cluster.chip_model()
        self.whole: dict[str, set[int]] = {}
        self.parts: dict[str, set[int]] = {}
        self.seen: set[str] = set()
        self.lock = threading.Lock()
        self.dirty: set[str] = set()
        self.busy: set[str] = set()
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="prune")
        self.publishes = 0
        self.seconds: list[float] = []
        self.errors: list[str] = []

    def claim_changed(self, claim: Json) -> None:
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            return
        uid = claim["metadata"]["uid"]
        touched = set()
        with self.lock:
            if uid in self.seen:
                return
            self.seen.add(uid)
            for result in (allocation.get("devices") or {}).get("results") or []:
                device = draclasses.parse_device(result.get("device", ""))
                if result.get("driver") != DOMAIN or device is None:
                    continue
                node = result["pool"]
                held = self.whole if device.kind == "whole" else self.parts
                held.setdefault(node, set()).add(device.phy)
                touched.add(node)
        for node in touched:
            self._mark(node)

    def _mark(self, node: str) -> None:
        with self.lock:
            if node in self.busy:
                self.dirty.add(node)
                return
            self.busy.add(node)
        self.pool.submit(self._publish, node)

    def _publish(self, node: str) -> None:
        while True:
            with self.lock:
                self.dirty.discard(node)
                whole = set(self.whole.get(node, ()))
                parts = set(self.parts.get(node, ()))
            began = time.monotonic()
            built = self.layout(
                node, slices.build(node, scale_dra.chips(node, self.model), self.model)
            )
            try:
                self.writer.publish(node, prune(node, built, whole, parts))
                self.publishes += 1
                self.seconds.append(time.monotonic() - began)
            except Exception as exc:  # counted, never fatal
                self.errors.append(f"{node}: {exc}")
            with self.lock:
                if node not in self.dirty:
                    self.busy.discard(node)
                    return

    def figures(self) -> Json:
        self.pool.shutdown(wait=True)
        ordered = sorted(self.seconds)
        return {
            "prune_publishes": self.publishes,
            "prune_publish_p50_ms": round(1000 * ordered[len(ordered) // 2]) if ordered else None,
            "prune_errors": len(self.errors),
            "prune_first_errors": self.errors[:3],
        }


def api_metrics(cluster: scale_cluster.Cluster) -> str:
    url = f"{cluster.plane.api_url.rstrip('/')}/metrics"
    with urllib.request.urlopen(url, timeout=60, context=cluster.tls) as answer:
        return str(answer.read().decode("utf-8", errors="replace"))


API_RESOURCES = ("pods", "resourceclaims", "bindings", "events", "leases", "nodes")


def api_requests(before: str, after: str) -> Json:
    """kube-apiserver's requests over the run by verb, resource and subresource: count and
    mean ms (``apiserver_request_duration_seconds``; watches and lists of other resources left
    out), the most frequent first."""
    name = "apiserver_request_duration_seconds"

    def read(text: str) -> dict[str, tuple[float, float]]:
        found: dict[str, list[float]] = {}
        for suffix, slot in (("_count", 0), ("_sum", 1)):
            for labels, value in scale_cluster.samples(text, name + suffix):
                if labels.get("resource") not in API_RESOURCES or labels.get("verb") == "WATCH":
                    continue
                sub = labels.get("subresource") or ""
                key = f"{labels.get('verb')} {labels['resource']}{'/' + sub if sub else ''}"
                found.setdefault(key, [0.0, 0.0])[slot] += value
        return {k: (v[0], v[1]) for k, v in found.items()}

    old, new = read(before), read(after)
    rows = []
    for key, (count, total) in new.items():
        c0, t0 = old.get(key, (0.0, 0.0))
        if count - c0 > 0:
            rows.append((key, int(count - c0), round(1000 * (total - t0) / (count - c0), 2)))
    rows.sort(key=lambda r: -r[1])
    return {key: [count, mean] for key, count, mean in rows}


def run_variant(args: argparse.Namespace, variant: Variant, tag: str) -> Json:
    root = args.out / f"run-{tag}"
    mode = "plain" if variant.name == "plain" else "dra"
    cluster = scale_cluster.Cluster(root, mode)
    log(f"{tag}: {variant.name}: starting the control plane")
    began = time.monotonic()
    try:
        with patched(variant, args.apiserver, args.scheduler_arg):
            cluster.start()
            api = cluster.client()
            figures: Json = {"up_seconds": round(time.monotonic() - began, 1)}
            figures |= bench_scale.prepare(cluster, api, args.nodes)
        model = scale_cluster.chip_model()
        if variant.request == "template":
            kubernetes.client.ResourceV1Api(api).create_namespaced_resource_claim_template(
                bench_scale.NAMESPACE, claim_template(model), _preload_content=False
            )
        names = [f"pod-{i:06d}" for i in range(args.pods)]
        profiler = Profiler(cluster, args.out / tag, args.profile_seconds, args.apiserver)

        def body(name: str) -> Json:
            profiler.started.set()
            if variant.request == "template":
                return template_pod(name)
            return bench_scale.pod_body(name, mode, model.resource_name)

        api_before = api_metrics(cluster)
        kube_before = cluster.metrics("kube-scheduler")
        pruner = Pruner(api, variant.layout) if variant.prune else None
        stages = Stages(api, pruner.claim_changed if pruner is not None else None)
        figures |= bench_scale.run_pods(args, cluster, api, names, body, stages)
        figures |= stages.figures()
        if pruner is not None:
            figures |= pruner.figures()
        figures["batch_attempts"] = bench_scale.counted(
            kube_before,
            cluster.metrics("kube-scheduler"),
            "scheduler_batch_attempts_total",
            "result",
        )
        figures["api_requests"] = api_requests(api_before, api_metrics(cluster))
        profiler.join()
        figures["profiles"] = dict(profiler.saved)
        figures["profile_errors"] = dict(profiler.errors)
    finally:
        log(f"{tag}: stopping")
        cluster.stop()
        if not args.keep:  # the logs stay; etcd's data is most of a run's 70 MB
            shutil.rmtree(root / "control-plane" / "etcd", ignore_errors=True)
    for path in figures.get("profiles", {}).values():
        pprof_text(path, args.lines)
    return {"variant": variant.name, "tag": tag, "nodes": args.nodes} | figures


KEYS = (
    ("pods/s", "pods_per_second"),
    ("middle pods/s", "middle_pods_per_second"),
    ("Filter p50 ms", "kube_filter_p50_ms"),
    ("Filter mean ms", "kube_filter_mean_ms"),
    ("PreBind p50 ms", "kube_prebind_p50_ms"),
    ("PreBind mean ms", "kube_prebind_mean_ms"),
    ("create->Running p50 s", "create_to_running_p50_s"),
)


def table(rows: Sequence[Json]) -> str:
    head = ["run", "variant", "devices/node", *(k for k, _ in KEYS), "sched CPU s", "api CPU s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cpu = r.get("cpu_seconds", {})
        cells = [r["tag"], r["variant"], str(r.get("devices_per_node", "-"))]
        cells += [str(r.get(key, "-")) for _, key in KEYS]
        cells += [str(cpu.get("kube-scheduler", "-")), str(cpu.get("kube-apiserver", "-"))]
        lines.append("| " + " | ".join(cells) + " |")
    by: dict[str, list[float]] = {}
    for r in rows:
        if r.get("pods_per_second"):
            by.setdefault(r["variant"], []).append(r["pods_per_second"])
    lines.append("")
    for name, values in by.items():
        lines.append(f"- {name}: pods/s {values} (median {statistics.median(values):g})")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=bench_scale.DEFAULT_NODES)
    parser.add_argument("--pods", type=int, default=400)
    parser.add_argument("--rate", type=float, default=bench_scale.DEFAULT_RATE)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument(
        "--variants",
        default="baseline",
        help=f"comma-separated, of: {', '.join(VARIANTS)}",
    )
    parser.add_argument("--pairs", action="store_true", help="the baseline before each variant")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--profile-seconds", type=int, default=5, help="length of each back-to-back profile"
    )
    parser.add_argument("--apiserver", action="store_true", help="profile kube-apiserver too")
    parser.add_argument(
        "--scheduler-arg",
        action="append",
        default=[],
        help="an extra kube-scheduler flag (e.g. --vmodule=allocator_incubating=7), repeatable",
    )
    parser.add_argument("--keep", action="store_true", help="keep each run's directory (logs)")
    parser.add_argument("--lines", type=int, default=45, help="lines of each pprof -top")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    args.variant_list = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in args.variant_list if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}: known {', '.join(VARIANTS)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    controlplane.binaries()
    scale_cluster.kwok_files()
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%H%M%S")
    plan: list[str] = []
    for _ in range(args.repeat):
        for name in args.variant_list:
            if args.pairs and name != "baseline":
                plan.append("baseline")
            plan.append(name)
    rows = []
    for i, name in enumerate(plan):
        tag = f"{stamp}-{i:02d}-{name}"
        try:
            row = run_variant(args, VARIANTS[name], tag)
        except scale_cluster.ScaleError as exc:
            log(f"{tag}: {exc}")
            continue
        rows.append(row)
        print(json.dumps(row), flush=True)
        (args.out / f"{tag}.json").write_text(json.dumps(row, indent=1), encoding="utf-8")
        log(
            f"{tag}: {row.get('pods_per_second')} pods/s, Filter p50 "
            f"{row.get('kube_filter_p50_ms')} ms, PreBind p50 {row.get('kube_prebind_p50_ms')} ms"
        )
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
