"""What a pod bound here without a device decision gets: the plugin decides, as a scheduler would.

Volcano's vc-scheduler turns its deviceshare plugin on only when it opens its first session,
and reads a node's Ascend devices only on that node's next update: until then, at every start
or restart, it binds NPU pods as if ``huawei.com/<CW>`` were a plain counted resource, with no
device decision on them. With ``--place-undecided`` (``settings.place_undecided``; off by
default, since under vnpu-scheduler a missing decision means something is wrong) the plugin
decides for such a pod itself, on this node only, instead of refusing it (which fails the
pod, and a Volcano Job with it). ``finder`` decides *which* pod an Allocate is for; this
module decides *what* that pod gets when it still has no decision after ``allocate_wait``;
``allocations`` hands ``Placer.place`` to ``finder.Finder.find``, which calls it under the
allocation lock (so two Allocates never place onto the same free room) and serves the pod it
returns down the one path every decided pod takes (``podplan``, ``holdings``, ``lifecycle``,
the grant book).

``Placer.place``:

1. lists the node's pods and takes the pod from that list (by UID); a pod carrying any
   decision annotation (``decision_key``: devices to allocate or allocated of any model,
   runtime info, ``hami.io/vgpu-node``, ``hami.io/bind-phase``) is never touched, even when
   the decision cannot be read or names another node (``has_decision``);
2. builds the node as vnpu-scheduler reads it: the annotations this plugin publishes, with
   current health and the grants of the pods that may still use them
   (``holdings.Holdings.live``), read by ``vnpu_core.nodes.read_node`` (``node_object``); and
   its usage from the decisions of every pod bound here that holds devices, each counted as at
   least what this plugin granted it (``vnpu_core.granted.node_usage``, what vnpu-scheduler's
   bind counts);
3. fits the pod's request (every container asking the resource, read as HAMi's scheduler and
   Volcano read it: ``vnpu_core.requests.from_pod``) with ``vnpu_core.allocator.fit``:
   multi-chip requests kept to the server's topology, soft slices on a soft-mode node for a
   pod asking soft mode, the pod's own policy and UUID annotations honoured (``decide``);
4. writes ``vnpu_core.binding.bind_annotations`` (what a Binding carries: devices to
   allocate, devices allocated, runtime info, ``hami.io/vgpu-node``, bind-phase
   ``allocating``, the times) in one merge PATCH guarded by the resourceVersion it was
   listed at, records a Normal event ``PlacedByDevicePlugin`` and counts
   ``vnpu_device_plugin_placements_total{result="placed"}``;
5. returns the pod as the PATCH left it.

Failure modes, each counted under its ``result``:

* **API conflict** (409 on the PATCH): someone wrote the pod since it was listed; it is
  listed again and placed again (``attempts`` tries in all), unless a decision shows;
* **decision appears meanwhile** (``decided_meanwhile``): the pod, listed again, carries a
  decision it did not carry when the finder read it; it is returned untouched and the finder
  serves that decision (or refuses it, as any decision it cannot serve);
* **pod deleted meanwhile** (``pod_gone``): the pod is no longer listed with its UID, the
  PATCH answers 404, or it is being deleted or no longer Pending: ``errors.NotPlaced``
  (``FAILED_PRECONDITION``), nothing written;
* **nothing fits** (``does_not_fit``): ``errors.NotPlaced`` carrying the allocator's reason
  code and sentence (which budget, how much is free; ``RESOURCE_EXHAUSTED``, or
  ``FAILED_PRECONDITION`` when no eviction could help), a Warning event
  ``NotPlacedByDevicePlugin``; nothing written;
* **malformed request** (``bad_request``): a request ``from_pod`` refuses (a binary memory
  unit, memory above the chip, a bad pin or policy), one that asks for another chip model too
  (a plugin decides for its own model only), or one whose device counts differ from those
  kubelet asks for: ``errors.NotPlaced`` (``INVALID_ARGUMENT``) naming the field, a Warning
  event; nothing written;
* **API down** (``api_error``): the list or the PATCH fails beyond ``cluster.retrying``, or
  every try meets a conflict: the ``kubeapi.ApiError`` is raised (answered ``UNAVAILABLE``). A
  PATCH that landed although its answer was lost meets 409 on its retry; the pod listed again
  then carries the decision (``decided_meanwhile``) and is served.

Every refusal fails the pod in kubelet, as before; a decision written on a pod that fails
afterwards counts for nobody (a pod counts until it is Succeeded or Failed).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog

from vnpu_core import allocator, binding, catalog, granted, ledger, nodes, protocol, requests
from vnpu_core import errors as core_errors
from vnpu_device_plugin import (
    cluster,
    devices,
    errors,
    events,
    holdings,
    metrics,
    podresources,
    publisher,
)
from vnpu_npu import backend
from vnpu_service import kubeapi

log = structlog.get_logger(__name__)
Json = dict[str, Any]
Chips = Sequence[Sequence[backend.ChipInfo]]
POLICY = requests.Policy.DEFAULT  # vnpu-scheduler's default; a pod's own policy annotations win
HANDSHAKE_TIMEOUT = timedelta(minutes=1)  # ``node_object``'s handshake is always fresh
PLACED = "PlacedByDevicePlugin"
NOT_PLACED = "NotPlacedByDevicePlugin"
_FIXED_KEYS = frozenset({protocol.VGPU_NODE_KEY, protocol.BIND_PHASE_KEY})
_DEVICE_SUFFIXES = ("-devices-to-allocate", ledger.ALLOCATED_SUFFIX)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why ``decide`` gives a pod nothing: ``outcome`` (``errors.NOT_PLACED_OUTCOMES``),
    ``reason`` (the allocator's reason code, or the request's field), ``problem`` (the
    sentence), ``unresolvable`` (no eviction could make it fit)."""

    outcome: errors.NotPlacedOutcome
    reason: str
    problem: str
    unresolvable: bool = False


def _meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("metadata") or {}


def _who(pod: Mapping[str, Any]) -> str:
    return f"{_meta(pod).get('namespace')}/{_meta(pod).get('name')}"


def decision_key(pod: Mapping[str, Any], words: Iterable[str]) -> str:
    """The first annotation of ``pod`` that is part of a scheduler's decision, "" when none.

    Devices to allocate or allocated of any chip model, the runtime info of one of ``words``
    (``huawei.com/<CW>``), ``hami.io/vgpu-node`` and ``hami.io/bind-phase``: a pod carrying
    any of them was decided for by someone, readable or not, and is never placed.
    """
    notes: Mapping[str, str] = _meta(pod).get("annotations") or {}
    runtime = {protocol.runtime_key(word) for word in words}
    for key in sorted(notes):
        if key in _FIXED_KEYS or key in runtime:
            return key
        if key.startswith("hami.io/") and key.endswith(_DEVICE_SUFFIXES):
            return key
    return ""


def leaving(pod: Mapping[str, Any], node: str) -> str:
    """Why the pod is no pod to place any more ("" when it is): being deleted, not Pending,
    or not bound to ``node``."""
    if _meta(pod).get("deletionTimestamp"):
        return "it is being deleted"
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    if phase != "Pending":
        return f"it is {phase}"
    bound = (pod.get("spec") or {}).get("nodeName")
    if bound != node:
        return f"it is bound to {bound or 'no node'}, not to {node}"
    return ""


def node_object(
    inventory: devices.Inventory, healthy: Mapping[int, bool], grants: str, reported: datetime
) -> Json:
    """The Node as a scheduler reads it from this plugin: the annotations ``publisher`` writes
    (chips, health, layout, soft mode, ``grants`` as ``vnpu.io/granted-<CW>``, handshake at
    ``reported``, naive local time) and, as allocatable, the device ids of healthy chips
    (what kubelet reports from this plugin's ListAndWatch)."""
    annotations = publisher.node_annotations(inventory, dict(healthy), reported, grants)
    ids = sum(inventory.slots for c in inventory.chips if healthy.get(c.phy_id, False))
    return {
        "metadata": {"name": inventory.node, "annotations": annotations},
        "status": {"allocatable": {inventory.resource_name: str(ids)}},
    }


def decide(
    pod: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    node: Mapping[str, Any],
    models: catalog.Catalog,
    word: str,
    counts: Sequence[int],
    now: datetime,
) -> allocator.Assignment | Refusal:
    """Where ``pod`` goes on ``node`` (a Node object, ``node_object``) beside ``pods`` (the
    pods bound to it), for chip model ``word``; ``counts`` are the device counts kubelet asks
    for, container by container, which the first containers given devices must match. Pure.
    """
    model = models.by_common_word(word)
    resource = model.resource_name if model is not None else word
    try:
        request = requests.from_pod(pod, models)
    except core_errors.RequestError as exc:
        return Refusal("bad_request", exc.resource, str(exc))
    others = [w for w in request.models() if w != word]
    if others:
        return Refusal(
            "bad_request",
            resource,
            f"it asks for {', '.join(others)} as well as {word}; a device plugin places its "
            "own chip model only",
        )
    if not request.wants_npu:
        return Refusal("bad_request", resource, f"no container asks for {resource}")
    read = nodes.read_node(node, models, now, HANDSHAKE_TIMEOUT)
    if read.node is None:
        return Refusal("does_not_fit", "node-unavailable", read.unavailable)
    usage = granted.node_usage(pods, node, read.node, models).ledger
    if usage.problems:  # only without a grant report; node_object always carries one
        problem = usage.problems[0]
        return Refusal(
            "does_not_fit",
            "usage-unknown",
            f"chip usage unknown: pod {problem.pod} has an unreadable {problem.error.key}",
        )
    outcome = allocator.fit(read.node, usage.usage, request, POLICY)
    if isinstance(outcome, allocator.Rejection):
        return Refusal("does_not_fit", outcome.reason.value, outcome.message, outcome.unresolvable)
    given = [len(c.grants) for c in outcome.containers if c.grants]
    if given[: len(counts)] != list(counts):
        shown = " + ".join(str(n) for n in given)
        asked = " + ".join(str(n) for n in counts)
        return Refusal(
            "bad_request",
            resource,
            f"its containers get {shown} device(s) and kubelet asks for {asked}",
        )
    return outcome


class Placer:
    """Decides for undecided pods bound to ``inventory``'s node, through ``api``."""

    def __init__(
        self,
        api: cluster.Cluster,
        inventory: devices.Inventory,
        models: catalog.Catalog,
        held: holdings.Holdings,
        stats: metrics.Metrics,
        *,
        kubelet: Callable[[], podresources.Listing | None],
        healthy: Callable[[], dict[int, bool]],
        attempts: int,
    ) -> None:
        self._api = api
        self._inventory = inventory
        self._models = models
        self._held = held
        self._stats = stats
        self._kubelet = kubelet
        self._healthy = healthy
        self._attempts = attempts
        self._words = tuple(
            dict.fromkeys([inventory.common_word, *(m.common_word for m in models)])
        )

    def place(self, pod: Json, chips: Chips) -> Json:
        """``pod`` (as the finder read it) with a decision: the one written here for this node,
        or one that appeared meanwhile; as listed, untouched, when it carried one already.

        Raises ``errors.NotPlaced`` (counted, a Warning event unless the pod is gone) or
        ``kubeapi.ApiError``. Called under the allocation lock.
        """
        counts = [len(ids) for ids in chips]
        try:
            return self._place(pod, counts)
        except kubeapi.ApiError as exc:
            self._stats.placements.labels("api_error").inc()
            log.warning("pod_not_placed", pod=_who(pod), result="api_error", error=str(exc))
            raise

    def _place(self, pod: Json, counts: Sequence[int]) -> Json:
        node = self._inventory.node
        uid = str(_meta(pod).get("uid", ""))
        already = decision_key(pod, self._words)
        conflict: kubeapi.Conflict | None = None
        for _attempt in range(self._attempts):
            pods = self._list()
            current = next((p for p in pods if str(_meta(p).get("uid", "")) == uid), None)
            if current is None:
                raise self._refused(pod, Refusal("pod_gone", "", "it was deleted meanwhile"))
            key = decision_key(current, self._words)
            if key:
                result = "has_decision" if already else "decided_meanwhile"
                self._stats.placements.labels(result).inc()
                log.info("pod_not_placed", pod=_who(current), result=result, key=key)
                return current
            why = leaving(current, node)
            if why:
                raise self._refused(current, Refusal("pod_gone", "", why))
            report = holdings.encode(self._held.live(pods, self._kubelet()))
            now = datetime.now()  # naive local time, as the handshake is written and read
            view = node_object(self._inventory, self._healthy(), report, now)
            word = self._inventory.common_word
            outcome = decide(current, pods, view, self._models, word, counts, now)
            if isinstance(outcome, Refusal):
                raise self._refused(current, outcome)
            try:
                written = self._write(current, binding.bind_annotations(outcome, int(time.time())))
            except kubeapi.Conflict as exc:
                conflict = exc
                self._stats.api_retries.inc()
                log.info("placement_conflict", pod=_who(current), error=str(exc))
                continue
            except kubeapi.NotFound:
                raise self._refused(
                    current, Refusal("pod_gone", "", "it was deleted while it was placed")
                ) from None
            self._placed(written, outcome)
            return written
        assert conflict is not None
        raise conflict

    def _list(self) -> list[Json]:
        node = self._inventory.node
        pods: list[Json] = cluster.retrying(
            lambda: self._api.list_pods(node), self._attempts, on_retry=self._stats.retried
        )
        return pods

    def _write(self, pod: Json, notes: dict[str, str]) -> Json:
        meta = _meta(pod)
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        version = str(meta.get("resourceVersion", ""))
        update: dict[str, str | None] = dict(notes)
        written: Json = cluster.retrying(
            lambda: self._api.patch_pod_annotations(namespace, name, update, version),
            self._attempts,
            on_retry=self._stats.retried,
        )
        return written

    def _placed(self, pod: Json, assignment: allocator.Assignment) -> None:
        scheduler = _scheduler(pod)
        shown = binding.describe(assignment)
        self._stats.placements.labels("placed").inc()
        chips = [
            chip.phy_id
            for c in assignment.containers
            for g in c.grants
            if (chip := self._inventory.chip(g.uuid)) is not None
        ]
        log.info("pod_placed", pod=_who(pod), scheduler=scheduler, chips=chips, devices=shown)
        message = (
            f"bound by {scheduler} without a device decision; placed on node "
            f"{self._inventory.node} by its device plugin: {shown}"
        )
        events.record(self._api, self._inventory.node, pod, "Normal", PLACED, message)

    def _refused(self, pod: Json, refusal: Refusal) -> errors.NotPlaced:
        node = self._inventory.node
        error = errors.NotPlaced(
            node,
            _who(pod),
            refusal.outcome,
            refusal.reason,
            refusal.problem,
            unresolvable=refusal.unresolvable,
        )
        self._stats.placements.labels(refusal.outcome).inc()
        log.warning(
            "pod_not_placed",
            pod=_who(pod),
            result=refusal.outcome,
            reason=refusal.reason,
            problem=refusal.problem,
        )
        if refusal.outcome != "pod_gone":
            message = (
                f"bound by {_scheduler(pod)} without a device decision; the device plugin of "
                f"node {node} cannot place it: {refusal.problem}"
            )
            events.record(self._api, node, pod, "Warning", NOT_PLACED, message)
        return error


def _scheduler(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("schedulerName") or "default-scheduler")
