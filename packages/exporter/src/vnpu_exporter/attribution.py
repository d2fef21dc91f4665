"""Who holds what on this node's chips: pods' allocations tied to chips and driver vNPUs.

Pure: ``collector`` calls ``attribute`` once per scrape with the latest readings. Sources,
most trusted first:

1. **Pod annotations** (``hami.io/<CW>-devices-allocated`` + ``huawei.com/<CW>``, what the
   scheduler decided, per container: chip UUID, template or whole chip or soft slice). The
   same reading ``vnpu_core.ledger`` does for the scheduler, so both count the same usage.
2. **The device plugin's ownership ledger** (managed mode): the exact vNPU id of a container.
3. **Matching on the chip**: the only allocation of a template on a chip and the only vNPU
   of that template (or the only one a container holds) belong together. With several of
   one template on one chip and no ledger, the allocation is reported without a vNPU id
   (``ambiguous``) rather than guessed.
4. **PodResources** (kubelet): containers of pods without vnpu annotations that hold chips
   under Huawei-style device ids (``Ascend910-3``: physical chip 3) hold those chips whole.
   HAMi-style ids (``<UUID>-<n>``) name slots, not what the slot holds: such a container
   without annotations is not reported.
5. **PodResources, DRA mode** (``podresources.ClaimDevice``): each ``npu.vnpu.io`` device a
   container holds through a ResourceClaim is one allocation of that container; its name
   says the chip and kind (``vnpu_core.draclasses.parse_device``), and the DRA driver's claim
   ledger (``vnpu_npu.claimledger``, read by ``claims``) says the rest: for a template device
   the vNPU id, checked against the driver's vNPUs as the device plugin's ledger is
   (``ledger``; otherwise matching on the chip, as 3.); for a soft slice its memory and core
   share (the claim's ``consumedCapacity``, which PodResources does not carry), counted as a
   classic soft slice of that memory and core percentage is. A soft slice the ledger does not
   size (no ledger read, or no record of the device) holds 0 MiB and 0 cores here. A claim
   shared by several containers is one allocation of each, but held once on its chip
   (``usage``, ``unowned``, ``Allocation.claim``).

A vNPU the driver has that no allocation accounts for is *unowned* (leaked, or not yet
reclaimed). When the pods are unknown (the API failed), nothing here is computed: no
allocation is better than a wrong "unowned".
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from vnpu_core import catalog, draclasses, errors, inventory, ledger, protocol
from vnpu_exporter import metrics, ownership, podresources
from vnpu_npu import backend, claimledger

Kind = metrics.AllocationKind
How = metrics.Attribution
Json = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Owner:
    namespace: str
    pod: str
    container: str


@dataclass(frozen=True, slots=True)
class Allocation:
    """One whole chip, hard vNPU or soft slice held by one container."""

    owner: Owner
    chip_uuid: str
    phy: int | None  # None: the chip is not one of this node's
    model: catalog.ChipModel
    kind: metrics.AllocationKind
    template: str  # "" for whole chips and soft slices
    memory_mib: int  # what it may use
    aicores: float  # AI cores it holds (a soft slice: its core percentage of the chip's)
    chip_aicores: int
    vnpu_id: int | None = None
    attribution: metrics.Attribution = How.NOT_APPLICABLE
    claim: str = ""  # DRA mode: "<namespace>/<claim>/<device>", what is held; "" otherwise
    core_percent: int = 0  # a soft slice: the core percentage it was given (0: none reserved)

    @property
    def share(self) -> float:
        return min(1.0, self.aicores / self.chip_aicores) if self.chip_aicores else 0.0


@dataclass(frozen=True, slots=True)
class Result:
    allocations: tuple[Allocation, ...]
    usage: Mapping[str, inventory.ChipUsage]  # by chip UUID, as the scheduler counts it
    unowned: Mapping[tuple[int, str], int]  # (physical id, template) -> vNPUs nobody holds
    problems: tuple[ledger.Problem, ...]  # pods whose annotations could not be read


UNKNOWN = Result((), {}, {}, ())


def model_of(chip: backend.ChipInfo, models: catalog.Catalog) -> catalog.ChipModel | None:
    return models.by_chip_name(chip.model or chip.chip_name, chip.aicore)


def _container_names(pod: Json) -> list[tuple[str, bool]]:
    """Containers in annotation order (init first), each with "is a finished init container"."""
    spec = pod.get("spec") or {}
    statuses = {
        s.get("name"): s for s in (pod.get("status") or {}).get("initContainerStatuses") or []
    }
    names: list[tuple[str, bool]] = []
    for container in spec.get("initContainers") or []:
        name = str(container.get("name", ""))
        sidecar = container.get("restartPolicy") == "Always"
        finished = bool(((statuses.get(name) or {}).get("state") or {}).get("terminated"))
        names.append((name, finished and not sidecar))
    names += [(str(c.get("name", "")), False) for c in spec.get("containers") or []]
    return names


def _template_at(infos: Sequence[protocol.RuntimeInfo], position: int, uuid: str) -> str | None:
    """Runtime infos list one element per device in order; fall back to the UUID."""
    if position < len(infos) and infos[position].uuid == uuid:
        return infos[position].template
    return next((info.template for info in infos if info.uuid == uuid), None)


def pod_allocations(
    pod: Json, models: catalog.Catalog, chips: Mapping[str, backend.ChipInfo]
) -> list[Allocation]:
    """The allocations of one pod from its annotations; raises errors.ProtocolError."""
    meta = pod.get("metadata") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    soft = annotations.get(protocol.VNPU_MODE_KEY) == protocol.SOFT_MODE_VALUE
    names = _container_names(pod)
    found: list[Allocation] = []
    for model in models:
        key = protocol.allocated_key(model.common_word)
        raw = annotations.get(key)
        if not raw:
            continue
        runtime_key = protocol.runtime_key(model.common_word)
        runtime = annotations.get(runtime_key)
        infos = protocol.decode_runtime(runtime_key, runtime) if runtime else ()
        position = 0
        for number, devices in enumerate(protocol.decode_devices(key, raw)):
            name, finished = names[number] if number < len(names) else (f"#{number}", False)
            owner = Owner(str(meta.get("namespace", "")), str(meta.get("name", "")), name)
            for entry in devices:
                template = _template_at(infos, position, entry.uuid)
                position += 1
                if not finished:
                    found.append(_allocation(owner, model, entry, template, soft, chips))
    return found


def _allocation(
    owner: Owner,
    model: catalog.ChipModel,
    entry: protocol.DeviceEntry,
    template: str | None,
    soft: bool,
    chips: Mapping[str, backend.ChipInfo],
) -> Allocation:
    chip = chips.get(entry.uuid)
    phy = chip.phy_id if chip else None
    cores = chip.aicore if chip else model.aicore
    if soft:
        return _soft_slice(owner, entry, phy, model, cores)
    held = ledger.entry_usage(model, entry, template, soft)
    if held.exclusive:
        memory = chip.memory_mib if chip else model.memory_capacity_mib
        return Allocation(owner, entry.uuid, phy, model, Kind.WHOLE, "", memory, cores, cores)
    name = held.templates[0] if held.templates else (template or "")
    return Allocation(
        owner,
        entry.uuid,
        phy,
        model,
        Kind.VNPU,
        name,
        held.memory_mib,
        held.aicore,
        cores,
        None,
        How.MISSING,
    )


def _soft_slice(
    owner: Owner,
    entry: protocol.DeviceEntry,
    phy: int | None,
    model: catalog.ChipModel,
    cores: int,
    claim: str = "",
) -> Allocation:
    """A soft slice of ``entry.memory_mib`` and ``entry.cores`` percent of a chip of ``cores``
    AI cores: a slice that takes the whole chip with no share named holds all its cores."""
    held = ledger.entry_usage(model, entry, None, soft=True)
    share = 100 if held.exclusive and entry.cores == 0 else min(entry.cores, 100)
    return Allocation(
        owner,
        entry.uuid,
        phy,
        model,
        Kind.SOFT,
        "",
        entry.memory_mib,
        cores * share / 100,
        cores,
        claim=claim,
        core_percent=entry.cores,
    )


def _soft_entry(
    chip_uuid: str, model: catalog.ChipModel, memory_mib: int, cores: int
) -> protocol.DeviceEntry:
    """A soft slice as the scheduler's annotation would name it (``UUID,Type,MiB,cores``)."""
    return protocol.DeviceEntry(chip_uuid, model.common_word, memory_mib, cores)


def _huawei_phy(device_id: str) -> int | None:
    """The physical id of a Huawei-style device id (``Ascend910-3``), else None."""
    prefix, sep, number = device_id.rpartition("-")
    if sep and prefix.startswith("Ascend") and number.isdigit() and "-" not in prefix:
        return int(number)
    return None


def _kubelet_allocations(
    devices: Iterable[podresources.ContainerDevices],
    annotated: set[tuple[str, str]],
    by_phy: Mapping[int, backend.ChipInfo],
    models: catalog.Catalog,
) -> list[Allocation]:
    found: list[Allocation] = []
    for item in devices:
        if (item.namespace, item.pod) in annotated:
            continue
        for device_id in item.device_ids:
            phy = _huawei_phy(device_id)
            chip = by_phy.get(phy) if phy is not None else None
            model = model_of(chip, models) if chip else None
            if chip is None or model is None:
                continue
            found.append(_whole(Owner(item.namespace, item.pod, item.container), chip, model))
    return found


def distinct(allocations: Iterable[Allocation]) -> list[Allocation]:
    """``allocations`` with each DRA claim device once: a claim shared by several containers is
    one allocation of each, but what it holds on its chip is held once."""
    seen: set[str] = set()
    kept: list[Allocation] = []
    for item in allocations:
        if item.claim:
            if item.claim in seen:
                continue
            seen.add(item.claim)
        kept.append(item)
    return kept


def _claim_record(
    item: podresources.ClaimDevice, book: Mapping[tuple[str, str, str], list[claimledger.Record]]
) -> claimledger.Record | None:
    """The claim ledger's record of ``item``'s device: of the claim's UID when the CDI ids say
    it (a claim deleted and made again under its name has a new one); None unless only one."""
    found = book.get((item.claim_namespace, item.claim, item.device), [])
    uid = item.claim_uid
    if uid is not None:
        found = [r for r in found if r.claim_uid == uid]
    return found[0] if len(found) == 1 else None


def _whole(
    owner: Owner, chip: backend.ChipInfo, model: catalog.ChipModel, claim: str = ""
) -> Allocation:
    """A whole chip held by ``owner`` (through ``claim`` in DRA mode)."""
    return Allocation(
        owner, chip.uuid, chip.phy_id, model, Kind.WHOLE, "", chip.memory_mib,
        chip.aicore, chip.aicore, claim=claim,
    )  # fmt: skip


def _claim_allocations(
    items: Iterable[podresources.ClaimDevice],
    by_phy: Mapping[int, backend.ChipInfo],
    models: catalog.Catalog,
    records: Iterable[claimledger.Record],
) -> list[Allocation]:
    """One allocation per container and ``npu.vnpu.io`` device; devices of chips this node
    does not have, or names the driver does not publish for the chip's model, are left out."""
    book: dict[tuple[str, str, str], list[claimledger.Record]] = defaultdict(list)
    for entry in records:
        book[(entry.namespace, entry.claim, entry.device)].append(entry)
    found: list[Allocation] = []
    for item in items:
        device = draclasses.parse_device(item.device)
        chip = by_phy.get(device.phy) if device is not None else None
        model = model_of(chip, models) if chip is not None else None
        if chip is None or model is None or device is None:
            continue
        template = device.template(model)
        if device.kind == "template" and template is None:
            continue  # a name the driver does not publish for this model
        owner = Owner(item.namespace, item.pod, item.container)
        base = _whole(owner, chip, model, f"{item.claim_namespace}/{item.claim}/{item.device}")
        if device.kind == "whole":
            found.append(base)
        elif device.kind == "soft":
            found.append(_claim_slice(base, _claim_record(item, book)))
        elif template is not None:
            record = _claim_record(item, book)
            vnpu_id = None
            if record is not None and (record.chip, record.template) == (device.phy, template.name):
                vnpu_id = record.vnpu_id  # checked against the driver's vNPUs in _match_vnpus
            found.append(
                replace(
                    base,
                    kind=Kind.VNPU,
                    template=template.name,
                    memory_mib=template.memory_mib,
                    aicores=template.aicore,
                    vnpu_id=vnpu_id,
                    attribution=How.LEDGER if vnpu_id is not None else How.MISSING,
                )
            )
    return found


def _claim_slice(base: Allocation, record: claimledger.Record | None) -> Allocation:
    """The soft slice ``base`` (a whole chip's allocation of a soft device) of the size its
    claim ledger ``record`` says; of no size without a usable one. A record of another kind
    or chip, or larger than the chip's allocatable memory (the driver refuses those), is not
    usable."""
    if (
        record is None
        or not record.soft
        or record.chip != base.phy
        or record.memory_mib > base.model.memory_allocatable_mib
    ):
        return replace(base, kind=Kind.SOFT, memory_mib=0, aicores=0.0)
    entry = _soft_entry(base.chip_uuid, base.model, record.memory_mib, record.core_percent)
    return _soft_slice(base.owner, entry, base.phy, base.model, base.chip_aicores, base.claim)


def _claim_usage(item: Allocation) -> inventory.ChipUsage:
    """What one DRA allocation holds on its chip, as the scheduler would count it (a soft
    slice as ``vnpu_core.ledger`` counts a classic one)."""
    if item.kind is Kind.WHOLE:
        return inventory.ChipUsage(memory_mib=item.memory_mib, exclusive=True)
    if item.kind is Kind.SOFT:
        if item.memory_mib == 0:  # not sized: one slice, of nothing known
            return inventory.soft_usage(0, 0, exclusive=False)
        entry = _soft_entry(item.chip_uuid, item.model, item.memory_mib, item.core_percent)
        return ledger.entry_usage(item.model, entry, None, soft=True)
    return inventory.template_usage(ledger.template_from_name(item.model, item.template))


def _match_vnpus(
    allocations: list[Allocation],
    vnpus: Mapping[int, tuple[backend.VnpuInfo, ...]],
    owners: Sequence[ownership.Record],
) -> tuple[list[Allocation], dict[tuple[int, str], int]]:
    """Tie hard-vNPU allocations to driver vNPUs; count the vNPUs nobody accounts for."""
    existing = {(v.phy_id, v.vnpu_id): v for listed in vnpus.values() for v in listed}
    by_owner = {
        (r.chip, r.template, Owner(r.namespace, r.pod, r.container)): r.vnpu_id for r in owners
    }
    taken: set[tuple[int, int]] = set()
    matched: list[Allocation] = []
    waiting: dict[tuple[int, str], list[int]] = defaultdict(list)
    for index, item in enumerate(allocations):
        if item.kind is not Kind.VNPU or item.phy is None or item.phy not in vnpus:
            unknown = item.kind is Kind.VNPU
            matched.append(
                replace(item, vnpu_id=None, attribution=How.UNKNOWN) if unknown else item
            )
            continue
        # A DRA allocation comes with the claim ledger's vNPU id; a classic one looks it up.
        vnpu_id = item.vnpu_id
        if vnpu_id is None:
            vnpu_id = by_owner.get((item.phy, item.template, item.owner))
        found = existing.get((item.phy, vnpu_id)) if vnpu_id is not None else None
        if found is not None and found.template == item.template:
            taken.add((item.phy, found.vnpu_id))
            matched.append(replace(item, vnpu_id=found.vnpu_id, attribution=How.LEDGER))
        else:
            matched.append(item)
            waiting[(item.phy, item.template)].append(index)
    free: dict[tuple[int, str], list[backend.VnpuInfo]] = defaultdict(list)
    for ident, vnpu in existing.items():
        if ident not in taken:
            free[(vnpu.phy_id, vnpu.template)].append(vnpu)
    for key, indexes in waiting.items():
        candidates = free.get(key, [])
        in_use = [v for v in candidates if v.container_used]
        if not candidates:
            how, chosen = How.MISSING, None
        elif len(indexes) == 1 and len(candidates) == 1:
            how, chosen = How.UNIQUE, candidates[0]
        elif len(indexes) == 1 and len(in_use) == 1:
            how, chosen = How.UNIQUE, in_use[0]
        else:
            how, chosen = How.AMBIGUOUS, None
        for index in indexes:
            vnpu_id = chosen.vnpu_id if chosen is not None else None
            matched[index] = replace(matched[index], vnpu_id=vnpu_id, attribution=how)
    held = Counter(
        (a.phy, a.template)
        for a in distinct(allocations)
        if a.kind is Kind.VNPU and a.phy is not None
    )
    present = Counter((v.phy_id, v.template) for v in existing.values())
    unowned = {key: max(0, count - held.get(key, 0)) for key, count in present.items()}
    return matched, unowned


@dataclass(frozen=True, slots=True)
class _PodReading:
    usage: Mapping[str, inventory.ChipUsage]
    allocations: tuple[Allocation, ...]
    problem: errors.ProtocolError | None = None


class PodMemo:
    """Pod readings by (uid, resourceVersion), so a pod the API did not change is read once.

    Allocations carry physical ids, so the memo starts over when the chips change. Pods
    without a resourceVersion (not from an API server) are read every time.
    """

    def __init__(self) -> None:
        self._chips: tuple[tuple[str, int], ...] = ()
        self._readings: dict[tuple[str, str], _PodReading] = {}

    def read(
        self, pod: Json, chips: Mapping[str, backend.ChipInfo], models: catalog.Catalog
    ) -> _PodReading:
        meta = pod.get("metadata") or {}
        key = (str(meta.get("uid") or ""), str(meta.get("resourceVersion") or ""))
        shape = tuple(sorted((uuid, c.phy_id) for uuid, c in chips.items()))
        if shape != self._chips:
            self._chips, self._readings = shape, {}
        if all(key) and key in self._readings:
            return self._readings[key]
        try:
            reading = _PodReading(
                ledger.pod_usage(pod, models), tuple(pod_allocations(pod, models, chips))
            )
        except errors.ProtocolError as exc:
            reading = _PodReading({}, (), exc)
        if all(key):
            self._readings[key] = reading
        return reading

    def forget_all_but(self, keep: set[tuple[str, str]]) -> None:
        self._readings = {k: v for k, v in self._readings.items() if k in keep}


def attribute(
    node: str,
    chips: Sequence[backend.ChipInfo],
    vnpus: Mapping[int, tuple[backend.VnpuInfo, ...]],
    pods: Sequence[Json] | None,
    devices: Sequence[podresources.Assignment] | None,
    owners: Sequence[ownership.Record] = (),
    models: catalog.Catalog = catalog.BUILTIN,
    memo: PodMemo | None = None,
    claim_records: Sequence[claimledger.Record] = (),
) -> Result:
    """Everything held on ``node``'s chips; ``UNKNOWN`` when the pods are unknown.

    ``devices`` are PodResources' (classic and DRA), ``owners`` the device plugin's ledger and
    ``claim_records`` the DRA driver's claim ledger.

    Usage per chip is added up exactly as ``vnpu_core.ledger.node_usage`` does (the same
    ``pod_usage`` per pod), pod by pod so that ``memo`` can skip unchanged pods.
    """
    if pods is None:
        return UNKNOWN
    memo = memo if memo is not None else PodMemo()
    by_uuid = {c.uuid: c for c in chips}
    by_phy = {c.phy_id: c for c in chips}
    usage: dict[str, inventory.ChipUsage] = {}
    problems: list[ledger.Problem] = []
    allocations: list[Allocation] = []
    annotated: set[tuple[str, str]] = set()
    seen: set[tuple[str, str]] = set()
    for pod in pods:
        if not ledger.holds_devices(pod, node):
            continue
        meta = pod.get("metadata") or {}
        ident = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        seen.add((str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")))
        reading = memo.read(pod, by_uuid, models)
        if reading.problem is not None:
            problems.append(ledger.Problem("/".join(ident), reading.problem))
            continue
        ledger.add(usage, reading.usage)
        if reading.allocations:
            annotated.add(ident)
            allocations += reading.allocations
    memo.forget_all_but(seen)
    listed = devices or ()
    classic = [d for d in listed if isinstance(d, podresources.ContainerDevices)]
    for item in _kubelet_allocations(classic, annotated, by_phy, models):
        allocations.append(item)
        usage[item.chip_uuid] = usage.get(item.chip_uuid, inventory.IDLE).plus(
            inventory.ChipUsage(memory_mib=item.memory_mib, exclusive=True)
        )
    claimed = [d for d in listed if isinstance(d, podresources.ClaimDevice)]
    dra = _claim_allocations(claimed, by_phy, models, claim_records)
    allocations += dra
    for item in distinct(dra):
        usage[item.chip_uuid] = usage.get(item.chip_uuid, inventory.IDLE).plus(_claim_usage(item))
    matched, unowned = _match_vnpus(allocations, vnpus, owners)
    return Result(tuple(matched), usage, unowned, tuple(problems))
