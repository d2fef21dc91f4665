"""Serving kubelet's Allocate and GetPreferredAllocation for the pods the scheduler placed here.

``Allocations.allocate`` runs one Allocate, under one lock (kubelet admits pods one at a
time; the reconciler takes the same lock), which an Allocate waiting for its pod to show
in the API does not hold:

1. map kubelet's device ids to chips (an id we never advertised: ``UnknownDevice``);
2. identify the pod (``finder``: the one pod bound here that could be the one, as kubelet's
   PodResources settles it, with a decision that fits; anything else is refused, never
   guessed); a pod whose annotations or names cannot be served is failed. With a
   ``placement.Placer`` (``--place-undecided``), the one pod that still has no decision
   after the wait is decided for by it, on this node, and then served from step 3 on like
   any other;
3. check the containers' decision against what is held on their chips (``holdings``: the
   grant book, the ledger, kubelet's PodResources); a decision that takes what a live pod
   holds, or goes over a budget, fails the pod (``GrantConflict``) with a Warning event;
4. for each container asked for, take the pod's next container entry; in managed mode
   create its vNPUs (``lifecycle``: intent, create, owned), in soft mode make its
   hami-vnpu-core directory; build the environment (``environment``). A chip short of
   room for a vNPU first has the vNPUs of owners that are done reclaimed (``reclaim``,
   the checks of the periodic pass, with a fresh list of the node's pods), then the create
   is tried once more; a whole chip handed out in managed mode has them reclaimed too;
5. record every device handed out in the grant book (``grants``, durable);
6. write the pod back in one merge patch carrying the resourceVersion it was read at:
   ``-devices-to-allocate`` with the served entries erased (HAMi's grammar) and, once no
   container is left (for any chip model), ``bind-phase: success``. A 409 re-reads the
   pod and redoes the patch if the entries are still the ones just served;
7. release the node lock (when it names this pod, or names nobody) once the pod is done.

Any failure after step 2 rolls back the vNPUs and grants made in this call, sets
``bind-phase: failed``, releases the lock and answers the error; ``devices-allocated`` is
never touched.
The device ids a served pod's regular containers got are remembered
(``podresources.Handouts``) so a pod created again under the same name is told apart from
the old one in PodResources. ``GetPreferredAllocation`` returns ids on the chips of the
next container of the pod the finder expects (``finder.guess``, a hint that decides
nothing), so kubelet's own records (checkpoint, PodResources) name the real chips.
``service`` calls both.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from vnpu_core import protocol
from vnpu_device_plugin import (
    cluster,
    crashpoints,
    devices,
    environment,
    errors,
    events,
    finder,
    grants,
    holdings,
    ledger,
    lifecycle,
    metrics,
    nodelock,
    placement,
    podplan,
    reclaim,
    settings,
)
from vnpu_kubelet_api.deviceplugin.v1beta1 import api_pb2
from vnpu_npu import backend
from vnpu_service import kubeapi

log = structlog.get_logger(__name__)
Json = dict[str, Any]


@dataclass(frozen=True)
class Served:
    """What one Allocate handed out, for the log line."""

    pod: str
    containers: tuple[str, ...]
    chips: tuple[int, ...]
    vnpus: tuple[int, ...]
    done: bool


class Allocations:
    """Allocate and GetPreferredAllocation for ``inventory``'s chips."""

    def __init__(
        self,
        api: cluster.Cluster,
        inventory: devices.Inventory,
        pods: finder.Finder,
        vnpus: lifecycle.Lifecycle,
        reclaimer: reclaim.Reclaimer,
        held: holdings.Holdings,
        book: grants.Book,
        stats: metrics.Metrics,
        crash: crashpoints.CrashPoints,
        *,
        mode: settings.VnpuMode,
        paths: environment.SoftPaths,
        attempts: int,
        lock: threading.Lock,
        on_failure: Callable[[], None] = lambda: None,
        placer: placement.Placer | None = None,
    ) -> None:
        self._api = api
        self._inventory = inventory
        self._finder = pods
        self._vnpus = vnpus
        self._reclaimer = reclaimer
        self._holdings = held
        self._book = book
        self._stats = stats
        self._crash = crash
        self._mode = mode
        self._paths = paths
        self._attempts = attempts
        self.lock = lock
        self._on_failure = on_failure
        self._placer = placer

    # -- Allocate ----------------------------------------------------------------------

    def allocate(self, request: api_pb2.AllocateRequest) -> tuple[api_pb2.AllocateResponse, Served]:
        chips = self._chips(request)
        ids = [list(c.devices_ids) for c in request.container_requests]

        def serve(found: finder.Found) -> tuple[api_pb2.AllocateResponse, Served]:
            if found.broken is not None:
                self._fail(found.pod, found.broken)
                raise found.broken
            assert found.plan is not None
            return self._serve(found, found.plan, chips, ids)

        place = self._placer.place if self._placer is not None else None
        return self._finder.find(chips, self.lock, serve, place)

    def _chips(self, request: api_pb2.AllocateRequest) -> list[list[backend.ChipInfo]]:
        if not request.container_requests:
            raise errors.UnknownDevice("", "the request names no container")
        chips = []
        for container in request.container_requests:
            if not container.devices_ids:
                raise errors.UnknownDevice("", "a container request names no device")
            if len(set(container.devices_ids)) != len(container.devices_ids):
                raise errors.UnknownDevice(",".join(container.devices_ids), "a device id repeats")
            chips.append([self._inventory.chip_of(i) for i in container.devices_ids])
        return chips

    def _serve(
        self,
        found: finder.Found,
        plan: podplan.PodPlan,
        chips: Sequence[Sequence[backend.ChipInfo]],
        ids: Sequence[Sequence[str]],
    ) -> tuple[api_pb2.AllocateResponse, Served]:
        containers = plan.pending[: len(chips)]
        made: list[ledger.Record] = []
        given: list[grants.Grant] = []
        responses = []
        try:
            self._holdings.check(plan, containers)
            for container, container_ids in zip(containers, ids, strict=False):
                vnpu_ids = self._prepare(plan, container, made)
                responses.append(
                    environment.response(self._mode, plan, container, vnpu_ids, self._paths)
                )
                given += self._grants(plan, container, container_ids, vnpu_ids)
            self._book.put(plan.uid, [c.container for c in containers], given)
            self._crash.reach(crashpoints.AFTER_LEDGER)
            done = self._commit(found.pod, plan, len(containers))
            self._crash.reach(crashpoints.AFTER_PATCH)
        except Exception as exc:
            self._vnpus.rollback(made)
            self._book.remove(*given)
            self._fail(found.pod, exc)
            self._on_failure()
            raise
        self._reclaimer.handouts.record(
            plan.uid,
            [i for c, given in zip(containers, ids, strict=False) if not c.init for i in given],
        )
        if done:
            self._release_for(plan.namespace, plan.name)
        served = Served(
            plan.who,
            tuple(c.container for c in containers),
            tuple(d.chip.phy_id for c in containers for d in c.devices),
            tuple(r.vnpu_id for r in made),
            done,
        )
        return api_pb2.AllocateResponse(container_responses=responses), served

    def _grants(
        self,
        plan: podplan.PodPlan,
        container: podplan.ContainerPlan,
        device_ids: Sequence[str],
        vnpu_ids: Sequence[int],
    ) -> list[grants.Grant]:
        """What the container is given, one grant per device, for the grant book."""
        now = time.time()
        given = []
        for number, device in enumerate(container.devices):
            if plan.soft:
                kind = grants.Kind.SOFT
            elif device.template is not None:
                kind = grants.Kind.VNPU
            else:
                kind = grants.Kind.WHOLE
            vnpu_id = vnpu_ids[number] if kind is grants.Kind.VNPU and vnpu_ids else grants.NO_VNPU
            given.append(
                grants.Grant(
                    pod_uid=plan.uid,
                    namespace=plan.namespace,
                    pod=plan.name,
                    container=container.container,
                    init=container.init,
                    chip=device.chip.phy_id,
                    chip_uuid=device.chip.uuid,
                    kind=kind,
                    template=device.template or "",
                    vnpu_id=vnpu_id,
                    memory_mib=device.memory_mib,
                    cores=device.cores,
                    device_ids=tuple(device_ids),
                    granted_at=now,
                )
            )
        return given

    def _prepare(
        self, plan: podplan.PodPlan, container: podplan.ContainerPlan, made: list[ledger.Record]
    ) -> list[int]:
        """Make what the container needs before it starts; the vNPU ids created (managed mode)."""
        if plan.soft:
            directory = self._paths.container_dir(plan.uid, container.container)
            parent = self._paths.core_dir / "containers"
            if directory.parent != parent or directory.name in ("", ".", ".."):
                raise errors.InvalidName(  # names are checked when read: a second fence
                    plan.who, "container", container.container, f"not a directory name in {parent}"
                )
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise errors.AllocateError(f"cannot create {directory}: {exc}") from exc
            return []
        templated = [d for d in container.devices if d.template is not None]
        if self._mode is settings.VnpuMode.MANAGED:
            self._clear_whole_chips([d for d in container.devices if d.template is None])
        if not templated:
            return []
        if self._mode is settings.VnpuMode.RUNTIME:
            if len(templated) > 1:
                key = protocol.runtime_key(self._inventory.common_word)
                raise errors.BadAnnotation(
                    plan.who, key, len(templated), "runtime mode gives a container one vNPU"
                )
            return []
        records: list[ledger.Record] = []
        for device in templated:
            record = self._provide(plan, container, device, records)
            records.append(record)
            if record not in made:
                made.append(record)
        return [r.vnpu_id for r in records]

    def _provide(
        self,
        plan: podplan.PodPlan,
        container: podplan.ContainerPlan,
        device: podplan.Device,
        given: Sequence[ledger.Record],
    ) -> ledger.Record:
        """``lifecycle.provide``; a chip short of room is reclaimed on and tried once more."""
        try:
            return self._vnpus.provide(plan, container, device, given)
        except errors.VnpuFailed as exc:
            if not exc.refused:
                raise
            outcome = self._reclaimer.for_allocate([device.chip.phy_id])
            if not outcome.reclaimed:
                log.info(
                    "vnpu_refused_nothing_to_reclaim",
                    pod=plan.who,
                    chip=device.chip.phy_id,
                    kept_in_use=outcome.kept_in_use,
                    kept_listed=outcome.kept_listed,
                    error=str(exc),
                )
                raise
        log.info("vnpu_retried_after_reclaim", pod=plan.who, chip=device.chip.phy_id)
        return self._vnpus.provide(plan, container, device, given)

    def _clear_whole_chips(self, whole: Sequence[podplan.Device]) -> None:
        """Reclaim what owners that are done left on chips handed out whole; log what stays."""
        if not whole:
            return
        chips = sorted({d.chip.phy_id for d in whole})
        left = self._reclaimer.for_allocate(chips).left
        if left:
            log.warning("whole_chip_has_vnpus", chips=chips, vnpus=left)

    def _commit(self, pod: Json, plan: podplan.PodPlan, served: int) -> bool:
        """Write the erased entries (and success when nothing is left); True when the pod is done."""
        key = protocol.to_allocate_key(self._inventory.common_word)
        current, value, version = pod, plan.to_allocate, plan.resource_version
        for attempt in range(self._attempts):
            erased = protocol.erase_first_container(value, key=key, count=served)
            done = not erased.strip(";") and not podplan.others_pending(
                current, self._inventory.common_word
            )
            update: dict[str, str | None] = {key: erased}
            if done:
                update[protocol.BIND_PHASE_KEY] = protocol.BindPhase.SUCCESS.value
            try:
                self._patch(plan, update, version)
                return done
            except kubeapi.Conflict:
                if attempt + 1 == self._attempts:
                    raise
                self._stats.api_retries.inc()
                current = cluster.retrying(
                    lambda: self._api.get_pod(plan.namespace, plan.name),
                    self._attempts,
                    on_retry=self._stats.retried,
                )
                meta = current.get("metadata") or {}
                notes = meta.get("annotations") or {}
                if meta.get("uid") == plan.uid and notes.get(key) == erased:
                    return done  # an earlier try went through; only its answer was lost
                if meta.get("uid") != plan.uid or notes.get(key) != value:
                    raise errors.PodNotIdentified(
                        self._inventory.node,
                        f"pod {plan.who} changed while it was served ({key} is now {notes.get(key)!r})",
                        (plan.who,),
                        reason="pod_changed",
                    ) from None
                version = str(meta.get("resourceVersion", ""))
        raise AssertionError("unreachable")

    def _patch(self, plan: podplan.PodPlan, update: dict[str, str | None], version: str) -> None:
        cluster.retrying(
            lambda: self._api.patch_pod_annotations(plan.namespace, plan.name, update, version),
            self._attempts,
            on_retry=self._stats.retried,
        )

    def _fail(self, pod: Json, error: BaseException) -> None:
        """Mark the pod failed and release its lock; best effort, the error is answered anyway."""
        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        log.warning("pod_allocation_failed", pod=f"{namespace}/{name}", error=str(error))
        try:
            cluster.retrying(
                lambda: self._api.patch_pod_annotations(
                    namespace, name, {protocol.BIND_PHASE_KEY: protocol.BindPhase.FAILED.value}
                ),
                self._attempts,
                on_retry=self._stats.retried,
            )
        except kubeapi.ApiError as exc:
            log.error("bind_phase_not_written", pod=f"{namespace}/{name}", error=str(exc))
        if isinstance(error, errors.GrantConflict | errors.InvalidName | errors.DecisionTooSmall):
            events.record(
                self._api, self._inventory.node, pod, "Warning", type(error).__name__, str(error)
            )
        self._release_for(namespace, name)

    def _release_for(self, namespace: str, name: str) -> None:
        """Remove the node lock if it names this pod or nobody (Volcano's bare form)."""
        nodelock.release(
            self._api,
            self._inventory.node,
            nodelock.owned_by_or_bare(namespace, name),
            attempts=self._attempts,
            stats=self._stats,
        )

    # -- GetPreferredAllocation --------------------------------------------------------

    def preferred(
        self, request: api_pb2.PreferredAllocationRequest
    ) -> api_pb2.PreferredAllocationResponse:
        responses = []
        with self.lock:
            for number, container in enumerate(request.container_requests):
                ids = self._steer(
                    list(container.available_deviceIDs),
                    list(container.must_include_deviceIDs),
                    container.allocation_size,
                    number,
                )
                responses.append(api_pb2.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return api_pb2.PreferredAllocationResponse(container_responses=responses)

    def _steer(self, available: list[str], must: list[str], size: int, number: int) -> list[str]:
        chosen = list(must[:size])
        wanted: list[str] = []
        try:
            plan = self._finder.guess(size) if number == 0 else None
            if plan is not None:
                wanted = [d.chip.uuid for d in plan.pending[0].devices]
        except kubeapi.ApiError as exc:
            log.warning("preferred_without_pod", error=str(exc))
        for device_id in chosen:
            chip = self._chip_or_none(device_id)
            if chip is not None and chip.uuid in wanted:
                wanted.remove(chip.uuid)
        for uuid in wanted:
            match = next(
                (
                    i
                    for i in available
                    if i not in chosen and (c := self._chip_or_none(i)) and c.uuid == uuid
                ),
                None,
            )
            if match is not None and len(chosen) < size:
                chosen.append(match)
        for device_id in available:
            if len(chosen) >= size:
                break
            if device_id not in chosen:
                chosen.append(device_id)
        return chosen

    def _chip_or_none(self, device_id: str) -> backend.ChipInfo | None:
        try:
            return self._inventory.chip_of(device_id)
        except errors.UnknownDevice:
            return None
