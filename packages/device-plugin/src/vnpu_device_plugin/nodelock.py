"""Releasing the node lock ``hami.io/mutex.lock``, which a scheduler's bind leaves for the plugin.

HAMi's and vnpu's schedulers take the lock as ``<time>,<namespace>,<pod>`` before they bind
a pod and leave it until the plugin has served that pod; Volcano takes it as a bare time
and never releases it. ``release`` removes it when ``allowed`` says so for the value it
finds, with a merge patch carrying the node's resourceVersion, so a lock another bind took
in between is never removed (a 409 re-reads the node and decides again).

``allocations`` releases after an Allocate (the lock of the pod served, or a bare one);
the ``reconciler`` releases a lock left behind by a pod that no longer needs it (gone,
finished, or served), for instance when the plugin died between serving a pod and
releasing its lock. An unreadable lock is left alone: it is not the plugin's to judge.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from vnpu_core import coordination, protocol
from vnpu_core import errors as core_errors
from vnpu_device_plugin import cluster, metrics
from vnpu_service import kubeapi

log = structlog.get_logger(__name__)


def release(
    api: cluster.Cluster,
    node: str,
    allowed: Callable[[coordination.NodeLock], bool],
    *,
    attempts: int,
    stats: metrics.Metrics,
) -> bool:
    """Remove the lock if ``allowed(lock)``; True when it was removed."""
    for _attempt in range(attempts):
        try:
            obj = cluster.retrying(lambda: api.get_node(node), attempts, on_retry=stats.retried)
            meta = obj.get("metadata") or {}
            raw = (meta.get("annotations") or {}).get(protocol.NODE_LOCK_KEY)
            if raw is None:
                return False
            try:
                lock = coordination.decode_lock(raw)
            except core_errors.ProtocolError:
                log.warning("node_lock_left_unreadable", node=node, value=raw)
                return False
            if not allowed(lock):
                return False
            api.patch_node_annotations(
                node, {protocol.NODE_LOCK_KEY: None}, str(meta.get("resourceVersion", ""))
            )
            log.info("node_lock_released", node=node, value=raw)
            return True
        except kubeapi.Conflict:
            stats.api_retries.inc()
        except kubeapi.ApiError as exc:
            log.error("node_lock_not_released", node=node, error=str(exc))
            return False
    log.error("node_lock_not_released", node=node, error=f"{attempts} conflicts in a row")
    return False


def owned_by_or_bare(namespace: str, name: str) -> Callable[[coordination.NodeLock], bool]:
    """The plugin may remove a lock naming this pod, or naming nobody (Volcano)."""
    return lambda lock: lock.name is None or lock.owned_by(namespace, name)
