"""Two scheduler processes bind hundreds of pods onto a few nodes at once: no chip is over-committed.

The test drives both replicas like two kube-scheduler instances would: filter, prioritize,
pick one of the best nodes, bind; a refused bind is retried twice from the filter (as a
scheduling retry would), then the pod counts as refused. Every pod must end bound with
valid annotations or refused, and the usage rebuilt from the API must fit every chip.
"""

from __future__ import annotations

import os
import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from vnpu_core import catalog, ledger, protocol

Json = dict[str, Any]
NODES = [f"node-{i}" for i in range(6)]
PODS = 240
SHAPES: list[tuple[int | None, int]] = (
    [(3000, 1)] * 4 + [(4000, 1)] * 3 + [(10000, 1)] * 2 + [(None, 1)]
)


def _schedule(client: httpx.Client, url: str, pod: Json, rng: random.Random) -> str:
    """One pod through filter, prioritize and bind; the node, or '' when refused."""
    meta = pod["metadata"]
    for _ in range(3):
        args = {"Pod": pod, "Nodes": None, "NodeNames": NODES}
        fitting = client.post(f"{url}/filter", json=args).json()["NodeNames"]
        if not fitting:
            return ""
        args["NodeNames"] = fitting
        scores = client.post(f"{url}/prioritize", json=args).json()
        best = max(entry["Score"] for entry in scores)
        node = rng.choice([entry["Host"] for entry in scores if entry["Score"] == best])
        body = {
            "PodName": meta["name"],
            "PodNamespace": meta["namespace"],
            "PodUID": meta["uid"],
            "Node": node,
        }
        if client.post(f"{url}/bind", json=body).json()["Error"] == "":
            return node
    return ""


def _check_no_overcommit(pods: list[Json]) -> int:
    models = catalog.BUILTIN
    bound = 0
    for node in NODES:
        on_node = [p for p in pods if p["spec"].get("nodeName") == node]
        bound += len(on_node)
        usage = ledger.node_usage(on_node, node, models)
        assert usage.problems == ()
        model = models.by_common_word("Ascend310P")
        assert model is not None
        for uuid, used in usage.usage.items():
            assert uuid.startswith(f"{node}-Ascend310P-"), uuid
            where = f"{node} chip {uuid}: {used}"
            if used.exclusive:
                assert used.vnpus == 0, where
                assert used.memory_mib <= model.memory_allocatable_mib, where
                continue
            assert used.vnpus <= model.max_vnpus, where
            assert used.memory_mib <= model.memory_capacity_mib, where
            assert used.aicore <= model.aicore, where
            assert used.aicpu <= model.aicpu, where
            assert model.media is not None
            caps = model.media.as_tuple()
            assert all(h <= c for h, c in zip(used.media, caps, strict=True)), where
        for pod in on_node:
            notes = pod["metadata"]["annotations"]
            assert notes[protocol.VGPU_NODE_KEY] == node
            assert notes[protocol.BIND_PHASE_KEY] in ("allocating", "success")
            key = protocol.allocated_key("Ascend310P")
            containers = protocol.decode_devices(key, notes[key])
            assert [len(devices) for devices in containers] == [1]
    return bound


@pytest.mark.timeout(120)  # 240 pods through two processes; a guard, not a speed claim
def test_two_replicas_never_overcommit(
    kube: Any, make: Any, plugin: Any, replicas: list[str]
) -> None:
    for name in NODES:
        kube.add_node(make.node(name, chips=8))
    rng = random.Random(7)
    pods = []
    for i in range(PODS):
        memory, count = rng.choice(SHAPES)
        pods.append(make.npu_pod(f"job-{i:03d}", count=count, memory=memory))
    with ThreadPoolExecutor(8) as pool:
        created = list(pool.map(kube.add_pod, pods))

    def run(index: int) -> str:
        with httpx.Client(timeout=60) as client:
            return _schedule(client, replicas[index % 2], created[index], random.Random(index))

    workers = min(24, (os.cpu_count() or 2) * 8)
    with ThreadPoolExecutor(workers) as pool:
        placed = list(pool.map(run, range(PODS)))
    final = [kube.pod(p["metadata"]["name"]) for p in created]
    for pod, node in zip(final, placed, strict=True):
        assert pod["spec"].get("nodeName", "") == node, pod["metadata"]["name"]
        if not node:
            notes = pod["metadata"].get("annotations") or {}  # the API drops an empty map
            assert not any(k.startswith("hami.io/") for k in notes)
    bound = _check_no_overcommit(final)
    assert bound == sum(1 for node in placed if node)
    assert bound >= 100  # the pods ask about twice what fits; about half must be placed
    with httpx.Client() as client:
        for url in replicas:
            text = client.get(f"{url}/metrics").text
            assert 'vnpu_scheduler_binds_total{result="bound"}' in text
            assert 'vnpu_scheduler_binds_total{result="bound"} 0.0' not in text
