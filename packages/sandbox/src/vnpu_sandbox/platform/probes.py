"""Is the sandbox ready? HTTP health checks and the nodes' state as the API reports it.

``up`` polls these until everything answers (or its timeout passes), ``status`` asks once.
A node is ready when its Ready condition is True, its NPUs are in allocatable (the device
plugin registered with the kubelet) and its device plugin has published the chip inventory
the scheduler reads (``hami.io/node-register-<CW>``). The sandbox is usable when, on top of
that, kube-apiserver admits an NPU pod in ``default`` (``usable``). In DRA mode a node is
ready when its DRA driver has published the node's ResourceSlices, and an NPU pod is usable
when vnpu's webhook has rewritten its vNPU request as the extended resource DRA serves. Plain ``urllib`` with the
admin's TLS context is enough: this runs before any client library would be of use.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from vnpu_core import catalog, draclasses
from vnpu_sandbox.platform import clusterfile, manifests

REGISTER_PREFIX = "hami.io/node-register-"
PROBE_POD = "vnpu-sandbox-ready"


def http_ok(url: str, timeout: float = 2.0, context: ssl.SSLContext | None = None) -> bool:
    """Whether ``url`` answers 200 now (``context``: the TLS trust and client certificate)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as answer:
            return int(answer.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def get_json(url: str, timeout: float = 5.0, context: ssl.SSLContext | None = None) -> Any:
    """The JSON document at ``url``; raises OSError (URLError included) or ValueError."""
    with urllib.request.urlopen(url, timeout=timeout, context=context) as answer:
        return json.loads(answer.read())


def node_problems(
    api_url: str,
    nodes: Sequence[clusterfile.NodeSpec],
    context: ssl.SSLContext | None = None,
    dra: bool = False,
) -> dict[str, str]:
    """What keeps each node from being ready, by node name (empty when every node is)."""
    try:
        listed = get_json(f"{api_url}/api/v1/nodes", context=context)
        pools = _pools(api_url, context) if dra else set()
    except (OSError, ValueError) as exc:
        return {n.name: f"cannot list nodes: {exc}" for n in nodes}
    by_name = {item["metadata"]["name"]: item for item in listed.get("items", [])}
    problems = {}
    for node in nodes:
        problem = _problem(by_name.get(node.name), node, pools if dra else None)
        if problem:
            problems[node.name] = problem
    return problems


def _pools(api_url: str, context: ssl.SSLContext | None) -> set[str]:
    """The pools (node names) the npu.vnpu.io driver has published slices for."""
    listed = get_json(f"{api_url}/apis/resource.k8s.io/v1/resourceslices", context=context)
    return {
        str(item["spec"]["pool"]["name"])
        for item in listed.get("items", [])
        if item["spec"].get("driver") == draclasses.DRIVER
    }


def _problem(
    obj: dict[str, Any] | None, node: clusterfile.NodeSpec, pools: set[str] | None = None
) -> str:
    if obj is None:
        return "not registered by its kubelet yet"
    conditions = obj.get("status", {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") != "True":
        return "not Ready"
    if pools is not None:  # DRA mode: no device plugin, the driver's slices instead
        return "" if node.name in pools else "its DRA driver has not published its slices yet"
    allocatable = obj.get("status", {}).get("allocatable") or {}
    if str(allocatable.get(node.resource, "0")) in ("0", ""):
        return f"no {node.resource} in allocatable yet (device plugin not registered)"
    annotations = obj.get("metadata", {}).get("annotations") or {}
    if f"{REGISTER_PREFIX}{node.common_word}" not in annotations:
        return "device plugin has not published its chips yet"
    return ""


def usable(
    api_url: str,
    nodes: Sequence[clusterfile.NodeSpec],
    context: ssl.SSLContext | None = None,
    dra: bool = False,
    named: str | None = None,
    routed: str | None = manifests.SCHEDULER_NAME,
) -> dict[str, str]:
    """Whether an NPU pod created in ``default`` now would be admitted and routed: a pod that
    names the scheduler ``named`` (None: none) comes back naming ``routed`` (None: admitted is
    enough, as under Volcano, whose pods name it themselves; under HAMi, HAMi's webhook routes).

    A server-side dry run (``dryRun=All``: admission runs, nothing is stored) of a pod asking
    one chip of the first node's model: it fails while the ``default`` ServiceAccount does not
    exist yet (kube-controller-manager makes it a moment after start), and comes back without
    vnpu's scheduler name while the mutating webhook does not answer (its failure policy lets
    the pod through unchanged). Empty when usable, else {what: why}.
    """
    if not nodes:
        return {}
    limits = {nodes[0].resource: "1"}
    model = catalog.BUILTIN.by_common_word(nodes[0].common_word)
    if dra and model is not None and model.templates:
        limits[model.memory_resource] = str(model.templates[0].memory_mib)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": PROBE_POD, "namespace": "default"},
        "spec": {
            **({"schedulerName": named} if named else {}),
            "containers": [
                {
                    "name": "main",
                    "image": "probe",
                    "resources": {"limits": limits},
                }
            ],
        },
    }
    request = urllib.request.Request(
        f"{api_url}/api/v1/namespaces/default/pods?dryRun=All",
        data=json.dumps(pod).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            admitted = json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        body = exc.read().decode("utf-8", errors="replace")
        try:
            message = json.loads(body).get("message", body)
        except ValueError:
            message = body
        return {"admission": f"an NPU pod in default is refused: {message[:200]}"}
    except (OSError, ValueError) as exc:
        return {"admission": f"cannot ask kube-apiserver: {exc}"}
    if dra:
        asked = admitted.get("spec", {}).get("containers", [{}])[0].get("resources", {})
        if model is not None and model.resource_name in asked.get("limits", {}):
            return {"webhook": "an NPU pod's vNPU request is not rewritten for DRA yet"}
        return {}
    if routed is not None and admitted.get("spec", {}).get("schedulerName") != routed:
        return {"webhook": f"an NPU pod is not routed to {routed} yet"}
    return {}
