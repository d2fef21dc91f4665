"""What a pod asks for: NPU requests read from a pod object and rounded to what will be created.

Reads a pod as the Kubernetes API returns it (a dict): per container the count
``huawei.com/<CW>``, memory ``huawei.com/<CW>-memory`` (MiB, a whole number as HAMi and
Volcano read it, in any decimal quantity form: ``32000``, ``32k``, ``32e3``, which is how
kube-apiserver may store it) and soft-mode core percent ``-core``; and the pod annotations
for soft mode, UUID allow/deny lists and policies. Memory is rounded here, once, the same
way the webhook, the filter and the bind do it. Called by the allocator's callers: the
scheduler, the webhook and the planner.

Where HAMi or Volcano read a request in a way of their own, it is read as they read it
and ``PodRequest.notes`` says so (the webhook returns the notes as admission warnings,
the scheduler records them as an event): a core percentage above 100 is 100; a 910C
request for one die in a super pod (``superPod: true``) takes a die pair; memory 0 is the
smallest template at admission (HAMi's webhook) and no memory at all elsewhere (HAMi's
scheduler and Volcano: a whole chip); an empty ``use``/``no-use`` UUID list is no list.

A pod may pin one template with the annotation ``vnpu.io/template`` (vnpu only; HAMi and
Volcano ignore it). The pin is pod-wide: every NPU container must then ask for one hard
vNPU of the one chip model that has the template, with no more memory than the template
has, and gets exactly that template (memory rounds to the template's). Anything else is
an ``errors.PinError`` naming ``metadata.annotations[vnpu.io/template]``, the value and the
valid templates. A pin on a pod that asks for no NPU does nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from vnpu_core import catalog, errors, protocol, quantities

_MAX_QUANTITY = 2**31 - 1
MAX_CORE_PERCENT = 100


class Policy(StrEnum):
    """How chips (inside a node) and nodes are chosen."""

    DEFAULT = "best-fit"  # pack into used chips, keep whole chips and rings free
    BINPACK = "binpack"
    SPREAD = "spread"


# HAMi policy words that vnpu always honours in its own way (topology is always respected).
_IMPLIED_POLICIES = {"topology-aware", "numa", "mutex"}


@dataclass(frozen=True, slots=True)
class ContainerRequest:
    """One container's request for chips of one model, after rounding.

    Exactly one of three shapes: ``whole`` chips (``count`` of them), one hard vNPU from
    ``templates`` (equal memory, preference order: the first that fits a chip is used),
    or ``soft`` slices of ``memory_mib`` and ``core_percent`` on ``count`` chips.
    ``pinned``: the pod's ``vnpu.io/template`` chose the one template in ``templates``.
    """

    container: str
    init: bool
    model: catalog.ChipModel
    count: int
    memory_mib: int  # rounded: template memory, chip allocatable (whole) or soft quota
    core_percent: int = 0
    whole: bool = False
    soft: bool = False
    templates: tuple[catalog.Template, ...] = ()
    pinned: bool = False

    @property
    def shape(self) -> str:
        if self.soft:
            return f"{self.count}x soft slice of {self.memory_mib} MiB/{self.core_percent}%"
        if self.whole:
            return f"{self.count} whole chip{'s' if self.count > 1 else ''}"
        return self.templates[0].name


@dataclass(frozen=True, slots=True)
class PodRequest:
    """All NPU requests of a pod plus the pod-level settings that steer placement."""

    namespace: str
    name: str
    containers: tuple[tuple[str, bool], ...]  # every container (name, is_init), annotation order
    requests: tuple[ContainerRequest, ...]
    soft: bool = False
    use_uuids: Mapping[str, frozenset[str]] | None = None
    no_use_uuids: Mapping[str, frozenset[str]] | None = None
    chip_policy: Policy | None = None
    node_policy: Policy | None = None
    notes: tuple[str, ...] = ()  # how the request was read where a peer's rule applied
    template: str | None = None  # the template pinned by ``vnpu.io/template``, if any

    @property
    def wants_npu(self) -> bool:
        return bool(self.requests)

    def models(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.model.common_word for r in self.requests))


def parse_quantity(container: str, resource: str, value: object) -> int:
    """A resource value as a non-negative whole number, refusing binary units and fractions.

    Every decimal form of a whole number is that number (``3000``, ``3k``, ``3e3``,
    ``3000m``): kube-apiserver rewrites ``3000`` as ``3k`` when it stores a pod. Binary units
    (``4Gi``) are refused: HAMi and Volcano would read ``4Gi`` as 4294967296 MiB.
    """
    hint = (
        "write MiB as a plain integer, e.g. 4096"
        if resource.endswith("-memory")
        else "must be a plain integer"
    )
    try:
        quantity = quantities.parse(value.strip() if isinstance(value, str) else value)
    except errors.QuantityError as exc:
        raise errors.RequestError(container, resource, value, hint) from exc
    if quantity.form is quantities.Form.BINARY_SI or not quantity.whole:
        raise errors.RequestError(container, resource, value, hint)
    number = int(quantity.value)
    if number < 0 or number > _MAX_QUANTITY:
        raise errors.RequestError(
            container, resource, value, f"must be between 0 and {_MAX_QUANTITY}"
        )
    return number


def _resource(spec: Mapping[str, Any], name: str) -> object | None:
    resources = spec.get("resources") or {}
    for section in ("limits", "requests"):
        values = resources.get(section) or {}
        if name in values:
            return values[name]  # type: ignore[no-any-return]
    return None


def _uuid_lists(
    annotations: Mapping[str, str], key_for: Callable[[str], str], models: list[str]
) -> dict[str, frozenset[str]]:
    lists: dict[str, frozenset[str]] = {}
    for word in models:
        raw = annotations.get(key_for(word))
        names = frozenset(u.strip() for u in (raw or "").split(",") if u.strip())
        if names:  # an empty or blank list names no chip: no constraint
            lists[word] = names
    return lists


def _policy(annotations: Mapping[str, str], key: str) -> Policy | None:
    raw = annotations.get(key)
    if raw is None:
        return None
    words = [w.strip() for w in raw.split(",") if w.strip()]
    for word in words:
        if word in (Policy.BINPACK, Policy.SPREAD, Policy.DEFAULT):
            return Policy(word)
        if word not in _IMPLIED_POLICIES:
            allowed = "binpack, spread, best-fit"
            raise errors.RequestError(
                "(pod)", key, raw, f"unknown policy {word!r}; use one of {allowed}"
            )
    return None


def super_pod_count(model: catalog.ChipModel, container: str, count: int) -> tuple[int, str]:
    """Whole dies of a super-pod model: 1 becomes a die pair, odd counts above 1 are refused.

    Returns the count to place and a note ("" when nothing changed). Models without
    ``superPod`` keep their count. HAMi's webhook rounds 1 up to 2 the same way.
    """
    if not model.super_pod or count % 2 == 0:
        return count, ""
    if count == 1:
        return 2, (
            f"container {container!r}: {model.resource_name}=1 takes a die pair in a super pod "
            "(superPod: true); read as 2, as HAMi does"
        )
    raise errors.RequestError(
        container,
        model.resource_name,
        count,
        "must be 1 or an even number: a super pod (superPod: true) gives whole dies in pairs",
    )


def round_container(
    model: catalog.ChipModel,
    container: str,
    init: bool,
    count: int,
    memory: int | None,
    core: int,
    soft: bool,
    *,
    admission: bool = False,
    pin: catalog.Template | None = None,
) -> tuple[ContainerRequest, tuple[str, ...]]:
    """Round one container's request to whole chips, a template, or a soft slice.

    Returns the request and notes on where a peer's reading was applied. ``admission``
    reads memory 0 as HAMi's webhook does (the smallest template); otherwise memory 0 is
    no memory given, as HAMi's scheduler and Volcano read it (a whole chip). ``pin`` (a
    template of ``model``, from ``vnpu.io/template``) is the one template the container
    may get; a request it cannot serve raises ``errors.PinError``.
    """
    if pin is not None:
        return _round_pinned(model, container, init, count, memory, core, pin, admission)
    memory_name = model.memory_resource
    notes: list[str] = []
    factor = model.memory_factor
    if memory == 0:
        smallest = model.templates[0] if model.templates else None
        if admission and not soft and count == 1 and smallest is not None:
            notes.append(
                f"container {container!r}: {memory_name}=0 rounds to the smallest template "
                f"{smallest.name} ({smallest.memory_mib} MiB), as HAMi's webhook does"
            )
            memory, factor = smallest.memory_mib, 1  # already what the chip gives
        else:
            what = "the whole chip's memory" if soft else "a whole chip"
            notes.append(
                f"container {container!r}: {memory_name}=0 is read as no memory given: "
                f"{what}, as HAMi's scheduler and Volcano do"
            )
            memory = None
    if memory is not None:
        memory *= factor
        if memory > model.memory_capacity_mib:
            size = model.memory_capacity_mib
            raise errors.RequestError(
                container,
                memory_name,
                memory,
                f"is larger than one {model.common_word} chip ({size} MiB)",
            )
    if soft:
        if core > MAX_CORE_PERCENT:
            notes.append(
                f"container {container!r}: {model.core_resource}={core} is above "
                f"{MAX_CORE_PERCENT}%; read as {MAX_CORE_PERCENT} (all of the chip's cores), "
                "as HAMi does"
            )
            core = MAX_CORE_PERCENT
        quota = (
            model.memory_allocatable_mib
            if memory is None
            else min(memory, model.memory_allocatable_mib)
        )
        request = ContainerRequest(container, init, model, count, quota, core, soft=True)
        return request, tuple(notes)
    if core:
        raise errors.RequestError(
            container,
            model.core_resource,
            core,
            f"needs the pod annotation {protocol.VNPU_MODE_KEY}: {protocol.SOFT_MODE_VALUE}",
        )
    fitting = [t for t in model.templates if memory is not None and t.memory_mib >= memory]
    if memory is None or not fitting:
        count, note = super_pod_count(model, container, count)
        notes.extend([note] if note else [])
        if memory is not None and memory > model.memory_allocatable_mib:
            notes.append(
                f"container {container!r}: {memory_name}={memory // factor} is more than one "
                f"{model.common_word} gives a pod ({model.memory_allocatable_mib} MiB of the "
                f"chip's {model.memory_capacity_mib} MiB): it gets a whole chip with "
                f"{model.memory_allocatable_mib} MiB, as HAMi gives it"
            )
        whole = ContainerRequest(
            container, init, model, count, model.memory_allocatable_mib, whole=True
        )
        return whole, tuple(notes)
    if count > 1:
        whole_mib = model.memory_allocatable_mib
        raise errors.RequestError(
            container,
            memory_name,
            memory,
            f"vNPU templates are single-chip: a request for {count} chips takes whole chips "
            f"(leave the memory out or set it to {whole_mib})",
        )
    smallest_mib = fitting[0].memory_mib
    candidates = tuple(t for t in fitting if t.memory_mib == smallest_mib)
    vnpu = ContainerRequest(container, init, model, 1, smallest_mib, templates=candidates)
    return vnpu, tuple(notes)


def templates_text(model: catalog.ChipModel, at_least_mib: int = 0) -> str:
    """The templates of ``model`` with at least ``at_least_mib`` MiB, for a person."""
    word = model.common_word
    if not model.templates:
        return f"{word} has no vNPU templates (whole chips only)"
    fitting = [t for t in model.templates if t.memory_mib >= at_least_mib]
    if not fitting:
        largest = max(model.templates, key=lambda t: t.memory_mib)
        return (
            f"no {word} template has {at_least_mib} MiB (the largest, {largest.name}, "
            f"has {largest.memory_mib} MiB): leave the pin out for a whole chip"
        )
    listed = ", ".join(f"{t.name} {t.memory_mib}/{t.aicore}/{t.aicpu}" for t in fitting)
    which = f" with at least {at_least_mib} MiB" if at_least_mib else ""
    return f"valid templates for {word}{which} (MiB/AI cores/AI CPUs): {listed}"


def _round_pinned(
    model: catalog.ChipModel,
    container: str,
    init: bool,
    count: int,
    memory: int | None,
    core: int,
    pin: catalog.Template,
    admission: bool,
) -> tuple[ContainerRequest, tuple[str, ...]]:
    """One container of a pinned pod: one vNPU of ``pin``, or a PinError saying why not."""
    key, name = protocol.TEMPLATE_KEY, pin.name
    memory_name = model.memory_resource
    if core:
        raise errors.PinError(
            container,
            key,
            name,
            f"{model.core_resource}={core} is a soft-mode core percentage; {name} brings its "
            f"own {pin.aicore} AI cores: leave {model.core_resource} out",
        )
    if count > 1:
        raise errors.PinError(
            container,
            key,
            name,
            f"{model.resource_name}={count} asks for whole chips; {name} is one vNPU on one "
            f"chip: ask for {model.resource_name}: 1",
        )
    notes: list[str] = []
    if memory == 0 and admission:
        notes.append(
            f"container {container!r}: {memory_name}=0 rounds to the pinned template {name} "
            f"({pin.memory_mib} MiB)"
        )
        mib = pin.memory_mib
    elif not memory:
        given = f"no {memory_name}" if memory is None else f"{memory_name}=0 is no memory"
        raise errors.PinError(
            container,
            key,
            name,
            f"asks for a whole chip ({given}); {name} is one vNPU: set {memory_name} to at "
            f"most {pin.memory_mib // model.memory_factor}",
        )
    else:
        mib = memory * model.memory_factor
    if mib > pin.memory_mib:
        in_mib = f" ({mib} MiB)" if model.memory_factor != 1 else ""
        raise errors.PinError(
            container,
            key,
            name,
            f"{name} has {pin.memory_mib} MiB, less than {memory_name}={memory}{in_mib} asks; "
            + templates_text(model, mib),
        )
    request = ContainerRequest(
        container, init, model, 1, pin.memory_mib, templates=(pin,), pinned=True
    )
    return request, tuple(notes)


@dataclass(frozen=True, slots=True)
class _Ask:
    """One container's figures for one chip model, read but not rounded yet."""

    container: str
    init: bool
    model: catalog.ChipModel
    count: int
    memory: int | None
    core: int


def _asks(spec: Mapping[str, Any], init: bool, models: catalog.Catalog) -> list[_Ask]:
    name = str(spec.get("name", ""))
    found: list[_Ask] = []
    for model in models:
        raw_count = _resource(spec, model.resource_name)
        raw_memory = _resource(spec, model.memory_resource)
        raw_core = _resource(spec, model.core_resource)
        if raw_count is None:
            if raw_memory is not None or raw_core is not None:
                present = model.memory_resource if raw_memory is not None else model.core_resource
                raise errors.RequestError(
                    name, present, raw_memory if raw_memory is not None else raw_core,
                    f"comes without a chip count: add {model.resource_name}: 1",
                )  # fmt: skip
            continue
        count = parse_quantity(name, model.resource_name, raw_count)
        if count == 0:
            continue
        memory = (
            None if raw_memory is None else parse_quantity(name, model.memory_resource, raw_memory)
        )
        core = 0 if raw_core is None else parse_quantity(name, model.core_resource, raw_core)
        found.append(_Ask(name, init, model, count, memory, core))
    return found


def _pin(
    annotations: Mapping[str, str], asks: list[_Ask], models: catalog.Catalog, soft: bool
) -> catalog.Template | None:
    """The template the pod pins, checked against the pod as a whole; None without a pin."""
    name = annotations.get(protocol.TEMPLATE_KEY)
    if name is None or not asks:
        return None
    key = protocol.TEMPLATE_KEY
    if soft:
        raise errors.PinError(
            "(pod)",
            key,
            name,
            f"a pinned template is a hard vNPU and the pod asks for soft slices "
            f"({protocol.VNPU_MODE_KEY}: {protocol.SOFT_MODE_VALUE}): drop one of the two",
        )
    words = list(dict.fromkeys(a.model.common_word for a in asks))
    if len(words) > 1:
        raise errors.PinError(
            "(pod)",
            key,
            name,
            f"a pin serves the NPU containers of one chip model and the pod asks for "
            f"{' and '.join(words)}: split the pod or leave the pin out",
        )
    model = asks[0].model
    template = model.template(name)
    if template is not None:
        return template
    owners = [m.common_word for m in models if m.template(name) is not None]
    if owners:
        what = (
            f"a template of {', '.join(owners)}, not of {model.common_word}, which the pod asks for"
        )
    else:
        what = "unknown template"
    raise errors.PinError("(pod)", key, name, f"{what}; {templates_text(model)}")


def _is_sidecar(spec: Mapping[str, Any]) -> bool:
    return spec.get("restartPolicy") == "Always"


def from_pod(
    pod: Mapping[str, Any], models: catalog.Catalog, *, admission: bool = False
) -> PodRequest:
    """Parse a pod dict. Raises RequestError naming the container, resource and value.

    ``admission`` is for the webhook (and the planner, which plans pods as admitted): it
    reads memory 0 as HAMi's webhook does, the smallest template.
    """
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    mode = annotations.get(protocol.VNPU_MODE_KEY)
    if mode not in (None, "", protocol.SOFT_MODE_VALUE):
        raise errors.RequestError(
            "(pod)", protocol.VNPU_MODE_KEY, mode, f"the only mode is {protocol.SOFT_MODE_VALUE}"
        )
    soft = mode == protocol.SOFT_MODE_VALUE
    containers: list[tuple[str, bool]] = []
    asks: list[_Ask] = []
    for init, key in ((True, "initContainers"), (False, "containers")):
        for item in spec.get(key) or []:
            containers.append((str(item.get("name", "")), init))
            # A sidecar (restartable init container) runs beside the app: count it as regular.
            runs_alone = init and not _is_sidecar(item)
            asks.extend(_asks(item, runs_alone, models))
    pin = _pin(annotations, asks, models, soft)
    requests: list[ContainerRequest] = []
    notes: list[str] = []
    for ask in asks:
        request, said = round_container(
            ask.model,
            ask.container,
            ask.init,
            ask.count,
            ask.memory,
            ask.core,
            soft,
            admission=admission,
            pin=pin,
        )
        requests.append(request)
        notes.extend(said)
    words = list(dict.fromkeys(r.model.common_word for r in requests))
    return PodRequest(
        namespace=str(metadata.get("namespace", "default")),
        name=str(metadata.get("name", "")),
        containers=tuple(containers),
        requests=tuple(requests),
        soft=soft,
        use_uuids=_uuid_lists(annotations, protocol.use_uuid_key, words),
        no_use_uuids=_uuid_lists(annotations, protocol.no_use_uuid_key, words),
        chip_policy=_policy(annotations, protocol.DEVICE_POLICY_KEY),
        node_policy=_policy(annotations, protocol.NODE_POLICY_KEY),
        notes=tuple(notes),
        template=pin.name if pin is not None else None,
    )
