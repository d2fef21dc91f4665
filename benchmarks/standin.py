"""What the benchmarks' stand-ins for the device plugin share: releasing a node lock.

After a pod's Allocate the plugin removes the node lock the pod holds. Done here through the
API with the node's resourceVersion, so a lock taken meanwhile by another bind is left alone;
a write that meets a newer version looks again.
"""

from __future__ import annotations

import json

import kubernetes

from vnpu_core import protocol

MERGE_PATCH = "application/merge-patch+json"


def release_lock(core: kubernetes.client.CoreV1Api, node: str, owner: str) -> None:
    """Remove ``node``'s lock if its value ends with ``owner`` (``,<namespace>,<pod>``)."""
    for _ in range(20):
        current = json.loads(core.read_node(node, _preload_content=False).data)
        lock = (current["metadata"].get("annotations") or {}).get(protocol.NODE_LOCK_KEY, "")
        if not lock.endswith(owner):
            return
        body = {
            "metadata": {
                "resourceVersion": current["metadata"]["resourceVersion"],
                "annotations": {protocol.NODE_LOCK_KEY: None},
            }
        }
        try:
            answer = core.patch_node(node, body, _content_type=MERGE_PATCH, _preload_content=False)
            answer.drain_conn()
            answer.release_conn()
            return
        except kubernetes.client.exceptions.ApiException as exc:
            if exc.status != 409:
                raise
