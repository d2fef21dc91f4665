"""Paths, printing and the store's revision bookkeeping (pure code, table-driven)."""

from __future__ import annotations

from typing import Any

import pytest

from vnpu_sandbox.apiserver import errors, paths, resources, store, tables


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (125, "2m5s"),
        (600, "10m"),
        (179 * 60, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 600, "3h10m"),
        (30 * 3600, "30h"),
        (50 * 3600, "2d2h"),
        (9 * 86400, "9d"),
        (800 * 86400, "2y70d"),
        (3000 * 86400, "8y"),
    ],
)
def test_ages_print_like_kubectl(seconds: float, text: str) -> None:
    assert tables.human_duration(seconds) == text


def test_pod_and_node_rows() -> None:
    pod = {
        "metadata": {
            "name": "p",
            "creationTimestamp": "2024-01-01T00:00:00Z",
            "deletionTimestamp": "2024-01-01T00:01:00Z",
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "a"}, {"name": "b"}]},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.1",
            "containerStatuses": [
                {"ready": True, "restartCount": 2},
                {"ready": False, "restartCount": 1},
            ],
        },
    }
    now = 1704067200 + 300  # five minutes after creation
    table = tables.to_table(resources.PODS, [pod], now=now)
    assert table["rows"][0]["cells"] == [
        "p",
        "1/2",
        "Terminating",
        3,
        "5m",
        "10.0.0.1",
        "n1",
        "<none>",
        "<none>",
    ]
    node = {
        "metadata": {
            "name": "n1",
            "creationTimestamp": "2024-01-01T00:00:00Z",
            "labels": {"node-role.kubernetes.io/npu": ""},
        },
        "spec": {"unschedulable": True},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"kubeletVersion": "v1.30.0"},
        },
    }
    row = tables.to_table(resources.NODES, [node], now=now, include_object="None")["rows"][0]
    assert row["cells"][:5] == ["n1", "Ready,SchedulingDisabled", "npu", "5m", "v1.30.0"]
    assert "object" not in row


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/api/v1/pods", (resources.PODS, None, None, "")),
        ("/api/v1/namespaces/ns/pods/p/status", (resources.PODS, "ns", "p", "status")),
        ("/api/v1/namespaces/ns/pods/p/binding", (resources.PODS, "ns", "p", "binding")),
        ("/api/v1/namespaces/ns", (resources.NAMESPACES, None, "ns", "")),
        ("/api/v1/namespaces/ns/status", (resources.NAMESPACES, None, "ns", "status")),
        ("/api/v1/nodes/n/status", (resources.NODES, None, "n", "status")),
        (
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n",
            (resources.LEASES, "kube-node-lease", "n", ""),
        ),
        (
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/x",
            (resources.MUTATING_WEBHOOKS, None, "x", ""),
        ),
        ("/api/v1/watch/namespaces/ns/pods/p", (resources.PODS, "ns", "p", "")),
    ],
)
def test_paths_resolve(path: str, expected: tuple[Any, ...]) -> None:
    target = paths.resolve(path)
    assert target is not None
    assert (target.resource, target.namespace, target.name, target.subresource) == expected


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/pods/p",
        "/api/v1/namespaces/ns/nodes",
        "/api/v1/nodes/n/binding",
        "/api/v2/pods",
        "/apis/apps/v1/statefulsets",
        "/apis/apps/v1/namespaces/ns/deployments/d/rollback",
        "/api/v1/namespaces/ns/pods/p/status/extra",
        "/api/v1//pods",
    ],
)
def test_paths_that_do_not_exist(path: str) -> None:
    assert paths.resolve(path) is None


def _cm(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "d"}}


def test_store_history_window_and_snapshots() -> None:
    objects = store.Store(window=3)
    first = objects.add(resources.CONFIGMAPS, _cm("a"))
    assert first["metadata"]["resourceVersion"] == "1"
    objects.add(resources.CONFIGMAPS, _cm("b"))
    changed = dict(_cm("a"), data={"x": "1"})
    objects.modify(resources.CONFIGMAPS, first, changed)
    assert [o["metadata"]["name"] for o in objects.snapshot(resources.CONFIGMAPS.key, None, 1)] == [
        "a"
    ]
    assert objects.snapshot(resources.CONFIGMAPS.key, None, 2)[0] is first
    objects.remove(resources.CONFIGMAPS, changed)
    assert objects.revision == 4
    assert objects.floor == 1
    with pytest.raises(errors.Expired) as caught:
        objects.events_since(0)
    assert caught.value.message == "too old resource version: 0 (1)"
    assert [e.type for e in objects.events_since(1)] == ["ADDED", "MODIFIED", "DELETED"]
    with pytest.raises(errors.AlreadyExists):
        objects.add(resources.CONFIGMAPS, _cm("b"))
    with pytest.raises(ValueError, match="at least 1"):
        store.Store(window=0)
