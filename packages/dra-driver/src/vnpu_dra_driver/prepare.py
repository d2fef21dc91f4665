"""Preparing and unpreparing claims: the vNPUs, ledger records and CDI specs of each claim.

The kubelet plugin (``plugin``) calls ``Preparer.prepare`` for each claim of a
NodePrepareResources call and ``Preparer.unprepare`` for each of a NodeUnprepareResources
call; ``__main__`` calls ``reconcile`` once before serving. One lock orders all of them.

``prepare`` reads the claim from the API and checks its uid, takes the allocation results of
this driver and this node's pool and maps each device to its chip and kind (``devices``).
It refuses the whole claim before anything is made when one device is not this node's or
``asks`` refuses it (kinds mixed, a device twice, a device that does not fit the node's
mode or chip). For each template device it then makes sure a
vNPU exists, ledger first: an ``intent`` record naming a free vNPU id is written durably, the
vNPU is created with that id, and the record becomes ``owned``. A device that already has a
record (a second Prepare, or one after a crash) keeps its vNPU, or gets it created again
under the recorded id if it is gone. If a create fails, the vNPUs this call made are
destroyed and their records dropped. A soft device gets an ``owned`` record of its memory and
core share (nothing is made on the chip: hami-vnpu-core enforces the slice in the
container), and each soft request its directory under the hami-vnpu-core directory. Last,
the claim's CDI spec is written (``cdi``) and the CDI device ids returned.

``unprepare`` destroys the claim's vNPUs (one another claim's record also names is kept),
drops their records and a soft slice's (nothing to release on the chip), removes the soft
requests' directories and the spec; a claim it does not know is already unprepared.
``reconcile`` unprepares every claim the ledger or the CDI directory names that the API no
longer has allocated under that uid, and drops intent records whose vNPU was never created.
Failures are ``errors.ClaimError`` naming the claim (and the device, when one is at fault).
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from vnpu_core import catalog
from vnpu_dra_driver import asks, cdi, cluster, devices, errors, ledger, slices
from vnpu_npu import backend, claimledger, limits
from vnpu_npu import errors as npu_errors
from vnpu_service import kubeapi

Json = dict[str, Any]
log = structlog.get_logger(__name__)
_ID_TRIES = 3


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """A claim as the kubelet names it."""

    namespace: str
    name: str
    uid: str

    @property
    def who(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Answer:
    """One prepared device, as NodePrepareResources reports it."""

    request: str
    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What ``reconcile`` did: claims unprepared, intents dropped, claims it could not judge."""

    unprepared: tuple[str, ...] = ()
    intents_dropped: tuple[tuple[int, int], ...] = ()
    unjudged: tuple[str, ...] = field(default=())


class Preparer:
    """Claims of ``node`` prepared with ``npu`` (chips of ``model``), owners kept in ``book``.

    ``soft`` (hami-vnpu-core's host directories) says the node shares its chips as soft
    slices, as ``slices.build(soft=True)`` publishes them; None: whole chips and vNPUs.
    """

    def __init__(
        self,
        node: str,
        npu: backend.Backend,
        model: catalog.ChipModel,
        api: cluster.ClaimApi,
        book: ledger.Ledger,
        cdi_dir: Path,
        clock: Callable[[], float] = time.time,
        *,
        soft: cdi.SoftPaths | None = None,
    ) -> None:
        self._node = node
        self._npu = npu
        self._model = model
        self._api = api
        self._book = book
        self._cdi_dir = cdi_dir
        self._clock = clock
        self._soft = soft
        self._lock = threading.Lock()

    # -- Prepare -------------------------------------------------------------------------

    def prepare(self, ref: ClaimRef) -> tuple[Answer, ...]:
        """Make ``ref``'s devices ready; the same answer again for a prepared claim."""
        with self._lock:
            results = self._results(ref)
            try:
                chips = {c.phy_id: c for c in self._npu.chips()}
            except npu_errors.NpuError as exc:
                raise errors.ClaimError(
                    ref.who, f"cannot read the chips: {exc}", retryable=True
                ) from exc
            targets = [
                (
                    _base_request(str(r.get("request", ""))),
                    r,
                    devices.target(ref.who, str(r.get("device", "")), chips, self._model),
                )
                for r in results
            ]
            asks.check_kinds(ref.who, targets)
            asks.check_once(ref.who, targets)
            soft_asks = asks.check_modes(ref.who, targets, self._model, soft=self._soft is not None)
            given = self._make(ref, chips, targets, soft_asks)
            self._make_dirs(ref, given)
            document = cdi.spec(ref.namespace, ref.name, ref.uid, given, self._soft)
            try:
                cdi.write(self._cdi_dir, ref.uid, document)
            except OSError as exc:
                raise errors.ClaimError(
                    ref.who, f"cannot write its CDI spec: {exc}", retryable=True
                ) from exc
            log.info(
                "claim_prepared",
                claim=ref.who,
                uid=ref.uid,
                devices=[g.target.device for g in given],
            )
            return tuple(
                Answer(
                    g.request,
                    self._node,
                    g.target.device,
                    (cdi.device_id(ref.uid, g.target.device),),
                    g.share_id,
                )
                for g in given
            )

    def _results(self, ref: ClaimRef) -> list[Json]:
        """This driver's allocation results of the claim, all from this node's pool."""
        try:
            found = self._api.get_claim(ref.namespace, ref.name)
        except kubeapi.KubeError as exc:
            raise errors.ClaimError(
                ref.who, f"cannot read it from the API: {exc}", retryable=exc.retryable
            ) from exc
        if found is None:
            raise errors.ClaimError(ref.who, "no such ResourceClaim in the API", retryable=True)
        uid = found.get("metadata", {}).get("uid")
        if uid != ref.uid:
            raise errors.ClaimError(
                ref.who, f"the API has uid {uid}, the kubelet asked for {ref.uid}", retryable=False
            )
        allocation = (found.get("status") or {}).get("allocation")
        if not allocation:
            raise errors.ClaimError(ref.who, "the claim is not allocated", retryable=True)
        results = [
            r
            for r in (allocation.get("devices") or {}).get("results") or []
            if r.get("driver") == slices.DRIVER
        ]
        if not results:
            raise errors.ClaimError(ref.who, f"no device of {slices.DRIVER}", retryable=False)
        for result in results:
            if result.get("pool") != self._node:
                raise errors.DeviceError(
                    ref.who,
                    str(result.get("device", "")),
                    f"allocated from pool {result.get('pool')!r}, not this node's ({self._node})",
                )
        return results

    def _make(
        self,
        ref: ClaimRef,
        chips: dict[int, backend.ChipInfo],
        targets: list[tuple[str, Json, devices.Target]],
        soft_asks: dict[str, asks.SoftAsk],
    ) -> list[cdi.Given]:
        recorded = {r.device: r for r in self._book.of_claim(ref.uid)}
        made: list[claimledger.Record] = []
        given: list[cdi.Given] = []
        try:
            for request, result, target in targets:
                chip = chips[target.phy]
                if target.kind == "template":
                    record = self._vnpu(ref, request, target, chip, recorded, made)
                    given.append(cdi.Given(request, target, vnpu_id=record.vnpu_id))
                elif target.kind == "soft":
                    ask = soft_asks[target.device]
                    record = self._slice(ref, request, target, chip, ask, recorded, made)
                    share_id = result.get("shareID")
                    given.append(
                        cdi.Given(
                            request,
                            target,
                            memory_mib=record.memory_mib,
                            core_percent=record.core_percent,
                            share_id=str(share_id) if share_id else None,
                        )
                    )
                else:
                    given.append(cdi.Given(request, target))
        except BaseException:
            self._roll_back(made)
            raise
        return given

    def _slice(
        self,
        ref: ClaimRef,
        request: str,
        target: devices.Target,
        chip: backend.ChipInfo,
        ask: asks.SoftAsk,
        recorded: dict[str, claimledger.Record],
        made: list[claimledger.Record],
    ) -> claimledger.Record:
        """The soft slice's record: the one the ledger has when it says the same, else a new
        one written durably."""
        wanted = claimledger.soft_slice(
            claim_uid=ref.uid,
            namespace=ref.namespace,
            claim=ref.name,
            request=request,
            device=target.device,
            chip=chip.phy_id,
            chip_uuid=chip.uuid,
            memory_mib=ask.memory_mib,
            core_percent=ask.core_percent,
            created_at=self._clock(),
        )
        record = recorded.get(target.device)
        if record is not None:
            if not record.soft:
                raise errors.ClaimError(
                    ref.who,
                    f"the ledger has it as vNPU {record.vnpu_id} on chip {record.chip}",
                    device=target.device,
                    retryable=False,
                )
            same = (record.request, record.chip, record.memory_mib, record.core_percent)
            if same == (request, chip.phy_id, ask.memory_mib, ask.core_percent):
                log.info("soft_slice_reused", claim=ref.who, device=target.device)
                return record
            # Allocated anew under the same uid (deallocated meanwhile): the claim's size now.
            self._book.replace(record, wanted)
        else:
            self._book.add(wanted)
            made.append(wanted)
        log.info(
            "soft_slice_recorded",
            claim=ref.who,
            device=target.device,
            chip=chip.phy_id,
            memory_mib=ask.memory_mib,
            core_percent=ask.core_percent,
        )
        return wanted

    def _make_dirs(self, ref: ClaimRef, given: list[cdi.Given]) -> None:
        """The directory of each soft request (mounted at ``/hami-vnpu-shmem``)."""
        if self._soft is None:
            return
        parent = self._soft.requests_dir
        for request in sorted({g.request for g in given if g.target.kind == "soft"}):
            directory = self._soft.request_dir(ref.uid, request)
            if directory.parent != parent or directory.name in ("", ".", ".."):
                raise errors.ClaimError(  # request names are DNS labels: a second fence
                    ref.who, f"request {request!r} names no directory in {parent}", retryable=False
                )
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise errors.ClaimError(
                    ref.who, f"cannot create {directory}: {exc}", retryable=True
                ) from exc

    def _vnpu(
        self,
        ref: ClaimRef,
        request: str,
        target: devices.Target,
        chip: backend.ChipInfo,
        recorded: dict[str, claimledger.Record],
        made: list[claimledger.Record],
    ) -> claimledger.Record:
        assert target.template is not None
        record = recorded.get(target.device)
        if record is not None:
            if (record.chip, record.template) != (target.phy, target.template):
                raise errors.ClaimError(
                    ref.who,
                    f"the ledger has it as {record.template} on chip {record.chip}",
                    device=target.device,
                    retryable=False,
                )
            existing = {v.vnpu_id: v for v in self._npu.vnpus(chip.phy_id)}
            if record.vnpu_id in existing:
                if record.state is claimledger.State.INTENT:
                    owned = claimledger.owned(record)
                    self._book.replace(record, owned)
                    record = owned
                log.info("vnpu_reused", claim=ref.who, device=target.device, vnpu=record.vnpu_id)
                return record
            # Recorded but gone (a crash before the create, or the node rebooted): same id.
            self._create(ref, record, chip)
            owned = claimledger.owned(record)
            self._book.replace(record, owned)
            made.append(owned)
            return owned
        for attempt in range(_ID_TRIES):
            intent = claimledger.Record(
                claim_uid=ref.uid,
                namespace=ref.namespace,
                claim=ref.name,
                request=request,
                device=target.device,
                chip=chip.phy_id,
                chip_uuid=chip.uuid,
                vnpu_id=self._free_id(ref, target, chip),
                template=target.template,
                state=claimledger.State.INTENT,
                created_at=self._clock(),
            )
            self._book.add(intent)
            try:
                self._create(ref, intent, chip)
            except npu_errors.InvalidVnpuRequest as exc:
                self._book.remove(intent)
                taken = exc.field == limits.NO_ID and exc.code == npu_errors.RESOURCE_OCCUPIED
                if not taken or attempt + 1 == _ID_TRIES:
                    raise errors.ClaimError(
                        ref.who, str(exc), device=target.device, retryable=False
                    ) from exc
                continue
            except BaseException:
                self._book.remove(intent)
                raise
            owned = claimledger.owned(intent)
            self._book.replace(intent, owned)
            made.append(owned)
            return owned
        raise AssertionError("unreachable")

    def _create(self, ref: ClaimRef, record: claimledger.Record, chip: backend.ChipInfo) -> None:
        """Create the vNPU ``record`` names; InvalidVnpuRequest passes, other failures become
        ``ClaimError``."""
        try:
            created = self._npu.create_vnpu(chip.phy_id, record.template, record.vnpu_id)
        except npu_errors.InvalidVnpuRequest:
            raise
        except npu_errors.TemplateRefused as exc:
            raise errors.ClaimError(
                ref.who, f"the chip refused the vNPU: {exc}", device=record.device, retryable=True
            ) from exc
        except npu_errors.NpuError as exc:
            raise errors.ClaimError(
                ref.who, f"creating the vNPU failed: {exc}", device=record.device, retryable=True
            ) from exc
        if created != record.vnpu_id:  # a backend that ignores the id asked for
            self._npu.destroy_vnpu(chip.phy_id, created)
            raise errors.ClaimError(
                ref.who,
                f"asked for vNPU {record.vnpu_id}, the driver made {created}",
                device=record.device,
                retryable=False,
            )
        log.info(
            "vnpu_created",
            claim=ref.who,
            device=record.device,
            chip=chip.phy_id,
            vnpu=created,
            template=record.template,
        )

    def _free_id(self, ref: ClaimRef, target: devices.Target, chip: backend.ChipInfo) -> int:
        try:  # a chip gone since the slices were published answers nothing
            taken = {v.vnpu_id for v in self._npu.vnpus(chip.phy_id)}
        except npu_errors.NpuError as exc:
            raise errors.ClaimError(
                ref.who,
                f"cannot read the vNPUs of chip {chip.phy_id}: {exc}",
                device=target.device,
                retryable=True,
            ) from exc
        taken |= {r.vnpu_id for r in self._book.vnpus(chip.phy_id)}
        for vnpu_id in limits.id_range(chip.chip_name, chip.phy_id):
            if vnpu_id not in taken:
                return vnpu_id
        raise errors.ClaimError(
            ref.who,
            f"every vNPU id of chip {chip.phy_id} is taken",
            device=target.device,
            retryable=True,
        )

    def _roll_back(self, made: Iterable[claimledger.Record]) -> None:
        for record in made:
            if not record.soft:
                self._destroy_quietly(record, "rollback")
            self._book.remove(record)

    # -- Unprepare -----------------------------------------------------------------------

    def unprepare(self, ref: ClaimRef) -> None:
        """Undo ``prepare`` for ``ref``; a claim with nothing prepared is already done."""
        with self._lock:
            self._unprepare(ref.uid, ref.who, "unprepare")

    def _unprepare(self, uid: str, who: str, reason: str) -> None:
        for record in self._book.of_claim(uid):
            if record.soft:  # hami-vnpu-core holds it in the container: nothing on the chip
                log.info(
                    "soft_slice_released",
                    claim=who,
                    chip=record.chip,
                    device=record.device,
                    reason=reason,
                )
            else:
                self._release_vnpu(record, who, reason)
            self._book.remove(record)
        self._remove_dirs(uid, who)
        cdi.remove(self._cdi_dir, uid)
        log.info("claim_unprepared", claim=who, uid=uid, reason=reason)

    def _release_vnpu(self, record: claimledger.Record, who: str, reason: str) -> None:
        """Destroy ``record``'s vNPU unless another claim's record names it too."""
        others = [o for o in self._book.owners(record.vnpu) if o.claim_uid != record.claim_uid]
        if others:
            log.warning(
                "vnpu_kept_for_other_owner",
                claim=who,
                chip=record.chip,
                vnpu=record.vnpu_id,
                owners=[o.who for o in others],
            )
            return
        try:
            self._npu.destroy_vnpu(record.chip, record.vnpu_id)
        except npu_errors.VnpuNotFound:
            pass
        except npu_errors.NpuError as exc:
            raise errors.ClaimError(
                who,
                f"cannot destroy vNPU {record.vnpu_id} on chip {record.chip}: {exc}",
                device=record.device,
                retryable=True,
            ) from exc
        log.info("vnpu_destroyed", claim=who, chip=record.chip, vnpu=record.vnpu_id, reason=reason)

    def _remove_dirs(self, uid: str, who: str) -> None:
        """Remove the claim's soft request directories; one that stays is logged (it holds
        nothing the next claim reads: each claim's directories are its own)."""
        if self._soft is None:
            return
        for directory in self._soft.claim_dirs(uid):
            try:
                shutil.rmtree(directory)
            except OSError as exc:
                log.warning("soft_dir_not_removed", claim=who, path=str(directory), error=str(exc))
            else:
                log.info("soft_dir_removed", claim=who, path=str(directory))

    def _destroy_quietly(self, record: claimledger.Record, reason: str) -> None:
        try:
            self._npu.destroy_vnpu(record.chip, record.vnpu_id)
        except npu_errors.VnpuNotFound:
            pass
        except npu_errors.NpuError as exc:
            log.error(
                "vnpu_destroy_failed",
                chip=record.chip,
                vnpu=record.vnpu_id,
                reason=reason,
                error=str(exc),
            )

    # -- Reconcile -----------------------------------------------------------------------

    def reconcile(self) -> Reconciled:
        """Unprepare claims the API no longer has allocated; drop intents never created."""
        with self._lock:
            known: dict[str, tuple[str, str]] = {}
            for uid, who in cdi.claims(self._cdi_dir).items():
                namespace, _sep, name = who.partition("/")
                known[uid] = (namespace, name)
            for record in self._book.records():
                known[record.claim_uid] = (record.namespace, record.claim)
            unprepared: list[str] = []
            unjudged: list[str] = []
            for uid, (namespace, name) in sorted(known.items()):
                who = f"{namespace}/{name}"
                try:
                    found = self._api.get_claim(namespace, name) if name else None
                except kubeapi.KubeError as exc:
                    log.warning("claim_unreadable", claim=who, error=str(exc))
                    unjudged.append(who)
                    continue
                live = (
                    found is not None
                    and found.get("metadata", {}).get("uid") == uid
                    and bool((found.get("status") or {}).get("allocation"))
                )
                if live:
                    continue
                try:
                    self._unprepare(uid, who, "claim_gone")
                    unprepared.append(who)
                except errors.ClaimError as exc:
                    log.warning("claim_unprepare_failed", claim=who, error=str(exc))
                    unjudged.append(who)
            dropped = self._drop_uncreated_intents()
            outcome = Reconciled(tuple(unprepared), dropped, tuple(unjudged))
            log.info(
                "reconciled",
                unprepared=list(outcome.unprepared),
                intents_dropped=[list(v) for v in dropped],
                unjudged=list(outcome.unjudged),
            )
            return outcome

    def _drop_uncreated_intents(self) -> tuple[tuple[int, int], ...]:
        intents = [r for r in self._book.records() if r.state is claimledger.State.INTENT]
        dropped: list[claimledger.Record] = []
        for record in intents:
            try:
                present = {v.vnpu_id for v in self._npu.vnpus(record.chip)}
            except npu_errors.NpuError as exc:
                log.warning("chip_unreadable", chip=record.chip, error=str(exc))
                continue
            if record.vnpu_id in present:
                self._book.replace(record, claimledger.owned(record))
            else:
                dropped.append(record)
        if dropped:
            self._book.remove(*dropped)
        return tuple(r.vnpu for r in dropped)


def _base_request(request: str) -> str:
    """The claim's request a result belongs to (``gpu/large`` -> ``gpu``, a firstAvailable
    subrequest): containers name top-level requests only."""
    return request.partition("/")[0]
