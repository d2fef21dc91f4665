"""DRA mode of ``bench_scale.py``: each KWOK node's ResourceSlices, and what DRA cost.

In ``--mode dra`` kube-scheduler allocates devices of vnpu's DRA driver ``npu.vnpu.io``
itself (docs/dra.md): ``scale_cluster.Cluster`` creates the DeviceClasses
(``vnpu_core.draclasses``, as the chart does) before kube-scheduler starts, and ``publish``
gives every KWOK node the pool the driver would publish for a node of ``scale_cluster.CHIPS``
chips of the benchmark's model: ``vnpu_dra_driver.slices.build`` of simulated chips
(``chips``: the ``ChipInfo`` values ``vnpu-npu-sim init`` would give, each chip's UUID made
as classic mode's inventory makes it), written by the driver's own ``publisher.Publisher``
(the Node as owner, the pool's generation) through the benchmark's API client, many nodes
at a time. Pods ask ``huawei.com/<CW>: 1``, which the whole-chip DeviceClass serves
(``extendedResourceName``).

No kubelet prepares the claims: KWOK marks a bound pod Running, so the mode's figure measures
scheduling and allocation (kube-scheduler's DynamicResources plugin and the claim it writes),
not the driver's Prepare. ``plugin_figures`` reads that plugin's latency from kube-scheduler's
``/metrics`` (sampled by it); ``claims`` counts the allocated claims at the end.
``bench_scale`` calls all three.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kubernetes
import scale_cluster
import structlog

from vnpu_core import catalog
from vnpu_dra_driver import cluster, publisher, slices
from vnpu_npu import backend, limits
from vnpu_service import kubeapi

Json = dict[str, Any]
PUBLISH_THREADS = 16
CALL_TIMEOUT = 60.0
"""Seconds per API call of the publisher (its own default, 10, is for one node's agent)."""
PLUGIN = "DynamicResources"
POINTS = ("PreFilter", "Filter", "Reserve")
"""The plugin's extension points reported: ``Filter`` runs the allocator on each node,
``Reserve`` keeps the result in memory. (Its PreBind, which writes the claim, has no
per-plugin figure in kube-scheduler 1.37; ``bench_scale`` reports the PreBind phase.)"""


def chips(
    node: str, model: catalog.ChipModel, count: int = scale_cluster.CHIPS
) -> list[slices.Chip]:
    """``count`` healthy chips of ``model`` on ``node``, as the sim backend enumerates them
    (one chip a card: a 910B server)."""
    ddr = limits.is_310p(model.chip_name)  # the sim backend's choice
    return [
        slices.Chip(
            backend.ChipInfo(
                card_id=phy,
                device_id=0,
                logic_id=phy,
                phy_id=phy,
                uuid=scale_cluster._chip_uuid(node, phy),
                chip_name=model.chip_name,
                chip_type="Ascend",
                chip_version="V1",
                model=model.name,
                aicore=model.aicore,
                memory_mib=model.memory_capacity_mib,
                memory_kind=backend.MemoryKind.DDR if ddr else backend.MemoryKind.HBM,
                bdf=backend.format_bdf(0, 1 + phy, 0, 0),
            )
        )
        for phy in range(count)
    ]


def _quiet() -> None:
    """The publisher logs a line per node at info: keep warnings only, on stderr."""
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


def publish(api: kubernetes.client.ApiClient, names: Sequence[str]) -> Json:
    """The pool of every node in ``names`` (the Nodes exist), ``PUBLISH_THREADS`` at a time.

    Raises ``scale_cluster.ScaleError`` naming the first node whose pool could not be written.
    """
    _quiet()
    model = scale_cluster.chip_model()
    writer = publisher.Publisher(cluster.KubeSlices(api, CALL_TIMEOUT))

    def one(name: str) -> int:
        built = slices.build(name, chips(name, model), model)
        try:
            writer.publish(name, built)
        except Exception as exc:  # PublishError, or the client's own
            raise scale_cluster.ScaleError(f"the ResourceSlices of {name}: {exc}") from exc
        return len(built)

    began = time.monotonic()
    with ThreadPoolExecutor(PUBLISH_THREADS, thread_name_prefix="slices") as pool:
        written = sum(pool.map(one, names))
    seconds = time.monotonic() - began
    listed = count_slices(api)
    if listed < written:
        raise scale_cluster.ScaleError(f"{written} ResourceSlices written, {listed} listed")
    return {"resource_slices": written, "slices_publish_seconds": round(seconds, 1)}


def _listed(call: Callable[[], Any], what: str) -> list[Json]:
    try:
        return list(kubeapi.fetch(call, what).get("items") or [])
    except kubeapi.ApiError as exc:
        raise scale_cluster.ScaleError(f"{what}: {exc}") from exc


def count_slices(api: kubernetes.client.ApiClient) -> int:
    resource = kubernetes.client.ResourceV1Api(api)
    found = _listed(
        lambda: resource.list_resource_slice(
            field_selector=f"spec.driver={slices.DRIVER}", _preload_content=False
        ),
        "list the ResourceSlices",
    )
    return len(found)


def claims(api: kubernetes.client.ApiClient, namespace: str) -> Json:
    """The ResourceClaims in ``namespace`` (kube-scheduler makes one per pod for an extended
    resource a DeviceClass serves) and how many of them are allocated."""
    resource = kubernetes.client.ResourceV1Api(api)
    items = _listed(
        lambda: resource.list_namespaced_resource_claim(namespace, _preload_content=False),
        f"list the ResourceClaims in {namespace}",
    )
    allocated = sum(bool((c.get("status") or {}).get("allocation")) for c in items)
    return {"claims": len(items), "claims_allocated": allocated}


def plugin_figures(before: str, after: str) -> Json:
    """p50, p99 and calls of the DynamicResources plugin at each of ``POINTS`` over the run,
    from kube-scheduler's ``scheduler_plugin_execution_duration_seconds`` (every status; the
    scheduler samples this metric in a tenth of its cycles, so the calls are a sample)."""
    found: Json = {}
    for point in POINTS:
        buckets, _ = scale_cluster.histogram(
            before,
            after,
            "scheduler_plugin_execution_duration_seconds",
            plugin=PLUGIN,
            extension_point=point,
        )
        key = f"dra_{point.lower()}"
        found[f"{key}_sampled"] = int(buckets[-1][1]) if buckets else 0
        for name, q in (("p50", 0.5), ("p99", 0.99)):
            value = scale_cluster.quantile(buckets, q)
            found[f"{key}_{name}_ms"] = None if value is None else round(1000 * value, 3)
    return found
