"""Creating and destroying vNPUs in managed mode, with every step recorded before it is taken.

``provide`` gives a pod's container a vNPU of a template on a chip:

1. if the ledger already names one for this container (the same Allocate again), that one;
2. if an init container of the same pod owns one of the same template on that chip, the
   app container shares it (kubelet admits init and app containers together, and an init
   container has finished before the app starts, so one vNPU serves both);
3. otherwise it picks a free vNPU id of the chip, writes an ``intent`` record, creates the
   vNPU with that id, and turns the record into ``owned``. A crash between any two steps
   leaves a record naming the id, so the reconciler finds the vNPU after a restart.

``rollback`` undoes what ``provide`` did in one Allocate when a later step fails: records
are removed and vNPUs no one else owns are destroyed, once ``custody`` has checked kubelet's
PodResources. ``destroy`` is the reclaimer's, which asks ``custody`` first itself.
``allocations`` and ``reconciler`` call this module, under the plugin's allocation lock.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Collection, Iterable

import structlog

from vnpu_device_plugin import crashpoints, custody, errors, ledger, metrics, podplan
from vnpu_npu import backend, limits
from vnpu_npu import errors as npu_errors

log = structlog.get_logger(__name__)
_ID_TRIES = 3


class Lifecycle:
    """vNPUs of ``npu`` owned through ``book``."""

    def __init__(
        self,
        npu: backend.Backend,
        book: ledger.Ledger,
        stats: metrics.Metrics,
        crash: crashpoints.CrashPoints,
        keeper: custody.Custody | None = None,
    ) -> None:
        self._npu = npu
        self._book = book
        self._stats = stats
        self._crash = crash
        self._keeper = keeper

    def _free_id(self, chip: backend.ChipInfo) -> int:
        taken = {v.vnpu_id for v in self._npu.vnpus(chip.phy_id)}
        taken |= {r.vnpu_id for r in self._book.records() if r.chip == chip.phy_id}
        for vnpu_id in limits.id_range(chip.chip_name, chip.phy_id):
            if vnpu_id not in taken:
                return vnpu_id
        raise errors.VnpuFailed(chip.phy_id, "", "every vNPU id of the chip is taken", refused=True)

    def provide(
        self,
        plan: podplan.PodPlan,
        container: podplan.ContainerPlan,
        device: podplan.Device,
        given: Collection[ledger.Record] = (),
    ) -> ledger.Record:
        """The record of the vNPU ``device`` gets; raises ``errors.VnpuFailed``.

        ``given`` are the records the container's other devices got in this Allocate: a
        container with two vNPUs of one template on one chip gets two vNPUs.
        """
        assert device.template is not None
        chip = device.chip
        for record in self._book.of_container(plan.uid, container.container):
            if record in given:
                continue
            if record.chip == chip.phy_id and record.template == device.template:
                log.info(
                    "vnpu_reused", pod=plan.who, container=container.container, vnpu=record.vnpu_id
                )
                return record
        base = ledger.Record(
            pod_uid=plan.uid,
            namespace=plan.namespace,
            pod=plan.name,
            container=container.container,
            init=container.init,
            chip=chip.phy_id,
            chip_uuid=chip.uuid,
            vnpu_id=0,
            template=device.template,
            state=ledger.State.INTENT,
            created_at=time.time(),
        )
        if not container.init:
            shared = self._init_vnpu(plan, chip.phy_id, device.template)
            if shared is not None:
                record = dataclasses.replace(base, vnpu_id=shared, state=ledger.State.OWNED)
                self._book.add(record)
                log.info(
                    "vnpu_shared_with_init",
                    pod=plan.who,
                    container=container.container,
                    vnpu=shared,
                )
                return record
        for attempt in range(_ID_TRIES):
            try:
                return self._create(base, chip)
            except npu_errors.InvalidVnpuRequest as exc:
                taken = exc.field == limits.NO_ID and exc.code == npu_errors.RESOURCE_OCCUPIED
                if not taken or attempt + 1 == _ID_TRIES:
                    raise errors.VnpuFailed(
                        chip.phy_id, device.template, str(exc), refused=False
                    ) from exc
        raise AssertionError("unreachable")

    def _init_vnpu(self, plan: podplan.PodPlan, chip: int, template: str) -> int | None:
        """A vNPU of ``template`` on ``chip`` an init container of the pod owns and no app container shares."""
        mine = [r for r in self._book.records() if r.pod_uid == plan.uid and r.chip == chip]
        shared = {r.vnpu_id for r in mine if not r.init}
        for record in mine:
            if record.init and record.template == template and record.vnpu_id not in shared:
                return record.vnpu_id
        return None

    def _create(self, base: ledger.Record, chip: backend.ChipInfo) -> ledger.Record:
        vnpu_id = self._free_id(chip)
        intent = dataclasses.replace(base, vnpu_id=vnpu_id)
        self._book.add(intent)
        try:
            created = self._npu.create_vnpu(chip.phy_id, base.template, vnpu_id)
        except npu_errors.TemplateRefused as exc:
            self._book.remove(intent)
            raise errors.VnpuFailed(chip.phy_id, base.template, str(exc), refused=True) from exc
        except npu_errors.InvalidVnpuRequest:
            self._book.remove(intent)
            raise
        except npu_errors.NpuError as exc:
            self._book.remove(intent)
            raise errors.VnpuFailed(chip.phy_id, base.template, str(exc), refused=False) from exc
        self._crash.reach(crashpoints.AFTER_CREATE)
        owned = dataclasses.replace(intent, vnpu_id=created, state=ledger.State.OWNED)
        try:
            self._book.replace(intent, owned)
        except errors.LedgerError:  # created a moment ago and never handed out: no custody check
            self._destroy_quietly(chip.phy_id, created, "rollback")
            raise
        self._stats.vnpus_created.inc()
        log.info(
            "vnpu_created",
            pod=base.who,
            container=base.container,
            chip=chip.phy_id,
            vnpu=created,
            template=base.template,
        )
        return owned

    def rollback(self, records: Iterable[ledger.Record]) -> None:
        """Undo ``provide`` for ``records``: forget them, destroy vNPUs nobody else owns.

        A vNPU ``custody`` says kubelet lists a running container for (one reused from an
        earlier Allocate), or that kubelet cannot vouch for, stays unowned: the reconciler
        judges it again later.
        """
        records = list(records)
        if not records:
            return
        self._book.remove(*records)
        for chip, vnpu_id in dict.fromkeys(r.vnpu for r in records):
            if self._book.owners(chip, vnpu_id):
                continue
            if self._keeper is not None and self._keeper.check(chip, vnpu_id, "rollback"):
                continue
            self._destroy_quietly(chip, vnpu_id, "rollback")

    def destroy(self, chip: int, vnpu_id: int, reason: str) -> None:
        """Destroy a vNPU; raises the backend's error (VnpuInUse, VnpuNotFound, ...)."""
        self._npu.destroy_vnpu(chip, vnpu_id)
        self._stats.vnpus_destroyed.labels(reason).inc()
        log.info("vnpu_destroyed", chip=chip, vnpu=vnpu_id, reason=reason)

    def _destroy_quietly(self, chip: int, vnpu_id: int, reason: str) -> None:
        try:
            self.destroy(chip, vnpu_id, reason)
        except npu_errors.VnpuNotFound:
            pass
        except npu_errors.NpuError as exc:  # the reconciler retries: the vNPU is unowned now
            log.error("vnpu_destroy_failed", chip=chip, vnpu=vnpu_id, reason=reason, error=str(exc))
