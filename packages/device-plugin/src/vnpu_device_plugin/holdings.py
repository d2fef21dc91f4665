"""What each chip of the node is held by, and whether a scheduler's decision fits beside it.

The device plugin is the last line of defence: whoever wrote the decision annotations (a
scheduler with a stale or tampered view of the node, or a tenant who bound a pod by hand),
the plugin grants nothing a live pod holds. Before an Allocate creates or hands out
anything, ``Holdings.check`` compares the containers to serve with what is held on their
chips:

* the grant book (``grants``): every device this plugin handed out, whole chips and soft
  slices included;
* the ownership ledger (``ledger``): vNPUs it created that no grant names (made before the
  book existed);
* kubelet's PodResources: a pod kubelet lists with devices here that neither records (the
  book was lost, or the devices were given before it existed) is a *stranger*; what it
  holds is read from its ``devices-allocated`` annotation, and where that says nothing,
  it is taken to hold the chips of its device ids whole.

A whole chip needs the chip idle; a vNPU or soft slice needs the chip not held whole or in
the other sharing mode, and room in every budget (``vnpu_core.budgets``, the scheduler's
own arithmetic: vNPU slots, memory, AI cores, AI CPUs, media engines; soft slots, memory,
core percent). A pod's run-to-completion init containers count as the scheduler counts
them, each alone, never beside the app containers. Holdings are taken to be live until a
conflict is found; then the pods involved are judged with the reclaimer's rules (gone from
the API by UID and no longer listed by kubelet with their devices, or finished, or an init
container that terminated), the grants of those that are done are dropped, and the check
runs again. What still conflicts raises ``errors.GrantConflict`` (counted in
``vnpu_device_plugin_grant_conflicts_total{reason}``).

``encode`` is the vnpu-only node annotation ``vnpu.io/granted-<CW>`` (``vnpu_core.granted``)
that ``publisher`` writes, so a scheduler can count what was granted rather than what pod
annotations claim. ``allocations`` calls ``check`` under the allocation lock; ``placement``
counts ``live`` (the recorded holdings of pods not done) when it decides for a pod.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import structlog

from vnpu_core import budgets, catalog, granted, inventory, requests
from vnpu_core import ledger as core_ledger
from vnpu_core.inventory import ChipUsage
from vnpu_device_plugin import (
    cluster,
    devices,
    errors,
    grants,
    ledger,
    metrics,
    podplan,
    podresources,
    reclaim,
)
from vnpu_npu import backend, limits

log = structlog.get_logger(__name__)
Json = dict[str, Any]


class Source(StrEnum):
    GRANT = "grant"  # the grant book
    LEDGER = "ledger"  # a vNPU the ledger names and no grant does
    KUBELET = "kubelet"  # a pod kubelet lists with devices here that nothing records


@dataclass(frozen=True, slots=True)
class Holding:
    """One thing one container holds on one chip."""

    pod_uid: str
    namespace: str
    pod: str
    container: str
    init: bool
    chip: int
    chip_uuid: str
    shown: granted.Holding | None  # as published (init aside); None for a stranger
    usage: ChipUsage
    device_ids: frozenset[str]
    source: Source
    grant: grants.Grant | None = None

    @property
    def who(self) -> str:
        return f"{self.namespace}/{self.pod}"

    @property
    def holder(self) -> tuple[str, str, str]:
        return (self.pod_uid, self.namespace, self.pod)


def whole_usage(model: catalog.ChipModel) -> ChipUsage:
    return granted.holding_usage(model, granted.Holding(granted.Kind.WHOLE))


def vnpu_usage(model: catalog.ChipModel, template: str) -> ChipUsage:
    return granted.holding_usage(model, granted.Holding(granted.Kind.VNPU, template=template))


def soft_usage(model: catalog.ChipModel, memory_mib: int, cores: int) -> ChipUsage:
    published = granted.Holding(granted.Kind.SOFT, memory_mib=memory_mib, cores=cores)
    return granted.holding_usage(model, published)


def from_grant(model: catalog.ChipModel, grant: grants.Grant) -> Holding:
    if grant.kind is grants.Kind.WHOLE:
        usage = whole_usage(model)
    elif grant.kind is grants.Kind.VNPU:
        usage = vnpu_usage(model, grant.template)
    else:
        usage = soft_usage(model, grant.memory_mib, grant.cores)
    return Holding(
        grant.pod_uid,
        grant.namespace,
        grant.pod,
        grant.container,
        grant.init,
        grant.chip,
        grant.chip_uuid,
        granted.Holding(grant.kind, grant.template, grant.memory_mib, grant.cores),
        usage,
        frozenset(grant.device_ids),
        Source.GRANT,
        grant,
    )


def from_record(model: catalog.ChipModel, record: ledger.Record) -> Holding:
    return Holding(
        record.pod_uid,
        record.namespace,
        record.pod,
        record.container,
        record.init,
        record.chip,
        record.chip_uuid,
        granted.Holding(granted.Kind.VNPU, template=record.template),
        vnpu_usage(model, record.template),
        frozenset(),
        Source.LEDGER,
    )


def _total(usages: Iterable[ChipUsage]) -> ChipUsage:
    total = inventory.IDLE
    for usage in usages:
        total = total.plus(usage)
    return total


def pod_usage(held: Iterable[Holding]) -> ChipUsage:
    """What one pod's holdings on one chip take: its app containers together, each
    run-to-completion init container alone (the larger of the two, budget by budget)."""
    held = list(held)
    usage = _total(h.usage for h in held if not h.init)
    for holding in held:
        if holding.init:
            usage = usage.peak(holding.usage)
    return usage


def encode(held: Iterable[Holding]) -> str:
    """The ``vnpu.io/granted-<CW>`` value for what this plugin granted (``vnpu_core.granted``).

    Strangers (pods kubelet lists with devices this plugin did not grant) are not published.
    """
    chips: dict[str, dict[str, list[granted.Holding]]] = {}
    for holding in held:
        if holding.shown is None:
            continue
        shown = dataclasses.replace(holding.shown, init=holding.init)
        chips.setdefault(holding.chip_uuid, {}).setdefault(holding.pod_uid, []).append(shown)
    return granted.encode(chips)


@dataclass(frozen=True)
class Conflict:
    chip: int
    reason: str  # metrics.CONFLICT_REASONS
    problem: str
    holders: tuple[str, ...]


@dataclass(frozen=True)
class _Want:
    """One device a container is about to get."""

    container: str
    init: bool
    device: podplan.Device
    usage: ChipUsage


class Holdings:
    """What ``inventory``'s chips are held by (see the module docstring)."""

    def __init__(
        self,
        inventory_: devices.Inventory,
        book: grants.Book,
        vnpus: ledger.Ledger,
        api: cluster.Cluster,
        stats: metrics.Metrics,
        *,
        kubelet: Callable[[], podresources.Listing | None],
        attempts: int,
    ) -> None:
        self._inventory = inventory_
        self._book = book
        self._ledger = vnpus
        self._api = api
        self._stats = stats
        self._kubelet = kubelet
        self._attempts = attempts
        self._strangers_logged: frozenset[str] = frozenset()  # logged once while they stay
        model = inventory_.model
        self._chips = {
            c.phy_id: inventory.Chip(
                inventory_.index_of(c.phy_id),
                c.uuid,
                model,
                slots=inventory_.slots,
                memory_mib=model.memory_allocatable_mib,
            )
            for c in inventory_.chips
        }

    # -- what is held ------------------------------------------------------------------

    def recorded(self) -> list[Holding]:
        """The grant book's holdings, and the ledger's vNPUs no grant names."""
        model = self._inventory.model
        book = self._book.records()
        named = {(g.pod_uid, g.container, g.chip, g.vnpu_id) for g in book}
        held = [from_grant(model, g) for g in book]
        held += [
            from_record(model, r)
            for r in self._ledger.records()
            if (r.pod_uid, r.container, r.chip, r.vnpu_id) not in named
        ]
        return held

    def annotation(self) -> str:
        return encode(self.recorded())

    def live(self, pods: Sequence[Json], listing: podresources.Listing | None) -> list[Holding]:
        """The recorded holdings whose containers may still use them (``alive``), judged by
        ``pods`` (the node's pods, just listed) and ``listing``: what ``placement`` counts
        beside the pods' own decisions."""
        by_uid = {str((p.get("metadata") or {}).get("uid")): p for p in pods}
        return [h for h in self.recorded() if alive(h, by_uid.get(h.pod_uid), listing)]

    def _strangers(
        self,
        plan: podplan.PodPlan,
        held: Sequence[Holding],
        listing: podresources.Listing | None,
    ) -> tuple[list[Holding], list[Json] | None]:
        """Holdings of pods kubelet lists with devices here that nothing records; the pods
        listed from the API when they had to be read."""
        if listing is None:
            return [], None
        known = {(h.namespace, h.pod) for h in held} | {(plan.namespace, plan.name)}
        unknown = {k: ids for k, ids in listing.pods.items() if ids and k not in known}
        if not unknown:
            return [], None
        pods = self._list()
        by_name = {}
        for pod in pods:
            meta = pod.get("metadata") or {}
            by_name[(str(meta.get("namespace")), str(meta.get("name")))] = pod
        model = self._inventory.model
        ours = {c.uuid: c for c in self._inventory.chips}
        found: list[Holding] = []
        for (namespace, name), ids in sorted(unknown.items()):
            pod_ = by_name.get((namespace, name))
            uid = str((pod_.get("metadata") or {}).get("uid", "")) if pod_ else ""
            claimed: Mapping[str, ChipUsage] = {}
            if pod_ is not None:
                read = core_ledger.read_pod(pod_, catalog.Catalog((model,)))
                claimed = read if isinstance(read, dict) else {}
            claimed = {u: c for u, c in claimed.items() if u in ours and not c.idle}
            for uuid, usage in sorted(claimed.items()):
                found.append(
                    self._stranger(uid, namespace, name, ours[uuid].phy_id, uuid, usage, ids)
                )
            if claimed:
                continue
            for device_id in sorted(ids):  # it claims nothing: the chips of its ids, whole
                chip = self._chip_of(device_id)
                if chip is not None:
                    found.append(
                        self._stranger(
                            uid, namespace, name, chip.phy_id, chip.uuid, whole_usage(model), ids
                        )
                    )
        shown = frozenset(h.who for h in found)
        if found and shown != self._strangers_logged:
            self._strangers_logged = shown
            log.warning(
                "holdings_not_recorded",
                pods=sorted({h.who for h in found}),
                chips=sorted({h.chip for h in found}),
                effect="kubelet lists them with devices this plugin has no grant for; counted as held",
            )
        return found, pods

    @staticmethod
    def _stranger(
        uid: str,
        namespace: str,
        name: str,
        chip: int,
        uuid: str,
        usage: ChipUsage,
        ids: frozenset[str],
    ) -> Holding:
        return Holding(
            uid, namespace, name, "", False, chip, uuid, None, usage, ids, Source.KUBELET
        )

    def _chip_of(self, device_id: str) -> backend.ChipInfo | None:
        try:
            return self._inventory.chip_of(device_id)
        except errors.UnknownDevice:
            return None

    def _list(self) -> list[Json]:
        node = self._inventory.node
        pods: list[Json] = cluster.retrying(
            lambda: self._api.list_pods(node), self._attempts, on_retry=self._stats.retried
        )
        return pods

    # -- the check ---------------------------------------------------------------------

    def check(self, plan: podplan.PodPlan, containers: Sequence[podplan.ContainerPlan]) -> None:
        """Raise ``errors.GrantConflict`` when serving ``containers`` of ``plan`` would give
        away what a live pod holds or go over a chip's budget."""
        serving = {c.container for c in containers}
        held = [
            h
            for h in self.recorded()
            if not (h.pod_uid == plan.uid and h.container in serving)  # being served again
        ]
        listing = self._kubelet()
        strangers, pods = self._strangers(plan, held, listing)
        held += strangers
        wants = self._wants(plan, containers)
        conflict = self._first_conflict(plan, wants, held)
        if conflict is None:
            return
        live, done = self._judge(plan, held, self._list() if pods is None else pods, listing)
        if done:
            self._book.remove(*done)
            log.info(
                "grants_released",
                pods=sorted({g.who for g in done}),
                chips=sorted({g.chip for g in done}),
                trigger="allocate",
            )
        if len(live) < len(held):  # the vNPUs of done owners are the reclaimer's to destroy
            conflict = self._first_conflict(plan, wants, live)
            if conflict is None:
                return
        self._stats.grant_conflicts.labels(conflict.reason).inc()
        log.warning(
            "grant_conflict",
            pod=plan.who,
            chip=conflict.chip,
            reason=conflict.reason,
            holders=list(conflict.holders),
            problem=conflict.problem,
        )
        raise errors.GrantConflict(
            plan.who, conflict.chip, conflict.reason, conflict.holders, conflict.problem
        )

    def _wants(
        self, plan: podplan.PodPlan, containers: Sequence[podplan.ContainerPlan]
    ) -> list[_Want]:
        model = self._inventory.model
        wants = []
        for container in containers:
            for device in container.devices:
                if plan.soft:
                    usage = soft_usage(model, device.memory_mib, device.cores)
                elif device.template is not None:
                    usage = vnpu_usage(model, device.template)
                else:
                    usage = whole_usage(model)
                wants.append(_Want(container.container, container.init, device, usage))
        return wants

    def _judge(
        self,
        plan: podplan.PodPlan,
        held: Sequence[Holding],
        pods: Sequence[Json],
        listing: podresources.Listing | None,
    ) -> tuple[list[Holding], list[grants.Grant]]:
        """The holdings of live pods, and the grants of pods that are done."""
        by_uid = {str((p.get("metadata") or {}).get("uid")): p for p in pods}
        live: list[Holding] = []
        done: list[grants.Grant] = []
        for holding in held:
            if (
                holding.source is Source.KUBELET
                or holding.pod_uid == plan.uid
                or alive(holding, by_uid.get(holding.pod_uid), listing)
            ):
                live.append(holding)
            elif holding.grant is not None:
                done.append(holding.grant)
        return live, done

    def _first_conflict(
        self, plan: podplan.PodPlan, wants: Sequence[_Want], held: Sequence[Holding]
    ) -> Conflict | None:
        by_chip: dict[int, list[Holding]] = {}
        for holding in held:
            by_chip.setdefault(holding.chip, []).append(holding)
        for chip in sorted({w.device.chip.phy_id for w in wants}):
            here = by_chip.get(chip, [])
            others: dict[tuple[str, str, str], list[Holding]] = {}
            for holding in here:
                if holding.pod_uid != plan.uid:
                    others.setdefault(holding.holder, []).append(holding)
            others_usage = _total(pod_usage(hs) for hs in others.values())
            own_regular = _total(h.usage for h in here if h.pod_uid == plan.uid and not h.init)
            names = [hs[0].who for hs in others.values() if not pod_usage(hs).idle]
            regular = own_regular  # app containers: those held and those granted in this call
            inits: dict[str, ChipUsage] = {}  # init containers granted in this call, each alone
            for want in wants:
                if want.device.chip.phy_id != chip:
                    continue
                own = inits.get(want.container, inventory.IDLE) if want.init else regular
                holders = names + ([f"{plan.who} itself"] if not own.idle else [])
                short = self._short(chip, others_usage.plus(own), want, plan.soft)
                if short is not None:
                    return Conflict(chip, short[0], short[1], tuple(holders))
                if want.init:
                    inits[want.container] = own.plus(want.usage)
                else:
                    regular = regular.plus(want.usage)
        return None

    def _short(self, chip: int, used: ChipUsage, want: _Want, soft: bool) -> tuple[str, str] | None:
        """(reason, problem) when ``want`` does not fit beside ``used`` on ``chip``."""
        device = want.device
        if used.idle:
            return None
        if not soft and device.template is None:
            if used.exclusive:
                return "held_whole", "a whole chip is asked, but the chip is held whole"
            held = f"{used.vnpus} vNPU(s)" if used.vnpus else f"{used.soft_slices} soft slice(s)"
            return "held_shared", f"a whole chip is asked, but the chip has {held}"
        what = f"a {device.template} vNPU" if not soft else "a soft slice"
        if used.exclusive:
            return "held_whole", f"{what} is asked, but the chip is held whole"
        if not soft:
            if used.soft_slices:
                return "held_shared", f"{what} is asked, but the chip is shared in soft mode"
            assert device.template is not None
            return self._vnpu_short(chip, used, device.template)
        if used.vnpus:
            return "held_shared", f"{what} is asked, but the chip has hard vNPUs"
        return self._soft_short(chip, used, want)

    def _vnpu_short(self, chip: int, used: ChipUsage, name: str) -> tuple[str, str] | None:
        model = self._inventory.model
        media = model.media.as_tuple() if model.media is not None else None
        total = limits.Resources(
            self._chips[chip].vnpu_limit,
            model.memory_capacity_mib,
            model.aicore,
            model.aicpu,
            media,
        )
        taken = limits.Resources(
            used.vnpus,
            used.memory_mib,
            used.aicore,
            used.aicpu,
            used.media if media is not None else None,
        )
        template = core_ledger.template_from_name(model, name)
        short = limits.shortage(model, total, taken, template)
        if short is None:
            return None
        what = f"{short.budget} ({short.engine})" if short.engine else short.budget
        return (
            "over_budget",
            f"{name} needs {short.asked} {what}, chip has {short.free} of {short.total} free",
        )

    def _soft_short(self, chip: int, used: ChipUsage, want: _Want) -> tuple[str, str] | None:
        device = want.device
        target = self._chips[chip]
        request = requests.ContainerRequest(
            want.container,
            want.init,
            self._inventory.model,
            1,
            device.memory_mib,
            core_percent=device.cores,
            soft=True,
        )
        reason = budgets.soft_short(target, used, request)
        if reason is None:
            return None
        if reason is budgets.Reason.CHIP_IN_USE:
            return (
                "held_shared",
                "a soft slice of all the memory or cores is asked, but the chip is shared",
            )
        if reason is budgets.Reason.VNPU_SLOTS:
            free, total = target.slots - used.soft_slices, target.slots
            return "over_budget", f"a soft slice needs 1 slots, chip has {free} of {total} free"
        if reason is budgets.Reason.MEMORY:
            free, total = target.memory_mib - used.memory_mib, target.memory_mib
            return (
                "over_budget",
                f"a soft slice needs {device.memory_mib} memory, chip has {free} of {total} free",
            )
        free = max(0, 100 - used.core_percent)
        return (
            "over_budget",
            f"a soft slice needs {device.cores} core-percent, chip has {free} of 100 free",
        )


def alive(
    holding: Holding, pod: Mapping[str, Any] | None, listing: podresources.Listing | None
) -> bool:
    """Whether the holding's container may still use what it holds (the reclaimer's rules).

    ``pod`` is the owner as the API shows it (by UID), None when it is gone from the API:
    then it is alive while kubelet lists its name with one of its device ids (with just
    its name when its ids are not known), and when kubelet does not answer.
    """
    if pod is None:
        return podresources.still_listed(
            listing, holding.namespace, holding.pod, holding.device_ids
        )
    if reclaim.finished(pod):
        return False
    return not (holding.init and reclaim.init_finished(pod, holding.container))
