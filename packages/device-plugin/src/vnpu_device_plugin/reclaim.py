"""Destroying the vNPUs whose owners are done: the one code path every reclaim goes through.

Three callers, each a ``Trigger`` (the label of
``vnpu_device_plugin_vnpus_reclaimed_by_trigger_total``):

* ``periodic``: the ``reconciler``'s pass, with every pod of the node listed;
* ``watch``: ``podwatch``, when the API reports an owner pod deleted or finished;
* ``allocate``: ``allocations``, when a chip it must use is short of room (or a whole chip
  it hands out still carries vNPUs), for the owners on those chips.

``Owners`` says what is known of the owner pods: a full list of the node's pods (a UID
missing from it is gone), or the few pods a watch event reported. A vNPU is destroyed
when **every** owner is done: its pod is gone from the API (by UID: a pod created again
with the same name is another pod) and kubelet no longer lists its containers with the
devices they got (``podresources``; when PodResources does not answer, it is kept), or
the pod is Succeeded/Failed, or the owner is an init container that has terminated. Never
while the driver reports a container holding it, and never on hearsay: a ledger record is
only a claim (the file can be edited), so before destroying, the reclaimer also asks
whether anything else says a live container may use the vNPU, and keeps it when

* the grant book names the vNPU for a pod other than the recorded owners that is not known
  to be done (``granted_to_live_pod``);
* kubelet lists a pod other than the owners with devices on the chip that neither the
  grant book nor the ledger accounts for (``unaccounted_holder``);
* an owner said to be gone from the API is there after all when looked up by name, with
  its UID (``owner_alive``).

Each is logged once (``reclaim_withheld``) and counted in
``vnpu_device_plugin_reclaims_withheld_total{reason}``. Last, ``destroy`` (which the
reconciler's unowned vNPUs go through too) asks ``custody`` whether kubelet lists a running
container the vNPU may be given to, or cannot say: kubelet outranks both state files. The
same pass drops the grant book's grants whose pods are done, by the same rules. What was
kept is in ``Outcome.waiting`` so the caller can try again later. Callers hold the plugin's
allocation lock.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import structlog

from vnpu_core import ledger as core_ledger
from vnpu_device_plugin import cluster, custody, grants, ledger, lifecycle, metrics, podresources
from vnpu_npu import backend
from vnpu_npu import errors as npu_errors
from vnpu_service import kubeapi

log = structlog.get_logger(__name__)
Json = dict[str, Any]
Driver = Mapping[int, Mapping[int, backend.VnpuInfo]]


class Trigger(StrEnum):
    PERIODIC = "periodic"
    WATCH = "watch"
    ALLOCATE = "allocate"


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid"))


def init_finished(pod: Mapping[str, Any], container: str) -> bool:
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if status.get("name") == container:
            return bool((status.get("state") or {}).get("terminated"))
    return False


def finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in core_ledger.FINISHED_PHASES


@dataclass(frozen=True)
class Owners:
    """What is known of owner pods: ``pods`` by UID as the API shows them, ``gone`` UIDs.

    With ``complete`` the pods are a full list of the node's pods, so a UID not among
    them is gone; without it, only the UIDs named are judged.
    """

    pods: Mapping[str, Json] = field(default_factory=dict)
    gone: frozenset[str] = frozenset()
    complete: bool = False

    @classmethod
    def listed(cls, pods: Iterable[Json]) -> Owners:
        return cls({_uid(p): p for p in pods}, complete=True)

    def about(self, uid: str) -> bool:
        return self.complete or uid in self.pods or uid in self.gone


@dataclass
class Outcome:
    """What one reclaim did and what it had to keep."""

    reclaimed: list[tuple[int, int, str]] = field(default_factory=list)  # chip, vNPU, reason
    kept_in_use: list[tuple[int, int]] = field(default_factory=list)
    kept_listed: list[tuple[int, int]] = field(default_factory=list)  # kubelet lists the owner
    waiting: set[str] = field(default_factory=set)  # owner UIDs done but not reclaimed yet
    left: list[tuple[int, int]] = field(default_factory=list)  # vNPUs still on the chips asked
    withheld: list[tuple[int, int, str]] = field(default_factory=list)  # chip, vNPU, reason
    released: list[grants.Grant] = field(default_factory=list)  # grants of pods that are done


class _Kubelet:
    """kubelet's listing, read at most once per reclaim and only when an owner is gone."""

    def __init__(self, read: Callable[[], podresources.Listing | None]) -> None:
        self._read = read
        self._read_yet = False
        self._listing: podresources.Listing | None = None

    def listing(self) -> podresources.Listing | None:
        if not self._read_yet:
            self._listing = self._read()
            self._read_yet = True
        return self._listing


class Reclaimer:
    """Reclaims vNPUs of ``vnpu_ledger``'s records on ``node`` (see the module docstring);
    ``book`` is the grant book, whose done pods' grants it drops too."""

    def __init__(
        self,
        npu: backend.Backend,
        vnpu_ledger: ledger.Ledger,
        vnpus: lifecycle.Lifecycle,
        api: cluster.Cluster,
        stats: metrics.Metrics,
        *,
        node: str,
        kubelet: Callable[[], podresources.Listing | None],
        handouts: podresources.Handouts,
        book: grants.Book | None = None,
        keeper: custody.Custody | None = None,
        attempts: int = 2,
    ) -> None:
        self._npu = npu
        self._ledger = vnpu_ledger
        self._vnpus = vnpus
        self._api = api
        self._stats = stats
        self._node = node
        self._kubelet = kubelet
        self.handouts = handouts
        self._book = book
        self._attempts = attempts
        self._reported: set[tuple[int, int, str]] = set()  # withheld vNPUs already logged
        self.keeper = keeper or custody.Custody(npu, vnpu_ledger, book, stats, kubelet=kubelet)

    def reclaim(
        self,
        owners: Owners,
        trigger: Trigger,
        *,
        driver: Driver | None = None,
        chips: Collection[int] | None = None,
    ) -> Outcome:
        """Destroy the vNPUs (on ``chips``, else all) every owner of which is done.

        ``driver`` is the vNPUs by chip and id when the caller has read them; otherwise the
        chips concerned are read here.
        """
        outcome = Outcome()
        kubelet = _Kubelet(self._kubelet)
        self._release_grants(owners, kubelet, outcome, chips, trigger)
        groups: dict[tuple[int, int], list[ledger.Record]] = {}
        for record in self._ledger.records():
            if chips is not None and record.chip not in chips:
                continue
            groups.setdefault(record.vnpu, []).append(record)
        groups = {k: v for k, v in groups.items() if any(owners.about(r.pod_uid) for r in v)}
        if not groups:
            return outcome
        if driver is None:
            driver = self._read_driver({chip for chip, _ in groups})
        for (chip, vnpu_id), records in sorted(groups.items()):
            vnpus = driver.get(chip)
            if vnpus is None:
                continue  # the chip does not answer: nothing is known about its vNPUs
            reasons = [self._done(r, owners, kubelet, outcome) for r in records]
            done = [r for r, why in zip(records, reasons, strict=True) if why]
            info = vnpus.get(vnpu_id)
            if len(done) < len(records):
                self._ledger.remove(*done)  # the vNPU stays for the owners still running
                continue
            if info is None:
                self._ledger.remove(*records)  # destroyed elsewhere: nothing left to reclaim
                continue
            if info.container_used:
                outcome.kept_in_use.append((chip, vnpu_id))
                outcome.waiting.update(r.pod_uid for r in records)
                continue
            doubt = self._doubt(chip, vnpu_id, records, reasons, kubelet)
            if doubt is not None:
                self.withhold(chip, vnpu_id, doubt, records, outcome)
                continue
            if self.destroy(chip, vnpu_id, str(reasons[0]), trigger, outcome):
                self._ledger.remove(*records)
            else:
                outcome.waiting.update(r.pod_uid for r in records)
        left = self._ledger.records()
        self.handouts.keep_only(r.pod_uid for r in left)
        self._stats.vnpus_owned.set(len({r.vnpu for r in left}))
        if trigger is not Trigger.PERIODIC and (outcome.reclaimed or outcome.kept_listed):
            log.info(
                "vnpus_reclaimed",
                trigger=trigger.value,
                reclaimed=outcome.reclaimed,
                kept_in_use=outcome.kept_in_use,
                kept_listed=outcome.kept_listed,
            )
        return outcome

    def _release_grants(
        self,
        owners: Owners,
        kubelet: _Kubelet,
        outcome: Outcome,
        chips: Collection[int] | None,
        trigger: Trigger,
    ) -> None:
        """Drop the grants of pods that are done, by the rules vNPU owners are judged by."""
        if self._book is None:
            return
        done = []
        for grant in self._book.records():
            if chips is not None and grant.chip not in chips:
                continue
            if not owners.about(grant.pod_uid):
                continue
            pod = owners.pods.get(grant.pod_uid)
            if pod is None:
                listing = kubelet.listing()
                if podresources.still_listed(listing, grant.namespace, grant.pod, grant.device_ids):
                    outcome.waiting.add(grant.pod_uid)
                    continue
                done.append(grant)
            elif finished(pod) or (grant.init and init_finished(pod, grant.container)):
                done.append(grant)
        if done:
            self._book.remove(*done)
            outcome.released += done
            log.info(
                "grants_released",
                trigger=trigger.value,
                pods=sorted({g.who for g in done}),
                chips=sorted({g.chip for g in done}),
            )

    def granted_elsewhere(self, chip: int, vnpu_id: int, owners: Collection[str] = ()) -> bool:
        """Whether the grant book names the vNPU for a pod whose UID is not in ``owners``."""
        if self._book is None:
            return False
        return any(
            g.vnpu == (chip, vnpu_id) and g.pod_uid not in owners for g in self._book.records()
        )

    def claimed_chips(self) -> set[int]:
        """Chips where the grant book names a vNPU this plugin did not create (runtime mode)
        or a soft slice: an unowned vNPU there may be that container's."""
        if self._book is None:
            return set()
        return {
            g.chip
            for g in self._book.records()
            if g.kind is grants.Kind.SOFT or (g.kind is grants.Kind.VNPU and g.vnpu is None)
        }

    def _doubt(
        self,
        chip: int,
        vnpu_id: int,
        records: list[ledger.Record],
        reasons: list[str | None],
        kubelet: _Kubelet,
    ) -> str | None:
        """Why a live container may still use a vNPU whose recorded owners are all done."""
        if self._book is None:
            return None
        uids = {r.pod_uid for r in records}
        if self.granted_elsewhere(chip, vnpu_id, uids):
            return "granted_to_live_pod"
        listing = kubelet.listing()
        if listing is not None:
            owners = {(r.namespace, r.pod) for r in records}
            accounted = {(g.namespace, g.pod) for g in self._book.records()}
            accounted |= {(r.namespace, r.pod) for r in self._ledger.records()}
            uuid = records[0].chip_uuid
            for key, ids in listing.pods.items():
                if key in owners or key in accounted:
                    continue
                if any(i.rpartition("-")[0] == uuid for i in ids):
                    return "unaccounted_holder"
        for record, reason in zip(records, reasons, strict=True):
            if reason == "owner_gone" and self._still_there(record):
                return "owner_alive"
        return None

    def _still_there(self, record: ledger.Record) -> bool:
        """The owner, looked up by name, is there with its UID and not finished (or the API
        cannot say: then it may be)."""
        try:
            pod = cluster.retrying(
                lambda: self._api.get_pod(record.namespace, record.pod),
                self._attempts,
                on_retry=self._stats.retried,
            )
        except kubeapi.NotFound:
            return False
        except kubeapi.ApiError as exc:
            log.warning("reclaim_unconfirmed", pod=record.who, vnpu=record.vnpu, error=str(exc))
            return True
        return _uid(pod) == record.pod_uid and not finished(pod)

    def withhold(
        self,
        chip: int,
        vnpu_id: int,
        reason: str,
        records: Collection[ledger.Record],
        outcome: Outcome,
    ) -> None:
        """Keep a vNPU that something says a live container may use; report it once."""
        outcome.withheld.append((chip, vnpu_id, reason))
        outcome.waiting.update(r.pod_uid for r in records)
        if (chip, vnpu_id, reason) in self._reported:
            return
        self._reported.add((chip, vnpu_id, reason))
        self._stats.reclaims_withheld.labels(reason).inc()
        log.warning(
            "reclaim_withheld",
            chip=chip,
            vnpu=vnpu_id,
            reason=reason,
            recorded_owners=sorted({r.who for r in records}),
            effect="kept: a live container may use it; check the ledger and the grant book",
        )

    def for_allocate(self, chips: Collection[int]) -> Outcome:
        """Reclaim on ``chips`` before Allocate refuses for room, with a fresh list of the pods.

        Nothing is read from the API when the chips carry no vNPU and no record.
        """
        driver = self._read_driver(set(chips))
        present = sorted((chip, i) for chip in chips for i in driver.get(chip) or {})
        recorded = {r.chip for r in self._ledger.records()}
        if not present and not recorded & set(chips):
            return Outcome()
        try:
            pods = cluster.retrying(
                lambda: self._api.list_pods(self._node),
                self._attempts,
                on_retry=self._stats.retried,
            )
        except kubeapi.ApiError as exc:
            log.warning("reclaim_without_pods", trigger=Trigger.ALLOCATE.value, error=str(exc))
            return Outcome(left=present)
        outcome = self.reclaim(Owners.listed(pods), Trigger.ALLOCATE, driver=driver, chips=chips)
        gone = {(chip, vnpu_id) for chip, vnpu_id, _why in outcome.reclaimed}
        outcome.left = [v for v in present if v not in gone]
        return outcome

    def _read_driver(self, chips: Iterable[int]) -> dict[int, dict[int, backend.VnpuInfo]]:
        """vNPUs by chip and id, for the chips that answer."""
        found = {}
        for chip in sorted(chips):
            try:
                found[chip] = {v.vnpu_id: v for v in self._npu.vnpus(chip)}
            except npu_errors.NpuError as exc:
                log.warning("vnpus_unreadable", chip=chip, error=str(exc))
        return found

    def _done(
        self, record: ledger.Record, owners: Owners, kubelet: _Kubelet, outcome: Outcome
    ) -> str | None:
        """Why the record's owner no longer needs its vNPU, or None while it may."""
        pod = owners.pods.get(record.pod_uid)
        if pod is None:
            if not owners.about(record.pod_uid):
                return None
            if self.handouts.held(record, kubelet.listing()):
                outcome.kept_listed.append(record.vnpu)
                outcome.waiting.add(record.pod_uid)
                return None
            return "owner_gone"
        if finished(pod):
            return "owner_finished"
        if record.init and init_finished(pod, record.container):
            return "init_finished"
        return None

    def destroy(
        self, chip: int, vnpu_id: int, reason: str, trigger: Trigger, outcome: Outcome
    ) -> bool:
        """Destroy one vNPU nobody needs, counted under ``reason`` and ``trigger``; True when gone.

        Not while kubelet lists a running container it may be given to, nor while kubelet
        cannot say (``custody``): then it is kept, in ``outcome.withheld``.
        """
        hold = self.keeper.check(chip, vnpu_id, reason)
        if hold is not None:
            outcome.withheld.append((chip, vnpu_id, hold.reason))
            return False
        try:
            self._vnpus.destroy(chip, vnpu_id, "reclaimed")
        except npu_errors.VnpuNotFound:
            return True
        except npu_errors.VnpuInUse:
            outcome.kept_in_use.append((chip, vnpu_id))
            return False
        except npu_errors.NpuError as exc:
            log.error("vnpu_reclaim_failed", chip=chip, vnpu=vnpu_id, error=str(exc))
            return False
        self._reported = {r for r in self._reported if r[:2] != (chip, vnpu_id)}
        self._stats.vnpus_reclaimed.labels(reason).inc()
        self._stats.vnpus_reclaimed_by_trigger.labels(trigger.value).inc()
        outcome.reclaimed.append((chip, vnpu_id, reason))
        return True
