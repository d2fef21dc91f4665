"""The pod annotations that carry an assignment to the node, as HAMi and Volcano write them.

An ``allocator.Assignment`` becomes, per chip model: ``hami.io/<CW>-devices-to-allocate``
and ``-devices-allocated`` (every container in annotation order, empty entries kept) and
``huawei.com/<CW>`` (template, memory and cores per device); plus ``hami.io/vgpu-node``,
the bind phase and the timestamps. The scheduler's bind writes these inside the Binding;
the planner writes them onto its simulated pods so the ledger reads them back.
"""

from __future__ import annotations

from vnpu_core import allocator, protocol


def device_annotations(assignment: allocator.Assignment) -> dict[str, str]:
    """The devices and runtime-info annotations of an assignment, per chip model."""
    words = list(dict.fromkeys(g.common_word for c in assignment.containers for g in c.grants))
    annotations: dict[str, str] = {}
    for word in words:
        containers = [
            [
                protocol.DeviceEntry(g.uuid, word, g.memory_mib, g.cores)
                for g in container.grants
                if g.common_word == word
            ]
            for container in assignment.containers
        ]
        runtime = [
            _runtime(g) for c in assignment.containers for g in c.grants if g.common_word == word
        ]
        encoded = protocol.encode_devices(containers)
        annotations[protocol.to_allocate_key(word)] = encoded
        annotations[protocol.allocated_key(word)] = encoded
        annotations[protocol.runtime_key(word)] = protocol.encode_runtime(runtime)
    return annotations


def _runtime(grant: allocator.Grant) -> protocol.RuntimeInfo:
    if grant.template is not None:
        return protocol.RuntimeInfo(grant.uuid, grant.template, grant.memory_mib, 0)
    if grant.soft:
        return protocol.RuntimeInfo(grant.uuid, None, grant.memory_mib, grant.cores)
    return protocol.RuntimeInfo(grant.uuid, None, 0, 0)


def bind_annotations(assignment: allocator.Assignment, now_seconds: int) -> dict[str, str]:
    """Everything the bind writes onto the pod together with ``spec.nodeName``."""
    stamp = protocol.encode_timestamp(now_seconds)
    annotations = device_annotations(assignment)
    annotations.update(
        {
            protocol.VGPU_NODE_KEY: assignment.node,
            protocol.VGPU_TIME_KEY: stamp,
            protocol.BIND_TIME_KEY: stamp,
            protocol.PREDICATE_TIME_KEY: stamp,
            protocol.BIND_PHASE_KEY: protocol.BindPhase.ALLOCATING.value,
        }
    )
    return annotations


def describe(assignment: allocator.Assignment) -> str:
    """The chips a pod got, for its event: ``main: Ascend310P chip 2 (vir02)``."""
    parts = []
    for container in assignment.containers:
        if not container.grants:
            continue
        chips = []
        for grant in container.grants:
            what = grant.template or ("soft slice" if grant.soft else "whole")
            chips.append(f"{grant.common_word} chip {grant.chip} ({what})")
        parts.append(f"{container.container}: {', '.join(chips)}")
    return "; ".join(parts) or "no chips"
