"""Bad input gets a clear error naming the field and the value; the service keeps serving."""

from __future__ import annotations

from typing import Any

import httpx
import prometheus_client
import pytest

from vnpu_scheduler import app, cluster, server, settings

Json = dict[str, Any]


@pytest.mark.parametrize(
    ("verb", "body", "message"),
    [
        ("filter", b"{not json", "(body): not JSON"),
        ("filter", b"[1, 2]", "(body): must be a JSON object (ExtenderArgs)"),
        ("filter", b'{"NodeNames": ["n1"]}', "Pod: Field required"),
        ("filter", b'{"Pod": {"metadata": {"name": "p"}, "spec": {}}}', "NodeNames: one of Nodes or NodeNames must be given"),
        ("filter", b'{"Pod": {"spec": {}}, "NodeNames": []}', "Pod.metadata.name: the pod must have a name"),
        ("filter", b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": []}', "Pod.spec: the pod must have a spec"),
        ("filter", b'{"Pod": {"metadata": {"name": "p"}, "spec": {}}, "NodeNames": "n1"}', "NodeNames: Input should be a valid list"),
        ("filter", b'{"Pod": {"metadata": {"name": "p"}, "spec": {}}, "Nodes": {"items": [{}]}}', "Nodes.items.0.metadata.name: a node needs a name"),
        ("prioritize", b"", "(body): not JSON"),
        ("bind", b'{"PodName": "p", "PodNamespace": "default", "PodUID": "u"}', "Node: Field required"),
        ("bind", b'{"PodName": "", "PodNamespace": "default", "PodUID": "u", "Node": "n1"}', "PodName: String should have at least 1 character"),
        ("bind", b'{"PodName": 7, "PodNamespace": "default", "PodUID": "u", "Node": "n1"}', "PodName: Input should be a valid string"),
        ("bind", b'{"PodName": "p", "PodNamespace": "default", "Node": "n1"}', "PodUID: Field required"),
        ("bind", b'{"PodName": "p", "PodNamespace": "default", "PodUID": "", "Node": "n1"}', "PodUID: String should have at least 1 character"),
    ],
)  # fmt: skip
def test_malformed_bodies(scheduler: Any, verb: str, body: bytes, message: str) -> None:
    answer = scheduler.post_raw(verb, body)
    assert answer.status_code == 400
    told = answer.headers["vnpu-error"]
    assert told.startswith(message)
    if verb == "prioritize":  # a HostPriorityList has no room for a message: the header has it
        assert answer.json() == []
    else:
        assert answer.json()["Error"] == told
    assert scheduler.sample("vnpu_scheduler_requests_total", verb=verb, outcome="bad_request") == 1
    assert scheduler.http.get(f"{scheduler.url}/healthz").text == "ok"


def test_filter_reply_to_a_bad_body_has_the_full_shape(scheduler: Any) -> None:
    answer = scheduler.post_raw("filter", b"{")
    assert set(answer.json()) == {
        "Nodes",
        "NodeNames",
        "FailedNodes",
        "FailedAndUnresolvableNodes",
        "Error",
    }


def test_webhook_bodies(scheduler: Any) -> None:
    answer = scheduler.post_raw("mutate", b'{"request": {}}')
    assert answer.status_code == 400
    response = answer.json()["response"]
    assert response["allowed"] is False
    assert response["uid"] == ""
    assert response["status"]["code"] == 400
    assert response["status"]["message"].startswith("request.uid: Field required")
    answer = scheduler.post_raw(
        "validate", b'{"apiVersion": "admission.k8s.io/v1beta1", "request": {"uid": "u"}}'
    )
    response = answer.json()["response"]
    assert response["uid"] == "u"  # the uid is echoed when it could be read
    assert response["status"]["message"] == (
        "apiVersion: only admission.k8s.io/v1 is served (got 'admission.k8s.io/v1beta1')"
    )
    assert answer.headers["vnpu-error"] == response["status"]["message"]


def test_garbage_annotations_on_nodes_and_pods(kube: Any, make: Any, scheduler: Any) -> None:
    """Garbage is refused node by node; the rest of the cluster keeps working; nothing is written."""
    kube.add_node(make.node("good"))
    bad_register = make.node("bad-register")
    bad_register["metadata"]["annotations"]["hami.io/node-register-Ascend310P"] = (
        '[{"id":"x","count":"seven","type":"Ascend310P","health":true}]'
    )
    kube.add_node(bad_register)
    bad_handshake = make.node("bad-handshake")
    bad_handshake["metadata"]["annotations"]["hami.io/node-handshake-Ascend310P"] = "Reported_soon"
    kube.add_node(bad_handshake)
    kube.add_node(make.node("bad-soft", extra={"hami-vnpu-core": "maybe"}))
    kube.add_node(make.node("bad-usage"))
    kube.add_pod(make.holder("junk", "bad-usage", "a,b,c:;"))
    pod = kube.add_pod(
        make.pod("job", memory=4000, annotations={"hami.io/gpu-scheduler-policy": "fastest"})
    )
    scheduler.wait_for(lambda: len(scheduler.service.cache.names()) == 5)
    scheduler.wait_for(lambda: scheduler.usage("bad-usage").problems != ())
    names = ["good", "bad-register", "bad-handshake", "bad-soft", "bad-usage"]
    # A pod annotation naming an unknown policy: refused everywhere, with the key and the value.
    result = scheduler.post("filter", {"Pod": pod, "NodeNames": names}).json()
    assert set(result["FailedAndUnresolvableNodes"].values()) == {
        "container '(pod)': hami.io/gpu-scheduler-policy=fastest: unknown policy 'fastest'; "
        "use one of binpack, spread, best-fit"
    }
    pod = kube.add_pod(make.npu_pod("job2", memory=4000))
    result = scheduler.post("filter", {"Pod": pod, "NodeNames": names}).json()
    final = result["FailedAndUnresolvableNodes"]
    assert result["NodeNames"] == [
        "good",
        "bad-soft",
    ]  # a bad soft-mode flag falls back to the default
    assert final["bad-register"] == (
        "NPUs unavailable: annotation hami.io/node-register-Ascend310P: must be an integer, "
        "got 'seven' (at '[0].count')"
    )
    assert final["bad-handshake"].startswith(
        "NPUs unavailable: annotation hami.io/node-handshake-Ascend310P: time must be"
    )
    assert final["bad-usage"].startswith(
        f"chip usage unknown: pod {kube.namespace}/junk has an unreadable "
        "hami.io/Ascend310P-devices-allocated"
    )
    # Binding onto the node whose usage is unknown is refused and leaves no lock.
    answer = scheduler.post(
        "bind",
        {
            "PodName": "job2",
            "PodNamespace": kube.namespace,
            "PodUID": pod["metadata"]["uid"],
            "Node": "bad-usage",
        },
    )
    assert answer.json()["Error"].startswith(f"chip usage unknown: pod {kube.namespace}/junk")
    assert "hami.io/mutex.lock" not in kube.node("bad-usage")["metadata"]["annotations"]
    assert not kube.pod("job2")["spec"].get("nodeName")
    # ... and the service still binds elsewhere.
    answer = scheduler.post(
        "bind",
        {
            "PodName": "job2",
            "PodNamespace": kube.namespace,
            "PodUID": pod["metadata"]["uid"],
            "Node": "good",
        },
    )
    assert answer.json() == {"Error": ""}


def test_not_ready_until_the_cluster_is_listed(tmp_path: Any, write_kubeconfig: Any) -> None:
    """An API server that cannot be reached: probes say so, filter answers Error, nothing hangs."""
    closed = write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9")
    config = settings.Settings(kubeconfig=closed, host="127.0.0.1", port=0, api_timeout=1)
    api = cluster.KubeCluster.connect(config.kubeconfig, config.api_timeout)
    registry = prometheus_client.CollectorRegistry()
    application = app.build(config, api, registry)
    try:
        with server.running(application, config) as urls, httpx.Client() as client:
            assert client.get(f"{urls[0]}/healthz").text == "ok"
            ready = client.get(f"{urls[0]}/readyz")
            assert ready.status_code == 503
            assert ready.json()["cache"]["nodes_synced"] is False
            pod = {"metadata": {"name": "p"}, "spec": {"containers": []}}
            answer = client.post(f"{urls[0]}/filter", json={"Pod": pod, "NodeNames": ["n1"]})
            assert answer.json()["Error"] == "vnpu-scheduler has not listed the cluster yet; retry"
    finally:
        api.close()
    restarts = registry.get_sample_value(
        "vnpu_scheduler_watch_restarts_total", {"resource": "nodes", "cause": "error"}
    )
    assert restarts is not None
    assert restarts >= 1
