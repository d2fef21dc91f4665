"""Binds kube-scheduler could never have asked for are refused, and nothing already placed moves.

Each attack is a real ``POST /bind`` to a running scheduler: a pod with a nodeSelector, node
affinity or toleration that the node does not satisfy, a pod for another scheduler or asking
for no NPU, a pod in kube-system, a body without (or with a wrong) PodUID, a pod already
bound by someone else. Every refusal names the reason in ``Error``; afterwards the node has
no lock, the pod is unbound, and the pod that already held chips on the node still holds
them, as the cache and the API both show.
"""

from __future__ import annotations

from typing import Any

import pytest

LOCK = "hami.io/mutex.lock"
HELD = "n1-Ascend310P-0,Ascend310P,21527,0:;"
Json = dict[str, Any]


@pytest.fixture
def placed(kube: Any, make: Any, scheduler: Any) -> Any:
    """Two nodes; n1 labelled zone=a and tainted, with a pod already holding its chip 0."""
    n1 = make.node("n1", chips=2)
    n1["metadata"]["labels"] = {"zone": "a", "kubernetes.io/hostname": "n1"}
    n1["spec"] = {"taints": [{"key": "npu", "value": "only", "effect": "NoSchedule"}]}
    kube.add_node(n1)
    n2 = make.node("n2", chips=2)
    n2["metadata"]["labels"] = {"zone": "b", "kubernetes.io/hostname": "n2"}
    kube.add_node(n2)
    kube.add_pod(make.holder("holder", "n1", HELD))
    scheduler.wait_for(lambda: _chip0_held(scheduler))
    return scheduler


def _chip0_held(scheduler: Any) -> bool:
    state = scheduler.service.cache.state("n1")
    return state is not None and "n1-Ascend310P-0" in state.usage.usage


def _bind(scheduler: Any, pod: Json, node: str, uid: str | None = None) -> Any:
    meta = pod["metadata"]
    body = {
        "PodName": meta["name"],
        "PodNamespace": meta["namespace"],
        "PodUID": meta["uid"] if uid is None else uid,
        "Node": node,
    }
    return scheduler.post("bind", body)


def _nothing_moved(kube: Any, scheduler: Any, name: str, namespace: str | None = None) -> None:
    pod = kube.pod(name, namespace)
    assert not pod["spec"].get("nodeName")
    assert not any(k.startswith("hami.io/") for k in pod["metadata"].get("annotations") or {})
    for node in ("n1", "n2"):
        assert LOCK not in (kube.node(node)["metadata"].get("annotations") or {})
    holder = kube.pod("holder")
    assert holder["spec"]["nodeName"] == "n1"
    assert holder["metadata"]["annotations"]["hami.io/Ascend310P-devices-allocated"] == HELD
    assert _chip0_held(scheduler)


def _tolerating(pod: Json) -> Json:
    pod["spec"]["tolerations"] = [{"key": "npu", "operator": "Equal", "value": "only"}]
    return pod


@pytest.mark.parametrize(
    ("change", "node", "error"),
    [
        (
            lambda p: p["spec"].update(nodeSelector={"zone": "b"}),
            "n1",
            "node n1 does not match the pod's nodeSelector zone=b (it has zone=a)",
        ),
        (
            lambda p: p["spec"].update(nodeSelector={"pool": "gpu"}),
            "n2",
            "node n2 does not match the pod's nodeSelector pool=gpu (no such label)",
        ),
        (
            lambda p: p["spec"].update(
                affinity={
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "zone", "operator": "In", "values": ["a"]}
                                    ]
                                },
                                {
                                    "matchFields": [
                                        {
                                            "key": "metadata.name",
                                            "operator": "In",
                                            "values": ["n9"],
                                        }
                                    ]
                                },
                            ]
                        }
                    }
                }
            ),
            "n2",
            "node n2 matches none of the pod's required node affinity terms",
        ),
        (
            lambda p: None,
            "n1",
            "node n1 has the taint npu=only:NoSchedule, which the pod does not tolerate",
        ),
        (
            lambda p: p["spec"].update(
                tolerations=[{"key": "npu", "operator": "Equal", "value": "other"}]
            ),
            "n1",
            "node n1 has the taint npu=only:NoSchedule, which the pod does not tolerate",
        ),
    ],
)
def test_a_node_the_pod_may_not_use_is_refused(
    kube: Any, make: Any, placed: Any, change: Any, node: str, error: str
) -> None:
    pod = make.npu_pod("job", memory=4000)
    change(pod)
    created = kube.add_pod(pod)
    answer = _bind(placed, created, node)
    assert answer.status_code == 200
    assert answer.json() == {"Error": error}
    _nothing_moved(kube, placed, "job")
    assert placed.sample("vnpu_scheduler_binds_total", result="refused") == 1


def test_the_node_the_pod_allows_takes_it(kube: Any, make: Any, placed: Any) -> None:
    """The same rules let the pod through where its selector, affinity and tolerations fit."""
    pod = _tolerating(make.npu_pod("job", memory=4000))
    pod["spec"]["nodeSelector"] = {"zone": "a"}
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}
                ]
            }
        }
    }
    created = kube.add_pod(pod)
    assert _bind(placed, created, "n1").json() == {"Error": ""}
    notes = kube.pod("job")["metadata"]["annotations"]
    # the chip the holder has is not handed out again
    assert notes["hami.io/Ascend310P-devices-allocated"] == "n1-Ascend310P-1,Ascend310P,6144,0:;"
    assert kube.pod("holder")["metadata"]["annotations"][
        "hami.io/Ascend310P-devices-allocated"
    ] == (HELD)


def test_a_cordoned_node_is_refused(kube: Any, make: Any, placed: Any) -> None:
    kube.core.patch_node(
        "n2", {"spec": {"unschedulable": True}}, _content_type="application/merge-patch+json"
    )
    placed.wait_for(
        lambda: (
            (placed.service.cache.node_object("n2") or {}).get("spec", {}).get("unschedulable")
            is True
        )
    )
    created = kube.add_pod(make.npu_pod("job", memory=4000))
    assert _bind(placed, created, "n2").json() == {
        "Error": "node n2 has the taint node.kubernetes.io/unschedulable:NoSchedule, "
        "which the pod does not tolerate"
    }
    _nothing_moved(kube, placed, "job")


def test_pods_not_for_this_scheduler_are_refused(kube: Any, make: Any, placed: Any) -> None:
    space = kube.namespace
    web = kube.add_pod(make.pod("web", count=None))  # default-scheduler, no NPU
    assert _bind(placed, web, "n2").json() == {
        "Error": f"pod {space}/web is for scheduler 'default-scheduler', not 'vnpu-scheduler': "
        "vnpu-scheduler binds only its own pods"
    }
    _nothing_moved(kube, placed, "web")
    kube.use_namespace("kube-system")
    system = kube.add_pod(make.pod("dns", count=None, namespace="kube-system"))
    assert (
        _bind(placed, system, "n2")
        .json()["Error"]
        .startswith("pod kube-system/dns is for scheduler 'default-scheduler'")
    )
    _nothing_moved(kube, placed, "dns", "kube-system")
    volcano = kube.add_pod(make.pod("vc", memory=4000, scheduler_name="volcano"))
    assert (
        _bind(placed, volcano, "n2")
        .json()["Error"]
        .startswith(f"pod {space}/vc is for scheduler 'volcano', not 'vnpu-scheduler'")
    )
    _nothing_moved(kube, placed, "vc")
    plain = kube.add_pod(make.npu_pod("plain", count=None))
    assert _bind(placed, plain, "n2").json() == {
        "Error": f"pod {space}/plain asks for no NPU resource: vnpu-scheduler binds only pods "
        "that do"
    }
    _nothing_moved(kube, placed, "plain")


def test_the_pod_uid_must_be_given_and_match(kube: Any, make: Any, placed: Any) -> None:
    created = kube.add_pod(_tolerating(make.npu_pod("job", memory=4000)))
    body = {"PodName": "job", "PodNamespace": kube.namespace, "Node": "n2"}
    answer = placed.post("bind", body)
    assert answer.status_code == 400
    assert answer.json()["Error"].startswith("PodUID: Field required")
    wrong = _bind(placed, created, "n2", uid="0000-not-the-pod")
    assert wrong.json()["Error"] == (
        f"pod {kube.namespace}/job has UID {created['metadata']['uid']}, "
        "the bind is for 0000-not-the-pod"
    )
    _nothing_moved(kube, placed, "job")


def test_a_pod_bound_by_someone_else_is_not_taken_again(kube: Any, make: Any, placed: Any) -> None:
    created = kube.add_pod(make.npu_pod("job", memory=4000))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "job"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n2"},
    }
    kube.core.create_namespaced_binding(kube.namespace, binding, _preload_content=False)
    placed.wait_for(lambda: kube.pod("job")["spec"].get("nodeName") == "n2")
    answer = _bind(placed, created, "n2")
    assert answer.json() == {
        "Error": f"pod {kube.namespace}/job is already bound to node n2, not by vnpu-scheduler "
        "(no hami.io/vgpu-node=n2)"
    }
    assert _bind(placed, created, "n1").json() == {
        "Error": f"pod {kube.namespace}/job is already bound to node n2"
    }
    assert not any(
        k.startswith("hami.io/") for k in kube.pod("job")["metadata"].get("annotations") or {}
    )
    for node in ("n1", "n2"):
        assert LOCK not in (kube.node(node)["metadata"].get("annotations") or {})
    assert (
        kube.pod("holder")["metadata"]["annotations"]["hami.io/Ascend310P-devices-allocated"]
        == HELD
    )
