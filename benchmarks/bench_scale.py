"""KWOK for scale: pods/s from create to Running on N KWOK nodes, kube-scheduler with and without vnpu.

Standalone (``make bench`` runs it with its small defaults: 100 nodes, 400 pods, ``--mode
both``; without the binaries of ``make k8s-bin`` and ``make kwok-bin`` it says so and measures
nothing)::

    .venv/bin/python benchmarks/bench_scale.py --nodes 1000 --mode classic --pods 4000 --json
    .venv/bin/python benchmarks/bench_scale.py --nodes 1000 --mode all --timeout 1500
    .venv/bin/python benchmarks/bench_scale.py --nodes 100 --mode peers

Each run starts, in a directory of its own, the real control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler) and KWOK with N nodes of 8 Ascend910B3 chips
(``scale_cluster``). ``--mode plain``: no vnpu at all, the chips are a plain extended resource
that kube-scheduler counts alone (the machine's limit). ``--mode classic``: vnpu-scheduler is
kube-scheduler's extender (filter, prioritize, bind under the node lock) and webhook, every
node carries what vnpu's device plugin publishes, and the benchmark plays that plugin's
Allocate for the KWOK nodes (``--real-nodes K`` adds K simulated nodes whose kubelet and
device plugin run for real). ``--mode dra``: vnpu's DRA mode without vnpu-scheduler (no
extender, no webhook: the pods need no rewrite): kube-scheduler, configured as in plain,
allocates devices of the DRA driver ``npu.vnpu.io`` from the ResourceSlices the benchmark
publishes for every node before the pods come, as the driver would for 8 Ascend910B3 chips
(``scale_dra``), and the whole-chip DeviceClass serves ``huawei.com/Ascend910B3`` to it. No
kubelet prepares the claims (KWOK marks a bound pod Running), so dra's figure measures
scheduling and allocation, not the driver's Prepare. ``--mode volcano`` and ``--mode hami``:
a peer's scheduler places the pods as ``vnpu-sandbox up --scheduler <peer>`` runs it (``make
peers-bin peer-charts``) and vnpu-scheduler does not run; the nodes are annotated and the
plugin's Allocate is played as in classic, and kube-scheduler runs beside as in plain. In
volcano, vc-controller-manager and vc-scheduler (``schedulerName: volcano``; its deviceshare
plugin in HAMi mode decides the chip, as the operator guide's "Topology 2" runs it). Volcano
reads a node's chips only when the Node changes after its first scheduling session, so once
vc-scheduler has run one, every node reports again (``scale_cluster.report_again``) before the
first pod is created. In hami, HAMi's extender and webhook and the chart's own kube-scheduler
calling it (``schedulerName: hami-scheduler``, "Topology 3"), once HAMi has registered every
node. The peers' client limits are raised as kube-scheduler's and kube-controller-manager's
are (``--chart-client-limits`` keeps their charts': vc-controller-manager 50 QPS, burst 100;
HAMi's extender client-go's 5, 10; HAMi's kube-scheduler 50, 100); vc-scheduler keeps its
chart's 2000, 2000. ``--mode both`` runs plain then classic, ``--mode all`` plain, classic then
dra (vnpu's own modes), ``--mode peers`` plain, classic, volcano then hami (vnpu beside the
schedulers users run today), each on a cluster of its own. Then P pods asking
``huawei.com/Ascend910B3: 1`` (one whole chip; the same pods in every mode) are created at
``--rate`` pods/s, and each one is timed from its create request until KWOK (or the simulated
kubelet) reports it Running (in classic and the peers' modes: and the plugin's Allocate has
answered it).

Reported: pods/s from the first create to the last pod Running (and over the middle 80 % of
the pods) and each mode's ratio to plain, the extender's filter, prioritize and bind latency
and the node-lock wait (p50/p99 interpolated in vnpu-scheduler's ``/metrics`` histograms over
the run, as Prometheus' ``histogram_quantile`` does), kube-scheduler's Filter, PreBind and
Bind phases per pod (from its ``/metrics``, every mode; in dra its Filter and its PreBind,
where DynamicResources writes the claim, fill the table's filter and bind columns, and the
plugin's own PreFilter, Filter and Reserve are added as kube-scheduler samples them),
kube-scheduler's attempts by result, and the CPU seconds of each process over the run
(``/proc``; ``bench`` is this process: pod creation, the watch and the stand-in device
plugins). In volcano, vc-scheduler's own latency from its ``/metrics`` fills the filter and
bind columns: ``volcano_scheduling_stage_duration_milliseconds`` per pod, its ``Predicate``
stage (every node, every predicate plugin) and its ``Bind`` (the Binding call); with it each
session's length (``volcano_e2e_scheduling_latency_milliseconds``), its allocate action's
(``volcano_action_scheduling_latency_milliseconds``), create -> Bound as vc-scheduler times it
(``volcano_task_scheduling_latency_milliseconds``), and the pods bound with no device
decision (none, when Volcano had read every node's chips). In hami, whose extender exports no
latency, its kube-scheduler's ``scheduler_scheduling_attempt_duration_seconds`` (every plugin
and the extender's filter call) fills the filter column. ``--json`` prints one JSON object;
otherwise a Markdown section for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes
import scale_cluster
import scale_dra
import urllib3

from vnpu_core import protocol
from vnpu_sandbox.platform import controlplane, hami, volcano

Json = dict[str, Any]
NAMESPACE = "bench-scale"
IMAGE = "registry.k8s.io/pause:3.10"
PODS_PER_NODE = 4
"""Pods per node unless ``--pods`` says otherwise: half of each node's 8 chips."""
DEFAULT_NODES = 100
DEFAULT_RATE = 200.0
DEFAULT_TIMEOUT = 900.0
CREATE_THREADS = 16
CREATE_TRIES = 4
BIND_PHASE, SUCCESS = protocol.BIND_PHASE_KEY, protocol.BindPhase.SUCCESS.value
PROGRESS_SECONDS = 15.0
IDLE_SECONDS = 10.0
KUBE_POINTS = ("Filter", "PreBind", "Bind")
"""kube-scheduler's extension points reported in every mode."""
SEVERAL = {
    "both": ("plain", "classic"),
    "all": ("plain", "classic", "dra"),
    "peers": ("plain", "classic", *scale_cluster.PEER_MODES),
}
"""The ``--mode`` values that run more than one mode, one after the other: ``all`` is vnpu's
own modes beside plain, ``peers`` vnpu's classic mode beside the peers' schedulers."""
PEER_PROCESSES = {
    "volcano": ("vc-controller-manager", "vc-scheduler"),
    "hami": ("hami-scheduler", "hami-kube-scheduler"),
}
"""Each peer's processes, as the CPU figures name them."""
VOLCANO_TOP_MS = 500.0
"""The last finite bound of vc-scheduler's per-pod stage histogram: a quantile there is at
least that."""


def log(text: str) -> None:
    print(f"bench_scale: {text}", file=sys.stderr, flush=True)


# -- the command line --------------------------------------------------------------------------


def _bounded(kind: Callable[[str], Any], low: float, high: float | None = None) -> Any:
    """An argparse type: ``kind`` of the text, refused outside [low, high]."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if value < low or (high is not None and value > high):
            limit = f"from {low:g} to {high:g}" if high is not None else f"at least {low:g}"
            raise argparse.ArgumentTypeError(f"{text!r} is out of range ({limit})")
        return value

    parse.__name__ = kind.__name__
    return parse


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--nodes", type=_bounded(int, 1, 20000), default=DEFAULT_NODES, help="nodes in all"
    )
    parser.add_argument(
        "--mode",
        choices=(*scale_cluster.MODES, *SEVERAL),
        default="both",
        help="plain (kube-scheduler alone), classic (with vnpu), dra (kube-scheduler "
        "allocating vnpu's DRA devices), volcano or hami (the peer's scheduler, vnpu's device "
        "plugin played), both (plain, classic), all (plain, classic, dra) or peers (plain, "
        "classic, volcano, hami), one after the other (default both)",
    )
    parser.add_argument(
        "--pods", type=_bounded(int, 1, 200000), help=f"pods (default {PODS_PER_NODE} per node)"
    )
    parser.add_argument(
        "--rate",
        type=_bounded(float, 0.1),
        default=DEFAULT_RATE,
        help=f"pods created per second (default {DEFAULT_RATE:g})",
    )
    parser.add_argument(
        "--real-nodes",
        type=_bounded(int, 0, 20),
        default=0,
        help="classic only (the other modes' runs of both, all or peers leave them out): this "
        "many of the nodes are simulated nodes whose kubelet and device plugin run for real "
        "(default 0)",
    )
    parser.add_argument(
        "--timeout",
        type=_bounded(float, 10),
        default=DEFAULT_TIMEOUT,
        help=f"seconds to wait for every pod to run (default {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--chart-client-limits",
        action="store_true",
        help="volcano, hami: run the peer with its chart's client limits (vc-controller-manager "
        "50 QPS, burst 100; HAMi's extender 5, 10; HAMi's kube-scheduler 50, 100) instead of "
        "raising them as kube-scheduler's and kube-controller-manager's are",
    )
    parser.add_argument("--keep", type=Path, help="keep each run's directory (logs) in this one")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.json and args.mode in SEVERAL:
        parser.error(f"--json prints one run: give one of {', '.join(scale_cluster.MODES)}")
    if args.real_nodes and args.mode in ("plain", "dra", *scale_cluster.PEER_MODES):
        parser.error(f"--real-nodes {args.real_nodes}: real nodes run vnpu, so --mode classic")
    if args.real_nodes >= args.nodes:
        parser.error(f"--real-nodes {args.real_nodes}: must be fewer than --nodes {args.nodes}")
    if args.pods is None:
        args.pods = PODS_PER_NODE * args.nodes
    if args.pods > args.nodes * scale_cluster.CHIPS:
        parser.error(
            f"--pods {args.pods}: more than the {args.nodes * scale_cluster.CHIPS} chips of "
            f"--nodes {args.nodes}"
        )
    return args


# -- the pods ----------------------------------------------------------------------------------


def pod_body(name: str, mode: str, resource: str, node: str | None = None) -> Json:
    """One pod asking one whole chip; ``node``: pinned there (a real simulated node)."""
    spec: Json = {
        "containers": [{"name": "main", "image": IMAGE, "resources": {"limits": {resource: "1"}}}],
        "terminationGracePeriodSeconds": 0,
    }
    if mode == "classic":  # the webhook would set it; set here, the run does not depend on it
        spec["schedulerName"] = "vnpu-scheduler"
    if mode == "volcano":
        spec["schedulerName"] = volcano.SCHEDULER_NAME
    if mode == "hami":  # HAMi's webhook would set it too
        spec["schedulerName"] = hami.SCHEDULER_NAME
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def pinned(names: Sequence[str], nodes: int, real: Sequence[str]) -> dict[str, str]:
    """The pods that go to the real nodes: their share of the pods, spread over the run.

    The policy packs pods onto the fullest nodes, so unpinned pods would rarely reach the
    few real nodes; pod ``i`` goes to real node ``i mod nodes`` when there is one.
    """
    return {name: real[i % nodes] for i, name in enumerate(names) if i % nodes < len(real)}


class PodTimes:
    """A watch of the benchmark's pods: when each was created, bound and seen Running."""

    def __init__(
        self,
        api: kubernetes.client.ApiClient,
        on_pod: Callable[[Json], None] | None,
        allocated: bool,
    ) -> None:
        self.core = kubernetes.client.CoreV1Api(api)
        self.on_pod = on_pod
        self.allocated = allocated  # Running counts once the device plugin's Allocate is done
        self.created: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.placed: dict[str, str] = {}  # pod -> node
        self.undecided: set[str] = set()  # bound with no bind phase: no device decision
        self.stopping = threading.Event()
        self.restarts = 0
        self.thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)

    def _see(self, pod: Json) -> None:
        now = time.monotonic()
        name = pod["metadata"]["name"]
        node = (pod.get("spec") or {}).get("nodeName")
        notes = pod["metadata"].get("annotations") or {}
        if node:
            self.bound.setdefault(name, now)
            self.placed[name] = node
            if self.allocated and BIND_PHASE not in notes:
                self.undecided.add(name)
        done = not self.allocated or notes.get(BIND_PHASE) == SUCCESS
        if (pod.get("status") or {}).get("phase") == "Running" and done:
            self.running.setdefault(name, now)
        if self.on_pod is not None:
            self.on_pod(pod)

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
                self.restarts += 1
                time.sleep(0.5)
                continue
            try:
                for event in scale_cluster.iter_events(stream):
                    if event["type"] == "ERROR":  # 410: the revision is gone, list again
                        version = ""
                        break
                    version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._see(event["object"])
            except (urllib3.exceptions.HTTPError, ValueError):
                self.restarts += 1
            finally:
                stream.release_conn()


def create_pods(
    api: kubernetes.client.ApiClient,
    names: Sequence[str],
    rate: float,
    body: Callable[[str], Json],
    sent: dict[str, float],
    failures: list[str],
) -> tuple[float, int]:
    """Create the pods ``rate`` a second; ``sent`` gets the time each first request went out.

    A create the API refuses for a reason retrying can fix (a 5xx, a 429, a webhook that did not
    answer, a connection error) is sent again after a pause, up to ``CREATE_TRIES`` times, as
    a workload controller would; one that still fails goes to ``failures``. Returns the seconds
    the creates took and how many were sent again."""
    core = kubernetes.client.CoreV1Api(api)
    retries = 0

    def create(name: str) -> None:
        nonlocal retries
        sent[name] = time.monotonic()
        for attempt in range(1, CREATE_TRIES + 1):
            try:
                answer = core.create_namespaced_pod(NAMESPACE, body(name), _preload_content=False)
                scale_cluster._done(answer)
                return
            except kubernetes.client.exceptions.ApiException as exc:
                if exc.status == 409:  # an earlier try landed after all
                    return
                last = f"{exc.status} {exc.reason}: {str(exc.body)[:300]}"
                if exc.status not in (429, 500, 502, 503, 504) or attempt == CREATE_TRIES:
                    break
            except urllib3.exceptions.HTTPError as exc:
                last = repr(exc)
                if attempt == CREATE_TRIES:
                    break
            retries += 1
            time.sleep(0.5 * attempt)
        failures.append(f"{name}: {last}")

    began = time.monotonic()
    with ThreadPoolExecutor(CREATE_THREADS, thread_name_prefix="create") as pool:
        for i, name in enumerate(names):
            pause = began + i / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            pool.submit(create, name)
    return time.monotonic() - began, retries


# -- numbers -----------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(1000 * seconds, 2)


def extender_figures(before: str, after: str) -> Json:
    """Filter, prioritize and bind latency and the lock wait, from vnpu-scheduler's metrics."""
    found: Json = {}
    for verb in ("filter", "prioritize", "bind"):
        buckets, total = scale_cluster.histogram(
            before, after, "vnpu_scheduler_request_duration_seconds", verb=verb
        )
        count = buckets[-1][1] if buckets else 0
        found[f"{verb}_calls"] = int(count)
        found[f"{verb}_p50_ms"] = _ms(scale_cluster.quantile(buckets, 0.5))
        found[f"{verb}_p99_ms"] = _ms(scale_cluster.quantile(buckets, 0.99))
        found[f"{verb}_mean_ms"] = _ms(total / count) if count else None
    buckets, _ = scale_cluster.histogram(before, after, "vnpu_scheduler_lock_wait_seconds")
    found["lock_wait_p50_ms"] = _ms(scale_cluster.quantile(buckets, 0.5))
    found["lock_wait_p99_ms"] = _ms(scale_cluster.quantile(buckets, 0.99))
    found["binds"] = counted(before, after, "vnpu_scheduler_binds_total", "result")
    found["bind_conflicts"] = counted(before, after, "vnpu_scheduler_bind_conflicts_total", "kind")
    return found


def kube_figures(before: str, after: str) -> Json:
    """kube-scheduler's own phases per pod, all plugins of each, unsampled, in every mode:
    Filter over all nodes, PreBind (in dra: DynamicResources writes the claim) and Bind (in
    classic: the extender's bind). A quantile past the histogram's last finite bound is that
    bound (``kube_top_ms``: at least); the mean is exact."""
    found: Json = {}
    for point in KUBE_POINTS:
        buckets, total = scale_cluster.histogram(
            before, after, "scheduler_framework_extension_point_duration_seconds",
            extension_point=point,
        )  # fmt: skip
        count = buckets[-1][1] if buckets else 0
        key = f"kube_{point.lower()}"
        found[f"{key}_p50_ms"] = _ms(scale_cluster.quantile(buckets, 0.5))
        found[f"{key}_p99_ms"] = _ms(scale_cluster.quantile(buckets, 0.99))
        found[f"{key}_mean_ms"] = _ms(total / count) if count else None
        finite = [bound for bound, _ in buckets if bound != float("inf")]
        found["kube_top_ms"] = _ms(max(finite)) if finite else None
    return found


def dra_figures(api: kubernetes.client.ApiClient, before: str, after: str, kube: Json) -> Json:
    """The table's filter and bind in dra: kube-scheduler's Filter phase and its PreBind,
    where DynamicResources writes the claim (``kube``: ``kube_figures``); the plugin's own
    latency; the claims kube-scheduler made and allocated."""
    found: Json = {"prepared": "no: KWOK runs the pods, no kubelet prepares the claims"}
    for column, point in (("filter", "filter"), ("bind", "prebind")):
        for q in ("p50", "p99"):
            found[f"{column}_{q}_ms"] = kube[f"kube_{point}_{q}_ms"]
    return found | scale_dra.plugin_figures(before, after) | scale_dra.claims(api, NAMESPACE)


def volcano_figures(before: str, after: str) -> Json:
    """vc-scheduler's own latency over the run, from its ``/metrics`` (milliseconds there):
    per pod its Predicate stage (every node; the table's filter column), its Scoring and its
    Bind (the Binding call; the bind column); per session its whole length, its opening (the
    cache's snapshot) and its allocate action; per pod create -> Bound as vc-scheduler times
    it (from the pod's creation timestamp, whole seconds). Its
    ``volcano_schedule_attempts_total`` is left out: nothing in the pinned source counts it."""
    found: Json = {}

    def spread(key: str, name: str, **labels: str) -> None:
        buckets, total = scale_cluster.histogram(before, after, name, **labels)
        count = buckets[-1][1] if buckets else 0
        for q in (0.5, 0.99):
            value = scale_cluster.quantile(buckets, q)
            found[f"{key}_p{round(100 * q)}_ms"] = None if value is None else round(value, 2)
        found[f"{key}_mean_ms"] = round(total / count, 2) if count else None
        found[f"{key}_count"] = int(count)

    stages = "volcano_scheduling_stage_duration_milliseconds"
    spread("filter", stages, stage="Predicate")
    spread("volcano_scoring", stages, stage="Scoring")
    spread("bind", stages, stage="Bind")
    spread("volcano_session", "volcano_e2e_scheduling_latency_milliseconds")
    spread("volcano_open_session", "volcano_open_session_duration_milliseconds")
    spread("volcano_allocate", "volcano_action_scheduling_latency_milliseconds", action="allocate")
    spread("volcano_bound", "volcano_task_scheduling_latency_milliseconds", stage="Bound")
    return found


def hami_figures(before: str, after: str) -> Json:
    """HAMi's latency, from its own kube-scheduler's ``/metrics`` (HAMi's extender exports no
    latency): per scheduling attempt of its profile,
    ``scheduler_scheduling_attempt_duration_seconds`` (every plugin and HAMi's filter call,
    which writes the decision on the pod; the table's filter column), and its attempts by
    result. The bind (the extender's, under the node lock) is timed by nothing of HAMi's or
    kube-scheduler's: it shows in create -> Running."""
    name = "scheduler_scheduling_attempt_duration_seconds"
    buckets, total = scale_cluster.histogram(before, after, name, profile=hami.SCHEDULER_NAME)
    count = buckets[-1][1] if buckets else 0
    finite = [bound for bound, _ in buckets if bound != float("inf")]
    return {
        "filter_p50_ms": _ms(scale_cluster.quantile(buckets, 0.5)),
        "filter_p99_ms": _ms(scale_cluster.quantile(buckets, 0.99)),
        "filter_mean_ms": _ms(total / count) if count else None,
        "filter_count": int(count),
        "hami_top_ms": _ms(max(finite)) if finite else None,
        "hami_attempts": counted(before, after, "scheduler_schedule_attempts_total", "result"),
    }


def counted(before: str, after: str, name: str, label: str) -> dict[str, int]:
    """A counter's growth between two scrapes, by the value of ``label``."""
    grown: dict[str, int] = {}
    for text, sign in ((after, 1), (before, -1)):
        for labels, value in scale_cluster.samples(text, name):
            key = labels.get(label, "")
            grown[key] = grown.get(key, 0) + sign * int(value)
    return {key: value for key, value in grown.items() if value}


def vnpu_nodes_available(text: str) -> int:
    found = scale_cluster.samples(text, "vnpu_scheduler_nodes")
    return int(sum(value for labels, value in found if labels.get("state") == "available"))


# -- one run -----------------------------------------------------------------------------------


def wait_for(what: str, check: Callable[[], bool], timeout: float, every: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise scale_cluster.ScaleError(f"{what}: not after {timeout:g} s")
        time.sleep(every)


def ready_kwok_nodes(core: kubernetes.client.CoreV1Api) -> int:
    answer = core.list_node(
        label_selector="type=kwok", resource_version="0", _preload_content=False
    )
    count = 0
    for item in json.loads(answer.data)["items"]:
        for condition in (item.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "Ready" and condition.get("status") == "True":
                count += 1
    return count


def prepare(cluster: scale_cluster.Cluster, api: kubernetes.client.ApiClient, kwok: int) -> Json:
    """The namespace and the KWOK nodes, all Ready (and available to vnpu-scheduler; in
    ``dra`` with their ResourceSlices published)."""
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": NAMESPACE}}, _preload_content=False)

    def has_account() -> bool:
        try:
            core.read_namespaced_service_account("default", NAMESPACE, _preload_content=False)
        except kubernetes.client.exceptions.ApiException:
            return False
        return True

    wait_for("the default ServiceAccount of the namespace", has_account, 60, 0.2)
    model = scale_cluster.chip_model()
    began = time.monotonic()
    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        list(
            pool.map(
                lambda i: scale_cluster._done(
                    core.create_node(
                        scale_cluster.kwok_node(i, cluster.mode, model), _preload_content=False
                    )
                ),
                range(kwok),
            )
        )
    created = time.monotonic() - began
    wait_for(f"{kwok} KWOK nodes Ready", lambda: ready_kwok_nodes(core) >= kwok, 300, 2)
    ready = time.monotonic() - began
    published: Json = {}
    if cluster.mode == "dra":
        log(f"dra: publishing the ResourceSlices of {kwok} nodes")
        published = scale_dra.publish(api, [f"kwok-{i:05d}" for i in range(kwok)])
    if cluster.mode == "classic":
        wanted = kwok + cluster.real_nodes
        wait_for(
            f"vnpu-scheduler to count {wanted} nodes available",
            lambda: vnpu_nodes_available(cluster.metrics("vnpu-scheduler")) >= wanted,
            120,
            2,
        )
    if cluster.peer is not None:
        published = start_peer(cluster, api, kwok)
    time.sleep(2)  # kube-scheduler's informers see the last nodes Ready (and slices)
    return {
        "nodes_create_seconds": round(created, 1),
        "nodes_ready_seconds": round(ready, 1),
        **published,
    }


def start_peer(cluster: scale_cluster.Cluster, api: kubernetes.client.ApiClient, kwok: int) -> Json:
    """The peer's processes once the nodes exist. Volcano: then every node's next report once
    vc-scheduler has run a session (Volcano reads a node's chips only then), then two more
    sessions, so that its cache holds every node's chips before the first pod comes. HAMi:
    until it has registered every node (``Cluster.start_peer``)."""
    names = [f"kwok-{i:05d}" for i in range(kwok)]
    log(f"{cluster.mode}: starting {', '.join(PEER_PROCESSES[cluster.mode])}")
    began = time.monotonic()
    cluster.start_peer(names)
    started = time.monotonic() - began
    if isinstance(cluster.peer, volcano.Volcano):
        peer = cluster.peer
        scale_cluster.report_again(api, names)
        seen = volcano.sessions(peer)
        wait_for(
            "vc-scheduler to run two sessions after the nodes reported",
            lambda: volcano.sessions(peer) >= seen + 2,
            60,
            0.2,
        )
    return {
        "peer_start_seconds": round(started, 1),
        "peer_ready_seconds": round(time.monotonic() - began, 1),
    }


def measure(args: argparse.Namespace, mode: str, root: Path) -> Json:
    kwok = args.nodes - (args.real_nodes if mode == "classic" else 0)
    cluster = scale_cluster.Cluster(
        root, mode, args.real_nodes if mode == "classic" else 0, args.chart_client_limits
    )
    extra = {
        "classic": " and vnpu",
        "dra": " and vnpu's DeviceClasses",
        "volcano": " and Volcano's CRDs",
        "hami": " and HAMi's webhook configuration",
    }.get(mode, "")
    log(f"{mode}: starting the control plane, KWOK{extra}")
    began = time.monotonic()
    try:
        cluster.start()
        up = time.monotonic() - began
        api = cluster.client()
        log(f"{mode}: up in {up:.0f} s; {kwok} KWOK nodes")
        figures: Json = {"up_seconds": round(up, 1), **prepare(cluster, api, kwok)}
        names = [f"pod-{i:06d}" for i in range(args.pods)]
        resource = scale_cluster.chip_model().resource_name
        agents = None
        if mode in scale_cluster.PLUGIN_MODES:
            agents = scale_cluster.NodeAgents(api, [f"kwok-{i:05d}" for i in range(kwok)])
        to_real = pinned(names, args.nodes, [spec.name for spec in cluster.specs])

        def body(name: str) -> Json:
            return pod_body(name, mode, resource, to_real.get(name))

        with agents or contextlib.nullcontext():
            figures |= run_pods(args, cluster, api, names, body, agents)
        if to_real:
            figures["real_node_pods_pinned"] = len(to_real)
        if agents is not None:
            figures["stand_in_allocates"] = len(agents.seconds)
            figures["stand_in_allocate_p50_ms"] = _ms(percentile(agents.seconds, 0.5))
            figures["stand_in_allocate_p99_ms"] = _ms(percentile(agents.seconds, 0.99))
            figures["stand_in_errors"] = len(agents.errors)
            figures["stand_in_first_errors"] = agents.errors[:3]
    finally:
        log(f"{mode}: stopping")
        cluster.stop()
    return {"mode": mode, "nodes": args.nodes, "kwok_nodes": kwok} | figures


def scrape(cluster: scale_cluster.Cluster) -> dict[str, str]:
    """The Prometheus text of each scheduler the mode runs, by name."""
    names = ["kube-scheduler"]
    if cluster.mode == "classic":
        names.append("vnpu-scheduler")
    if cluster.mode == "volcano":
        names.append("vc-scheduler")
    if cluster.mode == "hami":
        names.append("hami-kube-scheduler")
    return {name: cluster.metrics(name) for name in names}


def scheduler_figures(
    api: kubernetes.client.ApiClient,
    cluster: scale_cluster.Cluster,
    before: dict[str, str],
    after: dict[str, str],
    figures: Json,
) -> Json:
    """What the schedulers' ``/metrics`` say of the run (``scrape`` before and after it)."""
    kube = before["kube-scheduler"], after["kube-scheduler"]
    found: Json = {
        "schedule_attempts": counted(*kube, "scheduler_schedule_attempts_total", "result")
    }
    if cluster.mode == "classic":
        found |= extender_figures(before["vnpu-scheduler"], after["vnpu-scheduler"])
    if cluster.mode == "volcano":
        found |= volcano_figures(before["vc-scheduler"], after["vc-scheduler"])
    if cluster.mode == "hami":
        found |= hami_figures(before["hami-kube-scheduler"], after["hami-kube-scheduler"])
    found |= kube_figures(*kube)
    if cluster.mode == "dra":
        found |= dra_figures(api, *kube, figures | found)
    return found


def run_pods(
    args: argparse.Namespace,
    cluster: scale_cluster.Cluster,
    api: kubernetes.client.ApiClient,
    names: list[str],
    body: Callable[[str], Json],
    agents: scale_cluster.NodeAgents | None,
) -> Json:
    mode = cluster.mode
    watch = PodTimes(api, agents.pod_changed if agents is not None else None, agents is not None)
    watch.thread.start()
    before = scrape(cluster)
    pids = cluster.pids()
    idle = scale_cluster.cpu_seconds(pids)
    time.sleep(IDLE_SECONDS)  # what the cluster costs with no pod coming: leases, heartbeats
    idle = {n: v - idle.get(n, 0.0) for n, v in scale_cluster.cpu_seconds(pids).items()}
    load_before = os.getloadavg()
    cpu_before = scale_cluster.cpu_seconds(pids)
    machine_before = scale_cluster.machine_cpu_seconds()
    log(f"{mode}: creating {len(names)} pods at {args.rate:g}/s (load {load_before[0]:.1f})")
    began = time.monotonic()
    created: list[Any] = []
    failures: list[str] = []
    creator = threading.Thread(
        target=lambda: created.extend(
            create_pods(api, names, args.rate, body, watch.created, failures)
        ),
        daemon=True,
    )
    creator.start()
    deadline = began + args.timeout
    shown = began
    while len(watch.running) + len(failures) < len(names) and time.monotonic() < deadline:
        time.sleep(0.25)
        if time.monotonic() - shown >= PROGRESS_SECONDS:
            shown = time.monotonic()
            log(
                f"{mode}: {shown - began:.0f} s: {len(watch.bound)} bound, "
                f"{len(watch.running)} Running of {len(names)}"
            )
    cpu_after = scale_cluster.cpu_seconds(pids)
    machine = scale_cluster.machine_cpu_seconds() - machine_before
    window = time.monotonic() - began  # what the CPU figures cover
    load_after = os.getloadavg()
    creator.join(timeout=60)
    watch.stopping.set()
    after = scrape(cluster)
    running = sorted(watch.running.values())
    # to the last pod Running, or to the timeout when some never ran
    seconds = (
        running[-1] - began if running and len(running) + len(failures) == len(names) else window
    )
    cpu = {n: round(cpu_after[n] - cpu_before.get(n, 0.0), 1) for n in cpu_after}
    lasting = [t - watch.created[n] for n, t in watch.running.items() if n in watch.created]
    middle = running[len(running) // 10 : max(len(running) * 9 // 10, 1)]
    figures: Json = {
        "pods": len(names),
        "running": len(running),
        "bound": len(watch.bound),
        "rate": args.rate,
        "create_seconds": round(created[0], 1) if created else None,
        "create_retries": created[1] if created else None,
        "create_failures": len(failures),
        "create_failure_examples": failures[:3],
        "seconds": round(seconds, 1),
        "pods_per_second": round(len(running) / seconds, 1) if seconds > 0 else None,
        "bound_per_second": round(len(watch.bound) / (max(watch.bound.values()) - began), 1)
        if watch.bound
        else None,
        "middle_pods_per_second": round(len(middle) / (middle[-1] - middle[0]), 1)
        if len(middle) > 1 and middle[-1] > middle[0]
        else None,
        "create_to_running_p50_s": round(percentile(lasting, 0.5) or 0, 2),
        "create_to_running_p99_s": round(percentile(lasting, 0.99) or 0, 2),
        "filter_p50_ms": None,
        "filter_p99_ms": None,
        "cpu_seconds": dict(sorted(cpu.items(), key=lambda item: -item[1])),
        "cpu_cores_busy": round(sum(cpu.values()) / window, 2),
        "cpu_ms_per_pod": round(1000 * sum(cpu.values()) / len(running)) if running else None,
        # everything else on the machine (other users' work, the kernel, steal), in cores
        "other_cores_busy": round(max(machine - sum(cpu.values()), 0) / window, 2),
        "idle_cores_busy": round(sum(idle.values()) / IDLE_SECONDS, 2),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "watch_restarts": watch.restarts,
    }
    if cluster.specs:
        real = {spec.name for spec in cluster.specs}
        figures["real_node_pods_running"] = sum(watch.placed.get(n) in real for n in watch.running)
    if agents is not None:
        figures["bound_without_decision"] = len(watch.undecided)
    figures |= scheduler_figures(api, cluster, before, after, figures)
    if len(running) < len(names):
        log(f"{mode}: only {len(running)} of {len(names)} pods Running after {args.timeout:g} s")
    return figures


# -- output ------------------------------------------------------------------------------------


def _cell(value: Any, top: float | None = None) -> str:
    """A figure for a table; at a histogram's last finite bound ``top``: at least that."""
    if value is None:
        return "-"
    shown = f"{value:g}" if isinstance(value, float) else f"{value}"
    return f">= {shown}" if top is not None and value >= top else shown


def markdown(args: argparse.Namespace, rows: list[Json], command: str) -> str:
    lines = [
        "## KWOK at scale (`benchmarks/bench_scale.py`)\n",
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python "
        f"{platform.python_version()}; Kubernetes {controlplane.KUBERNETES_VERSION}, KWOK "
        f"{scale_cluster.KWOK_VERSION}; {datetime.now(UTC):%Y-%m-%d}. Command: `{command}`.\n",
        "| mode | nodes | pods Running | pods/s | middle 80 % pods/s | create -> Running p50 / p99 "
        "| filter p50 / p99 | bind p50 / p99 | lock wait p50 / p99 | load before / after "
        "| busy cores | CPU ms per pod |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        # the last finite bound of the histogram the column comes from: at least that
        ftop, btop = {
            "dra": (r.get("kube_top_ms"),) * 2,
            "volcano": (VOLCANO_TOP_MS, VOLCANO_TOP_MS),
            "hami": (r.get("hami_top_ms"), None),
        }.get(r["mode"], (None, 10000))
        lines.append(
            f"| {r['mode']} | {r['nodes']} | {r['running']} of {r['pods']} "
            f"| {_cell(r['pods_per_second'])} | {_cell(r['middle_pods_per_second'])} "
            f"| {r['create_to_running_p50_s']} / {r['create_to_running_p99_s']} s "
            f"| {_cell(r['filter_p50_ms'], ftop)} / {_cell(r['filter_p99_ms'], ftop)} ms "
            f"| {_cell(r.get('bind_p50_ms'), btop)} / {_cell(r.get('bind_p99_ms'), btop)} ms "
            f"| {_cell(r.get('lock_wait_p50_ms'), 60000)} / "
            f"{_cell(r.get('lock_wait_p99_ms'), 60000)} ms "
            f"| {r['load_before'][0]} / {r['load_after'][0]} | {_cell(r['cpu_cores_busy'])} "
            f"| {_cell(r['cpu_ms_per_pod'])} |"
        )
    by_mode = {r["mode"]: r for r in rows}
    plain = by_mode["plain"]["pods_per_second"] if "plain" in by_mode else None
    ratios = [
        f"{mode} / plain: {(r['pods_per_second'] or 0) / plain:.2f}"
        for mode, r in by_mode.items()
        if mode != "plain" and plain
    ]
    if ratios:
        lines.append("\n" + "; ".join(ratios))
    if "dra" in by_mode:
        r = by_mode["dra"]
        lines.append(
            f"\ndra: kube-scheduler allocated {r['claims_allocated']} claims of "
            f"{r['claims']} from {r['resource_slices']} ResourceSlices; no kubelet prepared "
            "them (KWOK marks a bound pod Running), so the figure measures scheduling and "
            "allocation, not Prepare. Its filter and bind are kube-scheduler's Filter phase "
            "(all nodes, all plugins) and its PreBind (DynamicResources writes the claim); "
            f"PreBind's mean: {_cell(r.get('kube_prebind_mean_ms'))} ms."
        )
    if "volcano" in by_mode:
        r = by_mode["volcano"]
        lines.append(
            f"\nvolcano: vc-scheduler placed the pods (kube-scheduler none); its filter and bind "
            "are its own per-pod Predicate and Bind stages "
            "(`volcano_scheduling_stage_duration_milliseconds`). Sessions "
            "(`volcano_e2e_scheduling_latency_milliseconds`): "
            f"{r['volcano_session_count']}, p50 / p99 {_cell(r['volcano_session_p50_ms'])} / "
            f"{_cell(r['volcano_session_p99_ms'])} ms; opening one p50 / p99 "
            f"{_cell(r['volcano_open_session_p50_ms'])} / "
            f"{_cell(r['volcano_open_session_p99_ms'])} ms; its allocate action p50 / p99 "
            f"{_cell(r['volcano_allocate_p50_ms'])} / {_cell(r['volcano_allocate_p99_ms'])} ms; "
            f"create -> Bound as vc-scheduler times it p50 / p99 "
            f"{_cell(r['volcano_bound_p50_ms'])} / {_cell(r['volcano_bound_p99_ms'])} ms; "
            f"pods bound with no device decision "
            f"{r['bound_without_decision']}."
        )
    if "hami" in by_mode:
        r = by_mode["hami"]
        lines.append(
            "\nhami: HAMi's own kube-scheduler (profile hami-scheduler) called HAMi's extender; "
            "its filter is that kube-scheduler's whole scheduling attempt "
            "(`scheduler_scheduling_attempt_duration_seconds`: every plugin and the extender's "
            "filter call); nothing times the extender's bind. Attempts "
            f"{r['hami_attempts']}; pods bound with no device decision "
            f"{r['bound_without_decision']}."
        )
    lines.append("\nCPU seconds over each run:\n")
    for r in rows:
        spent = ", ".join(f"{name} {seconds:g}" for name, seconds in r["cpu_seconds"].items())
        lines.append(
            f"- {r['mode']}: {spent}; with no pod coming the cluster used "
            f"{r['idle_cores_busy']} cores; the rest of the machine used "
            f"{r['other_cores_busy']} during the run; creates sent again "
            f"{r['create_retries']}, refused for good {r['create_failures']}"
        )
    lines.append("\n```json")
    lines.extend(json.dumps(r) for r in rows)
    lines.append("```")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # A SIGTERM (timeout(1), kill) ends the run as Ctrl-C does: each cluster is stopped on the
    # way out instead of being left running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    command = " ".join(["benchmarks/bench_scale.py", *(sys.argv[1:] if argv is None else argv)])
    modes = SEVERAL.get(args.mode, (args.mode,))
    try:
        controlplane.binaries()
        scale_cluster.kwok_files()
        for mode in modes:
            if mode in scale_cluster.PEER_MODES:
                scale_cluster.peer_files(mode)
    except (controlplane.ControlPlaneError, scale_cluster.ScaleError) as exc:
        if args.json:
            print(json.dumps({"mode": args.mode, "skipped": str(exc)}))
        else:
            print(f"## KWOK at scale\n\nNot run: {exc}\n")
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="vnpu-scale-") as tmp:
        for mode in modes:
            root = (args.keep or Path(tmp)) / f"{mode}-{args.nodes}"
            if root.exists() and any(root.iterdir()):
                log(f"--keep {args.keep}: {root} holds an earlier run; remove it first")
                return 2
            try:
                rows.append(measure(args, mode, root))
            except scale_cluster.ScaleError as exc:
                log(f"{mode}: {exc}")
                return 1
    if args.json:
        print(json.dumps(rows[0]))
    else:
        print(markdown(args, rows, f".venv/bin/python {command}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
