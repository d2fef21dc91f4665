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
while the driver reports a container holding it. What was kept is in ``Outcome.waiting``
so the caller can try again later. Callers hold the plugin's allocation lock.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import structlog

from vnpu_core import ledger as core_ledger
from vnpu_device_plugin import cluster, ledger, lifecycle, metrics, podresources
from vnpu_device_plugin.npu import backend
from vnpu_device_plugin.npu import errors as npu_errors
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
    """Reclaims vNPUs of ``book``'s records on ``node`` (see the module docstring)."""

    def __init__(
        self,
        npu: backend.Backend,
        book: ledger.Ledger,
        vnpus: lifecycle.Lifecycle,
        api: cluster.Cluster,
        stats: metrics.Metrics,
        *,
        node: str,
        kubelet: Callable[[], podresources.Listing | None],
        handouts: podresources.Handouts,
        attempts: int = 2,
    ) -> None:
        self._npu = npu
        self._book = book
        self._vnpus = vnpus
        self._api = api
        self._stats = stats
        self._node = node
        self._kubelet = kubelet
        self.handouts = handouts
        self._attempts = attempts

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
        groups: dict[tuple[int, int], list[ledger.Record]] = {}
        for record in self._book.records():
            if chips is not None and record.chip not in chips:
                continue
            groups.setdefault(record.vnpu, []).append(record)
        groups = {k: v for k, v in groups.items() if any(owners.about(r.pod_uid) for r in v)}
        if not groups:
            return outcome
        if driver is None:
            driver = self._read_driver({chip for chip, _ in groups})
        kubelet = _Kubelet(self._kubelet)
        for (chip, vnpu_id), records in sorted(groups.items()):
            vnpus = driver.get(chip)
            if vnpus is None:
                continue  # the chip does not answer: nothing is known about its vNPUs
            reasons = [self._done(r, owners, kubelet, outcome) for r in records]
            done = [r for r, why in zip(records, reasons, strict=True) if why]
            info = vnpus.get(vnpu_id)
            if len(done) < len(records):
                self._book.remove(*done)  # the vNPU stays for the owners still running
                continue
            if info is None:
                self._book.remove(*records)  # destroyed elsewhere: nothing left to reclaim
                continue
            if info.container_used:
                outcome.kept_in_use.append((chip, vnpu_id))
                outcome.waiting.update(r.pod_uid for r in records)
                continue
            if self.destroy(chip, vnpu_id, str(reasons[0]), trigger, outcome):
                self._book.remove(*records)
            else:
                outcome.waiting.update(r.pod_uid for r in records)
        left = self._book.records()
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

    def for_allocate(self, chips: Collection[int]) -> Outcome:
        """Reclaim on ``chips`` before Allocate refuses for room, with a fresh list of the pods.

        Nothing is read from the API when the chips carry no vNPU and no record.
        """
        driver = self._read_driver(set(chips))
        present = sorted((chip, i) for chip in chips for i in driver.get(chip) or {})
        recorded = {r.chip for r in self._book.records()}
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
        """Destroy one vNPU nobody needs, counted under ``reason`` and ``trigger``; True when gone."""
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
        self._stats.vnpus_reclaimed.labels(reason).inc()
        self._stats.vnpus_reclaimed_by_trigger.labels(trigger.value).inc()
        outcome.reclaimed.append((chip, vnpu_id, reason))
        return True
