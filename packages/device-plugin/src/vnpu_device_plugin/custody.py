"""Kubelet outranks the state files: the last check before any vNPU is destroyed.

The ownership ledger and the grant book are files on the node, and a file can be edited
or restored from elsewhere: both can be made to say that a running container's vNPU
belongs to a pod that is done or never existed. Kubelet's PodResources is the node's own
record of which running container holds which device ids, so before a vNPU is destroyed
(``reclaim``: the periodic pass, the pod watch, an Allocate short of room; ``reconciler``:
an unowned vNPU; ``lifecycle``: a failed Allocate's rollback) ``Custody.check`` asks it:

* **PodResources does not answer**: nothing is destroyed. ``vnpu_destroy_deferred`` is logged
  once per vNPU and counted in
  ``vnpu_device_plugin_reclaims_withheld_total{reason="pod_resources_unavailable"}``; the
  caller tries again on its next pass.
* **Every container kubelet lists with device ids on the vNPU's chip must be accounted for**
  by the grant book: its newest grant with the container's namespace, pod and container
  name, on that chip, with one of those device ids, names a whole chip, a soft slice, or
  another vNPU of the chip that exists. A device id is kubelet's own choice, so a grant that
  repeats it agrees with kubelet. Otherwise the vNPU may be that container's and it is
  kept: ``unrecorded_holder`` (no such grant, or one naming a vNPU that does not exist or,
  in runtime mode, a vNPU whose id is not known) or ``granted_to_running_container`` (the
  grant names this very vNPU, while the ledger says nobody needs it).

Each disagreement is logged once while it lasts (``state_disagreement``: the pod, the
container, kubelet's device ids, the chip, the vNPU, what the ledger and the grant book said)
and counted in ``vnpu_device_plugin_state_disagreements_total{reason}``. The vNPU goes once
kubelet no longer lists a container it may be given to. ``plugin`` builds one ``Custody``
and hands it to ``lifecycle`` and ``reclaim``; callers hold the allocation lock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import structlog

from vnpu_device_plugin import grants, ledger, metrics, podresources
from vnpu_npu import backend
from vnpu_npu import errors as npu_errors

log = structlog.get_logger(__name__)
UNAVAILABLE = "pod_resources_unavailable"


@dataclass(frozen=True)
class Hold:
    """Why a vNPU is kept: ``reason`` (``metrics.DISAGREEMENT_REASONS`` or ``UNAVAILABLE``)
    and, for a disagreement, the container kubelet lists and its device ids on the chip."""

    reason: str
    pod: str = ""
    container: str = ""
    devices: tuple[str, ...] = ()


class Custody:
    """Checks vNPUs of ``npu`` against ``kubelet`` (PodResources) before they are destroyed;
    ``book`` is the grant book and ``vnpu_ledger`` the ownership ledger, quoted in the log."""

    def __init__(
        self,
        npu: backend.Backend,
        vnpu_ledger: ledger.Ledger,
        book: grants.Book | None,
        stats: metrics.Metrics,
        *,
        kubelet: Callable[[], podresources.Listing | None],
    ) -> None:
        self._npu = npu
        self._ledger = vnpu_ledger
        self._book = book
        self._stats = stats
        self._kubelet = kubelet
        self._uuids: dict[int, str] = {}
        self._reported: set[tuple[int, int, str, str, str]] = set()

    def _uuid(self, chip: int) -> str | None:
        if chip not in self._uuids:
            try:
                self._uuids = {c.phy_id: c.uuid for c in self._npu.chips()}
            except npu_errors.NpuError as exc:
                log.warning("chips_unreadable", error=str(exc))
        return self._uuids.get(chip)

    def check(self, chip: int, vnpu_id: int, why: str) -> Hold | None:
        """None when nothing kubelet lists may hold vNPU ``vnpu_id`` of ``chip``; else why it
        must stay (logged and counted once). ``why`` is what the caller destroys it for."""
        listing = self._kubelet()
        if listing is None:
            self._report(chip, vnpu_id, Hold(UNAVAILABLE), why)
            return Hold(UNAVAILABLE)
        uuid = self._uuid(chip)
        holders = listing.holders(uuid) if uuid is not None else []
        for namespace, pod, container, ids in holders:
            reason = self._unaccounted(chip, vnpu_id, namespace, pod, container, ids)
            if reason is not None:
                hold = Hold(reason, f"{namespace}/{pod}", container, tuple(sorted(ids)))
                self._report(chip, vnpu_id, hold, why)
                return hold
        self._reported = {r for r in self._reported if r[:2] != (chip, vnpu_id)}
        return None

    def _unaccounted(
        self,
        chip: int,
        vnpu_id: int,
        namespace: str,
        pod: str,
        container: str,
        ids: frozenset[str],
    ) -> str | None:
        """Why the listed container may hold the vNPU, or None when the grant book accounts
        for what it holds on the chip with something else."""
        if self._book is None:
            return "unrecorded_holder"
        matching = [
            g
            for g in self._book.records()
            if (g.namespace, g.pod, g.container, g.chip) == (namespace, pod, container, chip)
            and ids & set(g.device_ids)
        ]
        if not matching:
            return "unrecorded_holder"
        newest = max(matching, key=lambda g: g.granted_at)
        if newest.kind is not grants.Kind.VNPU:
            return None  # a whole chip or a soft slice: no vNPU of the chip is its
        if newest.vnpu == (chip, vnpu_id):
            return "granted_to_running_container"
        if newest.vnpu is None:
            return "unrecorded_holder"  # made by the runtime: which one is not known
        try:
            present = {v.vnpu_id for v in self._npu.vnpus(chip)}
        except npu_errors.NpuError:
            return None  # the chip does not answer: the destroy will not happen either
        return None if newest.vnpu_id in present else "unrecorded_holder"

    def _report(self, chip: int, vnpu_id: int, hold: Hold, why: str) -> None:
        key = (chip, vnpu_id, hold.reason, hold.pod, hold.container)
        if key in self._reported:
            return
        self._reported.add(key)
        if hold.reason == UNAVAILABLE:
            self._stats.reclaims_withheld.labels(UNAVAILABLE).inc()
            log.warning(
                "vnpu_destroy_deferred",
                chip=chip,
                vnpu=vnpu_id,
                destroy_reason=why,
                reason=UNAVAILABLE,
                effect="kept until kubelet's PodResources answers: nothing proves no running "
                "container holds it",
            )
            return
        self._stats.state_disagreements.labels(hold.reason).inc()
        log.warning(
            "state_disagreement",
            pod=hold.pod,
            container=hold.container,
            devices=list(hold.devices),
            chip=chip,
            vnpu=vnpu_id,
            reason=hold.reason,
            destroy_reason=why,
            ledger_says=self._ledger_says(chip, vnpu_id),
            grant_book_says=self._book_says(chip, vnpu_id, hold),
            effect="kept: kubelet lists a running container that may hold it; "
            "the state files are wrong (edited, or restored from elsewhere)",
        )

    def _ledger_says(self, chip: int, vnpu_id: int) -> str:
        owners = self._ledger.owners(chip, vnpu_id)
        if not owners:
            return f"vNPU {vnpu_id} of chip {chip} has no owner"
        shown = ", ".join(f"{r.who} {r.container} (uid {r.pod_uid})" for r in owners)
        return f"vNPU {vnpu_id} of chip {chip} is owned by {shown}, all done"

    def _book_says(self, chip: int, vnpu_id: int, hold: Hold) -> str:
        if self._book is None:
            return "no grant book"
        namespace, _, pod = hold.pod.partition("/")
        theirs = [
            g
            for g in self._book.records()
            if (g.namespace, g.pod, g.container, g.chip) == (namespace, pod, hold.container, chip)
        ]
        named = [g for g in self._book.records() if g.vnpu == (chip, vnpu_id)]
        said = (
            "; ".join(f"{g.kind.value} vNPU {g.vnpu_id} ids {list(g.device_ids)}" for g in theirs)
            if theirs
            else "nothing"
        )
        given = ", ".join(f"{g.who} {g.container} (uid {g.pod_uid})" for g in named) or "nobody"
        return (
            f"{hold.pod} {hold.container} on chip {chip}: {said}; vNPU {vnpu_id} granted to {given}"
        )
