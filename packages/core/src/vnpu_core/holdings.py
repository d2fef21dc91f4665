"""What pods hold in quota units: AI cores, device memory, whole chips, hard vNPUs, devices.

A quota counts NPUs in five units (``Unit``), each for every chip model together or for one
model (``Key``): ``aicore``, ``memory`` (MiB summed over every device a pod holds),
``chips`` (whole chips), ``vnpus`` (hard vNPUs) and ``devices`` (devices of any kind). An
``Amount`` is a vector over these keys. ``Key.name`` (``aicore``, ``Ascend310P-memory``) is
the unit name the tenants config (``vnpu_core.tenants``) and ``vnpu_core.fairshare`` use;
``Amount.names`` gives an amount keyed so.

Two readings of what a pod holds, which agree once it is bound:

* ``of_request``: from its parsed request (``requests.from_pod``) before it is bound; what
  the scheduler's filter and the planner check against the quotas (``vnpu_core.quotas``);
* ``of_bound_pod``: from the decision annotations of a bound pod
  (``hami.io/<CW>-devices-allocated`` and ``huawei.com/<CW>``, read device by device by
  ``ledger.devices``, the reader behind ``ledger.pod_usage``); what the
  scheduler's cache counts. ``usage_by_namespace`` sums the bound, unfinished pods
  (``ledger.holds_devices``) of a cluster by namespace.

Per device: a hard vNPU holds its template's AI cores and memory, one vNPU and one device
(before binding, the most AI cores of the equal-memory templates it may get); a whole
chip holds the model's AI cores and allocatable memory, one chip and one device; a soft
slice holds ceil(core percent x the model's AI cores / 100) AI cores, its memory quota and
one device (no chip, even at 100%). Per pod, as Kubernetes computes a pod's effective
request and as the ledger counts init containers: the app containers and sidecar init
containers together, or the largest run-to-completion init container, unit by unit, until
the pod's init containers have all finished. Every amount carries both the per-model keys
and the all-models keys, so that sums and peaks stay exact for both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from vnpu_core import catalog, errors, inventory, ledger, quantities, requests

ALL_MODELS = ""  # Key.model of a key that counts every chip model together
MAX_AMOUNT = 2**63 - 1


class Unit(StrEnum):
    """What a quota counts."""

    AICORE = "aicore"
    MEMORY = "memory"  # MiB, summed over every device
    CHIPS = "chips"  # whole chips
    VNPUS = "vnpus"  # hard vNPUs
    DEVICES = "devices"  # devices of any kind: whole chips, hard vNPUs, soft slices


_UNIT_VALUES = frozenset(u.value for u in Unit)

# How an amount of each unit reads in a message (``used 3 + asked 2 > limit 4 chips``).
UNIT_WORDS = {
    Unit.AICORE: "AI cores",
    Unit.MEMORY: "MiB",
    Unit.CHIPS: "chips",
    Unit.VNPUS: "vNPUs",
    Unit.DEVICES: "devices",
}


@dataclass(frozen=True, slots=True, order=True)
class Key:
    """One coordinate of an amount: a unit, for one chip model (its common word) or all."""

    model: str  # a common word such as Ascend310P, or ALL_MODELS
    unit: Unit

    @property
    def name(self) -> str:
        """The unit name: ``aicore`` for all models, ``Ascend310P-aicore`` for one."""
        return self.unit.value if self.model == ALL_MODELS else f"{self.model}-{self.unit.value}"

    def __str__(self) -> str:
        return self.name


def parse_key(name: str) -> Key | None:
    """The key a unit name stands for (``memory``, ``Ascend910B4-1-chips``), or None."""
    model, dash, unit = name.rpartition("-")
    if unit not in _UNIT_VALUES or (dash and not model):
        return None
    return Key(model, Unit(unit))


@dataclass(frozen=True, slots=True)
class Amount:
    """A vector of non-negative whole numbers by ``Key``; a key not present is 0. Read-only."""

    values: Mapping[Key, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        kept = {k: v for k, v in sorted(self.values.items()) if v}
        object.__setattr__(self, "values", kept)

    def __getitem__(self, key: Key) -> int:
        return self.values.get(key, 0)

    def __bool__(self) -> bool:
        return bool(self.values)

    def keys(self) -> tuple[Key, ...]:
        return tuple(self.values)

    def plus(self, other: Amount) -> Amount:
        merged = dict(self.values)
        for key, value in other.values.items():
            merged[key] = merged.get(key, 0) + value
        return Amount(merged)

    def minus(self, other: Amount) -> Amount:
        """This amount less ``other``, key by key, never below 0."""
        keys = set(self.values) | set(other.values)
        return Amount({k: max(0, self[k] - other[k]) for k in keys})

    def peak(self, other: Amount) -> Amount:
        """Key by key, the larger of two amounts."""
        keys = set(self.values) | set(other.values)
        return Amount({k: max(self[k], other[k]) for k in keys})

    def times(self, factor: int) -> Amount:
        return Amount({k: v * factor for k, v in self.values.items()})

    def names(self) -> dict[str, int]:
        """The amount keyed by unit name (``aicore``, ``Ascend310P-memory``), as fairshare reads it."""
        return {k.name: v for k, v in self.values.items()}


ZERO = Amount()


def parse_amount(source: str, path: str, value: object) -> int:
    """A whole, non-negative amount in any Kubernetes decimal form (``16384``, ``16k``, ``2e3``).

    Binary suffixes are refused: ``16Gi`` of a MiB unit would be 2^34 GiB. Raises
    ``errors.QuotaError(source, path, value, problem)``.
    """
    if isinstance(value, bool):
        raise errors.QuotaError(source, path, value, "must be a whole number")
    try:
        quantity = quantities.parse(value.strip() if isinstance(value, str) else value)
    except errors.QuantityError as exc:
        raise errors.QuotaError(source, path, value, exc.problem) from exc
    problem = ""
    if quantity.form is quantities.Form.BINARY_SI:
        problem = "binary suffixes (Ki, Mi, Gi) are not read; write MiB as a number, e.g. 16384"
    elif not quantity.whole:
        problem = "must be a whole number"
    elif quantity.value < 0:
        problem = "must not be negative"
    elif quantity.value > MAX_AMOUNT:
        problem = f"must be at most {MAX_AMOUNT}"
    if problem:
        raise errors.QuotaError(source, path, value, problem)
    return int(quantity.value)


def total(amounts: Iterable[Amount]) -> Amount:
    """The sum of some amounts."""
    result = ZERO
    for amount in amounts:
        result = result.plus(amount)
    return result


def soft_aicore(model: catalog.ChipModel, core_percent: int) -> int:
    """AI cores a soft slice counts for: ``core_percent`` of the model's, rounded up."""
    return -(-core_percent * model.aicore // 100)


def device(
    model: catalog.ChipModel,
    *,
    aicore: int = 0,
    memory: int = 0,
    chips: int = 0,
    vnpus: int = 0,
    devices: int = 1,
) -> Amount:
    """What one device of ``model`` holds, under both its model's keys and the all-models keys."""
    values: dict[Key, int] = {}
    for unit, value in (
        (Unit.AICORE, aicore),
        (Unit.MEMORY, memory),
        (Unit.CHIPS, chips),
        (Unit.VNPUS, vnpus),
        (Unit.DEVICES, devices),
    ):
        values[Key(model.common_word, unit)] = value
        values[Key(ALL_MODELS, unit)] = value
    return Amount(values)


def of_container(request: requests.ContainerRequest) -> Amount:
    """What one container's rounded request holds over all its devices."""
    model = request.model
    if request.soft:
        each = device(
            model, aicore=soft_aicore(model, request.core_percent), memory=request.memory_mib
        )
    elif request.whole:
        each = device(model, aicore=model.aicore, memory=request.memory_mib, chips=1)
    else:
        aicore = max(t.aicore for t in request.templates)
        each = device(model, aicore=aicore, memory=request.memory_mib, vnpus=1)
    return each.times(request.count)


def _effective(regular: Amount, alone: Iterable[Amount]) -> Amount:
    """App containers together, or each run-to-completion init container alone, unit by unit."""
    result = regular
    for init in alone:
        result = result.peak(init)
    return result


def of_request(request: requests.PodRequest) -> Amount:
    """What a pod will hold once bound, from its parsed request (``requests.from_pod``)."""
    regular = ZERO
    alone: dict[str, Amount] = {}  # init container name -> its devices of every model
    for container in request.requests:
        held = of_container(container)
        if container.init:
            alone[container.container] = alone.get(container.container, ZERO).plus(held)
        else:
            regular = regular.plus(held)
    return _effective(regular, alone.values())


def of_chip_usage(model: catalog.ChipModel, usage: inventory.ChipUsage) -> Amount:
    """What one device entry holds, from the chip usage the ledger reads for it."""
    if usage.soft_slices:
        aicore = soft_aicore(model, usage.core_percent)
        return device(model, aicore=aicore, memory=usage.memory_mib)
    if usage.vnpus:
        return device(model, aicore=usage.aicore, memory=usage.memory_mib, vnpus=usage.vnpus)
    return device(model, aicore=model.aicore, memory=model.memory_allocatable_mib, chips=1)


def of_bound_pod(pod: Mapping[str, Any], models: catalog.Catalog) -> Amount:
    """What a bound pod holds, from its decision annotations. Raises ProtocolError."""
    regular = ZERO
    alone: dict[int, Amount] = {}  # init container position -> its devices of every model
    for entry in ledger.devices(pod, models):
        held = of_chip_usage(entry.model, entry.usage)
        if entry.runs_alone:
            alone[entry.container] = alone.get(entry.container, ZERO).plus(held)
        else:
            regular = regular.plus(held)
    return _effective(regular, alone.values())


@dataclass(frozen=True, slots=True)
class Usage:
    """What the bound, unfinished pods of each namespace hold, and the pods that cannot be read."""

    by_namespace: dict[str, Amount]
    problems: tuple[ledger.Problem, ...] = ()

    def of(self, namespace: str) -> Amount:
        return self.by_namespace.get(namespace, ZERO)


def usage_by_namespace(pods: Iterable[Mapping[str, Any]], models: catalog.Catalog) -> Usage:
    """Sum of ``of_bound_pod`` over the pods that still hold devices, by namespace."""
    by_namespace: dict[str, Amount] = {}
    problems: list[ledger.Problem] = []
    for pod in pods:
        if not ledger.holds_devices(pod):
            continue
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace", "default"))
        try:
            held = of_bound_pod(pod, models)
        except errors.ProtocolError as exc:
            problems.append(ledger.Problem(f"{namespace}/{meta.get('name', '')}", exc))
            continue
        by_namespace[namespace] = by_namespace.get(namespace, ZERO).plus(held)
    return Usage(by_namespace, tuple(problems))
