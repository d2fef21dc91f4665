"""The exporter's custom collector: one snapshot of the readings per scrape, into metric families.

``__main__`` registers one ``NodeCollector`` on the service's registry; ``exposition``
calls ``collect`` (through the registry) on every scrape. It reads ``sampler.Snapshot`` (never the driver), ties
allocations to chips and vNPUs with ``attribution`` (memoised while its inputs are the same
objects, i.e. until a group refreshes), measures what each allocation uses (``usage``), and yields the
families defined in ``metrics``; with ``compat`` also npu-exporter's (``compat``). A value
that is missing from the snapshot is missing from the answer: no zero, no stale value.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from vnpu_core import budgets, catalog, inventory
from vnpu_exporter import attribution, compat, exposition, metrics, sampler, usage
from vnpu_npu import backend, faults

MIB = usage.MIB
Kind = metrics.AllocationKind


class Families:
    """Gauge tables by definition, created on first use, yielded in the order first used."""

    def __init__(self) -> None:
        self._made: dict[str, exposition.GaugeTable] = {}

    def add(self, definition: metrics.Definition, labels: list[str], value: float) -> None:
        table = self._made.get(definition.name)
        if table is None:
            table = self._made[definition.name] = exposition.GaugeTable(definition)
        table.add(labels, value)

    def __iter__(self) -> Iterator[exposition.GaugeTable]:
        return iter(self._made.values())


def model_label(chip: backend.ChipInfo, model: catalog.ChipModel | None) -> str:
    """The ``model`` label: the resource word (``Ascend310P``), or DCMI's chip name if unknown."""
    return model.common_word if model is not None else chip.chip_name


def stranded(chip: inventory.Chip, used: inventory.ChipUsage) -> tuple[int, int]:
    """Free memory (MiB) and AI cores of a chip that no template of its model can use."""
    model = chip.model
    if used.idle or used.exclusive or used.soft_slices or not model.templates:
        return 0, 0  # empty: a whole-chip request can take it; soft chips take any slice
    if any(budgets.template_short(chip, used, t) is None for t in model.templates):
        return 0, 0
    return max(0, model.memory_capacity_mib - used.memory_mib), max(0, model.aicore - used.aicore)


class NodeCollector(Collector):
    """Collects one node's families from ``source()`` (the sampler's ``snapshot``)."""

    def __init__(
        self,
        source: Callable[[], sampler.Snapshot],
        node: str,
        *,
        backend_name: str,
        npu_exporter_compat: bool = False,
        models: catalog.Catalog = catalog.BUILTIN,
    ) -> None:
        self.source = source
        self.node = node
        self.backend_name = backend_name  # vnpu_chip_info{backend}: alerts on real use skip "sim"
        self.compat = npu_exporter_compat
        self.models = models
        self._memo: tuple[tuple[object, ...], attribution.Result] | None = None
        self._pods = attribution.PodMemo()
        self._attributing = threading.Lock()  # concurrent scrapes share the memos

    def describe(self) -> Iterable[Metric]:
        return []  # families depend on the node; skip the registration-time collect

    def _attribute(self, snapshot: sampler.Snapshot) -> attribution.Result:
        """Attribution of ``snapshot``, reused while every input is the very same object.

        The memo keeps the inputs themselves (not their ids), so an id can never be reused
        by a newer reading while the memo still refers to the old one.
        """
        with self._attributing:
            return self._attribute_locked(snapshot)

    def _attribute_locked(self, snapshot: sampler.Snapshot) -> attribution.Result:
        owners = snapshot.ownership or ()
        claim_records = snapshot.claims or ()
        inputs = (
            snapshot.chips,
            snapshot.vnpus,
            snapshot.pods,
            snapshot.pod_resources,
            owners,
            claim_records,
        )
        if self._memo is not None and all(
            a is b for a, b in zip(self._memo[0], inputs, strict=True)
        ):
            return self._memo[1]
        result = attribution.attribute(
            self.node,
            snapshot.chips or (),
            snapshot.vnpus,
            snapshot.pods,
            snapshot.pod_resources,
            owners,
            self.models,
            self._pods,
            claim_records,
        )
        self._memo = (inputs, result)
        return result

    def collect(self) -> Iterator[Metric]:
        snapshot = self.source()
        result = self._attribute(snapshot)
        known = snapshot.pods is not None
        on_chip: dict[int, list[attribution.Allocation]] = defaultdict(list)
        for item in result.allocations:
            if item.phy is not None:
                on_chip[item.phy].append(item)
        measured = [
            usage.measure(item, snapshot, item.phy is not None and len(on_chip[item.phy]) == 1)
            for item in result.allocations
        ]
        out = Families()
        if known:
            out.add(metrics.UNREADABLE_PODS, [self.node], len(result.problems))
        for chip in snapshot.chips or ():
            self._chip(out, chip, snapshot, result, on_chip.get(chip.phy_id, []), known)
        self._allocations(out, measured)
        self._namespaces(out, measured)
        yield from out
        if self.compat:
            yield from compat.families(self.node, snapshot, measured)

    def _chip(
        self,
        out: Families,
        chip: backend.ChipInfo,
        snapshot: sampler.Snapshot,
        result: attribution.Result,
        held: list[attribution.Allocation],
        known: bool,
    ) -> None:
        phy = chip.phy_id
        model = attribution.model_of(chip, self.models)
        labels = [self.node, str(phy), chip.uuid, model_label(chip, model)]
        info = [chip.chip_name, chip.model_name, chip.bdf, str(chip.card_id), str(chip.device_id)]
        kind = chip.memory_kind.value
        out.add(metrics.CHIP_INFO, [*labels, *info, str(chip.logic_id), kind, self.backend_name], 1)
        out.add(metrics.CHIP_AICORES, labels, chip.aicore)
        if phy in snapshot.health:
            health = snapshot.health[phy]
            verdict = faults.assess(health, in_use=bool(held))
            out.add(metrics.CHIP_PRESENT, labels, 0 if verdict.gone else 1)
            out.add(metrics.CHIP_HEALTHY, labels, 1 if verdict.healthy else 0)
            for level in faults.FaultLevel:
                out.add(metrics.CHIP_FAULT_LEVEL, [*labels, level.value], level is verdict.level)
            for code in verdict.codes:
                level = faults.level_of(code, health.health if health else None)
                out.add(
                    metrics.CHIP_FAULT_CODE, [*labels, faults.format_code(code), level.value], 1
                )
        if phy in snapshot.temperature:
            out.add(metrics.CHIP_TEMPERATURE, labels, snapshot.temperature[phy])
        if phy in snapshot.power:
            power = snapshot.power[phy]
            out.add(metrics.CHIP_POWER, [*labels, power.scope.value], power.watts)
        if phy in snapshot.aicore_percent:
            out.add(metrics.CHIP_AICORE_UTILIZATION, labels, snapshot.aicore_percent[phy] / 100)
        if phy in snapshot.memory:
            memory = snapshot.memory[phy]
            out.add(metrics.CHIP_MEMORY_TOTAL, labels, memory.total_mib * MIB)
            out.add(metrics.CHIP_MEMORY_USED, labels, memory.used_mib * MIB)
        if phy in snapshot.vnpus:
            listed = snapshot.vnpus[phy]
            out.add(metrics.CHIP_VNPUS, labels, len(listed))
            templates: dict[str, int] = defaultdict(int)
            for vnpu in listed:
                templates[vnpu.template] += 1
            for name, count in sorted(templates.items()):
                out.add(metrics.CHIP_VNPU_TEMPLATES, [*labels, name], count)
                if known:
                    unowned = result.unowned.get((phy, name), 0)
                    out.add(metrics.CHIP_UNOWNED_VNPUS, [*labels, name], unowned)
        if not known:
            return
        held = attribution.distinct(held)  # a claim shared by containers is held once
        for kind in Kind:
            out.add(
                metrics.CHIP_ALLOCATIONS, [*labels, kind.value], sum(a.kind is kind for a in held)
            )
        out.add(metrics.CHIP_ALLOCATED_MEMORY, labels, sum(a.memory_mib for a in held) * MIB)
        out.add(metrics.CHIP_ALLOCATED_AICORES, labels, sum(a.aicores for a in held))
        if model is not None:
            used = result.usage.get(chip.uuid, inventory.IDLE)
            unit = inventory.Chip(phy, chip.uuid, model)
            out.add(
                metrics.CHIP_ALLOCATED_RATIO, labels, min(1.0, inventory.load_ratio(unit, used))
            )
            memory_left, cores_left = stranded(unit, used)
            out.add(metrics.CHIP_STRANDED_MEMORY, labels, memory_left * MIB)
            out.add(metrics.CHIP_STRANDED_AICORES, labels, cores_left)

    def _allocations(self, out: Families, measured: list[usage.Measured]) -> None:
        seen: set[tuple[str, ...]] = set()
        for m in measured:
            a = m.allocation
            labels = self._allocation_labels(a)
            if tuple(labels) in seen:
                continue  # one container holding two alike on one chip: reported once
            seen.add(tuple(labels))
            out.add(metrics.ALLOCATION_INFO, [*labels, a.attribution.value], 1)
            out.add(metrics.ALLOCATION_MEMORY_LIMIT, labels, a.memory_mib * MIB)
            out.add(metrics.ALLOCATION_AICORES, labels, a.aicores)
            out.add(metrics.ALLOCATION_AICORE_SHARE, labels, a.share)
            if m.memory_used_bytes is not None:
                out.add(metrics.ALLOCATION_MEMORY_USED, labels, m.memory_used_bytes)
            if m.utilization is not None:
                out.add(metrics.ALLOCATION_AICORE_UTILIZATION, labels, m.utilization)

    def _allocation_labels(self, a: attribution.Allocation) -> list[str]:
        chip = "" if a.phy is None else str(a.phy)
        vnpu = "" if a.vnpu_id is None else str(a.vnpu_id)
        o = a.owner
        return [
            self.node,
            chip,
            a.chip_uuid,
            a.model.common_word,
            a.kind.value,
            a.template,
            vnpu,
            o.namespace,
            o.pod,
            o.container,
        ]

    def _namespaces(self, out: Families, measured: list[usage.Measured]) -> None:
        groups: dict[tuple[str, str], list[usage.Measured]] = defaultdict(list)
        for m in measured:
            groups[(m.allocation.owner.namespace, m.allocation.model.common_word)].append(m)
        for (namespace, model), items in sorted(groups.items()):
            labels = [self.node, namespace, model]
            for kind in Kind:
                count = sum(m.allocation.kind is kind for m in items)
                out.add(metrics.NAMESPACE_ALLOCATIONS, [*labels, kind.value], count)
            out.add(
                metrics.NAMESPACE_ALLOCATED_MEMORY,
                labels,
                sum(m.allocation.memory_mib for m in items) * MIB,
            )
            out.add(
                metrics.NAMESPACE_ALLOCATED_AICORES,
                labels,
                sum(m.allocation.aicores for m in items),
            )
            out.add(
                metrics.NAMESPACE_USED_MEMORY, labels, sum(m.memory_used_bytes or 0 for m in items)
            )
            busy = sum(m.allocation.aicores * (m.utilization or 0) for m in items)
            out.add(metrics.NAMESPACE_USED_AICORES, labels, busy)
            unmeasured = sum(m.memory_used_bytes is None or m.utilization is None for m in items)
            out.add(metrics.NAMESPACE_UNMEASURED, labels, unmeasured)
