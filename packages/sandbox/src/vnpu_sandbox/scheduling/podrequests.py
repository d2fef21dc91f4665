"""What a pod asks of a node: its resource requests and host ports, as kube-scheduler counts them.

``nodeinfo`` adds a :class:`Demand` to a node for every pod bound or assumed there;
``predicates`` and ``priorities`` compare the pending pod's demand with what is left. The rule
is kube-scheduler's (``resource.PodRequests``): the sum of the containers' requests, at least
the largest init container's (an init container with ``restartPolicy: Always``, a sidecar,
runs beside everything after it, so it is added to the sum and to every later init
container), plus ``spec.overhead``. Limits are not read: the API server already copied them
into requests where requests were missing.

``nonzero_milli_cpu`` and ``nonzero_memory`` count a container that requests no cpu as 100m
and no memory as 200 MiB, the defaults kube-scheduler scores with so that best-effort pods
still spread. Pure functions; a request that is not a quantity raises ``errors.PodSpecError``
naming the field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vnpu_sandbox.scheduling import errors, quantities

Json = dict[str, Any]

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
DEFAULT_MILLI_CPU = 100
DEFAULT_MEMORY = 200 * 1024 * 1024


def is_scalar(name: str) -> bool:
    """Resources kube-scheduler counts besides cpu, memory and storage: ``domain/name`` and hugepages."""
    return "/" in name or name.startswith("hugepages-")


def is_extended(name: str) -> bool:
    """An extended resource (``vendor.example/x``): has a domain that is not ``kubernetes.io``."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


@dataclass(frozen=True)
class HostPort:
    """A container port published on the node; ``ip`` ``0.0.0.0`` means every address."""

    protocol: str
    ip: str
    port: int

    def conflicts(self, other: HostPort) -> bool:
        if self.protocol != other.protocol or self.port != other.port:
            return False
        return self.ip == other.ip or "0.0.0.0" in (self.ip, other.ip)


@dataclass(frozen=True)
class Demand:
    """One pod's requests (cpu in millicores, the rest in whole units) and host ports."""

    milli_cpu: int = 0
    memory: int = 0
    ephemeral_storage: int = 0
    scalars: Mapping[str, int] = field(default_factory=dict)
    nonzero_milli_cpu: int = 0
    nonzero_memory: int = 0
    host_ports: tuple[HostPort, ...] = ()

    def requests_nothing(self) -> bool:
        return not (
            self.milli_cpu or self.memory or self.ephemeral_storage or any(self.scalars.values())
        )


class _Vector:
    """A mutable resource vector while a demand is being added up."""

    def __init__(self) -> None:
        self.values: dict[str, int] = {}

    def add(self, other: Mapping[str, int]) -> None:
        for name, amount in other.items():
            self.values[name] = self.values.get(name, 0) + amount

    def maximum(self, other: Mapping[str, int]) -> None:
        for name, amount in other.items():
            self.values[name] = max(self.values.get(name, 0), amount)


def _amount(name: str, value: object, where: str) -> int:
    try:
        return quantities.milli(value) if name == CPU else quantities.whole(value)
    except ValueError as exc:
        raise errors.PodSpecError(f"{where}.{name}", value, str(exc)) from exc


def resource_list(values: object, where: str) -> dict[str, int]:
    """A ``ResourceList`` (``{"cpu": "500m", ...}``) as integers; names kube-scheduler ignores dropped."""
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise errors.PodSpecError(where, values, "must be a map of resource name to quantity")
    counted: dict[str, int] = {}
    for key, value in values.items():
        name = str(key)
        if name in (CPU, MEMORY, EPHEMERAL_STORAGE) or is_scalar(name):
            counted[name] = _amount(name, value, where)
    return counted


def _with_defaults(requests: Mapping[str, int]) -> dict[str, int]:
    return {
        CPU: requests.get(CPU) or DEFAULT_MILLI_CPU,
        MEMORY: requests.get(MEMORY) or DEFAULT_MEMORY,
    }


def _containers(spec: Json, key: str) -> list[Json]:
    items = spec.get(key) or []
    if not isinstance(items, list):
        raise errors.PodSpecError(f"spec.{key}", items, "must be a list")
    return [item if isinstance(item, dict) else {} for item in items]


def _total(spec: Json, per_container: Any) -> dict[str, int]:
    """kube-scheduler's sum-and-max over containers, init containers and sidecars."""
    total = _Vector()
    for index, container in enumerate(_containers(spec, "containers")):
        total.add(per_container(container, f"spec.containers[{index}]"))
    sidecars = _Vector()
    init_peak = _Vector()
    for index, container in enumerate(_containers(spec, "initContainers")):
        own = per_container(container, f"spec.initContainers[{index}]")
        if container.get("restartPolicy") == "Always":
            total.add(own)
            sidecars.add(own)
            init_peak.maximum(sidecars.values)
        else:
            running = _Vector()
            running.add(own)
            running.add(sidecars.values)
            init_peak.maximum(running.values)
    total.maximum(init_peak.values)
    return total.values


def _ports(spec: Json) -> tuple[HostPort, ...]:
    found: list[HostPort] = []
    for container in _containers(spec, "containers"):
        for port in container.get("ports") or []:
            if not isinstance(port, dict):
                continue
            host_port = port.get("hostPort")
            if isinstance(host_port, int) and not isinstance(host_port, bool) and host_port > 0:
                found.append(
                    HostPort(
                        str(port.get("protocol") or "TCP"),
                        str(port.get("hostIP") or "0.0.0.0"),
                        host_port,
                    )
                )
    return tuple(found)


def demand(pod: Json) -> Demand:
    """The demand of ``pod``; ``errors.PodSpecError`` names the first unreadable request."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        raise errors.PodSpecError("spec", spec, "the pod has no spec")

    def requests(container: Json, where: str) -> dict[str, int]:
        resources = container.get("resources") or {}
        if not isinstance(resources, dict):
            raise errors.PodSpecError(f"{where}.resources", resources, "must be a map")
        return resource_list(resources.get("requests"), f"{where}.resources.requests")

    def nonzero(container: Json, where: str) -> dict[str, int]:
        return _with_defaults(requests(container, where))

    totals = _total(spec, requests)
    overhead = resource_list(spec.get("overhead"), "spec.overhead")
    for name, amount in overhead.items():
        totals[name] = totals.get(name, 0) + amount
    nonzero_totals = _total(spec, nonzero)
    return Demand(
        milli_cpu=totals.pop(CPU, 0),
        memory=totals.pop(MEMORY, 0),
        ephemeral_storage=totals.pop(EPHEMERAL_STORAGE, 0),
        scalars={name: amount for name, amount in totals.items() if amount},
        nonzero_milli_cpu=nonzero_totals.get(CPU, 0) + overhead.get(CPU, 0),
        nonzero_memory=nonzero_totals.get(MEMORY, 0) + overhead.get(MEMORY, 0),
        host_ports=_ports(spec),
    )


def resource_names(pod: Json) -> set[str]:
    """Every resource named in any container's or init container's requests or limits."""
    spec = pod.get("spec") or {}
    names: set[str] = set()
    containers: Iterable[object] = [
        *(spec.get("containers") or []),
        *(spec.get("initContainers") or []),
    ]
    for container in containers:
        if not isinstance(container, dict):
            continue
        resources = container.get("resources") or {}
        if not isinstance(resources, dict):
            continue
        for section in ("requests", "limits"):
            values = resources.get(section)
            if isinstance(values, dict):
                names.update(str(name) for name in values)
    return names
